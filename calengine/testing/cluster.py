"""Test helpers for plugins that run on real Dask clusters: partitioned tables, local clusters, real
``dask scheduler``/``dask worker`` processes, and the CLI in a fresh process.

For plugin authors (the ``calengine-xgboost`` and ``calengine-lightgbm`` tests use them), beside the
conformance checks of :mod:`calengine.testing`, and for calengine's own tests, which start their
clusters with these same functions.  Everything listens on 127.0.0.1 only.  These are plain functions
and context managers, so a ``conftest.py`` wraps them in fixtures with the scopes it wants, and test
modules import them from here -- not from a ``conftest`` (every ``conftest`` module has the same name
in a pytest session).

* :func:`start_dask_processes` -- a scheduler and worker processes, once every worker has joined;
  :func:`start_dask_scheduler`, :func:`start_dask_worker` and :func:`wait_for_workers` are its parts,
  for a test that needs its own command lines (TLS files, a worker joining later, another environment).
  :func:`stop_processes` stops them, process group by process group; :func:`kill_one_worker` crashes one.
* :func:`run_cli` / :func:`start_cli` -- ``python -m calengine`` in a fresh process, waited for or left
  running; :func:`run_cli_killing_a_worker` runs a command on a cluster of its own while one of its
  workers dies; :func:`assert_one_line_error` checks the CLI's one-line refusal.
* :func:`split_parquet` and :func:`local_client` -- a partitioned table, an in-process LocalCluster.
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


def dask_command() -> str:
    """The ``dask`` command of this interpreter's environment."""
    return str(Path(sys.executable).with_name("dask"))


def _quiet(cwd, env=None) -> dict:
    """Popen options of a cluster process: its own process group (:func:`stop_processes` stops the
    whole group, nanny and worker alike), output discarded."""
    return {"cwd": None if cwd is None else str(cwd), "env": env, "start_new_session": True,
            "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}


def start_dask_scheduler(cwd: Path | None = None, args=(), protocol: str = "tcp", timeout: float = 60,
                         dask: str | None = None):
    """A ``dask scheduler`` on a free port of 127.0.0.1, started in ``cwd`` with the extra command-line
    ``args`` (e.g. TLS files; ``protocol="tls"`` with them); returns ``(address, process)`` once the
    port accepts connections.  A scheduler that does not come up in ``timeout`` seconds is stopped and
    ``TimeoutError`` raised.  ``dask``: the ``dask`` command of another environment (default: this
    interpreter's, :func:`dask_command`)."""
    port = free_port()
    proto = [] if protocol == "tcp" else ["--protocol", protocol]
    proc = subprocess.Popen([dask or dask_command(), "scheduler", *proto, "--host", "127.0.0.1", "--port", str(port),
                             "--no-dashboard", *map(str, args)], **_quiet(cwd))
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                return f"{protocol}://127.0.0.1:{port}", proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_processes([proc])
                raise TimeoutError(f"dask scheduler on port {port} did not start (exit code {proc.poll()})") from None
            time.sleep(0.25)


def start_dask_worker(address: str, workers: int = 1, cwd: Path | None = None, env: dict | None = None,
                      memory_limit: str | None = "2GiB", args=(), dask: str | None = None) -> subprocess.Popen:
    """``dask worker`` processes (``workers`` of them, one thread each, under one nanny command) joining
    ``address``, started in ``cwd`` with ``env`` added to this environment and the extra ``args``;
    ``memory_limit=None`` leaves Dask's default.  ``dask``: as for :func:`start_dask_scheduler`.
    Returns at once: see :func:`wait_for_workers`."""
    limit = [] if memory_limit is None else ["--memory-limit", memory_limit]
    return subprocess.Popen(
        [dask or dask_command(), "worker", address, "--nworkers", str(workers), "--nthreads", "1", "--host", "127.0.0.1",
         "--no-dashboard", *limit, *map(str, args)],
        **_quiet(cwd, None if env is None else {**os.environ, **env}))


def wait_for_workers(address: str, workers: int, timeout: float = 120) -> None:
    """Until ``workers`` workers have joined the (TCP) scheduler at ``address``."""
    from distributed import Client

    with Client(address, timeout="10s") as c:
        c.wait_for_workers(workers, timeout=timeout)


def start_dask_processes(workers: int = 2, cwd: Path | None = None, memory_limit: str | None = "2GiB",
                         worker_env: dict | None = None):
    """A ``dask scheduler`` and ``workers`` ``dask worker`` processes on 127.0.0.1, each command in its
    own process group, started in ``cwd`` (``worker_env`` added to the workers' environment); returns
    ``(address, processes)`` once every worker has joined.  Stop them with :func:`stop_processes`."""
    address, scheduler = start_dask_scheduler(cwd)
    procs = [scheduler]
    try:
        procs.append(start_dask_worker(address, workers, cwd, worker_env, memory_limit))
        wait_for_workers(address, workers)
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


def kill_one_worker(procs) -> int:
    """SIGKILL one worker process of the ``dask worker`` command :func:`start_dask_processes` started
    (``procs[1]``): the newest process below its nanny, as a crash would end it.  Returns its pid."""
    import psutil

    victim = psutil.Process(procs[1].pid).children(recursive=True)[-1]
    os.kill(victim.pid, signal.SIGKILL)
    return victim.pid


def start_cli(*args, cwd: Path | str | None = None) -> subprocess.Popen:
    """``python -P -m calengine ARGS`` started in a fresh process and left running (text pipes), for tests
    that act on a cluster while a command runs; :func:`run_cli` waits for it instead.  ``-P`` keeps the
    working directory (a source checkout) off ``sys.path``: the command runs the installed distributions."""
    return subprocess.Popen([sys.executable, "-P", "-m", "calengine", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=None if cwd is None else str(cwd))


def run_cli_killing_a_worker(*args, task: str, cwd: Path | str | None = None, workers_cwd: Path | None = None,
                             timeout: float = 300, delay: float = 2.0) -> subprocess.CompletedProcess:
    """``python -m calengine ARGS --cluster ADDRESS`` on a cluster of its own (:func:`start_dask_processes`,
    run in ``workers_cwd``), with one worker SIGKILLed (:func:`kill_one_worker`) ``delay`` seconds after a
    task whose key contains ``task`` starts running.  The cluster is stopped before it returns what the command
    printed.  For learners that train on the whole cluster, whose collectives cannot lose a member: the
    command must then fail in one line and publish nothing (check with :func:`assert_one_line_error`)."""
    from distributed import Client

    address, procs = start_dask_processes(cwd=workers_cwd)
    try:
        proc = start_cli(*args, "--cluster", address, cwd=cwd)
        deadline = time.monotonic() + 120
        with Client(address, timeout="10s") as c:
            while not any(task in str(key) for keys in c.processing().values() for key in keys):
                if proc.poll() is not None or time.monotonic() > deadline:
                    out, err = proc.communicate()
                    raise AssertionError(f"no task '{task}' ran before the command ended or 120 s passed: {err[-2000:]}")
                time.sleep(0.2)
        time.sleep(delay)
        if proc.poll() is not None:
            raise AssertionError("the command ended before a worker could be killed; give it more work")
        kill_one_worker(procs)
        out, err = proc.communicate(timeout=timeout)
    finally:
        stop_processes(procs)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


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
