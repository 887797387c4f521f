"""The core metrics, the drift check and the error-reject curve from grouped tables cut into score ranges.

Why: a table of continuous predictions has as many distinct values as rows, so holding a class
column's whole grouped table in one process costs three numbers per row (issue 22 §1).  Every metric
here is instead combined from small per-range answers of the kernels in
:mod:`calengine.metrics.ranged.core_kernels`, run through ``mapper(kernel, ranges, requests)`` wherever the
ranges live (this process by default, one range at a time from disk, or tasks on workers), plus the
prefix counts this side passes along (what lies below each range).  The client holds O(ranges + bins)
numbers, and for CORP the isotonic blocks of each range (far fewer than values: PAV pools a calibrated
forecast into a few thousand blocks at 10^7 rows).

Bit-identical however the table is cut: counts and prefixes are integers, every sum over values is a
fixed-point sum (:mod:`calengine.reductions.exact`), and CORP's isotonic recalibration is PAV over the
ranges' own PAV blocks, which equals PAV over the values (pooling adjacent violators inside a range is
a step the global PAV also takes, and PAV's result does not depend on the order of its steps).
:class:`~calengine.metrics.measures.MetricAccumulator` computes its results with these functions on its
one range, so an evaluation cut into ranges reproduces it bit for bit (tested with hypothesis over
partitionings and cuts in ``tests/metrics/ranged/test_engine.py``).

Conventions: ``class_ranges[c]`` is the list of ranges (increasing, no value split) of class column
``c``, ``top_ranges`` those of the top-label table; ``unit`` is None for integer counts, else the
weight of one integer unit of fractional weights (:func:`calengine.metrics.ranged.kernels.counts`); ``n`` is
the reported row count (the total weight).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from . import core_kernels as ck
from ...reductions.exact import fixed_to_float

__all__ = ["core_result", "ranged_drift", "error_reject_points", "error_reject_at", "local_map", "prefix_requests"]

Mapper = Callable[[Callable, list, list], list]


def local_map(fn, ranges, requests):
    """The default mapper: every range in this process, in order."""
    return [fn(r, q) for r, q in zip(ranges, requests)]


def prefix_requests(tallies, **common) -> list[dict]:
    """One request per range with the integer counts below it (``pos_before``, ``neg_before``,
    ``count_before``) and the global index of its first value (``offset``)."""
    reqs, pos, neg, off = [], 0, 0, 0
    for t in tallies:
        reqs.append({**common, "pos_before": pos, "neg_before": neg, "count_before": pos + neg, "offset": off})
        pos, neg, off = pos + t["pos"], neg + t["neg"], off + t["size"]
    return reqs


def _tallies(ranges, mapper, unit):
    t = mapper(ck.tally, ranges, [{"unit": unit}] * len(ranges))
    return t, sum(x["pos"] for x in t), sum(x["neg"] for x in t)


def _total(outs, key: str) -> int:
    return sum(o[key] for o in outs if key in o)


def add_lists(lists):
    """Element-wise sums of equal-length lists (exact for Python integers); None for no lists."""
    out = None
    for x in lists:
        out = list(x) if out is None else [p + q for p, q in zip(out, x)]
    return out


def _corp(outs, N: int, S: float) -> dict:
    """CORP's Brier and log-loss terms of one column: the raw scores summed in fixed point, the
    recalibrated ones from PAV over the ranges' PAV blocks (see the module docstring)."""
    from ..corp import brier_sum, log_sum, isotonic_recalibration

    parts = [o["blocks"] for o in outs if "blocks" in o]
    lo = np.concatenate([p[0] for p in parts])
    bp = np.concatenate([p[1] for p in parts])
    bn = np.concatenate([p[2] for p in parts])
    _, ba, bb = isotonic_recalibration(lo, bp, bn)
    ba, bb = ba.astype(np.float64), bb.astype(np.float64)
    r = ba / (ba + bb)
    tot_a, tot_b = np.array([ba.sum()]), np.array([bb.sum()])
    base = tot_a / float(N)
    out = {}
    for name, s_x, s_sum in (("brier", fixed_to_float(_total(outs, "brier"), S), brier_sum),
                             ("log_loss", fixed_to_float(_total(outs, "corp_log"), S * ck.LOG_SCALE), log_sum)):
        s_r, s_c = s_sum(ba, bb, r), s_sum(tot_a, tot_b, base)
        out[name] = {"score": s_x / N, "mcb": (s_x - s_r) / N, "dsc": (s_c - s_r) / N, "unc": s_c / N}
    return out


def core_result(class_ranges: list[list], top_ranges: list, *, n, unit: float | None = None,
                clip: float = 1e-15, mapper: Mapper | None = None, local: dict | None = None,
                drift: dict | None = None) -> dict:
    """Every metric of :meth:`MetricAccumulator.result` (same keys, same definitions) from ranges.

    Needs at least one row.  ``clip``: the log loss's probability clip (``LOG_LOSS_CLIP``).
    ``local``: the range-local pieces already computed where the ranges were built, by table
    (``("class", c)``: :func:`~calengine.metrics.ranged.core_kernels.column_local` answers, ``("top",)``:
    :func:`~calengine.metrics.ranged.core_kernels.top_pieces` answers), each ``(scale, answers)`` and used only
    when computed for this ``clip``, the same scale and (class tables) the same ``brier`` flag as here:
    then only the pieces that need prefixes (the AUC's) read the ranges.  ``drift``: a dict that,
    given, receives the drift check's pieces of the tested columns, computed in the same pass
    (``{c: (scale, answers)}``, for :func:`ranged_drift`'s ``pieces``).

    Bounded memory: this function, on ranges that no process holds whole.  Exact, in memory (its oracle):
    :meth:`calengine.metrics.measures.MetricAccumulator.result`.
    """
    from ..corp import combine_columns

    mapper = mapper or local_map
    local = local or {}
    k = len(class_ranges)
    cols = [1] if k == 2 else list(range(k))
    top_t, n_correct, n_wrong = _tallies(top_ranges, mapper, unit)
    N = n_correct + n_wrong
    S = float(N)
    top = _local(local, ("top",), S, {}, len(top_ranges))
    if top is None:
        top = mapper(ck.top_pieces, top_ranges, [{"unit": unit, "scale": S}] * len(top_ranges))
    brier = cal = ref = nll = 0
    aucs, corps = [], []
    for c in range(k):
        ranges = class_ranges[c]
        base = {"unit": unit, "scale": S, "clip": clip, "N": N}
        done = _local(local, ("class", c), S, {"clip": clip, "brier": c in cols}, len(ranges))
        if c in cols:
            tallies, n_pos, n_neg = _tallies(ranges, mapper, unit)
            auc = None
            if n_pos and n_neg:
                auc = (2 * n_pos * n_neg < 2**62, 2.0 * float(n_pos) * float(n_neg))
            reqs = prefix_requests(tallies, **base, auc=auc, brier=True, drift=drift is not None)
            if done is None:
                outs = mapper(ck.column_pieces, ranges, reqs)
            else:
                outs = [{**d, **p} for d, p in zip(done, mapper(ck.column_prefix, ranges, reqs))]
            if drift is not None:
                drift[c] = (S, [{key: o[key] for key in _DRIFT_KEYS if key in o} for o in outs])
            brier += _total(outs, "brier")
            cal += _total(outs, "cal")
            ref += _total(outs, "ref")
            if auc is None:
                aucs.append(math.nan)
            elif auc[0]:
                aucs.append(_total(outs, "auc") / auc[1])
            else:
                aucs.append(fixed_to_float(_total(outs, "auc"), 1.0))
            corps.append(_corp(outs, N, S))
        else:
            outs = done if done is not None else mapper(ck.column_pieces, ranges, [base] * len(ranges))
        nll += _total(outs, "nll")
    log_loss = fixed_to_float(nll, S * ck.LOG_SCALE) / N
    if k == 2:
        auc_value = aucs[0]
    else:
        live = [x for x in aucs if not math.isnan(x)]
        auc_value = float(np.mean(live)) if live else math.nan
    error_rate = n_wrong / N
    q = fixed_to_float(_total(top, "q"), S) / N
    bins = [o["bins"] for o in top if "bins" in o]
    cnt = np.asarray(add_lists(b["count"] for b in bins), dtype=np.float64)
    pos_sum = np.asarray(add_lists(b["pos"] for b in bins), dtype=np.float64)
    conf_sum = np.asarray([fixed_to_float(t, S) for t in add_lists(b["mv"] for b in bins)])
    nonempty = cnt > 0
    gap = np.abs(pos_sum - conf_sum)
    return {
        "n": n,
        "n_classes": k,
        "brier": fixed_to_float(brier, S) / N,
        "log_loss": log_loss,
        "log_loss_bits": log_loss / math.log(2.0),
        "auc": auc_value,
        "error_rate": error_rate,
        "ece": float(gap.sum()) / N,
        "mce": float(np.max(gap[nonempty] / cnt[nonempty])),
        "calibration_loss": fixed_to_float(cal, S) / N,
        "refinement_loss": fixed_to_float(ref, S) / N,
        "confidence_q": q,
        "confidence_rho": q / error_rate - 0.5 if n_wrong else math.nan,
        **combine_columns(corps),
    }


_DRIFT_KEYS = ("spieg_num", "spieg_var", "hl")


def _local(local: dict, key, scale: float, flags: dict, size: int):
    """The range-local answers of table ``key`` in ``local`` if they were computed for ``scale`` and
    ``flags`` (and every range), else None (see :func:`core_result`)."""
    entry = local.get(key)
    if entry is None or entry[0] != scale or len(entry[2]) != size or entry[1] != flags:
        return None
    return entry[2]


def ranged_drift(class_ranges: list[list], alpha: float, *, unit: float | None = None,
                 mapper: Mapper | None = None, pieces: dict | None = None) -> dict:
    """:func:`calengine.metrics.drift.calibration_drift` from ranges: Spiegelhalter's z and the
    reliability chi-square on :data:`~calengine.metrics.drift.HL_BINS` equal-count bins per tested
    column, Bonferroni over them; same keys.  ``pieces``: what :func:`core_result` computed for it in
    its pass (its ``drift`` dict), used for a column whose total count is the scale they were computed
    for (fractional weights' units may round to another total per table) instead of reading the ranges
    again.

    Bounded memory: this function, on ranges that no process holds whole.  Exact, in memory (its oracle):
    :meth:`calengine.metrics.measures.MetricAccumulator.drift_check`.
    """
    from ..drift import check_alpha, drift_verdict, spiegelhalter_from_sums, chi2_from_bins

    alpha = check_alpha(alpha)
    mapper = mapper or local_map
    w = 1.0 if unit is None else float(unit)
    k = len(class_ranges)
    columns = []
    for c in ([1] if k == 2 else range(k)):
        ranges = class_ranges[c]
        tallies, n_pos, n_neg = _tallies(ranges, mapper, unit)
        N = n_pos + n_neg
        S = float(N)
        known = (pieces or {}).get(c)
        if known is not None and known[0] == S and len(known[1]) == len(ranges):
            outs = known[1]
        else:
            outs = mapper(ck.column_pieces, ranges,
                          prefix_requests(tallies, unit=unit, scale=S, clip=1e-15, N=N, drift=True))
        sz = spiegelhalter_from_sums(fixed_to_float(_total(outs, "spieg_num"), S) * w,
                                     fixed_to_float(_total(outs, "spieg_var"), S) * w)
        hl = [o["hl"] for o in outs if "hl" in o]
        obs = np.asarray(add_lists(h["obs"] for h in hl), dtype=np.float64) * w
        exp = np.asarray([fixed_to_float(t, S) for t in add_lists(h["exp"] for h in hl)]) * w
        var = np.asarray([fixed_to_float(t, S) for t in add_lists(h["var"] for h in hl)]) * w
        columns.append({"class": c, "spiegelhalter": sz, "reliability_chi2": chi2_from_bins(obs, exp, var)})
    return drift_verdict(columns, alpha)


def reject_setup(top_ranges, mapper, unit):
    tallies, _, n_wrong = _tallies(top_ranges, mapper, unit)
    D = sum(t["size"] for t in tallies)
    N = sum(t["pos"] + t["neg"] for t in tallies)
    return tallies, D, N, n_wrong


def error_reject_found(top_ranges, mapper, unit, tallies, indices) -> dict:
    reqs = [{**r, "wrong_before": r["neg_before"], "indices": indices}
            for r in prefix_requests(tallies, unit=unit)]
    found = {}
    for o in mapper(ck.reject_points, top_ranges, reqs):
        for i, thr, rej, wr in o["points"]:
            found[i] = (thr, rej, wr)
    return found


def point_arrays(indices, found, D, N, n_wrong, n, w):
    """Arrays of :meth:`MetricAccumulator.error_reject_curve` at ``indices`` (point D rejects all)."""
    thr = np.asarray([found[i][0] if i < D else np.inf for i in indices])
    rejected = np.asarray([found[i][1] if i < D else N for i in indices], dtype=np.int64)
    wrong_rej = np.asarray([found[i][2] if i < D else n_wrong for i in indices], dtype=np.int64)
    accepted = N - rejected
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.where(accepted > 0, (n_wrong - wrong_rej) / accepted, np.nan)
    return {"threshold": thr, "reject_rate": rejected / N, "error_rate": err,
            "n_accepted": accepted if w is None else accepted * w}


def error_reject_points(top_ranges: list, *, max_points: int = 101, n=None, unit: float | None = None,
                        mapper: Mapper | None = None) -> dict:
    """The error-reject curve thinned to at most ``max_points`` points evenly spread over its
    ``D + 1`` points (``D`` distinct confidences), the first rejecting nothing and the last everything:
    what ``evaluate --json`` prints, without the whole curve in this process.

    Bounded memory: this function, on ranges that no process holds whole.  Exact, in memory (its oracle):
    :meth:`calengine.metrics.measures.MetricAccumulator.error_reject_points`.
    """
    mapper = mapper or local_map
    tallies, D, N, n_wrong = reject_setup(top_ranges, mapper, unit)
    idx = np.unique(np.linspace(0, D, min(D + 1, max_points)).round().astype(int)).tolist()
    found = error_reject_found(top_ranges, mapper, unit, tallies, [i for i in idx if i < D])
    return point_arrays(idx, found, D, N, n_wrong, n, unit)


def error_reject_at(top_ranges: list, rates, *, unit: float | None = None, mapper: Mapper | None = None) -> list:
    """Error rate among accepted rows at the last curve point whose reject rate is ``<= rate + 1e-12``,
    per rate (None if no point qualifies; NaN when nothing is accepted): the text table of ``evaluate``.

    Bounded memory: this function, on ranges that no process holds whole.  Exact, in memory (its oracle):
    :meth:`calengine.metrics.measures.MetricAccumulator.error_reject_at`.
    """
    mapper = mapper or local_map
    tallies, D, N, n_wrong = reject_setup(top_ranges, mapper, unit)
    # the largest point index whose rejected count, divided by N as the whole curve would, stays <= the rate
    limits = [rate + 1e-12 for rate in rates]
    reqs = [{**r, "N": N, "limits": limits} for r in prefix_requests(tallies, unit=unit)]
    best = [-1] * len(limits)
    for o in mapper(ck.reject_last, top_ranges, reqs):
        best = [max(b, x) for b, x in zip(best, o["last"])]
    best = [D if 1.0 <= lim else b for b, lim in zip(best, limits)]
    wanted = sorted({b for b in best if 0 <= b < D})
    found = error_reject_found(top_ranges, mapper, unit, tallies, wanted)
    out = []
    for b in best:
        if b < 0:
            out.append(None)
            continue
        arr = point_arrays([b], found, D, N, n_wrong, None, unit)
        out.append(float(arr["error_rate"][0]))
    return out
