"""Built-in combiners: worked examples from the notes (section c), exact recovery, properties."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from calengine.methods import codematrix as cm
from calengine.base import Combiner
from calengine.errors import CodeMatrixError, ParameterError
from calengine_builtins import _coupling
from calengine_builtins import combiners as C

# worked example (k = 3): r_01 = 0.6, r_02 = 0.75, r_12 = 0.55 on all_pairs(3)
PAIRS_R = np.array([[0.6, 0.75, 0.55]])
OVA_R = np.array([[0.7, 0.4, 0.1]])


def implied(P, M):
    """Column estimates that a true distribution P implies: sum_I p / sum_{I u J} p."""
    return (P @ (M == 1)) / (P @ (M != 0))


def random_p(rng, n, k, floor):
    return rng.dirichlet(np.ones(k), n) * (1 - k * floor) + floor


def matrix_of(kind, k, seed=0):
    if kind in ("dense_ecoc", "sparse_ecoc"):
        gen = cm.dense_random if kind == "dense_ecoc" else cm.sparse_random
        return gen(k, seed=seed, n_candidates=20)
    return cm.make_matrix(kind, k)


ALL_KINDS = ["one_vs_all", "all_pairs", "dense_ecoc", "sparse_ecoc", "k_minus_one"]
ACCEPTS = {
    "normalize": ["one_vs_all"],
    "least_squares": ALL_KINDS,
    "coupling": ALL_KINDS,
    "pairwise_coupling": ["all_pairs"],
    "wu_lin_weng": ["all_pairs"],
    "k_minus_one": ["k_minus_one"],
}
COMBINERS = {cls.name: cls for cls in C.BUILTIN_COMBINERS}


# ------------------------------------------------------------------------------------------------
# registration


def test_hook_registers_every_builtin_combiner():
    got = []
    C.register_combiners(got.append)
    assert sorted(cls.name for cls in got) == sorted(ACCEPTS)
    import inspect

    from sklearn.base import clone

    for cls in got:
        assert issubclass(cls, Combiner)
        # sklearn convention: __init__ stores exactly its parameters, so get_params and clone round-trip
        obj = cls()
        params = obj.get_params()
        declared = {
            name for name, prm in inspect.signature(cls.__init__).parameters.items()
            if name != "self" and prm.kind not in (prm.VAR_POSITIONAL, prm.VAR_KEYWORD)
        }
        assert set(params) == declared, cls
        assert clone(obj).get_params() == params


# ------------------------------------------------------------------------------------------------
# worked examples from the notes, section c


@pytest.mark.parametrize(
    "combiner,expected",
    [
        (C.PairwiseCoupling(), [0.506963, 0.289267, 0.203770]),
        (C.Coupling(), [0.506963, 0.289267, 0.203770]),
        (C.WuLinWeng(), [0.500091, 0.302941, 0.196968]),
        (C.WuLinWeng(solver="libsvm"), [0.501149, 0.301935, 0.196916]),
        (C.LeastSquares(), [0.500091, 0.302941, 0.196968]),
    ],
    ids=lambda v: getattr(v, "name", None) and f"{v.name}-{getattr(v, 'solver', '')}",
)
def test_all_pairs_worked_example(combiner, expected):
    np.testing.assert_allclose(combiner.combine(PAIRS_R, cm.all_pairs(3))[0], expected, atol=1e-6)


@pytest.mark.parametrize(
    "combiner,expected",
    [
        (C.Normalize(), [0.583333, 0.333333, 0.083333]),
        (C.Coupling(), [0.650717, 0.327223, 0.022060]),
        # documented choice: on matrices without zeros the linearised form is Kong-Dietterich's
        # A p ~ r, which for one-vs-all is the Euclidean projection of r onto the simplex
        (C.LeastSquares(), [0.633333, 0.333333, 0.033333]),
    ],
    ids=lambda v: getattr(v, "name", None),
)
def test_one_vs_all_worked_example(combiner, expected):
    np.testing.assert_allclose(combiner.combine(OVA_R, cm.one_vs_all(3))[0], expected, atol=1e-6)


def test_least_squares_on_dense_matrices_is_kong_dietterich():
    # for M without zeros, the linearised objective equals ||A p - r||^2 with A_bc = [c in I_b]
    from scipy.optimize import minimize

    rng = np.random.default_rng(0)
    M = cm.dense_random(5, seed=1, n_candidates=20)
    A = (M == 1).T.astype(float)
    for r in rng.random((4, M.shape[1])):
        ours = C.LeastSquares().combine(r[None], M)[0]
        ref = minimize(
            lambda p: np.sum((A @ p - r) ** 2), np.full(5, 0.2), method="SLSQP",
            bounds=[(0, 1)] * 5, constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1}],
            options={"ftol": 1e-14, "maxiter": 500},
        ).x
        assert np.sum((A @ ours - r) ** 2) <= np.sum((A @ ref - r) ** 2) + 1e-10
        np.testing.assert_allclose(ours, ref, atol=1e-5)


def test_k_minus_one_rule_and_floor():
    M = cm.k_minus_one(3)
    out = C.KMinusOne().combine(np.array([[0.5, 0.3], [0.7, 0.6], [1.4, -0.2]]), M)
    np.testing.assert_allclose(out[0], [0.5, 0.3, 0.2])
    # remainder 1 - 1.3 < 0.001: last class gets 0.001, the others keep their ratio 7:6
    np.testing.assert_allclose(out[1], [0.999 * 7 / 13, 0.999 * 6 / 13, 0.001])
    # estimates are clipped to [0, 1] first: (1, 0) leaves -0 for the last class
    np.testing.assert_allclose(out[2], [0.999, 0.0, 0.001])


def test_normalize_all_zero_row_is_uniform():
    out = C.Normalize().combine(np.array([[0.0, 0.0, 0.0, 0.0]]), cm.one_vs_all(4))
    np.testing.assert_allclose(out, 0.25)


# ------------------------------------------------------------------------------------------------
# exact recovery: estimates implied by a true p give back p


def _recovery_cases():
    for name, kinds in ACCEPTS.items():
        for kind in kinds:
            for k in (2, 3, 5) if kind != "k_minus_one" else (2, 3, 4):
                yield name, kind, k


@pytest.mark.parametrize("name,kind,k", list(_recovery_cases()))
def test_recovers_true_p(name, kind, k):
    rng = np.random.default_rng(k)
    M = matrix_of(kind, k, seed=k)
    # coupling's multiplicative updates crawl when some p is tiny; keep every p >= 0.05 so 1000 sweeps
    # suffice (see the Coupling docstring)
    P = random_p(rng, 40, k, 0.05)
    R = implied(P, M)
    params = [{}] if name != "wu_lin_weng" else [{"solver": "exact"}]
    for kw in params:
        np.testing.assert_allclose(COMBINERS[name](**kw).combine(R, M), P, atol=1e-6)


def test_libsvm_iteration_stops_near_true_p():
    # libsvm's stopping rule (0.005 / k on the gradient) leaves it ~1e-3 from the optimum
    rng = np.random.default_rng(0)
    M = cm.all_pairs(4)
    P = random_p(rng, 40, 4, 0.0)
    out = C.WuLinWeng(solver="libsvm").combine(implied(P, M), M)
    assert np.abs(out - P).max() < 0.01


@pytest.mark.parametrize("kind", ["one_vs_all", "all_pairs", "dense_ecoc", "sparse_ecoc", "k_minus_one"])
def test_least_squares_recovers_small_probabilities(kind):
    rng = np.random.default_rng(1)
    M = matrix_of(kind, 8, seed=2)
    P = rng.dirichlet(np.full(8, 0.5), 200)
    np.testing.assert_allclose(C.LeastSquares().combine(implied(P, M), M), P, atol=1e-6)


# ------------------------------------------------------------------------------------------------
# properties


def _estimates(n, l):
    values = st.one_of(st.just(0.0), st.just(1.0), st.floats(0.0, 1.0))
    return hnp.arrays(np.float64, (n, l), elements=values)


@st.composite
def combiner_cases(draw):
    name = draw(st.sampled_from(sorted(ACCEPTS)))
    kind = draw(st.sampled_from(ACCEPTS[name]))
    k = draw(st.integers(2, 6))
    M = matrix_of(kind, k, seed=draw(st.integers(0, 3)))
    R = draw(_estimates(draw(st.integers(1, 4)), M.shape[1]))
    kw = {"solver": draw(st.sampled_from(["exact", "libsvm"]))} if name == "wu_lin_weng" else {}
    counts = None
    if name in ("coupling", "pairwise_coupling") and draw(st.booleans()):
        counts = draw(hnp.arrays(np.float64, M.shape[1], elements=st.floats(1.0, 1e4)))
    return COMBINERS[name](**kw), M, R, counts


@settings(max_examples=50, deadline=None)
@given(case=combiner_cases())
def test_outputs_are_distributions(case):
    combiner, M, R, counts = case
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no silent NaN / division by zero
        P = combiner.combine(R, M, counts)
    assert P.shape == (R.shape[0], M.shape[0])
    assert np.isfinite(P).all()
    assert (P >= 0).all()
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-9)


@settings(max_examples=50, deadline=None)
@given(
    kind=st.sampled_from(ALL_KINDS),
    k=st.integers(2, 7),
    seed=st.integers(0, 5),
    data=st.data(),
)
def test_least_squares_satisfies_kkt(kind, k, seed, data):
    """The QP optimum: on the support the gradient is constant, off it the gradient is not smaller."""
    M = matrix_of(kind, k, seed)
    R = data.draw(_estimates(3, M.shape[1]))
    P = C.LeastSquares().combine(R, M)
    A = np.clip(R, 0, 1)[:, :, None] * (M != 0).T[None] - (M == 1).T[None]  # (n, l, k)
    for a, p in zip(A, P):
        g = 2 * a.T @ (a @ p)
        scale = 1.0 + np.abs(g).max()
        support = p > 1e-9
        nu = g[support].mean()
        assert np.abs(g[support] - nu).max() <= 1e-7 * scale
        assert (g[~support] >= nu - 1e-7 * scale).all()


def textbook_coupling(r, M, w, tol=1e-10, max_iter=1000):
    """Zadrozny's update for one row, written as in the notes: update p_i, renormalise, recompute."""
    r = np.clip(r, 1e-7, 1 - 1e-7)
    k = M.shape[0]
    p = np.full(k, 1.0 / k)
    for _ in range(max_iter):
        old = p.copy()
        for i in range(k):
            rhat = (p @ (M == 1)) / (p @ (M != 0))
            plus, minus = M[i] == 1, M[i] == -1
            num = (w * r)[plus].sum() + (w * (1 - r))[minus].sum()
            den = (w * rhat)[plus].sum() + (w * (1 - rhat))[minus].sum()
            p[i] *= num / den
            p /= p.sum()
        if np.abs(p - old).max() < tol:
            break
    return p


@pytest.mark.parametrize("kind", ["one_vs_all", "all_pairs", "dense_ecoc", "sparse_ecoc"])
def test_vectorised_coupling_matches_textbook_loop(kind):
    rng = np.random.default_rng(3)
    M = matrix_of(kind, 4, seed=1)
    R = rng.random((3, M.shape[1]))
    w = rng.integers(1, 50, M.shape[1]).astype(float)
    ours = C.Coupling().combine(R, M, counts=w)
    ref = np.array([textbook_coupling(r, M, w) for r in R])
    np.testing.assert_allclose(ours, ref, atol=1e-9)


def test_coupling_follows_the_counts():
    # inconsistent estimates: the heavily weighted column is matched almost exactly
    M, R = cm.all_pairs(3), PAIRS_R
    for b in range(3):
        counts = np.ones(3)
        counts[b] = 1e4
        P = C.Coupling().combine(R, M, counts=counts)
        assert abs(implied(P, M)[0, b] - R[0, b]) < 1e-3


@pytest.mark.parametrize("name", ["least_squares", "coupling", "wu_lin_weng", "normalize"])
def test_column_order_and_sign_do_not_matter(name):
    rng = np.random.default_rng(4)
    kind = ACCEPTS[name][0] if name != "least_squares" else "sparse_ecoc"
    M = matrix_of(kind, 4, seed=0)
    R = rng.random((5, M.shape[1]))
    perm = rng.permutation(M.shape[1])
    base = COMBINERS[name]().combine(R, M)
    np.testing.assert_allclose(COMBINERS[name]().combine(R[:, perm], M[:, perm]), base, atol=1e-8)
    if name in ("least_squares", "coupling", "wu_lin_weng"):
        # flipping a column's sign flips its binary problem: r becomes 1 - r
        flip = np.where(np.arange(M.shape[1]) % 2 == 0, -1, 1)
        R2 = np.where(flip < 0, 1 - R, R)
        np.testing.assert_allclose(COMBINERS[name]().combine(R2, M * flip), base, atol=1e-8)


def test_least_squares_on_many_rows_is_a_distribution_per_row():
    """(Its speed is measured by benchmarks/bench_hot_paths.py, not asserted here.)  Rows are solved
    independently: the batch equals each row solved alone."""
    rng = np.random.default_rng(5)
    M = cm.all_pairs(10)
    R = rng.random((2_000, M.shape[1]))
    P = C.LeastSquares().combine(R, M)
    assert np.isfinite(P).all() and (P >= 0).all()
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-9)
    for i in (0, 777, 1999):
        np.testing.assert_allclose(C.LeastSquares().combine(R[i : i + 1], M)[0], P[i], atol=1e-9)


def test_empty_input():
    for name, kinds in ACCEPTS.items():
        M = matrix_of(kinds[0], 3)
        assert COMBINERS[name]().combine(np.zeros((0, M.shape[1])), M).shape == (0, 3)


# ------------------------------------------------------------------------------------------------
# matrices and inputs a combiner cannot use


@pytest.mark.parametrize(
    "name,kind",
    [
        ("normalize", "all_pairs"),
        ("normalize", "k_minus_one"),
        ("normalize", "dense_ecoc"),
        ("pairwise_coupling", "one_vs_all"),
        ("wu_lin_weng", "one_vs_all"),
        ("wu_lin_weng", "sparse_ecoc"),
        ("k_minus_one", "one_vs_all"),
        ("k_minus_one", "all_pairs"),
    ],
)
def test_combiner_rejects_matrix_it_cannot_use(name, kind):
    M = matrix_of(kind, 4)
    combiner = COMBINERS[name]()
    with pytest.raises(CodeMatrixError, match=f"combiner '{name}' needs .*least_squares/coupling"):
        combiner.check_matrix(M)
    with pytest.raises(CodeMatrixError):
        combiner.combine(np.full((1, M.shape[1]), 0.5), M)


def test_normalize_message_names_the_fix():
    with pytest.raises(CodeMatrixError, match="use --multiclass one_vs_all:normalize"):
        C.Normalize().check_matrix(cm.all_pairs(3))


@pytest.mark.parametrize("name", sorted(ACCEPTS))
def test_malformed_matrix_rejected(name):
    with pytest.raises(CodeMatrixError):
        COMBINERS[name]().check_matrix(np.array([[1, 1], [1, -1], [-1, 2]]))
    with pytest.raises(CodeMatrixError):
        COMBINERS[name]().combine(np.full((1, 2), 0.5), np.array([[1, 1], [-1, -1], [-1, -1]]))


def test_bad_inputs_rejected():
    M = cm.all_pairs(3)
    with pytest.raises(ParameterError, match="shape"):
        C.LeastSquares().combine(np.full((2, 4), 0.5), M)
    with pytest.raises(ParameterError, match="NaN"):
        C.Coupling().combine(np.array([[0.5, np.nan, 0.5]]), M)
    with pytest.raises(ParameterError, match="counts"):
        C.Coupling().combine(PAIRS_R, M, counts=[1, -1, 1])
    with pytest.raises(ParameterError, match="counts"):
        C.Coupling().combine(PAIRS_R, M, counts=[1, 1])
    with pytest.raises(ParameterError, match="solver"):
        C.WuLinWeng(solver="newton").combine(PAIRS_R, M)
    with pytest.raises(ParameterError, match="floor"):
        C.KMinusOne(floor=1.5).combine(np.array([[0.5, 0.2]]), cm.k_minus_one(3))


# ------------------------------------------------------------------------------------------------
# scikit-learn's SVC(probability=True) is libsvm's method 2 on Platt-scaled ovo decision values


@pytest.mark.parametrize("k", [2, 4])
def test_libsvm_solver_reproduces_sklearn_svc(k):
    from sklearn.datasets import load_digits
    from sklearn.svm import SVC

    X, y = load_digits(return_X_y=True)
    keep = y < k
    X, y = X[keep][:240] / 16.0, y[keep][:240]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # probability=True, probA_ and probB_ are deprecated in 1.9
        svc = SVC(probability=True, decision_function_shape="ovo", C=0.1, gamma=0.5, random_state=0)
        svc.fit(X, y)
        f = svc.decision_function(X[:60])
        expected = svc.predict_proba(X[:60])
        A, B = svc.probA_, svc.probB_
    if k == 2:
        f = -f[:, None]  # binary decision_function is positive for class 1; libsvm's for class 0
    R = 1.0 / (1.0 + np.exp(A * f + B))
    got = C.WuLinWeng(solver="libsvm").combine(R, cm.all_pairs(k))
    np.testing.assert_allclose(got, expected, atol=1e-12)


# ------------------------------------------------------------------------------------------------
# coupling on all-pairs: Newton's method against the plain sweeps (issue 12)


def confident_pairs(rng, n, k, spread, noise=1.0):
    """All-pairs estimates from noisy Bradley-Terry strengths ``N(0, spread)``: partly inconsistent,
    and with a large ``spread`` as confident as a well-separated dataset such as Pendigits gives
    (spread 6: classes down to 1e-12, where 1000 plain sweeps stop ~1e-3 short)."""
    M = cm.all_pairs(k)
    s = rng.normal(0, spread, (n, k))
    z = s @ ((M == 1).astype(float) - (M == -1)) + rng.normal(0, noise, (n, M.shape[1]))
    return M, 1 / (1 + np.exp(-z))


def fixed_point_moves(P, R, M, w):
    """How far one multiplicative update (all classes at once) would move each ``p_i``."""
    Rc = np.clip(R, C.R_CLIP, 1 - C.R_CLIP)
    rhat = implied(P, M)
    pos, neg = (M == 1).astype(float), (M == -1).astype(float)
    num = (Rc * w) @ pos.T + ((1 - Rc) * w) @ neg.T
    den = (rhat * w) @ pos.T + ((1 - rhat) * w) @ neg.T
    return P * (num / den - 1)


@pytest.mark.parametrize("k,spread", [(2, 1.0), (3, 1.0), (5, 1.5)])
def test_newton_coupling_equals_converged_sweeps(k, spread):
    rng = np.random.default_rng(k)
    M, R = confident_pairs(rng, 30, k, spread)
    w = rng.integers(1, 2000, M.shape[1]).astype(float)
    assert _coupling._pairwise_linked(M, w)
    ref = _coupling._couple_sweeps(np.clip(R, C.R_CLIP, 1 - C.R_CLIP), M, w, 1e-15, 5000)
    np.testing.assert_allclose(C.Coupling().combine(R, M, counts=w), ref, atol=1e-12)


def test_newton_coupling_reaches_the_fixed_point_the_sweeps_crawl_to():
    """Pendigits-like rows: 1000 sweeps stop far short, more sweeps head for Newton's answer, and
    Newton's answer is a fixed point of the update to round-off."""
    rng = np.random.default_rng(10)
    M, R = confident_pairs(rng, 4, 10, 6.0)
    w = rng.integers(1400, 1600, M.shape[1]).astype(float)
    P = C.Coupling().combine(R, M, counts=w)
    assert P.min() < 1e-8
    assert np.abs(fixed_point_moves(P, R, M, w)).max() < 1e-14
    Rc = np.clip(R, C.R_CLIP, 1 - C.R_CLIP)
    short = np.abs(_coupling._couple_sweeps(Rc, M, w, 1e-10, 1000) - P).max(axis=1)
    longer = np.abs(_coupling._couple_sweeps(Rc, M, w, 1e-10, 4000) - P).max(axis=1)
    assert short.max() > 1e-4 and (longer <= short).all()
    # a row the sweeps finish (tol 1e-10 met) agrees to what their stopping rule leaves
    finished = longer == short
    assert finished.any() and longer[finished].max() < 1e-8


@settings(max_examples=60, deadline=None)
@given(
    k=st.integers(2, 7),
    data=st.data(),
)
def test_newton_coupling_is_a_fixed_point(k, data):
    """Any estimates (0 and 1 included) and counts: a distribution no update moves by tol."""
    M = cm.all_pairs(k)
    R = data.draw(_estimates(data.draw(st.integers(1, 5)), M.shape[1]))
    w = data.draw(hnp.arrays(np.float64, M.shape[1], elements=st.floats(1.0, 1e4)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        P = C.Coupling().combine(R, M, counts=w)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    assert (P > 0).all()
    assert np.abs(fixed_point_moves(P, R, M, w)).max() < 1e-10


def test_unlinking_zero_counts_fall_back_to_the_sweeps():
    """Zero counts that leave a class without a weighted column (or split the classes) make the
    fixed point depend on the start; the plain sweeps then decide, as before (that class gets 0)."""
    M, R = cm.all_pairs(3), PAIRS_R
    counts = np.array([1.0, 0.0, 0.0])  # class 2 is in columns 1 and 2 only
    assert not _coupling._pairwise_linked(M, counts)
    P = C.Coupling().combine(R, M, counts=counts)
    np.testing.assert_allclose(P, _coupling._couple_sweeps(np.clip(R, C.R_CLIP, 1 - C.R_CLIP), M, counts, 1e-10, 1000))
    assert P[0, 2] == 0.0
    # one zero column that still leaves the classes linked: Newton, same answer as the sweeps
    M4 = cm.all_pairs(4)
    R4 = np.random.default_rng(5).random((6, M4.shape[1]))
    counts4 = np.array([3.0, 0.0, 5.0, 2.0, 7.0, 1.0])
    assert _coupling._pairwise_linked(M4, counts4)
    ref = _coupling._couple_sweeps(np.clip(R4, C.R_CLIP, 1 - C.R_CLIP), M4, counts4, 1e-15, 20_000)
    np.testing.assert_allclose(C.Coupling().combine(R4, M4, counts=counts4), ref, atol=1e-11)


@pytest.mark.parametrize("kind", ["one_vs_all", "dense_ecoc", "sparse_ecoc", "k_minus_one"])
def test_other_matrices_keep_the_sweeps(kind):
    """Off all-pairs the sweep's fixed point depends on the update order (see ``_couple``), so those
    matrices must not reach Newton."""
    M = matrix_of(kind, 4, seed=1)
    assert not _coupling._pairwise_linked(M, np.ones(M.shape[1]))
    R = np.random.default_rng(6).random((5, M.shape[1]))
    np.testing.assert_array_equal(
        C.Coupling().combine(R, M),
        C._to_simplex(_coupling._couple_sweeps(np.clip(R, C.R_CLIP, 1 - C.R_CLIP), M, np.ones(M.shape[1]), 1e-10, 1000)),
    )


def test_newton_coupling_blocks_rows_independently(monkeypatch):
    """Rows are solved in blocks sharing work arrays; a short last block and a one-row call must
    give each row what the whole batch gives it."""
    rng = np.random.default_rng(8)
    M, R = confident_pairs(rng, 23, 5, 3.0)
    w = rng.integers(1, 100, M.shape[1]).astype(float)
    whole = C.Coupling().combine(R, M, counts=w)
    monkeypatch.setattr(_coupling, "_BLOCK_ROWS", 7)
    np.testing.assert_allclose(C.Coupling().combine(R, M, counts=w), whole, atol=1e-13)
    for i in (0, 22):
        np.testing.assert_allclose(C.Coupling().combine(R[i : i + 1], M, counts=w), whole[i : i + 1], atol=1e-13)
    assert C.Coupling().combine(R[:0], M, counts=w).shape == (0, 5)
