"""Fragment tasks hand freed heap memory back to the operating system (calengine.runtime.heap), except
inside a job that keeps its heap for reuse (``kept_heap``: the ``calengine fit`` command's embedded map)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from contextlib import contextmanager

import pytest

PROBE = textwrap.dedent(
    """
    import numpy as np, psutil
    from calengine.runtime.heap import trims_heap

    def rss():
        return psutil.Process().memory_info().rss / 2**20

    def fragmenting_task():
        # 1 MiB arrays stay on the heap below a 4 MiB mmap threshold; freeing every other one leaves
        # holes the heap's top-only trim cannot return
        kept = [np.ones(2**17) for _ in range(200)]
        del kept[::2]
        return kept

    def after_task():
        return None

    plain = fragmenting_task()
    before = rss()
    trimmed = trims_heap(after_task)
    assert trimmed.__name__ == "after_task"
    trimmed()
    print(before, rss())
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
def test_a_trimmed_task_returns_the_holes_it_left_in_the_heap():
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(4 * 2**20), MALLOC_TRIM_THRESHOLD_=str(65536))
    out = subprocess.run([sys.executable, "-P", "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    before, after = map(float, out.stdout.split())
    # the first task left ~100 MiB of holes in the heap; a trimmed task ending gives them back
    assert before - after > 50, (before, after)


KEPT_PROBE = textwrap.dedent(
    """
    import sys
    import numpy as np, psutil
    from calengine.runtime import heap
    from calengine.runtime.heap import kept_heap, trims_heap

    def rss():
        return psutil.Process().memory_info().rss / 2**20

    def fragmenting_task():
        kept = [np.ones(2**17) for _ in range(200)]
        del kept[::2]
        return kept

    trimmed = trims_heap(lambda: None)
    range_task = heap.trims_heap_even_when_kept(lambda: None)
    with kept_heap(enabled=sys.argv[1] == "on"):
        plain = fragmenting_task()
        before = rss()
        trimmed()  # inside the job: a task's end leaves the freed holes for reuse
        inside = rss()
        keeping = heap._keeping
    after = rss()
    with kept_heap(enabled=sys.argv[1] == "on"):
        again = fragmenting_task()
        refilled = rss()
        range_task()  # a score-range task trims all the same
        forced = rss()
    print(before, inside, after, keeping, heap._keeping, refilled - forced)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
@pytest.mark.parametrize("enabled", [True, False])
def test_a_job_that_keeps_its_heap_returns_the_holes_only_when_it_ends(enabled):
    """The first probe's heap (1 MiB arrays below the mmap threshold, every other one freed): inside
    ``kept_heap`` a trimmed task's end keeps the holes, leaving the job returns them; disabled (a
    Python caller's process), the task returns them at once, as everywhere else.  The score-range
    tasks' decorator returns them inside the job too."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(4 * 2**20), MALLOC_TRIM_THRESHOLD_=str(65536))
    argv = [sys.executable, "-P", "-c", KEPT_PROBE, "on" if enabled else "off"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    before, inside, after, keeping, left, returned_by_range_task = out.stdout.split()
    before, inside, after = float(before), float(inside), float(after)
    assert int(left) == 0
    assert float(returned_by_range_task) > 50  # trims_heap_even_when_kept, kept heap or not
    if enabled:
        assert int(keeping) == 1
        assert before - inside < 10, (before, inside)
        assert before - after > 50, (before, after)
    else:
        assert int(keeping) == 0
        assert before - inside > 50, (before, inside)


def test_only_the_fit_commands_embedded_map_keeps_the_heap(monkeypatch, tmp_path):
    """``calengine fit --scores`` (a map over fragments on threads, in the command's own process) runs
    its job in a kept heap; ``calibrate_scores`` (the same fit in a Python caller's process) does not."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    import calengine
    from calengine.runtime import client as cluster
    from calengine.cli import main
    from calengine.runtime import heap

    rng = np.random.default_rng(0)
    s = rng.random(2_000)
    pq.write_table(pa.table({"s": s, "y": (rng.random(2_000) < s).astype(np.int8)}), tmp_path / "t.parquet")
    seen = []
    real = cluster.dask_client

    def recording(*args, **kwargs):
        seen.append(kwargs.get("keep_heap", False))
        with real(*args, **kwargs) as client:
            seen.append(heap._keeping)
            yield client

    monkeypatch.setattr(cluster, "dask_client", contextmanager(recording))
    argv = ["--quiet", "fit", str(tmp_path / "t.parquet"), "--target", "y", "--scores", "s", "--method", "sigmoid"]
    assert main([*argv, "--output", str(tmp_path / "cli")]) == 0
    calengine.calibrate_scores(str(tmp_path / "t.parquet"), "y", "s", method="sigmoid", output=str(tmp_path / "api"))
    assert seen == [True, 1, False, 0]
    assert heap._keeping == 0


def _environment(name: str):
    return os.environ.get(name)


def _heap_probe(n_arrays: int = 20):
    """(mapped regions a live 2 MiB array adds, page faults of allocating and freeing ``n_arrays`` of
    them), measured by glibc (``mallinfo2``) and the kernel (``getrusage``) in the worker."""
    import ctypes
    import resource

    import numpy as np

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                         "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    mallinfo2.restype = Mallinfo2

    def mapped() -> int:
        return int(mallinfo2().hblks)  # glibc's count of chunks it mapped apart from the heap

    before = mapped()
    a = np.ones(2**18)
    extra = mapped() - before
    del a
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n_arrays):
        b = np.ones(2**18)
        del b
    return extra, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults


def _fragmenting_task():
    """Leaves ~100 MiB of 1 MiB holes in the heap (as the first probe above), returns nothing."""
    import numpy as np

    kept = [np.ones(2**17) for _ in range(200)]
    del kept[::2]
    _fragmenting_task.held = kept  # the other half stays allocated, so the holes cannot merge away


def _resident_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _tasks_keeping_the_heap() -> int:
    from calengine.runtime import heap

    return heap._tasks


def _set_trim_fraction(value: float) -> None:
    from calengine.runtime import heap

    heap.TASK_TRIM_FRACTION = value


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt and mallinfo2 are glibc's")
def test_a_nanny_workers_fragment_task_keeps_its_temporaries_on_the_heap(tmp_path, monkeypatch):
    """A ``dask worker`` started apart runs under its nanny's ``MALLOC_TRIM_THRESHOLD_``, which freezes
    glibc's mmap threshold at 128 KiB: a plain task's 2 MiB arrays are each a fresh mapping, faulted in
    page by page.  Inside a fragment task (``trims_heap``) they come from the heap and are reused; the
    next plain task sees the worker's own thresholds again.  The holes a fragment task leaves stay for
    the next one while the worker is far below its memory limit, and go back above
    ``TASK_TRIM_FRACTION`` of it."""
    import ctypes

    from distributed import Client

    from calengine.runtime import heap
    from calengine.testing.cluster import start_dask_processes, stop_processes

    if not hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2"):
        pytest.skip("glibc older than 2.33 (no mallinfo2)")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/: scheduler and worker import this module (runtime.test_heap)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in [here, os.environ.get("PYTHONPATH")] if p))
    # a worker started by hand, with no threshold of its own: distributed's Nanny writes its
    # pre-spawn-environ into os.environ for good, so an earlier --cluster local in this process
    # (another test) would have left MALLOC_MMAP_THRESHOLD_ here for the worker to inherit
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    address, procs = start_dask_processes(workers=1, cwd=tmp_path, memory_limit="1GiB")
    try:
        with Client(address, set_as_default=False) as client:
            env = client.run(_environment, "MALLOC_TRIM_THRESHOLD_")
            assert list(env.values()) == ["65536"]  # the nanny's setting, which freezes the mmap threshold
            assert list(client.run(_environment, "MALLOC_MMAP_THRESHOLD_").values()) == [None]
            plain_before = client.submit(_heap_probe, pure=False).result()
            in_task = client.submit(heap.trims_heap(_heap_probe), pure=False).result()
            scopes = client.submit(heap.trims_heap(_tasks_keeping_the_heap), pure=False).result()
            plain_after = client.submit(_heap_probe, pure=False).result()
            # far below the worker's memory limit, a task's freed pages wait for the next task ...
            client.submit(heap.trims_heap(_fragmenting_task), pure=False).result()
            kept = client.submit(_resident_mib, pure=False).result()
            client.run(_set_trim_fraction, 0.0)  # ... and above TASK_TRIM_FRACTION of it they go back
            client.submit(heap.trims_heap(_fragmenting_task), pure=False).result()
            trimmed = client.submit(_resident_mib, pure=False).result()
    finally:
        stop_processes(procs)
    # (a plain task's first array may be a mapping of its own or, when the heap's top has room, come from
    # it: which depends on what the worker ran before; the faults below are what the frozen threshold costs)
    assert scopes == 1 and in_task[0] == 0, in_task  # from the heap
    # 20 arrays of 512 pages: each faulted in anew outside a fragment task, before it and after it
    # (the worker's own trim threshold again: freed memory at the heap's top goes back at once), the
    # first one's pages reused inside
    assert plain_before[1] > 20 * 400 and plain_after[1] > 20 * 400, (plain_before, plain_after)
    assert in_task[1] < 2 * 512, in_task
    assert kept - trimmed > 50, (kept, trimmed)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_a_worker_whose_environment_sets_the_mmap_threshold_keeps_its_own(tmp_path, monkeypatch):
    """A worker started with ``MALLOC_MMAP_THRESHOLD_`` (as ``--cluster local`` starts them, or as its
    owner chose) runs fragment tasks under that setting: no task keeps the heap."""
    from distributed import Client

    from calengine.runtime import heap
    from calengine.testing.cluster import start_dask_processes, stop_processes

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/, where runtime.test_heap is found
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in [here, os.environ.get("PYTHONPATH")] if p))
    address, procs = start_dask_processes(workers=1, cwd=tmp_path, memory_limit="1GiB",
                                          worker_env={"MALLOC_MMAP_THRESHOLD_": str(4 * 2**20)})
    try:
        with Client(address, set_as_default=False) as client:
            scopes = client.submit(heap.trims_heap(_tasks_keeping_the_heap), pure=False).result()
    finally:
        stop_processes(procs)
    assert scopes == 0
