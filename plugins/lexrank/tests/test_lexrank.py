"""Tests of the calengine-lexrank plugin, written as its third-party author would ship them.

Besides calengine's conformance checks, they pin the plugin to the worked example reconstructed from
Flach & Matsubara (10 positives, 10 negatives over two binary attributes), check that ranks stay exactly
lexicographic well beyond the 52 bits one float could hold, and run the installed plugin through the
``calengine`` command line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

calengine_lexrank = pytest.importorskip("calengine_lexrank")

import calengine.plugins  # noqa: E402
import calengine.plugins.loading  # noqa: E402
from calengine.metrics.measures import evaluate_predictions  # noqa: E402
from calengine.metrics.roc import auc, brier_decomposition, roc_segments  # noqa: E402
from calengine.testing import check_learner, check_plugin_module, make_data  # noqa: E402

LexRank = calengine_lexrank.LexRank
LexProb = calengine_lexrank.LexProb

HEPATITIS = Path(__file__).resolve().parents[3] / "data" / "hepatitis.parquet"


# ---------------------------------------------------------------------------------------------------
# conformance


def test_lexrank_conforms():
    check_learner(LexRank)


def test_lexprob_conforms():
    check_learner(LexProb)


def test_plugin_module_conforms(monkeypatch):
    # check_plugin_module registers the module in-process next to every installed entry point, so the
    # installed copy of this very plugin would clash with it by name; check the module on its own.
    # (Coexistence with the other installed plugins is covered by test_entry_point_is_discoverable.)
    monkeypatch.setattr(
        calengine.plugins.loading, "metadata", types.SimpleNamespace(entry_points=lambda group=None: [])
    )
    check_plugin_module(calengine_lexrank)


def test_entry_point_is_discoverable():
    plugins = calengine.plugins.load_plugins(strict=False)
    learners = plugins.classes["learners"]
    assert learners["lexrank"] is LexRank
    assert learners["lexprob"] is LexProb
    assert plugins.origin("learners", "lexrank").distribution == "calengine-lexrank"


# ---------------------------------------------------------------------------------------------------
# the worked example (algorithms notes §f, from the paper's Examples 1, 4 and 5)


def _paper_example():
    """20 instances over (A1, A2) from the cell counts (positives, negatives)."""
    cells = {(1, 0): (2, 3), (0, 0): (4, 1), (1, 1): (3, 1), (0, 1): (1, 5)}
    X, y = [], []
    for (a1, a2), (pos, neg) in cells.items():
        X += [[a1, a2]] * (pos + neg)
        y += [1] * pos + [0] * neg
    return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64)


def test_paper_example_likelihood_and_odds_ratios():
    X, y = _paper_example()
    raw = LexRank(smoothing=False).fit(X, y)
    # likelihood_ratio_[model, attribute, value]: LR(A1=0) = 5/6, LR(A1=1) = 5/4, LR(A2=0) = 6/4,
    # LR(A2=1) = 4/6
    np.testing.assert_allclose(raw.likelihood_ratio_[0], [[5 / 6, 5 / 4], [6 / 4, 4 / 6]], rtol=1e-15)
    np.testing.assert_allclose(raw.odds_ratio_[0], [1.5, 2.25], rtol=1e-15)
    assert raw.preferred_[0].tolist() == [1, 0]
    assert raw.order_[0].tolist() == [1, 0]  # A2 first, then A1

    smooth = LexRank().fit(X, y)  # Laplace: (n + 1) / (N + 2); same preferences and order
    np.testing.assert_allclose(smooth.likelihood_ratio_[0], [[6 / 7, 6 / 5], [7 / 5, 5 / 7]], rtol=1e-15)
    np.testing.assert_allclose(smooth.odds_ratio_[0], [1.4, 1.96], rtol=1e-15)
    assert smooth.order_[0].tolist() == [1, 0]


@pytest.mark.parametrize("smoothing", [False, True])
def test_paper_example_lexrank_segments_and_auc(smoothing):
    X, y = _paper_example()
    s = LexRank(smoothing=smoothing).fit(X, y).score(X)
    seg = roc_segments(s, y)
    # high -> low: (A2=0, A1=1) 2+3-, (0, 0) 4+1-, (1, 1) 3+1-, (1, 0) 1+5-
    assert seg.pos.tolist() == [2, 4, 3, 1]
    assert seg.neg.tolist() == [3, 1, 1, 5]
    top = s == s.max()
    assert np.all(X[top] == [1, 0])
    assert auc(s, y) == pytest.approx(0.62, abs=1e-12)


def test_paper_example_lexprob_probabilities_and_brier():
    X, y = _paper_example()
    first_three = ~((X[:, 0] == 0) & (X[:, 1] == 1))

    p = LexProb().fit(X, y).score(X)  # Laplace on by default
    np.testing.assert_allclose(p[first_three], 10 / 16, rtol=1e-15)
    np.testing.assert_allclose(p[~first_three], 2 / 8, rtol=1e-15)
    metrics = evaluate_predictions(y, p)
    assert metrics["brier"] == pytest.approx(0.204688, abs=1e-6)
    assert metrics["calibration_loss"] == pytest.approx(0.002307, abs=1e-6)
    assert metrics["refinement_loss"] == pytest.approx(0.202381, abs=1e-6)
    # over the 4 LexRank segments instead of the hull's own: same Brier, split differently
    lex = LexRank().fit(X, y).score(X)
    cal, ref = brier_decomposition(p, y, segments=lex)
    assert (cal, ref) == (pytest.approx(0.025521, abs=1e-6), pytest.approx(0.179167, abs=1e-6))

    q = LexProb(laplace=False).fit(X, y).score(X)
    np.testing.assert_allclose(q[first_three], 9 / 14, rtol=1e-15)
    np.testing.assert_allclose(q[~first_three], 1 / 6, rtol=1e-15)
    assert evaluate_predictions(y, q)["brier"] == pytest.approx(0.202381, abs=1e-6)


# ---------------------------------------------------------------------------------------------------
# exact lexicographic ranks


def _assert_lexicographic(scores: np.ndarray, patterns: np.ndarray) -> None:
    """Scores order the rows exactly as their patterns compare as tuples (ties included)."""
    keys = [tuple(row) for row in np.asarray(patterns).tolist()]
    position = {k: i for i, k in enumerate(sorted(set(keys)))}
    dense = np.array([position[k] for k in keys])
    _, score_dense = np.unique(scores, return_inverse=True)
    np.testing.assert_array_equal(score_dense, dense)


def _many_attributes(n=300, m=70, seed=3):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    shift = np.linspace(0.3, 0.03, m) * rng.choice([-1.0, 1.0], m)
    X = (rng.random((n, m)) < 0.5 + np.outer(2 * y - 1, shift)).astype(np.float64)
    return X, y, rng


def test_more_than_sixty_attributes_rank_exactly():
    X, y, rng = _many_attributes()
    # two training rows that differ only in the column with the weakest evidence, which ends up beyond
    # the 60th place of the order: packing a pattern into one float's 52-bit mantissa would tie them
    weakest = LexRank().fit(X, y).order_[0, -1]
    twins = np.repeat(X[:1], 2, axis=0)
    twins[:, weakest] = [0.0, 1.0]
    X = np.vstack([X, twins])
    y = np.append(y, [y[0], y[0]])
    model = LexRank().fit(X, y)
    order = model.order_[0, : model.n_kept_[0]]
    assert order.size > 60
    assert int(np.flatnonzero(order == weakest)[0]) > 60
    pref = model.preferred_[0, order]

    def patterns(Z):
        return (Z[:, order] == pref).astype(np.int8)

    s_train = model.score(X)
    assert s_train[-2] != s_train[-1]
    assert (s_train[-1] > s_train[-2]) == (model.preferred_[0, weakest] == 1)
    _assert_lexicographic(s_train, patterns(X))

    # unseen rows: random ones, and copies of training rows changed only late in the order; their
    # order against every training row, and among themselves here, is exact
    fresh = (rng.random((100, X.shape[1])) < 0.5).astype(np.float64)
    late = X[1:60].copy()
    late[:, order[66]] = 1.0 - late[:, order[66]]
    Z = np.vstack([X, fresh, late])
    _assert_lexicographic(model.score(Z), patterns(Z))


def test_scores_do_not_depend_on_the_batch():
    X, y, rng = _many_attributes(n=200)
    model = LexRank().fit(X, y)
    Z = (rng.random((50, X.shape[1])) < 0.5).astype(np.float64)
    whole = model.score(Z)
    parts = np.concatenate([model.score(Z[:7]), model.score(Z[7:])])
    np.testing.assert_array_equal(whole, parts)


# ---------------------------------------------------------------------------------------------------
# attributes, bins, preferences


def test_numeric_columns_are_binned_by_equal_frequency_and_unseen_values_fall_in_end_bins():
    rng = np.random.default_rng(0)
    x = rng.permutation(100).astype(np.float64)
    X = np.column_stack([x, rng.integers(0, 2, 100)])
    y = (x + rng.normal(0, 20, 100) > 50).astype(np.int64)
    model = LexRank(n_bins=5).fit(X, y)
    assert model.column_kind_.tolist() == [calengine_lexrank.KIND_BINNED, calengine_lexrank.KIND_BINARY]
    assert model.attribute_column_.tolist() == [0, 0, 0, 0, 0, 1]
    A = model.binarize(X)
    assert A[:, :5].sum(axis=0).tolist() == [20, 20, 20, 20, 20]
    assert np.all(A[:, :5].sum(axis=1) == 1)
    out = model.binarize(np.array([[-1e9, 0.0], [1e9, 1.0], [0.0, 0.0], [99.0, 1.0]]))
    assert out[0, :5].tolist() == [True, False, False, False, False]
    assert out[1, :5].tolist() == [False, False, False, False, True]
    assert np.array_equal(out[0], out[2]) and np.array_equal(out[1], out[3])
    s = model.score(np.array([[-1e9, 0.0], [1e9, 0.0]]))
    assert np.all(np.isfinite(s))


def test_tied_values_share_a_bin_and_a_dominant_value_still_gives_two_bins():
    tied = np.concatenate([np.zeros(50), np.arange(1, 51)]).astype(np.float64)
    dominant = np.concatenate([np.zeros(98), [1.0, 2.0]])
    X = np.column_stack([tied, dominant])
    y = np.tile([0, 1], 50)
    model = LexRank(n_bins=5).fit(X, y)
    A = model.binarize(X)
    cols = model.attribute_column_
    zero_rows = A[:50][:, cols == 0]
    assert np.all(zero_rows == zero_rows[0])  # all 50 zeros in the same bin
    assert int((cols == 1).sum()) == 2
    assert model.binarize(np.array([[0.0, 0.0]]))[0, cols == 1].tolist() == [True, False]
    assert model.binarize(np.array([[0.0, 1.0]]))[0, cols == 1].tolist() == [False, True]


def test_two_valued_and_constant_columns():
    X = np.array([[3.0, 7.0, 0.0], [5.0, 7.0, 1.0], [3.0, 7.0, 1.0], [5.0, 7.0, 0.0]])
    y = np.array([0, 1, 0, 1])
    model = LexRank().fit(X, y)
    assert model.column_kind_.tolist() == [1, 0, 1]
    assert model.threshold_[0] == 4.0
    assert model.attribute_column_.tolist() == [0, 2]
    # column 0 separates the classes (5 preferred); column 2 has LR == 1 exactly and is dropped
    assert model.preferred_[0].tolist() == [1, -1]
    assert model.order_[0].tolist() == [0, -1]
    s = model.score(X)
    assert np.all(s[y == 1] > s[y == 0])


def test_odds_ratio_ties_go_to_the_lower_attribute_index():
    rng = np.random.default_rng(1)
    col = rng.integers(0, 2, 60).astype(np.float64)
    y = (col + (rng.random(60) < 0.3)) % 2
    X = np.column_stack([1 - col, col, col])  # same evidence, mirrored in column 0
    model = LexRank().fit(X, y.astype(np.int64))
    assert model.odds_ratio_[0, 0] == model.odds_ratio_[0, 1] == model.odds_ratio_[0, 2]
    assert model.order_[0].tolist() == [0, 1, 2]


def test_unsmoothed_zero_counts_rank_a_pure_attribute_first():
    X = np.array([[1, 0], [1, 1], [0, 1], [0, 0], [0, 1], [0, 0]], dtype=np.float64)
    y = np.array([1, 1, 1, 0, 0, 0])
    model = LexRank(smoothing=False).fit(X, y)
    assert model.likelihood_ratio_[0, 0, 1] == np.inf
    assert model.odds_ratio_[0, 0] == np.inf
    assert model.order_[0].tolist() == [0, 1]
    p = LexProb(smoothing=False).fit(X, y).score(X)
    assert np.all(np.isfinite(p)) and p.min() >= 0 and p.max() <= 1


# ---------------------------------------------------------------------------------------------------
# weights, multiclass, parameters


def test_integer_weights_equal_repeated_rows_and_zero_weights_equal_removed_rows():
    rng = np.random.default_rng(5)
    X = np.column_stack([rng.integers(0, 2, (80, 6)), rng.normal(size=80)]).astype(np.float64)
    y = (X[:, 0] + X[:, 1] + rng.random(80) > 1.5).astype(np.int64)
    w = rng.integers(0, 4, 80).astype(np.float64)
    w[:4] = [1, 1, 2, 3]
    assert w[y == 1].sum() > 0 and w[y == 0].sum() > 0
    Z = np.vstack([X, rng.normal(size=(10, 7))])
    binary = slice(0, 6)
    weighted = LexProb().fit(X[:, binary], y, sample_weight=w)
    repeated = LexProb().fit(np.repeat(X[:, binary], w.astype(int), axis=0), np.repeat(y, w.astype(int)))
    np.testing.assert_array_equal(weighted.score(Z[:, binary]), repeated.score(Z[:, binary]))
    # numeric bins come from the positive-weight rows, so zero weight means "row absent"
    keep = w > 0
    a = LexProb().fit(X, y, sample_weight=np.where(keep, 1.0, 0.0)).score(Z)
    b = LexProb().fit(X[keep], y[keep]).score(Z)
    np.testing.assert_array_equal(a, b)


def test_multiclass_is_one_vs_rest():
    X, y = make_data(n=150, n_classes=3, seed=2)
    rank = LexRank().fit(X, y)
    S = rank.score(X)
    assert S.shape == (150, 3)
    for c in range(3):
        binary = LexRank().fit(X, (y == c).astype(np.int64))
        np.testing.assert_array_equal(S[:, c], binary.score(X))
    P = LexProb().fit(X, y).score(X)
    assert P.shape == (150, 3)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert np.mean(P.argmax(axis=1) == y) > 0.5


@pytest.mark.parametrize("params", [{"n_bins": 1}, {"n_bins": 2.5}, {"smoothing": "yes"}])
def test_invalid_parameters_are_refused(params):
    from calengine.errors import ParameterError

    X, y = make_data(n=40)
    with pytest.raises(ParameterError):
        LexRank(**params).fit(X, y)


def test_sparse_and_non_finite_input_are_refused():
    from calengine.errors import DataError

    sparse = pytest.importorskip("scipy.sparse")
    X, y = make_data(n=40)
    with pytest.raises(DataError):
        LexRank().fit(sparse.csr_matrix(X), y)
    model = LexRank().fit(X, y)
    X[0, 0] = np.nan
    with pytest.raises(DataError):
        model.score(X)


# ---------------------------------------------------------------------------------------------------
# end to end through the installed plugin and the command line


def test_cli_fit_and_evaluate_on_hepatitis(tmp_path):
    if not HEPATITIS.exists():
        pytest.skip(f"{HEPATITIS} not found")
    out = tmp_path / "model"
    cmd = [sys.executable, "-P", "-m", "calengine", "--quiet"]
    fit = subprocess.run(
        cmd + ["fit", str(HEPATITIS), "--target", "class", "--positive", "1", "--learner", "lexprob",
               "--method", "none", "--output", str(out)],
        capture_output=True, text=True, timeout=180, cwd=tmp_path,
    )
    assert fit.returncode == 0, fit.stderr
    ev = subprocess.run(
        cmd + ["evaluate", str(out), str(HEPATITIS), "--target", "class", "--json"],
        capture_output=True, text=True, timeout=180, cwd=tmp_path,
    )
    assert ev.returncode == 0, ev.stderr
    result = json.loads(ev.stdout)
    assert result["model"] == {"learner": "lexprob", "method": "none"}
    assert result["auc"] > 0.6
    assert 0.0 <= result["brier"] < 0.25
