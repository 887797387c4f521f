"""Weighted evaluation: ``MetricAccumulator.add(y, P, sample_weight)`` and ``evaluate --weight COL``.

A weight is a count: a row of weight 2 is the row given twice, in every metric, curve and test
(integer weights keep the tables' counts exact, so the results are identical, not just close);
fractional weights agree with scikit-learn's weighted metrics; bad weights are one line, exit 2.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calengine.errors import DataError
from calengine.metrics.measures import MetricAccumulator
from cli_helpers import PIMA, assert_one_line_error

DATA = Path(__file__).resolve().parents[2] / "data"
PIMA = str(PIMA)


def _everything(acc: MetricAccumulator) -> str:
    """Every number the accumulator reports, as one comparable string (NaN equal to NaN)."""
    parts = [acc.result(), acc.calibration_suite(), acc.drift_check(), acc.error_reject_curve(),
             acc.reliability_diagram(strategy="quantile"), acc.corp_curve(0)]
    return repr([{k: np.asarray(v).tolist() if isinstance(v, np.ndarray) else v for k, v in p.items()} for p in parts])


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**16), st.sampled_from([2, 3]), st.booleans())
def test_integer_weights_are_rows_repeated_bit_for_bit(seed, k, split):
    rng = np.random.default_rng(seed)
    n = 60
    P = rng.dirichlet(np.ones(k), n)
    y = rng.integers(0, k, n)
    w = rng.integers(0, 4, n)
    w[0] = 1
    weighted = MetricAccumulator(k)
    if split:  # two batches, merged: the weighted tables merge exactly too
        weighted.add(y[:25], P[:25], sample_weight=w[:25]).merge(MetricAccumulator(k).add(y[25:], P[25:], w[25:]))
    else:
        weighted.add(y, P, sample_weight=w)
    repeated = MetricAccumulator(k).add(np.repeat(y, w), np.repeat(P, w, axis=0))
    assert weighted.n == repeated.n == int(w.sum())
    assert _everything(weighted) == _everything(repeated)


def test_fractional_weights_match_scikit_learn_and_halves_on_doubled_rows():
    from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

    rng = np.random.default_rng(3)
    p = rng.uniform(0.02, 0.98, 400)
    y = (rng.random(p.size) < p).astype(np.int64)
    w = rng.uniform(0.1, 3.0, p.size)
    acc = MetricAccumulator(2).add(y, p, sample_weight=w)
    r = acc.result()
    assert isinstance(acc.n, float) and acc.n == pytest.approx(w.sum())
    assert r["brier"] == pytest.approx(brier_score_loss(y, p, sample_weight=w), rel=1e-12)
    assert r["log_loss"] == pytest.approx(log_loss(y, np.column_stack((1 - p, p)), sample_weight=w), rel=1e-12)
    assert r["auc"] == pytest.approx(roc_auc_score(y, p, sample_weight=w), rel=1e-12)
    # each row twice at weight 1/2 is the row once: every metric and test, to rounding
    half = MetricAccumulator(2).add(np.tile(y, 2), np.tile(p, 2), sample_weight=np.full(2 * p.size, 0.5))
    once = MetricAccumulator(2).add(y, p)
    for got, want in ((half.result(), once.result()), (half.calibration_suite(), once.calibration_suite())):
        for key, value in want.items():
            if key in ("ece_equal_mass", "l2_ce_debiased"):
                # equal-mass bins of fractional weights hold equal weight (bin edges at j W / 15), not
                # numpy.array_split's 27/26-row pattern of the 400 unweighted rows
                continue
            if isinstance(value, dict):
                assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
            elif isinstance(value, float) and not math.isnan(value):
                assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


def test_zero_weights_leave_rows_out_and_bad_weights_are_refused():
    y = np.array([0, 1, 1, 0])
    p = np.array([0.2, 0.7, 0.9, 0.4])
    zero = MetricAccumulator(2).add(y, p, sample_weight=[1, 0, 1, 1])
    assert _everything(zero) == _everything(MetricAccumulator(2).add(y[[0, 2, 3]], p[[0, 2, 3]]))
    for bad, fragment in (([1, -1, 1, 1], "negative"), ([1, np.nan, 1, 1], "NaN"), ([1, 1], "shape"),
                          (["a", "b", "c", "d"], "numeric")):
        acc = MetricAccumulator(2)
        with pytest.raises(DataError, match=fragment):
            acc.add(y, p, sample_weight=bad)
        assert acc.n == 0  # unchanged
    with pytest.raises(DataError, match="every weight is 0"):
        MetricAccumulator(2).add(y, p, sample_weight=np.zeros(4)).result()


@pytest.fixture(scope="module")
def pima_sigmoid(tmp_path_factory, cli):
    out = tmp_path_factory.mktemp("models") / "pima"
    r = cli("fit", PIMA, "--target", "class", "--positive", "1", "--learner", "gaussian_nb",
            "--method", "sigmoid", "--output", out)
    assert r.returncode == 0, r
    return out


def test_evaluate_weight_column_equals_the_rows_repeated_on_parquet(pima_sigmoid, cli, tmp_path):
    df = pd.read_parquet(PIMA)
    w = np.random.default_rng(0).integers(0, 3, len(df))
    df.assign(w=w).to_parquet(tmp_path / "weighted.parquet")
    df.loc[df.index.repeat(w)].to_parquet(tmp_path / "repeated.parquet")
    a = cli("evaluate", pima_sigmoid, tmp_path / "weighted.parquet", "--target", "class", "--weight", "w", "--json")
    b = cli("evaluate", pima_sigmoid, tmp_path / "repeated.parquet", "--target", "class", "--json")
    assert a.returncode == 0 and b.returncode == 0, (a, b)
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    assert ja["n"] == int(w.sum()) and "ks_pvalue" in ja and "l2_ce_debiased" in ja["raw"]
    assert ja == jb


@pytest.mark.parametrize("values, fragment", [
    ([-1.0], "negative"), ([np.nan], "missing"), ("zeros", "0 on every row"), (["x"], "not numeric"),
])
def test_evaluate_bad_weight_column_is_one_line(pima_sigmoid, cli, tmp_path, values, fragment):
    df = pd.read_parquet(PIMA)
    if values == "zeros":
        col = np.zeros(len(df))
    else:
        col = np.ones(len(df), dtype=object if isinstance(values[0], str) else float)
        col[5] = values[0]
        if isinstance(values[0], str):
            col = col.astype(str)
    df.assign(w=col).to_parquet(tmp_path / "bad.parquet")
    r = cli("evaluate", pima_sigmoid, tmp_path / "bad.parquet", "--target", "class", "--weight", "w")
    assert_one_line_error(r, fragment)
    assert r.stdout == ""


def test_evaluate_weight_missing_column_is_one_line(pima_sigmoid, cli):
    r = cli("evaluate", pima_sigmoid, PIMA, "--target", "class", "--weight", "no_such_column")
    assert_one_line_error(r, "no_such_column")


def _bin_numbers(page: str) -> list[float]:
    """The numbers of the report's bin tables (the <details> block of every model), in page order."""
    import re

    blocks = re.findall(r"<details><summary>Bin values.*?</details>", page, flags=re.S)
    assert blocks
    return [float(v) for b in blocks for v in re.findall(r'<td class="num">([^<]*)</td>', b)]


def test_evaluate_weight_with_costs_bootstrap_and_report_equals_the_rows_repeated(pima_sigmoid, cli, tmp_path):
    """--cost-matrix, --bootstrap and --report weigh rows too: the decisions' costs, counts and threshold
    curve, the metrics and the report's bin tables of a weighted table are those of its rows repeated."""
    df = pd.read_parquet(PIMA)
    w = np.random.default_rng(1).integers(0, 4, len(df))
    df.assign(w=w).to_parquet(tmp_path / "weighted.parquet")
    df.loc[df.index.repeat(w)].to_parquet(tmp_path / "repeated.parquet")
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"classes": ["0", "1"], "costs": [[0, 1], [5, 0]]}))
    common = ("--target", "class", "--cost-matrix", costs, "--json")
    a = cli("evaluate", pima_sigmoid, tmp_path / "weighted.parquet", *common, "--weight", "w",
            "--bootstrap", "20", "--report", tmp_path / "ra")
    b = cli("evaluate", pima_sigmoid, tmp_path / "repeated.parquet", *common, "--report", tmp_path / "rb")
    assert a.returncode == 0 and b.returncode == 0, (a, b)
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    band = ja.pop("calibration_band")
    assert ja["decisions"].pop("weighted") is True and "weighted" not in jb["decisions"]
    assert ja == jb  # integer costs and weights: every sum is exact
    assert ja["decisions"]["n"] == int(w.sum()) and isinstance(ja["decisions"]["n"], float)
    assert sum(ja["decisions"]["calibrated"]["decided"].values()) == int(w.sum())
    # the band resamples as many draws as the total weight, in proportion to the weights
    assert band["weight"] == band["n"] == int(w.sum()) and band["B"] == 20
    assert np.all(np.asarray(band["low"]) <= np.asarray(band["high"]))
    pa_, pb_ = ((tmp_path / r / "index.html").read_text() for r in ("ra", "rb"))
    assert f"total weight {int(w.sum())} (column w)" in pa_ and "sum the weights (column w)" in pa_
    assert f"{len(df.loc[df.index.repeat(w)])} examples" in pb_
    assert _bin_numbers(pa_) == _bin_numbers(pb_)
    text = cli("evaluate", pima_sigmoid, tmp_path / "weighted.parquet", "--target", "class", "--cost-matrix", costs,
               "--weight", "w")
    assert text.returncode == 0, text
    assert f"total weight {int(w.sum())})" in text.stdout and "per weight" in text.stdout


def test_decision_accumulator_weights_are_counts():
    """Fractional weights scale every sum; integer weights equal the rows repeated; a weighted and an
    unweighted accumulator merge into totals of weight; weight 0 adds nothing."""
    from calengine.decisions import DecisionAccumulator, load_cost_matrix

    cm = load_cost_matrix({"classes": [0, 1], "costs": [[0, 1], [5, 0]]})
    rng = np.random.default_rng(7)
    y = rng.integers(0, 2, 200)
    P1 = rng.random(200)
    P = np.column_stack([1 - P1, P1])
    w = rng.integers(0, 3, 200)
    weighted = DecisionAccumulator(cm).add(y, P, P, sample_weight=w).result(curve_points=None)
    repeated = DecisionAccumulator(cm).add(np.repeat(y, w), np.repeat(P, w, axis=0), np.repeat(P, w, axis=0))
    repeated = repeated.result(curve_points=None)
    assert weighted.pop("weighted") is True
    assert weighted == repeated
    half = DecisionAccumulator(cm).add(y, P, sample_weight=np.full(200, 0.5)).result()
    whole = DecisionAccumulator(cm).add(y, P).result()
    assert half["n"] == 100.0
    assert half["calibrated"]["total"] == pytest.approx(whole["calibrated"]["total"] / 2, rel=1e-12)
    assert half["calibrated"]["mean"] == pytest.approx(whole["calibrated"]["mean"], rel=1e-12)
    merged = DecisionAccumulator(cm).add(y[:50], P[:50]).merge(
        DecisionAccumulator(cm).add(y[50:], P[50:], sample_weight=np.ones(150)))
    assert merged.result(curve_points=None)["calibrated"] == whole["calibrated"] | {
        "decided": {k: float(v) for k, v in whole["calibrated"]["decided"].items()}}
    zero = DecisionAccumulator(cm).add(y, P, sample_weight=np.where(np.arange(200) < 100, 1.0, 0.0)).result()
    assert zero["calibrated"]["total"] == DecisionAccumulator(cm).add(y[:100], P[:100]).result()["calibrated"]["total"]


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**16), st.sampled_from(["sigmoid", "isotonic"]))
def test_bootstrap_band_integer_weights_are_the_rows_repeated_bit_for_bit(seed, method):
    from calengine.metrics.bootstrap import bootstrap_band
    from calengine.plugins.registry import make

    rng = np.random.default_rng(seed)
    s = rng.normal(size=80)
    y = (s + rng.normal(size=80) > 0).astype(int)
    y[:2] = [0, 1]
    w = rng.integers(0, 4, 80)
    w[:2] = 1
    cal = make("calibrators", method)
    a = bootstrap_band(cal, s, y, 12, seed=seed, sample_weight=w)
    b = bootstrap_band(cal, np.repeat(s, w), np.repeat(y, w), 12, seed=seed, grid=a["grid"])
    for key in ("low", "median", "high"):
        assert np.array_equal(a[key], b[key])
    assert a["n"] == b["n"] == int(w.sum()) and a["weight"] == int(w.sum())
    ones = bootstrap_band(cal, s, y, 12, seed=seed, sample_weight=np.ones(80))
    plain = bootstrap_band(cal, s, y, 12, seed=seed)
    assert np.array_equal(ones["high"], plain["high"])  # weights of 1 draw exactly the unweighted resamples


def test_bootstrap_band_fractional_weights_and_too_little_weight():
    from calengine.metrics.bootstrap import bootstrap_band
    from calengine.plugins.registry import make

    rng = np.random.default_rng(0)
    s = rng.normal(size=300)
    y = (s + rng.normal(size=300) > 0).astype(int)
    cal = make("calibrators", "sigmoid")
    band = bootstrap_band(cal, s, y, 40, seed=3, sample_weight=rng.uniform(0.5, 1.5, 300))
    assert band["n"] == round(band["weight"]) and np.all(band["low"] <= band["high"])
    # a band over rows that weigh 10x as much is drawn from 10x the draws: narrower
    heavy = bootstrap_band(cal, s, y, 40, seed=3, sample_weight=np.full(300, 10.0))
    light = bootstrap_band(cal, s, y, 40, seed=3, sample_weight=np.full(300, 1.0), grid=heavy["grid"])
    assert np.mean(heavy["high"] - heavy["low"]) < 0.6 * np.mean(light["high"] - light["low"])
    with pytest.raises(DataError, match="total weight"):
        bootstrap_band(cal, s, y, 10, sample_weight=np.full(300, 0.001))
