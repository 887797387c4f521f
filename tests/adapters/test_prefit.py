"""``calengine fit --prefit PATH``: calibrating a model trained outside calengine (issue 21 §2).

Oracles: the model's own predictions of the same rows (XGBoost's ``inplace_predict``, LightGBM's
``predict``, the estimator's ``predict_proba``) calibrated in memory by scikit-learn's
``IsotonicRegression`` and by a scipy fit of Platt's objective (tests/adapters/test_score_columns.py), and
scikit-learn's ``CalibratedClassifierCV(FrozenEstimator(...))`` for the estimator API.
"""

from __future__ import annotations

import hashlib
import json
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import calengine
from calengine.errors import CalengineError
from cli_helpers import REPO, assert_one_line_error, run_cli

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
    # LightGBM >= 4.7's LGBMClassifier has a decision_function (the raw margin): calibrated and stored so;
    # before 4.7 (the floor is 4.4) it has none, and predict_proba is what scikit-learn's order picks
    wants = "decision_function" if library == "lightgbm" and hasattr(clf, "decision_function") else "predict_proba"
    assert manifest["learner"]["params"]["response"] == wants
    assert manifest["learner"]["params"]["sha256"] == hashlib.sha256(blob).hexdigest()
    assert [f for f, d in manifest["files"].items() if d["sha256"] == hashlib.sha256(blob).hexdigest()]
    got = calengine.load_model(tmp_path / "m").predict_frame(X)[["p_0", "p_1"]].to_numpy()
    np.testing.assert_allclose(got, model.predict_proba(X), atol=1e-12, rtol=0)


# ------------------------------------------------------------------------------------------ raw rows
# A model trained elsewhere reads the caller's rows as they are (issue 41): ``FrozenEstimator`` in the
# Python API, a saved ``FrozenEstimator`` model, and ``fit --prefit`` of a skops file.  A prefit
# ``Pipeline(ColumnTransformer(OneHotEncoder on Adult's string columns, passthrough numerics),
# LogisticRegression())`` gets Adult's raw DataFrame, strings and all; a ``HistGradientBoostingClassifier``
# gets its NaN.  calengine validates only what the calibrator reads, the model's scores.
#
# Oracle: scikit-learn's ``CalibratedClassifierCV(FrozenEstimator(...))`` on the same rows.  Tolerances:
# isotonic is exact (the same scores, the same pool-adjacent-violators fit: the step maps agree on the
# calibration rows, and calengine's ``interpolation=linear`` is scikit-learn's rule between thresholds on
# new rows) -- 1e-12; sigmoid's two Platt parameters come from two optimisers (scikit-learn's L-BFGS,
# calengine's Newton steps to machine precision) whose stopping rules differ: measured 4.5e-10 on these
# rows with scikit-learn 1.9.1 and 2.6e-8 with 1.8.0 (the declared floor, whose L-BFGS stops earlier on
# the unscaled pipeline's decision values) -- 1e-7.

TOL = {"sigmoid": 1e-7, "isotonic": 1e-12}


@pytest.fixture(scope="module")
def raw_adult():
    """(raw frame of 3000 calibration rows, their labels, 1000 new raw rows, the fitted pipeline, the
    string columns) -- the pipeline trained on 4000 other rows."""
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder

    df = pd.read_parquet(ADULT)
    strings = [c for c in df.columns if c != "class" and not pd.api.types.is_numeric_dtype(df[c])]
    assert {"workclass", "education", "native-country"} <= set(strings)
    train, cal, new = df.iloc[:4000], df.iloc[4000:7000], df.iloc[8000:9000]
    pipe = Pipeline([
        ("prep", ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), strings)], remainder="passthrough")),
        ("lr", LogisticRegression()),
    ])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lbfgs on unscaled columns: the model need not be good, only fixed
        pipe.fit(train.drop(columns="class"), train["class"])
    return cal.drop(columns="class"), cal["class"], new.drop(columns="class"), pipe, strings


@pytest.mark.parametrize("method", ["sigmoid", "isotonic"])
def test_a_frozen_column_transformer_pipeline_reads_adults_raw_strings_as_scikit_learn_does(raw_adult, method):
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    X, y, new, pipe, strings = raw_adult
    assert all(X[c].dtype != np.float64 for c in strings)  # raw strings reach the frozen pipeline
    ours = calengine.CalibratedClassifier(learner=FrozenEstimator(pipe), method=method).fit(X, y)
    theirs = CalibratedClassifierCV(FrozenEstimator(pipe), method=method).fit(X, y)
    assert list(ours.classes_) == list(theirs.classes_)
    np.testing.assert_allclose(ours.predict_proba(X), theirs.predict_proba(X), atol=TOL[method], rtol=0)
    assert list(ours.feature_names_in_) == list(pipe.feature_names_in_)
    if method == "isotonic":  # on new rows, scikit-learn's rule between thresholds is interpolation=linear
        linear = calengine.CalibratedClassifier(learner=FrozenEstimator(pipe), method=method,
                                                method_params={"interpolation": "linear"}).fit(X, y)
        np.testing.assert_allclose(linear.predict_proba(new), theirs.predict_proba(new), atol=TOL[method], rtol=0)
    else:
        np.testing.assert_allclose(ours.predict_proba(new), theirs.predict_proba(new), atol=TOL[method], rtol=0)


@pytest.fixture(scope="module")
def with_nan():
    """Adult's numeric columns with a tenth of the values missing, and a HistGradientBoosting model
    trained on other rows (it handles NaN itself)."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    df = pd.read_parquet(ADULT)
    numeric = [c for c in df.columns if c != "class" and pd.api.types.is_numeric_dtype(df[c])]
    rng = np.random.default_rng(0)
    X = df[numeric].astype(np.float64).mask(rng.random((len(df), len(numeric))) < 0.1)
    model = HistGradientBoostingClassifier(max_iter=30, random_state=0).fit(X.iloc[:4000], df["class"].iloc[:4000])
    return X.iloc[4000:7000], df["class"].iloc[4000:7000], model


@pytest.mark.parametrize("method", ["sigmoid", "isotonic"])
@pytest.mark.parametrize("as_array", [False, True])
def test_a_frozen_hist_gradient_boosting_takes_nan_as_scikit_learn_does(with_nan, method, as_array):
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    X, y, model = with_nan
    assert X.isna().to_numpy().mean() > 0.05
    data = X.to_numpy() if as_array else X
    ours = calengine.CalibratedClassifier(learner=FrozenEstimator(model), method=method).fit(data, y)
    theirs = CalibratedClassifierCV(FrozenEstimator(model), method=method).fit(data, y)
    np.testing.assert_allclose(ours.predict_proba(data), theirs.predict_proba(data), atol=TOL[method], rtol=0)
    # the scores are what calengine checks: a model whose scores are not finite is refused in one line
    assert np.isfinite(ours.predict_proba(data)).all()


def test_frozen_input_rules_are_the_scores_and_the_row_count(raw_adult):
    from sklearn.frozen import FrozenEstimator

    from calengine.errors import DataError

    X, y, _, pipe, _ = raw_adult
    with pytest.raises(DataError, match="X has 2999 rows but y has 3000"):
        calengine.CalibratedClassifier(learner=FrozenEstimator(pipe), method="sigmoid").fit(X.iloc[1:], y)


def test_a_saved_frozen_pipeline_scores_raw_tables_from_the_cli(raw_adult, tmp_path):
    """The saved model reads the string columns as they are (its reader hands the frame to the pipeline)
    and `calengine score` gives the probabilities the in-memory model gives."""
    from sklearn.frozen import FrozenEstimator

    X, y, new, pipe, _ = raw_adult
    model = calengine.CalibratedClassifier(learner=FrozenEstimator(pipe), method="isotonic").fit(X, y)
    model.save(tmp_path / "m")
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["features"].get("as_frame") is True
    new.to_parquet(tmp_path / "new.parquet")
    r = run_cli("score", tmp_path / "m", tmp_path / "new.parquet", "--output", tmp_path / "scored.parquet")
    assert r.returncode == 0, r
    got = pd.read_parquet(tmp_path / "scored.parquet")[["p_<=50K", "p_>50K"]].to_numpy()
    np.testing.assert_allclose(got, model.predict_proba(new), atol=1e-12, rtol=0)
    loaded = calengine.load_model(tmp_path / "m")
    np.testing.assert_allclose(loaded.predict_proba(new), model.predict_proba(new), atol=1e-12, rtol=0)


@pytest.mark.parametrize("method", ["sigmoid", "isotonic"])
def test_cli_prefit_of_a_skops_column_transformer_pipeline_on_adults_raw_table(raw_adult, tmp_path, method):
    """``fit --prefit pipe.skops`` on the raw Parquet table (strings and all): no widening of the skops
    allowlist is needed (Pipeline, ColumnTransformer, OneHotEncoder and LogisticRegression are plain
    scikit-learn types skops trusts), and the fit equals scikit-learn's on the same rows.

    ``--prefit`` calibrates a skops estimator's ``predict_proba`` (:mod:`calengine.adapters.prefit`): isotonic
    against ``CalibratedClassifierCV(FrozenEstimator)``, which fits the same map on the decision values
    (a monotone transform of the probabilities); sigmoid's default (``on=logit``) is Platt on
    ``logit(p)``, checked against the independent Platt oracle as the tests above do (1e-6: BFGS)."""
    import skops.io as sio
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    from calengine.model.allowlist import untrusted_types

    X, y, new, pipe, _ = raw_adult
    sio.dump(pipe, tmp_path / "pipe.skops")
    assert untrusted_types((tmp_path / "pipe.skops").read_bytes()) == []
    X.assign(**{"class": y}).to_parquet(tmp_path / "cal.parquet")
    r = run_cli("fit", tmp_path / "cal.parquet", "--target", "class", "--prefit", tmp_path / "pipe.skops",
                "--method", method, "--output", tmp_path / "m")
    assert r.returncode == 0, r
    model = calengine.load_model(tmp_path / "m")
    if method == "isotonic":
        theirs = CalibratedClassifierCV(FrozenEstimator(pipe), method=method).fit(X, y)
        np.testing.assert_allclose(model.predict_proba(X), theirs.predict_proba(X), atol=TOL[method], rtol=0)
    else:
        from scipy.special import expit
        from adapters.test_score_columns import _platt_oracle

        p = np.clip(pipe.predict_proba(X)[:, 1], 1e-12, 1 - 1e-12)
        z = np.log(p) - np.log1p(-p)
        a, b = _platt_oracle(z, (y == ">50K").to_numpy().astype(int), np.ones(len(y)))
        np.testing.assert_allclose(model.predict_proba(X)[:, 1], expit(-(a * z + b)), atol=1e-6, rtol=0)
    new.to_parquet(tmp_path / "new.parquet")
    r = run_cli("score", tmp_path / "m", tmp_path / "new.parquet", "--output", tmp_path / "scored.parquet")
    assert r.returncode == 0, r
    got = pd.read_parquet(tmp_path / "scored.parquet")[["p_<=50K", "p_>50K"]].to_numpy()
    np.testing.assert_allclose(got, model.predict_proba(new), atol=1e-12, rtol=0)


def test_cli_prefit_pipeline_missing_a_column_is_one_line(raw_adult, tmp_path):
    import skops.io as sio

    X, y, _, pipe, _ = raw_adult
    sio.dump(pipe, tmp_path / "pipe.skops")
    X.drop(columns="education").assign(**{"class": y}).to_parquet(tmp_path / "cal.parquet")
    assert_one_line_error(
        run_cli("fit", tmp_path / "cal.parquet", "--target", "class", "--prefit", tmp_path / "pipe.skops",
                "--output", tmp_path / "m"),
        "reads the feature column 'education'")
    assert not (tmp_path / "m").exists()


def test_a_booster_whose_objective_gives_no_probabilities_is_named_by_its_objective(tmp_path, cli, adult):
    """Issue 42: a ``binary:logitraw`` booster (margins, not probabilities) was called damaged: the probe
    scored it before its objective was read, and margins fail the probe's [0, 1] check.  The objective
    the file declares is now read (in Python, by the file's checks) before the booster is loaded."""
    import lightgbm as lgb
    import xgboost as xgb

    df, data, folder, _ = adult
    X, y = df[NUMERIC].to_numpy(), df["y"].to_numpy()
    raw = xgb.train({"objective": "binary:logitraw", "max_depth": 2, "nthread": 1},
                    xgb.DMatrix(X, label=y, feature_names=NUMERIC), num_boost_round=5)
    raw.save_model(tmp_path / "logitraw.json")
    raw.save_model(tmp_path / "logitraw.ubj")
    gbm = lgb.train({"objective": "regression", "num_leaves": 4, "verbosity": -1, "num_threads": 1},
                    lgb.Dataset(X, label=10.0 * y), num_boost_round=5)
    gbm.save_model(tmp_path / "regression.txt")
    for name, objective in (("logitraw.json", "'binary:logitraw'"), ("logitraw.ubj", "'binary:logitraw'"),
                            ("regression.txt", "'regression'")):
        r = cli("fit", data, "--target", "y", "--prefit", tmp_path / name, "--output", tmp_path / "m")
        assert_one_line_error(r, f"objective is {objective}", "not class probabilities")
        assert "damaged" not in r.stderr and not (tmp_path / "m").exists()
    from calengine.boosters.checks import validate_lightgbm, validate_xgboost

    assert validate_xgboost(folder / "named.json").objective == "binary:logistic"
    assert validate_lightgbm(folder / "gbm.txt").objective == "binary"
