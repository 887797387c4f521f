"""Linear models: ``linear_svm`` (a margin to calibrate) and ``logistic_regression`` (stored as arrays)."""

from __future__ import annotations

from typing import Any

import numpy as np

from calengine.base import SklearnLearner
from calengine_builtins.deferred import expit

from ._array_state import _STANDARD_SCALER, _ArrayState, _built_for_sparse, _scaler_attributes
from ._common import _scaler, int32_indices
from ._rowwise import linear_decision, row_matmul, softmax, transform_head


class LinearSVMLearner(SklearnLearner):
    """Standardised features + LinearSVC; its unbounded margin is the score to calibrate.

    Scaling matters: unscaled LinearSVC converges badly and calibrates worse (see the baselines in the
    project notes).  ``dual="auto"`` lets scikit-learn pick the faster formulation.
    """

    name = "linear_svm"
    accepts_sample_weight = True
    score_kind = "decision"
    accepts_sparse = True

    def __init__(self, C: float = 1.0, max_iter: int = 5000, random_state=None):
        self.C = C
        self.max_iter = max_iter
        self.random_state = random_state

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.pipeline import Pipeline
        from sklearn.svm import LinearSVC

        svm = LinearSVC(C=self.C, dual="auto", max_iter=self.max_iter, random_state=self.random_state)
        return Pipeline([("scale", _scaler(sparse_input)), ("svm", svm)])

    def fit(self, X, y, sample_weight=None):
        # liblinear refuses int64-indexed sparse matrices (scikit-learn's check_estimator_sparse_array)
        return super().fit(int32_indices(X, self.name), y, sample_weight)

    def score(self, X) -> np.ndarray:
        """LinearSVC's ``decision_function`` after the scaler, row-wise (:mod:`._rowwise`): the same
        bits for a row whatever batch it is scored in."""
        return _linear_scores(self, X)


class LogisticRegressionLearner(_ArrayState, SklearnLearner):
    """Standardised features + L2 logistic regression (lbfgs, deterministic); stored as arrays."""

    _LOGREG_ATTRIBUTES = ("classes_", "coef_", "intercept_", "n_iter_", "n_features_in_")

    @staticmethod
    def fitted_attributes(est) -> dict[str, tuple[str, ...]]:
        return {"scale": _scaler_attributes(est.steps[0][1]),
                "logreg": LogisticRegressionLearner._LOGREG_ATTRIBUTES}

    name = "logistic_regression"
    accepts_sample_weight = True
    score_kind = "proba"
    accepts_sparse = True

    def __init__(self, C: float = 1.0, max_iter: int = 1000):
        self.C = C
        self.max_iter = max_iter

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import Pipeline

        return Pipeline(
            [("scale", _scaler(sparse_input)), ("logreg", LogisticRegression(C=self.C, max_iter=self.max_iter))]
        )

    def _defers(self, state: dict[str, Any]) -> bool:
        """A dense model's state waits unbuilt: :meth:`score` needs only its arrays, and building the
        Pipeline imports scikit-learn (0.9 s of a scoring command's start, in the client and in every
        worker).  Sparse models, and states missing a key (which ``_restore`` reports), build at once."""
        keys = [f"scale__{n}" for n in _STANDARD_SCALER] + [f"logreg__{n}" for n in self._LOGREG_ATTRIBUTES]
        return not state.get("sparse_input") and all(k in state for k in keys)

    def _dense_arrays(self):
        """(mean, scale, coef, intercept) of a dense (centring StandardScaler) two-class model, from the
        stored state or the built Pipeline; None for anything else (sparse, several classes)."""
        if "_pending_state" not in self.__dict__:
            est = self.__dict__.get("_estimator")
            if est is None or _built_for_sparse(est):
                return None
        arrays = [self._stored(k) for k in ("scale__mean_", "scale__scale_", "logreg__coef_", "logreg__intercept_")]
        if not all(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in arrays):
            return None
        mean, scale, coef, intercept = arrays
        d = mean.shape[0] if mean.ndim == 1 else -1
        if scale.shape != (d,) or coef.shape != (1, d) or intercept.shape != (1,):
            return None
        return mean, scale, coef, intercept

    def score(self, X) -> np.ndarray:
        """P(class 1) of a dense two-class model computed from its arrays with scikit-learn's own
        operations in its order: StandardScaler's copy (same memory layout) minus ``mean_`` divided
        by ``scale_``, ``X @ coef_.T + intercept_`` (row-wise, :mod:`._rowwise`) and expit.  The same
        bits as the scaled path below (tested), within rounding of the Pipeline's ``predict_proba``,
        without importing scikit-learn.  Anything else (sparse or non-float64 input, another width,
        several classes, non-finite values) goes through the scaled path, for scikit-learn's checks
        and messages."""
        arrays = self._dense_arrays()
        if (arrays is None or not isinstance(X, np.ndarray) or X.ndim != 2 or X.dtype != np.float64
                or X.shape[0] == 0 or X.shape[1] != arrays[0].shape[0]):
            return self._sklearn_score(X)
        mean, scale, coef, intercept = arrays
        Xs = np.array(X, copy=True, order="K")
        Xs -= mean
        Xs /= scale
        decision = row_matmul(Xs, coef.T).reshape(-1) + intercept
        if not np.isfinite(decision).all():
            return self._sklearn_score(X)
        return expit(decision, out=decision)

    def _sklearn_score(self, X) -> np.ndarray:
        return _linear_scores(self, X)


def _linear_scores(learner, X) -> np.ndarray:
    """A scaled linear model's scores as scikit-learn computes them (scaler, ``X @ coef_.T +
    intercept_``, then expit or softmax for logistic regression), with the product row-wise
    (:mod:`._rowwise`), so a row's score does not depend on the batch it is scored in."""
    from calengine.base import reject_sparse
    from sklearn.utils.validation import validate_data

    reject_sparse(learner, X)
    Xs, model = transform_head(learner.estimator_, X)
    Xs = validate_data(model, Xs, accept_sparse="csr", reset=False, dtype=np.float64)
    decision = linear_decision(Xs, model.coef_, model.intercept_)
    if learner.score_kind == "decision":
        return decision
    if decision.ndim == 1:
        return expit(decision)
    return softmax(decision)
