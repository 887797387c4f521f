"""Tests of calengine.metrics.measures: published worked examples, scikit-learn as an oracle, and the algebraic
properties the partition-wise reduction relies on (exact decomposition, order-free merging)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

from calengine.errors import DataError, ParameterError
from calengine.metrics.measures import (
    LOG_LOSS_CLIP,
    MetricAccumulator,
    error_reject_curve,
    evaluate_predictions,
    reliability_diagram,
)
from calengine.reductions.tables import binary_top, mirror_table

RESULT_KEYS = {
    "n",
    "n_classes",
    "brier",
    "log_loss",
    "log_loss_bits",
    "auc",
    "error_rate",
    "ece",
    "mce",
    "calibration_loss",
    "refinement_loss",
    "confidence_q",
    "confidence_rho",
}

#: the CORP decomposition (dicts of floats; tested in tests/metrics/test_corp.py)
CORP_KEYS = {"corp_brier", "corp_log_loss"}


def _binary(p) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    return np.column_stack((1.0 - p, p))


def _segments(spec):
    """Rows from ``[(n_pos, n_neg, predicted p), ...]``: y = 1 for positives, P = (1 - p, p)."""
    y, p = [], []
    for n_pos, n_neg, phat in spec:
        y += [1] * n_pos + [0] * n_neg
        p += [float(phat)] * (n_pos + n_neg)
    return np.array(y), _binary(p)


def _fm_exact(spec, pool_equal_predictions=True):
    """Exact (calibration, refinement, brier) of Flach & Matsubara's Theorem 1, with fractions.

    Segments are the listed ones, or (the metric's definition) groups of equal prediction.
    """
    if pool_equal_predictions:
        pooled: dict = {}
        for a, b, ph in spec:
            pa, pb = pooled.get(Fraction(ph), (0, 0))
            pooled[Fraction(ph)] = (pa + a, pb + b)
        spec = [(a, b, ph) for ph, (a, b) in pooled.items()]
    total = sum(a + b for a, b, _ in spec)
    cal = sum((a + b) * (Fraction(ph) - Fraction(a, a + b)) ** 2 for a, b, ph in spec) / total
    ref = sum(Fraction(a * b, a + b) for a, b, _ in spec) / total
    return float(cal), float(ref), float(cal + ref)


def _close(a: dict, b: dict, tol: float = 1e-12) -> None:
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, dict):  # the CORP terms (per_class: a list of such dicts)
            _close(x, y, tol)
        elif isinstance(x, list):
            assert len(x) == len(y), key
            for u, w in zip(x, y):
                _close(u, w, tol)
        elif isinstance(x, float) and math.isnan(x):
            assert math.isnan(y), key
        else:
            assert x == pytest.approx(y, abs=tol, rel=0), key


def _random_case(seed: int, k: int, n: int, n_distinct: int):
    """Labels and probability rows drawn from ``n_distinct`` distinct rows: many exact ties."""
    rng = np.random.default_rng(seed)
    W = rng.integers(0, 5, size=(n_distinct, k)).astype(np.float64)
    W[W.sum(axis=1) == 0, 0] = 1.0
    P = (W / W.sum(axis=1, keepdims=True))[rng.integers(0, n_distinct, size=n)]
    y = rng.integers(0, k, size=n)
    return y, P


cases = st.builds(
    _random_case,
    seed=st.integers(0, 2**32 - 1),
    k=st.integers(2, 4),
    n=st.integers(1, 80),
    n_distinct=st.sampled_from([1, 2, 3, 5, 20, 200]),
)


# ------------------------------------------------------------------------------------------------
# Flach & Matsubara (notes §f): counts (2+3-, 4+1-, 3+1-, 1+5-), 10 positives / 10 negatives


FM_COUNTS = [(2, 3), (4, 1), (3, 1), (1, 5)]


def _fm_spec(probs):
    return [(a, b, ph) for (a, b), ph in zip(FM_COUNTS, probs)]


def test_fm_lexprob_hull_without_laplace_is_perfectly_calibrated():
    spec = _fm_spec([Fraction(9, 14)] * 3 + [Fraction(1, 6)])
    r = evaluate_predictions(*_segments(spec))
    assert r["calibration_loss"] == pytest.approx(0.0, abs=1e-12)
    assert r["refinement_loss"] == pytest.approx(_fm_exact(spec)[1], abs=1e-12)
    assert r["refinement_loss"] == pytest.approx(0.202381, abs=5e-7)
    assert r["brier"] == pytest.approx(0.202381, abs=5e-7)


def test_fm_lexprob_hull_with_laplace():
    spec = _fm_spec([Fraction(10, 16)] * 3 + [Fraction(2, 8)])
    r = evaluate_predictions(*_segments(spec))
    cal, ref, bs = _fm_exact(spec)
    got = (r["calibration_loss"], r["refinement_loss"], r["brier"])
    assert got == pytest.approx((cal, ref, bs), abs=1e-12)
    # segments are groups of equal prediction, i.e. the hull's two segments, not LexRank's four
    assert r["calibration_loss"] == pytest.approx(0.002307, abs=5e-7)
    assert r["refinement_loss"] == pytest.approx(0.202381, abs=5e-7)
    assert r["brier"] == pytest.approx(0.2046875, abs=1e-12)  # = 131/640, printed 0.204688
    # over LexRank's four segments the same Brier score splits differently (notes §f)
    cal4, ref4, bs4 = _fm_exact(spec, pool_equal_predictions=False)
    assert (round(cal4, 6), round(ref4, 6)) == (0.025521, 0.179167)
    assert bs4 == pytest.approx(r["brier"], abs=1e-12)


def test_fm_tree_leaves_laplace_and_empirical():
    laplace = _fm_spec([Fraction(3, 7), Fraction(5, 7), Fraction(4, 6), Fraction(2, 8)])
    r = evaluate_predictions(*_segments(laplace))
    got = (r["calibration_loss"], r["refinement_loss"], r["brier"])
    assert got == pytest.approx(_fm_exact(laplace), abs=1e-12)
    assert r["calibration_loss"] == pytest.approx(0.005513, abs=5e-7)
    assert r["refinement_loss"] == pytest.approx(0.179167, abs=5e-7)
    assert r["brier"] == pytest.approx(0.184680, abs=5e-7)

    empirical = _fm_spec([Fraction(a, a + b) for a, b in FM_COUNTS])
    r = evaluate_predictions(*_segments(empirical))
    assert r["calibration_loss"] == pytest.approx(0.0, abs=1e-12)
    assert r["refinement_loss"] == pytest.approx(0.179167, abs=5e-7)
    assert r["auc"] == pytest.approx(0.79, abs=1e-12)  # tree ranking 4+1-, 3+1-, 2+3-, 1+5-


def test_fm_lexrank_auc_with_ties():
    # LexRank order (high to low): 2+3-, 4+1-, 3+1-, 1+5-
    r = evaluate_predictions(*_segments(_fm_spec([0.8, 0.6, 0.4, 0.2])))
    assert r["auc"] == pytest.approx(0.62, abs=1e-12)
    # an all-tied ranker: AUC 1/2 and maximal refinement loss 1/4 for balanced classes
    r = evaluate_predictions(*_segments([(10, 10, 0.3)]))
    assert r["auc"] == 0.5
    assert r["refinement_loss"] == pytest.approx(0.25, abs=1e-15)


# ------------------------------------------------------------------------------------------------
# Duin & Tax (notes §g)


def test_duin_tax_all_confident():
    y = np.array([0] * 5 + [1] * 5)
    pred = np.array([0] * 4 + [1] + [1] * 4 + [0])  # two mistakes
    r = evaluate_predictions(y, _binary(pred.astype(float)))
    got = (r["error_rate"], r["confidence_q"], r["confidence_rho"])
    assert got == pytest.approx((0.2, 0.2, 0.5), abs=1e-15)


def test_duin_tax_unreliable_objects_on_the_boundary():
    # 6 correct at p = 1; 4 at p = 0.5 (argmax tie -> class 0): 2 with y = 0 correct, 2 with y = 1 wrong
    y = np.array([1, 1, 1, 0, 0, 0, 0, 0, 1, 1])
    p1 = np.array([1, 1, 1, 0, 0, 0, 0.5, 0.5, 0.5, 0.5])
    r = evaluate_predictions(y, _binary(p1))
    got = (r["error_rate"], r["confidence_q"], r["confidence_rho"])
    assert got == pytest.approx((0.2, 0.1, 0.0), abs=1e-15)


def test_duin_tax_table1_nm_gauss_row():
    # 220 of 1000 wrong at confidence 0.5 (q contribution 55), 780 right at c with 780 (1-c)^2 = 122
    c = 1.0 - math.sqrt(122 / 780)
    y = np.array([1] * 220 + [0] * 780)
    p1 = np.array([0.5] * 220 + [1.0 - c] * 780)
    r = evaluate_predictions(y, _binary(p1))
    assert r["error_rate"] == pytest.approx(0.22, abs=1e-15)
    assert r["confidence_q"] == pytest.approx(0.177, abs=1e-12)
    assert r["confidence_rho"] == pytest.approx(0.177 / 0.22 - 0.5, abs=1e-10)
    assert round(r["confidence_rho"], 4) == 0.3045


def test_rho_is_nan_without_errors():
    r = evaluate_predictions(np.array([0, 1, 1]), _binary([0.2, 0.9, 0.6]))
    assert r["error_rate"] == 0.0
    assert math.isnan(r["confidence_rho"])
    assert r["confidence_q"] == pytest.approx((0.2**2 + 0.1**2 + 0.4**2) / 3, abs=1e-15)


# ------------------------------------------------------------------------------------------------
# hand-checked definitions


def test_result_keys_and_types():
    r = evaluate_predictions(np.array([0, 1, 2, 1]), np.full((4, 3), 1 / 3))
    assert set(r) == RESULT_KEYS | CORP_KEYS
    assert isinstance(r["n"], int) and isinstance(r["n_classes"], int)
    assert all(isinstance(r[key], float) for key in RESULT_KEYS - {"n", "n_classes"})
    assert r["n"] == 4 and r["n_classes"] == 3


def test_argmax_ties_go_to_lowest_class_index():
    P = np.array([[0.5, 0.5], [0.5, 0.5]])
    assert evaluate_predictions(np.array([0, 0]), P)["error_rate"] == 0.0
    assert evaluate_predictions(np.array([1, 1]), P)["error_rate"] == 1.0
    P3 = np.array([[0.2, 0.4, 0.4], [0.4, 0.2, 0.4]])
    assert evaluate_predictions(np.array([1, 0]), P3)["error_rate"] == 0.0
    assert evaluate_predictions(np.array([2, 2]), P3)["error_rate"] == 1.0


def test_ece_and_mce_by_hand():
    # confidences 0.8 (3 of 5 right) and 0.95 (2 of 2 right): |0.6-0.8| and |1-0.95|
    y = np.array([1, 1, 1, 0, 0, 1, 1])
    p1 = np.array([0.8] * 5 + [0.95] * 2)
    r = evaluate_predictions(y, _binary(p1))
    assert r["ece"] == pytest.approx((5 * 0.2 + 2 * 0.05) / 7, abs=1e-15)
    assert r["mce"] == pytest.approx(0.2, abs=1e-15)


def test_log_loss_clipping_and_bits():
    r = evaluate_predictions(np.array([1, 0]), _binary([0.0, 0.0]))
    assert r["log_loss"] == pytest.approx(-math.log(LOG_LOSS_CLIP) / 2, abs=1e-12)
    assert r["log_loss_bits"] == pytest.approx(r["log_loss"] / math.log(2), abs=1e-12)
    assert evaluate_predictions(np.array([1, 0]), _binary([1.0, 0.0]))["log_loss"] == 0.0


def test_one_dimensional_binary_probabilities_are_accepted():
    y = np.array([0, 1, 1, 0, 1])
    p = np.array([0.1, 0.7, 0.4, 0.4, 0.9])
    _close(evaluate_predictions(y, p), evaluate_predictions(y, _binary(p)), 0.0)


def test_auc_undefined_is_nan():
    assert math.isnan(evaluate_predictions(np.array([1, 1]), _binary([0.3, 0.6]))["auc"])
    # multiclass: averaged over classes having positives and negatives only
    P = np.array([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.5, 0.4, 0.1]])
    y = np.array([0, 1, 0])
    expected = (roc_auc_score(y == 0, P[:, 0]) + roc_auc_score(y == 1, P[:, 1])) / 2
    assert evaluate_predictions(y, P)["auc"] == pytest.approx(expected, abs=1e-12)


# ------------------------------------------------------------------------------------------------
# scikit-learn as oracle


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_binary_matches_sklearn(seed):
    rng = np.random.default_rng(seed)
    n = 3000
    p = np.round(rng.random(n), 2)  # heavy ties, exact 0s and 1s
    y = (rng.random(n) < p * 0.8 + 0.1).astype(int)
    P = _binary(p)
    r = evaluate_predictions(y, P)
    assert r["brier"] == pytest.approx(brier_score_loss(y, p), abs=1e-12)
    assert r["auc"] == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    clipped = np.clip(P, LOG_LOSS_CLIP, 1.0)  # sklearn's own clip (float eps) then never bites
    assert r["log_loss"] == pytest.approx(log_loss(y, clipped, labels=[0, 1]), abs=1e-12)
    assert r["error_rate"] == pytest.approx(np.mean(np.argmax(P, axis=1) != y), abs=1e-15)
    assert r["calibration_loss"] + r["refinement_loss"] == pytest.approx(r["brier"], abs=1e-12)


@pytest.mark.parametrize("seed,k", [(0, 3), (1, 5), (2, 10)])
def test_multiclass_matches_sklearn(seed, k):
    rng = np.random.default_rng(seed)
    n = 2000
    W = rng.integers(0, 4, size=(n, k)).astype(float)
    W[W.sum(axis=1) == 0, 0] = 1.0
    P = W / W.sum(axis=1, keepdims=True)
    y = np.where(rng.random(n) < 0.5, np.argmax(W + rng.random((n, k)), axis=1), rng.integers(0, k, n))
    labels = list(range(k))
    r = evaluate_predictions(y, P)
    assert r["brier"] == pytest.approx(brier_score_loss(y, P, labels=labels, scale_by_half=False), abs=1e-12)
    assert r["auc"] == pytest.approx(
        roc_auc_score(y, P, multi_class="ovr", average="macro", labels=labels), abs=1e-12
    )
    clipped = np.clip(P, LOG_LOSS_CLIP, 1.0)
    assert r["log_loss"] == pytest.approx(log_loss(y, clipped, labels=labels), abs=1e-12)
    assert r["calibration_loss"] + r["refinement_loss"] == pytest.approx(r["brier"], abs=1e-12)


# ------------------------------------------------------------------------------------------------
# properties


@settings(max_examples=50, deadline=None)
@given(cases)
def test_decomposition_is_exact(case):
    y, P = case
    r = evaluate_predictions(y, P)
    assert r["calibration_loss"] + r["refinement_loss"] == pytest.approx(r["brier"], abs=1e-12)
    assert r["calibration_loss"] >= -1e-15 and r["refinement_loss"] >= 0.0


@settings(max_examples=50, deadline=None)
@given(cases, st.data())
def test_merging_any_split_equals_one_pass(case, data):
    y, P = case
    k, n = P.shape[1], len(y)
    whole = MetricAccumulator(k).add(y, P)
    order = np.array(data.draw(st.permutations(range(n))))
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=6)))
    pieces = [MetricAccumulator(k).add(y[idx], P[idx]) for idx in np.split(order, cuts)]
    while len(pieces) > 1:  # merge neighbours or any pair, in an order hypothesis chooses
        i = data.draw(st.integers(0, len(pieces) - 2))
        j = data.draw(st.integers(i + 1, len(pieces) - 1))
        pieces[i] = pieces[i].merge(pieces.pop(j))
    merged = pieces[0]
    a, b = whole.to_arrays(), merged.to_arrays()
    assert a.keys() == b.keys()
    for key in a:
        assert np.array_equal(a[key], b[key]), key
    _close(whole.result(), merged.result())


@settings(max_examples=50, deadline=None)
@given(cases, st.randoms(use_true_random=False))
def test_invariant_to_row_order(case, rnd):
    y, P = case
    perm = np.array(rnd.sample(range(len(y)), len(y)))
    _close(evaluate_predictions(y, P), evaluate_predictions(y[perm], P[perm]))


@settings(max_examples=50, deadline=None)
@given(cases)
def test_ranges(case):
    y, P = case
    r = evaluate_predictions(y, P)
    assert math.isnan(r["auc"]) or 0.0 <= r["auc"] <= 1.0
    assert 0.0 <= r["ece"] <= r["mce"] + 1e-15 <= 1.0 + 1e-15
    assert 0.0 <= r["error_rate"] <= 1.0
    assert 0.0 <= r["brier"] <= (1.0 if P.shape[1] == 2 else 2.0) + 1e-12
    assert 0.0 <= r["confidence_q"] <= 1.0


# ------------------------------------------------------------------------------------------------
# accumulator mechanics, serialisation, report curves


def test_round_trip_through_npz(tmp_path):
    y, P = _random_case(7, 3, 500, 40)
    acc = MetricAccumulator(3).add(y[:200], P[:200]).add(y[200:], P[200:])
    np.savez(tmp_path / "state.npz", **acc.to_arrays())
    with np.load(tmp_path / "state.npz", allow_pickle=False) as z:
        back = MetricAccumulator.from_arrays(dict(z))
    assert back.n == 500 and back.n_classes == 3
    _close(back.result(), acc.result(), 0.0)
    doubled = MetricAccumulator(3).add(np.r_[y, y], np.r_[P, P]).result()
    _close(back.merge(acc).result(), doubled)


def test_from_arrays_rejects_tampered_state():
    state = MetricAccumulator(2).add(np.array([0, 1, 1]), _binary([0.2, 0.9, 0.9])).to_arrays()
    bad = dict(state, top_correct=state["top_correct"] + 1)
    with pytest.raises(DataError, match="inconsistent"):
        MetricAccumulator.from_arrays(bad)
    with pytest.raises(DataError, match="lacks class_pos"):
        MetricAccumulator.from_arrays({k: v for k, v in state.items() if k != "class_pos"})


def test_empty_batches_and_empty_result():
    acc = MetricAccumulator(2).add(np.array([], dtype=int), np.empty((0, 2)))
    with pytest.raises(DataError, match="no rows"):
        acc.result()
    acc.add(np.array([1]), _binary([0.7]))
    assert acc.result()["n"] == 1


@pytest.mark.parametrize(
    "y,P,message",
    [
        (np.array([0, 1]), np.array([[0.5, 0.5, 0.0], [0.2, 0.8, 0.0]]), "3 columns"),
        (np.array([0, 1, 1]), _binary([0.5, 0.5]), "3 rows but P has 2"),
        (np.array([0, 1]), _binary([np.nan, 0.5]), "NaN"),
        (np.array([0, 1]), _binary([np.inf, 0.5]), "NaN or infinite"),
        (np.array([0, 1]), np.array([[0.5, 0.6], [0.5, 0.5]]), "sums to"),
        (np.array([0, 2]), _binary([0.5, 0.5]), "class index 2"),
        (np.array([0, -1]), _binary([0.5, 0.5]), "class index -1"),
        (np.array([0.0, 0.5]), _binary([0.5, 0.5]), "non-integer"),
        (np.array([0, 1]), np.array([[1.5, -0.5], [0.5, 0.5]]), r"outside \[0, 1\]"),
    ],
)
def test_bad_input_raises_data_error(y, P, message):
    acc = MetricAccumulator(2)
    with pytest.raises(DataError, match=message):
        acc.add(y, P)
    assert acc.n == 0


def test_row_sum_tolerance_is_1e6():
    P = np.array([[0.3, 0.7 + 5e-7]])
    assert evaluate_predictions(np.array([1]), P)["n"] == 1
    with pytest.raises(DataError):
        evaluate_predictions(np.array([1]), np.array([[0.3, 0.7 - 2e-6]]))


def test_merge_requires_same_number_of_classes():
    with pytest.raises(DataError, match="2 and 3 classes"):
        MetricAccumulator(2).merge(MetricAccumulator(3))
    with pytest.raises(ParameterError):
        MetricAccumulator(1)


def test_reliability_diagram_uniform_reproduces_ece():
    y, P = _random_case(3, 3, 1000, 60)
    r = evaluate_predictions(y, P)
    d = reliability_diagram(y, P)
    assert d["bin_edges"] == pytest.approx(np.linspace(0, 1, 16))
    assert d["count"].sum() == 1000
    full = d["count"] > 0
    gap = d["count"][full] * np.abs(d["observed_frequency"][full] - d["mean_predicted"][full])
    assert gap.sum() / 1000 == pytest.approx(r["ece"], abs=1e-12)
    assert np.all(np.isnan(d["mean_predicted"][~full]))


def test_reliability_diagram_per_class_and_quantile():
    rng = np.random.default_rng(5)
    p = rng.random(1000)  # distinct values: quantile bins hold exactly n / bins rows
    y = (rng.random(1000) < p).astype(int)
    d = reliability_diagram(y, _binary(p), n_bins=10, strategy="quantile", cls=1)
    assert d["count"].tolist() == [100] * 10
    assert d["bin_edges"][0] == p.min() and d["bin_edges"][-1] == p.max()
    srt = np.sort(p)
    for j in range(10):
        assert d["mean_predicted"][j] == pytest.approx(srt[100 * j : 100 * (j + 1)].mean(), abs=1e-12)
    # ties are never split: all 8 rows at 0.2 share one bin
    d = reliability_diagram(np.array([0] * 8 + [1, 1]), _binary([0.2] * 8 + [0.5, 0.9]), 4, "quantile", cls=1)
    assert d["count"].tolist() == [8, 0, 0, 2]
    assert d["observed_frequency"][0] == 0.0 and d["observed_frequency"][3] == 1.0
    with pytest.raises(ParameterError):
        reliability_diagram(y, _binary(p), strategy="kmeans")
    with pytest.raises(ParameterError):
        reliability_diagram(y, _binary(p), cls=2)


def test_error_reject_curve():
    # confidences 0.55 (wrong), 0.6 (right), 0.9 (right, wrong), 1.0 (right)
    y = np.array([0, 1, 1, 0, 1])
    p1 = np.array([0.55, 0.6, 0.9, 0.9, 1.0])
    c = error_reject_curve(y, _binary(p1))
    assert c["threshold"].tolist() == [0.55, 0.6, 0.9, 1.0, np.inf]
    assert c["reject_rate"].tolist() == pytest.approx([0.0, 0.2, 0.4, 0.8, 1.0])
    assert c["error_rate"][:4].tolist() == pytest.approx([2 / 5, 1 / 4, 1 / 3, 0.0])
    assert math.isnan(c["error_rate"][-1])
    assert c["n_accepted"].tolist() == [5, 4, 3, 1, 0]
    assert c["error_rate"][0] == evaluate_predictions(y, _binary(p1))["error_rate"]


def test_roc_curve_area_is_auc():
    y, P = _random_case(11, 4, 800, 30)
    acc = MetricAccumulator(4).add(y, P)
    aucs = []
    for c in range(4):
        roc = acc.roc_curve(c)
        assert (roc["fpr"][0], roc["tpr"][0], roc["fpr"][-1], roc["tpr"][-1]) == (0, 0, 1, 1)
        aucs.append(np.trapezoid(roc["tpr"], roc["fpr"]))
    assert np.mean(aucs) == pytest.approx(acc.result()["auc"], abs=1e-12)
    with pytest.raises(ParameterError):
        acc.roc_curve()  # multiclass needs an explicit class
    binary = MetricAccumulator(2).add(*_segments(_fm_spec([0.8, 0.6, 0.4, 0.2])))
    roc = binary.roc_curve()
    assert np.trapezoid(roc["tpr"], roc["fpr"]) == pytest.approx(0.62, abs=1e-12)


def test_many_rows_match_scikit_learn():
    """(Its speed on 1,000,000 rows is measured by benchmarks/bench_hot_paths.py, not asserted here.)"""
    rng = np.random.default_rng(0)
    p = rng.random(100_000)
    y = (rng.random(p.size) < p).astype(np.int64)
    r = evaluate_predictions(y, _binary(p))
    assert r["n"] == 100_000
    assert r["brier"] == pytest.approx(brier_score_loss(y, p), rel=1e-12)
    assert r["auc"] == pytest.approx(roc_auc_score(y, p), rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(cases, st.data())
def test_batches_added_one_by_one_are_the_batch_by_batch_merge(case, data):
    """add() keeps integer-count batches aside and merges them in one sort when a table is read: the
    tables are the bits of merging every batch into the running table in turn (the definition), with
    integer weights, and with a fractional-weight batch after them (merged in order from there on)."""
    from calengine.metrics import measures
    from calengine.reductions import tables

    y, P = case
    k, n = P.shape[1], len(y)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=5)))
    fractional = data.draw(st.booleans())
    w = np.asarray(data.draw(st.lists(st.integers(1, 3), min_size=n, max_size=n)), dtype=np.int64)
    acc, want = MetricAccumulator(k), [tables.empty_table() for _ in range(k + 1)]
    for i, idx in enumerate(np.split(np.arange(n), cuts)):
        wi = w[idx] * 0.5 if fractional and i == len(cuts) else w[idx]
        acc.add(y[idx], P[idx], sample_weight=wi)
        if idx.size:
            pred = np.argmax(P[idx], axis=1)
            cols = [(P[idx, c] + 0.0, y[idx] == c) for c in range(k)]
            cols.append((P[idx][np.arange(idx.size), pred] + 0.0, pred == y[idx]))
            wc = measures._check_weight(wi, idx.size)  # int64 when every weight is an integer, as add() reads it
            want = [tables.merge_tables(t, tables.group_rows(v, hit, wc)) for t, (v, hit) in zip(want, cols)]
    got = [*acc._cls, acc._top]
    for g, t in zip(got, want):
        for x, z in zip(g, t):
            assert x.dtype == z.dtype and np.array_equal(x, z)
    assert acc.n == measures._total(want[-1]) and type(acc.n) is type(measures._total(want[-1]))


# ---- the fast paths behind a large evaluation: grouping rows by integer keys, PAV on a grouped table


def _grouped_reference(values, is_pos):
    """A grouped table the slow, obvious way: np.unique over the values, counts by bincount."""
    v, inv = np.unique(np.asarray(values, dtype=np.float64) + 0.0, return_inverse=True)
    pos = np.bincount(inv, weights=is_pos.astype(np.float64), minlength=v.size).astype(np.int64)
    m = np.bincount(inv, minlength=v.size).astype(np.int64)
    return v, pos, m - pos


_PROBS = st.lists(st.sampled_from([0.0, -0.0, 1.0, 0.5, 0.1, 1e-300, 5e-324, 0.3, 0.7]) | st.floats(0.0, 1.0),
                  min_size=0, max_size=60)


@settings(max_examples=40, deadline=None)
@given(_PROBS, st.data())
def test_grouping_by_row_keys_is_the_grouped_table_of_the_rows(values, data):
    # unweighted batches are grouped (and a chunk's batches merged) by sorting int64 keys of the
    # values' bits and the outcome: the table must be the one np.unique gives, -0.0 counted as 0.0
    from calengine.reductions.tables import group_keys, group_rows, row_keys

    y = np.asarray(data.draw(st.lists(st.booleans(), min_size=len(values), max_size=len(values))), dtype=bool)
    want = _grouped_reference(values, y)
    for got in (group_rows(np.asarray(values), y), group_keys(row_keys(np.asarray(values), y)),
                group_keys([row_keys(np.asarray(values[:3]), y[:3]), row_keys(np.asarray(values[3:]), y[3:])])):
        assert [x.dtype for x in got] == [np.float64, np.int64, np.int64]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        assert not np.signbit(got[0]).any()


# values where 1 - p rounds: two class-1 values meeting on one class-0 value, ties at 0.5, 0 and 1
_MIRROR_PROBS = st.lists(st.sampled_from([0.0, 1.0, 0.5, 0.5 - 2**-54, 0.5 - 2**-55, 0.5 + 2**-53, 1e-17, 2e-17,
                                          1e-300, 0.25, 0.75, 1 - 2**-53]) | st.floats(0.0, 1.0),
                         min_size=1, max_size=60)


@settings(max_examples=40, deadline=None)
@given(_MIRROR_PROBS, st.data())
def test_complementary_batches_derive_class_0_and_top_label_tables(p1, data):
    # a binary batch with P[:, 0] == 1 - P[:, 1] on every row groups only its class-1 column; the class-0
    # and top-label tables derived from it (mirror, merge of the halves) must be the tables of the rows,
    # also when some batches of the accumulator are complementary and others not (an ulp off)
    p1 = np.asarray(p1)
    n = p1.size
    y = np.asarray(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    P = np.column_stack((1.0 - p1, p1))
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=3)))
    acc = MetricAccumulator(2)
    rows, offs = [], 0
    for lo, hi in zip([0, *cuts], [*cuts, n]):
        Pb = P[lo:hi].copy()
        if data.draw(st.booleans()):
            Pb[:, 0] = np.nextafter(Pb[:, 0], 0.5)  # not complementary any more (rows still sum to 1)
        acc.add(y[lo:hi], Pb)
        rows.append(Pb)
        offs += int(not np.array_equal(Pb[:, 0], 1.0 - Pb[:, 1]))
    Q = np.concatenate(rows)
    pred = np.argmax(Q, axis=1)
    want = [_grouped_reference(Q[:, 0], y == 0), _grouped_reference(Q[:, 1], y == 1),
            _grouped_reference(Q[np.arange(n), pred], pred == y)]
    # only an accumulator of complementary batches hands out its class-1 table alone (the range
    # builders derive the other two from it), and asking leaves it as it was (read below)
    t1 = acc.complementary_table()
    if offs:
        assert t1 is None
    else:
        for got, w in zip((mirror_table(t1), t1, binary_top(t1)), want):
            assert [x.dtype for x in got] == [np.float64, np.int64, np.int64]
            for g, x in zip(got, w):
                np.testing.assert_array_equal(g, x)
    for got, w in zip([*acc._cls, acc._top], want):
        assert [x.dtype for x in got] == [np.float64, np.int64, np.int64]
        for g, x in zip(got, w):
            np.testing.assert_array_equal(g, x)
        assert not np.signbit(got[0]).any()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=40), st.booleans())
def test_isotonic_recalibration_of_a_table_is_pav_of_its_rows(counts, fractional):
    # CORP runs PAV on the grouped table directly; it must give the blocks of the project's PAV over
    # the table's rows (one per value and outcome, weighted by its count)
    from calengine.metrics.corp import isotonic_recalibration
    from calengine.reductions.pav import pav

    a = np.asarray([c[0] for c in counts], dtype=np.int64)
    b = np.asarray([c[1] for c in counts], dtype=np.int64)
    if a.sum() + b.sum() == 0:
        a[0] = 1
    if fractional:
        a, b = a * 0.75, b * 1.25
    v = np.linspace(0.05, 0.95, a.size)
    starts, bp, bn = isotonic_recalibration(v, a, b)
    blocks = pav(np.concatenate((v, v)), np.repeat([1, 0], v.size), np.concatenate((a, b)).astype(np.float64))
    np.testing.assert_array_equal(starts, np.searchsorted(v, blocks.lo))
    np.testing.assert_array_equal(bp + bn, np.add.reduceat(a + b, starts))
    np.testing.assert_allclose(bp / (bp + bn), blocks.value, rtol=0, atol=1e-15)
