"""Neural networks: ``mlp``, a small multi-layer perceptron on standardised features (Duin & Tax)."""

from __future__ import annotations

import re

import numpy as np

from calengine.base import SklearnLearner
from calengine.errors import ParameterError

from ._common import _parse_positive_int, _scaler


def _hidden_layers(value) -> tuple[int, ...]:
    """``10``, ``"10"``, ``"20,10"``, ``(20, 10)`` or ``[20, 10]`` -> a tuple of positive layer sizes."""
    if isinstance(value, str):
        parts = [p for p in re.split(r"[,\s]+", value.strip("()[] ")) if p]
        value = tuple(parts)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not value:
        raise ParameterError(f"hidden_layer_sizes must be an int or a list of ints, got {value!r}")
    return tuple(_parse_positive_int(v, "each hidden layer size") for v in value)


class MLPLearner(SklearnLearner):
    """Standardised features + a small multi-layer perceptron (default: one layer of 10 units).

    Duin & Tax's point is that a network's outputs are classifier-conditional estimates, not density
    based ones, which is why they are worth calibrating.  scikit-learn 1.9's MLPClassifier honours
    ``sample_weight``, so this learner does.
    """

    name = "mlp"
    accepts_sample_weight = True
    score_kind = "proba"
    accepts_sparse = True

    def __init__(
        self,
        hidden_layer_sizes=10,
        alpha: float = 1e-4,
        max_iter: int = 500,
        early_stopping: bool = False,
        random_state=None,
    ):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.alpha = alpha
        self.max_iter = max_iter
        self.early_stopping = early_stopping
        self.random_state = random_state

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.neural_network import MLPClassifier
        from sklearn.pipeline import Pipeline

        mlp = MLPClassifier(
            hidden_layer_sizes=_hidden_layers(self.hidden_layer_sizes),
            alpha=self.alpha,
            max_iter=self.max_iter,
            early_stopping=self.early_stopping,
            random_state=self.random_state,
        )
        return Pipeline([("scale", _scaler(sparse_input)), ("mlp", mlp)])
