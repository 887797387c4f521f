"""Fitting learners from mergeable statistics (the optional contract of ``calengine.base.Learner``).

For every built-in learner that says ``supports_stats`` (gaussian_nb, bayes_diagonal, multinomial_nb,
and bernoulli_nb with ``standardize=False``), ``fit_from_stats`` of the merged ``partial_stats`` of any
partitioning of the rows -- empty and one-row pieces, pieces missing classes, dense and (where the
learner accepts it) CSR input, with and without sample weights -- must be the model ``fit`` gives on
all the rows: the same scikit-learn estimator with the same fitted attributes (to 1e-10) and the same
scores (to 1e-9), and it must survive the artifact's save/load.  Also: merge order, the "one pass for k
folds" use, the errors, and ``calengine.testing.check_learner_stats``.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import sparse

from calengine.model.allowlist import CORE_TRUSTED_TYPES
from calengine.errors import DataError
from calengine.testing import check_learner, check_learner_stats
from calengine.testing.checks import _roundtrip_state
from calengine_builtins import learners as L

# (id, constructor, accepts CSR input)
SUPPORTED = {
    "gaussian_nb": (lambda: L.GaussianNBLearner(), False),
    "gaussian_nb_smooth": (lambda: L.GaussianNBLearner(var_smoothing=1e-3), False),
    "bayes_diagonal": (lambda: L.BayesDiagonalLearner(), False),
    "multinomial_nb": (lambda: L.MultinomialNBLearner(), True),
    "multinomial_nb_alpha": (lambda: L.MultinomialNBLearner(alpha=0.01), True),
    "bernoulli_nb_raw": (lambda: L.BernoulliNBLearner(standardize=False), True),
    "bernoulli_nb_raw_half": (lambda: L.BernoulliNBLearner(standardize=False, binarize=0.5, alpha=0.3), True),
}

SETTINGS = settings(
    deadline=None, max_examples=40, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

SCORE_TOL = 1e-9
ATTR_TOL = 1e-10


# ------------------------------------------------------------------------------------------ helpers


def make_problem(seed: int, n: int, d: int, k: int, *, sparse_input: bool, weighted: bool, ties: bool):
    """Random data with every class present; optionally integer-valued (ties, repeated extremes), a
    constant column, and weights with zeros (a class can then have rows but no weight)."""
    rng = np.random.default_rng(seed)
    n = max(n, k)
    y = np.concatenate([np.arange(k), rng.integers(0, k, size=n - k)])
    rng.shuffle(y)
    if sparse_input:
        dense = rng.gamma(1.5, 2.0, size=(n, d)) * (rng.random((n, d)) < 0.4)
        if ties:
            dense = np.round(dense)
        dense[:, 0] += y  # some class signal
        X = sparse.csr_matrix(dense)
    else:
        centres = rng.normal(0.0, 2.0, size=(k, d))
        scales = np.exp(rng.uniform(-1.5, 1.5, size=d))
        X = (centres[y] + rng.normal(size=(n, d))) * scales + rng.uniform(-5, 5, size=d)
        if ties:
            X = np.round(X)
        if d > 1 and seed % 3 == 0:
            X[:, -1] = 2.5  # a constant column
    w = None
    if weighted:
        w = rng.uniform(0.0, 3.0, size=n)
        w[rng.random(n) < 0.15] = 0.0
        if not w.sum() > 0:
            w[0] = 1.0
    return X, y.astype(np.intp), w


def rows(X, idx):
    return X[idx]


def stats_of_pieces(learner, X, y, w, k, pieces):
    out = []
    for idx in pieces:
        st_ = learner.partial_stats(rows(X, idx), y[idx], None if w is None else w[idx], k)
        out.append(st_)
    return out


def merge_left(learner, parts):
    acc = parts[0]
    for p in parts[1:]:
        acc = learner.merge_stats(acc, p)
    return acc


def random_pieces(rng, n: int, n_pieces: int):
    """Shuffled rows cut at random points (repeats give empty pieces), plus a one-row piece and an
    empty piece in random positions."""
    perm = rng.permutation(n)
    cuts = np.sort(rng.integers(0, n + 1, size=n_pieces - 1))
    pieces = np.split(perm, cuts)
    if n > 1:  # split off a one-row piece
        first = pieces[-1]
        if len(first) > 1:
            pieces[-1:] = [first[:1], first[1:]]
    pieces.insert(int(rng.integers(0, len(pieces) + 1)), perm[:0])
    return pieces


def estimator_steps(est):
    return [s for _, s in est.steps] if hasattr(est, "steps") else [est]


def assert_same_estimator(a, b, tol: float = ATTR_TOL) -> float:
    """Same type, same fitted attributes (arrays to ``tol``, relative + absolute); returns the largest
    relative difference seen."""
    assert type(a) is type(b)
    worst = 0.0
    for sa, sb in zip(estimator_steps(a), estimator_steps(b), strict=True):
        assert type(sa) is type(sb)
        assert sa.get_params() == sb.get_params()
        va, vb = vars(sa), vars(sb)
        assert va.keys() == vb.keys(), set(va) ^ set(vb)
        for key, x in va.items():
            other = vb[key]
            if isinstance(x, np.ndarray) or isinstance(x, np.floating):
                x, other = np.asarray(x), np.asarray(other)
                assert x.shape == other.shape and x.dtype.kind == other.dtype.kind, key
                np.testing.assert_allclose(other, x, rtol=tol, atol=tol, err_msg=key)
                fin = np.isfinite(x) & np.isfinite(other)
                if fin.any():
                    rel = np.abs(x[fin] - other[fin]) / np.maximum(1.0, np.abs(x[fin]))
                    worst = max(worst, float(rel.max()))
            else:
                assert x == other, key
    return worst


def fit_ref(make, X, y, w):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # log(0) of a zero-weight class's prior
        return make().fit(X, y, sample_weight=w)


def scores(learner, X):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(learner.score(X))


def assert_scores_close(a, b):
    np.testing.assert_allclose(a, b, rtol=SCORE_TOL, atol=SCORE_TOL)


# ------------------------------------------------------------------------------------------ equivalence


problems = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**31 - 1),
        "n": st.integers(1, 60),
        "d": st.integers(1, 6),
        "k": st.sampled_from([2, 2, 3, 5]),
        "weighted": st.booleans(),
        "ties": st.booleans(),
        "sparse": st.booleans(),
        "n_pieces": st.integers(1, 7),
    }
)


@pytest.mark.parametrize("case", sorted(SUPPORTED))
@SETTINGS
@given(p=problems)
def test_fit_from_merged_stats_equals_fit(case, p):
    make, accepts_sparse = SUPPORTED[case]
    sparse_input = p["sparse"] and accepts_sparse
    k = p["k"]
    X, y, w = make_problem(
        p["seed"], p["n"], p["d"], k, sparse_input=sparse_input, weighted=p["weighted"], ties=p["ties"]
    )
    assert make().supports_stats
    ref = fit_ref(make, X, y, w)
    want = scores(ref, X)

    rng = np.random.default_rng(p["seed"])
    pieces = random_pieces(rng, len(y), p["n_pieces"])
    learner = make()
    parts = stats_of_pieces(learner, X, y, w, k, pieces)
    for part in parts:  # small, plain, picklable arrays whose size does not grow with the rows
        assert all(isinstance(v, np.ndarray) and v.dtype != object for v in part.values())
        assert all(v.size <= k * p["d"] for v in part.values())
        again = pickle.loads(pickle.dumps(part))
        assert all(np.array_equal(again[key], part[key]) for key in part)
    merged = merge_left(learner, parts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert learner.fit_from_stats(merged, k) is learner
    assert learner.n_classes_ == ref.n_classes_ == k
    assert_same_estimator(ref.estimator_, learner.estimator_)
    got = scores(learner, X)
    assert got.shape == want.shape
    assert_scores_close(got, want)

    # deterministic: the same pieces give bit-identical statistics
    parts2 = stats_of_pieces(make(), X, y, w, k, pieces)
    merged2 = merge_left(make(), parts2)
    assert all(np.array_equal(merged[key], merged2[key]) for key in merged)

    # the artifact round trip (skops for the estimator) scores exactly alike
    restored = _roundtrip_state(learner, frozenset(CORE_TRUSTED_TYPES))
    np.testing.assert_array_equal(scores(restored, X), got)
    assert_same_estimator(learner.estimator_, restored.estimator_, tol=0.0)


@pytest.mark.parametrize("case", sorted(SUPPORTED))
@SETTINGS
@given(p=problems)
def test_merge_order_does_not_matter(case, p):
    make, accepts_sparse = SUPPORTED[case]
    k = p["k"]
    X, y, w = make_problem(
        p["seed"], p["n"], p["d"], k, sparse_input=p["sparse"] and accepts_sparse, weighted=p["weighted"],
        ties=p["ties"],
    )
    learner = make()
    rng = np.random.default_rng(p["seed"] + 1)
    parts = stats_of_pieces(learner, X, y, w, k, random_pieces(rng, len(y), p["n_pieces"]))

    def tree(ps):  # a balanced merge tree instead of a left fold
        if len(ps) == 1:
            return ps[0]
        mid = len(ps) // 2
        return learner.merge_stats(tree(ps[:mid]), tree(ps[mid:]))

    orders = [
        merge_left(learner, parts),
        merge_left(learner, parts[::-1]),
        merge_left(learner, [parts[i] for i in rng.permutation(len(parts))]),
        tree(parts),
    ]
    for other in orders[1:]:
        assert other.keys() == orders[0].keys()
        for key in other:
            np.testing.assert_allclose(other[key], orders[0][key], rtol=1e-12, atol=1e-12, err_msg=key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        fitted = [make().fit_from_stats(m, k) for m in orders]
    base = scores(fitted[0], X)
    for f in fitted[1:]:
        assert_scores_close(scores(f, X), base)


@pytest.mark.parametrize("case", sorted(SUPPORTED))
@settings(deadline=None, max_examples=15, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), n_folds=st.integers(2, 6), weighted=st.booleans(), sp=st.booleans())
def test_one_pass_for_k_folds(case, seed, n_folds, weighted, sp):
    """Per-fold statistics computed once; fold f's model from the merge of the other folds."""
    make, accepts_sparse = SUPPORTED[case]
    k = 3
    X, y, w = make_problem(
        seed, 40 + 5 * n_folds, 4, k, sparse_input=sp and accepts_sparse, weighted=weighted, ties=False
    )
    rng = np.random.default_rng(seed)
    fold = np.empty(len(y), dtype=np.intp)
    for c in range(k):  # stratified, so every training split holds every class
        idx = np.flatnonzero(y == c)
        fold[idx] = rng.permutation(np.arange(len(idx)) % n_folds)
    learner = make()
    per_fold = stats_of_pieces(learner, X, y, w, k, [np.flatnonzero(fold == f) for f in range(n_folds)])
    for f in range(n_folds):
        train = np.flatnonzero(fold != f)
        if len(np.unique(y[train])) < k:
            continue
        merged = merge_left(learner, [s for g, s in enumerate(per_fold) if g != f])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            from_stats = make().fit_from_stats(merged, k)
        ref = fit_ref(make, rows(X, train), y[train], None if w is None else w[train])
        assert_same_estimator(ref.estimator_, from_stats.estimator_)
        test = np.flatnonzero(fold == f)
        assert_scores_close(scores(from_stats, rows(X, test)), scores(ref, rows(X, test)))


# ------------------------------------------------------------------------------------------ measured


def test_measured_differences_are_rounding_only():
    """Larger data, many pieces: differences from fit stay at the level of float64 rounding."""
    rng = np.random.default_rng(7)
    worst_attr, worst_score = {}, {}
    for case, (make, accepts_sparse) in SUPPORTED.items():
        for sparse_input in (False, True) if accepts_sparse else (False,):
            for weighted in (False, True):
                X, y, w = make_problem(11, 3000, 8, 4, sparse_input=sparse_input, weighted=weighted, ties=False)
                ref = fit_ref(make, X, y, w)
                learner = make()
                parts = stats_of_pieces(learner, X, y, w, 4, random_pieces(rng, len(y), 25))
                learner.fit_from_stats(merge_left(learner, parts), 4)
                attr = assert_same_estimator(ref.estimator_, learner.estimator_)
                worst_attr[case] = max(worst_attr.get(case, 0.0), attr)
                diff = np.max(np.abs(scores(learner, X) - scores(ref, X)))
                worst_score[case] = max(worst_score.get(case, 0.0), float(diff))
    assert max(worst_attr.values()) < 1e-12, worst_attr
    assert max(worst_score.values()) < 1e-11, worst_score


# ------------------------------------------------------------------------------------------ edge cases


@pytest.mark.parametrize("case", sorted(SUPPORTED))
def test_zero_row_piece_alone_and_merged(case):
    make, _ = SUPPORTED[case]
    X, y, w = make_problem(3, 30, 3, 3, sparse_input=False, weighted=True, ties=False)
    learner = make()
    empty = learner.partial_stats(X[:0], y[:0], w[:0], 3)
    assert np.all(empty["rows"] == 0) and int(empty["n"]) == 0
    full = learner.partial_stats(X, y, w, 3)
    for merged in (learner.merge_stats(empty, full), learner.merge_stats(full, empty)):
        for key in full:
            np.testing.assert_array_equal(merged[key], full[key], err_msg=key)
    with pytest.raises(DataError, match="no rows"):
        make().fit_from_stats(empty, 3)
    # unweighted pieces need no weights at all
    learner.partial_stats(X[:0], y[:0], None, 3)


@pytest.mark.parametrize("case", sorted(SUPPORTED))
def test_missing_class_raises_data_error_naming_the_fix(case):
    make, _ = SUPPORTED[case]
    X, y, _ = make_problem(4, 40, 3, 3, sparse_input=False, weighted=False, ties=False)
    keep = y != 2
    learner = make()
    stats = learner.partial_stats(X[keep], y[keep], None, 3)
    with pytest.raises(DataError, match=r"class\(es\) 2 have no rows.*stratified"):
        learner.fit_from_stats(stats, 3)
    # pieces missing classes are fine as long as the merge has them all
    a = learner.partial_stats(X[keep], y[keep], None, 3)
    b = learner.partial_stats(X[~keep], y[~keep], None, 3)
    learner.fit_from_stats(learner.merge_stats(a, b), 3)
    ref = make().fit(np.vstack([X[keep], X[~keep]]), np.concatenate([y[keep], y[~keep]]))
    assert_scores_close(scores(learner, X), scores(ref, X))


@pytest.mark.parametrize("case", sorted(SUPPORTED))
def test_bad_inputs(case):
    make, accepts_sparse = SUPPORTED[case]
    X, y, w = make_problem(5, 20, 3, 2, sparse_input=False, weighted=True, ties=False)
    learner = make()
    with pytest.raises(DataError, match="class indices"):
        learner.partial_stats(X, np.where(y == 1, 2, y), None, 2)
    with pytest.raises(DataError, match="one class index per row"):
        learner.partial_stats(X, y[:-1], None, 2)
    with pytest.raises(DataError, match="non-negative"):
        learner.partial_stats(X, y, -w, 2)
    with pytest.raises(DataError, match="sums to zero"):
        learner.fit_from_stats(learner.partial_stats(X, y, np.zeros(len(y)), 2), 2)
    with pytest.raises(DataError, match="n_classes"):
        learner.fit_from_stats(learner.partial_stats(X, y, None, 2), 3)
    with pytest.raises(DataError, match="different shapes"):
        learner.merge_stats(learner.partial_stats(X, y, None, 2), learner.partial_stats(X[:, :2], y, None, 2))
    if not accepts_sparse:
        with pytest.raises(DataError, match="needs dense features"):
            learner.partial_stats(sparse.csr_matrix(X), y, None, 2)


def test_gaussian_class_with_negligible_weight_matches_sklearn():
    """GaussianNB leaves a class whose weights sum to ~0 (np.isclose) at mean 0 and variance 0."""
    X, y, _ = make_problem(9, 60, 3, 3, sparse_input=False, weighted=False, ties=False)
    w = np.ones(len(y))
    w[y == 2] = 1e-12
    make = SUPPORTED["gaussian_nb"][0]
    ref = fit_ref(make, X, y, w)
    learner = make()
    parts = stats_of_pieces(learner, X, y, w, 3, np.array_split(np.arange(len(y)), 4))
    learner.fit_from_stats(merge_left(learner, parts), 3)
    assert np.all(learner.estimator_.theta_[2] == 0.0) and np.all(ref.estimator_.theta_[2] == 0.0)
    assert_same_estimator(ref.estimator_, learner.estimator_)
    assert_scores_close(scores(learner, X), scores(ref, X))


@pytest.mark.parametrize("sparse_input", [False, True])
def test_multinomial_constant_and_empty_columns_count_exactly_zero(sparse_input):
    """A constant column scales to exactly 0 (MinMaxScaler) and an all-zero one stays 0 (MaxAbsScaler):
    no rounding residue, which a tiny alpha would turn into a visible log-probability."""
    X, y, w = make_problem(10, 50, 4, 3, sparse_input=False, weighted=True, ties=False)
    X = np.abs(X)
    X[:, 1] = 0.0 if sparse_input else 2.7
    if sparse_input:
        X = sparse.csr_matrix(X)
    make = lambda: L.MultinomialNBLearner(alpha=1e-10)  # noqa: E731
    ref = fit_ref(make, X, y, w)
    learner = make()
    parts = stats_of_pieces(learner, X, y, w, 3, np.array_split(np.arange(len(y)), 5))
    learner.fit_from_stats(merge_left(learner, parts), 3)
    nb = learner.estimator_.steps[-1][1]
    assert np.all(nb.feature_count_[:, 1] == 0.0)
    assert np.all(ref.estimator_.steps[-1][1].feature_count_[:, 1] == 0.0)
    assert_same_estimator(ref.estimator_, learner.estimator_)
    assert_scores_close(scores(learner, X), scores(ref, X))


@pytest.mark.parametrize(
    "learner",
    [L.GaussianNBLearner(var_smoothing=-1.0), L.MultinomialNBLearner(alpha=-1.0),
     L.BernoulliNBLearner(alpha=-1.0, standardize=False)],
    ids=lambda lr: lr.name,
)
def test_invalid_parameters_rejected_as_fit_rejects_them(learner):
    from sklearn.utils._param_validation import InvalidParameterError

    X, y, _ = make_problem(12, 20, 3, 2, sparse_input=False, weighted=False, ties=False)
    with pytest.raises(InvalidParameterError):
        learner.fit(X, y)
    with pytest.raises(InvalidParameterError):
        learner.fit_from_stats(learner.partial_stats(X, y, None, 2), 2)


def test_multinomial_keeps_the_sparse_negative_values_error():
    learner = L.MultinomialNBLearner()
    X = sparse.csr_matrix(np.array([[1.0, -2.0], [0.0, 3.0]]))
    with pytest.raises(DataError, match="non-negative sparse features"):
        learner.partial_stats(X, np.array([0, 1]), None, 2)
    with pytest.raises(DataError, match="non-negative sparse features"):
        learner.fit(X, np.array([0, 1]))


def test_multinomial_refuses_to_mix_dense_and_sparse_pieces():
    learner = L.MultinomialNBLearner()
    X, y, _ = make_problem(6, 20, 3, 2, sparse_input=True, weighted=False, ties=False)
    a = learner.partial_stats(X[:10], y[:10], None, 2)
    b = learner.partial_stats(X[10:].toarray(), y[10:], None, 2)
    with pytest.raises(DataError, match="dense and sparse"):
        learner.merge_stats(a, b)
    # an empty piece takes the format of the other side
    empty = learner.partial_stats(np.zeros((0, 3)), y[:0], None, 2)
    assert bool(learner.merge_stats(empty, a)["sparse"])


# ------------------------------------------------------------------------------------------ who supports


def test_which_learners_support_stats():
    supported = {cls.name for cls in L.LEARNERS if cls().supports_stats}
    assert supported == {"gaussian_nb", "bayes_diagonal", "multinomial_nb"}
    assert L.BernoulliNBLearner(standardize=False).supports_stats is True
    assert L.BernoulliNBLearner(standardize=True).supports_stats is False


def _unsupported():
    out = [cls() for cls in L.LEARNERS if cls is not L.SklearnClassifier and not cls().supports_stats]
    out.append(L.SklearnClassifier("sklearn.linear_model.LogisticRegression"))
    return out


@pytest.mark.parametrize("learner", _unsupported(), ids=lambda lr: f"{lr.name}")
def test_unsupported_learners_raise_not_implemented(learner):
    X, y, _ = make_problem(8, 10, 2, 2, sparse_input=False, weighted=False, ties=False)
    assert not learner.supports_stats
    with pytest.raises(NotImplementedError, match="statistics"):
        learner.partial_stats(X, y, None, 2)
    with pytest.raises(NotImplementedError, match="statistics"):
        learner.merge_stats({}, {})
    with pytest.raises(NotImplementedError, match="statistics"):
        learner.fit_from_stats({}, 2)


# ------------------------------------------------------------------------------------------ conformance check


@pytest.mark.parametrize(
    "cls,params",
    [
        (L.GaussianNBLearner, {}),
        (L.BayesDiagonalLearner, {}),
        (L.MultinomialNBLearner, {}),
        (L.BernoulliNBLearner, {"standardize": False}),
    ],
)
def test_check_learner_stats_passes(cls, params):
    check_learner_stats(cls, params=params)


def test_check_learner_runs_the_stats_check():
    check_learner(L.GaussianNBLearner)
    check_learner(L.BernoulliNBLearner)  # standardize=True: no statistics, nothing to check


class _DropsMerges(L.GaussianNBLearner):
    """A broken plugin: merge_stats keeps only its first argument."""

    name = "drops_merges"

    def merge_stats(self, a, b):
        return a if int(a["n"]) else b


class _BadSupport(L.GaussianNBLearner):
    name = "bad_support"
    supports_stats = "yes"


def test_check_learner_stats_catches_a_broken_merge():
    with pytest.raises(AssertionError, match="does not reproduce fit"):
        check_learner_stats(_DropsMerges)
    with pytest.raises(AssertionError, match="does not reproduce fit"):
        check_learner(_DropsMerges)
    with pytest.raises(AssertionError, match="supports_stats must be a bool"):
        check_learner(_BadSupport)
