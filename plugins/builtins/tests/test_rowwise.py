"""Row-wise arithmetic of the built-in learners (``calengine_builtins.learners._rowwise``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calengine_builtins.learners._rowwise import normalise_log, normalise_log_columns


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), k=st.integers(1, 5), n=st.integers(0, 300),
       scale=st.sampled_from([1e-3, 1.0, 30.0, 800.0]))
def test_normalise_log_columns_is_normalise_log_of_the_transpose_bit_for_bit(seed, k, n, scale):
    """gaussian_nb scores through ``normalise_log_columns`` on its classes-by-rows log likelihoods:
    the bits ``normalise_log`` gives the rows-by-classes copy, for every class and for a chosen one,
    including rows whose likelihoods underflow (probabilities exactly 0 or 1)."""
    rng = np.random.default_rng(seed)
    J = rng.normal(size=(k, n)) * scale - rng.uniform(0, 1e3, size=(k, 1))
    want = normalise_log(np.ascontiguousarray(J.T))
    got = normalise_log_columns(J)
    assert got.shape == (k, n) and np.array_equal(got, want.T)
    for c in range(k):
        assert np.array_equal(normalise_log_columns(J, rows=[c])[0], want[:, c])


def test_normalise_log_columns_keeps_minus_infinity_rows_as_normalise_log_does():
    J = np.array([[-np.inf, 0.0, -745.0, 3.0], [-np.inf, -np.inf, 0.0, 3.0]])
    with np.errstate(invalid="ignore"):
        want = normalise_log(np.ascontiguousarray(J.T)).T
        got = normalise_log_columns(J)
    assert np.array_equal(got, want, equal_nan=True)


@pytest.mark.parametrize("k", [2, 3])
def test_gaussian_nb_scores_keep_their_bits(k):
    """The score of gaussian_nb is the bits of the previous formula (``normalise_log`` of the
    rows-by-classes log likelihoods), so models saved before score alike."""
    from calengine_builtins.learners import GaussianNBLearner
    from calengine_builtins.learners._rowwise import column_sum

    rng = np.random.default_rng(5)
    X = rng.normal(size=(5000, 7)) * 4.0
    y = rng.integers(0, k, 5000)
    learner = GaussianNBLearner().fit(X, y)
    theta, var = learner._stored("theta_"), learner._stored("var_")
    const = np.log(learner._stored("class_prior_")) - 0.5 * np.log(2.0 * np.pi * var).sum(axis=1)
    jll = np.stack([const[i] - 0.5 * column_sum(((X - theta[i]) ** 2 / var[i]).T) for i in range(k)])
    want = normalise_log(np.ascontiguousarray(jll.T))
    got = learner.score(X)
    assert np.array_equal(got, want[:, 1] if k == 2 else want)
