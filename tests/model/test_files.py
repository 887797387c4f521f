"""Learner state holding bytes (a library's own model format) is stored as a plain file in the model
directory, listed with its hash like every other file, and handed back as bytes; file names from a
manifest never reach outside that directory."""

from __future__ import annotations

import numpy as np
import pytest

from calengine.model.artifact import load_state, MemberReader, save_state
from calengine.model.checks import _check_state
from calengine.model.files import FileWriter
from calengine.errors import ModelFormatError


def test_bytes_state_is_a_file_named_by_its_key_and_comes_back_as_bytes(tmp_path):
    blob = bytes(range(256)) * 3
    writer = FileWriter(tmp_path)
    desc = save_state({"booster.ubj": blob, "n_classes": 2, "w": np.arange(3.0)}, writer, "members/0", "learner_0")
    assert desc["files"] == {"booster.ubj": "learner_0.booster.ubj"}
    assert (tmp_path / "members/0/learner_0.booster.ubj").read_bytes() == blob
    assert "members/0/learner_0.booster.ubj" in writer.files  # hashed and size-checked on load
    state = load_state(desc, MemberReader(tmp_path, writer.files), "members/0", frozenset())
    assert state["booster.ubj"] == blob and isinstance(state["booster.ubj"], bytes)
    assert state["n_classes"] == 2
    np.testing.assert_array_equal(state["w"], np.arange(3.0))


@pytest.mark.parametrize("name", ["../secret", "/etc/passwd", "a/b", ".hidden", "x..y", ""])
def test_file_names_outside_the_model_directory_are_refused(name):
    desc = {"name": "x", "params": {}, "state": {"scalars": {}, "estimators": {}, "files": {"booster.ubj": name}}}
    with pytest.raises(ModelFormatError, match="not a plain file name"):
        _check_state(desc, "learner 0")


def test_a_state_key_that_is_not_a_plain_file_name_is_refused_when_saving(tmp_path):
    with pytest.raises(ModelFormatError, match="not a plain file name"):
        save_state({"../x": b"1"}, FileWriter(tmp_path), "members/0", "learner_0")
    assert list(tmp_path.iterdir()) == []


def test_a_file_not_in_the_files_table_or_tampered_is_a_model_format_error(tmp_path):
    writer = FileWriter(tmp_path)
    desc = save_state({"booster.ubj": b"abc"}, writer, "members/0", "learner_0")
    with pytest.raises(ModelFormatError, match="not listed"):
        load_state(desc, MemberReader(tmp_path, {}), "members/0", frozenset())
    (tmp_path / "members/0/learner_0.booster.ubj").write_bytes(b"abd")
    with pytest.raises(ModelFormatError):
        load_state(desc, MemberReader(tmp_path, writer.files), "members/0", frozenset())
