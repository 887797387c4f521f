"""Parametric maps fitted by likelihood: Platt's ``sigmoid``, ``beta``, ``temperature`` and Duin &
Tax's ``sigmoid_nobias``.

Each is a reduction: one unsorted round of counts, then one round per Newton trial point
(:mod:`._solvers`), so a partitioned fit and ``fit`` run the same rounds.  ``sigmoid`` and
``temperature`` also keep a histogram of the calibration scores so that ``calengine recalibrate
--update`` can merge new data into them.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any, ClassVar

import numpy as np

from calengine.errors import ModelFormatError, ParameterError
from calengine.reductions.exact import ExactSums, exact_sum, exact_sum_bins
from calengine.reductions.pav import check_scores
from calengine_builtins.deferred import check_is_fitted, expit

from ._base import (
    EPS, _as_probability, _BinaryCalibrator, _check_merged, _check_piece, _light, _live, _logit, _max_abs, _summary,
    _unit,
)
from ._solvers import (
    _logreg_eval,
    _logreg_start,
    _logreg_update,
    _platt_binned_start,
    _platt_eval,
    _platt_start,
    _platt_update,
    _slope_eval,
    _slope_narrow_start,
    _slope_start,
    _slope_update,
)


# ---------------------------------------------------------------------------------------------------
# score summaries stored for ``calengine recalibrate --update``

#: the summary's grid: ``u = asinh(score)`` (decision) or ``asinh(logit(p))`` (proba) cut into bins of
#: width 1/8 over [-40, 40] (scores beyond go to the end bins); data-independent, so summaries of any
#: pieces add up exactly.
_HIST_BINS = 640
_HIST_SPAN = 40.0
_HIST_KEYS = ("hist_wpos", "hist_wneg", "hist_spos", "hist_sneg")


def _score_hist(s: np.ndarray, yi: np.ndarray, w: np.ndarray, kind: str, u: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per grid bin and class: total weight and weighted sum of the raw scores (so the mean score of
    each class in each bin is known exactly).  ``u``: the grid coordinate when the caller has it;
    ``w`` None: every weight 1 (the same sums to the bit, see ``_unit``)."""
    if u is None:
        u = np.arcsinh(_logit(s) if kind == "proba" else s)
    idx = np.clip(((u + _HIST_SPAN) * (_HIST_BINS / (2 * _HIST_SPAN))).astype(np.int64), 0, _HIST_BINS - 1)
    # one bincount per sum over (class, bin) cells: each cell adds the same terms in the same order as
    # a bincount of the class's rows alone would
    idx += np.where(yi == 1, 0, _HIST_BINS)
    n = 2 * _HIST_BINS
    # exact sums (issue 43 §1): the model stores these histograms, and float sums piece by piece
    # would give last bits that depend on how the table was cut
    if w is None:  # every weight 1: the cells' weights are their counts, their sums the scores' own
        wsum = _exact_counts(np.bincount(idx, minlength=n))
        ssum = exact_sum_bins(idx, s, n)
    else:
        wsum = exact_sum_bins(idx, w, n)
        ssum = exact_sum_bins(idx, w * s, n)
    return {"hist_w": wsum, "hist_s": ssum}


def _exact_counts(counts: np.ndarray) -> ExactSums:
    """Integer counts (below 2**53) as :class:`ExactSums`, so they merge with a weighted piece's sums."""
    return exact_sum_bins(np.arange(counts.size), counts.astype(np.float64), counts.size)


def _exact_class_weights(stats: dict[str, Any], yi: np.ndarray, w: np.ndarray | None) -> None:
    """Replace the summary's class weights by exact sums (they set Platt's targets; every float sum
    of these fits is exact, so no round's statistics depend on the cut).  ``yi, w``: the live rows
    (``w`` None: every weight 1, the counts already exact)."""
    if w is None:
        stats["w_pos"], stats["w_neg"] = exact_sum([stats["w_pos"]]), exact_sum([stats["w_neg"]])
    else:
        pos = yi == 1
        stats["w_pos"], stats["w_neg"] = exact_sum(w[pos]), exact_sum(w[~pos])


def _floats(x) -> Any:
    """A merged statistic as the fit reads it: :class:`ExactSums` rounded once (a one-bin sum to a
    float), anything else as it is."""
    if not isinstance(x, ExactSums):
        return x
    out = x.to_float()
    return float(out[0]) if out.size == 1 else out


# ---------------------------------------------------------------------------------------------------
# a fine histogram of the fitted input, for the Newton start of ``sigmoid``

#: bins of the start histogram: ``asinh(f)`` over [-40, 40] in steps of 1/256 (``f``: what the
#: sigmoid is fitted on).  Not stored in the model; 4 arrays of 20,480 float64 per piece (640 KiB).
_START_BINS = 20480


def _start_hist(f: np.ndarray, yi: np.ndarray, w: np.ndarray, u: np.ndarray) -> dict[str, np.ndarray]:
    """Per grid bin and class (negatives row 0, positives row 1): total weight and weighted sum of
    ``f``, so each bin's class means of ``f`` are exact.  Data-independent grid: pieces add up.
    ``u``: ``asinh(f)``; ``w`` None: every weight 1."""
    idx = np.clip(((u + _HIST_SPAN) * (_START_BINS / (2 * _HIST_SPAN))).astype(np.int64), 0, _START_BINS - 1)
    idx += np.where(yi == 1, _START_BINS, 0)
    n = 2 * _START_BINS
    # exact sums (see _score_hist): the Newton start, and so the fit's last bits, hang on them
    if w is None:  # every weight 1 (see _score_hist)
        return {"start_w": _exact_counts(np.bincount(idx, minlength=n)), "start_f": exact_sum_bins(idx, f, n)}
    return {"start_w": exact_sum_bins(idx, w, n), "start_f": exact_sum_bins(idx, w * f, n)}


def _binned_points(stats: dict[str, Any], t_neg: float, t_pos: float):
    """The start histogram's non-empty (bin, class) cells as weighted points ``(mean f, target, weight)``."""
    W = np.asarray(_floats(stats["start_w"]), dtype=np.float64).reshape(2, _START_BINS)
    F = np.asarray(_floats(stats["start_f"]), dtype=np.float64).reshape(2, _START_BINS)
    live = W > 0
    f = F[live] / W[live]
    t = np.where(np.nonzero(live)[0] == 1, t_pos, t_neg)
    return f, t, W[live]


class _SummaryStored:
    """Mixin for calibrators whose first round also collects :func:`_score_hist`; the fitted
    calibrator keeps it (``hist_*_``, stored sparse: only non-empty bins) so ``recalibrate --update``
    can merge new data into it.  Optional in the state: older models load without it."""

    # (hooks on the generic protocol methods, which the subclasses do not override)
    def _ps_summary(self, scores, y, sample_weight, request):
        s, yi, w = _check_piece(scores, y, sample_weight)
        stats = {"op": "summary", **_summary(s, yi, w)}
        s, yi, w = _live(s, yi, w)
        if _unit(w):
            w = None  # the sums below skip their products by the weights (the same bits)
        _exact_class_weights(stats, yi, w)
        extra = self._summary_extra(s, yi, w, request)
        u = extra.pop("_hist_u", None)  # the summary grid's coordinate, if the extras computed it
        return {**stats, **extra, **_score_hist(s, yi, w, request["kind"], u)}

    def reduction_step(self, stats, request):
        stats = {key: _floats(value) for key, value in stats.items()}
        if request.get("op") == "summary":
            wsum, ssum = stats.pop("hist_w"), stats.pop("hist_s")
            self._red["hist"] = {"hist_wpos_": wsum[:_HIST_BINS], "hist_wneg_": wsum[_HIST_BINS:],
                                 "hist_spos_": ssum[:_HIST_BINS], "hist_sneg_": ssum[_HIST_BINS:]}
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



class SigmoidCalibrator(_SummaryStored, _BinaryCalibrator):
    """Platt scaling: ``P(y=1 | f) = 1 / (1 + exp(A f + B))``.

    Fitted by cross-entropy against Platt's smoothed targets ``t₊ = (N₊+1)/(N₊+2)`` and
    ``t₋ = 1/(N₋+2)`` (weighted counts), which keeps the fit finite on separable data, with Lin, Lin &
    Weng's Newton method.  Internally the inputs are divided by ``max |f|`` for conditioning and
    ``A`` is scaled back, which does not change the optimum.

    ``on`` says what ``f`` is (scikit-learn issue #34312):

    * ``"score"``: the score as given -- for probability scores the probability itself, as
      scikit-learn's ``CalibratedClassifierCV(method="sigmoid")`` does (calengine's default before
      0.x; see CHANGELOG).  A sigmoid of a probability bends it only mildly: it cannot undo a learner
      that pushes probabilities to 0 and 1, and it distorts a model that was calibrated already.
    * ``"logit"`` (the default): for probability scores ``f = logit(p)`` with ``p`` clipped to
      ``[EPS, 1 − EPS]``, ``EPS = 1e-12`` (the clip every calibrator of this package applies before a
      logarithm): a learner's ``predict_proba`` may return exactly 0 or 1, whose logit is infinite, and
      the clip bounds ``|f|`` by 27.6 so such a row weighs like a very confident one instead of
      breaking the fit, while ``1 − 1e-12`` is still far above float64's resolution below 1 (1.1e-16),
      so probabilities a model can actually tell apart keep distinct logits.  The map is then
      ``σ(−A logit(p) − B)``: ``A = −1, B = 0`` is the identity, so a well-calibrated model is left
      alone and a learner's over- or under-confidence is a slope.  For decision values (already
      log-odds or margins) ``"logit"`` is the same as ``"score"``.

    Why ``"logit"`` is the default: ``benchmarks/results/sigmoid_on.md`` -- lower test log loss and
    Brier score than ``"score"`` for every model measured (Adult: naive Bayes, logistic regression,
    XGBoost; the generated table, where it is the true link), and no damage to a model that was
    calibrated already (``"score"`` raises such a model's ECE several-fold).  Models saved before
    ``on`` existed carry no ``on_`` in their state and load as ``"score"``, so they score exactly as
    before.

    Monotone by construction: if the best fit has ``A > 0`` (scores and labels anti-correlated),
    ``A`` is held at 0 and ``B`` gives the best constant, the mean smoothed target, instead of
    reversing the learner's ranking.  The same constant is the fit when every (positively weighted)
    score is the same, where ``A`` and ``B`` cannot be told apart.

    Reduction: one unsorted round of counts and ``max |f|``, then one round per Newton trial point
    (objective, gradient and Hessian summed in one pass); ``fit`` runs the same rounds on one piece.
    """

    name = "sigmoid"
    _proba_range = False
    _state_fields = {"a_": "float", "b_": "float", "score_kind_": "str", "on_": "str"}
    ON = ("score", "logit")

    def __init__(self, on: str = "logit"):
        self.on = on

    def _check_params(self) -> None:
        if self.on not in self.ON:
            raise ParameterError(
                f"calibrator 'sigmoid': on must be 'score' or 'logit', got {self.on!r}; 'logit' fits Platt's "
                "sigmoid on logit(p) of probability scores, 'score' on the score as given"
            )

    @staticmethod
    def _platt_input(s: np.ndarray, kind: str, on: str) -> np.ndarray:
        """What the sigmoid is fitted on: ``logit(p)`` (clipped, see the class docstring) for
        probability scores with ``on="logit"``, else the score as given."""
        return _logit(s) if on == "logit" and kind == "proba" else s

    def _first_request(self, kind):
        return {"op": "summary", "kind": kind, "sorted": False, "on": self.on}

    def _summary_extra(self, s, yi, w, request):
        on = request.get("on", "score")
        f = self._platt_input(s, request["kind"], on)
        u = np.arcsinh(f)
        out = {
            "max_abs": _max_abs(f),
            "min_live": float(f.min()) if f.size else math.inf,
            "max_live": float(f.max()) if f.size else -math.inf,
            **_start_hist(f, yi, w, u),
        }
        if on == "logit" and request["kind"] == "proba":
            out["_hist_u"] = u  # f is the summary grid's logit: its asinh is the grid coordinate too
        return out

    def _step_summary(self, stats, request):
        self._red["on"] = request["on"]
        # fitting on logit(p) needs probabilities: checked as every probability calibrator checks them
        _check_merged(stats, self._red["kind"], proba_range=self._red["on"] == "logit")
        n_pos, n_neg = float(stats["w_pos"]), float(stats["w_neg"])
        t_pos, t_neg = (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0)
        scale = float(stats["max_abs"]) or 1.0
        t_bar = (n_pos * t_pos + n_neg * t_neg) / (n_pos + n_neg)
        if stats["min_live"] == stats["max_live"]:
            # One distinct score: A and B are not identifiable (only A f + B is), so Newton would
            # stop at a start-dependent slope; the fit is the best constant, as for A > 0.
            self._finish(a_=0.0, b_=math.log((1.0 - t_bar) / t_bar))
            return None
        a0, b0 = _platt_binned_start(*_binned_points(stats, t_neg, t_pos), scale,
                                     0.0, math.log((n_neg + 1.0) / (n_pos + 1.0)))
        st, (a, b) = _platt_start(a0, b0)
        self._red.update(newton=st, scale=scale, t_bar=t_bar)
        return {"op": "platt", "kind": self._red["kind"], "on": self._red["on"], "sorted": False, "scale": scale,
                "t_pos": t_pos, "t_neg": t_neg, "a": a, "b": b}

    def _ps_platt(self, scores, y, sample_weight, request):
        f, yi, w = _live(*_light(scores, y, sample_weight))
        f = self._platt_input(f, request["kind"], request["on"])
        t = np.where(yi == 1, request["t_pos"], request["t_neg"])
        return {"op": "platt", "v": _platt_eval(f / request["scale"], t, None if _unit(w) else w,
                                                request["a"], request["b"], exact=True)}

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

    def _finish(self, **fitted) -> None:
        fitted["on_"] = self._red["on"]
        super()._finish(**fitted)

    def predict(self, scores) -> np.ndarray:
        check_is_fitted(self, list(self._state_fields))
        f = check_scores(scores)
        if self.on_ == "logit" and self.score_kind_ == "proba":
            f = self._platt_input(_as_probability(f), "proba", "logit")
        return expit(-(self.a_ * f + self.b_))

    def from_state(self, state: dict[str, Any]) -> "SigmoidCalibrator":
        # models saved before ``on`` existed: fitted on the score as given
        super().from_state({"on_": "score", **state})
        if self.on_ not in self.ON:
            raise ModelFormatError(
                f"calibrator '{self.name}' state 'on_' is {self.on_!r}, not 'score' or 'logit'; the model is damaged, refit it"
            )
        return self


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

    def _summary_extra(self, s, yi, w, request):
        p = np.clip(expit(s) if request["kind"] == "decision" else s, EPS, 1.0 - EPS)
        return {"min_p": float(p.min()) if p.size else math.inf, "max_p": float(p.max()) if p.size else -math.inf}

    def _step_summary(self, stats, request):
        _check_merged(stats, self._red["kind"])
        total = float(stats["w_pos"]) + float(stats["w_neg"])
        self._red.update(total=total, mean=float(stats["w_pos"]) / total, lam=1e-8 * total)
        if stats["min_p"] == stats["max_p"]:
            # Every live row has the same (clipped) probability: both features are constant, so the ridge's
            # optimum is a = b = 0 and c the log-odds of the mean, exactly.  Newton on that near-singular
            # problem stopped wherever its tolerances met, which moved with how the weights were summed.
            mean = self._red["mean"]
            self._finish(a_=0.0, b_=0.0, c_=math.log(mean / (1.0 - mean)))
            return None
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

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        F = self._features(s)
        return expit(self.a_ * F[:, 0] + self.b_ * F[:, 1] + self.c_)


def _log_odds(s: np.ndarray, kind: str) -> np.ndarray:
    """The score on the log-odds scale: the logit of the (clipped) probability, or the decision value."""
    return _logit(s) if kind == "proba" else s


def _slope_values(s, yi, w, request) -> np.ndarray:
    """:func:`_slope_eval` of ``σ(α z)`` at ``request["points"]``, ``z`` the log-odds of the scores."""
    z = _log_odds(s, request["kind"])
    return _slope_eval(np.where(yi == 1, z, -z), None if w is None or _unit(w) else w, request["points"], exact=True)


class _OneSlope(_BinaryCalibrator):
    """``P = σ(α z)`` with ``z`` the score's log-odds (:func:`_log_odds`): temperature scaling and the
    sigmoid without bias differ only in the bracket of ``α`` and in how they report it.

    ``α`` maximises the weighted likelihood, by :func:`._solvers._slope_start`'s safeguarded Newton with
    one reduction round (``"slope"``) per trial point.  Subclasses start the search from their summary
    round and turn the final ``α`` into their fitted attributes with :meth:`_fitted`.
    """

    @abstractmethod
    def _fitted(self, alpha: float) -> dict[str, float]:
        """The fitted attributes for the final slope ``alpha`` (each subclass names its own)."""

    def _ps_slope(self, scores, y, sample_weight, request):
        s, yi, w = _live(*_light(scores, y, sample_weight))
        return {"op": "slope", "v": _slope_values(s, yi, w, request)}

    def _ps_summary(self, scores, y, sample_weight, request):
        s, yi, w = _check_piece(scores, y, sample_weight)
        stats = {"op": "summary", **_summary(s, yi, w)}
        s, yi, w = _live(s, yi, w)
        _exact_class_weights(stats, yi, None if _unit(w) else w)
        stats.update(self._summary_extra(s, yi, w, request))
        return stats

    def reduction_step(self, stats, request):
        return super().reduction_step({key: _floats(value) for key, value in stats.items()}, request)

    def _step_slope(self, stats, request):
        st = self._red["slope"]
        nxt = _slope_update(st, np.asarray(stats["v"], dtype=np.float64).reshape(-1, 2))
        if nxt is not None:
            return {"op": "slope", "kind": self._red["kind"], "sorted": False, "points": nxt}
        self._finish(**self._fitted(float(st["x"])))
        return None


class TemperatureCalibrator(_SummaryStored, _OneSlope):
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

    def _first_request(self, kind):
        return {"op": "summary", "kind": kind, "sorted": False}

    def _summary_extra(self, s, yi, w, request):
        z = _log_odds(s, request["kind"])
        u = np.arcsinh(z)  # the summary grid's coordinate too (the asinh of the same log-odds)
        return {"max_abs": _max_abs(z), **_start_hist(z, yi, w, u), "_hist_u": u}

    def _step_summary(self, stats, request):
        _check_merged(stats, self._red["kind"])
        c = float(stats["max_abs"])
        if c == 0.0:
            self._finish(temperature_=1.0)
            return None
        z, t, w = _binned_points(stats, -1.0, 1.0)
        st, points = _slope_narrow_start(z * t, w, 1e-6 / c, 1e6 / c)  # margins: z for positives, -z else
        self._red["slope"] = st
        return {"op": "slope", "kind": self._red["kind"], "sorted": False, "points": points}

    def _fitted(self, alpha: float) -> dict[str, float]:
        return {"temperature_": float(1.0 / alpha)}

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        return expit(_log_odds(s, self.score_kind_) / self.temperature_)


class SigmoidNoBiasCalibrator(_OneSlope):
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

    def _first_request(self, kind):
        return {"op": "summary", "kind": kind, "sorted": False, "points": [0.0, float(self.ALPHA_MAX)]}

    def _summary_extra(self, s, yi, w, request):
        return {"v": _slope_values(s, yi, w, request)}

    def _step_summary(self, stats, request):
        _check_merged(stats, self._red["kind"])
        st, _ = _slope_start(0.0, float(self.ALPHA_MAX))
        self._red["slope"] = st
        return self._step_slope(stats, request)

    def _fitted(self, alpha: float) -> dict[str, float]:
        return {"alpha_": alpha}

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        return expit(self.alpha_ * _log_odds(s, self.score_kind_))
