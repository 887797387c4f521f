"""``sklearn``: any scikit-learn classifier named by import path, used as given."""

from __future__ import annotations

import importlib
import re

from calengine.base import SklearnLearner
from calengine.errors import ParameterError

_PATH_RE = re.compile(r"sklearn(\.[A-Za-z_][A-Za-z0-9_]*)+")


class SklearnClassifier(SklearnLearner):
    """Any scikit-learn classifier named by import path, e.g. ``sklearn.ensemble.RandomForestClassifier``.

    Only classes defined under ``sklearn.`` that scikit-learn recognises as classifiers are accepted, so
    a model manifest can never make calengine import arbitrary code.  ``params`` go to the class;
    ``random_state``, when set (the engine sets it), is passed on if the class has that parameter and
    ``params`` does not already fix it.  The estimator is used as given, without scaling.

    ``accepts_sample_weight``, ``score_kind`` and ``accepts_sparse`` are properties of the instance,
    derived from the class: weights iff its ``fit`` takes ``sample_weight``; ``"proba"`` when it offers
    ``predict_proba`` (for example not ``SVC(probability=False)`` or a hinge-loss ``SGDClassifier``),
    else ``"decision"``; sparse input per the estimator's input tags.
    """

    name = "sklearn"

    def __init__(
        self,
        path: str = "sklearn.ensemble.HistGradientBoostingClassifier",
        params: dict | None = None,
        random_state=None,
    ):
        self.path = path
        self.params = params
        self.random_state = random_state

    def _resolve_class(self) -> type:
        from sklearn.base import BaseEstimator

        path = self.path
        if not isinstance(path, str) or not _PATH_RE.fullmatch(path):
            raise ParameterError(
                f"learner 'sklearn' needs an import path under 'sklearn.' such as "
                f"'sklearn.ensemble.RandomForestClassifier', got {path!r}"
            )
        module_name, _, attr = path.rpartition(".")
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            raise ParameterError(
                f"cannot import module '{module_name}' for learner path '{path}'; check the spelling"
            ) from None
        cls = getattr(module, attr, None)
        if cls is None:
            raise ParameterError(f"'{module_name}' has no attribute '{attr}'; check the learner path '{path}'")
        if not (
            isinstance(cls, type)
            and issubclass(cls, BaseEstimator)
            and (cls.__module__ == "sklearn" or cls.__module__.startswith("sklearn."))
        ):
            raise ParameterError(f"'{path}' is not a scikit-learn estimator class; name a classifier class")
        return cls

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.base import is_classifier

        cls = self._resolve_class()
        params = self.params or {}
        if not isinstance(params, dict):
            raise ParameterError(f"params of learner 'sklearn' must be a dict, got {type(params).__name__}")
        try:
            est = cls(**params)
        except (TypeError, ValueError) as exc:
            raise ParameterError(f"bad parameters for '{self.path}': {exc}") from None
        if not is_classifier(est):
            raise ParameterError(f"'{self.path}' is not a classifier; name a scikit-learn classifier class")
        if not (hasattr(est, "predict_proba") or hasattr(est, "decision_function")):
            raise ParameterError(
                f"'{self.path}' offers neither predict_proba nor decision_function; its scores cannot be calibrated"
            )
        if (
            self.random_state is not None
            and "random_state" not in params
            and "random_state" in est.get_params(deep=False)
        ):
            est.set_params(random_state=self.random_state)
        return est

    def _reference(self):
        est = getattr(self, "estimator_", None)
        return est if est is not None else self.make_estimator()

    #: the named class's own rule: many count rows beside the weights (HistGradientBoosting's
    #: min_samples_leaf, a forest's bootstrap), so weights are asked only to change the fit
    weights_as_duplicates = False

    @property
    def accepts_sample_weight(self) -> bool:  # type: ignore[override]
        from sklearn.utils.validation import has_fit_parameter

        return bool(has_fit_parameter(self._reference(), "sample_weight"))

    @property
    def score_kind(self) -> str:  # type: ignore[override]
        return "proba" if hasattr(self._reference(), "predict_proba") else "decision"

    @property
    def accepts_sparse(self) -> bool:  # type: ignore[override]
        from sklearn.utils import get_tags

        return bool(get_tags(self._reference()).input_tags.sparse)
