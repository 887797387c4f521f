"""``calengine score`` / ``decide`` --overwrite (issue 38 §7): an existing output is one error line naming
--overwrite; with it, only calengine's own scored output (its marker file) is replaced, and only once the
new one is complete.  Also: a missing feature column is never told to use the target instead."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest

from cli_helpers import PIMA, assert_one_line_error

COSTS = '{"classes": [0, 1], "costs": [[0, 1], [5, 0]]}'


@pytest.mark.parametrize("command", ["score", "decide"])
def test_overwrite_replaces_only_calengines_own_scored_output(tmp_path, cli, pima_sigmoid_model, command):
    extra = ["--cost-matrix", COSTS] if command == "decide" else []
    out = tmp_path / "scored"
    first = cli(command, pima_sigmoid_model, PIMA, "--output", out, *extra)
    assert first.returncode == 0, first
    marker = json.loads((out / "_calengine_scores.json").read_text())
    assert marker["format"] == "calengine-scores" and marker["command"] == command
    assert pq.read_table(out).num_rows == 768  # the marker is not read as data
    assert_one_line_error(cli(command, pima_sigmoid_model, PIMA, "--output", out, *extra), "already exists", "--overwrite")
    half = tmp_path / "half.parquet"
    pd.read_parquet(PIMA).head(100).to_parquet(half, index=False)
    again = cli(command, pima_sigmoid_model, half, "--output", out, "--overwrite", *extra)
    assert again.returncode == 0, again
    assert pq.read_table(out).num_rows == 100
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".scored.")], "staging or the old copy left behind"

    mine = tmp_path / "mine"
    mine.mkdir()
    pd.read_parquet(PIMA).to_parquet(mine / "part-00000.parquet", index=False)  # a user's own dataset
    assert_one_line_error(cli(command, pima_sigmoid_model, PIMA, "--output", mine, "--overwrite", *extra),
                          "--overwrite refuses", "not calengine's scored output")
    assert sorted(p.name for p in mine.iterdir()) == ["part-00000.parquet"]
    assert pq.read_table(mine).num_rows == 768


def test_python_overwrite_names_the_parameter(tmp_path, pima_sigmoid_model):
    import calengine
    from calengine.errors import DataError

    out = tmp_path / "s"
    assert calengine.score_table(str(pima_sigmoid_model), str(PIMA), out) == 768
    with pytest.raises(DataError, match=r"already exists; choose a new path or pass overwrite=True"):
        calengine.score_table(str(pima_sigmoid_model), str(PIMA), out)
    assert calengine.score_table(str(pima_sigmoid_model), str(PIMA), out, overwrite=True) == 768
    plain = tmp_path / "plain.txt"
    plain.write_text("precious")
    with pytest.raises(DataError, match="not calengine's scored output"):
        calengine.score_table(str(pima_sigmoid_model), str(PIMA), plain, overwrite=True)
    assert plain.read_text() == "precious"


def test_a_missing_feature_column_is_never_offered_the_target(tmp_path, cli):
    """A model whose target is 'bmi_' scores a table that lacks its feature 'bmi' but still holds
    'bmi_' (the label, as evaluation tables do): the closest name is the target, and it must not be
    suggested in the feature's place; another close column still is."""
    train = pd.read_parquet(PIMA).rename(columns={"class": "bmi_"})
    train_path = tmp_path / "train.parquet"
    train.to_parquet(train_path, index=False)
    model = tmp_path / "m"
    r = cli("--quiet", "fit", train_path, "--target", "bmi_", "--cv", "3", "--method", "sigmoid", "--output", model)
    assert r.returncode == 0, r
    data = tmp_path / "no_bmi.parquet"
    train.drop(columns=["bmi"]).to_parquet(data, index=False)
    r = cli("score", model, data, "--output", tmp_path / "s")
    assert_one_line_error(r, "column 'bmi' is not in")
    assert "did you mean 'bmi_'" not in r.stderr, r.stderr
    other = tmp_path / "near.parquet"
    train.drop(columns=["bmi"]).assign(bmii=1.0).to_parquet(other, index=False)
    assert_one_line_error(cli("score", model, other, "--output", tmp_path / "s"), "did you mean 'bmii'")
