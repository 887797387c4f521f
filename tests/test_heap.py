"""Fragment tasks hand freed heap memory back to the operating system (calengine.tasks.heap)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

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
