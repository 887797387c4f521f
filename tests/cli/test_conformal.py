"""``calengine conformal`` and ``calengine score --sets`` on real Parquet, as a user runs them: the
files written, the sets against the in-memory definition, and every bad input as one line, exit 2,
nothing written."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from calengine.methods import conformal as cf
from calengine.model.artifact import load_model, read_manifest
from cli_helpers import assert_one_line_error, run_cli

DATA = __import__("pathlib").Path(__file__).resolve().parents[2] / "data"
PEN_TEST = str(DATA / "pendigits_test.parquet")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("conformal_cli")
    r = run_cli("fit", DATA / "pendigits_train.parquet", "--target", "class", "--cv", "3", "--output", root / "pen",
                "--quiet")
    assert r.returncode == 0, r
    r = run_cli("conformal", root / "pen", PEN_TEST, "--target", "class", "--alpha", "0.1", "--score", "aps",
                "--output", root / "pen_aps", "--quiet")
    assert r.returncode == 0, r
    assert "conformalized on 3498 rows: aps (randomised), alpha 0.1" in r.stderr
    # a binary model of score columns: 'calengine fit --scores'
    rng = np.random.default_rng(0)
    s = rng.random(4000)
    y = (rng.random(4000) < s).astype(int)
    pd.DataFrame({"s": s[:2000], "y": y[:2000]}).to_parquet(root / "fit.parquet", index=False)
    pd.DataFrame({"s": s[2000:], "y": y[2000:]}).to_parquet(root / "cal.parquet", index=False)
    r = run_cli("fit", root / "fit.parquet", "--target", "y", "--scores", "s", "--output", root / "bin", "--quiet")
    assert r.returncode == 0, r
    return root


def test_score_sets_are_the_layers_sets(models, tmp_path):
    out = tmp_path / "scored"
    r = run_cli("score", models / "pen_aps", PEN_TEST, "--sets", "--p-values", "--output", out, "--quiet")
    assert r.returncode == 0, r
    got = pd.read_parquet(out)
    classes = [str(c) for c in range(10)]
    assert list(got.columns) == ([f"p_{c}" for c in classes] + ["prediction", "set"] + [f"in_{c}" for c in classes]
                                 + ["set_size"] + [f"pvalue_{c}" for c in classes])
    model = load_model(models / "pen_aps")
    df = pd.read_parquet(PEN_TEST)
    X = model.encoder.transform(df)
    P = model.predict_proba_features(X)
    S = model.conformal.sets(P, X, df)
    inside = got[[f"in_{c}" for c in classes]].to_numpy()
    assert np.array_equal(inside, S)
    assert np.array_equal(got["set_size"].to_numpy(), S.sum(axis=1))
    assert [list(v) for v in got["set"]] == [list(np.flatnonzero(r)) for r in S]
    assert np.array_equal(got[[f"pvalue_{c}" for c in classes]].to_numpy() > 0.1, S)
    y = df["class"].to_numpy()
    assert abs(inside[np.arange(len(y)), y].mean() - 0.9) < 0.01  # its own calibration rows: 0.9 + O(1/n)
    # the pandas path (--keep) writes the same sets as the Arrow fast path
    r = run_cli("score", models / "pen_aps", PEN_TEST, "--sets", "--keep", "class", "--output", tmp_path / "k",
                "--quiet")
    assert r.returncode == 0, r
    kept = pd.read_parquet(tmp_path / "k")
    assert kept["class"].tolist() == y.tolist()
    assert np.array_equal(kept[[f"in_{c}" for c in classes]].to_numpy(), inside)


def test_binary_models_get_all_four_sets(models, tmp_path):
    r = run_cli("conformal", models / "bin", models / "cal.parquet", "--target", "y", "--alpha", "0.3",
                "--output", tmp_path / "c", "--quiet")
    assert r.returncode == 0, r
    r = run_cli("score", tmp_path / "c", models / "cal.parquet", "--sets", "--p-values", "--output", tmp_path / "o",
                "--quiet")
    assert r.returncode == 0, r
    got = pd.read_parquet(tmp_path / "o")
    seen = {tuple(v) for v in got["set"]}
    assert {(0,), (1,)} <= seen and ((0, 1) in seen or () in seen)
    assert set(got["set_size"]) <= {0, 1, 2}
    assert np.array_equal(got[["pvalue_0", "pvalue_1"]].to_numpy() > 0.3, got[["in_0", "in_1"]].to_numpy())
    # alpha 0.45 leaves empty sets (both scores above the threshold) for the least certain rows
    r = run_cli("conformal", models / "bin", models / "cal.parquet", "--target", "y", "--alpha", "0.45",
                "--output", tmp_path / "c2", "--quiet")
    r = run_cli("score", tmp_path / "c2", models / "cal.parquet", "--sets", "--output", tmp_path / "o2", "--quiet")
    assert r.returncode == 0, r
    assert (pd.read_parquet(tmp_path / "o2")["set_size"] == 0).any()


def test_mondrian_segments_and_weights_from_the_command_line(models, tmp_path):
    df = pd.read_parquet(PEN_TEST)
    df["hand"] = np.where(df["x1"] > 50, "right", "left")
    df["w"] = np.where(df["hand"] == "right", 2.0, 1.0)
    df.to_parquet(tmp_path / "cal.parquet", index=False)
    r = run_cli("conformal", models / "pen", tmp_path / "cal.parquet", "--target", "class", "--alpha", "0.1",
                "--mondrian", "hand", "--weight", "w", "--output", tmp_path / "c", "--quiet")
    assert r.returncode == 0, r
    man = read_manifest(tmp_path / "c")
    assert man["conformal"]["mondrian"] == "segments" and man["conformal"]["keys"] == [["left"], ["right"]]
    assert man["conformal"]["weight"] == "w"
    r = run_cli("score", tmp_path / "c", tmp_path / "cal.parquet", "--sets", "--output", tmp_path / "o", "--quiet")
    assert r.returncode == 0, r
    # the weight column is read from every scored table: without it, one line
    df.drop(columns="w").to_parquet(tmp_path / "now.parquet", index=False)
    r = run_cli("score", tmp_path / "c", tmp_path / "now.parquet", "--sets", "--output", tmp_path / "o2")
    assert_one_line_error(r, "'w'")
    assert not (tmp_path / "o2").exists()


def _conformal(models, tmp_path, *extra, data=PEN_TEST):
    return run_cli("conformal", models / "pen", data, "--target", "class", "--output", tmp_path / "out", *extra)


@pytest.mark.parametrize("extra,fragments", [
    (["--alpha", "0"], ["--alpha must be in (0, 1)", "got 0.0"]),
    (["--alpha", "1.5"], ["--alpha must be in (0, 1)"]),
    (["--alpha", "0.1", "--raps-lambda", "0.2"], ["--raps-lambda is a parameter of RAPS' penalty: add --score raps or drop --raps-lambda"]),
    (["--alpha", "0.1", "--no-randomize"], ["--no-randomize applies to the aps and raps scores"]),
    (["--alpha", "0.1", "--score", "raps", "--raps-k-reg", "-2"], ["--raps-k-reg must be an integer >= 0"]),
    (["--alpha", "0.1", "--mondrian", "nope"], ["column 'nope'"]),
    (["--alpha", "0.1", "--seed", "-4"], ["--seed must be"]),
])
def test_bad_options_are_one_line(models, tmp_path, extra, fragments):
    r = _conformal(models, tmp_path, *extra)
    assert_one_line_error(r, *fragments)
    assert not (tmp_path / "out").exists()


def test_bad_data_is_one_line_and_nothing_is_written(models, tmp_path):
    df = pd.read_parquet(PEN_TEST)
    df.iloc[:5].to_parquet(tmp_path / "five.parquet", index=False)
    r = _conformal(models, tmp_path, "--alpha", "0.1", data=tmp_path / "five.parquet")
    assert_one_line_error(r, "5 calibration rows are too few for --alpha 0.1", "at least 9 rows")
    df[df["class"] != 3].to_parquet(tmp_path / "no3.parquet", index=False)
    r = _conformal(models, tmp_path, "--alpha", "0.1", "--mondrian", "class", data=tmp_path / "no3.parquet")
    assert_one_line_error(r, "--mondrian class needs calibration rows of every class, and class 3 has none")
    df.assign(w=np.where(np.arange(len(df)) == 7, -1.0, 1.0)).to_parquet(tmp_path / "neg.parquet", index=False)
    r = _conformal(models, tmp_path, "--alpha", "0.1", "--weight", "w", data=tmp_path / "neg.parquet")
    assert_one_line_error(r, "weight column 'w' has negative weights")
    df.assign(w=0.0).to_parquet(tmp_path / "zero.parquet", index=False)
    r = _conformal(models, tmp_path, "--alpha", "0.1", "--weight", "w", data=tmp_path / "zero.parquet")
    assert_one_line_error(r, "every row of --weight column 'w' is 0")
    r = _conformal(models, tmp_path, "--alpha", "0.1", "--weight", "nope")
    assert_one_line_error(r, "nope")
    assert not (tmp_path / "out").exists()


def test_output_rules_are_fits(models, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    r = _conformal(models, tmp_path, "--alpha", "0.1")
    assert_one_line_error(r, "already exists", "--overwrite")
    r = _conformal(models, tmp_path, "--alpha", "0.1", "--overwrite")
    assert_one_line_error(r, "--overwrite refuses to replace", "not a calengine model directory")
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"
    os.remove(tmp_path / "out" / "notes.txt")
    assert _conformal(models, tmp_path, "--alpha", "0.1", "--quiet").returncode == 0
    assert _conformal(models, tmp_path, "--alpha", "0.2", "--overwrite", "--quiet").returncode == 0
    assert load_model(tmp_path / "out").conformal.alpha == 0.2


def test_sets_need_a_conformal_layer(models, tmp_path):
    r = run_cli("score", models / "pen", PEN_TEST, "--sets", "--output", tmp_path / "o")
    assert_one_line_error(r, "--sets needs a model with a conformal layer", "calengine conformal")
    r = run_cli("score", models / "pen_aps", PEN_TEST, "--sets", "--keep", "set_size", "--output", tmp_path / "o")
    assert_one_line_error(r, "--keep set_size would collide")
    assert not (tmp_path / "o").exists()


def test_thresholds_equal_the_definition(models):
    model = load_model(models / "pen_aps")
    df = pd.read_parquet(PEN_TEST)
    X = model.encoder.transform(df)
    P = model.predict_proba_features(X)
    V = cf.true_scores(P, model.labels.encode(df["class"]), "aps", cf.row_uniforms(cf.row_hashes(X), 0))
    assert model.conformal.thresholds[0, 0] == cf.threshold(V, 0.1)


ADULT_NUMERIC = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]


@pytest.mark.parametrize("kind", ["prefit", "by"])
def test_prefit_and_by_models_take_a_layer(tmp_path, kind):
    """A ``--prefit`` model (an XGBoost booster trained outside calengine) and a ``fit --by`` model take
    a layer like a learner's: the new directory keeps the parent's files and names its content hash
    in the lineage; the threshold is the ceil((n+1)(1-alpha))-th smallest ``1 - p_y`` of the
    calibration rows (sorted here by NumPy); ``score --sets`` writes ``{c : 1 - p_c <= t}``."""
    df = pd.read_parquet(DATA / "adult" / "train.parquet").iloc[:6000].reset_index(drop=True)
    df = df[ADULT_NUMERIC + ["sex", "class"]].astype({c: "float64" for c in ADULT_NUMERIC})
    df["y"] = (df["class"].astype(str) == ">50K").astype(np.int64)
    df = df.drop(columns="class")
    fit_rows, cal_rows = df.iloc[:3000], df.iloc[3000:].reset_index(drop=True)
    fit_rows.to_parquet(tmp_path / "fit.parquet", index=False)
    cal_rows.to_parquet(tmp_path / "cal.parquet", index=False)
    if kind == "prefit":
        import xgboost as xgb

        booster = xgb.train({"objective": "binary:logistic", "max_depth": 3, "eta": 0.3, "nthread": 1},
                            xgb.DMatrix(fit_rows[ADULT_NUMERIC].to_numpy(), label=fit_rows["y"].to_numpy(),
                                        feature_names=ADULT_NUMERIC), num_boost_round=20)
        booster.save_model(tmp_path / "booster.json")
        extra = ["--prefit", tmp_path / "booster.json", "--method", "isotonic"]
    else:
        extra = ["--by", "sex", "--cv", "2"]
    r = run_cli("fit", tmp_path / "fit.parquet", "--target", "y", *extra, "--output", tmp_path / "m", "--quiet")
    assert r.returncode == 0, r
    r = run_cli("conformal", tmp_path / "m", tmp_path / "cal.parquet", "--target", "y", "--alpha", "0.1",
                "--output", tmp_path / "c", "--quiet")
    assert r.returncode == 0, r
    man, parent = read_manifest(tmp_path / "c"), read_manifest(tmp_path / "m")
    assert man["lineage"]["mode"] == "conformal"
    assert man["lineage"]["parent"]["content_hash"] == parent["content_hash"]
    assert {k: v for k, v in man["files"].items() if k != "conformal.npz"} == parent["files"]
    r = run_cli("score", tmp_path / "c", tmp_path / "cal.parquet", "--sets", "--output", tmp_path / "o", "--quiet")
    assert r.returncode == 0, r
    got = pd.read_parquet(tmp_path / "o")
    P = got[["p_0", "p_1"]].to_numpy()
    y = cal_rows["y"].to_numpy()
    V = np.sort(1.0 - P[np.arange(len(y)), y])
    t = V[int(np.ceil((len(y) + 1) * 0.9)) - 1]  # 3000 rows: the 2701st smallest
    assert load_model(tmp_path / "c").conformal.thresholds[0, 0] == t
    assert np.array_equal(got[["in_0", "in_1"]].to_numpy(), 1.0 - P <= t)
    assert np.array_equal(got["set_size"].to_numpy(), (1.0 - P <= t).sum(axis=1))
