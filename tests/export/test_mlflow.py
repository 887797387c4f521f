"""``calengine export --format mlflow`` and :mod:`calengine.mlflow` (issue 26 §3): an MLflow model whose
pyfunc, loaded through ``mlflow.pyfunc.load_model`` from a local file-store tracking URI, gives
``calengine score``'s probabilities; no pickle anywhere; pinned requirements; the same files every time
apart from what MLflow stamps into ``MLmodel``."""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

import calengine
from calengine.errors import CalengineError, DataError
from cli_helpers import REPO, assert_one_line_error

mlflow = pytest.importorskip("mlflow")
import mlflow.pyfunc  # noqa: E402

PIMA = REPO / "data" / "pima.parquet"
#: what MLflow writes into MLmodel that is not a function of the model
MLFLOW_STAMPS = ("utc_time_created", "model_uuid")


@pytest.fixture(autouse=True)
def _quiet_mlflow(monkeypatch):
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture(scope="module")
def pima_model(tmp_path_factory):
    """A Pima model with a learner (gaussian_nb + isotonic), fitted and scored by the CLI."""
    from cli_helpers import run_cli

    base = tmp_path_factory.mktemp("mlflow")
    r = run_cli("--quiet", "fit", PIMA, "--target", "class", "--workers", "1", "--method", "isotonic",
                "--output", base / "m")
    assert r.returncode == 0, r
    r = run_cli("--quiet", "score", base / "m", PIMA, "--output", base / "scored")
    assert r.returncode == 0, r
    return base / "m", pd.read_parquet(base / "scored")


def _files(folder) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_cli_export_loads_as_pyfunc_and_scores_as_calengine_score(tmp_path, cli, pima_model):
    model_dir, scored = pima_model
    r = cli("export", model_dir, "--format", "mlflow", "--output", tmp_path / "mlf")
    assert r.returncode == 0, r
    table = pd.read_parquet(PIMA).drop(columns="class")
    table.index = np.arange(100, 100 + len(table))  # the pyfunc keeps the caller's index
    got = mlflow.pyfunc.load_model(str(tmp_path / "mlf")).predict(table)
    assert list(got.columns) == [c for c in scored.columns if c.startswith("p_")]
    assert got.index.equals(table.index)
    for c in got.columns:
        np.testing.assert_allclose(got[c].to_numpy(), scored[c].to_numpy(), rtol=0, atol=1e-12)
    # no pickle: the pyfunc names a loader module, and no stored file is a pickle stream
    mlmodel = yaml.safe_load((tmp_path / "mlf" / "MLmodel").read_text())
    assert mlmodel["flavors"]["python_function"]["loader_module"] == "calengine.mlflow"
    assert "python_model" not in mlmodel["flavors"]["python_function"]
    files = _files(tmp_path / "mlf")
    assert not [n for n, b in files.items() if n.endswith((".pkl", ".pickle")) or b[:1] == b"\x80"]
    # the stored model is the source model, byte for byte, and the manifest beside names its hash
    source = json.loads((model_dir / "manifest.json").read_text())
    assert files["data/model/manifest.json"] == (model_dir / "manifest.json").read_bytes()
    assert mlmodel["flavors"]["calengine"]["model_content_hash"] == source["content_hash"]
    manifest = json.loads((tmp_path / "mlf.manifest.json").read_text())
    assert manifest["format"] == "mlflow" and manifest["model_content_hash"] == source["content_hash"]
    # requirements: calengine and the plugin distributions the model was fitted with, pinned
    from importlib import metadata

    reqs = (tmp_path / "mlf" / "requirements.txt").read_text().split()
    dists = {o["distribution"] for o in source["plugins"].values()} - {"calengine"}
    assert dists and f"calengine=={calengine.__version__}" in reqs
    assert {f"{d}=={metadata.version(d)}" for d in dists} <= set(reqs)
    assert manifest["requirements"] == reqs
    # --overwrite replaces an MLflow model; a directory that is not one is never removed
    from calengine.export.write import export_model

    (tmp_path / "mlf" / "data" / "model" / "manifest.json").write_text("{}")
    export_model(model_dir, "mlflow", tmp_path / "mlf", overwrite=True)
    assert (tmp_path / "mlf" / "data" / "model" / "manifest.json").read_bytes() == (model_dir / "manifest.json").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlf", "mlf.manifest.json"]  # no staging left behind
    (tmp_path / "other").mkdir()
    assert_one_line_error(cli("export", model_dir, "--format", "mlflow", "--output", tmp_path / "other", "--overwrite"),
                          "not an MLflow model")
    assert (tmp_path / "other").is_dir()


def test_same_model_same_files_except_mlflows_stamps(tmp_path, pima_model):
    from calengine.mlflow import save_model

    model_dir, _ = pima_model
    for name in ("a", "b"):
        save_model(model_dir, tmp_path / name)
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert a.keys() == b.keys() and {n for n in a if a[n] != b[n]} == {"MLmodel"}
    ma, mb = (yaml.safe_load(x["MLmodel"]) for x in (a, b))
    assert {k for k in ma if ma[k] != mb[k]} == set(MLFLOW_STAMPS)


def test_log_model_to_a_file_store_and_load_it_back(tmp_path, monkeypatch):
    """Multiclass, through a run on a local file store: ``mlflow.pyfunc.load_model`` on the logged
    model's URI predicts what the model predicts, and ``calengine.mlflow.load_model`` returns the model."""
    from calengine.mlflow import load_model, log_model

    rng = np.random.default_rng(5)
    z = rng.normal(size=(600, 3))
    y = np.array(["a", "b", "c"])[np.argmax(z + rng.normal(size=z.shape), axis=1)]
    df = pd.DataFrame({"z_a": z[:, 0], "z_b": z[:, 1], "z_c": z[:, 2], "y": y})
    model = calengine.calibrate_scores(df, "y", ["z_a", "z_b", "z_c"], method="sigmoid", score_kind="logit",
                                       output=tmp_path / "m")
    # MLflow 3 keeps its file store only behind this switch (a database store needs the full mlflow)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri((tmp_path / "store").as_uri())
    try:
        with mlflow.start_run():
            info = log_model(tmp_path / "m", "calibrated")
        test = df.drop(columns="y").iloc[::7]
        got = mlflow.pyfunc.load_model(info.model_uri).predict(test)
        want = model.predict_frame(test)
        assert list(got.columns) == ["p_a", "p_b", "p_c"]
        np.testing.assert_allclose(got.to_numpy(), want[["p_a", "p_b", "p_c"]].to_numpy(), rtol=0, atol=1e-12)
        loaded = load_model(info.model_uri)
        assert np.array_equal(loaded.predict_frame(test)["p_b"].to_numpy(), want["p_b"].to_numpy())
    finally:
        mlflow.set_tracking_uri(None)


def test_bad_input_and_a_missing_mlflow_are_one_line_errors(tmp_path, pima_model, monkeypatch):
    from calengine.export import mlflow as flavor
    from calengine.mlflow import save_model

    model_dir, _ = pima_model
    save_model(model_dir, tmp_path / "x")
    pyfunc = flavor.load_pyfunc(tmp_path / "x" / "data" / "model")
    with pytest.raises(DataError, match="pandas DataFrame"):
        pyfunc.predict(np.zeros((2, 8)))
    with pytest.raises(DataError, match="without the 'calengine' flavor"):
        flavor._flavor_conf(_strip_flavor(tmp_path / "x"))
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(CalengineError, match=r"pip install 'calengine\[mlflow\]'"):
        save_model(model_dir, tmp_path / "y")
    assert not (tmp_path / "y").exists()


def _strip_flavor(folder):
    mlmodel = yaml.safe_load((folder / "MLmodel").read_text())
    del mlmodel["flavors"]["calengine"]
    (folder / "MLmodel").write_text(yaml.safe_dump(mlmodel))
    return folder
