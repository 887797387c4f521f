"""Unsorted calibrator rounds hand each score block to ``partial_stats`` in chunks of
``STATS_CHUNK_ROWS`` rows, merged left to right (``calengine.tasks.partitions.block_partial_stats``), so
a task's temporaries stay a few MiB whatever a block's size.  A chunked fit must give the map of the
unchunked one (to rounding: the same sums, added in another order), the chunks must really be that
small, and a block's counts must stay exact."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import calengine
import calengine.tasks.partitions as pt


def _binary(n=2_400, seed=21):
    rng = np.random.default_rng(seed)
    s = np.clip(rng.beta(2.0, 3.0, size=n), 1e-6, 1 - 1e-6)
    y = (rng.random(n) < s**1.3).astype(np.int8)
    return pd.DataFrame({"s": s, "y": y, "w": rng.integers(0, 4, size=n).astype(np.float64)})


def _multiclass(n=1_500, seed=22, k=3):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, size=n)
    Z = rng.normal(size=(n, k)) + 1.7 * np.eye(k)[y]
    df = pd.DataFrame({f"s{j}": Z[:, j] for j in range(k)})
    df["y"] = y
    return df


@pytest.fixture
def chunk_calls(monkeypatch):
    """Count the pieces block_partial_stats hands to calibrators, and the largest one."""
    seen = {"calls": 0, "rows": 0}
    weights = pt._weights

    def _weights(W, n):
        seen["calls"] += 1
        seen["rows"] = max(seen["rows"], n)
        return weights(W, n)

    monkeypatch.setattr(pt, "_weights", _weights)
    return seen


@pytest.mark.parametrize("method", ["sigmoid", "temperature", "beta"])
def test_chunked_binary_fit_equals_the_whole_block_fit(monkeypatch, chunk_calls, method):
    df = _binary()
    monkeypatch.setattr(pt, "STATS_CHUNK_ROWS", 10**9)
    whole = calengine.calibrate_scores(df, "y", scores="s", method=method, weight="w")
    whole_calls, whole_rows = chunk_calls["calls"], chunk_calls["rows"]
    chunk_calls["rows"] = 0
    monkeypatch.setattr(pt, "STATS_CHUNK_ROWS", 97)
    chunked = calengine.calibrate_scores(df, "y", scores="s", method=method, weight="w")
    assert whole_rows > 97 and chunk_calls["rows"] == 97  # whole blocks, then chunks of the budget
    assert chunk_calls["calls"] - whole_calls >= 2 * (len(df) // 97)  # every round cut the rows into chunks
    grid = pd.DataFrame({"s": np.linspace(1e-6, 1 - 1e-6, 1001)})
    p_whole = np.asarray(whole.predict_frame(grid), dtype=np.float64)
    p_chunked = np.asarray(chunked.predict_frame(grid), dtype=np.float64)
    np.testing.assert_allclose(p_chunked, p_whole, rtol=0, atol=1e-10)


def test_chunks_of_a_whole_score_matrix_hold_the_rows_of_the_budget(monkeypatch, chunk_calls):
    """A multiclass scaling reads k columns a row: its chunks hold STATS_CHUNK_ROWS // k rows."""
    df = _multiclass()
    cols = ["s0", "s1", "s2"]
    args = dict(scores=cols, classes=[0, 1, 2], score_kind="logit", method="dirichlet",
                method_params={"form": "diagonal"})
    monkeypatch.setattr(pt, "STATS_CHUNK_ROWS", 10**9)
    whole = calengine.calibrate_scores(df, "y", **args)
    chunk_calls["rows"] = 0
    monkeypatch.setattr(pt, "STATS_CHUNK_ROWS", 300)
    chunked = calengine.calibrate_scores(df, "y", **args)
    assert chunk_calls["rows"] == 100
    np.testing.assert_allclose(chunked.predict_proba(df[cols]), whole.predict_proba(df[cols]), rtol=0, atol=1e-9)


def test_chunked_statistics_keep_counts_exact_and_sums_to_rounding(monkeypatch):
    """One block, the first (summary) round of a sigmoid: chunked and whole statistics agree, counts
    and extremes exactly."""
    from calengine_builtins.calibrators import SigmoidCalibrator

    rng = np.random.default_rng(3)
    n = 1_000
    S = rng.random((n, 1))
    T = (rng.random((n, 1)) < S).astype(np.int8)
    W = rng.integers(1, 3, size=n).astype(np.float64)
    block = pt.ScoreBlock([(S, T, W)])
    cal = SigmoidCalibrator()
    request = cal.reduction_start("proba")
    monkeypatch.setattr(pt, "STATS_CHUNK_ROWS", 10**9)
    (whole,) = pt.block_partial_stats(block, [(0, 0, cal, request)])
    monkeypatch.setattr(pt, "STATS_CHUNK_ROWS", 64)
    (chunked,) = pt.block_partial_stats(block, [(0, 0, cal, request)])
    assert whole.keys() == chunked.keys()
    for key in ("n_pos", "n_neg", "min_s", "max_s", "max_abs", "min_live", "max_live"):
        assert chunked[key] == whole[key], key
    for key in whole:
        if isinstance(whole[key], (np.ndarray, float)):
            np.testing.assert_allclose(chunked[key], whole[key], rtol=1e-12, atol=1e-9, err_msg=key)


def test_rows_to_score_hands_over_the_fragment_only_when_all_rows_and_the_learner_reads_any_order():
    """``score_fragment`` skips the row-major copy of a fragment only for a learner that declares
    ``score_reads_any_order`` and only when every row is scored; otherwise the rows are a copy."""
    from calengine_builtins.learners import GaussianNBLearner, LogisticRegressionLearner

    X = np.asfortranarray(np.arange(24, dtype=np.float64).reshape(8, 3))
    every = np.arange(8)
    assert pt._rows_to_score(GaussianNBLearner(), X, every) is X
    some = np.array([0, 2, 5])
    got = pt._rows_to_score(GaussianNBLearner(), X, some)
    assert got is not X and np.array_equal(got, X[some])
    other = pt._rows_to_score(LogisticRegressionLearner(), X, every)
    assert other is not X and other.flags.c_contiguous and np.array_equal(other, X)
