"""The CLI end to end on the real datasets the repo ships, and every bad input the contract names."""

from __future__ import annotations

from pathlib import Path

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from cli_helpers import assert_one_line_error

DATA = Path(__file__).resolve().parents[2] / "data"  # not relative to the working directory

PIMA = str(DATA / "pima.parquet")
ADULT_TRAIN = str(DATA / "adult" / "train.parquet")
ADULT_TEST = str(DATA / "adult" / "test.parquet")


@pytest.fixture(scope="module")
def pima_model(tmp_path_factory, cli):
    out = tmp_path_factory.mktemp("models") / "pima"
    r = cli("fit", PIMA, "--target", "class", "--positive", "1", "--learner", "gaussian_nb",
            "--method", "isotonic", "--cv", "5", "--seed", "3", "--output", out)
    assert r.returncode == 0, r
    return out


def test_fit_writes_a_complete_manifest(pima_model):
    manifest = json.loads((pima_model / "manifest.json").read_text())
    import calengine
    from calengine_builtins.learners import GaussianNBLearner

    assert manifest["calengine_version"] == calengine.__version__
    assert manifest["format_version"] == calengine.MODEL_FORMAT_VERSION
    assert manifest["learner"] == {"name": "gaussian_nb", "params": GaussianNBLearner().get_params(deep=False)}
    assert manifest["method"]["name"] == "isotonic"
    assert manifest["labels"] == {"target": "class", "classes": [0, 1]}
    assert manifest["seed"] == 3 and manifest["cv"] == 5 and manifest["mode"] == "ensemble"
    assert [c["name"] for c in manifest["features"]["columns"]][:2] == ["times_pregnant", "plasma_glucose"]
    assert len(manifest["members"]) == 5
    assert manifest["plugins"]["learners:gaussian_nb"]["distribution"] == "calengine-builtins"
    # nothing in the directory is a pickle
    for f in pima_model.rglob("*"):
        if f.is_file():
            assert f.suffix in {".json", ".npz", ".skops"}, f


def test_evaluate_json_has_every_metric_and_the_decomposition_sums(pima_model, cli):
    r = cli("evaluate", pima_model, PIMA, "--target", "class", "--json")
    assert r.returncode == 0, r
    m = r.json()
    for key in ("n", "brier", "log_loss", "log_loss_bits", "auc", "error_rate", "ece",
                "calibration_loss", "refinement_loss", "confidence_q", "confidence_rho"):
        assert key in m, key
    assert m["n"] == 768
    assert m["calibration_loss"] + m["refinement_loss"] == pytest.approx(m["brier"], abs=1e-12)
    assert m["log_loss_bits"] == pytest.approx(m["log_loss"] / np.log(2))
    assert 0.7 < m["auc"] <= 1.0
    assert m["raw"]["n"] == 768


def test_evaluate_table_compares_raw_and_calibrated(pima_model, cli):
    """The table's two columns are the raw learner's and the calibrated model's metrics: the same
    figures --json reports (to the table's six decimals)."""
    r = cli("evaluate", pima_model, PIMA, "--target", "class")
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    header = next(line for line in lines if line.startswith("metric"))
    assert header.split()[1:] == ["raw", "learner", "gaussian_nb", "+", "isotonic"]
    rows = {line.split()[0]: line.split()[1:] for line in lines if line and line.split()[0] in ("n", "brier", "log_loss", "auc", "ece")}
    m = cli("evaluate", pima_model, PIMA, "--target", "class", "--json").json()
    assert rows["n"] == ["768", "768"]
    for key in ("brier", "log_loss", "auc", "ece"):
        raw, calibrated = map(float, rows[key])
        assert raw == pytest.approx(m["raw"][key], abs=5e-7), key
        assert calibrated == pytest.approx(m[key], abs=5e-7), key
    assert float(rows["brier"][1]) < float(rows["brier"][0])  # isotonic improves naive Bayes on pima


def test_score_writes_probabilities_prediction_and_kept_columns(pima_model, cli, tmp_path):
    out = tmp_path / "scored"
    r = cli("score", pima_model, PIMA, "--output", out, "--keep", "class")
    assert r.returncode == 0, r
    table = pq.read_table(out).to_pandas()
    assert list(table.columns) == ["class", "p_0", "p_1", "prediction"]
    assert len(table) == 768
    np.testing.assert_allclose(table["p_0"] + table["p_1"], 1.0, atol=1e-12)
    assert table["p_1"].dtype == np.float64
    assert set(table["prediction"].unique()) <= {0, 1}
    np.testing.assert_array_equal(table["prediction"], (table["p_1"] > table["p_0"]).astype(int))
    assert not list(tmp_path.glob(".scored.tmp-*"))


def test_partitioned_directory_and_glob_give_the_same_model(tmp_path, cli):
    df = pd.read_parquet(PIMA)
    parts = tmp_path / "pima_parts"
    parts.mkdir()
    for i, chunk in enumerate(np.array_split(np.arange(len(df)), 3)):
        df.iloc[chunk].to_parquet(parts / f"part-{i}.parquet", index=False)
    outs = []
    for data in (str(parts), str(parts / "*.parquet"), PIMA):
        out = tmp_path / f"model{len(outs)}"
        r = cli("fit", data, "--target", "class", "--method", "sigmoid", "--output", out)
        assert r.returncode == 0, r
        scored = tmp_path / f"scored{len(outs)}"
        assert cli("score", out, PIMA, "--output", scored).returncode == 0
        outs.append(pq.read_table(scored).to_pandas())
    pd.testing.assert_frame_equal(outs[0], outs[1])
    # Folds are seeded from each row's place (file, row group, row), so the same rows written as one
    # file fall into other folds: a different, equally valid model.
    assert not outs[0].equals(outs[2])
    np.testing.assert_allclose(outs[0]["p_1"], outs[2]["p_1"], atol=0.15)


def test_adult_strings_positive_class_and_refit_mode(tmp_path, cli):
    out = tmp_path / "adult"
    r = cli("fit", ADULT_TRAIN, "--target", "class", "--positive", ">50K", "--learner", "decision_tree",
            "--learner-param", "max_depth=6", "--method", "sigmoid", "--mode", "refit", "--output", out)
    assert r.returncode == 0, r
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["labels"]["classes"] == ["<=50K", ">50K"]
    assert manifest["learner"]["params"]["max_depth"] == 6
    assert len(manifest["members"]) == 1
    kinds = {c["name"]: c["kind"] for c in manifest["features"]["columns"]}
    assert kinds["workclass"] == "categorical" and kinds["age"] == "numeric"
    m = cli("evaluate", out, ADULT_TEST, "--target", "class", "--json").json()
    assert m["auc"] > 0.85 and m["brier"] < m["raw"]["brier"] + 0.01


def test_calibration_data_table(tmp_path, cli):
    df = pd.read_parquet(PIMA)
    df.iloc[:500].to_parquet(tmp_path / "train.parquet")
    df.iloc[500:].to_parquet(tmp_path / "cal.parquet")
    out = tmp_path / "m"
    r = cli("fit", tmp_path / "train.parquet", "--target", "class", "--calibration-data", tmp_path / "cal.parquet",
            "--method", "sigmoid", "--output", out)
    assert r.returncode == 0, r
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["calibration_data"] is True and len(manifest["members"]) == 1


def test_multiclass_keeps_labels_and_improves_brier(tmp_path, cli):
    out = tmp_path / "digits"
    r = cli("fit", "data/pendigits_train.parquet", "--target", "class", "--learner", "gaussian_nb",
            "--method", "isotonic", "--cv", "3", "--output", out)
    assert r.returncode == 0, r
    m = cli("evaluate", out, "data/pendigits_test.parquet", "--target", "class", "--json").json()
    assert m["n_classes"] == 10
    assert m["brier"] < m["raw"]["brier"]
    assert m["calibration_loss"] + m["refinement_loss"] == pytest.approx(m["brier"], abs=1e-9)
    scored = tmp_path / "scored"
    assert cli("score", out, "data/pendigits_test.parquet", "--output", scored).returncode == 0
    t = pq.read_table(scored).to_pandas()
    assert [c for c in t.columns if c.startswith("p_")] == [f"p_{d}" for d in range(10)]
    np.testing.assert_allclose(t.filter(like="p_").sum(axis=1), 1.0, atol=1e-9)
    assert t["prediction"].dtype == np.int64


def test_sklearn_import_path_learner_round_trips(tmp_path, cli):
    """The estimator named by import path comes back from the files as itself (class, parameters,
    trees) and scores through the CLI as the loaded model does in Python."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    from calengine.model.artifact import load_model

    out = tmp_path / "hgb"
    r = cli("fit", PIMA, "--target", "class", "--learner", "sklearn.ensemble.HistGradientBoostingClassifier",
            "--learner-param", "max_iter=20", "--method", "sigmoid", "--cv", "3", "--output", out)
    assert r.returncode == 0, r
    model = load_model(out)
    assert len(model.members) == 3
    for member in model.members:
        est = member.learners[0].estimator_
        assert type(est) is HistGradientBoostingClassifier
        assert est.max_iter == 20 and 1 <= est.n_iter_ <= 20 and len(est._predictors) == est.n_iter_
    scored = tmp_path / "scored"
    assert cli("score", out, PIMA, "--output", scored).returncode == 0
    df = pd.read_parquet(PIMA)
    expected = model.predict_proba_features(model.encoder.transform(df))[:, 1]
    np.testing.assert_array_equal(pq.read_table(scored).column("p_1").to_numpy(), expected)
    m = cli("evaluate", out, PIMA, "--target", "class", "--json")
    assert m.returncode == 0, m
    assert m.json()["auc"] > 0.8


def test_overwrite_replaces_only_a_model_directory(tmp_path, cli, pima_model):
    out = tmp_path / "m"
    assert cli("fit", PIMA, "--target", "class", "--method", "sigmoid", "--output", out).returncode == 0
    assert_one_line_error(cli("fit", PIMA, "--target", "class", "--output", out), "already exists", "--overwrite")
    r = cli("fit", PIMA, "--target", "class", "--method", "isotonic", "--output", out, "--overwrite")
    assert r.returncode == 0, r
    assert json.loads((out / "manifest.json").read_text())["method"]["name"] == "isotonic"
    other = tmp_path / "not_a_model"
    other.mkdir()
    (other / "keep.txt").write_text("precious")
    assert_one_line_error(
        cli("fit", PIMA, "--target", "class", "--output", other, "--overwrite"), "not a calengine model"
    )
    assert (other / "keep.txt").read_text() == "precious"


def test_help_is_cheap_because_heavy_libraries_load_lazily():
    code = (
        "import sys, calengine.cli as c; c.build_parser().format_help();"
        "print([m for m in ('numpy','pandas','dask','distributed','sklearn','pyarrow') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["fit", PIMA, "--target", "clas", "--output", "{tmp}/m"], ["'clas'", "did you mean 'class'"]),
        (["fit", PIMA, "--target", "class", "--features", "plasma_glucose,bmi,nosuch", "--output", "{tmp}/m"], ["nosuch"]),
        (["fit", "pyproject.toml", "--target", "class", "--output", "{tmp}/m"], ["not a Parquet file"]),
        (["fit", "{tmp}/missing.parquet", "--target", "class", "--output", "{tmp}/m"], ["does not exist"]),
        (["fit", PIMA, "--target", "class", "--learner", "nosuch", "--output", "{tmp}/m"],
         ["unknown learner 'nosuch'", "gaussian_nb"]),
        (["fit", PIMA, "--target", "class", "--method", "nosuch", "--output", "{tmp}/m"],
         ["unknown calibrator 'nosuch'", "isotonic"]),
        (["fit", PIMA, "--target", "class", "--learner-param", "nosuch=1", "--output", "{tmp}/m"],
         ["no parameter 'nosuch'"]),
        (["fit", PIMA, "--target", "class", "--learner-param", "max_depth", "--output", "{tmp}/m"], ["KEY=VALUE"]),
        (["fit", PIMA, "--target", "class", "--positive", "7", "--output", "{tmp}/m"], ["--positive", "'0', '1'"]),
        (["fit", PIMA, "--target", "class", "--cv", "1", "--output", "{tmp}/m"], ["--cv"]),
        (["fit", "data/hepatitis.parquet", "--target", "class", "--cv", "40", "--output", "{tmp}/m"], ["rarest class"]),
        (["fit", PIMA, "--target", "class", "--method", "probing", "--method-param", "t=0", "--output", "{tmp}/m"], ["t must"]),
        (["fit", PIMA, "--target", "class", "--method", "probing", "--method-param", "loss=hinge", "--output", "{tmp}/m"], ["loss"]),
        (["fit", PIMA, "--target", "class", "--method", "probing", "--method-param", "t=4",
          "--method-param", "batch=5", "--output", "{tmp}/m"], ["batch"]),
        (["fit", PIMA, "--target", "class", "--cluster", "tcp://127.0.0.1:9", "--output", "{tmp}/m"], ["scheduler"]),
        (["fit", PIMA, "--output", "{tmp}/m"], ["--target"]),
        (["evaluate", "{tmp}", PIMA, "--target", "class"], ["not a calengine model directory"]),
        (["fit", PIMA, "--target", "class", "--learner", "sklearn.svm.SVC", "--learner-param", "C=-1",
          "--output", "{tmp}/m"], ["learner 'sklearn' failed to fit", "'C'"]),
        (["fit", PIMA, "--target", "class", "--combiner-param", "tol=1", "--output", "{tmp}/m"], ["--multiclass"]),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_output(args, fragments, cli, tmp_path):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert_one_line_error(cli(*args), *fragments)
    assert not (tmp_path / "m").exists()
    assert not list(tmp_path.glob(".m.tmp-*"))


def test_one_class_target_is_refused(tmp_path, cli):
    df = pd.read_parquet(PIMA)
    df[df["class"] == 1].to_parquet(tmp_path / "one.parquet")
    assert_one_line_error(
        cli("fit", tmp_path / "one.parquet", "--target", "class", "--output", tmp_path / "m"), "only one class (the value 1)"
    )


def test_incompatible_model_version_is_refused(pima_model, tmp_path, cli):
    import shutil

    copy = tmp_path / "old"
    shutil.copytree(pima_model, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["format_version"] = "99.0"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert_one_line_error(cli("score", copy, PIMA, "--output", tmp_path / "s"), "incompatible", "refit")
    assert not (tmp_path / "s").exists()


def test_score_with_a_missing_column_writes_nothing(pima_model, tmp_path, cli):
    df = pd.read_parquet(PIMA).drop(columns=["plasma_glucose"])
    df.to_parquet(tmp_path / "nog.parquet")
    assert_one_line_error(cli("score", pima_model, tmp_path / "nog.parquet", "--output", tmp_path / "s"), "plasma_glucose")
    assert not (tmp_path / "s").exists()


def test_score_failure_midway_leaves_no_partial_table(pima_model, tmp_path, cli):
    """The second partition holds text in a numeric column: the first part was already written to the
    staging directory when the second fails, and the user must see neither."""
    df = pd.read_parquet(PIMA)
    parts = tmp_path / "parts"
    parts.mkdir()
    df.iloc[:400].to_parquet(parts / "a.parquet")
    bad = df.iloc[400:].astype({"plasma_glucose": "str"})
    bad["plasma_glucose"] = "high"
    bad.to_parquet(parts / "b.parquet")
    r = cli("score", pima_model, parts, "--output", tmp_path / "s")
    assert_one_line_error(r, "plasma_glucose")
    assert not (tmp_path / "s").exists()
    assert not list(tmp_path.glob(".s.tmp-*"))


def test_plugins_json_lists_the_builtins(cli):
    r = cli("plugins", "--json")
    assert r.returncode == 0, r
    payload = r.json()
    by_name = {p["name"]: p for p in payload["plugins"]}
    learners = by_name["calengine-builtins:learners"]
    assert learners["distribution"] == "calengine-builtins" and learners["error"] is None
    assert "decision_tree" in learners["registered"]["learners"]
    assert "isotonic" in by_name["calengine-builtins:calibrators"]["registered"]["calibrators"]
    assert "normalize" in by_name["calengine-builtins:combiners"]["registered"]["combiners"]


def test_progress_is_drawn_on_a_terminal_only(tmp_path):
    """stderr on a pseudo-terminal gets a progress bar; piped stderr gets none (and --quiet wins)."""
    import os
    import pty

    def run(out, *flags, tty):
        args = [sys.executable, "-P", "-m", "calengine", *flags, "fit", PIMA, "--target", "class", "--output", str(out)]
        if not tty:
            return subprocess.run(args, capture_output=True, text=True, timeout=300).stderr
        master, slave = pty.openpty()
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=slave)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=300)
        os.close(master)
        return b"".join(chunks).decode(errors="replace")

    assert "held-out scores" in run(tmp_path / "a", tty=True)
    assert "1/1" in run(tmp_path / "b", tty=True)
    assert "held-out scores" not in run(tmp_path / "c", tty=False)
    assert "held-out scores" not in run(tmp_path / "d", "--quiet", tty=True)
    assert "held-out scores" in run(tmp_path / "e", "--progress", tty=False)
