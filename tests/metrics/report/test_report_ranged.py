"""The evaluation report drawn from grouped tables cut into score ranges (issue 22 §3).

Oracle: :class:`MetricAccumulator` on the whole table, through the same functions the figures call.
Exact (bit for bit) for every drawn point, bin edge, count, observed frequency and CORP block; the
bins' mean predicted probability is a fixed-point sum on ranges and a float ``bincount`` in memory
(relative 1e-12), and the ROC area a sum of per-range trapezoids (relative 1e-12).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calengine.metrics.measures import MetricAccumulator
from calengine.metrics.ranged.curves import corp_curve, error_reject_thinned, reliability_bins, roc_thinned
from calengine.metrics.report import figures
from calengine.reductions.tables import cut_points, slice_range


def cut(table, boundaries):
    idx = cut_points(table, boundaries)
    return [slice_range(table, lo, hi) for lo, hi in zip(idx[:-1], idx[1:])]


def report_equal(a: dict, b: dict, close=(), where="") -> None:
    assert set(a) == set(b), where
    for key in a:
        x, y = np.asarray(a[key]), np.asarray(b[key])
        assert x.shape == y.shape, f"{where}.{key}: {x.shape} != {y.shape}"
        if key in close:
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=0, err_msg=f"{where}.{key}")
        else:
            assert np.array_equal(x, y, equal_nan=True), f"{where}.{key}: {x} != {y}"


@st.composite
def cases(draw):
    k = draw(st.integers(2, 3))
    n = draw(st.integers(1, 80))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    grid = draw(st.sampled_from([None, 4, 13]))  # None: continuous; else ties on a coarse grid
    raw = rng.random((n, k)) if grid is None else rng.integers(0, grid, (n, k)) + 0.5
    P = raw / raw.sum(axis=1, keepdims=True)
    y = rng.integers(0, k, n)
    picks = draw(st.lists(st.one_of(st.floats(0, 1), st.integers(0, n * k - 1)), max_size=6))
    bounds = sorted({float(P.reshape(-1)[p]) if isinstance(p, int) else p for p in picks})
    return k, y, P, bounds, draw(st.sampled_from([1, 3, 15])), draw(st.sampled_from([3, 7, 4000]))


class _Curves:
    """The in-memory branch of figures.roc_data / error_reject_data (no ``roc_thinned`` attribute)."""

    def __init__(self, acc):
        self.roc_curve, self.error_reject_curve = acc.roc_curve, acc.error_reject_curve


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_report_curves_from_ranges_equal_the_whole_tables(case):
    k, y, P, bounds, bins, max_points = case
    acc = MetricAccumulator(k).add(y, P)
    tables = [(c, t) for c, t in enumerate(acc._cls)] + [(None, acc._top)]
    for c, table in tables:
        ranges = cut(table, bounds)
        for strategy in ("uniform", "quantile"):
            report_equal(acc.reliability_diagram(bins=bins, strategy=strategy, cls=c),
                  reliability_bins(ranges, bins=bins, strategy=strategy), close=("mean_predicted",),
                  where=f"class {c} {strategy}")
        if c is None:
            continue
        report_equal(acc.corp_curve(c), corp_curve(ranges), where=f"corp {c}")
        old = figures.CURVE_MAX_POINTS
        try:
            figures.CURVE_MAX_POINTS = max_points  # thinning shows on small tables too
            whole = figures.roc_data(_Curves(acc), c)
        finally:
            figures.CURVE_MAX_POINTS = old
        ranged = roc_thinned(ranges, max_points=max_points)
        if whole is None:
            assert ranged is None
            continue
        ranged["hull_area"] = float(np.trapezoid(ranged["hull_tpr"], ranged["hull_fpr"]))
        report_equal(whole, ranged, close=("area",), where=f"roc {c}")
        assert ranged["fpr"].size <= max_points + ranged["hull_fpr"].size
    figures.CURVE_MAX_POINTS, old = max_points, figures.CURVE_MAX_POINTS
    try:
        whole = figures.error_reject_data(_Curves(acc))
    finally:
        figures.CURVE_MAX_POINTS = old
    d = error_reject_thinned(cut(acc._top, bounds), max_points=max_points)
    ok = ~np.isnan(d["error_rate"])
    report_equal(whole, {"reject_rate": d["reject_rate"][ok], "error_rate": d["error_rate"][ok]}, where="error-reject")
