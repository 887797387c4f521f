"""The fixed list of types calengine lets skops load from a model directory.

Why a fixed list: a model file is data someone hands you, and skops loads only the types it is told
to trust.  skops already trusts plain scikit-learn estimators, numpy arrays and builtin containers; what
it reports through ``skops.io.get_untrusted_types`` beyond those are the internal helper objects of some
estimators.  This module names exactly the helpers the built-in learners and the commonly used
by-path classifiers need, and nothing that can run code when loaded or called: no ``functools.partial``,
no functions (``builtins.eval``, ``operator.*`` and the like), no ``FunctionTransformer``.  Anything
else must be trusted explicitly by the user (``--trust-type``), type by type.

Covered (scikit-learn 1.9, verified by ``plugins/builtins/tests/test_learners.py`` for binary and multiclass fits):

* the built-in learners of ``calengine_builtins.learners`` (decision trees keep a ``Tree``; MLPs
  trained with ``adam`` or ``sgd`` keep their optimizer; Pipelines, scalers, naive Bayes, AdaBoost,
  LDA/QDA, LinearSVC and LogisticRegression need nothing extra);
* by import path: ``HistGradientBoostingClassifier`` (numeric features; declaring
  ``categorical_features`` stores a ``functools.partial``, which is deliberately not trusted),
  ``RandomForestClassifier``, ``ExtraTreesClassifier``, ``GradientBoostingClassifier``,
  ``SGDClassifier`` and ``SVC(probability=False)``.
"""

from __future__ import annotations

from collections.abc import Iterable

#: fully qualified names of the non-default types skops may load; each is a plain data holder.
CORE_TRUSTED_TYPES: frozenset[str] = frozenset(
    {
        # fitted tree structure: DecisionTree*, RandomForest*, ExtraTrees*, GradientBoosting*
        "sklearn.tree._tree.Tree",
        # one boosting iteration's tree in HistGradientBoosting*
        "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
        # solver state MLPClassifier keeps after fitting with solver="adam" (default) or "sgd"
        "sklearn.neural_network._stochastic_optimizers.AdamOptimizer",
        "sklearn.neural_network._stochastic_optimizers.SGDOptimizer",
    }
)


def untrusted_types(blob: bytes, extra: Iterable[str] = ()) -> list[str]:
    """Types in the skops dump ``blob`` that neither skops' defaults, the core allowlist nor ``extra``
    cover, sorted; an empty list means the blob may be loaded with
    ``skops.io.loads(blob, trusted=sorted(CORE_TRUSTED_TYPES | set(extra)))``.

    ``extra`` is for the types a learner plugin declares (``Learner.trusted_types``) or a user trusts
    explicitly.
    """
    import skops.io as sio

    allowed = CORE_TRUSTED_TYPES | frozenset(extra)
    return sorted(t for t in sio.get_untrusted_types(data=blob) if t not in allowed)
