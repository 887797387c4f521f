"""The vectorised bootstrap of ``evaluate --prior-shift`` (issue 42 §7): at its documented maximum of
10,000 replicates it ran about an hour on 1M rows, one replicate and one EM step at a time in Python.
The replicates now step together in blocks over the sample's distinct rows; these tests hold the new
kernel to a plain numpy EM on each resample (what a replicate is) for more classes, repeated rows and
rows of zeros, the warm start to the same maxima, and the run to its progress line.  The speed is
measured in benchmarks/bench_prior_shift.py (a test-sized run in tests/test_benchmarks_smoke.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import calengine
from cli_helpers import run_cli


def _numpy_em(P, train, tol, max_iter):
    """Saerens, Latinne & Decaestecker (2002), eqs. (2.9)-(2.10), as plainly as numpy says it (rows of
    zeros stay zeros; priors kept at calengine's floor of 1e-9), stopped as calengine stops it: at a
    step that moves no prior by ``tol``, or after ``max_iter`` steps."""
    new = np.asarray(train, dtype=float).copy()
    for _ in range(max_iter):
        W = P * (new / train)
        total = W.sum(axis=1, keepdims=True)
        W = np.divide(W, total, out=np.zeros_like(W), where=total > 0)
        updated = np.maximum(W.mean(axis=0), 1e-9)
        updated /= updated.sum()
        if np.max(np.abs(updated - new)) < tol:
            return updated
        new = updated
    return new


def _posteriors(n: int, k: int, seed: int) -> np.ndarray:
    """Posteriors with repeated rows (a step map's few values), a row of zeros, and continuous rows."""
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.linspace(0.5, 2.0, k), size=n)
    P[: n // 3] = np.round(P[: n // 3], 1)
    P[: n // 3] /= np.where(P[: n // 3].sum(axis=1, keepdims=True) > 0, P[: n // 3].sum(axis=1, keepdims=True), 1)
    P[5] = 0.0
    return P


@pytest.mark.parametrize("k", [2, 3, 5])
def test_each_replicate_is_the_plain_em_of_its_resample(k):
    from calengine.metrics.prior_shift import _em_replicates, distinct_rows

    P = _posteriors(1500, k, k)
    U, inv = distinct_rows(P)
    assert U.shape[0] < P.shape[0] and np.array_equal(U[inv[inv >= 0]], P[inv >= 0]) and (inv == -1).sum() == 1
    train = np.linspace(1.0, 2.0, k) / np.linspace(1.0, 2.0, k).sum()
    seeds = np.random.SeedSequence(11).spawn(7)
    got = _em_replicates(P, train, seeds, 1e-12, 10_000)
    for ss, row in zip(seeds, got):
        idx = np.random.default_rng(ss).integers(0, len(P), len(P))
        np.testing.assert_allclose(row, _numpy_em(P[idx], train, 1e-12, 10_000), rtol=0, atol=1e-11)


def test_blocks_of_any_size_and_any_start_give_the_same_estimates(monkeypatch):
    """A block as small as one replicate, replicates leaving the block at different steps, and the warm
    start from the whole sample's estimate: the same maxima, to the EM's tolerance."""
    from calengine.metrics import prior_shift as fl
    from calengine.methods.label_shift import em_priors

    P = _posteriors(2000, 3, 1)
    train = np.array([0.2, 0.3, 0.5])
    seeds = np.random.SeedSequence(2).spawn(9)
    whole = fl._em_replicates(P, train, seeds, 1e-12, 10_000)
    monkeypatch.setattr(fl, "_EM_BLOCK_BYTES", 1)
    one_by_one = fl._em_replicates(P, train, seeds, 1e-12, 10_000)
    np.testing.assert_allclose(one_by_one, whole, rtol=0, atol=1e-14)
    start = em_priors(P, train).priors
    warm = fl._em_replicates(P, train, seeds, 1e-12, 10_000, start=start)
    np.testing.assert_allclose(warm, whole, rtol=0, atol=1e-9)
    capped = fl._em_replicates(P, train, seeds, 1e-12, 2)  # max_iter ends every replicate at its second step
    assert capped.shape == whole.shape and not np.allclose(capped, whole, atol=1e-9)


def test_a_long_prior_shift_run_shows_its_progress(tmp_path):
    """--progress draws a line for the resamples (tasks of 25 replicates), as for the scoring pass."""
    rng = np.random.default_rng(0)
    s = rng.normal(size=3000)
    y = (rng.random(3000) < 1 / (1 + np.exp(-2 * s))).astype(int)
    pd.DataFrame({"s": s, "y": y}).to_parquet(tmp_path / "t.parquet")
    calengine.calibrate_scores(tmp_path / "t.parquet", "y", "s", score_kind="decision", method="sigmoid",
                               output=tmp_path / "m")
    r = run_cli("--progress", "evaluate", tmp_path / "m", tmp_path / "t.parquet", "--target", "y", "--prior-shift", "100")
    assert r.returncode == 0, r
    assert "prior-shift resamples" in r.stderr and "4/4" in r.stderr
