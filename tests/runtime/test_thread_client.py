"""The thread pool that runs score/decide/evaluate without --cluster behaves as the part of
``distributed.Client`` those commands use, and their results are the embedded Dask scheduler's."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
from cli_helpers import PIMA, run_cli

from calengine.runtime.thread_client import ThreadClient, as_completed



def test_submit_resolves_future_arguments_and_gathers_in_submission_order():
    with ThreadClient(2) as client:
        base = client.submit(lambda: 10, pure=False)
        held = client.scatter([1, 2], broadcast=False)
        assert client.gather([client.submit(lambda a, b: a + b, *held)]) == [3]
        assert client.scatter("x").result() == "x"
        assert client.submit(lambda a, b=0: a - b, 5, b=client.scatter(2)).result() == 3
        futures = [client.submit(lambda b, i: (time.sleep(0.02 * (5 - i)), b + i)[1], base, i) for i in range(5)]
        assert client.gather(futures) == [10, 11, 12, 13, 14]
        finished = [f.result() for f in as_completed(client, futures)]
        assert sorted(finished) == [10, 11, 12, 13, 14]
        kinds = sorted(r["key"].rsplit("-", 1)[0] for r in client.task_records)
        assert kinds == ["<lambda>"] * 8
        assert all(r["startstops"][0]["stop"] >= r["startstops"][0]["start"] for r in client.task_records)


def test_a_failed_task_raises_its_own_exception_and_close_cancels_what_has_not_started():
    gate = threading.Event()
    started = []

    def slow(i):
        started.append(i)
        gate.wait(5)
        return i

    client = ThreadClient(1)
    bad = client.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        client.gather([bad])
    futures = [client.submit(slow, i) for i in range(4)]
    while not started:
        time.sleep(0.005)
    client.close()
    gate.set()
    assert futures[0].result(timeout=5) == 0
    assert all(f.cancelled() for f in futures[1:]) and started == [0]
    with pytest.raises(ValueError, match="at least 1"):
        ThreadClient(0)


def test_a_dependent_task_sees_its_argument_fail():
    with ThreadClient(2) as client:
        model = client.submit(lambda: {}["missing"])
        chunk = client.submit(lambda m: m, model)
        with pytest.raises(KeyError):
            client.gather([chunk])


def test_threads_and_the_embedded_dask_scheduler_score_and_evaluate_the_same(tmp_path):
    """The same tasks on a ThreadClient and on ``LocalCluster(processes=False)``: byte-identical
    scored files (several chunks) and identical metrics."""
    from distributed import Client, LocalCluster

    from calengine.model.artifact import load_model
    from calengine.metrics.table import evaluate_table
    from calengine.scores.table import score_table

    r = run_cli("--quiet", "fit", PIMA, "--target", "class", "--method", "sigmoid", "--workers", "1",
                "--output", tmp_path / "m")
    assert r.returncode == 0, r
    model = load_model(tmp_path / "m")
    data = str(tmp_path / "pima-row-groups.parquet")
    pq.write_table(pq.read_table(PIMA), data, row_group_size=100)  # 8 chunks of at most 100 rows
    with ThreadClient(2) as threads:
        n = score_table(threads, model, [data], str(tmp_path / "t"), chunk_rows=100, batch_rows=64)
        acc_t = evaluate_table(threads, model, [data], "class", chunk_rows=100, batch_rows=64)
        assert len(threads.task_records) == 2 * (8 + 1)
    with LocalCluster(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as lc, \
            Client(lc) as dask:
        score_table(dask, model, [data], str(tmp_path / "d"), chunk_rows=100, batch_rows=64)
        acc_d = evaluate_table(dask, model, [data], "class", chunk_rows=100, batch_rows=64)
    assert n == 768
    parts_t = sorted(p.name for p in (tmp_path / "t").iterdir())
    assert parts_t == sorted(p.name for p in (tmp_path / "d").iterdir()) and len(parts_t) > 1
    for name in parts_t:
        assert (tmp_path / "t" / name).read_bytes() == (tmp_path / "d" / name).read_bytes()
    assert acc_t["calibrated"].result() == acc_d["calibrated"].result()
    assert acc_t["raw"].result() == acc_d["raw"].result()


def test_json_log_of_an_embedded_score_records_the_thread_tasks(tmp_path):
    r = run_cli("--quiet", "fit", PIMA, "--target", "class", "--method", "isotonic", "--workers", "1",
                "--output", tmp_path / "m")
    assert r.returncode == 0, r
    log = tmp_path / "score.json"
    r = run_cli("score", tmp_path / "m", PIMA, "--output", tmp_path / "s", "--workers", "2", "--json-log", log)
    assert r.returncode == 0, r
    rec = json.loads(log.read_text())
    assert rec["cluster"]["kind"] == "embedded" and rec["cluster"]["dashboard"] is None
    assert rec["cluster"]["workers"] == [{"address": "threads", "host": "127.0.0.1", "name": "threads",
                                          "nthreads": 2, "memory_limit": None}]
    tasks = rec["tasks"]
    assert tasks["by_kind"]["score_chunk"]["count"] == 1 and tasks["by_kind"]["the_model"]["count"] == 1  # as dask.utils.key_split names it
    assert tasks["count"] == 2 and tasks["by_worker"]["threads"]["count"] == 2
    assert rec["rows_read"] == pq.read_table(tmp_path / "s").num_rows == 768


def test_numpy_expit_is_scipys_logistic():
    """The builtins' expit keeps scipy's formula and special values.  Where NumPy's float64 exp is the
    C library's (x86-64 without AVX-512) it is within an ulp of scipy's (bit for bit on the machines
    measured); with AVX-512 NumPy uses its own vectorised exp, and the results were measured within 4
    ulps (at x near -37, where 1 + exp(-x) rounds to exp(-x) and exp's own error passes through)."""
    from calengine_builtins.deferred import expit
    from numpy._core._multiarray_umath import __cpu_features__
    from scipy.special import expit as scipy_expit

    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(200_000) * s for s in (1e-300, 1.0, 40.0, 800.0)]
                       + [np.array([0.0, -0.0, np.inf, -np.inf, 709.0, -709.0, -745.0, 1e308, -1e308])])
    ref = scipy_expit(x)
    got = expit(x)
    np.testing.assert_array_max_ulp(got, ref, maxulp=4 if __cpu_features__.get("AVX512F") else 1)
    assert got[-9:].tolist() == ref[-9:].tolist()
    assert np.isnan(expit(np.array([np.nan]))).all()
    assert expit(np.float64(0.0)) == 0.5 and expit(np.array(2.0)) == scipy_expit(2.0)  # scalars: scipy's
    inplace = x.copy()
    assert expit(inplace, out=inplace) is inplace
    np.testing.assert_array_equal(inplace, got)
    x32 = x[np.abs(x) < 1e30].astype(np.float32)
    np.testing.assert_array_equal(expit(x32), scipy_expit(x32))  # other dtypes are scipy's own


def test_futures_inside_containers_are_resolved_and_one_future_gathers_to_its_result():
    """As Dask does: a fit hands its score tasks the list of its learners' futures, and gathers one
    block's statistics at a time."""
    with ThreadClient(2) as client:
        a, b = client.submit(lambda: 1), client.submit(lambda: 2)
        nested = client.submit(lambda xs, d: (xs, d), [a, (b, 3)], d={"k": [a]})
        assert client.gather(nested) == ([1, (2, 3)], {"k": [1]})
        assert client.gather([nested, a]) == [([1, (2, 3)], {"k": [1]}), 1]


@pytest.mark.parametrize("method", ["isotonic", "sigmoid", "temperature", "venn_abers"])
def test_score_column_fit_on_threads_is_the_embedded_dask_fit(tmp_path, method):
    """``fit --scores`` without --cluster runs on a ThreadClient (calengine.fit.score_columns.runs_as_map):
    the same tasks, tree merges, spilled blocks and score ranges as on ``LocalCluster(processes=False)``,
    so the calibrator files are the same bytes.  The threads run as the ``calengine fit`` command runs
    them, keeping freed memory for reuse (calengine.runtime.heap.kept_heap), which moves no bit."""
    import pyarrow as pa
    from distributed import Client, LocalCluster

    import calengine.plan.memory as memory
    from calengine.fit.table import TableSpec, fit_table
    from calengine.fit.training import FitConfig
    from calengine.model.artifact import save_model
    from calengine.runtime.heap import kept_heap

    rng = np.random.default_rng(3)
    folder = tmp_path / "t"
    folder.mkdir()
    for i in range(3):  # 9 fragments of 400 rows: a two-level tree merge and several blocks
        s = np.round(rng.random(1_200), 3)
        pq.write_table(pa.table({"s": s, "y": (rng.random(1_200) < s).astype(np.int8)}), folder / f"p{i}.parquet",
                       row_group_size=400)
    spec = TableSpec(data=str(folder), target="y", scores=("s",), fragment_rows=400)
    config = FitConfig(method=method, method_params={}, seed=0)
    old = memory.SPILL_MIN_ROWS
    memory.SPILL_MIN_ROWS = 0  # the blocks go to disk on both clients
    try:
        with ThreadClient(2) as threads, kept_heap():
            save_model(fit_table(threads, spec, config), tmp_path / "threads")
        with LocalCluster(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as lc, \
                Client(lc) as dask:
            save_model(fit_table(dask, spec, config), tmp_path / "dask")
    finally:
        memory.SPILL_MIN_ROWS = old
    files = sorted(p.relative_to(tmp_path / "dask") for p in (tmp_path / "dask").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "threads") for p in (tmp_path / "threads").rglob("*") if p.is_file())
    for rel in files:
        assert (tmp_path / "threads" / rel).read_bytes() == (tmp_path / "dask" / rel).read_bytes(), rel


def test_thread_client_plans_with_the_embedded_workers_memory_limit():
    """An embedded fit on threads sizes fragments and ranges, and refuses what would not fit, with the
    limit Dask gives the embedded scheduler's one worker (distributed.system.MEMORY_LIMIT by its
    threads' share of the cores)."""
    import os

    from distributed.system import MEMORY_LIMIT

    from calengine.plan.memory import worker_memory_limit

    with ThreadClient(1) as client:
        assert worker_memory_limit(client) == float(int(MEMORY_LIMIT * min(1.0, 1 / (os.cpu_count() or 1))))


@pytest.mark.parametrize("case", ["folds", "hold-out", "weighted"])
def test_learner_fit_from_statistics_on_threads_is_the_embedded_dask_fit(tmp_path, case):
    """An embedded fit of a learner from statistics runs on a ThreadClient
    (calengine.fit.score_columns.learner_fit_runs_as_map): its statistics tasks, merges, held-out
    scores and calibrator summaries are the embedded Dask scheduler's, so the model is the same bytes;
    the CLI takes that route for gaussian_nb and keeps Dask for a learner fitted on assembled rows."""
    import pyarrow as pa
    from distributed import Client, LocalCluster

    import calengine.plan.memory as memory
    from calengine.fit.score_columns import learner_fit_runs_as_map
    from calengine.fit.table import TableSpec, fit_table
    from calengine.fit.training import FitConfig
    from calengine.model.artifact import save_model
    from calengine.plugins.loading import get_plugins

    rng = np.random.default_rng(5)
    folder = tmp_path / "t"
    folder.mkdir()
    for i in range(4):  # 8 fragments of 300 rows
        X = rng.normal(size=(600, 3))
        y = (X[:, 0] + rng.normal(size=600) > 0).astype(np.int8)
        cols = {"a": X[:, 0].astype(np.float32), "b": X[:, 1], "c": np.round(X[:, 2] * 3).astype(np.int32), "y": y}
        if case == "weighted":
            cols["w"] = rng.integers(1, 4, size=600).astype(np.float64)
        pq.write_table(pa.table(cols), folder / f"p{i}.parquet", row_group_size=300)
    data = str(folder / "p[012].parquet") if case == "hold-out" else str(folder)
    spec = TableSpec(data=data, target="y", fragment_rows=300, weight="w" if case == "weighted" else None,
                     calibration_data=str(folder / "p3.parquet") if case == "hold-out" else None)
    config = FitConfig(learner="gaussian_nb", method="isotonic", seed=0)
    plugins = get_plugins()
    assert learner_fit_runs_as_map(config, spec, plugins)
    assert not learner_fit_runs_as_map(FitConfig(learner="decision_tree", method="isotonic"), spec, plugins)
    assert not learner_fit_runs_as_map(FitConfig(learner="gaussian_nb,logistic_regression", method="isotonic"), spec,
                                       plugins)
    old = memory.SPILL_MIN_ROWS
    memory.SPILL_MIN_ROWS = 0  # the held-out blocks go to disk on both clients
    try:
        with ThreadClient(2) as threads:
            save_model(fit_table(threads, spec, config), tmp_path / "threads")
        with LocalCluster(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as lc, \
                Client(lc) as dask:
            save_model(fit_table(dask, spec, config), tmp_path / "dask")
    finally:
        memory.SPILL_MIN_ROWS = old
    files = sorted(p.relative_to(tmp_path / "dask") for p in (tmp_path / "dask").rglob("*") if p.is_file())
    assert len(files) > 2
    for name in files:
        assert (tmp_path / "threads" / name).read_bytes() == (tmp_path / "dask" / name).read_bytes(), name
