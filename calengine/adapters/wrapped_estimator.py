"""A scikit-learn classifier *instance* as a calengine learner (what the Python API wraps).

Apart from :mod:`calengine.estimator` so that resolving a learner (``calengine.fit.training``) does not
depend on the estimator that calls it.
"""

from __future__ import annotations

from sklearn.base import clone

from ..base import SklearnLearner


class EstimatorLearner(SklearnLearner):
    """Any scikit-learn classifier instance as a calengine learner (Python API only).

    Scores come from ``predict_proba`` when the estimator has it, else ``decision_function``.
    A model holding one can be saved only if the estimator is a scikit-learn class with plain
    parameters: it is then stored as the built-in ``sklearn`` import-path learner.
    """

    name = "estimator"

    def __init__(self, estimator=None):
        self.estimator = estimator

    @property
    def accepts_sample_weight(self) -> bool:  # type: ignore[override]
        from sklearn.utils.validation import has_fit_parameter

        est = self.estimator
        last = est.steps[-1][1] if hasattr(est, "steps") else est
        return has_fit_parameter(last, "sample_weight")

    @property
    def score_kind(self) -> str:  # type: ignore[override]
        return "proba" if hasattr(self.estimator, "predict_proba") else "decision"

    @property
    def accepts_sparse(self) -> bool:  # type: ignore[override]
        """Per the estimator's own input tags (a Pipeline's are its first step's)."""
        from sklearn.utils import get_tags

        return bool(get_tags(self.estimator).input_tags.sparse)

    def make_estimator(self):
        return clone(self.estimator)
