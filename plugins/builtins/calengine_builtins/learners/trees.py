"""Decision trees: ``decision_tree``, calengine's stand-in for C4.5/J48 (Zadrozny & Elkan; Duin & Tax)."""

from __future__ import annotations

from typing import Any

import numpy as np

from calengine.base import SklearnLearner

from ._common import _split_proba, int32_indices


class DecisionTreeLearner(SklearnLearner):
    """Entropy-split decision tree with pruning controls: calengine's stand-in for C4.5/J48.

    ``min_samples_leaf=2`` mirrors J48's minimum of two objects per leaf; ``max_depth``,
    ``min_impurity_decrease`` and ``ccp_alpha`` (cost-complexity pruning) control the size of the tree.

    With ``laplace=True`` the score of a leaf is the Laplace estimate ``(n_i + 1) / (N + c)`` of Duin &
    Tax eq. (2) and Provost & Domingos, instead of the raw frequency ``n_i / N`` that makes unpruned
    trees output 0 and 1.  The per-leaf class counts ``n_i`` are re-counted from the training data with
    ``apply()`` (weighted counts when weights are given) and stored as an array in the state, so the
    estimate does not depend on how a scikit-learn version stores ``tree_.value``.
    """

    name = "decision_tree"
    accepts_sample_weight = True
    #: weights are exact sums but min_samples_leaf counts rows (J48's two objects per leaf), whatever their weights
    weights_as_duplicates = False
    score_kind = "proba"
    accepts_sparse = True

    def __init__(
        self,
        criterion: str = "entropy",
        max_depth: int | None = None,
        min_samples_leaf: int = 2,
        min_impurity_decrease: float = 0.0,
        ccp_alpha: float = 0.0,
        laplace: bool = False,
        random_state=None,
    ):
        self.criterion = criterion
        self.max_depth = max_depth
        self.min_samples_leaf = min_samples_leaf
        self.min_impurity_decrease = min_impurity_decrease
        self.ccp_alpha = ccp_alpha
        self.laplace = laplace
        self.random_state = random_state

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.tree import DecisionTreeClassifier

        return DecisionTreeClassifier(
            criterion=self.criterion,
            max_depth=self.max_depth,
            min_samples_leaf=self.min_samples_leaf,
            min_impurity_decrease=self.min_impurity_decrease,
            ccp_alpha=self.ccp_alpha,
            random_state=self.random_state,
        )

    def fit(self, X, y, sample_weight=None):
        X = int32_indices(X, "decision_tree")
        super().fit(X, y, sample_weight)
        k = self.n_classes_
        leaves = self.estimator_.apply(X)
        y_idx = np.searchsorted(self.estimator_.classes_, np.asarray(y))
        n_nodes = self.estimator_.tree_.node_count
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        counts = np.bincount(leaves * k + y_idx, weights=w, minlength=n_nodes * k)
        self.leaf_counts_ = counts.reshape(n_nodes, k).astype(np.float64)
        return self

    def score(self, X) -> np.ndarray:
        X = int32_indices(X, "decision_tree")
        if not self.laplace:
            return super().score(X)
        counts = self.leaf_counts_[self.estimator_.apply(X)]
        k = self.n_classes_
        P = (counts + 1.0) / (counts.sum(axis=1, keepdims=True) + k)
        return _split_proba(P)

    def to_state(self) -> dict[str, Any]:
        state = super().to_state()
        state["leaf_counts"] = self.leaf_counts_
        return state

    def from_state(self, state: dict[str, Any]) -> "DecisionTreeLearner":
        super().from_state(state)
        self.leaf_counts_ = np.asarray(state["leaf_counts"], dtype=np.float64)
        return self
