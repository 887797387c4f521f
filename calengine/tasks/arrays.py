"""Functions that run inside Dask tasks: pure, module-level, picklable.

They receive plain objects (unfitted learner/calibrator instances, index arrays, the scattered
:class:`TrainingData`) and return plain fitted objects.  They never touch the plugin manager and never
draw randomness from anything but the seed they are given, so a task gives the same bits on any
worker.  BLAS/OpenMP pools are pinned to one thread per process
(:func:`calengine.runtime.threads.pin_native_threads`): Dask already runs tasks in parallel, and a
fixed thread count keeps floating-point reductions identical on any cluster layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model.calibrated import Member, RawMap, as_columns, matrix_scores, raw_kind_of
from ..plugins.calls import plugin_errors
from ..runtime.threads import pin_native_threads


@dataclass
class TrainingData:
    """Encoded features, class indices, optional sample weights and the fold of each row.

    Scattered to workers once; tasks then carry only a fold number, never row indices.
    """

    X: Any
    y: np.ndarray
    w: np.ndarray | None = None
    folds: np.ndarray | None = None
    #: explicit (train rows, held-out rows) pairs that do not partition the rows (e.g. ShuffleSplit
    #: from the Python API); when set, fold ``i`` means pair ``i`` and ``folds`` is unused
    splits: tuple | None = None

    def __sizeof__(self) -> int:
        # what Dask's memory accounting (sys.getsizeof) sees of scattered or assembled training data
        from dask.sizeof import sizeof

        return object.__sizeof__(self) + sum(sizeof(a) for a in (self.X, self.y, self.w, self.folds) if a is not None)

    def rows(self, idx: np.ndarray | None):
        if idx is None:
            return self.X, self.y, self.w
        from ..plugins.batch_probe import take_rows  # X is a DataFrame for a FrozenEstimator: the caller's rows

        return take_rows(self.X, idx), self.y[idx], (None if self.w is None else self.w[idx])

    def split(self, fold: int | None) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(training rows, held-out rows) for ``fold``; (None, None) means all rows for both."""
        if fold is None:
            return None, None
        if self.splits is not None:
            return self.splits[fold]
        held = self.folds == fold
        return np.flatnonzero(~held), np.flatnonzero(held)

    def masks(self, fold: int) -> tuple[np.ndarray, np.ndarray]:
        """(training, held-out) boolean masks of ``fold`` over all rows."""
        train, held = self.split(fold)
        n = len(self.y)
        tr, he = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        tr[train] = True
        he[held] = True
        return tr, he


def learner_errors(learner):
    """Turn any failure of a learner's own code (scikit-learn raises ValueError, LinAlgError, ...) into
    a :class:`LearnerError` naming the learner and its distribution, so the CLI prints one line instead
    of a traceback (see :mod:`calengine.plugins.calls`)."""
    from ..plugins.calls import plugin_errors

    return plugin_errors(learner, "fit")


def task_seed(seed: int, *identity: int) -> int:
    """A 31-bit seed derived from the user's seed and a task's identity, independent of scheduling."""
    ss = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, *[int(i) & 0xFFFFFFFF for i in identity]])
    return int(ss.generate_state(1)[0] & 0x7FFFFFFF)


def seeded(estimator, seed: int):
    """A fresh copy of ``estimator`` (:func:`calengine.base.fresh_copy`: a plugin learner is copied without
    importing scikit-learn, which a fit from statistics never calls); a ``random_state`` left at None
    is set to ``seed``."""
    from ..base import fresh_copy

    est = fresh_copy(estimator)
    params = est.get_params(deep=False)
    if "random_state" in params and params["random_state"] is None:
        est.set_params(random_state=seed)
    return est


def column_targets(y: np.ndarray, n_columns: int) -> list[np.ndarray]:
    """0/1 targets of the one-vs-rest columns: the positive class for two classes, each class else."""
    if n_columns == 1:
        return [(y == 1).astype(np.int64)]
    return [(y == c).astype(np.int64) for c in range(n_columns)]


def fit_learner(data: TrainingData, idx: np.ndarray | None, learner, seed: int):
    """Fit a fresh copy of ``learner`` on the rows ``idx`` (all rows when None); weighted rows reach a
    learner without ``sample_weight`` as a costing sample (:func:`costing_sample`)."""
    X, y, w = data.rows(idx)
    if w is not None and not learner.accepts_sample_weight:
        X, y, w = costing_sample(X, y, w, seed)
    pin_native_threads()
    est = seeded(learner, seed)
    with learner_errors(est):
        est.fit(X, y, sample_weight=w) if w is not None else est.fit(X, y)
    return est


#: the costing sample's own random stream beside a fit's seed (the learner's random_state uses the seed)
_COSTING_STREAM = 0xC0571


def costing_sample(X, y: np.ndarray, w: np.ndarray, seed: int):
    """``(X, y, None)`` of the rows of a costing sample: each row kept with probability ``w / max(w)``
    (Zadrozny, Langford & Abe 2003), as ``calengine fit --weight`` trains such learners, so a learner
    without ``sample_weight`` trains on the weighted distribution.  Seeded by the fit's seed: the
    same model on any scheduler.  Weights 0 and 1 give exactly the rows of weight 1.

    A class of positive weight whose rows all missed the draw keeps the one row that came nearest to
    acceptance (:func:`nearest_misses`), as Probing's costing keeps its heaviest row when a draw is
    empty: a learner that never saw a class cannot score it, and the calibrators, which get the true
    weights, correct the learner's view of that class's frequency.  Rows are returned in their order."""
    from ..errors import DataError

    top = float(w.max()) if w.size else 0.0
    if not top > 0:
        raise DataError("sample_weight sums to zero; at least one row needs a positive weight")
    keys = np.random.default_rng([int(seed), _COSTING_STREAM]).random(w.shape[0])
    keep = keys < w / top
    keep[nearest_misses(keys, w / top, keep, y)] = True
    keep = np.flatnonzero(keep)
    check_costing_sample(y[keep], np.unique(y).size)
    return X[keep], y[keep], None


def nearest_misses(keys: np.ndarray, accept: np.ndarray, kept: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Indices of the rows a costing sample adds so that every class of positive weight is in it: for
    each class without a kept row, its row of positive acceptance with the smallest ``key /
    acceptance`` (the draw that came nearest to keeping it).  Empty when every class with weight was
    drawn, which is the rule for all but tiny or lopsided tables."""
    return nearest_per_class(keys, accept, ~kept & (accept > 0) & ~np.isin(target, target[kept]), target)


def nearest_per_class(keys: np.ndarray, accept: np.ndarray, candidates: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Sorted indices of each class's candidate row (``candidates``: a mask of rows with positive
    acceptance) with the smallest ``key / acceptance``; ties go to the first row, so a sample built
    fragment by fragment in a fixed order picks the same rows on any worker."""
    rows = np.flatnonzero(candidates)
    if rows.size == 0:
        return rows
    ratio = keys[rows] / accept[rows]
    order = np.lexsort((ratio, target[rows]))  # by class, then nearest first; lexsort is stable
    first = np.r_[True, np.diff(target[rows][order]) != 0]
    return np.sort(rows[order][first])


def check_costing_sample(t: np.ndarray, n_classes: int) -> None:
    """A costing sample must still hold every class (else the learner could not be fitted); after
    :func:`nearest_misses` only a class whose every training row has weight 0 can be absent."""
    from ..errors import DataError

    if np.unique(t).size < n_classes:
        raise DataError(
            "a class has weight 0 in every training row of a learner without sample_weight, so its costing"
            " sample lacks the class and the learner cannot be fitted; give that class positive weights,"
            " drop its rows, or use a learner that accepts sample weights"
        )


def score_rows(learner, data: TrainingData, idx: np.ndarray | None) -> np.ndarray:
    X, _, _ = data.rows(idx)
    pin_native_threads()
    from ..plugins.batch_probe import scores_of

    with plugin_errors(learner, "score"):
        return as_columns(scores_of(learner, X))


def fit_calibrators(S: np.ndarray, y: np.ndarray, w: np.ndarray | None, calibrator, score_kind: str,
                    raw_kind: str = "") -> list:
    """One fresh calibrator per score column, fitted on that column's one-vs-rest targets; a multiclass
    scaling (``calibrator.multiclass``) of k > 1 columns: one calibrator of the whole matrix."""
    from sklearn.base import clone

    if getattr(calibrator, "multiclass", False) and S.shape[1] > 1:
        cal = clone(calibrator)
        with plugin_errors(cal, "fit"):
            cal.fit(matrix_scores(S, raw_kind), y, sample_weight=w, score_kind=score_kind)
        return [cal]
    fitted = []
    for b, target in enumerate(column_targets(y, S.shape[1])):
        cal = clone(calibrator)
        with plugin_errors(cal, "fit"):
            cal.fit(S[:, b], target, sample_weight=w, score_kind=score_kind)
        fitted.append(cal)
    return fitted


def fit_member(
    data: TrainingData,
    fold: int | None,
    learner,
    calibrator,
    seed: int,
    cal_data: TrainingData | None = None,
) -> Member:
    """Learner on the rows outside ``fold``, calibrators on its scores for the rows of ``fold``.

    ``fold=None``: the learner sees every row, and the calibrators see ``cal_data`` if given, else the
    training rows themselves (used only by the uncalibrated ``none`` method).
    """
    train_idx, cal_idx = data.split(fold)
    fitted = fit_learner(data, train_idx, learner, seed)
    source = cal_data if cal_data is not None else data
    S = score_rows(fitted, source, None if cal_data is not None else cal_idx)
    _, y_cal, w_cal = source.rows(None if cal_data is not None else cal_idx)
    calibrators = fit_calibrators(S, y_cal, w_cal, calibrator, fitted.score_kind, raw_kind_of(fitted))
    n_cols = S.shape[1]
    return Member([fitted], [list(range(n_cols))], calibrators, RawMap.fit(S, fitted.score_kind))


def fit_and_score(data: TrainingData, fold: int, learner, seed: int) -> np.ndarray:
    """Out-of-fold scores for the rows of ``fold`` from a learner fitted on the others (refit mode)."""
    train_idx, held_idx = data.split(fold)
    fitted = fit_learner(data, train_idx, learner, seed)
    return score_rows(fitted, data, held_idx)


def fit_calibrators_on_scores(S: np.ndarray, data: TrainingData, calibrator, score_kind: str, raw_kind: str = "") -> list:
    return fit_calibrators(S, data.y, data.w, calibrator, score_kind, raw_kind)


def column_rows(data: TrainingData, M: np.ndarray, column: int, fold: int | None):
    """(train rows, held-out rows, 0/1 target of all rows) of code-matrix column ``column``.

    A row takes part when its class is non-zero in the column; the fold split is the global one, so
    every column sees the same stratified folds.
    """
    code = M[data.y, column]
    used = code != 0
    target = (code == 1).astype(np.int64)
    if fold is None:
        rows = np.flatnonzero(used)
        return rows, rows, target
    train, held = data.masks(fold)
    return np.flatnonzero(used & train), np.flatnonzero(used & held), target


def fit_column(data: TrainingData, M: np.ndarray, column: int, fold: int | None, learner, calibrator, seed: int):
    """One binary learner for a code-matrix column (on the rows outside ``fold``), its calibrator on
    the held-out rows of that column, and the held-out score range for the raw baseline."""
    train, held, target = column_rows(data, M, column, fold)
    binary = TrainingData(data.X, target, data.w)
    fitted = fit_learner(binary, train, learner, seed)
    S = score_rows(fitted, binary, held)
    _, y_cal, w_cal = binary.rows(held)
    (cal,) = fit_calibrators(S[:, :1], y_cal, w_cal, calibrator, fitted.score_kind)
    return fitted, cal, float(S[:, 0].min()), float(S[:, 0].max())


def fit_column_scores(data: TrainingData, M: np.ndarray, column: int, fold: int, learner, seed: int):
    """Out-of-fold scores of a code-matrix column for the rows of ``fold`` (refit mode)."""
    train, held, target = column_rows(data, M, column, fold)
    binary = TrainingData(data.X, target, data.w)
    fitted = fit_learner(binary, train, learner, seed)
    return held, score_rows(fitted, binary, held)[:, 0]


def fit_column_learner(data: TrainingData, M: np.ndarray, column: int, learner, seed: int):
    train, _, target = column_rows(data, M, column, None)
    return fit_learner(TrainingData(data.X, target, data.w), train, learner, seed)


def fit_column_calibrator(scores: np.ndarray, data: TrainingData, M: np.ndarray, column: int, rows, calibrator, kind):
    _, _, target = column_rows(data, M, column, None)
    w = None if data.w is None else data.w[rows]
    (cal,) = fit_calibrators(scores[:, None], target[rows], w, calibrator, kind)
    return cal
