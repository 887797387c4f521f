"""Fixtures of the calengine-lightgbm tests: a partitioned Adult table, a LocalCluster, real dask processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def split_parquet(source: Path, folder: Path, files: int, rows: int | None = None) -> Path:
    """Write (the first ``rows`` rows of) ``source`` as ``files`` Parquet files in ``folder``."""
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    if rows is not None:
        table = table.slice(0, rows)
    folder.mkdir(parents=True, exist_ok=True)
    step = -(-table.num_rows // files)
    for i in range(files):
        pq.write_table(table.slice(i * step, step), folder / f"part-{i}.parquet")
    return folder


@pytest.fixture(scope="session")
def adult_parts(tmp_path_factory) -> Path:
    return split_parquet(REPO / "data" / "adult" / "train.parquet", tmp_path_factory.mktemp("adult") / "train", 4, rows=12000)


@pytest.fixture(scope="session")
def adult_test() -> Path:
    return REPO / "data" / "adult" / "test.parquet"


@pytest.fixture(scope="module")
def local_client():
    """A real LocalCluster: 2 worker processes with one thread each."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as lc, Client(lc, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=120)
        yield client


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_dask_processes(workers: int = 2, cwd: Path | None = None):
    """``dask scheduler`` and ``dask worker`` processes on 127.0.0.1; returns (address, processes)."""
    from distributed import Client

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask_bin = str(Path(sys.executable).with_name("dask"))
    procs = [subprocess.Popen([dask_bin, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              cwd=cwd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with Client(address, timeout="2s"):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        procs.append(subprocess.Popen(
            [dask_bin, "worker", address, "--nworkers", str(workers), "--nthreads", "1", "--host", "127.0.0.1",
             "--no-dashboard", "--memory-limit", "2GiB"],
            cwd=cwd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with Client(address, timeout="10s") as c:
            c.wait_for_workers(workers, timeout=120)
    except BaseException:
        stop_processes(procs)
        raise
    return address, procs


def stop_processes(procs) -> None:
    for p in reversed(procs):
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def dask_processes(tmp_path_factory):
    address, procs = start_dask_processes(cwd=tmp_path_factory.mktemp("workers"))
    try:
        yield address, procs
    finally:
        stop_processes(procs)


def run_cli(*args, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m calengine ARGS`` in a fresh process."""
    return subprocess.run([sys.executable, "-m", "calengine", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=str(REPO))


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
