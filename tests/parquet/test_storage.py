"""A remote store that accepts requests and never answers (issue 24 §5) ends the command in one line after
``--io-timeout`` / ``CALENGINE_IO_TIMEOUT``, instead of a silent wait.  The store is an fsspec file system
registered in this process whose every call blocks, as a stalled endpoint does."""

from __future__ import annotations

import threading
import time

import pytest
from fsspec import AbstractFileSystem, register_implementation

from calengine.errors import DataError
from calengine.parquet import storage

_RELEASE = threading.Event()


class StalledFS(AbstractFileSystem):
    """Every metadata call and every open waits until the test ends: a store that never answers."""

    protocol = "stalled"

    def _stall(self, *args, **kwargs):
        _RELEASE.wait(120)
        raise OSError("released")

    ls = info = isdir = isfile = find = glob = _open = _stall


register_implementation("stalled", StalledFS, clobber=True)


@pytest.fixture(autouse=True)
def _release_stalled_threads():
    _RELEASE.clear()
    yield
    _RELEASE.set()  # the abandoned daemon threads finish


def test_listing_a_stalled_store_is_one_line_after_the_timeout(monkeypatch):
    monkeypatch.setenv("CALENGINE_IO_TIMEOUT", "1")
    t0 = time.monotonic()
    with pytest.raises(DataError, match=r"no answer from 'stalled://bucket/table/' within 1 s while listing its files.*--io-timeout"):
        storage.list_parquet_files("stalled://bucket/table/")
    assert time.monotonic() - t0 < 10


def test_a_stalled_footer_read_is_one_line_too(monkeypatch):
    monkeypatch.setenv("CALENGINE_IO_TIMEOUT", "1")
    with pytest.raises(DataError, match="while reading its Parquet footer"):
        storage.parquet_file("stalled://bucket/t.parquet")


def test_fit_from_python_on_a_stalled_store_fails_in_one_line(monkeypatch, tmp_path):
    import calengine

    monkeypatch.setenv("CALENGINE_IO_TIMEOUT", "2")
    t0 = time.monotonic()
    with pytest.raises(DataError, match="no answer from 'stalled://"):
        calengine.fit_table("stalled://bucket/table/", "class")
    assert time.monotonic() - t0 < 30


def test_the_timeout_is_bounded_and_reaches_s3_drivers(monkeypatch, cli):
    from cli_helpers import assert_one_line_error

    assert_one_line_error(cli("fit", "data/pima.parquet", "--target", "class", "--io-timeout", "0",
                              "--output", "unused"), "--io-timeout must be at least 1")
    monkeypatch.setenv("CALENGINE_IO_TIMEOUT", "abc")
    with pytest.raises(DataError, match="CALENGINE_IO_TIMEOUT"):
        storage.io_timeout()
    monkeypatch.setenv("CALENGINE_IO_TIMEOUT", "7")
    config = storage._driver_options("s3://bucket/t.parquet")["config_kwargs"]
    assert config["connect_timeout"] == config["read_timeout"] == 7.0 and config["retries"]["max_attempts"] == 3
    assert storage._driver_options("gs://bucket/t.parquet") == {}
    monkeypatch.delenv("CALENGINE_IO_TIMEOUT")
    assert storage.io_timeout() == storage.DEFAULT_IO_TIMEOUT


def test_a_local_table_is_not_affected(monkeypatch):
    monkeypatch.setenv("CALENGINE_IO_TIMEOUT", "1")
    with storage.parquet_file("data/pima.parquet") as pf:
        assert pf.metadata.num_rows == 768
