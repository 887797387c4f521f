"""CalibratedClassifier follows scikit-learn's conventions where its checks found it did not (issue 23):
weights for every learner (a costing sample for those without ``sample_weight``), int64-indexed sparse
input for the tree, feature names of a DataFrame fit, and typed one-line errors."""

from __future__ import annotations


import numpy as np
import pytest

from calengine import CalibratedClassifier


@pytest.fixture(scope="module")
def pima(pima_xy):
    df, y = pima_xy
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


def test_a_costing_sample_keeps_every_class_of_positive_weight_by_its_nearest_miss():
    """scikit-learn's check_sample_weights_not_overwritten table (one row of weight 10 among weights 1):
    the plain draw keeps ~2 of 16 rows and usually loses a class; the sample is that draw plus, per lost
    class, the row whose key came nearest to its acceptance, so the drawn rows stay exactly as drawn."""
    from calengine.tasks.arrays import _COSTING_STREAM, costing_sample

    X = np.arange(16, dtype=float)[:, None]
    y = np.repeat([0, 1, 0, 1], 4)
    w = np.ones(16)
    w[0] = 10.0
    lost = 0
    for seed in range(40):
        keys = np.random.default_rng([seed, _COSTING_STREAM]).random(16)
        drawn = np.flatnonzero(keys < w / 10.0)
        Xs, ys, _ = costing_sample(X, y, w, seed)
        kept = Xs[:, 0].astype(int)
        assert set(ys) == {0, 1} and set(drawn) <= set(kept)
        extra = sorted(set(kept) - set(drawn))
        for c in set(y[extra]):  # one row per lost class, the nearest miss, only for a lost class
            assert c not in set(y[drawn]) and len([i for i in extra if y[i] == c]) == 1
            rows = np.flatnonzero(y == c)
            assert [i for i in extra if y[i] == c] == [rows[np.argmin(keys[rows] / (w[rows] / 10.0))]]
        lost += bool(extra)
    assert lost > 10  # the draw alone lost a class in many of these fits (the failure issue 23 found)


def test_knn_fits_a_weighted_table_whose_costing_draw_loses_a_class(pima):
    """A class of tiny weight reaches knn as one row per fit; its calibrated probability stays tiny
    (the calibrators weigh rows by their true weights); a class of weight 0 in every row is one
    typed line naming the fix."""
    from calengine.errors import DataError

    df, y = pima
    X = df.to_numpy(dtype=float)
    w = np.where(y == 1, 1e-6, 1.0)
    p = CalibratedClassifier("knn", cv=3).fit(X, y, sample_weight=w).predict_proba(X)
    assert (y == 1).mean() > 0.3 and p[:, 1].mean() < 0.02  # weighted, class 1 is ~1e-6 of the mass
    with pytest.raises(DataError, match="weight 0 in every training row") as info:
        CalibratedClassifier("knn", cv=3).fit(X, y, sample_weight=np.where(y == 1, 0.0, 1.0))
    assert "\n" not in str(info.value)


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


def test_calengine_fit_weight_keeps_the_class_its_costing_draw_lost(tmp_path):
    """The CLI's costing sample (drawn fragment by fragment on the workers) follows the same rule:
    3 files of 16 rows, one of weight 50; knn (no sample_weight) would see a draw of ~3 rows per fold
    and lose a class; with its nearest miss added the fit runs and scores every row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cli_helpers import run_cli

    rng = np.random.default_rng(5)
    data = tmp_path / "table"
    data.mkdir()
    for f in range(3):
        y = np.repeat([0, 1], 8)
        w = np.ones(16)
        if f == 0:
            w[0] = 50.0
        pq.write_table(pa.table({"a": rng.normal(size=16) + y, "b": rng.normal(size=16), "class": y, "w": w}),
                       data / f"part-{f}.parquet")
    fit = run_cli("fit", data, "--target", "class", "--learner", "knn", "--learner-param", "n_neighbors=1",
                  "--method", "sigmoid", "--cv", "3", "--weight", "w", "--output", tmp_path / "model")
    assert fit.returncode == 0, fit
    scored = run_cli("score", tmp_path / "model", data, "--output", tmp_path / "scores.parquet")
    assert scored.returncode == 0, scored
    p = pq.read_table(tmp_path / "scores.parquet").to_pandas().filter(like="1").to_numpy()
    assert p.shape[0] == 48 and np.isfinite(p).all()


def test_probing_fits_when_weights_remove_a_class():
    """Issue 23: weights 0 for every row of one class left Probing's schedule splitting next to 1,
    where the rounded minimax point equals the end point and the interval's regret was inf; the
    ranking then found no interval and a bare StopIteration escaped fit.  Now the class weighted
    away gets the clipped probability, the other one the rest."""
    rng = np.random.RandomState(0)
    X = rng.rand(60, 3)
    y = np.arange(60) % 2
    X[:, 0] += y
    p = CalibratedClassifier("logistic_regression", "probing").fit(X, y, sample_weight=np.where(y == 0, 0.0, 1.0)).predict_proba(X)
    assert np.allclose(p.sum(axis=1), 1) and p[:, 1].min() > 0.99


def test_all_zero_weights_are_one_line_for_every_method():
    from calengine.errors import DataError

    X = np.random.RandomState(0).rand(30, 2)
    y = np.arange(30) % 2
    for method in ("isotonic", "probing"):
        with pytest.raises(DataError, match="sample_weight is zero for every row"):
            CalibratedClassifier("knn", method, cv=3).fit(X, y, sample_weight=np.zeros(30))
