"""How the Dask driver of Probing hands out a round's fits: longest expected first, one task per fit on a
multi-thread cluster and one task per round on a one-thread cluster, and never a different model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import calengine
from calengine.plugins import registry
from calengine.fit import probing as fp
from calengine.methods import probing
from calengine.tasks.arrays import TrainingData, task_seed
from calengine.tasks.probing import fit_probe, fit_probes

DATA = Path(__file__).resolve().parents[2] / "data"
SETTINGS = {**fp.PROBING_DEFAULTS, "t": 15, "batch": 4, "weighting": "weights"}


@pytest.fixture(scope="module")
def pima():
    df = pd.read_parquet(DATA / "pima.parquet")
    return df.drop(columns=["class"]).to_numpy(float), df["class"].to_numpy()


def test_expected_seconds_is_the_mean_of_the_fitted_neighbours():
    fitted = [(0.2, 1.0), (0.5, 3.0), (0.8, 7.0)]
    assert fp.expected_seconds(0.3, fitted) == 2.0  # (1 + 3) / 2
    assert fp.expected_seconds(0.6, fitted) == 5.0  # (3 + 7) / 2
    assert fp.expected_seconds(0.1, fitted) == 1.0  # nothing fitted below: the one above
    assert fp.expected_seconds(0.9, fitted) == 7.0
    assert fp.expected_seconds(0.5, []) == 0.0


def test_longest_first_keeps_the_schedule_order_among_equal_guesses():
    probes = [fp.Probe(0, i, 0, None, p, 0, e) for i, (p, e) in enumerate([(0.5, 1.0), (0.2, 2.0), (0.8, 1.0), (0.1, 2.0)])]
    assert [pr.index for pr in fp.longest_first(probes)] == [1, 3, 0, 2]


class InlineClient:
    """Runs each submitted task at once in this thread and records it.

    ``seconds(p)`` replaces the CPU time a fit reports, so the order of the next rounds' submissions
    is known in advance; ``threads`` is what the cluster claims to have.
    """

    def __init__(self, threads: int, seconds):
        self.threads, self.seconds, self.tasks = threads, seconds, []

    def nthreads(self):
        return {"tcp://w": self.threads}

    def submit(self, fn, *args, pure=True):
        assert fn is fit_probes and not pure
        probes = args[-1]
        self.tasks.append([p for _, p, _ in probes])
        return [(v, votes, self.seconds(p)) for (v, votes, _), (_, p, _) in zip(fn(*args), probes)]

    def gather(self, futures):
        return list(futures)


def _drive(pima, threads, seconds):
    X, y = pima
    learner = registry.make_learner("decision_tree", {"max_depth": 3})
    client = InlineClient(threads, seconds)
    voters, boundaries = fp._fit_probing(client, TrainingData(X, y), len(y), [None], learner, SETTINGS, 7, None)
    return client.tasks, voters, boundaries


def test_fits_go_longest_expected_first_and_the_order_never_changes_the_model(pima):
    X, _ = pima
    # reported seconds = p: a new threshold's guess is the mean of its fitted neighbours, so every
    # round from the third on (the first two have no or equal guesses) is submitted in decreasing p
    rounds, voters, boundaries = _drive(pima, 1, lambda p: p)  # one task per round: the rounds
    assert [len(r) for r in rounds] == [1, 2, 4, 4, 4]
    assert all(r == sorted(r, reverse=True) for r in rounds[2:]), rounds
    tasks, voters_2, boundaries_2 = _drive(pima, 2, lambda p: p)
    assert all(len(task) == 1 for task in tasks)  # one fit per task on a multi-thread cluster
    assert [task[0] for task in tasks] == [p for r in rounds for p in r]
    # the opposite guesses submit those rounds in increasing p, and nothing else changes
    rounds_rev, voters_rev, boundaries_rev = _drive(pima, 1, lambda p: 1.0 - p)
    assert all(r == sorted(r) for r in rounds_rev[2:]) and rounds_rev[2] != rounds[2]
    for other_voters, other_boundaries in ((voters_2, boundaries_2), (voters_rev, boundaries_rev)):
        np.testing.assert_array_equal(other_boundaries[0], boundaries[0])
        assert len(other_voters[0]) == len(voters[0]) == 15
        for a, b in zip(voters[0], other_voters[0]):
            np.testing.assert_array_equal(a[0].votes(X), b[0].votes(X))


def test_the_driver_fits_what_the_reference_loop_fits(pima):
    """run_probing with fit_probe in a plain loop and the same seeds: the benchmark's reference."""
    X, y = pima
    _, voters_1, boundaries_1 = _drive(pima, 1, lambda p: p)
    learner = registry.make_learner("decision_tree", {"max_depth": 3})
    data = TrainingData(X, y)
    ref: list = []

    def fit_round(thresholds):
        out = []
        for p in thresholds:
            voter, votes = fit_probe(data, None, p, learner, task_seed(7, 0, len(ref), 0), "weights", False)
            ref.append(voter)
            out.append(votes)
        return out

    sched = probing.run_probing(fit_round, len(y), SETTINGS["t"], "cross_entropy", SETTINGS["batch"])
    np.testing.assert_array_equal(sched.boundaries, boundaries_1[0])
    for mine, theirs in zip(voters_1[0], ref):
        np.testing.assert_array_equal(mine[0].votes(X), theirs.votes(X))


def test_one_and_two_workers_give_the_same_bits_through_the_engine(pima):
    X, y = pima
    kw = dict(learner_params={"max_depth": 4}, method_params={"t": 20, "batch": 6}, seed=3)
    P = [calengine.CalibratedClassifier("decision_tree", "probing", workers=w, **kw).fit(X, y).predict_proba(X)
         for w in (1, 2)]
    np.testing.assert_array_equal(P[0], P[1])
    assert len(np.unique(P[0][:, 1])) > 5  # not a constant model
