"""The Python API's ``evaluate_models`` and ``score_table`` give what ``calengine evaluate`` and
``calengine score`` print and write: the CLI is a shell over them, and its output on a shipped
table is the oracle (byte for byte for evaluate's text and JSON)."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

import calengine
from calengine.errors import DataError, ParameterError

from cli_helpers import REPO, run_cli

PIMA = REPO / "data" / "pima.parquet"
COSTS = {"classes": [0, 1], "costs": [[0, 1], [5, 0]]}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    base = tmp_path_factory.mktemp("api")
    out = {}
    for name, args in {"iso": ["--method", "isotonic"], "sig": ["--method", "sigmoid", "--mode", "refit"]}.items():
        r = run_cli("--quiet", "fit", PIMA, "--target", "class", "--cv", "3", "--workers", "1", *args,
                    "--output", base / name)
        assert r.returncode == 0, r
        out[name] = base / name
    return out


@pytest.mark.parametrize("columns", [200, 60])
def test_evaluate_models_text_and_json_are_the_clis_stdout(models, tmp_path, columns):
    """Two models and a cost matrix: the text at the terminal's width (200: models across; 60: models
    as rows with a numbered legend) and the JSON are the CLI's stdout to the byte."""
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps(COSTS))
    dirs = [str(models["iso"]), str(models["sig"])]
    cli_args = ["--quiet", "evaluate", *dirs, PIMA, "--target", "class", "--cost-matrix", costs]
    text = run_cli(*cli_args, env={"COLUMNS": str(columns)})
    as_json = run_cli(*cli_args, "--json")
    assert text.returncode == 0 and as_json.returncode == 0, (text, as_json)
    ev = calengine.evaluate_models(dirs, str(PIMA), "class", cost_matrix=str(costs))
    assert ev.to_text(width=columns) + "\n" == text.stdout
    assert json.dumps(ev.to_json()) + "\n" == as_json.stdout
    assert ("[1] raw gaussian_nb (iso)" in text.stdout) == (columns == 60)
    assert "decisions of gaussian_nb + sigmoid [refit] (sig) under the cost matrix" in text.stdout
    assert [m["label"] for m in ev.to_json()["models"]] == ev.labels


def test_evaluate_models_bootstrap_band_and_report_match_the_cli(models, tmp_path):
    """A loaded model with a bootstrap band: the JSON (band included) is the CLI's, and the report
    names the same directory layout; the band does not depend on the threads the CLI used."""
    r = run_cli("--quiet", "evaluate", models["sig"], PIMA, "--target", "class", "--bootstrap", "20", "--seed", "3",
                "--json", "--workers", "1", "--report", tmp_path / "cli_report")
    assert r.returncode == 0, r
    model = calengine.load_model(models["sig"])
    ev = calengine.evaluate_models(model, PIMA, "class", bootstrap=20, seed=3, report=tmp_path / "api_report")
    assert json.dumps(ev.to_json()) + "\n" == r.stdout
    assert ev.to_json()["calibration_band"]["B"] == 20
    assert sorted(p.name for p in (tmp_path / "api_report").iterdir()) == \
        sorted(p.name for p in (tmp_path / "cli_report").iterdir())
    assert ev.to_text(width=100).endswith(f"report: {tmp_path / 'api_report' / 'index.html'}")


def test_evaluate_models_takes_loaded_models_a_dataframe_and_a_client(models):
    """Loaded models are named by their place, a DataFrame is evaluated like the file it came from,
    and a client the caller owns is used and left open."""
    from calengine.runtime.thread_client import ThreadClient

    by_path = calengine.evaluate_models([models["iso"], models["sig"]], PIMA, "class")
    loaded = [calengine.load_model(models["iso"]), calengine.load_model(models["sig"])]
    with ThreadClient(2) as client:
        by_frame = calengine.evaluate_models(loaded, pd.read_parquet(PIMA), "class", client=client)
        assert client.submit(sum, [1, 2]).result() == 3  # still open
    assert by_frame.labels == ["gaussian_nb + isotonic (model 1)", "gaussian_nb + sigmoid [refit] (model 2)"]
    for a, b in zip(by_path.results, by_frame.results):
        assert a["calibrated"]["n"] == b["calibrated"]["n"] == 768
        for key in ("brier", "log_loss", "auc", "ece"):
            assert a["calibrated"][key] == pytest.approx(b["calibrated"][key], rel=1e-12)
            assert a["raw"][key] == pytest.approx(b["raw"][key], rel=1e-12)


def test_evaluate_models_refuses_bad_input_before_any_work(models, tmp_path):
    report = tmp_path / "taken"
    report.mkdir()
    (report / "keep.txt").write_text("x")
    with pytest.raises(ParameterError, match="alpha must be a number strictly between 0 and 1"):
        calengine.evaluate_models(models["iso"], PIMA, "class", alpha=1.5)
    with pytest.raises(ParameterError, match="at least 2 replicates"):
        calengine.evaluate_models(models["iso"], PIMA, "class", bootstrap=1)
    with pytest.raises(ParameterError, match="at least one model"):
        calengine.evaluate_models([], PIMA, "class")
    with pytest.raises(DataError, match="already exists and is not empty"):
        calengine.evaluate_models(models["iso"], PIMA, "class", report=report)
    with pytest.raises(DataError, match="'clas'"):
        calengine.evaluate_models(models["iso"], PIMA, "clas")
    assert (report / "keep.txt").read_text() == "x"


def test_score_table_writes_what_score_and_decide_write(models, tmp_path):
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps(COSTS))
    for extra, out in (([], "scores"), (["--cost-matrix", costs], "decisions")):
        r = run_cli("--quiet", "score", models["iso"], PIMA, "--keep", "class", *extra, "--output", tmp_path / f"cli_{out}")
        assert r.returncode == 0, r
        n = calengine.score_table(models["iso"], PIMA, tmp_path / f"api_{out}", keep=["class"],
                                  cost_matrix=COSTS if extra else None)
        assert n == 768
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / f"api_{out}"), pd.read_parquet(tmp_path / f"cli_{out}"))
    assert "decision" in pd.read_parquet(tmp_path / "api_decisions").columns
    with pytest.raises(ParameterError, match="has no intervals"):
        calengine.score_table(calengine.load_model(models["iso"]), PIMA, tmp_path / "x", intervals=True)
    with pytest.raises(ParameterError, match=r"reject_below must be a probability in \[0, 1\]"):
        calengine.score_table(models["iso"], PIMA, tmp_path / "x", reject_below=2.0)
    with pytest.raises(ParameterError, match="would collide with an output column"):
        calengine.score_table(models["iso"], PIMA, tmp_path / "x", keep=["p_1"])
    assert not (tmp_path / "x").exists()


def test_old_cli_import_paths_still_work_and_help_stays_lean():
    """What ``calengine.cli`` exported as one module is importable from the package, the same
    objects as in their new homes, without importing them for ``--help``; ``python -m calengine.cli``
    runs the CLI."""
    from calengine import cli
    from calengine.metrics import evaluation
    from calengine.metrics.report import text
    from calengine.plugins import plugin_requirements
    from calengine.cli import METRIC_ORDER, SHORT_METRIC, format_decisions, format_drift, format_error_reject
    from calengine.cli import _model_labels, _plugin_requirements, format_metrics_table, parse_params

    assert format_metrics_table is text.format_metrics_table and METRIC_ORDER is text.METRIC_ORDER
    assert (SHORT_METRIC, format_decisions, format_drift, format_error_reject) == (
        text.SHORT_METRIC, text.format_decisions, text.format_drift, text.format_error_reject)
    assert _model_labels is evaluation.model_labels and _plugin_requirements is plugin_requirements
    assert parse_params(["a=1", "b=(1,2)"], "--x") == {"a": 1, "b": (1, 2)}
    with pytest.raises(AttributeError):
        cli.no_such_name  # noqa: B018
    probe = ("import sys, calengine.cli as c; c.build_parser().format_help();"
             "print(sorted(m for m in sys.modules if m.startswith('calengine.metrics') or m == 'numpy'))")
    out = subprocess.run([sys.executable, "-P", "-c", probe], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.strip() == "[]"
    r = subprocess.run([sys.executable, "-P", "-m", "calengine.cli", "--version"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0 and r.stdout.strip() == calengine.__version__, r
