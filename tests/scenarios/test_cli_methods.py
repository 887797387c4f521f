"""CLI end to end for code matrices, text columns, combining rules, the reject option and reports."""

from __future__ import annotations

from pathlib import Path

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from cli_helpers import assert_one_line_error

DATA = Path(__file__).resolve().parents[2] / "data"  # not relative to the working directory

DIGITS = str(DATA / "pendigits_train.parquet")


@pytest.fixture(scope="module")
def digits_small(tmp_path_factory):
    path = tmp_path_factory.mktemp("digits") / "digits.parquet"
    pd.read_parquet(DIGITS).sample(1500, random_state=0).to_parquet(path)
    return path


def test_code_matrix_multiclass_end_to_end(cli, tmp_path, digits_small):
    out = tmp_path / "pairs"
    r = cli("fit", digits_small, "--target", "class", "--learner", "gaussian_nb", "--method", "sigmoid",
            "--multiclass", "all_pairs:wu_lin_weng", "--cv", "3", "--output", out)
    assert r.returncode == 0, r
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["combiner"]["name"] == "wu_lin_weng" and manifest["multiclass"] == "all_pairs:wu_lin_weng"
    assert np.asarray(manifest["code_matrix"]).shape == (10, 45)
    assert len(manifest["members"][0]["learners"]) == 45
    m = cli("evaluate", out, "data/pendigits_test.parquet", "--target", "class", "--json").json()
    assert m["error_rate"] < 0.2 and m["brier"] < m["raw"]["brier"] + 0.05


def test_combiner_parameters_reach_the_combiner(cli, tmp_path, digits_small):
    out = tmp_path / "coupled"
    r = cli("fit", digits_small, "--target", "class", "--method", "sigmoid", "--cv", "3",
            "--multiclass", "all_pairs:coupling", "--combiner-param", "max_iter=50",
            "--combiner-param", "tol=1e-6", "--output", out)
    assert r.returncode == 0, r
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["combiner"] == {"name": "coupling", "params": {"max_iter": 50, "tol": 1e-6}}
    assert_one_line_error(
        cli("fit", digits_small, "--target", "class", "--multiclass", "all_pairs:coupling",
            "--combiner-param", "nosuch=1", "--output", tmp_path / "x"),
        "no parameter 'nosuch'",
    )


def test_user_matrix_file_and_bad_matrices(cli, tmp_path, digits_small):
    rng = np.random.default_rng(0)
    M = rng.choice([-1, 1], size=(10, 12))
    M[:, 0] = [1] * 5 + [-1] * 5
    np.savetxt(tmp_path / "m.csv", M, fmt="%d", delimiter=",")
    out = tmp_path / "custom"
    r = cli("fit", digits_small, "--target", "class", "--method", "isotonic", "--cv", "3",
            "--multiclass", f"file:{tmp_path / 'm.csv'}:least_squares", "--output", out)
    assert r.returncode == 0, r
    np.savetxt(tmp_path / "bad.csv", np.full((10, 3), 2), fmt="%d", delimiter=",")
    assert_one_line_error(
        cli("fit", digits_small, "--target", "class", "--multiclass", f"file:{tmp_path / 'bad.csv'}",
            "--output", tmp_path / "x"),
        "bad.csv",
    )
    assert_one_line_error(
        cli("fit", digits_small, "--target", "class", "--multiclass", "all_pairs:normalize", "--output", tmp_path / "x"),
        "normalize",
    )
    assert not (tmp_path / "x").exists()


def test_text_column_with_multinomial_naive_bayes(cli, tmp_path):
    out = tmp_path / "news"
    r = cli("fit", "data/newsgroups_sample.parquet", "--target", "class", "--learner", "multinomial_nb",
            "--method", "isotonic", "--cv", "3", "--output", out)
    assert r.returncode == 0, r
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["features"]["columns"][0]["kind"] == "text"
    m = cli("evaluate", out, "data/newsgroups_sample.parquet", "--target", "class", "--json").json()
    assert m["error_rate"] < 0.1 and m["n_classes"] == 3


def test_combining_rule_and_reject_option(cli, tmp_path):
    out = tmp_path / "combo"
    r = cli("fit", "data/breast_cancer_wisconsin.parquet", "--target", "class", "--positive", "4",
            "--exclude", "sample_code_number", "--learner", "nearest_mean,fisher_lda,knn",
            "--learner-param", "knn.n_neighbors=3", "--method", "sigmoid", "--combine", "product", "--output", out)
    assert r.returncode == 0, r
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["combine"] == "product" and sorted(set(manifest["member_groups"])) == [0, 1, 2]
    scored = tmp_path / "s"
    assert cli("score", out, "data/breast_cancer_wisconsin.parquet", "--output", scored,
               "--reject-below", "0.95").returncode == 0
    t = pq.read_table(scored).to_pandas()
    low = t[["p_2", "p_4"]].max(axis=1) < 0.95
    assert low.any() and (~low).any()
    assert t.loc[low, "prediction"].isna().all() and t.loc[~low, "prediction"].notna().all()
    assert (t["rejected"] == low).all()
    assert_one_line_error(
        cli("fit", "data/pima.parquet", "--target", "class", "--learner", "knn,gaussian_nb",
            "--learner-param", "nosuch=1", "--output", tmp_path / "y"),
        "nosuch",
    )


def test_evaluate_several_models_with_a_report(cli, tmp_path):
    a, b = tmp_path / "iso", tmp_path / "sig"
    for out, method in ((a, "isotonic"), (b, "sigmoid")):
        assert cli("fit", "data/pima.parquet", "--target", "class", "--method", method, "--output", out).returncode == 0
    report = tmp_path / "report"
    r = cli("evaluate", a, b, "data/pima.parquet", "--target", "class", "--report", report)
    assert r.returncode == 0, r
    assert "(iso)" in r.stdout and "(sig)" in r.stdout and "reject rate" in r.stdout
    html = (report / "index.html").read_text()
    assert "gaussian_nb + isotonic (iso)" in html and "gaussian_nb + sigmoid (sig)" in html
    assert len(list(report.glob("*.png"))) >= 4
    both = cli("evaluate", a, b, "data/pima.parquet", "--target", "class", "--json").json()
    assert [m["label"] for m in both["models"]] == ["gaussian_nb + isotonic (iso)", "gaussian_nb + sigmoid (sig)"]
    assert len(both["models"][0]["error_reject"]["reject_rate"]) > 2
    assert_one_line_error(cli("evaluate", a, "data/pima.parquet", "--target", "class", "--report", report),
                          "already exists")
