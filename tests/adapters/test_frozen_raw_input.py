"""A model trained elsewhere reads the caller's rows as they are (issue 41): ``FrozenEstimator`` in the
Python API, a saved ``FrozenEstimator`` model, and ``fit --prefit`` of a skops file.  A prefit
``Pipeline(ColumnTransformer(OneHotEncoder on Adult's string columns, passthrough numerics),
LogisticRegression())`` gets Adult's raw DataFrame, strings and all; a ``HistGradientBoostingClassifier``
gets its NaN.  calengine validates only what the calibrator reads, the model's scores.

Oracle: scikit-learn's ``CalibratedClassifierCV(FrozenEstimator(...))`` on the same rows.  Tolerances:
isotonic is exact (the same scores, the same pool-adjacent-violators fit: the step maps agree on the
calibration rows, and calengine's ``interpolation=linear`` is scikit-learn's rule between thresholds on
new rows) -- 1e-12; sigmoid's two Platt parameters come from two optimisers (scikit-learn's L-BFGS,
calengine's Newton steps to machine precision) whose stopping rules differ: measured 4.5e-10 on these
rows with scikit-learn 1.9.1 and 2.6e-8 with 1.8.0 (the declared floor, whose L-BFGS stops earlier on
the unscaled pipeline's decision values) -- 1e-7."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import calengine
from cli_helpers import assert_one_line_error, run_cli

ADULT = Path(__file__).resolve().parents[2] / "data" / "adult" / "train.parquet"
TOL = {"sigmoid": 1e-7, "isotonic": 1e-12}


@pytest.fixture(scope="module")
def adult():
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
def test_a_frozen_column_transformer_pipeline_reads_adults_raw_strings_as_scikit_learn_does(adult, method):
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    X, y, new, pipe, strings = adult
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


def test_frozen_input_rules_are_the_scores_and_the_row_count(adult):
    from sklearn.frozen import FrozenEstimator

    from calengine.errors import DataError

    X, y, _, pipe, _ = adult
    with pytest.raises(DataError, match="X has 2999 rows but y has 3000"):
        calengine.CalibratedClassifier(learner=FrozenEstimator(pipe), method="sigmoid").fit(X.iloc[1:], y)


def test_a_saved_frozen_pipeline_scores_raw_tables_from_the_cli(adult, tmp_path):
    """The saved model reads the string columns as they are (its reader hands the frame to the pipeline)
    and `calengine score` gives the probabilities the in-memory model gives."""
    from sklearn.frozen import FrozenEstimator

    X, y, new, pipe, _ = adult
    model = calengine.CalibratedClassifier(learner=FrozenEstimator(pipe), method="isotonic").fit(X, y)
    model.save(tmp_path / "m")
    import json

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
def test_cli_prefit_of_a_skops_column_transformer_pipeline_on_adults_raw_table(adult, tmp_path, method):
    """``fit --prefit pipe.skops`` on the raw Parquet table (strings and all): no widening of the skops
    allowlist is needed (Pipeline, ColumnTransformer, OneHotEncoder and LogisticRegression are plain
    scikit-learn types skops trusts), and the fit equals scikit-learn's on the same rows.

    ``--prefit`` calibrates a skops estimator's ``predict_proba`` (:mod:`calengine.prefit`): isotonic
    against ``CalibratedClassifierCV(FrozenEstimator)``, which fits the same map on the decision values
    (a monotone transform of the probabilities); sigmoid's default (``on=logit``) is Platt on
    ``logit(p)``, checked against the independent Platt oracle as tests/test_prefit.py does (1e-6: BFGS)."""
    import skops.io as sio
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    from calengine.model.allowlist import untrusted_types

    X, y, new, pipe, _ = adult
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
        from test_score_columns import _platt_oracle

        p = np.clip(pipe.predict_proba(X)[:, 1], 1e-12, 1 - 1e-12)
        z = np.log(p) - np.log1p(-p)
        a, b = _platt_oracle(z, (y == ">50K").to_numpy().astype(int), np.ones(len(y)))
        np.testing.assert_allclose(model.predict_proba(X)[:, 1], expit(-(a * z + b)), atol=1e-6, rtol=0)
    new.to_parquet(tmp_path / "new.parquet")
    r = run_cli("score", tmp_path / "m", tmp_path / "new.parquet", "--output", tmp_path / "scored.parquet")
    assert r.returncode == 0, r
    got = pd.read_parquet(tmp_path / "scored.parquet")[["p_<=50K", "p_>50K"]].to_numpy()
    np.testing.assert_allclose(got, model.predict_proba(new), atol=1e-12, rtol=0)


def test_cli_prefit_pipeline_missing_a_column_is_one_line(adult, tmp_path):
    import skops.io as sio

    X, y, _, pipe, _ = adult
    sio.dump(pipe, tmp_path / "pipe.skops")
    X.drop(columns="education").assign(**{"class": y}).to_parquet(tmp_path / "cal.parquet")
    assert_one_line_error(
        run_cli("fit", tmp_path / "cal.parquet", "--target", "class", "--prefit", tmp_path / "pipe.skops",
                "--output", tmp_path / "m"),
        "reads the feature column 'education'")
    assert not (tmp_path / "m").exists()
