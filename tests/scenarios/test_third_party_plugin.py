"""A plugin written the way an outside author writes one from the README, pip-installed as a real
distribution: a learner, a non-monotone calibrator and a combiner, used from the CLI and the Python
API and reloaded in a new process; then the ways it can go wrong (its own exception, another version
of it reading a saved model, a text column it cannot take, a name clash with another distribution)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from calengine import plugins as plugin_mod

from cli_helpers import REPO, assert_one_line_error

SOURCE = '''
"""calengine-thirdparty: a learner, a non-monotone calibrator and a combiner."""
import numpy as np

import calengine
from calengine.base import Calibrator, Combiner, Learner
from calengine.errors import CodeMatrixError, ModelFormatError, ParameterError

#: the layout of MeanDifference's saved state; bumped when it changes (see from_state)
STATE_FORMAT = {state_format}


class MeanDifference(Learner):
    """Distance to the class means: the README's example, with its state versioned."""

    name = "tp_mean_difference"
    accepts_sample_weight = True
    score_kind = "decision"

    def __init__(self, shrink=0.0):
        self.shrink = shrink

    def fit(self, X, y, sample_weight=None):
        if not 0 <= self.shrink < 1:
            raise ParameterError(f"learner 'tp_mean_difference': shrink must be in [0, 1), got {{self.shrink!r}}")
        w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, float)
        k = int(y.max()) + 1
        self.means_ = np.array([np.average(X[y == c], axis=0, weights=w[y == c]) for c in range(k)])
        return self

    def score(self, X):
        d = -((X[:, None, :] - self.means_[None]) ** 2).sum(axis=2) * (1 - self.shrink)
        return d[:, 1] - d[:, 0] if d.shape[1] == 2 else d

    def to_state(self):
        return {{"means": self.means_, "state_format": STATE_FORMAT}}

    def from_state(self, state):
        found = int(state.get("state_format", 0))
        if found != STATE_FORMAT:
            raise ModelFormatError(f"state format {{found}}, this version reads format {{STATE_FORMAT}}")
        self.means_ = np.asarray(state["means"], dtype=float)
        return self


class HistogramBins(Calibrator):
    """Equal-frequency bins with Laplace-smoothed frequencies and no monotone constraint."""

    name = "tp_bins"
    monotone = False
    weights_as_duplicates = False  # bin edges are quantiles of the rows, not of the weight

    def __init__(self, n_bins=10, fail=False):
        self.n_bins = n_bins
        self.fail = fail

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        if self.fail:
            raise ValueError("asked to fail by fail=true")
        s = np.asarray(scores, float)
        w = np.ones(len(s)) if sample_weight is None else np.asarray(sample_weight, float)
        self.edges_ = np.unique(np.quantile(s, np.linspace(0, 1, self.n_bins + 1)[1:-1]))
        b = np.searchsorted(self.edges_, s, side="right")
        pos = np.bincount(b, weights=w * y, minlength=len(self.edges_) + 1)
        tot = np.bincount(b, weights=w, minlength=len(self.edges_) + 1)
        self.probs_ = (pos + 1.0) / (tot + 2.0)
        return self

    def predict(self, scores):
        return self.probs_[np.searchsorted(self.edges_, np.asarray(scores, float), side="right")]


class LossyRate(Calibrator):
    """Positive rate on each side of the score midpoint, as a reduction whose merge keeps only its
    first piece: a bug the author's own tests (without the kit) never saw."""

    name = "tp_lossy_rate"
    monotone = False

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        request = self.reduction_start(score_kind)
        self.reduction_step(self.partial_stats(scores, y, sample_weight, request), request)
        return self

    def reduction_start(self, score_kind="decision"):
        return {{"threshold": 0.5 if score_kind == "proba" else 0.0}}

    def partial_stats(self, scores, y, sample_weight, request):
        s = np.asarray(scores, float)
        w = np.ones(len(s)) if sample_weight is None else np.asarray(sample_weight, float)
        side = (s > request["threshold"]).astype(int)
        return {{"pos": np.bincount(side, weights=w * y, minlength=2), "tot": np.bincount(side, weights=w, minlength=2)}}

    def merge_stats(self, a, b):
        return a

    def reduction_step(self, stats, request):
        self.threshold_ = float(request["threshold"])
        self.rates_ = (stats["pos"] + 1.0) / (stats["tot"] + 2.0)
        return None

    def predict(self, scores):
        return self.rates_[(np.asarray(scores, float) > self.threshold_).astype(int)]


class Renormalize(Combiner):
    """One-vs-all column estimates divided by their sum, each at least ``floor``."""

    name = "tp_renormalize"

    def __init__(self, floor=1e-12):
        self.floor = floor

    def check_matrix(self, M):
        k = M.shape[0]
        if M.shape != (k, k) or not np.array_equal(M, 2 * np.eye(k, dtype=M.dtype) - 1):
            raise CodeMatrixError("combiner 'tp_renormalize' needs the one_vs_all matrix")

    def combine(self, R, M, counts=None):
        if not 0 < self.floor < 1:
            raise ValueError(f"floor must be in (0, 1), got {{self.floor!r}}")
        R = np.clip(np.asarray(R, float), self.floor, None)
        return R / R.sum(axis=1, keepdims=True)


@calengine.hookimpl
def register_learners(register):
    register(MeanDifference)


@calengine.hookimpl
def register_calibrators(register):
    register(HistogramBins)
    register(LossyRate)


@calengine.hookimpl
def register_combiners(register):
    register(Renormalize)
'''

CLASHING = '''
import calengine
from calengine.base import Calibrator


class OtherBins(Calibrator):
    name = "tp_bins"

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        return self

    def predict(self, scores):
        return scores


@calengine.hookimpl
def register_calibrators(register):
    register(OtherBins)
'''

DIST = "calengine-thirdparty"


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], check=True)


def _package(root, dist: str, module: str, source: str, version: str):
    pkg = root / f"{dist}-{version}"
    pkg.mkdir()
    (pkg / f"{module}.py").write_text(source)
    (pkg / "pyproject.toml").write_text(textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{dist}"
        version = "{version}"
        dependencies = ["calengine", "numpy"]

        [project.entry-points.calengine]
        main = "{module}"

        [tool.setuptools]
        py-modules = ["{module}"]
    """))
    return pkg


def _install(pkg) -> None:
    _pip("install", "--no-deps", "--no-build-isolation", "--force-reinstall", str(pkg))
    plugin_mod.reset_plugin_cache()


@pytest.fixture(scope="module")
def thirdparty(tmp_path_factory):
    root = tmp_path_factory.mktemp("thirdparty")
    v1 = _package(root, DIST, "ce_thirdparty", SOURCE.format(state_format=1), "1.0.0")
    v2 = _package(root, DIST, "ce_thirdparty", SOURCE.format(state_format=2), "2.0.0")
    _install(v1)
    try:
        yield {"v1": v1, "v2": v2, "root": root}
    finally:
        _pip("uninstall", "-y", DIST)
        sys.modules.pop("ce_thirdparty", None)
        plugin_mod.reset_plugin_cache()


@pytest.fixture(scope="module")
def binary_model(thirdparty, tmp_path_factory, cli):
    out = tmp_path_factory.mktemp("tpmodel") / "m"
    r = cli("fit", "data/pima.parquet", "--target", "class", "--learner", "tp_mean_difference",
            "--learner-param", "shrink=0.1", "--method", "tp_bins", "--method-param", "n_bins=8",
            "--output", out)
    assert r.returncode == 0, r
    return out


def test_the_kit_accepts_the_package_including_its_non_monotone_calibrator(thirdparty):
    import importlib

    from calengine.testing import check_plugin_module

    from calengine.testing import check_calibrator, check_combiner, check_learner

    module = importlib.import_module("ce_thirdparty")
    # the package's lossy reduction is what the kit exists for: it names the class and the protocol
    with pytest.raises(AssertionError, match="LossyRate: the reduction protocol over"):
        check_plugin_module(module)
    check_learner(module.MeanDifference)
    check_calibrator(module.HistogramBins)
    check_combiner(module.Renormalize)


def test_cli_lists_it_and_its_parameters(thirdparty, cli):
    listing = cli("plugins").stdout
    assert f"{DIST}:main  ({DIST} 1.0.0)  ok" in listing and "tp_renormalize" in listing
    r = cli("plugins", "tp_bins")
    assert r.returncode == 0, r
    assert f"calibrator tp_bins  ({DIST} 1.0.0; ce_thirdparty.HistogramBins)" in r.stdout
    assert "n_bins = 10" in r.stdout and "fail = False" in r.stdout
    assert cli("plugins", "tp_mean_difference", "--json").json()["parameters"] == [{"name": "shrink", "default": 0.0}]


def test_cli_fit_score_evaluate_then_python_reload_in_a_new_process(binary_model, cli, tmp_path):
    ev = cli("evaluate", binary_model, "data/pima.parquet", "--target", "class", "--json").json()
    assert ev["auc"] > 0.6  # unscaled mean distances on pima: weak but real
    scored = tmp_path / "scored"
    assert cli("score", binary_model, "data/pima.parquet", "--output", scored).returncode == 0
    # a new process, the Python API: load_model and predict_proba, as a user would
    code = textwrap.dedent(f"""
        import numpy as np, pandas as pd, calengine
        model = calengine.load_model({str(binary_model)!r})
        df = pd.read_parquet("data/pima.parquet")
        P = model.predict_proba(df)
        np.save({str(tmp_path / "P.npy")!r}, P)
        print(list(map(str, model.classes_)), model.predict(df)[:3].tolist())
        # and fitting in memory by the plugin's registered names, as any built-in
        clf = calengine.CalibratedClassifier(learner="tp_mean_difference", learner_params={{"shrink": 0.1}},
                                             method="tp_bins", method_params={{"n_bins": 8}}, cv=3)
        Q = clf.fit(df.drop(columns="class"), df["class"]).predict_proba(df.drop(columns="class"))
        assert Q.shape == P.shape and np.allclose(Q.sum(axis=1), 1), Q
    """)
    proc = subprocess.run([sys.executable, "-P", "-c", code], cwd=str(REPO), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    P = np.load(tmp_path / "P.npy")
    scores = pd.read_parquet(scored)
    classes = [c for c in scores.columns if c.startswith("p_")]
    np.testing.assert_allclose(P, scores[classes].to_numpy(), rtol=0, atol=1e-12)
    assert np.all((P > 0) & (P < 1))  # Laplace-smoothed bin frequencies never reach 0 or 1


def test_multiclass_with_the_plugin_combiner(thirdparty, cli, tmp_path):
    table = tmp_path / "digits.parquet"
    pd.read_parquet(REPO / "data/pendigits_train.parquet").iloc[:1500].to_parquet(table)
    out = tmp_path / "m"
    r = cli("fit", table, "--target", "class", "--learner", "tp_mean_difference", "--method", "sigmoid",
            "--multiclass", "one_vs_all:tp_renormalize", "--cv", "3", "--output", out)
    assert r.returncode == 0, r
    ev = cli("evaluate", out, table, "--target", "class", "--json").json()
    assert ev["error_rate"] < 0.35, ev  # nearest means on pen digits: about 80 % right
    r = cli("fit", table, "--target", "class", "--learner", "tp_mean_difference", "--method", "sigmoid",
            "--multiclass", "all_pairs:tp_renormalize", "--output", tmp_path / "m2")
    assert_one_line_error(r, "tp_renormalize", "one_vs_all")


def test_an_exception_in_its_calibrator_is_one_line_naming_the_distribution(thirdparty, cli, tmp_path):
    r = cli("fit", "data/pima.parquet", "--target", "class", "--learner", "tp_mean_difference",
            "--method", "tp_bins", "--method-param", "fail=true", "--output", tmp_path / "m")
    assert_one_line_error(r, "calibrator 'tp_bins' failed to fit", f"{DIST} 1.0.0", "ValueError: asked to fail")
    assert not (tmp_path / "m").exists()
    r = cli("fit", "data/pima.parquet", "--target", "class", "--learner", "tp_mean_difference",
            "--learner-param", "shrink=2", "--method", "sigmoid", "--output", tmp_path / "m")
    assert_one_line_error(r, "shrink must be in [0, 1)")


def test_a_text_column_is_refused_before_fitting_a_dense_only_learner(thirdparty, cli, tmp_path):
    r = cli("fit", "data/newsgroups_sample.parquet", "--target", "class", "--text-column", "text",
            "--learner", "tp_mean_difference", "--method", "sigmoid", "--output", tmp_path / "m")
    assert_one_line_error(r, "learner 'tp_mean_difference' needs dense features", "--exclude", "accepts_sparse")


def test_a_model_saved_by_another_version_names_both_versions(thirdparty, binary_model, cli, tmp_path):
    _install(thirdparty["v2"])
    try:
        r = cli("score", binary_model, "data/pima.parquet", "--output", tmp_path / "s")
        assert_one_line_error(
            r, "learner 'tp_mean_difference'", f"saved by {DIST} 1.0.0 and {DIST} 2.0.0 is installed",
            "state format 1, this version reads format 2", f"pip install '{DIST}==1.0.0'",
        )
        assert "damaged" not in r.stderr
    finally:
        _install(thirdparty["v1"])
    assert cli("score", binary_model, "data/pima.parquet", "--output", tmp_path / "s").returncode == 0


def test_a_name_clash_is_listed_by_plugins_and_stops_other_commands_naming_both(thirdparty, cli, tmp_path):
    # The clashing package goes to a directory of its own, on PYTHONPATH for this test's commands only:
    # installed into the environment, it stopped the commands of tests running beside this one (xdist).
    clash = _package(thirdparty["root"], "calengine-thirdparty-clash", "ce_thirdparty_clash", CLASHING, "0.1.0")
    site = tmp_path / "site"
    _pip("install", "--no-deps", "--no-build-isolation", "--target", str(site), str(clash))
    env = {"PYTHONPATH": os.pathsep.join(p for p in [str(site), os.environ.get("PYTHONPATH")] if p)}
    r = cli("plugins", env=env)
    assert r.returncode == 0, r
    assert "calengine-thirdparty-clash:main  (calengine-thirdparty-clash 0.1.0)  CLASH" in r.stdout
    assert "gaussian_nb" in r.stdout and "tp_mean_difference" in r.stdout  # everything still listed
    assert cli("plugins", "--json", env=env).json()["clashes"]
    r = cli("fit", "data/pima.parquet", "--target", "class", "--output", tmp_path / "m", env=env)
    assert_one_line_error(r, "'tp_bins'", DIST, "calengine-thirdparty-clash", "uninstall one of them")
    assert "CLASH" not in cli("plugins").stdout  # the environment itself never held it


def test_a_reduction_calibrator_whose_merge_loses_pieces_is_refused_at_first_use(thirdparty, cli, tmp_path):
    """The package's tp_lossy_rate merges statistics wrongly (its own tests never ran the kit): the
    engine's probe refuses it in one line naming the distribution, before a model is published."""
    r = cli("fit", "data/pima.parquet", "--target", "class", "--learner", "tp_mean_difference",
            "--method", "tp_lossy_rate", "--output", tmp_path / "m")
    assert_one_line_error(r, "calibrator 'tp_lossy_rate'", f"{DIST} 1.0.0", "reduction protocol")
    assert not (tmp_path / "m").exists()


def test_a_bad_combiner_parameter_is_refused_by_fit_not_by_score(thirdparty, cli, tmp_path):
    r = cli("fit", "data/pendigits_test.parquet", "--target", "class", "--learner", "tp_mean_difference",
            "--method", "sigmoid", "--multiclass", "one_vs_all:tp_renormalize", "--combiner-param", "floor=abc",
            "--output", tmp_path / "m")
    assert_one_line_error(r, "combiner 'tp_renormalize' parameter 'floor' (in --combiner-param) takes a number")
    r = cli("fit", "data/pendigits_test.parquet", "--target", "class", "--learner", "tp_mean_difference",
            "--method", "sigmoid", "--multiclass", "one_vs_all:tp_renormalize", "--combiner-param", "floor=2.0",
            "--output", tmp_path / "m")
    # no check_params in the plugin: the fit-time probe of combine finds the value it cannot use
    assert_one_line_error(r, "combiner 'tp_renormalize' cannot combine with --combiner-param floor=2.0")
    assert not (tmp_path / "m").exists()
