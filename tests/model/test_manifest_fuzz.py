"""Fuzzing the model loader: random JSON mutations of a real manifest (resealed, as an attacker would)
either load into a model or raise one ModelFormatError / CalengineError -- never another exception --
and never open a file outside the model directory."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_helpers import PIMA
from calengine.model.artifact import content_hash, load_model
from calengine.errors import CalengineError


_OPENED: list[str] = []
_RECORDING = threading.local()


def _audit(event: str, args) -> None:
    if event == "open" and getattr(_RECORDING, "on", False) and args and isinstance(args[0], (str, bytes)):
        path = args[0].decode(errors="replace") if isinstance(args[0], bytes) else args[0]
        _OPENED.append(os.path.abspath(path))


sys.addaudithook(_audit)  # audit hooks cannot be removed; this one records only while a test asks it to


@pytest.fixture(scope="module")
def fuzz_root(tmp_path_factory, cli):
    root = tmp_path_factory.mktemp("fuzz")
    model = root / "model"
    r = cli("fit", PIMA, "--target", "class", "--learner", "decision_tree", "--learner-param", "max_depth=3",
            "--method", "isotonic", "--cv", "2", "--seed", "0", "--output", model)
    assert r.returncode == 0, r
    outside = root / "outside"
    outside.mkdir()
    for f in (model / "members" / "0").iterdir():  # valid files an escaping name could reach
        shutil.copy(f, outside / f.name)
    return root


def _paths(node, prefix=()):
    """Every (path) to a value inside the JSON document, the root included."""
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def _names(outside: str):
    return st.sampled_from([
        "../outside/learner_0.npz", "../../outside/arrays.npz", f"{outside}/learner_0.npz", "/dev/zero",
        "/etc/passwd", "..", ".", "", "members/0/arrays.npz", "learner_0.npz", "arrays.npz",
        "calibrator_0.npz", "learner_0.estimator.skops", "manifest.json", "learner_0.npz/..",
    ])


def _values(outside: str):
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12), _names(outside),
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)),
        max_leaves=12,
    )


@st.composite
def mutations(draw, manifest: dict, outside: str):
    doc = json.loads(json.dumps(manifest))
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "delete", "name", "grow"]))
        if not path:
            doc = draw(_values(outside)) if action == "replace" else doc
            if not isinstance(doc, dict):
                break
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        last = path[-1]
        if action == "delete":
            del parent[last]
        elif action == "name":
            parent[last] = draw(_names(outside))
        elif action == "grow" and isinstance(parent[last], list):
            parent[last] = parent[last] * draw(st.integers(0, 3))
        else:
            parent[last] = draw(_values(outside))
    if isinstance(doc, dict) and draw(st.booleans()):
        doc["content_hash"] = content_hash(doc)
    return doc


def test_mutated_manifests_never_escape_or_crash(fuzz_root):
    source = fuzz_root / "model"
    manifest = json.loads((source / "manifest.json").read_text())
    outside = str(fuzz_root / "outside")
    work = Path(tempfile.mkdtemp(dir=fuzz_root))
    seen = {"loaded": 0, "refused": 0}

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(doc=mutations(manifest, outside))
    def check(doc):
        model = work / "model"
        if model.exists():
            shutil.rmtree(model)
        shutil.copytree(source, model)
        (model / "manifest.json").write_text(json.dumps(doc))
        _OPENED.clear()
        _RECORDING.on = True
        try:
            loaded = load_model(model)
        except CalengineError as exc:
            assert "\n" not in str(exc)
            seen["refused"] += 1
        else:
            P = loaded.predict_proba_features(np.zeros((3, 8)))
            assert np.all(np.isfinite(P)) and np.allclose(P.sum(axis=1), 1.0)
            seen["loaded"] += 1
        finally:
            _RECORDING.on = False
        model_root = str(model.resolve())
        escaped = [p for p in _OPENED if p.startswith(str(fuzz_root)) and not p.startswith(model_root)]
        assert not escaped, escaped
        assert not [p for p in _OPENED if p.startswith("/dev/") or p.startswith("/etc/")], _OPENED

    check()
    # the fuzzer reached both outcomes: it is not only producing manifests that fail the first check
    assert seen["loaded"] > 0 and seen["refused"] > 0, seen


def test_the_manifest_the_fuzzer_mutates_loads(fuzz_root):
    """The unmutated model loads (the baseline the fuzzer mutates is valid)."""
    model = load_model(fuzz_root / "model")
    assert model.n_classes == 2
