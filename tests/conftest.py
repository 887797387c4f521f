"""Shared fixtures: the datasets the repo ships, and a runner for the real ``calengine`` CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import REPO, free_port, run_cli, stop_process_groups

DATA = REPO / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def cli():
    return run_cli


@pytest.fixture(scope="session")
def dask_cluster():
    """A real ``dask scheduler`` and ``dask worker`` (2 processes) on 127.0.0.1, started with the same
    command lines as deploy/local-cluster.sh; yields the scheduler address."""
    import time

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask_bin = str(Path(sys.executable).with_name("dask"))
    procs = [
        subprocess.Popen(
            [dask_bin, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    ]
    try:
        from distributed import Client

        deadline = time.monotonic() + 60
        while True:
            try:
                with Client(address, timeout="2s") as c:
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        procs.append(
            subprocess.Popen(
                [dask_bin, "worker", address, "--nworkers", "2", "--nthreads", "1", "--host", "127.0.0.1",
                 "--no-dashboard", "--memory-limit", "2GiB"],
                start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        )
        with Client(address, timeout="10s") as c:
            c.wait_for_workers(2, timeout=120)
        yield address
    finally:
        stop_process_groups(procs)
