"""calengine's built-in learners: the base classifiers whose scores the engine calibrates.

The set covers the classifiers of the calibration literature the project reproduces: C4.5-style entropy
trees with optional Laplace leaves and (boosted) naive Bayes as in Zadrozny & Elkan, the nearest mean,
Fisher, BayU/BayQ, k-NN, Parzen and small-network classifiers of Duin & Tax, linear SVMs and logistic
regression, plus any scikit-learn classifier named by import path.

=====================  ==============  ===========  ==========================================  =================
registry name          sample weights  score_kind   sparse CSR input                            fit from stats
=====================  ==============  ===========  ==========================================  =================
decision_tree          yes             proba        yes                                         no
linear_svm             yes             decision     yes (scaling without centring)              no
logistic_regression    yes             proba        yes (scaling without centring)              no
gaussian_nb            yes             proba        no                                          yes
bernoulli_nb           yes             proba        yes (scaling without centring)              standardize=False
multinomial_nb         yes             proba        yes (max-abs scaling; needs values >= 0)    yes
categorical_nb         yes             proba        no                                          no
boosted_nb             yes             proba        no                                          no
knn                    no              proba        no                                          no
nearest_mean           yes             decision     yes                                         no
fisher_lda             no              decision     no                                          no
qda                    no              proba        no                                          no
bayes_diagonal         yes             proba        no                                          yes
bayes_full             no              proba        no                                          no
parzen                 yes             proba        no                                          no
mlp                    yes             proba        yes (scaling without centring)              no
sklearn                from the class  from class   from the class's input tags                 no
=====================  ==============  ===========  ==========================================  =================

"fit from stats": the learner implements the optional statistics contract of
:class:`calengine.base.Learner` (``supports_stats``): it is fitted over a partitioned table from small,
mergeable per-class statistics (counts, means and squared deviations, feature sums, column ranges)
without holding the rows, and k cross-validation folds cost one pass.  The result is the model ``fit``
gives on the same rows, up to floating-point rounding.  ``bernoulli_nb`` supports it only with
``standardize=False`` (its ``supports_stats`` is a property of the instance).

Each learner also carries ``accepts_sparse``; a sparse matrix given to a learner without sparse support
raises :class:`calengine.errors.DataError` naming the fix instead of densifying behind the user's back
(which could exhaust memory on a wide one-hot table).

The scikit-learn-backed learners subclass the public :class:`calengine.base.SklearnLearner`, exactly as a
third-party plugin would: sample weights reach every step of a Pipeline whose ``fit`` accepts them (the
scaler as well as the classifier), so that a weight of 2 means exactly "this row twice" for the
deterministic learners, and ``make_estimator(sparse_input)`` builds a non-centring scaler for CSR input.

Persistence: scikit-learn-backed learners hand their fitted estimator to the artifact, which stores it
with skops under :data:`calengine.model.allowlist.CORE_TRUSTED_TYPES`.  The learners written here (k-NN,
Parzen, nearest mean, and the discretiser of ``categorical_nb``) export only numpy arrays, ints, floats
and strings, so loading them involves no object deserialisation at all.

scikit-learn submodules are imported inside the methods that need them: the plugin is loaded whenever
the registry is built (``calengine --help`` included) and must stay cheap to import.

Layout, by family as scikit-learn keeps ``naive_bayes``, ``linear_model``, ``neighbors`` and
``discriminant_analysis`` apart: :mod:`.trees`, :mod:`.linear`, :mod:`.naive_bayes`,
:mod:`.discriminant`, :mod:`.neighbors` (k-NN, nearest mean, Parzen), :mod:`.neural` and
:mod:`.by_path` (``sklearn``); the private :mod:`._common` (input checks), :mod:`._array_state`
(array persistence and lazy rebuilding) and :mod:`._nb_stats` (naive Bayes statistics) serve them.
This package is the plugin's ``learners`` entry point: it holds the ``register_learners`` hook and
re-exports every public class and function, so ``from calengine_builtins.learners import
GaussianNBLearner`` works as it did when the learners were one module.  Models name learners by
registry name, never by module, so models saved before the split load unchanged.
"""

from __future__ import annotations

from calengine import hookimpl
from calengine.base import Learner

from .by_path import SklearnClassifier
from .discriminant import BayesFullLearner, FisherLDALearner, QDALearner
from .linear import LinearSVMLearner, LogisticRegressionLearner
from .naive_bayes import (
    BayesDiagonalLearner,
    BernoulliNBLearner,
    BoostedNBLearner,
    CategoricalNBLearner,
    GaussianNBLearner,
    MultinomialNBLearner,
    apply_bins,
    quantile_bin_edges,
)
from .neighbors import KNNLearner, NearestMeanLearner, ParzenLearner, knn_counts_proba, knn_distance_proba
from .neural import MLPLearner
from .trees import DecisionTreeLearner

__all__ = [
    "LEARNERS",
    "BayesDiagonalLearner",
    "BayesFullLearner",
    "BernoulliNBLearner",
    "BoostedNBLearner",
    "CategoricalNBLearner",
    "DecisionTreeLearner",
    "FisherLDALearner",
    "GaussianNBLearner",
    "KNNLearner",
    "LinearSVMLearner",
    "LogisticRegressionLearner",
    "MLPLearner",
    "MultinomialNBLearner",
    "NearestMeanLearner",
    "ParzenLearner",
    "QDALearner",
    "SklearnClassifier",
    "apply_bins",
    "knn_counts_proba",
    "knn_distance_proba",
    "quantile_bin_edges",
    "register_learners",
]


LEARNERS: tuple[type[Learner], ...] = (
    DecisionTreeLearner,
    LinearSVMLearner,
    LogisticRegressionLearner,
    GaussianNBLearner,
    BernoulliNBLearner,
    MultinomialNBLearner,
    CategoricalNBLearner,
    BoostedNBLearner,
    KNNLearner,
    NearestMeanLearner,
    FisherLDALearner,
    QDALearner,
    BayesDiagonalLearner,
    BayesFullLearner,
    ParzenLearner,
    MLPLearner,
    SklearnClassifier,
)


@hookimpl
def register_learners(register):
    """Register every built-in learner class."""
    for cls in LEARNERS:
        register(cls)
