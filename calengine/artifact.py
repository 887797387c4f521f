"""Saving and loading models: a directory with a JSON manifest and array files, never pickle.

Layout::

    MODEL_DIR/
      manifest.json                 versions, names and parameters, feature schema, classes, seed, ...
      members/<i>/learner_<j>.npz   learner state arrays      (np.load(..., allow_pickle=False))
      members/<i>/learner_<j>.<key>.skops   scikit-learn estimators in the learner state (skops)
      members/<i>/learner_<j>.<key>          bytes in the learner state, as written (a library's own
                                            model format, e.g. ``booster.ubj``; read back as bytes)
      members/<i>/calibrator_<b>.npz        calibrator state arrays
      members/<i>/arrays.npz                member arrays (e.g. raw score ranges, Probing boundaries)

Loading executes no code from the files: arrays load without pickle, scikit-learn estimators load with
skops restricted to :data:`calengine.allowlist.CORE_TRUSTED_TYPES` plus the types the learner's plugin
declares (``Learner.trusted_types``) plus those the user names explicitly (``trust``).  Classes are
looked up by registry name among the installed plugins, never imported from a path in the file (a
scikit-learn import path learner is resolved by the built-in ``sklearn`` learner, which only accepts
``sklearn.*`` classifiers).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from . import registry
from .version import MODEL_FORMAT_VERSION, __version__
from .data import LabelSpace, staged_directory
from .errors import ModelFormatError, UnknownPluginError
from .features import FeatureEncoder
from .plugins import PluginSet, get_plugins

MANIFEST = "manifest.json"


# ---------------------------------------------------------------------------------------------- JSON


def _jsonable(value: Any, where: str) -> Any:
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, where) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v, where) for k, v in value.items()}
    if isinstance(value, np.ndarray) and value.ndim <= 2 and value.dtype.kind in "biuf":
        return value.tolist()
    raise ModelFormatError(
        f"{where} holds a {type(value).__name__}, which cannot be stored without pickle; "
        "use plain parameter values (numbers, strings, lists)"
    )


# ---------------------------------------------------------------------------------------------- state


def _is_estimator(value: Any) -> bool:
    return hasattr(value, "get_params") and hasattr(value, "fit")


def _save_state(state: dict[str, Any], folder: Path, stem: str) -> dict[str, Any]:
    """Split a plugin state into JSON scalars, one .npz of arrays and one .skops per estimator."""
    scalars, arrays, estimators, files = {}, {}, {}, {}
    for key, value in state.items():
        if isinstance(value, (bytes, bytearray)):
            fname = _plain_name(f"{stem}.{key}", f"state '{key}' of {stem}")
            (folder / fname).write_bytes(bytes(value))
            files[key] = fname
        elif isinstance(value, np.ndarray):
            if value.dtype == object:
                raise ModelFormatError(f"state '{key}' of {stem} is an object array; store numbers or strings")
            arrays[key] = value
        elif _is_estimator(value):
            import skops.io as sio

            fname = f"{stem}.{key}.skops"
            (folder / fname).write_bytes(sio.dumps(value))
            estimators[key] = fname
        else:
            scalars[key] = _jsonable(value, f"state '{key}' of {stem}")
    desc: dict[str, Any] = {"scalars": scalars, "estimators": estimators}
    if files:
        desc["files"] = files
    if arrays:
        fname = f"{stem}.npz"
        with open(folder / fname, "wb") as fh:
            np.savez(fh, **arrays)
        desc["arrays"] = fname
    return desc


def _plain_name(name: str, where: str) -> str:
    """``name`` if it is a plain file name (letters, digits, ``_ . -``; no separator, no leading dot)."""
    import re

    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name) or ".." in name:
        raise ModelFormatError(
            f"{where} names the file {name!r}, which is not a plain file name inside the model directory;"
            " the model directory is damaged or forged, fit it again"
        )
    return name


def _inside(folder: Path, name: str) -> Path:
    """The file ``name`` of a model folder; names from a manifest never reach outside the folder."""
    return folder / _plain_name(name, f"the manifest of '{folder}'")


def _load_arrays(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as exc:
        raise ModelFormatError(f"cannot read '{path}' ({exc}); the model directory is damaged, fit it again") from exc


def _load_state(desc: dict[str, Any], folder: Path, trusted: frozenset[str]) -> dict[str, Any]:
    state: dict[str, Any] = dict(desc.get("scalars", {}))
    if "arrays" in desc:
        state.update(_load_arrays(_inside(folder, desc["arrays"])))
    for key, fname in desc.get("estimators", {}).items():
        state[key] = _load_skops(_inside(folder, fname), trusted)
    for key, fname in desc.get("files", {}).items():
        try:
            state[key] = _inside(folder, fname).read_bytes()
        except OSError as exc:
            raise ModelFormatError(f"cannot read '{folder / fname}' ({exc}); the model directory is damaged, fit it again") from exc
    return state


def _load_skops(path: Path, trusted: frozenset[str]):
    import skops.io as sio

    try:
        blob = path.read_bytes()
        found = set(sio.get_untrusted_types(data=blob))
    except Exception as exc:  # noqa: BLE001 - damaged file
        raise ModelFormatError(f"cannot read '{path}' ({exc}); the model directory is damaged, fit it again") from exc
    refused = sorted(found - trusted)
    if refused:
        raise ModelFormatError(
            f"'{path}' contains types outside calengine's allowlist: {', '.join(refused)}; if you trust"
            " this file, pass --trust-type for each (Python: load_model(..., trust=[...]))"
        )
    return sio.loads(blob, trusted=sorted(found))


# ---------------------------------------------------------------------------------------------- save


def _origin(plugins: PluginSet, kind: str, name: str) -> dict[str, str]:
    try:
        o = plugins.origin(kind, name)
        return {"plugin": o.plugin, "distribution": o.distribution, "version": o.version}
    except KeyError:
        return {"plugin": "", "distribution": "", "version": ""}


def save_model(model, path: str | os.PathLike, plugins: PluginSet | None = None, overwrite: bool = False) -> Path:
    """Write ``model`` to the directory ``path`` atomically.

    ``path`` must not exist unless ``overwrite``: then an existing model directory there is replaced
    only after the new one is complete.
    """
    plugins = plugins or get_plugins()
    info = model.info
    with staged_directory(path, replace=overwrite) as staging:
        members = []
        for i, member in enumerate(model.members):
            folder = staging / "members" / str(i)
            folder.mkdir(parents=True)
            parts = member.parts()
            desc: dict[str, Any] = {"kind": member.kind, "meta": _jsonable(parts["meta"], "member metadata")}
            desc["learners"] = [
                {
                    "name": lr.name,
                    "params": _jsonable(lr.get_params(deep=False), f"parameters of learner '{lr.name}'"),
                    "state": _save_state(lr.to_state(), folder, f"learner_{j}"),
                }
                for j, lr in enumerate(parts["learners"])
            ]
            desc["calibrators"] = [
                {
                    "name": cal.name,
                    "params": _jsonable(cal.get_params(deep=False), f"parameters of calibrator '{cal.name}'"),
                    "state": _save_state(cal.to_state(), folder, f"calibrator_{b}"),
                }
                for b, cal in enumerate(parts["calibrators"])
            ]
            if parts["arrays"]:
                with open(folder / "arrays.npz", "wb") as fh:
                    np.savez(fh, **parts["arrays"])
                desc["arrays"] = "arrays.npz"
            members.append(desc)
        used = _used_plugins(model, plugins)
        manifest = {
            "format": "calengine-model",
            "format_version": MODEL_FORMAT_VERSION,
            "calengine_version": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "labels": model.labels.to_json(),
            "features": model.encoder.to_json() if model.encoder is not None else None,
            "learner": {"name": info.get("learner"), "params": _jsonable(info.get("learner_params", {}), "learner parameters")},
            "method": {"name": info.get("method"), "params": _jsonable(info.get("method_params", {}), "method parameters")},
            "combiner": (
                {"name": model.combiner.name, "params": _jsonable(model.combiner.get_params(deep=False), "combiner parameters")}
                if model.combiner is not None
                else None
            ),
            "mode": info.get("mode"),
            "multiclass": info.get("multiclass"),
            "cv": info.get("cv"),
            "seed": info.get("seed"),
            "calibration_data": info.get("calibration_data", False),
            "code_matrix": model.code_matrix.tolist(),
            "column_counts": np.asarray(model.column_counts).tolist(),
            "combine": model.combine_rule,
            "member_groups": list(model.member_groups),
            "plugins": used,
            "extra": _jsonable({k: v for k, v in info.items() if k.startswith("x_")}, "model metadata"),
            "members": members,
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=False))
    return Path(path)


def _used_plugins(model, plugins: PluginSet) -> dict[str, dict[str, str]]:
    """{kind:name -> origin} for every plugin class the model needs at load time."""
    used: dict[str, dict[str, str]] = {}
    for m in model.members:
        parts = m.parts()
        for lr in parts["learners"]:
            used[f"learners:{lr.name}"] = _origin(plugins, "learners", lr.name)
        for cal in parts["calibrators"]:
            used[f"calibrators:{cal.name}"] = _origin(plugins, "calibrators", cal.name)
    if model.combiner is not None:
        used[f"combiners:{model.combiner.name}"] = _origin(plugins, "combiners", model.combiner.name)
    return used


# ---------------------------------------------------------------------------------------------- load


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    folder = Path(path)
    mf = folder / MANIFEST
    if not mf.is_file():
        raise ModelFormatError(
            f"'{folder}' is not a calengine model directory (no {MANIFEST}); give the --output of 'calengine fit'"
        )
    try:
        manifest = json.loads(mf.read_text())
    except (OSError, ValueError) as exc:
        raise ModelFormatError(f"'{mf}' is not valid JSON ({exc}); the model directory is damaged, fit it again") from exc
    if manifest.get("format") != "calengine-model":
        raise ModelFormatError(f"'{mf}' is not a calengine model manifest; give the --output of 'calengine fit'")
    theirs = str(manifest.get("format_version", "0"))
    if theirs.split(".")[0] != MODEL_FORMAT_VERSION.split(".")[0]:
        raise ModelFormatError(
            f"model format {theirs} (calengine {manifest.get('calengine_version')}) is incompatible with this"
            f" calengine {__version__} (format {MODEL_FORMAT_VERSION}); refit the model with this version"
        )
    return manifest


def _plugin_class(kind: str, name: str, manifest: dict, plugins: PluginSet) -> type:
    try:
        return registry.lookup(kind, name, plugins)
    except UnknownPluginError:
        origin = manifest.get("plugins", {}).get(f"{kind}:{name}", {})
        dist = origin.get("distribution") or "the plugin that provides it"
        version = origin.get("version")
        pin = f"=={version}" if version and dist != "the plugin that provides it" else ""
        raise ModelFormatError(
            f"this model needs {kind[:-1]} '{name}' from distribution '{dist}', which is not installed;"
            f" install it (pip install '{dist}{pin}') and try again"
        ) from None


def member_class(kind: str) -> type:
    """The member class stored under ``kind`` in a manifest (``Member.kind``, or a vote member)."""
    from .model import Member
    from .reductions import REDUCTION_MEMBERS

    if kind == Member.kind:
        return Member
    if kind in REDUCTION_MEMBERS:
        return REDUCTION_MEMBERS[kind]
    raise ModelFormatError(f"unknown member kind '{kind}' in the manifest; refit the model with this calengine")


def load_model(path: str | os.PathLike, trust: tuple[str, ...] | list[str] = (), plugins: PluginSet | None = None):
    """Load a model saved by :func:`save_model`, executing no code from the files."""
    from .allowlist import CORE_TRUSTED_TYPES
    from .model import CalibratedModel

    plugins = plugins or get_plugins()
    folder = Path(path)
    manifest = read_manifest(folder)
    members = []
    try:
        for i, desc in enumerate(manifest["members"]):
            mfolder = folder / "members" / str(i)
            learners = []
            for ld in desc["learners"]:
                cls = _plugin_class("learners", ld["name"], manifest, plugins)
                trusted = frozenset(CORE_TRUSTED_TYPES) | frozenset(cls.trusted_types) | frozenset(trust)
                learner = registry.make("learners", ld["name"], ld["params"], plugins)
                learners.append(learner.from_state(_load_state(ld["state"], mfolder, trusted)))
            calibrators = []
            for cd in desc["calibrators"]:
                _plugin_class("calibrators", cd["name"], manifest, plugins)
                cal = registry.make("calibrators", cd["name"], cd["params"], plugins)
                calibrators.append(cal.from_state(_load_state(cd["state"], mfolder, frozenset())))
            arrays = _load_arrays(_inside(mfolder, desc["arrays"])) if "arrays" in desc else {}
            members.append(member_class(desc["kind"]).from_parts(learners, calibrators, arrays, desc["meta"]))
        combiner = None
        if manifest.get("combiner"):
            c = manifest["combiner"]
            _plugin_class("combiners", c["name"], manifest, plugins)
            combiner = registry.make("combiners", c["name"], c["params"], plugins)
        encoder = FeatureEncoder.from_json(manifest["features"]) if manifest.get("features") else None
        info = {
            "learner": manifest["learner"]["name"],
            "learner_params": manifest["learner"]["params"],
            "method": manifest["method"]["name"],
            "method_params": manifest["method"]["params"],
            "mode": manifest.get("mode"),
            "multiclass": manifest.get("multiclass"),
            "cv": manifest.get("cv"),
            "seed": manifest.get("seed"),
            "calibration_data": manifest.get("calibration_data", False),
            **manifest.get("extra", {}),
        }
        return CalibratedModel(
            encoder=encoder,
            labels=LabelSpace.from_json(manifest["labels"]),
            members=members,
            code_matrix=np.asarray(manifest["code_matrix"], dtype=np.int8),
            combiner=combiner,
            column_counts=np.asarray(manifest["column_counts"], dtype=np.int64),
            info=info,
            member_groups=list(manifest.get("member_groups") or []),
            combine_rule=manifest.get("combine"),
        )
    except (KeyError, TypeError) as exc:
        raise ModelFormatError(
            f"'{folder / MANIFEST}' lacks or mangles {exc}; the model directory is damaged, fit it again"
        ) from exc
