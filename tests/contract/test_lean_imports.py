"""Scoring a model that never calls scikit-learn does not import it, and the parameter protocol that
replaced ``BaseEstimator`` behaves as scikit-learn's does."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from sklearn.base import BaseEstimator, clone

from calengine.params import Params

from cli_helpers import REPO, run_cli

PIMA = REPO / "data" / "pima.parquet"

PROBE = r"""
import json, sys
from calengine.model.artifact import load_model
import pandas as pd
model = load_model(sys.argv[1])
frame = model.predict_frame(pd.read_parquet(sys.argv[2]))
heavy = sorted(m for m in ("sklearn", "scipy.stats", "scipy.special", "scipy.sparse", "skops", "matplotlib")
               if m in sys.modules)
print(json.dumps({"heavy": heavy, "p": frame[frame.columns[1]].tolist()}))
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    base = tmp_path_factory.mktemp("lean")
    out = {}
    for name, args in {"nb_isotonic": ["--method", "isotonic"],
                       "nb_sigmoid": ["--method", "sigmoid", "--mode", "refit"],
                       "logistic": ["--learner", "logistic_regression", "--method", "isotonic"],
                       "tree": ["--learner", "decision_tree", "--method", "isotonic"]}.items():
        r = run_cli("--quiet", "fit", PIMA, "--target", "class", "--workers", "1", *args, "--output", base / name)
        assert r.returncode == 0, r
        out[name] = base / name
    return out


def _probe(model_dir) -> dict:
    r = subprocess.run([sys.executable, "-P", "-c", PROBE, str(model_dir), str(PIMA)], capture_output=True, text=True,
                       cwd=REPO)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_naive_bayes_and_logistic_models_score_without_importing_sklearn(models):
    """gaussian_nb and a dense two-class logistic_regression score from their stored arrays: loading
    and scoring the model imports neither scikit-learn (0.9 s, it imports scipy.stats) nor any of
    scipy."""
    assert _probe(models["nb_isotonic"])["heavy"] == []
    assert _probe(models["logistic"])["heavy"] == []
    assert _probe(models["nb_sigmoid"])["heavy"] == []  # the sigmoid's expit is NumPy's for float64


SCORE_PROBE = r"""
import json, sys
from calengine.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("distributed", "sklearn", "scipy.special", "scipy.stats", "skops") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}))
"""


@pytest.mark.parametrize("command", ["score", "decide", "evaluate"])
def test_embedded_map_commands_never_import_distributed(models, tmp_path, command):
    """score, decide and evaluate without --cluster run their chunk tasks on a ThreadClient: the
    whole command imports neither distributed (0.4-0.6 s with its scheduler's start) nor scikit-learn,
    nor (but for evaluate's chi-square drift test) scipy, for a naive Bayes + sigmoid model.  With --cluster the same command is Dask's."""
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"classes": [0, 1], "costs": [[0, 1], [5, 0]]}))
    args = {"score": ["score", models["nb_sigmoid"], PIMA, "--output", tmp_path / "s"],
            "decide": ["decide", models["nb_sigmoid"], PIMA, "--cost-matrix", costs, "--output", tmp_path / "d"],
            "evaluate": ["evaluate", models["nb_sigmoid"], PIMA, "--target", "class", "--json"]}[command]
    r = subprocess.run([sys.executable, "-P", "-c", SCORE_PROBE, "--quiet", *map(str, args)], capture_output=True,
                       text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # evaluate's drift check takes its normal and chi-square tails from scipy.special (scipy.stats, half a
    # second to import, is not needed)
    allowed = ["scipy.special"] if command == "evaluate" else []
    assert out == {"code": 0, "heavy": allowed}, out


NB_FIT_PROBE = r"""
import json, sys
from calengine.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("distributed", "sklearn", "scipy.stats", "scipy.optimize", "skops") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}))
"""


@pytest.mark.parametrize("workers", ["1", "2"])
def test_naive_bayes_fit_from_statistics_never_imports_sklearn(tmp_path, workers):
    """The quick start's fit (gaussian_nb from mergeable statistics, isotonic on the held-out folds)
    never calls scikit-learn, so it does not import it (with scipy.stats, 0.9-2 s of a 5 s fit of
    Adult): inputs are checked without it, the learner is copied without ``clone``, the fitted arrays
    are held as the model stores them, and the plugin probe's message is only built for a refusal.
    Nor does it import distributed: without --cluster such a fit runs on a ThreadClient
    (calengine.fit.score_columns.learner_fit_runs_as_map).  The model is the same bytes as one whose
    scikit-learn estimator was built before saving."""
    model = tmp_path / "m"
    r = subprocess.run([sys.executable, "-P", "-c", NB_FIT_PROBE, "--quiet", "fit", str(PIMA), "--target", "class",
                        "--learner", "gaussian_nb", "--method", "isotonic", "--workers", workers, "--output",
                        str(model)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"code": 0, "heavy": []}

    from calengine.model.artifact import load_model
    from calengine_builtins.learners import GaussianNBLearner

    assert [type(m.learners[0]).__name__ for m in load_model(model).members] == ["GaussianNBLearner"] * 5
    rng = np.random.default_rng(3)
    X, y, w = rng.normal(size=(400, 4)), rng.integers(0, 2, size=400), rng.uniform(0.5, 2, size=400)
    learner = GaussianNBLearner(var_smoothing=1e-3)
    learner.fit_from_stats(learner.partial_stats(X, y, w, 2), 2)
    deferred = learner.to_state()
    assert "_pending_state" in vars(learner)
    learner.estimator_  # noqa: B018 - builds the GaussianNB from the arrays
    built = learner.to_state()
    assert list(deferred) == list(built)
    for key, value in built.items():
        assert type(deferred[key]) is type(value), key
        if isinstance(value, np.ndarray):
            assert value.dtype == deferred[key].dtype and value.tobytes() == deferred[key].tobytes(), key
        else:
            assert deferred[key] == value, key
    with pytest.raises(ValueError, match="var_smoothing"):
        GaussianNBLearner(var_smoothing=-1.0).fit_from_stats(learner.partial_stats(X, y, w, 2), 2)


def test_lazily_built_estimator_scores_the_same_bits_as_the_built_one(models):
    """The probabilities of a lazily restored naive Bayes equal those after its scikit-learn estimator
    is built (forcing ``estimator_``), and a model that needs scikit-learn still imports it."""
    from calengine.model.artifact import load_model

    import pandas as pd

    df = pd.read_parquet(PIMA)
    lazy = load_model(models["nb_isotonic"])
    eager = load_model(models["nb_isotonic"])
    for member in eager.members:
        for learner in member.learners:
            assert "_pending_state" in vars(learner)
            learner.estimator_  # noqa: B018 - builds the GaussianNB
            assert "_pending_state" not in vars(learner)
    np.testing.assert_array_equal(lazy.predict_frame(df).filter(like="p_").to_numpy(),
                                  eager.predict_frame(df).filter(like="p_").to_numpy())
    assert "sklearn" in _probe(models["tree"])["heavy"]
    assert _probe(models["nb_isotonic"])["p"] == lazy.predict_frame(df).iloc[:, 1].tolist()


def test_lazy_state_is_still_checked_when_loaded(models, tmp_path):
    """Deferring the estimator does not defer the checks: a state missing an attribute or holding
    the wrong number of classes is refused by ``from_state`` itself."""
    from calengine_builtins.learners import GaussianNBLearner

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 3)), np.repeat([0, 1], 30)
    state = GaussianNBLearner().fit(X, y).to_state()
    fresh = GaussianNBLearner().from_state(dict(state))
    np.testing.assert_array_equal(fresh.score(X), GaussianNBLearner().fit(X, y).score(X))
    with pytest.raises(ValueError, match="state 'var_' is missing"):
        GaussianNBLearner().from_state({k: v for k, v in state.items() if k != "var_"})
    with pytest.raises(ValueError, match="2 classes stored for n_classes=3"):
        GaussianNBLearner().from_state({**state, "n_classes": 3})


def test_logistic_regression_scores_the_pipelines_bits_from_its_arrays():
    """The arrays path of a dense two-class logistic regression gives exactly the bits of the scaled
    path (the fitted Pipeline's steps, products row-wise so that no row depends on its batch), within
    rounding of the Pipeline's ``predict_proba`` (C- and Fortran-ordered input, lazily restored or
    freshly fitted), and leaves what it does not cover to the scaled path: several classes,
    non-finite input (scikit-learn's error)."""
    from calengine_builtins.learners import LogisticRegressionLearner

    rng = np.random.default_rng(7)
    for n, d, scale in [(500, 3, 1.0), (2000, 20, 30.0), (300, 50, 1e-3)]:
        X = rng.normal(size=(n, d)) * scale + rng.normal(size=d) * 5
        y = (X[:, 0] + rng.normal(size=n) * scale > X[:, 0].mean()).astype(int)
        fitted = LogisticRegressionLearner(C=0.5).fit(X, y)
        lazy = LogisticRegressionLearner(C=0.5).from_state(fitted.to_state())
        assert "_pending_state" in vars(lazy)
        for Xq in (X, np.asfortranarray(X), X[::2], rng.normal(size=(17, d)) * 100):
            expected = fitted._sklearn_score(Xq)
            np.testing.assert_allclose(expected, fitted.estimator_.predict_proba(Xq)[:, 1], rtol=1e-12, atol=1e-15)
            np.testing.assert_array_equal(fitted.score(Xq), expected)
            np.testing.assert_array_equal(lazy.score(Xq), expected)
        assert "_pending_state" in vars(lazy)  # never needed the Pipeline
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        lazy.score(bad)
    y3 = rng.integers(0, 3, size=X.shape[0])
    three = LogisticRegressionLearner().fit(X, y3)
    np.testing.assert_allclose(three.score(X), three.estimator_.predict_proba(X), rtol=1e-12, atol=1e-15)


class _Mine(Params):
    def __init__(self, alpha=1.0, inner=None, name="x", tol=float("nan")):
        self.alpha = alpha
        self.inner = inner
        self.name = name
        self.tol = tol


class _Theirs(BaseEstimator):
    def __init__(self, alpha=1.0, inner=None, name="x", tol=float("nan")):
        self.alpha = alpha
        self.inner = inner
        self.name = name
        self.tol = tol


@pytest.mark.parametrize("kwargs", [{}, {"alpha": 2.5}, {"name": "y", "tol": 1e-3}, {"inner": "INNER"}])
def test_params_protocol_matches_scikit_learns(kwargs):
    """Same get_params (shallow and deep, nested names), set_params (nested, errors), clone and repr
    as BaseEstimator for the same constructor."""
    def build(cls):
        kw = dict(kwargs)
        if kw.get("inner") == "INNER":
            kw["inner"] = cls(alpha=3.0)
        return cls(**kw)

    mine, theirs = build(_Mine), build(_Theirs)
    for deep in (False, True):
        a, b = mine.get_params(deep), theirs.get_params(deep)
        assert list(a) == list(b)
        assert {k: repr(v).replace("_Mine", "_Theirs") for k, v in a.items()} == {k: repr(v) for k, v in b.items()}
    assert repr(mine).replace("_Mine", "_Theirs") == repr(theirs)
    twin = clone(mine)
    assert type(twin) is _Mine and twin is not mine and repr(twin) == repr(mine)
    if kwargs.get("inner"):
        mine.set_params(inner__alpha=7.0)
        theirs.set_params(inner__alpha=7.0)
        assert mine.inner.alpha == theirs.inner.alpha == 7.0
    with pytest.raises(ValueError, match="Invalid parameter 'beta'"):
        mine.set_params(beta=1)
    with pytest.raises(ValueError, match="Invalid parameter 'beta'"):
        theirs.set_params(beta=1)
    assert mine.set_params(alpha=4.0) is mine and mine.alpha == 4.0


def test_threads_building_the_lazy_estimator_at_once_get_one_estimator():
    """The embedded scheduler's threads share one model: concurrent first uses of ``estimator_``
    build it once and never see it half-restored (no KeyError/AttributeError from the race)."""
    from concurrent.futures import ThreadPoolExecutor

    from calengine_builtins.learners import GaussianNBLearner

    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(200, 4)), np.repeat([0, 1], 100)
    state = GaussianNBLearner().fit(X, y).to_state()
    for _ in range(20):
        learner = GaussianNBLearner().from_state(dict(state))
        with ThreadPoolExecutor(8) as ex:
            built = list(ex.map(lambda _: learner.estimator_, range(16)))
        assert all(b is built[0] for b in built)
        assert "_pending_state" not in vars(learner)


FIT_PROBE = r"""
import json, sys
from calengine.cli import main
code = main(sys.argv[1:])
heavy = ("distributed", "pandas", "sklearn", "scipy.optimize")
print(json.dumps({"code": code, "heavy": sorted(m for m in heavy if m in sys.modules)}))
"""


@pytest.mark.parametrize("method", ["sigmoid", "isotonic", "temperature"])
def test_embedded_score_column_fit_never_imports_distributed(tmp_path, method):
    """``fit --scores`` without --cluster runs on a ThreadClient (calengine.fit.score_columns.runs_as_map)
    and reads its numeric columns from Arrow into NumPy (tasks.partitions._load_numeric_part): importing
    distributed and starting its scheduler, and importing pandas, were ~1.6 s of CPU of a 10M-row fit.
    (With --cluster it is Dask's: the score-column tests' --cluster runs.)  Isotonic's PAV pass is
    SciPy's compiled one without ``scipy.optimize`` (~0.5 s of CPU: calengine.reductions.pav._compiled_pava)."""
    import pandas as pd

    df = pd.read_parquet(PIMA)
    data = tmp_path / "scores.parquet"
    pd.DataFrame({"s": (df["plasma_glucose"] / df["plasma_glucose"].max()).clip(0, 1), "y": df["class"]}).to_parquet(data)
    r = subprocess.run([sys.executable, "-P", "-c", FIT_PROBE, "--quiet", "fit", str(data), "--target", "y",
                        "--scores", "s", "--method", method, "--output", str(tmp_path / "m")],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"code": 0, "heavy": []}
