"""Handing freed heap memory back to the operating system when a fragment task ends.

A task that reads and encodes a fragment allocates and frees tens of megabytes of NumPy and Arrow
buffers.  glibc keeps freed memory below its mmap threshold in the process heap, and the workers that
``--cluster local`` starts raise that threshold (see :data:`calengine.cluster.WORKER_MMAP_THRESHOLD`)
so those buffers stop costing page faults.  The price is a heap with holes: a 512 MiB worker that had
fitted a 3.5M-row table sat at 335 MiB with 65 MiB of it free but not returned, close to Dask's pause
threshold (80 %), where a worker stops running tasks and a fit can wait forever.  ``malloc_trim(0)``
returns those pages (8 ms the first time on such a heap, well under a millisecond after), so the
fragment tasks call it as they finish.  Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import sys

_trim = None
if sys.platform.startswith("linux"):
    try:
        _trim = ctypes.CDLL("libc.so.6").malloc_trim
        _trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        _trim = None


def release_freed_memory() -> None:
    """Return free heap pages to the operating system (glibc ``malloc_trim(0)``); a no-op elsewhere."""
    if _trim is not None:
        _trim(0)


def trims_heap(task):
    """Decorate a task function so that the heap is trimmed after it runs, whether it succeeds or not.
    ``functools.wraps`` keeps its name, so Dask's task names and pickling by reference are unchanged."""

    @functools.wraps(task)
    def run(*args, **kwargs):
        try:
            return task(*args, **kwargs)
        finally:
            release_freed_memory()

    return run
