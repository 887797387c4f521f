"""Learner state holding bytes (a library's own model format) is stored as a plain file in the model
directory and handed back as bytes; file names from a manifest never reach outside that directory."""

from __future__ import annotations

import numpy as np
import pytest

from calengine.artifact import _load_state, _save_state
from calengine.errors import ModelFormatError


def test_bytes_state_is_a_file_named_by_its_key_and_comes_back_as_bytes(tmp_path):
    blob = bytes(range(256)) * 3
    desc = _save_state({"booster.ubj": blob, "n_classes": 2, "w": np.arange(3.0)}, tmp_path, "learner_0")
    assert desc["files"] == {"booster.ubj": "learner_0.booster.ubj"}
    assert (tmp_path / "learner_0.booster.ubj").read_bytes() == blob
    state = _load_state(desc, tmp_path, frozenset())
    assert state["booster.ubj"] == blob and isinstance(state["booster.ubj"], bytes)
    assert state["n_classes"] == 2
    np.testing.assert_array_equal(state["w"], np.arange(3.0))


@pytest.mark.parametrize("name", ["../secret", "/etc/passwd", "a/b", ".hidden", "x..y", ""])
def test_file_names_outside_the_model_directory_are_refused(tmp_path, name):
    with pytest.raises(ModelFormatError, match="not a plain file name"):
        _load_state({"scalars": {}, "files": {"booster.ubj": name}}, tmp_path, frozenset())
    with pytest.raises(ModelFormatError, match="not a plain file name"):
        _load_state({"scalars": {}, "arrays": name}, tmp_path, frozenset())


def test_a_state_key_that_is_not_a_plain_file_name_is_refused_when_saving(tmp_path):
    with pytest.raises(ModelFormatError, match="not a plain file name"):
        _save_state({"../x": b"1"}, tmp_path, "learner_0")
    assert list(tmp_path.iterdir()) == []


def test_a_missing_file_is_a_model_format_error(tmp_path):
    with pytest.raises(ModelFormatError, match="damaged"):
        _load_state({"scalars": {}, "files": {"booster.ubj": "learner_0.booster.ubj"}}, tmp_path, frozenset())
