"""Shared fixtures: the datasets the repo ships, and a runner for the real ``calengine`` CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


class CLIResult:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr

    def json(self):
        return json.loads(self.stdout)

    def __repr__(self) -> str:
        return f"CLIResult(rc={self.returncode}, stdout={self.stdout[-800:]!r}, stderr={self.stderr[-1500:]!r})"


def run_cli(*args: str, env: dict | None = None, timeout: float = 300) -> CLIResult:
    """Run ``python -m calengine ARGS`` in a fresh process, as a user would from a shell."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "calengine", *map(str, args)],
        capture_output=True, text=True, env=full_env, timeout=timeout, cwd=str(REPO),
    )
    return CLIResult(proc)


@pytest.fixture(scope="session")
def cli():
    return run_cli


def assert_one_line_error(result: CLIResult, *fragments: str) -> None:
    """Exit code 2, exactly one stderr line starting 'error:', no traceback, containing the fragments."""
    assert result.returncode == 2, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result
    assert lines[0].startswith("error: "), result
    assert "Traceback" not in result.stderr
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def dask_cluster():
    """A real ``dask scheduler`` and ``dask worker`` (2 processes) on 127.0.0.1, started with the same
    command lines as deploy/local-cluster.sh; yields the scheduler address."""
    import signal
    import time

    port = _free_port()
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
