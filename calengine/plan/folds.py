"""Cross-validation folds and training samples without a global shuffle.

A row's fold is a function of the seed, its row group's identity (file key, row group index), its
index within the row group, and the labels of that row group -- nothing else.  So any worker, any
number of workers, and any way of cutting the table into fragments gives every row the same fold.

Within a row group the rows of each class are dealt round the folds in a seeded random order
starting at a seeded random fold: fold ``f`` receives ``floor(m / k)`` or ``ceil(m / k)`` of the
``m`` rows of a class, and which folds get the extra rows varies from row group to row group.  Every
fold is therefore stratified to within one row per class and row group, and the client can count the
rows of every (fold, class) pair from per-row-group label counts alone (:func:`fold_class_counts`),
which is how a too-rare class is caught before any learner runs.

Bounded samples (``--max-train-rows``) draw a seeded uniform number per row from the same identity;
a unit's sample is the rows with the smallest numbers, per class in proportion to the class sizes.
Costing samples (``--weight`` for a learner without weights) draw another, independent number per
row (:func:`fragment_costing_keys`) and keep a row when it is below w / max w.
"""

from __future__ import annotations

import numpy as np

from ..parquet.dataset import file_key_hash
from ..errors import DataError

_FOLD_STREAM = 0x464F4C44  # "FOLD"
_SAMPLE_STREAM = 0x53414D50  # "SAMP"
_COST_STREAM = 0x434F5354  # "COST"


def _rng(seed: int, stream: int, file_key: str, group: int, extra: int = 0) -> np.random.Generator:
    lo, hi = file_key_hash(file_key)
    return np.random.default_rng(
        np.random.SeedSequence([int(seed) & 0xFFFFFFFF, stream, lo, hi, int(group) & 0xFFFFFFFF, int(extra)])
    )


def _offset(seed: int, file_key: str, group: int, c: int, k: int) -> int:
    return int(_rng(seed, _FOLD_STREAM, file_key, group, 2 * c + 1).integers(k))


def group_folds(y: np.ndarray, n_classes: int, k: int, seed: int, file_key: str, group: int) -> np.ndarray:
    """Fold of every row of one row group (``y``: class indices, -1 for rows without a label)."""
    folds = np.full(y.shape[0], -1, dtype=np.int32)
    for c in range(n_classes):
        rows = np.flatnonzero(y == c)
        if rows.size == 0:
            continue
        order = _rng(seed, _FOLD_STREAM, file_key, group, 2 * c).permutation(rows.size)
        folds[rows] = (order + _offset(seed, file_key, group, c, k)) % k
    return folds


def fragment_folds(y: np.ndarray, fragment, n_classes: int, k: int, seed: int) -> np.ndarray:
    """Folds of a fragment's rows (row groups in order)."""
    out = np.empty(y.shape[0], dtype=np.int32)
    start = 0
    for g, n in zip(fragment.row_groups, fragment.group_rows):
        out[start : start + n] = group_folds(y[start : start + n], n_classes, k, seed, fragment.file_key, g)
        start += n
    return out


def fold_class_counts(group_counts: dict, n_classes: int, k: int, seed: int) -> np.ndarray:
    """Rows per (fold, class), shape ``(k, n_classes)``, from per-row-group class counts alone.

    ``group_counts``: ``{(file_key, group): counts array of length n_classes}``.
    """
    out = np.zeros((k, n_classes), dtype=np.int64)
    for (file_key, group), counts in group_counts.items():
        for c in range(n_classes):
            m = int(counts[c])
            if m == 0:
                continue
            base, extra = divmod(m, k)
            o = _offset(seed, file_key, group, c, k)
            out[:, c] += base
            # positions 0..m-1 of the permutation land on folds (pos + o) % k: the first ``extra``
            # folds after ``o`` (cyclically) get one row more
            out[(o + np.arange(extra)) % k, c] += 1
    return out


def check_folds(counts: np.ndarray, class_names: list, k: int) -> None:
    """Every fold must hold every class (held out) and so must every fold's training rows."""
    if k < 2:
        raise DataError(f"cv must be at least 2 (got {k}); or use calibration_data for a hold-out table",
                        parameter=("cv", "calibration_data"))
    totals = counts.sum(axis=0)
    from ..parquet.data import check_many_rare_classes

    check_many_rare_classes(totals, k, class_names)
    for c, name in enumerate(class_names):
        if totals[c] < k:
            raise DataError(
                f"the rarest class ({name!r}) has {int(totals[c])} rows, fewer than cv={k} folds: some fold"
                " would hold none of it; lower cv or add data", parameter="cv"
            )
        empty = np.flatnonzero(counts[:, c] == 0)
        if empty.size:
            raise DataError(
                f"fold {int(empty[0])} holds no row of class {name!r} ({int(totals[c])} rows spread over"
                f" row groups too thinly); lower cv or write larger row groups", parameter="cv"
            )


def sample_keys(n: int, seed: int, file_key: str, group: int) -> np.ndarray:
    """A seeded uniform number in [0, 1) per row of a row group, for bounded samples."""
    return _rng(seed, _SAMPLE_STREAM, file_key, group).random(n)


def fragment_costing_keys(fragment, seed: int) -> np.ndarray:
    """A seeded uniform number in [0, 1) per row of a fragment for costing (rejection) samples: its own
    stream, so a costing sample is independent of ``--max-train-rows``'s sample keys."""
    return np.concatenate([
        _rng(seed, _COST_STREAM, fragment.file_key, g).random(n) for g, n in zip(fragment.row_groups, fragment.group_rows)
    ]) if fragment.group_rows else np.empty(0)


def fragment_sample_keys(fragment, seed: int) -> np.ndarray:
    return np.concatenate(
        [sample_keys(n, seed, fragment.file_key, g) for g, n in zip(fragment.row_groups, fragment.group_rows)]
    ) if fragment.group_rows else np.empty(0)


def table_folds(data, target: str, cv: int = 5, seed: int = 0, positive=None) -> np.ndarray:
    """The fold ``calengine fit`` gives each row of the table at ``data`` (-1: missing label).

    Rows are in file order (files sorted by name, row groups in order), as ``pyarrow`` reads them:
    hand the folds to other tools (e.g. scikit-learn's ``cv=``) to compare like with like.
    """
    from ..parquet.data import LabelSpace
    from ..parquet.dataset import describe_dataset, read_fragment
    from .options import check_cv, check_seed

    cv, seed = check_cv(cv), check_seed(seed)
    dataset = describe_dataset(data, [target])
    columns = [read_fragment(fragment, [target])[target] for fragment in dataset.fragments]
    labels = LabelSpace.from_values({v for series in columns for v in series.dropna().unique()}, target, positive)
    parts = []
    for fragment, series in zip(dataset.fragments, columns):
        y = np.full(len(series), -1, dtype=np.int64)
        present = series.notna().to_numpy()
        y[present] = labels.encode(series[present])
        parts.append(fragment_folds(y, fragment, labels.n_classes, cv, seed))
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int32)


def table_splits(data, target: str, cv: int = 5, seed: int = 0, positive=None) -> list[tuple[np.ndarray, np.ndarray]]:
    """``calengine fit --cv``'s folds of the table at ``data`` as (train rows, held-out rows) pairs, for
    ``CalibratedClassifier(cv=...)`` or scikit-learn's ``cv=``.

    A row's fold depends on the file and row group it was read from (see the module docstring), which
    an in-memory array does not have; so ``CalibratedClassifier(cv=5)`` deals its own seeded
    stratified folds, and passing these splits (rows in the order ``pyarrow`` reads the table) is how
    a notebook fit reproduces ``calengine fit`` bit for bit.  Rows with a missing label are in no split.
    """
    folds = table_folds(data, target, cv, seed, positive)
    every = np.arange(folds.size)
    return [(every[(folds != f) & (folds >= 0)], every[folds == f]) for f in range(int(cv))]
