"""calengine's built-in calibrators: one score column in, probabilities of the positive class out.

Registry names and sources:

* ``none`` — the learner's own probability, or Zadrozny & Elkan's rescaling of a decision value;
  the baseline every other method is compared with.
* ``sigmoid`` — Platt (1999) with his target smoothing, fitted by Lin, Lin & Weng's (2007) Newton.
* ``isotonic`` — pool-adjacent-violators (Zadrozny & Elkan 2002), ties pooled first.
* ``binning`` — equal-frequency histogram binning (Zadrozny & Elkan 2001), bins chosen by CV.
* ``rocch`` — ROC convex hull calibration (Fawcett & Niculescu-Mizil 2007; Flach & Matsubara 2007).
* ``beta`` — beta calibration (Kull, Silva Filho & Flach 2017).
* ``temperature`` — temperature scaling (Guo et al. 2017) of one logit.
* ``sigmoid_nobias`` — Duin & Tax's sigmoid without bias, so a zero score keeps probability 1/2.
* ``venn_abers`` — inductive Venn–ABERS (Vovk & Petej 2014): a (p0, p1) interval per score and its merge.

Shared behaviour: every ``fit`` validates its input with :func:`calengine.reductions.pav.check_binary_data`
(finite 1-D scores, labels in {0, 1}, matching lengths, non-negative weights, both classes present,
else :class:`calengine.errors.DataError`); ``sample_weight`` acts as a frequency weight, so a weight
of 2 gives the same fit as the row twice (for ``binning`` with ``n_bins="auto"`` only up to the
random CV split, which depends on the rows); every calibrator except ``binning`` with
``n_bins="auto"`` can be fitted as a reduction over a partitioned table (the protocol on
:class:`calengine.base.Calibrator`; ``fit`` runs the same protocol on one piece, so both agree, see
each class for its rounds); ``to_state`` holds only numpy arrays and plain
scalars/strings and ``from_state`` restores predictions exactly.  Predictions are non-decreasing in
the score except for ``binning`` (bin fractions follow the data) and ``rocch`` with ``laplace=True``
(the correction can reorder hull edges), as documented on those classes.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from calengine import hookimpl
from calengine_builtins.deferred import check_is_fitted, expit
from calengine.base import SCORE_KINDS, Calibrator
from calengine.errors import DataError, ModelFormatError, ParameterError
from calengine.reductions.pav import check_binary_data, check_scores, pav_sums, pool_ties, predict_linear, predict_step
from calengine.metrics.roc import convex_hull_vertices, edge_probability

__all__ = [
    "NoCalibration",
    "SigmoidCalibrator",
    "IsotonicCalibrator",
    "BinningCalibrator",
    "ROCHullCalibrator",
    "BetaCalibrator",
    "TemperatureCalibrator",
    "SigmoidNoBiasCalibrator",
    "VennAbersCalibrator",
    "register_calibrators",
]

#: scores given as probabilities are clipped to [EPS, 1 - EPS] before a logarithm or logit.
EPS = 1e-12
#: tolerance for probability scores that leave [0, 1] by rounding only.
_PROBA_TOL = 1e-9


# ---------------------------------------------------------------------------------------------------
# shared machinery


class _BinaryCalibrator(Calibrator):
    """Common validation and exact state round-trip for the built-in calibrators.

    ``_state_fields`` maps each fitted attribute to its kind (``"array"``, ``"float"``, ``"int"``,
    ``"bool"``, ``"str"``); :meth:`to_state` exports exactly those, and :meth:`from_state` coerces
    what the artifact reader hands back (0-d arrays, JSON numbers) to the same types.
    """

    _state_fields: ClassVar[dict[str, str]] = {}

    def to_state(self) -> dict[str, Any]:
        check_is_fitted(self, list(self._state_fields))
        out: dict[str, Any] = {}
        for key, kind in self._state_fields.items():
            val = getattr(self, key)
            out[key] = np.array(val, dtype=np.float64) if kind == "array" else val
        return out

    def from_state(self, state: dict[str, Any]) -> "_BinaryCalibrator":
        for key, kind in self._state_fields.items():
            if key not in state:
                raise ModelFormatError(
                    f"calibrator '{self.name}' state lacks '{key}'; the model is damaged or from "
                    "another calengine version, refit it"
                )
            val = state[key]
            if kind == "array":
                val = np.array(val, dtype=np.float64).reshape(-1)
            elif kind == "float":
                val = float(np.asarray(val))
            elif kind == "int":
                val = int(np.asarray(val))
            elif kind == "bool":
                val = bool(np.asarray(val))
            else:
                val = str(np.asarray(val)) if isinstance(val, np.ndarray) else str(val)
            setattr(self, key, val)
        return self

    def _check_fit(self, scores, y, sample_weight, score_kind, proba_range=True):
        """Validate ``fit``'s arguments; probability scores must lie in [0, 1] if ``proba_range``."""
        _check_kind(score_kind)
        s, y, w = check_binary_data(scores, y, sample_weight)
        if score_kind == "proba" and proba_range:
            s = _as_probability(s)
        self.score_kind_ = score_kind
        return s, y, w

    def _check_predict(self, scores) -> np.ndarray:
        check_is_fitted(self, list(self._state_fields))
        s = check_scores(scores)
        if self.score_kind_ == "proba":
            s = _as_probability(s)
        return s

    # ------------------------------------------------------------------ reduction protocol plumbing
    #
    # Subclasses implement ``_first_request(kind)`` and, per round name ``op``, ``_ps_<op>`` (the
    # piece statistics), optionally ``_merge_<op>`` (default: :func:`_merge_dicts`) and ``_step_<op>``.
    # Solver state between rounds lives in ``self._red`` (it travels with the pickled calibrator) and
    # is removed once fitted.

    #: whether ``fit`` rejects probability scores outside [0, 1] (sigmoid uses the raw score).
    _proba_range: ClassVar[bool] = True

    def _check_params(self) -> None:
        """Raise :class:`ParameterError` for invalid constructor parameters (before any data)."""

    def _first_request(self, kind: str) -> dict[str, Any] | None:
        return None

    def reduction_start(self, score_kind: str = "decision") -> dict[str, Any] | None:
        self._check_params()
        _check_kind(score_kind)
        for key in self._state_fields:
            self.__dict__.pop(key, None)
        self.__dict__.pop("_red", None)
        request = self._first_request(score_kind)
        if request is not None:
            self._red = {"kind": score_kind}
        return request

    def partial_stats(self, scores, y, sample_weight, request: dict[str, Any]) -> dict[str, Any]:
        return getattr(self, "_ps_" + request["op"])(scores, y, sample_weight, request)

    def merge_stats(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        merge = getattr(self, "_merge_" + a["op"], None)
        return merge(a, b) if merge is not None else _merge_dicts(a, b)

    def reduction_step(self, stats: dict[str, Any], request: dict[str, Any]) -> dict[str, Any] | None:
        return getattr(self, "_step_" + request["op"])(stats, request)

    def _finish(self, **fitted) -> None:
        for key, value in fitted.items():
            setattr(self, key, value)
        self.score_kind_ = self._red["kind"]
        del self._red

    def _fit_protocol(self, scores, y, sample_weight, score_kind):
        """``fit`` = the reduction protocol on one piece (so both are the same algorithm)."""
        from calengine.reductions.calibrators import fit_by_reduction

        return fit_by_reduction(self, [(scores, y, sample_weight)], score_kind=score_kind)

    def _ps_summary(self, scores, y, sample_weight, request):
        """First unsorted round: validation, class counts and weights, score range, extras."""
        s, yi, w = _check_piece(scores, y, sample_weight)
        stats = {"op": "summary", **_summary(s, yi, w)}
        stats.update(self._summary_extra(*_live(s, yi, w), request))
        return stats

    def _summary_extra(self, s, yi, w, request) -> dict[str, Any]:
        return {}


def _as_probability(s: np.ndarray) -> np.ndarray:
    """Clip probability scores that leave [0, 1] by rounding; reject anything further out."""
    if s.size and (s.min() < -_PROBA_TOL or s.max() > 1.0 + _PROBA_TOL):
        raise DataError(
            f"score_kind='proba' but scores range over [{s.min():.6g}, {s.max():.6g}]; "
            "pass score_kind='decision' for scores that are not probabilities"
        )
    return np.clip(s, 0.0, 1.0)


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, EPS, 1.0 - EPS)
    return np.log(p) - np.log1p(-p)


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterError(f"{name} must be True or False, got {value!r}; pass a boolean")
    return bool(value)


def _is_int(value, minimum: int) -> bool:
    """True for an integer (not a bool) of at least ``minimum``."""
    return (
        isinstance(value, (int, np.integer))
        and not isinstance(value, (bool, np.bool_))
        and value >= minimum
    )


def _log1pexp(z: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``log(1 + exp(z))`` without overflow, given ``p = σ(−z)`` and ``q = σ(z)`` (already at hand).

    ``log(1 + e^z) = max(z, 0) − log(max(p, q))``: the logarithm's argument lies in [1/2, 1], so the
    result is accurate to rounding, and it costs a third of ``np.logaddexp``.
    """
    return np.maximum(z, 0.0) - np.log(np.maximum(p, q))


# ---------------------------------------------------------------------------------------------------
# fitting as a reduction (the protocol documented on calengine.base.Calibrator)
#
# Every built-in calibrator except ``binning`` with ``n_bins="auto"`` implements the protocol, and its
# ``fit`` *is* the protocol run on a single piece (calengine.reductions.calibrators.fit_by_reduction),
# so the in-memory fit and the partition-native fit are one algorithm.  Requests and statistics are
# dicts with an ``"op"`` key naming the round; the calibrator dispatches on it.  Statistics merge by
# key: ``min_*``/``max_*`` take the minimum/maximum, ``cat_*`` concatenate (a before b), anything
# else adds.  The first round validates every piece with fit's messages; the properties of the whole
# data (all weights zero, one class only, probabilities outside [0, 1]) are checked on the merged
# statistics in ``reduction_step``, again with fit's messages.  Later rounds see the same rows and
# skip the validation.
#
# Probability scores are clipped to [0, 1], which can turn scores just outside (by rounding) into ties
# with 0 or 1 that a score range may split.  The sorted fits therefore keep the rows at exactly 0 and
# 1 (after clipping) out of the per-range summaries and carry their sums separately (``e0``/``e1``):
# they sit at the two ends of the score order whichever piece they came from.


def _check_kind(score_kind) -> None:
    if score_kind not in SCORE_KINDS:
        raise ParameterError(
            f"score_kind must be one of {', '.join(SCORE_KINDS)}, got {score_kind!r}; "
            "use 'proba' for probabilities and 'decision' for unbounded scores"
        )


def _check_piece(scores, y, sample_weight):
    """:func:`check_binary_data` for one piece: a piece may hold one class or only zero weights."""
    try:
        wv = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    except (TypeError, ValueError):
        wv = None
    if wv is not None and wv.ndim == 1 and wv.size and np.all(wv == 0.0):
        s, yi, _ = check_binary_data(scores, y, np.ones_like(wv), require_both_classes=False)
        return s, yi, wv
    return check_binary_data(scores, y, sample_weight, require_both_classes=False)


def _light(scores, y, sample_weight):
    """A piece already validated in the first round: plain arrays, nothing checked."""
    s = np.asarray(scores, dtype=np.float64)
    yi = (np.asarray(y) == 1).astype(np.int64)
    w = np.ones(s.shape[0]) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    return s, yi, w


def _live(s, yi, w):
    """Drop zero-weight rows (they carry no information)."""
    keep = w > 0
    if np.all(keep):
        return s, yi, w
    return s[keep], yi[keep], w[keep]


def _summary(s: np.ndarray, yi: np.ndarray, w: np.ndarray, weights: bool = True) -> dict[str, Any]:
    """Statistics every first round collects: live class counts, raw score range and, if
    ``weights``, the weight of each class."""
    pos = yi == 1
    live = w > 0
    n_live = int(np.count_nonzero(live))
    n_pos = int(np.count_nonzero(pos if n_live == w.size else pos & live))
    out = {"n_pos": n_pos, "n_neg": n_live - n_pos, "min_s": float(s.min()), "max_s": float(s.max())}
    if weights:
        out["w_pos"] = float(np.sum(w, where=pos))
        out["w_neg"] = float(np.sum(w, where=~pos))
    return out


def _check_merged(stats: dict[str, Any], kind: str, proba_range: bool = True) -> None:
    """Raise what ``fit`` raises for the whole data (the checks are run on tiny stand-ins, so the
    messages are fit's own)."""
    if stats["n_pos"] + stats["n_neg"] == 0:
        check_binary_data([0.0], [0], [0.0])  # "every sample_weight is zero; ..."
    if stats["n_pos"] == 0 or stats["n_neg"] == 0:
        check_binary_data([0.0], [1 if stats["n_pos"] else 0])  # "... holds only one class ..."
    if kind == "proba" and proba_range:
        _as_probability(np.array([stats["min_s"], stats["max_s"]]))


def _merge_dicts(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, va in a.items():
        vb = b[key]
        if key == "op":
            out[key] = va
        elif key.startswith("min_"):
            out[key] = np.minimum(va, vb)
        elif key.startswith("max_"):
            out[key] = np.maximum(va, vb)
        elif key.startswith("cat_"):
            out[key] = np.concatenate((va, vb))
        else:
            out[key] = va + vb
    return out


def _max_abs(x: np.ndarray) -> float:
    return float(np.max(np.abs(x))) if x.size else 0.0


def _edges(s, yi, w, kind):
    """Split live, clipped rows into those at exactly 0 / 1 (``proba`` only) and the rest.

    Returns ``(middle_s, middle_y, middle_w, e0, e1)`` with ``e0``/``e1`` = ``[Σ w y, Σ w]``.
    """
    zero = np.zeros(2)
    if kind != "proba":
        return s, yi, w, zero, zero.copy()
    at0 = s == 0.0
    at1 = s == 1.0
    mid = ~(at0 | at1)
    e0 = np.array([np.sum(w[at0] * yi[at0]), np.sum(w[at0])], dtype=np.float64)
    e1 = np.array([np.sum(w[at1] * yi[at1]), np.sum(w[at1])], dtype=np.float64)
    return s[mid], yi[mid], w[mid], e0, e1


def _sorted_piece(scores, y, sample_weight, kind, validate: bool):
    """Validated (or light), clipped, live rows of a sorted-round piece, and its summary."""
    if validate:
        s, yi, w = _check_piece(scores, y, sample_weight)
        summ = _summary(s, yi, w, weights=False)
    else:
        s, yi, w = _light(scores, y, sample_weight)
        summ = {}
    if kind == "proba":
        s = np.clip(s, 0.0, 1.0)
    s, yi, w = _live(s, yi, w)
    return s, yi, w, summ


def _hull_sums(lo, hi, pos, neg):
    """ROC convex hull over segments given in increasing score order; edges in increasing order.

    The hull of the concatenated ROC curves of disjoint score ranges is the hull over the ranges'
    hull vertices, so merging hulls this way is exact (counts are sums of the segments' counts).
    """
    if lo.size <= 1:
        return lo, hi, pos, neg
    P, N = pos[::-1], neg[::-1]
    fp = np.concatenate(([0.0], np.cumsum(N)))
    tp = np.concatenate(([0.0], np.cumsum(P)))
    vert = convex_hull_vertices(fp, tp)
    starts, ends = vert[:-1], vert[1:]
    ep = np.add.reduceat(P, starts)
    en = np.add.reduceat(N, starts)
    ehi = hi[::-1][starts]
    elo = lo[::-1][ends - 1]
    return elo[::-1].copy(), ehi[::-1].copy(), ep[::-1].copy(), en[::-1].copy()


# --- Newton with backtracking, driven one evaluation at a time ------------------------------------
#
# The two Newton solvers below are state machines: ``*_start`` returns the first trial point, and
# ``*_update(state, ev)`` takes the evaluation at the last trial point (objective, gradient and
# Hessian summed over the data, computed in one pass) and returns the next trial point or ``None``
# once converged.  An accepted step already carries the gradient and Hessian of the new point, so
# every trial point costs exactly one pass over the data.


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


def _platt_eval(f, t, w, a: float, b: float) -> np.ndarray:
    """``[objective, gradient (2), Hessian (3)]`` of Platt's cross-entropy at ``(a, b)``."""
    z = a * f + b
    p = expit(-z)
    q = expit(z)
    # −[t ln P + (1−t) ln(1−P)] with P = σ(−z): equals (t−1)·z + log(1+e^{z}).
    obj = np.sum(w * ((t - 1.0) * z + _log1pexp(z, p, q)))
    d2 = w * p * q
    d1 = w * (t - p)
    return np.array([obj, np.sum(f * d1), np.sum(d1), np.sum(f * f * d2), np.sum(d2), np.sum(f * d2)])


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


def _slope_update(st: dict[str, Any], ev: np.ndarray):
    """``ev`` rows ``[g, g']`` at the requested points; returns the next points or ``None`` (then
    ``st["x"]`` is the answer)."""
    if st["phase"] == "ends":
        (g_lo, dg_lo), (g_hi, _) = ev
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


def _slope_eval(m: np.ndarray, w: np.ndarray, points) -> np.ndarray:
    """Rows ``[g(α), g'(α)]`` for each α: ``g = −Σ w m σ(−α m)``, ``g' = Σ w m² σ(α m) σ(−α m)``."""
    out = np.empty((len(points), 2))
    for k, a in enumerate(points):
        e = expit(-a * m)
        wm = w * m
        out[k, 0] = -np.sum(wm * e)
        out[k, 1] = np.sum(wm * m * e * expit(a * m))
    return out


def _add_ends(mid: np.ndarray, first: float, last: float, head: bool, tail: bool) -> np.ndarray:
    """``mid`` with ``first`` prepended if ``head`` and ``last`` appended if ``tail``."""
    return np.concatenate(([first] if head else [], mid, [last] if tail else [])).astype(np.float64)


# ---------------------------------------------------------------------------------------------------
# calibrators


# ---------------------------------------------------------------------------------------------------
# score summaries stored for ``calengine recalibrate --update``

#: the summary's grid: ``u = asinh(score)`` (decision) or ``asinh(logit(p))`` (proba) cut into bins of
#: width 1/8 over [-40, 40] (scores beyond go to the end bins); data-independent, so summaries of any
#: pieces add up exactly.
_HIST_BINS = 640
_HIST_SPAN = 40.0
_HIST_KEYS = ("hist_wpos", "hist_wneg", "hist_spos", "hist_sneg")


def _score_hist(s: np.ndarray, yi: np.ndarray, w: np.ndarray, kind: str) -> dict[str, np.ndarray]:
    """Per grid bin and class: total weight and weighted sum of the raw scores (so the mean score of
    each class in each bin is known exactly)."""
    u = np.arcsinh(_logit(np.clip(s, 0.0, 1.0)) if kind == "proba" else s)
    idx = np.clip(((u + _HIST_SPAN) * (_HIST_BINS / (2 * _HIST_SPAN))).astype(np.int64), 0, _HIST_BINS - 1)
    pos = yi == 1
    out = {}
    for key, mask, weights in (("hist_wpos", pos, w), ("hist_wneg", ~pos, w),
                               ("hist_spos", pos, w * s), ("hist_sneg", ~pos, w * s)):
        out[key] = np.bincount(idx[mask], weights=weights[mask], minlength=_HIST_BINS).astype(np.float64)
    return out


class _SummaryStored:
    """Mixin for calibrators whose first round also collects :func:`_score_hist`; the fitted
    calibrator keeps it (``hist_*_``, stored sparse: only non-empty bins) so ``recalibrate --update``
    can merge new data into it.  Optional in the state: older models load without it."""

    # (hooks on the generic protocol methods, which the subclasses do not override)
    def _ps_summary(self, scores, y, sample_weight, request):
        stats = super()._ps_summary(scores, y, sample_weight, request)
        s, yi, w = _live(*_check_piece(scores, y, sample_weight))
        return {**stats, **_score_hist(s, yi, w, request["kind"])}

    def reduction_step(self, stats, request):
        if request.get("op") == "summary":
            self._red["hist"] = {key + "_": np.asarray(stats[key], dtype=np.float64) for key in _HIST_KEYS}
        return super().reduction_step(stats, request)

    def _finish(self, **fitted) -> None:
        fitted.update(self._red.get("hist", {}))
        super()._finish(**fitted)

    def reduction_start(self, score_kind: str = "decision"):
        for key in _HIST_KEYS:
            self.__dict__.pop(key + "_", None)
        return super().reduction_start(score_kind)

    def to_state(self) -> dict[str, Any]:
        out = super().to_state()
        if getattr(self, "hist_wpos_", None) is not None:
            wsum = self.hist_wpos_ + self.hist_wneg_
            nz = np.flatnonzero(wsum > 0)
            out["hist_index_"] = nz.astype(np.float64)
            for key in _HIST_KEYS:
                out[key + "_"] = np.asarray(getattr(self, key + "_"))[nz]
        return out

    def from_state(self, state: dict[str, Any]):
        super().from_state(state)
        for key in _HIST_KEYS:
            self.__dict__.pop(key + "_", None)
        if "hist_index_" not in state:
            return self
        idx = np.asarray(state["hist_index_"], dtype=np.float64).reshape(-1)
        if not (np.all(idx == np.round(idx)) and np.all((idx >= 0) & (idx < _HIST_BINS))
                and np.all(np.diff(idx) > 0)):
            raise ModelFormatError(f"calibrator '{self.name}' state 'hist_index_' is not a set of bin numbers; the model is damaged, refit it")
        for key in _HIST_KEYS:
            val = np.asarray(state.get(key + "_", np.empty(0)), dtype=np.float64).reshape(-1)
            if val.shape != idx.shape:
                raise ModelFormatError(f"calibrator '{self.name}' state '{key}_' does not match 'hist_index_'; the model is damaged, refit it")
            dense = np.zeros(_HIST_BINS)
            dense[idx.astype(np.intp)] = val
            setattr(self, key + "_", dense)
        return self


class NoCalibration(_BinaryCalibrator):
    """The uncalibrated baseline: the learner's own probability, or a rescaled decision value.

    * ``score_kind="proba"``: the score itself, clipped to [0, 1] (``mode_ = "proba"``).
    * ``score_kind="decision"``: Zadrozny & Elkan's (2002, §2) linear rescaling into [0, 1], fitted on
      the calibration scores and clipped outside them.  ``rescale="minmax"`` (default) maps
      ``[min, max]`` of the calibration scores onto [0, 1]; ``rescale="symmetric"`` is the paper's
      ``(f + a) / 2a`` with ``a = max |f|``, which keeps a zero score at 1/2.  Constant calibration
      scores give 1/2 everywhere.  The chosen rule is recorded in ``mode_``.

    The labels are validated like every calibrator's (both classes required) but not used.
    Reduction: one unsorted round (validation, minimum and maximum), exact.
    """

    name = "none"
    _state_fields = {"mode_": "str", "lo_": "float", "hi_": "float", "score_kind_": "str"}

    def __init__(self, rescale: str = "minmax"):
        self.rescale = rescale

    def _check_params(self):
        if self.rescale not in ("minmax", "symmetric"):
            raise ParameterError(
                f"rescale must be 'minmax' or 'symmetric', got {self.rescale!r}; pick one of those"
            )

    def _first_request(self, kind):
        return {"op": "summary", "kind": kind, "sorted": False}

    def _summary_extra(self, s, yi, w, request):
        return {
            "min_live": float(s.min()) if s.size else math.inf,
            "max_live": float(s.max()) if s.size else -math.inf,
            "max_abs": _max_abs(s),
        }

    def _step_summary(self, stats, request):
        kind = self._red["kind"]
        _check_merged(stats, kind)
        if kind == "proba":
            self._finish(mode_="proba", lo_=0.0, hi_=1.0)
        elif self.rescale == "minmax":
            self._finish(mode_="minmax", lo_=float(stats["min_live"]), hi_=float(stats["max_live"]))
        else:
            a = float(stats["max_abs"])
            self._finish(mode_="symmetric", lo_=-a, hi_=a)
        return None

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        return self._fit_protocol(scores, y, sample_weight, score_kind)

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        if self.mode_ == "proba":
            return s
        if self.hi_ <= self.lo_:
            return np.full(s.shape, 0.5)
        return np.clip((s - self.lo_) / (self.hi_ - self.lo_), 0.0, 1.0)


class SigmoidCalibrator(_SummaryStored, _BinaryCalibrator):
    """Platt scaling: ``P(y=1 | f) = 1 / (1 + exp(A f + B))``.

    Fitted by cross-entropy against Platt's smoothed targets ``t₊ = (N₊+1)/(N₊+2)`` and
    ``t₋ = 1/(N₋+2)`` (weighted counts), which keeps the fit finite on separable data, with Lin, Lin &
    Weng's Newton method.  The score is used as given (for probability scores, the probability
    itself, as scikit-learn does).  Internally the scores are divided by ``max |f|`` for
    conditioning and ``A`` is scaled back, which does not change the optimum.

    Monotone by construction: if the best fit has ``A > 0`` (scores and labels anti-correlated),
    ``A`` is held at 0 and ``B`` gives the best constant, the mean smoothed target, instead of
    reversing the learner's ranking.  The same constant is the fit when every (positively weighted)
    score is the same, where ``A`` and ``B`` cannot be told apart.

    Reduction: one unsorted round of counts and ``max |f|``, then one round per Newton trial point
    (objective, gradient and Hessian summed in one pass); ``fit`` runs the same rounds on one piece.
    """

    name = "sigmoid"
    _proba_range = False
    _state_fields = {"a_": "float", "b_": "float", "score_kind_": "str"}

    def _first_request(self, kind):
        return {"op": "summary", "kind": kind, "sorted": False}

    def _summary_extra(self, s, yi, w, request):
        return {
            "max_abs": _max_abs(s),
            "min_live": float(s.min()) if s.size else math.inf,
            "max_live": float(s.max()) if s.size else -math.inf,
        }

    def _step_summary(self, stats, request):
        _check_merged(stats, self._red["kind"], proba_range=False)
        n_pos, n_neg = float(stats["w_pos"]), float(stats["w_neg"])
        t_pos, t_neg = (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0)
        scale = float(stats["max_abs"]) or 1.0
        t_bar = (n_pos * t_pos + n_neg * t_neg) / (n_pos + n_neg)
        if stats["min_live"] == stats["max_live"]:
            # One distinct score: A and B are not identifiable (only A f + B is), so Newton would
            # stop at a start-dependent slope; the fit is the best constant, as for A > 0.
            self._finish(a_=0.0, b_=math.log((1.0 - t_bar) / t_bar))
            return None
        st, (a, b) = _platt_start(0.0, math.log((n_neg + 1.0) / (n_pos + 1.0)))
        self._red.update(newton=st, scale=scale, t_bar=t_bar)
        return {"op": "platt", "kind": self._red["kind"], "sorted": False, "scale": scale,
                "t_pos": t_pos, "t_neg": t_neg, "a": a, "b": b}

    def _ps_platt(self, scores, y, sample_weight, request):
        f, yi, w = _live(*_light(scores, y, sample_weight))
        t = np.where(yi == 1, request["t_pos"], request["t_neg"])
        return {"op": "platt", "v": _platt_eval(f / request["scale"], t, w, request["a"], request["b"])}

    def _step_platt(self, stats, request):
        st = self._red["newton"]
        nxt = _platt_update(st, stats["v"])
        if nxt is not None:
            return {**request, "a": nxt[0], "b": nxt[1]}
        a, b = st["a"], st["b"]
        if a > 0.0:
            t_bar = self._red["t_bar"]
            a, b = 0.0, math.log((1.0 - t_bar) / t_bar)
        self._finish(a_=a / self._red["scale"], b_=b)
        return None

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        return self._fit_protocol(scores, y, sample_weight, score_kind)

    def predict(self, scores) -> np.ndarray:
        check_is_fitted(self, list(self._state_fields))
        f = check_scores(scores)
        return expit(-(self.a_ * f + self.b_))


class IsotonicCalibrator(_BinaryCalibrator):
    """Isotonic regression by pool-adjacent-violators (Zadrozny & Elkan 2002), always increasing.

    Tied scores are pooled before PAV (see :mod:`calengine.reductions.pav`), which makes the fit identical to
    ``rocch`` and to scikit-learn's ``IsotonicRegression`` at training scores, and invariant to any
    strictly increasing transformation of the scores.  ``interpolation`` decides unseen scores:

    * ``"step"`` (default, the papers' rule): the value of the last block whose lowest training
      score is at or below the score; clipped to the end blocks outside the training range.
    * ``"linear"`` (scikit-learn's ``out_of_bounds="clip"``): linear between consecutive distinct
      training scores, clipped outside.

    Fitted state: the blocks ``lo_``, ``hi_``, ``values_``, ``weights_`` (increasing score order)
    and the rule used, ``interpolation_``.

    Reduction: one sorted round.  A score range's statistics are its PAV blocks (exact sums of
    ``w·y`` and ``w``, lowest and highest score); merging two ranges runs PAV over their blocks,
    which is exact because the ranges are disjoint in score (PAV blocks of a contiguous stretch are
    contained in blocks of the whole fit).  Identical to :func:`calengine.reductions.pav.pav` for integer weights.
    """

    name = "isotonic"
    _state_fields = {
        "lo_": "array",
        "hi_": "array",
        "values_": "array",
        "weights_": "array",
        "interpolation_": "str",
        "score_kind_": "str",
    }

    def __init__(self, interpolation: str = "step"):
        self.interpolation = interpolation

    def _check_params(self):
        if self.interpolation not in ("step", "linear"):
            raise ParameterError(
                f"interpolation must be 'step' or 'linear', got {self.interpolation!r}; pick one of those"
            )

    def _first_request(self, kind):
        return {"op": "pav", "kind": kind, "sorted": True}

    def _ps_pav(self, scores, y, sample_weight, request):
        s, yi, w, summ = _sorted_piece(scores, y, sample_weight, request["kind"], validate=True)
        s, yi, w, e0, e1 = _edges(s, yi, w, request["kind"])
        xs, wy, ws = pool_ties(s, yi, w)
        lo, hi, bwy, bw = pav_sums(xs, xs, wy, ws)
        return {"op": "pav", **summ, "e0": e0, "e1": e1, "lo": lo, "hi": hi, "wy": bwy, "w": bw}

    def _merge_pav(self, a, b):
        out = _merge_dicts({k: v for k, v in a.items() if k not in ("lo", "hi", "wy", "w")},
                           {k: v for k, v in b.items() if k not in ("lo", "hi", "wy", "w")})
        lo, hi, wy, w = pav_sums(*(np.concatenate((a[k], b[k])) for k in ("lo", "hi", "wy", "w")))
        out.update(lo=lo, hi=hi, wy=wy, w=w)
        return out

    def _step_pav(self, stats, request):
        _check_merged(stats, self._red["kind"])
        lo, hi, wy, w = stats["lo"], stats["hi"], stats["wy"], stats["w"]
        e0, e1 = stats["e0"], stats["e1"]
        if e0[1] > 0 or e1[1] > 0:
            head, tail = e0[1] > 0, e1[1] > 0
            lo = _add_ends(lo, 0.0, 1.0, head, tail)
            hi = _add_ends(hi, 0.0, 1.0, head, tail)
            wy = _add_ends(wy, e0[0], e1[0], head, tail)
            w = _add_ends(w, e0[1], e1[1], head, tail)
            lo, hi, wy, w = pav_sums(lo, hi, wy, w)
        self._finish(lo_=lo, hi_=hi, values_=np.clip(wy / w, 0.0, 1.0), weights_=w,
                     interpolation_=self.interpolation)
        return None

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        return self._fit_protocol(scores, y, sample_weight, score_kind)

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        if self.interpolation_ == "linear":
            return predict_linear(self.lo_, self.hi_, self.values_, s)
        return predict_step(self.lo_, self.values_, s)


class BinningCalibrator(_BinaryCalibrator):
    """Equal-frequency histogram binning (Zadrozny & Elkan 2001).

    Sorting by score, cut ``i`` of ``b`` falls at ``round(i·n/b)`` examples (halves round up), moved
    forward past any scores tied with the example before the cut so that ties share a bin (bins
    left empty by that move disappear, so fewer than ``b`` bins may result).  With sample weights,
    which act as frequency weights, the cut falls at the first tie-group boundary whose cumulative
    weight exceeds ``i·W/b − h`` with ``h`` half the smallest positive weight, capped at 1/2 (for
    unit weights exactly the rule above).  A bin's estimate is its weighted positive fraction.

    Unseen scores: ``boundary="midpoint"`` (default) puts the boundary between two bins halfway
    between the highest score of the lower bin and the lowest of the upper one (a score exactly on
    it goes up); ``"lower"`` uses the last bin whose lowest score is at or below the score.  Scores
    outside the training range go to the end bins.

    ``n_bins``: an int ``>= 1``, or ``"auto"`` to choose ``b`` from {2, 3, 4, 5, 10, 15, 20, 30,
    40, 50} by ``cv``-fold stratified cross-validation (shuffled with ``random_state`` after sorting
    the rows by score, so the split does not depend on the row order) minimising
    the weighted Brier score of the held-out folds; ties go to the smaller ``b`` and only ``b`` up to
    the smallest training-fold size are tried.  With fewer than two examples of a class CV is
    impossible and ``b = 2`` is used.  ``cv_grid_``/``cv_brier_`` record the search (empty for an
    int ``n_bins``).

    Not monotone: like the original method, each bin keeps its own positive fraction, so a higher
    score can get a lower probability when the data say so.

    Reduction (integer ``n_bins`` only): three rounds.  (1) sorted: each score range's first and
    last score and total weight, class counts, smallest weight; the client places every cut target.
    (2) sorted, on the same ranges (or unions of them): the range holding a cut finds its tie group
    from the weight below the range.  (3) unsorted: per-bin sums, lowest and highest score.  Identical
    to the in-memory rule whenever the weight sums are exact (integer or dyadic weights); otherwise a
    target that ties a cumulative weight to rounding may fall on the other side.  ``n_bins="auto"``
    is not a reduction (``reduction_start`` returns ``None``): its CV split shuffles the rows in
    score order, which no mergeable statistic reproduces, so the engine gathers the scores.
    """

    name = "binning"
    GRID: ClassVar[tuple[int, ...]] = (2, 3, 4, 5, 10, 15, 20, 30, 40, 50)
    _state_fields = {
        "n_bins_": "int",
        "lo_": "array",
        "hi_": "array",
        "values_": "array",
        "boundaries_": "array",
        "boundary_": "str",
        "cv_grid_": "array",
        "cv_brier_": "array",
        "score_kind_": "str",
    }

    def __init__(self, n_bins="auto", cv: int = 5, random_state=0, boundary: str = "midpoint"):
        self.n_bins = n_bins
        self.cv = cv
        self.random_state = random_state
        self.boundary = boundary

    def _check_params(self):
        if not (self.n_bins == "auto" if isinstance(self.n_bins, str) else _is_int(self.n_bins, 1)):
            raise ParameterError(
                f"n_bins must be 'auto' or a positive integer, got {self.n_bins!r}; pass e.g. 10"
            )
        if not _is_int(self.cv, 2):
            raise ParameterError(f"cv must be an integer >= 2, got {self.cv!r}; pass e.g. 5")
        if self.boundary not in ("midpoint", "lower"):
            raise ParameterError(
                f"boundary must be 'midpoint' or 'lower', got {self.boundary!r}; pick one of those"
            )

    @staticmethod
    def _pooled(s, y, w):
        """Tie groups of ``(s, y, w)`` (positive weights) plus the rounding slack of the cut rule."""
        return pool_ties(s, y, w), 0.5 * min(1.0, float(np.min(w)))

    @staticmethod
    def _bins(pooled, b):
        """``(lo, hi, values)`` of ``b`` equal-frequency bins over tie groups from :meth:`_pooled`."""
        (xs, wy, ws), half = pooled
        cum = np.cumsum(ws)
        targets = np.arange(1, b) * (cum[-1] / b) - half
        cuts = np.searchsorted(cum, targets, side="right") + 1
        cuts = np.unique(cuts[(cuts > 0) & (cuts < xs.size)])
        starts = np.concatenate(([0], cuts)).astype(np.intp)
        ends = np.concatenate((cuts, [xs.size])).astype(np.intp)
        values = np.add.reduceat(wy, starts) / np.add.reduceat(ws, starts)
        return xs[starts], xs[ends - 1], values

    @staticmethod
    def _predict_bins(lo, hi, values, boundary, s):
        if boundary == "lower":
            return predict_step(lo, values, s)
        mids = 0.5 * (hi[:-1] + lo[1:])
        return values[np.searchsorted(mids, s, side="right")]

    def _choose_bins(self, s, y, w):
        from sklearn.model_selection import StratifiedKFold

        n_splits = min(int(self.cv), int(np.count_nonzero(y == 1)), int(np.count_nonzero(y == 0)))
        if n_splits < 2:
            return 2, np.empty(0), np.empty(0)
        skf = StratifiedKFold(n_splits=n_splits, shuffle=True, random_state=self.random_state)
        folds = list(skf.split(s.reshape(-1, 1), y))
        smallest = min(len(train) for train, _ in folds)
        grid = [b for b in self.GRID if b <= smallest] or [smallest]
        loss = np.zeros(len(grid))
        for train, test in folds:
            pooled = self._pooled(s[train], y[train], w[train])
            for k, b in enumerate(grid):
                lo, hi, values = self._bins(pooled, b)
                p = self._predict_bins(lo, hi, values, self.boundary, s[test])
                loss[k] += float(np.sum(w[test] * (p - y[test]) ** 2))
        brier = loss / float(np.sum(w))
        best = int(np.flatnonzero(brier <= brier.min() * (1.0 + 1e-12) + 1e-300)[0])
        return grid[best], np.asarray(grid, dtype=np.float64), brier


    def _first_request(self, kind):
        if self.n_bins == "auto":
            # The CV split draws folds from the rows in score order with a random generator: it is
            # not a function of mergeable statistics, so the engine gathers the scores instead.
            return None
        return {"op": "bin_ranges", "kind": kind, "sorted": True}

    # Round 1 (sorted): per score range its first score and total weight, plus counts and the
    # smallest weight.  The client then knows every cut target W·i/b − h and which range (or end
    # group at 0 / 1) it falls in, and each range's cumulative weight offset.
    def _ps_bin_ranges(self, scores, y, sample_weight, request):
        s, yi, w, summ = _sorted_piece(scores, y, sample_weight, request["kind"], validate=True)
        min_w = float(np.min(w)) if w.size else math.inf
        max_live = float(s.max()) if s.size else -math.inf
        s, yi, w, e0, e1 = _edges(s, yi, w, request["kind"])
        xs, _, ws = pool_ties(s, yi, w)
        return {"op": "bin_ranges", **summ, "min_w": min_w, "max_live": max_live, "e0": e0, "e1": e1,
                "cat_first": xs[:1], "cat_last": xs[-1:], "cat_total": np.cumsum(ws)[-1:]}

    def _step_bin_ranges(self, stats, request):
        kind = self._red["kind"]
        _check_merged(stats, kind)
        b = int(self.n_bins)
        # Units in score order: the group at 0 (proba), the ranges, the group at 1 (proba).
        units: list[tuple[str, float]] = []
        if stats["e0"][1] > 0:
            units.append(("e0", float(stats["e0"][1])))
        units += [("range", float(t)) for t in stats["cat_total"]]
        if stats["e1"][1] > 0:
            units.append(("e1", float(stats["e1"][1])))
        ends, starts, acc = [], [], 0.0
        for _, weight in units:
            starts.append(acc)
            acc += weight
            ends.append(acc)
        half = 0.5 * min(1.0, float(stats["min_w"]))
        targets = np.arange(1, b) * (acc / b) - half
        unit_of = np.searchsorted(np.asarray(ends), targets, side="right")
        known, t_range, t_value = [], [], []
        range_no = np.cumsum([u == "range" for u, _ in units]) - 1
        for t, u in zip(targets, unit_of):
            if u >= len(units):
                continue  # the cut would fall after the last group: no bin
            name = units[u][0]
            if name == "e0":
                known.append(0.0)
            elif name == "e1":
                known.append(1.0)
            else:
                t_range.append(int(range_no[u]))
                t_value.append(float(t))
        offsets = np.asarray([st for (u, _), st in zip(units, starts) if u == "range"], dtype=np.float64)
        self._red.update(known=known, max_live=float(stats["max_live"]))
        if not t_range:
            return self._bins_request()
        r = np.asarray(t_range, dtype=np.intp)
        # Only the ranges holding a cut travel (at most n_bins - 1 of them): their first and last
        # score and the weight below them.
        return {"op": "bin_cuts", "kind": kind, "sorted": True, "first": np.asarray(stats["cat_first"])[r],
                "last": np.asarray(stats["cat_last"])[r], "offset": offsets[r],
                "target": np.asarray(t_value, dtype=np.float64)}

    # Round 2 (sorted, the ranges of round 1 or unions of them): for each cut the range holding it
    # finds the tie group where the cumulative weight, counted from the weight below the range,
    # first exceeds the target; that group's score is the highest score of a bin.
    def _ps_bin_cuts(self, scores, y, sample_weight, request):
        s, yi, w, _ = _sorted_piece(scores, y, sample_weight, request["kind"], validate=False)
        s, yi, w, _, _ = _edges(s, yi, w, request["kind"])
        xs, _, ws = pool_ties(s, yi, w)
        found: list[float] = []
        for first, last, offset, target in zip(request["first"], request["last"], request["offset"],
                                               request["target"]):
            if xs.size == 0 or last < xs[0] or first > xs[-1]:
                continue  # the range is not in this piece
            k = int(np.searchsorted(xs, first))
            if first < xs[0] or last > xs[-1] or xs[k] != first:
                raise RuntimeError(
                    "binning's second round needs whole score ranges of its first round (a piece "
                    f"spans [{xs[0]!r}, {xs[-1]!r}], which cuts the range [{first!r}, {last!r}]); "
                    "cut the data with the same boundaries in every round"
                )
            cum = np.cumsum(np.concatenate(([offset], ws[k:])))[1:]
            j = min(int(np.searchsorted(cum, target, side="right")), cum.size - 1)
            found.append(float(xs[k + j]))
        return {"op": "bin_cuts", "cat_u": np.asarray(found, dtype=np.float64)}

    def _step_bin_cuts(self, stats, request):
        self._red["known"] = list(self._red["known"]) + [float(u) for u in stats["cat_u"]]
        return self._bins_request()

    def _bins_request(self):
        u = np.unique(np.asarray(self._red["known"], dtype=np.float64))
        u = u[u < self._red["max_live"]]  # a cut after the highest group makes no bin
        self._red["u"] = u
        return {"op": "bin_sums", "kind": self._red["kind"], "sorted": False, "u": u}

    # Round 3 (unsorted): per bin (scores in (u_{k-1}, u_k]) the sums of w·y and w, lowest and
    # highest score.
    def _ps_bin_sums(self, scores, y, sample_weight, request):
        s, yi, w = _light(scores, y, sample_weight)
        if request["kind"] == "proba":
            s = np.clip(s, 0.0, 1.0)
        s, yi, w = _live(s, yi, w)
        u = request["u"]
        nb = u.size + 1
        idx = np.searchsorted(u, s, side="left")  # bin k holds u[k-1] < s <= u[k]
        lo = np.full(nb, math.inf)
        hi = np.full(nb, -math.inf)
        np.minimum.at(lo, idx, s)
        np.maximum.at(hi, idx, s)
        return {"op": "bin_sums", "wy": np.bincount(idx, weights=w * yi, minlength=nb),
                "w": np.bincount(idx, weights=w, minlength=nb), "min_lo": lo, "max_hi": hi}

    def _step_bin_sums(self, stats, request):
        lo, hi = np.asarray(stats["min_lo"], dtype=np.float64), np.asarray(stats["max_hi"], dtype=np.float64)
        self._finish(
            n_bins_=int(self.n_bins), lo_=lo, hi_=hi, values_=stats["wy"] / stats["w"],
            boundaries_=0.5 * (hi[:-1] + lo[1:]), boundary_=self.boundary,
            cv_grid_=np.empty(0), cv_brier_=np.empty(0),
            bin_weights_=np.asarray(stats["w"], dtype=np.float64),
            bin_positives_=np.asarray(stats["wy"], dtype=np.float64),
        )
        return None

    # Stored statistics for ``calengine recalibrate --update``: each bin's total weight and positive
    # weight, so new data's counts can be added to the old ones exactly.  Optional in the state, so
    # models saved before they existed still load (they cannot be updated, only recalibrated).
    _stat_fields: ClassVar[tuple[str, ...]] = ("bin_weights_", "bin_positives_")

    def to_state(self) -> dict[str, Any]:
        out = super().to_state()
        for key in self._stat_fields:
            if getattr(self, key, None) is not None:
                out[key] = np.array(getattr(self, key), dtype=np.float64)
        return out

    def from_state(self, state: dict[str, Any]) -> "BinningCalibrator":
        super().from_state(state)
        for key in self._stat_fields:
            self.__dict__.pop(key, None)
            if key in state:
                val = np.array(state[key], dtype=np.float64).reshape(-1)
                if val.shape != self.values_.shape:
                    raise ModelFormatError(
                        f"calibrator 'binning' state '{key}' has {val.size} entries for {self.values_.size}"
                        " bins; the model is damaged, refit it"
                    )
                setattr(self, key, val)
        return self

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        if self.n_bins != "auto":
            return self._fit_protocol(scores, y, sample_weight, score_kind)
        self._check_params()
        s, yi, w = self._check_fit(scores, y, sample_weight, score_kind)
        keep = w > 0
        # Sorting once up front makes every CV training fold an already sorted subsequence, and
        # makes the CV split independent of the row order (only the multiset of rows matters).
        order = np.argsort(s[keep], kind="stable")
        s, yi, w = s[keep][order], yi[keep][order], w[keep][order]
        b, self.cv_grid_, self.cv_brier_ = self._choose_bins(s, yi, w)
        self.n_bins_ = int(b)
        self.lo_, self.hi_, self.values_ = self._bins(self._pooled(s, yi, w), self.n_bins_)
        self.boundaries_ = 0.5 * (self.hi_[:-1] + self.lo_[1:])
        self.boundary_ = self.boundary
        # the bins' sums (bin k: hi_[k-1] < s <= hi_[k]), stored for recalibrate --update
        idx = np.searchsorted(self.hi_[:-1], s, side="left")
        self.bin_weights_ = np.bincount(idx, weights=w, minlength=self.values_.size).astype(np.float64)
        self.bin_positives_ = np.bincount(idx, weights=w * yi, minlength=self.values_.size).astype(np.float64)
        return self

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        return self._predict_bins(self.lo_, self.hi_, self.values_, self.boundary_, s)


class ROCHullCalibrator(_BinaryCalibrator):
    """ROC convex hull calibration (Fawcett & Niculescu-Mizil 2007; Flach & Matsubara 2007, Def. 3).

    Builds the training ROC curve (tied scores form one segment), takes its upper convex hull, and
    gives every score under a hull edge that edge's positive fraction; with ``laplace=True`` the
    LexProb estimate ``(Δn⁺ + 1) / (Δn⁺ + Δn⁻ + 2)``.  Without Laplace this equals ``isotonic`` (PAV
    with ties pooled) exactly.  Unseen scores use the same right-continuous step rule as
    ``isotonic``: the edge whose lowest training score is the largest one at or below the score,
    clipped at both ends.

    Monotone unless ``laplace=True``: the correction pulls small edges towards 1/2 more than large
    ones, which can put a lower probability above a higher one.

    Fitted state (increasing score order): ``lo_``, ``hi_`` score range of each edge, ``pos_``,
    ``neg_`` weighted counts, ``values_`` probabilities.

    Reduction: one sorted round.  A score range's statistics are the edges of its own ROC hull;
    merging takes the hull over both ranges' edges, which is the hull of the concatenated curve
    (every vertex of the whole hull is a vertex of its range's hull), with exact edge counts.
    """

    name = "rocch"
    _state_fields = {
        "lo_": "array",
        "hi_": "array",
        "pos_": "array",
        "neg_": "array",
        "values_": "array",
        "laplace_": "bool",
        "score_kind_": "str",
    }

    def __init__(self, laplace: bool = False):
        self.laplace = laplace

    def _check_params(self):
        _check_bool("laplace", self.laplace)

    def _first_request(self, kind):
        return {"op": "hull", "kind": kind, "sorted": True}

    def _ps_hull(self, scores, y, sample_weight, request):
        s, yi, w, summ = _sorted_piece(scores, y, sample_weight, request["kind"], validate=True)
        s, yi, w, e0, e1 = _edges(s, yi, w, request["kind"])
        xs, wy, ws = pool_ties(s, yi, w)
        lo, hi, pos, neg = _hull_sums(xs, xs, wy, ws - wy)
        e0 = np.array([e0[0], e0[1] - e0[0]])  # [pos, neg]
        e1 = np.array([e1[0], e1[1] - e1[0]])
        return {"op": "hull", **summ, "e0": e0, "e1": e1, "lo": lo, "hi": hi, "pos": pos, "neg": neg}

    def _merge_hull(self, a, b):
        keys = ("lo", "hi", "pos", "neg")
        out = _merge_dicts({k: v for k, v in a.items() if k not in keys},
                           {k: v for k, v in b.items() if k not in keys})
        lo, hi, pos, neg = _hull_sums(*(np.concatenate((a[k], b[k])) for k in keys))
        out.update(lo=lo, hi=hi, pos=pos, neg=neg)
        return out

    def _step_hull(self, stats, request):
        _check_merged(stats, self._red["kind"])
        laplace = _check_bool("laplace", self.laplace)
        lo, hi, pos, neg = stats["lo"], stats["hi"], stats["pos"], stats["neg"]
        e0, e1 = stats["e0"], stats["e1"]
        head, tail = e0[0] + e0[1] > 0, e1[0] + e1[1] > 0
        if head or tail:
            lo = _add_ends(lo, 0.0, 1.0, head, tail)
            hi = _add_ends(hi, 0.0, 1.0, head, tail)
            pos = _add_ends(pos, e0[0], e1[0], head, tail)
            neg = _add_ends(neg, e0[1], e1[1], head, tail)
            lo, hi, pos, neg = _hull_sums(lo, hi, pos, neg)
        self._finish(lo_=lo, hi_=hi, pos_=pos, neg_=neg, values_=edge_probability(pos, neg, laplace),
                     laplace_=laplace)
        return None

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        return self._fit_protocol(scores, y, sample_weight, score_kind)

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        return predict_step(self.lo_, self.values_, s)


class BetaCalibrator(_BinaryCalibrator):
    """Beta calibration (Kull, Silva Filho & Flach 2017), three-parameter form.

    ``logit P = a ln s − b ln(1 − s) + c`` with ``a, b >= 0``: logistic regression on the features
    ``[ln s, −ln(1 − s)]``.  As the authors do, if the fitted ``a`` is negative the model is refitted
    without the ``ln s`` feature (``a = 0``), otherwise if ``b`` is negative without the second one;
    if the remaining coefficient is still negative it is set to 0 as well and only ``c`` is fitted,
    so the map is always non-decreasing.  A ridge of ``1e-8`` times the total weight on ``a`` and
    ``b`` keeps the fit finite on separable data without visibly changing ordinary fits.

    Scores must be probabilities: with ``score_kind="decision"`` they are first mapped through the
    logistic function ``s = 1 / (1 + e^{−f})``.  ``s`` is clipped to ``[1e-12, 1 − 1e-12]``.

    Reduction: one unsorted round of counts (and validation), then one round per Newton trial point
    of each logistic fit (objective, gradient and Hessian in one pass); ``fit`` runs the same rounds.
    """

    name = "beta"
    _state_fields = {"a_": "float", "b_": "float", "c_": "float", "score_kind_": "str"}

    @staticmethod
    def _features_of(s: np.ndarray, kind: str) -> np.ndarray:
        p = expit(s) if kind == "decision" else s
        p = np.clip(p, EPS, 1.0 - EPS)
        return np.column_stack((np.log(p), -np.log1p(-p)))

    def _features(self, s: np.ndarray) -> np.ndarray:
        return self._features_of(s, self.score_kind_)

    def _first_request(self, kind):
        return {"op": "summary", "kind": kind, "sorted": False}

    def _step_summary(self, stats, request):
        _check_merged(stats, self._red["kind"])
        total = float(stats["w_pos"]) + float(stats["w_neg"])
        self._red.update(total=total, mean=float(stats["w_pos"]) / total, lam=1e-8 * total)
        return self._stage([0, 1])

    def _stage(self, cols: list[int]):
        ridge = np.array([self._red["lam"]] * len(cols) + [0.0])
        theta0 = np.array([1.0] * len(cols) + [0.0])
        st, theta = _logreg_start(theta0, ridge, self._red["total"])
        self._red.update(newton=st, cols=cols)
        return {"op": "logit", "kind": self._red["kind"], "sorted": False, "cols": list(cols),
                "theta": theta.tolist()}

    def _ps_logit(self, scores, y, sample_weight, request):
        s, yi, w = _light(scores, y, sample_weight)
        if request["kind"] == "proba":
            s = np.clip(s, 0.0, 1.0)
        s, yi, w = _live(s, yi, w)
        F = self._features_of(s, request["kind"])
        X = np.column_stack((F[:, request["cols"]], np.ones(s.size)))
        return {"op": "logit", "v": _logreg_eval(X, yi.astype(np.float64), w, np.asarray(request["theta"]))}

    def _step_logit(self, stats, request):
        st = self._red["newton"]
        nxt = _logreg_update(st, stats["v"])
        if nxt is not None:
            return {**request, "theta": nxt.tolist()}
        theta, cols = st["theta"], self._red["cols"]
        if cols == [0, 1]:
            a, b, c = theta
            if a < 0.0:
                self._red["fixed"] = "a"
                return self._stage([1])
            if b < 0.0:
                self._red["fixed"] = "b"
                return self._stage([0])
        elif cols == [1]:
            a, (b, c) = 0.0, theta
        else:
            (a, c), b = theta, 0.0
        if a < 0.0 or b < 0.0:
            # The refit's remaining coefficient is negative too: the best non-decreasing map is a constant.
            mean = self._red["mean"]
            a, b, c = 0.0, 0.0, math.log(mean / (1.0 - mean))
        self._finish(a_=float(a), b_=float(b), c_=float(c))
        return None

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        return self._fit_protocol(scores, y, sample_weight, score_kind)

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        F = self._features(s)
        return expit(self.a_ * F[:, 0] + self.b_ * F[:, 1] + self.c_)


class TemperatureCalibrator(_SummaryStored, _BinaryCalibrator):
    """Temperature scaling (Guo et al. 2017) of one column: ``P = σ(z / T)`` with ``T > 0``.

    ``z`` is the logit of the (clipped) probability for ``score_kind="proba"`` and the raw score for
    ``"decision"``.  ``T`` minimises the weighted log-loss.  The loss is convex in ``1/T``, so the
    optimum is found as the root of its monotone derivative on a bounded bracket,
    ``T ∈ [1e-6·c, 1e6·c]`` with ``c = max |z|``, by safeguarded Newton to machine precision:
    anti-correlated scores end at the largest ``T`` (probabilities ≈ 1/2), separable ones at the
    smallest.  All-zero ``z`` gives ``T = 1``.

    Reduction: one unsorted round (validation, counts, ``c``), one round evaluating the derivative at
    both ends of the bracket, then one round per Newton step (derivative and its slope are sums).
    """

    name = "temperature"
    _state_fields = {"temperature_": "float", "score_kind_": "str"}

    @staticmethod
    def _logits_of(s: np.ndarray, kind: str) -> np.ndarray:
        return _logit(np.clip(s, 0.0, 1.0)) if kind == "proba" else s

    def _logits(self, s: np.ndarray) -> np.ndarray:
        return self._logits_of(s, self.score_kind_)

    def _first_request(self, kind):
        return {"op": "summary", "kind": kind, "sorted": False}

    def _summary_extra(self, s, yi, w, request):
        return {"max_abs": _max_abs(self._logits_of(s, request["kind"]))}

    def _step_summary(self, stats, request):
        _check_merged(stats, self._red["kind"])
        c = float(stats["max_abs"])
        if c == 0.0:
            self._finish(temperature_=1.0)
            return None
        st, points = _slope_start(1e-6 / c, 1e6 / c)
        self._red["slope"] = st
        return {"op": "slope", "kind": self._red["kind"], "sorted": False, "points": points}

    def _ps_slope(self, scores, y, sample_weight, request):
        s, yi, w = _live(*_light(scores, y, sample_weight))
        z = self._logits_of(s, request["kind"])
        return {"op": "slope", "v": _slope_eval(np.where(yi == 1, z, -z), w, request["points"])}

    def _step_slope(self, stats, request):
        st = self._red["slope"]
        nxt = _slope_update(st, stats["v"])
        if nxt is not None:
            return {**request, "points": nxt}
        self._finish(temperature_=float(1.0 / st["x"]))
        return None

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        return self._fit_protocol(scores, y, sample_weight, score_kind)

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        return expit(self._logits(s) / self.temperature_)


class SigmoidNoBiasCalibrator(_BinaryCalibrator):
    """Duin & Tax's sigmoid without bias: ``P = σ(α S)`` with ``0 <= α <= 1e6``.

    Suppressing the constant keeps ``S = 0 ⇔ P = 1/2``, so the calibrated probability never
    contradicts the classifier's own decision.  ``α`` maximises the weighted likelihood (a convex 1-D
    problem solved to machine precision by safeguarded Newton on its derivative); separable data
    would send ``α`` to infinity, hence the bound; anti-correlated data give ``α = 0``.  ``S`` is the
    raw score for ``score_kind="decision"`` and ``logit(p)`` (``p`` clipped to
    ``[1e-12, 1 − 1e-12]``) for ``"proba"``, so a probability of 1/2 stays 1/2.

    Reduction: one unsorted round (validation, counts, and the derivative at ``α = 0`` and
    ``α = 1e6``), then one round per Newton step.
    """

    name = "sigmoid_nobias"
    ALPHA_MAX: ClassVar[float] = 1e6
    _state_fields = {"alpha_": "float", "score_kind_": "str"}

    @staticmethod
    def _raw_of(s: np.ndarray, kind: str) -> np.ndarray:
        return _logit(np.clip(s, 0.0, 1.0)) if kind == "proba" else s

    def _raw(self, s: np.ndarray) -> np.ndarray:
        return self._raw_of(s, self.score_kind_)

    def _first_request(self, kind):
        return {"op": "summary", "kind": kind, "sorted": False, "points": [0.0, float(self.ALPHA_MAX)]}

    def _summary_extra(self, s, yi, w, request):
        S = self._raw_of(s, request["kind"])
        return {"v": _slope_eval(np.where(yi == 1, S, -S), w, request["points"])}

    def _step_summary(self, stats, request):
        _check_merged(stats, self._red["kind"])
        st, _ = _slope_start(0.0, float(self.ALPHA_MAX))
        self._red["slope"] = st
        return self._step_slope(stats, request)

    def _ps_slope(self, scores, y, sample_weight, request):
        s, yi, w = _live(*_light(scores, y, sample_weight))
        S = self._raw_of(s, request["kind"])
        return {"op": "slope", "v": _slope_eval(np.where(yi == 1, S, -S), w, request["points"])}

    def _step_slope(self, stats, request):
        st = self._red["slope"]
        nxt = _slope_update(st, stats["v"])
        if nxt is not None:
            return {"op": "slope", "kind": self._red["kind"], "sorted": False, "points": nxt}
        self._finish(alpha_=float(st["x"]))
        return None

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        return self._fit_protocol(scores, y, sample_weight, score_kind)

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        return expit(self.alpha_ * self._raw(s))


class VennAbersCalibrator(_BinaryCalibrator):
    """Inductive Venn–ABERS (Vovk & Petej 2014; Vovk, Petej & Fedorova 2015): two isotonic fits per score.

    For a test score ``s``, ``p0`` is the isotonic fit of the calibration data plus ``(s, 0)`` at
    ``s`` and ``p1`` the same with ``(s, 1)``; ``predict`` returns the merged probability
    ``p1 / (1 − p0 + p1)`` and :meth:`predict_interval` the pair ``(p0, p1)``, whose width shrinks
    as the calibration data grow and which carries the method's validity guarantee.  All values are
    precomputed at fit time for every position of a test score among the distinct calibration scores
    (:mod:`calengine.methods.venn_abers`), so prediction is one binary search per score.  Ties are
    pooled as in ``isotonic``; weights are frequency weights of the calibration rows (the test row
    has weight 1), so a weight of 2 gives the same fit as the row twice.

    In a cross-validated ``ensemble`` model, the k members' pairs are combined by the paper's cross
    Venn–ABERS (CVAP) formula rather than by averaging (see :class:`calengine.model.calibrated.CalibratedModel`).

    Fitted state: ``xs_`` (distinct calibration scores), ``tie_p0_``/``tie_p1_`` (a test score equal
    to ``xs_[j]``), ``gap_p0_``/``gap_p1_`` (strictly between ``xs_[j-1]`` and ``xs_[j]``; index 0 below
    all, ``k`` above all).

    Reduction: one sorted round.  A score range's statistics are its tie groups (exact sums of
    ``w·y`` and ``w``); ranges concatenate, and the tables are computed from all groups at the end.
    """

    name = "venn_abers"
    _state_fields = {
        "xs_": "array",
        "tie_p0_": "array",
        "tie_p1_": "array",
        "gap_p0_": "array",
        "gap_p1_": "array",
        "score_kind_": "str",
    }

    def _first_request(self, kind):
        return {"op": "groups", "kind": kind, "sorted": True}

    def _ps_groups(self, scores, y, sample_weight, request):
        s, yi, w, summ = _sorted_piece(scores, y, sample_weight, request["kind"], validate=True)
        s, yi, w, e0, e1 = _edges(s, yi, w, request["kind"])
        xs, wy, ws = pool_ties(s, yi, w)
        return {"op": "groups", **summ, "e0": e0, "e1": e1, "cat_xs": xs, "cat_wy": wy, "cat_w": ws}

    def _step_groups(self, stats, request):
        from calengine.methods.venn_abers import venn_abers_tables

        _check_merged(stats, self._red["kind"])
        xs, wy, w = stats["cat_xs"], stats["cat_wy"], stats["cat_w"]
        e0, e1 = stats["e0"], stats["e1"]
        head, tail = e0[1] > 0, e1[1] > 0
        if head or tail:
            xs = _add_ends(xs, 0.0, 1.0, head, tail)
            wy = _add_ends(wy, e0[0], e1[0], head, tail)
            w = _add_ends(w, e0[1], e1[1], head, tail)
        t0, t1, g0, g1 = venn_abers_tables(w, wy)
        self._finish(xs_=np.asarray(xs, dtype=np.float64), tie_p0_=t0, tie_p1_=t1, gap_p0_=g0, gap_p1_=g1)
        return None

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        return self._fit_protocol(scores, y, sample_weight, score_kind)

    def from_state(self, state: dict[str, Any]) -> "VennAbersCalibrator":
        """Restore the tables, refusing ones that do not fit together (a damaged or tampered model)."""
        super().from_state(state)
        k = self.xs_.size
        ok = (
            k > 0 and self.tie_p0_.size == k and self.tie_p1_.size == k
            and self.gap_p0_.size == k + 1 and self.gap_p1_.size == k + 1
            and bool(np.all(np.diff(self.xs_) > 0))
            and all(np.all((a >= 0.0) & (a <= 1.0)) for a in (self.tie_p0_, self.tie_p1_, self.gap_p0_, self.gap_p1_))
        )
        if not ok:
            raise ModelFormatError(
                "calibrator 'venn_abers' state is inconsistent (table lengths, score order or values outside"
                " [0, 1]); the model is damaged, refit it"
            )
        return self

    def predict_interval(self, scores) -> tuple[np.ndarray, np.ndarray]:
        """``(p0, p1)`` per score: the two isotonic fits with the score labelled 0 and 1 (``p0 <= p1``)."""
        from calengine.methods.venn_abers import venn_abers_pairs

        s = self._check_predict(scores)
        return venn_abers_pairs(self.xs_, self.tie_p0_, self.tie_p1_, self.gap_p0_, self.gap_p1_, s)

    def predict(self, scores) -> np.ndarray:
        from calengine.methods.venn_abers import merge_pair

        return merge_pair(*self.predict_interval(scores))


CALIBRATORS = (
    NoCalibration,
    SigmoidCalibrator,
    IsotonicCalibrator,
    BinningCalibrator,
    ROCHullCalibrator,
    BetaCalibrator,
    TemperatureCalibrator,
    SigmoidNoBiasCalibrator,
    VennAbersCalibrator,
)


@hookimpl
def register_calibrators(register):
    """Register every built-in calibrator class under its ``name``."""
    for cls in CALIBRATORS:
        register(cls)
