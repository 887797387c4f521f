"""What a loaded model must satisfy before calengine scores with it.

A model directory is data someone hands you.  skops restricts the *types* it loads, but a type-correct
estimator can still carry contents that make compiled code read out of bounds: a decision tree whose
child or feature indices point outside its arrays loads fine and then crashes the process inside
scikit-learn's Cython on the first ``predict``.  So, after loading and before any prediction:

* :func:`check_manifest` checks the manifest's structure (types, required keys, a class count the code
  matrix agrees with, known feature kinds) so a damaged manifest is one ``ModelFormatError``;
* :func:`check_estimator` walks every loaded scikit-learn object and validates the node arrays of each
  ``sklearn.tree._tree.Tree`` and histogram-gradient-boosting ``TreePredictor`` -- the allowlisted
  types whose arrays compiled code indexes without bounds checks: children in range and each node
  the child of exactly one earlier node (so the tree is acyclic and connected), feature indices
  below the estimator's feature count, finite thresholds and values;
* :func:`probe_model` scores two synthetic rows through the whole model (learners, calibrators,
  combiner) and requires finite probabilities in [0, 1] summing to 1, which catches arrays whose shapes
  disagree with the manifest or with each other (numpy raises on those; it does not crash).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelFormatError

_FEATURE_KINDS = ("numeric", "categorical", "text")
_MAX_HASH_BITS = 24
_MAX_WALK = 200_000


def _damaged(what: str) -> ModelFormatError:
    return ModelFormatError(f"{what}; the model directory is damaged or was tampered with, fit the model again")


# ---------------------------------------------------------------------------------------------- manifest


def _need(d: Any, key: str, types, where: str):
    place = "the manifest" if where == "the manifest" else f"{where} of the manifest"
    if not isinstance(d, dict) or key not in d:
        raise _damaged(f"'{key}' is missing from {place}")
    value = d[key]
    if not isinstance(value, types) or isinstance(value, bool) and bool not in _as_tuple(types):
        names = "/".join(t.__name__ for t in _as_tuple(types))
        raise _damaged(f"'{key}' in {place} is a {type(value).__name__}, not a {names}")
    return value


def _as_tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _check_state(desc: Any, where: str) -> None:
    from .files import check_plain_name

    _need(desc, "name", str, where)
    _need(desc, "params", dict, where)
    state = _need(desc, "state", dict, where)
    _need(state, "scalars", dict, f"the state of {where}")
    estimators = _need(state, "estimators", dict, f"the state of {where}")
    for key, fname in estimators.items():
        check_plain_name(fname, f"the estimator file of {where}")
    if "arrays" in state:
        check_plain_name(state["arrays"], f"the array file of {where}")
    for key, fname in _need(state, "files", dict, f"the state of {where}").items() if "files" in state else ():
        check_plain_name(fname, f"the file of state '{key}' of {where}")


def check_manifest(manifest: Any) -> None:
    """Raise one ModelFormatError for the first structural problem of ``manifest`` (see module doc):
    its classes and code matrix, the sections that describe the whole model, the members, the files."""
    if not isinstance(manifest, dict):
        raise _damaged(f"the manifest is a JSON {type(manifest).__name__}, not an object")
    k, n_columns = _check_labels_and_code(manifest)
    groups = _check_model_sections(manifest, k, n_columns)
    _check_members(manifest, groups)
    files = _need(manifest, "files", dict, "the manifest")
    for rel, entry in files.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) or not isinstance(entry.get("bytes"), int):
            raise _damaged(f"the files table entry for {json_preview(rel)} is not {{sha256, bytes}}")


def _check_labels_and_code(manifest: dict) -> tuple[int, int]:
    """The classes (at least two plain, distinct values), the k-row code matrix of -1/0/+1 and its
    column counts; ``(k, columns)``."""
    labels = _need(manifest, "labels", dict, "the manifest")
    classes = _need(labels, "classes", list, "labels")
    _need(labels, "target", str, "labels")
    if len(classes) < 2 or any(not isinstance(c, (str, int, float, bool)) for c in classes):
        raise _damaged(f"labels.classes must list at least two plain class values (got {json_preview(classes)})")
    if len({(type(c).__name__, c) for c in classes}) != len(classes):
        raise _damaged("labels.classes repeats a class")
    k = len(classes)
    M = np.asarray(_need(manifest, "code_matrix", list, "the manifest"), dtype=object)
    if M.ndim != 2 or M.shape[0] != k or M.shape[1] < 1 or not all(v in (-1, 0, 1) and not isinstance(v, bool) for v in M.flat):
        raise _damaged(f"the code matrix is not a {k}-row matrix of -1/0/+1 for the {k} classes")
    counts = _need(manifest, "column_counts", list, "the manifest")
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        raise _damaged("column_counts must be non-negative integers")
    return k, M.shape[1]


def _check_model_sections(manifest: dict, k: int, n_columns: int) -> list:
    """What describes the whole model: learner and method, the combiner a multi-column model needs,
    member groups, features, lineage, sampling and the conformal layer; the member groups."""
    for section in ("learner", "method"):
        sec = _need(manifest, section, dict, "the manifest")
        _need(sec, "params", dict, section)
    if manifest.get("combiner") is not None:
        _need(manifest["combiner"], "name", str, "combiner")
        _need(manifest["combiner"], "params", dict, "combiner")
    elif k > 2 or n_columns > 1:
        raise _damaged(f"a {k}-class model with {n_columns} columns needs a combiner and the manifest has none")
    for key in ("extra", "plugins"):
        if manifest.get(key) is not None and not isinstance(manifest[key], dict):
            raise _damaged(f"'{key}' in the manifest is not an object")
    groups = manifest.get("member_groups") or []
    if not isinstance(groups, list) or not all(isinstance(g, int) and not isinstance(g, bool) for g in groups):
        raise _damaged("member_groups must be a list of integers")
    if manifest.get("combine") is not None and not isinstance(manifest["combine"], str):
        raise _damaged("'combine' in the manifest is not a string")
    _check_features(manifest.get("features"))
    if "lineage" in manifest:
        check_lineage(manifest["lineage"])
    if "sampling" in manifest:
        from ..errors import DataError
        from ..methods.sampling import check_sampling_json

        try:
            check_sampling_json(manifest["sampling"], k)
        except DataError as exc:
            raise _damaged(str(exc)) from None
    if manifest.get("conformal") is not None:  # calengine conformal: thresholds, checked whole at load
        conformal = _need(manifest, "conformal", dict, "the manifest")
        if conformal.get("arrays") != "conformal.npz":
            raise _damaged("the conformal layer does not name its array file conformal.npz")
    return groups


def _check_members(manifest: dict, groups: list) -> None:
    """At least one member, one group each when grouped, and every file a member names a plain name."""
    from .files import check_plain_name

    members = _need(manifest, "members", list, "the manifest")
    if not members:
        raise _damaged("the manifest lists no members")
    if groups and len(groups) != len(members):
        raise _damaged(f"member_groups has {len(groups)} entries for {len(members)} members")
    for i, desc in enumerate(members):
        where = f"member {i}"
        _need(desc, "kind", str, where)
        _need(desc, "meta", dict, where)
        for j, ld in enumerate(_need(desc, "learners", list, where)):
            _check_state(ld, f"learner {j} of {where}")
        for b, cd in enumerate(_need(desc, "calibrators", list, where)):
            _check_state(cd, f"calibrator {b} of {where}")
        if "arrays" in desc:
            check_plain_name(desc["arrays"], f"the array file of {where}")
        for name in _need(desc, "files", list, where) if "files" in desc else ():  # MCGrad's boosters
            check_plain_name(name, f"a file of {where}")


def check_lineage(lineage: Any, where: str = "lineage", depth: int = 0) -> None:
    """A recalibrated model's record of where it came from (see :mod:`calengine.fit.recalibrate`):
    mode, parent model (path and content hash), new data (paths, rows, fingerprint), time, forget."""
    import re

    if depth > 100:
        raise _damaged("'lineage' nests more than 100 recalibrations")
    if not isinstance(lineage, dict):
        raise _damaged(f"'{where}' in the manifest is not an object")
    mode = _need(lineage, "mode", str, where)
    if mode not in ("refit", "update", "adapt", "conformal"):
        raise _damaged(f"'mode' of {where} is {json_preview(mode)}, not 'refit', 'update', 'adapt' or 'conformal'")
    parent = _need(lineage, "parent", dict, where)
    if parent.get("path") is not None and not isinstance(parent["path"], str):
        raise _damaged(f"'path' of the parent in {where} is not a string")
    h = parent.get("content_hash")
    if h is not None and not (isinstance(h, str) and re.fullmatch(r"[0-9a-f]{64}", h)):
        raise _damaged(f"the parent's content_hash in {where} is not a SHA-256 hex digest")
    data = _need(lineage, "data", dict, where)
    paths = _need(data, "paths", list, f"the data of {where}")
    if not all(isinstance(p, str) for p in paths):
        raise _damaged(f"the data paths of {where} are not all strings")
    rows = _need(data, "rows", int, f"the data of {where}")
    if rows < 0:
        raise _damaged(f"the data rows of {where} are negative")
    _need(data, "fingerprint", str, f"the data of {where}")
    _need(lineage, "time", str, where)
    command = lineage.get("command")
    if command is not None and not (isinstance(command, list) and all(isinstance(c, str) for c in command)):
        raise _damaged(f"'command' of {where} is not a list of strings")
    if mode == "adapt":
        _check_adapt_priors(lineage, where)
    elif mode == "conformal":
        _need(lineage, "conformal", dict, where)
        _need(lineage, "target", str, where)
    else:
        forget = _need(lineage, "forget", (int, float), where)
        if not 0.0 <= forget <= 1.0:
            raise _damaged(f"'forget' of {where} is {json_preview(forget)}, not in [0, 1]")
    if lineage.get("previous") is not None:
        check_lineage(lineage["previous"], f"{where}.previous", depth + 1)


def _check_adapt_priors(lineage: dict, where: str) -> None:
    """An adapted model's estimates (:mod:`calengine.fit.label_shift`): lists of priors in [0, 1]."""
    priors = _need(lineage, "priors", dict, where)
    for key in ("training", "applied"):
        values = _need(priors, key, list, f"the priors of {where}")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0 for v in values):
            raise _damaged(f"the {key} priors of {where} are not numbers in [0, 1]")


def _check_segments(features: dict) -> None:
    from .segmented import MAX_SEGMENTS as MAX_SEGMENTS_LIMIT

    by, keys = _need(features, "by", list, "features"), _need(features, "keys", list, "features")
    if not by or not all(isinstance(c, str) for c in by) or len(keys) > MAX_SEGMENTS_LIMIT:
        raise _damaged("features.by must name columns and features.keys hold at most"
                       f" {MAX_SEGMENTS_LIMIT} segments")
    if not all(isinstance(k, list) and len(k) == len(by) and all(isinstance(v, str) for v in k) for k in keys):
        raise _damaged("a segment key of features.keys is not one string per --by column")
    if isinstance(features.get("base"), dict) and features["base"].get("kind") == "segments":
        raise _damaged("features.base nests segment keys")
    _check_features(_need(features, "base", dict, "features"))


def _check_features(features: Any) -> None:
    if features is None:
        return
    if not isinstance(features, dict):
        raise _damaged("'features' in the manifest is not an object")
    if features.get("kind") == "columns":
        _check_reader(features)
        return
    if features.get("kind") == "segments":  # fit --by: the model's encoder plus the segment keys
        _check_segments(features)
        return
    _need(features, "max_categories", int, "features")
    bits = features.get("text_hash_bits", 18)
    if not isinstance(bits, int) or isinstance(bits, bool) or not 1 <= bits <= _MAX_HASH_BITS:
        raise _damaged(f"features.text_hash_bits must be an integer from 1 to {_MAX_HASH_BITS}")
    if not isinstance(features.get("text_columns", []), list):
        raise _damaged("features.text_columns is not a list")
    columns = _need(features, "columns", list, "features")
    if not columns:
        raise _damaged("features.columns is empty")
    allowed = {"name", "kind", "fill", "missing_indicator", "categories", "other"}
    for c in columns:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise _damaged("a feature column has no name")
        if set(c) - allowed:
            raise _damaged(f"feature column '{c['name']}' has unknown fields {sorted(set(c) - allowed)}")
        if c.get("kind") not in _FEATURE_KINDS:
            raise _damaged(f"feature column '{c['name']}' has unknown kind {json_preview(c.get('kind'))} (known: {', '.join(_FEATURE_KINDS)})")
        if not isinstance(c.get("categories", []), list) or not isinstance(c.get("fill", 0.0), (int, float)):
            raise _damaged(f"feature column '{c['name']}' has malformed categories or fill")
        if not isinstance(c.get("missing_indicator", False), bool) or not isinstance(c.get("other", False), bool):
            raise _damaged(f"feature column '{c['name']}' has a non-boolean flag")


def _check_reader(features: dict) -> None:
    """A model that reads named columns as they are (:class:`calengine.plan.columns.ColumnReader`)."""
    from ..plan.columns import READ_KINDS, ROLES

    allowed = {"kind", "columns", "role", "score_kind", "allow_missing", "as_frame"}
    if set(features) - allowed:
        raise _damaged(f"features has unknown fields {sorted(set(features) - allowed)}")
    columns = _need(features, "columns", list, "features")
    if not columns or not all(isinstance(c, str) for c in columns) or len(set(columns)) != len(columns):
        raise _damaged("features.columns must name distinct columns")
    if features.get("role", "score") not in ROLES:
        raise _damaged(f"features.role is {json_preview(features.get('role'))}, not one of {', '.join(ROLES)}")
    if features.get("score_kind") is not None and features["score_kind"] not in READ_KINDS:
        raise _damaged(f"features.score_kind is {json_preview(features['score_kind'])}, not one of {', '.join(READ_KINDS)}")
    if not isinstance(features.get("allow_missing", False), bool):
        raise _damaged("features.allow_missing is not a boolean")
    if not isinstance(features.get("as_frame", False), bool):
        raise _damaged("features.as_frame is not a boolean")
    if features.get("as_frame") and (features.get("role") != "feature" or features.get("score_kind") is not None):
        raise _damaged("features.as_frame is for the feature columns of a model trained elsewhere only")


def json_preview(value: Any) -> str:
    import json

    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------------------------------------- estimators


def check_estimator(obj: Any, where: str) -> None:
    """Validate every tree structure reachable from the loaded object ``obj`` (see module doc)."""
    seen: set[int] = set()
    stack: list[tuple[Any, int | None]] = [(obj, None)]
    steps = 0
    while stack:
        node, n_features = stack.pop()
        if id(node) in seen or node is None or isinstance(node, (str, bytes, int, float, bool, np.ndarray, np.generic)):
            continue
        seen.add(id(node))
        steps += 1
        if steps > _MAX_WALK:
            raise _damaged(f"{where} holds more than {_MAX_WALK} nested objects")
        type_name = f"{type(node).__module__}.{type(node).__qualname__}"
        if type_name == "sklearn.tree._tree.Tree":
            _check_tree(node, n_features, where)
            continue
        if type_name == "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor":
            _check_hist_predictor(node, n_features, where)
            continue
        if isinstance(node, dict):
            children = list(node.values())
        elif isinstance(node, (list, tuple, set, frozenset)):
            children = list(node)
        elif hasattr(node, "__dict__"):
            attrs = vars(node)
            nf = attrs.get("n_features_in_")
            if isinstance(nf, (int, np.integer)) and not isinstance(nf, bool):
                n_features = int(nf)
            if type_name.endswith("HistGradientBoostingClassifier") or type_name.endswith("HistGradientBoostingRegressor"):
                _check_hist_bins(node, where)
            children = list(attrs.values())
        else:
            continue
        stack.extend((c, n_features) for c in children)


def _check_children(left: np.ndarray, right: np.ndarray, internal: np.ndarray, where: str) -> None:
    """Each internal node's two children are later nodes; every node but the root has exactly one parent."""
    n = left.shape[0]
    idx = np.arange(n)
    l, r = left[internal].astype(np.int64), right[internal].astype(np.int64)
    if np.any(l <= idx[internal]) or np.any(r <= idx[internal]) or np.any(l >= n) or np.any(r >= n):
        raise _damaged(f"a decision tree in {where} has child indices out of range")
    children = np.sort(np.concatenate([l, r]))
    if children.shape[0] != n - 1 or np.any(children != np.arange(1, n)):
        raise _damaged(f"a decision tree in {where} is not a tree (nodes shared, cyclic or unreachable)")


def _check_tree(tree: Any, n_features: int | None, where: str) -> None:
    state = tree.__getstate__()
    nodes, values = state.get("nodes"), state.get("values")
    if not isinstance(nodes, np.ndarray) or nodes.ndim != 1 or nodes.shape[0] < 1:
        raise _damaged(f"a decision tree in {where} has no nodes")
    n = nodes.shape[0]
    if int(state.get("node_count", -1)) != n:
        raise _damaged(f"a decision tree in {where} has node_count inconsistent with its node array")
    left, right = nodes["left_child"], nodes["right_child"]
    leaf = left == -1
    if np.any((right == -1) != leaf):
        raise _damaged(f"a decision tree in {where} has a node with one child")
    internal = ~leaf
    _check_children(left, right, internal, where)
    limit = int(tree.n_features)
    if n_features is not None:
        limit = min(limit, n_features)
    feat = nodes["feature"][internal]
    if np.any(feat < 0) or np.any(feat >= limit):
        raise _damaged(f"a decision tree in {where} splits on a feature index outside 0..{limit - 1}")
    if not np.all(np.isfinite(nodes["threshold"][internal])):
        raise _damaged(f"a decision tree in {where} has a non-finite split threshold")
    if not isinstance(values, np.ndarray) or values.shape[0] != n or not np.all(np.isfinite(values)):
        raise _damaged(f"a decision tree in {where} has missing or non-finite node values")


def _check_hist_predictor(pred: Any, n_features: int | None, where: str) -> None:
    nodes = getattr(pred, "nodes", None)
    if not isinstance(nodes, np.ndarray) or nodes.ndim != 1 or nodes.shape[0] < 1:
        raise _damaged(f"a boosted tree in {where} has no nodes")
    internal = nodes["is_leaf"] == 0
    _check_children(nodes["left"], nodes["right"], internal, where)
    feat = nodes["feature_idx"][internal]
    if n_features is None or np.any(feat < 0) or np.any(feat >= n_features):
        raise _damaged(f"a boosted tree in {where} splits on a feature index out of range")
    if not np.all(np.isfinite(nodes["value"])):
        raise _damaged(f"a boosted tree in {where} has non-finite leaf values")
    categorical = internal & (nodes["is_categorical"] != 0)
    if np.any(categorical):
        raw = getattr(pred, "raw_left_cat_bitsets", None)
        n_bitsets = raw.shape[0] if isinstance(raw, np.ndarray) and raw.ndim == 2 else 0
        if np.any(nodes["bitset_idx"][categorical] >= n_bitsets):
            raise _damaged(f"a boosted tree in {where} has a categorical split without its category set")


def _check_hist_bins(model: Any, where: str) -> None:
    """Categorical splits index the bin mapper's known-category bitsets: those features must be
    categorical there."""
    mapper = getattr(model, "_bin_mapper", None)
    is_cat = getattr(mapper, "is_categorical_", None)
    for per_iteration in getattr(model, "_predictors", []) or []:
        for pred in per_iteration or []:
            nodes = getattr(pred, "nodes", None)
            if not isinstance(nodes, np.ndarray) or nodes.dtype.names is None or "is_categorical" not in nodes.dtype.names:
                continue
            categorical = (nodes["is_leaf"] == 0) & (nodes["is_categorical"] != 0)
            if not np.any(categorical):
                continue
            feats = nodes["feature_idx"][categorical]
            if (
                not isinstance(is_cat, np.ndarray)
                or np.any(feats < 0)
                or np.any(feats >= is_cat.shape[0])
                or not np.all(is_cat[feats])
            ):
                raise _damaged(f"a boosted tree in {where} splits a feature as categorical that the model does not treat as one")


# ---------------------------------------------------------------------------------------------- probe


def feature_width(encoder: Any) -> int:
    return int(sum(c.width(encoder.text_hash_bits) for c in encoder.columns_))


def _clip(text: str, limit: int) -> str:
    """``text`` cut at the last word boundary before ``limit`` characters, with an ellipsis if cut."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut + " ..."


def probe_model(model: Any) -> None:
    """Score two synthetic rows through ``model``; any failure or an invalid probability is a damaged model."""
    n_cols = model.code_matrix.shape[1]
    for i, member in enumerate(model.members):
        if getattr(member, "n_columns", n_cols) != n_cols:
            raise _damaged(f"member {i} estimates {member.n_columns} columns and the code matrix has {n_cols}")
    if len(np.asarray(model.column_counts)) not in (0, n_cols):
        raise _damaged(f"column_counts has {len(model.column_counts)} entries for {n_cols} code-matrix columns")
    if model.encoder is None:
        return
    if getattr(model.encoder, "as_frame", False):
        # a scikit-learn model trained elsewhere reads the table's own values (strings, categories):
        # no synthetic row is a valid input to it.  Its estimator was loaded under the skops allowlist
        # and checked (check_estimator); its scores are checked where they are used (the calibrators,
        # the multiclass rows' probability check)
        return
    width = feature_width(model.encoder)
    if model.encoder.is_sparse:
        import scipy.sparse as sp

        X = sp.csr_matrix((2, width), dtype=np.float64)
    else:
        X = np.zeros((2, width), dtype=np.float64)
        X[1] = 1.0
    try:
        # the calibrated path only: the raw path shares the learners and the combiner, and its score
        # ranges are checked on load (checked_raw_map); combining twice would double the probe's cost
        P = model.predict_proba_features(X)
    except MemoryError:
        raise _damaged("scoring a test row needs more memory than a model can justify") from None
    except Exception as exc:  # noqa: BLE001 - whatever the stored arrays make numpy raise
        reason = _clip(str(exc).splitlines()[0], 300) if str(exc) else type(exc).__name__
        raise _damaged(f"the stored learners and calibrators do not fit together ({type(exc).__name__}: {reason})") from None
    k = model.n_classes
    P = np.asarray(P)
    if P.shape != (2, k) or not np.all(np.isfinite(P)) or np.any(P < -1e-9) or np.any(P > 1 + 1e-9):
        raise _damaged(f"the model's probabilities for a test row are not {k} finite values in [0, 1]")
    if not np.allclose(P.sum(axis=1), 1.0, atol=1e-6):
        raise _damaged("the model's probabilities for a test row do not sum to 1")
