"""Split conformal classification on arrays (calengine/methods/conformal.py).

Oracles: MAPIE 1.6's ``SplitConformalClassifier`` (LAC, APS, RAPS, top-k thresholds on the same
calibration rows and the same uniforms), crepes' Mondrian ``ConformalClassifier`` (class-conditional
p-values and sets), exact fractions for the weighted quantile; and validity itself -- the coverage
guarantee -- over many random calibration/test splits of Pendigits, Adult and a 20 Newsgroups sample.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from calengine.errors import DataError, ParameterError
from calengine.methods import conformal as cf

REPO_DATA = __import__("pathlib").Path(__file__).resolve().parents[2] / "data"


def _probabilities(n: int, k: int, seed: int, temperature: float = 2.0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, k)) * temperature
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(P, axis=1)).sum(axis=1)
    return P, np.minimum(y, k - 1)


# ---------------------------------------------------------------------------------------------- MAPIE


class _Lookup:
    """A prefit classifier whose ``predict_proba`` returns stored probabilities by row index (column 0 of X)."""

    def __init__(self, P):
        self.P = P
        self.classes_ = np.arange(P.shape[1])
        self.n_features_in_ = 1
        self.fitted_ = True

    def fit(self, X, y):
        return self

    def predict_proba(self, X):
        return self.P[np.asarray(X)[:, 0].astype(int)]

    def predict(self, X):
        return np.argmax(self.predict_proba(X), axis=1)

    def get_params(self, deep=True):
        return {"P": self.P}

    def __sklearn_tags__(self):
        from sklearn.utils import ClassifierTags, Tags, TargetTags

        return Tags(estimator_type="classifier", target_tags=TargetTags(required=True),
                    classifier_tags=ClassifierTags())


def _mapie(P, y, score: str, alpha: float, seed: int):
    from mapie.classification import SplitConformalClassifier

    X = np.arange(len(y))[:, None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = SplitConformalClassifier(_Lookup(P), confidence_level=1 - alpha, conformity_score=score, prefit=True,
                                     random_state=seed)
        m.conformalize(X, y)
        m.predict_set(X[:3])
    return m


@pytest.mark.parametrize("score,mapie_name", [("lac", "lac"), ("aps", "aps"), ("topk", "top_k")])
@pytest.mark.parametrize("n,alpha,seed", [(101, 0.1, 0), (999, 0.05, 1), (2500, 0.2, 2), (57, 0.3, 3)])
def test_thresholds_equal_mapie_split_conformal(score, mapie_name, n, alpha, seed):
    P, y = _probabilities(n, 6, seed)
    m = _mapie(P, y, mapie_name, alpha, seed)
    theirs = m._mapie_classifier.conformity_score_function_.quantiles_
    # the same calibration scores, bit for bit: APS with MAPIE's uniforms (RandomState(seed).uniform(n))
    u = np.random.RandomState(seed).uniform(size=n) if score == "aps" else None
    V = cf.true_scores(P, y, score, u)
    assert np.array_equal(V, m.conformity_scores.ravel())
    assert cf.threshold(V, alpha) == float(theirs[0])


@pytest.mark.parametrize("n,alpha,seed", [(1000, 0.1, 0), (3001, 0.05, 4)])
def test_raps_threshold_equals_mapie(n, alpha, seed):
    """MAPIE's RAPS tunes lambda and k_reg on a split of the conformalization rows and calibrates on the
    rest; on those rows, with its uniforms and its lambda and k_reg, our threshold is MAPIE's."""
    from sklearn.model_selection import StratifiedShuffleSplit

    P, y = _probabilities(n, 8, seed)
    m = _mapie(P, y, "raps", alpha, seed)
    csf = m._mapie_classifier.conformity_score_function_
    lam, k_reg = float(np.ravel(csf.lambda_star)[0]), int(np.ravel(csf.k_star)[0])
    # MAPIE 1.6 leaves size_raps at None there: the splitter's default test size (10 %), in its order
    train, held = next(StratifiedShuffleSplit(n_splits=1, test_size=None, random_state=seed).split(P, y))
    assert np.array_equal(csf.X_raps[:, 0], held)
    u = np.random.RandomState(seed).uniform(size=train.size)
    V = cf.true_scores(P[train], y[train], "raps", u, lam, k_reg)
    assert cf.threshold(V, alpha) == float(np.ravel(m._mapie_classifier.quantiles_)[0])
    assert lam > 0 or k_reg > 1  # the penalty was exercised by at least one of its parameters


def test_lac_sets_equal_mapie_away_from_its_tolerance():
    """MAPIE includes a class when 1 - p - t <= 1e-8; ours is exact (<= t).  Away from that band the
    sets agree; the band is where they differ, by design (docs/guide/conformal.md)."""
    P, y = _probabilities(2000, 5, 7)
    alpha = 0.1
    m = _mapie(P, y, "lac", alpha, 0)
    t = cf.threshold(cf.true_scores(P, y, "lac"), alpha)
    ours = cf.prediction_sets(cf.class_scores(P, "lac"), t)
    theirs = m.predict_set(np.arange(len(y))[:, None])[1][:, :, 0]
    band = np.abs((1 - P) - t) <= 1e-8
    assert np.array_equal(ours[~band], theirs[~band])


# ---------------------------------------------------------------------------------------------- crepes


def test_mondrian_by_class_equals_crepes():
    """crepes' Mondrian ConformalClassifier with the true class as bin: our non-smoothed p-values are its
    p-values; our set is {p > alpha}, crepes' {p >= alpha}: equal unless (n_c + 1) alpha is an integer."""
    from crepes import ConformalClassifier

    P, y = _probabilities(1500, 4, 11)
    cal, test = np.arange(1000), np.arange(1000, 1500)
    V_cal = cf.true_scores(P[cal], y[cal], "lac")
    V_test = cf.class_scores(P[test], "lac")
    cc = ConformalClassifier().fit(V_cal, bins=y[cal])
    thresholds = cf.mondrian_thresholds(V_cal, y[cal], 0.1, 4)
    for c in range(4):
        theirs = cc.predict_p(V_test[:, c], bins=np.full(test.size, c), smoothing=False)
        ours = cf.p_values(V_cal[y[cal] == c], V_test[:, c])
        assert np.array_equal(ours, theirs)
        ours_set = V_test[:, c] <= thresholds[c]
        assert np.array_equal(ours_set, ours > 0.1)
        n_c = int((y[cal] == c).sum())
        if not float((n_c + 1) * cf.exact_fraction(0.1)).is_integer():
            assert np.array_equal(ours_set, theirs >= 0.1)


def test_crepes_differs_only_where_n_plus_one_times_alpha_is_an_integer():
    """n = 99, alpha = 0.1: (n + 1) alpha = 10; crepes adds the classes whose p-value is exactly alpha,
    i.e. uses the (k + 1)-th score (k = 90) as its threshold; we use the 90th (MAPIE's, the textbook's)."""
    from crepes import ConformalClassifier

    V = np.arange(1, 100, dtype=np.float64) / 100  # 99 distinct scores
    test = V.copy()
    cc = ConformalClassifier().fit(V)
    theirs = cc.predict_p(test, smoothing=False) >= 0.1
    assert cf.threshold(V, 0.1) == V[89]
    assert np.array_equal(test <= V[89], cf.p_values(V, test) > 0.1)
    assert theirs.sum() == 91 and (test <= V[89]).sum() == 90


# ---------------------------------------------------------------------------------------------- definitions


def test_order_rank_reads_alpha_as_its_decimal():
    # (n + 1)(1 - alpha) = 7 exactly for n = 9, alpha = 0.3; and 55 for n = 99, alpha = 0.45, where the
    # float product 100 * (1 - 0.45) is 55.00000000000001 and its ceiling 56
    assert cf.order_rank(9, 0.3) == 7
    assert cf.order_rank(99, 0.45) == 55 and 100 * (1 - 0.45) > 55
    assert cf.order_rank(99, 0.1) == 90
    assert cf.order_rank(100, 0.1) == 91  # 90.9 -> 91
    assert cf.rows_needed(0.1) == 9 and cf.rows_needed(0.05) == 19 and cf.rows_needed(0.3) == 3
    for a in (0.1, 0.05, 0.3, 0.01, 0.5, 0.25):
        n = cf.rows_needed(a)
        assert cf.order_rank(n, a) <= n and cf.order_rank(n - 1, a) > n - 1
    assert cf.threshold(np.arange(8.0), 0.1) == math.inf
    assert cf.threshold(np.arange(9.0), 0.1) == 8.0


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 1.5, float("nan"), "0.1", True, None])
def test_alpha_outside_the_open_interval_is_one_typed_error(alpha):
    with pytest.raises(ParameterError, match="alpha must be"):
        cf.check_alpha(alpha)


def test_scores_by_hand():
    P = np.array([[0.5, 0.3, 0.2], [0.25, 0.25, 0.5]])
    assert np.allclose(cf.class_scores(P, "lac"), 1 - P)
    assert np.array_equal(cf.class_scores(P, "topk"), [[0, 1, 2], [1, 1, 0]])  # ties share the better rank
    aps = cf.class_scores(P, "aps")
    assert np.allclose(aps, [[0.5, 0.8, 1.0], [1.0, 1.0, 0.5]])  # tied classes enter together
    u = np.array([0.5, 0.0])
    assert np.allclose(cf.class_scores(P, "aps", u), [[0.25, 0.65, 0.9], [1.0, 1.0, 0.5]])
    raps = cf.class_scores(P, "raps", None, lam=0.1, k_reg=1)
    assert np.allclose(raps, [[0.5, 0.9, 1.2], [1.2, 1.2, 0.5]])  # rank of a tie: the last of it (3)


def test_a_row_set_depends_on_the_row_alone():
    """The randomised scores' uniforms are hashes of the row: any batch, any order, the same numbers."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 4))
    X[10] = X[20]  # identical rows share their uniform
    h = cf.row_hashes(X)
    u = cf.row_uniforms(h, 7)
    perm = rng.permutation(500)
    assert np.array_equal(cf.row_uniforms(cf.row_hashes(X[perm]), 7), u[perm])
    assert np.array_equal(cf.row_uniforms(cf.row_hashes(X[:37]), 7), u[:37])
    assert u[10] == u[20] and len(np.unique(u)) == 499
    assert not np.array_equal(cf.row_uniforms(h, 8), u)  # the seed matters
    assert 0.0 <= u.min() and u.max() < 1.0
    # -0.0 and 0.0, and every NaN, are one value each
    Z = np.array([[0.0, np.nan], [-0.0, float("nan")]])
    assert cf.row_hashes(Z)[0] == cf.row_hashes(Z)[1]
    # a uniform-looking distribution: Kolmogorov-Smirnov against U(0, 1)
    from scipy.stats import kstest

    assert kstest(cf.row_uniforms(cf.row_hashes(rng.normal(size=(20000, 3))), 0), "uniform").pvalue > 1e-4


def test_sparse_rows_hash_their_nonzeros():
    import scipy.sparse as sp

    rng = np.random.default_rng(1)
    D = rng.normal(size=(50, 30)) * (rng.random((50, 30)) < 0.2)
    A = sp.csr_matrix(D)
    # the same matrix with an explicitly stored zero in row 3: the same hashes
    rows, cols = np.nonzero(D)
    B = sp.csr_matrix((np.append(D[rows, cols], 0.0), (np.append(rows, 3), np.append(cols, 29 if D[3, 29] == 0 else 28))),
                      shape=D.shape)
    assert np.array_equal(cf.row_hashes(A), cf.row_hashes(B)) or D[3, 28] != 0
    assert np.array_equal(cf.row_hashes(A), cf.row_hashes(sp.csr_matrix(D.copy())))
    D2 = D.copy()
    D2[0, 0] = 7.0
    assert np.array_equal(cf.row_hashes(A)[1:], cf.row_hashes(sp.csr_matrix(D2))[1:])
    assert cf.row_hashes(A)[0] != cf.row_hashes(sp.csr_matrix(D2))[0]
    assert len(np.unique(cf.row_hashes(A))) == 50


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5]), min_size=1, max_size=40),
       st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0]), min_size=40, max_size=40),
       st.sampled_from([0.05, 0.1, 0.3, 0.5]), st.sampled_from([0.0, 0.5, 3.0]))
def test_weighted_threshold_with_unit_weights_is_the_unweighted_one(scores, weights, alpha, test_weight):
    s = np.array(scores)
    assert cf.weighted_threshold(s, np.ones(s.size), alpha, 1.0) == cf.threshold(s, alpha)
    # and the definition, by brute force over the candidate values
    w = np.array(weights[: s.size])
    if w.sum() == 0:
        return
    need = (1 - cf.exact_fraction(alpha)) * (sum(map(__import__("fractions").Fraction, w)) + __import__("fractions").Fraction(test_weight))
    ok = [v for v in sorted(set(s)) if sum(__import__("fractions").Fraction(x) for x, sv in zip(w, s) if sv <= v) >= need
          and w[s <= v].sum() > 0]
    assert cf.weighted_threshold(s, w, alpha, test_weight) == (min(ok) if ok else math.inf)


def test_p_values_and_sets_agree():
    P, y = _probabilities(800, 5, 3)
    V_cal = cf.true_scores(P[:400], y[:400], "lac")
    V = cf.class_scores(P[400:], "lac")
    for alpha in (0.05, 0.1, 0.2):
        t = cf.threshold(V_cal, alpha)
        assert np.array_equal(V <= t, cf.p_values(V_cal, V) > alpha)
    w = np.random.default_rng(0).random(400) + 0.5
    pw = cf.p_values(V_cal, V, w, test_weight=1.0)
    assert np.all((pw > 0) & (pw <= 1))
    assert np.allclose(cf.p_values(V_cal, V, np.ones(400), 1.0), cf.p_values(V_cal, V))


def test_binary_models_get_all_four_sets():
    P = np.array([[0.98, 0.02], [0.02, 0.98], [0.5, 0.5], [0.7, 0.3]])
    V = cf.class_scores(P, "lac")
    sets = cf.prediction_sets(V, 0.55)
    assert [tuple(np.flatnonzero(r)) for r in sets] == [(0,), (1,), (0, 1), (0,)]
    assert [tuple(np.flatnonzero(r)) for r in cf.prediction_sets(V, 0.1)] == [(0,), (1,), (), ()]


def test_bad_probabilities_are_one_line():
    with pytest.raises(DataError, match="NaN"):
        cf.class_scores(np.array([[np.nan, 1.0]]), "lac")
    with pytest.raises(ParameterError, match="score must be one of"):
        cf.class_scores(np.ones((2, 2)) / 2, "nope")
    with pytest.raises(ParameterError, match="raps_lambda"):
        cf.check_raps(-1, 1)
    with pytest.raises(ParameterError, match="raps_k_reg"):
        cf.check_raps(0.1, 1.5)


# ---------------------------------------------------------------------------------------------- validity


def _fitted_probabilities(name: str):
    """Probabilities of a held-out pool of a real table under a calengine model fitted on other rows."""
    import calengine

    if name == "pendigits":
        model = calengine.fit_table(str(REPO_DATA / "pendigits_train.parquet"), "class", learner="gaussian_nb",
                                    method="isotonic", cv=3)
        pool = pd.read_parquet(REPO_DATA / "pendigits_test.parquet")
    elif name == "adult":
        model = calengine.fit_table(str(REPO_DATA / "adult" / "train.parquet"), "class", learner="gaussian_nb",
                                    method="isotonic", cv=3)
        pool = pd.read_parquet(REPO_DATA / "adult" / "test.parquet")
    else:  # 20 Newsgroups: the repo's sample, a model on a third of it, the rest the pool
        import tempfile

        df = pd.read_parquet(REPO_DATA / "newsgroups_sample.parquet").sample(frac=1.0, random_state=0)
        with tempfile.TemporaryDirectory() as tmp:
            df.iloc[:150].to_parquet(f"{tmp}/train.parquet", index=False)
            model = calengine.fit_table(f"{tmp}/train.parquet", "class", learner="multinomial_nb",
                                        method="sigmoid", text_columns=("text",), cv=3)
        pool = df.iloc[150:].reset_index(drop=True)
    P = model.predict_proba(pool)
    y = model.labels.encode(pool["class"])
    X = model.encoder.transform(pool)
    return P, y, cf.row_uniforms(cf.row_hashes(X), 0)


@pytest.fixture(scope="module", params=["pendigits", "adult", "newsgroups"])
def pool(request):
    return request.param, *_fitted_probabilities(request.param)


#: random calibration/test splits per dataset and score
SPLITS = 300
#: Monte-Carlo slack in standard errors of the mean coverage
Z = 4.0


def _splits(n_pool: int, n_cal: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(SPLITS):
        perm = rng.permutation(n_pool)
        yield perm[:n_cal], perm[n_cal:]


@pytest.mark.parametrize("score", ["lac", "aps", "raps", "topk"])
def test_marginal_coverage_over_random_splits(pool, score):
    """E[coverage] is in [1 - alpha, 1 - alpha + 1/(n + 1)] for exchangeable rows (the upper end needs
    scores without ties: not top-k's ranks); the mean over SPLITS splits must fall in that band widened
    by Z standard errors of the splits' coverages."""
    name, P, y, u = pool
    alpha = 0.1
    n_cal = min(1000, len(y) // 2)
    V_all = cf.class_scores(P, score, u if score in cf.RANDOMISABLE else None, 0.01, 1)
    true = V_all[np.arange(len(y)), y]
    cover = []
    for cal, test in _splits(len(y), n_cal, 17):
        t = cf.threshold(true[cal], alpha)
        cover.append(np.mean(true[test] <= t))
    cover = np.array(cover)
    mean, se = cover.mean(), cover.std(ddof=1) / math.sqrt(SPLITS)
    assert mean >= 1 - alpha - Z * se, (name, score, mean, se)
    if score != "topk":
        assert mean <= 1 - alpha + 1 / (n_cal + 1) + Z * se, (name, score, mean, se)


def test_mondrian_coverage_per_class_over_random_splits(pool):
    """Mondrian by class: for every class, E[coverage | class] >= 1 - alpha and at most 1 - alpha +
    E[1/(n_c + 1)] (n_c: the class's calibration rows in the split)."""
    name, P, y, u = pool
    alpha = 0.1
    k = P.shape[1]
    n_cal = min(1500, len(y) // 2)
    true = cf.true_scores(P, y, "aps", u)
    per_class = {c: ([], []) for c in range(k)}
    for cal, test in _splits(len(y), n_cal, 23):
        t = cf.mondrian_thresholds(true[cal], y[cal], alpha, k)
        for c in range(k):
            rows = test[y[test] == c]
            n_c = int((y[cal] == c).sum())
            if rows.size and np.isfinite(t[c]):
                per_class[c][0].append(np.mean(true[rows] <= t[c]))
                per_class[c][1].append(1 / (n_c + 1))
    for c, (cov, bound) in per_class.items():
        cov = np.array(cov)
        assert cov.size > SPLITS // 2, (name, c)
        se = cov.std(ddof=1) / math.sqrt(cov.size)
        assert cov.mean() >= 1 - alpha - Z * se, (name, c, cov.mean(), se)
        assert cov.mean() <= 1 - alpha + np.mean(bound) + Z * se, (name, c, cov.mean(), se)


def _weighted_thresholds(scores, weights, alpha, test_weights):
    """Tibshirani et al.'s threshold for each test weight, in floats (the validity check's own, fast
    version of :func:`calengine.methods.conformal.weighted_threshold`)."""
    order = np.argsort(scores, kind="stable")
    s, cw = scores[order], np.cumsum(weights[order])
    idx = np.searchsorted(cw, (1 - alpha) * (cw[-1] + test_weights), side="left")
    return np.where(idx < s.size, s[np.minimum(idx, s.size - 1)], np.inf)


def test_weighted_conformal_keeps_coverage_under_covariate_shift():
    """Adult: test rows drawn with probability proportional to a known w(x) -- 8 for married people, 1
    for the others -- and calibration rows drawn plainly.  Unweighted LAC under-covers the shifted rows
    (0.84 at alpha 0.1); Tibshirani et al.'s weighted threshold, the test row's own weight included,
    holds 1 - alpha."""
    P, y, _ = _fitted_probabilities("adult")
    pool_df = pd.read_parquet(REPO_DATA / "adult" / "test.parquet")
    w = np.where(pool_df["marital-status"].str.startswith("Married").to_numpy(dtype=bool), 8.0, 1.0)
    true = cf.true_scores(P, y, "lac")
    rng = np.random.default_rng(5)
    alpha, plain, weighted = 0.1, [], []
    for _ in range(SPLITS):
        perm = rng.permutation(len(y))
        cal, rest = perm[:2000], perm[2000:]
        test = rng.choice(rest, size=2000, p=w[rest] / w[rest].sum())
        plain.append(np.mean(true[test] <= cf.threshold(true[cal], alpha)))
        weighted.append(np.mean(true[test] <= _weighted_thresholds(true[cal], w[cal], alpha, w[test])))
    se = np.std(weighted, ddof=1) / math.sqrt(SPLITS)
    assert np.mean(weighted) >= 1 - alpha - Z * se
    assert np.mean(plain) < 1 - alpha - 0.02  # the shift is real: the unweighted sets miss it
    # the float version agrees with the exact one on a split
    cal = perm[:300]
    for wt in (0.0, 1.0, 7.5):
        assert _weighted_thresholds(true[cal], w[cal], alpha, np.array([wt]))[0] == \
            cf.weighted_threshold(true[cal], w[cal], alpha, wt)
