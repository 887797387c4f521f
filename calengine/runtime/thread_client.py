"""Threads of this process behind the part of ``distributed.Client`` that a map over chunks uses.

``score``, ``decide`` and ``evaluate`` without ``--cluster`` submit one task per chunk, wait for them
and reduce the results in the client: no task depends on another's output except through the shared
model (and, for ``evaluate --bootstrap``, a few scattered arrays), and nothing needs a scheduler's
placement or recovery.  An embedded fit of score columns (``fit --scores``, ``--prefit``:
:func:`calengine.fit.score_columns.runs_as_map`) has the same shape: per-fragment tasks whose
statistics are merged in fixed trees or in the client, a task's inputs always submitted before it
(so on a first-in, first-out pool a task waiting for its inputs never holds up the tasks that make
them).  For that shape of
job the embedded Dask scheduler only adds its start: importing ``distributed`` and starting
``LocalCluster(processes=False)`` took 0.4-0.6 s of the 1.5 s that scoring a 10,000-row file took
from launch to exit, a fifth of scoring 10M rows.  :class:`ThreadClient` runs the same task functions
on a thread pool, so results are the same bits; :func:`calengine.runtime.client.dask_client` hands one out
only when the caller says its job is such a map (``map_only``).

What it keeps of ``distributed.Client``: ``submit`` (arguments that are futures of this client are
resolved before the call, as Dask resolves them), ``scatter`` (futures already holding the data),
``gather`` (results in the given order, the first task's error raised as itself) and
:func:`as_completed`; ``close`` cancels what has not started.  It also records each task's start and stop for ``--json-log`` in the shape of
Dask's task stream.
"""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import as_completed as _futures_as_completed


class ThreadClient:
    """``threads`` worker threads in this process, used like a ``distributed.Client`` (see the module
    docstring).  Close it (or use it as a context manager) to cancel what has not started."""

    address = "threads"

    def __init__(self, threads: int) -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.threads = int(threads)
        self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="calengine-task")
        self._counter = itertools.count()
        self._lock = threading.Lock()
        #: one record per finished task: ``key``, ``worker`` and ``startstops`` as in Dask's task stream
        self.task_records: list[dict] = []

    def submit(self, fn, *args, pure: bool | None = None, key: str | None = None, **kwargs) -> Future:
        """Run ``fn(*args, **kwargs)`` on a pool thread; futures of this client among ``args`` and
        ``kwargs``, also inside lists, tuples and dicts (as Dask resolves them: a fit hands its score
        tasks the list of its learners' futures), are replaced by their results first.  ``pure`` is
        accepted for Dask's signature and ignored: every call runs."""
        name = key or f"{getattr(fn, '__name__', 'task')}-{next(self._counter)}"
        return self._pool.submit(self._run, name, fn, args, kwargs)

    def _run(self, name: str, fn, args, kwargs):
        resolved = [_resolved(a) for a in args]
        named = {k: _resolved(v) for k, v in kwargs.items()}
        start = time.time()
        try:
            return fn(*resolved, **named)
        finally:
            stop = time.time()
            with self._lock:
                self.task_records.append({"key": name, "worker": self.address,
                                          "startstops": [{"action": "compute", "start": start, "stop": stop}]})

    def scatter(self, data, broadcast: bool = False, **kwargs):
        """Futures already holding ``data`` (one per item of a list or tuple): the threads share this
        process's memory, so nothing moves.  ``broadcast`` and Dask's other options mean nothing here."""
        def held(value) -> Future:
            f: Future = Future()
            f.set_result(value)
            return f

        return [held(v) for v in data] if isinstance(data, (list, tuple)) else held(data)

    def gather(self, futures):
        """The results of ``futures`` in their order (of one future: its result, as Dask's ``gather``
        gives); a failed task raises its own exception."""
        if isinstance(futures, Future):
            return futures.result()
        return [f.result() for f in futures]

    def scheduler_info(self) -> dict:
        """The layout ``--json-log`` records: one 'worker' holding the pool's threads."""
        return {"address": None, "workers": {self.address: {"host": "127.0.0.1", "name": "threads",
                                                            "nthreads": self.threads, "memory_limit": None}}}

    def close(self) -> None:
        """Cancel tasks that have not started and return at once: a running chunk finishes on its
        thread (bounded by one batch's work), and its result is dropped."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> ThreadClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _resolved(value):
    """``value`` with every future in it (also in nested lists, tuples and dicts) replaced by its result."""
    if isinstance(value, Future):
        return value.result()
    if type(value) in (list, tuple):
        return type(value)(_resolved(v) for v in value)
    if type(value) is dict:
        return {k: _resolved(v) for k, v in value.items()}
    return value


def as_completed(client, futures):
    """``futures`` as they finish, for either kind of client: Dask's ``as_completed`` on the client's
    event loop, or :func:`concurrent.futures.as_completed` for a :class:`ThreadClient`."""
    if isinstance(client, ThreadClient):
        return _futures_as_completed(list(futures))
    from distributed import as_completed as _dask_as_completed

    return _dask_as_completed(futures, loop=client.loop)
