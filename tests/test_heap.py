"""Fragment tasks hand freed heap memory back to the operating system (calengine.tasks.heap), except
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
    from calengine.tasks.heap import trims_heap

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
    from calengine.tasks import heap
    from calengine.tasks.heap import kept_heap, trims_heap

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
    from calengine import cluster
    from calengine.cli import main
    from calengine.tasks import heap

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
