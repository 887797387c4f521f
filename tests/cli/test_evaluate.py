"""``calengine evaluate --metrics`` (issue 43 §4) on real Parquet: the selected keys of the full run's
JSON, the text without the sections not selected, and one ``error:`` line for a bad selection."""

from __future__ import annotations

import pytest

from cli_helpers import REPO, assert_one_line_error, run_cli

ADULT_TRAIN = REPO / "data" / "adult" / "train.parquet"
ADULT_TEST = REPO / "data" / "adult" / "test.parquet"
PEERS = "brier,log_loss,auc,ece,ece_equal_mass,smece"


@pytest.fixture(scope="module")
def adult_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("adult") / "model"
    r = run_cli("--quiet", "fit", ADULT_TRAIN, "--target", "class", "--workers", "1", "--output", out)
    assert r.returncode == 0, r
    return out


def test_metrics_prints_the_full_runs_keys_it_names(adult_model):
    full = run_cli("evaluate", adult_model, ADULT_TEST, "--target", "class", "--json").json()
    got = run_cli("evaluate", adult_model, ADULT_TEST, "--target", "class", "--json", "--metrics",
                  f"{PEERS},drift,raw").json()
    names = set(PEERS.split(","))
    assert got == {**{k: v for k, v in full.items() if k in names | {"n", "n_classes", "model", "drift"}},
                   "raw": {k: v for k, v in full["raw"].items() if k in names | {"n", "n_classes"}}}


def test_metrics_text_has_only_what_was_selected(adult_model):
    r = run_cli("evaluate", adult_model, ADULT_TEST, "--target", "class", "--metrics", "auc,ici",
                env={"COLUMNS": "120"})
    assert r.returncode == 0, r
    rows = [line.split()[0] for line in r.stdout.splitlines()[2:] if line.strip()]
    assert rows == ["n", "auc", "ici"], r.stdout  # no raw learner's column, drift line or error-reject table
    assert "raw learner" not in r.stdout


@pytest.mark.parametrize("argv, fragments", [
    (["--metrics", "brier,briar"], ["--metrics", "'briar'", "known: n, n_classes, brier,"]),
    (["--metrics", "brier,,auc"], ["--metrics", "metric names"]),
    (["--metrics", "auc", "--report", "REPORT"], ["--report", "--metrics"]),
])
def test_a_bad_selection_is_one_line(adult_model, tmp_path, argv, fragments):
    argv = [str(tmp_path / "r") if a == "REPORT" else a for a in argv]
    r = run_cli("evaluate", adult_model, ADULT_TEST, "--target", "class", *argv)
    assert_one_line_error(r, *fragments)
    assert not (tmp_path / "r").exists()
