"""Fixtures of the plugins' test suites (calengine-xgboost and calengine-lightgbm use them): a partitioned
Adult table, a LocalCluster, real dask processes.  The helpers are :mod:`calengine.testing.cluster`'s,
public for any plugin; a plugin kept in its own repository would hold these few fixtures in its own
conftest.py, with its own data."""

from __future__ import annotations

from pathlib import Path

import pytest

from calengine.testing.cluster import local_client as _local_client
from calengine.testing.cluster import split_parquet, start_dask_processes, stop_processes

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def adult_parts(tmp_path_factory) -> Path:
    return split_parquet(REPO / "data" / "adult" / "train.parquet", tmp_path_factory.mktemp("adult") / "train", 4, rows=12000)


@pytest.fixture(scope="session")
def adult_test() -> Path:
    return REPO / "data" / "adult" / "test.parquet"


@pytest.fixture(scope="module")
def local_client():
    """A real LocalCluster: 2 worker processes with one thread each."""
    with _local_client(2) as client:
        yield client


@pytest.fixture(scope="module")
def dask_processes(tmp_path_factory):
    address, procs = start_dask_processes(cwd=tmp_path_factory.mktemp("workers"))
    try:
        yield address, procs
    finally:
        stop_processes(procs)
