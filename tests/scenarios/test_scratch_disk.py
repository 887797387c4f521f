"""A scratch directory that refuses data is one ``error:`` line, exit 2, and leaves nothing behind.

``evaluate`` of a large table keeps its score ranges as ``.npy`` files under TMPDIR (on a cluster, in
the workers' local directories), and a large ``fit`` its held-out scores; a table bigger than the free
space there ended in numpy's traceback ("OSError: 250390 requested and 85488 written", exit 1).  Each
test runs the real console script with the size thresholds lowered to 0, so that the shipped Pima
table goes through the scratch files: once with TMPDIR on a 64 KiB tmpfs (a real full disk; root only,
skipped elsewhere) and once under a file-size limit (``RLIMIT_FSIZE``, any user).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import REPO

PIMA = REPO / "data" / "pima.parquet"

#: the console script with every table cut into score ranges and every fit's held-out scores spilled
SCRIPT = r"""
import sys
from calengine.metrics.ranged import engine as range_eval
from calengine.plan import memory
range_eval.RANGED_MIN_ROWS = 0
memory.SPILL_MIN_ROWS = 0
from calengine.cli import entry
sys.argv = ["calengine", *sys.argv[1:]]
entry()
"""


def _run(*args, tmpdir: Path, limit_file_size: int | None = None) -> subprocess.CompletedProcess:
    def preexec():
        if limit_file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_size, limit_file_size))

    return subprocess.run([sys.executable, "-P", "-c", SCRIPT, *map(str, args)], capture_output=True, text=True,
                          cwd=str(REPO), env={**os.environ, "TMPDIR": str(tmpdir)}, timeout=300, preexec_fn=preexec)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("scratch") / "model"
    r = _run("fit", PIMA, "--target", "class", "--method", "sigmoid", "--output", out,
             tmpdir=tmp_path_factory.mktemp("tmp"))
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture
def full_disk(tmp_path):
    """A 40 KiB tmpfs: room for a Dask worker's lock files, not for Pima's ranges (root only)."""
    path = tmp_path / "full"
    path.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40k", "tmpfs", str(path)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)


def _one_line(r: subprocess.CompletedProcess, *words: str, warned: bool = False) -> str:
    """The one ``error:`` line (after the scratch warning when ``warned``) holding every word."""
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr
    if warned:
        assert len(lines) == 2 and lines[0].startswith("warning: evaluate may write up to"), r.stderr[-2000:]
        lines = lines[1:]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr[-2000:]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def test_the_thresholds_send_pima_through_scratch_files(model, tmp_path):
    """The premise of the tests below: with the thresholds at 0 the same commands succeed on a roomy
    TMPDIR, and evaluate's answer is the one the in-memory path gives (the ranges were used, and read)."""
    r = _run("evaluate", model, PIMA, "--target", "class", "--json", tmpdir=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # room enough: no scratch warning
    plain = subprocess.run([sys.executable, "-P", "-m", "calengine", "evaluate", str(model), str(PIMA), "--target",
                            "class", "--json"], capture_output=True, text=True, cwd=str(REPO), timeout=300)
    assert plain.returncode == 0, plain.stderr
    assert json.loads(r.stdout)["auc"] == json.loads(plain.stdout)["auc"]
    assert list(tmp_path.iterdir()) == []  # the scratch directory went with the run


def test_evaluate_on_a_full_scratch_disk(model, full_disk):
    r = _run("evaluate", model, PIMA, "--target", "class", "--json", tmpdir=full_disk)
    line = _one_line(r, "scratch file", str(full_disk), "TMPDIR", "--local-directory", warned=True)
    assert "No space left on device" in line
    assert list(full_disk.iterdir()) == []  # no calengine-evaluate-* directory left
    # the warning came before any row was scored, with the bound: 4 tables (raw and calibrated scores,
    # class 1 and top label) of 768 values, 24 bytes each
    assert f"'{full_disk}'" in r.stderr and "4 tables of up to 768 distinct forecasts" in r.stderr
    assert "TMPDIR" in r.stderr.splitlines()[0]


def test_evaluate_cluster_on_full_worker_directories(model, full_disk):
    """``--cluster``: a LocalCluster of two worker processes whose local directories (under TMPDIR) fill
    up while they write their ranges: the worker's error reaches the client as the same one line, and
    the evaluation's files on every worker are removed."""
    r = _run("evaluate", "--cluster", "--workers", "2", model, PIMA, "--target", "class", "--json", tmpdir=full_disk)
    line = _one_line(r, "scratch file", "calengine-ranges", "--local-directory", warned=True)
    assert "No space left on device" in line
    # both workers' directories are on the one tmpfs: its free space counted once; class 0 written too
    assert "the workers' local directories (6 tables of up to 768" in r.stderr
    assert not list(full_disk.rglob("calengine-ranges/*/*"))


def test_fit_on_a_full_scratch_disk(full_disk, tmp_path):
    out = tmp_path / "model"
    _one_line(_run("fit", PIMA, "--target", "class", "--method", "isotonic", "--output", out, tmpdir=full_disk),
              str(full_disk), "TMPDIR")
    assert not out.exists()


@pytest.mark.parametrize("limit", [64, 1000])
def test_evaluate_under_a_file_size_limit(model, tmp_path, limit):
    """The write fails part-way (numpy reports it without an errno) or at once (EFBIG): either way one
    line that names the scratch directory, and no scratch directory left behind."""
    line = _one_line(_run("evaluate", model, PIMA, "--target", "class", "--json", tmpdir=tmp_path,
                          limit_file_size=limit), "scratch file", str(tmp_path), "TMPDIR")
    assert "file-size limit" in line or "EFBIG" in line
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_met_elsewhere_is_one_line():
    """Writers that are not ours (Dask's spill, a library's temporary file) raise the system's OSError,
    maybe wrapped: the CLI finds ENOSPC or EDQUOT in the chain and names the file and the fix; any other
    error is left to propagate (a traceback is a bug report)."""
    import errno

    from calengine.cli import _disk_full

    inner = OSError(errno.ENOSPC, "No space left on device", "/scratch/dask/spill-1.bin")
    try:
        try:
            raise inner
        except OSError as exc:
            raise RuntimeError("a task failed") from exc
    except RuntimeError as outer:
        line = _disk_full(outer)
    assert line.startswith("No space left on device (ENOSPC) writing '/scratch/dask/spill-1.bin'")
    assert "TMPDIR" in line
    assert "(EDQUOT)" in _disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert _disk_full(OSError(errno.ENOENT, "No such file", "/x")) is None
    assert _disk_full(ValueError("not a disk")) is None
