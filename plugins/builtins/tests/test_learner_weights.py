"""Weights on the built-in learners (issue 41): a row of weight 2 gives the model of the row given twice,
on unscaled real columns (Adult's numeric columns: ages next to fnlwgt in the hundreds of thousands and
capital gains up to 99,999), for every built-in learner that takes weights.

The learners are enumerated from the registry, so a new built-in learner is covered automatically: it
must either be exact or declare ``weights_as_duplicates = False`` (a fit that counts rows by design),
and then its weights must at least change the fit.  Gaussian naive Bayes smooths its variances with the
*weighted* column variance, a deliberate difference from scikit-learn's ``GaussianNB`` (which takes the
unweighted one); on unweighted data it still equals ``GaussianNB``, as the README claims."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calengine.plugins import get_plugins
from calengine.plugins.registry import make_learner
from calengine.tasks.arrays import seeded

ADULT = Path(__file__).resolve().parents[3] / "data" / "adult" / "train.parquet"


def _builtin_weighted_learners() -> list[str]:
    classes = get_plugins().classes["learners"]
    return sorted(n for n, c in classes.items()
                  if c.__module__.startswith("calengine_builtins.") and not getattr(c, "prefit", False)
                  and make_learner(n).accepts_sample_weight)


@pytest.fixture(scope="module")
def adult():
    df = pd.read_parquet(ADULT)
    numeric = [c for c in df.columns if c != "class" and pd.api.types.is_numeric_dtype(df[c])]
    train = df.sample(400, random_state=0)
    fresh = df.sample(300, random_state=1)
    X = train[numeric].to_numpy(np.float64)
    y = (train["class"] == ">50K").to_numpy().astype(np.int64)
    return numeric, X, y, fresh[numeric].to_numpy(np.float64)


def _params(name: str) -> dict:
    params = {"random_state": 0} if "random_state" in make_learner(name).get_params() else {}
    if name == "sklearn":  # by path: its default HistGradientBoosting takes a minute under load; a light class
        params["path"] = "sklearn.ensemble.ExtraTreesClassifier"
        params["params"] = {"n_estimators": 5}
    if name == "mlp":
        params["max_iter"] = 50
    return params


def test_the_sweep_covers_the_learners_the_issue_named():
    names = set(_builtin_weighted_learners())
    assert {"gaussian_nb", "bayes_diagonal", "categorical_nb", "multinomial_nb", "bernoulli_nb", "boosted_nb",
            "logistic_regression", "linear_svm", "nearest_mean"} <= names


@pytest.mark.parametrize("name", _builtin_weighted_learners())
def test_a_weight_of_two_is_the_row_given_twice_on_adults_numeric_columns(name, adult):
    numeric, X, y, X_new = adult
    assert {"age", "fnlwgt", "capital-gain"} <= set(numeric)
    assert X[:, numeric.index("fnlwgt")].max() > 1e5  # unscaled: where an unweighted variance showed
    w = np.tile([1.0, 3.0, 1.0, 2.0], len(y) // 4 + 1)[: len(y)]
    reps = w.astype(np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence warnings of small fits are not the point here
        learner = make_learner(name, _params(name))
        weighted = np.asarray(seeded(learner, 0).fit(X, y, sample_weight=w).score(X_new))
        duplicated = np.asarray(seeded(learner, 0).fit(np.repeat(X, reps, axis=0), np.repeat(y, reps)).score(X_new))
        if not type(learner).weights_as_duplicates:
            plain = np.asarray(seeded(learner, 0).fit(X, y).score(X_new))
            assert not np.array_equal(weighted, plain), f"{name}: the weights change nothing"
            return
    np.testing.assert_allclose(weighted, duplicated, rtol=1e-9, atol=1e-12,
                               err_msg=f"{name}: a weight of 2 is not the row given twice")


def test_gaussian_nb_variance_smoothing_is_the_weighted_variance_and_equals_sklearn_unweighted(adult):
    from sklearn.naive_bayes import GaussianNB

    _, X, y, X_new = adult
    w = np.tile([1.0, 3.0, 1.0, 2.0], len(y) // 4 + 1)[: len(y)]
    fitted = make_learner("gaussian_nb").fit(X, y, sample_weight=w)
    mean = np.average(X, axis=0, weights=w)
    weighted_var = np.average((X - mean) ** 2, axis=0, weights=w)
    np.testing.assert_allclose(fitted.estimator_.epsilon_, 1e-9 * weighted_var.max(), rtol=1e-12)
    # scikit-learn's own GaussianNB smooths with the unweighted variance: the deliberate difference
    theirs = GaussianNB().fit(X, y, sample_weight=w)
    assert not np.isclose(theirs.epsilon_, fitted.estimator_.epsilon_, rtol=1e-6)
    # unweighted, calengine's gaussian_nb is scikit-learn's GaussianNB (the README's claim)
    ours = make_learner("gaussian_nb").fit(X, y).score(X_new)
    np.testing.assert_allclose(ours, GaussianNB().fit(X, y).predict_proba(X_new)[:, 1], rtol=1e-12, atol=1e-15)


def test_gaussian_nb_weighted_statistics_fit_equals_the_in_memory_weighted_fit(adult):
    """The table fit (partial_stats_groups merged, as the engine does) smooths by the same weighted
    variance as the in-memory fit."""
    _, X, y, X_new = adult
    rng = np.random.default_rng(3)
    w = rng.uniform(0.0, 4.0, size=len(y))
    learner = make_learner("gaussian_nb")
    groups = rng.integers(0, 3, size=len(y))
    parts = learner.partial_stats_groups(X, y, groups, 3, w, 2)
    merged = learner.merge_stats(learner.merge_stats(parts[0], parts[1]), parts[2])
    by_stats = make_learner("gaussian_nb").fit_from_stats(merged, 2)
    in_memory = make_learner("gaussian_nb").fit(X, y, sample_weight=w)
    np.testing.assert_allclose(by_stats.estimator_.epsilon_, in_memory.estimator_.epsilon_, rtol=1e-12)
    np.testing.assert_allclose(by_stats.score(X_new), in_memory.score(X_new), rtol=1e-9, atol=1e-12)


def test_categorical_nb_weighted_cut_points_are_the_duplicated_rows_quantiles(adult):
    from calengine_builtins.learners.naive_bayes import quantile_bin_edges

    _, X, y, _ = adult
    w = np.tile([1.0, 3.0, 0.0, 2.0], len(y) // 4 + 1)[: len(y)]
    reps = w.astype(np.int64)
    np.testing.assert_array_equal(quantile_bin_edges(X, 10, w), quantile_bin_edges(np.repeat(X, reps, axis=0), 10))
