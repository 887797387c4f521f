"""The per-process cache of score ranges (calengine.metrics.ranged.cache) and the blocked fixed-point sums
behind the calibration fits' Newton rounds: both must leave every result bit for bit as it was, and the
cache must stay within its byte budget."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calengine.metrics.ranged import kernels
from calengine.reductions.exact import fixed_sum, fixed_sum_rows
from calengine.metrics.ranged.cache import RangeCache


def table(n, seed=0, lo=0.0):
    rng = np.random.default_rng(seed)
    v = np.unique(lo + rng.random(n) * (1.0 - lo))
    return v, rng.integers(0, 3, v.size), rng.integers(0, 3, v.size)


def loader(tables):
    loads = []

    def load(path):
        loads.append(path)
        return tables[path]

    return load, loads


def test_a_range_is_read_once_and_its_derived_arrays_are_kept_read_only():
    tables = {"/s/calibrated-1-r0": table(1000)}
    cache = RangeCache(1 << 20)
    load, loads = loader(tables)
    first = cache.get("/s/calibrated-1-r0", load)
    assert cache.get("/s/calibrated-1-r0", load) is first and loads == ["/s/calibrated-1-r0"]
    v, a, b, m = kernels.counts(first, None)
    assert kernels.counts(first, None)[3] is m  # kept: the next pass does not recompute it
    with pytest.raises(ValueError):
        m[0] = 1  # a kernel writing into a cached array would change the next pass's input
    assert cache.used == first[0].nbytes * 3 + m.nbytes  # v, a, b are the range's own: counted once


def test_the_budget_holds_and_other_tables_are_evicted_before_the_swept_one():
    # five ranges of 24 kB each, a budget of three: sweeping one table keeps its first ranges
    tables = {f"/s/calibrated-{t}-r{r}": table(1000, seed=10 * t + r) for t in (0, 1) for r in range(5)}
    size = sum(x.nbytes for x in tables["/s/calibrated-0-r0"])
    cache = RangeCache(3 * size)
    load, loads = loader(tables)
    for _ in range(3):
        for r in range(5):
            cache.get(f"/s/calibrated-0-r{r}", load)
            assert cache.used <= cache.budget
    # the first pass read all five, later passes only the two that did not fit
    assert loads.count("/s/calibrated-0-r0") == 1 and loads.count("/s/calibrated-0-r4") == 3
    # a pass over another table evicts the first one's ranges, least recently used first
    cache.get("/s/calibrated-1-r0", load)
    assert "/s/calibrated-1-r0" in cache._ranges and len(cache) == 3 and cache.used <= cache.budget
    # derived arrays that do not fit are computed, not kept
    cached = cache.get("/s/calibrated-1-r0", load)
    kernels.counts(cached, 0.5)
    assert cache.used <= cache.budget
    cache.forget("/s")
    assert len(cache) == 0 and cache.used == 0


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3000), st.integers(0, 2**32 - 1), st.sampled_from([None, 0.25]), st.booleans())
def test_kernels_on_a_cached_range_give_the_same_bits(n, seed, unit, knots):
    """A Newton round's and a first pass's kernels (with the logit histogram) on a cached range (twice:
    computed, then reused) and on the plain arrays, and irls's blocked sums over one block and over many;
    two fits in one irls request give each the sums it gets alone."""
    v, a, b = table(n, seed, lo=0.0)
    if unit is not None:
        a, b = a * 0.5, b * 0.75
    cache = RangeCache(1 << 24)
    cached = cache.get("/s/raw-1-r0", lambda p: (v, a, b))
    scale = float(n * 3)
    fit = {"theta": [0.2, 0.8, 0.01, -0.02] if knots else [0.2, 0.8], "knots": [-2.0, -0.5, 0.5, 2.0] if knots else None}
    cox = {"theta": [0.1, 1.1], "knots": None, "ici": False}  # a second fit in the same pass, its own ici flag
    reqs = [(kernels.irls, {"unit": unit, "scale": scale, "clip": 1e-15, "fits": {"f": fit, "cox": cox}, "ici": True}),
            (kernels.census, {"unit": unit, "scale": scale, "clip": 1e-15, "bins": True, "grid": 1001,
                              "logit_bins": 4096})]
    for kernel, req in reqs:
        want = kernel((v, a, b), req)
        assert kernel(cached, req) == want
        assert kernel(cached, req) == want
    # irls adds the sums of blocks of IRLS_BLOCK values: any block size gives the same integers
    block = kernels.IRLS_BLOCK
    try:
        kernels.IRLS_BLOCK = 257
        assert kernels.irls(cached, reqs[0][1]) == kernels.irls((v, a, b), reqs[0][1])
        blocked = kernels.irls((v, a, b), reqs[0][1])
    finally:
        kernels.IRLS_BLOCK = block
    assert blocked == kernels.irls((v, a, b), reqs[0][1])
    alone = {**reqs[0][1], "fits": {"cox": cox}, "ici": True}
    assert kernels.irls((v, a, b), alone)["cox"] == blocked["cox"]
    k = len(fit["theta"])
    assert len(blocked["cox"]) == 2 + 3 + 1 and len(blocked["f"]) == k + k * (k + 1) // 2 + 2  # ici only for "f"


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5000), st.integers(0, 2**32 - 1), st.floats(1e-3, 1e6))
def test_fixed_sum_rows_is_fixed_sum_of_each_row(rows, n, seed, scale):
    t = np.random.default_rng(seed).normal(size=(rows, n)) * scale / n
    assert fixed_sum_rows(t, scale) == [fixed_sum(row, scale) for row in t]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=6), st.integers(0, 2**32 - 1))
def test_merging_all_chunks_at_once_is_merging_them_in_order(sizes, seed):
    """A range is built from every chunk's slice in one sort when counts are integers."""
    from calengine.reductions.tables import empty_table, group_rows, merge_all, merge_tables

    rng = np.random.default_rng(seed)
    pieces = [group_rows(rng.integers(0, 12, n) / 11.0, rng.random(n) < 0.5, rng.integers(0, 3, n)) for n in sizes]
    want = empty_table()
    for piece in pieces:
        want = merge_tables(want, piece)
    got = merge_all(pieces)
    assert all(np.array_equal(g, w) and g.dtype == w.dtype for g, w in zip(got, want))
