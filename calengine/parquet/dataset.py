"""A Parquet table as the client sees it: file paths, row groups, row counts and a schema, never rows.

``describe_dataset`` runs in the client and reads only Parquet footers.  It resolves every path to an
absolute one (a worker started in another directory must find the file), checks that the column types
agree across files (a column that is numeric in one file and text in another is a one-line error, not
a silent re-encoding), and cuts the table into :class:`Fragment` s: runs of whole row groups of one
file.  A fragment is the unit of work of every pass over the data; tasks receive fragments, read their
own rows with :func:`read_fragment`, and send back only small results.

Every row has a stable identity that does not depend on how the table is cut into fragments or on
which worker reads it: (file key, row group, row index within the row group).  The file key is the
file's path relative to the dataset root, so moving or re-mounting the dataset keeps it.  Folds and
samples are seeded from that identity (see :mod:`calengine.plan.folds`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

from ..errors import DataError
from .storage import absolute, common_root, hive_columns, parquet_file, partition_frame, relative_key

#: fragments hold at most this many rows (whole row groups; a larger row group is a fragment alone)
DEFAULT_FRAGMENT_ROWS = 1_000_000


@dataclass(frozen=True)
class Fragment:
    """Whole row groups ``row_groups`` of one Parquet file: the rows a task reads.

    ``group_rows`` holds the row count of each of those row groups, so a task can tell which row group
    every row it reads comes from; ``file_key`` is the file's stable identity for seeding.
    """

    path: str
    file_key: str
    row_groups: tuple[int, ...]
    group_rows: tuple[int, ...]
    #: Hive partition columns of the file (``sex=F/part-0.parquet``): ((key, typed value), ...)
    partition: tuple = ()

    @property
    def n_rows(self) -> int:
        return int(sum(self.group_rows))


@dataclass(frozen=True)
class Dataset:
    """What the client knows of a table: its fragments, column names and Arrow types."""

    root: str
    fragments: tuple[Fragment, ...]
    columns: tuple[str, ...]
    types: dict = field(default_factory=dict)  # column -> Arrow type string (first file that has it)
    kinds: dict = field(default_factory=dict)  # column -> "numeric" or "string" (all-null columns: absent)

    @property
    def n_rows(self) -> int:
        return sum(f.n_rows for f in self.fragments)

    @property
    def files(self) -> list[str]:
        seen: dict[str, None] = {}
        for f in self.fragments:
            seen.setdefault(f.path, None)
        return list(seen)


def file_key_hash(file_key: str) -> tuple[int, int]:
    """Two 32-bit words identifying a file key, for seeding (stable across Python processes)."""
    digest = hashlib.blake2b(file_key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest[:4], "little"), int.from_bytes(digest[4:], "little")


def _arrow_kind(arrow_type) -> str:
    """``numeric``, ``string``, ``null`` or ``other`` for an Arrow type (what decides the encoding)."""
    import pyarrow as pa
    import pyarrow.types as t

    if t.is_dictionary(arrow_type):
        return _arrow_kind(arrow_type.value_type)
    if t.is_null(arrow_type):
        return "null"
    if t.is_boolean(arrow_type) or t.is_integer(arrow_type) or t.is_floating(arrow_type) or t.is_decimal(arrow_type):
        return "numeric"
    if t.is_string(arrow_type) or t.is_large_string(arrow_type) or getattr(t, "is_string_view", lambda _: False)(arrow_type):
        return "string"
    del pa
    return "other"


def describe_dataset(
    data: str | os.PathLike, columns: list[str] | None = None, fragment_rows: int = DEFAULT_FRAGMENT_ROWS
) -> Dataset:
    """Describe the Parquet table at ``data`` from its footers alone (see the module docstring).

    ``columns``: the columns the job reads; each must exist in every file with one kind of type.
    """
    from .data import resolve_parquet_files

    files = [absolute(f) for f in resolve_parquet_files(data)]
    return describe_files(files, dataset_root(data, files), columns, fragment_rows)


def describe_files(
    files: list[str], root: str | None = None, columns: list[str] | None = None,
    fragment_rows: int = DEFAULT_FRAGMENT_ROWS,
) -> Dataset:
    """:func:`describe_dataset` for an already resolved list of Parquet files (keys relative to ``root``;
    None: the files' common folder)."""
    files = [absolute(f) for f in files]
    if root is None:
        root = dataset_root("", files)
    partitions, hive_types = hive_columns(files, root)
    fragments: list[Fragment] = []
    names: list[str] | None = None
    kinds: dict[str, tuple[str, str]] = {}  # column -> (kind, file)
    types: dict[str, str] = {}
    for path in files:
        try:
            with parquet_file(path) as pf:
                schema = pf.schema_arrow
                meta = pf.metadata
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for damaged footers
            raise DataError(f"cannot read the Parquet footer of '{path}' ({_first_line(exc)}); check that the file is complete") from exc
        file_names = [n for n in schema.names if n not in _index_columns(schema)]
        if len(set(file_names)) != len(file_names):
            dup = next(n for n in file_names if file_names.count(n) > 1)
            raise DataError(f"'{path}' has two columns named '{dup}'; rename one of them")
        partition = tuple((k, v) for k, v in partitions[path] if k not in file_names)
        if names is None:
            names = file_names + [k for k, _ in partition]
        wanted = columns if columns is not None else names
        for col in wanted:
            if col in dict(partition):
                if hive_types[col] != "string" or any(v is not None for k, v in partition if k == col):
                    kind = "string" if hive_types[col] == "string" else "numeric"
                    types.setdefault(col, hive_types[col])
                    kinds.setdefault(col, (kind, path))
                continue
            if col not in file_names:
                if col not in names:
                    continue  # reported by check_columns with a suggestion
                raise DataError(
                    f"column '{col}' is missing from '{path}' (other files have it); give every file the same columns"
                )
            arrow_type = schema.field(col).type
            kind = _arrow_kind(arrow_type)
            if kind == "other":
                raise DataError(
                    f"column '{col}' in '{path}' has type {arrow_type}, which calengine does not encode (numeric,"
                    f" boolean and string columns are supported); leave it out with exclude {col}", parameter="exclude")
            if kind == "null":
                continue
            types.setdefault(col, str(arrow_type))
            first = kinds.setdefault(col, (kind, path))
            if first[0] != kind:
                raise DataError(
                    f"column '{col}' is {first[0]} in '{first[1]}' but {kind} in '{path}'; write every file"
                    " with the same column types"
                )
        key = relative_key(path, root)
        fragments += _cut(path, key, [meta.row_group(g).num_rows for g in range(meta.num_row_groups)], fragment_rows,
                          partition)
    return Dataset(root=root, fragments=tuple(fragments), columns=tuple(names or ()), types=types,
                   kinds={c: k for c, (k, _) in kinds.items()})


def _cut(path: str, key: str, group_rows: list[int], fragment_rows: int, partition: tuple = ()) -> list[Fragment]:
    """Runs of whole row groups holding at most ``fragment_rows`` rows (at least one group each)."""
    out: list[Fragment] = []
    groups: list[int] = []
    rows: list[int] = []
    for g, n in enumerate(group_rows):
        if groups and sum(rows) + n > fragment_rows:
            out.append(Fragment(path, key, tuple(groups), tuple(rows), partition))
            groups, rows = [], []
        if n == 0:
            continue
        groups.append(g)
        rows.append(n)
    if groups:
        out.append(Fragment(path, key, tuple(groups), tuple(rows), partition))
    return out


def dataset_root(data, files: list[str]) -> str:
    """The directory file keys are relative to: DATA itself for a directory, else the files' common folder."""
    return common_root(os.fspath(data), files)


def _index_columns(schema) -> set[str]:
    meta = schema.pandas_metadata or {}
    return {c for c in meta.get("index_columns", []) if isinstance(c, str)}


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__


# ---------------------------------------------------------------------------------------------- in tasks


def read_fragment(fragment: Fragment, columns: list[str]):
    """The fragment's rows as a pandas DataFrame (runs in tasks).  A damaged file names itself."""
    return fragment_frame(fragment, read_fragment_table(fragment, columns), columns)


def read_fragment_table(fragment: Fragment, columns: list[str]):
    """The fragment's rows as an Arrow Table of those ``columns`` that are not Hive partition keys: the
    read of :func:`read_fragment`, for a caller that takes the numbers from Arrow when it can and
    falls back to :func:`fragment_frame` of the same table (one read either way)."""
    keys = dict(fragment.partition)
    return _read_row_groups(fragment, [c for c in columns if c not in keys])


def fragment_frame(fragment: Fragment, table, columns: list[str]):
    """:func:`read_fragment`'s DataFrame of a table :func:`read_fragment_table` read: the partition keys
    among ``columns`` added as constants."""
    return partition_frame(table.to_pandas(), fragment.partition, list(columns), table.num_rows)


def read_fragment_arrow(fragment: Fragment, columns: list[str]):
    """The fragment's rows as one pyarrow ``RecordBatch`` of ``columns`` (runs in tasks), or None when
    one of them is a Hive partition key (those come from the path: :func:`read_fragment` adds them).
    A batch, not a Table: a Table's columns are chunked, and ``ChunkedArray.to_numpy`` imports pandas.

    Why besides :func:`read_fragment`: the score-column fit reads a score, a target and perhaps a
    weight column, all numeric, which NumPy takes from Arrow directly; ``Table.to_pandas`` was the
    only reason such a fit imported pandas (~0.6 s of CPU, in its first task) and its copies."""
    if any(c in dict(fragment.partition) for c in columns):
        return None
    import pyarrow as pa

    table = _read_row_groups(fragment, list(columns))
    return pa.RecordBatch.from_arrays([table.column(c).combine_chunks() for c in columns], names=list(columns))


def _read_row_groups(fragment: Fragment, columns: list[str]):
    """The fragment's row groups as an Arrow Table of ``columns``; a damaged or changed file is one line."""
    try:
        with parquet_file(fragment.path) as pf:
            table = pf.read_row_groups(list(fragment.row_groups), columns=columns)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for damaged pages
        raise read_error(fragment, exc) from exc
    if table.num_rows != fragment.n_rows:
        raise DataError(
            f"'{fragment.path}' changed while the job ran ({table.num_rows} rows read, {fragment.n_rows} planned);"
            " do not modify the data during a fit"
        )
    return table


#: NumPy dtypes of the Arrow types :func:`arrow_numpy` views without a copy
_NUMPY_OF_ARROW = {"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8",
                   "uint16": "uint16", "uint32": "uint32", "uint64": "uint64", "float": "float32", "double": "float64"}


def arrow_numpy(array):
    """An Arrow array as NumPy: a view of its data buffer for an integer or float array without nulls,
    else ``to_numpy(zero_copy_only=False)`` (nulls become NaN).  Why not always ``to_numpy``: in
    pyarrow 26 it imports pandas (~0.6 s of CPU), which nothing else in a score-column fit needs."""
    import numpy as np

    dtype = _NUMPY_OF_ARROW.get(str(array.type))
    if dtype is None or array.null_count:
        return array.to_numpy(zero_copy_only=False)
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=array.offset + len(array))[array.offset:]


def read_error(fragment: Fragment, exc: BaseException) -> DataError:
    """The one-line error for a task that could not read ``fragment`` (every worker-side read uses it)."""
    if isinstance(exc, FileNotFoundError):
        return DataError(
            f"worker cannot open '{fragment.path}'; every worker must see the data at the same path"
            " (a shared file system, or an fsspec URL)"
        )
    return DataError(
        f"cannot read '{fragment.path}' row groups {list(fragment.row_groups)} ({_first_line(exc)});"
        " check that the file is complete and undamaged, or rewrite it"
    )
