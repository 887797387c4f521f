"""In-task code for Probing and bagging: fit one weighted (or costed, or bootstrapped) binary classifier
and return it with its 0/1 votes on the training rows.  Pure, module-level, picklable; randomness only
from the seed passed in.
"""

from __future__ import annotations

import time

import numpy as np

from ..methods import probing
from ..model.calibrated import as_columns
from ..model.vote import Voter
from .arrays import TrainingData, learner_errors, seeded
from ..runtime.threads import pin_native_threads

log_name = "calengine.fit.probing"


def binary_target(data: TrainingData, column_class: int | None) -> np.ndarray:
    """0/1 target of a reduction column: the positive class for two classes, else ``y == class``."""
    if column_class is None:
        return (data.y == 1).astype(np.int64)
    return (data.y == column_class).astype(np.int64)


def fit_or_constant(X, y01, w, learner, seed: int) -> Voter:
    only = probing.single_class_label(y01)
    if only is not None:
        import logging

        logging.getLogger(log_name).info("sample holds only class %d: constant classifier", only)
        return Voter(constant=int(only))
    est = seeded(learner, seed)
    pin_native_threads()
    with learner_errors(est):
        if w is None:
            est.fit(X, y01)
        else:
            est.fit(X, y01, sample_weight=w)
    return Voter(learner=est)


def fit_probe(
    data: TrainingData,
    column_class: int | None,
    p: float,
    learner,
    seed: int,
    weighting: str,
    bounded: bool,
) -> tuple[Voter, np.ndarray]:
    """One classifier of Probing at threshold ``p`` and its votes on all training rows.

    ``weighting="weights"`` passes i_p(y) as sample weights; ``"costing"`` draws one rejection sample
    with acceptance c/Z (Zadrozny, Langford & Abe) and fits unweighted.  User sample weights multiply in.
    """
    y01 = binary_target(data, column_class)
    c = probing.importance_weights(y01, p, bounded=bounded)
    if data.w is not None:
        c = c * data.w
    if weighting == "weights":
        voter = fit_or_constant(data.X, y01, c, learner, seed)
    else:
        rng = np.random.default_rng(seed)
        keep = rng.random(len(y01)) < probing.acceptance_from_costs(c)
        if not keep.any():
            keep[np.argmax(c)] = True
        idx = np.flatnonzero(keep)
        voter = fit_or_constant(data.X[idx], y01[idx], None, learner, seed)
    pin_native_threads()
    return voter, voter.votes(data.X)


def fit_probes(
    data: TrainingData,
    learner,
    weighting: str,
    bounded: bool,
    probes: list[tuple[int | None, float, int]],
) -> list[tuple[Voter, np.ndarray, float]]:
    """:func:`fit_probe` for each ``(column_class, p, seed)`` of ``probes`` in turn, in one task.

    Each result also carries the CPU seconds its fit took in this thread (``time.thread_time``, so
    neither waiting for a core nor other threads count): the driver uses them only to guess how
    long the next thresholds nearby will take and submit the longest first, never to change a
    result.  The driver sends one probe per task when the cluster has several threads (so any free
    thread takes the next fit) and a whole round in one task when it has one thread only (nothing
    can run in parallel, and every task costs the scheduler a round trip).
    """
    out = []
    for column_class, p, seed in probes:
        start = time.thread_time()
        voter, votes = fit_probe(data, column_class, p, learner, seed, weighting, bounded)
        out.append((voter, votes, time.thread_time() - start))
    return out


def fit_bootstrap(data: TrainingData, column_class: int | None, learner, seed: int) -> tuple[Voter, np.ndarray]:
    """One bagging classifier on a bootstrap sample (n rows drawn with replacement) and its votes."""
    y01 = binary_target(data, column_class)
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.integers(0, len(y01), size=len(y01)))
    w = None if data.w is None else data.w[idx]
    voter = fit_or_constant(data.X[idx], y01[idx], w, learner, seed)
    pin_native_threads()
    return voter, voter.votes(data.X)


def learner_scores(voter: Voter, data: TrainingData) -> np.ndarray:
    """Training scores of the first classifier, for the raw-learner baseline of evaluation."""
    if voter.learner is None:
        return np.full((data.X.shape[0], 1), float(voter.constant))
    pin_native_threads()
    return as_columns(voter.learner.score(data.X))[:, :1]
