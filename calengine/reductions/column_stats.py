"""Column statistics of a table as a reduction: what the feature encoding and the class labels need.

Each partition task computes :func:`partition_stats` on its own rows; :meth:`TableStats.merge` combines
two partitions' statistics (associative; the engine merges in fragment order, so results are
deterministic); :func:`calengine.plan.features.FeatureEncoder.from_stats` turns the merged statistics into
the encoding.  ``FeatureEncoder.fit`` on an in-memory DataFrame is the same computation on a single
partition, so the two agree by construction.

What is kept per column, and how exact it is:

* **numeric**: row and missing counts, and the distinct values with their counts while a column has
  at most :data:`EXACT_VALUES` of them, so the training median (the fill for missing values) is exact;
  beyond that a weighted quantile summary of :data:`SUMMARY_POINTS` points (from a systematic sample
  of :data:`SAMPLE_VALUES` values per partition), whose median is within a fraction of a percent of
  the true rank -- as good a fill as the exact median for any real purpose, at the cost of one small
  sort per partition instead of a sort of the whole column.
* **string**: value counts (missing counted as ``<missing>``), exact while a column has at most
  :data:`MAX_DISTINCT` distinct values, else the most frequent ones (ties by value) -- ample for a
  top-``--max-categories`` one-hot encoding; non-null count and total length, for the text test.
* **target**: counts of each label per row group (what stratified folds need), and missing labels.

A column whose kind differs between partitions is a :class:`DataError` naming both files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DataError
from .exact import ExactSums, exact_sum

#: the largest row weight (``--weight``, ``sample_weight``).  Weights are frequencies, and every fit and
#: evaluation sums products of them with scores and their squares; at most this much per row (and a
#: table of fewer than 2**63 rows) keeps those sums finite in float64: the total weight below 1e120,
#: its square -- the evaluation's test statistics multiply two totals -- below 1e240, and the
#: calibrators' ``w * s`` and ``w * s**2`` of scores within :data:`calengine.plan.columns.MAX_FIT_SCORE`
#: below 1e220.  A weight of 1e308 made a fit publish a model with infinite sums (refused by
#: ``calengine score``) and ``evaluate`` fail; any real weighting (inverse propensities, population
#: expansion factors) is many orders of magnitude smaller.
MAX_WEIGHT = 1e100


def weight_problem(w: np.ndarray) -> int | None:
    """The index of the first weight that is missing, infinite, negative or above :data:`MAX_WEIGHT`,
    else None."""
    bad = ~(w >= 0) | (w > MAX_WEIGHT)  # NaN fails ``>= 0``; infinity exceeds the bound
    if not bad.any():
        return None
    return int(np.argmax(bad))


def checked_weights(values, name: str) -> np.ndarray:
    """A weight column (a pandas Series) as float64, finite, >= 0 and at most :data:`MAX_WEIGHT`, else one
    line naming the column (and the ``weight`` parameter, so the CLI names its ``--weight`` flag): the one
    check of a weight column read from a table -- evaluate's and the posteriors' weights
    (:func:`calengine.scores.table.weight_column`), conformal calibration's and its test rows'."""
    try:
        w = values.to_numpy(dtype="float64", na_value=float("nan"))
    except (TypeError, ValueError):
        raise DataError(f"weight column '{name}' is not numeric ({values.dtype}); pass a column of weights >= 0",
                        parameter="weight") from None
    if not np.all(np.isfinite(w)):
        raise DataError(f"weight column '{name}' has missing or infinite values; give every row a finite weight"
                        " >= 0", parameter="weight")
    if w.size and w.min() < 0:
        raise DataError(f"weight column '{name}' has negative weights (min {w.min():g}); weights must be >= 0",
                        parameter="weight")
    if w.size and w.max() > MAX_WEIGHT:  # the sums of weights and their products must stay finite
        raise DataError(f"weight column '{name}' holds {w.max():g}; weights must be at most {MAX_WEIGHT:g}:"
                        " divide the column by a constant", parameter="weight")
    return w


def shown_weight(value: float) -> str:
    """A bad weight as a message shows it."""
    return "missing" if np.isnan(value) else f"{value:g}"


#: numeric columns keep exact distinct values up to this many
EXACT_VALUES = 8192
#: points of the quantile summary kept beyond that
SUMMARY_POINTS = 4096
#: a partition with many distinct values is summarised from a systematic sample of this many values
SAMPLE_VALUES = 16_384
#: string columns keep at most this many distinct values (the most frequent)
MAX_DISTINCT = 10_000

MISSING = "<missing>"


@dataclass
class NumericStat:
    n: int = 0
    missing: int = 0
    values: np.ndarray = field(default_factory=lambda: np.empty(0))
    counts: np.ndarray = field(default_factory=lambda: np.empty(0))
    exact: bool = True

    @classmethod
    def of(cls, values: np.ndarray) -> "NumericStat":
        """``values``: float64 with NaN for missing (non-finite values already NaN).

        Few distinct values (the common case for integers, flags and codes) are counted exactly with
        a hash table; a column with many is summarised from a systematic sample of at most
        :data:`SAMPLE_VALUES` sorted values, which bounds the cost of a partition at one small sort.
        """
        import pandas as pd

        isnan = np.isnan(values)
        finite = values[~isnan] if isnan.any() else values
        n, missing = int(values.size), int(values.size - finite.size)
        if finite.size == 0:
            return cls(n=n, missing=missing)
        probe = finite[:: max(1, finite.size // 4096)]
        if np.unique(probe).size <= EXACT_VALUES // 4:
            counts = pd.Series(finite).value_counts(sort=False)
            if counts.size <= EXACT_VALUES:
                order = np.argsort(counts.index.to_numpy(dtype=np.float64), kind="stable")
                return cls(n, missing, counts.index.to_numpy(dtype=np.float64)[order],
                           counts.to_numpy(dtype=np.float64)[order])
        if finite.size <= SAMPLE_VALUES:
            s = np.sort(finite)
            starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
            stat = cls(n, missing, s[starts], np.diff(np.append(starts, s.size)).astype(np.float64))
            if stat.values.size > EXACT_VALUES:
                stat.values, stat.counts = _summarise(stat.values, stat.counts)
                stat.exact = False
            return stat
        step = finite.size / SAMPLE_VALUES
        sample = np.sort(finite[(np.arange(SAMPLE_VALUES) * step).astype(np.int64)])
        weights = np.full(sample.size, finite.size / sample.size)
        values, counts = _summarise(sample, weights)
        return cls(n, missing, values, counts, exact=False)

    def merge(self, other: "NumericStat") -> "NumericStat":
        values = np.concatenate((self.values, other.values))
        counts = np.concatenate((self.counts, other.counts))
        order = np.argsort(values, kind="stable")
        values, counts = values[order], counts[order]
        if values.size:
            starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
            values, counts = values[starts], np.add.reduceat(counts, starts)
        exact = self.exact and other.exact
        if values.size > EXACT_VALUES:
            values, counts = _summarise(values, counts)
            exact = False
        return NumericStat(self.n + other.n, self.missing + other.missing, values, counts, exact)

    def median(self) -> float:
        """The median of the non-missing values (``np.median``'s convention); 0.0 if there are none."""
        if self.values.size == 0:
            return 0.0
        cum = np.cumsum(self.counts)
        total = cum[-1]
        if self.exact:
            n = int(round(total))
            lo = self.values[np.searchsorted(cum, (n - 1) // 2, side="right")]
            hi = self.values[np.searchsorted(cum, n // 2, side="right")]
            return float((lo + hi) / 2.0)
        return float(self.values[np.searchsorted(cum, total / 2.0, side="left")])


def _summarise(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A weighted quantile summary: ``SUMMARY_POINTS`` values at evenly spaced ranks, each carrying the
    weight of the ranks it stands for (total weight kept exactly)."""
    cum = np.cumsum(counts)
    total = cum[-1]
    edges = np.linspace(0.0, total, SUMMARY_POINTS + 1)
    mids = 0.5 * (edges[1:] + edges[:-1])
    idx = np.minimum(np.searchsorted(cum, mids, side="right"), values.size - 1)
    weights = np.diff(edges)
    starts = np.flatnonzero(np.concatenate(([True], idx[1:] != idx[:-1])))
    return values[idx[starts]], np.add.reduceat(weights, starts)


@dataclass
class StringStat:
    n: int = 0
    nonnull: int = 0
    total_length: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    truncated: bool = False
    distinct_bound: int = 0  # an upper bound on distinct non-null values (exact when not truncated)

    @classmethod
    def of(cls, text: np.ndarray) -> "StringStat":
        """``text``: object array of str, ``None`` for missing."""
        is_missing = text == None  # noqa: E711 - elementwise on an object array
        present = text[~is_missing]
        values, counts = np.unique(np.where(is_missing, MISSING, text).astype(str), return_counts=True)
        stat = cls(
            n=int(text.size),
            nonnull=int(present.size),
            total_length=int(sum(len(t) for t in present)),
            counts={str(v): int(c) for v, c in zip(values, counts)},
        )
        # distinct non-null values, from the same count table (the "<missing>" key aside)
        stat.distinct_bound = len(stat.counts) - int(bool(is_missing.any()))
        stat._cap()
        return stat

    def merge(self, other: "StringStat") -> "StringStat":
        counts = dict(self.counts)
        for v, c in other.counts.items():
            counts[v] = counts.get(v, 0) + c
        distinct = len([v for v in counts if v != MISSING])
        bound = distinct if not (self.truncated or other.truncated) else self.distinct_bound + other.distinct_bound
        out = StringStat(
            self.n + other.n, self.nonnull + other.nonnull, self.total_length + other.total_length,
            counts, self.truncated or other.truncated, bound,
        )
        out._cap()
        return out

    def _cap(self) -> None:
        if len(self.counts) > MAX_DISTINCT:
            kept = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_DISTINCT]
            self.counts = dict(kept)
            self.truncated = True

    def distinct_ratio(self) -> float:
        return self.distinct_bound / self.nonnull if self.nonnull else 0.0


@dataclass
class ColumnStat:
    name: str
    kind: str  # "numeric" | "categorical"
    where: str  # a file (or "the table") where the kind was seen, for error messages
    numeric: NumericStat | None = None
    strings: StringStat | None = None

    def merge(self, other: "ColumnStat") -> "ColumnStat":
        if self.kind != other.kind:
            raise DataError(
                f"column '{self.name}' is {self.kind} in {self.where} but {other.kind} in {other.where};"
                " write every file with the same column types"
            )
        if self.kind == "numeric":
            return ColumnStat(self.name, self.kind, self.where, numeric=self.numeric.merge(other.numeric))
        return ColumnStat(self.name, self.kind, self.where, strings=self.strings.merge(other.strings))


@dataclass
class TargetStat:
    """Label counts per row group (keyed by (file key, row group)) and missing labels."""

    name: str
    per_group: dict[tuple[str, int], dict[Any, int]] = field(default_factory=dict)
    missing: int = 0

    def merge(self, other: "TargetStat") -> "TargetStat":
        per_group = dict(self.per_group)
        per_group.update(other.per_group)
        return TargetStat(self.name, per_group, self.missing + other.missing)

    def totals(self) -> dict[Any, int]:
        out: dict[Any, int] = {}
        for counts in self.per_group.values():
            for v, c in counts.items():
                out[v] = out.get(v, 0) + c
        return out


@dataclass
class WeightStat:
    """The ``--weight`` column: total weight per label value and the largest weight (what the all-zero
    check, the per-class check and costing's acceptance rate w / max w need)."""

    name: str
    per_label: dict[Any, float] = field(default_factory=dict)
    max: float = 0.0
    #: the totals as exact sums (issue 43 §1): merged by integer addition, so ``per_label`` (the float
    #: nearest each exact total, recorded in the manifest) does not depend on how the table was cut
    exact: dict[Any, ExactSums] | None = None

    def merge(self, other: "WeightStat") -> "WeightStat":
        if self.exact is not None and other.exact is not None:
            exact = dict(self.exact)
            for v, w in other.exact.items():
                exact[v] = exact[v] + w if v in exact else w
            return WeightStat(self.name, {v: float(w.to_float()[0]) for v, w in exact.items()},
                              max(self.max, other.max), exact)
        per_label = dict(self.per_label)
        for v, w in other.per_label.items():
            per_label[v] = per_label.get(v, 0.0) + w
        return WeightStat(self.name, per_label, max(self.max, other.max))

    @property
    def total(self) -> float:
        return float(sum(self.per_label.values()))

    def check(self, classes: list, where: str) -> None:
        """One line when the weights cannot fit anything: all zero, or a class whose rows all weigh 0."""
        if not self.total > 0:
            raise DataError(
                f"weight column '{self.name}' is 0 on every row of {where}; at least one row of each class"
                " needs a positive weight"
            )
        totals = {str(v): w for v, w in self.per_label.items()}
        for c in classes:
            if not totals.get(str(c), 0.0) > 0:
                raise DataError(
                    f"every row of class {c!r} has weight 0 in {where} (weight column '{self.name}'); a class"
                    " needs a positive weight to be learnt or calibrated"
                )


def row_weights(series, name: str, where: str = "the table") -> np.ndarray:
    """The ``--weight`` column ``series`` as float64, every value checked: a missing, NaN, infinite
    or negative weight, or a column of text, is one :class:`DataError` naming the column, the place
    and the fix.  Weights act as frequencies: a row of weight 2 counts as the row given twice."""
    from pandas.api import types as pdt

    if not (pdt.is_numeric_dtype(series.dtype) or pdt.is_bool_dtype(series.dtype)):
        raise DataError(
            f"weight column '{name}' has type {series.dtype} in {where}, not numbers; give weight a numeric"
            " column (each row's frequency)", parameter="weight"
        )
    w = series.to_numpy(dtype=np.float64, na_value=np.nan)
    i = weight_problem(w)
    if i is not None:
        raise DataError(
            f"weight column '{name}' holds {shown_weight(w[i])} (row {i} of {where}); weights must be finite,"
            f" >= 0 and at most {MAX_WEIGHT:g}: fix or drop those rows (or divide the column by a constant)"
        )
    return w


@dataclass
class TableStats:
    n_rows: int
    columns: dict[str, ColumnStat]
    target: TargetStat | None = None
    weights: WeightStat | None = None

    def __sizeof__(self) -> int:
        """The bytes held (Dask sizes task results with ``sys.getsizeof``: without this a fragment's
        statistics, megabytes of quantile summaries, counted as a few dozen bytes and never spilled)."""
        size = object.__sizeof__(self)
        for c in self.columns.values():
            if c.numeric is not None:
                size += c.numeric.values.nbytes + c.numeric.counts.nbytes
            if c.strings is not None:
                size += sum(64 + len(k) for k in c.strings.counts)
        if self.target is not None:
            size += 200 * len(self.target.per_group)
        return size

    def merge(self, other: "TableStats") -> "TableStats":
        columns = {name: stat.merge(other.columns[name]) for name, stat in self.columns.items()}
        target = None
        if self.target is not None:
            target = self.target.merge(other.target)
        weights = None if self.weights is None else self.weights.merge(other.weights)
        return TableStats(self.n_rows + other.n_rows, columns, target, weights)


def column_kind(series, name: str) -> str:
    """``numeric`` (numbers, booleans) or ``categorical`` (strings); anything else is a DataError."""
    import pandas as pd
    from pandas.api import types as pdt

    dtype = series.dtype
    if pdt.is_bool_dtype(dtype) or pdt.is_numeric_dtype(dtype):
        return "numeric"
    if isinstance(dtype, pd.CategoricalDtype) or pdt.is_string_dtype(dtype) or pdt.is_object_dtype(dtype):
        return "categorical"
    raise DataError(
        f"column '{name}' has type {dtype}, which calengine does not encode (numeric, boolean, string"
        f" and text columns are supported); leave it out with exclude {name} or convert it", parameter="exclude")


def as_float(series) -> np.ndarray:
    """Float64 values of a numeric column, NaN for missing and non-finite values."""
    import pandas as pd

    values = pd.to_numeric(series, errors="coerce") if series.dtype == object else series
    # one conversion, always a fresh array (never a view of the caller's frame, which we modify)
    arr = values.to_numpy(dtype=np.float64, na_value=np.nan, copy=True)
    bad = ~np.isfinite(arr)
    if bad.any():
        arr[bad] = np.nan
    return arr


def as_text(series) -> np.ndarray:
    """Strings with missing values as ``None``.  Missing is what pandas calls missing: ``None``, NaN
    and ``pd.NA`` -- pandas 3 reads a string column with nulls as ``StringDtype`` holding ``pd.NA``,
    whose truth value raises, so no per-value ``v != v`` test."""
    import pandas as pd

    missing = np.asarray(pd.isna(series), dtype=bool)
    out = np.empty(len(missing), dtype=object)
    for i, (v, gone) in enumerate(zip(series.tolist(), missing)):
        out[i] = None if gone else str(v)
    return out


def partition_stats(
    df, feature_columns: list[str], target: str | None = None, where: str = "the table",
    group_keys: list[tuple[str, int]] | None = None, group_rows: list[int] | None = None,
    text_columns: tuple[str, ...] = (), weight: str | None = None,
) -> TableStats:
    """Statistics of one partition's rows (runs in tasks).

    ``group_keys``/``group_rows``: the (file key, row group) and row count of each row group the rows
    come from, in order; the target's label counts are kept per row group (for stratified folds).
    Columns named in ``text_columns`` are hashed, which needs no statistics beyond their kind.
    ``weight``: the ``--weight`` column, checked (:func:`row_weights`) and summed per label.
    """
    import pandas as pd

    from ..parquet.data import plain_scalar

    columns: dict[str, ColumnStat] = {}
    for name in feature_columns:
        series = df[name]
        kind = column_kind(series, name)
        if kind == "numeric":
            columns[name] = ColumnStat(name, kind, where, numeric=NumericStat.of(as_float(series)))
        elif name in text_columns:
            columns[name] = ColumnStat(name, kind, where, strings=StringStat(n=len(series)))
        else:
            columns[name] = ColumnStat(name, kind, where, strings=StringStat.of(as_text(series)))
    stats = TableStats(len(df), columns)
    if target is not None:
        y = df[target]
        missing = y.isna().to_numpy()
        keys = group_keys or [("", 0)]
        rows = group_rows or [len(df)]
        per_group: dict[tuple[str, int], dict[Any, int]] = {}
        start = 0
        for key, n in zip(keys, rows):
            part = y.iloc[start : start + n][~missing[start : start + n]]
            counts = part.value_counts(sort=False)
            per_group[tuple(key)] = {plain_scalar(v): int(c) for v, c in counts.items()}
            start += n
        stats.target = TargetStat(target, per_group, int(missing.sum()))
        if weight is not None:
            w = row_weights(df[weight], weight, where)
            codes, values = pd.factorize(y[~missing], sort=False)
            live = w[~missing]
            exact = {plain_scalar(v): exact_sum(live[codes == i]) for i, v in enumerate(values)}
            stats.weights = WeightStat(weight, {v: float(t.to_float()[0]) for v, t in exact.items()},
                                       float(w.max()) if w.size else 0.0, exact)
    return stats
