"""Where Parquet files live: local paths or fsspec URLs, behind one small set of functions.

A table is named by a local path (a file, a directory of partitions, or a glob) or by an fsspec URL
(``s3://bucket/table/``, ``gs://...``, ``abfs://...``, ``file:///abs/path``, ``memory://`` in tests;
remote schemes need their fsspec package, e.g. ``s3fs``).  The client lists files and reads footers
through these functions; tasks open the same strings on the workers.  Local paths are made absolute in
the client (a worker started in another directory must find them); URLs are already absolute and are
passed on unchanged, so every worker opens them with its own credentials.
"""

from __future__ import annotations

import os
import posixpath
import re
import uuid

from ..errors import DataError

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(text) -> bool:
    """True for ``scheme://...`` (a Windows drive letter ``C:\\`` is not a URL)."""
    return bool(_URL.match(os.fspath(text) if not isinstance(text, str) else text))


def local_output(target, option: str = "--output") -> str:
    """The local path an output names: ``file://`` URLs become their path, other URLs are refused.

    Outputs are published by renaming a finished staging directory (or file) onto the name the user
    gave, which is what makes them whole or absent; object stores have no atomic rename, and a URL
    handed to the local file system used to land in a folder named after the scheme (``./s3:/bucket``)
    while the command reported success.  So an output is a local (or mounted) path, and anything else
    is one line naming the way out.
    """
    from urllib.parse import unquote

    text = os.fspath(target)
    if not is_url(text):
        return text
    scheme, rest = text.split("://", 1)
    if scheme.lower() == "file":
        host, slash, path = rest.partition("/")
        if slash and host in ("", "localhost"):
            return unquote("/" + path)
        raise DataError(f"{option} '{text}' names a file on host '{host}'; give a local path (file:///abs/path)")
    raise DataError(
        f"{option} '{text}' is a {scheme}:// URL, and calengine publishes outputs by an atomic rename, which"
        " object stores do not have: write to a local or mounted path and copy it to the store afterwards"
        " (inputs may be URLs)"
    )


def absolute(path: str) -> str:
    """A local path made absolute; a URL unchanged."""
    return path if is_url(path) else os.path.abspath(path)


#: seconds a remote store may take to answer one request before the command gives up in one line
DEFAULT_IO_TIMEOUT = 60
IO_TIMEOUT_ENV = "CALENGINE_IO_TIMEOUT"


def io_timeout() -> float:
    """The remote-read timeout in seconds: ``CALENGINE_IO_TIMEOUT`` (set by ``--io-timeout``; a Dask
    worker started by this process inherits it), else :data:`DEFAULT_IO_TIMEOUT`."""
    raw = os.environ.get(IO_TIMEOUT_ENV, "").strip()
    if not raw:
        return float(DEFAULT_IO_TIMEOUT)
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86_400:
        raise DataError(f"{IO_TIMEOUT_ENV}={raw!r} must be a number of seconds between 1 and 86400")
    return value


def _driver_options(url: str) -> dict:
    """Timeouts and bounded retries for the drivers that take them, so a worker's read of a stalled
    store also ends (s3fs hands these to botocore: connect and read timeouts, three attempts)."""
    scheme = url.split("://", 1)[0].lower()
    if scheme in ("s3", "s3a"):
        t = io_timeout()
        return {"config_kwargs": {"connect_timeout": t, "read_timeout": t,
                                  "retries": {"max_attempts": 3, "mode": "standard"}}}
    return {}


def with_deadline(work, url: str, what: str):
    """``work()``, or one :class:`DataError` line if it has not finished within :func:`io_timeout`.

    A store that accepts a connection and never answers used to keep ``fit`` waiting with no message
    (past 150 s in the issue's test; for ever, for drivers without timeouts of their own).  The client's
    metadata calls (listing, footers) run here in a daemon thread, so a stalled one is abandoned, not
    waited for, and the process can still exit.
    """
    import threading

    limit = io_timeout()
    box: dict = {}

    def run():
        try:
            box["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="calengine-remote-io", daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        raise DataError(
            f"no answer from '{url}' within {limit:g} s while {what}; check the endpoint and the network, or"
            f" allow longer with --io-timeout SECONDS (or {IO_TIMEOUT_ENV})"
        )
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _filesystem(url: str):
    """(fsspec filesystem, path within it) for a URL; a one-line error when the scheme has no driver."""
    try:
        from fsspec.core import url_to_fs
    except ImportError as exc:  # fsspec comes with dask[dataframe]; kept for minimal installs
        raise DataError(f"reading '{url}' needs fsspec; pip install fsspec (or give a local path)") from exc
    try:
        return url_to_fs(url, **_driver_options(url))
    except (ImportError, ValueError) as exc:
        scheme = url.split("://", 1)[0]
        raise DataError(
            f"cannot open '{url}': no file system for '{scheme}://' ({_first_line(exc)}); install its fsspec"
            " driver (s3fs, gcsfs, adlfs, ...) or give a local path"
        ) from exc


def list_parquet_files(url: str) -> list[str]:
    """The Parquet files behind a URL (a file, a directory, or a glob), as full URLs, sorted; within
    :func:`io_timeout`."""
    return with_deadline(lambda: _list_parquet_files(url), url, "listing its files")


def _list_parquet_files(url: str) -> list[str]:
    fs, path = _filesystem(url)
    try:
        if any(ch in path for ch in "*?["):
            found = [p for p in fs.glob(path) if fs.isfile(p)]
            if not found:
                raise DataError(f"no files match '{url}'; check the pattern")
        elif fs.isdir(path):
            found = [
                p for p in fs.find(path)
                if not posixpath.basename(p).startswith((".", "_"))
                and posixpath.splitext(p)[1] in {".parquet", ".parq", ""}
            ]
            if not found:
                raise DataError(f"'{url}' holds no Parquet files; point DATA at a .parquet file or a dataset directory")
        elif fs.isfile(path):
            found = [path]
        else:
            raise DataError(f"'{url}' does not exist; give a Parquet file, a directory of Parquet files, or a glob")
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - every fsspec driver raises its own types
        raise DataError(f"cannot list '{url}' ({_first_line(exc)}); check the URL and credentials") from exc
    return sorted(fs.unstrip_protocol(p) for p in found)


def open_binary(path: str):
    """A readable binary file object for a local path or a URL (the caller closes it)."""
    if not is_url(path):
        return open(path, "rb")
    fs, inner = _filesystem(path)
    return fs.open(inner, "rb")


def parquet_file(path: str):
    """A :class:`pyarrow.parquet.ParquetFile` for a local path or a URL.

    Local files are opened by pyarrow itself (memory-mapped reads); a URL through fsspec.  The returned
    object owns the file: close it with ``.close()`` or use it in a ``with`` block.
    """
    import pyarrow.parquet as pq

    if not is_url(path):
        return pq.ParquetFile(path)
    return with_deadline(lambda: pq.ParquetFile(open_binary(path)), path, "reading its Parquet footer")


def relative_key(path: str, root: str) -> str:
    """``path`` relative to ``root`` (its base name without a root): a file's identity for seeding."""
    if not root:
        return posixpath.basename(path) if is_url(path) else os.path.basename(path)
    if is_url(path):
        return posixpath.relpath(path.split("://", 1)[1], root.split("://", 1)[1])
    return os.path.relpath(path, root)


def common_root(data: str, files: list[str]) -> str:
    """The directory file keys are relative to: DATA itself for a directory, else the files' common
    folder (empty for a single file)."""
    if is_url(data):
        fs, inner = _filesystem(data)
        if not any(ch in inner for ch in "*?[") and fs.isdir(inner):
            return fs.unstrip_protocol(inner).rstrip("/")  # a directory URL, normalised like the file URLs
    if files and is_url(files[0]):
        if len(files) <= 1:
            return ""
        scheme, _ = files[0].split("://", 1)
        inner = posixpath.commonpath([posixpath.dirname(f.split("://", 1)[1]) for f in files])
        return f"{scheme}://{inner}"
    if data and os.path.isdir(data):
        return os.path.abspath(data)
    if len(files) <= 1:
        return ""
    return os.path.commonpath([os.path.dirname(f) for f in files])


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__


#: the directory name pyarrow and Hive write for a missing partition value
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def hive_partition(path: str, root: str) -> tuple[tuple[str, str | None], ...]:
    """The ``key=value`` directories between ``root`` and the file ``path`` (Hive partitioning), raw
    text values URL-decoded (pyarrow escapes ``/``, ``=``, spaces ...), ``None`` for Hive's null.

    Only directories below ``root`` count, so a ``key=value`` name above the dataset is not a column.
    """
    from urllib.parse import unquote

    if not root:
        return ()
    rel = relative_key(path, root)
    parts = rel.replace(os.sep, "/").split("/")[:-1]
    out = []
    for part in parts:
        key, sep, value = part.partition("=")
        if sep and key and key not in dict(out):
            value = unquote(value)
            out.append((unquote(key), None if value == HIVE_NULL else value))
    return tuple(out)


def hive_columns(files: list[str], root: str | None) -> tuple[dict[str, tuple], dict[str, str]]:
    """Hive partition columns of ``files`` below ``root``: ({file: ((key, value), ...)}, {key: type}).

    A key's values are typed once for the whole table, as pyarrow's hive partitioning does: int64
    when every value is an integer, float64 when every value is a number, else string; so every
    fragment yields the same column type.
    """
    if root is None:
        root = common_root("", files)
    raw = {f: hive_partition(f, root) for f in files}
    values: dict[str, list] = {}
    for parts in raw.values():
        for key, value in parts:
            values.setdefault(key, []).append(value)
    types = {key: _hive_type([v for v in vals if v is not None]) for key, vals in values.items()}
    cast = {"int64": int, "double": float, "string": str}
    typed = {
        f: tuple((k, None if v is None else cast[types[k]](v)) for k, v in parts) for f, parts in raw.items()
    }
    return typed, types


def _hive_type(values: list[str]) -> str:
    def all_parse(kind) -> bool:
        try:
            for v in values:
                kind(v)
        except ValueError:
            return False
        return True

    if values and all_parse(int):
        return "int64"
    if values and all_parse(float):
        return "double"
    return "string"


def partition_frame(df, partition: tuple, columns, n_rows: int):
    """``df`` with the requested partition columns added as constants (a file's Hive keys)."""
    import numpy as np
    import pandas as pd

    wanted = [(k, v) for k, v in partition if k in columns and k not in df.columns]
    if not wanted:
        return df
    extra = {}
    for key, value in wanted:
        if value is None:
            extra[key] = pd.Series([None] * n_rows, dtype=object, index=df.index)
        elif isinstance(value, str):
            extra[key] = pd.Series([value] * n_rows, dtype=object, index=df.index)
        else:
            extra[key] = pd.Series(np.full(n_rows, value), index=df.index)
    out = pd.concat([df, pd.DataFrame(extra, index=df.index)], axis=1) if len(df.columns) else pd.DataFrame(extra, index=df.index)
    return out[[c for c in columns if c in out.columns]]


#: the file :func:`calengine.plan.memory.workers_share` writes its token to in a scratch directory
PROBE_NAME = "probe"


def sees_directory(directory: str, token: str) -> bool:
    """On a worker: whether ``directory`` is the driver's (its probe file holds ``token``) and this
    process can create a file in it, as every spilling task does; a missing, foreign or read-only
    directory answers False, never raises, so the fit keeps its scores in memory instead."""
    try:
        with open(os.path.join(directory, PROBE_NAME)) as fh:
            if fh.read() != token:
                return False
        path = os.path.join(directory, f"probe-{uuid.uuid4().hex}")
        with open(path, "x"):
            pass
        os.remove(path)
    except OSError:
        return False
    return True
