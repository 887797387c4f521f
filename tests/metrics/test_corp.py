"""CORP decomposition (calengine.metrics.corp): a hand-computed case, scikit-learn's isotonic regression
as an independent oracle, the identity S = MCB - DSC + UNC, the two zero cases, and partition-free merging."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.isotonic import IsotonicRegression

from calengine.metrics.corp import corp_column, isotonic_recalibration
from calengine.metrics.measures import MetricAccumulator, evaluate_predictions

TERMS = ("score", "mcb", "dsc", "unc")


# --------------------------------------------------------------------------------------------------
# hand-computed: rows (p, y) = (0.2, 0), (0.2, 1), (0.4, 1), (0.6, 0), (0.8, 1)
#
# table: values 0.2 0.4 0.6 0.8, positives 1 1 0 1, negatives 1 0 1 0; PAV of the means 1/2, 1, 0, 1
# pools 1 and 0 into 1/2, then with the first block: {0.2, 0.4, 0.6} -> 2/4, {0.8} -> 1.
# Brier:  S(x) = (.04 + .64 + .36 + .36 + .04)/5 = 0.288, S(recal) = 4 * .25 / 5 = 0.2,
#         S(clim) = 0.6 * 0.4 = 0.24  ->  MCB = 0.088, DSC = 0.04, UNC = 0.24.
# log:    S(x) = -(2 ln .8 + ln .2 + 2 ln .4)/5 = 0.777662, S(recal) = 4 ln 2 / 5 = 0.554518,
#         S(clim) = -(3 ln .6 + 2 ln .4)/5 = 0.673012  ->  MCB = 0.223144 (= ln 1.25), DSC = 0.118494.

HAND_P = np.array([0.2, 0.2, 0.4, 0.6, 0.8])
HAND_Y = np.array([0, 1, 1, 0, 1])


def test_hand_computed_brier_and_log_loss():
    r = evaluate_predictions(HAND_Y, HAND_P)
    b, ll = r["corp_brier"], r["corp_log_loss"]
    assert b["score"] == pytest.approx(0.288, abs=1e-15) and b["score"] == pytest.approx(r["brier"], abs=1e-15)
    assert b["mcb"] == pytest.approx(0.088, abs=1e-15)
    assert b["dsc"] == pytest.approx(0.04, abs=1e-15)
    assert b["unc"] == pytest.approx(0.24, abs=1e-15)
    s_x = -(2 * math.log(0.8) + math.log(0.2) + 2 * math.log(0.4)) / 5
    s_r = 4 * math.log(2) / 5
    s_c = -(3 * math.log(0.6) + 2 * math.log(0.4)) / 5
    assert ll["score"] == pytest.approx(s_x, abs=1e-12) and ll["score"] == pytest.approx(0.777662, abs=1e-6)
    assert ll["score"] == pytest.approx(r["log_loss"], abs=1e-12)
    assert ll["mcb"] == pytest.approx(s_x - s_r, abs=1e-12) and ll["mcb"] == pytest.approx(math.log(1.25), abs=1e-12)
    assert ll["dsc"] == pytest.approx(s_c - s_r, abs=1e-12) and ll["dsc"] == pytest.approx(0.118494, abs=1e-6)
    assert ll["unc"] == pytest.approx(s_c, abs=1e-12) and ll["unc"] == pytest.approx(0.673012, abs=1e-6)


def test_hand_computed_blocks():
    starts, a, b = isotonic_recalibration(np.array([0.2, 0.4, 0.6, 0.8]), np.array([1, 1, 0, 1]), np.array([1, 0, 1, 0]))
    assert starts.tolist() == [0, 3] and a.tolist() == [2, 1] and b.tolist() == [2, 0]


def test_log_loss_where_pav_reaches_zero_and_one_stays_finite():
    """Perfectly separated rows: the PAV values are exactly 0 and 1, their 0·log 0 terms are 0, so the
    recalibrated log loss is 0, DSC = UNC, and MCB is the forecast's own log loss."""
    p = np.array([0.1, 0.3, 0.7, 0.9])
    y = np.array([0, 0, 1, 1])
    ll = evaluate_predictions(y, p)["corp_log_loss"]
    assert ll["unc"] == pytest.approx(math.log(2), abs=1e-15)
    assert ll["dsc"] == pytest.approx(ll["unc"], abs=1e-15)
    assert ll["mcb"] == pytest.approx(ll["score"], abs=1e-15)
    assert ll["mcb"] == pytest.approx(-(math.log(0.9) + math.log(0.7)) / 2, abs=1e-12)
    # a single class: climatology is 0 or 1 as well, every term finite and UNC = 0
    one = evaluate_predictions(np.zeros(3, int), np.array([0.2, 0.5, 0.9]))["corp_log_loss"]
    assert one["unc"] == 0.0 and one["dsc"] == 0.0 and math.isfinite(one["mcb"])


def test_forecast_of_exactly_zero_for_an_event_is_clipped_like_log_loss():
    r = evaluate_predictions(np.array([1, 0]), np.array([0.0, 0.5]))
    assert r["corp_log_loss"]["score"] == pytest.approx(r["log_loss"], abs=1e-12)
    assert r["corp_log_loss"]["score"] == pytest.approx((-math.log(1e-15) + math.log(2)) / 2, rel=1e-12)


def test_multiclass_sums_columns_and_brier_matches():
    rng = np.random.default_rng(4)
    P = rng.dirichlet([1.0, 2.0, 3.0], size=300)
    y = rng.integers(0, 3, size=300)
    r = evaluate_predictions(y, P)
    for name in ("corp_brier", "corp_log_loss"):
        per = r[name]["per_class"]
        assert len(per) == 3
        for t in TERMS:
            assert r[name][t] == pytest.approx(sum(c[t] for c in per), abs=1e-12)
        for c in range(3):  # each column is the binary decomposition of y == c against P[:, c]
            col = evaluate_predictions((y == c).astype(int), P[:, c])[name]
            for t in TERMS:
                assert per[c][t] == pytest.approx(col[t], abs=1e-12)
    assert r["corp_brier"]["score"] == pytest.approx(r["brier"], abs=1e-12)
    assert "per_class" not in evaluate_predictions(y == 1, P[:, 1])["corp_brier"]


# --------------------------------------------------------------------------------------------------
# properties


def _data(seed: int, n: int, n_distinct: int):
    rng = np.random.default_rng(seed)
    grid = rng.uniform(0, 1, size=n_distinct)
    grid[: min(2, n_distinct)] = [0.0, 1.0][: min(2, n_distinct)]  # exact 0 / 1 forecasts too
    p = grid[rng.integers(0, n_distinct, size=n)]
    y = (rng.uniform(size=n) < rng.uniform(0, 1) * p + rng.uniform(0, 0.5)).astype(np.int64)
    return y, p


cases = st.builds(_data, seed=st.integers(0, 2**32 - 1), n=st.integers(1, 120),
                  n_distinct=st.sampled_from([1, 2, 3, 7, 40, 500]))


@settings(max_examples=60, deadline=None)
@given(cases)
def test_identity_and_signs(case):
    y, p = case
    r = evaluate_predictions(y, p)
    for name in ("corp_brier", "corp_log_loss"):
        c = r[name]
        assert c["score"] == pytest.approx(c["mcb"] - c["dsc"] + c["unc"], abs=1e-12)
        assert c["mcb"] >= -1e-12 and c["dsc"] >= -1e-12 and c["unc"] >= 0.0
    assert r["corp_brier"]["score"] == pytest.approx(r["brier"], abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(cases)
def test_recalibrated_score_matches_sklearn_isotonic(case):
    """S(recal) = S - MCB against scikit-learn's isotonic regression fitted on the rows themselves."""
    y, p = case
    r = evaluate_predictions(y, p)
    fit = IsotonicRegression(y_min=0.0, y_max=1.0).fit_transform(p, y.astype(np.float64))
    brier_recal = float(np.mean((y - fit) ** 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        ll_terms = np.where(y == 1, -np.log(fit), -np.log1p(-fit))
    ll_recal = float(np.mean(np.where((y == 1) & (fit == 0) | (y == 0) & (fit == 1), np.inf, ll_terms)))
    assert r["corp_brier"]["score"] - r["corp_brier"]["mcb"] == pytest.approx(brier_recal, abs=1e-9)
    assert r["corp_log_loss"]["score"] - r["corp_log_loss"]["mcb"] == pytest.approx(ll_recal, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(cases)
def test_isotonic_calibrated_forecasts_have_zero_mcb(case):
    y, p = case
    recal = IsotonicRegression(y_min=0.0, y_max=1.0).fit_transform(p, y.astype(np.float64))
    r = evaluate_predictions(y, recal)
    assert r["corp_brier"]["mcb"] == pytest.approx(0.0, abs=1e-12)
    assert r["corp_log_loss"]["mcb"] == pytest.approx(0.0, abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), c=st.floats(0.0, 1.0))
def test_constant_forecasts_have_zero_dsc(seed, n, c):
    y = np.random.default_rng(seed).integers(0, 2, size=n)
    r = evaluate_predictions(y, np.full(n, c))
    for name in ("corp_brier", "corp_log_loss"):
        assert r[name]["dsc"] == 0.0
    base = y.mean()
    assert r["corp_brier"]["mcb"] == pytest.approx((c - base) ** 2, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(cases, st.data())
def test_merge_of_any_partitioning_equals_one_piece(case, data):
    y, p = case
    n = y.size
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=5)))
    order = data.draw(st.permutations(range(len(cuts) + 1)))
    bounds = [0, *cuts, n]
    pieces = [MetricAccumulator(2).add(y[bounds[i]:bounds[i + 1]], p[bounds[i]:bounds[i + 1]])
              for i in range(len(bounds) - 1)]
    merged = MetricAccumulator(2)
    for i in order:
        merged.merge(MetricAccumulator.from_arrays(pieces[i].to_arrays()))
    one = MetricAccumulator(2).add(y, p).result()
    got = merged.result()
    for name in ("corp_brier", "corp_log_loss"):
        assert got[name] == one[name]  # bit-identical: the merged tables are


def test_corp_column_needs_no_accumulator():
    c = corp_column([0.2, 0.4, 0.6, 0.8], [1, 1, 0, 1], [1, 0, 1, 0])
    assert c["brier"]["mcb"] == pytest.approx(0.088, abs=1e-15)


def test_corp_curve_is_the_pav_step_function():
    acc = MetricAccumulator(2).add(HAND_Y, HAND_P)
    c = acc.corp_curve()
    assert c["lo"].tolist() == [0.2, 0.8] and c["hi"].tolist() == [0.6, 0.8]
    assert c["value"].tolist() == [0.5, 1.0] and c["count"].tolist() == [4, 1]
    # class 0 (the values 1 - p): blocks {0.2} -> 0 and {0.4, 0.6, 0.8} -> 2/4
    c0 = acc.corp_curve(0)
    assert c0["lo"] == pytest.approx([0.2, 0.4], abs=1e-15) and c0["value"].tolist() == [0.0, 0.5]
    assert c0["count"].tolist() == [1, 4]
