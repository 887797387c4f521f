"""The report's curves from grouped tables cut into score ranges: reliability bins, CORP, thinned ROC.

Why: ``evaluate --report`` drew its figures from whole grouped tables (one value per distinct
prediction: 4.2 GB at 10M rows, issue 22 §3).  Here, as in :mod:`calengine.metrics.ranged.core`, each range
answers a small request where it lives (``mapper(kernel, ranges, requests)``) and this process
combines O(ranges + bins + points) numbers:

* **reliability bins** (:func:`reliability_bins`): equal-width bins are per-range sums; the
  equal-frequency edges are the values at integer count levels, found from the ranges' tallies and
  read by the one range holding each level (a sweep of the prefix counts).  Counts are integers and
  the bins' forecast sums fixed-point (:mod:`calengine.reductions.exact`), so the bins are bit-identical
  however the table is cut;
* **CORP curve** (:func:`corp_curve`): PAV over the ranges' own PAV blocks, which equals PAV over the
  values (see :mod:`calengine.metrics.ranged.core`); the curve is its blocks, few where forecasts are close
  to calibrated (a few thousand at 10^7 rows);
* **ROC curve, thinned** (:func:`roc_thinned`): at most ``max_points`` points evenly spread over the
  ``D + 1`` points of the curve (``D`` distinct values), plus every vertex of its upper convex hull
  (where the curve turns outwards).  A hull vertex of the whole curve is a hull vertex of its own
  range's points, so each range returns its local hull and this process takes the hull of their
  union.  Points are the same integer counts divided by the same totals as the whole curve, so every
  kept point is bit-identical; the trapezoidal area is summed per range (equal to the whole curve's
  to rounding, ~1e-15 relative).

Integer counts only (``evaluate --report`` refuses ``--weight``).  :class:`MetricAccumulator`'s
report methods run these functions on its one range, so an evaluation cut into ranges draws the same
figures (tested in ``tests/metrics/report/test_report_ranged.py``).
"""

from __future__ import annotations

import numpy as np

from ...reductions.exact import fixed_sum_bins, fixed_to_float
from .core import local_map, prefix_requests

__all__ = ["reliability_bins", "corp_curve", "roc_thinned", "error_reject_thinned", "ROC_MAX_POINTS"]

#: evenly spread points a thinned ROC curve keeps (its hull vertices come on top): a few thousand
#: points are indistinguishable from millions at the report's figure sizes.
ROC_MAX_POINTS = 4000


def _table(table):
    v, a, b = table
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    return np.asarray(v, dtype=np.float64), a, b


def _sizes(table, req: dict) -> dict:
    v, a, b = _table(table)
    return {"size": int(v.size), "count": int((a + b).sum()), "pos": int(a.sum()), "neg": int(b.sum()),
            "first": float(v[0]) if v.size else None, "last": float(v[-1]) if v.size else None}


def _values_at(table, req: dict) -> dict:
    """Per level ``L`` in ``req["levels"]`` (already scaled by the bins): the first value whose cumulative
    count times ``req["bins"]`` reaches ``L``, when it lies in this range, as ``(j, value)``."""
    v, a, b = _table(table)
    scaled = (req["count_before"] + np.cumsum(a + b)) * req["bins"]
    out = []
    for j, level in req["levels"]:
        i = int(np.searchsorted(scaled, level, side="left"))
        if i < v.size:
            out.append((j, float(v[i])))
    return {"values": out}


def _binned(table, req: dict) -> dict:
    """Per bin of ``req["edges"]``: row count, positives (ints) and Σ count·value (fixed point)."""
    v, a, b = _table(table)
    edges = np.asarray(req["edges"], dtype=np.float64)
    n_bins = edges.size - 1
    side = "left" if req["right_closed"] else "right"
    idx = np.clip(np.searchsorted(edges[1:-1], v, side=side), 0, n_bins - 1)
    m = a + b
    return {"count": np.bincount(idx, weights=m, minlength=n_bins).astype(np.int64).tolist(),
            "pos": np.bincount(idx, weights=a, minlength=n_bins).astype(np.int64).tolist(),
            "sum": fixed_sum_bins(idx, m * v, req["scale"], n_bins)}


def reliability_bins(ranges: list, *, bins: int, strategy: str, mapper=None) -> dict:
    """:meth:`MetricAccumulator.reliability_diagram` of one table cut into ``ranges`` (same keys and
    bins; ``mean_predicted`` from fixed-point sums, so the same bits for any cut).

    Bounded memory: this function, on ranges that no process holds whole.  Exact, in memory (its oracle):
    :meth:`calengine.metrics.measures.MetricAccumulator.reliability_diagram`.
    """
    mapper = mapper or local_map
    sizes = mapper(_sizes, ranges, [{}] * len(ranges))
    n = sum(s["count"] for s in sizes)
    if strategy == "uniform":
        edges = np.linspace(0.0, 1.0, int(bins) + 1)
    else:
        live = [s for s in sizes if s["size"]]
        levels = [(j, j * n) for j in range(1, int(bins))]
        reqs, before = [], 0
        for s in sizes:
            # the levels this range holds: those above the counts below it, up to its own
            top = (before + s["count"]) * int(bins)
            reqs.append({"count_before": before, "bins": int(bins),
                         "levels": [(j, lv) for j, lv in levels if before * int(bins) < lv <= top]})
            before += s["count"]
        found = {j: x for o in mapper(_values_at, ranges, reqs) for j, x in o["values"]}
        inner = [found.get(j, live[-1]["last"]) for j in range(1, int(bins))]
        edges = np.asarray([live[0]["first"], *inner, live[-1]["last"]], dtype=np.float64)
    scale = float(n)
    outs = mapper(_binned, ranges, [{"edges": edges.tolist(), "right_closed": strategy == "quantile",
                                     "scale": scale}] * len(ranges))
    cnt = np.sum([o["count"] for o in outs], axis=0).astype(np.int64)
    pos = np.sum([o["pos"] for o in outs], axis=0).astype(np.int64)
    sums = [sum(o["sum"][j] for o in outs) for j in range(edges.size - 1)]
    conf = np.asarray([fixed_to_float(t, scale) for t in sums])
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_pred = np.where(cnt > 0, conf / cnt, np.nan)
        observed = np.where(cnt > 0, pos / cnt, np.nan)
    return {"bin_edges": edges, "mean_predicted": mean_pred, "observed_frequency": observed, "count": cnt}


def _corp_blocks(table, req: dict) -> dict:
    from ..corp import isotonic_recalibration

    v, a, b = _table(table)
    live = (a + b) > 0
    v, a, b = v[live], a[live], b[live]
    if v.size == 0:
        return {"lo": [], "hi": [], "pos": [], "neg": []}
    starts, bp, bn = isotonic_recalibration(v, a, b)
    ends = np.concatenate((starts[1:], [v.size])) - 1
    return {"lo": v[starts], "hi": v[ends], "pos": bp, "neg": bn}


def corp_curve(ranges: list, *, mapper=None) -> dict:
    """:meth:`MetricAccumulator.corp_curve` of one table cut into ``ranges``: ``lo``, ``hi``,
    ``value``, ``count`` per isotonic block.

    Bounded memory: this function, on ranges that no process holds whole.  Exact, in memory (its oracle):
    :meth:`calengine.metrics.measures.MetricAccumulator.corp_curve`.
    """
    from ..corp import isotonic_recalibration

    mapper = mapper or local_map
    outs = [o for o in mapper(_corp_blocks, ranges, [{}] * len(ranges)) if len(o["lo"])]
    lo = np.concatenate([o["lo"] for o in outs])
    hi = np.concatenate([o["hi"] for o in outs])
    bp = np.concatenate([o["pos"] for o in outs])
    bn = np.concatenate([o["neg"] for o in outs])
    starts, pos, neg = isotonic_recalibration(lo, bp, bn)
    ends = np.concatenate((starts[1:], [lo.size])) - 1
    cnt = (pos + neg).astype(np.int64)
    return {"lo": lo[starts], "hi": hi[ends], "value": pos / cnt, "count": cnt}


def _roc_points(table, req: dict) -> dict:
    """This range's ROC points (global index ``i`` counts the ``i`` highest distinct values): those in
    ``req["indices"]``, the vertices of the upper hull of its own points (plus the next point down the
    value order, the start of its leftmost edge), and the trapezoid area of its edges."""
    from ..roc import convex_hull_vertices

    v, a, b = _table(table)
    P, N, D = req["P"], req["N"], req["D"]
    # ascending local j covers global points D - off - j; the point of j = size (the values above this
    # range only) closes its lowest edge
    tp = P - (req["pos_before"] + np.concatenate(([0], np.cumsum(a))))
    fp = N - (req["neg_before"] + np.concatenate(([0], np.cumsum(b))))
    idx = D - (req["offset"] + np.arange(v.size + 1))
    tpr, fpr = (tp / P)[::-1], (fp / N)[::-1]
    idx = idx[::-1]
    hull = convex_hull_vertices(fpr, tpr)
    want = np.isin(idx, np.asarray(req["indices"], dtype=np.int64))
    keep = np.union1d(np.flatnonzero(want), hull)
    return {"points": [(int(i), float(x), float(y)) for i, x, y in zip(idx[keep], fpr[keep], tpr[keep])],
            "hull": idx[hull].tolist(), "area": float(np.trapezoid(tpr, fpr))}


def roc_thinned(ranges: list, *, max_points: int = ROC_MAX_POINTS, mapper=None) -> dict | None:
    """The ROC curve of one class column cut into ``ranges``, thinned: ``fpr``/``tpr`` at most
    ``max_points`` evenly spread point indices plus the hull vertices, ``hull_fpr``/``hull_tpr`` the upper
    convex hull (:func:`calengine.metrics.roc.convex_hull_vertices` of the whole curve), ``area`` the
    trapezoidal area of the whole curve; None when the class has no positives or no negatives.

    Bounded memory: this function, on ranges that no process holds whole.  Exact, in memory (its oracle):
    :meth:`calengine.metrics.measures.MetricAccumulator.roc_curve`.
    """
    from ..roc import convex_hull_vertices

    mapper = mapper or local_map
    sizes = mapper(_sizes, ranges, [{}] * len(ranges))
    P, N = sum(s["pos"] for s in sizes), sum(s["neg"] for s in sizes)
    if not P or not N:
        return None
    D = sum(s["size"] for s in sizes)
    n = D + 1
    even = np.arange(n) if n <= max_points else np.unique(np.rint(np.linspace(0, n - 1, max_points)).astype(np.int64))
    reqs = prefix_requests(sizes, P=P, N=N, D=D, indices=even.tolist())
    outs = [o for o, s in zip(mapper(_roc_points, ranges, reqs), sizes) if s["size"]]
    points = {i: (x, y) for o in outs for i, x, y in o["points"]}
    local_hull = sorted({i for o in outs for i in o["hull"]})
    hx = np.asarray([points[i][0] for i in local_hull])
    hy = np.asarray([points[i][1] for i in local_hull])
    hull = [local_hull[j] for j in convex_hull_vertices(hx, hy)]
    keep = sorted(set(even.tolist()) | set(hull))
    return {"fpr": np.asarray([points[i][0] for i in keep]), "tpr": np.asarray([points[i][1] for i in keep]),
            "hull_fpr": np.asarray([points[i][0] for i in hull]), "hull_tpr": np.asarray([points[i][1] for i in hull]),
            "area": float(sum(o["area"] for o in outs))}


def error_reject_thinned(top_ranges: list, *, max_points: int = ROC_MAX_POINTS, mapper=None) -> dict:
    """The error-reject curve's first ``D`` points (the last, rejecting everything, has no error rate)
    at ``max_points`` evenly spread indices ``rint(linspace(0, D - 1, max_points))`` (all of them when
    ``D <= max_points``): the points the report draws, bit-identical to the whole curve's.

    Bounded memory: this function, on ranges that no process holds whole.  Exact, in memory (its oracle):
    :meth:`calengine.metrics.measures.MetricAccumulator.error_reject_points`.
    """
    from .core import point_arrays, error_reject_found, reject_setup

    mapper = mapper or local_map
    tallies, D, N, n_wrong = reject_setup(top_ranges, mapper, None)
    idx = (np.arange(D) if D <= max_points
           else np.unique(np.rint(np.linspace(0, D - 1, max_points)).astype(np.int64))).tolist()
    found = error_reject_found(top_ranges, mapper, None, tallies, idx)
    return point_arrays(idx, found, D, N, n_wrong, None, None)
