"""Partition-native Probing and bagging: the schedule from vote histograms, costing and bootstrap
samples drawn on the workers from row identity, votes kept per fragment, and the same model whatever
the fragments and the number of workers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

import calengine
from calengine.fit import table_probing as pp
from calengine.methods.probing import ProbingSchedule
from cli_helpers import PIMA, REPO
from fit.test_table import write_table

PENDIGITS = REPO / "data" / "pendigits_train.parquet"
COSTING = {"t": 12, "weighting": "costing"}


@pytest.fixture(scope="module")
def pima(tmp_path_factory):
    """pima as three files with small, uneven row groups, and the rows in file order."""
    folder = write_table(pd.read_parquet(PIMA), tmp_path_factory.mktemp("pima") / "t", row_group_sizes=(40, 64, 37))
    full = pd.concat([pd.read_parquet(f) for f in sorted(folder.glob("*.parquet"))], ignore_index=True)
    return folder, full


# ---------------------------------------------------------------------------------------------- the schedule


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    t=st.integers(1, 12), batch=st.integers(1, 4), n=st.integers(0, 40),
    loss=st.sampled_from(["cross_entropy", "squared"]), seed=st.integers(0, 2**32 - 1),
)
def test_next_thresholds_from_counts_equals_next_thresholds(t, batch, n, loss, seed):
    batch = min(batch, t)
    rng = np.random.default_rng(seed)
    by_votes, by_counts = ProbingSchedule(t, loss, batch), ProbingSchedule(t, loss, batch)
    votes = np.zeros(n, dtype=np.int64)
    while True:
        a = by_votes.next_thresholds(votes)
        counts = np.bincount(votes, minlength=by_counts.n_classifiers + 1)
        if rng.random() < 0.5:  # a histogram may stop at its last non-empty bin
            counts = counts[: (np.flatnonzero(counts)[-1] + 1) if counts.any() else 0]
        b = by_counts.next_thresholds_from_counts(counts, n)
        assert a == b
        if not a:
            break
        # the new classifiers vote on some rows: any counts in 0..n_classifiers are legal
        votes = votes + rng.integers(0, len(a) + 1, size=n)
        votes = np.minimum(votes, by_votes.n_classifiers)
    assert by_votes.to_state()["thresholds"].tolist() == by_counts.to_state()["thresholds"].tolist()
    np.testing.assert_array_equal(by_votes.boundaries, by_counts.boundaries)


def test_counts_contract_violations():
    sched = ProbingSchedule(3)
    with pytest.raises(ValueError, match="sum to"):
        sched.next_thresholds_from_counts([3], 4)
    with pytest.raises(ValueError, match="0..0"):
        sched.next_thresholds_from_counts([3, 1], 4)  # no classifier yet: every count is 0
    with pytest.raises(ValueError, match="non-negative"):
        sched.next_thresholds_from_counts([5, -1], 4)
    with pytest.raises(ValueError, match="whole numbers"):
        sched.next_thresholds_from_counts([3.5, 0.5], 4)
    assert sched.next_thresholds_from_counts(np.array([4, 0, 0]), 4) == [0.5]
    with pytest.raises(ValueError, match="earlier rounds"):
        sched.next_thresholds_from_counts([5], 5)


# ---------------------------------------------------------------------------------------------- sampling


def _parts(ctx):
    from calengine.tasks.partitions import load_part

    return [load_part(fr, ctx.enc, None) for fr in ctx.fragments]


def _context(folder, fragment_rows):
    from calengine.runtime.client import dask_client
    from calengine.fit.table import TableSpec, plan_table

    with dask_client(workers=1) as client:
        return plan_table(client, TableSpec(str(folder), "class", fragment_rows=fragment_rows))


def test_costing_sample_has_the_expected_size_and_ignores_the_fragments(pima):
    folder, full = pima
    cut = {rows: _context(folder, rows) for rows in (1, 100, 10**6)}
    ctx = cut[100]
    n_neg, n_pos = (int(c) for c in ctx.class_counts)
    labelled = pp.labelled_rows_per_group(ctx)
    for p in (0.2, 0.5, 0.8):
        accept = pp.costing_acceptance(n_neg, n_pos, p)
        # the global Z: the costlier target is always kept
        assert max(accept) == 1.0
        np.testing.assert_allclose(sorted(accept), sorted([min(p, 1 - p) / max(p, 1 - p), 1.0]))
        expected = pp.expected_rows(n_neg, n_pos, accept)
        draws = [pp.Draw(None, (0, 0, r), accept) for r in range(40)]
        got = [pp.sample_fragment(fr, ctx.enc, labelled[j], draws, seed=7) for j, fr in enumerate(ctx.fragments)]
        sizes = []
        for r in range(len(draws)):
            y = np.concatenate([g[r][1] for g in got])
            sizes.append(y.size)
            if accept[1] == 1.0:
                assert y.sum() == n_pos  # every positive kept
        sd = np.sqrt(expected * (1 - min(accept)))  # binomial spread of the sample size
        assert abs(np.mean(sizes) - expected) < 4 * sd / np.sqrt(len(sizes)) + 1, (p, np.mean(sizes), expected)
    # the same rows are drawn however the table is cut into fragments
    accept = pp.costing_acceptance(n_neg, n_pos, 0.3)
    draw = pp.Draw(None, (1, 2, 3), accept)
    masks = []
    for c in cut.values():
        lab = pp.labelled_rows_per_group(c)
        masks.append(np.concatenate([
            pp.draw_counts(fr, lab[j], draw, pp.binary_target(part.y, None), 7)
            for j, (fr, part) in enumerate(zip(c.fragments, _parts(c)))
        ]))
    assert len(cut[1].fragments) > len(cut[100].fragments) > len(cut[10**6].fragments)
    np.testing.assert_array_equal(masks[0], masks[1])
    np.testing.assert_array_equal(masks[0], masks[2])
    # and --max-train-rows caps the expected sample
    capped = pp.costing_acceptance(n_neg, n_pos, 0.5, max_rows=200)
    assert pp.expected_rows(n_neg, n_pos, capped) == pytest.approx(200)


def test_bootstrap_is_poisson_one_per_row(pima):
    folder, _ = pima
    ctx = _context(folder, 100)
    labelled = pp.labelled_rows_per_group(ctx)
    draw = pp.Draw(None, (0, 1), None, pp._BOOT_STREAM)
    counts = np.concatenate([
        pp.draw_counts(fr, labelled[j], draw, pp.binary_target(part.y, None), 3)
        for j, (fr, part) in enumerate(zip(ctx.fragments, _parts(ctx)))
    ])
    assert abs(counts.sum() - ctx.n_rows) < 4 * np.sqrt(ctx.n_rows)
    assert abs(np.mean(counts == 0) - np.exp(-1)) < 0.06
    got = pp.sample_fragment(ctx.fragments[0], ctx.enc, labelled[0], [draw], seed=3)[0]
    assert got[1].size == counts[: ctx.fragments[0].n_rows].sum()


# ---------------------------------------------------------------------------------------------- fits


def test_costing_probing_is_partition_native_sensible_and_saves(pima, tmp_path):
    from calengine.model.artifact import load_model, save_model

    folder, full = pima
    model = calengine.fit_table(folder, "class", learner="decision_tree", method="probing",
                                method_params=COSTING, seed=1, fragment_rows=100)
    assert model.info["x_training"]["route"] == "costing-sample"
    member = model.members[0]
    assert len(member.voters[0]) == 12 and all(len(rounds) == 5 for rounds in member.voters[0])
    P = model.predict_frame(full.drop(columns=["class"]))
    assert roc_auc_score(full["class"], P["p_1"]) > 0.7
    save_model(model, tmp_path / "m")
    again = load_model(tmp_path / "m")
    pd.testing.assert_frame_equal(again.predict_frame(full.drop(columns=["class"])), P)
    # the first classifier (p = 1/2) saw about every row; later ones, costed, fewer
    trees = [rounds[0].learner for rounds in member.voters[0] if rounds[0].learner is not None]
    first = trees[0].estimator_.tree_.n_node_samples[0]
    assert first == len(full)
    assert min(t.estimator_.tree_.n_node_samples[0] for t in trees) < 0.8 * len(full)


def test_same_seed_same_model_across_fragments_and_workers(pima):
    folder, full = pima
    P = []
    for fragment_rows, workers in ((None, 1), (1, 2), (100, 2)):
        model = calengine.fit_table(folder, "class", learner="decision_tree", method="probing",
                                    method_params=COSTING, seed=1, workers=workers, fragment_rows=fragment_rows)
        P.append(model.predict_frame(full.drop(columns=["class"]), extra_outputs=True))
    pd.testing.assert_frame_equal(P[0], P[1])
    pd.testing.assert_frame_equal(P[0], P[2])


def test_multiclass_costing_probing(tmp_path):
    df = pd.read_parquet(PENDIGITS).iloc[:2500]
    folder = write_table(df, tmp_path / "pen", row_group_sizes=(300, 250, 400))
    full = pd.concat([pd.read_parquet(f) for f in sorted(folder.glob("*.parquet"))], ignore_index=True)
    model = calengine.fit_table(folder, "class", learner="decision_tree", method="probing", seed=2,
                                method_params={"t": 3, "batch": 2, "weighting": "costing", "costing_rounds": 1})
    assert model.info["x_training"]["route"] == "costing-sample"
    k = full["class"].nunique()
    assert len(model.members[0].voters) == k - 1  # the paper's k-1 problems
    P = model.predict_frame(full.drop(columns=["class"]))
    probs = P[[c for c in P.columns if c.startswith("p_")]].to_numpy()
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-9)
    assert (P["prediction"].astype(str) == full["class"].astype(str)).mean() > 0.8


def test_weighted_probing_equals_the_assembled_driver(pima):
    """Weighted fits read every row in the same order with the same seeds: the old driver's model."""
    folder, full = pima
    P = {}
    for route in ("in-memory", "auto"):
        model = calengine.fit_table(folder, "class", learner="logistic_regression", method="probing",
                                    method_params={"t": 6, "batch": 3}, seed=5, route=route, fragment_rows=100)
        assert model.info["x_training"]["route"] == "in-memory"
        P[route] = model.predict_frame(full.drop(columns=["class"]))
    pd.testing.assert_frame_equal(P["in-memory"], P["auto"])


def test_raw_map_of_a_decision_learner_is_the_max_abs_first_score(pima):
    folder, full = pima
    model = calengine.fit_table(folder, "class", learner="fisher_lda", method="probing",
                                method_params={"t": 4, "batch": 2, "costing_rounds": 1}, seed=3, fragment_rows=100)
    assert model.info["x_training"]["route"] == "costing-sample"  # fisher_lda takes no weights
    member = model.members[0]
    X = model.encoder.transform(full.drop(columns=["class"]))
    a = np.abs(member.scores(X)).max(axis=0)
    np.testing.assert_allclose(member.raw.hi, a, rtol=1e-12)
    np.testing.assert_allclose(member.raw.lo, -a, rtol=1e-12)


def test_max_train_rows_caps_costing_and_bootstrap_samples(pima):
    folder, full = pima
    model = calengine.fit_table(folder, "class", learner="decision_tree", method="probing", seed=1,
                                method_params={"t": 4, "batch": 2, "weighting": "costing", "costing_rounds": 1},
                                max_train_rows=200, fragment_rows=100)
    sizes = [r[0].learner.estimator_.tree_.n_node_samples[0] for r in model.members[0].voters[0] if r[0].learner]
    assert sizes and max(sizes) < 260, sizes
    # bagging: an m-out-of-n bootstrap, Poisson(m / n) copies of each row
    model = calengine.fit_table(folder, "class", learner="decision_tree", method="bagging", seed=1,
                                method_params={"t": 4}, max_train_rows=200, fragment_rows=100)
    assert model.info["x_training"]["route"] == "bootstrap-sample"
    sizes = [r[0].learner.estimator_.tree_.weighted_n_node_samples[0] for r in model.members[0].voters[0]]
    assert all(130 < n < 270 for n in sizes), sizes


def test_bagging_draws_bootstraps_on_the_workers(pima):
    folder, full = pima
    P = []
    for fragment_rows, workers in ((None, 1), (100, 2)):
        model = calengine.fit_table(folder, "class", learner="decision_tree", method="bagging",
                                    method_params={"t": 8}, seed=4, workers=workers, fragment_rows=fragment_rows)
        assert model.info["x_training"]["route"] == "bootstrap-sample"
        P.append(model.predict_frame(full.drop(columns=["class"])))
    pd.testing.assert_frame_equal(P[0], P[1])
    assert roc_auc_score(full["class"], P[0]["p_1"]) > 0.7


def test_costing_needs_a_worker_to_hold_a_sample_not_the_table(pima):
    """The table does not fit a worker: the assembled route refuses in one line, costing samples capped
    by --max-train-rows go through (in waves whose samples fit the cluster's memory together)."""
    import dask
    import distributed  # noqa: F401 - its config defaults must be loaded before we override them

    from calengine.errors import DataError

    folder, full = pima
    quiet = {f"distributed.worker.memory.{k}": False for k in ("target", "spill", "pause", "terminate")}
    params = {"t": 4, "batch": 2, "weighting": "costing", "costing_rounds": 3}
    with dask.config.set(quiet):
        for route in ("in-memory", "auto"):
            with pytest.raises(DataError) as info:
                calengine.fit_table(folder, "class", learner="decision_tree", method="probing", seed=1,
                                    method_params=params, worker_memory="150kB", route=route)
            assert "\n" not in str(info.value) and "max_train_rows" in str(info.value)
        model = calengine.fit_table(folder, "class", learner="decision_tree", method="probing", seed=1,
                                    method_params=params, worker_memory="150kB", max_train_rows=200)
    assert model.info["x_training"]["route"] == "costing-sample"
    P = model.predict_frame(full.drop(columns=["class"]))
    assert roc_auc_score(full["class"], P["p_1"]) > 0.7
