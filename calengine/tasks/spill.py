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
        from ..errors import DataError
        from ..parquet.data import DISK_ERRNOS, os_error_meaning

        code = getattr(exc, "errno", None)
        if code is not None and code not in DISK_ERRNOS:
            raise
        try:
            os.remove(path)
        except OSError:
            pass
        # numpy's own short-write error has no errno ("N requested and M written"): the disk took part
        meaning = os_error_meaning(exc) if code else _short_write(os.path.dirname(path) or ".", array)
        raise DataError(f"cannot write a scratch file in '{os.path.dirname(path) or '.'}': {meaning}; {SCRATCH_FIX}") from exc


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
class SpilledPiece:
    """One score range's ``(s, t, w)`` piece (:func:`calengine.tasks.partitions.split_blocks`) on disk,
    as the files of its parts in order (one part per block the range was cut from; empty parts are not
    written)."""

    parts: tuple[tuple[str, str, str | None], ...]


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


def spill_pieces(pieces: list, directory: str) -> SpilledPiece:
    """The ``(s, t, w)`` pieces of one range, in order, written to ``directory``: a task cutting many
    blocks writes each block's pieces as it goes instead of holding them to concatenate."""
    return SpilledPiece(tuple((_save(directory, s), _save(directory, t), _save_optional(directory, w))
                              for s, t, w in pieces if s.size))


def piece_parts(piece) -> list:
    """The ``(s, t, w)`` parts of a range piece in order: the piece itself when it is in memory, its
    parts read back when it was spilled (the range task concatenates them as it does in-memory pieces)."""
    if not isinstance(piece, SpilledPiece):
        return [piece]
    return [(_load(s), _load(t), _load_optional(w)) for s, t, w in piece.parts]
