"""``calengine fit --prefit PATH``: calibrating a model trained outside calengine (issue 21 §2).

Oracles: the model's own predictions of the same rows (XGBoost's ``inplace_predict``, LightGBM's
``predict``, the estimator's ``predict_proba``) calibrated in memory by scikit-learn's
``IsotonicRegression`` and by a scipy fit of Platt's objective (tests/adapters/test_score_columns.py), and
scikit-learn's ``CalibratedClassifierCV(FrozenEstimator(...))`` for the estimator API.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import calengine
from calengine.errors import CalengineError
from cli_helpers import REPO, assert_one_line_error

ADULT = REPO / "data" / "adult" / "train.parquet"
NUMERIC = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]


@pytest.fixture(scope="module")
def adult(tmp_path_factory):
    """4,000 rows of Adult's numeric columns with ``y`` (1 for >50K) and ``class``, in 4 row groups,
    and the trained models' files: an XGBoost booster with feature names (JSON) and without (UBJSON),
    a LightGBM text model, a skops LogisticRegression fitted on a DataFrame."""
    import lightgbm as lgb
    import skops.io as sio
    import xgboost as xgb
    from sklearn.linear_model import LogisticRegression

    df = pd.read_parquet(ADULT).iloc[:4000].reset_index(drop=True)
    df = df[NUMERIC + ["class"]].astype({c: "float64" for c in NUMERIC})
    df["class"] = df["class"].astype(str)
    df["y"] = (df["class"] == ">50K").astype(np.int64)
    folder = tmp_path_factory.mktemp("prefit")
    data = folder / "adult.parquet"
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), data, row_group_size=1000)
    X, y = df[NUMERIC].to_numpy(), df["y"].to_numpy()
    train = slice(0, None, 2)  # trained on half the rows, calibrated on all: as a team would
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 3, "eta": 0.3, "nthread": 1},
                        xgb.DMatrix(X[train], label=y[train], feature_names=NUMERIC), num_boost_round=20)
    booster.save_model(folder / "named.json")
    booster.feature_names = None
    booster.save_model(folder / "bare.ubj")
    gbm = lgb.train({"objective": "binary", "num_leaves": 8, "verbosity": -1, "num_threads": 1},
                    lgb.Dataset(X[train], label=y[train]), num_boost_round=20)
    gbm.save_model(folder / "gbm.txt")
    logreg = LogisticRegression(max_iter=1000).fit(df.loc[train, NUMERIC] / 1000.0, df.loc[train, "class"])
    sio.dump(logreg, folder / "logreg.skops")
    preds = {
        "xgboost": booster.inplace_predict(X).astype(np.float64),
        "lightgbm": gbm.predict(X).astype(np.float64),
    }
    return df, data, folder, preds


def _isotonic(s, y):
    from sklearn.isotonic import IsotonicRegression

    return IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(s, y).predict(s)


def test_xgboost_json_booster_calibrated_by_isotonic_equals_scikit_learn_on_its_predictions(tmp_path, cli, adult):
    df, data, folder, preds = adult
    r = cli("fit", data, "--target", "y", "--prefit", folder / "named.json", "--method", "isotonic",
            "--output", tmp_path / "m")
    assert r.returncode == 0, r
    assert "calibrated the xgboost model 'named.json' (--prefit, not refitted) with isotonic on 4000 rows" in r.stderr
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["learner"]["name"] == "prefit"
    assert manifest["learner"]["params"]["library"] == "xgboost"
    assert manifest["features"]["columns"] == NUMERIC  # the booster's own names, in its order
    digest = hashlib.sha256((folder / "named.json").read_bytes()).hexdigest()
    assert [f for f, d in manifest["files"].items() if d["sha256"] == digest], "the booster is not copied as it is"
    # scored by the CLI on a table with the feature columns only, in another order
    only = tmp_path / "features.parquet"
    df[NUMERIC[::-1]].to_parquet(only)
    r = cli("score", tmp_path / "m", only, "--output", tmp_path / "scored.parquet")
    assert r.returncode == 0, r
    got = pd.read_parquet(tmp_path / "scored.parquet")["p_1"].to_numpy()
    np.testing.assert_allclose(got, _isotonic(preds["xgboost"], df["y"]), atol=1e-9, rtol=0)


def test_xgboost_ubjson_without_names_reads_features_and_sigmoid_equals_platt(tmp_path, cli, adult):
    from scipy.special import expit
    from adapters.test_score_columns import _platt_oracle

    df, data, folder, preds = adult
    assert_one_line_error(cli("fit", data, "--target", "y", "--prefit", folder / "bare.ubj", "--output", tmp_path / "x"),
                          "carries no feature names", "--features")
    assert_one_line_error(cli("fit", data, "--target", "y", "--prefit", folder / "bare.ubj", "--features", "age,fnlwgt",
                              "--output", tmp_path / "x"), "names 2 columns", "reads 6")
    assert not (tmp_path / "x").exists()
    r = cli("fit", data, "--target", "y", "--prefit", folder / "bare.ubj", "--features", ",".join(NUMERIC),
            "--method", "sigmoid", "--output", tmp_path / "m")
    assert r.returncode == 0, r
    got = calengine.load_model(tmp_path / "m").predict_frame(df[NUMERIC])["p_1"].to_numpy()
    p = np.clip(preds["xgboost"], 1e-12, 1 - 1e-12)  # sigmoid's default on=logit: Platt on logit(p)
    z = np.log(p) - np.log1p(-p)
    a, b = _platt_oracle(z, df["y"].to_numpy(), np.ones(len(df)))
    np.testing.assert_allclose(got, expit(-(a * z + b)), atol=1e-6, rtol=0)


def test_lightgbm_text_model_and_skops_logistic_regression_equal_isotonic_on_their_predictions(tmp_path, cli, adult):
    df, data, folder, preds = adult
    r = cli("fit", data, "--target", "y", "--prefit", folder / "gbm.txt", "--features", ",".join(NUMERIC),
            "--output", tmp_path / "g")
    assert r.returncode == 0, r
    got = calengine.load_model(tmp_path / "g").predict_frame(df[NUMERIC])["p_1"].to_numpy()
    np.testing.assert_allclose(got, _isotonic(preds["lightgbm"], df["y"]), atol=1e-9, rtol=0)

    # a scikit-learn estimator fitted on a DataFrame of the columns / 1000, classes named by the target
    scaled = df.copy()
    scaled[NUMERIC] = scaled[NUMERIC] / 1000.0
    table = tmp_path / "scaled.parquet"
    scaled.drop(columns="y").to_parquet(table)
    r = cli("fit", table, "--target", "class", "--prefit", folder / "logreg.skops", "--output", tmp_path / "s")
    assert r.returncode == 0, r
    import skops.io as sio

    est = sio.load(folder / "logreg.skops", trusted=sio.get_untrusted_types(file=folder / "logreg.skops"))
    s = est.predict_proba(scaled[NUMERIC])[:, list(est.classes_).index(">50K")]
    got = calengine.load_model(tmp_path / "s").predict_frame(scaled[NUMERIC])["p_>50K"].to_numpy()
    np.testing.assert_allclose(got, _isotonic(s, scaled["class"] == ">50K"), atol=1e-9, rtol=0)


def test_a_tampered_booster_or_a_missing_column_is_one_line_and_publishes_nothing(tmp_path, cli, adult):
    df, data, folder, _ = adult
    doc = json.loads((folder / "named.json").read_text())
    tree = doc["learner"]["gradient_booster"]["model"]["trees"][0]
    tree["split_indices"][0] = 9999  # a feature past the row's end: XGBoost would read out of bounds
    bad = tmp_path / "tampered.json"
    bad.write_text(json.dumps(doc))
    assert_one_line_error(cli("fit", data, "--target", "y", "--prefit", bad, "--output", tmp_path / "m"),
                          "XGBoost booster file", "feature index")
    assert not (tmp_path / "m").exists()
    lacking = tmp_path / "lacking.parquet"
    df.drop(columns="age").to_parquet(lacking)
    assert_one_line_error(cli("fit", lacking, "--target", "y", "--prefit", folder / "named.json",
                              "--output", tmp_path / "m"), "'age'")
    assert_one_line_error(cli("fit", data, "--target", "y", "--prefit", folder / "named.json", "--method", "bagging",
                              "--output", tmp_path / "m"), "--method bagging", "--prefit")
    assert not (tmp_path / "m").exists()


def test_calibrate_scores_takes_a_prefit_model_and_equals_the_cli(tmp_path, cli, adult):
    df, data, folder, preds = adult
    model = calengine.calibrate_scores(data, "y", prefit=folder / "gbm.txt", features=NUMERIC, method="isotonic")
    got = model.predict_frame(df[NUMERIC])["p_1"].to_numpy()
    np.testing.assert_allclose(got, _isotonic(preds["lightgbm"], df["y"]), atol=1e-9, rtol=0)
    with pytest.raises(CalengineError, match="not both"):
        calengine.calibrate_scores(data, "y", scores="age", prefit=folder / "gbm.txt")
    with pytest.raises(CalengineError, match="allowlist: _operator.neg; .* in trust"):
        calengine.calibrate_scores(data, "y", prefit=_untrusted_skops(tmp_path))


def _untrusted_skops(tmp_path):
    """A skops file holding a function (``operator.neg`` in a FunctionTransformer: never on the allowlist)."""
    import operator

    import skops.io as sio
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    X = np.arange(40, dtype=float).reshape(20, 2)
    est = make_pipeline(FunctionTransformer(operator.neg), LogisticRegression()).fit(X, np.arange(20) % 2)
    sio.dump(est, tmp_path / "untrusted.skops")
    return tmp_path / "untrusted.skops"


@pytest.mark.parametrize("method, tol", [("sigmoid", 1e-8), ("isotonic", 1e-12)])
def test_a_frozen_estimator_is_calibrated_as_calibrated_classifier_cv_does(adult, method, tol):
    """Same scores (decision_function), same rows, same objective; Platt's two parameters come from two
    optimisers (scikit-learn's L-BFGS, calengine's Newton steps), which agree to ~3e-9 here."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator
    from sklearn.linear_model import LogisticRegression

    df = adult[0]
    X = df[NUMERIC] / 1000.0
    fitted = LogisticRegression(max_iter=1000).fit(X[::2], df["class"][::2])
    before = fitted.coef_.copy()
    ours = calengine.CalibratedClassifier(learner=FrozenEstimator(fitted), method=method).fit(X, df["class"])
    theirs = CalibratedClassifierCV(FrozenEstimator(fitted), method=method).fit(X, df["class"])
    assert list(ours.classes_) == list(theirs.classes_)
    np.testing.assert_allclose(ours.predict_proba(X), theirs.predict_proba(X), atol=tol, rtol=0)
    np.testing.assert_array_equal(fitted.coef_, before)  # never refitted


def test_a_multiclass_booster_gives_k_scores_each_calibrated_one_vs_rest(tmp_path):
    """A 3-class XGBoost ``multi:softprob`` booster: its k probability columns are calibrated as any
    learner's (one isotonic map per class, rows normalised); a target of another class count is refused."""
    import xgboost as xgb
    from sklearn.isotonic import IsotonicRegression

    rng = np.random.default_rng(7)
    X = rng.normal(size=(2400, 3))
    y = (X[:, 0] + 0.5 * rng.normal(size=2400) > 0).astype(int) + (X[:, 1] > 0.8)
    booster = xgb.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 2, "nthread": 1},
                        xgb.DMatrix(X[:1200], label=y[:1200], feature_names=["a", "b", "c"]), num_boost_round=8)
    booster.save_model(tmp_path / "multi.ubj")
    df = pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=np.array(["x", "y", "z"])[y])
    pq.write_table(pa.Table.from_pandas(df), tmp_path / "multi.parquet", row_group_size=600)
    model = calengine.calibrate_scores(tmp_path / "multi.parquet", "label", prefit=tmp_path / "multi.ubj")
    P = booster.inplace_predict(X).astype(np.float64)
    R = np.column_stack([IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(P[:, j], y == j).predict(P[:, j])
                         for j in range(3)])
    got = model.predict_frame(df[["a", "b", "c"]])[["p_x", "p_y", "p_z"]].to_numpy()
    np.testing.assert_allclose(got, R / R.sum(axis=1, keepdims=True), atol=1e-9, rtol=0)
    df.assign(label=np.where(y == 2, "y", df["label"])).to_parquet(tmp_path / "two.parquet")
    with pytest.raises(CalengineError, match="predicts 3 classes but the target 'label' holds 2"):
        calengine.calibrate_scores(tmp_path / "two.parquet", "label", prefit=tmp_path / "multi.ubj")


def test_a_saved_frozen_estimator_model_scores_as_in_memory_through_the_cli(tmp_path, cli, adult):
    """``CalibratedClassifier(FrozenEstimator(clf)).save()`` stores clf as ``fit --prefit`` would (skops,
    allowlisted types), with the scores its calibrators saw (``decision_function``): ``calengine score``
    and ``load_model`` give the in-memory probabilities of the same rows."""
    from sklearn.frozen import FrozenEstimator
    from sklearn.linear_model import LogisticRegression

    df = adult[0]
    X = df[NUMERIC] / 1000.0
    fitted = LogisticRegression(max_iter=1000).fit(X[::2], df["class"][::2])
    ours = calengine.CalibratedClassifier(learner=FrozenEstimator(fitted), method="sigmoid").fit(X, df["class"])
    ours.save(tmp_path / "m")
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["learner"]["name"] == "prefit"
    assert manifest["learner"]["params"]["response"] == "decision_function"
    assert manifest["features"]["columns"] == NUMERIC
    X[NUMERIC[::-1]].to_parquet(tmp_path / "x.parquet")
    r = cli("score", tmp_path / "m", tmp_path / "x.parquet", "--output", tmp_path / "scored.parquet")
    assert r.returncode == 0, r
    scored = pd.read_parquet(tmp_path / "scored.parquet")
    want = ours.predict_proba(X)
    np.testing.assert_allclose(scored[["p_<=50K", "p_>50K"]].to_numpy(), want, atol=1e-12, rtol=0)
    np.testing.assert_allclose(calengine.load_model(tmp_path / "m").predict_frame(X)[["p_<=50K", "p_>50K"]].to_numpy(),
                               want, atol=1e-12, rtol=0)


def test_a_frozen_estimator_that_cannot_be_stored_safely_is_refused_in_one_line(tmp_path, adult):
    import operator

    from sklearn.frozen import FrozenEstimator
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    from calengine.errors import DataError, ModelFormatError

    df = adult[0].iloc[:600]
    X = df[NUMERIC] / 1000.0
    risky = make_pipeline(FunctionTransformer(operator.neg), LogisticRegression()).fit(X, df["y"])
    model = calengine.CalibratedClassifier(learner=FrozenEstimator(risky), method="isotonic").fit(X, df["y"])
    with pytest.raises(ModelFormatError, match=r"allowlist: _operator.neg; .*trust=") as info:
        model.save(tmp_path / "m")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "m").exists()
    model.save(tmp_path / "m", trust=["_operator.neg"])  # trusted by its user: saved, and loaded only so
    with pytest.raises(CalengineError, match="_operator.neg"):
        calengine.load_model(tmp_path / "m")
    got = calengine.load_model(tmp_path / "m", trust=["_operator.neg"]).predict_frame(X)["p_1"].to_numpy()
    np.testing.assert_allclose(got, model.predict_proba(X)[:, 1], atol=1e-12, rtol=0)
    # no column names anywhere: a saved model could not read a table
    bare = LogisticRegression().fit(X.to_numpy(), df["y"])
    unnamed = calengine.CalibratedClassifier(learner=FrozenEstimator(bare), method="isotonic").fit(X.to_numpy(), df["y"])
    with pytest.raises(DataError, match="no names.*DataFrame"):
        unnamed.save(tmp_path / "u")
    assert not (tmp_path / "u").exists()


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
def test_a_frozen_booster_classifier_is_saved_as_its_booster_bytes(tmp_path, adult, library):
    """An XGBClassifier / LGBMClassifier in a FrozenEstimator: the saved model holds its booster's own
    bytes (hashed in the manifest) and predicts what the in-memory model predicts."""
    from sklearn.frozen import FrozenEstimator

    df = adult[0]
    X = df[NUMERIC]
    if library == "xgboost":
        from xgboost import XGBClassifier

        clf = XGBClassifier(n_estimators=10, max_depth=3, n_jobs=1).fit(X[::2], df["y"][::2])
        blob = bytes(clf.get_booster().save_raw("ubj"))
    else:
        from lightgbm import LGBMClassifier

        clf = LGBMClassifier(n_estimators=10, num_leaves=8, n_jobs=1, verbosity=-1).fit(X[::2], df["y"][::2])
        blob = clf.booster_.model_to_string().encode("utf-8")
    model = calengine.CalibratedClassifier(learner=FrozenEstimator(clf), method="isotonic").fit(X, df["y"])
    model.save(tmp_path / "m")
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["learner"]["params"]["library"] == library
    # LightGBM >= 4.7's LGBMClassifier has a decision_function (the raw margin): calibrated and stored so
    assert manifest["learner"]["params"]["response"] == ("decision_function" if library == "lightgbm" else "predict_proba")
    assert manifest["learner"]["params"]["sha256"] == hashlib.sha256(blob).hexdigest()
    assert [f for f, d in manifest["files"].items() if d["sha256"] == hashlib.sha256(blob).hexdigest()]
    got = calengine.load_model(tmp_path / "m").predict_frame(X)[["p_0", "p_1"]].to_numpy()
    np.testing.assert_allclose(got, model.predict_proba(X), atol=1e-12, rtol=0)
