"""Newton with backtracking, driven one evaluation at a time (private to :mod:`.scaling`).

The solvers are state machines: ``*_start`` returns the first trial point, and ``*_update(state, ev)``
takes the evaluation at the last trial point (objective, gradient and Hessian summed over the data,
computed in one pass) and returns the next trial point or ``None`` once converged.  An accepted step
already carries the gradient and Hessian of the new point, so every trial point costs exactly one
pass over the data, which is what lets a partitioned fit run one reduction round per trial point.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from calengine.reductions.exact import exact_sums
from calengine_builtins.deferred import expit


def _log1pexp(z: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``log(1 + exp(z))`` without overflow, given ``p = σ(−z)`` and ``q = σ(z)`` (already at hand).

    ``log(1 + e^z) = max(z, 0) − log(max(p, q))``: the logarithm's argument lies in [1/2, 1], so the
    result is accurate to rounding, and it costs a third of ``np.logaddexp``.
    """
    return np.maximum(z, 0.0) - np.log(np.maximum(p, q))



def _platt_start(a0: float, b0: float) -> tuple[dict[str, Any], tuple[float, float]]:
    """Lin, Lin & Weng's (2007) Newton method for Platt's sigmoid (see ``_platt_update``)."""
    return {"a": a0, "b": b0, "trial": (a0, b0), "fval": None, "it": 0}, (a0, b0)


def _platt_update(st: dict[str, Any], ev) -> tuple[float, float] | None:
    """Hessian plus ``1e-12·I``; backtracking (step halves from 1, Armijo 1e-4, smallest step 1e-10);
    stop when both gradient components are below 1e-5, when the Newton step promises less decrease
    than the objective's rounding error, or after 100 iterations.

    ``ev = [objective, g_A, g_B, h_AA, h_BB, h_AB]`` at the last trial point.
    """
    nf = float(ev[0])
    if st["fval"] is None:  # the starting point
        st["fval"], st["ev"] = nf, ev
        return _platt_direction(st)
    if nf < st["fval"] + 1e-4 * st["step"] * st["gd"]:
        st["a"], st["b"] = st["trial"]
        st["fval"], st["ev"] = nf, ev
        return _platt_direction(st)
    st["step"] /= 2.0
    if st["step"] < 1e-10:
        return None  # no decrease possible at this precision: (a, b) is as good as it gets
    return _platt_trial(st)


def _platt_binned_start(f: np.ndarray, t: np.ndarray, w: np.ndarray, scale: float, a0: float, b0: float):
    """The Newton start of the exact fit: the same Newton run to convergence, in the client, on the
    start histogram's points (each bin's class mean of ``f`` with the class's weight in the bin).

    Why: each exact Newton trial point is a pass over every row, and from the data-blind start
    ``(a0, b0)`` the fit took six.  The binned objective differs from the exact one only by the spread
    of ``f`` inside a bin (1/256 wide on the ``asinh`` scale), so its optimum is within ~1e-5 of the
    exact one, and Newton's quadratic convergence finishes the exact fit in two passes (measured at
    10^7 rows: 6 passes before, 2 after, same optimum to 1e-11).  The exact fit still decides the
    answer, from the exact sums and by the same stopping rules; a binned run that does not finish
    with finite values leaves the data-blind start.
    """
    if f.size < 2:
        return a0, b0
    st, (a, b) = _platt_start(a0, b0)
    fs = f / scale
    while True:
        nxt = _platt_update(st, _platt_eval(fs, t, w, a, b))
        if nxt is None:
            break
        a, b = nxt
    a, b = float(st["a"]), float(st["b"])
    return (a, b) if math.isfinite(a) and math.isfinite(b) else (a0, b0)


def _platt_direction(st: dict[str, Any]):
    st["it"] += 1
    if st["it"] > 100:
        return None
    sigma = 1e-12
    _, g1, g2, h11, h22, h21 = (float(v) for v in st["ev"])
    h11 += sigma
    h22 += sigma
    if abs(g1) < 1e-5 and abs(g2) < 1e-5:
        return None
    det = h11 * h22 - h21 * h21
    st["da"] = -(h22 * g1 - h21 * g2) / det
    st["db"] = -(-h21 * g1 + h11 * g2) / det
    st["gd"] = g1 * st["da"] + g2 * st["db"]
    if -st["gd"] <= 1e-14 * abs(st["fval"]):
        return None  # the predicted decrease is below the objective's rounding error: converged
    st["step"] = 1.0
    return _platt_trial(st)


def _platt_trial(st: dict[str, Any]):
    st["trial"] = (st["a"] + st["step"] * st["da"], st["b"] + st["step"] * st["db"])
    return st["trial"]


def _platt_eval(f, t, w, a: float, b: float, exact: bool = False):
    """``[objective, gradient (2), Hessian (3)]`` of Platt's cross-entropy at ``(a, b)``; ``w`` None:
    every weight 1 (the same sums to the bit, without three products per row: see ``_unit``).
    ``exact``: the six sums as :class:`calengine.reductions.exact.ExactSums` (a piece's statistics:
    pieces then add exactly, so the fit does not depend on the cut)."""
    z = a * f + b
    p = expit(-z)
    q = expit(z)
    # −[t ln P + (1−t) ln(1−P)] with P = σ(−z): equals (t−1)·z + log(1+e^{z}).
    loss = (t - 1.0) * z + _log1pexp(z, p, q)
    obj = loss if w is None else w * loss
    d2 = p * q if w is None else w * p * q
    d1 = t - p if w is None else w * (t - p)
    terms = (obj, f * d1, d1, f * f * d2, d2, f * d2)
    if exact:
        return exact_sums(terms)
    return np.array([np.sum(x) for x in terms])


def _logreg_start(theta0: np.ndarray, ridge: np.ndarray, total: float):
    """Weighted logistic regression ``P = σ(X θ)`` with an L2 penalty ``½ Σ ridge_j θ_j²``.

    Damped Newton with backtracking (Armijo 1e-4, smallest step 1e-12); stops when the gradient is
    negligible relative to the total weight, when the Newton step promises less decrease than the
    objective's rounding error, when no step decreases the objective, when an accepted step improves
    it by less than 1e-15 relative, or after 200 iterations.
    """
    st = {"theta": theta0.copy(), "ridge": ridge, "total": total, "trial": theta0.copy(), "fval": None, "it": 0}
    return st, st["trial"]


def _logreg_update(st: dict[str, Any], ev: np.ndarray):
    """``ev = [Σ w(log(1+e^z) − y z), gradient (d), Hessian (d·d)]`` at the last trial point."""
    d = st["theta"].size
    th = st["trial"]
    ridge = st["ridge"]
    nf = float(ev[0]) + 0.5 * float(np.sum(ridge * th * th))
    g = ev[1 : 1 + d] + ridge * th
    H = ev[1 + d :].reshape(d, d) + np.diag(ridge + 1e-12 * max(st["total"], 1.0))
    if st["fval"] is None:
        st["fval"], st["g"], st["H"] = nf, g, H
        return _logreg_direction(st)
    if nf <= st["fval"] + 1e-4 * st["step"] * st["gd"]:
        improvement = st["fval"] - nf
        st["theta"], st["fval"], st["g"], st["H"] = th, nf, g, H
        if improvement <= 1e-15 * max(abs(nf), 1.0):
            return None
        return _logreg_direction(st)
    st["step"] /= 2.0
    if st["step"] < 1e-12:
        return None
    st["trial"] = st["theta"] + st["step"] * st["dir"]
    return st["trial"]


def _logreg_direction(st: dict[str, Any]):
    st["it"] += 1
    if st["it"] > 200:
        return None
    g, H = st["g"], st["H"]
    if np.max(np.abs(g)) <= 1e-10 * max(st["total"], 1.0):
        return None
    try:
        direction = -np.linalg.solve(H, g)
    except np.linalg.LinAlgError:
        direction = -np.linalg.lstsq(H, g, rcond=None)[0]
    st["gd"] = float(g @ direction)
    if -st["gd"] <= 1e-14 * abs(st["fval"]):
        return None  # the predicted decrease is below the objective's rounding error: converged
    st["dir"] = direction
    st["step"] = 1.0
    st["trial"] = st["theta"] + direction
    return st["trial"]


def _logreg_eval(X: np.ndarray, y: np.ndarray, w: np.ndarray, theta: np.ndarray) -> np.ndarray:
    z = X @ theta
    p = expit(z)
    q = expit(-z)
    obj = np.sum(w * (_log1pexp(z, q, p) - y * z))
    g = X.T @ (w * (p - y))
    H = (X * (w * p * q)[:, None]).T @ X
    return np.concatenate(([obj], g, H.ravel()))


_EPS_REL = 4.0 * np.finfo(float).eps


def _slope_start(lo: float, hi: float) -> tuple[dict[str, Any], list[float]]:
    """``argmin_{α ∈ [lo, hi]} Σ w log(1 + exp(−α m))`` for margins ``m = y± · S``.

    The objective is convex in α, so the minimiser is ``lo`` or ``hi`` when the derivative
    ``g(α) = −Σ w m σ(−α m)`` does not change sign on the bracket, and otherwise its root, found by
    safeguarded Newton (Numerical Recipes' ``rtsafe``: Newton from the bracket's lower end, bisection
    -- geometric on wide positive brackets -- when a step would leave the bracket or not shrink fast
    enough) to ``4·eps`` relative, at most 100 steps.  Each trial point is one pass computing
    ``g`` and ``g'``; the first pass evaluates both ends.
    """
    return {"lo": lo, "hi": hi, "phase": "ends", "it": 0}, [lo, hi]


#: half-width, relative, of the bracket :func:`_slope_narrow_start` puts around a binned root (the
#: start histogram's root was 7e-7 from the exact one at 10^7 rows)
_NARROW = 1e-5


def _slope_narrow_start(m: np.ndarray, w: np.ndarray, lo: float, hi: float) -> tuple[dict[str, Any], list[float]]:
    """:func:`_slope_start` on a bracket of relative half-width :data:`_NARROW` around the root of the
    same problem solved in the client on binned margins ``m`` with weights ``w`` (a start histogram's
    points): the exact fit then starts with both ends within 1e-5 of its root and Newton needs two or
    three passes over the rows instead of five.  When the exact root is not inside the narrow bracket
    (its ends' derivatives have one sign), :func:`_slope_update` restarts on ``[lo, hi]``, so the
    answer is always the exact problem's, found by the same safeguarded Newton."""
    if m.size < 2:
        return _slope_start(lo, hi)
    st, points = _slope_start(lo, hi)
    while points is not None:
        points = _slope_update(st, _slope_eval(m, w, points))
    x = float(st["x"])
    a, b = max(lo, x * (1.0 - _NARROW)), min(hi, x * (1.0 + _NARROW))
    if not (math.isfinite(x) and lo < a < b < hi):
        return _slope_start(lo, hi)
    st, points = _slope_start(a, b)
    st["wide"] = (lo, hi)
    return st, points


def _slope_update(st: dict[str, Any], ev: np.ndarray):
    """``ev`` rows ``[g, g']`` at the requested points; returns the next points or ``None`` (then
    ``st["x"]`` is the answer)."""
    if st["phase"] == "ends":
        (g_lo, dg_lo), (g_hi, _) = ev  # no g' at the upper end (see _slope_eval)
        if "wide" in st and (g_lo >= 0.0 or g_hi <= 0.0):  # the root is outside a narrow start's bracket
            fresh, points = _slope_start(*st["wide"])
            st.clear()
            st.update(fresh)
            return points
        if g_lo >= 0.0:
            st["x"] = st["lo"]
            return None
        if g_hi <= 0.0:
            st["x"] = st["hi"]
            return None
        st.update(phase="newton", x=st["lo"], gx=float(g_lo), dgx=float(dg_lo), dxold=st["hi"] - st["lo"])
        st["dx"] = st["dxold"]
        return _slope_next(st)
    gx, dgx = (float(v) for v in ev[0])
    st["x"], st["gx"], st["dgx"] = st["trial"], gx, dgx
    if gx == 0.0:
        return None
    if gx < 0.0:
        st["lo"] = st["x"]
    else:
        st["hi"] = st["x"]
    return _slope_next(st)


def _slope_next(st: dict[str, Any]):
    st["it"] += 1
    x, gx, dgx, lo, hi = st["x"], st["gx"], st["dgx"], st["lo"], st["hi"]
    if st["it"] > 100 or hi - lo <= _EPS_REL * abs(hi):
        return None
    newton = dgx > 0.0 and abs(2.0 * gx) <= abs(st["dxold"] * dgx)
    if newton:
        if abs(gx / dgx) <= _EPS_REL * abs(x):
            return None  # the Newton step is below the tolerance: x is the root
        xn = x - gx / dgx
        newton = lo < xn < hi
    st["dxold"] = st["dx"]
    if not newton:
        xn = math.sqrt(lo * hi) if lo > 0.0 and hi > 4.0 * lo else 0.5 * (lo + hi)
    st["dx"] = x - xn
    if abs(st["dx"]) <= _EPS_REL * abs(xn):
        st["x"] = xn
        return None
    st["trial"] = xn
    return [xn]


def _slope_eval(m: np.ndarray, w: np.ndarray, points, exact: bool = False):
    """Rows ``[g(α), g'(α)]`` for each α: ``g = −Σ w m σ(−α m)``, ``g' = Σ w m² σ(α m) σ(−α m)``;
    ``w`` None: every weight 1 (the same sums to the bit, see ``_unit``).

    ``g'`` is computed at the first point only (0 at the others): :func:`_slope_update` reads it only
    there -- a Newton trial is one point, and of a bracket's two ends only the lower one starts Newton
    -- and at the upper end it cost a second ``expit`` and three products per row of a round.
    ``exact``: the sums as :class:`calengine.reductions.exact.ExactSums` of ``2 len(points)`` bins in
    the rows' order (a piece's statistics; see :func:`_platt_eval`)."""
    terms = []
    wm = m if w is None else w * m
    for k, a in enumerate(points):
        e = expit(-a * m)
        terms.append(-(wm * e))
        terms.append(wm * m * e * expit(a * m) if k == 0 else np.zeros(0))
    if exact:
        return exact_sums(terms)
    return np.array([np.sum(x) for x in terms]).reshape(len(points), 2)
