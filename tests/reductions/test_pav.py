"""PAV with ties pooled first: worked examples (notes §d), scikit-learn agreement, invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sklearn.isotonic import IsotonicRegression

from calengine.errors import DataError
from calengine.reductions.pav import (
    PAVBlocks,
    check_binary_data,
    linear_knots,
    pav,
    pool_ties,
    predict_linear,
    predict_step,
)

S_UNIT = np.arange(1, 9) / 10.0
Y_UNIT = np.array([0, 1, 0, 0, 1, 0, 1, 1])
T_UNIT = np.array([0.0, 0.15, 0.35, 0.45, 0.55, 0.65, 0.9])


def reference_pav(scores, y, w):
    """Textbook stack PAV over tie-pooled groups (slow, obviously correct), for comparison."""
    order = np.argsort(scores, kind="stable")
    s, yv, wv = np.asarray(scores, float)[order], np.asarray(y, float)[order], np.asarray(w, float)[order]
    groups = []
    for si, yi, wi in zip(s, yv, wv):
        if wi == 0:
            continue
        if groups and groups[-1][1] == si:
            groups[-1][2] += wi * yi
            groups[-1][3] += wi
        else:
            groups.append([si, si, wi * yi, wi])
    stack = []
    for g in groups:
        stack.append(list(g))
        while len(stack) > 1 and stack[-2][2] / stack[-2][3] >= stack[-1][2] / stack[-1][3]:
            top = stack.pop()
            stack[-1][1] = top[1]
            stack[-1][2] += top[2]
            stack[-1][3] += top[3]
    lo, hi, sy, sw = (np.array(c) for c in zip(*stack))
    return lo, hi, sy / sw, sw


def test_unit_weight_example_blocks():
    b = pav(S_UNIT, Y_UNIT)
    np.testing.assert_allclose(b.lo, [0.1, 0.2, 0.5, 0.7])
    np.testing.assert_allclose(b.hi, [0.1, 0.4, 0.6, 0.8])
    np.testing.assert_allclose(b.value, [0.0, 1 / 3, 0.5, 1.0], atol=1e-12)
    np.testing.assert_allclose(b.weight, [1, 3, 2, 2])


def test_unit_weight_example_both_semantics():
    b = pav(S_UNIT, Y_UNIT)
    np.testing.assert_allclose(
        predict_linear(b.lo, b.hi, b.value, T_UNIT),
        [0, 0.166667, 0.333333, 0.416667, 0.5, 0.75, 1],
        atol=1e-6,
    )
    np.testing.assert_allclose(
        predict_step(b.lo, b.value, T_UNIT), [0, 0, 0.333333, 0.333333, 0.5, 0.5, 1], atol=1e-6
    )
    iso = IsotonicRegression(out_of_bounds="clip").fit(S_UNIT, Y_UNIT)
    np.testing.assert_allclose(predict_linear(b.lo, b.hi, b.value, T_UNIT), iso.predict(T_UNIT), atol=1e-12)


def test_ties_and_weights_example():
    s = np.array([0.2, 0.2, 0.2, 0.5, 0.5, 0.7, 0.9, 0.9])
    y = np.array([1, 0, 0, 1, 0, 0, 1, 1])
    w = np.array([1, 1, 2, 1, 3, 1, 1, 0.5])
    b = pav(s, y, w)
    np.testing.assert_allclose(b.lo, [0.2, 0.9])
    np.testing.assert_allclose(b.hi, [0.7, 0.9])
    np.testing.assert_allclose(b.value, [2 / 9, 1.0], atol=1e-12)
    np.testing.assert_allclose(b.weight, [9.0, 1.5])
    pts = np.array([0.2, 0.5, 0.7, 0.9])
    iso = IsotonicRegression(out_of_bounds="clip").fit(s, y, sample_weight=w)
    for pred in (predict_step(b.lo, b.value, pts), predict_linear(b.lo, b.hi, b.value, pts)):
        np.testing.assert_allclose(pred, [2 / 9, 2 / 9, 2 / 9, 1.0], atol=1e-6)
        np.testing.assert_allclose(pred, iso.predict(pts), atol=1e-12)
    # Between 0.7 and 0.9 the two semantics differ: step holds, linear interpolates.
    assert predict_step(b.lo, b.value, [0.8])[0] == pytest.approx(2 / 9)
    assert predict_linear(b.lo, b.hi, b.value, [0.8])[0] == pytest.approx((2 / 9 + 1) / 2)


def test_pool_ties_sums_and_drops_zero_weights():
    xs, wy, ws = pool_ties([3.0, 1.0, 3.0, 2.0, 5.0], [1, 0, 0, 1, 1], [2.0, 1.0, 1.0, 0.5, 0.0])
    np.testing.assert_array_equal(xs, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(wy, [0.0, 0.5, 2.0])
    np.testing.assert_allclose(ws, [1.0, 0.5, 3.0])


def test_single_distinct_score_is_one_block():
    b = pav([0.3, 0.3, 0.3], [1, 0, 1])
    assert b.lo.tolist() == [0.3] and b.hi.tolist() == [0.3]
    assert b.value[0] == pytest.approx(2 / 3)
    assert predict_step(b.lo, b.value, [-5.0, 9.0]).tolist() == pytest.approx([2 / 3, 2 / 3])
    assert predict_linear(b.lo, b.hi, b.value, [-5.0, 9.0]).tolist() == pytest.approx([2 / 3, 2 / 3])


def test_linear_knots_strictly_increasing():
    x, yv = linear_knots([0.0, 1.0, 3.0], [0.0, 2.0, 3.0], [0.1, 0.5, 0.9])
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert yv.tolist() == [0.1, 0.5, 0.5, 0.9]


def test_matches_sklearn_on_random_weighted_data():
    rng = np.random.default_rng(3)
    n = 2000
    s = np.round(rng.normal(size=n), 2)  # plenty of ties
    y = (rng.random(n) < 1 / (1 + np.exp(-2 * s))).astype(int)
    w = rng.uniform(0.1, 3.0, size=n)
    b = pav(s, y, w)
    iso = IsotonicRegression(out_of_bounds="clip").fit(s, y, sample_weight=w)
    np.testing.assert_allclose(predict_step(b.lo, b.value, s), iso.predict(s), atol=1e-10)
    test = np.linspace(s.min() - 1, s.max() + 1, 777)
    np.testing.assert_allclose(predict_linear(b.lo, b.hi, b.value, test), iso.predict(test), atol=1e-10)


def test_many_points_give_strictly_increasing_blocks_holding_every_point():
    """(Its speed on 1,000,000 points is measured by benchmarks/bench_hot_paths.py, not asserted here.)"""
    rng = np.random.default_rng(0)
    n = 100_000
    s = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-s))).astype(np.int8)
    b = pav(s, y)
    assert np.all(np.diff(b.value) > 0)
    assert b.weight.sum() == n


@pytest.mark.parametrize(
    "scores, y, w",
    [
        ([0.1, np.nan], [0, 1], None),
        ([0.1, 0.2], [0, 1, 1], None),
        ([0.1, 0.2], [0, 2], None),
        ([0.1, 0.2], [0, 1], [1.0, -1.0]),
        ([0.1, 0.2], [0, 1], [0.0, 0.0]),
        ([[0.1, 0.2]], [0, 1], None),
        ([], [], None),
    ],
)
def test_bad_input_raises_data_error(scores, y, w):
    with pytest.raises(DataError):
        pav(scores, y, w)


def test_one_class_message_names_the_fix():
    with pytest.raises(DataError, match="only one class.*fewer folds"):
        check_binary_data([0.1, 0.2], [1, 1])
    # pav itself accepts one class (one block): the calibrators decide whether that is an error.
    assert pav([0.1, 0.2], [1, 1]).value.tolist() == [1.0]


data = st.integers(2, 40).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 6), min_size=n, max_size=n),
        st.lists(st.integers(0, 1), min_size=n, max_size=n),
        st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]), min_size=n, max_size=n),
    )
)


@settings(max_examples=60, deadline=None)
@given(data)
def test_matches_reference_stack_pav(d):
    s, y, w = (np.asarray(v, float) for v in d)
    if not np.any(w > 0):
        w[0] = 1.0
    b = pav(s, y, w)
    lo, hi, val, wt = reference_pav(s, y, w)
    np.testing.assert_array_equal(b.lo, lo)
    np.testing.assert_array_equal(b.hi, hi)
    np.testing.assert_allclose(b.value, val, atol=1e-12)
    np.testing.assert_allclose(b.weight, wt, atol=1e-12)
    assert np.all(np.diff(b.value) > 0)
    # PAV preserves total weight and the weighted mean of y.
    assert b.weight.sum() == pytest.approx(w.sum())
    assert np.dot(b.value, b.weight) == pytest.approx(np.dot(w, y), abs=1e-9)


# --- Bit-identity with the implementation before issue 12 (target 3) ------------------------------
#
# pool_ties and pav now avoid the stable argsort (value sorts for unit weights and 0/1 labels, the
# unstable argsort put back into stable order otherwise).  They must return exactly what the
# straightforward stable-argsort version returned, bit for bit (same boundaries, same sign of a zero
# score, same float sums), so that version is kept here verbatim as the oracle.


def _reference_pool_ties(scores, y, sample_weight=None):
    """pool_ties as it was before issue 12: stable argsort, three gathers, reduceat."""
    s = np.asarray(scores, dtype=np.float64)
    yv = np.asarray(y, dtype=np.float64)
    w = np.ones_like(s) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    keep = w > 0
    if not np.all(keep):
        s, yv, w = s[keep], yv[keep], w[keep]
    if s.size == 0:
        empty = np.empty(0, dtype=np.float64)
        return empty, empty.copy(), empty.copy()
    order = np.argsort(s, kind="stable")
    s, yv, w = s[order], yv[order], w[order]
    starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    return s[starts], np.add.reduceat(w * yv, starts), np.add.reduceat(w, starts)


def _reference_pav(scores, y, sample_weight=None) -> PAVBlocks:
    """pav as it was before issue 12, on top of :func:`_reference_pool_ties`."""
    s, yi, w = check_binary_data(scores, y, sample_weight, require_both_classes=False)
    xs, wy, ws = _reference_pool_ties(s, yi, w)
    if xs.size == 1:
        return PAVBlocks(xs.copy(), xs.copy(), wy / ws, ws)
    from scipy.optimize import isotonic_regression

    res = isotonic_regression(wy / ws, weights=ws, increasing=True)
    starts = np.asarray(res.blocks[:-1], dtype=np.intp)
    while True:
        bw = np.add.reduceat(ws, starts)
        bv = np.add.reduceat(wy, starts) / bw
        bad = np.flatnonzero(bv[1:] <= bv[:-1])
        if bad.size == 0:
            break
        starts = np.delete(starts, bad + 1)
    ends = np.concatenate((starts[1:], [xs.size])) - 1
    return PAVBlocks(xs[starts], xs[ends], np.clip(bv, 0.0, 1.0), bw)


def _assert_same_bits(got, want):
    """Same length, dtype and bytes for every array (so ``-0.0`` differs from ``0.0``)."""
    assert len(got) == len(want)
    for g, r in zip(got, want):
        g, r = np.asarray(g), np.asarray(r)
        assert g.dtype == r.dtype and g.shape == r.shape, (g.dtype, g.shape, r.dtype, r.shape)
        assert g.tobytes() == r.tobytes(), (g, r)


_grid_scores = st.sampled_from([-1.5, -0.0, 0.0, 0.25, 0.5, 1.0, 3.0])
_any_scores = st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=True)
_weights = st.one_of(
    st.sampled_from([0.0, 1.0]),
    st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]),
    st.floats(0.0, 10.0, allow_nan=False),
)


@st.composite
def _binary_data(draw, min_size=0):
    """Scores with many ties, none, or a mix (including both zeros), 0/1 labels, optional weights."""
    n = draw(st.integers(min_size, 60))
    kind = draw(st.sampled_from(["grid", "any", "mixed"]))
    elem = {"grid": _grid_scores, "any": _any_scores, "mixed": st.one_of(_grid_scores, _any_scores)}[kind]
    s = np.array(draw(st.lists(elem, min_size=n, max_size=n)), dtype=np.float64)
    y = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), dtype=np.int64)
    y = y.astype(draw(st.sampled_from([np.int64, np.int8, bool, np.float64])))
    wkind = draw(st.sampled_from(["none", "ones", "zero_one", "any"]))
    if wkind == "none":
        w = None
    elif wkind == "ones":
        w = np.ones(n)
    else:
        el = st.sampled_from([0.0, 1.0]) if wkind == "zero_one" else _weights
        w = np.array(draw(st.lists(el, min_size=n, max_size=n)), dtype=np.float64)
    return s, y, w


@settings(max_examples=400, deadline=None)
@given(_binary_data())
def test_pool_ties_bit_identical_to_reference(d):
    s, y, w = d
    _assert_same_bits(pool_ties(s, y, w), _reference_pool_ties(s, y, w))


@settings(max_examples=400, deadline=None)
@given(_binary_data())
def test_pav_bit_identical_to_reference(d):
    s, y, w = d
    try:
        want = _reference_pav(s, y, w)
    except DataError as exc:  # empty data, every weight zero: the same error as before
        with pytest.raises(DataError, match=str(exc)[:40].replace("(", r"\(")):
            pav(s, y, w)
        return
    _assert_same_bits(pav(s, y, w), want)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(
            st.lists(st.one_of(_grid_scores, st.just(float("nan"))), min_size=n, max_size=n),
            st.lists(st.sampled_from([0, 1, 2, 0.5, -0.0]), min_size=n, max_size=n),
            st.one_of(st.none(), st.lists(_weights, min_size=n, max_size=n)),
        )
    )
)
def test_pool_ties_bit_identical_on_real_targets_and_unvalidated_nan(d):
    """pool_ties takes any real target and does not validate: those inputs keep their old result too."""
    s, y, w = (None if v is None else np.asarray(v, dtype=np.float64) for v in d)
    assume(w is None or np.any(w > 0))
    _assert_same_bits(pool_ties(s, y, w), _reference_pool_ties(s, y, w))
    if np.all(y == np.round(y)):
        yi = y.astype(np.int64)
        _assert_same_bits(pool_ties(s, yi, w), _reference_pool_ties(s, yi, w))


@pytest.mark.parametrize("ties", ["none", "many", "few"])
@pytest.mark.parametrize("weights", [None, "ones", "zero_one", "float"])
def test_pav_bit_identical_to_reference_at_scale(ties, weights):
    """Large inputs take the branches small ones rarely reach (group counting by bincount or by
    cumulative counts, the minority being either class, the within-run reordering)."""
    rng = np.random.default_rng(12)
    n = 200_000
    s = rng.normal(size=n)
    if ties == "many":
        s = np.round(s, 1)
    elif ties == "few":
        s[rng.random(n) < 0.05] = 0.5
    y = (rng.random(n) < 1 / (1 + np.exp(-2 * s))).astype(np.int8)
    w = {None: None, "ones": np.ones(n), "zero_one": (rng.random(n) < 0.9).astype(float),
         "float": rng.uniform(0.0, 2.0, n)}[weights]
    _assert_same_bits(pav(s, y, w), _reference_pav(s, y, w))
    _assert_same_bits(pav(s, 1 - y, w), _reference_pav(s, 1 - y, w))
    _assert_same_bits(pool_ties(s, y, w), _reference_pool_ties(s, y, w))


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 60).flatmap(lambda n: st.tuples(
    st.lists(st.floats(-5, 5, allow_nan=False), min_size=n, max_size=n),
    st.lists(st.floats(0.01, 10, allow_nan=False), min_size=n, max_size=n))))
def test_compiled_pass_loaded_apart_gives_scipy_optimizes_blocks(d):
    """The PAV pass loaded without importing scipy.optimize (pav._compiled_pava) splits any weighted
    values into the blocks scipy.optimize.isotonic_regression reports."""
    from scipy.optimize import isotonic_regression

    from calengine.reductions.pav import _pav_starts

    values, weights = (np.asarray(v, dtype=np.float64) for v in d)
    got = _pav_starts(values, weights)
    want = isotonic_regression(values, weights=weights, increasing=True).blocks[:-1]
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.intp
