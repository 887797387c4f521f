"""Handing freed heap memory back to the operating system when a fragment task ends.

A task that reads and encodes a fragment allocates and frees tens of megabytes of NumPy and Arrow
buffers.  glibc keeps freed memory below its mmap threshold in the process heap, and the workers that
``--cluster local`` starts raise that threshold (see :data:`calengine.runtime.client.WORKER_MMAP_THRESHOLD`)
so those buffers stop costing page faults.  The price is a heap with holes: a 512 MiB worker that had
fitted a 3.5M-row table sat at 335 MiB with 65 MiB of it free but not returned, close to Dask's pause
threshold (80 %), where a worker stops running tasks and a fit can wait forever.  ``malloc_trim(0)``
returns those pages (8 ms the first time on such a heap, well under a millisecond after), so the
fragment tasks call it as they finish.  Elsewhere than glibc it does nothing.

A process that runs a whole job itself (the ``calengine`` command's embedded fit of score columns,
:func:`kept_heap`) does the opposite for the job's length: there is no Dask worker to pause, only the
process's peak to keep, and on this machine's virtual machine a page fault costs ~15 µs, so returning
freed pages only to fault them in again was 1.3-2.7 s of system time in a 10M-row fit of 5-7 s of CPU.

A worker of a cluster started apart (``dask worker``, joined with ``--cluster ADDRESS``) is in between:
its nanny sets ``MALLOC_TRIM_THRESHOLD_``, which freezes glibc's mmap threshold at 128 KiB, so every
temporary of a chunked round (2 MiB at 2^18 rows) was a fresh mapping faulted in page by page: a
10M-row temperature fit's workers took 1.5M page faults, more system than user time.  calengine
cannot choose how a user's workers start, so each fragment task keeps the heap for its own length
(:func:`task_heap`) and hands back, when it ends, what a later task is unlikely to reuse.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

_trim = _mallopt = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL("libc.so.6")
        _trim = _libc.malloc_trim
        _trim.argtypes = [ctypes.c_size_t]
        _mallopt = _libc.mallopt
        _mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        _trim = _mallopt = None


# glibc's mallopt parameters (malloc.h) and their defaults
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_DEFAULT_THRESHOLD = 128 * 1024

#: the mmap threshold while a job keeps its heap: glibc's largest on 64-bit (half its 64 MiB arena
#: heaps; larger values are refused), so every temporary of a calibrator's chunk of 2^18 rows, and the
#: columns of fragments up to 4M rows, come from the heap and are reused instead of faulted in anew
#: (larger arrays are still mapped, and unmapped when freed, so they never pile up in the heap).
KEPT_MMAP_THRESHOLD = 32 * 2**20
#: the trim threshold meanwhile: freed memory at the top of the heap stays for the next task
KEPT_TRIM_THRESHOLD = 2**30

#: a task of a nanny's worker (:func:`task_heap`) trims the heap when it ends only if the process's
#: resident memory is above this share of the worker's memory limit: below it the freed pages wait for
#: the next task (which reuses them instead of faulting them in); near Dask's thresholds (spill at 70 %,
#: pause at 80 %, where a worker stops running tasks) they go back to the system as before
TASK_TRIM_FRACTION = 0.4

#: jobs of this process now inside :func:`kept_heap` (tasks then leave freed memory where it is)
_keeping = 0
#: tasks of this worker process now inside :func:`task_heap`, and the lock that guards the count
_tasks = 0
_tasks_lock = threading.Lock()


def release_freed_memory(even_when_kept: bool = False) -> None:
    """Return free heap pages to the operating system (glibc ``malloc_trim(0)``); a no-op elsewhere,
    and while a job of this process keeps its heap (:func:`kept_heap`) unless ``even_when_kept``."""
    if _trim is not None and (even_when_kept or not _keeping):
        _trim(0)


@contextmanager
def kept_heap(enabled: bool = True) -> Iterator[None]:
    """For the length of a job whose tasks are threads of this process: glibc keeps freed memory for
    reuse (mmap threshold :data:`KEPT_MMAP_THRESHOLD`, trim threshold :data:`KEPT_TRIM_THRESHOLD`) and
    the tasks skip their ``malloc_trim``; afterwards both thresholds are glibc's defaults again
    (128 KiB, no longer raised dynamically: glibc has no call to restore that) and the heap is trimmed
    once.

    Contract: for a process that owns its allocator -- the ``calengine`` command, not a Python caller's
    process, whose allocator settings are its own (``enabled=False``: nothing changes).  Results are the
    same bits either way; only where freed memory goes changes.  Why and what it buys: a 10M-row
    embedded fit of a score column faulted in ~140-215k fresh pages (its temporaries, freed after each
    chunk or task, went back to the system), 1.3-2.7 s of system time against 3 s of user time; kept,
    25-95k, system time -0.6 to -1.4 s, peak within 5 % (``benchmarks/results/score_columns_half.md``).
    The peak stays bounded by what the threads hold at once, which the chunked tasks bound whatever
    the table's size; the score-range tasks trim all the same (:func:`trims_heap_even_when_kept`)."""
    global _keeping
    if not enabled or _mallopt is None:
        yield
        return
    _mallopt(_M_MMAP_THRESHOLD, KEPT_MMAP_THRESHOLD)
    _mallopt(_M_TRIM_THRESHOLD, KEPT_TRIM_THRESHOLD)
    _keeping += 1
    try:
        yield
    finally:
        _keeping -= 1
        if not _keeping:
            _mallopt(_M_TRIM_THRESHOLD, _DEFAULT_THRESHOLD)
            _mallopt(_M_MMAP_THRESHOLD, _DEFAULT_THRESHOLD)
            release_freed_memory()


def _env_threshold(name: str) -> int:
    """The threshold glibc read from the environment variable ``name`` when the process started, else
    its default (128 KiB)."""
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return _DEFAULT_THRESHOLD
    return value if value >= 0 else _DEFAULT_THRESHOLD


def _nanny_worker() -> bool:
    """Whether this thread runs a task of a Dask worker started by a nanny (its own process, with the
    nanny's frozen mmap threshold) whose environment chose no mmap threshold: not the threads of a
    ``ThreadClient`` or of an in-process cluster, whose process belongs to its caller, nor the workers
    ``--cluster local`` starts (:data:`calengine.runtime.client.WORKER_MMAP_THRESHOLD`) or any worker started
    with ``MALLOC_MMAP_THRESHOLD_`` (its owner's choice stands)."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return False
    try:
        return distributed.get_worker().nanny is not None
    except ValueError:  # not in a worker's thread
        return False


def _memory_limit() -> float | None:
    """This Dask worker's memory limit in bytes (None: unlimited)."""
    distributed = sys.modules.get("distributed")
    try:
        return distributed.get_worker().memory_manager.memory_limit or None
    except (AttributeError, ValueError):
        return None


def _resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@contextmanager
def task_heap() -> Iterator[bool]:
    """For the length of one fragment task on a nanny's Dask worker (:func:`_nanny_worker`): glibc
    keeps freed memory for reuse, as :func:`kept_heap` does for a whole embedded job (its thresholds);
    when the last such task of the process ends, the thresholds are the process's again (the trim
    threshold of ``MALLOC_TRIM_THRESHOLD_``, the mmap threshold glibc's 128 KiB; either no longer
    adjusted dynamically where it was: glibc cannot restore that) and the heap is trimmed if the process's
    resident memory is above :data:`TASK_TRIM_FRACTION` of the worker's memory limit (always where it
    cannot be read; never on a worker without a limit, which Dask never pauses).  Elsewhere it does
    nothing.

    Why: on a started cluster every temporary of a Newton round was mapped and faulted in anew (module
    docstring); kept, a 10M-row temperature fit's workers took ~10-100x fewer page faults and about
    half the CPU (``benchmarks/results/score_columns_close_s10.md``).  Why not trim by the heap's free
    bytes: glibc counts pages it already gave back as free, so after one large fit that count stayed
    above any budget and every task trimmed (and refaulted) again.  Results are the same bits; only
    where freed memory goes changes.  The score-range tasks (:func:`trims_heap_even_when_kept`) run
    without it and trim as they end: their temporaries of every size, kept on the heap, raised an
    isotonic fit's workers' peak by 12-15 % at 10^7 and 10^8 rows.  Yields whether it kept the heap."""
    global _tasks
    if _mallopt is None or _keeping or not _nanny_worker():
        yield False
        return
    with _tasks_lock:
        if not _tasks:
            _mallopt(_M_MMAP_THRESHOLD, KEPT_MMAP_THRESHOLD)
            _mallopt(_M_TRIM_THRESHOLD, KEPT_TRIM_THRESHOLD)
        _tasks += 1
    try:
        yield True
    finally:
        with _tasks_lock:
            _tasks -= 1
            if not _tasks:
                _mallopt(_M_TRIM_THRESHOLD, _env_threshold("MALLOC_TRIM_THRESHOLD_"))
                _mallopt(_M_MMAP_THRESHOLD, _DEFAULT_THRESHOLD)  # the environment sets none (_nanny_worker)
                limit, resident = _memory_limit(), _resident_bytes()
                if limit is not None and (resident is None or resident > TASK_TRIM_FRACTION * limit):
                    _trim(0)


def trims_heap_even_when_kept(task):
    """:func:`trims_heap` that trims inside a :func:`kept_heap` too: for the tasks that cut held-out
    scores into score ranges and fit them (isotonic, Venn-ABERS, ...).  Their temporaries are of every
    size, and kept, they left the heap ever more fragmented: a 10^8-row isotonic fit peaked at 887 MiB
    against 600 MiB at 10^7 (trimmed after these tasks: 613 MiB, flat), while the chunked rounds'
    temporaries (sigmoid, temperature) reuse the same sizes and stay flat kept (225 MiB at both)."""
    return _trimming(task, even_when_kept=True)


def trims_heap(task):
    """Decorate a task function so that the heap is trimmed after it runs, whether it succeeds or not;
    on a nanny's Dask worker the task runs in :func:`task_heap` instead, which trims only near the
    worker's memory limit.  ``functools.wraps`` keeps its name, so Dask's task names and pickling by
    reference are unchanged."""
    return _trimming(task, even_when_kept=False)


def _trimming(task, even_when_kept: bool):
    if even_when_kept:  # the score-range tasks: arrays of every size, so mapped as the worker maps them
        @functools.wraps(task)
        def run(*args, **kwargs):
            try:
                return task(*args, **kwargs)
            finally:
                release_freed_memory(even_when_kept=True)

        return run

    @functools.wraps(task)
    def run(*args, **kwargs):
        kept = False
        try:
            with task_heap() as kept:
                return task(*args, **kwargs)
        finally:
            if not kept:  # task_heap trimmed as it ended, if it had to
                release_freed_memory()

    return run
