"""The bytes of a model directory: written deterministically, read only from inside the directory.

Writing: every file goes through :class:`FileWriter`, which records its SHA-256 and size for the
manifest's ``files`` table.  ``.npz`` files are written by :func:`npz_bytes` (mostly-zero arrays as
positions and values, large members deflated) and skops dumps are
rewritten by :func:`canonical_skops` so that the same fitted model always gives the same bytes: zip
members in a fixed order with a fixed timestamp, and skops' ``id()``-derived object ids and member
names renumbered in order of appearance.  (``np.savez`` and ``skops.io.dumps`` stamp the wall clock
into every zip member, and skops names members after memory addresses.)

Reading: :func:`read_member_file` accepts only a plain file name (no separators, no ``..``, not
absolute, not hidden) naming a regular file (not a symlink, device or directory; checked again on the
open descriptor) that resolves inside the model directory, is no larger than :data:`MAX_FILE_BYTES`, is listed in the manifest's ``files``
table and has the SHA-256 recorded there; otherwise it raises a one-line :class:`ModelFormatError`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelFormatError

#: the largest single file a model directory may hold (learner state of a kNN over many rows is the
#: big case); a larger file is refused before it is read.
MAX_FILE_BYTES = 2 * 1024**3
#: the largest manifest.json read.
MAX_MANIFEST_BYTES = 64 * 1024**2
#: the most a zip (.npz / .skops) may expand to when read, summed over its members.
MAX_UNPACKED_BYTES = 4 * 1024**3

_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}$")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def digest(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


# ---------------------------------------------------------------------------------------------- write


class FileWriter:
    """Writes files under ``root`` and records ``{relative path: {"sha256", "bytes"}}`` in ``files``."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.files: dict[str, dict[str, Any]] = {}

    def write(self, relpath: str, blob: bytes) -> None:
        target = self.root / relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob)
        self.files[relpath] = {"sha256": digest(blob), "bytes": len(blob)}


#: arrays of at least this many elements are candidates for sparse storage ...
SPARSE_MIN_SIZE = 1024
#: ... and are stored sparse when at most this fraction of their elements is non-zero (an index and a
#: value cost 12 bytes against 8 for a dense float64, so the gain starts well below 2/3).
SPARSE_MAX_DENSITY = 1 / 3
#: zip members of at least this many bytes are deflated; smaller ones stay stored (deflating a few
#: hundred bytes saves nothing and costs a zlib stream each).
DEFLATE_MIN_BYTES = 64 * 1024
#: suffixes of the three members that hold one sparse array ``key``: flat C-order positions of the
#: non-zero elements (ascending), their values, and the dense shape.
SPARSE_SUFFIXES = ("__sparse_index", "__sparse_value", "__sparse_shape")


def _sparse_parts(key: str, arr: np.ndarray) -> dict[str, np.ndarray] | None:
    """``arr`` as (positions, values, shape) when that is much smaller than the dense array, else None.

    Model state is often mostly zeros -- a text model's per-class counts over 2^18 hashed words, the
    scale of words a fold never saw -- and dense storage made a 20 Newsgroups model 421 MB.
    """
    if arr.size < SPARSE_MIN_SIZE or arr.dtype.kind not in "biuf":
        return None
    flat = arr.ravel(order="C")
    index = np.flatnonzero(flat)
    if index.size > SPARSE_MAX_DENSITY * flat.size:
        return None
    index = index.astype(np.int32 if flat.size < 2**31 else np.int64)
    return {
        key + SPARSE_SUFFIXES[0]: index,
        key + SPARSE_SUFFIXES[1]: flat[index],
        key + SPARSE_SUFFIXES[2]: np.asarray(arr.shape, dtype=np.int64),
    }


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An ``.npz`` readable by :func:`load_npz` (and ``np.load(..., allow_pickle=False)``), identical
    for identical arrays: mostly-zero arrays are stored as positions and values (see
    :func:`_sparse_parts`), members of 64 KiB or more are deflated (zlib level 6: the same bytes for
    the same zlib), every member has a fixed timestamp and the keys are written in sorted order."""
    members: dict[str, np.ndarray] = {}
    for key in arrays:
        if key.endswith(SPARSE_SUFFIXES):
            raise ModelFormatError(f"array name '{key}' ends with a suffix calengine reserves; rename that state key")
        arr = np.asarray(arrays[key])
        if arr.dtype == object:
            raise ModelFormatError(f"array '{key}' is an object array; store numbers or strings")
        members.update(_sparse_parts(key, arr) or {key: arr})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for key in sorted(members):
            member = io.BytesIO()
            np.lib.format.write_array(member, members[key], allow_pickle=False)
            data = member.getvalue()
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_TIME)
            info.external_attr = 0o644 << 16
            if len(data) >= DEFLATE_MIN_BYTES:
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, data, compresslevel=6)
            else:
                zf.writestr(info, data)
    return buf.getvalue()


def canonical_skops(blob: bytes) -> bytes:
    """``blob`` (a ``skops.io.dumps`` result) with object ids and member names renumbered in order of
    appearance and fixed zip timestamps, so equal estimators give equal bytes.

    skops uses ``__id__`` only to find objects shared within one dump, and member names only to find
    arrays, so a consistent renumbering loads to the same estimator.
    """
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        members = {info.filename: zf.read(info) for info in zf.infolist()}
    schema = json.loads(members.pop("schema.json"))
    ids: dict[Any, int] = {}
    names: dict[str, str] = {}

    def walk(node):
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                if key == "__id__" and isinstance(value, int):
                    out[key] = ids.setdefault(value, len(ids) + 1)
                elif key == "file" and isinstance(value, str) and value in members:
                    out[key] = names.setdefault(value, f"{len(names) + 1}{Path(value).suffix}")
                else:
                    out[key] = walk(value)
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    schema = walk(schema)
    unreferenced = set(members) - set(names)
    if unreferenced:  # a skops version that names members some other way: keep its bytes, stay loadable
        return blob
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        entries = [(new, members[old]) for old, new in names.items()]
        entries.append(("schema.json", json.dumps(schema, indent=2).encode()))
        for name, data in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------- read


def _regular_file(folder: Path, relpath: str, cap: int) -> Path:
    """``folder/relpath`` if it is a regular file (no symlink anywhere below ``folder``) inside it and at
    most ``cap`` bytes; else ModelFormatError."""
    path = folder / relpath
    probe = folder
    for part in Path(relpath).parts:
        probe = probe / part
        try:
            st = os.lstat(probe)
        except OSError:
            raise ModelFormatError(f"model file '{path}' is missing; the model directory is damaged, fit it again") from None
        if stat.S_ISLNK(st.st_mode):
            raise ModelFormatError(f"'{probe}' is a symbolic link; a model directory holds only regular files")
    if not stat.S_ISREG(st.st_mode):
        raise ModelFormatError(f"'{path}' is not a regular file; a model directory holds only regular files")
    if st.st_size > cap:
        raise ModelFormatError(f"'{path}' is {st.st_size} bytes, more than the {cap} a model file may hold")
    try:
        inside = path.resolve().is_relative_to(folder.resolve())
    except OSError:
        inside = False
    if not inside:
        raise ModelFormatError(f"'{path}' resolves outside the model directory '{folder}'")
    return path


def _read_regular(path: Path, cap: int) -> bytes:
    """Read ``path`` through a descriptor opened without following a final symlink and re-checked with
    fstat, so a file swapped for a symlink or a device after :func:`_regular_file` is still refused."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ModelFormatError(f"cannot open '{path}' ({exc.strerror}); a model directory holds only regular files") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            raise ModelFormatError(f"'{path}' changed while it was read; a model directory holds only regular files")
        # the file's size and one byte more (a file that grew since is caught by the caller's length and
        # hash checks), never ``cap``: Python allocates a read's whole size up front, and 2 GiB for each
        # small file failed under an address-space limit (ulimit -v) and read as damage
        return fh.read(st.st_size + 1)


def read_manifest_bytes(folder: Path, name: str) -> bytes:
    path = _regular_file(folder, name, MAX_MANIFEST_BYTES)
    return _read_regular(path, MAX_MANIFEST_BYTES)


def check_plain_name(name: Any, what: str) -> str:
    """``name`` if it is a plain file name (the only kind the manifest may give); else ModelFormatError."""
    if not isinstance(name, str) or not _PLAIN_NAME.match(name) or ".." in name:
        raise ModelFormatError(
            f"the manifest names {what} {json.dumps(name)[:80]}, which is not a plain file name inside the"
            " model directory; the model is damaged or was tampered with, fit it again"
        )
    return name


def read_member_file(folder: Path, relpath: str, files: dict[str, Any]) -> bytes:
    """The bytes of ``folder/relpath`` after the checks in the module docstring."""
    entry = files.get(relpath)
    if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
        raise ModelFormatError(
            f"'{relpath}' is not listed in the manifest's files table; the model is damaged, fit it again"
        )
    path = _regular_file(folder, relpath, MAX_FILE_BYTES)
    blob = _read_regular(path, MAX_FILE_BYTES)
    if len(blob) != entry.get("bytes") or digest(blob) != entry["sha256"]:
        raise ModelFormatError(
            f"'{path}' is not the file that was saved ({len(blob)} bytes, content hash differs from the"
            " manifest): it was truncated or modified; fit the model again"
        )
    return blob


def check_zip_size(blob: bytes, where: str) -> None:
    """Refuse a zip whose members would expand beyond :data:`MAX_UNPACKED_BYTES`."""
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as zf:
            total = sum(info.file_size for info in zf.infolist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ModelFormatError(f"cannot read '{where}' ({exc}); the model directory is damaged, fit it again") from None
    if total > MAX_UNPACKED_BYTES:
        raise ModelFormatError(f"'{where}' would expand to {total} bytes, more than a model file may hold")


def load_npz(blob: bytes, where: str) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` blob, never unpickling (an object array is refused); sparse arrays
    written by :func:`npz_bytes` come back dense, after checks that a tampered file cannot turn into
    an out-of-range write or an oversized allocation."""
    check_zip_size(blob, where)
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, MemoryError, zlib.error) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelFormatError(f"cannot read '{where}' ({reason}); the model directory is damaged, fit it again") from None
    for key, arr in arrays.items():
        if arr.dtype.kind not in "biufSUc?":
            raise ModelFormatError(f"array '{key}' in '{where}' has dtype {arr.dtype}; a model stores numbers or strings")
    for key in sorted({k[: -len(SPARSE_SUFFIXES[0])] for k in arrays if k.endswith(SPARSE_SUFFIXES[0])}):
        arrays[key] = _dense(key, [arrays.pop(key + s, None) for s in SPARSE_SUFFIXES], where)
    stray = [k for k in arrays if k.endswith(SPARSE_SUFFIXES)]
    if stray:
        raise ModelFormatError(f"array '{stray[0]}' in '{where}' is part of a sparse array whose other parts are missing; the model directory is damaged, fit it again")
    return arrays


def _dense(key: str, parts: list, where: str) -> np.ndarray:
    index, value, shape = parts

    def damaged(why: str) -> ModelFormatError:
        return ModelFormatError(f"sparse array '{key}' in '{where}' {why}; the model directory is damaged, fit it again")

    if value is None or shape is None:
        raise damaged("misses its values or shape")
    if shape.ndim != 1 or shape.dtype.kind not in "iu" or shape.size > 32 or np.any(shape < 0):
        raise damaged("has no valid shape")
    if index.ndim != 1 or index.dtype.kind not in "iu" or value.ndim != 1 or value.shape != index.shape:
        raise damaged("has positions and values that do not match")
    if value.dtype.kind not in "biuf":
        raise damaged(f"has values of dtype {value.dtype}")
    size = 1
    for n in shape.tolist():
        size *= int(n)
    if size * value.dtype.itemsize > MAX_UNPACKED_BYTES:
        raise damaged(f"would expand to more than the {MAX_UNPACKED_BYTES} bytes a model file may hold")
    if index.size and (index[0] < 0 or index[-1] >= size or np.any(np.diff(index) <= 0)):
        raise damaged("has positions out of range or out of order")
    dense = np.zeros(size, dtype=value.dtype)
    dense[index] = value
    return dense.reshape(tuple(int(n) for n in shape.tolist()))
