"""What one score range contributes to the core metrics of :meth:`MetricAccumulator.result`, the drift
check and the error-reject curve: the code that runs where a range lives (a task, a thread, or the
in-memory accumulator's single range).

Like :mod:`calengine.metrics.ranged.kernels` (the calibration suite's kernels), each function takes one range
``(v, pos, neg)`` of a grouped table (:mod:`calengine.reductions.tables`) and a small request, and returns
a small dict of integers and fixed-point sums (:mod:`calengine.reductions.exact`), so that the client
(:mod:`calengine.metrics.ranged.core`) combines them into results that do not depend on where the table
was cut.  Fractional weights arrive as integer units (``req["unit"]``, see
:func:`calengine.metrics.ranged.kernels.counts`).

Requests share ``unit`` and ``scale`` (the total count: every fixed-point sum's bound).
"""

from __future__ import annotations

import numpy as np

from ...reductions.exact import bin_counts, fixed_sum, fixed_sum_bins
from .kernels import ECE_BINS, counts

__all__ = ["tally", "column_pieces", "column_local", "column_prefix", "top_pieces", "reject_points", "reject_last",
           "LOG_SCALE", "DRIFT_CLIP", "HL_BINS"]

#: log-loss terms are at most ``-ln(1e-15) < 35`` times their count: their sums use ``scale * LOG_SCALE``.
LOG_SCALE = 64.0
#: the drift tests' clip and bins (the values of :mod:`calengine.metrics.drift`, repeated here so a
#: task does not import scipy through that module).
DRIFT_CLIP, HL_BINS = 1e-4, 10


def tally(table, req: dict) -> dict:
    """First pass: the range's number of values and its positive and negative counts (integers)."""
    v, a, b, _ = counts(table, req["unit"])
    return {"size": int(v.size), "pos": int(a.sum()), "neg": int(b.sum())}


def _auc_twice(a, b, neg_before: int, exact: bool, denom: float):
    """This range's share of the doubled AUC numerator ``Σ a (2 · negatives below + b)``: an exact
    int when the whole numerator fits int64 (``exact``), else a fixed-point sum of the terms over
    ``denom`` (the doubled pair count; the total is then the AUC itself in units of 2**-62)."""
    below2 = 2 * (neg_before + np.cumsum(b) - b) + b
    if exact:
        return int(np.dot(a, below2))
    return fixed_sum(a.astype(np.float64) * below2.astype(np.float64) / denom, 1.0)


def column_pieces(table, req: dict) -> dict:
    """Second pass over a range of one class column, given what lies below it: :func:`column_local`
    and :func:`column_prefix` of the range together (the in-memory accumulator's one pass).

    ``req``: ``unit``, ``scale``, ``clip`` (the log loss's), ``neg_before``/``count_before`` (integer
    counts below the range), ``auc`` (``None``, or ``(exact, denom)`` of :func:`_auc_twice`), flags
    ``brier`` (the Flach-Matsubara sums and CORP's raw scores and local PAV blocks) and ``drift``
    (Spiegelhalter's sums and the reliability chi-square's equal-count bins).  Always the log-loss sum
    of the rows of this class (``Σ a · -log clip(v)``)."""
    out = column_local(table, req)
    out.update(column_prefix(table, req))
    return out


def column_local(table, req: dict) -> dict:
    """The pieces of :func:`column_pieces` that need nothing from other ranges (the log-loss sum, and
    with ``brier`` the Flach-Matsubara sums, CORP's raw scores and the range's PAV blocks): what a
    range's builder computes while the range is in memory (:mod:`calengine.metrics.ranged.engine`).
    ``req``: ``unit``, ``scale``, ``clip``, ``brier``."""
    v, a, b, m = counts(table, req["unit"])
    out: dict = {}
    if v.size == 0:
        return out
    S = req["scale"]
    af, bf, mf = a.astype(np.float64), b.astype(np.float64), m.astype(np.float64)
    log_p = np.log(np.clip(v, req["clip"], 1.0))
    out["nll"] = fixed_sum(af * -log_p, S * LOG_SCALE)
    if req.get("brier"):
        from ..corp import isotonic_recalibration

        out["brier"] = fixed_sum(af * (1.0 - v) ** 2 + bf * v**2, S)
        out["cal"] = fixed_sum((af - mf * v) ** 2 / mf, S)
        out["ref"] = fixed_sum(af * bf / mf, S)
        log_q = np.log(np.clip(1.0 - v, req["clip"], 1.0))
        out["corp_log"] = fixed_sum(-(af * log_p + bf * log_q), S * LOG_SCALE)
        starts, bp, bn = isotonic_recalibration(v, a, b)
        out["blocks"] = (v[starts].copy(), np.asarray(bp, np.int64), np.asarray(bn, np.int64))
    return out


def column_prefix(table, req: dict) -> dict:
    """The pieces of :func:`column_pieces` that need the counts below the range: the AUC's share
    (``auc``) and the drift check's sums and bins (``drift``; Spiegelhalter's sums are local, but
    they ride along with the bins that are not).  ``req``: ``unit``, ``scale``, ``neg_before``,
    ``count_before``, ``N``, ``auc``, ``drift``."""
    if req.get("auc") is None and not req.get("drift"):
        return {}
    v, a, b, m = counts(table, req["unit"])
    out: dict = {}
    if v.size == 0:
        return out
    if req.get("auc") is not None:
        out["auc"] = _auc_twice(a, b, req["neg_before"], *req["auc"])
    if req.get("drift"):
        S = req["scale"]
        af, mf = a.astype(np.float64), m.astype(np.float64)
        p = np.clip(v, DRIFT_CLIP, 1.0 - DRIFT_CLIP)
        out["spieg_num"] = fixed_sum((af - mf * p) * (1.0 - 2.0 * p), S)
        out["spieg_var"] = fixed_sum(mf * (1.0 - 2.0 * p) ** 2 * p * (1.0 - p), S)
        first = req["count_before"] + np.cumsum(m) - m
        idx = np.minimum(first * HL_BINS // max(req["N"], 1), HL_BINS - 1)
        out["hl"] = {"obs": bin_counts(idx, a, HL_BINS),
                     "exp": fixed_sum_bins(idx, mf * p, S, HL_BINS),
                     "var": fixed_sum_bins(idx, mf * p * (1.0 - p), S, HL_BINS)}
    return out


def top_pieces(table, req: dict) -> dict:
    """A range of the top-label table (value = confidence, pos = correct, neg = wrong): the wrong
    count, Duin & Tax's ``Σ correct (1 - v)² + wrong v²`` and the :data:`ECE_BINS` equal-width bins
    (count, correct, ``Σ m v``) behind ``ece``/``mce``."""
    v, a, b, m = counts(table, req["unit"])
    out = {"wrong": int(b.sum())}
    if v.size == 0:
        return out
    S = req["scale"]
    af, bf, mf = a.astype(np.float64), b.astype(np.float64), m.astype(np.float64)
    out["q"] = fixed_sum(af * (1.0 - v) ** 2 + bf * v**2, S)
    edges = np.linspace(0.0, 1.0, ECE_BINS + 1)
    idx = np.clip(np.searchsorted(edges[1:-1], v, side="right"), 0, ECE_BINS - 1)
    out["bins"] = {"count": bin_counts(idx, m, ECE_BINS), "pos": bin_counts(idx, a, ECE_BINS),
                   "mv": fixed_sum_bins(idx, mf * v, S, ECE_BINS)}
    return out


def reject_points(table, req: dict) -> dict:
    """The error-reject curve's points whose global index (0 = reject nothing) falls in this range:
    ``req["offset"]`` is the global index of the range's first value, ``count_before``/``wrong_before``
    the counts below it, ``indices`` the wanted global point indices.  Point ``i`` rejects the values
    below the ``i``-th distinct confidence; returns ``[(i, threshold, rejected, wrong_rejected)]``."""
    v, a, b, m = counts(table, req["unit"])
    lo = req["offset"]
    want = [i for i in req["indices"] if lo <= i < lo + v.size]
    if not want:
        return {"points": []}
    local = np.asarray(want, dtype=np.int64) - lo
    rejected = req["count_before"] + np.concatenate(([0], np.cumsum(m)))[local]
    wrong = req["wrong_before"] + np.concatenate(([0], np.cumsum(b)))[local]
    return {"points": [(int(i), float(v[j]), int(r), int(w)) for i, j, r, w in zip(want, local, rejected, wrong)]}


def reject_last(table, req: dict) -> dict:
    """Per limit in ``req["limits"]``: the global index of this range's last curve point whose reject
    rate (rows below the point over ``req["N"]``, divided as the whole curve divides) is ``<= limit``,
    or -1.  Reject rates grow with the index, so the client takes the largest answer over ranges."""
    v, _, _, m = counts(table, req["unit"])
    if v.size == 0:
        return {"last": [-1] * len(req["limits"])}
    rate = (req["count_before"] + (np.cumsum(m) - m)) / req["N"]
    last = np.searchsorted(rate, np.asarray(req["limits"], dtype=np.float64), side="right") - 1
    return {"last": [int(req["offset"] + j) if j >= 0 else -1 for j in last.tolist()]}
