"""Held-out scores kept in ``.npy`` files of the job's scratch directory instead of in memory.

Why: a fit holds every row's held-out score (9 bytes a row: a float64 score and an int8 target, 17
with weights) from the pass that computes them until the calibrators are fitted, twice during the cut
into score ranges.  A Dask worker with a memory limit spills those results to disk itself, but the
embedded scheduler (``calengine fit`` without ``--cluster``: one in-process worker, no limit) never
does, so an embedded fit's memory grew with the table (measured, isotonic on a score column: 389 MiB
at 10^6 rows, 872 MiB at 10^7, 2,492 MiB at 10^8).  With these handles the results the scheduler holds
are file names; a task loads what it works on and drops it, so the process holds a bounded number of
fragments and score ranges at a time whatever the table's size.

Contract: a spilled value loads to exactly the arrays it was written from (``.npy``, no pickle:
``allow_pickle=False`` both ways), so a fit gives the same bits spilled or not.  The files live in
the scratch directory the driver owns (:func:`calengine.plan.memory.held_out_scratch`), which is
removed when the fit ends, fails or is interrupted; workers get one when they are sure to see the
driver's file system (in-process workers, a local cluster's) or prove it (:func:`sees_directory`).
"""

from __future__ import annotations

import os
import threading
import uuid
from dataclasses import dataclass

import numpy as np

#: ``np.load`` parses every ``.npy`` header with ``ast.literal_eval``, which CPython 3.11 does not make
#: safe across threads: two task threads parsing at once can fail with "SystemError: AST constructor
#: recursion depth mismatch" (python/cpython#106905; seen in evaluate's range tasks on the embedded
#: scheduler).  Every task-side ``.npy`` read goes through :func:`load_npy`, one header at a time.
_NPY_HEADER_LOCK = threading.Lock()


def load_npy(path: str, mmap_mode: str | None = None) -> np.ndarray:
    """``np.load(path, mmap_mode=..., allow_pickle=False)`` with the header parsed under the process's one
    lock.  A memory map is made under the lock (header and map only); a full load reads the data under
    it too, which task threads that load a block and then sort it for far longer barely notice."""
    with _NPY_HEADER_LOCK:
        return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)


#: what the scratch-write error tells the user to do (the directory is named before it)
SCRATCH_FIX = ("free space there, or point TMPDIR (where calengine keeps its scratch files) or, on a"
               " cluster, the workers' --local-directory at a disk with more room")


def save_npy(path: str, array: np.ndarray) -> None:
    """``np.save(path, array, allow_pickle=False)`` for a job's scratch file.  A disk that refuses the data
    (full, over quota, read-only, past a file-size limit) is a :class:`~calengine.errors.DataError` naming
    the directory, what the system said and the fix, and the partial file is removed: a scratch
    directory filling up is the user's environment, not a bug, and must read as one ``error:`` line,
    not as numpy's traceback (a fit or evaluate of a table larger than the free space under TMPDIR
    ended that way).  Other errors propagate unchanged."""
    try:
        np.save(path, np.ascontiguousarray(array), allow_pickle=False)
    except OSError as exc:
        raise _scratch_error(exc, path, array) from exc


def _scratch_error(exc: OSError, path: str, array: np.ndarray) -> Exception:
    """What :func:`save_npy` raises for ``exc`` met writing ``array`` to ``path``: the
    :class:`~calengine.errors.DataError` of a disk that refused the data (the partial file removed), or
    ``exc`` itself when it is not about the disk."""
    from ..errors import DataError
    from ..parquet.data import DISK_ERRNOS, os_error_meaning

    code = getattr(exc, "errno", None)
    if code is not None and code not in DISK_ERRNOS:
        return exc
    try:
        os.remove(path)
    except OSError:
        pass
    # numpy's own short-write error has no errno ("N requested and M written"): the disk took part
    meaning = os_error_meaning(exc) if code else _short_write(os.path.dirname(path) or ".", array)
    return DataError(f"cannot write a scratch file in '{os.path.dirname(path) or '.'}': {meaning}; {SCRATCH_FIX}")


def _short_write(directory: str, array: np.ndarray) -> str:
    """What a write that stopped part-way most likely met: a full disk when it has less room than the
    array, else a quota or file-size limit."""
    import shutil

    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        free = None
    size = np.asarray(array).nbytes
    if free is not None and free < size:
        return f"No space left on device (ENOSPC): {free:,} bytes free, {size:,} to write"
    return "the disk took only part of the data (a quota or a file-size limit)"


def _save(directory: str, array: np.ndarray) -> str:
    path = os.path.join(directory, f"{uuid.uuid4().hex}.npy")
    save_npy(path, array)
    return path


def _load(path: str) -> np.ndarray:
    return load_npy(path)


def _save_optional(directory: str, array: np.ndarray | None) -> str | None:
    return None if array is None else _save(directory, array)


def _load_optional(path: str | None) -> np.ndarray | None:
    return None if path is None else _load(path)


@dataclass(frozen=True)
class SpilledBlock:
    """A :class:`~calengine.tasks.partitions.ScoreBlock` on disk: per calibration set, the files of
    ``(S, T, W)`` (``W`` None when unweighted).  Tasks call :func:`calengine.tasks.partitions.loaded`
    on what they receive."""

    files: tuple[tuple[str, str, str | None], ...]


@dataclass(frozen=True)
class RangeSlices:
    """One score range's ``(s, t, w)`` rows in the files of one :class:`SpilledSplit`: ``files`` are
    ``(path, dtype)`` of ``s``, ``t`` and ``w`` (None when unweighted), ``spans`` the ``(offset, rows)``
    of the range's rows in each, one per block of the split, in block order (empty spans dropped)."""

    files: tuple
    spans: np.ndarray

    def __len__(self) -> int:
        return int(self.spans[:, 1].sum()) if len(self.spans) else 0


@dataclass(frozen=True)
class SpilledSplit:
    """The score ranges one task cut from consecutive score blocks
    (:func:`calengine.tasks.partitions.split_blocks`), on disk: per problem, ``files[pid]`` (as
    :class:`RangeSlices`' ``files``) hold every block's rows in range order, block after block, and
    ``cuts[pid][b]`` the row offsets in them where block ``b``'s ranges start (and the last ends).
    A few files per group of blocks and problem, however many ranges: the scratch holds O(rows) files."""

    files: dict
    cuts: dict

    def piece(self, key) -> RangeSlices:
        """Range ``key = (problem id, range)``'s rows (a range task reads them with :func:`piece_parts`)."""
        pid, rng = key
        cuts = self.cuts[pid]
        start, stop = cuts[:, rng], cuts[:, rng + 1]
        keep = stop > start
        return RangeSlices(self.files[pid], np.stack([start[keep], (stop - start)[keep]], axis=1))


class SplitWriter:
    """Writes a :class:`SpilledSplit`: :meth:`append` one block's range-sorted rows of a problem (raw
    bytes appended to the problem's files, opened on first use), :meth:`result` the handle.  Files are
    closed on leaving the ``with`` block; a disk that refuses the data is
    :func:`save_npy`'s one-line :class:`~calengine.errors.DataError`."""

    def __init__(self, directory: str):
        self.directory = directory
        self.handles: dict = {}  # pid -> [(open file, path, dtype) or None per array]
        self.cuts: dict = {}
        self.rows: dict = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        for handles in self.handles.values():
            for h in handles:
                if h is not None:
                    h[0].close()

    def append(self, pid, s: np.ndarray, t: np.ndarray, w: np.ndarray | None, cuts: np.ndarray) -> None:
        arrays = (s, t, w)
        if pid not in self.handles:
            self.handles[pid] = [None if a is None else self._open(a.dtype) for a in arrays]
            self.cuts[pid], self.rows[pid] = [], 0
        for h, a in zip(self.handles[pid], arrays):
            if h is not None:
                self._write(h, a)
        self.cuts[pid].append(self.rows[pid] + np.asarray(cuts, dtype=np.int64))
        self.rows[pid] += int(s.shape[0])

    def result(self) -> SpilledSplit:
        files = {pid: tuple(None if h is None else (h[1], h[2]) for h in hs) for pid, hs in self.handles.items()}
        return SpilledSplit(files, {pid: np.stack(c) for pid, c in self.cuts.items()})

    def _open(self, dtype: np.dtype):
        path = os.path.join(self.directory, f"{uuid.uuid4().hex}.bin")
        try:
            # unbuffered: nothing is left to flush (and fail) at close
            return open(path, "wb", buffering=0), path, np.dtype(dtype).str
        except OSError as exc:
            raise _scratch_error(exc, path, np.empty(0)) from exc

    @staticmethod
    def _write(handle, array: np.ndarray) -> None:
        f, path, _ = handle
        array = np.ascontiguousarray(array)
        view = memoryview(array).cast("B")
        try:
            while view:  # a raw write may take part of the data: the rest, or the disk's error, follows
                view = view[f.write(view):]
        except OSError as exc:
            f.close()
            raise _scratch_error(exc, path, array) from exc


def _read_spans(path: str, dtype: str, spans: np.ndarray) -> np.ndarray:
    """The rows of ``spans`` (``(offset, rows)``) of the raw ``dtype`` file at ``path``, concatenated
    in order: one open, a positioned read per span straight into the result."""
    dt = np.dtype(dtype)
    out = np.empty(int(spans[:, 1].sum()) if len(spans) else 0, dtype=dt)
    if out.size == 0:
        return out
    view = memoryview(out).cast("B")
    pos = 0
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        for offset, rows in spans.tolist():
            want, at = rows * dt.itemsize, offset * dt.itemsize
            while want:
                got = os.preadv(fd, [view[pos : pos + want]], at)
                if got <= 0:
                    raise OSError(f"scratch file '{path}' ended early")
                pos, at, want = pos + got, at + got, want - got
    return out


def spill_block(block, directory: str | None):
    """``block`` written to ``directory`` (returned unchanged when ``directory`` is None)."""
    if directory is None:
        return block
    return SpilledBlock(tuple((_save(directory, S), _save(directory, T), _save_optional(directory, W))
                              for S, T, W in block.sets))


def load_sets(block: SpilledBlock) -> list:
    """The ``(S, T, W)`` sets of a spilled block, read back (a :class:`~calengine.tasks.partitions.ScoreBlock`'s
    ``sets``; :func:`calengine.tasks.partitions.loaded` makes the block)."""
    return [(_load(s), _load(t), _load_optional(w)) for s, t, w in block.files]


def piece_parts(piece) -> list:
    """The ``(s, t, w)`` parts of a range piece in order: the piece itself when it is in memory, its
    rows read back in one part when it was spilled (the range task concatenates them as it does
    in-memory pieces)."""
    if not isinstance(piece, RangeSlices):
        return [piece]
    if not len(piece.spans):
        return []
    return [tuple(None if f is None else _read_spans(f[0], f[1], piece.spans) for f in piece.files)]
