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

Shared behaviour: every ``fit`` validates its input with :func:`calengine.pav.check_binary_data`
(finite 1-D scores, labels in {0, 1}, matching lengths, non-negative weights, both classes present,
else :class:`calengine.errors.DataError`); ``sample_weight`` acts as a frequency weight, so a weight
of 2 gives the same fit as the row twice (for ``binning`` with ``n_bins="auto"`` only up to the
random CV split, which depends on the rows); ``to_state`` holds only numpy arrays and plain
scalars/strings and ``from_state`` restores predictions exactly.  Predictions are non-decreasing in
the score except for ``binning`` (bin fractions follow the data) and ``rocch`` with ``laplace=True``
(the correction can reorder hull edges), as documented on those classes.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from scipy.special import expit
from sklearn.utils.validation import check_is_fitted

from calengine import hookimpl
from calengine.base import SCORE_KINDS, Calibrator
from calengine.errors import DataError, ModelFormatError, ParameterError
from calengine.pav import check_binary_data, check_scores, pav, pool_ties, predict_linear, predict_step
from calengine.roc import hull_edges, roc_segments

__all__ = [
    "NoCalibration",
    "SigmoidCalibrator",
    "IsotonicCalibrator",
    "BinningCalibrator",
    "ROCHullCalibrator",
    "BetaCalibrator",
    "TemperatureCalibrator",
    "SigmoidNoBiasCalibrator",
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
        if score_kind not in SCORE_KINDS:
            raise ParameterError(
                f"score_kind must be one of {', '.join(SCORE_KINDS)}, got {score_kind!r}; "
                "use 'proba' for probabilities and 'decision' for unbounded scores"
            )
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


def _log1pexp(z: np.ndarray) -> np.ndarray:
    """``log(1 + exp(z))`` without overflow."""
    return np.logaddexp(0.0, z)


def _fit_slope(m: np.ndarray, w: np.ndarray, lo: float, hi: float) -> float:
    """``argmin_{α ∈ [lo, hi]} Σ w log(1 + exp(−α m))`` for margins ``m = y± · S``.

    The objective is convex in α, so the minimiser is ``lo`` or ``hi`` when the derivative does not
    change sign on the bracket, and otherwise the root of the (non-decreasing) derivative, which
    Brent's method finds to machine precision.
    """
    from scipy.optimize import brentq

    def grad(a: float) -> float:
        return float(-np.sum(w * m * expit(-a * m)))

    g_lo = grad(lo)
    if g_lo >= 0.0:
        return lo
    if grad(hi) <= 0.0:
        return hi
    return float(brentq(grad, lo, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500))


def _platt_newton(f: np.ndarray, t: np.ndarray, w: np.ndarray, a0: float, b0: float):
    """Minimise ``Σ w [t z + log(1 + e^{−z})]``-style cross-entropy of ``P = 1/(1 + exp(A f + B))``.

    Lin, Lin & Weng's (2007) Newton method: Hessian plus ``1e-12·I``, backtracking line search
    (step halves from 1, Armijo constant 1e-4, smallest step 1e-10), stop when both gradient
    components fall below 1e-5 (or, for large data, when the Newton step promises less decrease than
    the objective's rounding error), at most 100 iterations.  Returns ``(A, B)``.
    """
    sigma, min_step, max_iter, gtol = 1e-12, 1e-10, 100, 1e-5

    def objective(a: float, b: float) -> float:
        z = a * f + b
        # −[t ln P + (1−t) ln(1−P)] with P = σ(−z): equals t·z + log(1+e^{−z}) = (t−1)·z + log(1+e^{z}).
        return float(np.sum(w * ((t - 1.0) * z + _log1pexp(z))))

    a, b = a0, b0
    fval = objective(a, b)
    for _ in range(max_iter):
        z = a * f + b
        p = expit(-z)
        q = expit(z)
        d2 = w * p * q
        h11 = sigma + float(np.sum(f * f * d2))
        h22 = sigma + float(np.sum(d2))
        h21 = float(np.sum(f * d2))
        d1 = w * (t - p)
        g1 = float(np.sum(f * d1))
        g2 = float(np.sum(d1))
        if abs(g1) < gtol and abs(g2) < gtol:
            break
        det = h11 * h22 - h21 * h21
        da = -(h22 * g1 - h21 * g2) / det
        db = -(-h21 * g1 + h11 * g2) / det
        gd = g1 * da + g2 * db
        if -gd <= 1e-14 * abs(fval):
            break  # the predicted decrease is below the objective's rounding error: converged
        step = 1.0
        while step >= min_step:
            na, nb = a + step * da, b + step * db
            nf = objective(na, nb)
            if nf < fval + 1e-4 * step * gd:
                a, b, fval = na, nb, nf
                break
            step /= 2.0
        else:
            break  # no decrease possible at this precision: (a, b) is as good as it gets
    return a, b


def _newton_logistic(X: np.ndarray, y: np.ndarray, w: np.ndarray, theta: np.ndarray, ridge: np.ndarray):
    """Weighted logistic regression ``P = σ(X θ)`` with an L2 penalty ``½ Σ ridge_j θ_j²``.

    Damped Newton with backtracking; stops when the gradient is negligible relative to the total
    weight, when no step decreases the objective, or after 200 iterations.  The tiny ridge keeps
    the optimum finite on separable data.
    """
    total = float(np.sum(w))

    def objective(th: np.ndarray) -> float:
        z = X @ th
        return float(np.sum(w * (_log1pexp(z) - y * z)) + 0.5 * np.sum(ridge * th * th))

    fval = objective(theta)
    for _ in range(200):
        z = X @ theta
        p = expit(z)
        g = X.T @ (w * (p - y)) + ridge * theta
        if np.max(np.abs(g)) <= 1e-10 * max(total, 1.0):
            break
        H = (X * (w * p * (1.0 - p))[:, None]).T @ X + np.diag(ridge + 1e-12 * max(total, 1.0))
        try:
            d = -np.linalg.solve(H, g)
        except np.linalg.LinAlgError:
            d = -np.linalg.lstsq(H, g, rcond=None)[0]
        gd = float(g @ d)
        if -gd <= 1e-14 * abs(fval):
            break  # the predicted decrease is below the objective's rounding error: converged
        step = 1.0
        while step >= 1e-12:
            nt = theta + step * d
            nf = objective(nt)
            if nf <= fval + 1e-4 * step * gd:
                break
            step /= 2.0
        else:
            break
        improvement = fval - nf
        theta, fval = nt, nf
        if improvement <= 1e-15 * max(abs(fval), 1.0):
            break
    return theta


# ---------------------------------------------------------------------------------------------------
# calibrators


class NoCalibration(_BinaryCalibrator):
    """The uncalibrated baseline: the learner's own probability, or a rescaled decision value.

    * ``score_kind="proba"``: the score itself, clipped to [0, 1] (``mode_ = "proba"``).
    * ``score_kind="decision"``: Zadrozny & Elkan's (2002, §2) linear rescaling into [0, 1], fitted on
      the calibration scores and clipped outside them.  ``rescale="minmax"`` (default) maps
      ``[min, max]`` of the calibration scores onto [0, 1]; ``rescale="symmetric"`` is the paper's
      ``(f + a) / 2a`` with ``a = max |f|``, which keeps a zero score at 1/2.  Constant calibration
      scores give 1/2 everywhere.  The chosen rule is recorded in ``mode_``.

    The labels are validated like every calibrator's (both classes required) but not used.
    """

    name = "none"
    _state_fields = {"mode_": "str", "lo_": "float", "hi_": "float", "score_kind_": "str"}

    def __init__(self, rescale: str = "minmax"):
        self.rescale = rescale

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        if self.rescale not in ("minmax", "symmetric"):
            raise ParameterError(
                f"rescale must be 'minmax' or 'symmetric', got {self.rescale!r}; pick one of those"
            )
        s, _, w = self._check_fit(scores, y, sample_weight, score_kind)
        s = s[w > 0]
        if score_kind == "proba":
            self.mode_, self.lo_, self.hi_ = "proba", 0.0, 1.0
        elif self.rescale == "minmax":
            self.mode_, self.lo_, self.hi_ = "minmax", float(s.min()), float(s.max())
        else:
            a = float(np.max(np.abs(s)))
            self.mode_, self.lo_, self.hi_ = "symmetric", -a, a
        return self

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        if self.mode_ == "proba":
            return s
        if self.hi_ <= self.lo_:
            return np.full(s.shape, 0.5)
        return np.clip((s - self.lo_) / (self.hi_ - self.lo_), 0.0, 1.0)


class SigmoidCalibrator(_BinaryCalibrator):
    """Platt scaling: ``P(y=1 | f) = 1 / (1 + exp(A f + B))``.

    Fitted by cross-entropy against Platt's smoothed targets ``t₊ = (N₊+1)/(N₊+2)`` and
    ``t₋ = 1/(N₋+2)`` (weighted counts), which keeps the fit finite on separable data, with Lin, Lin &
    Weng's Newton method.  The score is used as given (for probability scores, the probability
    itself, as scikit-learn does).  Internally the scores are divided by ``max |f|`` for
    conditioning and ``A`` is scaled back, which does not change the optimum.

    Monotone by construction: if the best fit has ``A > 0`` (scores and labels anti-correlated),
    ``A`` is held at 0 and ``B`` gives the best constant, the mean smoothed target, instead of
    reversing the learner's ranking.
    """

    name = "sigmoid"
    _state_fields = {"a_": "float", "b_": "float", "score_kind_": "str"}

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        # Platt's model is fitted on the raw score for both kinds, so the [0, 1] check is skipped.
        f, yi, w = self._check_fit(scores, y, sample_weight, score_kind, proba_range=False)
        keep = w > 0
        f, yi, w = f[keep], yi[keep], w[keep]
        n_pos = float(np.sum(w[yi == 1]))
        n_neg = float(np.sum(w[yi == 0]))
        t = np.where(yi == 1, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))
        scale = float(np.max(np.abs(f)))
        if scale == 0.0:
            scale = 1.0
        a, b = _platt_newton(f / scale, t, w, 0.0, math.log((n_neg + 1.0) / (n_pos + 1.0)))
        if a > 0.0:
            t_bar = float(np.sum(w * t) / np.sum(w))
            a, b = 0.0, math.log((1.0 - t_bar) / t_bar)
        self.a_ = a / scale
        self.b_ = b
        return self

    def predict(self, scores) -> np.ndarray:
        check_is_fitted(self, list(self._state_fields))
        f = check_scores(scores)
        return expit(-(self.a_ * f + self.b_))


class IsotonicCalibrator(_BinaryCalibrator):
    """Isotonic regression by pool-adjacent-violators (Zadrozny & Elkan 2002), always increasing.

    Tied scores are pooled before PAV (see :mod:`calengine.pav`), which makes the fit identical to
    ``rocch`` and to scikit-learn's ``IsotonicRegression`` at training scores, and invariant to any
    strictly increasing transformation of the scores.  ``interpolation`` decides unseen scores:

    * ``"step"`` (default, the papers' rule): the value of the last block whose lowest training
      score is at or below the score; clipped to the end blocks outside the training range.
    * ``"linear"`` (scikit-learn's ``out_of_bounds="clip"``): linear between consecutive distinct
      training scores, clipped outside.

    Fitted state: the blocks ``lo_``, ``hi_``, ``values_``, ``weights_`` (increasing score order)
    and the rule used, ``interpolation_``.
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

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        if self.interpolation not in ("step", "linear"):
            raise ParameterError(
                f"interpolation must be 'step' or 'linear', got {self.interpolation!r}; pick one of those"
            )
        s, yi, w = self._check_fit(scores, y, sample_weight, score_kind)
        blocks = pav(s, yi, w)
        self.lo_, self.hi_, self.values_, self.weights_ = blocks
        self.interpolation_ = self.interpolation
        return self

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

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        self._check_params()
        s, yi, w = self._check_fit(scores, y, sample_weight, score_kind)
        keep = w > 0
        # Sorting once up front makes every CV training fold an already sorted subsequence, and
        # makes the CV split independent of the row order (only the multiset of rows matters).
        order = np.argsort(s[keep], kind="stable")
        s, yi, w = s[keep][order], yi[keep][order], w[keep][order]
        if self.n_bins == "auto":
            b, self.cv_grid_, self.cv_brier_ = self._choose_bins(s, yi, w)
        else:
            b, self.cv_grid_, self.cv_brier_ = int(self.n_bins), np.empty(0), np.empty(0)
        self.n_bins_ = int(b)
        self.lo_, self.hi_, self.values_ = self._bins(self._pooled(s, yi, w), self.n_bins_)
        self.boundaries_ = 0.5 * (self.hi_[:-1] + self.lo_[1:])
        self.boundary_ = self.boundary
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

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        laplace = _check_bool("laplace", self.laplace)
        s, yi, w = self._check_fit(scores, y, sample_weight, score_kind)
        edges = hull_edges(roc_segments(s, yi, w), laplace=laplace)
        self.lo_ = edges.lo[::-1].copy()
        self.hi_ = edges.hi[::-1].copy()
        self.pos_ = edges.pos[::-1].copy()
        self.neg_ = edges.neg[::-1].copy()
        self.values_ = edges.prob[::-1].copy()
        self.laplace_ = laplace
        return self

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
    """

    name = "beta"
    _state_fields = {"a_": "float", "b_": "float", "c_": "float", "score_kind_": "str"}

    def _features(self, s: np.ndarray) -> np.ndarray:
        p = expit(s) if self.score_kind_ == "decision" else s
        p = np.clip(p, EPS, 1.0 - EPS)
        return np.column_stack((np.log(p), -np.log1p(-p)))

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        s, yi, w = self._check_fit(scores, y, sample_weight, score_kind)
        keep = w > 0
        s, yv, w = s[keep], yi[keep].astype(np.float64), w[keep]
        F = self._features(s)
        lam = 1e-8 * float(np.sum(w))
        ones = np.ones((F.shape[0], 1))

        def fit_cols(cols):
            X = np.hstack((F[:, cols], ones))
            ridge = np.array([lam] * len(cols) + [0.0])
            theta0 = np.array([1.0] * len(cols) + [0.0])
            return _newton_logistic(X, yv, w, theta0, ridge)

        theta = fit_cols([0, 1])
        a, b, c = theta
        if a < 0.0:
            b, c = fit_cols([1])
            a = 0.0
        elif b < 0.0:
            a, c = fit_cols([0])
            b = 0.0
        if a < 0.0 or b < 0.0:
            # The refit's remaining coefficient is negative too: the best non-decreasing map is a constant.
            mean = float(np.sum(w * yv) / np.sum(w))
            a, b, c = 0.0, 0.0, math.log(mean / (1.0 - mean))
        self.a_, self.b_, self.c_ = float(a), float(b), float(c)
        return self

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        F = self._features(s)
        return expit(self.a_ * F[:, 0] + self.b_ * F[:, 1] + self.c_)


class TemperatureCalibrator(_BinaryCalibrator):
    """Temperature scaling (Guo et al. 2017) of one column: ``P = σ(z / T)`` with ``T > 0``.

    ``z`` is the logit of the (clipped) probability for ``score_kind="proba"`` and the raw score for
    ``"decision"``.  ``T`` minimises the weighted log-loss.  The loss is convex in ``1/T``, so the
    optimum is found as the root of its monotone derivative on a bounded bracket,
    ``T ∈ [1e-6·c, 1e6·c]`` with ``c = max |z|``: anti-correlated scores end at the largest ``T``
    (probabilities ≈ 1/2), separable ones at the smallest.  All-zero ``z`` gives ``T = 1``.
    """

    name = "temperature"
    _state_fields = {"temperature_": "float", "score_kind_": "str"}

    def _logits(self, s: np.ndarray) -> np.ndarray:
        return _logit(s) if self.score_kind_ == "proba" else s

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        s, yi, w = self._check_fit(scores, y, sample_weight, score_kind)
        keep = w > 0
        z, yi, w = self._logits(s[keep]), yi[keep], w[keep]
        c = float(np.max(np.abs(z)))
        if c == 0.0:
            self.temperature_ = 1.0
            return self
        m = np.where(yi == 1, z, -z)
        inv_t = _fit_slope(m, w, 1e-6 / c, 1e6 / c)
        self.temperature_ = float(1.0 / inv_t)
        return self

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        return expit(self._logits(s) / self.temperature_)


class SigmoidNoBiasCalibrator(_BinaryCalibrator):
    """Duin & Tax's sigmoid without bias: ``P = σ(α S)`` with ``0 <= α <= 1e6``.

    Suppressing the constant keeps ``S = 0 ⇔ P = 1/2``, so the calibrated probability never
    contradicts the classifier's own decision.  ``α`` maximises the weighted likelihood (a convex 1-D
    problem solved to machine precision); separable data would send ``α`` to infinity, hence the
    bound.  ``S`` is the raw score for ``score_kind="decision"`` and ``logit(p)`` (``p`` clipped to
    ``[1e-12, 1 − 1e-12]``) for ``"proba"``, so a probability of 1/2 stays 1/2.
    """

    name = "sigmoid_nobias"
    ALPHA_MAX: ClassVar[float] = 1e6
    _state_fields = {"alpha_": "float", "score_kind_": "str"}

    def _raw(self, s: np.ndarray) -> np.ndarray:
        return _logit(s) if self.score_kind_ == "proba" else s

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        s, yi, w = self._check_fit(scores, y, sample_weight, score_kind)
        keep = w > 0
        S, yi, w = self._raw(s[keep]), yi[keep], w[keep]
        m = np.where(yi == 1, S, -S)
        self.alpha_ = _fit_slope(m, w, 0.0, self.ALPHA_MAX)
        return self

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        return expit(self.alpha_ * self._raw(s))


CALIBRATORS = (
    NoCalibration,
    SigmoidCalibrator,
    IsotonicCalibrator,
    BinningCalibrator,
    ROCHullCalibrator,
    BetaCalibrator,
    TemperatureCalibrator,
    SigmoidNoBiasCalibrator,
)


@hookimpl
def register_calibrators(register):
    """Register every built-in calibrator class under its ``name``."""
    for cls in CALIBRATORS:
        register(cls)
