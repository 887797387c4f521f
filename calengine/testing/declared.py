"""The scikit-learn checks :class:`calengine.CalibratedClassifier` fails by design, per configuration,
each with the reason (``parametrize_with_checks(..., expected_failed_checks=expected_failed_checks)``).

Apart from :mod:`calengine.estimator` because it is a catalogue of facts about the built-in learners
and methods, found by running every check on every built-in configuration
(``CALENGINE_FULL_ESTIMATOR_CHECKS=1 pytest tests/test_estimator_checks.py``); the estimator itself does
not depend on it.  The tests mark these failures strict, so a declared failure that starts passing
fails the test and its entry here must go.  Every other check passes.
"""

from __future__ import annotations

import numbers

_EQUIVALENCE = ("check_sample_weight_equivalence_on_dense_data", "check_sample_weight_equivalence_on_sparse_data")
_SMALL_WEIGHTED = ("check_sample_weights_pandas_series", "check_sample_weights_not_an_array",
                   "check_sample_weights_list", "check_sample_weights_shape", "check_sample_weights_not_overwritten")

#: how a reason starts when the failure depends on the machine's floating point (the tests then mark it
#: xfail without strictness: it fails on some machines and passes on others)
MACHINE_DEPENDENT = "on some machines: "

#: learners without sample_weight that estimate a covariance per class (need 2+ rows of each class)
_COVARIANCE = ("qda", "bayes_full", "fisher_lda")

#: (learner, methods (None: every method), check suffix "dense"/"sparse"/"both", reason): equivalence
#: failures of a learner's own making
_LEARNER_EQUIVALENCE = [
    ("sklearn", None, "both",
     "the 'sklearn' learner's default HistGradientBoostingClassifier bins features at quantiles of the rows,"
     " not of the weights (scikit-learn declares this check for that class too)"),
    ("linear_svm", ("isotonic", "sigmoid"), "sparse",
     f"{MACHINE_DEPENDENT}liblinear's dual solver on sparse input does not reach the same solution for"
     " weighted and repeated rows (scikit-learn declares this check for LinearSVC); on an AVX-512 Xeon it"
     " does, and the check passes"),
    ("logistic_regression", ("isotonic",), "sparse",
     "lbfgs on the sparse, scaled rows gives weighted and repeated fits scores that differ in the last"
     " bits (3e-14 under sigmoid, which passes), and an isotonic step turns that into a jump of 0.44"),
    ("mlp", ("isotonic",), "sparse",
     "mlp trains with adam (scikit-learn verifies MLPClassifier's equivalence only with solver='lbfgs'):"
     " weighted and repeated rows give another network after the same iterations"),
    ("mlp", ("probing",), "dense",
     "mlp trains with adam (scikit-learn verifies MLPClassifier's equivalence only with solver='lbfgs'):"
     " weighted and repeated rows give another network after the same iterations"),
    ("categorical_nb", ("sigmoid", "temperature", "probing"), "dense",
     "categorical_nb cuts each feature at unweighted quantiles of its training rows, so a repeated row"
     " moves the bin edges and a weighted one does not"),
    ("multinomial_nb", ("probing",), "dense",
     "Probing chooses the interval to split next by how many training rows vote into it (|S_a| of"
     " Algorithm 1, rows, not weight): repeated rows count several times, a weighted row once"),
]


#: checks whose tables give a class fewer rows (per cv fold) than features: a learner estimating a full
#: covariance per class refuses a singular one in one typed line naming the fix (solver/shrinkage)
_FEW_ROWS_PER_CLASS = ("check_n_features_in_after_fitting", "check_dtype_object")
#: with Probing, the costing samples of the checks' 20-60-row tables are smaller still: these checks fit
#: qda and bayes_full on samples with fewer rows of a class than features (the full matrix's run, issue 23)
_PROBING_FEW_ROWS = (
    "check_classifier_data_not_an_array", "check_classifiers_classes", "check_dict_unchanged",
    "check_dont_overwrite_parameters", "check_dtype_object", "check_estimators_dtypes",
    "check_estimators_fit_returns_self", "check_estimators_nan_inf", "check_estimators_overwrite_params",
    "check_estimators_pickle", "check_estimators_pickle(readonly_memmap=True)",
    "check_f_contiguous_array_estimator", "check_fit2d_1feature", "check_fit2d_predict1d",
    "check_fit_score_takes_y", "check_methods_sample_order_invariance", "check_n_features_in_after_fitting",
    "check_pipeline_consistency", "check_positive_only_tag_during_fit", "check_readonly_memmap_input",
    "check_supervised_y_2d",
)
#: check_classifiers_train asks for training accuracy above 0.83 on standardized blobs (2 and 3 classes)
_TRAIN_ACCURACY = ("check_classifiers_train", "check_classifiers_train(readonly_memmap=True)",
                   "check_classifiers_train(readonly_memmap=True,X_dtype=float32)")
#: (learner, method, measured training accuracy on the check's 3-class blobs, why)
_WEAK_ON_BLOBS = [
    ("bernoulli_nb", "probing", 0.807,
     "Bernoulli naive Bayes sees each standardized feature only as above or below 0, and Probing's six"
     " classifiers, trained on costing samples of that, rank three overlapping blobs too coarsely"),
    ("multinomial_nb", "temperature", 0.797,
     "multinomial naive Bayes reads standardized features, negative included, as counts (scikit-learn's check"
     " shifts them to non-negative only for an estimator named MultinomialNB), and one temperature cannot"
     " reorder its three classes (one-vs-rest isotonic or sigmoid reach 0.90 and pass)"),
    ("multinomial_nb", "probing", 0.55,
     "multinomial naive Bayes reads standardized features, negative included, as counts (scikit-learn's check"
     " shifts them to non-negative only for an estimator named MultinomialNB), and Probing's votes of six such"
     " classifiers separate the three classes worse still"),
]


#: (learner, check, reason) for the one-vs-rest calibrators (cv folds; Probing and bagging fit otherwise)
_LEARNER_CHECKS = [
    ("boosted_nb", "check_fit_idempotent",
     "the check's labels are coin flips: on a fold where the first naive Bayes is no better than chance,"
     " scikit-learn's AdaBoostClassifier refuses to fit ('worse than random'), so boosted_nb fails in its"
     " own typed line"),
]


def expected_failed_checks(estimator) -> dict[str, str]:
    """``{check name: reason}`` for ``estimator``'s configuration (see the module docstring)."""
    out: dict[str, str] = {}
    method = estimator.method
    sparse = estimator._accepts_sparse()

    def equivalence(reason: str, which: str = "both") -> None:
        for check in _EQUIVALENCE:
            if which in ("both", check.rsplit("_", 2)[-2]) and (sparse or "dense" in check):
                out[check] = reason

    if isinstance(estimator.cv, numbers.Integral) and estimator.cv > 3 and method not in ("probing", "bagging"):
        out["check_fit2d_1feature"] = (
            f"10 rows in 3 classes: the rarest class has fewer rows than cv={estimator.cv} folds, and calibration"
            " refuses a fold without held-out rows of a class (the error says so, not '1 feature')"
        )
    unweighted = estimator._learner_without_weights() if method != "bagging" else None
    if unweighted:
        equivalence(
            f"learner '{unweighted}' takes no sample_weight, so weighted rows train it as a seeded costing sample"
            " (each row kept with probability w / max w; Probing's rounds likewise): a sample of the weighted"
            " distribution, not the repeated rows this check compares with (see CalibratedClassifier's docstring)"
        )
        if unweighted in _COVARIANCE:
            reason = (
                f"learner '{unweighted}' estimates a covariance per class and takes no sample_weight: a costing"
                " sample of this 12-16-row table keeps about sum(w) / max(w) rows (Probing's rounds fewer),"
                " too few rows of a class for its covariance, and the learner refuses (not a weight being"
                " overwritten or misread)"
            )
            for check in _SMALL_WEIGHTED if method == "probing" and unweighted != "fisher_lda" else _SMALL_WEIGHTED[-1:]:
                out[check] = reason
            if method == "probing" and unweighted != "fisher_lda":  # its 30-row table, unweighted: the same
                out["check_methods_subset_invariance"] = reason.replace("this 12-16-row table", "these small tables")
    if unweighted in ("qda", "bayes_full"):
        few = (f"learner '{unweighted}' estimates a full covariance per class: the check's small table leaves a"
               " class fewer rows than features in a cross-validation fold (in a Probing costing sample, for"
               " most checks), and the learner refuses the singular covariance in one typed line naming the fix"
               " (solver=eigen with shrinkage)")
        for check in _PROBING_FEW_ROWS if method == "probing" else _FEW_ROWS_PER_CLASS:
            out.setdefault(check, few)
    for learner, weak_method, accuracy, why in _WEAK_ON_BLOBS:
        if method == weak_method and learner in _learner_names(estimator):
            for check in _TRAIN_ACCURACY:
                out[check] = f"training accuracy {accuracy} on the check's three blobs, below its 0.83: {why}"
    names = [str(getattr(lr, "name", "")) for lr in (estimator._base_learners() or [])
             if getattr(lr, "path", "HistGradientBoostingClassifier").endswith("HistGradientBoostingClassifier")]
    for learner, methods, which, reason in _LEARNER_EQUIVALENCE:
        if learner in names and (methods is None or method in methods):
            equivalence(reason, which)
    if method not in ("probing", "bagging"):
        for learner, check, reason in _LEARNER_CHECKS:
            if learner in names:
                out[check] = reason
    if method == "vector_scaling":
        equivalence("the check's 15-row, 30-feature table gives held-out scores that separate the classes, so vector"
                    " scaling's log loss has no finite minimum: Newton stops on a flat gradient at a point set by"
                    " rounding, and weighted and repeated rows (the same objective summed in another order) stop"
                    " there 1e-6 apart in probability", "dense")
    if method == "bagging":
        equivalence("bagging draws each row into a bag a Poisson(1) number of times, a weighted row once for its"
                    " weight and each repeated row on its own draw: the bags, and so the models, differ")
    if method == "binning" and (estimator.method_params or {}).get("n_bins", "auto") == "auto":
        equivalence("binning's default n_bins='auto' chooses the number of bins by cross-validation over rows,"
                    " so a weighted row stays in one inner fold and its repeats spread over several (the"
                    " calibrator declares weights_as_duplicates = False)")
    combiner = (estimator.multiclass or "").rpartition(":")[2]
    if estimator.multiclass and combiner in ("coupling", "pairwise_coupling", "wu_lin_weng", ""):
        equivalence(
            "the coupling combiner weighs each code-matrix column by its number of training rows (integers in"
            " the model manifest); sample weights reach learners and calibrators but not those counts, so"
            " weights are not equivalent to repeated rows"
        )
    return out


def _learner_names(estimator) -> list[str]:
    return [str(getattr(lr, "name", "")) for lr in (estimator._base_learners() or [])]
