"""Multiclass scalings: calibrators that map the whole ``(n, k)`` score matrix of a k-class model to
``(n, k)`` class probabilities with parameters shared across classes (issue 21 §3).

Members: ``temperature`` for k classes (below), and the linear maps of Kull et al., "Beyond
temperature scaling" (NeurIPS 2019): ``vector_scaling``, ``matrix_scaling`` with ODIR and
``dirichlet`` (full or diagonal), fitted by Newton's method over reduction rounds (see
:class:`_LinearScaling` and :mod:`.multiclass_solvers`).
``temperature`` for k classes is one temperature ``T`` over the whole logit vector,
``P = softmax(z / T)`` (Guo et al. 2017), where ``z`` is the score matrix for decision values or
log-odds and ``log(p)`` (``p`` clipped to ``[1e-12, 1]``) for probabilities -- for a multinomial
model ``log p`` equals its logits up to a per-row constant, which softmax ignores, so temperature
scaling of ``log p`` is temperature scaling of the logits.

One name, both shapes.  ``temperature`` keeps its binary behaviour bit for bit on one score column
(two-class models: ``σ(z / T)``, :class:`calengine_builtins.calibrators.scaling.TemperatureCalibrator`,
which this class extends) and declares :attr:`multiclass`, so the engine hands it the whole score
matrix of a k-class model instead of calibrating k one-vs-rest columns.  Two classes are the
one-column case of the same map: ``softmax([0, z] / T)[1] = σ(z / T)``.

The k-class fit is a reduction of the protocol on :class:`calengine.base.Calibrator` (multiclass
form: ``reduction_start(score_kind, n_classes=k)``, pieces of ``(n, k)`` scores and class indices):
one unsorted round (validation, class weights, the largest spread of a row's logits ``c``), one round
evaluating the derivative of the weighted log loss in ``β = 1/T`` at both ends of the bracket
``β ∈ [1e-6 / c, 1e6 / c]``, then one round per safeguarded Newton step.  The loss is convex in
``β`` (its second derivative is the weighted sum of the per-row variances of ``z`` under ``P``), so
the root of its derivative is the optimum, found to machine precision: the same objective
scikit-learn's ``CalibratedClassifierCV(method="temperature")`` minimises by Brent's method on
``log β``.  Anti-correlated scores end at the largest ``T`` (nearly uniform probabilities),
separable ones at the smallest; scores whose rows are all constant give ``T = 1``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from calengine.base import Calibrator
from calengine.errors import DataError, ModelFormatError, ParameterError
from calengine.reductions.exact import exact_sum_bins, exact_sums
from calengine_builtins.deferred import check_is_fitted

from ._base import EPS, _check_kind
from ._solvers import _slope_start, _slope_update
from .multiclass_solvers import (MAX_EVALUATIONS, NEWTON_MAX_PARAMETERS, lbfgs_start, lbfgs_update,
                                 linear_logits, linear_map, linear_sums, newton_start, newton_update)
from .scaling import TemperatureCalibrator as _BinaryTemperature

#: the most classes a multiclass scaling takes (a row's statistics are O(k) floats; a larger k is
#: almost certainly a mis-read table, and matrix scalings are O(k²) parameters)
MAX_CLASSES = 1000


def check_n_classes(name: str, n_classes) -> int:
    """``n_classes`` as an int in ``2..MAX_CLASSES``, else one :class:`ParameterError` line."""
    if isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer)) or not 2 <= n_classes <= MAX_CLASSES:
        raise ParameterError(
            f"calibrator '{name}' takes between 2 and {MAX_CLASSES} score columns, got {n_classes!r}; "
            "pass one score column per class"
        )
    return int(n_classes)


def check_matrix_piece(scores, y, sample_weight, k: int, *, whole: bool = False):
    """Validate one piece of multiclass calibration data: ``(S, y, w)`` as float64 ``(n, k)``, int64
    class indices ``0..k-1`` and float64 non-negative weights (ones when ``None``).

    Every violation is one :class:`DataError` line naming the fix.  With ``whole`` (``fit``'s own
    data) the piece must also hold positive weight and two classes."""
    try:
        S = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError("scores must be numbers; pass an (n, k) float array, one column per class") from None
    if S.ndim != 2 or S.shape[1] != k:
        raise DataError(
            f"scores have shape {S.shape} but the calibrator expects (n, {k}): one column per class;"
            " pass the k columns of the model's scores, in class order"
        )
    if not np.all(np.isfinite(S)):
        raise DataError("scores contain NaN or infinite values; drop or repair those rows")
    try:
        yv = np.asarray(y)
        yf = yv.astype(np.float64)
    except (TypeError, ValueError):
        raise DataError(f"labels y must be class indices 0..{k - 1}; encode the classes as integers") from None
    if yv.ndim != 1 or yv.shape[0] != S.shape[0]:
        raise DataError(
            f"labels y have shape {yv.shape} for {S.shape[0]} score rows; pass one class index per row"
        )
    if not np.all((yf == np.round(yf)) & (yf >= 0) & (yf < k)):
        raise DataError(f"labels y must be class indices 0..{k - 1}; encode the classes as integers")
    yi = yf.astype(np.int64)
    if sample_weight is None:
        w = np.ones(S.shape[0])
    else:
        try:
            w = np.asarray(sample_weight, dtype=np.float64)
        except (TypeError, ValueError):
            raise DataError("sample_weight must be numbers; pass non-negative floats, one per row") from None
        if w.shape != (S.shape[0],):
            raise DataError(f"sample_weight has shape {w.shape} for {S.shape[0]} rows; pass one weight per row")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise DataError("sample_weight must be finite and non-negative")
    if whole:
        check_class_weights(np.bincount(yi, weights=w, minlength=k))
    return S, yi, w


def check_class_weights(wc: np.ndarray) -> None:
    """The whole calibration data's per-class weights must be positive for two classes at least."""
    if not wc.sum() > 0:
        raise DataError("every sample_weight is zero (or the calibration data is empty); give rows a positive weight")
    if np.count_nonzero(wc > 0) < 2:
        raise DataError(
            "calibration data holds only one class; a multiclass scaling needs examples of at least two classes"
        )


def log_scores(S: np.ndarray, kind: str) -> np.ndarray:
    """The logit matrix a scaling works on: ``log(p)`` for probabilities (``p`` clipped to
    ``[1e-12, 1]``; entries outside [0, 1] beyond rounding are refused), the scores themselves for
    decision values and log-odds."""
    if kind != "proba":
        return S
    if S.size and (S.min() < -1e-9 or S.max() > 1.0 + 1e-9):
        raise DataError(
            f"score_kind='proba' but scores range over [{S.min():.6g}, {S.max():.6g}]; "
            "pass score_kind='decision' (logits) for scores that are not probabilities"
        )
    return np.log(np.clip(S, EPS, 1.0))


def softmax(Z: np.ndarray) -> np.ndarray:
    """Row-wise softmax, stable (the row maximum is subtracted first)."""
    E = np.subtract(Z, Z.max(axis=1, keepdims=True))
    np.exp(E, out=E)  # in place: the same numbers as exp(Z - max), one temporary fewer
    E /= E.sum(axis=1, keepdims=True)
    return E


def _live(S, yi, w):
    keep = w > 0
    if np.all(keep):
        return S, yi, w
    return S[keep], yi[keep], w[keep]


def temperature_derivatives(Z: np.ndarray, yi: np.ndarray, w: np.ndarray, points, exact: bool = False):
    """Rows ``[g(β), g'(β)]`` of the weighted multinomial log loss ``L(β) = Σ w (logsumexp(β z) − β z_y)``
    at each ``β``: ``g = Σ w (E_P[z] − z_y)`` and ``g' = Σ w Var_P(z)``, ``P = softmax(β z)``.
    ``exact``: the sums over rows as :class:`calengine.reductions.exact.ExactSums` of ``2 len(points)``
    bins in the rows' order (a piece's statistics: pieces add exactly, so the fit does not depend on
    how the table was cut; each row's own terms are the same whatever rows come with it)."""
    terms = []
    zy = Z[np.arange(Z.shape[0]), yi]
    for beta in points:
        P = softmax(beta * Z)
        mean = np.sum(P * Z, axis=1)
        var = np.maximum(np.sum(P * Z * Z, axis=1) - mean * mean, 0.0)
        terms += [w * (mean - zy), w * var]
    if exact:
        return exact_sums(terms)
    return np.array([np.sum(t) for t in terms]).reshape(len(points), 2)


class TemperatureCalibrator(_BinaryTemperature):
    """Temperature scaling (Guo et al. 2017): ``σ(z / T)`` on one column, ``softmax(z / T)`` on k.

    One score column (a two-class model): exactly the binary
    :class:`~calengine_builtins.calibrators.scaling.TemperatureCalibrator` (same rounds, same state,
    same ``recalibrate --update`` summary).  An ``(n, k)`` score matrix (``fit`` with 2-D scores and
    class indices ``y``, or the engine's multiclass reduction with ``n_classes=k``): one ``T > 0``
    minimising the weighted multinomial log loss of ``softmax(z / T)`` (see the module docstring for
    ``z``, the bracket and the solver).  Fitted state: ``temperature_``, ``score_kind_`` and, for k
    columns, ``n_classes_``; ``predict`` takes the shape it was fitted on.
    """

    multiclass: ClassVar[bool] = True

    # ------------------------------------------------------------------ protocol, matrix form

    def reduction_start(self, score_kind: str = "decision", n_classes: int | None = None):
        self.__dict__.pop("n_classes_", None)
        if n_classes is None:
            return super().reduction_start(score_kind)
        k = check_n_classes(self.name, n_classes)
        out = super().reduction_start(score_kind)  # validates, resets state and the summary
        self._red = {"kind": score_kind, "k": k}
        del out
        return {"op": "mcsummary", "kind": score_kind, "sorted": False, "k": k}

    def _ps_mcsummary(self, scores, y, sample_weight, request):
        S, yi, w = check_matrix_piece(scores, y, sample_weight, request["k"])
        Z = log_scores(S, request["kind"])
        S, yi, w = _live(Z, yi, w)
        spread = float(np.max(S.max(axis=1) - S.min(axis=1))) if S.size else 0.0
        return {"op": "mcsummary", "w_class": exact_sum_bins(yi, w, request["k"]), "max_spread": spread}

    def _step_mcsummary(self, stats, request):
        check_class_weights(np.asarray(stats["w_class"]))
        c = float(stats["max_spread"])
        if c == 0.0:
            self._finish(temperature_=1.0, n_classes_=self._red["k"])
            return None
        st, points = _slope_start(1e-6 / c, 1e6 / c)
        self._red["slope"] = st
        return {"op": "mcslope", "kind": self._red["kind"], "sorted": False, "k": self._red["k"], "points": points}

    def _ps_mcslope(self, scores, y, sample_weight, request):
        S = np.asarray(scores, dtype=np.float64)
        yi = np.asarray(y).astype(np.int64)
        w = np.ones(S.shape[0]) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        Z, yi, w = _live(log_scores(S, request["kind"]), yi, w)
        return {"op": "mcslope", "v": temperature_derivatives(Z, yi, w, request["points"], exact=True)}

    def _step_mcslope(self, stats, request):
        st = self._red["slope"]
        nxt = _slope_update(st, np.asarray(stats["v"], dtype=np.float64).reshape(-1, 2))
        if nxt is not None:
            return {**request, "points": nxt}
        self._finish(temperature_=float(1.0 / st["x"]), n_classes_=self._red["k"])
        return None

    # ------------------------------------------------------------------ fit / predict / state

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        """One column: the binary fit.  ``(n, k)`` scores with class indices ``y``: one temperature
        over the whole logit vector (the matrix reduction on one piece)."""
        if np.ndim(scores) == 2 and np.shape(scores)[1] > 1:
            from calengine.reductions.calibrators import fit_by_reduction

            _check_kind(score_kind)
            k = check_n_classes(self.name, np.shape(scores)[1])
            check_matrix_piece(scores, y, sample_weight, k, whole=True)
            return fit_by_reduction(self, [(scores, y, sample_weight)], score_kind=score_kind, n_classes=k)
        if np.ndim(scores) == 2 and np.shape(scores)[1] == 1:
            scores = np.asarray(scores)[:, 0]
        return super().fit(scores, y, sample_weight=sample_weight, score_kind=score_kind)

    def predict(self, scores) -> np.ndarray:
        """One column: ``σ(z / T)`` (fitted on one column).  ``(n, k)``: ``softmax(z / T)``, rows summing
        to 1 (fitted on k columns)."""
        k = getattr(self, "n_classes_", None)
        if k is None:  # fitted on one column: 1-D scores only (the binary calibrator says so)
            return super().predict(scores)
        check_is_fitted(self, ["temperature_", "score_kind_"])
        S = np.asarray(scores, dtype=np.float64)
        if S.ndim != 2 or S.shape[1] != k:
            raise DataError(f"calibrator '{self.name}' was fitted on {k} score columns but got shape {S.shape}")
        if not np.all(np.isfinite(S)):
            raise DataError("scores contain NaN or infinite values; drop or repair those rows")
        return softmax(log_scores(S, self.score_kind_) / self.temperature_)

    def to_state(self) -> dict[str, Any]:
        k = getattr(self, "n_classes_", None)
        if k is None:
            return super().to_state()
        check_is_fitted(self, ["temperature_", "score_kind_"])
        return {"temperature_": float(self.temperature_), "score_kind_": self.score_kind_, "n_classes_": int(k)}

    def from_state(self, state: dict[str, Any]) -> "TemperatureCalibrator":
        self.__dict__.pop("n_classes_", None)
        super().from_state(state)
        if "n_classes_" in state:
            k = np.asarray(state["n_classes_"])
            if k.shape != () or not np.isfinite(k) or k != np.round(k) or not 2 <= k <= MAX_CLASSES:
                raise ModelFormatError(
                    f"calibrator '{self.name}' state 'n_classes_' is not a class count; the model is damaged, refit it"
                )
            self.n_classes_ = int(k)
        t = self.temperature_
        if not (np.isfinite(t) and t > 0):
            raise ModelFormatError(
                f"calibrator '{self.name}' state 'temperature_' is not a positive number; the model is damaged, refit it"
            )
        if self.score_kind_ not in ("proba", "decision"):
            raise ModelFormatError(f"calibrator '{self.name}' state 'score_kind_' is unknown; the model is damaged, refit it")
        return self


# ---------------------------------------------------------------------------------------------------
# linear maps of the logit vector: vector scaling, matrix scaling (ODIR), Dirichlet calibration


class _LinearScaling(Calibrator):
    """Shared by ``vector_scaling``, ``matrix_scaling`` and ``dirichlet``: ``P = softmax(W z + b)``.

    ``z``: see :meth:`_inputs` (logits, or log-probabilities for Dirichlet calibration).  The
    objective is the weighted *mean* log loss plus Kull et al.'s ODIR penalty
    ``λ/(k(k−1)) Σ_{i≠j} W_ij² + μ/k Σ_j b_j²`` (``reg_lambda``, ``reg_mu``; the diagonal forms have no
    off-diagonal entries).  Softmax ignores adding one vector to every logit, so without a penalty the
    parameters are fixed only up to that shift: the gradient is orthogonal to it, and the fit starts from
    ``W = I, b = 0`` and steps only orthogonally to that shift (the objective's null space), which pins
    the answer (the minimiser closest to the identity map) and makes it reproducible.

    Reduction: one unsorted round (validation, total weight per class), then one round per Newton trial
    point returning the loss, its gradient and its Hessian summed over the rows (O(k⁴) floats per piece
    for a full ``W``, O(k²) for a diagonal one; :mod:`.multiclass_solvers` states the step, the
    conditioning and the convergence rule: Newton decrement at most 1e-20 of the mean objective).
    Tens of rounds on real logits; ``n_rounds_`` (not saved) records how many a fit took.  Maps with
    more than 1100 parameters (full, k > 32) use L-BFGS rounds of the loss and gradient instead.  Two
    classes on one column are the k = 2 case with logits ``[0, s]`` (``[log(1 − p), log p]``).
    """

    multiclass: ClassVar[bool] = True
    #: on one column the map is ``σ(c s + d)`` with a fitted ``c`` that anti-correlated scores make
    #: negative: nothing holds it non-decreasing (as it does not across k classes)
    monotone: ClassVar[bool] = False
    _full: ClassVar[bool] = False
    _log_probability: ClassVar[bool] = False

    def __init__(self, reg_lambda: float = 0.0, reg_mu: float = 0.0):
        self.reg_lambda = reg_lambda
        self.reg_mu = reg_mu

    def _check_params(self) -> None:
        for key in ("reg_lambda", "reg_mu"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not (0 <= v < 1e6):
                raise ParameterError(f"calibrator '{self.name}': {key} must be a number in [0, 1e6), got {v!r}")

    def _inputs(self, S: np.ndarray, kind: str) -> np.ndarray:
        Z = log_scores(S, kind)
        if self._log_probability and kind != "proba":  # decision values: the log of their softmax
            Z = Z - Z.max(axis=1, keepdims=True)
            Z = Z - np.log(np.exp(Z).sum(axis=1, keepdims=True))
        return Z

    @staticmethod
    def _as_matrix(scores, y, binary: bool, kind: str):
        if not binary:
            return scores, y
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
        if kind == "proba":
            if s.size and (s.min() < -1e-9 or s.max() > 1 + 1e-9):
                raise DataError(f"score_kind='proba' but scores range over [{s.min():.6g}, {s.max():.6g}]; "
                                "pass score_kind='decision' for scores that are not probabilities")
            p = np.clip(s, 0.0, 1.0)
            return np.column_stack((1.0 - p, p)), y
        return np.column_stack((np.zeros_like(s), s)), y

    def reduction_start(self, score_kind: str = "decision", n_classes: int | None = None):
        self._check_params()
        _check_kind(score_kind)
        for key in ("coef_", "intercept_", "score_kind_", "n_classes_", "binary_", "n_rounds_", "_red"):
            self.__dict__.pop(key, None)
        binary = n_classes is None
        k = 2 if binary else check_n_classes(self.name, n_classes)
        if self._full and k > 100:
            raise ParameterError(
                f"calibrator '{self.name}' fits k(k+1) = {k * (k + 1)} parameters for {k} classes; it takes at most"
                " 100 classes (use vector_scaling or temperature for more)"
            )
        self._red = {"kind": score_kind, "k": k, "binary": binary}
        return {"op": "summary", "kind": score_kind, "sorted": False, "k": k, "binary": binary}

    def _piece(self, scores, y, sample_weight, request, validate: bool):
        S, yv = self._as_matrix(scores, y, request["binary"], request["kind"])
        if validate:
            S, yi, w = check_matrix_piece(S, yv, sample_weight, request["k"])
        else:
            S, yi = np.asarray(S, dtype=np.float64), np.asarray(yv).astype(np.int64)
            w = np.ones(S.shape[0]) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        return _live(self._inputs(S, request["kind"]), yi, w)

    def partial_stats(self, scores, y, sample_weight, request):
        if request["op"] == "summary":
            Z, yi, w = self._piece(scores, y, sample_weight, request, validate=True)
            return {"op": "summary", "w_class": np.bincount(yi, weights=w, minlength=request["k"]).astype(np.float64)}
        Z, yi, w = self._piece(scores, y, sample_weight, request, validate=False)
        return linear_sums(Z, yi, w, np.asarray(request["theta"]), self._full, request.get("newton", False))

    def merge_stats(self, a, b):
        return {key: (va if key == "op" else va + b[key]) for key, va in a.items()}

    def _penalty(self, theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """ODIR's value, gradient and (diagonal) Hessian at ``theta``."""
        k = self._red["k"]
        W, b = linear_map(theta, k, self._full)
        g, h = np.zeros_like(theta), np.zeros_like(theta)
        f = 0.0
        if self._full and self.reg_lambda:
            mask = 1.0 - np.eye(k)
            c = float(self.reg_lambda) / (k * (k - 1))
            f += c * float(np.sum((W * mask) ** 2))
            g[: k * k] = 2.0 * c * (W * mask).reshape(-1)
            h[: k * k] = 2.0 * c * mask.reshape(-1)
        if self.reg_mu:
            c = float(self.reg_mu) / k
            f += c * float(b @ b)
            g[len(theta) - k:] = 2.0 * c * b
            h[len(theta) - k:] = 2.0 * c
        return f, g, h

    def objective(self, loss: float, grad: np.ndarray, theta: np.ndarray, hess: np.ndarray | None = None):
        """The fitted objective (the weighted mean log loss plus ODIR) and its gradient from the summed
        loss and gradient, and its Hessian from the summed one when given (also the oracle tests')."""
        f, g, h = self._penalty(theta)
        total = self._red["total"]
        if hess is None:
            return loss / total + f, grad / total + g
        return loss / total + f, grad / total + g, hess / total + np.diag(h)

    def reduction_step(self, stats, request):
        k = self._red["k"]
        if request["op"] == "summary":
            wc = np.asarray(stats["w_class"])
            check_class_weights(wc)
            self._red["total"] = float(wc.sum())
            theta0 = np.concatenate((np.eye(k).reshape(-1) if self._full else np.ones(k), np.zeros(k)))
            newton = theta0.size <= NEWTON_MAX_PARAMETERS
            self._red["solver"] = newton_start(theta0) if newton else lbfgs_start(theta0)
            return {**request, "op": "eval", "theta": theta0, "newton": newton}
        theta = np.asarray(request["theta"])
        st = self._red["solver"]
        if request["newton"]:
            nxt = newton_update(st, *self.objective(float(stats["loss"]), np.asarray(stats["grad"]), theta,
                                                    np.asarray(stats["hess"])))
        else:
            nxt = lbfgs_update(st, *self.objective(float(stats["loss"]), np.asarray(stats["grad"]), theta))
        if nxt is not None:
            return {**request, "theta": nxt}
        if not st.get("converged", True):
            import warnings

            rule = "its Newton decrement" if request["newton"] else "its gradient rule"
            warnings.warn(f"calibrator '{self.name}' stopped after {st['evals']} of at most"
                          f" {st.get('budget', MAX_EVALUATIONS)} rounds before"
                          f" {rule} held (largest gradient entry {float(np.max(np.abs(st['g']))):.2g}); it keeps"
                          " the best parameters found; a larger reg_lambda/reg_mu converges faster",
                          RuntimeWarning, stacklevel=2)
        W, b = linear_map(st["x"], k, self._full)
        self.coef_, self.intercept_ = np.array(W, dtype=np.float64), np.array(b, dtype=np.float64)
        self.score_kind_, self.n_classes_, self.binary_ = self._red["kind"], k, self._red["binary"]
        self.n_rounds_ = int(st["evals"])
        del self._red
        return None

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        """``(n, k)`` scores with class indices, or one column with 0/1 labels (two classes)."""
        from calengine.reductions.calibrators import fit_by_reduction

        if np.ndim(scores) == 2 and np.shape(scores)[1] > 1:
            return fit_by_reduction(self, [(scores, y, sample_weight)], score_kind, n_classes=np.shape(scores)[1])
        s = np.asarray(scores).reshape(-1) if np.ndim(scores) == 2 else scores
        return fit_by_reduction(self, [(s, y, sample_weight)], score_kind)

    def predict(self, scores) -> np.ndarray:
        check_is_fitted(self, ["coef_", "intercept_", "score_kind_", "n_classes_", "binary_"])
        if self.binary_:
            S, _ = self._as_matrix(scores, None, True, self.score_kind_)
        else:
            S = np.asarray(scores, dtype=np.float64)
        if S.ndim != 2 or S.shape[1] != self.n_classes_:
            raise DataError(f"calibrator '{self.name}' was fitted on {self.n_classes_} score columns but got shape {S.shape}")
        if not np.all(np.isfinite(S)):
            raise DataError("scores contain NaN or infinite values; drop or repair those rows")
        P = softmax(linear_logits(self._inputs(S, self.score_kind_), self.coef_, self.intercept_))
        return P[:, 1] if self.binary_ else P

    def to_state(self) -> dict[str, Any]:
        check_is_fitted(self, ["coef_", "intercept_"])
        return {"coef_": self.coef_, "intercept_": self.intercept_, "score_kind_": self.score_kind_,
                "n_classes_": int(self.n_classes_), "binary_": bool(self.binary_)}

    def from_state(self, state: dict[str, Any]):
        def damaged(what):
            return ModelFormatError(f"calibrator '{self.name}' state {what}; the model is damaged, refit it")

        try:
            k = int(np.asarray(state["n_classes_"]))
            coef = np.asarray(state["coef_"], dtype=np.float64)
            intercept = np.asarray(state["intercept_"], dtype=np.float64).reshape(-1)
            kind = str(np.asarray(state["score_kind_"]))
            binary = bool(np.asarray(state["binary_"]))
        except (KeyError, TypeError, ValueError):
            raise damaged("lacks coef_, intercept_, score_kind_, n_classes_ or binary_") from None
        if not 2 <= k <= MAX_CLASSES or (binary and k != 2) or kind not in ("proba", "decision"):
            raise damaged("'n_classes_', 'binary_' or 'score_kind_' is invalid")
        shape = (k, k) if self._full else (k,)
        if coef.size != int(np.prod(shape)) or intercept.shape != (k,):
            raise damaged(f"'coef_' or 'intercept_' does not have the shape of {k} classes")
        if not (np.all(np.isfinite(coef)) and np.all(np.isfinite(intercept))):
            raise damaged("holds non-finite parameters")
        self.coef_, self.intercept_ = coef.reshape(shape), intercept
        self.score_kind_, self.n_classes_, self.binary_ = kind, k, binary
        return self


class VectorScalingCalibrator(_LinearScaling):
    """Vector scaling (Guo et al. 2017; Kull et al. 2019): ``softmax(a ⊙ z + b)``, one slope and one
    intercept per class, on the logits (``log p`` for probabilities).  ``reg_mu`` (default 0) is the
    intercepts' L2 penalty (ODIR's ``μ``)."""

    name = "vector_scaling"


class MatrixScalingCalibrator(_LinearScaling):
    """Matrix scaling with ODIR (Kull et al., "Beyond temperature scaling", NeurIPS 2019):
    ``softmax(W z + b)`` with a full k×k ``W``, on the logits (``log p`` for probabilities), penalised by
    ``λ/(k(k−1)) Σ_{i≠j} W_ij² + μ/k Σ b_j²``.  Defaults ``reg_lambda = reg_mu = 1e-3``: the paper picks
    both by cross-validation from a grid of powers of ten; 1e-3 is a mild choice inside it that keeps
    the k² parameters from fitting noise on small calibration sets (set both with ``--method-param``).
    At most 100 classes."""

    name = "matrix_scaling"
    _full = True

    def __init__(self, reg_lambda: float = 1e-3, reg_mu: float = 1e-3):
        super().__init__(reg_lambda, reg_mu)


class DirichletCalibrator(_LinearScaling):
    """Dirichlet calibration (Kull et al. 2019): matrix scaling of the log-probabilities,
    ``softmax(W ln p + b)``; ``form="full"`` (ODIR-penalised, defaults ``reg_lambda = reg_mu = 1e-3`` as
    for ``matrix_scaling``, at most 100 classes) or ``form="diagonal"`` (one slope per class, no
    off-diagonal terms).  Decision values are turned into probabilities by their softmax first."""

    name = "dirichlet"
    _log_probability = True

    def __init__(self, form: str = "full", reg_lambda: float = 1e-3, reg_mu: float = 1e-3):
        self.form = form
        super().__init__(reg_lambda, reg_mu)

    @property
    def _full(self) -> bool:  # type: ignore[override]
        return self.form != "diagonal"

    def _check_params(self) -> None:
        if self.form not in ("full", "diagonal"):
            raise ParameterError(f"calibrator 'dirichlet': form must be 'full' or 'diagonal', got {self.form!r}")
        super()._check_params()
