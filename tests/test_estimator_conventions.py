"""CalibratedClassifier follows scikit-learn's conventions where its checks found it did not (issue 23):
weights for every learner (a costing sample for those without ``sample_weight``), int64-indexed sparse
input for the tree, feature names of a DataFrame fit, and typed one-line errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calengine import CalibratedClassifier


@pytest.fixture(scope="module")
def pima():
    df = pd.read_parquet(Path(__file__).resolve().parents[1] / "data" / "pima.parquet")
    y = df.pop("class").to_numpy()
    return df.iloc[:300].reset_index(drop=True), y[:300]


def test_costing_sample_keeps_each_row_with_probability_w_over_max_and_is_seeded():
    from calengine.tasks.arrays import costing_sample

    rng = np.random.default_rng(0)
    n = 20000
    X = np.arange(n, dtype=float)[:, None]
    y = rng.integers(0, 2, size=n)
    w = rng.choice([0.0, 0.5, 2.0], size=n)
    Xs, ys, ws = costing_sample(X, y, w, seed=3)
    assert ws is None
    kept = np.zeros(n, bool)
    kept[Xs[:, 0].astype(int)] = True
    assert not kept[w == 0].any() and kept[w == 2.0].all()
    frac = kept[w == 0.5].mean()
    assert abs(frac - 0.25) < 4 * np.sqrt(0.25 * 0.75 / (w == 0.5).sum())  # binomial, 4 sigma
    again, _, _ = costing_sample(X, y, w, seed=3)
    np.testing.assert_array_equal(again, Xs)
    other, _, _ = costing_sample(X, y, w, seed=4)
    assert not np.array_equal(other, Xs)


@pytest.mark.parametrize("name", ["knn", "fisher_lda", "qda", "bayes_full"])
def test_learners_without_sample_weight_train_on_a_costing_sample(pima, name):
    """Weights 0/1 are exact (the learner sees exactly the weight-1 rows); others are a seeded sample;
    up-weighting class 1 raises the mean calibrated probability of class 1, as it must."""
    df, y = pima
    X = df.to_numpy(dtype=float)
    w = np.where(y == 1, 3.0, 1.0)
    a = CalibratedClassifier(name, cv=3, seed=2).fit(X, y, sample_weight=w)
    b = CalibratedClassifier(name, cv=3, seed=2).fit(X, y, sample_weight=w)
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    plain = CalibratedClassifier(name, cv=3, seed=2).fit(X, y)
    assert a.predict_proba(X)[:, 1].mean() > plain.predict_proba(X)[:, 1].mean() + 0.05


def test_a_costing_sample_without_a_class_is_one_typed_line(pima):
    from calengine.errors import DataError

    df, y = pima
    X = df.to_numpy(dtype=float)
    w = np.where(y == 1, 1e-9, 1.0)
    with pytest.raises(DataError, match="costing sample .* lacks a class"):
        CalibratedClassifier("knn", cv=3).fit(X, y, sample_weight=w)


def test_decision_tree_takes_int64_indexed_sparse_input(pima):
    import scipy.sparse as sp

    df, y = pima
    X = sp.csr_matrix(df.to_numpy(dtype=float))
    X64 = X.copy()
    X64.indices = X64.indices.astype(np.int64)
    X64.indptr = X64.indptr.astype(np.int64)
    a = CalibratedClassifier("decision_tree", cv=3).fit(X64, y)
    b = CalibratedClassifier("decision_tree", cv=3).fit(X, y)
    np.testing.assert_array_equal(a.predict_proba(X64), b.predict_proba(X))


def test_a_dataframe_fit_has_feature_names_and_takes_arrays_with_scikit_learns_warning(pima):
    df, y = pima
    clf = CalibratedClassifier(cv=3).fit(df, y)
    np.testing.assert_array_equal(clf.feature_names_in_, np.asarray(df.columns, dtype=object))
    assert clf.n_features_in_ == df.shape[1]
    with pytest.warns(UserWarning, match="does not have valid feature names"):
        P = clf.predict_proba(df.to_numpy())
    np.testing.assert_array_equal(P, clf.predict_proba(df))
    with pytest.raises(ValueError, match=f"X has 3 features, but CalibratedClassifier is expecting {df.shape[1]}"):
        clf.predict_proba(df.to_numpy()[:, :3])
    # refitted on an array, the names go (scikit-learn's rule)
    clf.fit(df.to_numpy(dtype=float), y)
    assert not hasattr(clf, "feature_names_in_")
