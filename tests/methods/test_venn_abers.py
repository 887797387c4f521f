"""Venn–ABERS: the fast tables against the definition, CVAP, the model/CLI plumbing, and validity."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit

from calengine.errors import DataError
from calengine.methods import venn_abers as va
from calengine.methods.venn_abers import cvap_pairs, merge_pair, venn_abers_pairs, venn_abers_tables
from calengine.reductions.pav import pav, pool_ties, predict_step
from calengine_builtins.calibrators import IsotonicCalibrator, VennAbersCalibrator

from cli_helpers import REPO, run_cli

PIMA = REPO / "data" / "pima.parquet"


def brute_force(s, y, w, t):
    """The definition: two isotonic fits (the project's PAV, ties pooled) with (t, 0) and (t, 1) added."""
    out = []
    for label in (0, 1):
        blocks = pav(np.r_[s, t], np.r_[y, label], np.r_[w, 1.0])
        out.append(float(predict_step(blocks.lo, blocks.value, [t])[0]))
    return out


@st.composite
def calibration_sets(draw):
    n = draw(st.integers(1, 14))
    s = np.array(draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n)), dtype=float)
    y = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    w = np.array(draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]), min_size=n, max_size=n)))
    if not np.any(w > 0):
        w[0] = 1.0
    return s, y, w


@settings(max_examples=150, deadline=None)
@given(data=calibration_sets())
def test_tables_equal_two_isotonic_fits_per_test_score(data):
    s, y, w = data
    xs, wy, ws = pool_ties(s, y, w)
    tables = venn_abers_tables(ws, wy)
    # every calibration score (ties), every gap between them, and both outside ends
    t = np.r_[np.arange(-4.0, 5.0), np.arange(-4.0, 4.0) + 0.5]
    p0, p1 = venn_abers_pairs(xs, *tables, t)
    for i, ti in enumerate(t):
        b0, b1 = brute_force(s, y, w, ti)
        assert p0[i] == pytest.approx(b0, abs=1e-12), (ti, "p0")
        assert p1[i] == pytest.approx(b1, abs=1e-12), (ti, "p1")
    assert np.all(p0 <= p1 + 1e-15)


def _venn_abers_tables_one_by_one(w, wy):
    """:func:`venn_abers_tables` as it was before its queries were vectorised: one query at a time,
    each merging left while it violates, else right (the reference of the bit-for-bit test)."""
    w = [float(v) for v in np.asarray(w, dtype=np.float64)]
    wy = [float(v) for v in np.asarray(wy, dtype=np.float64)]
    k = len(w)
    lw, lwy, lprev, lhead = va._prefix_stack(w, wy)
    rw, rwy, rnext, rhead = va._suffix_stack(w, wy)
    rhead[k] = -1

    def value(cw: float, cwy: float, pl: int, pr: int) -> float:
        while True:
            if pl != -1 and lwy[pl] * cw >= cwy * lw[pl]:
                cw += lw[pl]
                cwy += lwy[pl]
                pl = lprev[pl]
            elif pr != -1 and rwy[pr] * cw <= cwy * rw[pr]:
                cw += rw[pr]
                cwy += rwy[pr]
                pr = rnext[pr]
            else:
                return cwy / cw

    tie = np.empty((2, k))
    gap = np.empty((2, k + 1))
    for label in (0, 1):
        for j in range(k):
            pl = lhead[j - 1] if j > 0 else -1
            tie[label, j] = value(w[j] + 1.0, wy[j] + label, pl, rhead[j + 1])
        for j in range(k + 1):
            pl = lhead[j - 1] if j > 0 else -1
            gap[label, j] = value(1.0, float(label), pl, rhead[j])
    np.clip(tie, 0.0, 1.0, out=tie)
    np.clip(gap, 0.0, 1.0, out=gap)
    return tie[0], tie[1], gap[0], gap[1]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 3000),
       pattern=st.sampled_from(["trend", "runs", "reversed", "weighted"]))
def test_vectorised_queries_equal_the_one_by_one_loop_bit_for_bit(seed, k, pattern):
    """The tables' queries advance together in NumPy but take each query's own merge steps, so every
    value has the bits of the one-query-at-a-time loop: rising labels (short merges), long runs and a
    falling trend (long merges, the Python tail), weights with zeros and fractions."""
    rng = np.random.default_rng(seed)
    w = np.ones(k)
    if pattern == "trend":
        wy = (rng.random(k) < np.linspace(0.05, 0.95, k)).astype(float)
    elif pattern == "runs":
        wy = np.repeat(rng.integers(0, 2, k // 50 + 1), 50)[:k].astype(float)
    elif pattern == "reversed":
        wy = (rng.random(k) < np.linspace(0.95, 0.05, k)).astype(float)
    else:
        w = rng.choice([0.0, 0.5, 1.0, 2.0, 7.0], k)
        w[0] = max(w[0], 1.0)
        wy = w * rng.random(k) * (rng.random(k) < np.linspace(0.1, 0.9, k))
    fast = venn_abers_tables(w, wy)
    slow = _venn_abers_tables_one_by_one(w, wy)
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)


def test_hand_computed_pairs():
    # C = {(1, 0), (2, 1)}.  t = 3: with label 0 PAV pools (2,1),(3,0) -> 1/2; with label 1 the
    # points are already increasing -> 1.  t = 0: label 0 -> 0; label 1 pools (0,1),(1,0) -> 1/2.
    cal = VennAbersCalibrator().fit([1.0, 2.0], [0, 1])
    p0, p1 = cal.predict_interval([3.0, 0.0, 1.0])
    np.testing.assert_allclose(p0, [0.5, 0.0, 0.0])
    # t = 1 ties with (1, 0): the group {0, label}; label 1 gives the group mean 1/2 < 1 -> 1/2
    np.testing.assert_allclose(p1, [1.0, 0.5, 0.5])
    np.testing.assert_allclose(cal.predict([3.0, 0.0]), [1 / 1.5, 0.5 / 1.5])


def test_weight_two_equals_the_row_twice():
    rng = np.random.default_rng(4)
    s = np.round(rng.normal(size=60), 1)
    y = (rng.random(60) < expit(2 * s)).astype(int)
    w = rng.integers(0, 3, size=60).astype(float)
    w[:2] = 1.0
    rep = np.repeat(np.arange(60), w.astype(int))
    t = np.linspace(-3, 3, 61)
    a = VennAbersCalibrator().fit(s, y, sample_weight=w).predict_interval(t)
    b = VennAbersCalibrator().fit(s[rep], y[rep]).predict_interval(t)
    np.testing.assert_allclose(a, b, atol=1e-12)


def test_merged_probability_is_monotone_and_inside_the_interval():
    rng = np.random.default_rng(1)
    s = rng.normal(size=500)
    y = (rng.random(500) < expit(1.5 * s)).astype(int)
    cal = VennAbersCalibrator().fit(s, y)
    t = np.sort(np.r_[s, np.linspace(-4, 4, 300)])
    p0, p1 = cal.predict_interval(t)
    p = cal.predict(t)
    assert np.all(np.diff(p0) >= 0) and np.all(np.diff(p1) >= 0) and np.all(np.diff(p) >= -1e-15)
    assert np.all((p0 <= p) & (p <= p1))
    # the interval narrows towards the isotonic fit as the calibration set grows
    assert np.mean(p1 - p0) < 0.05
    iso = IsotonicCalibrator().fit(s, y).predict(t)
    assert np.max(np.abs(p - iso)) < 0.25


def test_bad_input_is_a_data_error():
    with pytest.raises(DataError, match="only one class"):
        VennAbersCalibrator().fit([0.1, 0.2], [1, 1])
    with pytest.raises(DataError, match="NaN"):
        VennAbersCalibrator().fit([0.1, np.nan], [0, 1])


def test_cvap_formula_hand_computed():
    # GM(p1) = sqrt(0.5 * 0.8), GM(1 - p0) = sqrt(0.8 * 0.6); p = GM(p1) / (GM(1 - p0) + GM(p1))
    low, high, p = cvap_pairs([[0.2], [0.4]], [[0.5], [0.8]])
    gm1, gm0 = np.sqrt(0.4), np.sqrt(0.48)
    np.testing.assert_allclose(p, [gm1 / (gm0 + gm1)])
    np.testing.assert_allclose([low[0], high[0]], [1 - gm0, gm1])
    assert low[0] <= p[0] <= high[0]
    # one fold: the IVAP itself
    low, high, p = cvap_pairs([[0.2]], [[0.5]])
    np.testing.assert_allclose([low[0], high[0], p[0]], [0.2, 0.5, merge_pair(0.2, 0.5)])


def _data(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    prob = expit(1.2 * X[:, 0] - 0.8 * X[:, 1])
    y = (rng.random(n) < prob).astype(int)
    return X, y, prob


def test_ensemble_model_is_cvap_and_refit_model_is_ivap():
    from calengine import CalibratedClassifier

    X, y, _ = _data(600, 0)
    Xt, _, _ = _data(200, 1)
    ens = CalibratedClassifier(learner="gaussian_nb", method="venn_abers", cv=3, seed=0).fit(X, y)
    model = ens.model_
    assert model.is_venn_abers and model.has_intervals and len(model.members) == 3
    p0s, p1s = zip(*(m.calibrators[0].predict_interval(m.scores(Xt)[:, 0]) for m in model.members))
    low, high, p = cvap_pairs(p0s, p1s)
    np.testing.assert_allclose(ens.predict_proba(Xt)[:, 1], p, atol=1e-12)
    # not the average of the members' merged probabilities (the two differ on this data)
    averaged = np.mean([merge_pair(a, b) for a, b in zip(p0s, p1s)], axis=0)
    assert np.max(np.abs(averaged - p)) > 1e-6

    ref = CalibratedClassifier(learner="gaussian_nb", method="venn_abers", cv=3, seed=0, mode="refit").fit(X, y)
    (m,) = ref.model_.members
    p0, p1 = m.calibrators[0].predict_interval(m.scores(Xt)[:, 0])
    np.testing.assert_allclose(ref.predict_proba(Xt)[:, 1], merge_pair(p0, p1), atol=1e-15)


def _ivap_runs(n_runs, n_cal, n_test, seed, shift=0.0):
    """``n_runs`` independent IVAPs on generated data with known probabilities; pooled test outputs."""
    rng = np.random.default_rng(seed)
    P0, P1, Y = [], [], []
    for _ in range(n_runs):
        s_cal = rng.normal(size=n_cal)
        y_cal = (rng.random(n_cal) < expit(2 * s_cal - 0.5)).astype(int)
        s = rng.normal(size=n_test)
        y = (rng.random(n_test) < expit(2 * s - 0.5)).astype(int)
        p0, p1 = VennAbersCalibrator().fit(s_cal, y_cal).predict_interval(s + shift)
        P0.append(p0)
        P1.append(p1)
        Y.append(y)
    return np.concatenate(P0), np.concatenate(P1), np.concatenate(Y)


def _bin_misses(p0, p1, y, n_bins=10):
    """Bins of rows by merged p whose observed frequency leaves [mean p0, mean p1] by > 3 std errors."""
    p = merge_pair(p0, p1)
    misses = 0
    for idx in np.array_split(np.argsort(p, kind="stable"), n_bins):
        freq = y[idx].mean()
        se = np.sqrt(max(freq * (1 - freq), 0.01) / idx.size)
        misses += not (p0[idx].mean() - 3 * se <= freq <= p1[idx].mean() + 3 * se)
    return misses


def test_validity_interval_covers_observed_frequency_per_bin():
    """IVAP validity on generated data with known probabilities, calibration and test sets held out.

    Vovk & Petej's guarantee is over the draw of the calibration set *and* the test row (one of p0,
    p1 is calibrated for exchangeable data), not conditional on one calibration set: with a single
    400-row calibration set a bin's frequency missed its interval by 0.13 (the calibration set's
    own block noise, shared by every test row).  So the check pools 400 independent runs (100
    calibration rows, 50 test rows each; 20,000 test rows) and bins them by the merged p.  Every bin's
    positive frequency must lie within [mean p0, mean p1] up to 3 binomial standard errors (about
    0.01 per 2,000-row bin): with fixed seeds the test is deterministic, and a broken map moves the
    frequency much further, as the shifted control shows (most bins fail it).
    """
    p0, p1, y = _ivap_runs(400, 100, 50, seed=7)
    assert np.all(p0 <= p1)
    assert 0.01 < np.mean(p1 - p0) < 0.15  # informative, not trivially wide
    assert _bin_misses(p0, p1, y) == 0
    assert _bin_misses(*_ivap_runs(400, 100, 50, seed=7, shift=1.0)) >= 5


@pytest.fixture(scope="module")
def va_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("va") / "m"
    r = run_cli("--quiet", "fit", PIMA, "--target", "class", "--cv", "3", "--method", "venn_abers",
                "--workers", "1", "--output", out)
    assert r.returncode == 0, r
    return out


def test_cli_score_intervals_writes_p_low_p_high(va_model, tmp_path):
    r = run_cli("--quiet", "score", va_model, PIMA, "--output", tmp_path / "s", "--intervals", "--workers", "1")
    assert r.returncode == 0, r
    df = pd.read_parquet(tmp_path / "s")
    assert {"p_low", "p_high", "p_1", "p_0"} <= set(df.columns)
    assert np.all(df.p_low <= df.p_1 + 1e-12) and np.all(df.p_1 <= df.p_high + 1e-12)
    assert 0 < (df.p_high - df.p_low).mean() < 0.2
    # the same probabilities as without intervals (the Python API's predict_proba)
    from calengine import load_model

    model = load_model(va_model)
    np.testing.assert_allclose(model.predict_proba(pd.read_parquet(PIMA))[:, 1], df.p_1, atol=1e-15)


def test_cli_plugins_shows_venn_abers():
    r = run_cli("plugins", "venn_abers")
    assert r.returncode == 0, r
    assert "Venn" in r.stdout


def test_inconsistent_state_is_a_model_format_error():
    from calengine.errors import ModelFormatError

    state = VennAbersCalibrator().fit([0.1, 0.5, 0.9], [0, 1, 1]).to_state()
    restored = VennAbersCalibrator().from_state(dict(state))
    np.testing.assert_array_equal(restored.predict([0.3, 0.7]), VennAbersCalibrator().fit(
        [0.1, 0.5, 0.9], [0, 1, 1]).predict([0.3, 0.7]))
    for key, value in (("gap_p0_", state["gap_p0_"][:-1]), ("xs_", state["xs_"][::-1]),
                       ("tie_p1_", state["tie_p1_"] + 2.0)):
        with pytest.raises(ModelFormatError, match="venn_abers"):
            VennAbersCalibrator().from_state({**state, key: value})
