"""The calibration metric suite of issue 22, computed exactly from grouped tables cut into score ranges.

Every metric here reads the distinct-value tables ``(v, pos, neg)`` of
:class:`~calengine.metrics.measures.MetricAccumulator` (see :mod:`calengine.reductions.tables`), given as
*ranges*: a list of tables in increasing value order, none splitting a value group.  The in-memory
accumulator passes its whole table as one range.  The work on the rows of a range is done by the kernels
of :mod:`calengine.metrics.ranged.kernels`, called through ``mapper(kernel, ranges, requests)`` (in this process
by default; a client holding the ranges on workers maps them there), and this module combines their
small answers: integer counts, fixed-point sums (:mod:`calengine.reductions.exact`) and exact integer
prefixes, which is why every result is bit-identical however the table was cut (tested with hypothesis
over random cuts).  The client side holds O(ranges + bins + grid points).

Which column each metric reads (``k`` classes):

* the *score column*: ``P[:, 1]`` against ``y == 1`` for two classes, the top-label confidence against
  "correctly classified" for more: ``smece``, ``ks``/``kuiper`` and their p-values, ``ecce_pvalue``,
  ``hosmer_lemeshow_pvalue``, ``calibration_slope``/``calibration_intercept`` and ``ici``;
* the top-label confidence (like today's ``ece``): ``ece_equal_mass``;
* every class column one-vs-rest, averaged: ``ece_classwise`` (all ``k`` columns) and
  ``l2_ce_debiased`` (Kumar et al.'s marginal error: column 1 only for two classes, all ``k`` columns
  otherwise, as the ``uncertainty-calibration`` package does).

The definitions, bin counts and what each p-value tests are in the README ("The calibration metric
suite"); :mod:`calengine.metrics.statistics` holds the small client-side statistics.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from . import kernels
from ...reductions.exact import fixed_to_float
from .core import add_lists
from ..statistics import (
    debiased_l2,
    ecce_p_value,
    hosmer_lemeshow,
    kuiper_sf,
    ks_sf,
    l2_bootstrap,
    newton_step,
    smece_grid_size,
    smece_search,
    smooth_ece,
    smooth_reliability,
)

__all__ = ["SUITE_BINS", "HL_GROUPS", "L2_LEVEL", "L2_REPLICATES", "RCS_QUANTILES", "calibration_suite", "census_requests",
           "smooth_reliability_curve"]

#: bins of ``ece_equal_mass``, ``ece_classwise`` and ``l2_ce_debiased``.
SUITE_BINS = 15
#: groups of risk of the Hosmer-Lemeshow test (deciles).
HL_GROUPS = 10
#: coverage and replicates of the bootstrap interval of ``l2_ce_debiased``.
L2_LEVEL, L2_REPLICATES = 0.9, 200
#: quantiles of logit(p) at which the ICI's restricted cubic spline has its 4 knots (Harrell's default),
#: as exact fractions (numerator, denominator).
RCS_QUANTILES = ((5, 100), (35, 100), (65, 100), (95, 100))
#: forecasts are clipped to [CLIP, 1 - CLIP] before the logit of the calibration fits.
CLIP = 1e-15
#: Newton stops when its next step would move no parameter by more than _IRLS_TOL (relative to the
#: largest), or fails after _IRLS_MAX_ITER rounds.
_IRLS_MAX_ITER, _IRLS_TOL = 100, 1e-9
#: the logistic fits' fixed-point sums use ``scale * _IRLS_SCALE``: |logit| <= 34.6, so every term is
#: below 12 of those units (see :func:`calengine.metrics.ranged.kernels.irls`).
_IRLS_SCALE = 100.0

Mapper = Callable[[Callable, list, list], list]


def _local_map(fn, ranges, requests):
    return [fn(r, q) for r, q in zip(ranges, requests)]


def census_requests(k: int, unit, scale: float, parts: frozenset | None = None) -> dict:
    """The first pass's request of each table :func:`calibration_suite` reads, by table (``("class",
    c)`` or ``("top",)``): what a range's builder may run on the range it has just merged
    (:mod:`calengine.metrics.ranged.engine`), so that the suite need not read every range again for it.
    ``parts``: the suite's parts wanted (:func:`calengine.metrics.selection.needs`; None: all): the
    histograms no wanted part reads are not requested."""
    base = {"unit": unit, "scale": float(scale), "clip": CLIP, "bins": False, "grid": None, "logit_bins": None,
            "cumulative": _want(parts, "ks")}
    score = {**base, "grid": _score_grid(parts), "logit_bins": _logit_bins(parts), "bins": k == 2 and _want(parts, "classwise")}
    out = {("class", c): {**base, "bins": _want(parts, "classwise")} for c in range(k)}
    if k == 2:
        out[("class", 1)], out[("top",)] = score, base
    else:
        out[("top",)] = score
    return out


def _want(parts: frozenset | None, part: str) -> bool:
    return parts is None or part in parts


def _score_grid(parts) -> int | None:
    """The smooth ECE's first grid, when it is wanted."""
    return smece_grid_size(1.0) if _want(parts, "smece") else None


def _logit_bins(parts) -> int | None:
    """The logit histogram the calibration fits start from, when one is wanted."""
    return LOGIT_BINS if _want(parts, "cox") or _want(parts, "ici") else None


class _Column:
    """One table (a list of ranges) and what the first pass learned about it (``census``: that pass's
    answers per range when they were computed already, for the same request)."""

    def __init__(self, ranges, mapper: Mapper, unit, scale: float, *, grid: int | None = None, bins: bool = False,
                 logit_bins: int | None = None, census: list | None = None, cumulative: bool = True):
        self.ranges, self.mapper, self.unit, self.S = list(ranges), mapper, unit, float(scale)
        req = {"unit": unit, "scale": self.S, "clip": CLIP, "bins": bins, "grid": grid, "logit_bins": logit_bins,
               "cumulative": cumulative}
        if census is not None and len(census) == len(self.ranges):
            self.census = list(census)
        else:
            self.census = mapper(kernels.census, self.ranges, [req] * len(self.ranges))
        self.n_pos = sum(c["pos"] for c in self.census)
        self.n_neg = sum(c["neg"] for c in self.census)
        self.N = self.n_pos + self.n_neg
        #: one integer unit of the kernels in weight units: what turns sums back into weights
        self.w = 1.0 if unit is None else float(unit)
        self._grids = {}
        if grid:
            self._grids[grid] = self._combine_grids([c.get("grid", {}).get(grid) for c in self.census])

    def fsum(self, total: int) -> float:
        return fixed_to_float(total, self.S)

    def sum_of(self, key: str) -> float:
        return self.fsum(sum(c["sums"][key] for c in self.census if "sums" in c))

    def equal_width_bins(self) -> dict:
        parts = [c["bins"] for c in self.census if "bins" in c]
        return {"count": np.asarray(add_lists(p["count"] for p in parts), dtype=np.float64) * self.w,
                "pos": np.asarray(add_lists(p["pos"] for p in parts), dtype=np.float64) * self.w,
                "mv": np.asarray([self.fsum(t) for t in add_lists(p["mv"] for p in parts)]) * self.w}

    def _combine_grids(self, parts) -> dict:
        parts = [p for p in parts if p is not None]
        sums = [add_lists(p[i] for p in parts) for i in range(3)]
        # relplot adds 1e-4 to densities in row units: grid sums are given back in the table's weight units
        return {name: np.asarray([self.fsum(t) for t in s]) * self.w for name, s in zip(("one", "f", "y"), sums)}

    def grid(self, size: int) -> dict:
        if size not in self._grids:
            req = {"unit": self.unit, "scale": self.S, "sizes": [size]}
            outs = self.mapper(kernels.grids, self.ranges, [req] * len(self.ranges))
            self._grids[size] = self._combine_grids([o.get(size) for o in outs])
        return self._grids[size]

    def sweep(self, **request) -> list[dict]:
        """The second pass: each range gets the counts, residual units and values below it."""
        reqs, pos, neg, resid, offset = [], 0, 0, 0, 0
        for c in self.census:
            reqs.append({"unit": self.unit, "scale": self.S, "clip": CLIP, "offset": offset, "pos_before": pos,
                         "neg_before": neg, "resid_before": resid, "N": self.N, "n_pos": self.n_pos,
                         "n_neg": self.n_neg, **request})
            pos, neg, offset = pos + c["pos"], neg + c["neg"], offset + c["size"]
            resid += c.get("resid_units", 0)
        return self.mapper(kernels.sweep, self.ranges, reqs)

    def binning(self, outs, name: str) -> dict:
        """A sweep's equal-count bins summed over the ranges, in weight units."""
        parts = [o[name] for o in outs if name in o]
        out = {k: np.asarray(add_lists(p[k] for p in parts), dtype=np.float64) * self.w for k in ("count", "pos")}
        for k in ("mv", "mvv", "av"):
            out[k] = np.asarray([self.fsum(t) for t in add_lists(p[k] for p in parts)]) * self.w
        return out

    def irls(self, fits: dict, ici: bool = False) -> dict:
        req = {"unit": self.unit, "scale": self.S, "clip": CLIP, "fits": fits, "ici": ici}
        outs = self.mapper(kernels.irls, self.ranges, [req] * len(self.ranges))
        return {name: [fixed_to_float(t, self.S * _IRLS_SCALE) for t in add_lists(o[name] for o in outs if name in o)]
                for name in fits}


# ------------------------------------------------------------------------------------------ metrics


def _ece_from_bins(b: dict) -> float:
    return float(np.sum(np.abs(b["pos"] - b["mv"]))) / float(np.sum(b["count"]))


def _l2_stats(col: _Column, outs) -> tuple[float, dict]:
    b = col.binning(outs, "split")
    live = b["count"] > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        mp = np.where(live, b["mv"] / b["count"], 0.0)
        my = np.where(live, b["pos"] / b["count"], 0.0)
    sq = debiased_l2(b["count"], mp, my)
    stats = {"count": b["count"], "sp": b["mv"], "sy": b["pos"], "spp": b["mvv"], "spy": b["av"]}
    return max(sq, 0.0), stats


#: a round after a step of at most _LIGHT_AFTER (relative, as _IRLS_TOL) skips the Hessian's sums: Newton
#: converges quadratically, so the next step is expected below _IRLS_TOL, which the gradient alone
#: confirms (:func:`_newton`).
_LIGHT_AFTER = 1e-5
#: a light round confirms convergence when a bound on the exact step (:func:`_step_bound`) is at most
#: _IRLS_TOL / _LIGHT_MARGIN (relative): the margin covers the rounding of the solves and sums.
_LIGHT_MARGIN = 2.0


def _step_bound(grad, hess0, delta: float) -> float | None:
    """A bound on ``max |H1^-1 grad|`` (the exact Newton step at new parameters) from the Hessian
    ``hess0`` of the previous parameters, when no row's linear predictor moved by more than ``delta``
    between them; None when ``hess0`` is singular.

    Why it holds: a row's weight ``m mu (1 - mu)`` changes by a factor within ``exp(±|Δη|)`` (its
    logarithm's derivative in ``η`` is ``1 - 2 mu``), so ``e^-δ H0 <= H1 <= e^δ H0`` in the Loewner order.
    With ``s = H0^-1 grad``, ``A = H0^-1/2 H1 H0^-1/2`` (eigenvalues within ``e^±δ``) and
    ``H1^-1 grad - s = H0^-1/2 A^-1 (I - A) H0^1/2 s``, component ``i`` of the exact step is within
    ``|s_i| + sqrt((H0^-1)_ii) e^δ (e^δ - 1) sqrt(s' H0 s)``."""
    s = newton_step(grad, hess0)
    if s is None or not delta < 1.0:  # a bound that far out would confirm nothing
        return None
    try:
        diag = np.diag(np.linalg.inv(hess0))
    except np.linalg.LinAlgError:
        return None
    energy = float(s @ hess0 @ s)
    if not (np.all(diag >= 0.0) and energy >= 0.0):
        return None
    eps = math.expm1(delta)
    return float(np.max(np.abs(s) + np.sqrt(diag) * math.sqrt(energy) * (1.0 + eps) * eps))


def _eta_bound(col: _Column, knots):
    """``delta(step)``: a bound on ``max |B step|`` over the rows of ``col``, the change of any row's
    linear predictor when the parameters move by ``step`` (basis ``[1, x]``, with ``knots`` also the
    two spline terms; :func:`calengine.metrics.ranged.kernels.logit_basis`), from the census's smallest and
    largest forecast: ``|x|`` is at most the larger logit of the two (clipped), and each spline term is
    at most the sum of its three cubes' magnitudes at the largest ``x`` (each cube is non-decreasing);
    padded by a relative 1e-9 for the rounding of the basis's floats."""
    lo = min((c["lo"] for c in col.census if c.get("lo") is not None), default=0.5)
    hi = max((c["hi"] for c in col.census if c.get("hi") is not None), default=0.5)
    ends = np.clip(np.asarray([lo, hi], dtype=np.float64), CLIP, 1.0 - CLIP)
    x = np.log(ends) - np.log1p(-ends)
    caps = [1.0, float(np.max(np.abs(x)))]
    if knots is not None:
        t = np.asarray(knots, dtype=np.float64)
        k = t.size
        top = float(x[1])
        cube = lambda u: max(u, 0.0) ** 3  # noqa: E731
        for j in range(k - 2):
            c1 = abs((t[k - 1] - t[j]) / (t[k - 1] - t[k - 2]))
            c2 = abs((t[k - 2] - t[j]) / (t[k - 1] - t[k - 2]))
            caps.append((cube(top - t[j]) + c1 * cube(top - t[k - 2]) + c2 * cube(top - t[k - 1]))
                        / (t[-1] - t[0]) ** 2)
    caps = np.asarray(caps) * (1.0 + 1e-9) + 1e-300

    def delta(step) -> float:
        return float(np.abs(np.asarray(step, dtype=np.float64)) @ caps) * (1.0 + 1e-9)
    return delta


#: a step that moves no row's linear predictor by more than this increases the log-likelihood (below
#: log 2, see :func:`_newton`), so it is taken without the log-likelihood's sums.
_SAFE_ETA = 0.5


def _newton(start, light=None, ici: bool = False):
    """Newton-Raphson of one logistic fit of the event on a basis (Cox: ``[1, logit p]``; with knots
    also the two spline terms) from ``start``, as a generator: it yields ``(theta, want)``, the
    parameters at which it needs the sums of :func:`calengine.metrics.ranged.kernels.irls` and which of them
    (``want``: the flags ``hessian``, ``ici``, ``loglik`` of a fit's request), and is sent them, so
    that :func:`_fit_all` runs several fits in the same passes over the table.  Each step is halved
    until the log-likelihood does not decrease (plain Newton overshoots and can diverge far from the
    optimum, e.g. on forecasts of exactly 0 and 1).  Stops at parameters whose Newton step moves none
    of them by more than :data:`_IRLS_TOL` (relative to the largest): Newton converges quadratically,
    so they are within about that of the optimum, and the step need not be taken (one pass fewer).

    ``light``: None (every round asks for every sum), or ``delta(step)`` bounding how far a step
    moves any row's linear predictor (:func:`_eta_bound`).  Then a step of at most
    :data:`_LIGHT_AFTER` (relative) that moves no predictor by more than :data:`_SAFE_ETA` is taken
    without comparing log-likelihoods: along it the Hessian stays within ``e^δ`` of the one it was
    solved with, so the log-likelihood rises by at least ``s'Hs (1 - e^δ / 2) > 0`` and the plain
    method would accept it (its test allows for the sums' rounding); and the round after it asks for
    the gradient alone, confirming convergence with a bound on the exact step from the previous
    round's Hessian (:func:`_step_bound`, with the margin :data:`_LIGHT_MARGIN`).  A round that does
    not confirm it is taken again whole, which is the round the plain method takes; so the method
    stops at the same parameters as without ``light``, and from a close start (the logit histogram's
    fit) its two rounds over the rows skip the Hessian's terms in the second and the log-likelihood
    in both.  ``ici``: the ICI's numerator ``Σ m |expit(Bθ) - p|`` at the final parameters is returned.

    Returns ``(parameters, ICI numerator or None)``, or None when the Hessian is singular, a step
    cannot improve, or it does not converge in :data:`_IRLS_MAX_ITER` rounds."""
    theta = np.asarray(start, dtype=np.float64)
    k = theta.size
    got = {"hessian": True, "ici": ici and light is None, "loglik": light is None}
    sums = yield theta, got
    hess = taken = None
    for _ in range(_IRLS_MAX_ITER):
        if not got["hessian"]:
            # a light round: the exact step bounded from the gradient and the previous Hessian
            bound = _step_bound(np.asarray(sums[:k], dtype=np.float64), hess, light(taken))
            if bound is not None and bound * _LIGHT_MARGIN <= _IRLS_TOL * max(1.0, float(np.max(np.abs(theta)))):
                return theta, _ici_sum(sums, got)
            got = {"hessian": True, "ici": ici, "loglik": True}
            sums = yield theta, got
        grad, hess = _unpack(sums, k)
        step = newton_step(grad, hess)
        if step is None:
            return None
        bound = max(1.0, float(np.max(np.abs(theta))))
        if np.max(np.abs(step)) <= _IRLS_TOL * bound:
            if ici and not got["ici"]:
                got = {"hessian": False, "ici": True, "loglik": False}
                sums = yield theta, got  # the start converged: its ICI numerator
            return theta, _ici_sum(sums, got)
        if light is not None and np.max(np.abs(step)) <= _LIGHT_AFTER * bound and light(step) <= _SAFE_ETA:
            theta, taken = theta + step, step
            got = {"hessian": False, "ici": ici, "loglik": False}
            sums = yield theta, got
            continue
        here = sums[-1] if got["loglik"] else (yield theta, {"hessian": False, "ici": False, "loglik": True})[-1]
        for _half in range(40):
            trial = theta + step
            new = yield trial, {"hessian": True, "ici": ici, "loglik": True}
            # accept unless the log-likelihood fell by more than its sums' rounding: near the optimum
            # a Newton step changes it by less than that, and halving would only waste passes
            if new[-1] >= here - 1e-9 * (1.0 + abs(here)):
                break
            step = step / 2.0
        else:
            return None
        theta, sums, taken = trial, new, step
        got = {"hessian": True, "ici": ici, "loglik": True}
    return None


def _ici_sum(sums, got: dict):
    """The ICI's numerator in sums asked for with ``got`` (before the log-likelihood), or None."""
    if not got["ici"]:
        return None
    return sums[-2] if got["loglik"] else sums[-1]


def _fit_all(col: _Column, fits: dict) -> dict:
    """``{name: (knots, start, ici)}`` fitted by :func:`_newton` (light rounds; ``ici``: return the
    ICI's numerator) together: one pass over the table per round serves every fit still running.
    Returns ``{name: (theta, ICI numerator or None) or None}``."""
    running, pending, done = {}, {}, {}
    for name, (knots, start, ici) in fits.items():
        running[name] = (_newton(start, light=_eta_bound(col, knots), ici=ici), None if knots is None else list(knots))
        pending[name] = next(running[name][0])
    while pending:
        sums = col.irls({name: {"theta": theta.tolist(), "knots": running[name][1], **want}
                         for name, (theta, want) in pending.items()})
        for name in list(pending):
            try:
                pending[name] = running[name][0].send(sums[name])
            except StopIteration as stop:
                done[name] = stop.value
                del pending[name]
    return done


#: bins of the logit histogram the calibration fits start from (:func:`kernels.logit_histogram`):
#: 70 / 2**15 = 0.002 wide, so the start is within ~1e-6 of the fit on the rows, one Newton step on
#: the rows brings it within ~1e-12, and the fit ends after two passes (a start at 1e-3 would need three).
LOGIT_BINS = 1 << 15


def _histogram_fit(hist: dict, knots, start) -> np.ndarray | None:
    """The logistic fit on the grouped logit histogram, by the same damped Newton as on the rows
    (:func:`_newton`) but in this process, O(bins) a round; None when it fails.  A bin's rows stand at
    their mean logit and its events at theirs: the data term ``Σ a B(x)`` is then off by the square
    of a bin's width, not by its width times the events' scatter, and the start is close enough for
    two exact rounds on the rows."""
    Bm = np.asarray(kernels.spline_basis(hist["xm"], knots))
    Ba = np.asarray(kernels.spline_basis(hist["xa"], knots))
    a, m = hist["a"], hist["m"]
    fit = _newton(start)
    theta, _ = next(fit)  # every round here computes every sum but the ICI's
    try:
        while True:
            eta = theta @ Bm
            mu = 0.5 + 0.5 * np.tanh(0.5 * eta)
            wt = m * mu * (1.0 - mu)
            sums = []
            for i in range(len(Bm)):
                sums.append(float(a @ Ba[i] - (m * mu) @ Bm[i]))
                sums.extend(float(wt @ (Bm[i] * Bm[j])) for j in range(i, len(Bm)))
            sums.append(float(a @ (theta @ Ba) - m @ np.logaddexp(0.0, eta)))
            theta, _ = fit.send(sums)
    except StopIteration as stop:
        return None if stop.value is None else stop.value[0]


def _logit_histogram(col: _Column) -> dict:
    """The census's logit histograms of the ranges added up (exact integers and fixed-point sums until
    here): the occupied bins' counts ``m`` and events ``a``, the mean logit ``xm`` of their rows and
    ``xa`` of their events (floats)."""
    acc: dict = {}
    for c in col.census:
        h = c.get("logit_hist")
        for j, row in enumerate(zip(h["m"], h["a"], h["mx"], h["ax"]) if h else (), start=h["first"] if h else 0):
            if row[0]:
                acc[j] = [p + q for p, q in zip(acc[j], row)] if j in acc else list(row)
    m, a, mx, ax = (np.asarray(c, dtype=object) for c in zip(*(acc[j] for j in sorted(acc)))) if acc else [[]] * 4
    S = col.S * _IRLS_SCALE
    m = np.asarray(m, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    xm = np.asarray([fixed_to_float(t, S) for t in mx]) / np.maximum(m, 1.0)
    xa = np.asarray([fixed_to_float(t, S) for t in ax]) / np.maximum(a, 1.0)
    return {"m": m, "a": a, "xm": xm, "xa": xa}


def _unpack(sums, k: int):
    grad, hess, pos = np.empty(k), np.empty((k, k)), 0
    for i in range(k):
        grad[i] = sums[pos]
        pos += 1
        for j in range(i, k):
            hess[i, j] = hess[j, i] = sums[pos]
            pos += 1
    return grad, hess


def _knots(col: _Column, outs) -> list[float] | None:
    found = {}
    for o in outs:
        for j, hit in enumerate(o.get("levels", {}).get("knots", ())):
            if hit is not None:
                found[j] = hit[1]
    if len(found) != len(RCS_QUANTILES):
        return None
    p = np.clip(np.asarray([found[j] for j in range(len(RCS_QUANTILES))]), CLIP, 1.0 - CLIP)
    x = np.log(p) - np.log1p(-p)
    return x.tolist() if np.all(np.diff(x) > 0) else None


def _calibration_fits(score: _Column, knots, ici: bool = True):
    """Cox's line and the ICI's spline (with ``knots``, when there are), each ``(theta, sums at theta)``
    or None: both start from their fit on the census's logit histogram and are finished by Newton on
    the rows in the same passes (two or three); a fit whose histogram start fails starts as before,
    Cox from the identity recalibration and the spline from Cox's line.  The spline is only reported
    when Cox's line converged.  Without ``ici`` (the calibration slope alone: pass no knots) Cox's line
    is fitted without the ICI's sums: the same parameters, the sums at them are not returned."""
    hist = _logit_histogram(score)
    cox0 = _histogram_fit(hist, None, [0.0, 1.0]) if hist["m"].size else None
    rcs0 = None if cox0 is None or knots is None else _histogram_fit(hist, knots, [*cox0, 0.0, 0.0])
    # Cox's line carries the ICI only without knots; it is the ICI's fit too when the spline fails (below)
    fits = {"cox": (None, [0.0, 1.0] if cox0 is None else cox0, ici and knots is None)}
    if rcs0 is not None:
        fits["rcs"] = (knots, rcs0, True)
    done = _fit_all(score, fits)
    cox = done["cox"]
    if cox is None or knots is None:
        return cox, None
    if "rcs" not in done:
        done.update(_fit_all(score, {"rcs": (knots, [*cox[0], 0.0, 0.0], True)}))
    if done["rcs"] is None:
        # the ICI from Cox's line: its numerator at the line's parameters (the same float terms in any round)
        ici = score.irls({"cox": {"theta": cox[0].tolist(), "knots": None, "hessian": False, "ici": True,
                                  "loglik": False}})["cox"][-1]
        cox = (cox[0], ici)
    return cox, done["rcs"]


def calibration_suite(class_ranges: list[list], top_ranges: list, *, unit: float | None = None,
                      scale: float | None = None, seed: int = 0, mapper: Mapper | None = None,
                      censuses: dict | None = None, parts: frozenset | None = None) -> dict:
    """The suite's metrics from the per-class tables and the top-label table, each a list of ranges.

    ``unit``: None for integer counts; for fractional weights the weight of one integer unit (the
    kernels count ``round(w / unit)``).  ``scale``: the global bound of every fixed-point sum (the total
    count in those units; default: counted here).  ``seed``: the bootstrap interval of
    ``l2_ce_debiased``.  ``mapper(kernel, ranges, requests)``: where the kernels run.  ``censuses``:
    the first pass's answers per table (keys of :func:`census_requests`), computed for exactly those
    requests with this ``unit`` and ``scale`` (the range builders' pass); a table without one is read.
    ``parts``: the parts of the suite to compute (:func:`calengine.metrics.selection.needs`: ``smece``,
    ``ks``, ``hl``, ``cox``, ``ici``, ``equal_mass``, ``classwise``, ``l2``; None: all): the passes and
    fits no wanted part needs are not run, and each key computed is the same bits as in the whole suite.
    Returns the issue's keys (NaN where a metric is undefined, e.g. a column without both outcomes).

    Bounded memory: this function, on ranges that no process holds whole.  Exact, in memory (its oracle):
    :meth:`calengine.metrics.measures.MetricAccumulator.calibration_suite`.
    """
    mapper = mapper or _local_map
    k = len(class_ranges)
    want = lambda part: _want(parts, part)  # noqa: E731
    if scale is None:
        scale = float(sum(int(np.sum(kernels.counts(r, unit)[3])) for r in top_ranges))
    out: dict = {}
    # ---- the score column: smooth ECE, cumulative-difference tests, Hosmer-Lemeshow, logistic fits
    # for two classes the score column is class 1's: its census and sweep also serve class 1's
    # class-wise ECE and debiased L2 error; for more it is the top label's, whose equal-mass ECE they serve
    censuses = censuses or {}
    score_parts = ("smece", "ks", "hl", "cox", "ici") + (("classwise", "l2") if k == 2 else ("equal_mass",))
    score = None
    if any(want(p) for p in score_parts):
        score = _Column(class_ranges[1] if k == 2 else top_ranges, mapper, unit, scale, grid=_score_grid(parts),
                        logit_bins=_logit_bins(parts), bins=k == 2 and want("classwise"),
                        census=censuses.get(("class", 1) if k == 2 else ("top",)), cumulative=want("ks"))
    # the score column's equal-mass bins: class 1's debiased L2 error (two classes), else the top label's ECE
    binnings = ([("floor", "floor", HL_GROUPS)] if want("hl") else []) + (
        [("split", "split", SUITE_BINS)] if want("l2" if k == 2 else "equal_mass") else [])
    sw = None
    if score is not None and (want("ks") or want("ici") or binnings):
        N = score.N
        levels = [-(-num * N // den) for num, den in RCS_QUANTILES]
        sw = score.sweep(**({"ks": True} if want("ks") else {}), binnings=binnings,
                         **({"levels": {"knots": levels}} if want("ici") else {}))
    if want("smece"):
        smece, sigma = smece_search(lambda s: smooth_ece(score.grid(smece_grid_size(s)), s))
        out["smece"], out["smece_sigma"] = smece, sigma
    if want("ks"):
        hi = max(o["ks"][0] for o in sw if "ks" in o)
        lo = min(o["ks"][1] for o in sw if "ks" in o)
        # the path in weight units over its standard deviation sqrt(Σ w p (1 - p)): a weight counts as rows
        units = scale / float(1 << 52) * score.w
        spread = math.sqrt(score.sum_of("var") * score.w)
        if spread > 0:
            ks = max(abs(hi), abs(lo)) * units / spread
            kuiper = (hi - lo) * units / spread
            out.update(ks=ks, ks_pvalue=ks_sf(ks), kuiper=kuiper, kuiper_pvalue=kuiper_sf(kuiper),
                       ecce_pvalue=ecce_p_value(kuiper))
        else:
            out.update(ks=math.nan, ks_pvalue=math.nan, kuiper=math.nan, kuiper_pvalue=math.nan, ecce_pvalue=math.nan)
    if want("hl"):
        hl_bins = score.binning(sw, "floor")
        hl = hosmer_lemeshow(hl_bins["count"], hl_bins["pos"], hl_bins["mv"])
        out.update(hosmer_lemeshow=hl["chi2"], hosmer_lemeshow_df=hl["df"], hosmer_lemeshow_pvalue=hl["p_value"])
    if want("cox") or want("ici"):
        cox, rcs = _calibration_fits(score, _knots(score, sw) if want("ici") else None, ici=want("ici"))
        if want("cox"):
            out["calibration_intercept"], out["calibration_slope"] = (
                (math.nan, math.nan) if cox is None else map(float, cox[0]))
        if want("ici"):
            # the ICI from the spline fit, or from Cox's line when the spline has no knots or does not converge
            ici = rcs if rcs is not None else cox
            out["ici"] = math.nan if ici is None else ici[1] / score.N
    # ---- the top-label confidence: equal-mass ECE
    if want("equal_mass"):
        if k > 2:
            em = score.binning(sw, "split")
        else:
            top = _Column(top_ranges, mapper, unit, scale, census=censuses.get(("top",)), cumulative=want("ks"))
            em = top.binning(top.sweep(binnings=[("split", "split", SUITE_BINS)]), "split")
        out["ece_equal_mass"] = _ece_from_bins(em)
    # ---- every class column: class-wise ECE (equal width) and Kumar et al.'s debiased L2 error (equal mass)
    if want("classwise") or want("l2"):
        eces, sqs, stats = [], [], []
        for c in range(k):
            if k == 2 and c == 0 and not want("classwise"):
                continue  # class 0 of two serves only the class-wise ECE
            col = score if k == 2 and c == 1 else _Column(class_ranges[c], mapper, unit, scale,
                                                          bins=want("classwise"), census=censuses.get(("class", c)),
                                                          cumulative=want("ks"))
            if want("classwise"):
                eces.append(_ece_from_bins(col.equal_width_bins()))
            if want("l2") and (k > 2 or c == 1):
                sq, st = _l2_stats(col, sw if col is score else col.sweep(binnings=[("split", "split", SUITE_BINS)]))
                sqs.append(sq)
                stats.append(st)
        if want("classwise"):
            out["ece_classwise"] = float(np.mean(eces))
        if want("l2"):
            value = math.sqrt(float(np.mean(sqs)))
            low, high = l2_bootstrap(stats, value, replicates=L2_REPLICATES, seed=seed, level=L2_LEVEL)
            out["l2_ce_debiased"] = {"value": value, "low": float(low), "high": float(high)}
    return out


def smooth_reliability_curve(class_ranges: list[list], top_ranges: list, sigma: float, *, unit: float | None = None,
                             scale: float, mapper: Mapper | None = None) -> dict:
    """relplot's smooth reliability curve and its band (:func:`calengine.metrics.statistics.smooth_reliability`)
    of the suite's score column -- class 1's probability for two classes, the top-label confidence for
    more, the column ``smece`` measures -- at bandwidth ``sigma`` (``smece_sigma``), from the grid
    histograms of every range merged in order: one pass, bounded memory, the same on any partitioning.
    ``unit``, ``scale`` and ``mapper`` as for :func:`calibration_suite` (the same ``scale`` gives the
    same grid sums as the smooth ECE's)."""
    mapper = mapper or _local_map
    ranges = list(class_ranges[1] if len(class_ranges) == 2 else top_ranges)
    size = smece_grid_size(sigma)
    outs = mapper(kernels.grids, ranges, [{"unit": unit, "scale": float(scale), "sizes": [size]}] * len(ranges))
    parts = [o.get(size) for o in outs if o.get(size) is not None]
    w = 1.0 if unit is None else float(unit)
    hist = {name: np.asarray([fixed_to_float(t, float(scale)) for t in add_lists(p[i] for p in parts)]) * w
            for i, name in enumerate(("one", "f", "y"))}
    return smooth_reliability(hist, sigma)
