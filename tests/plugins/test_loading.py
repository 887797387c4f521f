"""Plugin discovery through real entry points: installed packages, broken ones, strict mode, duplicates."""

from __future__ import annotations

import json

import subprocess
import sys
import textwrap
import types

import pytest

from calengine import plugins as plugin_mod
from calengine.errors import PluginError, UnknownPluginError
from calengine.plugins import registry

from cli_helpers import assert_one_line_error

THROWAWAY_LEARNER = '''
"""A third-party learner plugin, as someone outside the project would write it from the README."""
import numpy as np
import calengine
from calengine.base import Learner


class MeanDifference(Learner):
    name = "mean_difference"
    accepts_sample_weight = True
    score_kind = "decision"

    def __init__(self, shrink=0.0):
        self.shrink = shrink

    def fit(self, X, y, sample_weight=None):
        w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, float)
        k = int(y.max()) + 1
        self.means_ = np.array([np.average(X[y == c], axis=0, weights=w[y == c]) for c in range(k)])
        return self

    def score(self, X):
        d = -((X[:, None, :] - self.means_[None]) ** 2).sum(axis=2) * (1 - self.shrink)
        return d[:, 1] - d[:, 0] if d.shape[1] == 2 else d

    def to_state(self):
        return {"means": self.means_}

    def from_state(self, state):
        self.means_ = state["means"]
        return self


@calengine.hookimpl
def register_learners(register):
    register(MeanDifference)
'''

BROKEN = '''
raise RuntimeError("this plugin is broken on purpose")
'''


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], check=True)


def _make_package(root, dist: str, module: str, source: str, entry_name: str):
    pkg = root / dist
    pkg.mkdir()
    (pkg / f"{module}.py").write_text(source)
    (pkg / "pyproject.toml").write_text(textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{dist}"
        version = "1.2.3"

        [project.entry-points.calengine]
        {entry_name} = "{module}"

        [tool.setuptools]
        py-modules = ["{module}"]
    """))
    return pkg


@pytest.fixture(scope="module")
def installed_plugins(tmp_path_factory):
    """A working and a broken plugin distribution, pip-installed into this environment for the module."""
    root = tmp_path_factory.mktemp("plugins")
    good = _make_package(root, "calengine-testplugin-good", "ce_testplugin_good", THROWAWAY_LEARNER, "meandiff")
    bad = _make_package(root, "calengine-testplugin-broken", "ce_testplugin_broken", BROKEN, "broken")
    _pip("install", "--no-deps", "--no-build-isolation", str(good), str(bad))
    plugin_mod.reset_plugin_cache()
    try:
        yield {"good": good, "broken": bad}
    finally:
        _pip("uninstall", "-y", "calengine-testplugin-good", "calengine-testplugin-broken")
        plugin_mod.reset_plugin_cache()


def test_builtins_are_discovered_through_entry_points():
    ps = plugin_mod.load_plugins(strict=False)
    dists = {r.distribution for r in ps.records if not r.error}
    assert "calengine-builtins" in dists
    assert ps.origin("learners", "decision_tree").distribution == "calengine-builtins"
    assert {"isotonic", "sigmoid", "binning", "rocch", "none", "beta", "temperature"} <= set(ps.classes["calibrators"])
    assert "normalize" in ps.classes["combiners"]


def test_installed_third_party_plugin_is_found_and_broken_one_is_reported(installed_plugins, cli, tmp_path):
    ps = plugin_mod.load_plugins(strict=False)
    assert "mean_difference" in ps.classes["learners"]
    assert ps.origin("learners", "mean_difference").distribution == "calengine-testplugin-good"
    assert ps.origin("learners", "mean_difference").version == "1.2.3"
    failed = {r.name: r for r in ps.failures}
    broken = failed["calengine-testplugin-broken:broken"]
    assert broken.distribution == "calengine-testplugin-broken" and broken.version == "1.2.3"
    assert "broken on purpose" in broken.error

    listing = cli("plugins", "--json").json()
    assert any(f["name"] == "calengine-testplugin-broken:broken" for f in listing["failures"])
    text = cli("plugins").stdout
    assert "FAILED" in text and "broken on purpose" in text and "mean_difference" in text

    # the rest keeps working, including the third-party learner end to end
    out = tmp_path / "m"
    r = cli("fit", "data/pima.parquet", "--target", "class", "--learner", "mean_difference",
            "--learner-param", "shrink=0.1", "--method", "sigmoid", "--output", out)
    assert r.returncode == 0, r
    # unscaled mean distances: a weak but real ranker on pima (AUC about 0.66)
    assert cli("evaluate", out, "data/pima.parquet", "--target", "class", "--json").json()["auc"] > 0.6

    # strict mode turns the failure into an error, by flag and by environment variable; the plugins
    # command still lists every plugin first (it is the one meant to diagnose them), then exits 2
    strict = cli("--strict-plugins", "plugins")
    assert_one_line_error(strict, "calengine-testplugin-broken", "failed to load")
    assert "FAILED" in strict.stdout and "broken on purpose" in strict.stdout and "mean_difference" in strict.stdout
    strict_json = cli("plugins", "--json", env={"CALENGINE_STRICT_PLUGINS": "1"})
    assert_one_line_error(strict_json, "calengine-testplugin-broken")
    assert any(f["name"] == "calengine-testplugin-broken:broken" for f in json.loads(strict_json.stdout)["failures"])
    assert_one_line_error(cli("--strict-plugins", "fit", "data/pima.parquet", "--target", "class", "--output",
                              tmp_path / "strict"), "calengine-testplugin-broken", "broken on purpose")
    assert not (tmp_path / "strict").exists()
    with pytest.raises(PluginError, match="broken on purpose"):
        plugin_mod.load_plugins(strict=True)


def test_model_needing_a_missing_plugin_names_the_distribution(installed_plugins, tmp_path, cli):
    out = tmp_path / "m"
    assert cli("fit", "data/pima.parquet", "--target", "class", "--learner", "mean_difference",
               "--method", "sigmoid", "--output", out).returncode == 0
    _pip("uninstall", "-y", "calengine-testplugin-good")
    try:
        r = cli("score", out, "data/pima.parquet", "--output", tmp_path / "s")
        assert_one_line_error(r, "mean_difference", "calengine-testplugin-good", "pip install")
    finally:
        _pip("install", "--no-deps", "--no-build-isolation", str(installed_plugins["good"]))


def _module(name: str, source: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    exec(compile(textwrap.dedent(source), name, "exec"), mod.__dict__)
    return mod


def test_duplicate_name_is_an_error_naming_both():
    src = """
    import calengine
    from calengine.base import Calibrator
    class Iso(Calibrator):
        name = "isotonic"
        def fit(self, scores, y, sample_weight=None, score_kind="decision"):
            return self
        def predict(self, scores):
            return scores
    @calengine.hookimpl
    def register_calibrators(register):
        register(Iso)
    """
    with pytest.raises(PluginError) as info:
        plugin_mod.load_plugins(strict=False, extra_modules=(_module("dup_plugin", src),))
    msg = str(info.value)
    assert "isotonic" in msg and "calengine-builtins" in msg and "dup_plugin" in msg


def test_misspelt_hook_and_bad_registration_are_recorded_not_fatal():
    misspelt = _module("misspelt_plugin", """
    import calengine
    @calengine.hookimpl
    def register_learner(register):
        pass
    """)
    not_a_learner = _module("wrong_type_plugin", """
    import calengine
    @calengine.hookimpl
    def register_learners(register):
        register(dict)
    """)
    ps = plugin_mod.load_plugins(strict=False, extra_modules=(misspelt, not_a_learner))
    errors = {r.name: r.error for r in ps.failures}
    assert "register_learner" in errors["misspelt_plugin"]
    assert "not a subclass" in errors["wrong_type_plugin"]
    assert "gaussian_nb" in ps.classes["learners"]  # everything else still loaded
    with pytest.raises(PluginError):
        plugin_mod.load_plugins(strict=True, extra_modules=(misspelt,))


def test_unknown_names_list_what_is_available():
    with pytest.raises(UnknownPluginError) as info:
        registry.make("combiners", "nosuch")
    assert "normalize" in str(info.value) and "nosuch" in str(info.value)
