"""The CLI's rough edges of issue 11: flag positions, hive partitions, intervals, labels, cv evaluation."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import assert_one_line_error, run_cli

REPO = Path(__file__).resolve().parents[2]
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


@pytest.fixture(scope="module")
def hive(tmp_path_factory):
    """pima written by pyarrow as a Hive-partitioned dataset: ``class=0/…``, ``class=1/…`` under
    ``by_class``, and ``band=young/…``, ``band=old/…`` (a feature column) under ``by_band``."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("hive")
    df = pd.read_parquet(PIMA)
    pq.write_to_dataset(pa.Table.from_pandas(df, preserve_index=False), root / "by_class", partition_cols=["class"])
    banded = df.assign(band=(df["age"] >= 30).map({True: "old", False: "young"}))
    pq.write_to_dataset(pa.Table.from_pandas(banded, preserve_index=False), root / "by_band", partition_cols=["band"])
    assert not any("class" in pq.read_schema(f).names for f in (root / "by_class").rglob("*.parquet"))
    return root


def test_hive_partition_keys_are_columns_for_target_features_and_scoring(hive, tmp_path):
    import json

    import pandas as pd

    # the target is a partition key (partition-native route: the file holds no 'class' column at all)
    r = run_cli("--quiet", "fit", hive / "by_class", "--target", "class", "--cv", "3", "--output", tmp_path / "a")
    assert r.returncode == 0, r
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["labels"]["classes"] == [0, 1]  # typed as integers, like the original column
    assert "768 rows" in r.stderr
    # a partition key is a feature like any other, on the in-memory route too
    r = run_cli("--quiet", "fit", hive / "by_band", "--target", "class", "--cv", "3", "--route", "in-memory",
                "--learner", "logistic_regression", "--output", tmp_path / "b")
    assert r.returncode == 0, r
    columns = json.loads((tmp_path / "b" / "manifest.json").read_text())["features"]["columns"]
    band = [c for c in columns if c["name"] == "band"]
    assert band and band[0]["kind"] == "categorical" and set(band[0]["categories"]) == {"old", "young"}
    # scoring reads the key back, and --keep copies it
    r = run_cli("--quiet", "score", tmp_path / "b", hive / "by_band", "--output", tmp_path / "s", "--keep", "band")
    assert r.returncode == 0, r
    scored = pd.read_parquet(tmp_path / "s")
    assert len(scored) == 768 and set(scored["band"]) == {"old", "young"}
    # evaluating on the class-partitioned table finds its partition-key target
    r = run_cli("evaluate", tmp_path / "a", hive / "by_class", "--target", "class", "--json")
    assert r.returncode == 0, r
    assert r.json()["n"] == 768 and r.json()["auc"] > 0.75


def test_cv_reports_mean_and_spread_over_outer_folds(tmp_path):
    """``calengine cv``: K outer folds, each a full fit on the others scored on the held-out rows."""
    import numpy as np

    import calengine

    r = run_cli("cv", PIMA, "--target", "class", "--folds", "3", "--cv", "3", "--json")
    assert r.returncode == 0, r
    out = r.json()
    assert out["folds"] == 3 and out["rows"] == 768
    assert sum(f["n"] for f in out["per_fold"]) == 768  # every row held out exactly once
    for kind in ("calibrated", "raw"):
        for metric in ("brier", "log_loss", "auc", "ece"):
            values = [f[kind][metric] for f in out["per_fold"]]
            assert out["summary"][kind][metric]["mean"] == pytest.approx(np.mean(values))
            assert out["summary"][kind][metric]["std"] == pytest.approx(np.std(values, ddof=1))
            assert out["summary"][kind][metric]["std"] > 0  # the folds really differ
    # isotonic calibration of gaussian_nb on pima: better calibrated than the raw learner on held-out rows
    assert out["summary"]["calibrated"]["ece"]["mean"] < out["summary"]["raw"]["ece"]["mean"]
    # the CORP Brier terms are summarised like the flat metrics (mcb - dsc + unc = brier in every fold)
    for kind in ("calibrated", "raw"):
        for term in ("mcb", "dsc", "unc"):
            values = [f[kind]["corp_brier"][term] for f in out["per_fold"]]
            assert out["summary"][kind][f"brier_{term}"]["mean"] == pytest.approx(np.mean(values))
    assert out["summary"]["calibrated"]["brier_mcb"]["mean"] < out["summary"]["raw"]["brier_mcb"]["mean"]
    # the Python function the CLI wraps gives the same figures
    py = calengine.cross_validate_table(PIMA, "class", folds=3, cv=3)
    assert py.summary["calibrated"]["brier"]["mean"] == pytest.approx(out["summary"]["calibrated"]["brier"]["mean"])
    text = run_cli("cv", PIMA, "--target", "class", "--folds", "3", "--cv", "3")
    assert text.returncode == 0 and "3-fold cross-validation on 768 rows" in text.stdout, text
    rows = {line.split()[0]: line.split()[1:] for line in text.stdout.splitlines()[3:]}
    assert float(rows["brier_mcb"][0]) == pytest.approx(out["summary"]["calibrated"]["brier_mcb"]["mean"], abs=1e-4)
    assert max(len(line) for line in text.stdout.splitlines()) <= 100
    assert_one_line_error(run_cli("cv", PIMA, "--target", "class", "--folds", "1"), "--folds must be at least 2")
    assert_one_line_error(run_cli("cv", REPO / "data" / "hepatitis.parquet", "--target", "class", "--folds", "40"),
                          "the rarest class has 32 rows, fewer than --folds 40")


def test_evaluate_labels_tell_models_apart_and_many_models_fit_the_terminal(nb_model, tmp_path):
    from calengine.model.artifact import load_model
    from calengine.cli import _model_labels

    refit, sig = tmp_path / "refit", tmp_path / "sig"
    assert run_cli("--quiet", "fit", PIMA, "--target", "class", "--cv", "3", "--mode", "refit",
                   "--output", refit).returncode == 0
    assert run_cli("--quiet", "fit", PIMA, "--target", "class", "--cv", "3", "--method", "sigmoid",
                   "--output", sig).returncode == 0
    pen = tmp_path / "pen"
    r = run_cli("--quiet", "fit", REPO / "data" / "pendigits_train.parquet", "--target", "class", "--cv", "3",
                "--multiclass", "one_vs_all:least_squares", "--output", pen)
    assert r.returncode == 0, r
    assert _model_labels([load_model(pen)], [pen]) == ["gaussian_nb + isotonic [one_vs_all:least_squares]"]
    r = run_cli("evaluate", nb_model, refit, sig, PIMA, "--target", "class", env={"COLUMNS": "80"})
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    assert max(map(len, lines)) <= 80, max(lines, key=len)
    assert "[2] gaussian_nb + isotonic (m)" in lines and "[4] gaussian_nb + isotonic [refit] (refit)" in lines
    assert "[6] gaussian_nb + sigmoid (sig)" in lines
    header = next(line for line in lines if line.startswith("model"))
    assert header.split()[:3] == ["model", "n", "brier"]  # models are rows, metrics columns
    # the error-reject table names the calibrated models by the same numbers, one row each
    reject = lines[lines.index("error rate after rejecting the least confident rows (columns: reject rate)") + 2:]
    assert [line.split()[0] for line in reject] == ["[2]", "[4]", "[6]"]
    wide = run_cli("evaluate", nb_model, PIMA, "--target", "class", env={"COLUMNS": "80"})
    assert wide.stdout.startswith("metric")  # one model still reads metrics down


def test_a_continuous_target_says_so(tmp_path):
    """bmi (non-integer) and plasma_glucose (integer-valued, 136 values) are measurements, not classes."""
    import numpy as np
    import pandas as pd

    import calengine

    assert_one_line_error(run_cli("fit", PIMA, "--target", "bmi", "--output", tmp_path / "a"),
                          "target 'bmi' looks continuous", "non-integer ones such as")
    assert_one_line_error(run_cli("fit", PIMA, "--target", "plasma_glucose", "--output", tmp_path / "b"),
                          "looks continuous", "fewer than --cv 5 rows")
    df = pd.read_parquet(PIMA)
    X = df.drop(columns=["plasma_glucose", "class"]).to_numpy(dtype=float)
    with pytest.raises(ValueError, match=r"looks continuous: 136 distinct numeric values, \d+ of them with fewer than cv=5"):
        calengine.CalibratedClassifier().fit(X, df["plasma_glucose"].to_numpy())
    with pytest.raises(ValueError, match="y' looks continuous"):
        calengine.CalibratedClassifier().fit(X, df["bmi"].to_numpy() + 0.5)
    assert np.isfinite(calengine.CalibratedClassifier(cv=3).fit(X, df["class"]).predict_proba(X)).all()


def test_python_warnings_are_one_warning_line_each(tmp_path):
    """A library's warning (scikit-learn's multi-line convergence advice, raised in every fold's fit)
    reaches the terminal as one ``warning:`` line naming its category, once: not Python's two-line
    developer format with the file, line number and source line."""
    out = tmp_path / "m"
    r = run_cli("fit", PIMA, "--target", "class", "--learner", "logistic_regression", "--learner-param", "max_iter=1",
                "--method", "sigmoid", "--output", out)
    assert r.returncode == 0, r
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    warned = [line for line in lines if line.startswith("warning: ")]
    assert len(warned) == 1, r.stderr
    assert warned[0].startswith("warning: lbfgs failed to converge") and warned[0].endswith("(ConvergenceWarning)")
    assert [line for line in lines if line not in warned and not line.startswith("fitted ")] == [], r.stderr
    assert (out / "manifest.json").exists()
