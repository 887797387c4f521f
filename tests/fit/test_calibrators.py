"""calengine.fit.calibrators: calibrators fitted as reductions over held-out score blocks.

fit_calibrators against the calibrator's own in-memory fit (the oracle), for a sorted reduction
(isotonic: score ranges cut from the blocks, which are then released) and an unsorted one (sigmoid:
rounds of per-block statistics, the blocks kept), on an embedded client and on a LocalCluster.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from calengine.base import fresh_copy
from calengine.fit.calibrators import ScoreBlocks, calibration_problems, fit_calibrators, merge_summaries
from calengine.plugins import get_plugins, registry
from calengine.runtime.context import RunContext
from calengine.tasks import partitions as pt

N = 40_000
#: a worker memory limit that makes score ranges of 10,000 rows (calengine.plan.memory.range_rows_for)
MEMORY = 10_000 * 8 * 128


def _data(seed=0):
    rng = np.random.default_rng(seed)
    s = rng.random(N)
    y = (rng.random(N) < s**2).astype(np.int8)
    return s, y


def _fit(client, method, s, y, n_blocks=7, spill_dir=None):
    makes = []
    parts = np.array_split(np.arange(N), n_blocks)

    def make():
        makes.append(1)
        return [client.submit(pt.as_given, pt.ScoreBlock([(s[p][:, None], y[p][:, None], None)]), pure=False)
                for p in parts]

    blocks = ScoreBlocks(make)
    summaries = [pt.block_summary(b)[0] for b in client.gather(blocks.get())]
    merged = [merge_summaries(summaries)]
    calibrator = registry.make("calibrators", method, {}, get_plugins())
    problems = calibration_problems(merged, calibrator)
    ctx = SimpleNamespace(memory_limit=MEMORY, n_rows=N)
    run = RunContext(client, spill_dir=None if spill_dir is None else str(spill_dir))
    (cal,) = fit_calibrators(run, blocks, merged, problems, calibrator, "proba", ctx)
    return cal, blocks, makes, calibrator


@pytest.mark.parametrize("method, released, spilled", [("isotonic", True, False), ("isotonic", True, True),
                                                       ("sigmoid", False, False)])
def test_fit_calibrators_equals_the_in_memory_fit(method, released, spilled, tmp_path):
    """With a spill directory the score ranges are cut into files (one per split task and problem,
    calengine.tasks.spill) and the range tasks read their slices: the same fit."""
    from calengine.runtime.client import dask_client

    s, y = _data()
    with dask_client(None, workers=2) as client:
        cal, blocks, makes, calibrator = _fit(client, method, s, y, spill_dir=tmp_path if spilled else None)
    if spilled:
        assert any(tmp_path.iterdir())  # the ranges went to disk
    oracle = fresh_copy(calibrator).fit(s, y, score_kind="proba")
    grid = np.linspace(0, 1, 1001)
    np.testing.assert_allclose(cal.predict(grid), oracle.predict(grid), rtol=0, atol=1e-9)
    assert len(makes) == 1  # the blocks were made once: never remade for a round that did not need them
    assert (blocks._futures is None) is released  # a sorted fit frees the blocks once its ranges are cut


def test_the_fit_is_the_same_on_a_local_cluster_and_however_the_rows_are_blocked():
    from calengine.runtime.client import dask_client

    s, y = _data(1)
    with dask_client(None, workers=2) as client:
        a, *_ = _fit(client, "isotonic", s, y, n_blocks=3)
    with dask_client("local", workers=2) as client:
        b, *_ = _fit(client, "isotonic", s, y, n_blocks=11)
    grid = np.linspace(0, 1, 1001)
    assert np.array_equal(a.predict(grid), b.predict(grid))


def test_score_blocks_are_made_again_after_release():
    made = []
    blocks = ScoreBlocks(lambda: made.append(1) or [len(made)])
    assert blocks.get() == [1] and blocks.get() == [1]
    blocks.release()
    assert blocks.get() == [2] and len(made) == 2
    assert math.isfinite(MEMORY)
