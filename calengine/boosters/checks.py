"""Structure checks of boosting libraries' model files, in Python, before any byte reaches native code.

XGBoost and LightGBM trust their model files: a split feature index past the row's end, a child index
past the node array or a cycle of children makes their predictors read out of bounds (SIGSEGV), loop
forever, or return garbage that calengine would publish.  A model directory's hashes do not help, since
whoever edits a file can recompute them.  These functions parse the file the way the library would and
check what its predictor relies on; they import neither library, raise one
:class:`~calengine.errors.ModelFormatError` line naming the first problem, and return a
:class:`BoosterSummary` (feature and class counts as the file declares them) when the file is sound.

* :func:`validate_xgboost` -- XGBoost's JSON and UBJSON model formats (``Booster.save_raw``): every
  tree's arrays of one length, children in range forming a tree rooted at node 0 (no cycle, no node
  reached twice, every live node reached), split feature indices in ``[0, num_feature)``, finite split
  conditions and leaf values, and tree count, ``tree_info`` and ``num_class`` consistent.
* :func:`validate_lightgbm` -- LightGBM's text model format (``Booster.model_to_string``): every
  ``Tree=`` block's arrays of the lengths ``num_leaves`` implies, children (``~leaf`` when negative) in
  range forming a tree, split features in ``[0, max_feature_idx]``, finite thresholds and leaf values,
  tree count a multiple of the trees per iteration, and the ``end of trees`` line (truncation).

Both take the file's bytes or a path (what a ``--prefit PATH`` option hands them), and optionally the
feature and class counts the caller will use: a model fitted on another feature count is refused here,
not by the library mid-scoring.  Linear trees and multi-output leaves are refused: calengine's boosters
never write them.  Categorical splits are refused unless the caller names which features are
categorical and how many categories each has (``categories=[...]`` of either function, what MCGrad's
rounds store): then every categorical split's category list must lie inside the tree's category table,
be non-empty, sit on an internal node whose split type says so and split a categorical feature, and hold
only categories below that feature's count (XGBoost sizes a bitset by the largest category of a split,
so an unbounded one is a memory bomb).
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelFormatError

#: the largest booster file read (bytes): larger is refused before parsing
MAX_BOOSTER_BYTES = 2 * 1024**3
#: containers nested deeper than this in a UBJSON/JSON model are refused (XGBoost nests 6 deep)
MAX_DEPTH = 32


@dataclass(frozen=True)
class BoosterSummary:
    """What a sound booster file declares: ``n_features`` columns, ``n_classes`` (2 for one output),
    ``n_trees`` trees, and the ``objective`` it was trained with ('' when the file names none), read
    from the file so that a caller can name it before the library loads the booster."""

    n_features: int
    n_classes: int
    n_trees: int
    objective: str = ""


def _bad(library: str, what: str) -> ModelFormatError:
    return ModelFormatError(f"the {library} booster file {what}; it is damaged or was not written by {library}: fit the model again")


def _read(source: bytes | bytearray | str | os.PathLike, library: str) -> bytes:
    if isinstance(source, (bytes, bytearray, memoryview)):
        blob = bytes(source)
    else:
        path = Path(source)
        try:
            if not path.is_file():
                raise ModelFormatError(f"booster file '{path}' is not a regular file; give the path of a saved {library} model")
            if path.stat().st_size > MAX_BOOSTER_BYTES:
                raise _bad(library, f"'{path}' is larger than {MAX_BOOSTER_BYTES} bytes")
            blob = path.read_bytes()
        except OSError as exc:
            raise ModelFormatError(f"cannot read booster file '{path}' ({exc.strerror or exc}); check the path") from None
    if len(blob) > MAX_BOOSTER_BYTES:
        raise _bad(library, f"is larger than {MAX_BOOSTER_BYTES} bytes")
    return blob


def _check_expected(library: str, summary: BoosterSummary, n_features: int | None, n_classes: int | None) -> BoosterSummary:
    if n_features is not None and summary.n_features != int(n_features):
        raise ModelFormatError(
            f"the {library} booster was fitted on {summary.n_features} features and this model gives it"
            f" {int(n_features)}; use the booster with the features it was fitted on, or fit it again"
        )
    if n_classes is not None and summary.n_classes != max(2, int(n_classes)):
        raise ModelFormatError(
            f"the {library} booster gives {summary.n_classes} classes and this model has {int(n_classes)};"
            " it is damaged or belongs to another model: fit the model again"
        )
    return summary


# ---------------------------------------------------------------------------------------------- UBJSON

_UBJ_SCALARS = {b"i": ">i1", b"U": ">u1", b"I": ">i2", b"l": ">i4", b"L": ">i8", b"d": ">f4", b"D": ">f8"}
# the same scalars keyed by the marker's byte value, as struct readers (one call per scalar, no numpy)
_UBJ_STRUCTS = {m[0]: struct.Struct(f) for m, f in
                {b"i": ">b", b"U": ">B", b"I": ">h", b"l": ">i", b"L": ">q", b"d": ">f", b"D": ">d"}.items()}
_UBJ_INTS = {k: v for k, v in _UBJ_STRUCTS.items() if k not in b"dD"}
_NOOP, _STR, _HSTR, _CHAR, _TRUE, _FALSE, _NULL = b"NSHCTFZ"
_ARR, _OBJ, _ARR_END, _OBJ_END, _TYPE, _COUNT = b"[{]}$#"


class _UBJSONError(ValueError):
    pass


class _UBJSON:
    """A UBJSON (draft 12) reader for XGBoost's model files: typed arrays become numpy arrays, every
    count is checked against the bytes left, and nesting is bounded.  Markers are read as byte values
    and scalars with :mod:`struct` (a model of 500 trees has ~10^5 of them: numpy per scalar cost
    seconds)."""

    def __init__(self, blob: bytes):
        self.blob, self.pos, self.end = blob, 0, len(blob)

    def _short(self):
        return _UBJSONError(f"ends early (byte {self.pos} of {self.end})")

    def marker(self) -> int:
        blob, pos, end = self.blob, self.pos, self.end
        while True:
            if pos >= end:
                self.pos = pos
                raise self._short()
            m = blob[pos]
            pos += 1
            if m != _NOOP:
                self.pos = pos
                return m

    def scalar(self, reader: struct.Struct):
        pos = self.pos
        if pos + reader.size > self.end:
            raise self._short()
        self.pos = pos + reader.size
        return reader.unpack_from(self.blob, pos)[0]

    def integer(self, m: int | None = None) -> int:
        m = self.marker() if m is None else m
        reader = _UBJ_INTS.get(m)
        if reader is None:
            raise _UBJSONError(f"has a length of type {bytes([m])!r} at byte {self.pos}")
        return self.scalar(reader)

    def string(self) -> str:
        n = self.integer()
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise self._short()
        self.pos = pos + n
        try:
            return self.blob[pos:pos + n].decode("utf-8")
        except UnicodeDecodeError:
            raise _UBJSONError(f"has a string that is not UTF-8 at byte {pos}") from None

    def value(self, m: int | None = None, depth: int = 0) -> Any:
        m = self.marker() if m is None else m
        reader = _UBJ_STRUCTS.get(m)
        if reader is not None:
            return self.scalar(reader)
        if m == _STR or m == _HSTR:
            return self.string()
        if m == _CHAR:
            return chr(self.scalar(_UBJ_STRUCTS[b"U"[0]]))
        if m == _TRUE or m == _FALSE:
            return m == _TRUE
        if m == _NULL:
            return None
        if m == _ARR or m == _OBJ:
            if depth >= MAX_DEPTH:
                raise _UBJSONError(f"nests deeper than {MAX_DEPTH} levels")
            return self.container(m == _OBJ, depth + 1)
        raise _UBJSONError(f"has an unknown marker {bytes([m])!r} at byte {self.pos - 1}")

    def container(self, is_object: bool, depth: int) -> Any:
        typ = count = None
        m = self.marker()
        if m == _TYPE:
            if self.pos >= self.end:
                raise self._short()
            typ = self.blob[self.pos]
            self.pos += 1
            m = self.marker()
            if m != _COUNT:
                raise _UBJSONError("has a typed container without a count")
        if m == _COUNT:
            count = self.integer()
            if count < 0 or count > self.end - self.pos:
                raise _UBJSONError(f"declares {count} elements with {self.end - self.pos} bytes left")
        if not is_object and typ in _UBJ_STRUCTS:
            dt = np.dtype(_UBJ_SCALARS[bytes([typ])])
            pos, size = self.pos, count * dt.itemsize
            if pos + size > self.end:
                raise self._short()
            self.pos = pos + size
            return np.frombuffer(self.blob, dtype=dt, count=count, offset=pos).astype(dt.newbyteorder("="))
        if count is not None:
            if is_object:
                return {self.string(): self.value(typ, depth) for _ in range(count)}
            return [self.value(typ, depth) for _ in range(count)]
        out: Any = {} if is_object else []
        close = _OBJ_END if is_object else _ARR_END
        while True:
            if m == close:
                return out
            if is_object:
                self.pos -= 1  # the key's length marker was read as m
                key = self.string()
                out[key] = self.value(None, depth)
            else:
                out.append(self.value(m, depth))
            m = self.marker()


def parse_ubjson(blob: bytes) -> Any:
    """The value a UBJSON document holds (typed numeric arrays as numpy arrays); :class:`ValueError`
    naming the byte where it stops making sense."""
    reader = _UBJSON(blob)
    value = reader.value()
    if reader.pos != len(blob):
        raise _UBJSONError(f"has {len(blob) - reader.pos} bytes after its end")
    return value


# ---------------------------------------------------------------------------------------------- XGBoost


def _xgb_document(blob: bytes) -> dict:
    import json

    head = blob[:2]
    try:
        if head[:1] == b"{" and head[1:2] in (b'"', b" ", b"\n", b"\r", b"\t", b"}"):
            doc = json.loads(blob.decode("utf-8"))
        elif head[:1] == b"{":
            doc = parse_ubjson(blob)
        else:
            raise _bad("XGBoost", "is neither JSON nor UBJSON (XGBoost's old binary format is not accepted)")
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise _bad("XGBoost", f"cannot be parsed ({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})") from None
    if not isinstance(doc, dict):
        raise _bad("XGBoost", "does not hold a model object")
    return doc


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            raise _bad("XGBoost", f"has no '{'/'.join(path)}'")
        d = d[key]
    return d


def _count(text: Any, what: str, low: int = 0, library: str = "XGBoost") -> int:
    try:
        v = int(str(text).strip())
    except ValueError:
        raise _bad(library, f"has a non-integer {what} ({str(text)[:40]!r})") from None
    if v < low or v > 2**31:
        raise _bad(library, f"has {what} = {v}, out of range")
    return v


def _array(tree: dict, key: str, n: int, where: str, kind: str) -> np.ndarray:
    raw = tree.get(key)
    try:
        arr = np.asarray(raw if raw is not None else [])
    except (ValueError, TypeError):
        arr = np.asarray([None])
    if arr.ndim != 1 or arr.shape[0] != n or (arr.size and arr.dtype.kind not in ("biu" if kind == "i" else "biuf")):
        raise _bad("XGBoost", f"has {where} whose '{key}' is not {n} numbers")
    return arr.astype(np.int64 if kind == "i" else np.float64)


def _check_forest(left: np.ndarray, right: np.ndarray, sizes: list[int], live: list[int] | None,
                  library: str) -> tuple[np.ndarray, np.ndarray]:
    """Walk every tree at once from its node 0 over ``left``/``right`` (all trees' child arrays one
    after another, *local* node indices, ``-1``: none): every node is reached at most once (no cycle,
    no shared node) and ``live[t]`` nodes (default: all) of tree ``t`` are reached.  One numpy pass per
    tree level, whatever the number of trees.  Returns the mask of reached internal nodes and each
    node's tree index (to name the tree of a later problem)."""
    sizes_a = np.asarray(sizes, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes_a)[:-1]])
    tree_of = np.repeat(np.arange(sizes_a.size), sizes_a)

    def fail(nodes: np.ndarray, what: str):
        t = int(tree_of[nodes[0]])
        raise _bad(library, f"has tree {t} {what.format(last=int(sizes_a[t]) - 1)}")

    internal = left != -1
    one = np.flatnonzero((right != -1) != internal)
    if one.size:
        fail(one, "with a node that has one child")
    n_of = sizes_a[tree_of]
    out = np.flatnonzero(internal & ((left < 0) | (left >= n_of) | (right < 0) | (right >= n_of)))
    if out.size:
        fail(out, "with a child index out of range 0..{last}")
    shift = offsets[tree_of]
    gl, gr = np.where(internal, left + shift, -1), np.where(internal, right + shift, -1)
    seen = np.zeros(left.shape[0], dtype=bool)
    seen[offsets] = True
    frontier = offsets
    twice = "that is not a tree (a node reached twice: a cycle or a shared node)"
    while frontier.size:
        frontier = frontier[internal[frontier]]
        nxt = np.concatenate([gl[frontier], gr[frontier]])
        again = nxt[seen[nxt]]
        if again.size:
            fail(again, twice)
        ordered = np.sort(nxt)
        dup = ordered[1:][ordered[1:] == ordered[:-1]]
        if dup.size:
            fail(dup, twice)
        seen[nxt] = True
        frontier = nxt
    reached = np.add.reduceat(seen.astype(np.int64), offsets)
    short = np.flatnonzero(reached != (sizes_a if live is None else np.asarray(live, dtype=np.int64)))
    if short.size:
        fail(offsets[short], "with nodes no path reaches")
    return internal & seen, tree_of


def validate_xgboost(source: bytes | str | os.PathLike, n_features: int | None = None,
                     n_classes: int | None = None, categories: list[int | None] | None = None) -> BoosterSummary:
    """Check an XGBoost JSON or UBJSON model (bytes or a path) before XGBoost reads it; see the module
    docstring.  ``n_features``/``n_classes``: the counts the caller will use (``None``: not checked).
    ``categories``: per feature, its number of categories (``None``: numeric); without it any
    categorical split is refused."""
    doc = _xgb_document(_read(source, "XGBoost"))
    learner = _get(doc, "learner")
    mparam = _get(learner, "learner_model_param")
    nf = _count(mparam.get("num_feature"), "num_feature", 1)
    num_class = _count(mparam.get("num_class", "0"), "num_class")
    if _count(mparam.get("num_target", "1"), "num_target", 1) != 1:
        raise _bad("XGBoost", "has several targets (calengine calibrates one)")
    try:
        base = [float(x) for x in str(mparam.get("base_score", "0.5")).strip("[]").split(",") if x.strip()]
    except ValueError:
        base = [math.nan]
    if not base or not all(math.isfinite(b) for b in base):
        raise _bad("XGBoost", "has a non-finite base_score")
    booster = _get(learner, "gradient_booster")
    name = booster.get("name") if isinstance(booster, dict) else None
    if name == "dart":
        model = _get(booster, "gbtree", "model")
    elif name == "gbtree":
        model = _get(booster, "model")
    else:
        raise _bad("XGBoost", f"has booster type {str(name)[:20]!r} (calengine reads tree boosters, gbtree or dart)")
    trees = _get(model, "trees")
    if not isinstance(trees, list) or not trees:
        raise _bad("XGBoost", "holds no trees")
    if _count(_get(model, "gbtree_model_param", "num_trees"), "num_trees", 1) != len(trees):
        raise _bad("XGBoost", f"declares a tree count other than the {len(trees)} trees it holds")
    outputs = max(1, num_class)
    info = np.asarray(_get(model, "tree_info"))
    if info.shape != (len(trees),) or info.dtype.kind not in "iu" or np.any(info < 0) or np.any(info >= outputs):
        raise _bad("XGBoost", f"has a tree_info that does not give each of its {len(trees)} trees a class in 0..{outputs - 1}")
    indptr = np.asarray(model.get("iteration_indptr", [0, len(trees)]))
    if indptr.ndim != 1 or indptr.size < 2 or indptr.dtype.kind not in "iu" or indptr[0] != 0 or indptr[-1] != len(trees) \
            or np.any(np.diff(indptr) < 0):
        raise _bad("XGBoost", "has an iteration_indptr inconsistent with its trees")
    if name == "dart":
        drop = np.asarray(_get(booster, "weight_drop"), dtype=np.float64)
        if drop.shape != (len(trees),) or not np.all(np.isfinite(drop)):
            raise _bad("XGBoost", "has dart weights inconsistent with its trees")
    if categories is not None and len(categories) != nf:
        raise _bad("XGBoost", f"has {nf} features, not the {len(categories)} this model declares")
    arrays = [_xgb_tree_arrays(tree, t, categories) for t, tree in enumerate(trees)]
    left, right, feature, cond = (np.concatenate([a[i] for a in arrays]) for i in range(4))
    internal, tree_of = _check_forest(left, right, [a[4] for a in arrays], [a[5] for a in arrays], "XGBoost")
    wrong = np.flatnonzero(internal & ((feature < 0) | (feature >= nf)))
    if wrong.size:
        raise _bad("XGBoost", f"has tree {int(tree_of[wrong[0]])} splitting on a feature index outside 0..{nf - 1}")
    wrong = np.flatnonzero(~np.isfinite(cond))
    if wrong.size:
        raise _bad("XGBoost", f"has tree {int(tree_of[wrong[0]])} with a non-finite split condition or leaf value")
    objective = learner.get("objective")
    objective = objective.get("name") if isinstance(objective, dict) else None
    objective = objective if isinstance(objective, str) else ""
    return _check_expected("XGBoost", BoosterSummary(nf, max(2, num_class), len(trees), objective[:100]),
                           n_features, n_classes)


def _xgb_tree_arrays(tree: Any, t: int, categories: list[int | None] | None = None) -> tuple:
    """Tree ``t``'s ``(left, right, split feature, split condition, num_nodes, live nodes)``, each
    array of the declared node count; the checks across trees follow in :func:`validate_xgboost`."""
    where = f"tree {t}"
    if not isinstance(tree, dict):
        raise _bad("XGBoost", f"has {where} that is not an object")
    tparam = tree.get("tree_param") if isinstance(tree.get("tree_param"), dict) else {}
    n = _count(tparam.get("num_nodes"), f"{where} num_nodes", 1)
    deleted = _count(tparam.get("num_deleted", "0"), f"{where} num_deleted")
    if deleted >= n:
        raise _bad("XGBoost", f"has {where} with more deleted nodes than nodes")
    if _count(tparam.get("size_leaf_vector", "1"), f"{where} size_leaf_vector") > 1:
        raise _bad("XGBoost", f"has {where} with vector leaves (multi-output trees are not supported)")
    left = _array(tree, "left_children", n, where, "i")
    right = _array(tree, "right_children", n, where, "i")
    feature = _array(tree, "split_indices", n, where, "i")
    cond = _array(tree, "split_conditions", n, where, "f")
    for key in ("default_left", "base_weights"):
        _array(tree, key, n, where, "f")
    split_type = _array(tree, "split_type", n, where, "i") if "split_type" in tree else np.zeros(n, dtype=np.int64)
    _xgb_categorical(tree, where, split_type, left, feature, categories)
    return left, right, feature, cond, n, n - deleted


def _xgb_categorical(tree: dict, where: str, split_type: np.ndarray, left: np.ndarray, feature: np.ndarray,
                     categories: list[int | None] | None) -> None:
    """A tree's categorical splits against the caller's ``categories`` (module docstring)."""
    keys = ("categories", "categories_nodes", "categories_segments", "categories_sizes")
    nodes = np.flatnonzero(split_type != 0)
    if not nodes.size:
        if any(np.asarray(tree.get(k, [])).size for k in keys):
            raise _bad("XGBoost", f"has {where} with category tables but no categorical split")
        return
    if categories is None:
        raise _bad("XGBoost", f"has {where} with categorical splits (not supported)")
    if np.any(split_type[nodes] != 1) or np.any(left[nodes] == -1):
        raise _bad("XGBoost", f"has {where} with an unknown split type or a categorical leaf")
    m = nodes.size
    listed = _array(tree, "categories_nodes", m, where, "i")
    start = _array(tree, "categories_segments", m, where, "i")
    size = _array(tree, "categories_sizes", m, where, "i")
    raw = np.asarray(tree.get("categories", []))
    if raw.ndim != 1 or (raw.size and raw.dtype.kind not in "biu"):
        raise _bad("XGBoost", f"has {where} whose 'categories' are not integers")
    cats = raw.astype(np.int64)
    if not np.array_equal(listed, nodes):
        raise _bad("XGBoost", f"has {where} whose categorical nodes do not match its split types")
    if np.any(size < 1) or np.any(start < 0) or np.any(start + size > cats.size):
        raise _bad("XGBoost", f"has {where} with a category list outside its category table")
    split_on = feature[nodes]
    if np.any((split_on < 0) | (split_on >= len(categories))):
        return  # the feature range check of validate_xgboost names this tree
    bound = np.array([-1 if categories[j] is None else int(categories[j]) for j in split_on], dtype=np.int64)
    if np.any(bound < 0):
        raise _bad("XGBoost", f"has {where} with a categorical split on a numeric feature")
    total = int(size.sum())
    index = np.repeat(start - np.concatenate([[0], np.cumsum(size)[:-1]]), size) + np.arange(total)
    if np.any(cats[index] < 0) or np.any(cats[index] >= np.repeat(bound, size)):
        raise _bad("XGBoost", f"has {where} with a category outside its feature's categories")


# ---------------------------------------------------------------------------------------------- LightGBM


def _lgb_fields(lines: list[str], where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        if "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def _lgb_numbers(fields: dict[str, str], key: str, n: int, where: str, kind: str) -> np.ndarray:
    text = fields.get(key)
    if text is None:
        raise _bad("LightGBM", f"has {where} without '{key}'")
    parts = text.split() if n else []
    if len(parts) != n:
        raise _bad("LightGBM", f"has {where} whose '{key}' has {len(parts)} values, not {n}")
    try:
        arr = np.array([int(p) for p in parts] if kind == "i" else [float(p) for p in parts],
                       dtype=np.int64 if kind == "i" else np.float64)
    except (ValueError, OverflowError):
        raise _bad("LightGBM", f"has {where} whose '{key}' is not {n} numbers") from None
    if kind == "f" and not np.all(np.isfinite(arr)):
        raise _bad("LightGBM", f"has {where} with a non-finite '{key}'")
    return arr


def validate_lightgbm(source: bytes | str | os.PathLike, n_features: int | None = None,
                      n_classes: int | None = None, categories: list[int | None] | None = None) -> BoosterSummary:
    """Check a LightGBM text model (bytes or a path) before LightGBM reads it; see the module
    docstring.  ``n_features``/``n_classes``: the counts the caller will use (``None``: not checked);
    ``categories`` as for :func:`validate_xgboost`."""
    blob = _read(source, "LightGBM")
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad("LightGBM", "is not UTF-8 text") from None
    if "\x00" in text:
        raise _bad("LightGBM", "holds a NUL byte")
    head, sep, rest = text.partition("\nTree=")
    if not text.startswith("tree\n") or not sep:
        raise _bad("LightGBM", "does not start with a model header followed by its trees")
    if "\nend of trees" not in rest:
        raise _bad("LightGBM", "is truncated (no 'end of trees' line)")
    body = rest.split("\nend of trees", 1)[0]
    header = _lgb_fields(head.splitlines(), "the header")
    max_idx = _count(header.get("max_feature_idx"), "max_feature_idx", 0, "LightGBM")
    num_class = _count(header.get("num_class"), "num_class", 1, "LightGBM")
    per_iter = _count(header.get("num_tree_per_iteration", num_class), "num_tree_per_iteration", 1, "LightGBM")
    if per_iter != num_class:
        raise _bad("LightGBM", f"has num_tree_per_iteration {per_iter} for {num_class} classes")
    names = header.get("feature_names")
    if names is not None and len(names.split()) != max_idx + 1:
        raise _bad("LightGBM", f"names {len(names.split())} features and has max_feature_idx {max_idx}")
    blocks = body.split("\nTree=")
    if categories is not None and len(categories) != max_idx + 1:
        raise _bad("LightGBM", f"has {max_idx + 1} features, not the {len(categories)} this model declares")
    nodes = [_lgb_tree_nodes(block, t, max_idx + 1, categories) for t, block in enumerate(blocks)]
    _check_forest(np.concatenate([a[0] for a in nodes]), np.concatenate([a[1] for a in nodes]),
                  [a[0].shape[0] for a in nodes], None, "LightGBM")
    if len(blocks) % per_iter:
        raise _bad("LightGBM", f"holds {len(blocks)} trees, not a multiple of the {per_iter} trees per iteration")
    sizes = header.get("tree_sizes")
    if sizes is not None and len(sizes.split()) != len(blocks):
        raise _bad("LightGBM", f"lists {len(sizes.split())} tree sizes for {len(blocks)} trees (truncated or edited)")
    objective = (header.get("objective") or "").split()
    return _check_expected("LightGBM", BoosterSummary(max_idx + 1, max(2, num_class), len(blocks),
                                                      objective[0][:100] if objective else ""), n_features, n_classes)


def _lgb_tree_nodes(block: str, t: int, nf: int, categories: list[int | None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Tree ``t``'s block checked on its own (lengths, ranges, finite values), and its children as one
    node array -- internal nodes ``0..n-1``, leaf ``j`` as node ``n + j`` -- for the shape check
    across trees in :func:`validate_lightgbm` (each node and leaf reached once)."""
    lines = block.strip().splitlines()
    where = f"tree {t}"
    if not lines or lines[0].strip() != str(t):
        raise _bad("LightGBM", f"has {where} out of order or unnamed")
    fields = _lgb_fields(lines[1:], where)
    leaves = _count(fields.get("num_leaves"), f"{where} num_leaves", 1, "LightGBM")
    num_cat = _count(fields.get("num_cat", "0"), f"{where} num_cat", 0, "LightGBM")
    if num_cat and categories is None:
        raise _bad("LightGBM", f"has {where} with categorical splits (not supported)")
    if fields.get("is_linear", "0") != "0":
        raise _bad("LightGBM", f"has {where} with linear leaves (not supported)")
    _lgb_numbers(fields, "leaf_value", leaves, where, "f")
    shrink = fields.get("shrinkage", "1")
    try:
        if not math.isfinite(float(shrink)):
            raise ValueError
    except ValueError:
        raise _bad("LightGBM", f"has {where} with a non-finite shrinkage") from None
    n = leaves - 1  # internal nodes
    if n == 0:
        return np.full(1, -1, dtype=np.int64), np.full(1, -1, dtype=np.int64)
    feature = _lgb_numbers(fields, "split_feature", n, where, "i")
    threshold = _lgb_numbers(fields, "threshold", n, where, "f")
    decision = _lgb_numbers(fields, "decision_type", n, where, "i")
    if np.any(decision < 0) or np.any(decision > 15) or int(np.sum(decision & 1)) != num_cat:
        raise _bad("LightGBM", f"has {where} with an unknown decision type, or categorical splits other than num_cat")
    left = _lgb_numbers(fields, "left_child", n, where, "i")
    right = _lgb_numbers(fields, "right_child", n, where, "i")
    for kids in (left, right):
        if np.any(kids >= n) or np.any(kids < -leaves):
            raise _bad("LightGBM", f"has {where} with a child index outside -{leaves}..{n - 1}")
    if np.any(feature < 0) or np.any(feature >= nf):
        raise _bad("LightGBM", f"has {where} splitting on a feature index outside 0..{nf - 1}")
    if num_cat:
        _lgb_categorical(fields, where, num_cat, feature[(decision & 1) == 1], threshold[(decision & 1) == 1], categories)
    as_node = lambda kids: np.where(kids < 0, n + ~kids, kids)  # noqa: E731
    full_l = np.concatenate([as_node(left), np.full(leaves, -1)])
    full_r = np.concatenate([as_node(right), np.full(leaves, -1)])
    return full_l, full_r


def _lgb_categorical(fields: dict[str, str], where: str, num_cat: int, split_on: np.ndarray, index: np.ndarray,
                     categories: list[int | None]) -> None:
    """A LightGBM tree's categorical splits against the caller's ``categories`` (module docstring): each
    categorical node's threshold is its index into ``cat_boundaries`` (each index once), whose ranges of
    ``cat_threshold`` (32-bit words of the category bitset) are in order, non-empty and no longer than
    the feature's categories need."""
    if not np.array_equal(np.sort(index), np.arange(num_cat)):
        raise _bad("LightGBM", f"has {where} whose categorical splits do not index its num_cat category sets")
    bounds = _lgb_numbers(fields, "cat_boundaries", num_cat + 1, where, "i")
    words = fields.get("cat_threshold", "").split()
    if bounds[0] != 0 or np.any(np.diff(bounds) < 1) or bounds[-1] != len(words):
        raise _bad("LightGBM", f"has {where} whose cat_boundaries do not cut its cat_threshold")
    bits = _lgb_numbers(fields, "cat_threshold", len(words), where, "i")
    if np.any(bits < 0) or np.any(bits >= 2**32):
        raise _bad("LightGBM", f"has {where} with a cat_threshold word outside 32 bits")
    limit = np.array([-1 if categories[j] is None else int(categories[j]) for j in split_on], dtype=np.int64)
    if np.any(limit < 0):
        raise _bad("LightGBM", f"has {where} with a categorical split on a numeric feature")
    width = np.diff(bounds)[index.astype(np.int64)]
    if np.any(width > (limit + 31) // 32):
        raise _bad("LightGBM", f"has {where} with a category outside its feature's categories")
