"""Reading a fragment's numeric columns from Arrow into NumPy, without pandas (runs in tasks).

The pandas path of :mod:`calengine.tasks.partitions` (``read_fragment``, a DataFrame, the encoder's
``transform``, ``LabelSpace.encode``) serves every table; a fit of score columns or of a ``--prefit``
model, or a learner's fit of a table of numbers, reads only numeric columns and an integer target,
which NumPy takes from Arrow directly.  That
was the only reason such a fit imported pandas (~0.6 s of CPU, in its first task), and its frames and
``value_counts`` cost another ~0.5 s at 10M rows (``benchmarks/results/score_columns_speed_s8.md``).
Each function here returns what the pandas path returns, or None when its conditions do not hold
(the caller then takes the pandas path); apart from :mod:`~calengine.tasks.partitions` to keep that
module under ~600 lines.
"""

from __future__ import annotations

import numpy as np


def integer_labels(table, target: str):
    """The target of an Arrow record batch as a NumPy integer array, or None unless it is an integer column
    without missing values (what :func:`load_numeric_part` and :func:`target_counts` read)."""
    import pyarrow.types as pat

    from ..parquet.dataset import arrow_numpy

    column = table.column(target)
    if not pat.is_integer(column.type) or column.null_count:
        return None
    return arrow_numpy(column)


def load_numeric_part(fragment, enc, plan, columns: list[str], with_keys: bool, order: str, costing: bool):
    """The arrays of :func:`~calengine.tasks.partitions.load_part`'s ``Part`` (``X, y, folds, keys, w,
    cost_keys``) without pandas, for a model that reads numeric columns as they are (a
    :class:`~calengine.plan.columns.ColumnReader`: score columns, a ``--prefit`` model's features)
    or encodes only numeric columns that arrive as Arrow numbers (a
    :class:`~calengine.plan.features.FeatureEncoder` whose ``transform_arrow`` applies: a learner on
    a numeric table), and an integer target without missing values with numeric classes; None
    otherwise (the caller reads the fragment through pandas).  The same arrays: the encoders'
    ``transform_arrow`` is their ``transform`` without pandas, and
    :meth:`~calengine.parquet.data.LabelSpace.encode_integers` is ``encode``'s comparison.  For a
    learner's fit of a 10M x 20 table the pandas frames were ~15 % of the tasks' time (py-spy)."""
    from ..parquet.dataset import arrow_numpy, read_fragment_arrow
    from ..plan.columns import ColumnReader
    from ..plan.features import FeatureEncoder
    from ..plan.folds import fragment_costing_keys, fragment_folds, fragment_sample_keys

    if not isinstance(enc.encoder, (ColumnReader, FeatureEncoder)) or not enc.labels._numeric():
        return None
    table = read_fragment_arrow(fragment, columns)  # a RecordBatch
    if table is None:
        return None
    y = integer_labels(table, enc.target)
    X = enc.encoder.transform_arrow(table, order=order) if y is not None else None
    if X is None:
        return None
    y = enc.labels.encode_integers(y)
    folds = (fragment_folds(y, fragment, enc.labels.n_classes, plan.cv, plan.seed)
             if plan is not None and plan.cv else None)
    keys = fragment_sample_keys(fragment, plan.seed if plan else 0) if with_keys else None
    w = arrow_numpy(table.column(enc.weight)).astype(np.float64) if enc.weight else None
    cost_keys = fragment_costing_keys(fragment, plan.seed if plan else 0) if costing else None
    return X, y, folds, keys, w, cost_keys


def target_counts(fragment, target: str, keys: list):
    """:func:`~calengine.tasks.partitions.fragment_table_stats` of a fit that reads no feature
    statistics (score columns, a ``--prefit`` model) and no weights, without pandas: the per-row-group label counts of an integer
    target without missing values (None for any other target: the caller takes the general path).
    The same counts, keyed by the same Python ints (pandas' ``value_counts`` through ``_plain``)."""
    from ..parquet.dataset import read_fragment_arrow
    from ..reductions.column_stats import TableStats

    table = read_fragment_arrow(fragment, [target])
    y = None if table is None else integer_labels(table, target)
    if y is None:
        return None
    return TableStats(len(y), {}, _target_stat(fragment, target, keys, y))


def numeric_table_stats(fragment, table, feature_columns: list[str], target: str, keys: list):
    """:func:`~calengine.tasks.partitions.fragment_table_stats` of a learner's fit on a table of numbers,
    without pandas, from ``table`` (the fragment's Arrow Table, ``read_fragment_table``): every
    feature column an Arrow integer or floating column in the file (not a Hive key), an integer
    target without missing values, no weights; None otherwise (the caller converts the same table to
    pandas, so nothing is read twice).

    Why: the planning pass reads every feature column once for the encoder's statistics (the median
    that fills a missing value, whether a column has missing values); converting the fragment to a
    DataFrame and each column back to NumPy was about half of that pass on a 10M x 20 table (py-spy).
    The same statistics: each column is the float64 array ``as_float`` makes of the pandas column
    (Arrow's nulls and non-finite values NaN), summarised by the same ``NumericStat.of``; the label
    counts are :func:`target_counts`'."""
    import pyarrow as pa
    import pyarrow.types as pat

    from ..parquet.dataset import arrow_numpy
    from ..reductions.column_stats import ColumnStat, NumericStat, TableStats

    names = list(dict.fromkeys([*feature_columns, target]))
    schema = table.schema
    if any(schema.get_field_index(c) < 0 for c in names) or not all(
            pat.is_integer(schema.field(c).type) or pat.is_floating(schema.field(c).type) for c in feature_columns):
        return None
    batch = pa.RecordBatch.from_arrays([table.column(c).combine_chunks() for c in names], names=names)
    y = integer_labels(batch, target)
    if y is None:
        return None
    where = f"'{fragment.path}'"
    columns = {}
    for name in feature_columns:
        values = np.array(arrow_numpy(batch.column(name)), dtype=np.float64)  # a fresh, writable copy
        if not np.isfinite(np.add.reduce(values)):  # a finite sum: no NaN or infinity to mark
            values[~np.isfinite(values)] = np.nan
        columns[name] = ColumnStat(name, "numeric", where, numeric=NumericStat.of(values))
    return TableStats(len(y), columns, _target_stat(fragment, target, keys, y))


def _target_stat(fragment, target: str, keys: list, y: np.ndarray):
    """Per-row-group label counts of integer labels ``y`` (no missing values), keyed by Python ints as
    pandas' ``value_counts`` through ``plain_scalar`` keys them."""
    from ..reductions.column_stats import TargetStat

    per_group = {}
    start = 0
    for key, n in zip(keys, fragment.group_rows):
        values, counts = _value_counts(y[start : start + n])
        per_group[tuple(key)] = {int(v): int(c) for v, c in zip(values, counts)}
        start += n
    return TargetStat(target, per_group, 0)


#: widest range of integer labels counted by ``bincount`` (one counter per value in the range)
_BINCOUNT_SPAN = 1 << 16


def _value_counts(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(y, return_counts=True)`` of integer labels: the values present, increasing, and
    their counts.  Labels within :data:`_BINCOUNT_SPAN` of each other are counted by one ``bincount``
    instead of sorting the row group (the sort was ~8 % of a 10M-row sigmoid fit's CPU)."""
    if y.size == 0:
        return np.unique(y, return_counts=True)
    lo, hi = int(y.min()), int(y.max())
    if hi - lo >= _BINCOUNT_SPAN:
        return np.unique(y, return_counts=True)
    counts = np.bincount(y.astype(np.intp) - lo, minlength=hi - lo + 1)
    present = np.flatnonzero(counts)
    return present + lo, counts[present]
