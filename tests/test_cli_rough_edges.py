"""The CLI's rough edges of issue 11: flag positions, hive partitions, intervals, labels, cv evaluation."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import assert_one_line_error, run_cli

REPO = Path(__file__).resolve().parents[1]
PIMA = str(REPO / "data" / "pima.parquet")


def test_global_flags_work_after_the_subcommand_too(tmp_path):
    """``--progress``/``--quiet``/``--strict-plugins`` are accepted on either side of the subcommand."""
    after = run_cli("fit", PIMA, "--target", "class", "--output", tmp_path / "a", "--progress")
    assert after.returncode == 0, after
    assert "held-out scores" in after.stderr  # progress drawn although stderr is a pipe
    quiet = run_cli("fit", PIMA, "--target", "class", "--output", tmp_path / "b", "--quiet", "--cv", "3")
    assert quiet.returncode == 0, quiet
    assert "held-out scores" not in quiet.stderr
    before = run_cli("--progress", "fit", PIMA, "--target", "class", "--output", tmp_path / "c", "--cv", "3")
    assert before.returncode == 0 and "held-out scores" in before.stderr, before
    strict = run_cli("plugins", "--strict-plugins", "--json")
    assert strict.returncode == 0, strict
    assert_one_line_error(run_cli("fit", PIMA, "--target", "class", "--output", tmp_path / "d", "--bogus"),
                          "unrecognized arguments: --bogus")


@pytest.fixture(scope="module")
def nb_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("nb") / "m"
    r = run_cli("--quiet", "fit", PIMA, "--target", "class", "--cv", "3", "--output", out)
    assert r.returncode == 0, r
    return out


def test_intervals_on_a_model_without_intervals_is_one_line(nb_model, tmp_path):
    r = run_cli("score", nb_model, PIMA, "--output", tmp_path / "s", "--intervals")
    assert_one_line_error(r, "--intervals applies to two-class Probing models", "gaussian_nb + isotonic")
    assert not (tmp_path / "s").exists()
