"""Parquet in and out, class labels, and deterministic folds.

DATA may be one Parquet file, a directory of Parquet partitions (hive-style directories included) or a
glob.  Training tables are read whole (each learner fit runs in one worker's memory); scoring and
evaluation walk the table one file at a time, so they scale with the number of files, not memory.
Output is written to a staging directory beside the target and renamed only when complete.
"""

from __future__ import annotations

import errno
import glob
import os
import shutil
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from .published import PUBLISHED, note_published  # noqa: F401  (re-exported)
from ..errors import DataError


def resolve_parquet_files(data: str | os.PathLike) -> list[str]:
    """The Parquet files behind DATA, sorted so partition order (and so results) are reproducible."""
    from .storage import is_url, list_parquet_files

    text = os.fspath(data)
    if is_url(text):
        files = list_parquet_files(text)
    elif any(ch in text for ch in "*?["):
        files = sorted(f for f in glob.glob(text, recursive=True) if os.path.isfile(f))
        if not files:
            raise DataError(f"no files match '{text}'; check the pattern (quote it so the shell leaves it alone)")
    elif os.path.isdir(text):
        files = sorted(
            str(p)
            for p in Path(text).rglob("*")
            if p.is_file() and not p.name.startswith((".", "_")) and p.suffix in {".parquet", ".parq", ""}
        )
        if not files:
            raise DataError(f"directory '{text}' holds no Parquet files; point DATA at a .parquet file or a dataset directory")
    elif os.path.isfile(text):
        files = [text]
    else:
        raise DataError(f"'{text}' does not exist; give a Parquet file, a directory of Parquet files, or a glob")
    for f in files:
        _check_parquet_magic(f)
    return files


def table_files(data, scratch: str, name: str = "table.parquet") -> tuple[list[str], list[str] | None]:
    """The Parquet files behind the ``data`` of a Python API call, and what a lineage records of them:
    a path (file, directory, glob or URL) or a list of paths -> their files and None; a pandas
    DataFrame -> written to ``scratch/name`` first (the caller keeps ``scratch`` while the files are
    read) and ``["<DataFrame>"]``."""
    if hasattr(data, "to_parquet"):
        path = os.path.join(scratch, name)
        data.to_parquet(path, index=False)
        return [path], ["<DataFrame>"]
    return [f for d in (data if isinstance(data, (list, tuple)) else [data]) for f in resolve_parquet_files(d)], None


def _check_parquet_magic(path: str) -> None:
    from .storage import open_binary

    try:
        with open_binary(path) as fh:
            head = fh.read(4)
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(size - 4, 0))
            tail = fh.read(4)
    except OSError as exc:
        raise DataError(f"cannot read '{path}': {exc.strerror}; check the path and its permissions") from exc
    if head == b"PAR1" and tail != b"PAR1":
        raise DataError(
            f"'{path}' is a truncated or damaged Parquet file (it has no footer); copy or write it again"
        )
    if head != b"PAR1" or tail != b"PAR1":
        raise DataError(
            f"'{path}' is not a Parquet file; convert it first (e.g. pandas.read_csv(...).to_parquet(...))"
        )


def parquet_columns(files: list[str], root: str | None = None) -> list[str]:
    """The data columns of the table (a pandas index stored as ``__index_level_0__`` is not data),
    then its Hive partition keys (``sex=F/...`` directories below ``root``; None: the files' common
    folder), which are columns like any other."""
    from .storage import hive_columns
    from .storage import parquet_file

    with parquet_file(files[0]) as pf:
        schema = pf.schema_arrow
    meta = schema.pandas_metadata or {}
    index_cols = {c for c in meta.get("index_columns", []) if isinstance(c, str)}
    names = [n for n in schema.names if n not in index_cols]
    partitions, _ = hive_columns(files, root)
    return names + [k for k, _ in partitions[files[0]] if k not in names]


def read_table(files: list[str], columns: list[str] | None = None, root: str | None = None):
    """Read the files into one pandas DataFrame (columns checked first, so a typo fails fast);
    Hive partition keys below ``root`` are columns too."""
    import pandas as pd
    import pyarrow.parquet as pq

    from .storage import hive_columns, partition_frame
    from .storage import is_url, open_binary

    if columns is not None:
        check_columns(files, columns, root)
    partitions, _ = hive_columns(files, root)
    frames = []
    for f in files:
        keys = dict(partitions[f])
        wanted = columns if columns is not None else parquet_columns([f], root) if keys else None
        try:
            table = pq.read_table(open_binary(f) if is_url(f) else f,
                                  columns=None if wanted is None else [c for c in wanted if c not in keys])
        except Exception as exc:  # pyarrow raises several types for damaged files
            raise DataError(f"cannot read Parquet file '{f}': {exc}; check that the file is complete") from exc
        df = table.to_pandas()
        frames.append(partition_frame(df, partitions[f], wanted, table.num_rows) if keys else df)
    if not frames:
        raise DataError("no data read; DATA matched no rows")
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def check_columns(files: list[str], columns: list[str], root: str | None = None, never_suggest=()) -> None:
    """A one-line :class:`DataError` for the first of ``columns`` the table lacks, with the closest
    present column as a suggestion -- never one of ``never_suggest`` (the model's target: a table
    scored without a feature column must not be told to use its label in the feature's place)."""
    available = parquet_columns(files, root)
    for col in columns:
        if col not in available:
            import difflib

            skip = {c for c in never_suggest if c is not None}
            close = difflib.get_close_matches(col, [c for c in available if c not in skip], n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise DataError(
                f"column '{col}' is not in {files[0]}; {hint}available columns: {', '.join(available)}"
            )


# ---------------------------------------------------------------------------------------------- labels


def plain_scalar(value: Any) -> Any:
    """A JSON-friendly Python scalar for a label value (numpy ints become int, etc.)."""
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclass
class LabelSpace:
    """The classes of the target, in model order.  For two classes index 1 is the positive class."""

    classes: list[Any]
    target: str

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    @classmethod
    def from_series(cls, y, target: str, positive: str | None = None) -> "LabelSpace":
        return cls.from_values({plain_scalar(v) for v in y.dropna().unique()}, target, positive)

    @classmethod
    def from_values(cls, distinct, target: str, positive: str | None = None) -> "LabelSpace":
        """The label space of a target with these distinct non-missing values (any order)."""
        values = sorted({plain_scalar(v) for v in distinct}, key=lambda v: (str(type(v)), v))
        check_not_continuous(values, target)
        if len(values) < 2:
            shown = f"only one class (the value {values[0]!r})" if values else "no non-missing values"
            raise DataError(
                f"the class column '{target}' has {shown}; calibration needs at least two classes"
                " (check target, or filter the data)", parameter="target")
        if positive is not None:
            if len(values) != 2:
                raise DataError(
                    f"positive applies to two-class targets, but '{target}' has {len(values)} classes;"
                    " drop positive for a multiclass model", parameter="positive")
            match = [v for v in values if str(v) == str(positive)]
            if not match:
                raise DataError(
                    f"positive={positive!r} is not a value of '{target}'; its values are "
                    + ", ".join(repr(str(v)) for v in values), parameter="positive")
            values = [v for v in values if v is not match[0]] + [match[0]]
        return cls(classes=values, target=target)

    def encode(self, y) -> np.ndarray:
        """Class indices for a pandas Series of labels; unknown or missing labels are an error.

        Labels are matched by their text form (vectorised), so ``1`` read from an int column and
        ``1`` stored in the manifest agree whatever integer width either had.  A NumPy array of
        integers with numeric classes is matched without pandas (:meth:`encode_integers`).
        """
        if isinstance(y, np.ndarray) and y.dtype.kind in "iu" and self._numeric():
            return self.encode_integers(y)
        import pandas as pd

        series = pd.Series(y)
        missing = series.isna().to_numpy()
        numeric = self._numeric()
        if numeric and pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype):
            values = series.to_numpy(dtype=np.float64, na_value=np.nan)
            idx = pd.Index(np.asarray(self.classes, dtype=np.float64)).get_indexer(values)
        else:
            text = series.astype(str).to_numpy(dtype=object)
            idx = pd.Index([str(c) for c in self.classes]).get_indexer(text)
        bad = (idx < 0) & ~missing
        if bad.any():
            raise DataError(
                f"target '{self.target}' holds {str(plain_scalar(series.iloc[int(np.argmax(bad))]))!r}, a class the model"
                " was not trained on "
                f"(classes: {', '.join(map(str, self.classes))}); evaluate on data with the same labels"
            )
        if missing.any():
            raise DataError(f"target '{self.target}' has missing values; drop those rows before evaluating")
        return idx.astype(np.int64)

    def _numeric(self) -> bool:
        return all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in self.classes)

    def encode_integers(self, y: np.ndarray) -> np.ndarray:
        """:meth:`encode` of a NumPy integer array (no missing values) when the classes are numbers:
        the same float64 comparison as the pandas path's ``Index.get_indexer``, by a binary search
        over the sorted classes, and the same error for a label the model does not know."""
        values = np.asarray(y).astype(np.float64)
        classes = np.asarray(self.classes, dtype=np.float64)
        order = np.argsort(classes, kind="stable")
        pos = np.minimum(np.searchsorted(classes[order], values), classes.size - 1)
        found = classes[order][pos] == values
        if not found.all():
            raise DataError(
                f"target '{self.target}' holds {str(plain_scalar(y[int(np.argmin(found))]))!r}, a class the model"
                " was not trained on "
                f"(classes: {', '.join(map(str, self.classes))}); evaluate on data with the same labels"
            )
        return order[pos].astype(np.int64)

    def index_of(self, value) -> int:
        """The class index of one label value (:meth:`encode` of it)."""
        if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            return int(self.encode(np.asarray([value]))[0])
        import pandas as pd

        return int(self.encode(pd.Series([value]))[0])

    def to_json(self) -> dict:
        return {"target": self.target, "classes": [plain_scalar(c) for c in self.classes]}

    @classmethod
    def from_json(cls, d: dict) -> "LabelSpace":
        return cls(classes=list(d["classes"]), target=d["target"])


def check_not_continuous(values, target: str) -> None:
    """A target whose values include non-integer numbers is a regression target, not class labels.

    The rule is scikit-learn's ``type_of_target == "continuous"``, so the CLI and the Python API
    refuse the same targets; without it a continuous column fails later with the misleading "the
    rarest class has 1 rows".  ``values``: the distinct non-missing values.
    """
    fractional = [
        v for v in values
        if isinstance(v, float) and np.isfinite(v) and not float(v).is_integer()
    ]
    if fractional:
        n = len(values)
        shown = ", ".join(f"{v:g}" for v in fractional[:3])
        raise DataError(
            f"target '{target}' looks continuous ({n} distinct values, non-integer ones such as {shown});"
            " calibration needs class labels: bin the values into classes, or choose the class column"
        )


def check_many_rare_classes(counts, k: int, classes=None, target: str | None = None) -> None:
    """A numeric target with many values, one of them too rare for ``k`` folds, is a measurement (or
    an ID), not a class: say so instead of "the rarest class has 1 rows".  Integer-valued columns such
    as a glucose level pass :func:`check_not_continuous`, so this looks at the number of values.
    ``counts``: rows per class; ``classes``: their values (None: treated as numeric)."""
    counts = np.asarray(counts)
    numeric = classes is None or all(
        isinstance(plain_scalar(c), (int, float)) and not isinstance(plain_scalar(c), bool) for c in classes
    )
    if numeric and len(counts) > 20 and counts.min() < k:
        rare = int((counts < k).sum())
        name = f"'{target}' " if target else ""
        raise DataError(
            f"target {name}looks continuous: {len(counts)} distinct numeric values, {rare} of them with fewer"
            f" than cv={k} rows; calibration needs class labels: bin the values into classes, or choose"
            " the class column", parameter="cv")


def stratified_folds(y: np.ndarray, n_folds: int, seed: int, classes=None,
                     parameter: str = "cv") -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, held-out) index pairs, stratified and shuffled from ``seed`` alone (no scheduling input).
    ``classes``: the label values behind the class indices ``y``, for the error messages;
    ``parameter``: the parameter that asked for ``n_folds`` (``cv``, or ``folds`` for cv's outer folds)."""
    from sklearn.model_selection import StratifiedKFold

    counts = np.bincount(y)
    if n_folds < 2:
        raise DataError(f"{parameter} must be at least 2 (got {n_folds}); or use calibration_data for a hold-out"
                        " table", parameter=(parameter, "calibration_data"))
    check_many_rare_classes(counts[counts > 0], n_folds, None if classes is None else
                            [c for c, n in zip(classes, counts) if n > 0])
    smallest = int(counts[counts > 0].min())
    if smallest < n_folds:
        raise DataError(
            f"the rarest class has {smallest} rows, fewer than {parameter}={n_folds}; lower {parameter} or add"
            " data", parameter=parameter
        )
    skf = StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=seed)
    return [(tr.astype(np.int64), te.astype(np.int64)) for tr, te in skf.split(np.zeros(len(y)), y)]


# ---------------------------------------------------------------------------------------------- output


#: errno values that mean "this output location cannot take the data" (not a bug, not the network)
DISK_ERRNOS = frozenset(
    getattr(errno, name) for name in
    ("EACCES", "EPERM", "EROFS", "ENOSPC", "EDQUOT", "EFBIG", "EIO", "ENAMETOOLONG", "ENOTDIR", "EISDIR", "EMFILE")
    if hasattr(errno, name)
)


def os_error_meaning(exc: OSError) -> str:
    """``No space left on device (ENOSPC)``: the errno's meaning and name, or the error's text."""
    code = getattr(exc, "errno", None)
    if code:
        return f"{os.strerror(code)} ({errno.errorcode.get(code, code)})"
    return " ".join(str(exc).split())[:200]


@contextmanager
def _interrupt_deferred() -> Iterator[None]:
    """In the main thread, a SIGINT arriving inside the block takes effect when it ends (the block is
    a few renames: short, and not to be cut in half)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list = []
    previous = signal.signal(signal.SIGINT, lambda *received: caught.append(received))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught and callable(previous):
        previous(*caught[0])


@contextmanager
def staged_directory(target: str | os.PathLike, replace: bool = False) -> Iterator[Path]:
    """A fresh staging directory beside ``target``; renamed onto it only if the block succeeds.

    The target must not exist (or be an empty directory) unless ``replace``: then the old directory is
    moved aside, the new one renamed in, and the old one deleted, so a reader sees the old or the new
    result, never a half-written one.  A disk that refuses the data (read-only, full, over quota) is
    a :class:`DataError` naming ``target`` and the errno's meaning; so is another run that published
    ``target`` while this one ran (its result is kept, this one's discarded).
    """
    from .storage import local_output

    target = Path(local_output(target)).resolve()
    occupied = target.exists() and not (target.is_dir() and not any(target.iterdir()))
    if occupied and not replace:
        raise DataError(f"output '{target}' already exists; choose a new path or remove it first")
    token = uuid.uuid4().hex[:12]
    staging = target.parent / f".{target.name}.tmp-{token}"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
    except OSError as exc:
        raise DataError(
            f"cannot create output '{target}': {os_error_meaning(exc)}; choose a writable location with free space"
        ) from exc
    try:
        yield staging
        old = None
        try:
            with _interrupt_deferred():  # a Ctrl-C lands before the renames or after the record of them
                if occupied:
                    old = target.parent / f".{target.name}.old-{token}"
                    os.rename(target, old)
                elif target.exists():
                    target.rmdir()
                os.rename(staging, target)
                note_published(str(target))
                if old is not None:
                    shutil.rmtree(old, ignore_errors=True)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise DataError(
                    f"another run published '{target}' while this one ran; its output was kept and this run's"
                    " discarded (use a different output path for concurrent runs)"
                ) from exc
            raise
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if exc.errno in DISK_ERRNOS:
            raise DataError(
                f"cannot write '{target}': {os_error_meaning(exc)}; nothing was published; choose a writable"
                " location with free space"
            ) from exc
        raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
