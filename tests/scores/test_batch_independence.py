"""A row's score never depends on which other rows are scored with it: every built-in learner gives
the same bits for a row scored alone, in any batch, or in the whole table (hypothesis over batch splits).

Why it matters: calibrators map scores through steps (isotonic, binning) on which training rows sit
exactly, so a last-bit difference in a learner's score can move a probability by a whole step (0.22
was seen through ``check_methods_subset_invariance``).  Batched matrix products (BLAS picks kernels and
blockings by shape) were the cause; the learners now compute every row's score in a fixed order.

The learners are listed from the registry, so a new built-in learner is covered automatically.  Each
is fitted once per class count on a small table; scoring is cheap, so hypothesis tries many splits.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calengine.plugins import get_plugins
from calengine.plugins.registry import make_learner

N_ROWS, N_FEATURES = 70, 13


def _builtin_learners() -> list[str]:
    classes = get_plugins().classes["learners"]
    return sorted(name for name, cls in classes.items() if cls.__module__.startswith("calengine_builtins."))


def _table(n_classes: int):
    rng = np.random.default_rng(11 + n_classes)
    y = np.arange(N_ROWS) % n_classes
    centres = rng.normal(scale=1.5, size=(n_classes, N_FEATURES))
    X = centres[y] + rng.normal(size=(N_ROWS, N_FEATURES)) * rng.uniform(0.3, 3.0, size=N_FEATURES)
    X[:, 0] = np.abs(X[:, 0]) * 1e3  # columns of very different scales
    X[:, 1] = np.round(X[:, 1], 1)  # ties
    return X, y


_FITTED: dict = {}


@pytest.fixture(autouse=True, scope="module")
def one_native_thread():
    """As the engine's tasks run (calengine.runtime.threads.pin_native_threads); it also keeps OpenMP
    start-up (HistGradientBoosting's predict) from dominating on a loaded machine."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield


def _fitted(name: str, n_classes: int):
    key = (name, n_classes)
    if key not in _FITTED:
        X, y = _table(n_classes)
        params = {"random_state": 0} if "random_state" in make_learner(name).get_params() else {}
        if name == "sklearn":  # by path, a row's score is the named class's; a light one keeps this lean
            params["path"] = "sklearn.ensemble.ExtraTreesClassifier"
            params["params"] = {"n_estimators": 5}
        learner = make_learner(name, params).fit(X, y)
        _FITTED[key] = (learner, X, learner.score(X))
    return _FITTED[key]


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("name", _builtin_learners())
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_scores_are_the_same_bits_whatever_the_batch(name, n_classes, data):
    learner, X, whole = _fitted(name, n_classes)
    cuts = sorted(data.draw(st.lists(st.integers(1, N_ROWS - 1), max_size=6, unique=True), label="cuts"))
    order = data.draw(st.permutations(range(N_ROWS)), label="order") if data.draw(st.booleans()) else range(N_ROWS)
    order = np.asarray(order)
    pieces = [learner.score(X[order[a:b]]) for a, b in zip([0, *cuts], [*cuts, N_ROWS])]
    batched = np.concatenate(pieces)
    np.testing.assert_array_equal(batched, whole[order], err_msg=f"{name}: scores depend on the batch")


@pytest.mark.parametrize("name", _builtin_learners())
def test_every_row_alone_scores_as_in_the_whole_table(name):
    """The extreme split, exhaustively: each row in a batch of its own (BLAS's vector kernels)."""
    for n_classes in (2, 3):
        learner, X, whole = _fitted(name, n_classes)
        alone = np.concatenate([learner.score(X[i : i + 1]) for i in range(N_ROWS)])
        np.testing.assert_array_equal(alone, whole, err_msg=f"{name}: a row alone scores differently")


def test_the_sweep_covers_the_learners_the_issue_named():
    names = set(_builtin_learners())
    assert {"multinomial_nb", "qda", "bayes_full", "parzen", "mlp", "gaussian_nb", "knn"} <= names
