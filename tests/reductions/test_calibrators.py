"""Calibrators fitted as a reduction over a partitioned table (calengine.reductions.calibrators and the
protocol on calengine.base.Calibrator): every built-in gives the same fit for every cutting of the
data as ``fit`` on all of it, validates like ``fit``, and keeps its requests small and its rounds few."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit

from calengine.reductions.calibrators import fit_by_reduction, range_index, sorted_pieces
from calengine.errors import DataError
from calengine_builtins import calibrators as cal_mod

BY_NAME = {cls.name: cls for cls in cal_mod.CALIBRATORS}

#: variant -> (registry name, parameters, how the reduction must agree with fit)
VARIANTS = {
    "none": ("none", {}, "exact"),
    "none_symmetric": ("none", {"rescale": "symmetric"}, "exact"),
    "isotonic": ("isotonic", {}, "exact"),
    "isotonic_linear": ("isotonic", {"interpolation": "linear"}, "exact"),
    "rocch": ("rocch", {}, "exact"),
    "rocch_laplace": ("rocch", {"laplace": True}, "exact"),
    "binning": ("binning", {"n_bins": 3}, "exact"),
    "binning_lower": ("binning", {"n_bins": 7, "boundary": "lower"}, "exact"),
    "sigmoid": ("sigmoid", {}, "newton"),
    # Three parameters: on tiny near-separable data (three distinct scores) the Hessian is so badly
    # conditioned that rounding noise in the sums moves predictions by up to ~2e-9 (seen in about one
    # random case in a thousand), hence a looser tolerance.
    "beta": ("beta", {}, "newton_loose"),
    "temperature": ("temperature", {}, "newton"),
    "sigmoid_nobias": ("sigmoid_nobias", {}, "newton"),
    "venn_abers": ("venn_abers", {}, "exact"),
}


def make(variant):
    name, params, _ = VARIANTS[variant]
    return BY_NAME[name](**params)


# --------------------------------------------------------------------------------------------------
# a protocol runner that behaves like the engine: pickled calibrator on the "workers", random merge
# trees (order kept), random score ranges for sorted requests (fixed for the whole fit)


def tree_merge(cal, stats, rng):
    stats = list(stats)
    while len(stats) > 1:
        i = int(rng.integers(0, len(stats) - 1))
        stats[i : i + 2] = [cal.merge_stats(stats[i], stats[i + 1])]
    return stats[0]


def random_ranges(s, y, w, rng):
    values = np.unique(s)
    k = int(rng.integers(0, values.size))  # number of boundaries
    bounds = np.sort(rng.choice(values[1:], size=min(k, values.size - 1), replace=False))
    idx = range_index(s, bounds)
    return [(s[idx == r], y[idx == r], w[idx == r]) for r in range(bounds.size + 1)]


def run_protocol(cal, pieces, kind, rng, max_rounds=500):
    """Run the protocol the way the engine would; returns ``(cal, rounds)``."""
    request = cal.reduction_start(kind)
    pieces = [(np.asarray(s, float), np.asarray(y), np.ones(len(s)) if w is None else np.asarray(w, float))
              for s, y, w in pieces]
    whole = tuple(np.concatenate([p[k] for p in pieces]) for k in range(3))
    ranges = None
    rounds = 0
    while request is not None:
        blob = pickle.dumps(request)
        assert len(blob) < 20_000, f"request of {len(blob)} bytes"
        request = pickle.loads(blob)
        if request.get("sorted"):
            if ranges is None:
                ranges = random_ranges(*whole, rng)
            use = ranges
        else:
            use = [p for p in pieces if p[0].size]
        worker = pickle.loads(pickle.dumps(cal))  # the calibrator as a worker sees it
        stats = [pickle.loads(pickle.dumps(worker.partial_stats(s, y, w, request))) for s, y, w in use]
        cal = pickle.loads(pickle.dumps(cal))  # the client's copy travels too
        request = cal.reduction_step(tree_merge(cal, stats, rng), request)
        rounds += 1
        assert rounds <= max_rounds
    return cal, rounds


def random_partition(s, y, w, rng):
    """Rows shuffled and cut at random points: empty and one-row pieces included."""
    order = rng.permutation(s.size)
    k = int(rng.integers(1, 7))
    cuts = np.sort(rng.integers(0, s.size + 1, size=k - 1))
    return [(s[order[a:b]], y[order[a:b]], w[order[a:b]]) for a, b in zip([0, *cuts], [*cuts, s.size])]


# --------------------------------------------------------------------------------------------------
# data


@st.composite
def calib_data(draw, max_n=40):
    n = draw(st.integers(0, max_n))
    pool = draw(st.sampled_from(["ties", "floats"]))
    if pool == "ties":
        elem = st.integers(-4, 4).map(float)
    else:
        elem = st.floats(-30, 30, allow_nan=False, allow_infinity=False)
    s = draw(st.lists(elem, min_size=n + 2, max_size=n + 2))
    y = [0, 1] + draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    weights = draw(st.sampled_from(["ones", "int", "dyadic", "fraction"]))
    wel = {
        "ones": st.just(1.0),
        "int": st.sampled_from([0.0, 1.0, 2.0, 3.0]),
        "dyadic": st.sampled_from([0.0, 0.25, 0.5, 1.5, 2.0]),
        "fraction": st.floats(0.0, 3.0).map(lambda v: round(v, 3)),
    }[weights]
    w = [1.0, 1.0] + draw(st.lists(wel, min_size=n, max_size=n))
    return np.array(s), np.array(y), np.array(w), weights


def as_kind(s, kind, rng):
    if kind == "decision":
        return s
    p = expit(s / 10.0)
    # Probabilities that reach or leave [0, 1] by rounding: clipped, they tie with 0 and 1.
    edge = rng.random(s.size) < 0.15
    p[edge] = rng.choice([-1e-12, 0.0, 1.0, 1.0 + 1e-12], size=int(edge.sum()))
    return p


GRID = np.concatenate([np.linspace(-40, 40, 161), [-1e6, 1e6]])


def grid(kind):
    return np.sort(GRID) if kind == "decision" else np.concatenate(([0.0, 1.0], expit(GRID / 10.0)))


def assert_same_fit(a, b, how, kind, exact_arrays):
    sa, sb = a.to_state(), b.to_state()
    assert sa.keys() == sb.keys()
    t = grid(kind)
    if how == "exact":
        for key in sa:
            if isinstance(sa[key], np.ndarray):
                if exact_arrays:
                    np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)
                else:
                    np.testing.assert_allclose(sa[key], sb[key], rtol=1e-12, atol=1e-12, err_msg=key)
            else:
                assert sa[key] == sb[key], key
        if exact_arrays:
            np.testing.assert_array_equal(a.predict(t), b.predict(t))
        else:
            np.testing.assert_allclose(a.predict(t), b.predict(t), atol=1e-12)
    else:
        tol = 1e-9 if how == "newton" else 1e-8
        np.testing.assert_allclose(a.predict(t), b.predict(t), rtol=0, atol=tol)


# --------------------------------------------------------------------------------------------------
# the property: any cutting gives fit's result


@pytest.mark.parametrize("variant", list(VARIANTS))
@settings(max_examples=30, deadline=None)
@given(data=calib_data(), kind=st.sampled_from(["decision", "proba"]), seed=st.integers(0, 2**32 - 1))
def test_reduction_equals_fit_for_any_cutting(variant, data, kind, seed):
    s, y, w, weights = data
    rng = np.random.default_rng(seed)
    s = as_kind(s, kind, rng)
    how = VARIANTS[variant][2]
    exact_sums = weights in ("ones", "int", "dyadic")
    if VARIANTS[variant][0] == "binning" and not exact_sums:
        # Cuts compare cumulative weights with targets; with weights whose sums round, a target
        # that ties a cumulative weight may fall either side depending on the summation order.
        w = np.round(w)
        w[:2] = 1.0
        exact_sums = True
    if variant == "beta" and np.unique((np.clip(s, 0.0, 1.0) if kind == "proba" else s)[w > 0]).size < 3:
        # Two features and an intercept on fewer than three distinct scores: not identifiable, the
        # 1e-8 ridge alone picks the optimum, so rounding noise moves it by far more than 1e-9.
        return
    ref = make(variant).fit(s, y, sample_weight=w, score_kind=kind)
    got, _ = run_protocol(make(variant), random_partition(s, y, w, rng), kind, rng)
    assert_same_fit(got, ref, how, kind, exact_arrays=exact_sums)
    # the driver (equal-count score ranges, left-to-right merges) agrees too
    pieces = random_partition(s, y, w, rng)
    drv = fit_by_reduction(make(variant), pieces, score_kind=kind)
    assert_same_fit(drv, ref, how, kind, exact_arrays=exact_sums)


@pytest.mark.parametrize("variant", ["isotonic", "rocch", "rocch_laplace", "binning"])
@settings(max_examples=25, deadline=None)
@given(data=calib_data(), seed=st.integers(0, 2**32 - 1))
def test_sorted_fits_keep_one_row_ranges_exact(variant, data, seed):
    s, y, w, _ = data
    w = np.round(w)
    w[:2] = 1.0
    rng = np.random.default_rng(seed)
    ref = make(variant).fit(s, y, sample_weight=w)
    # every distinct score its own range: the finest cutting a sorted request allows
    drv = fit_by_reduction(make(variant), [(s[i : i + 1], y[i : i + 1], w[i : i + 1]) for i in range(s.size)])
    assert_same_fit(drv, ref, "exact", "decision", exact_arrays=True)
    got, _ = run_protocol(make(variant), [(s, y, w)], "decision", rng)
    assert_same_fit(got, ref, "exact", "decision", exact_arrays=True)


def test_isotonic_reduction_on_a_large_table_is_identical():
    rng = np.random.default_rng(3)
    n = 20_000
    s = np.round(rng.normal(size=n), 2)
    y = (rng.random(n) < expit(2 * s)).astype(int)
    w = rng.integers(0, 4, size=n).astype(float)
    ref = BY_NAME["isotonic"]().fit(s, y, sample_weight=w)
    pieces = [(s[i::7], y[i::7], w[i::7]) for i in range(7)]
    got = fit_by_reduction(BY_NAME["isotonic"](), pieces)
    for key in ("lo_", "hi_", "values_", "weights_"):
        np.testing.assert_array_equal(getattr(got, key), getattr(ref, key))


# --------------------------------------------------------------------------------------------------
# validation: the same errors as fit


ALL = list(VARIANTS)


@pytest.mark.parametrize("variant", ALL)
def test_one_class_and_zero_weights_raise_fits_error(variant):
    s = np.array([0.1, 0.4, 0.5, 0.9])
    cases = [
        (np.array([1, 1, 1, 1]), None),
        (np.array([0, 0, 0, 0]), None),
        (np.array([0, 1, 1, 1]), np.array([0.0, 1.0, 1.0, 2.0])),  # the only negative has weight 0
        (np.array([0, 1, 1, 1]), np.zeros(4)),
    ]
    for y, w in cases:
        with pytest.raises(DataError) as expected:
            make(variant).fit(s, y, sample_weight=w)
        pieces = [(s[:1], y[:1], None if w is None else w[:1]), (s[1:], y[1:], None if w is None else w[1:])]
        with pytest.raises(DataError) as got:
            fit_by_reduction(make(variant), pieces)
        assert str(got.value) == str(expected.value)
        with pytest.raises(DataError) as got:
            run_protocol(make(variant), pieces, "decision", np.random.default_rng(0))
        assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("variant", ALL)
def test_bad_pieces_raise_fits_error(variant):
    s = np.array([0.1, 0.4, 0.5, 0.9, 0.3])
    y = np.array([0, 1, 0, 1, 1])
    bad = [
        (np.array([0.1, np.nan, 0.5, 0.9, 0.3]), y, None),
        (s, np.array([0, 1, 2, 1, 1]), None),
        (s, y, np.array([1.0, -1.0, 1.0, 1.0, 1.0])),
    ]
    for bs, by, bw in bad:
        with pytest.raises(DataError) as expected:
            make(variant).fit(bs, by, sample_weight=bw)
        pieces = [(bs[:2], by[:2], None if bw is None else bw[:2]), (bs[2:], by[2:], None if bw is None else bw[2:])]
        with pytest.raises(DataError) as got:
            fit_by_reduction(make(variant), pieces)
        assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("variant", [v for v in ALL if VARIANTS[v][0] != "sigmoid"])
def test_probabilities_out_of_range_report_the_whole_range(variant):
    s = np.array([0.2, -0.5, 0.6, 1.7])
    y = np.array([0, 1, 0, 1])
    with pytest.raises(DataError, match="score_kind='decision'") as expected:
        make(variant).fit(s, y, score_kind="proba")
    with pytest.raises(DataError) as got:
        fit_by_reduction(make(variant), [(s[:2], y[:2], None), (s[2:], y[2:], None)], score_kind="proba")
    assert str(got.value) == str(expected.value)


def test_all_pieces_empty_is_a_data_error():
    e = np.empty(0)
    with pytest.raises(DataError, match="empty"):
        fit_by_reduction(make("sigmoid"), [(e, e, None), (e, e, e)])
    with pytest.raises(DataError, match="empty"):
        fit_by_reduction(make("isotonic"), [])


# --------------------------------------------------------------------------------------------------
# rounds, fallbacks, helpers


def _rounds(variant, kind, n=10_000, seed=0):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.4).astype(int)
    f = rng.normal(size=n) + 1.3 * y
    s = expit(f) if kind == "proba" else f
    pieces = random_partition(s, y, np.ones(n), rng)
    return run_protocol(make(variant), pieces, kind, rng)[1]


ROUND_LIMITS = {"none": 1, "isotonic": 1, "rocch": 1, "binning": 3, "sigmoid": 40, "beta": 60,
                "temperature": 40, "sigmoid_nobias": 40, "venn_abers": 1}


@pytest.mark.parametrize("variant", ALL)
@pytest.mark.parametrize("kind", ["decision", "proba"])
def test_rounds_stay_few(variant, kind):
    assert _rounds(variant, kind) <= ROUND_LIMITS[VARIANTS[variant][0]]


@pytest.mark.parametrize("kind", ["decision", "proba"])
def test_binned_start_leaves_one_or_two_exact_newton_passes(kind):
    # the Newton passes over the rows are what a score-column fit pays per round (issue 21's speed):
    # sigmoid starts from its start histogram's fit, temperature on a 1e-5 bracket around its root
    assert _rounds("sigmoid", kind, n=50_000) <= 3  # summary + 2 passes (was 7)
    assert _rounds("temperature", kind, n=50_000) <= 4  # summary + ends + 2 (was 7)


def test_narrow_temperature_bracket_missing_the_root_restarts_on_the_full_bracket():
    from calengine_builtins.calibrators._solvers import _slope_eval, _slope_narrow_start, _slope_start, _slope_update

    rng = np.random.default_rng(3)
    m = rng.normal(size=2000) + 0.8

    def solve(st, points):
        while points is not None:
            points = _slope_update(st, _slope_eval(m, np.ones(m.size), points))
        return st["x"]

    exact = solve(*_slope_start(1e-6, 1e6))
    wrong = solve(*_slope_narrow_start(2.0 * m, np.ones(m.size), 1e-6, 1e6))  # binned margins far off
    assert wrong == pytest.approx(exact, rel=1e-14)
    assert solve(*_slope_narrow_start(m, np.ones(m.size), 1e-6, 1e6)) == pytest.approx(exact, rel=1e-14)


@pytest.mark.parametrize("shift,interior", [(0.8, True), (2.0, True), (-0.3, False), (40.0, False)])
def test_slope_search_reads_the_derivative_only_where_the_rounds_compute_it(shift, interior):
    """_slope_eval computes g' at a request's first point only (a round's second expit at a bracket's
    upper end was never read): the search visits the same points and ends at the same bits as with g'
    at every point, on the full and on a narrow bracket (also one that misses the root); anti-correlated
    and separable margins end at the bracket's ends, the others by Newton steps."""
    from calengine_builtins.calibrators._solvers import _slope_eval, _slope_narrow_start, _slope_start, _slope_update
    from calengine_builtins.deferred import expit

    rng = np.random.default_rng(5)
    m = rng.normal(size=3000) + shift
    w = rng.random(3000)

    def every_point(points):
        return np.array([[-np.sum(w * m * expit(-a * m)), np.sum(w * m * m * expit(-a * m) * expit(a * m))]
                         for a in points])

    def solve(evaluate, start):
        st, points = start()
        seen = []
        while points is not None:
            seen.append(list(points))
            points = _slope_update(st, evaluate(points))
        return st["x"], seen

    for start in (lambda: _slope_start(1e-6, 1e6), lambda: _slope_narrow_start(m, w, 1e-6, 1e6),
                  lambda: _slope_narrow_start(3.0 * m, w, 1e-6, 1e6)):
        got = solve(lambda points: _slope_eval(m, w, points), start)
        assert got == solve(every_point, start)
        if interior:
            assert len(got[1]) >= 2


def test_sigmoid_rounds_on_separable_and_anticorrelated_data():
    rng = np.random.default_rng(1)
    f = rng.normal(size=10_000)
    for y in ((f > 0).astype(int), (f < 0).astype(int)):
        _, rounds = run_protocol(make("sigmoid"), [(f, y, np.ones(f.size))], "decision", rng)
        assert rounds <= 40


def test_slope_fits_keep_their_documented_ends():
    sep = fit_by_reduction(make("sigmoid_nobias"), [([-1.0], [0], None), ([1.0], [1], None)])
    assert sep.alpha_ == cal_mod.SigmoidNoBiasCalibrator.ALPHA_MAX
    anti = fit_by_reduction(make("sigmoid_nobias"), [([-2.0], [1], None), ([2.0], [0], None)])
    assert anti.alpha_ == 0.0
    t = fit_by_reduction(make("temperature"), [([-2.0], [1], None), ([2.0, 1.0], [0, 0], None)])
    assert t.temperature_ == pytest.approx(2.0 * 1e6)
    assert fit_by_reduction(make("temperature"), [([0.0], [1], None), ([0.0], [0], None)]).temperature_ == 1.0


def test_binning_auto_is_not_a_reduction_and_falls_back_to_fit():
    rng = np.random.default_rng(0)
    s = rng.normal(size=300)
    y = (rng.random(300) < expit(2 * s)).astype(int)
    cal = cal_mod.BinningCalibrator()
    assert cal.reduction_start("decision") is None
    got = fit_by_reduction(cal_mod.BinningCalibrator(), [(s[:100], y[:100], None), (s[100:], y[100:], None)])
    ref = cal_mod.BinningCalibrator().fit(s, y)
    np.testing.assert_array_equal(got.predict(s), ref.predict(s))
    assert got.n_bins_ == ref.n_bins_


def test_reduction_start_resets_an_earlier_fit():
    cal = make("isotonic").fit([0.1, 0.5, 0.9], [0, 1, 1])
    cal.reduction_start("decision")
    assert not hasattr(cal, "values_")


def test_range_index_keeps_ties_together_and_orders_ranges():
    s = np.array([3.0, 1.0, 2.0, 2.0, 5.0, 1.0])
    idx = range_index(s, [2.0, 4.0])
    assert idx.tolist() == [1, 0, 1, 1, 2, 0]


@settings(max_examples=50, deadline=None)
@given(
    s=st.lists(st.integers(-5, 5).map(float), min_size=0, max_size=60),
    k=st.integers(1, 8),
)
def test_sorted_pieces_are_increasing_tie_preserving_ranges(s, k):
    s = np.array(s)
    y = np.arange(s.size) % 2
    pieces = sorted_pieces(s, y, None, k)
    assert len(pieces) <= k
    assert sum(p[0].size for p in pieces) == s.size
    for (a, _, _), (b, _, _) in zip(pieces, pieces[1:]):
        assert a.size and b.size and a.max() < b.min()
    for ps, _, pw in pieces:
        assert np.all(np.diff(ps) >= 0) and np.all(pw == 1.0)
