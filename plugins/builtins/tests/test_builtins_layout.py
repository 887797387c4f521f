"""The built-in learners and calibrators as packages by family (calengine_builtins.learners.naive_bayes,
.calibrators.scaling, ...): what must not change for users, models and workers when classes move.

* every public name of the one-module layout still imports from ``calengine_builtins.learners`` /
  ``calengine_builtins.calibrators``, and is the class registered under its name;
* a model directory saved by the one-module code (``plugins/builtins/tests/fixtures/model_before_builtins_split``:
  gaussian_nb, logistic_regression and knn + sigmoid, combined by the mean, fitted at commit e962698 with
  ``calengine fit`` on a 48-row table; ``expected.json`` holds 13 rows and the probabilities that code
  gave them) loads and predicts the same bits: models name classes by registered name, never by module;
* workers are asked to import the family modules the job's objects come from, and a fresh interpreter
  (as a Dask worker is) imports them and unpickles the objects by their new module paths;
* the installed distribution holds every module of the source tree (the wheel is built by package
  discovery, not from a hand-written list).
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

import calengine_builtins
from calengine import load_model
from calengine.plugins import registry
from calengine.plugins import get_plugins
from calengine_builtins import calibrators, learners

REPO = Path(__file__).resolve().parents[3]

FIXTURE = Path(__file__).parent / "fixtures" / "model_before_builtins_split"

#: ``__all__`` of calengine_builtins/learners.py and calibrators.py at e962698, before the split
ONE_MODULE_LEARNERS = [
    "LEARNERS", "BayesDiagonalLearner", "BayesFullLearner", "BernoulliNBLearner", "BoostedNBLearner",
    "CategoricalNBLearner", "DecisionTreeLearner", "FisherLDALearner", "GaussianNBLearner", "KNNLearner",
    "LinearSVMLearner", "LogisticRegressionLearner", "MLPLearner", "MultinomialNBLearner", "NearestMeanLearner",
    "ParzenLearner", "QDALearner", "SklearnClassifier", "apply_bins", "knn_counts_proba", "knn_distance_proba",
    "quantile_bin_edges", "register_learners",
]
ONE_MODULE_CALIBRATORS = [
    "CALIBRATORS", "EPS", "NoCalibration", "SigmoidCalibrator", "IsotonicCalibrator", "BinningCalibrator",
    "ROCHullCalibrator", "BetaCalibrator", "TemperatureCalibrator", "SigmoidNoBiasCalibrator",
    "VennAbersCalibrator", "register_calibrators",
]


def test_every_public_name_of_the_one_module_layout_still_imports():
    missing = [n for n in ONE_MODULE_LEARNERS if not hasattr(learners, n)]
    missing += [n for n in ONE_MODULE_CALIBRATORS if not hasattr(calibrators, n)]
    assert not missing
    plugins = get_plugins()
    for kind, classes in (("learners", learners.LEARNERS), ("calibrators", calibrators.CALIBRATORS)):
        assert {cls.name: cls for cls in classes} == {
            name: cls for name, cls in plugins.classes[kind].items() if cls.__module__.startswith("calengine_builtins.")
        }
        for cls in classes:  # each class lives in its family module and is re-exported, not copied
            assert cls.__module__.startswith(f"calengine_builtins.{kind}.") and getattr(
                sys.modules[f"calengine_builtins.{kind}"], cls.__name__) is cls


def test_a_model_saved_before_the_split_loads_and_predicts_the_same_bits():
    from numpy._core._multiarray_umath import __cpu_features__

    expected = json.loads((FIXTURE / "expected.json").read_text())
    model = load_model(FIXTURE / "model")
    assert list(model.classes_) == expected["classes"]
    rows = pd.DataFrame(expected["rows"], columns=expected["columns"])
    got, want = model.predict_proba(rows), np.array(expected["proba"])
    if __cpu_features__.get("AVX512F"):
        # the fixture was written where NumPy's float64 exp is the C library's; NumPy's AVX-512 exp
        # differs from it by an ulp or so (tests/runtime/test_thread_client.py measures expit's bound)
        np.testing.assert_array_max_ulp(got, want, maxulp=4)
    else:
        np.testing.assert_array_equal(got, want)
    assert [type(lr).__module__ for m in model.members for lr in m.learners] == [
        "calengine_builtins.learners.naive_bayes", "calengine_builtins.learners.linear",
        "calengine_builtins.learners.neighbors",
    ]
    assert {type(c).__module__ for m in model.members for c in m.calibrators} == {"calengine_builtins.calibrators.scaling"}


def test_workers_import_the_family_modules_and_unpickle_objects_by_their_new_paths():
    from calengine.cli import _plugin_requirements
    from calengine.runtime.versions import import_modules

    plugins = get_plugins()
    learner = registry.make("learners", "nearest_mean", {}, plugins)
    calibrator = registry.make("calibrators", "isotonic", {}, plugins)
    dists, modules = _plugin_requirements([learner, calibrator])
    assert "calengine-builtins" in dists
    assert modules == ("calengine_builtins.calibrators.isotonic", "calengine_builtins.learners.neighbors")
    assert import_modules(modules) == {}
    # a fresh interpreter, as a Dask worker is, imports the modules by name and unpickles the fitted objects
    X = np.array([[0.0, 1.0], [1.0, 0.0], [0.2, 0.9], [0.9, 0.3]])
    y = np.array([0, 1, 0, 1])
    learner.fit(X, y)
    calibrator.fit(learner.score(X), y)
    code = (
        "import importlib, json, pickle, sys\n"
        f"for m in {list(modules)!r}: importlib.import_module(m)\n"
        "learner, calibrator, X = pickle.loads(sys.stdin.buffer.read())\n"
        "sys.stdout.write(json.dumps(calibrator.predict(learner.score(X)).tolist()))\n"
    )
    out = subprocess.run([sys.executable, "-P", "-c", code], input=pickle.dumps((learner, calibrator, X)),
                         capture_output=True, check=True, timeout=120)
    assert json.loads(out.stdout) == calibrator.predict(learner.score(X)).tolist()


def test_the_installed_distribution_holds_every_module_of_the_source_tree():
    source = REPO / "plugins" / "builtins"
    wanted = {p.relative_to(source).as_posix() for p in (source / "calengine_builtins").rglob("*.py")}
    installed = {str(f) for f in metadata.files("calengine-builtins") or ()}
    assert {"calengine_builtins/learners/naive_bayes.py", "calengine_builtins/calibrators/scaling.py"} <= wanted
    assert wanted <= installed, sorted(wanted - installed)
    # and the one-module files of an older install are gone, not shadowed
    root = Path(calengine_builtins.__file__).parent
    assert not (root / "learners.py").exists() and not (root / "calibrators.py").exists()
