"""calengine.base.BoosterLearner, the base of the XGBoost and LightGBM plugins, on a stand-in library.

The stand-in ("fakeboost", a module put in ``sys.modules``) trains a weighted nearest-class-mean
"booster" and writes it as JSON bytes, so the base's contract -- fit/score shapes, the state with the
library's version, the one-line refusals on load, the one-line cluster failures, parameter ranges -- is
tested without either library installed, exactly as a third-party booster plugin would use it.  The
plugins' own suites (plugins/xgboost/tests, plugins/lightgbm/tests) test it with the real libraries.
"""

from __future__ import annotations

import json
import os
import re
import sys
import types

import numpy as np
import pytest

from calengine.base import BoosterLearner
from calengine.boosters.checks import BoosterSummary
from calengine.errors import DataError, LearnerError, ModelFormatError, ParameterError
from calengine.params import with_parent_params
from calengine.testing import check_learner, make_data


class BadBooster(Exception):
    """The stand-in library's error for bytes it cannot read."""


class _Means:
    """The stand-in's booster: weighted class means; probabilities from the squared distances."""

    def __init__(self, means):
        self.means = np.asarray(means, dtype=np.float64)

    def predict(self, X):
        X = X.toarray() if hasattr(X, "toarray") else np.asarray(X, dtype=np.float64)
        d = -((X[:, None, :] - self.means[None]) ** 2).sum(axis=2)
        e = np.exp(d - d.max(axis=1, keepdims=True))
        P = e / e.sum(axis=1, keepdims=True)
        return P[:, 1] if P.shape[1] == 2 else P.ravel()  # n*k values, as XGBoost's softprob gives

    @classmethod
    def from_bytes(cls, blob: bytes) -> "_Means":
        try:
            return cls(json.loads(blob.decode("ascii"))["means"])
        except (ValueError, KeyError) as exc:
            raise BadBooster(f"not a fakeboost model: {exc}\nsecond line") from None


@pytest.fixture
def fakeboost(monkeypatch):
    lib = types.ModuleType("fakeboost")
    lib.__version__ = "2.3.0"
    lib.BadBooster = BadBooster
    monkeypatch.setitem(sys.modules, "fakeboost", lib)
    return lib


class FakeBoost(BoosterLearner):
    name = "fakeboost"
    library = "fakeboost"
    package = "fakeboost-cpu"
    library_title = "FakeBoost"
    booster_key = "booster.json"

    def __init__(self, n_estimators: int = 10, subsample: float = 1.0, learning_rate: float = 0.3, random_state=None):
        self.n_estimators = n_estimators
        self.subsample = subsample
        self.learning_rate = learning_rate
        self.random_state = random_state

    def booster_params(self, n_classes):
        self.check_ranges(integers={"n_estimators": 1}, fractions=("subsample",), positive=("learning_rate",))
        return {"num_class": n_classes}

    def train_booster(self, X, y, sample_weight, n_classes):
        self.booster_params(n_classes)
        X = X.toarray() if hasattr(X, "toarray") else X
        w = np.ones(len(y)) if sample_weight is None else sample_weight
        return _Means([np.average(X[y == c], axis=0, weights=w[y == c]) if np.any(y == c) else np.zeros(X.shape[1])
                       for c in range(n_classes)])

    def predict_booster(self, X):
        return self.booster_.predict(X)

    def booster_bytes(self):
        return json.dumps({"means": self.booster_.means.tolist()}).encode("ascii")

    def booster_from_bytes(self, blob):
        return _Means.from_bytes(blob)

    def read_errors(self):
        return (self.library_module().BadBooster,)

    #: the stand-in is pure Python: nothing to contain in a child process
    native_library = False

    def validate_booster(self, data, n_features, n_classes):
        self.validated.append(bytes(data))
        try:
            doc = json.loads(bytes(data).decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            raise ModelFormatError("the FakeBoost booster file is not JSON; fit the model again") from None
        means = np.asarray(doc.get("means", [[0.0] * (n_features or 1)] * max(2, n_classes or 2)), dtype=np.float64)
        if means.ndim != 2 or not np.all(np.isfinite(means)) or (n_features is not None and means.shape[1] != n_features):
            raise ModelFormatError(f"the FakeBoost booster file does not fit {n_features} features; fit the model again")
        return BoosterSummary(means.shape[1], means.shape[0], 1)

    validated: list = []


class FakeBoostDask(FakeBoost):
    name = "fakeboost_dask"

    @with_parent_params(FakeBoost)
    def __init__(self, *, timeout: int = 300, **params):
        super().__init__(**params)
        self.timeout = timeout


def test_a_booster_learner_passes_the_conformance_kit(fakeboost):
    check_learner(FakeBoost)
    check_learner(FakeBoostDask)


def test_scores_have_the_contract_shape_and_the_state_records_the_library(fakeboost):
    X, y = make_data(n_classes=3)
    learner = FakeBoost().fit(X, y)
    assert learner.n_classes_ == 3 and learner.score(X).shape == (len(y), 3)
    np.testing.assert_allclose(learner.score(X).sum(axis=1), 1.0)
    state = learner.to_state()
    assert state["library"] == "fakeboost" and state["library_version"] == "2.3.0" and state["n_classes"] == 3
    assert isinstance(state["booster.json"], bytes)
    back = FakeBoost().from_state(state)
    np.testing.assert_array_equal(back.score(X), learner.score(X))
    # one class present still gives a two-class booster (a fold may lack the top class)
    assert FakeBoost().fit(X[y == 0], np.zeros(int((y == 0).sum()), dtype=int)).n_classes_ == 2


def test_loading_refuses_a_newer_or_other_major_library_in_one_line(fakeboost):
    X, y = make_data()
    state = FakeBoost().fit(X, y).to_state()
    with pytest.raises(ModelFormatError, match=r"fakeboost 2\.9\.0 and fakeboost 2\.3\.0 .*pip install 'fakeboost-cpu==2\.9\.0'"):
        FakeBoost().from_state({**state, "library_version": "2.9.0"})
    with pytest.raises(ModelFormatError, match="fakeboost 1.0.0"):
        FakeBoost().from_state({**state, "library_version": "1.0.0"})
    FakeBoost().from_state({**state, "library_version": "2.1.7"})  # an older release of the same major reads
    with pytest.raises(ModelFormatError, match="holds no fakeboost booster"):
        FakeBoost().from_state({**state, "library": "otherboost"})
    with pytest.raises(ModelFormatError, match="holds no fakeboost booster"):
        FakeBoost().from_state({k: v for k, v in state.items() if k != "booster.json"})
    FakeBoost.check_library_version("2.0.0", "2.3.0")


def test_unreadable_booster_bytes_are_one_model_format_line(fakeboost):
    X, y = make_data()
    state = FakeBoost().fit(X, y).to_state()
    with pytest.raises(ModelFormatError) as info:
        FakeBoost().from_state({**state, "booster.json": b'{"no_means": 1}'})
    message = str(info.value)
    assert message.startswith("the FakeBoost booster of learner 'fakeboost' cannot be read (not a fakeboost model")
    assert message.endswith("; fit the model again") and "\n" not in message


def test_the_validator_sees_the_bytes_before_the_library(fakeboost, monkeypatch):
    X, y = make_data()
    state = FakeBoost().fit(X, y).to_state()
    FakeBoost.validated.clear()
    monkeypatch.setattr(_Means, "from_bytes", classmethod(lambda cls, blob: pytest.fail("the library read unchecked bytes")))
    with pytest.raises(ModelFormatError, match="^the FakeBoost booster file is not JSON; fit the model again$"):
        FakeBoost().from_state({**state, "booster.json": b"\x00 not json"})
    assert FakeBoost.validated == [b"\x00 not json"]


class Lenient(FakeBoost):
    """A validator that accepts anything."""

    name = "lenient"

    def validate_booster(self, data, n_features, n_classes):
        return BoosterSummary(n_features, max(2, n_classes), 1)


class _NoValidator(BoosterLearner):  # FakeBoost's library side, without validate_booster
    name, library, library_title, booster_key = "novalidator", "fakeboost", "FakeBoost", "booster.json"
    booster_params, train_booster, predict_booster = FakeBoost.booster_params, FakeBoost.train_booster, FakeBoost.predict_booster
    booster_bytes, booster_from_bytes = FakeBoost.booster_bytes, FakeBoost.booster_from_bytes


def test_the_kit_requires_a_booster_plugin_to_declare_its_validator(fakeboost):
    NoValidator = _NoValidator
    with pytest.raises(AssertionError, match="must declare validate_booster"):
        check_learner(NoValidator)

    with pytest.raises(AssertionError, match="validate_booster accepted a booster file cut in half"):
        check_learner(Lenient)


def refuse_every_booster(blob, n_features, n_classes):
    """A native probe that refuses everything (the kit must notice)."""
    return "refused by the probe"


class _Probed(FakeBoost):
    name = "probed"
    native_probe = f"{__name__}:refuse_every_booster"


def test_the_kit_runs_a_declared_native_probe_on_the_plugins_own_file(fakeboost):
    Probed = _Probed
    with pytest.raises(AssertionError, match=r"native_probe .*refuse_every_booster refused the booster just fitted"):
        check_learner(Probed)


def test_parameters_out_of_range_are_one_parameter_error_line(fakeboost):
    X, y = make_data()
    for params, fragment in (({"n_estimators": 0}, "n_estimators must be an integer >= 1, got 0"),
                             ({"n_estimators": 2.5}, "n_estimators must be an integer >= 1"),
                             ({"n_estimators": True}, "n_estimators must be an integer >= 1"),
                             ({"subsample": 1.5}, "subsample must be in (0, 1], got 1.5"),
                             ({"subsample": "half"}, "subsample must be in (0, 1]"),
                             ({"learning_rate": 0}, "learning_rate must be positive, got 0")):
        with pytest.raises(ParameterError, match=r"^learner 'fakeboost': " + re.escape(fragment)):
            FakeBoost(**params).fit(X, y)
    FakeBoost(n_estimators=np.int64(3), subsample=np.float32(0.5)).fit(X, y)


class KilledWorker(Exception):
    """Named as distributed's: a worker died under the task."""


@pytest.mark.parametrize("exc, fragments", [
    (KilledWorker("task x"), ["lost a Dask worker", "KilledWorker: task x", "FakeBoost cannot resume",
                              "no model was written"]),
    (AssertionError("lost"), ["lost a Dask worker"]),
    (RuntimeError("rabit:\n  broken"), ["failed while training on the cluster (RuntimeError: rabit: broken)",
                                        "no model was written: check the workers"]),
])
def test_a_failed_cluster_training_is_one_learner_error_line(fakeboost, exc, fragments):
    with pytest.raises(LearnerError) as info:
        with FakeBoost().training_on_cluster():
            raise exc
    message = str(info.value)
    assert message.startswith("learner 'fakeboost' ") and "\n" not in message
    for fragment in fragments:
        assert fragment in message
    assert info.value.__cause__ is exc


def test_calengine_errors_inside_a_cluster_training_pass_unchanged(fakeboost):
    error = DataError("a class has no rows")
    with pytest.raises(DataError) as info:
        with FakeBoost().training_on_cluster():
            raise error
    assert info.value is error


def test_with_parent_params_declares_every_parameter_once():
    import inspect

    from sklearn.base import clone

    learner = FakeBoostDask(n_estimators=5, timeout=9)
    assert learner.get_params() == {"n_estimators": 5, "subsample": 1.0, "learning_rate": 0.3,
                                    "random_state": None, "timeout": 9}
    assert repr(learner) == "FakeBoostDask(n_estimators=5, timeout=9)"
    copy = clone(learner)
    assert copy.get_params() == learner.get_params() and copy is not learner
    params = inspect.signature(FakeBoostDask.__init__).parameters
    assert list(params) == ["self", "n_estimators", "subsample", "learning_rate", "random_state", "timeout"]
    assert all(p.kind is p.KEYWORD_ONLY for name, p in params.items() if name != "self")
    with pytest.raises(TypeError):
        FakeBoostDask(no_such_parameter=1)


def test_with_parent_params_refuses_an_init_it_cannot_describe():
    with pytest.raises(TypeError, match="must be __init__"):
        @with_parent_params(FakeBoost)
        def __init__(self, timeout=300, **params):  # a positional parameter: calls would bind it first
            pass
    with pytest.raises(TypeError, match="must be __init__"):
        @with_parent_params(FakeBoost)
        def __init__(self, *, timeout=300):  # noqa: F811 - nothing passes the parent's parameters on
            pass


_CRASHBOOST = '''
import ctypes, time
import numpy as np
from calengine.base import BoosterLearner
from calengine.boosters.checks import BoosterSummary


class CrashBoost(BoosterLearner):
    """A 'native' library whose reader segfaults, aborts or hangs on chosen bytes."""

    name, library, library_title, booster_key = "crashboost", "numpy", "CrashBoost", "booster.bin"

    def booster_params(self, n_classes):
        return {}

    def train_booster(self, X, y, sample_weight, n_classes):
        return b"ok"

    def predict_booster(self, X):
        return np.full(len(X), 0.5)

    def booster_bytes(self):
        return self.booster_

    def booster_from_bytes(self, blob):
        if blob == b"segfault":
            ctypes.string_at(0)
        if blob == b"hang":
            time.sleep(600)
        if blob == b"refuse":
            raise ValueError("no such model")
        return blob

    def validate_booster(self, data, n_features, n_classes):
        return BoosterSummary(3, 2, 1)
'''


def test_what_validation_misses_is_contained_in_a_child_process(tmp_path, monkeypatch):
    """A reader that segfaults, hangs or raises in the probing child is one ModelFormatError line in
    the parent, which survives; a sound file passes; verdicts are cached per content."""
    from calengine.boosters import guard as booster_guard

    (tmp_path / "crashboost.py").write_text(_CRASHBOOST)
    monkeypatch.syspath_prepend(str(tmp_path))
    # the child imports crashboost as a plugin module (no empty entry: that would be the checkout)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    monkeypatch.setattr(booster_guard, "PROBE_TIMEOUT", 10.0)
    monkeypatch.setattr(booster_guard, "_verdicts", {})
    # a child of its own: one started by an earlier test (still idle) has another PYTHONPATH
    server = booster_guard._ProbeServer()
    monkeypatch.setattr(booster_guard, "_server", server)
    import crashboost

    cls = crashboost.CrashBoost
    booster_guard.probe_in_child(cls, b"sound", 3, 2)
    with pytest.raises(ModelFormatError, match=r"^loading the CrashBoost booster crashed CrashBoost \(SIGSEGV\)"):
        booster_guard.probe_in_child(cls, b"segfault", 3, 2)
    with pytest.raises(ModelFormatError, match=r"did not finish within 10 s"):
        booster_guard.probe_in_child(cls, b"hang", 3, 2)
    with pytest.raises(ModelFormatError, match=r"failed \(ValueError: no such model\)"):
        booster_guard.probe_in_child(cls, b"refuse", 3, 2)
    booster_guard.probe_in_child(cls, b"sound", 3, 2)  # a fresh child after the crashes, or the cache
    server.stop()
    monkeypatch.setattr(server, "probe", lambda *a: pytest.fail("a cached verdict was probed again"))
    with pytest.raises(ModelFormatError, match="SIGSEGV"):
        booster_guard.probe_in_child(cls, b"segfault", 3, 2)
    booster_guard.probe_in_child(cls, b"sound", 3, 2)
