"""The conformal layer on disk (calengine/model/conformal.py): saved and loaded bit for bit, and every
edit an attacker with a text editor could make -- with every hash resealed -- refused in one line
before a row is scored."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pandas as pd
import pytest

import calengine
from calengine.errors import ModelFormatError
from calengine.model.artifact import load_model, save_model
from model_tamper import copy_model, load_manifest, write_manifest

DATA = __import__("pathlib").Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("layer")
    model = calengine.fit_table(str(DATA / "pendigits_train.parquet"), "class", learner="gaussian_nb", cv=3)
    cal = pd.read_parquet(DATA / "pendigits_test.parquet")
    cal["hand"] = np.where(cal["x1"] > 50, "right", "left")
    cal["w"] = np.where(cal["hand"] == "right", 2.0, 0.5)
    out = {}
    for name, kw in {"lac": {}, "raps": dict(score="raps", mondrian="class"),
                     "seg": dict(score="aps", mondrian="hand", weight="w")}.items():
        m = calengine.conformalize(model, cal, target="class", alpha=0.1, **kw)
        save_model(m, root / name)
        out[name] = (root / name, m)
    return root, out, cal


@pytest.mark.parametrize("name", ["lac", "raps", "seg"])
def test_the_layer_loads_as_it_was_saved(saved, name):
    _, out, cal = saved
    path, model = out[name]
    loaded = load_model(path)
    a, b = model.conformal, loaded.conformal
    assert a.to_json() == b.to_json()
    for key, arr in a.arrays().items():
        assert np.array_equal(arr, b.arrays()[key], equal_nan=True), key
    X = loaded.encoder.transform(cal)
    P = loaded.predict_proba_features(X)
    assert np.array_equal(a.sets(P, X, cal), b.sets(P, X, cal))
    # and saving again gives the same bytes (no clock, no addresses)
    save_model(loaded, path.parent / f"{name}_again")
    first = load_manifest(path)
    again = load_manifest(path.parent / f"{name}_again")
    assert first["files"]["conformal.npz"] == again["files"]["conformal.npz"]


def _reseal_arrays(model, arrays: dict) -> None:
    from calengine.model.files import npz_bytes

    blob = npz_bytes(arrays)
    (model / "conformal.npz").write_bytes(blob)
    manifest = load_manifest(model)
    manifest["files"]["conformal.npz"] = {"sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob)}
    write_manifest(model, manifest)


def _arrays(model) -> dict:
    with np.load(io.BytesIO((model / "conformal.npz").read_bytes()), allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def test_an_edited_array_file_is_refused_by_its_hash(saved, tmp_path):
    _, out, _ = saved
    m = copy_model(out["lac"][0], tmp_path / "m")
    blob = bytearray((m / "conformal.npz").read_bytes())
    blob[-30] ^= 0xFF
    (m / "conformal.npz").write_bytes(bytes(blob))
    with pytest.raises(ModelFormatError, match="conformal.npz"):
        load_model(m)


@pytest.mark.parametrize("edit,text", [
    (lambda c: c.update(score="exec"), "unknown score"),
    (lambda c: c.update(alpha=1.5), "alpha is not a number in (0, 1)"),
    (lambda c: c.update(alpha=True), "alpha is not a number in (0, 1)"),
    (lambda c: c.update(mondrian="../etc"), "unknown mondrian kind"),
    (lambda c: c.update(groups=3), "groups where 1 are expected"),
    (lambda c: c.update(randomized=True), "has no randomised variant"),
    (lambda c: c.update(seed=-1), "randomized or seed is malformed"),
    (lambda c: c.update(arrays="../../secret.npz"), "conformal.npz"),
    (lambda c: c.update(weight=7), "'weight' is not a column name"),
])
def test_edited_manifest_fields_are_refused(saved, tmp_path, edit, text):
    _, out, _ = saved
    m = copy_model(out["lac"][0], tmp_path / "m")
    manifest = load_manifest(m)
    edit(manifest["conformal"])
    write_manifest(m, manifest)
    with pytest.raises(ModelFormatError) as info:
        load_model(m)
    assert text in str(info.value)


@pytest.mark.parametrize("which,edit,text", [
    ("lac", lambda a: a.update(thresholds=np.array([[np.nan]])), "thresholds are not finite"),
    ("lac", lambda a: a.update(thresholds=np.array([[0.5, 0.6]])), "thresholds are not numbers"),
    ("lac", lambda a: a.update(rows=np.array([0])), "calibration rows"),
    ("lac", lambda a: a.update(knot_offsets=np.array([0, 10**9])), "knots do not fit"),
    ("lac", lambda a: a.update(knot_values=a["knot_values"][::-1].copy()), "not increasing"),
    ("lac", lambda a: a.update(extra=np.zeros(2)), "its arrays are"),
    ("raps", lambda a: a.update(thresholds=a["thresholds"][:3]), "thresholds are not numbers"),
    ("seg", lambda a: a.update(levels=a["levels"][:, ::-1].copy()), "weight levels"),
    ("seg", lambda a: a.pop("levels"), "its arrays are"),
])
def test_edited_arrays_are_refused_even_resealed(saved, tmp_path, which, edit, text):
    _, out, _ = saved
    m = copy_model(out[which][0], tmp_path / "m")
    arrays = _arrays(m)
    edit(arrays)
    _reseal_arrays(m, arrays)
    with pytest.raises(ModelFormatError) as info:
        load_model(m)
    assert text in str(info.value) and "conformalize the model again" in str(info.value)


def test_segment_keys_are_checked(saved, tmp_path):
    _, out, _ = saved
    for bad in ([["left"], ["left"]], [["left", "x"]], [[1]], "left"):
        m = copy_model(out["seg"][0], tmp_path / f"m{len(str(bad))}")
        manifest = load_manifest(m)
        manifest["conformal"]["keys"] = bad
        write_manifest(m, manifest)
        with pytest.raises(ModelFormatError, match="conformal layer of this model is damaged"):
            load_model(m)


def test_a_lineage_of_unknown_mode_is_refused(saved, tmp_path):
    _, out, _ = saved
    m = copy_model(out["lac"][0], tmp_path / "m")
    manifest = load_manifest(m)
    manifest["lineage"] = {"mode": "conformal", "parent": {}, "data": {"paths": [], "rows": 1, "fingerprint": "x"},
                           "time": "t", "target": "class"}
    write_manifest(m, manifest)
    with pytest.raises(ModelFormatError, match="'conformal' is missing"):
        load_model(m)
