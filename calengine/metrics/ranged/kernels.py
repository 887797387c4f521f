"""What one score range of a grouped table contributes to each metric: the code that runs where the
range lives (a Dask task, a thread, or the in-memory accumulator's one range).

Every function takes one range ``(v, pos, neg)`` (see :mod:`calengine.reductions.tables`) and a small
request dict, and returns a small dict: integers, fixed-point sums (:mod:`calengine.reductions.exact`)
and a few floats read off the table.  The client (:mod:`calengine.metrics.engine`) sends each range
what it needs from the ranges before it (the counts and fixed-point residuals below it, the global
index of its first value) and combines the answers, so results do not depend on where the table was
cut: every count is an integer, every sum fixed-point, every prefix an exact integer.

Fractional weights are turned into integers at the start of every kernel: counts in units of
``unit = W * 2**-52`` (``W`` the total weight, known before any range is read), so float tables take
the same integer paths as counted ones (a weight below ``unit`` counts as zero).

Requests share these keys: ``unit`` (None for integer counts), ``scale`` (the global bound every
fixed-point sum uses: the total count), ``clip`` (the logit's probability clip, :func:`irls` only).
"""

from __future__ import annotations

import numpy as np

from ...reductions.exact import (
    bin_counts,
    fixed_sum,
    fixed_sum_binnings_terms,
    fixed_sum_bins,
    fixed_sum_bins_of_terms,
    fixed_sum_rows,
    fixed_units,
)
from .cache import derived

__all__ = ["counts", "census", "sweep", "irls", "grids", "logit_basis", "ECE_BINS", "grid_histograms",
           "LOGIT_BOUND", "logit_histogram",
           "spline_basis"]

#: number of equal-width bins of ``ece``/``mce``, ``ece_classwise`` and the uniform reliability diagrams.
ECE_BINS = 15
#: the logit histogram (:func:`logit_histogram`) covers ``[-LOGIT_BOUND, LOGIT_BOUND]``: every clipped
#: forecast's logit (``|logit(1e-15)|`` is 34.5).
LOGIT_BOUND = 35.0


def counts(table, unit):
    """``(v, a, b, m)`` with integer counts: as stored, or float weights in units of ``unit`` (kept
    with a cached range, :func:`calengine.metrics.ranged.cache.derived`: every pass reads them)."""
    return derived(table, ("counts", unit), lambda: _counts(table, unit))


def _counts(table, unit):
    v, a, b = table
    if unit is not None and (a.dtype.kind == "f" or b.dtype.kind == "f"):
        a = np.rint(np.asarray(a, dtype=np.float64) / unit).astype(np.int64)
        b = np.rint(np.asarray(b, dtype=np.float64) / unit).astype(np.int64)
    else:
        a = np.asarray(a, dtype=np.int64)
        b = np.asarray(b, dtype=np.int64)
    return np.asarray(v, dtype=np.float64), a, b, a + b


def grid_histograms(v, a, m, size: int, scale: float):
    """relplot's ``smooth_round_to_grid`` of this range on a grid of ``size`` points of [0, 1]: each
    row's weight split linearly between its two neighbouring grid points, summed per point for the
    weight itself, the forecast and the event; three lists of fixed-point sums."""
    pos = (v * (size - 1)).astype(np.int64).clip(0, size - 2)
    frac = v * (size - 1) - pos
    below = 1.0 - frac
    mf, af = m.astype(np.float64), a.astype(np.float64)
    # the lower and the upper neighbours' shares binned apart, each index in value order (so the
    # sorted runs' fast path applies), and their integers added: the same sums as binning both
    # shares at once; the two indices' runs found once for the three terms
    return fixed_sum_bins_of_terms([pos, pos + 1], [(below * x, frac * x) for x in (mf, mf * v, af)], scale, size)


def census(table, req: dict) -> dict:
    """First pass over a range: its size and counts, ``Σ m v (1 - v)`` (the spread of the cumulative
    calibration differences), its residual ``Σ (a - m v)`` in :func:`fixed_units` (what the next range's
    path starts from) and on request its equal-width bins and smooth-ECE grid histograms.

    ``req``: ``unit``, ``scale``; flags ``bins`` (the :data:`ECE_BINS` equal-width bins of this
    column), ``grid`` (a grid size for the smooth ECE, or None), ``cumulative`` (default true: the spread
    and the residual, which only the cumulative tests read; ``evaluate --metrics`` without them skips
    two exact sums over the range)."""
    v, a, b, m = counts(table, req["unit"])
    S = req["scale"]
    af, mf = a.astype(np.float64), m.astype(np.float64)
    out = {"size": int(v.size), "pos": int(a.sum()), "neg": int(b.sum()),
           "lo": float(v[0]) if v.size else None, "hi": float(v[-1]) if v.size else None}
    if v.size == 0:
        return out
    if req.get("cumulative", True):
        resid = af - mf * v
        out["sums"] = {"var": fixed_sum(mf * v * (1.0 - v), S)}
        out["resid_units"] = int(fixed_units(resid, S).sum())
    if req.get("bins"):
        edges = np.linspace(0.0, 1.0, ECE_BINS + 1)
        idx = np.clip(np.searchsorted(edges[1:-1], v, side="right"), 0, ECE_BINS - 1)
        out["bins"] = {"count": bin_counts(idx, m, ECE_BINS), "pos": bin_counts(idx, a, ECE_BINS),
                       "mv": fixed_sum_bins(idx, mf * v, S, ECE_BINS)}
    if req.get("grid"):
        out["grid"] = {req["grid"]: grid_histograms(v, a, m, req["grid"], S)}
    if req.get("logit_bins"):
        out["logit_hist"] = logit_histogram(table, req["unit"], req["logit_bins"], req["clip"], S)
    return out


def logit_histogram(table, unit, n_bins: int, clip: float, scale: float) -> dict:
    """A fine histogram of ``x = logit(clip(v))`` over a range: ``n_bins`` equal-width bins of
    ``[-LOGIT_BOUND, LOGIT_BOUND]``, per bin the count, the events and the fixed-point sums of ``m x``
    and ``a x`` (in units of ``scale * 100``, as :func:`irls`'s sums), for the span of bins the range
    touches: ``{"first": index of its first bin, "m", "a", "mx", "ax": [...]}`` (ranges are cut by value,
    so their spans barely overlap and the client holds O(bins + ranges)).  Empty for an empty range.

    Why: the calibration fits (:mod:`calengine.metrics.ranged.suite`) start Newton from the fit on this grouped
    table, which lies within about the square of a bin's width of the fit on the rows, so two or three
    exact passes over the rows finish a fit instead of ten or more.  Counts are integers and ``m x``
    fixed-point, so the histogram (and the start) does not depend on where the table was cut."""
    v, a, _, m = counts(table, unit)
    if v.size == 0:
        return {}
    x = derived(table, ("logit_basis", clip, None), lambda: logit_basis(v, clip, None))[1]
    idx = np.floor((x + LOGIT_BOUND) * (n_bins / (2.0 * LOGIT_BOUND))).astype(np.int64).clip(0, n_bins - 1)
    first = int(idx.min())
    idx -= first
    span = int(idx.max()) + 1
    mf = m.astype(np.float64)
    # both sums over the same bins: their runs found once
    (mx,), (ax,) = fixed_sum_binnings_terms([(idx, span)], (mf * x, a * x), scale * 100.0)
    return {"first": first, "m": bin_counts(idx, m, span), "a": bin_counts(idx, a, span), "mx": mx, "ax": ax}


def grids(table, req: dict) -> dict:
    """The smooth ECE's grid histograms of a range for each size in ``req["sizes"]``."""
    v, a, _, m = counts(table, req["unit"])
    if v.size == 0:
        return {}
    return {size: grid_histograms(v, a, m, size, req["scale"]) for size in req["sizes"]}


def _bin_index(first, rule: str, B: int, N: int):
    """Equal-count bin of each value group from the count of rows below it (``first``).

    ``"floor"``: ``floor(first * B / N)`` (the inverted-CDF quantile bins of the reliability diagram
    and the drift chi-square); ``"split"``: ``numpy.array_split`` of the sorted rows into ``B`` parts
    (the first ``N mod B`` parts one row longer), the binning of Kumar et al.'s estimator."""
    if rule == "floor":
        return np.minimum(first * B // max(N, 1), B - 1)
    q, r = divmod(N, B)
    if q == 0:
        return np.minimum(first, B - 1)
    big = r * (q + 1)
    return np.where(first < big, first // (q + 1), r + (first - big) // max(q, 1)).clip(0, B - 1)


def sweep(table, req: dict) -> dict:
    """Second pass over a range, given what lies below it.

    ``req``: ``unit``, ``scale``, ``offset`` (global index of the range's first value),
    ``pos_before``/``neg_before`` (integer counts below the range), ``resid_before`` (fixed-point
    residual units below it), ``N`` (the total count); optional ``ks`` (bool: the maximum and minimum
    of the cumulative calibration differences in fixed units), ``binnings`` (``[(name, rule, B)]``:
    per equal-count bin the count, events and the fixed-point sums of ``m v``, ``m v²``, ``a v``),
    ``levels`` (``{name: [L, ...]}``: the global index and value of the first value whose inclusive
    count reaches ``L``, or None in every other range)."""
    v, a, b, m = counts(table, req["unit"])
    out: dict = {}
    if v.size == 0:
        return out
    cum_pos = req["pos_before"] + np.cumsum(a)
    cum_neg = req["neg_before"] + np.cumsum(b)
    first = cum_pos + cum_neg - m
    incl = cum_pos + cum_neg
    S, N = req["scale"], req["N"]
    if req.get("ks"):
        resid = a.astype(np.float64) - m.astype(np.float64) * v
        path = req["resid_before"] + np.cumsum(fixed_units(resid, S))
        out["ks"] = (int(path.max()), int(path.min()))
    binnings = [(name, _bin_index(first, rule, B, N), B) for name, rule, B in req.get("binnings", ())]
    if binnings:
        # the same three terms in every binning: their fixed-point limbs are taken once
        mv = m.astype(np.float64) * v
        sums = dict(zip(("mv", "mvv", "av"),
                        fixed_sum_binnings_terms([(idx, B) for _, idx, B in binnings], (mv, mv * v, a * v), S)))
        for j, (name, idx, B) in enumerate(binnings):
            out[name] = {"count": bin_counts(idx, m, B), "pos": bin_counts(idx, a, B),
                         **{key: sums[key][j] for key in ("mv", "mvv", "av")}}
    levels = {}
    for name, targets in req.get("levels", {}).items():
        found = []
        for L in targets:
            i = int(np.searchsorted(incl, L, side="left"))
            found.append((req["offset"] + i, float(v[i])) if i < v.size and (i > 0 or first[0] < L) else None)
        levels[name] = found
    if levels:
        out["levels"] = levels
    return out


def logit_basis(v, clip: float, knots):
    """Columns of the calibration fits' design at forecasts ``v``: ``[1, x]`` with ``x = logit(clip(v))``
    (Cox), or with ``knots`` (4 increasing logits) also the two restricted cubic spline terms of
    Harrell's parametrisation (scaled by the squared knot span)."""
    p = np.clip(v, clip, 1.0 - clip)
    x = np.log(p)
    np.negative(p, out=p)
    np.subtract(x, np.log1p(p, out=p), out=x)  # log(p) - log1p(-p), without temporaries
    return spline_basis(x, knots)


def spline_basis(x, knots):
    """:func:`logit_basis` at logits ``x``."""
    cols = [np.ones_like(x), x]
    if knots is not None:
        t = np.asarray(knots, dtype=np.float64)
        k = t.size
        norm = (t[-1] - t[0]) ** 2

        def cube(knot):
            u = np.subtract(x, knot)
            np.maximum(u, 0.0, out=u)
            c = np.multiply(u, u)
            return np.multiply(c, u, out=c)  # (u * u) * u, not u ** 3: the power function costs several times more

        # the cubes at the last two knots are the same arrays in every term: taken once (the same floats)
        last2, last = cube(t[k - 2]), cube(t[k - 1])
        for j in range(k - 2):
            # cube(x - t_j) - cube(x - t_{k-2}) * (t_{k-1} - t_j) / (t_{k-1} - t_{k-2})
            #   + cube(x - t_{k-1}) * (t_{k-2} - t_j) / (t_{k-1} - t_{k-2}), then / norm: the same
            # operations in the same order (each product divided, not multiplied by a quotient)
            span = t[k - 1] - t[k - 2]
            s = cube(t[j])
            term = np.multiply(last2, t[k - 1] - t[j])
            np.subtract(s, np.divide(term, span, out=term), out=s)
            np.multiply(last, t[k - 2] - t[j], out=term)
            np.add(s, np.divide(term, span, out=term), out=s)
            cols.append(np.divide(s, norm, out=s))
    return cols


#: values per block of :func:`irls`: its ~20 arrays of a block fit a core's cache.
IRLS_BLOCK = 1 << 13


def _irls_block(B, theta, af, mf, v, scale: float, ici: bool, hessian: bool = True, loglik: bool = True) -> list[int]:
    """:func:`irls`'s sums over one block of values (basis columns ``B``, the first all ones).

    Every term is the float of the plain expressions ``B @ theta`` (column by column, from 0),
    ``mu = 0.5 + 0.5 tanh(eta / 2)``, ``m mu (1 - mu) b_i b_j``, ...; they are computed here in place
    and into the rows of one array (a round computes some twenty per value), the products in the
    same order, so the floats are the same bit for bit.  Without ``hessian`` the Hessian's terms are
    left out (the gradient's rows follow each other), without ``loglik`` the log-likelihood's; every
    other row is the same float."""
    # B @ theta as elementwise products added column by column: a BLAS product may round differently
    # for different row counts, which would make the sums depend on where the table was cut; the
    # first column is ones, so it adds 0.0 + theta[0] everywhere
    eta = np.full(v.size, 0.0 + theta[0])
    for col, th in zip(B[1:], theta[1:]):
        eta += col * th
    mu = np.multiply(eta, 0.5)
    np.tanh(mu, out=mu)
    np.multiply(mu, 0.5, out=mu)
    np.add(mu, 0.5, out=mu)  # expit, overflow-free: 0.5 + 0.5 tanh(eta / 2)
    k = len(B)
    terms = np.empty((k + (k * (k + 1) // 2 if hessian else 0) + int(ici) + int(loglik), v.size))
    mm = mf * mu
    resid = np.subtract(af, mm)
    if hessian:
        wt = np.subtract(1.0, mu)
        np.multiply(mm, wt, out=wt)  # m mu (1 - mu)
        # the first column is ones and x * 1.0 is x: its products are copies
        terms[0] = resid
        terms[1] = wt
        for j in range(1, k):
            np.multiply(wt, B[j], out=terms[1 + j])
        row = 1 + k
        wb = np.empty(v.size)
        for i in range(1, k):
            np.multiply(resid, B[i], out=terms[row])
            np.multiply(wt, B[i], out=wb)
            for j in range(i, k):
                np.multiply(wb, B[j], out=terms[row + 1 + j - i])
            row += 1 + k - i
    else:
        terms[0] = resid
        for i in range(1, k):
            np.multiply(resid, B[i], out=terms[i])
        row = k
    if ici:
        np.subtract(mu, v, out=mm)
        np.abs(mm, out=mm)
        np.multiply(mf, mm, out=terms[row])
        row += 1
    if not loglik:
        return fixed_sum_rows(terms, scale)
    # the log-likelihood, for the step search
    np.logaddexp(0.0, eta, out=mm)
    np.multiply(mf, mm, out=mm)
    np.multiply(af, eta, out=terms[row])
    np.subtract(terms[row], mm, out=terms[row])
    return fixed_sum_rows(terms, scale)


def irls(table, req: dict) -> dict:
    """One Newton round of each logistic calibration fit over a range: the gradient and Hessian of the
    log-likelihood at ``req["fits"][name]["theta"]`` (with its ``knots``, or None for Cox's line), as
    fixed-point sums (the gradient's and the upper triangle's terms interleaved row by row); with
    ``req["ici"]`` (or the fit's own ``"ici"``) then ``Σ m |expit(Bθ) - p|``; last the log-likelihood
    itself.  A fit with ``"hessian": False`` gets the gradient's sums alone in place of the interleaved
    rows, one with ``"loglik": False`` no log-likelihood (what a round that only confirms convergence,
    or takes a step known to be accepted, needs: see :func:`calengine.metrics.ranged.suite._newton`).  Several fits in one request
    share the pass over the range."""
    v, a, _, m = counts(table, req["unit"])
    out = {}
    if v.size == 0:
        return out
    af, mf = derived(table, ("float_counts", req["unit"]), lambda: (a.astype(np.float64), m.astype(np.float64)))
    for name, fit in req["fits"].items():
        # the basis does not depend on theta: a cached range keeps it for the fit's next rounds; the
        # spline's is built on the line's logits (the same floats: logit_basis computes them alike)
        knots = fit.get("knots")
        line = derived(table, ("logit_basis", req["clip"], None), lambda: logit_basis(v, req["clip"], None))
        B = line if knots is None else derived(table, ("logit_basis", req["clip"], tuple(knots)),
                                               lambda: spline_basis(line[1], knots))
        theta = np.asarray(fit["theta"], dtype=np.float64)
        sums = None
        # in blocks that stay in the processor's cache (a round computes a few dozen arrays per value);
        # every sum is fixed-point, so adding the blocks' sums gives the same integers as one block
        for lo in range(0, v.size, IRLS_BLOCK):
            hi = min(v.size, lo + IRLS_BLOCK)
            part = _irls_block([c[lo:hi] for c in B], theta, af[lo:hi], mf[lo:hi], v[lo:hi], req["scale"] * 100.0,
                               bool(fit.get("ici", req.get("ici"))), bool(fit.get("hessian", True)),
                               bool(fit.get("loglik", True)))
            sums = part if sums is None else [x + y for x, y in zip(sums, part)]
        out[name] = sums
    return out
