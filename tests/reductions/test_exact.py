"""The fixed-point sums behind every ranged metric (calengine.reductions.exact) and the kernels' faster
forms of them: each must give the integers of the definition, term by term, bit for bit.

The oracle is the definition in plain Python floats and ints, one term at a time: ``x = t * (2**31 /
scale)``, ``floor(x) * 2**31 + round((x - floor(x)) * 2**31)`` (Python's ``round`` ties to even, as
``np.rint``), added as Python ints.  Near-ties are planted on purpose: for ``-1 < x < 0`` the fraction
``x - floor(x)`` rounds, so a shortcut that rounds ``x * 2**31`` at once misses by one unit about once
in four million terms -- too rarely for random data to show it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calengine.reductions import exact
from calengine.metrics.ranged import kernels
from calengine.reductions.exact import fixed_sum, fixed_sum_bins

LIMB = 2.0**31


def term_units(t: float, scale: float) -> int:
    x = float(t) * (LIMB / scale)
    hi = math.floor(x)
    return (hi << 31) + round((x - hi) * LIMB)


def oracle_bins(index, t, scale, n_bins):
    out = [0] * n_bins
    for i, x in zip(index.tolist(), t.tolist()):
        if i < n_bins:
            out[i] += term_units(x, scale)
    return out


def planted_terms(rng, n: int, scale: float) -> np.ndarray:
    """Terms of every kind the kernels sum: zeros, tiny negatives (``-1 < x < 0``) whose fraction sits
    within a few float steps of a tie, ordinary terms of both signs, and a few large ones."""
    kind = rng.integers(0, 4, n)
    ties = -(np.floor(rng.random(n) * 2**30) + 0.5 + rng.integers(-3, 4, n) * 2.0**-22) * scale * 2.0**-62
    ordinary = rng.normal(size=n) * scale * 10.0 ** rng.uniform(-12, 0, n)
    t = np.select([kind == 0, kind == 1, kind == 2], [np.zeros(n), ties, ordinary], np.abs(ordinary))
    # one large term (its limb near 2**51): the sums stay exact, but not in every order, so the
    # runs' path must leave such a block to np.bincount
    if rng.random() < 0.3:
        t[rng.integers(0, n)] = scale * 2.0**20 * rng.choice([-1.0, 1.0])
    return t


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 40), st.integers(0, 2**32 - 1), st.floats(1e-3, 1e9), st.booleans())
def test_binned_sums_of_several_term_arrays_are_the_sums_of_their_definitions(n, n_bins, seed, scale, sorted_index):
    """``fixed_sum_bins_of`` (the smooth ECE grid's two shares, added as int64 limb sums) is, per bin,
    the sum of the definition's integers over every pair; the planted large terms take the bins past
    int64's shifted range (Python ints), the others the int64 path."""
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(int(rng.integers(1, 4))):
        t = planted_terms(rng, n, scale)
        index = rng.integers(0, n_bins + 2, n)  # some past the last bin: left out
        pairs.append((np.sort(index) if sorted_index else index, t))
    expected = [sum(x) for x in zip(*(oracle_bins(index, t, scale, n_bins) for index, t in pairs))]
    assert exact.fixed_sum_bins_of(pairs, scale, n_bins) == expected


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 40), st.integers(0, 2**32 - 1), st.floats(1e-3, 1e9),
       st.lists(st.booleans(), min_size=1, max_size=3), st.integers(1, 3))
def test_terms_binned_by_shared_indices_are_the_sums_of_their_definitions(n, n_bins, seed, scale, sorted_index, n_terms):
    """``fixed_sum_bins_of_terms`` (each index's runs found once for every term) gives, per term and
    bin, the definition's integers summed over the indices: sorted and unsorted indices mixed, planted
    large terms forcing a block off the runs' path."""
    rng = np.random.default_rng(seed)
    indices = [np.sort(i) if keep else i for i, keep in
               ((rng.integers(0, n_bins + 2, n), keep) for keep in sorted_index)]  # some past the last bin
    terms = [[planted_terms(rng, n, scale) for _ in indices] for _ in range(n_terms)]
    expected = [[sum(x) for x in zip(*(oracle_bins(i, t, scale, n_bins) for i, t in zip(indices, ts)))]
                for ts in terms]
    assert exact.fixed_sum_bins_of_terms(indices, terms, scale, n_bins) == expected


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2000), st.integers(0, 2**32 - 1), st.integers(3, 6), st.booleans())
def test_spline_basis_is_harrells_plain_expressions(n, seed, n_knots, extremes):
    """The restricted cubic spline columns (cubes at the last two knots taken once, in place) are the
    floats of the textbook expression written out term by term, and ``logit_basis`` the floats of
    ``log(p) - log1p(-p)`` at the clipped forecasts."""
    rng = np.random.default_rng(seed)
    v = rng.random(n) ** rng.uniform(0.2, 5)
    if extremes:
        v = np.concatenate([v, [0.0, 1.0, 0.5, 1e-300, 1.0 - 2.0**-53]])
    p = np.clip(v, 1e-15, 1.0 - 1e-15)
    x = np.log(p) - np.log1p(-p)
    t = np.sort(rng.normal(0.0, 2.0, n_knots))
    k = t.size

    def cube(u):
        u = np.maximum(u, 0.0)
        return u * u * u

    want = [np.ones_like(x), x] + [
        (cube(x - t[j]) - cube(x - t[k - 2]) * (t[k - 1] - t[j]) / (t[k - 1] - t[k - 2])
         + cube(x - t[k - 1]) * (t[k - 2] - t[j]) / (t[k - 1] - t[k - 2])) / (t[-1] - t[0]) ** 2
        for j in range(k - 2)]
    for got in (kernels.spline_basis(x, t.tolist()), kernels.logit_basis(v, 1e-15, t.tolist())):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and np.array_equal(g, w)
    assert np.array_equal(kernels.logit_basis(v, 1e-15, None)[1], x)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 40), st.integers(0, 2**32 - 1), st.floats(1e-3, 1e9), st.booleans())
def test_binned_fixed_sums_are_the_definitions_integers(n, n_bins, seed, scale, sorted_index):
    rng = np.random.default_rng(seed)
    t = planted_terms(rng, n, scale)
    index = rng.integers(0, n_bins + 2, n)  # some past the last bin: left out
    if sorted_index:
        index = np.sort(index)
    assert fixed_sum_bins(index, t, scale, n_bins) == oracle_bins(index, t, scale, n_bins)
    assert fixed_sum(t, scale) == sum(term_units(x, scale) for x in t.tolist())
    # which path ran: runs of a sorted index, unless a limb is too large to add exactly in any order
    hi, lo = exact._limbs(t, scale)
    took_runs = exact._run_sums(index, hi, lo, n_bins) is not None
    in_order = bool(np.all(index[1:] >= index[:-1]))
    assert took_runs == (in_order and float(np.max(np.abs(hi))) * n < 2.0**53)


def test_run_sums_take_sorted_bins_with_empty_ones_between():
    scale = 7.0
    t = np.array([1.0, -2.5e-9, 3.0, 0.25, -1e-12, 6.0])
    index = np.array([0, 0, 3, 3, 3, 7])  # bins 1, 2, 4, 5, 6 empty; 7 is past the last bin (n_bins 6)
    hi, lo = exact._limbs(t, scale)
    assert exact._run_sums(index, hi, lo, 6) is not None
    assert fixed_sum_bins(index, t, scale, 6) == oracle_bins(index, t, scale, 6)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 2000), st.integers(0, 2**32 - 1), st.sampled_from([2, 17, 1001]))
def test_grid_histograms_bin_both_neighbours_shares_as_one_binning(n, seed, size):
    """The smooth ECE's grid histogram adds the lower and upper neighbour's shares binned apart: the
    integers of binning all ``2 n`` shares at once."""
    rng = np.random.default_rng(seed)
    v = np.unique(np.concatenate([rng.random(n) ** rng.uniform(0.2, 4), [0.0, 1.0][: int(seed % 3)]]))
    a = rng.integers(0, 4, v.size)
    m = a + rng.integers(0, 4, v.size)
    scale = float(m.sum() + 1)
    pos = (v * (size - 1)).astype(np.int64).clip(0, size - 2)
    frac = v * (size - 1) - pos
    idx = np.concatenate((pos, pos + 1))
    share = np.concatenate((1.0 - frac, frac))
    mf, af = m.astype(np.float64), a.astype(np.float64)
    expected = [oracle_bins(idx, share * np.concatenate((x, x)), scale, size) for x in (mf, mf * v, af)]
    assert kernels.grid_histograms(v, a, m, size, scale) == expected


def reference_block(B, theta, af, mf, v, scale, ici, hessian=True, loglik=True):
    """A Newton round's sums as the plain expressions, one fixed-point sum per term row (without
    ``hessian``: the gradient's rows alone, then the same last rows)."""
    eta = np.zeros(v.size)
    for col, th in zip(B, theta):
        eta = eta + col * th
    mu = 0.5 + 0.5 * np.tanh(0.5 * eta)
    resid = af - mf * mu
    wt = mf * mu * (1.0 - mu)
    rows = []
    for i, bi in enumerate(B):
        rows.append(resid * bi)
        if hessian:
            rows.extend(wt * bi * B[j] for j in range(i, len(B)))
    if ici:
        rows.append(mf * np.abs(mu - v))
    if loglik:
        rows.append(af * eta - mf * np.logaddexp(0.0, eta))
    return [fixed_sum(r, scale) for r in rows]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3000), st.integers(0, 2**32 - 1), st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_a_newton_rounds_block_is_the_plain_expressions_sums(n, seed, spline, ici, hessian, loglik):
    rng = np.random.default_rng(seed)
    v = np.unique(np.concatenate([rng.random(n) ** rng.uniform(0.2, 5), [0.0, 1.0][: int(seed % 3)]]))
    a = rng.integers(0, 3, v.size)
    m = a + rng.integers(0, 3, v.size)
    x = kernels.logit_basis(v, 1e-15, None)[1]
    knots = np.quantile(x, [0.05, 0.35, 0.65, 0.95]) + np.arange(4) * 1e-3 if spline else None
    B = kernels.logit_basis(v, 1e-15, None if knots is None else knots.tolist())
    theta = rng.normal(size=len(B)) * 10.0 ** rng.uniform(-3, 1)
    if seed % 4 == 0:
        theta[0] = -0.0
    scale = float(m.sum() + 1) * 100.0
    af, mf = a.astype(np.float64), m.astype(np.float64)
    assert (kernels._irls_block(B, theta, af, mf, v, scale, ici, hessian, loglik)
            == reference_block(B, theta, af, mf, v, scale, ici, hessian, loglik))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2000), st.integers(1, 40), st.integers(0, 2**32 - 1), st.booleans())
def test_bin_counts_are_bincounts_of_the_counts(n, n_bins, seed, sorted_index):
    """Integer per-bin counts: runs of a sorted index added as int64, any other index by np.bincount;
    the integers np.bincount of the counts gives, empty bins and a single bin included."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 5, n) * rng.integers(1, 1 << 20, n)
    index = rng.integers(0, n_bins, n)
    if sorted_index:
        index = np.sort(index)
    want = [int(c) for c in np.bincount(index, weights=counts.astype(np.float64), minlength=n_bins)]
    assert exact.bin_counts(index, counts, n_bins) == want


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 2000), st.integers(0, 2**32 - 1), st.lists(st.integers(1, 30), min_size=1, max_size=4))
def test_one_set_of_limbs_serves_every_binning(n, seed, sizes):
    """A sweep bins the same terms several ways from one set of limbs: each binning's integers are the
    definition's, sorted indices (runs) and unsorted ones (np.bincount) alike."""
    rng = np.random.default_rng(seed)
    scale = float(rng.uniform(1.0, 1e8))
    t = planted_terms(rng, n, scale)
    indexes = [rng.integers(0, s, n) if j % 2 else np.sort(rng.integers(0, s, n)) for j, s in enumerate(sizes)]
    got = exact.fixed_sum_binnings(list(zip(indexes, sizes)), t, scale)
    assert got == [oracle_bins(idx, t, scale, s) for idx, s in zip(indexes, sizes)]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 2000), st.integers(0, 2**32 - 1), st.lists(st.integers(1, 30), min_size=1, max_size=3),
       st.integers(1, 3))
def test_several_terms_share_the_binnings_runs(n, seed, sizes, n_terms):
    """``fixed_sum_binnings_terms`` finds each index's runs once for several term arrays: each term's
    and binning's integers are still the definition's (a term with a huge limb leaves the runs for
    np.bincount on its own, the others keep them)."""
    rng = np.random.default_rng(seed)
    scale = float(rng.uniform(1.0, 1e8))
    terms = [planted_terms(rng, n, scale) for _ in range(n_terms)]
    indexes = [rng.integers(0, s + 1, n) if j % 2 else np.sort(rng.integers(0, s + 1, n)) for j, s in enumerate(sizes)]
    got = exact.fixed_sum_binnings_terms(list(zip(indexes, sizes)), terms, scale)
    assert got == [[oracle_bins(idx, t, scale, s) for idx, s in zip(indexes, sizes)] for t in terms]


# ---------------------------------------------------------------------------------------------------
# scale-free exact sums (ExactSums): the oracle is math.fsum, correctly rounded

_terms = st.lists(st.one_of(st.floats(1e-300, 1e100), st.floats(-1e100, -1e-300), st.just(0.0),
                            st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6),
                            st.floats(0.0, 1e-300)), max_size=200)


@settings(max_examples=200, deadline=None)
@given(_terms, st.data())
def test_exact_sum_is_fsum_for_every_partition_and_order(terms, data):
    t = np.array(terms, dtype=np.float64)
    want = math.fsum(terms)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(terms)), max_size=6)))
    pieces = [exact.exact_sum(p) for p in np.split(t, cuts)]
    order = data.draw(st.permutations(range(len(pieces))))
    total = 0
    for i in order:
        total = total + pieces[i]
    got = total.to_float()[0]
    assert got == want and math.copysign(1.0, got) == math.copysign(1.0, want) or (got == 0.0 and want == 0.0)
    assert exact.exact_sum(t).to_float()[0] == want


@settings(max_examples=100, deadline=None)
@given(_terms, st.integers(1, 9), st.data())
def test_exact_bin_sums_are_each_bins_fsum_for_every_partition(terms, n_bins, data):
    t = np.array(terms, dtype=np.float64)
    index = np.array(data.draw(st.lists(st.integers(0, n_bins - 1), min_size=t.size, max_size=t.size)), dtype=np.intp)
    cuts = sorted(data.draw(st.lists(st.integers(0, t.size), max_size=5)))
    total = 0
    for ip, tp in reversed(list(zip(np.split(index, cuts), np.split(t, cuts)))):
        total = total + exact.exact_sum_bins(ip, tp, n_bins)
    got = total.to_float()
    want = [math.fsum(t[index == b]) for b in range(n_bins)]
    assert got.tolist() == want
    assert exact.exact_sum_bins(index, t, n_bins).to_float().tolist() == want


def test_exact_sums_take_blocks_subnormals_and_non_finite_terms():
    rng = np.random.default_rng(5)
    t = rng.standard_normal(exact._EXACT_BLOCK + 1000) * 10.0 ** rng.integers(-20, 20, exact._EXACT_BLOCK + 1000)
    assert exact.exact_sum(t).to_float()[0] == math.fsum(t)  # more than one block
    tiny = np.array([5e-324, 5e-324, -1e-310, 1e-308, 2.5e-308])
    assert exact.exact_sum(tiny).to_float()[0] == math.fsum(tiny)
    assert exact.exact_sum([8.9e307, 8.9e307, 8.9e307]).to_float()[0] == math.inf
    assert exact.exact_sum([1.7e308, 1.0, 2.0**-1074]).to_float()[0] == 1.7e308  # huge terms: in float beside  # rounds past the largest float
    assert exact.exact_sum([math.inf, 1.0]).to_float()[0] == math.inf
    assert math.isnan(exact.exact_sum([math.inf, -math.inf, 1.0]).to_float()[0])
    several = exact.exact_sums([[1.0, 1e-30], [], [-2.0, 0.5]]).to_float()
    assert several.tolist() == [1.0, 0.0, -1.5]


def test_exact_sums_travel_by_pickle():
    import pickle

    a = exact.exact_sum_bins([0, 2, 2], [0.1, 0.2, 1e-200], 3)
    b = pickle.loads(pickle.dumps(a))
    assert (b + a).to_float().tolist() == [0.2, 0.0, math.fsum([0.2, 0.2, 1e-200, 1e-200])]


@pytest.mark.parametrize("every", [1, 3, 1 << 20])
def test_deferred_carries_keep_every_bins_exact_value(every, monkeypatch):
    """A running total that propagates its carries only every ``_LOOSE_ADDS`` additions (1: at each,
    as the first version did) holds the same exact sums: running and tree-shaped merges of 300 pieces
    of terms from 1e-30 to 1e30 of either sign, including pieces that reach new bins and new limbs."""
    monkeypatch.setattr(exact, "_LOOSE_ADDS", every)
    rng = np.random.default_rng(11)
    pieces, idxs, ts = [], [], []
    for _ in range(300):
        n = int(rng.integers(0, 40))
        t = rng.standard_normal(n) * 10.0 ** rng.integers(-30, 31, n)
        idx = rng.integers(0, 7, n)
        pieces.append(exact.exact_sum_bins(idx, t, 7))
        idxs.append(idx)
        ts.append(t)
    index, t = np.concatenate(idxs), np.concatenate(ts)
    want = [math.fsum(t[index == b]) for b in range(7)]
    running = 0
    for p in pieces:
        running = running + p
    assert running.to_float().tolist() == want
    level = list(pieces)
    while len(level) > 1:
        level = [level[i] + level[i + 1] if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
    assert level[0].to_float().tolist() == want
    assert all(p.loose == 0 for p in pieces)  # the pieces themselves were not changed by the merges
    assert [p.to_float().tolist() for p in pieces] == [exact.exact_sum_bins(i, x, 7).to_float().tolist()
                                                       for i, x in zip(idxs, ts)]
