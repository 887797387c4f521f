"""Issue 24 §2, §3, §6, §7: small inputs with large effects, each through the real CLI on real Parquet.

Sizes a user types are bounded (``calengine.cli.limits``); cost files are untrusted text (size cap,
UTF-8, nesting, numbers float64 cannot hold, YAML aliases, costs that overflow); ``--json-log`` writes
only a regular file or a new path and never fails a finished command; a Ctrl-C after publishing and a
closed stdout end the way the README's exit-code table says.  Every bad input is one ``error:`` line,
exit code 2, nothing published; the cases run in forks of one process that imported calengine
already (``tests/cli_zygote.py``), two at a time.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from cli_helpers import REPO, CLIResult, default_sigint, run_cli
from scenarios.test_hostile_inputs import PIMA, Zygote, _mount_tmpfs, assert_nothing_left, assert_one_error


def _laughs(levels: int = 9) -> str:
    """A YAML "billion laughs": 9**levels strings from a few hundred bytes, under a valid matrix."""
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    names = "abcdefghijklmnop"
    for i in range(1, levels):
        lines.append(f"{names[i]}: &{names[i]} [" + ",".join([f"*{names[i - 1]}"] * 9) + "]")
    return "classes: [0, 1]\ncosts: [[0, 1], [5, 0]]\ndescription:\n" + "\n".join("  " + x for x in lines) + "\n"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("sizes")
    model = root / "model"
    r = run_cli("fit", PIMA, "--target", "class", "--method", "sigmoid", "--output", model)
    assert r.returncode == 0, r
    deep = "[" * 50_000 + "]" * 50_000
    files = {
        "laughs.yaml": _laughs(),
        "big401.json": '{"classes": [0, 1], "costs": [[0, 1], [' + "9" * 401 + ", 0]]}",
        "big5001.json": '{"classes": [0, 1], "costs": [[0, 1], [' + "9" * 5001 + ", 0]]}",
        "big401.yaml": "classes: [0, 1]\ncosts: [[0, 1], [" + "9" * 401 + ", 0]]\n",
        "big5001.yaml": "classes: [0, 1]\ncosts: [[0, 1], [" + "9" * 5001 + ", 0]]\n",
        "deep.json": '{"classes": [0, 1], "costs": ' + deep + "}",
        "deep.yaml": deep,
        "large.json": '{"classes": [0, 1], "costs": [[0, 1], [5, 0]]}' + " " * (1 << 20),
    }
    for name, text in files.items():
        (root / name).write_text(text)
    (root / "latin1.json").write_bytes('{"classes": [0, 1], "costs": [[0, 1], [5, 0]], "description": "coût"}'
                                       .encode("latin-1"))
    (root / "costs.json").write_text('{"classes": [0, 1], "costs": [[0, 1], [5, 0]]}')
    (root / "cm-deep.json").write_text(deep)
    (root / "cm-deep500.json").write_text("[" * 500 + "]" * 500)
    (root / "cm-5001.json").write_text("[[" + "9" * 5001 + "]]")
    with open(root / "cm-large.csv", "wb") as fh:  # sparse: its size is what is refused, not its bytes
        fh.truncate(33 << 20)
    os.mkfifo(root / "fifo")
    (root / "link.json").symlink_to(root / "costs.json")
    device = None
    if os.geteuid() == 0:  # a private copy of /dev/full: refusing it must not depend on luck
        device = root / "full-device"
        os.mknod(device, 0o666 | stat.S_IFCHR, os.stat("/dev/full").st_rdev)
    return {"root": root, "model": model, "deep": deep, "device": device}


DECIDE = ("decide", "{model}", str(PIMA), "--output", "{out}", "--cost-matrix")
EVALUATE = ("evaluate", "{model}", str(PIMA), "--target", "class")
FIT = ("fit", str(PIMA), "--target", "class", "--output", "{out}")
SCORE = ("score", "{model}", str(PIMA), "--output", "{out}")
DIGITS = ("fit", str(REPO / "data" / "pendigits_test.parquet"), "--target", "class", "--output", "{out}", "--multiclass")
OVERFLOW = '{"classes": [0, 1], "costs": [[0, "1e288*plasma_glucose"], [1, 0]]}'
#: (id, arguments, words the error line must contain)
CASES = [
    # §2: every size a user types is bounded, before any work
    ("bootstrap 10**12", (*EVALUATE, "--json", "--bootstrap", "1000000000000"), ("--bootstrap", "10000")),
    ("workers 100000", (*FIT, "--workers", "100000"), ("--workers", "256")),
    ("workers cluster 100000", (*FIT, "--cluster", "--workers", "100000"), ("--workers", "256")),
    ("cv 1000", (*FIT, "--cv", "1000"), ("--cv", "100")),
    ("folds 10**6", ("cv", str(PIMA), "--target", "class", "--folds", "1000000"), ("--folds", "100")),
    ("max-categories 10**9", (*FIT, "--max-categories", "1000000000"), ("--max-categories", "10000")),
    ("max-train-rows 2**41", (*FIT, "--max-train-rows", str(2**41)), ("--max-train-rows", str(2**40))),
    ("batch-rows 10**11", (*SCORE, "--batch-rows", "100000000000"), ("--batch-rows", "4194304")),
    ("worker-memory 1KiB", (*FIT, "--cluster", "--worker-memory", "1KiB"), ("--worker-memory", "384")),
    ("worker-memory 200MiB", (*FIT, "--cluster", "--worker-memory", "200MiB"), ("--worker-memory", "384")),
    ("yaml billion laughs decide", (*DECIDE, "{root}/laughs.yaml"), ("laughs.yaml", "alias")),
    ("yaml billion laughs evaluate", (*EVALUATE, "--cost-matrix", "{root}/laughs.yaml"), ("laughs.yaml", "alias")),
    # §6: hostile cost files
    ("401 digits json decide", (*DECIDE, "{root}/big401.json"), ("401-digit",)),
    ("401 digits json evaluate", (*EVALUATE, "--cost-matrix", "{root}/big401.json"), ("401-digit",)),
    ("5001 digits json decide", (*DECIDE, "{root}/big5001.json"), ("5001-digit",)),
    ("401 digits yaml decide", (*DECIDE, "{root}/big401.yaml"), ("401-digit",)),
    ("5001 digits yaml decide", (*DECIDE, "{root}/big5001.yaml"), ("big5001.yaml", "float64")),
    ("401 digits inline decide", (*DECIDE, '{"classes": [0, 1], "costs": [[0, 1], [' + "9" * 401 + ", 0]]}"),
     ("401-digit",)),
    ("deep json file decide", (*DECIDE, "{root}/deep.json"), ("deep.json", "deep")),
    ("deep json file evaluate", (*EVALUATE, "--cost-matrix", "{root}/deep.json"), ("deep.json", "deep")),
    ("deep yaml file decide", (*DECIDE, "{root}/deep.yaml"), ("deep.yaml", "deep")),
    ("deep json inline decide", (*DECIDE, '{"classes": {deep}}'), ("inline", "deep")),
    ("deep json inline evaluate", (*EVALUATE, "--cost-matrix", '{"classes": {deep}}'), ("inline", "deep")),
    ("non-utf8 decide", (*DECIDE, "{root}/latin1.json"), ("latin1.json", "UTF-8", "0xfb")),
    ("non-utf8 evaluate", (*EVALUATE, "--cost-matrix", "{root}/latin1.json"), ("latin1.json", "UTF-8")),
    ("file over 1 MiB", (*DECIDE, "{root}/large.json"), ("large.json", "1048576")),
    ("1e308 coefficient", (*DECIDE, '{"classes": [0, 1], "costs": [[0, "1e308*plasma_glucose"], [1, 0]]}'),
     ("plasma_glucose", "1e+290")),
    ("overflowing costs decide", (*DECIDE, OVERFLOW), ("plasma_glucose", "beyond 1e+290")),
    ("overflowing costs evaluate", (*EVALUATE, "--cost-matrix", OVERFLOW), ("plasma_glucose", "beyond 1e+290")),
    # the other file a user hands over: --multiclass file:PATH
    ("code matrix nested 50,000 deep", (*DIGITS, "file:{root}/cm-deep.json"), ("cm-deep.json", "nests too deep")),
    ("code matrix nested 500 deep", (*DIGITS, "file:{root}/cm-deep500.json"), ("cm-deep500.json", "-1, 0 or 1")),
    ("code matrix 5001 digits", (*DIGITS, "file:{root}/cm-5001.json"), ("cm-5001.json", "number too long")),
    ("code matrix over 32 MiB", (*DIGITS, "file:{root}/cm-large.csv"), ("cm-large.csv", "33554432")),
    # §3: --json-log writes a regular file or a new path, never over an input or inside the output
    ("json-log device", (*SCORE, "--json-log", "{device}"), ("--json-log", "not a regular file")),
    ("json-log fifo", (*SCORE, "--json-log", "{root}/fifo"), ("--json-log", "not a regular file")),
    ("json-log symlink", (*SCORE, "--json-log", "{root}/link.json"), ("--json-log", "symbolic link")),
    ("json-log directory", (*SCORE, "--json-log", "{root}"), ("--json-log", "directory")),
    ("json-log the data", (*SCORE, "--json-log", str(PIMA)), ("--json-log", "input", "pima.parquet")),
    ("json-log inside the model", (*SCORE, "--json-log", "{model}/manifest.json"), ("--json-log", "input")),
    ("json-log the cost matrix", (*DECIDE, "{root}/costs.json", "--json-log", "{root}/costs.json"),
     ("--json-log", "input", "costs.json")),
    ("json-log inside the output", (*SCORE, "--json-log", "{out}/run.json"), ("--json-log", "inside", "output")),
    ("json-log inside the fit output", (*FIT, "--json-log", "{out}/run.json"), ("--json-log", "inside", "output")),
    # §7
    ("evaluate seed -1", (*EVALUATE, "--json", "--bootstrap", "20", "--seed", "-1"), ("--seed", "4294967295")),
]


@pytest.fixture(scope="module")
def results(env):
    import queue

    zygotes: queue.Queue = queue.Queue()
    for _ in range(2):
        zygotes.put(Zygote())

    def one(i: int, case):
        name, args, _ = case
        if "{device}" in args and env["device"] is None:
            return name, (None, None)
        out = env["root"] / f"out-{i}"
        fill = {"model": env["model"], "root": env["root"], "out": out, "device": env["device"], "deep": env["deep"]}
        filled = [re.sub(r"\{(model|root|out|device|deep)\}", lambda m: str(fill[m.group(1)]), a) for a in args]
        zygote = zygotes.get()
        try:
            return name, (zygote.run(filled), out)
        finally:
            zygotes.put(zygote)

    try:
        with ThreadPoolExecutor(2) as pool:
            return dict(pool.map(lambda ic: one(*ic), enumerate(CASES)))
    finally:
        while not zygotes.empty():
            zygotes.get().close()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_one_line_and_nothing_published(case, results, env):
    r, out = results[case[0]]
    if r is None:
        pytest.skip("making a device node needs root")
    assert_one_error(r, 2, *case[2])
    assert "Warning" not in r.stderr and not r.stdout, r
    assert_nothing_left(out)
    if env["device"] is not None:
        assert stat.S_ISCHR(os.lstat(env["device"]).st_mode), "the device was replaced"
    assert stat.S_ISFIFO(os.lstat(env["root"] / "fifo").st_mode) and (env["root"] / "link.json").is_symlink()
    assert (env["root"] / "costs.json").read_text().startswith('{"classes"') and pq.read_metadata(PIMA).num_rows == 768


def test_the_bounds_hold_at_their_edges_and_the_manual_lists_each(env, tmp_path):
    """The largest accepted value passes the check (here, of a command that then runs quickly), and the
    manual's table of limits (docs/reference/conventions.md) names every bound with its value."""
    from calengine.cli.limits import LIMITS, MIN_WORKER_MEMORY

    r = run_cli("score", env["model"], PIMA, "--output", tmp_path / "s", "--batch-rows", "4194304", "--workers", "256")
    assert r.returncode == 0, r
    assert pq.read_table(tmp_path / "s").num_rows == 768
    page = (REPO / "docs" / "reference" / "conventions.md").read_text()  # the manual's table of limits
    section = page[page.index("## Limits"):]
    section = section[: section.index("\n#", 1)]
    for limit in LIMITS:
        row = next((line for line in section.splitlines() if line.startswith(f"| `{limit.option}")), None)
        assert row is not None, limit.option
        assert f"{limit.low:,}" in row or str(limit.low) in row, row
        assert f"{limit.high:,}" in row or str(limit.high) in row or "2**" in row, row
    assert f"{MIN_WORKER_MEMORY // 2**20} MiB" in section
    for words in ("1 MiB", "1e290", "alias", "32"):
        assert words in section, words


def test_a_json_log_that_cannot_be_written_after_publishing_is_a_warning(env, tmp_path):
    """The log's disk fills between the check and the end: the scores stay published, exit code 0,
    one warning line after the summary, no temporary file beside the log."""
    full = tmp_path / "full"
    if not _mount_tmpfs(full, "size=4k"):
        pytest.skip("needs root and tmpfs for a full file system")
    try:
        (full / "fill").write_bytes(b"\0" * 4096)
        r = run_cli("score", env["model"], PIMA, "--output", tmp_path / "s", "--json-log", full / "run.json")
        assert r.returncode == 0, r
        lines = r.stderr.splitlines()
        assert len(lines) == 2 and lines[0].startswith("scored 768 rows"), r
        assert lines[1].startswith("warning: the --json-log record was not written") and "ENOSPC" in lines[1], r
        assert sorted(p.name for p in full.iterdir()) == ["fill"]
        assert pq.read_table(tmp_path / "s").num_rows == 768
    finally:
        subprocess.run(["umount", str(full)], check=False)


def test_a_json_log_over_an_existing_log_is_replaced(env, tmp_path):
    log = tmp_path / "run.json"
    log.write_text("old")
    r = run_cli("score", env["model"], PIMA, "--output", tmp_path / "s", "--json-log", log)
    assert r.returncode == 0, r
    assert json.loads(log.read_text())["exit_code"] == 0
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []


_INTERRUPT_AT_PUBLISH = """
import os, signal, sys
real = os.rename
def rename(src, dst):
    real(src, dst)
    if ".tmp-" in os.fspath(src):  # the staging directory is now the output: Ctrl-C right here
        os.kill(os.getpid(), signal.SIGINT)
os.rename = rename
sys.argv = ["calengine", *sys.argv[1:]]
from calengine.cli import entry
entry()
"""


def test_ctrl_c_right_after_publishing_exits_0_with_the_output_whole(env, tmp_path):
    """A SIGINT that lands as the output is renamed into place: the output is complete, so the exit
    code is 0 (README: exit codes), one warning line says so, and the run log agrees."""
    out, log = tmp_path / "m", tmp_path / "run.json"
    proc = subprocess.run(
        [sys.executable, "-P", "-c", _INTERRUPT_AT_PUBLISH, "fit", str(PIMA), "--target", "class", "--output", str(out),
         "--json-log", str(log)], capture_output=True, text=True, cwd=str(REPO), timeout=300,
        preexec_fn=default_sigint)
    r = CLIResult(proc)
    assert r.returncode == 0, r
    assert r.stderr.splitlines() == [f"warning: interrupted after '{out}' was published; it is complete"], r
    from calengine.model.artifact import load_model

    model = load_model(out)
    assert model.predict_proba(pq.read_table(PIMA).to_pandas().drop(columns="class").head(5)).shape == (5, 2)
    record = json.loads(log.read_text())
    assert record["exit_code"] == 0 and record["error"] is None and record["rows_read"] == 768
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".m.")]


def test_a_closed_stdout_ends_evaluate_quietly_with_141(env):
    """``calengine evaluate ... | head -1``: the reader is gone, so the command ends at once with 141
    (128 + SIGPIPE, what ``cat`` and ``grep`` give), no traceback and nothing on stderr."""
    read, write = os.pipe()
    os.close(read)  # the reader left before the first byte
    try:
        proc = subprocess.run([sys.executable, "-P", "-m", "calengine", "evaluate", str(env["model"]), str(PIMA),
                               "--target", "class"], stdout=write, stderr=subprocess.PIPE, text=True, cwd=str(REPO),
                              timeout=300)
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""


def test_calibrated_classifier_missing_labels_are_a_typed_one_line_error():
    from calengine import CalibratedClassifier
    from calengine.errors import DataError

    import pandas as pd

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = np.r_[np.zeros(30), np.ones(30)]
    y[3] = np.nan
    labels = np.array(["a"] * 30 + ["b"] * 29 + [None], dtype=object)
    frame = pd.DataFrame(X, columns=["u", "v"])
    for X_, y_ in ((X, y), (X, labels), (frame, y), (frame, pd.Series(labels)), (X, list(y))):
        with pytest.raises(DataError, match="Input y contains NaN") as info:
            CalibratedClassifier().fit(X_, y_)
        assert "\n" not in str(info.value)


def test_python_api_cost_matrix_refuses_the_same_files(env):
    from calengine.decisions import load_cost_matrix
    from calengine.errors import ParameterError

    for name in ("laughs.yaml", "big401.json", "big5001.json", "deep.json", "latin1.json", "large.json"):
        with pytest.raises(ParameterError):
            load_cost_matrix(str(env["root"] / name))
    cm = load_cost_matrix(json.loads(OVERFLOW))
    with np.errstate(all="raise"), pytest.raises(Exception, match="beyond 1e"):  # no numpy warning first
        cm.expected_costs(np.full((2, 2), 0.5), {"plasma_glucose": np.array([1.0, 1e10])})
