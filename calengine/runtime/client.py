"""The one place that decides where tasks run.

* no ``--cluster``: an embedded scheduler in this process (``LocalCluster(processes=False)``), its
  worker threads sharing the client's memory, so nothing is copied; commands that only map tasks over
  chunks (score, decide, evaluate: ``map_only``) get a :class:`~calengine.runtime.thread_client.ThreadClient`
  instead, the same threads without the scheduler;
* ``--cluster`` alone (``"local"``): a ``LocalCluster`` of worker processes on this machine;

(both local forms listen on 127.0.0.1 only, with their logs silenced: errors reach the user as one
line from the CLI, not as worker log records);
* ``--cluster tcp://HOST:PORT`` or ``tls://...``: that scheduler (:mod:`.connection`).

Whatever the cluster, work that goes to separate worker processes runs under the version checks of
:mod:`.versions`.  :func:`job_client` is the same choice for the Python API's command functions
(``score_table``, ``evaluate_models``, ``recalibrate``), made once their inputs are checked, and
:func:`cluster_failure` turns the ways a cluster fails under a job into one line.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from typing import Iterator

from ..errors import ClusterError, ParameterError
from .connection import TLSConfig, connect
from .threads import pinned_native_threads
from .versions import CheckedClient, check_workers

#: Share of a worker's memory limit that held task results may occupy before Dask spills the least
#: recently used ones to the worker's local disk, on the worker processes ``--cluster local`` starts.
#: The one O(rows) thing a fit holds is its held-out scores (9 bytes a row, needed by every Newton
#: round and by the sorted isotonic/ROC rounds); spilling them beyond a small budget keeps a worker's
#: peak memory the same at 10M and 100M rows, where Dask's default (60 %) lets them grow with the
#: table.  Remote workers keep their own ``distributed.worker.memory.target``.
HELD_DATA_FRACTION = 1 / 64

#: glibc's mmap threshold for the worker processes ``--cluster local`` starts.  Dask's nanny sets
#: ``MALLOC_TRIM_THRESHOLD_``, which also freezes glibc's mmap threshold at 128 KiB: every NumPy
#: temporary above that (a score vector of a calibration problem, a column of a fragment) became a
#: fresh mmap, page-faulted in and unmapped again, and a Newton round's pass over the held-out scores
#: ran 3x slower in a worker than in the embedded scheduler.  Up to 4 MiB they now come from the heap
#: (which the trim threshold still returns to the system from its top); larger arrays are still
#: unmapped when freed, so a worker's peak stays flat from 10M to 100M rows (32 MiB was as fast but
#: let the heap grow 21 %).  Remote workers: ``MALLOC_MMAP_THRESHOLD_=4194304`` in their environment.
WORKER_MMAP_THRESHOLD = 4 * 2**20

#: Dask pauses a worker whose process memory passes 80 % of its limit, until it falls again.  Most of a
#: calengine worker's memory is not Dask's to release (the libraries it imports, the heap), so a
#: paused worker can stay paused for ever and the fit waits without end: a CI run hung 600 s on two
#: 512 MiB workers whose peaks, measured here, came within 15 MiB of that threshold.  The workers ``--cluster local`` starts therefore never pause; they
#: still spill held results (above) and are restarted by their nanny at 95 %, which Dask retries and,
#: if it repeats, reports as a lost worker in one line naming ``--worker-memory``.
WORKER_PAUSE_FRACTION = False

def cluster_failure(exc: BaseException) -> str | None:
    """One line for an exception that means the cluster itself failed under the job (the scheduler
    went away, every worker died, a task kept killing its workers); None for anything else."""
    if "distributed" not in sys.modules:
        return None
    import asyncio
    import concurrent.futures

    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    import re

    reason = " ".join(str(exc).split())[:200] or type(exc).__name__
    reason = re.sub(r"^in <[^>]*>: ", "", reason)  # CommClosedError's object repr says nothing to a user
    cancelled = re.search(r"reason: ([\w-]+)", reason)
    if cancelled:
        reason = cancelled.group(1)
    if isinstance(exc, KilledWorker):
        return (
            f"a task died with {reason}: it was running on workers that died in turn (out of memory, or killed);"
            " nothing was published; give workers more memory (--worker-memory, dask worker --memory-limit)"
        )
    if isinstance(exc, (FutureCancelledError, CommClosedError, concurrent.futures.CancelledError,
                        asyncio.CancelledError)):
        return (
            f"lost the Dask scheduler or its workers during the job ({type(exc).__name__}: {reason}); nothing was published;"
            " check that the scheduler and workers are running, then run the command again"
        )
    if isinstance(exc, TimeoutError):
        return (
            f"the Dask scheduler did not answer in time ({reason}); check that it is running and reachable with"
            " this protocol (tcp:// or tls://), then run the command again"
        )
    return None

def default_threads() -> int:
    return max(1, min(os.cpu_count() or 1, 8))

def runs_on_threads(cluster: str | None, memory_limit: str | None, map_only: bool) -> bool:
    """Whether :func:`dask_client` hands out a :class:`~calengine.runtime.thread_client.ThreadClient`: a job
    that only maps tasks over chunks, without a cluster and without a memory limit (which only a Dask
    worker enforces)."""
    return bool(map_only) and cluster is None and memory_limit is None

@contextmanager
def dask_client(
    cluster: str | None = None,
    workers: int | None = None,
    tls: TLSConfig | None = None,
    distributions: tuple[str, ...] = (),
    modules: tuple[str, ...] = (),
    memory_limit: str | None = None,
    map_only: bool = False,
    keep_heap: bool = False,
) -> Iterator[object]:
    """Yield a ``distributed.Client`` for ``cluster`` (see the module docstring), closed afterwards.

    ``map_only`` says the job only maps tasks over chunks and reduces their results in the client
    (score, decide, evaluate, and a fit of score columns:
    :func:`calengine.fit.score_columns.runs_as_map`): without a cluster (and without ``memory_limit``, which only a Dask
    worker enforces) it then gets a :class:`~calengine.runtime.thread_client.ThreadClient` of ``workers``
    threads, the same tasks on the same kind of threads without importing ``distributed`` and
    starting its scheduler (0.4-0.6 s, a fifth of scoring 10M rows).  ``keep_heap``: this process owns
    its allocator (the ``calengine`` command), so a job on threads keeps freed memory for reuse
    (:func:`calengine.runtime.heap.kept_heap`).

    ``memory_limit`` (e.g. ``"6GiB"``) caps each worker of a local cluster (Dask's ``memory_limit``:
    workers spill, pause and are restarted beyond it); a remote cluster's workers set their own.
    ``distributions`` may be a callable returning ``(distributions, modules)``: it is called once the
    cluster has started, so the caller can load plugins while worker processes spawn.
    """

    def requirements():
        return distributions() if callable(distributions) else (distributions, modules)

    local_memory = {} if memory_limit is None else {"memory_limit": memory_limit}
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ParameterError(f"workers must be a positive integer, got {workers!r}")
    if runs_on_threads(cluster, memory_limit, map_only):
        from .thread_client import ThreadClient

        # tasks run as threads of this process: pin its native pools for the whole job
        from .heap import kept_heap

        with ThreadClient(workers or default_threads()) as client, pinned_native_threads(), kept_heap(keep_heap):
            yield client
        return
    import dask
    from distributed import Client, LocalCluster

    # Worker processes may start their own children (joblib inside a third-party learner).
    with dask.config.set({"distributed.worker.daemon": False}):
        if cluster is None:
            lc = _start_local(
                LocalCluster,
                n_workers=1,
                threads_per_worker=workers or default_threads(),
                processes=False,
                dashboard_address="127.0.0.1:0",
                silence_logs=logging.CRITICAL,
                **local_memory,
            )
            client = Client(lc, set_as_default=False)
            interrupted = False
            try:
                # tasks run as threads of this process: pin its native pools for the whole job
                with pinned_native_threads():
                    yield client
            except KeyboardInterrupt:
                interrupted = True
                raise
            finally:
                if interrupted:
                    _abandon(client, lc)
                else:
                    client.close()
                    lc.close()
            return
        if cluster == "local":
            with _workers_stderr_quiet():
                yield from _local_processes(LocalCluster, Client, workers, local_memory, requirements)
            return
        client = connect(cluster, tls)
        try:
            dists, mods = requirements()
            check_workers(client, dists, mods)
            yield CheckedClient(client, dists)
        finally:
            client.close()

def job_client(client=None, *, cluster: str | None = None, workers: int | None = None,
               memory_limit: str | None = None, requirements: tuple = ((), ()), map_only: bool = False):
    """The client context of a Python API call (``calengine.score_table``, ``evaluate_models``, ...),
    entered once the job has checked its inputs and knows what its workers need:

    * ``client=None``: :func:`dask_client` for ``cluster``/``workers``/``memory_limit``, checking the
      ``requirements`` (``(distributions, modules)``) on the workers;
    * a callable: ``client(distributions, modules)`` returns the context (how the CLI applies
      ``--cluster`` and its TLS, logging and run-log options);
    * a client: used as it is, left open (its owner checked its workers).
    """
    from contextlib import nullcontext

    if client is None:
        return dask_client(cluster, workers=workers, distributions=requirements[0], modules=requirements[1],
                           memory_limit=memory_limit, map_only=map_only)
    if callable(client):
        return client(*requirements)
    return nullcontext(client)

def _abandon(client, lc, timeout: float = 1.0) -> None:
    """Close an embedded cluster after Ctrl-C without waiting for its running tasks.

    Its workers are threads of this process, and a closing worker waits for the task each thread is
    running; a learner's fit cannot be interrupted, so a Ctrl-C took up to 30 s to end the command.
    Nothing a task does outlives the process (its results were going to a staging area that is already
    removed), so the close gets ``timeout`` seconds and the command exits without the stragglers.
    """
    for close in (client.close, lc.close):
        try:
            close(timeout=timeout)
        except Exception:  # noqa: BLE001 - a timed-out close of threads the process is about to drop
            pass

def _start_local(factory, attempts: int = 3, **kwargs):
    """Start a local cluster, retrying a start-up failure (seen rarely on a loaded machine: the
    scheduler failing to bind) before reporting it as one line."""
    last: Exception | None = None
    for _ in range(attempts):
        try:
            return factory(**kwargs)
        except (RuntimeError, OSError, ValueError) as exc:
            last = exc
    raise ClusterError(f"could not start a local Dask cluster ({last}); check free memory and ports, then retry")

def _local_processes(LocalCluster, Client, workers, local_memory, requirements):
    """The ``--cluster local`` branch of :func:`dask_client` (a generator: yields the client)."""
    import dask

    with dask.config.set({  # workers copy both at spawn
        "distributed.worker.memory.target": HELD_DATA_FRACTION,
        "distributed.worker.memory.pause": WORKER_PAUSE_FRACTION,
        "distributed.nanny.pre-spawn-environ.MALLOC_MMAP_THRESHOLD_": WORKER_MMAP_THRESHOLD,
    }):
        lc = _start_local(
            LocalCluster,
            n_workers=workers or default_threads(),
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.CRITICAL,
            **local_memory,
        )
    client = Client(lc, set_as_default=False)
    try:
        client.wait_for_workers(workers or default_threads(), timeout=120)
        dists, mods = requirements()
        check_workers(client, dists, mods)
        yield CheckedClient(client, dists)
    finally:
        client.close()
        lc.close()

@contextmanager
def _workers_stderr_quiet():
    """Run local worker processes with their stderr on the null device.

    A terminal's Ctrl-C goes to the whole process group: a worker process still importing when it
    arrives prints a ``KeyboardInterrupt`` traceback of its own, burying the one ``error: interrupted``
    line.  Worker processes inherit file descriptor 2 when they are spawned, so it points at the null
    device for the local cluster's whole life -- a nanny restarts a worker that the same Ctrl-C killed,
    and the new process would otherwise log to the terminal -- while this process writes to a
    duplicate of the real stderr (worker log records are silenced anyway, and task errors reach the
    client as exceptions).  Only the CLI needs this (its stderr is the user's report); the Python API
    leaves stderr alone.
    """
    if not QUIET_WORKER_STDERR:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    python_stderr = sys.stderr
    try:
        os.dup2(devnull, 2)
        # this process keeps writing to the real stderr through a duplicate of it
        sys.stderr = open(saved, "w", buffering=1, closefd=False, encoding=getattr(python_stderr, "encoding", None),
                          errors="backslashreplace")
        yield
    finally:
        sys.stderr.flush()
        sys.stderr = python_stderr
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)

#: set by the CLI: local worker processes start with stderr on the null device (see above)
QUIET_WORKER_STDERR = False
