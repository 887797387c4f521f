"""Plan -> Dask tasks -> fitted members.  Graph building only; what runs inside tasks is in tasks/arrays.py.

The training data are scattered once (``broadcast=True``: every worker receives them once, not once
per task).  Tasks carry a fold number, the unfitted learner and calibrator, and a seed derived from
the user's seed and the task's identity, so the same seed gives the same model on any scheduler and
any number of workers.  Results are gathered in submission order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..tasks import arrays as tasks
from ..errors import ParameterError
from ..model.calibrated import Member, RawMap, raw_kind_of
from ..runtime.progress import Progress, gather_in_order

MODES = ("ensemble", "refit")


@dataclass(frozen=True)
class CalibrationPlan:
    """What must be fitted for cross-validated (or hold-out) calibration."""

    learner: object
    calibrator: object
    mode: str = "ensemble"  # "ensemble" | "refit"; ignored with a hold-out table or ``uncalibrated``
    cv: int = 5
    seed: int = 0
    uncalibrated: bool = False  # the ``none`` method: one learner on all rows, its own probabilities

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ParameterError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}", parameter="mode")


def scatter(client, obj):
    """Send ``obj`` to every worker once; tasks then refer to it by key."""
    return client.scatter(obj, broadcast=True, hash=False)


def fit_members(
    client,
    data: tasks.TrainingData,
    plan: CalibrationPlan,
    cal_data: tasks.TrainingData | None = None,
    progress: Progress | None = None,
) -> list[Member]:
    if plan.uncalibrated or cal_data is not None:
        data_f = scatter(client, data)
        cal_f = scatter(client, cal_data) if cal_data is not None else None
        fut = client.submit(
            tasks.fit_member, data_f, None, plan.learner, plan.calibrator,
            tasks.task_seed(plan.seed, 0), cal_f, pure=False,
        )
        return gather_in_order(client, [fut], progress, "fit")
    if data.folds is None and data.splits is None:
        raise ValueError("cross-validated calibration needs fold assignments in TrainingData.folds (or .splits)")
    data_f = scatter(client, data)
    if plan.mode == "ensemble":
        futures = [
            client.submit(
                tasks.fit_member, data_f, fold, plan.learner, plan.calibrator,
                tasks.task_seed(plan.seed, fold), pure=False,
            )
            for fold in range(plan.cv)
        ]
        return gather_in_order(client, futures, progress, "fit folds")
    return _fit_refit(client, data, data_f, plan, progress)


def _fit_refit(client, data, data_f, plan: CalibrationPlan, progress) -> list[Member]:
    """Out-of-fold scores calibrate; the learner is refitted on all rows (in parallel with the folds)."""
    fold_futures = [
        client.submit(tasks.fit_and_score, data_f, fold, plan.learner, tasks.task_seed(plan.seed, fold), pure=False)
        for fold in range(plan.cv)
    ]
    full_future = client.submit(
        tasks.fit_learner, data_f, None, plan.learner, tasks.task_seed(plan.seed, plan.cv), pure=False
    )
    *fold_scores, learner = gather_in_order(client, fold_futures + [full_future], progress, "fit folds")
    S = np.empty((len(data.y), fold_scores[0].shape[1]))
    for fold, scores in enumerate(fold_scores):
        S[data.folds == fold] = scores
    cal_future = client.submit(
        tasks.fit_calibrators_on_scores, S, data_f, plan.calibrator, learner.score_kind, raw_kind_of(learner), pure=False
    )
    calibrators = cal_future.result()
    return [Member([learner], [list(range(S.shape[1]))], calibrators, RawMap.fit(S, learner.score_kind))]


def fit_code_members(
    client,
    data: tasks.TrainingData,
    plan: CalibrationPlan,
    M: np.ndarray,
    progress: Progress | None = None,
) -> list[Member]:
    """Code-matrix multiclass: one binary learner and calibrator per column, columns x folds as tasks.

    Ensemble mode gives one member per fold, each holding every column; refit mode calibrates each
    column on its out-of-fold scores and refits its learner on all of the column's rows.
    """
    data_f = scatter(client, data)
    M_f = scatter(client, np.asarray(M, dtype=np.int8))
    n_cols = M.shape[1]
    if plan.mode == "ensemble":
        futures = [
            client.submit(
                tasks.fit_column, data_f, M_f, b, fold, plan.learner, plan.calibrator,
                tasks.task_seed(plan.seed, fold, b), pure=False,
            )
            for fold in range(plan.cv)
            for b in range(n_cols)
        ]
        results = gather_in_order(client, futures, progress, "fit columns")
        members = []
        for fold in range(plan.cv):
            chunk = results[fold * n_cols : (fold + 1) * n_cols]
            members.append(
                column_member([r[0] for r in chunk], [r[1] for r in chunk], [(r[2], r[3]) for r in chunk])
            )
        return members
    score_futures = [
        client.submit(tasks.fit_column_scores, data_f, M_f, b, fold, plan.learner,
                      tasks.task_seed(plan.seed, fold, b), pure=False)
        for b in range(n_cols)
        for fold in range(plan.cv)
    ]
    learner_futures = [
        client.submit(tasks.fit_column_learner, data_f, M_f, b, plan.learner,
                      tasks.task_seed(plan.seed, plan.cv, b), pure=False)
        for b in range(n_cols)
    ]
    results = gather_in_order(client, score_futures + learner_futures, progress, "fit columns")
    learners = results[len(score_futures):]
    calibrator_futures, ranges = [], []
    for b in range(n_cols):
        parts = results[b * plan.cv : (b + 1) * plan.cv]
        rows = np.concatenate([held for held, _ in parts])
        scores = np.concatenate([s for _, s in parts])
        order = np.argsort(rows, kind="stable")
        ranges.append((float(scores.min()), float(scores.max())))
        calibrator_futures.append(
            client.submit(tasks.fit_column_calibrator, scores[order], data_f, M_f, b, rows[order],
                          plan.calibrator, learners[b].score_kind, pure=False)
        )
    calibrators = client.gather(calibrator_futures)
    return [column_member(learners, calibrators, ranges)]


def column_member(learners, calibrators, ranges: list[tuple[float, float]]) -> Member:
    """A member whose learner ``b`` scores column ``b``; raw baseline from held-out score ranges."""
    kind = learners[0].score_kind
    n = len(learners)
    if kind == "proba":
        raw = RawMap(kind, np.zeros(n), np.ones(n))
    else:
        a = np.array([max(abs(r[0]), abs(r[1])) for r in ranges])
        raw = RawMap(kind, -a, a)
    return Member(list(learners), [[b] for b in range(n)], list(calibrators), raw)
