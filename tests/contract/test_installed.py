"""The suite runs against the installed distribution, never the checkout (see tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from cli_helpers import REPO

CHECKOUT_ALLOWED = os.environ.get("CALENGINE_TEST_CHECKOUT") == "1"


@pytest.mark.skipif(CHECKOUT_ALLOWED, reason="CALENGINE_TEST_CHECKOUT=1: an editable install is being tested")
def test_calengine_and_every_plugin_come_from_this_venvs_site_packages():
    import calengine
    import calengine_builtins
    import calengine_lexrank
    import calengine_lightgbm
    import calengine_xgboost

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    for module in (calengine, calengine_builtins, calengine_lexrank, calengine_xgboost, calengine_lightgbm):
        where = Path(module.__file__).resolve()
        assert site in where.parents, f"{module.__name__} imported from {where}, not from {site}"
        # The venv may live inside the checkout (.ci/run makes REPO/.venv): what must never be imported
        # is the source tree itself, calengine/ or plugins/*/ beside pyproject.toml.
        for source in (REPO / "calengine", REPO / "plugins"):
            assert not where.is_relative_to(source), f"{module.__name__} imported from the source tree {where}"
    assert str(REPO) not in sys.path and "" not in sys.path, sys.path


@pytest.mark.skipif(CHECKOUT_ALLOWED, reason="CALENGINE_TEST_CHECKOUT=1: an editable install is being tested")
def test_a_process_that_would_import_the_checkout_fails_at_once():
    """``python -c`` in the repository puts the checkout first on sys.path: what ``python -m pytest``
    did for every test before.  Under the suite's CALENGINE_REQUIRE_INSTALLED that import fails loudly,
    in this process's children as in itself; ``-P`` (as the CLI helpers run) imports the installed one."""
    code = "import calengine; print(calengine.__file__)"
    checkout = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert checkout.returncode != 0 and "not from the installed distribution" in checkout.stderr, checkout
    safe = subprocess.run([sys.executable, "-P", "-c", code], cwd=REPO, capture_output=True, text=True)
    assert safe.returncode == 0, safe.stderr
    assert Path(safe.stdout.strip()).resolve().is_relative_to(Path(sysconfig.get_paths()["purelib"]).resolve())
