"""Embedded fits keep held-out scores on disk from SPILL_MIN_ROWS rows (calengine.tasks.spill): the
model must be bit-identical to the one fitted with the scores in memory, the files must really be
written and read, and the scratch directory must be gone afterwards, whether the fit succeeds or fails."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import calengine
import calengine.plan.memory as memory
import calengine.parquet.storage as storage
import calengine.tasks.spill as spill
from calengine.errors import CalengineError


def _table(folder, n=3_000, seed=5, weights=False):
    rng = np.random.default_rng(seed)
    s = np.round(rng.random(n), 3)  # ties inside and across files
    y = (rng.random(n) < s**1.5).astype(np.int8)
    x = rng.normal(size=n) + y
    cols = {"s": s, "x": x, "y": y}
    if weights:
        cols["w"] = rng.integers(0, 4, size=n).astype(np.float64)
    folder.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(n), 3)):
        pq.write_table(pa.table({k: v[part] for k, v in cols.items()}), folder / f"p{i}.parquet", row_group_size=400)
    return folder


@pytest.fixture
def spy(monkeypatch):
    """Record every file the spill module writes and reads (tasks are threads of this process)."""
    seen = {"saved": [], "loaded": 0}
    save, load = spill._save, spill._load

    def _save(directory, array):
        path = save(directory, array)
        seen["saved"].append(path)
        return path

    def _load(path):
        seen["loaded"] += 1
        return load(path)

    monkeypatch.setattr(spill, "_save", _save)
    monkeypatch.setattr(spill, "_load", _load)
    return seen


def _probabilities(model, grid):
    return np.asarray(model.predict_frame(pd.DataFrame(grid)), dtype=np.float64)


@pytest.mark.parametrize("method,weights", [("isotonic", False), ("isotonic", True), ("sigmoid", True),
                                            ("venn_abers", False)])
def test_score_column_fit_spilled_equals_in_memory(tmp_path, monkeypatch, spy, method, weights):
    data = _table(tmp_path / "t", weights=weights)
    kw = {"weight": "w"} if weights else {}
    monkeypatch.setattr(memory, "SPILL_MIN_ROWS", 10**12)
    kept = calengine.calibrate_scores(data, "y", scores="s", method=method, **kw)
    assert spy["saved"] == []
    monkeypatch.setattr(memory, "SPILL_MIN_ROWS", 0)
    spilled = calengine.calibrate_scores(data, "y", scores="s", method=method, **kw)
    assert spy["saved"] and spy["loaded"] >= len(spy["saved"])  # blocks and range pieces went to disk
    assert not any(os.path.exists(p) for p in spy["saved"])  # and the scratch is gone
    grid = {"s": np.linspace(0.0, 1.0, 2001)}
    assert np.array_equal(_probabilities(kept, grid), _probabilities(spilled, grid))


def test_learner_fit_with_folds_spilled_equals_in_memory(tmp_path, monkeypatch, spy):
    data = _table(tmp_path / "t", seed=9)
    args = dict(learner="gaussian_nb", method="isotonic", cv=3, seed=4, features=["x"])
    monkeypatch.setattr(memory, "SPILL_MIN_ROWS", 10**12)
    kept = calengine.fit_table(data, "y", **args)
    monkeypatch.setattr(memory, "SPILL_MIN_ROWS", 0)
    spilled = calengine.fit_table(data, "y", **args)
    assert spy["saved"]
    grid = {"x": np.linspace(-4, 5, 901)}
    assert np.array_equal(_probabilities(kept, grid), _probabilities(spilled, grid))


def test_scratch_is_removed_when_the_fit_fails(tmp_path, monkeypatch, spy):
    """A failure after the scores were spilled (here: the calibrator's reduction raising) leaves nothing."""
    data = _table(tmp_path / "t")
    monkeypatch.setattr(memory, "SPILL_MIN_ROWS", 0)
    import calengine.tasks.partitions as pt

    def broken(*args, **kwargs):
        raise calengine.errors.DataError("planted failure after the spill")

    monkeypatch.setattr(pt, "range_partial_stats", broken)
    with pytest.raises(CalengineError, match="planted failure"):
        calengine.calibrate_scores(data, "y", scores="s", method="isotonic")
    assert spy["saved"]
    assert not any(os.path.exists(p) for p in spy["saved"])


def test_local_cluster_worker_processes_spill_too(tmp_path, monkeypatch):
    """``--cluster local``: the worker processes write and read the scratch files of this process's
    directory; the model is the same as with the scores in the workers' memory."""
    data = _table(tmp_path / "t", seed=11)
    decided = []
    real = memory.spills_held_out

    def spills(client, n_rows):
        decided.append(real(client, n_rows))
        return decided[-1]

    monkeypatch.setattr(memory, "spills_held_out", spills)
    monkeypatch.setattr(memory, "SPILL_MIN_ROWS", 10**12)
    kept = calengine.calibrate_scores(data, "y", scores="s", method="isotonic", cluster="local", workers=2)
    monkeypatch.setattr(memory, "SPILL_MIN_ROWS", 0)
    spilled = calengine.calibrate_scores(data, "y", scores="s", method="isotonic", cluster="local", workers=2)
    assert decided == [False, True]
    grid = {"s": np.linspace(0.0, 1.0, 2001)}
    assert np.array_equal(_probabilities(kept, grid), _probabilities(spilled, grid))


def test_every_task_side_npy_read_parses_its_header_under_the_one_lock(tmp_path, monkeypatch):
    """CPython 3.11's ast.literal_eval (np.load's header parser) fails across threads ("AST constructor
    recursion depth mismatch", seen in evaluate's range tasks): the held-out spill and the evaluate range
    files read .npy headers only while holding spill's lock.  Any read that bypasses it fails here."""
    import ast

    from calengine.metrics.ranged import engine as range_eval

    parse, seen = ast.literal_eval, []

    def checked(text):
        seen.append(spill._NPY_HEADER_LOCK.locked())
        return parse(text)

    monkeypatch.setattr(ast, "literal_eval", checked)
    block = np.arange(5.0)
    assert np.array_equal(spill._load(spill._save(str(tmp_path), block)), block)
    table = (np.array([0.1, 0.2, 0.7]), np.array([1, 0, 2]), np.array([0, 1, 1]))
    handle = range_eval._save(table, str(tmp_path / "t"))
    whole, part = range_eval.load_table(handle), range_eval.load_table(handle, 0.15, 0.5)
    assert [a.tolist() for a in whole] == [a.tolist() for a in table]
    assert [a.tolist() for a in part] == [[0.2], [0], [1]]
    assert seen and all(seen), seen


@pytest.mark.cluster
def test_started_cluster_on_this_host_spills_too(tmp_path, monkeypatch):
    """``--cluster ADDRESS`` of ``dask worker`` processes on this host: every worker proves it shares the
    driver's scratch directory (memory.workers_share), the held-out scores are written there by the
    workers (the driver itself writes only the probe), and the model is the same bits as with the
    scores kept in the workers' memory."""
    import contextlib

    import calengine.fit.table as table_mod
    from calengine.testing.cluster import start_dask_processes, stop_processes

    data = _table(tmp_path / "t", seed=13)
    decided, written = [], []
    real_share, real_scratch = memory.workers_share, memory.held_out_scratch

    def share(client, directory):
        decided.append(real_share(client, directory))
        return decided[-1]

    @contextlib.contextmanager
    def scratch(client, n_rows):
        with real_scratch(client, n_rows) as d:
            yield d
            written.append(None if d is None else sorted(os.listdir(d)))

    monkeypatch.setattr(memory, "workers_share", share)
    monkeypatch.setattr(table_mod, "held_out_scratch", scratch)
    address, procs = start_dask_processes(2, tmp_path, memory_limit="1GiB")
    try:
        monkeypatch.setattr(memory, "SPILL_MIN_ROWS", 10**12)
        kept = calengine.calibrate_scores(data, "y", scores="s", method="isotonic", cluster=address)
        monkeypatch.setattr(memory, "SPILL_MIN_ROWS", 0)
        spilled = calengine.calibrate_scores(data, "y", scores="s", method="isotonic", cluster=address)
    finally:
        stop_processes(procs)
    assert decided == [True]  # asked once: below SPILL_MIN_ROWS nothing is asked
    assert written[0] is None
    assert written[1][-1] == storage.PROBE_NAME and all(f.endswith((".npy", ".bin")) for f in written[1][:-1])
    assert len(written[1]) > 3 + 1  # a block per file (3) and the range pieces cut from them, beside the probe
    grid = {"s": np.linspace(0.0, 1.0, 2001)}
    assert np.array_equal(_probabilities(kept, grid), _probabilities(spilled, grid))


def test_a_worker_that_does_not_share_the_directory_keeps_the_scores_in_memory(tmp_path):
    """sees_directory (run on each worker) answers False, never raises, for another host's directory at
    the same path (another token), for a path that does not exist and for one it cannot write to."""
    (tmp_path / storage.PROBE_NAME).write_text("token-of-this-driver")
    assert storage.sees_directory(str(tmp_path), "token-of-this-driver")
    assert sorted(os.listdir(tmp_path)) == [storage.PROBE_NAME]  # its own test file is gone
    assert not storage.sees_directory(str(tmp_path), "token-of-another-driver")
    assert not storage.sees_directory(str(tmp_path / "missing"), "token-of-this-driver")
    if os.geteuid() != 0:  # root writes through the mode bits
        tmp_path.chmod(0o500)
        try:
            assert not storage.sees_directory(str(tmp_path), "token-of-this-driver")
        finally:
            tmp_path.chmod(0o700)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=7),
    n_bounds=st.integers(0, 4),
    seed=st.integers(0, 2**16),
)
def test_spilled_split_reads_back_each_range_of_the_in_memory_split(tmp_path_factory, sizes, n_bounds, seed):
    """split_blocks with a scratch directory: every (problem, range) piece reads back as exactly the
    rows (same order, same dtypes) the in-memory split gives, and the task wrote one file per problem
    and array, however many blocks and ranges -- two .npy files per (block, range) made the scratch of
    a 10^9-row fit a million files (issue 43)."""
    from calengine.tasks import partitions as pt

    rng = np.random.default_rng(seed)
    weighted = bool(seed % 2)
    blocks = []
    for n in sizes:
        S = rng.integers(0, 6, size=(n, 2)).astype(np.float64) / 5
        T = rng.integers(0, 2, size=(n, 2)).astype(np.int8)
        blocks.append(pt.ScoreBlock([(S, T, rng.random(n) if weighted else None)]))
    bounds = np.unique(rng.integers(0, 6, n_bounds) / 5)
    problems = [(0, 0, 0, bounds), (1, 0, 1, bounds[:1])]
    kept = pt.split_blocks(problems, *blocks)
    directory = tmp_path_factory.mktemp("split")
    handle = pt.split_blocks(problems, *blocks, spill_dir=str(directory))
    assert len(os.listdir(directory)) == 2 * (3 if weighted else 2)  # problems x (s, t[, w])
    for key, (s, t, w) in kept.items():
        parts = spill.piece_parts(handle.piece(key))
        if s.size == 0:
            assert parts == []
            continue
        (s2, t2, w2), = parts
        assert s2.dtype == s.dtype and t2.dtype == t.dtype
        np.testing.assert_array_equal(s2, s)
        np.testing.assert_array_equal(t2, t)
        if weighted:
            np.testing.assert_array_equal(w2, w)
        else:
            assert w is None and w2 is None
