"""The smooth reliability curve of the report (:func:`calengine.metrics.statistics.smooth_reliability`).

Oracle: relplot 1.0.3 itself (the ``test`` extra): its ``KernelSmoother(ReflectedGaussianKernel(sigma))``
and ``prepare_rel_diagram``'s curve and density agree to the last float; its bootstrap band (seeded
through numpy's global state, which its BaggingRegressor draws from) has the width of ours to within
sampling noise where the forecasts are dense.  Merged score ranges give the in-memory curve on any cut.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calengine.metrics.measures import MetricAccumulator
from calengine.metrics.ranged.suite import smooth_reliability_curve
from calengine.reductions.tables import cut_points, slice_range

relplot = pytest.importorskip("relplot")


def _binary(n: int, seed: int):
    rng = np.random.default_rng(seed)
    f = rng.beta(2, 3, n)
    y = (rng.random(n) < f ** 1.3).astype(int)  # miscalibrated: the curve is not the diagonal
    return f, y


def _relplot_curve(f, y, sigma):
    from relplot.estimators import KernelSmoother
    from relplot.kernels import ReflectedGaussianKernel

    t = np.linspace(0, 1, 200)
    return KernelSmoother(ReflectedGaussianKernel(sigma)).fit(f.reshape(-1, 1), y.astype(float)).predict(t.reshape(-1, 1))


@pytest.mark.parametrize("n, seed", [(300, 0), (4000, 1), (20000, 2)])
def test_binary_curve_and_density_are_relplots(n, seed):
    f, y = _binary(n, seed)
    acc = MetricAccumulator(2).add(y, np.column_stack([1 - f, f]))
    curve = acc.smooth_reliability()
    ce, sigma = relplot.smECE(f, y, return_width=True)
    assert curve["sigma"] == sigma == acc.calibration_suite()["smece_sigma"]
    np.testing.assert_allclose(curve["mu"], _relplot_curve(f, y, sigma), rtol=0, atol=1e-12)
    d = relplot.prepare_rel_diagram(f, y, plot_confidence_band=False, report_CE_std=False)
    np.testing.assert_array_equal(curve["mesh"], d["mesh"])
    np.testing.assert_allclose(curve["mu"], d["mu"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(curve["density"], d["density"], rtol=1e-12, atol=1e-12)
    assert np.all(curve["low"] <= curve["mu"] + 1e-15) and np.all(curve["mu"] <= curve["high"] + 1e-15)


def test_multiclass_curve_is_relplots_on_the_top_label():
    rng = np.random.default_rng(3)
    n, k = 5000, 4
    logits = rng.normal(0, 1, (n, k))
    y = rng.integers(0, k, n)
    logits[np.arange(n), y] += 1.2
    P = np.exp(2 * logits) / np.exp(2 * logits).sum(axis=1, keepdims=True)  # over-confident
    conf, correct = P.max(axis=1), (P.argmax(axis=1) == y).astype(int)
    curve = MetricAccumulator(k).add(y, P).smooth_reliability()
    _, sigma = relplot.smECE(conf, correct, return_width=True)
    assert curve["sigma"] == sigma
    np.testing.assert_allclose(curve["mu"], _relplot_curve(conf, correct, sigma), rtol=0, atol=1e-12)


@pytest.mark.filterwarnings("ignore:Passing a dict to DataFrame.from_records:Warning")  # relplot's own pandas call
def test_band_has_the_width_of_relplots_bootstrap_band():
    """relplot's band is the 2.5-97.5 % quantiles of 200 bootstrap refits; ours is the delta method.
    Where the forecasts are dense (density above half its peak) the widths agree within 20 % at every
    mesh point and within 5 % at the median (measured: 0.94-1.11, median 1.001 at n = 4000)."""
    f, y = _binary(4000, 0)
    curve = MetricAccumulator(2).add(y, np.column_stack([1 - f, f])).smooth_reliability()
    np.random.seed(0)  # relplot's BaggingRegressor draws from numpy's global state
    d = relplot.prepare_rel_diagram(f, y, plot_confidence_band=True, report_CE_std=False)
    dense = curve["density"] > 0.5 * curve["density"].max()
    ratio = (curve["high"] - curve["low"])[dense] / (d["upper"] - d["lower"])[dense]
    assert 0.95 < np.median(ratio) < 1.05, np.median(ratio)
    assert 0.8 < ratio.min() and ratio.max() < 1.2, (ratio.min(), ratio.max())


def test_integer_weights_count_as_repeated_rows():
    f, y = _binary(500, 4)
    w = np.random.default_rng(5).integers(1, 4, f.size)
    weighted = MetricAccumulator(2).add(y, np.column_stack([1 - f, f]), sample_weight=w.astype(float))
    repeated = MetricAccumulator(2).add(np.repeat(y, w), np.column_stack([1 - np.repeat(f, w), np.repeat(f, w)]))
    a, b = weighted.smooth_reliability(0.05), repeated.smooth_reliability(0.05)
    for key in ("mu", "low", "high", "density"):
        np.testing.assert_allclose(a[key], b[key], rtol=1e-9, atol=1e-12, err_msg=key)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.integers(2, 3), n=st.integers(2, 300), seed=st.integers(0, 2**32 - 1),
       picks=st.lists(st.floats(0, 1), max_size=5), sigma=st.sampled_from([0.02, 0.1, 0.4]))
def test_ranges_merged_in_order_give_the_in_memory_curve(k, n, seed, picks, sigma):
    rng = np.random.default_rng(seed)
    P = rng.random((n, k))
    P /= P.sum(axis=1, keepdims=True)
    y = rng.integers(0, k, n)
    acc = MetricAccumulator(k).add(y, P)
    whole = acc.smooth_reliability(sigma)
    bounds = sorted(set(picks))

    def cut(table):
        idx = cut_points(table, bounds)
        return [slice_range(table, lo, hi) for lo, hi in zip(idx[:-1], idx[1:])]

    ranged = smooth_reliability_curve([cut(t) for t in acc._cls], cut(acc._top), sigma, scale=float(n))
    for key in ("mu", "low", "high", "density"):
        np.testing.assert_allclose(ranged[key], whole[key], rtol=1e-12, atol=1e-12, err_msg=key)
