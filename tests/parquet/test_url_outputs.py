"""Outputs named by URLs (issue 24 §4): ``file://`` is its local path; any other scheme is refused in one
line before any work, and nothing is written anywhere (it used to land in ``./s3:/bucket/out`` with exit 0)."""

from __future__ import annotations

import os

import pytest

from calengine.errors import DataError
from calengine.parquet.storage import local_output

from cli_helpers import assert_one_line_error

PIMA = "data/pima.parquet"


def test_local_output_maps_file_urls_and_refuses_others(tmp_path):
    assert local_output(str(tmp_path / "m")) == str(tmp_path / "m")
    assert local_output(f"file://{tmp_path}/m") == f"{tmp_path}/m"
    assert local_output(f"file://localhost{tmp_path}/a%20b") == f"{tmp_path}/a b"
    for url in ("s3://bucket/out", "memory://out", "gs://b/o", "file://otherhost/tmp/x"):
        with pytest.raises(DataError, match="--output"):
            local_output(url)


@pytest.mark.parametrize("url", ["s3://bucket/out", "memory://models/m"])
def test_every_output_option_refuses_a_url_before_work_and_writes_nothing(cli, tmp_path, url):
    before = set(os.listdir("."))
    r = cli("fit", PIMA, "--target", "class", "--output", url)
    assert_one_line_error(r, f"--output '{url}'", "atomic rename", "local or mounted path")
    r = cli("fit", PIMA, "--target", "class", "--output", tmp_path / "m", "--json-log", url + ".json")
    assert_one_line_error(r, "--json-log")
    assert not (tmp_path / "m").exists()
    assert set(os.listdir(".")) == before  # no ./s3:/ or ./memory:/ folder
    assert not os.path.exists(url.split(":", 1)[0] + ":")


def test_a_file_url_output_is_written_at_its_path(cli, tmp_path):
    r = cli("fit", PIMA, "--target", "class", "--output", f"file://{tmp_path}/m")
    assert r.returncode == 0, r
    assert (tmp_path / "m" / "manifest.json").is_file()
    r = cli("score", tmp_path / "m", PIMA, "--output", f"file://{tmp_path}/s.parquet")
    assert r.returncode == 0, r
    assert (tmp_path / "s.parquet").exists()


def test_the_python_api_refuses_a_url_where_it_publishes(tmp_path):
    """score_table checks its output only when it publishes: staged_directory refuses the URL there."""
    from calengine.parquet.data import staged_directory

    with pytest.raises(DataError, match="s3://"):
        with staged_directory("s3://bucket/out"):
            pass
    assert not os.path.exists("s3:")
