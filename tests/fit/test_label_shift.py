"""``calengine adapt``: class priors of unlabelled rows by EM (Saerens et al. 2002) and BBSE (Lipton et
al. 2018), and a model corrected to them.

Oracles: a plain numpy EM written here from the paper's equations (1e-9), a mixture of two Gaussians
whose posteriors are known exactly (the EM recovers the priors it was sampled with), the reduction
over random partitionings against the in-memory EM (bit for bit: fixed-point sums), and Adult's test
set resampled to known positive rates (the truth is the resample's own rate).
"""

from __future__ import annotations

import contextlib
import functools
import json
import operator
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from sklearn.metrics import log_loss

import calengine
from calengine.errors import DataError, ParameterError
from calengine.fit.label_shift import adapt_table
from calengine.runtime.context import RunContext
from calengine.scores.posteriors import training_priors
from calengine.methods.label_shift import bbse_priors, em_priors, project_simplex
from calengine.model.artifact import load_model, read_manifest, save_model
from cli_helpers import REPO, assert_one_line_error, run_cli

ADULT = REPO / "data" / "adult"


def _numpy_em(P, train, tol=1e-13, max_iter=100_000):
    """Saerens, Latinne & Decaestecker (2002), eqs. (2.9)-(2.10), as plainly as numpy says it."""
    new = np.asarray(train, dtype=float).copy()
    for _ in range(max_iter):
        W = P * (new / train)
        W /= W.sum(axis=1, keepdims=True)
        updated = W.mean(axis=0)
        if np.max(np.abs(updated - new)) < tol:
            return updated
        new = updated
    raise AssertionError("the reference EM did not converge")


def test_em_equals_a_plain_numpy_em_on_the_same_posteriors():
    rng = np.random.default_rng(3)
    P = rng.dirichlet([0.7, 1.0, 2.0], size=4000)
    train = np.array([0.2, 0.3, 0.5])
    got = em_priors(P, train, tol=1e-13, max_iter=10_000)
    assert got.converged
    np.testing.assert_allclose(got.priors, _numpy_em(P, train), rtol=0, atol=1e-9)


def test_em_recovers_the_priors_of_a_mixture_with_exact_posteriors():
    """Two unit-variance Gaussians at -1 and +1: p(1|x) under priors π is known in closed form.  Rows
    drawn with P(y=1) = 0.7 and scored by the π = 0.3 posteriors: EM finds 0.7 (to sampling error)."""
    rng = np.random.default_rng(0)
    n = 40_000
    y = rng.random(n) < 0.7
    x = rng.normal(np.where(y, 1.0, -1.0), 1.0)
    odds = np.exp(2.0 * x) * 0.3 / 0.7  # likelihood ratio φ(x-1)/φ(x+1) = e^{2x}, times the prior odds
    p1 = odds / (1.0 + odds)
    got = em_priors(np.column_stack([1.0 - p1, p1]), [0.7, 0.3], tol=1e-10)
    assert got.priors[1] == pytest.approx(y.mean(), abs=0.01)
    assert got.priors[1] == pytest.approx(0.7, abs=0.015)


def test_bbse_solves_the_confusion_system_and_projects_onto_the_simplex():
    C = np.array([[40, 10], [10, 40]])  # joint counts (predicted, label) on the old population: priors 0.5
    truth = np.array([0.2, 0.8])  # new priors; μ = C_normalised @ (truth / 0.5)
    mu = (C / C.sum()) @ (truth / 0.5)
    est = bbse_priors(C, np.round(mu * 10_000).astype(int))
    np.testing.assert_allclose(est["priors"], truth, atol=1e-4)
    # noise that pushes the solution off the simplex: projected, nonnegative, summing to 1
    est = bbse_priors(C, np.array([0, 100]))
    assert est["raw"][0] < 0 and est["priors"].min() >= 0 and est["priors"].sum() == pytest.approx(1.0)
    np.testing.assert_allclose(project_simplex(np.array([0.5, 0.5])), [0.5, 0.5])
    np.testing.assert_allclose(project_simplex(np.array([2.0, 0.0, -1.0])), [1.0, 0.0, 0.0])


# ---------------------------------------------------------------------------------------------- Adult


def _resample(df: pd.DataFrame, rate: float, seed: int) -> pd.DataFrame:
    """The largest subsample of ``df`` (without replacement, seeded) with a share ``rate`` of '>50K'."""
    rng = np.random.default_rng(seed)
    pos, neg = np.flatnonzero(df["class"] == ">50K"), np.flatnonzero(df["class"] != ">50K")
    n_pos = min(len(pos), int(len(neg) * rate / (1.0 - rate)))
    n_neg = min(len(neg), int(round(n_pos * (1.0 - rate) / rate)))
    take = np.concatenate([rng.choice(pos, n_pos, replace=False), rng.choice(neg, n_neg, replace=False)])
    return df.iloc[np.sort(take)].reset_index(drop=True)


@pytest.fixture(scope="module")
def adult(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapt")
    model = calengine.fit_table(str(ADULT / "train.parquet"), "class", positive=">50K", learner="gaussian_nb",
                                method="isotonic")
    save_model(model, root / "nb")
    test = pd.read_parquet(ADULT / "test.parquet")
    shifted = {}
    for rate in (0.1, 0.24, 0.5):
        shifted[rate] = _resample(test, rate, seed=int(rate * 100))
        shifted[rate].to_parquet(root / f"shift_{rate}.parquet", index=False)
    return root, shifted


def _pos_log_loss(model, df):
    return log_loss(df["class"] == ">50K", model.predict_proba(df)[:, list(model.classes_).index(">50K")])


@pytest.mark.parametrize("rate", [0.1, 0.24, 0.5])
def test_adult_resampled_to_a_known_rate(adult, rate):
    """EM's estimate is within 0.02 of the resample's positive rate; the adapted model's log loss is
    lower at 0.1 and 0.5 and, at Adult's own rate (0.24), within 0.001 of the parent's: there the
    estimate moves the prior by sampling noise only (~0.003 at 16,000 rows), and a prior off by δ
    costs O(δ²/(π(1-π))) ≈ 5e-5 of log loss, so 0.001 is 20 times the expected change."""
    root, shifted = adult
    df = shifted[rate]
    parent = load_model(root / "nb")
    new = calengine.adapt_priors(root / "nb", str(root / f"shift_{rate}.parquet"),
                                 labelled=str(ADULT / "train.parquet"))
    priors = new.info["lineage"]["priors"]
    pos = list(parent.classes_).index(">50K")
    truth = float((df["class"] == ">50K").mean())
    assert priors["observed"][pos] == pytest.approx(truth, abs=1e-12)  # the table's own labels, counted
    assert truth == pytest.approx(rate, abs=1e-3)
    assert priors["em"]["converged"]
    assert abs(priors["em"]["priors"][pos] - truth) < 0.02, priors  # measured: 0.007, 0.0007, 0.0074
    # BBSE, the check: its confusion matrix is of the training rows here (optimistic), so looser
    assert abs(priors["bbse"]["priors"][pos] - truth) < 0.03, priors
    before, after = _pos_log_loss(parent, df), _pos_log_loss(new, df)
    if rate == 0.24:
        assert abs(after - before) < 1e-3, (before, after)
    else:
        assert after < before - 0.02, (before, after)  # measured: 0.284 -> 0.236 (0.1), 0.599 -> 0.490 (0.5)
    # the correction is Bayes' rule on the parent's probabilities, row by row
    P = parent.predict_proba(df)
    W = P * (np.asarray(priors["applied"]) / np.asarray(priors["training"]))
    np.testing.assert_allclose(new.predict_proba(df), W / W.sum(axis=1, keepdims=True), rtol=0, atol=1e-12)


def test_cli_adapt_publishes_a_model_that_score_applies_with_its_lineage(adult, tmp_path):
    root, shifted = adult
    out = tmp_path / "nb_05"
    r = run_cli("adapt", root / "nb", root / "shift_0.5.parquet", "--output", out,
                "--labelled", ADULT / "train.parquet", "--quiet")
    assert r.returncode == 0, r
    assert f"adapted on {len(shifted[0.5])} rows" in r.stderr and "EM converged" in r.stderr, r
    manifest = read_manifest(out)
    lineage = manifest["lineage"]
    assert lineage["mode"] == "adapt" and lineage["method"] == "em"
    assert lineage["parent"]["content_hash"] == read_manifest(root / "nb")["content_hash"]
    assert lineage["data"]["rows"] == len(shifted[0.5]) and lineage["labelled"]["rows"] == 32561
    assert set(lineage["priors"]) >= {"training", "em", "bbse", "applied"}
    assert lineage["priors"]["applied"] == lineage["priors"]["em"]["priors"]
    assert manifest["sampling"]["negative_sampling"] is None
    from calengine.metrics.report import lineage_text  # what evaluate prints under its table

    text = lineage_text(lineage)
    assert text.startswith("Adapted to new class priors (em: ") and f"{lineage['priors']['applied'][1]:.4f})" in text, text
    assert f"{len(shifted[0.5])} unlabelled rows" in text, text
    r = run_cli("score", out, root / "shift_0.5.parquet", "--output", tmp_path / "scores", "--quiet")
    assert r.returncode == 0, r
    scored = pq.read_table(tmp_path / "scores").to_pandas()
    np.testing.assert_allclose(scored["p_>50K"], load_model(out).predict_proba(shifted[0.5])[:, 1], rtol=0,
                               atol=1e-12)
    assert scored["p_>50K"].mean() > load_model(root / "nb").predict_proba(shifted[0.5])[:, 1].mean() + 0.1
    # method "bbse" applies the BBSE estimate instead; adapting an adapted model chains its lineage
    again = calengine.adapt_priors(out, str(root / "shift_0.5.parquet"), method="bbse",
                                   labelled=str(ADULT / "train.parquet"), output=tmp_path / "again")
    again = read_manifest(tmp_path / "again")["lineage"]
    assert again["method"] == "bbse" and again["priors"]["applied"] == again["priors"]["bbse"]["priors"]
    assert again["parent"]["content_hash"] == manifest["content_hash"]
    assert again["previous"]["parent"]["content_hash"] == lineage["parent"]["content_hash"]
    # the adapted model's own priors are the EM estimate: a second EM on the same rows stays there
    assert again["priors"]["training"] == pytest.approx(lineage["priors"]["em"]["priors"], abs=1e-9)
    assert again["priors"]["em"]["priors"] == pytest.approx(lineage["priors"]["em"]["priors"], abs=2e-3)


def test_bad_input_is_one_line_and_publishes_nothing(adult, tmp_path):
    root, shifted = adult
    out = tmp_path / "out"
    empty = tmp_path / "empty.parquet"
    shifted[0.5].iloc[:0].to_parquet(empty, index=False)
    assert_one_line_error(run_cli("adapt", root / "nb", empty, "--output", out), "no rows")
    missing = tmp_path / "missing.parquet"
    shifted[0.5].drop(columns=["age"]).to_parquet(missing, index=False)
    assert_one_line_error(run_cli("adapt", root / "nb", missing, "--output", out), "column 'age'")
    assert_one_line_error(run_cli("adapt", root / "nb", root / "shift_0.5.parquet", "--output", out,
                                  "--max-iter", "0"), "--max-iter")
    # the Python API refuses the same (the CLI turns these into its one line like every CalengineError)
    with pytest.raises(ParameterError, match="max_iter must"):
        calengine.adapt_priors(root / "nb", shifted[0.5], max_iter=10_001, output=out)
    with pytest.raises(ParameterError, match="labelled"):
        calengine.adapt_priors(root / "nb", shifted[0.5], method="bbse", output=out)
    unseen = tmp_path / "unseen.parquet"
    lab = shifted[0.5].copy()
    lab.loc[0, "class"] = "maybe"
    lab.to_parquet(unseen, index=False)
    assert_one_line_error(run_cli("adapt", root / "nb", root / "shift_0.5.parquet", "--output", out,
                                  "--labelled", unseen), "'maybe'")
    # labels in the table to adapt to are only counted (a check), and one the model never saw is refused
    with pytest.raises(DataError, match="'maybe', a class the model was not trained on"):
        calengine.adapt_priors(root / "nb", lab, output=out)
    assert not out.exists()


def test_a_model_without_recorded_class_totals_needs_labelled_rows(adult, tmp_path):
    """Models saved before the fit recorded its calibration class totals: refused in one line without
    --labelled, and with it the labelled table's class rates are the training priors."""
    root, shifted = adult
    old = load_model(root / "nb")
    assert training_priors(old)[0] == pytest.approx([24720 / 32561, 7841 / 32561])
    old.info = {k: v for k, v in old.info.items() if k != "x_class_totals"}
    save_model(old, tmp_path / "old")
    with pytest.raises(DataError, match="labelled"):
        calengine.adapt_priors(tmp_path / "old", shifted[0.5])
    new = calengine.adapt_priors(tmp_path / "old", shifted[0.5], labelled=str(ADULT / "train.parquet"))
    priors = new.info["lineage"]["priors"]
    assert priors["training"] == pytest.approx([24720 / 32561, 7841 / 32561])
    assert priors["training_from"] == "class rates of the --labelled table"
    with pytest.raises(ParameterError, match="tol must"):
        calengine.adapt_priors(tmp_path / "old", shifted[0.5], tol=0.0)


# ---------------------------------------------------------------------------------------------- partitions


@pytest.fixture(scope="module")
def pima(tmp_path_factory):
    from calengine.runtime.thread_client import ThreadClient

    model = calengine.fit_table(str(REPO / "data" / "pima.parquet"), "class", learner="gaussian_nb", method="sigmoid",
                                mode="refit")
    df = pd.read_parquet(REPO / "data" / "pima.parquet")
    reference = em_priors(model.predict_proba(df), training_priors(model)[0], tol=1e-8)
    with ThreadClient(2) as client:
        yield model, df, client, tmp_path_factory.mktemp("parts"), reference


def _write_parts(df, folder, cuts, group) -> list[str]:
    folder.mkdir()
    for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(df)])):
        pq.write_table(pa.Table.from_pandas(df.iloc[a:b], preserve_index=False), folder / f"part-{i}.parquet",
                       row_group_size=group)
    return sorted(str(p) for p in folder.iterdir())


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_reduction_over_any_partitioning_equals_the_in_memory_em(pima, data):
    """Files cut anywhere, row groups of any size, fragments of any number of rows: the same bits."""
    model, df, client, root, reference = pima
    cuts = sorted(data.draw(st.lists(st.integers(1, len(df) - 1), max_size=5, unique=True)))
    group = data.draw(st.integers(1, 200))
    chunk_rows = data.draw(st.sampled_from([50, 300, 1_000_000]))
    folder = root / f"t{data.draw(st.integers(0, 10**9))}"
    files = _write_parts(df, folder, cuts, group)
    _, info = adapt_table(RunContext(client), model, files, tol=1e-8, chunk_rows=chunk_rows)
    assert np.array_equal(info["em"].priors, reference.priors)
    assert info["em"].iterations == reference.iterations
    shutil.rmtree(folder)


def test_a_dask_cluster_gives_the_same_bits(pima):
    from calengine.runtime.client import dask_client

    model, df, _, root, reference = pima
    files = _write_parts(df, root / "dask", [100, 500], 64)
    with dask_client(workers=2) as client:
        _, info = adapt_table(RunContext(client), model, files, tol=1e-8, chunk_rows=128)
    assert np.array_equal(info["em"].priors, reference.priors)


# ---------------------------------------------------------------------------------------------- weights


def _numpy_weighted_em(P, train, w, steps):
    """``steps`` steps of the EM of :func:`_numpy_em` with each row's re-weighted posteriors counted
    ``w`` times (a fixed number of steps: slow EMs, with a prior drifting to 0, are compared too)."""
    new = np.asarray(train, dtype=float).copy()
    for _ in range(steps):
        W = P * (new / train)
        W /= W.sum(axis=1, keepdims=True)
        new = (w @ W) / w.sum()
    return new


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), top=st.sampled_from([1, 3, 70_000, 2**40]))
def test_a_weighted_row_adds_the_units_of_the_row_repeated(seed, n, top):
    """``fixed_sum_counts`` against a Python-int oracle of the definition (each term's units times its
    count), and against ``fixed_sum`` of the rows repeated for small counts: the same integer."""
    from calengine.reductions.exact import _limbs, fixed_sum, fixed_sum_counts

    rng = np.random.default_rng(seed)
    t = rng.random(n)
    t[rng.random(n) < 0.1] = 1.0  # the largest term: the high limb is 2**31
    c = rng.integers(0, top + 1, n)
    hi, lo = _limbs(t, 1.0)
    oracle = sum(int(ci) * ((int(h) << 31) + int(low)) for ci, h, low in zip(c, hi, lo))
    assert fixed_sum_counts(t, c, 1.0) == oracle
    if top <= 3:
        assert fixed_sum_counts(t, c, 1.0) == fixed_sum(np.repeat(t, c), 1.0)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(2, 4))
def test_weighted_em_is_the_em_of_the_rows_repeated(seed, k):
    """Integer weights: the rows repeated, bit for bit (steps included); fractional weights: 40 steps
    of the plain numpy EM with weighted means (3e-9)."""
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.full(k, 2.0), size=int(rng.integers(5, 300)))
    train = rng.dirichlet(np.full(k, 20.0))
    w = rng.integers(0, 4, len(P))
    w[0] = max(w[0], 1)
    got = em_priors(P, train, tol=1e-12, max_iter=300, sample_weight=w)
    repeated = em_priors(np.repeat(P, w, axis=0), train, tol=1e-12, max_iter=300)
    assert np.array_equal(got.priors, repeated.priors) and got.iterations == repeated.iterations
    frac = w + rng.random(len(P))
    got = em_priors(P, train, tol=1e-300, max_iter=40, sample_weight=frac)  # tol never met: 40 steps
    assert got.iterations == 40
    # 3e-9: a prior the EM drives to 0 stays at calengine's floor of 1e-9 (PRIOR_FLOOR), the others renormalised
    np.testing.assert_allclose(got.priors, _numpy_weighted_em(P, train, frac, 40), rtol=0, atol=3e-9)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_weighted_prior_shift_over_any_partitioning_equals_the_in_memory_em(pima, data):
    """``prior_shift_table`` with a weight column (integer or fractional), files cut anywhere: the
    in-memory weighted EM's bits, the weighted label rates and the total weight."""
    from calengine.metrics.prior_shift import prior_shift_table

    model, df, client, root, _ = pima
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    w = rng.integers(0, 5, len(df)).astype(float)
    if data.draw(st.booleans()):
        w = w * rng.random(len(df))
    df = df.assign(w=w)
    cuts = sorted(data.draw(st.lists(st.integers(1, len(df) - 1), max_size=4, unique=True)))
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp(dir=root)) / "parts"
    files = _write_parts(df, folder, cuts, data.draw(st.integers(1, 200)))
    chunk_rows = data.draw(st.sampled_from([60, 1_000_000]))
    got = prior_shift_table(client, model, files, "class", replicates=4, tol=1e-8, chunk_rows=chunk_rows, weight="w")
    reference = em_priors(model.predict_proba(df), training_priors(model)[0], tol=1e-8, sample_weight=w)
    assert got["estimated"] == reference.priors.tolist() and got["weighted"]
    y = model.labels.encode(df["class"])
    np.testing.assert_allclose(got["observed"], np.bincount(y, weights=w, minlength=2) / w.sum(), rtol=1e-12)
    assert got["rows"] == pytest.approx(w.sum(), rel=1e-12) and got["sample_rows"] == int((w > 0).sum())
    shutil.rmtree(folder.parent)


def test_weighted_replicates_draw_rows_in_proportion_to_their_weights(adult):
    """A replicate with integer weights is the replicate of the rows repeated side by side (the
    resample's positions along the cumulative weight land on the same rows)."""
    from calengine.metrics.prior_shift import _em_replicates

    root, shifted = adult
    model = load_model(root / "nb")
    P = model.predict_proba(shifted[0.5].iloc[:2000])
    w = np.random.default_rng(1).integers(0, 3, len(P))
    train = training_priors(model)[0]
    seeds = np.random.SeedSequence(5).spawn(4)
    got = _em_replicates(P, train, seeds, 1e-12, 10_000, weights=w.astype(float))
    repeated = _em_replicates(np.repeat(P, w, axis=0), train, seeds, 1e-12, 10_000)
    np.testing.assert_allclose(got, repeated, rtol=0, atol=1e-12)


def test_evaluate_prior_shift_with_weights_is_the_table_with_rows_repeated(adult, tmp_path):
    """End to end on the CLI: ``--weight`` with integer weights gives the estimate, label rates and
    totals of the table whose rows are repeated that many times; the text says total weight."""
    root, shifted = adult
    df = shifted[0.5].iloc[:4000].copy()
    df["w"] = np.random.default_rng(2).integers(0, 4, len(df))
    df.to_parquet(tmp_path / "weighted.parquet", index=False)
    df.loc[df.index.repeat(df["w"])].to_parquet(tmp_path / "repeated.parquet", index=False)
    runs = {}
    for name, extra in (("weighted", ["--weight", "w"]), ("repeated", [])):
        r = run_cli("evaluate", root / "nb", tmp_path / f"{name}.parquet", "--target", "class", "--prior-shift", "20",
                    "--json", *extra)
        assert r.returncode == 0, r.stderr
        runs[name] = json.loads(r.stdout)["prior_shift"]
    a, b = runs["weighted"], runs["repeated"]
    for key in ("estimated", "observed", "rows", "labelled_rows", "training", "em"):
        assert a[key] == b[key], key
    assert a["rows"] == int(df["w"].sum()) and a["weighted"] and not b["weighted"]
    assert a["sample_rows"] == int((df["w"] > 0).sum())
    pos = a["classes"].index(">50K")
    assert a["low"][pos] < a["estimated"][pos] < a["high"][pos]
    text = run_cli("evaluate", root / "nb", tmp_path / "weighted.parquet", "--target", "class", "--prior-shift", "20",
                   "--weight", "w").stdout
    assert f"probabilities of rows of total weight {a['rows']:,}," in text, text
    assert f"label rates of labelled rows of total weight {a['rows']:,})" in text, text
    assert "20 weighted resamples of" in text, text


# ---------------------------------------------------------------------------------------------- multiclass


def test_pendigits_with_a_skewed_resample():
    """Ten digits, test rows resampled so digit c has prior ∝ c + 1 (class 9 ten times class 0)."""
    model = calengine.fit_table(str(REPO / "data" / "pendigits_train.parquet"), "class",
                                learner="logistic_regression", method="sigmoid", cv=3)
    test = pd.read_parquet(REPO / "data" / "pendigits_test.parquet")
    rng = np.random.default_rng(0)
    target = np.arange(1, 11) / 55.0
    y = test["class"].to_numpy()
    n = int(np.min(np.bincount(y, minlength=10) / target))
    take = np.concatenate([rng.choice(np.flatnonzero(y == c), int(round(n * t)), replace=False)
                           for c, t in enumerate(target)])
    df = test.iloc[np.sort(take)].reset_index(drop=True)
    truth = np.bincount(df["class"], minlength=10) / len(df)
    train = training_priors(model)[0]
    new = calengine.adapt_priors(model, df, labelled=test)
    em = np.asarray(new.info["lineage"]["priors"]["em"]["priors"])
    assert np.abs(em - truth).max() < 0.03, (em.round(3), truth.round(3))  # measured: 0.020
    assert np.abs(em - truth).sum() < 0.2 * np.abs(train - truth).sum()
    labels = list(model.classes_)
    assert log_loss(df["class"], new.predict_proba(df), labels=labels) < \
        log_loss(df["class"], model.predict_proba(df), labels=labels) - 0.01  # measured: 0.354 -> 0.331
    bbse = np.asarray(new.info["lineage"]["priors"]["bbse"]["priors"])
    assert np.abs(bbse - truth).max() < 0.03, (bbse.round(3), truth.round(3))


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([("priors",), ("priors", "training"), ("priors", "applied"), ("method",), ("mode",)]), _json)
def test_a_malformed_adapt_lineage_is_one_line_never_a_crash(path, value):
    from calengine.errors import ModelFormatError
    from calengine.model.checks import check_lineage

    doc = {"mode": "adapt", "parent": {"path": "/m", "content_hash": "0" * 64},
           "data": {"paths": ["/d.parquet"], "rows": 3, "fingerprint": "f"}, "method": "em",
           "priors": {"training": [0.5, 0.5], "applied": [0.2, 0.8]}, "time": "2026-01-01T00:00:00+00:00"}
    check_lineage(json.loads(json.dumps(doc)))  # the good record passes
    functools.reduce(operator.getitem, path[:-1], doc)[path[-1]] = value
    with pytest.raises(ModelFormatError) if _malformed(doc) else contextlib.nullcontext() as caught:
        check_lineage(doc)
    if caught is not None:
        message = str(caught.value)
        assert len(message.splitlines()) == 1 and "lineage" in message


def _malformed(doc) -> bool:
    """Whether an adapt lineage must be refused: another mode (refit/update would need 'forget', which
    this record lacks), or priors that are not lists of numbers in [0, 1] ('method' is informative)."""
    priors = doc.get("priors")
    if doc.get("mode") != "adapt" or not isinstance(priors, dict):
        return True
    return not all(isinstance(priors.get(key), list) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1 for v in priors[key])
        for key in ("training", "applied"))


def test_fits_record_the_class_totals_their_calibrators_met(tmp_path):
    """--calibration-data: that table's counts; --weight: weight totals; a class-sampled model's priors
    are the population's (counts divided by the rates), and its adapted rates compose with them."""
    df = pd.read_parquet(REPO / "data" / "pima.parquet")
    df["w"] = np.where(df["class"] == 1, 3.0, 1.0)
    df.iloc[:500].to_parquet(tmp_path / "a.parquet", index=False)
    df.iloc[500:].to_parquet(tmp_path / "b.parquet", index=False)
    a, b = df.iloc[:500]["class"].value_counts(), df.iloc[500:]["class"].value_counts()
    m = calengine.fit_table(str(tmp_path / "a.parquet"), "class", learner="gaussian_nb", method="sigmoid",
                            calibration_data=str(tmp_path / "b.parquet"), exclude=["w"])
    assert m.info["x_class_totals"] == {"totals": [b[0], b[1]], "table": "calibration_data", "weighted": False}
    m = calengine.fit_table(str(tmp_path / "a.parquet"), "class", learner="gaussian_nb", method="isotonic",
                            weight="w", cv=3)
    assert m.info["x_class_totals"] == {"totals": [a[0], 3.0 * a[1]], "table": "training", "weighted": True}
    m = calengine.fit_table(str(tmp_path / "a.parquet"), "class", learner="gaussian_nb", method="isotonic",
                            negative_sampling=0.5, exclude=["w"], cv=3)
    np.testing.assert_allclose(training_priors(m)[0], np.array([a[0] / 0.5, a[1]]) / (a[0] / 0.5 + a[1]))
    new = calengine.adapt_priors(m, df.iloc[500:])
    priors = new.info["lineage"]["priors"]
    X = df.iloc[500:]
    W = m.predict_proba(X) * (np.asarray(priors["applied"]) / np.asarray(priors["training"]))
    np.testing.assert_allclose(new.predict_proba(X), W / W.sum(axis=1, keepdims=True), rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------- evaluate --prior-shift


def test_evaluate_prior_shift_on_adult_resampled_to_a_known_rate(adult, tmp_path):
    """``evaluate --prior-shift``: the EM estimate from the probabilities alone is within 0.02 of the
    resample's positive rate (0.5 here, Adult's training rate 0.24), the 90 % bootstrap interval holds
    it and is a few hundredths wide at 7,700 rows (binomial sd of a rate near 0.5: 0.0057, so a 90 %
    interval of about 0.019 plus EM's own noise), and the text and the HTML report show the same numbers."""
    import html

    from calengine.methods.label_shift import em_priors

    root, shifted = adult
    ev = calengine.evaluate_models(root / "nb", str(root / "shift_0.5.parquet"), "class", prior_shift=60, seed=3,
                                   report=tmp_path / "report")
    shift = ev.to_json()["prior_shift"]
    pos = shift["classes"].index(">50K")
    truth = float((shifted[0.5]["class"] == ">50K").mean())
    assert shift["observed"][pos] == pytest.approx(truth, abs=1e-12)
    assert shift["training"] == pytest.approx([24720 / 32561, 7841 / 32561])
    assert shift["rows"] == shift["labelled_rows"] == shift["sample_rows"] == len(shifted[0.5])
    assert shift["em"]["converged"] and abs(shift["estimated"][pos] - truth) < 0.02, shift  # measured: 0.0016
    assert shift["low"][pos] < truth < shift["high"][pos], shift
    assert 0.01 < shift["high"][pos] - shift["low"][pos] < 0.06, shift
    assert (shift["replicates"], shift["seed"], shift["level"]) == (60, 3, 0.9)
    # the point estimate is adapt's EM: fixed-point sums, so the in-memory EM's bits
    model = load_model(root / "nb")
    assert shift["estimated"] == em_priors(model.predict_proba(shifted[0.5]), shift["training"]).priors.tolist()
    row = next(line for line in ev.to_text().splitlines() if line.startswith(">50K "))
    assert row.split()[1:3] == [f"{shift['training'][pos]:.4f}", f"{shift['estimated'][pos]:.4f}"], row
    assert f"[{shift['low'][pos]:.4f}, {shift['high'][pos]:.4f}]" in row and row.endswith(f"{truth:.4f}"), row
    page = html.unescape((tmp_path / "report" / "index.html").read_text())
    block = page[page.index("<h3>Prior shift</h3>"):]
    block = block[: block.index("</table>")]
    cells = [f"{shift['training'][pos]:.4f}", f"{shift['estimated'][pos]:.4f}",
             f"[{shift['low'][pos]:.4f}, {shift['high'][pos]:.4f}]", f"{truth:.4f}"]
    assert "<tr><td>>50K</td>" + "".join(f'<td class="num">{c}</td>' for c in cells) + "</tr>" in block, block
    assert "90% interval" in block and "60 bootstrap resamples" in block and shift["training_from"] in block


def test_prior_shift_replicates_are_plain_row_bootstraps_of_the_em(adult, tmp_path):
    """Each replicate is the EM (a plain numpy one written in this file) on the rows a seeded
    bootstrap resample draws, replicate r from SeedSequence(seed).spawn(B)[r]; and the interval is the
    same with one worker or three (each task draws its replicates' own streams)."""
    from calengine.metrics.prior_shift import _em_replicates, prior_shift_table
    from calengine.runtime.thread_client import ThreadClient

    root, shifted = adult
    model = load_model(root / "nb")
    df = shifted[0.1].iloc[:3000]
    P = model.predict_proba(df)
    train = training_priors(model)[0]
    seeds = np.random.SeedSequence(7).spawn(3)
    got = _em_replicates(P, train, seeds, 1e-12, 10_000)
    for ss, row in zip(seeds, got):
        idx = np.random.default_rng(ss).integers(0, len(P), len(P))
        np.testing.assert_allclose(row, _numpy_em(P[idx], train), rtol=0, atol=1e-9)
    for i in range(3):  # three files: three chunks, sampled apart and merged
        df.iloc[i * 1000:(i + 1) * 1000].to_parquet(tmp_path / f"part{i}.parquet", index=False)
    files = [str(tmp_path / f"part{i}.parquet") for i in range(3)]
    runs = []
    for workers in (1, 3):
        with ThreadClient(workers) as c:
            runs.append(prior_shift_table(c, model, files, "class", replicates=30, seed=7, max_rows=900))
    assert runs[0] == runs[1]
    assert runs[0]["sample_rows"] == 900 and runs[0]["rows"] == 3000


def test_prior_shift_bad_input_is_one_line(adult, tmp_path):
    root, _ = adult
    data = root / "shift_0.5.parquet"
    assert_one_line_error(run_cli("evaluate", root / "nb", data, "--target", "class", "--prior-shift", "1"),
                          "--prior-shift must be at least 2")
    assert_one_line_error(run_cli("evaluate", root / "nb", data, "--target", "class", "--prior-shift", "10001"),
                          "--prior-shift must be at most 10000")
    zero = pd.read_parquet(data).assign(w=0.0)
    zero.to_parquet(tmp_path / "zero.parquet", index=False)
    assert_one_line_error(run_cli("evaluate", root / "nb", tmp_path / "zero.parquet", "--target", "class",
                                  "--prior-shift", "--weight", "w"), "weight", "positive")
    zero.assign(w=-1.0).to_parquet(tmp_path / "negative.parquet", index=False)
    assert_one_line_error(run_cli("evaluate", root / "nb", tmp_path / "negative.parquet", "--target", "class",
                                  "--prior-shift", "--weight", "w"), "negative")
    old = load_model(root / "nb")
    old.info = {k: v for k, v in old.info.items() if k != "x_class_totals"}
    save_model(old, tmp_path / "old")
    assert_one_line_error(run_cli("evaluate", tmp_path / "old", data, "--target", "class", "--prior-shift"),
                          "--prior-shift compares with the priors", "fit the model again")
