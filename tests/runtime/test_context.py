"""calengine.runtime.context: the run context is one frozen, picklable value."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from calengine.runtime.context import RunContext


def test_a_run_context_is_frozen_derived_with_changes_and_picklable():
    run = RunContext(client=None, seed=3)
    spilled = run.with_(spill_dir="/tmp/x")
    assert (spilled.spill_dir, spilled.seed, run.spill_dir) == ("/tmp/x", 3, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.seed = 4
    assert pickle.loads(pickle.dumps(spilled)) == spilled
