"""The calibration metric suite (issue 22) against independent implementations on the same arrays, and
bit for bit the same however its tables are cut into score ranges.

Oracles (test-only dependencies of the ``test`` extra): MAPIE's KS and Kuiper statistics and p-values,
relplot's smooth ECE and binned ECE, the ``uncertainty-calibration`` package's debiased L2 error and
equal-mass plug-in ECE (Kumar, Liang & Ma), statsmodels' logistic GLM for the Cox slope and intercept
and (on patsy's natural cubic spline basis with the same knots) for the ICI, and scipy's chi-square
for Hosmer-Lemeshow on the sorted rows.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calengine.metrics.ranged import suite
from calengine.reductions import tables
from calengine.metrics.measures import MetricAccumulator

REL = 1e-9


def _binary(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.beta(2.0, 3.0, n)
    y = (rng.random(n) < np.clip(1.15 * p - 0.05, 0.0, 1.0)).astype(np.int64)
    return y, p


def _extreme(n=1500, seed=2):
    """A naive-Bayes-like column: most forecasts within 1e-6 of 0 or 1, some exactly 0 or 1 (plain
    Newton from the identity diverges on such logits; the step search must not)."""
    rng = np.random.default_rng(seed)
    p = rng.beta(0.05, 0.05, n)
    p[:20], p[20:40] = 0.0, 1.0
    y = (rng.random(n) < 0.2 + 0.6 * p).astype(np.int64)
    return y, p


def _multiclass(n=1500, k=3, seed=1):
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.full(k, 0.8), n)
    y = np.array([rng.choice(k, p=0.7 * row + 0.3 / k) for row in P])
    return y, P


def _score_column(y, P):
    """What the suite's tests read: P[:, 1] vs y == 1 for two classes, else top label vs correct."""
    if P.ndim == 1 or P.shape[1] == 2:
        p = P if P.ndim == 1 else P[:, 1]
        return p, (y == 1).astype(np.int64)
    return P.max(axis=1), (P.argmax(axis=1) == y).astype(np.int64)


def _logit(p):
    p = np.clip(p, suite.CLIP, 1.0 - suite.CLIP)
    return np.log(p) - np.log1p(-p)


def _hosmer_lemeshow(f, o, groups=10):
    from scipy.stats import chi2

    order = np.argsort(f, kind="stable")
    f, o = f[order], o[order]
    g = np.arange(f.size) * groups // f.size
    n = np.bincount(g, minlength=groups).astype(float)
    E = np.bincount(g, weights=f, minlength=groups)
    O = np.bincount(g, weights=o.astype(float), minlength=groups)
    live = (E > 0) & (E < n)  # a group whose forecasts are all 0 (or all 1) has no variance to test
    stat = np.sum((O[live] - E[live]) ** 2 / (E[live] * (1 - E[live] / n[live])))
    return stat, chi2.sf(stat, np.count_nonzero(live) - 2)


def _ici_oracle(f, o):
    import patsy
    import statsmodels.api as sm

    x = _logit(f)
    t = [float(np.quantile(x, q, method="inverted_cdf")) for q in (0.05, 0.35, 0.65, 0.95)]
    X = np.asarray(patsy.dmatrix(f"cr(x, knots=({t[1]!r}, {t[2]!r}), lower_bound={t[0]!r}, upper_bound={t[3]!r}) - 1",
                                 {"x": x}))
    fit = sm.GLM(o, X, family=sm.families.Binomial()).fit(tol=1e-13)
    return float(np.mean(np.abs(fit.predict(X) - f)))


@pytest.mark.parametrize("data", [_binary, _extreme, _multiclass], ids=["binary", "extreme", "three-class"])
def test_suite_matches_the_reference_implementations(data):
    import calibration as kumar
    import relplot
    import statsmodels.api as sm
    from mapie.metrics import calibration as mapie

    y, P = data()
    k = 2 if P.ndim == 1 else P.shape[1]
    P2 = np.column_stack((1 - P, P)) if P.ndim == 1 else P
    got = MetricAccumulator(k).add(y, P).calibration_suite()
    f, o = _score_column(y, P)

    # MAPIE jitters scores by 1e-8 (relative) before sorting: agreement to ~1e-7
    assert got["ks"] == pytest.approx(mapie.kolmogorov_smirnov_statistic(o, f), rel=1e-6)
    assert got["ks_pvalue"] == pytest.approx(mapie.kolmogorov_smirnov_p_value(o, f), rel=1e-5, abs=1e-10)
    assert got["kuiper"] == pytest.approx(mapie.kuiper_statistic(o, f), rel=1e-6)
    assert got["kuiper_pvalue"] == pytest.approx(mapie.kuiper_p_value(o, f), rel=1e-5, abs=1e-10)
    assert got["ecce_pvalue"] == pytest.approx(got["kuiper_pvalue"], rel=1e-12)  # unclamped here

    sm_ece, sigma = relplot.smECE(f, o, return_width=True)
    assert (got["smece"], got["smece_sigma"]) == (pytest.approx(sm_ece, rel=REL), sigma)

    marginal = P2[:, 1] if k == 2 else P
    assert got["l2_ce_debiased"]["value"] == pytest.approx(
        kumar.lower_bound_scaling_ce(marginal, y, p=2, debias=True, num_bins=15), rel=REL)
    low, high = got["l2_ce_debiased"]["low"], got["l2_ce_debiased"]["high"]
    assert 0.0 <= low <= got["l2_ce_debiased"]["value"] <= high
    assert got["ece_equal_mass"] == pytest.approx(
        kumar.lower_bound_scaling_ce(P2, y, p=1, debias=False, num_bins=15, mode="top-label"), rel=REL)
    assert got["ece_classwise"] == pytest.approx(
        np.mean([relplot.metrics.binnedECE(P2[:, c], (y == c).astype(float), nbins=15) for c in range(k)]), rel=REL)

    cox = sm.GLM(o, sm.add_constant(_logit(f)), family=sm.families.Binomial()).fit(tol=1e-13).params
    assert got["calibration_intercept"] == pytest.approx(cox[0], rel=1e-8, abs=1e-10)
    assert got["calibration_slope"] == pytest.approx(cox[1], rel=1e-8)
    assert got["ici"] == pytest.approx(_ici_oracle(f, o), rel=1e-7)

    stat, pv = _hosmer_lemeshow(f, o)
    assert got["hosmer_lemeshow_pvalue"] == pytest.approx(pv, rel=1e-8, abs=1e-300)
    if data is not _extreme:  # there a group expects 1e-17 events, below the sums' fixed-point resolution
        assert got["hosmer_lemeshow"] == pytest.approx(stat, rel=REL)
    assert got["hosmer_lemeshow_df"] == (8 if data is not _extreme else got["hosmer_lemeshow_df"])


#: MCGrad's ``metrics.ecce_pvalue`` (mcgrad 0.1.5, the ECCE of Arrieta-Ibarra et al. that MCGrad uses) on the
#: arrays of :func:`_ecce_case`, recorded with ``pip install --no-deps mcgrad==0.1.5`` and
#: ``mcgrad.metrics.ecce_pvalue(y, p)`` (weighted: on ``np.repeat(p, w), np.repeat(y, w)``, the rows
#: repeated; MCGrad's own ``sample_weight`` weighs the variance by w², importance weights, not counts).
#: MCGrad itself is not a test dependency: it declares torch, lightgbm and Ax as requirements.
MCGRAD_ECCE_PVALUE = {"calibrated": (0.7222902087169143, 1e-9),
                      # a p-value of 5e-11: MCGrad's series and ours truncate at different terms
                      "miscalibrated": (4.83252327043715e-11, 1e-5),
                      "weighted": (0.003730894087398906, 1e-9)}


def _ecce_case(name):
    rng = np.random.default_rng(2022)
    p = rng.uniform(0.02, 0.98, 5000)
    u = rng.uniform(size=p.size)
    w = rng.integers(0, 4, p.size)
    power = {"calibrated": 1.0, "miscalibrated": 1.15, "weighted": 1.05}[name]
    return p, (u < p ** power).astype(np.int64), (w.astype(np.float64) if name == "weighted" else None)


@pytest.mark.parametrize("name", sorted(MCGRAD_ECCE_PVALUE))
def test_ecce_pvalue_matches_mcgrad(name):
    """``ecce_pvalue`` against MCGrad's on distinct scores, and a weight is a count: the weighted value
    is the rows repeated, which is what MCGrad was given."""
    p, y, w = _ecce_case(name)
    want, rel = MCGRAD_ECCE_PVALUE[name]
    got = MetricAccumulator(2).add(y, np.column_stack([1 - p, p]), sample_weight=w).calibration_suite()
    assert got["ecce_pvalue"] == pytest.approx(want, rel=rel)
    if w is not None:
        k = w.astype(np.int64)
        rp, ry = np.repeat(p, k), np.repeat(y, k)
        repeated = MetricAccumulator(2).add(ry, np.column_stack([1 - rp, rp])).calibration_suite()
        assert repeated["ecce_pvalue"] == got["ecce_pvalue"]


def test_perfectly_calibrated_draws_pass_the_tests_and_a_shifted_model_fails_them():
    rng = np.random.default_rng(7)
    p = rng.uniform(0.05, 0.95, 4000)
    y = (rng.random(p.size) < p).astype(np.int64)
    good = MetricAccumulator(2).add(y, p).calibration_suite()
    bad = MetricAccumulator(2).add(y, np.clip(p + 0.08, 0, 1)).calibration_suite()
    for key in ("ks_pvalue", "kuiper_pvalue", "ecce_pvalue", "hosmer_lemeshow_pvalue"):
        assert good[key] > 0.01 and bad[key] < 1e-6, key
    assert good["calibration_slope"] == pytest.approx(1.0, abs=0.15)
    assert good["ici"] < 0.02 < bad["ici"]


def test_the_calibration_fits_take_two_passes_from_the_logit_histogram(monkeypatch):
    """Cox's line and the ICI's spline start from their fits on the census's logit histogram and finish
    together in two passes over the rows (thirteen before), to the fits' own tolerance of the fits
    started as before (from the identity line; the spline from Cox's line); the census histogram counts
    every row."""
    rng = np.random.default_rng(5)
    p = rng.beta(2, 5, 20000)
    y = (rng.random(p.size) < np.clip(1.2 * p, 0, 1)).astype(np.int64)
    acc = MetricAccumulator(2).add(y, p)
    calls = []
    irls = suite.kernels.irls

    def counting(table, req):
        calls.append(sorted(req["fits"]))
        return irls(table, req)

    monkeypatch.setattr(suite.kernels, "irls", counting)
    got = acc.calibration_suite()
    assert calls == [["cox", "rcs"]] * 2
    hist = suite._logit_histogram(suite._Column([acc._cls[1]], suite._local_map, None, float(p.size),
                                                logit_bins=suite.LOGIT_BINS))
    assert hist["m"].sum() == p.size and hist["a"].sum() == y.sum()
    calls.clear()
    monkeypatch.setattr(suite, "_histogram_fit", lambda *args: None)
    cold = acc.calibration_suite()
    assert len(calls) > 6
    for key in ("calibration_intercept", "calibration_slope", "ici"):
        assert got[key] == pytest.approx(cold[key], rel=1e-9, abs=1e-12), key


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.sampled_from(["beta", "extreme", "shifted", "few"]))
def test_light_rounds_stop_where_the_plain_newton_stops(seed, shape):
    """A fit whose small steps skip the log-likelihood and whose last round skips the Hessian (and
    confirms convergence with the bound of ``_step_bound``) ends at the same parameters, bit for bit,
    with the same ICI numerator as the plain method that computes every round whole; from cold and
    from histogram starts, on every kind of column, including forecasts at 0 and 1."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 3000))
    if shape == "beta":
        p = rng.beta(rng.uniform(0.3, 4), rng.uniform(0.3, 4), n)
    elif shape == "extreme":
        p = rng.beta(0.05, 0.05, n)
        p[: n // 50] = 0.0
    elif shape == "shifted":
        p = np.clip(rng.random(n) + rng.uniform(-0.3, 0.3), 0.0, 1.0)
    else:
        p = rng.choice([0.1, 0.3, 0.5, 0.7, 0.9], n)
    y = (rng.random(n) < np.clip(rng.uniform(0.5, 1.5) * p, 0, 1)).astype(np.int64)
    acc = MetricAccumulator(2).add(y, p)
    col = suite._Column([acc._cls[1]], suite._local_map, None, float(n), logit_bins=suite.LOGIT_BINS)
    hist = suite._logit_histogram(col)
    starts = {"cox": (None, [0.0, 1.0]), "cox_hist": (None, suite._histogram_fit(hist, None, [0.0, 1.0]))}
    xs = np.log(np.clip(p, suite.CLIP, 1 - suite.CLIP)) - np.log1p(-np.clip(p, suite.CLIP, 1 - suite.CLIP))
    knots = np.quantile(xs, [0.05, 0.35, 0.65, 0.95])
    if np.all(np.diff(knots) > 0):
        starts["rcs"] = (knots.tolist(), [0.0, 1.0, 0.0, 0.0])
    for name, (kn, start) in starts.items():
        if start is None:
            continue
        light = suite._fit_all(col, {name: (kn, start, True)})[name]
        plain_gen = suite._newton(start, ici=True)
        theta, _ = next(plain_gen)
        try:
            while True:
                got = col.irls({name: {"theta": theta.tolist(), "knots": kn, "ici": True}})[name]
                theta, _ = plain_gen.send(got)
        except StopIteration as stop:
            plain = stop.value
        assert (light is None) == (plain is None), name
        if plain is not None:
            assert light[0].tolist() == plain[0].tolist(), name
            assert light[1] == plain[1] == got[-2], name


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_the_step_bound_bounds_the_exact_newton_step(seed, spline):
    """``_step_bound`` from the Hessian at ``theta0`` and the gradient at ``theta1`` bounds every
    component of the exact step ``H(theta1)^-1 grad(theta1)`` (numpy on the rows: the oracle), given a
    bound on how far a row's linear predictor moved (``_eta_bound`` of the column's basis)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 400))
    p = rng.beta(rng.uniform(0.2, 3), rng.uniform(0.2, 3), n)
    y = (rng.random(n) < p).astype(np.float64)
    x = np.log(np.clip(p, suite.CLIP, 1 - suite.CLIP)) - np.log1p(-np.clip(p, suite.CLIP, 1 - suite.CLIP))
    knots = np.sort(x)[[n // 20, n // 3, 2 * n // 3, n - 1 - n // 20]]
    knots = knots.tolist() if spline and np.all(np.diff(knots) > 0) else None
    B = np.asarray(suite.kernels.spline_basis(x, knots))
    theta0 = rng.normal(size=len(B)) * 0.3
    step = rng.normal(size=len(B)) * 10.0 ** rng.uniform(-7, -2)
    theta1 = theta0 + step

    def hess_grad(theta):
        mu = 1.0 / (1.0 + np.exp(-(theta @ B)))
        return (B * (mu * (1 - mu))) @ B.T, B @ (y - mu)

    h0, _ = hess_grad(theta0)
    h1, g1 = hess_grad(theta1)
    exact = np.max(np.abs(np.linalg.solve(h1, g1)))
    acc = MetricAccumulator(2).add(y.astype(np.int64), p)
    col = suite._Column([acc._cls[1]], suite._local_map, None, float(n))
    delta = suite._eta_bound(col, knots)(step)
    assert delta >= np.max(np.abs(step @ B))
    bound = suite._step_bound(g1, h0, delta)
    if delta < 1.0:
        assert bound is not None and bound >= exact * (1 - 1e-9)
    else:  # no bound claimed that far out
        assert bound is None


def _cut(table, draw):
    v = table[0]
    if v.size < 2:
        return [table]
    picks = draw(st.lists(st.integers(1, v.size - 1), max_size=4, unique=True))
    idx = tables.cut_points(table, np.sort(v[picks]))
    return [tables.slice_range(table, lo, hi) for lo, hi in zip(idx[:-1], idx[1:])]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_suite_is_bit_identical_over_random_range_cuts(data):
    """The kernels over any cut of the tables into score ranges give the one-range result bit for bit
    (fixed-point sums, exact integer prefixes): the property behind evaluating ranges where they live."""
    k = data.draw(st.sampled_from([2, 3]))
    n = data.draw(st.integers(30, 160))
    seed = data.draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.ones(k), n)
    if data.draw(st.booleans()):  # ties: few distinct values
        P = np.round(P, 1)
        P[:, -1] = 1.0 - P[:, :-1].sum(axis=1)
        P = np.clip(P, 0.0, 1.0)
    y = rng.integers(0, k, n)
    acc = MetricAccumulator(k).add(y, P)
    whole = suite.calibration_suite([[t] for t in acc._cls], [acc._top])
    cut = suite.calibration_suite([_cut(t, data.draw) for t in acc._cls], _cut(acc._top, data.draw))
    assert repr(cut) == repr(whole)


def test_undefined_tests_are_nan_not_errors():
    y = np.array([1, 1, 0, 0])
    p = np.array([0.5, 0.5, 0.5, 0.5])
    got = MetricAccumulator(2).add(y, p).calibration_suite()
    assert got["ks"] == 0.0 and got["ks_pvalue"] == 1.0
    assert math.isnan(got["hosmer_lemeshow_pvalue"])  # one group of risk: no degrees of freedom
    assert math.isnan(got["calibration_slope"])  # no spread in logit(p): the slope is not identified


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_selection_of_the_suite_is_the_same_bits_as_the_whole_suite(data):
    """``parts`` (``evaluate --metrics``): each key computed from a part of the suite, on any cut of the
    tables into ranges, is the whole one-range suite's key bit for bit, and no other key is computed."""
    from calengine.metrics.selection import SUITE_KEYS, needs

    k = data.draw(st.sampled_from([2, 3]))
    n = data.draw(st.integers(30, 160))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    P = rng.dirichlet(np.ones(k), n)
    y = rng.integers(0, k, n)
    weighted = data.draw(st.booleans())
    acc = MetricAccumulator(k).add(y, P, sample_weight=rng.uniform(0.1, 3.0, n) if weighted else None)
    whole = suite.calibration_suite([[t] for t in acc._cls], [acc._top], unit=acc._unit())
    keys = frozenset(data.draw(st.lists(st.sampled_from(SUITE_KEYS), min_size=1, max_size=4)))
    cut = suite.calibration_suite([_cut(t, data.draw) for t in acc._cls], _cut(acc._top, data.draw), unit=acc._unit(),
                                  parts=needs(keys))
    assert keys <= set(cut) and set(cut) <= set(whole)
    assert repr({key: cut[key] for key in keys}) == repr({key: whole[key] for key in keys})
    # a part computes its own keys only: nothing a selection did not need
    assert set(cut) == {key for key in SUITE_KEYS if needs(frozenset([key])) <= needs(keys)}


def test_a_selection_asks_the_first_pass_only_for_what_it_reads():
    """The range builders' census for ``evaluate --metrics smece``: the smooth ECE's grid on the score
    column, and none of the equal-width bins, the logit histogram or the cumulative tests' sums."""
    from calengine.metrics.ranged import kernels
    from calengine.metrics.selection import needs

    reqs = suite.census_requests(2, None, 100.0, needs(frozenset({"smece"})))
    assert {key: (r["grid"], r["logit_bins"], r["bins"], r["cumulative"]) for key, r in reqs.items()} == {
        ("class", 0): (None, None, False, False), ("class", 1): (suite.smece_grid_size(1.0), None, False, False),
        ("top",): (None, None, False, False)}
    y, p = _binary(100)
    acc = MetricAccumulator(2).add(y, p)
    answer = kernels.census(acc._cls[1], reqs[("class", 1)])
    assert set(answer) == {"size", "pos", "neg", "lo", "hi", "grid"}
    whole = suite.census_requests(2, None, 100.0)
    assert whole[("class", 1)]["cumulative"] and whole[("class", 1)]["logit_bins"] == suite.LOGIT_BINS
    assert {"sums", "resid_units", "bins", "grid", "logit_hist"} <= set(kernels.census(acc._cls[1], whole[("class", 1)]))
