"""``calengine cv --prefit PATH``: the out-of-fold evaluation of calibrating a model trained elsewhere.

The model is never refitted; the outer folds only split the rows that calibrate it.  Oracle: the
booster's own predictions of the same rows (XGBoost's ``inplace_predict``), calibrated on each fold's
training rows by scikit-learn's ``IsotonicRegression`` and scored on its held-out rows with
scikit-learn's metrics (``interpolation=linear``: scikit-learn's rule between the fitted scores), on the folds ``calengine cv`` draws (seeded ``StratifiedKFold``,
:func:`calengine.parquet.data.stratified_folds`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import calengine
from cli_helpers import REPO, assert_one_line_error

ADULT = REPO / "data" / "adult" / "train.parquet"
NUMERIC = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]


@pytest.fixture(scope="module")
def adult(tmp_path_factory):
    """3,000 rows of Adult's numeric columns and ``y`` in 3 row groups, and an XGBoost booster with
    feature names trained on 2,000 other rows (as a team's production model would be)."""
    import xgboost as xgb

    df = pd.read_parquet(ADULT).iloc[:5000].reset_index(drop=True)
    df = df[NUMERIC + ["class"]].astype({c: "float64" for c in NUMERIC})
    df["y"] = (df["class"].astype(str) == ">50K").astype(np.int64)
    df = df.drop(columns="class")
    train, cal = df.iloc[:2000], df.iloc[2000:].reset_index(drop=True)
    folder = tmp_path_factory.mktemp("prefit-cv")
    pq.write_table(pa.Table.from_pandas(cal, preserve_index=False), folder / "cal.parquet", row_group_size=1000)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 3, "eta": 0.3, "nthread": 1},
                        xgb.DMatrix(train[NUMERIC].to_numpy(), label=train["y"], feature_names=NUMERIC),
                        num_boost_round=15)
    booster.save_model(folder / "named.json")
    return cal, folder, booster.inplace_predict(cal[NUMERIC].to_numpy()).astype(np.float64)


def test_cv_prefit_isotonic_equals_scikit_learn_on_the_same_folds(cli, adult):
    from sklearn.isotonic import IsotonicRegression
    from sklearn.metrics import brier_score_loss, roc_auc_score

    from calengine.parquet.data import stratified_folds

    cal, folder, s = adult
    r = cli("cv", folder / "cal.parquet", "--target", "y", "--prefit", folder / "named.json", "--method", "isotonic",
            "--method-param", "interpolation=linear", "--folds", "3", "--seed", "4", "--json")
    assert r.returncode == 0, r
    out = r.json()
    assert out["rows"] == len(cal) and out["folds"] == 3
    assert out["label"].startswith("prefit ") and out["label"].endswith("named.json + isotonic")
    y = cal["y"].to_numpy()
    folds = stratified_folds(y, 3, 4)
    briers, raw_briers = [], []
    for (train, test), got in zip(folds, out["per_fold"]):
        iso = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(s[train], y[train])
        p = iso.predict(s[test])
        assert got["n"] == len(test)
        np.testing.assert_allclose(got["calibrated"]["brier"], brier_score_loss(y[test], p), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got["raw"]["brier"], brier_score_loss(y[test], s[test]), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(got["calibrated"]["auc"], roc_auc_score(y[test], p), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got["raw"]["auc"], roc_auc_score(y[test], s[test]), rtol=1e-12, atol=1e-12)
        briers.append(brier_score_loss(y[test], p))
        raw_briers.append(brier_score_loss(y[test], s[test]))
    np.testing.assert_allclose(out["summary"]["calibrated"]["brier"]["mean"], np.mean(briers), rtol=1e-12)
    np.testing.assert_allclose(out["summary"]["calibrated"]["brier"]["std"], np.std(briers, ddof=1), rtol=1e-9)
    np.testing.assert_allclose(out["summary"]["raw"]["brier"]["mean"], np.mean(raw_briers), rtol=1e-9)
    # the Python API (calengine.cross_validate_table) is the same computation
    api = calengine.cross_validate_table(folder / "cal.parquet", "y", folds=3, seed=4, prefit=str(folder / "named.json"),
                                         method="isotonic", method_params={"interpolation": "linear"})
    assert api.per_fold == out["per_fold"]


def test_cv_prefit_refuses_what_fit_prefit_refuses_in_one_line(tmp_path, cli, adult):
    cal, folder, _ = adult
    data = folder / "cal.parquet"
    base = ("cv", data, "--target", "y", "--prefit")
    assert_one_line_error(cli(*base, folder / "named.json", "--cv", "3"), "--cv", "--prefit refits none")
    assert_one_line_error(cli(*base, folder / "named.json", "--method", "probing"), "--method probing", "--prefit")
    assert_one_line_error(cli(*base, folder / "named.json", "--features", "age,fnlwgt"), "--features age,fnlwgt")
    lacking = tmp_path / "lacking.parquet"
    cal.drop(columns="age").to_parquet(lacking)
    assert_one_line_error(cli("cv", lacking, "--target", "y", "--prefit", folder / "named.json"), "'age'")
