"""Writing an export: the exported file (or MLflow directory) and, beside it, ``<PATH>.manifest.json``.

The manifest names the format, the source model's ``content_hash`` (from its own manifest, which
:func:`calengine.load_model` has checked against every file of the model) and, for SQL and ONNX, the
SHA-256 of the exported bytes, so a scored table can be traced back to the model that scored it.  SQL, ONNX and their
manifests are pure functions of the model and the options (no time, no paths); an MLflow directory is
too, except for what MLflow stamps into ``MLmodel`` (see :mod:`.mlflow`).  Everything is written under
a temporary name and renamed, so a failed export leaves nothing half-written.
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
    if not overwrite and (out.exists() or side.exists()):
        raise DataError(f"'{out}' already exists; choose another --output or pass --overwrite")
    if not out.parent.is_dir():
        raise DataError(f"the directory of --output '{out}' does not exist; create it first")
    if fmt == "mlflow" and out.exists() and not (out / "MLmodel").is_file():
        raise DataError(f"'{out}' exists and is not an MLflow model, so --overwrite will not replace it;"
                        " choose another --output")
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
    existed = out.exists()
    try:
        _write_export(model_dir, model, fmt, out, side, manifest, dialect, table, trust, sets)
    except OSError as exc:
        if not existed:  # this run's file without its manifest is not an export: take it back
            _remove(out)
        raise DataError(f"cannot write the export '{out}': {_write_error(exc)}; choose a location with free space"
                        " that this user can write") from exc
    return side


def _write_export(model_dir, model, fmt: str, out: Path, side: Path, manifest: dict, dialect: str, table: str,
                  trust, sets: bool = False) -> None:
    """:func:`export_model`'s writes: the export, then its manifest."""
    if fmt == "sql":
        from .sql import Dialect, model_sql

        text = model_sql(model, dialect=dialect, table=table)
        if sets:
            from .conformal import sets_sql

            text = sets_sql(Dialect(dialect), model, text)
        body = text.encode()
        manifest.update(dialect=dialect, table=table, sha256=hashlib.sha256(body).hexdigest())
        _write_atomic(out, body)
    elif fmt == "onnx":
        import onnx

        from .onnx import IR_VERSION, OPSET, model_onnx

        body = model_onnx(model, sets=sets)
        graph = onnx.load_from_string(body).graph
        manifest.update(inputs=[i.name for i in graph.input], opset=OPSET, ir_version=IR_VERSION,
                        outputs=[o.name for o in graph.output], sha256=hashlib.sha256(body).hexdigest())
        _write_atomic(out, body)
    else:
        manifest.update(_write_mlflow(model_dir, out, trust))
    _write_atomic(side, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())


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
    import shutil

    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _write_mlflow(model_dir, out: Path, trust) -> dict:
    """The MLflow model directory ``out``, replaced only once the new one is complete."""
    import shutil

    from .mlflow import save_model

    staged = out.with_name(f".{out.name}.tmp{os.getpid()}")
    old = out.with_name(f".{out.name}.old{os.getpid()}")
    shutil.rmtree(staged, ignore_errors=True)
    try:
        conf = save_model(model_dir, staged, trust=trust)
        if out.exists():
            os.replace(out, old)
        os.replace(staged, out)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    requirements = (out / "requirements.txt").read_text().split()
    return {"requirements": requirements, "mlflow_data": conf["data"]}


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
