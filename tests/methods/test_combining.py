"""Duin & Tax's fixed combining rules on posteriors: worked numbers and invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from calengine.methods.combining import combine_posteriors
from calengine.errors import ParameterError

POSTERIORS = [np.array([[0.8, 0.2]]), np.array([[0.6, 0.4]]), np.array([[0.3, 0.7]])]


@pytest.mark.parametrize(
    "rule, expected",
    [
        ("min", [0.3 / 0.5, 0.2 / 0.5]),
        ("max", [0.8 / 1.5, 0.7 / 1.5]),
        ("median", [0.6, 0.4]),
        ("mean", [1.7 / 3, 1.3 / 3]),
        ("product", [0.144 / 0.2, 0.056 / 0.2]),
    ],
)
def test_worked_example(rule, expected):
    np.testing.assert_allclose(combine_posteriors(POSTERIORS, rule)[0], expected, atol=1e-12)


def test_product_survives_underflow_and_zero_rows_become_uniform():
    tiny = [np.array([[1e-200, 1e-210]])] * 4
    np.testing.assert_allclose(combine_posteriors(tiny, "product")[0], [1.0, 0.0], atol=1e-12)
    zero = [np.array([[0.0, 1.0, 0.0]]), np.array([[1.0, 0.0, 0.0]])]
    np.testing.assert_allclose(combine_posteriors(zero, "product")[0], [1 / 3] * 3)
    with pytest.raises(ParameterError, match="vote"):
        combine_posteriors(POSTERIORS, "vote")


@settings(max_examples=50, deadline=None)
@given(arrays(np.float64, (3, 5, 4), elements=st.floats(0.0, 1.0)), st.sampled_from(["min", "max", "median", "mean", "product"]))
def test_rows_are_probabilities_and_unanimous_inputs_pass_through(raw, rule):
    P = raw + 1e-9
    P = P / P.sum(axis=2, keepdims=True)
    out = combine_posteriors(list(P), rule)
    assert out.shape == (5, 4) and (out >= 0).all()
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-9)
    if rule != "product":
        np.testing.assert_allclose(combine_posteriors([P[0]] * 3, rule), P[0], atol=1e-12)
