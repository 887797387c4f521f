"""``calengine/__init__.py``: the old import paths of the modules that moved into wings (issue 39) keep
working for one release, each with a DeprecationWarning naming its new path."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import calengine


@pytest.mark.parametrize("old", sorted(calengine._MOVED))
def test_an_old_path_still_imports_and_says_where_the_module_went(old):
    code = (
        "import importlib, warnings, sys\n"
        "warnings.simplefilter('error', DeprecationWarning)\n"
        f"try:\n    importlib.import_module({old!r})\n"
        "except DeprecationWarning as e:\n    print(e)\nelse:\n    sys.exit('no warning')\n"
    )
    r = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    new = calengine._MOVED[old]
    for name in (new if isinstance(new, tuple) else (new,)):
        assert name in r.stdout, r.stdout


def test_the_old_path_is_the_new_module_and_the_new_module_keeps_its_name():
    sys.modules.pop("calengine.booster_checks", None)  # another test of this process may have imported it
    with pytest.warns(DeprecationWarning):
        old = importlib.import_module("calengine.booster_checks")
    import calengine.boosters.checks as new

    assert old is new and new.__spec__.name == "calengine.boosters.checks" and new.__name__ == new.__spec__.name


def test_the_split_cluster_module_answers_with_the_names_of_its_three_parts():
    sys.modules.pop("calengine.cluster", None)
    with pytest.warns(DeprecationWarning):
        from calengine.cluster import TLSConfig, check_workers, dask_client
    from calengine.runtime import client, connection, versions

    assert (dask_client, TLSConfig, check_workers) == (client.dask_client, connection.TLSConfig, versions.check_workers)
    with pytest.raises(ImportError):
        from calengine.cluster import no_such_name  # noqa: F401


def test_a_name_that_never_moved_is_not_invented():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("calengine.no_such_module")
