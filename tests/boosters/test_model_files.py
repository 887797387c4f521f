"""The shared state helpers of plugins that store a library's own model file (xgboost, lightgbm),
tested without either library: the plugins only pass their installed version in."""

from __future__ import annotations

import pytest

from calengine.errors import ModelFormatError
from calengine.boosters.model_files import check_library_version, library_state, read_library_state, version_tuple


def test_version_tuple():
    assert version_tuple("2.1.4") == (2, 1, 4)
    assert version_tuple("4.6.0.99") == (4, 6, 0)
    assert version_tuple("nightly") == ()


@pytest.mark.parametrize("recorded, installed, ok", [
    ("2.1.0", "2.1.0", True), ("2.0.3", "2.1.0", True),   # same major, not newer: readable
    ("2.2.0", "2.1.0", False),                            # written by a newer release
    ("1.7.6", "2.1.0", False), ("3.0.0", "2.1.0", False),  # another major version
    ("", "2.1.0", False),                                 # unknown writer
])
def test_check_library_version(recorded, installed, ok):
    if ok:
        check_library_version(recorded, installed, "xgboost", "xgboost-cpu")
        return
    with pytest.raises(ModelFormatError) as info:
        check_library_version(recorded, installed, "xgboost", "xgboost-cpu")
    assert f"pip install 'xgboost-cpu=={recorded}'" in str(info.value)
    assert f"xgboost {installed} is installed" in str(info.value)


def test_state_round_trip_and_refusals():
    state = library_state("booster.txt", b"tree\n", 3, "lightgbm", "4.5.0")
    assert state == {"booster.txt": b"tree\n", "n_classes": 3, "library": "lightgbm", "library_version": "4.5.0"}
    assert read_library_state(state, "lightgbm", "booster.txt", "lightgbm", "4.6.0") == (b"tree\n", 3)
    with pytest.raises(ModelFormatError, match="holds no xgboost booster"):
        read_library_state(state, "xgboost", "booster.ubj", "xgboost", "2.1.0")
    with pytest.raises(ModelFormatError, match="lightgbm 4.5.0 and lightgbm 4.4.0"):
        read_library_state(state, "lightgbm", "booster.txt", "lightgbm", "4.4.0")
    with pytest.raises(ModelFormatError, match="class count"):
        read_library_state({**state, "n_classes": "x"}, "lightgbm", "booster.txt", "lightgbm", "4.6.0")


def test_the_plugins_use_it_and_import_without_their_library():
    import sys

    from cli_helpers import REPO

    from calengine.base import BoosterLearner

    for sub, mod, cls in (("xgboost", "calengine_xgboost", "XGBoost"), ("lightgbm", "calengine_lightgbm", "LightGBM")):
        sys.path.insert(0, str(REPO / "plugins" / sub))
        try:
            module = __import__(mod)
        finally:
            sys.path.pop(0)
        # both learners are BoosterLearners, whose state and version check are this module's
        assert issubclass(getattr(module, cls), BoosterLearner)
        with pytest.raises(ModelFormatError, match="99.0.0"):
            module.check_library_version("99.0.0", "1.0.0")
