"""Running the real ``calengine`` CLI in a fresh process, and checking its one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the Pima Indians diabetes table (768 rows, 8 numeric columns, ``class`` 0/1): the suite's small table
PIMA = REPO / "data" / "pima.parquet"


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
    """Run ``python -P -m calengine ARGS`` in a fresh process, as a user would from a shell (``-P``: the
    checkout, the working directory, is not put on sys.path; the installed distribution runs)."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "calengine", *map(str, args)],
        capture_output=True, text=True, env=full_env, timeout=timeout, cwd=str(REPO),
    )
    return CLIResult(proc)


def assert_one_line_error(result: CLIResult, *fragments: str) -> None:
    """Exit code 2, exactly one stderr line starting 'error:', no traceback, containing the fragments."""
    assert result.returncode == 2, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result
    assert lines[0].startswith("error: "), result
    assert "Traceback" not in result.stderr
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])


# one copy of the process helpers, the one plugin authors get (calengine.testing.cluster)
from calengine.testing.cluster import free_port  # noqa: E402,F401 - re-exported for the tests
from calengine.testing.cluster import stop_processes as stop_process_groups  # noqa: E402,F401


def default_sigint() -> None:
    """``preexec_fn`` for a command a test interrupts with SIGINT: the child starts with SIGINT's default
    disposition and unblocked, as a terminal's foreground command does.  A child inherits an ignored or
    blocked SIGINT from the test process (something earlier in a full run left the pytest process so),
    and Python then installs no KeyboardInterrupt handler: the Ctrl-C would never reach the command."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
