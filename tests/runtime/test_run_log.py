"""What a platform team asks for: ``--json-log FILE`` records the run; the dashboard link is printed
on a terminal when the scheduler has a dashboard (and never into logs)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from importlib import metadata

import pyarrow.parquet as pq
import pytest

from cli_helpers import REPO, assert_one_line_error


@pytest.mark.cluster
def test_json_log_records_fit_and_score_on_a_remote_cluster(tmp_path, cli, dask_cluster):
    from distributed import Client

    log = tmp_path / "logs" / "fit.json"  # a missing parent directory is created
    r = cli("fit", "data/pima.parquet", "--target", "class", "--method", "sigmoid", "--cluster", dask_cluster,
            "--output", tmp_path / "m", "--json-log", log)
    assert r.returncode == 0, r
    rec = json.loads(log.read_text())
    assert rec["format"] == "calengine-run-log/1" and rec["command"] == "fit" and rec["exit_code"] == 0
    assert rec["error"] is None and rec["argv"][:3] == ["calengine", "fit", "data/pima.parquet"]
    assert rec["rows_read"] == pq.read_metadata(REPO / "data" / "pima.parquet").num_rows
    assert rec["output"] == str(tmp_path / "m") and rec["wall_seconds"] > 0
    assert rec["versions"]["scikit-learn"] == metadata.version("scikit-learn")
    assert rec["versions"]["calengine-builtins"] == metadata.version("calengine-builtins")
    with Client(dask_cluster, timeout="10s") as c:
        workers = set(c.scheduler_info()["workers"])
    cluster = rec["cluster"]
    assert cluster["kind"] == "remote" and cluster["scheduler"] == dask_cluster and cluster["dashboard"] is None
    assert {w["address"] for w in cluster["workers"]} == workers
    assert all(w["nthreads"] == 1 and w["memory_limit"] == 2 * 2**30 for w in cluster["workers"])
    tasks = rec["tasks"]
    assert tasks["count"] > 0 and tasks["count"] == sum(k["count"] for k in tasks["by_kind"].values())
    assert tasks["count"] == sum(w["count"] for w in tasks["by_worker"].values())
    assert set(tasks["by_worker"]) <= workers and tasks["compute_seconds"] > 0
    assert "fragment_table_stats" in tasks["by_kind"]  # the column-statistics pass ran as tasks

    log = tmp_path / "score.json"
    r = cli("score", tmp_path / "m", "data/pima.parquet", "--output", tmp_path / "s", "--cluster", dask_cluster,
            "--json-log", log)
    assert r.returncode == 0, r
    rec = json.loads(log.read_text())
    assert rec["command"] == "score" and rec["rows_read"] == pq.read_table(tmp_path / "s").num_rows == 768
    assert rec["tasks"]["count"] > 0 and rec["output"] == str(tmp_path / "s")


def test_json_log_records_a_failed_run_and_refuses_an_unwritable_path(tmp_path, cli):
    log = tmp_path / "bad.json"
    r = cli("fit", "data/pima.parquet", "--target", "nosuchcolumn", "--output", tmp_path / "m", "--json-log", log)
    assert_one_line_error(r, "nosuchcolumn")
    rec = json.loads(log.read_text())
    assert rec["exit_code"] == 2 and "nosuchcolumn" in rec["error"] and rec["output"] is None
    assert not (tmp_path / "m").exists()
    assert_one_line_error(cli("fit", "data/pima.parquet", "--target", "class", "--output", tmp_path / "m",
                              "--json-log", tmp_path), "--json-log", "is a directory")
    assert not (tmp_path / "m").exists()


def _run_on_terminal(*args: str, timeout: float = 300) -> tuple[int, str]:
    """Run the CLI with stderr on a pseudo-terminal (stdout a pipe); return (exit code, stderr text)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-P", "-m", "calengine", *args], cwd=str(REPO), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    proc.communicate(timeout=timeout)
    return proc.returncode, b"".join(chunks).decode(errors="replace")


@pytest.mark.cluster
def test_no_dashboard_link_where_there_is_no_dashboard_or_no_terminal(tmp_path, cli, dask_cluster):
    base = ["--quiet", "fit", "data/pima.parquet", "--target", "class"]
    rc, err = _run_on_terminal(*base, "--cluster", dask_cluster, "--output", str(tmp_path / "c"))
    assert rc == 0 and "dashboard: " not in err, err  # started with --no-dashboard: nothing to link
    rc, err = _run_on_terminal(*base, "--output", str(tmp_path / "d"))
    assert rc == 0 and "dashboard: " not in err and "fitted" in err, err  # embedded: no --cluster, no link


@pytest.mark.cluster
def test_dashboard_link_on_a_terminal_when_the_scheduler_serves_one(tmp_path, cli):
    pytest.importorskip("bokeh", reason="Dask serves its dashboard only with bokeh installed (not a test dependency)")
    base = ["--quiet", "fit", "data/pima.parquet", "--target", "class", "--cluster", "--workers", "1"]
    rc, err = _run_on_terminal(*base, "--output", str(tmp_path / "a"))
    assert rc == 0, err
    links = [line for line in err.splitlines() if line.startswith("dashboard: ")]
    assert len(links) == 1 and links[0].startswith("dashboard: http://127.0.0.1:"), err
    r = cli(*base, "--output", tmp_path / "b")  # stderr is a pipe: no link
    assert r.returncode == 0 and "dashboard: " not in r.stderr, r


def test_dashboard_gate_prints_only_for_a_cluster_with_a_dashboard_on_a_terminal(monkeypatch, capsys):
    """The gate itself, with a stand-in client whose scheduler does or does not serve a dashboard."""
    from contextlib import nullcontext

    from calengine.runtime import run_log

    class Stream:
        def __init__(self, tty):
            self.tty, self.text = tty, ""

        def isatty(self):
            return self.tty

        def write(self, text):
            self.text += text

    class FakeClient:
        dashboard_link = "http://10.0.0.1:8787/status"

        def __init__(self, serves):
            self.serves = serves

        def run_on_scheduler(self, fn):
            class App:
                applications = ["bokeh"] if self.serves else []

            return fn(type("S", (), {"http_application": App()})())

    for serves, tty, cluster, shown in [(True, True, "tcp://s:8786", True), (True, False, "tcp://s:8786", False),
                                        (False, True, "tcp://s:8786", False), (True, True, None, False),
                                        (True, True, "local", True)]:
        stream = Stream(tty)
        monkeypatch.setattr(run_log.sys, "stderr", stream)
        with run_log.observed(nullcontext(FakeClient(serves)), cluster) as c:
            assert isinstance(c, FakeClient)
        assert (stream.text == "dashboard: http://10.0.0.1:8787/status\n") == shown, (serves, tty, cluster)
        assert shown or stream.text == ""
