"""Test helpers for plugins that run on real Dask clusters: partitioned tables, local clusters, real
``dask scheduler``/``dask worker`` processes, and the CLI in a fresh process.

For plugin authors (the ``calengine-xgboost`` and ``calengine-lightgbm`` tests use them), beside the
conformance checks of :mod:`calengine.testing`.  Everything listens on 127.0.0.1 only.  These are plain
functions and context managers, so a plugin's ``conftest.py`` wraps them in fixtures with the scopes it
wants, and its test modules import them from here -- not from ``conftest`` (two plugins' ``conftest``
modules share one module name in a pytest session).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def split_parquet(source: Path, folder: Path, files: int, rows: int | None = None) -> Path:
    """Write (the first ``rows`` rows of) the Parquet file ``source`` as ``files`` files in ``folder``."""
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    if rows is not None:
        table = table.slice(0, rows)
    folder.mkdir(parents=True, exist_ok=True)
    step = -(-table.num_rows // files)
    for i in range(files):
        pq.write_table(table.slice(i * step, step), folder / f"part-{i}.parquet")
    return folder


@contextmanager
def local_client(workers: int = 2) -> Iterator[object]:
    """A real LocalCluster of ``workers`` processes with one thread each, and a client to it."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as lc, Client(lc, set_as_default=False) as client:
        client.wait_for_workers(workers, timeout=120)
        yield client


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_dask_processes(workers: int = 2, cwd: Path | None = None, memory_limit: str = "2GiB"):
    """``dask scheduler`` and ``dask worker`` processes on 127.0.0.1, each in its own process group,
    started in ``cwd``; returns ``(address, processes)`` once every worker has joined."""
    from distributed import Client

    port = free_port()
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
             "--no-dashboard", "--memory-limit", memory_limit],
            cwd=cwd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with Client(address, timeout="10s") as c:
            c.wait_for_workers(workers, timeout=120)
    except BaseException:
        stop_processes(procs)
        raise
    return address, procs


def stop_processes(procs) -> None:
    """Stop processes started by :func:`start_dask_processes` (their whole process groups)."""
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


def run_cli(*args, cwd: Path | str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -P -m calengine ARGS`` in a fresh process (text output captured; ``-P``: the working directory,
    a plugin's source checkout perhaps, is not put on sys.path, so the installed distributions run)."""
    return subprocess.run([sys.executable, "-P", "-m", "calengine", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=None if cwd is None else str(cwd))


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    """The CLI's contract for bad input: exit 2 and exactly one ``error:`` line holding ``fragments``."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
