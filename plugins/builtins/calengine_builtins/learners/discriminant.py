"""Discriminant analysis: Fisher's LDA, QDA and Duin & Tax's BayQ (QDA under its name)."""

from __future__ import annotations

import numpy as np

from calengine.base import SklearnLearner
from calengine.errors import ParameterError

from ._common import _scaler
from ._rowwise import linear_decision, normalise_log, row_matmul, row_sum, transform_head


class FisherLDALearner(SklearnLearner):
    """Fisher's linear discriminant (LinearDiscriminantAnalysis); its decision value is calibrated.

    scikit-learn's LDA has no sample weights, so neither does this learner.  ``shrinkage`` ("auto" or a
    float) needs ``solver="lsqr"`` or ``"eigen"``.
    """

    name = "fisher_lda"
    accepts_sample_weight = False
    score_kind = "decision"
    accepts_sparse = False

    def __init__(self, solver: str = "svd", shrinkage=None):
        self.solver = solver
        self.shrinkage = shrinkage

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

        return LinearDiscriminantAnalysis(solver=self.solver, shrinkage=self.shrinkage)

    def score(self, X) -> np.ndarray:
        """scikit-learn's ``decision_function`` (``X @ coef_.T + intercept_``), row-wise
        (:mod:`._rowwise`): the same bits for a row whatever batch it is scored in."""
        from sklearn.utils.validation import validate_data

        lda = self.estimator_
        X = validate_data(lda, X, reset=False, dtype=np.float64)
        return linear_decision(X, lda.coef_, lda.intercept_)


class QDALearner(SklearnLearner):
    """Standardised features + quadratic discriminant analysis (Gaussian classes, full covariances).

    ``reg_param`` shrinks each class covariance towards the identity.  The default 0.01 is not
    scikit-learn's 0.0: real tables routinely have collinear columns, where the unregularised fit
    fails.  Standardising first (QDA itself is invariant to it) makes that shrinkage mean the same for
    every column whatever its unit.  A class with no more rows than features has no full-rank
    covariance for the default ``solver="svd"`` whatever ``reg_param`` is: ``solver="eigen"`` with a
    ``shrinkage`` (e.g. 0.01, or "auto") fits it.  A fit that fails says which of the two to change.
    """

    name = "qda"
    accepts_sample_weight = False
    score_kind = "proba"
    accepts_sparse = False

    def __init__(self, reg_param: float = 0.01, solver: str = "svd", shrinkage=None):
        self.reg_param = reg_param
        self.solver = solver
        self.shrinkage = shrinkage

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.discriminant_analysis import QuadraticDiscriminantAnalysis
        from sklearn.pipeline import Pipeline

        qda = QuadraticDiscriminantAnalysis(reg_param=self.reg_param, solver=self.solver, shrinkage=self.shrinkage)
        return Pipeline([("scale", _scaler(sparse_input)), ("qda", qda)])

    def score(self, X) -> np.ndarray:
        """scikit-learn's QDA posterior (ESL eq. 4.12 per class, then normalised), computed row-wise
        (:mod:`._rowwise`) so a row's probability does not depend on the batch it is scored in."""
        from sklearn.utils.validation import validate_data

        Xs, qda = transform_head(self.estimator_, X)
        Xs = validate_data(qda, Xs, reset=False, dtype=np.float64)
        k = len(qda.classes_)
        norm2 = np.empty((Xs.shape[0], k))
        for i in range(k):
            S = qda.scalings_[i]
            X2 = row_matmul(Xs - qda.means_[i], qda.rotations_[i] * (S ** (-0.5)))
            norm2[:, i] = row_sum(X2 * X2)
        u = np.asarray([np.sum(np.log(s)) for s in qda.scalings_])
        P = normalise_log(-0.5 * (norm2 + u) + np.log(qda.priors_))
        return P[:, 1].copy() if k == 2 else P

    def fit(self, X, y, sample_weight=None):
        try:
            return super().fit(X, y, sample_weight)
        except np.linalg.LinAlgError as exc:
            counts = np.bincount(np.asarray(y))
            if self.solver == "svd" and counts[counts > 0].min() <= np.shape(X)[1]:
                fix = "a class has no more rows than features: use solver=eigen with shrinkage=0.01"
            else:
                fix = f"use a larger reg_param than {self.reg_param} (e.g. 0.1) or a shrinkage"
            raise ParameterError(f"learner '{self.name}': a class covariance is singular; {fix}") from exc


class BayesFullLearner(QDALearner):
    """Duin & Tax's BayQ: Gaussian densities with arbitrary class covariances (= QDA)."""

    name = "bayes_full"
