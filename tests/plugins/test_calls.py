"""Plugin code that raises, and plugin objects that cannot be saved: one typed line naming the plugin."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import calengine
from calengine.base import Calibrator, Combiner, Learner
from calengine.errors import CalibratorError, CombinerError, LearnerError, ParameterError, PluginError
from calengine.plugins.calls import distribution_of, plugin_errors
from calengine.tasks.arrays import fit_calibrators, score_rows, TrainingData


class _Exploding(Calibrator):
    name = "exploding"

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        raise ZeroDivisionError("the author forgot an empty bin")

    def predict(self, scores):
        raise KeyError("probs")


class _BadCombiner(Combiner):
    name = "bad_combiner"

    def combine(self, R, M, counts=None):
        raise IndexError("index 3 is out of bounds")


class _BadLearner(Learner):
    name = "bad_learner"

    def fit(self, X, y, sample_weight=None):
        return self

    def score(self, X):
        raise AttributeError("'BadLearner' object has no attribute 'coef_'")

    def to_state(self):
        return {}

    def from_state(self, state):
        return self


def test_calibrator_exception_in_a_task_is_one_line_naming_the_plugin():
    S = np.linspace(-1, 1, 20)[:, None]
    y = np.arange(20) % 2
    with pytest.raises(CalibratorError) as info:
        fit_calibrators(S, y, None, _Exploding(), "decision")
    msg = str(info.value)
    assert "\n" not in msg
    assert "calibrator 'exploding' failed to fit" in msg and "ZeroDivisionError: the author forgot an empty bin" in msg
    # defined in this test module, not shipped by an installed distribution: said so
    assert f"module {__name__}, not an installed distribution" in msg
    with pytest.raises(CalibratorError, match="calibrator 'exploding' failed to predict.*KeyError"):
        with plugin_errors(_Exploding(), "predict"):
            _Exploding().predict(S[:, 0])


def test_learner_score_and_combiner_exceptions_are_typed_one_liners():
    data = TrainingData(X=np.zeros((4, 2)), y=np.array([0, 1, 0, 1]))
    with pytest.raises(LearnerError, match="learner 'bad_learner' failed to score .*AttributeError"):
        score_rows(_BadLearner(), data, None)
    with pytest.raises(CombinerError, match="combiner 'bad_combiner' failed to combine .*IndexError"):
        with plugin_errors(_BadCombiner(), "combine"):
            _BadCombiner().combine(np.zeros((2, 3)), np.eye(3))


def test_own_calengine_errors_pass_unchanged_and_interrupts_are_not_swallowed():
    with pytest.raises(ParameterError, match="^shrink must be positive$"):
        with plugin_errors(_BadLearner(), "fit"):
            raise ParameterError("shrink must be positive")
    with pytest.raises(KeyboardInterrupt):
        with plugin_errors(_BadLearner(), "fit"):
            raise KeyboardInterrupt


def test_distribution_of_names_the_installed_distribution_and_version():
    from calengine_builtins.learners import GaussianNBLearner

    assert distribution_of(GaussianNBLearner).startswith("calengine-builtins ")


class _Unregistered(Learner):
    """A Learner no plugin registers: usable in memory, but a saved model could never be loaded."""

    name = "gaussian_nb"  # even borrowing a registered name: loading would build the other class
    score_kind = "decision"

    def fit(self, X, y, sample_weight=None):
        X = np.asarray(X, float)
        self.means_ = np.array([X[y == c].mean(axis=0) for c in range(int(y.max()) + 1)])
        return self

    def score(self, X):
        d = -((np.asarray(X)[:, None, :] - self.means_[None]) ** 2).sum(axis=2)
        return d[:, 1] - d[:, 0]

    def to_state(self):
        return {"means": self.means_}

    def from_state(self, state):
        self.means_ = state["means"]
        return self


class _UnregisteredName(_Unregistered):
    name = "not_registered_anywhere"


@pytest.mark.parametrize("cls", [_Unregistered, _UnregisteredName])
def test_saving_a_learner_no_plugin_registers_is_refused_with_the_fix(tmp_path, cls):
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=120), "b": rng.normal(size=120)})
    y = (X["a"] + 0.3 * rng.normal(size=120) > 0).astype(int).to_numpy()
    learner = cls()
    clf = calengine.CalibratedClassifier(learner=learner, method="sigmoid", cv=3).fit(X, y)
    assert clf.predict_proba(X).shape == (120, 2)  # fine in memory
    with pytest.raises(PluginError) as info:
        clf.save(tmp_path / "m")
    msg = str(info.value)
    assert f"{__name__}.{cls.__qualname__}" in msg and "could never be loaded" in msg and "register_learners" in msg
    assert not (tmp_path / "m").exists()


def test_python_api_refuses_sparse_input_for_a_learner_not_declaring_accepts_sparse():
    from scipy import sparse

    from calengine.errors import DataError
    from testing.test_checks import _ReadmeMeanDifference

    X = sparse.random(60, 5, density=0.5, random_state=0, format="csr")
    y = np.arange(60) % 2
    with pytest.raises(DataError) as info:
        calengine.CalibratedClassifier(learner=_ReadmeMeanDifference(), method="sigmoid", cv=3).fit(X, y)
    msg = str(info.value)
    assert "learner 'mean_difference' needs dense features" in msg and "accepts_sparse = True" in msg
    # the same rows dense are fine
    clf = calengine.CalibratedClassifier(learner=_ReadmeMeanDifference(), method="sigmoid", cv=3).fit(X.toarray(), y)
    assert clf.predict_proba(X.toarray()).shape == (60, 2)


class _ClashingIso(Calibrator):
    name = "isotonic"

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        return self

    def predict(self, scores):
        return scores


def test_a_clash_is_recorded_when_allowed_and_raised_naming_both_otherwise():
    import types

    from calengine.plugins import load_plugins

    mod = types.ModuleType("clashing_isotonic")
    Iso = _ClashingIso

    @calengine.hookimpl
    def register_calibrators(register):
        register(Iso)

    mod.register_calibrators = register_calibrators
    ps = load_plugins(strict=False, extra_modules=(mod,), allow_clashes=True)
    record = ps.records[-1]
    assert record.clashes and "calengine-builtins" in record.clashes[0] and "clashing_isotonic" in record.clashes[0]
    assert ps.classes["calibrators"]["isotonic"] is not Iso  # the first registration keeps the name
    assert "gaussian_nb" in ps.classes["learners"]
    with pytest.raises(PluginError, match="isotonic.*calengine-builtins.*clashing_isotonic.*calengine plugins"):
        load_plugins(strict=False, extra_modules=(mod,))


def test_cluster_failures_inside_plugin_code_are_left_to_the_cluster_report():
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    for exc in (CommClosedError("in <TCP>: Stream is closed"), KilledWorker("task", "worker", 3), TimeoutError("slow")):
        with pytest.raises(type(exc)):
            with plugin_errors(_BadLearner(), "fit"):
                raise exc
