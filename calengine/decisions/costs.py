"""The cost (or benefit) matrix of a decision problem, constant or taken from columns of the table.

Calibrated probabilities are wanted because someone acts on them (Zadrozny & Elkan 2002, the KDD'98
mailing problem: mail when ``p(x) * amount(x) > cost``).  A :class:`CostMatrix` says what each action
costs in each true state, so :func:`calengine.decisions.decide.decide` can pick the action of least
expected cost.

Convention: ``C[d][t]`` is the cost of *deciding* class ``d`` when the *true* class is ``t`` (Elkan
2001, "The foundations of cost-sensitive learning": rows are decisions, columns the truth).  A file may
give ``"benefits"`` instead of ``"costs"``; a benefit is a negative cost, so every computation runs on
costs and reports convert back (``expected_cost`` is then minus the expected benefit).

An entry is a number, or a linear expression of numeric columns of the table, e.g. ``"amount - 0.68"``
(KDD'98: the donation minus the mailing cost), ``"-cost"``, ``"2*amount + 1"``.  The matrix is stored
as a constant part plus one coefficient matrix per column, so the expected costs of ``n`` rows are a
few ``(n, k) @ (k, k)`` products, never an ``(n, k, k)`` array.

File format (JSON; YAML with the same keys when PyYAML is installed)::

    {"classes": [0, 1],
     "benefits": [[0, 0],
                  [-0.68, "amount - 0.68"]]}

``classes`` names the rows and columns, as the model's classes are spelt (compared as text, so ``1``
and ``"1"`` match); their order need not be the model's.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any

import numpy as np

from ..errors import DataError, ParameterError

#: the largest cost file (or inline JSON) read: a cost matrix of 100 classes with expressions fits in a
#: few hundred KiB; anything larger is refused before it is parsed
MAX_COST_FILE_BYTES = 1 << 20
#: the largest magnitude of a cost (an entry, a coefficient, or a row's cost computed from columns):
#: sums of such costs over any table (up to 10**18 rows) stay finite in float64 (whose limit is 1.8e308)
MAX_ABS_COST = 1e290
#: the deepest nesting of lists and objects a cost file may have (a matrix needs 3: object, rows, row)
MAX_NESTING = 32

_NAME = r"[A-Za-z_][A-Za-z0-9_.]*"
_NUMBER = r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
#: one signed term: ``5``, ``amount``, ``2*amount``, ``0.5 * cost``
_TERM = re.compile(rf"\s*([+-])?\s*(?:({_NUMBER})\s*\*\s*({_NAME})|({_NUMBER})|({_NAME}))\s*")


def _shown(value: Any, width: int = 60) -> str:
    """``repr(value)`` cut to ``width`` characters: an error line never quotes a whole hostile entry."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**width else f"a {len(str(abs(value)))}-digit integer"
    return text if len(text) <= width else text[: width - 3] + "..."


def _finite_cost(value: float, where: str) -> float:
    if not math.isfinite(value) or abs(value) > MAX_ABS_COST:
        raise ParameterError(
            f"cost matrix entry {where} is {value:g}; use a finite number of magnitude at most {MAX_ABS_COST:g}"
            " (scale the costs, e.g. thousands instead of units)"
        )
    return value


def parse_entry(entry: Any, where: str) -> tuple[float, dict[str, float]]:
    """(constant, {column: coefficient}) of one matrix entry: a number or a linear expression.  Every
    number, constant or coefficient, is finite and at most :data:`MAX_ABS_COST` in magnitude."""
    if isinstance(entry, bool) or entry is None:
        raise ParameterError(f"cost matrix entry {where} is {entry!r}; use a number or a column expression such as 'amount - 5'")
    if isinstance(entry, int) and abs(entry) > MAX_ABS_COST:  # also those too large to convert to float
        raise ParameterError(
            f"cost matrix entry {where} is {_shown(entry)}; use a finite number of magnitude at most {MAX_ABS_COST:g}"
            " (scale the costs, e.g. thousands instead of units)"
        )
    if isinstance(entry, (int, float)):
        return _finite_cost(float(entry), where), {}
    if not isinstance(entry, str) or not entry.strip():
        raise ParameterError(f"cost matrix entry {where} is {_shown(entry)}; use a number or a column expression such as 'amount - 5'")
    text, pos, const, coefs = entry.strip(), 0, 0.0, {}
    first = True
    while pos < len(text):
        m = _TERM.match(text, pos)
        if m is None or m.end() == pos or (m.group(1) is None and not first):
            raise ParameterError(
                f"cost matrix entry {where} {_shown(entry)} is not a number or a sum of terms like 'amount', '2*amount',"
                " '-5' (column names: letters, digits, _ and .)"
            )
        sign = -1.0 if m.group(1) == "-" else 1.0
        if m.group(2) is not None:
            coefs[m.group(3)] = coefs.get(m.group(3), 0.0) + sign * float(m.group(2))
        elif m.group(4) is not None:
            const += sign * float(m.group(4))
        else:
            coefs[m.group(5)] = coefs.get(m.group(5), 0.0) + sign
        pos, first = m.end(), False
    _finite_cost(const, where)
    for column, v in coefs.items():
        _finite_cost(v, f"{where} (coefficient of '{column}')")
    return const, {c: v for c, v in coefs.items() if v != 0.0}


class CostMatrix:
    """A k x k cost matrix ``C[decided, true]`` whose entries are constants or linear in table columns.

    ``constant`` is the (k, k) constant part; ``terms`` maps a column name to its (k, k) coefficient
    matrix.  ``benefit`` records that the user wrote benefits (reports show profit then); the stored
    matrices are always costs.  Plain and picklable: it travels to the workers inside tasks.
    """

    def __init__(self, classes: list, constant, terms: dict[str, Any] | None = None, benefit: bool = False):
        self.classes = list(classes)
        self.constant = np.asarray(constant, dtype=np.float64)
        self.terms = {c: np.asarray(m, dtype=np.float64) for c, m in (terms or {}).items()}
        self.benefit = bool(benefit)
        k = len(self.classes)
        if k < 2:
            raise ParameterError(f"a cost matrix needs at least 2 classes, got {k}")
        if len({str(c) for c in self.classes}) != k:
            raise ParameterError(f"cost matrix classes {self.classes} repeat a class; name each class once")
        for m in [self.constant, *self.terms.values()]:
            if m.shape != (k, k):
                raise ParameterError(f"a cost matrix for {k} classes must be {k}x{k}, got {'x'.join(map(str, m.shape))}")
            if not np.all(np.isfinite(m)):
                raise ParameterError("cost matrix entries must be finite numbers")

    # ------------------------------------------------------------------------------------------ build

    @classmethod
    def from_entries(cls, classes: list, entries: list[list[Any]], benefit: bool = False) -> "CostMatrix":
        """From a k x k nested list of numbers and column expressions (``benefit``: entries are benefits)."""
        classes = list(classes)
        k = len(classes)
        key = "benefits" if benefit else "costs"
        if not isinstance(entries, (list, tuple)) or len(entries) != k or any(
            not isinstance(r, (list, tuple)) or len(r) != k for r in entries
        ):
            raise ParameterError(
                f"'{key}' must be a {k}x{k} list of rows (one row per decided class, one column per true class,"
                f" in the order of 'classes': {classes})"
            )
        sign = -1.0 if benefit else 1.0
        constant = np.zeros((k, k))
        terms: dict[str, np.ndarray] = {}
        for d in range(k):
            for t in range(k):
                const, coefs = parse_entry(entries[d][t], f"[decide {classes[d]}, true {classes[t]}]")
                constant[d, t] = sign * const
                for col, v in coefs.items():
                    terms.setdefault(col, np.zeros((k, k)))[d, t] = sign * v
        return cls(classes, constant, terms, benefit=benefit)

    @classmethod
    def from_dict(cls, spec: Any) -> "CostMatrix":
        """From ``{"classes": [...], "costs": [[...]]}`` or ``{... "benefits": [[...]]}``."""
        if not isinstance(spec, dict):
            raise ParameterError('a cost matrix must be an object such as {"classes": [0, 1], "costs": [[0, 1], [5, 0]]}')
        unknown = sorted(set(spec) - {"classes", "costs", "benefits", "description"})
        if unknown:
            raise ParameterError(f"unknown cost matrix key '{unknown[0]}'; the keys are classes, costs or benefits, description")
        if "classes" not in spec or not isinstance(spec["classes"], list):
            raise ParameterError('the cost matrix needs "classes": the class labels naming its rows and columns, e.g. [0, 1]')
        if ("costs" in spec) == ("benefits" in spec):
            raise ParameterError('give exactly one of "costs" and "benefits" in the cost matrix')
        benefit = "benefits" in spec
        return cls.from_entries(spec["classes"], spec["benefits" if benefit else "costs"], benefit=benefit)

    # ------------------------------------------------------------------------------------------ use

    @property
    def columns(self) -> list[str]:
        """The table columns the entries read, sorted."""
        return sorted(self.terms)

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    def for_classes(self, classes: list) -> "CostMatrix":
        """This matrix with rows and columns in the order of ``classes`` (a model's); they must be the
        same set of labels, compared as text."""
        mine = [str(c) for c in self.classes]
        theirs = [str(c) for c in classes]
        if sorted(mine) != sorted(theirs):
            missing = [c for c in theirs if c not in mine]
            extra = [c for c in mine if c not in theirs]
            what = f"lacks {missing}" if missing else f"has {extra} which the model does not"
            raise ParameterError(
                f"the cost matrix classes {self.classes} do not match the model's classes {list(classes)}: it {what};"
                " list exactly the model's classes"
            )
        order = [mine.index(c) for c in theirs]
        ix = np.ix_(order, order)
        return CostMatrix(list(classes), self.constant[ix], {c: m[ix] for c, m in self.terms.items()}, self.benefit)

    def column_values(self, frame, n: int | None = None) -> dict[str, np.ndarray]:
        """The cost columns of ``frame`` as float arrays; missing, non-numeric or non-finite values are a
        :class:`DataError` naming the column."""
        out = {}
        for col in self.columns:
            if frame is None or col not in frame:
                raise DataError(f"the cost matrix reads column '{col}', which the table lacks; add it or change the cost matrix")
            values = frame[col]
            values = values.to_numpy() if hasattr(values, "to_numpy") else np.asarray(values)
            if values.dtype.kind not in "biuf":
                try:
                    values = values.astype(np.float64)
                except (TypeError, ValueError):
                    raise DataError(
                        f"cost column '{col}' is not numeric ({values.dtype}); give the cost matrix a numeric column"
                    ) from None
            values = values.astype(np.float64, copy=False)
            bad = ~np.isfinite(values)
            if bad.any():
                raise DataError(
                    f"cost column '{col}' has {int(bad.sum())} missing or infinite values; fill them (e.g. with 0) first"
                )
            out[col] = values
        return out

    def expected_costs(self, P: np.ndarray, frame=None, with_scale: bool = False):
        """(n, k): row ``r``, column ``d`` is sum_t P[r, t] C_r[d, t], the expected cost of deciding ``d``.

        ``with_scale``: also return (n,) sum_t P[r, t] max_d |C_r[d, t]|, the size of the terms summed,
        against which float rounding is judged (see :func:`calengine.decisions.decide.decide_indices`)."""
        P = np.asarray(P, dtype=np.float64)
        if P.ndim != 2 or P.shape[1] != self.n_classes:
            raise ParameterError(f"probabilities must have shape (n, {self.n_classes}), got {P.shape}")
        with np.errstate(over="ignore", invalid="ignore"):
            E = P @ self.constant.T
            scale = P @ np.abs(self.constant).max(axis=0) if with_scale else None
            for col, values in self.column_values(frame).items():
                E += values[:, None] * (P @ self.terms[col].T)
                if with_scale:
                    scale += np.abs(values) * (P @ np.abs(self.terms[col]).max(axis=0))
        _in_range(E if scale is None else scale, self.columns)
        return (E, scale) if with_scale else E

    def realised_costs(self, decisions: np.ndarray, y: np.ndarray, frame=None) -> np.ndarray:
        """(n,): the cost each row's decision (class index) actually incurs given its true class index."""
        cost = self.constant[decisions, y].copy()
        with np.errstate(over="ignore", invalid="ignore"):
            for col, values in self.column_values(frame).items():
                cost += values * self.terms[col][decisions, y]
        return _in_range(cost, self.columns)

    def cost_table(self, y: np.ndarray, frame=None) -> np.ndarray:
        """(n, k): the cost of deciding each class for each row, given its true class index ``y``."""
        C = self.constant[:, y].T.copy()
        with np.errstate(over="ignore", invalid="ignore"):
            for col, values in self.column_values(frame).items():
                C += values[:, None] * self.terms[col][:, y].T
        return _in_range(C, self.columns)

    def bayes_threshold(self) -> float | None:
        """For two classes with constant costs, Elkan's p* = (C10 - C00) / (C10 - C00 + C01 - C11): decide
        class 1 when P(class 1) > p*.  None when costs depend on columns or the problem is not two-class
        (or when one decision dominates: the denominator is not positive)."""
        if self.n_classes != 2 or self.terms:
            return None
        C = self.constant
        num, den = C[1, 0] - C[0, 0], C[1, 0] - C[0, 0] + C[0, 1] - C[1, 1]
        if den <= 0:
            return None
        return float(num / den)

    def to_dict(self) -> dict:
        """The matrix as the user wrote it (benefits stay benefits), with column expressions as text."""
        sign = -1.0 if self.benefit else 1.0
        k = self.n_classes
        rows = []
        for d in range(k):
            row = []
            for t in range(k):
                const = sign * self.constant[d, t] + 0.0  # no -0.0
                text = ""
                for c, m in sorted(self.terms.items()):
                    v = sign * m[d, t]
                    if v == 0:
                        continue
                    term = c if abs(v) == 1 else f"{abs(v):g}*{c}"
                    text += (" - " if v < 0 else " + ") + term if text else ("-" if v < 0 else "") + term
                if not text:
                    row.append(float(const))
                    continue
                if const:
                    text += f" - {-const:g}" if const < 0 else f" + {const:g}"
                row.append(text)
            rows.append(row)
        return {"classes": [_plain(c) for c in self.classes], "benefits" if self.benefit else "costs": rows}

    def __repr__(self) -> str:
        return f"CostMatrix({json.dumps(self.to_dict())})"


def _in_range(costs: np.ndarray, columns: list[str]) -> np.ndarray:
    """``costs``, or a :class:`DataError` when a row's cost left the range sums can take (beyond
    :data:`MAX_ABS_COST`, or infinite: column values times coefficients overflowed float64) - no
    decision is ever taken from an infinite cost."""
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(costs) <= MAX_ABS_COST)
    if bad.any():
        rows = int(bad.any(axis=1).sum()) if bad.ndim == 2 else int(bad.sum())
        raise DataError(
            f"the cost matrix gives {rows} rows costs beyond {MAX_ABS_COST:g} in magnitude (column values times"
            f" coefficients overflow: columns {columns}); scale the cost expressions or the columns down"
        )
    return costs


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def load_cost_matrix(source: str | os.PathLike | dict | CostMatrix) -> CostMatrix:
    """A :class:`CostMatrix` from a dict, a JSON (or YAML) file, or inline JSON text starting with ``{``.

    Text is untrusted: a file (or inline JSON) over :data:`MAX_COST_FILE_BYTES`, not UTF-8, nested
    deeper than :data:`MAX_NESTING`, with a number too large for float64 or (YAML) with an alias is a
    one-line :class:`ParameterError`, never a traceback or a memory blow-up ("billion laughs")."""
    if isinstance(source, CostMatrix):
        return source
    if isinstance(source, dict):
        return CostMatrix.from_dict(source)
    text = str(source)
    if text.lstrip().startswith("{"):
        if len(text) > MAX_COST_FILE_BYTES:
            raise ParameterError(
                f"cost_matrix inline JSON has {len(text)} characters, more than {MAX_COST_FILE_BYTES}; a cost"
                " matrix is small: write it to a file", parameter="cost_matrix")
        return CostMatrix.from_dict(_parse_json(text, "--cost-matrix inline JSON"))
    if not os.path.isfile(text):
        raise ParameterError(f"cost matrix file '{text}' does not exist; give a JSON file or inline JSON starting with '{{'")
    with open(text, "rb") as fh:
        raw = fh.read(MAX_COST_FILE_BYTES + 1)
    if len(raw) > MAX_COST_FILE_BYTES:
        raise ParameterError(
            f"cost matrix file '{text}' is larger than {MAX_COST_FILE_BYTES} bytes; a cost matrix is small:"
            " check that this is the right file"
        )
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParameterError(
            f"cost matrix file '{text}' is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start});"
            " save it as UTF-8"
        ) from None
    if text.lower().endswith((".yaml", ".yml")):
        spec = _parse_yaml(content, f"cost matrix file '{text}'")
    else:
        spec = _parse_json(content, f"cost matrix file '{text}'")
    return CostMatrix.from_dict(spec)


def _too_deep(what: str) -> ParameterError:
    return ParameterError(f"{what} nests lists or objects more than {MAX_NESTING} deep; a cost matrix needs 3")


def _check_nesting(spec: Any, what: str) -> Any:
    """``spec``, once no list or dict in it is nested deeper than :data:`MAX_NESTING` (iteratively:
    a deep value must not exhaust the stack of whatever reads it next)."""
    stack = [(spec, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (list, dict)):
            if depth > MAX_NESTING:
                raise _too_deep(what)
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return spec


def _json_int(digits: str) -> int:
    """JSON integers as Python ints, refusing those no float64 holds before ``int()`` meets them
    (Python refuses over 4,300 digits with a ValueError; 309 and more overflow a float)."""
    if len(digits.lstrip("-")) > 300:
        raise ParameterError(
            f"the cost matrix holds a {len(digits.lstrip('-'))}-digit integer; costs must be finite numbers of"
            f" magnitude at most {MAX_ABS_COST:g} (scale the costs, e.g. thousands instead of units)"
        )
    return int(digits)


def _parse_json(content: str, what: str) -> Any:
    try:
        return _check_nesting(json.loads(content, parse_int=_json_int), what)
    except json.JSONDecodeError as exc:
        if what.startswith("--cost-matrix"):  # inline: the user counts characters on the command line
            raise ParameterError(f"{what} is invalid ({exc.msg} at character {exc.pos}); fix the JSON") from None
        raise ParameterError(f"{what} is not valid JSON ({exc.msg}, line {exc.lineno}); fix it") from None
    except RecursionError:
        raise _too_deep(what) from None


def _parse_yaml(content: str, what: str) -> Any:
    """YAML with the safe loader, aliases refused: ``*name`` repeats a node without its bytes, so a
    few hundred bytes can name billions of values ("billion laughs"); a cost matrix never needs one."""
    try:
        import yaml
    except ImportError:
        raise ParameterError(f"{what} is YAML but PyYAML is not installed; write the cost matrix as JSON") from None

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.events.AliasEvent):
                event = self.peek_event()
                raise ParameterError(
                    f"{what} uses a YAML alias (*{event.anchor}, line {event.start_mark.line + 1}); aliases are"
                    " refused (a few bytes of them can expand to gigabytes): write the values out"
                )
            return super().compose_node(parent, index)

    try:
        return _check_nesting(yaml.load(content, Loader=NoAliasLoader), what)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        raise ParameterError(f"{what} is not valid YAML ({str(exc).splitlines()[0]}); fix it") from None
    except RecursionError:
        raise _too_deep(what) from None
    except ParameterError:
        raise
    except (ValueError, OverflowError) as exc:  # an int of over 4,300 digits, a float too large
        raise ParameterError(f"{what} holds a number no float64 holds ({str(exc)[:80]}); scale the costs") from None


def cost_matrix_for_table(parsed: CostMatrix | None, model, files: list[str]) -> CostMatrix | None:
    """``parsed`` in ``model``'s class order, its columns checked against the table's footers (a
    misspelt column fails before any cluster starts); None stays None."""
    if parsed is None:
        return None
    from ..parquet.data import check_columns

    cm = parsed.for_classes(list(model.labels.classes))
    check_columns(files, cm.columns)
    return cm
