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

Every file is listed in the manifest's ``files`` table with its SHA-256 and size, and the manifest
carries ``content_hash``, the SHA-256 of its own canonical JSON without that field: loading checks
both, so a truncated or edited file is named as such.  The same inputs and seed give byte-identical
directories (no wall-clock time is stored; zip members have fixed names and timestamps, see
:mod:`calengine.model.files`).  ``dependencies`` records the versions of the libraries whose
objects the learner files hold (scikit-learn, numpy, scipy, skops).

File names in the manifest must be plain names of regular files inside the directory (no ``..``, no
absolute paths, no symlinks, no devices), below a size cap.  After loading, every tree structure is
validated and two synthetic rows are scored (:mod:`calengine.model.checks`), so a tampered model is
a one-line :class:`ModelFormatError`, never a crash inside compiled code.

Loading executes no code from the files: arrays load without pickle, scikit-learn estimators load with
skops restricted to :data:`calengine.model.allowlist.CORE_TRUSTED_TYPES` plus the types the learner's plugin
declares (``Learner.trusted_types``) plus those the user names explicitly (``trust``).  Classes are
looked up by registry name among the installed plugins, never imported from a path in the file (a
scikit-learn import path learner is resolved by the built-in ``sklearn`` learner, which only accepts
``sklearn.*`` classifiers).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..plugins import registry
from ..version import MODEL_FORMAT_VERSION, __version__
from ..parquet.data import LabelSpace, staged_directory
from .checks import check_estimator, check_manifest, probe_model
from .files import FileWriter, canonical_skops, check_zip_size, digest, load_npz, npz_bytes
from .files import check_plain_name, read_manifest_bytes, read_member_file
from ..errors import CalengineError, DataError, ModelFormatError, PluginError, UnknownPluginError
from ..plan.columns import encoder_from_json
from ..plugins.loading import PluginSet, get_plugins

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


def is_estimator(value: Any) -> bool:
    return hasattr(value, "get_params") and hasattr(value, "fit")


def save_state(state: dict[str, Any], writer: FileWriter, folder: str, stem: str) -> dict[str, Any]:
    """Split a plugin state into JSON scalars, one .npz of arrays and one .skops per estimator, written
    under ``folder`` (relative to the model directory) through ``writer``."""
    from .files import check_plain_name

    scalars, arrays, estimators, files = {}, {}, {}, {}
    for key, value in state.items():
        if isinstance(value, (bytes, bytearray)):
            fname = check_plain_name(f"{stem}.{key}", f"state '{key}' of {stem}")
            writer.write(f"{folder}/{fname}", bytes(value))
            files[key] = fname
        elif isinstance(value, np.ndarray):
            if value.dtype == object:
                raise ModelFormatError(f"state '{key}' of {stem} is an object array; store numbers or strings")
            arrays[key] = value
        elif is_estimator(value):
            import skops.io as sio

            fname = f"{stem}.{key}.skops"
            writer.write(f"{folder}/{fname}", canonical_skops(sio.dumps(value)))
            estimators[key] = fname
        else:
            scalars[key] = _jsonable(value, f"state '{key}' of {stem}")
    desc: dict[str, Any] = {"scalars": scalars, "estimators": estimators}
    if files:
        desc["files"] = files
    if arrays:
        fname = f"{stem}.npz"
        writer.write(f"{folder}/{fname}", npz_bytes(arrays))
        desc["arrays"] = fname
    return desc


class MemberReader:
    """Reads the files a manifest names, relative to one member folder, with every check applied."""

    def __init__(self, root: Path, files: dict[str, Any]):
        self.root = root
        self.files = files

    def blob(self, folder: str, name: str) -> tuple[bytes, str]:
        rel = f"{folder}/{name}"
        return read_member_file(self.root, rel, self.files), str(self.root / rel)

    def arrays(self, folder: str, name: str) -> dict[str, np.ndarray]:
        blob, where = self.blob(folder, name)
        return load_npz(blob, where)


def load_state(desc: dict[str, Any], reader: MemberReader, folder: str, trusted: frozenset[str],
               trust_written: bool = False) -> dict[str, Any]:
    state: dict[str, Any] = dict(desc.get("scalars", {}))
    if "arrays" in desc:
        state.update(reader.arrays(folder, desc["arrays"]))
    for key, fname in desc.get("estimators", {}).items():
        blob, where = reader.blob(folder, fname)
        state[key] = _load_skops(blob, where, trusted, trust_written)
        check_estimator(state[key], f"'{where}'")
    for key, fname in desc.get("files", {}).items():
        state[key], _ = reader.blob(folder, fname)  # checked against the files table like every file
    return state


def _load_skops(blob: bytes, where: str, trusted: frozenset[str], trust_written: bool = False):
    import skops.io as sio

    check_zip_size(blob, where)
    try:
        found = set(sio.get_untrusted_types(data=blob))
    except Exception as exc:  # noqa: BLE001 - damaged file
        raise ModelFormatError(f"cannot read '{where}' ({_first_line(exc)}); the model directory is damaged, fit it again") from None
    refused = [] if trust_written else sorted(found - trusted)
    if refused:
        raise ModelFormatError(
            f"'{where}' contains types outside calengine's allowlist: {', '.join(refused)}; if you trust"
            " this file, pass --trust-type for each (Python: load_model(..., trust=[...]))"
        )
    try:
        return sio.loads(blob, trusted=sorted(found))
    except Exception as exc:  # noqa: BLE001 - a type-correct but inconsistent dump
        raise ModelFormatError(f"cannot load '{where}' ({_first_line(exc)}); the model directory is damaged, fit it again") from None


def _check_finite_arrays(state: dict[str, Any], where: str) -> None:
    """Calibrator state is plain arrays calengine controls: floats must be finite (Calibrator contract)."""
    for key, value in state.items():
        if isinstance(value, np.ndarray) and value.dtype.kind in "fc" and not np.all(np.isfinite(value)):
            raise ModelFormatError(
                f"array '{key}' of {where} holds NaN or infinity; the model directory is damaged or was"
                " tampered with, fit the model again"
            )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0][:200] if text else type(exc).__name__)


def content_hash(manifest: dict[str, Any]) -> str:
    """SHA-256 of the manifest's canonical JSON without its ``content_hash`` field."""
    body = {k: v for k, v in manifest.items() if k != "content_hash"}
    return digest(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def _dependencies() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("scikit-learn", "numpy", "scipy", "skops"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = ""
    return out


# ---------------------------------------------------------------------------------------------- save


def _origin(plugins: PluginSet, kind: str, name: str, obj=None) -> dict[str, str]:
    """Where the class of ``obj`` (registered as ``name``) comes from.  Loading rebuilds objects by
    registry name only, so an object whose class no plugin registers under that name would give a
    model that can never be loaded: refused here, before anything is written."""
    registered = plugins.classes[kind].get(name)
    if obj is not None and registered is not type(obj):
        cls = type(obj)
        got = f"{cls.__module__}.{cls.__qualname__}"
        where = (
            f"'{name}' is registered to {registered.__module__}.{registered.__qualname__}"
            if registered is not None else f"no installed plugin registers the name '{name}'"
        )
        raise PluginError(
            f"cannot save a model holding {kind[:-1]} {got}: {where}, and loading finds classes by"
            f" registered name only, so the model could never be loaded; register the class in a plugin"
            f" (an entry point in group 'calengine' whose register_{kind} hook registers it, see the"
            " README's 'Writing a plugin'), install it, and fit again"
        )
    try:
        o = plugins.origin(kind, name)
        return {"plugin": o.plugin, "distribution": o.distribution, "version": o.version}
    except KeyError:
        return {"plugin": "", "distribution": "", "version": ""}


def save_model(model, path: str | os.PathLike, plugins: PluginSet | None = None, overwrite: bool = False) -> Path:
    """Write ``model`` to the directory ``path`` atomically.

    ``path`` must not exist unless ``overwrite``: then an existing model directory there is replaced
    only after the new one is complete.  Before the rename that publishes it, the written directory is
    loaded as ``calengine score`` loads it (:func:`load_model`: every check of the manifest, the files,
    the arrays and the probe rows), so a model calengine would refuse is never published: the save is
    then one :class:`~calengine.errors.DataError` naming the loader's reason, and ``path`` is untouched.
    Types the learners' skops files hold are trusted for that check (they are this model's own, and a
    user who trusted them to fit trusts them to score with ``--trust-type``).
    """
    plugins = plugins or get_plugins()
    info = model.info
    used = _used_plugins(model, plugins)  # first: refuses a model that could never be loaded
    with staged_directory(path, replace=overwrite) as staging:
        writer = FileWriter(staging)
        members = []
        for i, member in enumerate(model.members):
            folder = f"members/{i}"
            (staging / folder).mkdir(parents=True)
            parts = member.parts()
            desc: dict[str, Any] = {"kind": member.kind, "meta": _jsonable(parts["meta"], "member metadata")}
            desc["learners"] = [
                {
                    "name": lr.name,
                    "params": _jsonable(lr.get_params(deep=False), f"parameters of learner '{lr.name}'"),
                    "state": save_state(lr.to_state(), writer, folder, f"learner_{j}"),
                }
                for j, lr in enumerate(parts["learners"])
            ]
            desc["calibrators"] = [
                {
                    "name": cal.name,
                    "params": _jsonable(cal.get_params(deep=False), f"parameters of calibrator '{cal.name}'"),
                    "state": save_state(cal.to_state(), writer, folder, f"calibrator_{b}"),
                }
                for b, cal in enumerate(parts["calibrators"])
            ]
            if parts["arrays"]:
                writer.write(f"{folder}/arrays.npz", npz_bytes(parts["arrays"]))
                desc["arrays"] = "arrays.npz"
            if parts.get("files"):  # a member's own files (MCGrad's boosters), hashed like every file
                for fname, blob in parts["files"].items():
                    writer.write(f"{folder}/{check_plain_name(fname, 'member file')}", bytes(blob))
                desc["files"] = sorted(parts["files"])
            members.append(desc)
        manifest = {
            "format": "calengine-model",
            "format_version": MODEL_FORMAT_VERSION,
            "calengine_version": __version__,
            "dependencies": _dependencies(),
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
            "files": dict(sorted(writer.files.items())),
        }
        if info.get("lineage") is not None:
            # only recalibrated models carry it, so every other model stays byte-identical to before
            manifest["lineage"] = _jsonable(info["lineage"], "model lineage")
        if model.class_rates is not None:
            # only models of class-sampled data carry it (see calengine.methods.sampling)
            from ..methods.sampling import sampling_json

            manifest["sampling"] = sampling_json(model.class_rates, info.get("negative_sampling"))
        if getattr(model, "conformal", None) is not None:
            # only conformalized models carry it (calengine.model.conformal): its arrays are hashed like every file
            from .conformal import ARRAYS_FILE

            writer.write(ARRAYS_FILE, npz_bytes(model.conformal.arrays()))
            manifest["files"] = dict(sorted(writer.files.items()))
            manifest["conformal"] = model.conformal.to_json()
        manifest["content_hash"] = content_hash(manifest)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=False))
        _check_publishable(staging, path, plugins)
    return Path(path)


def _check_publishable(staging: Path, path, plugins: PluginSet) -> None:
    """Load the staged model directory as :func:`load_model` would (see :func:`save_model`); one
    DataError with the loader's reason if it would be refused."""
    try:
        _load(staging, (), plugins, trust_written=True)
    except ModelFormatError as exc:
        reason = str(exc).split("; the model")[0].split("; fit the model")[0].replace(str(staging), str(path))
        raise DataError(
            f"the fitted model would not load ({reason}), so nothing was written to '{path}'; its inputs are too"
            " extreme for a finite fit (rescale the scores or weights) or this is a calengine bug: please report it"
        ) from exc


def _used_plugins(model, plugins: PluginSet) -> dict[str, dict[str, str]]:
    """{kind:name -> origin} for every plugin class the model needs at load time."""
    used: dict[str, dict[str, str]] = {}
    for m in model.members:
        parts = m.parts()
        for lr in parts["learners"]:
            used[f"learners:{lr.name}"] = _origin(plugins, "learners", lr.name, lr)
        for cal in parts["calibrators"]:
            used[f"calibrators:{cal.name}"] = _origin(plugins, "calibrators", cal.name, cal)
    if model.combiner is not None:
        used[f"combiners:{model.combiner.name}"] = _origin(plugins, "combiners", model.combiner.name, model.combiner)
    return used


# ---------------------------------------------------------------------------------------------- load


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """The checked manifest of the model directory ``path``: a calengine model of a compatible format
    whose content hash matches and whose structure :func:`check_manifest` accepts."""
    folder = Path(path)
    mf = folder / MANIFEST
    if not folder.is_dir() or not os.path.lexists(mf):
        raise ModelFormatError(
            f"'{folder}' is not a calengine model directory (no {MANIFEST}); give the --output of 'calengine fit'"
        )
    blob = read_manifest_bytes(folder, MANIFEST)
    try:
        manifest = json.loads(blob)
    except (ValueError, RecursionError) as exc:
        raise ModelFormatError(f"'{mf}' is not valid JSON ({_first_line(exc)}); the model directory is damaged, fit it again") from None
    if not isinstance(manifest, dict) or manifest.get("format") != "calengine-model":
        raise ModelFormatError(f"'{mf}' is not a calengine model manifest; give the --output of 'calengine fit'")
    theirs = str(manifest.get("format_version", "0"))
    if theirs.split(".")[0] != MODEL_FORMAT_VERSION.split(".")[0]:
        raise ModelFormatError(
            f"model format {theirs[:20]} (calengine {str(manifest.get('calengine_version'))[:20]}) is incompatible"
            f" with this calengine {__version__} (format {MODEL_FORMAT_VERSION}); refit the model with this version"
        )
    try:
        expected = content_hash(manifest)
    except (ValueError, TypeError, RecursionError):
        expected = None
    if manifest.get("content_hash") != expected:
        raise ModelFormatError(
            f"'{mf}' was modified after it was saved (its content hash does not match); fit the model again"
        )
    check_manifest(manifest)
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


class _restoring:
    """Context for rebuilding one plugin object from the manifest (its parameters, then ``from_state``).

    Whatever the plugin's code raises there becomes one :class:`ModelFormatError` naming the plugin and
    its distribution.  When the model was saved by another version of that distribution -- the usual
    reason a plugin cannot read its own state -- the message names both versions and the two fixes
    (install the saving version, or refit), instead of calling the directory damaged.  A plugin's own
    ``CalengineError`` passes unchanged when the versions agree (its message already says what to do).
    """

    def __init__(self, kind: str, name: str, manifest: dict, plugins: PluginSet) -> None:
        self.kind, self.name, self.manifest, self.plugins = kind, name, manifest, plugins

    def __enter__(self):
        return self

    def __exit__(self, etype, exc, tb):
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, (MemoryError, RecursionError)):
            return False
        saved = self.manifest.get("plugins", {}).get(f"{self.kind}:{self.name}", {}) or {}
        try:
            origin = self.plugins.origin(self.kind, self.name)
            dist, installed = origin.distribution, origin.version
        except KeyError:
            dist, installed = saved.get("distribution") or "its plugin", ""
        saved_version = saved.get("version") or ""
        what = f"{self.kind[:-1]} '{self.name}'"
        reason = f"{type(exc).__name__}: {_first_line(exc)}"
        if saved_version and installed and saved_version != installed:
            raise ModelFormatError(
                f"{what} of this model was saved by {dist} {saved_version} and {dist} {installed} is installed,"
                f" which cannot read it ({reason}); install the version that saved it (pip install"
                f" '{dist}=={saved_version}') or fit the model again"
            ) from None
        if isinstance(exc, CalengineError):
            return False
        raise ModelFormatError(
            f"{what} ({dist} {installed}) cannot load its state from this model ({reason}); the model"
            " directory is damaged or was not written by this plugin: fit it again"
        ) from None


def member_class(kind: str) -> type:
    """The member class stored under ``kind`` in a manifest (``Member.kind``, or a vote member)."""
    from .calibrated import Member

    if kind == Member.kind:
        return Member
    if kind == "mcgrad":  # fit --method mcgrad: a member plus MCGrad's rounds
        from .mcgrad_member import MCGradMember

        return MCGradMember
    if kind == "segmented":  # fit --by: a member plus per-segment calibrators
        from .segmented import SegmentedMember

        return SegmentedMember
    from .vote import REDUCTION_MEMBERS

    if kind in REDUCTION_MEMBERS:
        return REDUCTION_MEMBERS[kind]
    raise ModelFormatError(f"unknown member kind '{kind}' in the manifest; refit the model with this calengine")


def load_model(path: str | os.PathLike, trust: tuple[str, ...] | list[str] = (), plugins: PluginSet | None = None):
    """Load a model saved by :func:`save_model`, executing no code from the files and refusing, with one
    :class:`ModelFormatError`, anything damaged, tampered with or reaching outside the directory."""
    return _load(Path(path), tuple(trust), plugins or get_plugins())


def _load(folder: Path, trust: tuple[str, ...], plugins: PluginSet, trust_written: bool = False):
    """:func:`load_model`; ``trust_written``: trust every type the skops files hold (the check of a
    directory :func:`save_model` has just written, see there)."""
    manifest = read_manifest(folder)
    try:
        model = _build_model(folder, manifest, trust, plugins, trust_written)
    except CalengineError:
        raise
    except RecursionError:
        raise ModelFormatError(f"'{folder / MANIFEST}' nests too deeply; the model directory is damaged, fit it again") from None
    except MemoryError:
        raise ModelFormatError(f"the model '{folder}' needs more memory than it can justify; it is damaged, fit it again") from None
    except Exception as exc:  # noqa: BLE001 - any inconsistency between manifest and files is damage
        raise ModelFormatError(
            f"'{folder / MANIFEST}' does not describe a loadable model ({type(exc).__name__}: {_first_line(exc)});"
            " the model directory is damaged, fit it again"
        ) from None
    probe_model(model)
    return model


def _build_model(folder: Path, manifest: dict[str, Any], trust: tuple[str, ...], plugins: PluginSet,
                 trust_written: bool = False):
    from .allowlist import CORE_TRUSTED_TYPES
    from .calibrated import CalibratedModel

    reader = MemberReader(folder, manifest["files"])
    members = []
    for i, desc in enumerate(manifest["members"]):
        mfolder = f"members/{i}"
        learners = []
        for ld in desc["learners"]:
            cls = _plugin_class("learners", ld["name"], manifest, plugins)
            trusted = frozenset(CORE_TRUSTED_TYPES) | frozenset(cls.trusted_types) | frozenset(trust)
            state = load_state(ld["state"], reader, mfolder, trusted, trust_written)
            with _restoring("learners", ld["name"], manifest, plugins):
                learner = registry.make("learners", ld["name"], ld["params"], plugins)
                learners.append(learner.from_state(state))
        calibrators = []
        for cd in desc["calibrators"]:
            _plugin_class("calibrators", cd["name"], manifest, plugins)
            state = load_state(cd["state"], reader, mfolder, frozenset())
            _check_finite_arrays(state, f"calibrator '{cd['name']}' of member {i}")
            with _restoring("calibrators", cd["name"], manifest, plugins):
                cal = registry.make("calibrators", cd["name"], cd["params"], plugins)
                calibrators.append(cal.from_state(state))
        arrays = reader.arrays(mfolder, desc["arrays"]) if "arrays" in desc else {}
        extra = {}
        if "files" in desc:  # a member's own files, each read through the files table's checks
            extra["files"] = {str(n): reader.blob(mfolder, check_plain_name(n, "member file"))[0] for n in desc["files"]}
        members.append(member_class(desc["kind"]).from_parts(learners, calibrators, arrays, desc["meta"], **extra))
    combiner = None
    if manifest.get("combiner"):
        c = manifest["combiner"]
        _plugin_class("combiners", c["name"], manifest, plugins)
        with _restoring("combiners", c["name"], manifest, plugins):
            combiner = registry.make("combiners", c["name"], c["params"], plugins)
    features = manifest.get("features")
    if isinstance(features, dict) and features.get("kind") == "segments":  # fit --by: the encoder + segment keys
        from .segmented import SegmentEncoder

        encoder = SegmentEncoder.from_json(features)
    else:
        encoder = encoder_from_json(features)
    info = {
        "learner": manifest["learner"].get("name"),
        "learner_params": manifest["learner"]["params"],
        "method": manifest["method"].get("name"),
        "method_params": manifest["method"]["params"],
        "mode": manifest.get("mode"),
        "multiclass": manifest.get("multiclass"),
        "cv": manifest.get("cv"),
        "seed": manifest.get("seed"),
        "calibration_data": manifest.get("calibration_data", False),
        **(manifest.get("extra") or {}),
    }
    if manifest.get("lineage") is not None:
        info["lineage"] = manifest["lineage"]
    class_rates = None
    if manifest.get("sampling") is not None:
        from ..methods.sampling import check_sampling_json

        class_rates = check_sampling_json(manifest["sampling"], len(manifest["labels"]["classes"]))
        info["negative_sampling"] = manifest["sampling"].get("negative_sampling")
    conformal = None
    if manifest.get("conformal") is not None:
        from .conformal import ARRAYS_FILE, ConformalLayer

        blob = read_member_file(folder, ARRAYS_FILE, manifest["files"])
        conformal = ConformalLayer.from_parts(manifest["conformal"], load_npz(blob, str(folder / ARRAYS_FILE)),
                                              len(manifest["labels"]["classes"]))
    return CalibratedModel(
        conformal=conformal,
        encoder=encoder,
        labels=LabelSpace.from_json(manifest["labels"]),
        members=members,
        code_matrix=np.asarray(manifest["code_matrix"], dtype=np.int8),
        combiner=combiner,
        column_counts=np.asarray(manifest["column_counts"], dtype=np.int64),
        info=info,
        member_groups=list(manifest.get("member_groups") or []),
        combine_rule=manifest.get("combine"),
        class_rates=class_rates,
    )
