"""Native thread pools pinned to one thread: Dask already runs tasks in parallel, and a fixed thread
count keeps floating-point reductions (hence model bits) identical on any cluster layout.

:func:`pin_native_threads` pins a process's BLAS and OpenMP pools for good (worker processes, a task
thread); :class:`pinned_native_threads` pins them for a block and restores them (the client process
while an embedded scheduler or thread client runs its tasks).
"""

from __future__ import annotations

import threading

_pinned = False
#: per-thread: whether this thread's OpenMP pool is pinned (:func:`pin_native_threads`)
_thread_pins = threading.local()


def pin_native_threads() -> None:
    """Pin this process's BLAS/OpenMP pools to one thread, once, and leave them so.

    A scoped limit would be wrong here: the limit is process-wide, so when one of two concurrent
    tasks left its scope it would hand two BLAS threads back to the other task mid-fit, and
    floating-point reductions (hence model bits) would depend on timing.  Worker processes keep the
    pin for life; the embedded scheduler pins the client process only while it runs
    (:func:`calengine.runtime.client.dask_client`).
    """
    global _pinned
    if not _pinned:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1)
        _pinned = True
    if not getattr(_thread_pins, "openmp", False):
        # OpenMP's thread count is a per-thread setting (omp_set_num_threads sets the calling thread's
        # value): the process-wide pin above reaches BLAS but not OpenMP in the other threads, so each
        # task thread pins its own once.  Unpinned, scikit-learn's HistGradientBoosting started a
        # joblib thread pool per fit in every Dask thread, and two of them starting and ending at once
        # deadlocked in multiprocessing.pool (found by the full estimator matrix, issue 23).
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="openmp")
        _thread_pins.openmp = True


class pinned_native_threads:
    """Context: one native thread per pool in this process for the block, restored afterwards."""

    def __enter__(self):
        global _pinned
        from threadpoolctl import threadpool_limits

        self._previous = _pinned, getattr(_thread_pins, "openmp", False)
        self._limits = threadpool_limits(limits=1)  # OpenMP too, for this thread
        _pinned = _thread_pins.openmp = True
        return self

    def __exit__(self, *exc):
        global _pinned
        self._limits.restore_original_limits()
        _pinned, _thread_pins.openmp = self._previous
        return False
