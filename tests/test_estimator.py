"""CalibratedClassifier as a scikit-learn estimator, and the model artifact's safety rules."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import calengine
from calengine.model.artifact import load_model, save_model
from calengine.errors import DataError, ModelFormatError

from model_tamper import reseal

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def binary():
    X, y = make_classification(800, 6, n_informative=4, random_state=0)
    return X, y


def test_get_params_clone_and_pipeline(binary):
    X, y = binary
    clf = calengine.CalibratedClassifier("logistic_regression", "sigmoid", cv=3, seed=2,
                                         learner_params={"C": 0.5})
    copy = clone(clf)
    assert not hasattr(copy, "model_")  # a clone is unfitted ...
    # ... and fits to the same model: parameters and seed carried over, C reaching the learner
    np.testing.assert_array_equal(copy.fit(X, y).predict_proba(X), clf.fit(X, y).predict_proba(X))
    assert {lr.get_params()["C"] for m in copy.model_.members for lr in m.learners} == {0.5}
    pipe = make_pipeline(StandardScaler(), clf).fit(X, y)
    P = pipe.predict_proba(X)
    assert P.shape == (800, 2) and np.allclose(P.sum(axis=1), 1)
    assert set(pipe.predict(X)) <= {0, 1}
    scores = cross_val_score(calengine.CalibratedClassifier("gaussian_nb", "isotonic", cv=3), X, y, cv=2)
    assert np.all(scores > 0.6)


def test_accepts_a_scikit_learn_instance_and_keeps_label_values(binary):
    X, y = binary
    labels = np.where(y == 1, "spam", "ham")
    clf = calengine.CalibratedClassifier(LogisticRegression(max_iter=500), "isotonic", cv=3).fit(X, labels)
    assert list(clf.classes_) == ["ham", "spam"]
    assert set(clf.predict(X)) <= {"ham", "spam"}
    assert clf.score(X, labels) > 0.65  # plain LogisticRegression scores 0.69 on this data


def test_same_seed_same_model_and_different_seed_different_folds(binary):
    X, y = binary
    a = calengine.CalibratedClassifier("decision_tree", "isotonic", seed=1).fit(X, y).predict_proba(X)
    b = calengine.CalibratedClassifier("decision_tree", "isotonic", seed=1).fit(X, y).predict_proba(X)
    c = calengine.CalibratedClassifier("decision_tree", "isotonic", seed=2).fit(X, y).predict_proba(X)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_invariant_to_relabelling_the_classes(binary):
    """Swapping which label is called what swaps the probability columns and nothing else."""
    X, y = binary
    named = np.where(y == 1, "b", "a")
    swapped = np.where(y == 1, "a", "b")
    P = calengine.CalibratedClassifier("gaussian_nb", "sigmoid", seed=0).fit(X, named).predict_proba(X)
    Q = calengine.CalibratedClassifier("gaussian_nb", "sigmoid", seed=0).fit(X, swapped).predict_proba(X)
    np.testing.assert_allclose(P, Q[:, ::-1], atol=1e-6)


def test_dataframe_model_saves_and_loads_identically(tmp_path):
    df = pd.read_parquet(DATA / "pima.parquet")
    X, y = df.drop(columns=["class"]), df["class"]
    clf = calengine.CalibratedClassifier("sklearn.ensemble.RandomForestClassifier", "isotonic", cv=3,
                                         learner_params={"n_estimators": 20}).fit(X, y)
    clf.save(tmp_path / "m")
    model = load_model(tmp_path / "m")
    np.testing.assert_array_equal(model.predict_proba_features(model.encoder.transform(X)), clf.predict_proba(X))


def test_array_model_cannot_be_saved_without_column_names(binary, tmp_path):
    X, y = binary
    clf = calengine.CalibratedClassifier("gaussian_nb", "sigmoid").fit(X, y)
    with pytest.raises(DataError, match="DataFrame"):
        clf.save(tmp_path / "m")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    df = pd.read_parquet(DATA / "pima.parquet")
    clf = calengine.CalibratedClassifier("decision_tree", "sigmoid", cv=3).fit(df.drop(columns=["class"]), df["class"])
    path = tmp_path_factory.mktemp("saved") / "m"
    clf.save(path)
    return path


def test_untrusted_types_in_a_model_file_are_refused(saved, tmp_path):
    """A model file carrying a type outside the allowlist is refused before anything is loaded."""
    import os

    import skops.io as sio
    from sklearn.preprocessing import FunctionTransformer

    copy = tmp_path / "evil"
    shutil.copytree(saved, copy)
    target = next(copy.rglob("*.skops"))
    target.write_bytes(sio.dumps(FunctionTransformer(func=os.system)))
    with pytest.raises(ModelFormatError, match="truncated or modified"):
        load_model(copy)  # the content hash names the replaced file ...
    reseal(copy)  # ... and an attacker who recomputes the hashes meets the allowlist
    with pytest.raises(ModelFormatError, match="allowlist") as info:
        load_model(copy)
    assert "posix.system" in str(info.value) and "--trust-type" in str(info.value)


def test_model_files_hold_no_pickle(saved):
    """Every array member's .npy header declares a plain dtype (read from the header, without loading:
    np.load(allow_pickle=False) would refuse an object array rather than show it), and the directory
    holds only JSON, .npz and .skops files."""
    import zipfile

    for f in saved.rglob("*"):
        if f.is_file():
            assert f.suffix in {".json", ".npz", ".skops"}, f
    npz = list(saved.rglob("*.npz"))
    assert npz
    for f in npz:
        with zipfile.ZipFile(f) as zf:
            for name in zf.namelist():
                with zf.open(name) as fh:
                    version = np.lib.format.read_magic(fh)
                    read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                                   (2, 0): np.lib.format.read_array_header_2_0}[version]
                    _, _, dtype = read_header(fh)
                assert not dtype.hasobject, (f, name, dtype)
    manifest = json.loads((saved / "manifest.json").read_text())
    assert manifest["format"] == "calengine-model"


def test_manifest_damage_is_a_clear_error(saved, tmp_path):
    copy = tmp_path / "broken"
    shutil.copytree(saved, copy)
    (copy / "manifest.json").write_text("{not json")
    with pytest.raises(ModelFormatError, match="not valid JSON"):
        load_model(copy)


def test_save_is_atomic_and_refuses_to_clobber(saved, tmp_path):
    model = load_model(saved)
    out = tmp_path / "again"
    save_model(model, out)
    with pytest.raises(DataError, match="already exists"):
        save_model(model, out)
    assert not list(tmp_path.glob(".again.tmp-*"))


def test_multiclass_code_matrix_api_and_roundtrip(tmp_path):
    df = pd.read_parquet(DATA / "pendigits_train.parquet").sample(2000, random_state=0)
    X, y = df.drop(columns=["class"]), df["class"]
    for spec in ("all_pairs:coupling", "one_vs_all:least_squares", "sparse_ecoc:coupling"):
        clf = calengine.CalibratedClassifier("gaussian_nb", "sigmoid", cv=3, multiclass=spec).fit(X, y)
        P = clf.predict_proba(X)
        assert P.shape == (2000, 10)
        np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-9)
        assert (P >= 0).all()
        assert clf.score(X, y) > 0.7, spec
    clf.save(tmp_path / "m")
    model = load_model(tmp_path / "m")
    assert np.asarray(model.code_matrix).shape[0] == 10
    np.testing.assert_array_equal(model.predict_proba_features(model.encoder.transform(X)), P)


def test_combining_rules_api(binary):
    X, y = binary
    P = {}
    for rule in ("min", "max", "median", "mean", "product"):
        clf = calengine.CalibratedClassifier(["nearest_mean", "gaussian_nb", "fisher_lda"], "sigmoid", combine=rule)
        P[rule] = clf.fit(X, y).predict_proba(X)
        np.testing.assert_allclose(P[rule].sum(axis=1), 1.0, atol=1e-12)
    assert not np.allclose(P["min"], P["product"])
    # each rule applied by hand to the three learners' own posteriors (members averaged per learner)
    model = clf.model_
    Z = clf._encode(X)
    per_learner = []
    for g in sorted(set(model.member_groups)):
        members = [m for m, mg in zip(model.members, model.member_groups) if mg == g]
        per_learner.append(np.mean([model._combine(m.column_probabilities(Z)) for m in members], axis=0))
    stack = np.stack(per_learner)
    assert stack.shape == (3, len(y), 2)
    by_rule = {"min": stack.min(0), "max": stack.max(0), "median": np.median(stack, 0),
               "mean": stack.mean(0), "product": stack.prod(0)}
    for rule, combined in by_rule.items():
        np.testing.assert_allclose(P[rule], combined / combined.sum(axis=1, keepdims=True), atol=1e-12, err_msg=rule)
    # product sharpens agreeing posteriors: where all three say class 1, it is at least the max
    agree = (stack[:, :, 1] > 0.5).all(axis=0)
    assert agree.sum() > 100
    assert np.all(P["product"][agree, 1] >= stack[:, agree, 1].max(axis=0) - 1e-12)


def test_separate_calibration_table(binary):
    X, y = binary
    clf = calengine.CalibratedClassifier("linear_svm", "sigmoid").fit(X[:500], y[:500], X_cal=X[500:], y_cal=y[500:])
    assert len(clf.model_.members) == 1 and clf.model_.info["calibration_data"] is True
    P = clf.predict_proba(X)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    with pytest.raises(DataError, match="both X_cal and y_cal"):
        calengine.CalibratedClassifier("linear_svm", "sigmoid").fit(X, y, X_cal=X)


@pytest.mark.parametrize("mode", ["ensemble", "refit"])
def test_table_splits_reproduce_calengine_fit_bit_for_bit(tmp_path, mode):
    """``cv=5`` deals folds over the rows as given, ``calengine fit --cv 5`` by file and row group;
    ``calengine.table_splits`` hands the CLI's folds to the estimator, and then the two models are the
    same (and with ``cv=5`` they are not: the test would pass vacuously if the folds happened to agree)."""
    from calengine.cli import main

    data = DATA / "pima.parquet"
    out = tmp_path / "cli"
    assert main(["fit", str(data), "--target", "class", "--method", "isotonic", "--mode", mode, "--cv", "5",
                 "--output", str(out), "--quiet"]) == 0
    df = pd.read_parquet(data)
    X, y = df.drop(columns=["class"]), df["class"]
    splits = calengine.table_splits(data, "class", cv=5, seed=0)
    assert sorted(np.concatenate([test for _, test in splits]).tolist()) == list(range(len(df)))
    cli = load_model(out).predict_proba(X)
    same = calengine.CalibratedClassifier(method="isotonic", mode=mode, cv=splits, seed=0).fit(X, y)
    assert np.array_equal(same.predict_proba(X), cli)
    other = calengine.CalibratedClassifier(method="isotonic", mode=mode, cv=5, seed=0).fit(X, y)
    assert not np.array_equal(other.predict_proba(X), cli)
