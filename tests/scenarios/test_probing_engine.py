"""Probing, costing and bagging through the real engine (Dask tasks), with the paper's oracle run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import calengine
from calengine.base import Learner
from calengine.errors import ParameterError

from cli_helpers import assert_one_line_error

DATA = Path(__file__).resolve().parents[2] / "data"  # not relative to the working directory

Q = np.array([0.05, 0.1, 0.2, 0.3, 0.45, 0.55, 0.7, 0.8, 0.9, 0.95])


class ThresholdOracle(Learner):
    """The notes' oracle classifier c_p(x) = 1[q(x) > p], with p read back from Probing's weights.

    Positives weigh (1-p)/p and negatives 1, so p = 1 / (1 + w_pos / w_neg): a perfect weighted
    learner on data whose true D(1|x) is q(x) = X[:, 0].
    """

    name = "threshold_oracle"
    accepts_sample_weight = True
    score_kind = "decision"

    def fit(self, X, y, sample_weight=None):
        w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight)
        self.p_ = 1.0 / (1.0 + w[y == 1].max() / w[y == 0].max())
        return self

    def score(self, X):
        return np.where(X[:, 0] > self.p_, 1.0, -1.0)

    def to_state(self):
        return {"p": self.p_}

    def from_state(self, state):
        self.p_ = float(state["p"])
        return self


def _oracle_fit(loss):
    X = Q[:, None]
    y = np.array([0, 1] * 5)
    clf = calengine.CalibratedClassifier(
        ThresholdOracle(), "probing", method_params={"t": 5, "batch": 1, "loss": loss, "clip": None}
    )
    return clf.fit(X, y), X


def test_oracle_run_reproduces_the_papers_thresholds_and_predictions_cross_entropy():
    clf, X = _oracle_fit("cross_entropy")
    boundaries = clf.model_.members[0].boundaries[0]
    np.testing.assert_allclose(boundaries[1:-1], [0.075717243419, 0.2, 0.5, 0.8, 0.924282756581], atol=1e-9)
    np.testing.assert_allclose(
        clf.predict_proba(X)[:, 1],
        [0.028143, 0.133718, 0.133718, 0.344686, 0.344686, 0.655314, 0.655314, 0.655314, 0.866282, 0.971857],
        atol=1e-6,
    )


def test_oracle_run_reproduces_the_papers_thresholds_and_predictions_squared():
    clf, X = _oracle_fit("squared")
    np.testing.assert_allclose(clf.model_.members[0].boundaries[0][1:-1], [0.125, 0.25, 0.5, 0.75, 0.875])
    np.testing.assert_allclose(
        clf.predict_proba(X)[:, 1], [0.0625, 0.0625, 0.1875, 0.375, 0.375, 0.625, 0.625, 0.8125, 0.9375, 0.9375]
    )


@pytest.fixture(scope="module")
def pima():
    df = pd.read_parquet(DATA / "pima.parquet")
    return df.drop(columns=["class"]).to_numpy(float), df["class"].to_numpy()


def test_probing_predictions_are_clipped_and_ordered_by_votes(pima):
    X, y = pima
    clf = calengine.CalibratedClassifier("decision_tree", "probing", method_params={"t": 30, "batch": 6},
                                         learner_params={"max_depth": 4}).fit(X, y)
    p = clf.predict_proba(X)[:, 1]
    assert p.min() >= 0.001 and p.max() <= 0.999
    member = clf.model_.members[0]
    votes = member.vote_counts(X)[:, 0]
    order = np.argsort(votes, kind="stable")
    assert np.all(np.diff(p[order]) >= -1e-15)  # more votes never means a lower probability
    assert len(member.voters[0]) == 30


def test_costing_is_used_for_learners_without_weights_and_is_seeded(pima):
    X, y = pima
    kw = dict(method_params={"t": 6, "batch": 3, "costing_rounds": 3}, learner_params={"n_neighbors": 7})
    a = calengine.CalibratedClassifier("knn", "probing", seed=5, **kw).fit(X, y)
    b = calengine.CalibratedClassifier("knn", "probing", seed=5, workers=1, **kw).fit(X, y)
    assert all(len(rounds) == 3 for rounds in a.model_.members[0].voters[0])
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    with pytest.raises(ParameterError, match="weighting=costing"):
        calengine.CalibratedClassifier("knn", "probing", method_params={"weighting": "weights"}).fit(X, y)


def test_bagging_is_the_fraction_of_votes(pima):
    """p is the mean over members of the fraction of a member's 8 bootstrap trees that predict class 1,
    counted here from the trees themselves."""
    X, y = pima
    clf = calengine.CalibratedClassifier("decision_tree", "bagging", method_params={"t": 8}).fit(X, y)
    p = clf.predict_proba(X)[:, 1]
    Z = clf._encode(X)
    fractions = []
    for member in clf.model_.members:
        trees = [rounds[0].learner for rounds in member.voters[0]]
        assert len(trees) == 8 and all(len(rounds) == 1 for rounds in member.voters[0])
        votes = sum((t.score(Z) > 0.5).astype(int) for t in trees)
        fractions.append(votes / 8)
    np.testing.assert_allclose(p, np.mean(fractions, axis=0), atol=1e-12)
    assert len(np.unique(np.round(p * 8 * len(fractions)))) > 8  # the trees disagree: not a trivial 0/1


@pytest.mark.parametrize("scheme", ["k_minus_one", "one_vs_rest"])
def test_multiclass_probing_rows_sum_to_one(scheme):
    df = pd.read_parquet(DATA / "pendigits_train.parquet").sample(1500, random_state=1)
    X, y = df.drop(columns=["class"]).to_numpy(float), df["class"].to_numpy()
    clf = calengine.CalibratedClassifier(
        "gaussian_nb", "probing", method_params={"t": 8, "batch": 4, "multiclass": scheme}
    ).fit(X, y)
    P = clf.predict_proba(X)
    assert P.shape == (1500, 10)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-9)
    assert (P >= 0).all() and clf.score(X, y) > 0.6


def test_cli_probing_with_intervals(cli, tmp_path):
    out = tmp_path / "m"
    r = cli("fit", "data/pima.parquet", "--target", "class", "--learner", "decision_tree", "--learner-param",
            "max_depth=3", "--method", "probing", "--method-param", "t=12", "--method-param", "batch=4",
            "--output", out)
    assert r.returncode == 0, r
    scored = tmp_path / "s"
    assert cli("score", out, "data/pima.parquet", "--output", scored, "--intervals").returncode == 0
    t = pq.read_table(scored).to_pandas()
    assert {"p_0", "p_1", "p_low", "p_high", "prediction"} <= set(t.columns)
    assert (t["p_low"] <= t["p_high"]).all()
    # the prediction lies in its interval on every row (clipping to [0.001, 0.999] clips both)
    assert ((t["p_low"] <= t["p_1"]) & (t["p_1"] <= t["p_high"])).all()
    assert t["p_low"].min() >= 0.001 and t["p_high"].max() <= 0.999
    m = cli("evaluate", out, "data/pima.parquet", "--target", "class", "--json").json()
    assert m["auc"] > 0.75


def test_cli_refuses_multiclass_flag_with_probing(cli, tmp_path):
    r = cli("fit", "data/pendigits_train.parquet", "--target", "class", "--method", "probing",
            "--multiclass", "all_pairs:coupling", "--output", tmp_path / "m")
    assert_one_line_error(r, "--method-param multiclass")


@pytest.mark.cluster
def test_probing_same_bits_on_every_scheduler(cli, tmp_path, dask_cluster):
    def run(tag, *extra):
        out = tmp_path / tag
        r = cli("fit", "data/pima.parquet", "--target", "class", "--learner", "decision_tree",
                "--method", "probing", "--method-param", "t=10", "--method-param", "batch=3",
                "--seed", "9", "--output", out, *extra)
        assert r.returncode == 0, r
        s = tmp_path / f"{tag}-scored"
        assert cli("score", out, "data/pima.parquet", "--output", s, "--intervals").returncode == 0
        return pq.read_table(s).to_pandas()

    ref = run("e1", "--workers", "1")
    for tag, extra in (("e2", ("--workers", "2")), ("lc", ("--cluster", "--workers", "2")),
                       ("dw", ("--cluster", dask_cluster))):
        pd.testing.assert_frame_equal(run(tag, *extra), ref, check_exact=True, obj=tag)
