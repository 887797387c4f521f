"""``calengine plugins NAME`` and misspelt names (issue 38 §7): methods the engine implements say where
they live instead of "no such plugin", and a misspelt learner, method, combiner or code matrix name gets
one "did you mean" suggestion, in the CLI and in Python errors."""

from __future__ import annotations

import pytest

from cli_helpers import PIMA, assert_one_line_error


@pytest.mark.parametrize("name", ["probing", "bagging", "mcgrad"])
def test_engine_methods_say_where_they_live(cli, name):
    r = cli("plugins", name)
    assert r.returncode == 0, r
    assert f"--method {name}" in r.stdout and "not a plugin" in r.stdout, r.stdout
    j = cli("plugins", name, "--json")
    assert j.returncode == 0 and j.json()["plugin"] is False and j.json()["kind"] == "method"


def test_engine_methods_listed_for_plugins_are_the_engines():
    from calengine.fit.training import ENGINE_METHODS
    from calengine.plugins.registry import ENGINE_METHOD_HOMES

    assert set(ENGINE_METHODS) | {"mcgrad"} == set(ENGINE_METHOD_HOMES)


@pytest.mark.parametrize("flag, wrong, right", [
    ("--learner", "gausian_nb", "gaussian_nb"),
    ("--method", "isotonc", "isotonic"),
    ("--method", "probng", "probing"),
    ("--multiclass", "all_pairs:coupld", "coupling"),
])
def test_a_misspelt_name_gets_one_suggestion(tmp_path, cli, flag, wrong, right):
    r = cli("fit", PIMA, "--target", "class", flag, wrong, "--output", tmp_path / "m")
    assert_one_line_error(r, f"did you mean '{right}'?")
    assert not (tmp_path / "m").exists()


def test_plugins_name_suggests_too(cli):
    assert_one_line_error(cli("plugins", "gausian_nb"), "did you mean 'gaussian_nb'?")


def test_python_errors_suggest():
    from calengine.errors import UnknownPluginError
    from calengine.plugins.registry import make_learner

    with pytest.raises(UnknownPluginError, match=r"did you mean 'gaussian_nb'\?"):
        make_learner("gausian_nb")
    with pytest.raises(UnknownPluginError) as info:
        make_learner("zzzzzz")
    assert "did you mean" not in str(info.value)  # nothing close: no guess


def test_a_misspelt_code_matrix_gets_one_suggestion():
    from calengine.errors import CodeMatrixError
    from calengine.methods.codematrix import make_matrix

    with pytest.raises(CodeMatrixError, match=r"unknown code matrix 'all_pair'; did you mean 'all_pairs'\?"):
        make_matrix("all_pair", 3)
