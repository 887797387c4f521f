"""Writing an export: the exported file (or MLflow directory) and, beside it, ``<PATH>.manifest.json``.

The manifest names the format, the source model's ``content_hash`` (from its own manifest, which
:func:`calengine.load_model` has checked against every file of the model) and, for SQL and ONNX, the
SHA-256 of the exported bytes, so a scored table can be traced back to the model that scored it.  SQL, ONNX and their
manifests are pure functions of the model and the options (no time, no paths); an MLflow directory is
too, except for what MLflow stamps into ``MLmodel`` (see :mod:`.mlflow`).  Everything is written under
a temporary name and renamed, so a failed export leaves nothing half-written; a disk that refuses the
write (read-only, full) is one line, and the clean-up after it never raises in its place.

``overwrite`` replaces only what calengine's own export wrote, as ``fit --overwrite`` replaces only a
model directory: a SQL or ONNX file must be a regular file whose bytes are the ones its manifest's
``sha256`` names, an MLflow directory a directory whose ``MLmodel`` carries the ``calengine`` flavor;
anything else at the path -- a device, a FIFO, a symbolic link, a directory, a file of other bytes,
a manifest that is not an export's -- is refused in one line and left as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..errors import DataError, ParameterError

FORMATS = ("sql", "onnx", "mlflow")
MANIFEST_SUFFIX = ".manifest.json"


def export_model(model_dir, fmt: str, output, *, dialect: str = "duckdb", table: str = "input",
                 trust=(), overwrite: bool = False, sets: bool = False) -> Path:
    """Export the model saved at ``model_dir`` as ``fmt`` to ``output``; returns the manifest's path.
    ``sets``: also the conformal layer's prediction sets (sql and onnx; :mod:`.conformal`).

    ``sql`` and ``onnx`` write one file; ``mlflow`` writes an MLflow model directory (:mod:`.mlflow`), staged under a
    temporary name beside ``output`` and renamed.  The model is loaded with :func:`calengine.load_model`
    only (model files are untrusted)."""
    from ..version import __version__
    from ..model.artifact import load_model, read_manifest

    if fmt not in FORMATS:
        raise ParameterError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    from ..parquet.storage import local_output

    out = Path(local_output(output))
    side = out.with_name(out.name + MANIFEST_SUFFIX)
    taken = os.path.lexists(out) or os.path.lexists(side)
    if not overwrite and taken:
        raise DataError(f"'{out}' already exists; choose another --output or pass --overwrite")
    if not out.parent.is_dir():
        raise DataError(f"the directory of --output '{out}' does not exist; create it first")
    if taken:
        _check_replaceable(out, side, fmt)
    model = load_model(model_dir, trust=tuple(trust))
    if sets:
        if fmt == "mlflow":
            raise ParameterError("--sets applies to --format sql and onnx; an MLflow model scores probabilities (score"
                                 " the sets with calengine score --sets)")
        from .conformal import check_sets_exportable

        check_sets_exportable(model, fmt.upper())
    source_hash = read_manifest(model_dir)["content_hash"]
    manifest = {
        "format": fmt,
        "classes": [str(c) for c in model.labels.classes],
        "columns": [f"p_{c}" for c in model.labels.classes],
        "model_content_hash": source_hash,
        "calengine_version": __version__,
    }
    if sets:
        manifest["sets"] = {"score": model.conformal.score, "alpha": model.conformal.alpha,
                            "mondrian": model.conformal.mondrian,
                            "columns": [f"in_{c}" for c in model.labels.classes] + ["set_size"] if fmt == "sql"
                            else ["in_set", "set_size"]}
    existed = os.path.lexists(out)
    try:
        _write_export(model_dir, model, fmt, out, side, manifest, dialect, table, trust, sets)
    except OSError as exc:
        if not existed:  # this run's file without its manifest is not an export: take it back
            _remove(out)
        raise DataError(f"cannot write the export '{out}': {_write_error(exc)}; choose a location with free space"
                        " that this user can write") from exc
    return side


#: the largest export manifest or ``MLmodel`` read to decide whether ``--overwrite`` may replace a path
_PROOF_BYTES = 1 << 20


def _check_replaceable(out: Path, side: Path, fmt: str) -> None:
    """One DataError unless everything at ``out`` and ``side`` is a previous export's (module docstring)."""
    import stat

    def refuse(what: str) -> DataError:
        return DataError(f"'{out}' {what}, so --overwrite will not replace it; choose another --output (--overwrite"
                         " replaces only what calengine export wrote)")

    manifest = None
    if os.path.lexists(side):
        manifest = _export_manifest(side)
        if manifest is None:
            raise DataError(f"'{side}' is not the manifest of a calengine export, so --overwrite will not replace it;"
                            " choose another --output")
    if not os.path.lexists(out):
        return
    mode = os.lstat(out).st_mode
    if fmt == "mlflow":
        if not stat.S_ISDIR(mode) or not _calengine_mlflow(out):
            raise refuse("exists and is not an MLflow model calengine exported")
        return
    if stat.S_ISDIR(mode):
        raise refuse("is a directory")
    if not stat.S_ISREG(mode):
        raise refuse("is not a regular file (a device, a FIFO, a socket or a symbolic link)")
    if manifest is None or not isinstance(manifest.get("sha256"), str):
        raise refuse("has no export manifest beside it that names its bytes")
    if _file_sha256(out) != manifest["sha256"]:
        raise refuse("is not the file its export manifest describes (it was changed since)")


def _export_manifest(side: Path) -> dict | None:
    """The export manifest at ``side`` if it is one (a regular file of JSON naming a format and a model
    content hash), else None."""
    import stat

    try:
        st = os.lstat(side)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _PROOF_BYTES:
            return None
        doc = json.loads(side.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("format") not in FORMATS or not isinstance(doc.get("model_content_hash"), str):
        return None
    return doc


def _calengine_mlflow(out: Path) -> bool:
    """Whether the directory ``out`` is an MLflow model with the calengine flavor (its ``MLmodel``)."""
    import stat

    import yaml

    mlmodel = out / "MLmodel"
    try:
        st = os.lstat(mlmodel)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _PROOF_BYTES:
            return False
        doc = yaml.safe_load(mlmodel.read_bytes())
    except (OSError, ValueError, yaml.YAMLError, RecursionError):
        return False
    flavors = doc.get("flavors") if isinstance(doc, dict) else None
    return isinstance(flavors, dict) and "calengine" in flavors


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_export(model_dir, model, fmt: str, out: Path, side: Path, manifest: dict, dialect: str, table: str,
                  trust, sets: bool = False) -> None:
    """:func:`export_model`'s writes: the export, then its manifest.  A file export and its manifest are
    both written under temporary names before either is renamed into place, so a disk that fills up
    leaves the previous export and its manifest as they were (never one without the other)."""
    if fmt == "mlflow":
        manifest.update(_write_mlflow(model_dir, out, trust))
        _write_atomic(side, _manifest_bytes(manifest))
        return
    if fmt == "sql":
        from .sql import Dialect, model_sql

        text = model_sql(model, dialect=dialect, table=table)
        if sets:
            from .conformal import sets_sql

            text = sets_sql(Dialect(dialect), model, text)
        body = text.encode()
        manifest.update(dialect=dialect, table=table, sha256=hashlib.sha256(body).hexdigest())
    else:
        import onnx

        from .onnx import IR_VERSION, OPSET, model_onnx

        body = model_onnx(model, sets=sets)
        graph = onnx.load_from_string(body).graph
        manifest.update(inputs=[i.name for i in graph.input], opset=OPSET, ir_version=IR_VERSION,
                        outputs=[o.name for o in graph.output], sha256=hashlib.sha256(body).hexdigest())
    tmp_out, tmp_side = _tmp_name(out), _tmp_name(side)
    try:
        tmp_out.write_bytes(body)
        tmp_side.write_bytes(_manifest_bytes(manifest))
        os.replace(tmp_out, out)
        os.replace(tmp_side, side)
    finally:
        _remove(tmp_out)
        _remove(tmp_side)


def _manifest_bytes(manifest: dict) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def _write_error(exc: OSError) -> str:
    """What the system said: the errno's meaning, or for a tree copy that failed (``shutil.Error``, which
    MLflow's save raises with one ``(source, destination, reason)`` per file) the first file's reason."""
    import shutil

    from ..parquet.data import os_error_meaning

    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        import re

        reason = str(exc.args[0][0][-1])  # "[Errno 28] No space left on device: 'src' -> 'dst'"
        code = re.match(r"\[Errno (\d+)\]", reason)
        if code:
            return os_error_meaning(OSError(int(code.group(1)), reason))
        return " ".join(reason.split())[:300]
    return os_error_meaning(exc)


def _remove(path: Path) -> None:
    """Best-effort removal of what this export wrote: never raises (a read-only file system refuses the
    unlink of a file it never let us create, and that must not replace the error being reported)."""
    import shutil

    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            path.unlink()
    except OSError:
        pass


def _write_mlflow(model_dir, out: Path, trust) -> dict:
    """The MLflow model directory ``out``, replaced only once the new one is complete."""
    from .mlflow import save_model

    staged = out.with_name(f".{out.name}.tmp{os.getpid()}")
    old = out.with_name(f".{out.name}.old{os.getpid()}")
    _remove(staged)
    try:
        conf = save_model(model_dir, staged, trust=trust)
        if out.exists():
            os.replace(out, old)
        os.replace(staged, out)
    finally:
        _remove(staged)
        _remove(old)
    requirements = (out / "requirements.txt").read_text().split()
    return {"requirements": requirements, "mlflow_data": conf["data"]}


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = _tmp_name(path)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        _remove(tmp)
