"""Exact grouped order statistics over fragments (calengine/reductions/selection.py).

The in-memory oracles are a sort (:func:`calengine.methods.conformal.threshold`) and exact fractions
(:func:`calengine.methods.conformal.weighted_threshold`); hypothesis cuts random tables into random
fragments and checks that the thresholds and the knot tables equal the oracles and are the same bits
for every cutting.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from calengine.methods import conformal as cf
from calengine.reductions import selection as sel


def _run(scores, groups, n_groups, alpha, pieces, weights=None, resolution=16):
    """The reduction over ``pieces`` (row index arrays): thresholds per group (inf when none) and knots."""
    blocks = [sel.sorted_block(scores[p], groups[p], n_groups, None if weights is None else weights[p])
              for p in pieces]
    summary = sel.merge_summaries([sel.block_summary(b) for b in blocks])
    a = cf.exact_fraction(alpha)

    def targets(totals):
        if weights is None:
            return [(g, cf.order_rank(totals[g], alpha)) for g in range(n_groups) if totals[g] > 0]
        return [(g, math.ceil((1 - a) * totals[g])) for g in range(n_groups) if totals[g] > 0]

    selection = sel.Selection(summary, targets, weighted=weights is not None, resolution=resolution)
    sel.run_selection(selection, lambda req: sel.merge_answers([sel.block_query(b, req) for b in blocks]))
    out = {}
    for (g, _), hit in zip(selection.targets, selection.found()):
        out[g] = math.inf if hit is None else float(sel.key_values(np.array([hit[0]], dtype=np.uint64))[0])
    knots = [tuple(map(tuple, (k.tolist(), list(m)))) for k, m in (selection.knots(g) for g in range(n_groups))]
    return out, knots, selection


def _pieces(n: int, cuts: list[int], seed: int) -> list[np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    bounds = sorted({0, n, *[c % (n + 1) for c in cuts]})
    return [order[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


scores_st = st.lists(st.one_of(st.sampled_from([0.0, -0.0, 1.0, 0.5, -2.5, 1e-300, -1e300, 7.0]),
                               st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)),
                     min_size=1, max_size=300)


@settings(max_examples=150, deadline=None)
@given(scores_st, st.integers(1, 4), st.lists(st.integers(0, 400), max_size=8), st.integers(0, 2**31),
       st.sampled_from([0.05, 0.1, 0.3, 0.5, 0.9]))
def test_thresholds_and_knots_equal_the_sort_on_any_partitioning(scores, n_groups, cuts, seed, alpha):
    s = np.array(scores, dtype=np.float64)
    g = np.random.default_rng(seed).integers(0, n_groups, s.size)
    one, knots_one, _ = _run(s, g, n_groups, alpha, [np.arange(s.size)])
    many, knots_many, _ = _run(s, g, n_groups, alpha, _pieces(s.size, cuts, seed))
    assert one == many and knots_one == knots_many  # the same bits for every cutting
    for grp, t in one.items():
        assert t == cf.threshold(s[g == grp], alpha) or (t == 0.0 == cf.threshold(s[g == grp], alpha))
    # every knot's mass is the exact count of scores strictly below it
    for grp, (keys, masses) in enumerate(knots_one):
        vals = sel.key_values(np.array(keys, dtype=np.uint64))
        mine = s[g == grp]
        assert [int((mine < v).sum()) for v in vals] == list(masses)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.1, 0.2, 0.5, 0.9, 1.0, 1.5]), min_size=1, max_size=200),
       st.lists(st.sampled_from([0.0, 0.125, 0.5, 1.0, 3.0, 17.0]), min_size=200, max_size=200),
       st.lists(st.integers(0, 250), max_size=6), st.integers(0, 2**31), st.sampled_from([0.05, 0.1, 0.3]))
def test_weighted_thresholds_equal_exact_fractions(scores, weights, cuts, seed, alpha):
    """Dyadic weights are exact in fixed point, so the reduction equals the exact-fraction oracle (test
    row weight 0 here: the level ladder is the driver's business) on every cutting."""
    s = np.array(scores)
    w = np.array(weights[: s.size])
    if not (w > 0).any():
        return
    g = np.zeros(s.size, dtype=np.int64)
    one, k1, _ = _run(s, g, 1, alpha, [np.arange(s.size)], w)
    many, k2, _ = _run(s, g, 1, alpha, _pieces(s.size, cuts, seed), w)
    assert one == many and k1 == k2
    assert one[0] == cf.weighted_threshold(s, w, alpha, 0.0)


def test_fractional_weights_give_the_same_bits_on_any_partitioning():
    rng = np.random.default_rng(3)
    s = np.round(rng.normal(size=5000), 3)
    w = rng.random(5000) * 10
    g = rng.integers(0, 3, 5000)
    base = _run(s, g, 3, 0.1, [np.arange(5000)], w)[:2]
    for seed in range(3):
        assert _run(s, g, 3, 0.1, _pieces(5000, list(rng.integers(0, 5000, 7)), seed), w)[:2] == base
    for grp, t in base[0].items():
        assert t == cf.weighted_threshold(s[g == grp], w[g == grp], 0.1, 0.0)


def test_order_keys_sort_as_the_floats_do():
    rng = np.random.default_rng(0)
    v = np.concatenate([rng.normal(size=1000) * 10.0 ** rng.integers(-300, 300, 1000),
                        [0.0, -0.0, np.inf, -np.inf, 5e-324, -5e-324, 1.0, -1.0]])
    k = sel.order_keys(v)
    assert np.array_equal(np.argsort(k, kind="stable"), np.argsort(v + 0.0, kind="stable"))
    back = sel.key_values(k)
    assert np.array_equal(back, v + 0.0)
    assert sel.order_keys(np.array([-0.0]))[0] == sel.order_keys(np.array([0.0]))[0]


def test_large_groups_take_few_rounds_and_the_knots_bound_the_p_values():
    """A million continuous scores in 7 blocks: the threshold in a handful of rounds, and p-values from
    the knots within 1/resolution of the exact ones, never below them."""
    rng = np.random.default_rng(9)
    s = rng.random(1_000_000) ** 3
    pieces = _pieces(s.size, list(rng.integers(0, s.size, 6)), 1)
    out, knots, selection = _run(s, np.zeros(s.size, dtype=np.int64), 1, 0.1, pieces, resolution=1024)
    assert out[0] == cf.threshold(s, 0.1)
    assert selection.rounds <= 6
    keys, masses = knots[0]
    vals = sel.key_values(np.array(keys, dtype=np.uint64))
    m = np.array(masses, dtype=np.float64)
    test = rng.random(20000)
    j = np.searchsorted(vals, test, side="right") - 1
    below = np.where(j >= 0, m[np.maximum(j, 0)], 0)
    bound = (s.size - below + 1) / (s.size + 1)
    exact = cf.p_values(s, test)
    assert np.all(bound >= exact) and np.max(bound - exact) <= 1 / 1024 + 1e-12
    assert len(vals) <= 2 * 1024 + 4


def test_too_many_rows_for_the_limb_sums_is_one_line():
    from calengine.errors import DataError

    summary = sel.Summary(np.array([sel.MAX_ROWS], dtype=np.int64), np.array([0], dtype=np.uint64),
                          np.array([1], dtype=np.uint64))
    with pytest.raises(DataError, match="at most"):
        sel.Selection(summary, lambda t: [])


def test_weight_scale_is_a_power_of_two_at_least_the_largest_weight():
    for x in (1.0, 3.0, 0.3, 1e-9, 2.0**40 + 1, 1e300):
        s = sel.weight_scale(x)
        assert s >= x and math.frexp(s)[0] == 0.5 and s / 2 < x
    assert sel.weight_scale(0.0) == 1.0
    assert Fraction(sel.weight_scale(4.0)) == 4
