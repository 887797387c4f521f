"""The blocked moment kernel of gaussian_nb's statistics (``_nb_stats._block_group_moments``, issue 43 §2).

``partial_stats_groups`` computes every (group, class)'s count, mean and M2 a cache-sized block of rows at
a time and merges the blocks with Chan et al.'s update.  Properties, on random data with offsets up to
1e7 standard deviations from zero (where a raw sum of squares would lose the variance) and random cuts
into fragments:

* the per-fragment statistics, merged over any partitioning, equal the whole table's statistics
  (``partial_stats`` of each group's rows) to rounding, and the fitted ``theta_`` / ``var_`` equal
  scikit-learn's ``GaussianNB`` fitted in memory;
* the kernel itself, with blocks of a few rows (so nearly every merge path runs: ids missing from a
  block, blocks of one row, a last short block), equals numpy's per-id mean and variance;
* it is deterministic: the same rows give the same bits, whatever the memory layout of ``X``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.naive_bayes import GaussianNB

from calengine_builtins.learners import _nb_stats
from calengine_builtins.learners.naive_bayes import GaussianNBLearner

SETTINGS = settings(deadline=None, max_examples=40, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

problems = st.fixed_dictionaries({
    "seed": st.integers(0, 2**31 - 1),
    "n": st.integers(1, 400),
    "d": st.integers(1, 6),
    "k": st.integers(2, 4),
    "groups": st.integers(1, 5),
    "pieces": st.integers(1, 6),
    "offset": st.sampled_from([0.0, 1e3, -1e5]),
    "scale": st.sampled_from([1e-2, 1.0, 1e2]),
    "block": st.sampled_from([1, 3, 7, 64, 4096]),
})


def _data(p):
    rng = np.random.default_rng(p["seed"])
    n, k = max(p["n"], p["k"]), p["k"]
    y = np.concatenate([np.arange(k), rng.integers(0, k, size=n - k)])
    rng.shuffle(y)
    centres = rng.normal(0.0, 3.0, size=(k, p["d"]))
    X = p["offset"] + p["scale"] * (centres[y] + rng.standard_normal((n, p["d"])))
    groups = rng.integers(0, p["groups"], size=n)
    cuts = np.sort(rng.integers(0, n + 1, size=p["pieces"] - 1))
    return X, y, groups, np.split(np.arange(n), cuts)


@SETTINGS
@given(p=problems)
def test_fragments_merged_equal_the_whole_table_and_sklearn(p, monkeypatch):
    monkeypatch.setattr(_nb_stats, "MOMENT_BLOCK_ROWS", p["block"])
    X, y, groups, pieces = _data(p)
    k, G = p["k"], p["groups"]
    learner = GaussianNBLearner()
    per_piece = [learner.partial_stats_groups(np.asfortranarray(X[idx]), y[idx], groups[idx], G, None, k)
                 for idx in pieces]
    by_group = []
    for g in range(G):
        merged = per_piece[0][g]
        for stats in per_piece[1:]:
            merged = learner.merge_stats(merged, stats[g])
        by_group.append(merged)
        whole = learner.partial_stats(X[groups == g], y[groups == g], None, k)
        for key in whole:
            span = np.abs(whole[key]).max(initial=0.0)
            # sums of squared deviations: the merge's squared mean differences lose a few more digits
            rtol = 1e-8 if key.endswith("m2") else 1e-10
            np.testing.assert_allclose(by_group[g][key], whole[key], rtol=rtol, atol=1e-12 * span + 1e-300,
                                       err_msg=f"group {g}, {key}")
    total = by_group[0]
    for stats in by_group[1:]:
        total = learner.merge_stats(total, stats)
    fitted = GaussianNBLearner().fit_from_stats(total, k).estimator_
    ref = GaussianNB().fit(X, y)
    np.testing.assert_allclose(fitted.theta_, ref.theta_, rtol=1e-10, atol=1e-10 * p["scale"])
    np.testing.assert_allclose(fitted.var_, ref.var_, rtol=1e-9)
    np.testing.assert_allclose(fitted.class_count_, ref.class_count_)


@SETTINGS
@given(p=problems)
def test_kernel_equals_numpy_per_id_and_is_deterministic(p, monkeypatch):
    monkeypatch.setattr(_nb_stats, "MOMENT_BLOCK_ROWS", p["block"])
    X, y, groups, _ = _data(p)
    m = p["groups"] * p["k"]
    ids = groups * p["k"] + y
    count, mean, m2 = _nb_stats._block_group_moments(np.ascontiguousarray(X.T), ids, m)
    for i in range(m):
        rows = X[ids == i]
        assert count[i] == rows.shape[0]
        if rows.shape[0] == 0:
            assert not mean[i].any() and not m2[i].any()
            continue
        np.testing.assert_allclose(mean[i], rows.mean(axis=0), rtol=1e-12, atol=1e-12 * p["scale"])
        np.testing.assert_allclose(m2[i], ((rows - rows.mean(axis=0)) ** 2).sum(axis=0), rtol=1e-8,
                                   atol=1e-20)
    again = _nb_stats._block_group_moments(np.asfortranarray(X).T, ids.copy(), m)
    for a, b in zip((count, mean, m2), again):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("block", [1, 5, 4096])
def test_constant_column_has_zero_m2_across_blocks(block, monkeypatch):
    """Equal values give M2 exactly 0 (never a small negative from cancellation) in every block size."""
    monkeypatch.setattr(_nb_stats, "MOMENT_BLOCK_ROWS", block)
    X = np.full((37, 2), 0.1)
    ids = np.arange(37) % 3
    count, mean, m2 = _nb_stats._block_group_moments(np.ascontiguousarray(X.T), ids, 4)
    assert count.tolist() == [13, 12, 12, 0]
    assert np.array_equal(m2, np.zeros((4, 2)))
    np.testing.assert_allclose(mean[:3], 0.1, rtol=1e-15)
