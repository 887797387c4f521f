"""Neural networks: ``mlp``, a small multi-layer perceptron on standardised features (Duin & Tax)."""

from __future__ import annotations

import re

import numpy as np

from calengine.base import SklearnLearner
from calengine.errors import ParameterError

from ._common import _parse_positive_int, _scaler
from ._rowwise import row_matmul, softmax, transform_head


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
    #: weights are exact sums but minibatches and early stopping count rows: a duplicated row is seen twice per epoch
    weights_as_duplicates = False
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

    def score(self, X) -> np.ndarray:
        """The network's forward pass as scikit-learn's ``predict_proba`` computes it (same weights,
        activations and output function), with each layer's product row-wise (:mod:`._rowwise`): a
        row's probability does not depend on the batch it is scored in."""
        from sklearn.neural_network._base import ACTIVATIONS
        from sklearn.utils.validation import validate_data

        Xs, mlp = transform_head(self.estimator_, X)
        a = validate_data(mlp, Xs, accept_sparse=["csr"], reset=False, dtype=np.float64)
        hidden = ACTIVATIONS[mlp.activation]
        for i in range(mlp.n_layers_ - 1):
            a = row_matmul(a, mlp.coefs_[i])
            a += mlp.intercepts_[i]
            if i != mlp.n_layers_ - 2:
                hidden(a)
        if mlp.out_activation_ == "softmax":
            return softmax(a)
        ACTIVATIONS[mlp.out_activation_](a)
        return a.ravel() if a.shape[1] == 1 else a
