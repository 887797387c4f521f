"""The one place that decides where tasks run.

* no ``--cluster``: an embedded scheduler in this process (``LocalCluster(processes=False)``), its
  worker threads sharing the client's memory, so nothing is copied; commands that only map tasks over
  chunks (score, decide, evaluate: ``map_only``) get a :class:`~calengine.thread_client.ThreadClient`
  instead, the same threads without the scheduler;
* ``--cluster`` alone (``"local"``): a ``LocalCluster`` of worker processes on this machine;

(both local forms listen on 127.0.0.1 only, with their logs silenced: errors reach the user as one
line from the CLI, not as worker log records);
* ``--cluster tcp://HOST:PORT`` or ``tls://...``: that scheduler.

Before any work goes to separate worker processes, :func:`check_workers` compares versions of the
packages that decide a model's bits (calengine, its plugins, scikit-learn, numpy, scipy, pandas,
pyarrow, dask, distributed, cloudpickle, Python) and that every worker imports the plugin modules the
job uses.  Dask's own check only warns and ignores several of these.  Workers may join after that
check, so the client handed to the job (:class:`CheckedClient`) also wraps every task it submits in
:class:`VersionChecked`: the task compares the versions of the worker that runs it with the client's
and fails, naming the difference, before doing any work.

:func:`job_client` is the same choice for the Python API's command functions (``score_table``,
``evaluate_models``, ``recalibrate``), made once their inputs are checked.  The module is long (~700
lines) because it is that one place: embedded, local and remote clients, TLS, the worker checks and
the one-line messages for a failing cluster must agree, and split apart they would drift.

Trust: a Dask scheduler runs whatever its clients send, and the client unpickles what workers return,
so everyone who can reach a plain ``tcp://`` scheduler can run code on the workers *and* in the client.
Connecting to a ``tcp://`` address that is not loopback prints one warning line saying so.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from .errors import ClusterError, ParameterError
from .tasks.arrays import pinned_native_threads

CHECKED_PACKAGES = (
    "calengine",
    "scikit-learn",
    "numpy",
    "scipy",
    "pandas",
    "pyarrow",
    "dask",
    "distributed",
    "cloudpickle",
    "skops",
)

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


@dataclass(frozen=True)
class TLSConfig:
    ca_file: str
    cert: str
    key: str


def environment_versions(extra_distributions: tuple[str, ...] = ()) -> dict[str, str]:
    """Versions of the packages that must match between client and workers (runs on workers too)."""
    from importlib import metadata

    out = {"python": ".".join(map(str, sys.version_info[:3]))}
    for name in tuple(CHECKED_PACKAGES) + tuple(extra_distributions):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def import_modules(modules: tuple[str, ...]) -> dict[str, str]:
    """Import each module; map the ones that fail to their error (runs on workers)."""
    import importlib

    failed = {}
    for m in modules:
        try:
            importlib.import_module(m)
        except Exception as exc:  # noqa: BLE001 - reported to the client
            failed[m] = f"{type(exc).__name__}: {exc}"
    return failed


_WORKER_VERSIONS: dict[tuple[str, ...], dict[str, str]] = {}


def _versions_here(distributions: tuple[str, ...]) -> dict[str, str]:
    """:func:`environment_versions`, computed once per process (tasks call this on every run)."""
    key = tuple(distributions)
    if key not in _WORKER_VERSIONS:
        _WORKER_VERSIONS[key] = environment_versions(key)
    return _WORKER_VERSIONS[key]


def version_difference(client_versions: dict[str, str], here: dict[str, str], where: str) -> str | None:
    """One line naming the first package whose version differs, or None when all agree."""
    for pkg, version in client_versions.items():
        if here.get(pkg) != version:
            return (
                f"{pkg} differs: client has {version}, {where} has {here.get(pkg)}; install the"
                " same versions on the client, scheduler and every worker (one image for all)"
            )
    return None


class VersionChecked:
    """``fn`` preceded, on the worker that runs it, by a check of that worker's package versions.

    A worker that joined after :func:`check_workers` ran (or was replaced by one from another image)
    is caught by the first task it runs: the task raises :class:`ClusterError` and the job fails in
    one line instead of silently mixing models built by different library versions.

    The function and every argument that is not a Dask future travel pickled inside this object and
    are unpickled only after the check.  Otherwise a worker without a plugin the client has would
    fail to unpickle the task before any check ran, and Dask does not report that as a task error:
    the worker's connection handler dies and the task waits for ever (seen with distributed 2026.8:
    a plain ``submit`` with an argument of a module the worker lacks never finishes).
    """

    def __init__(self, fn, versions: dict[str, str], distributions: tuple[str, ...], args=(), kwargs=None):
        import cloudpickle

        kwargs = kwargs or {}
        self.dynamic = tuple(i for i, a in enumerate(args) if _holds_futures(a))
        static_args = {i: a for i, a in enumerate(args) if i not in self.dynamic}
        self.n_args = len(args)
        # Protocol 5 with the array buffers kept apart: Dask pickles those out of band too, so a large
        # model sent to the workers is not copied into one more bytes object on the way.
        buffers: list = []
        self.payload = cloudpickle.dumps((fn, static_args, kwargs), protocol=5, buffer_callback=buffers.append)
        self.buffers = buffers
        self.versions = versions
        self.distributions = tuple(distributions)
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)  # task keys keep the function's name

    def dask_args(self, args) -> tuple:
        """The arguments Dask must resolve (the futures), in order."""
        return tuple(args[i] for i in self.dynamic)

    def __call__(self, *resolved, **dask_kwargs):
        import pickle

        where = _worker_name()
        problem = version_difference(self.versions, _versions_here(self.distributions), where)
        if problem:
            raise ClusterError(problem)
        try:
            fn, static_args, kwargs = pickle.loads(self.payload, buffers=self.buffers)
        except Exception as exc:  # noqa: BLE001 - a package or plugin missing on this worker
            reason = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise ClusterError(
                f"{where} cannot load a task of this job ({type(exc).__name__}: {reason}); it lacks a package"
                " or plugin the client has: install the same packages and plugins on every worker (one image"
                " for all)"
            ) from None
        filled = dict(static_args)
        filled.update(zip(self.dynamic, resolved))
        return fn(*(filled[i] for i in range(self.n_args)), **kwargs, **dask_kwargs)

    def __dask_tokenize__(self):
        import hashlib

        digest = hashlib.sha1(self.payload)
        for b in self.buffers:
            digest.update(b.raw())
        return ("VersionChecked", digest.hexdigest(), self.dynamic, sorted(self.versions.items()))


def _holds_futures(value, depth: int = 0) -> bool:
    """Whether Dask must resolve something inside ``value`` (a future, or one in a list, tuple, set or
    dict, which Dask looks into)."""
    from distributed import Future

    if isinstance(value, Future):
        return True
    if depth > 3:
        return False
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_holds_futures(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(_holds_futures(v, depth + 1) for v in value.values())
    return False


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return f"worker {get_worker().address}"
    except (ImportError, ValueError):
        return "this process"


class CheckedClient:
    """A ``distributed.Client`` whose ``submit`` runs every task under :class:`VersionChecked`.

    Everything else (gather, scatter, run, loop, close, ...) is the client's own.
    """

    def __init__(self, client, distributions: tuple[str, ...] = ()):
        self._client = client
        self._distributions = tuple(distributions)
        self._versions = environment_versions(self._distributions)

    def __getattr__(self, name):
        return getattr(self._client, name)

    @property
    def plain(self):
        """The ``distributed.Client`` itself, for libraries that insist on one (xgboost.dask,
        lightgbm.dask): their own tasks then run without the per-task version check, the workers
        having passed :func:`check_workers` when the job started."""
        return self._client

    def submit(self, fn, *args, **kwargs):
        options = {k: kwargs.pop(k) for k in _SUBMIT_OPTIONS if k in kwargs}
        if any(_holds_futures(v) for v in kwargs.values()):  # keyword futures: rare, left to Dask
            checked = VersionChecked(fn, self._versions, self._distributions, args)
            return self._client.submit(checked, *checked.dask_args(args), **kwargs, **options)
        checked = VersionChecked(fn, self._versions, self._distributions, args, kwargs)
        return self._client.submit(checked, *checked.dask_args(args), **options)

    def map(self, fn, *iterables, **kwargs):
        """``Client.map`` as one checked ``submit`` per item; ``key`` may be a list of keys or a prefix."""
        options = {k: kwargs.pop(k) for k in _SUBMIT_OPTIONS if k in kwargs}
        items = list(zip(*iterables))
        keys = options.pop("key", None)
        if isinstance(keys, str):
            keys = [f"{keys}-{i}" for i in range(len(items))]
        keys = keys if keys is not None else [None] * len(items)
        return [self.submit(fn, *args, **kwargs, **options, **({"key": k} if k is not None else {}))
                for args, k in zip(items, keys)]


#: keyword arguments of ``Client.submit`` that are Dask's, not the task function's
_SUBMIT_OPTIONS = ("key", "workers", "resources", "retries", "priority", "fifo_timeout", "allow_other_workers",
                   "actor", "actors", "pure")


def plain_client(client):
    """``client`` as a ``distributed.Client`` (unwrapping a :class:`CheckedClient`)."""
    return client.plain if isinstance(client, CheckedClient) else client


def check_workers(client, distributions: tuple[str, ...], modules: tuple[str, ...]) -> None:
    """Refuse, with one line, to run on workers whose environment differs from the client's."""
    mine = environment_versions(distributions)
    # A worker that dies while answering is left out rather than failing the job with a comms
    # traceback: it runs nothing, and a replacement is checked by every task it runs (VersionChecked).
    theirs = client.run(environment_versions, distributions, on_error="ignore")
    if not theirs:
        raise ClusterError(
            f"no worker of the cluster at {client.scheduler.address} answered; start workers"
            " (dask worker <scheduler-address>) and run the command again"
        )
    theirs["scheduler"] = client.run_on_scheduler(environment_versions, distributions)
    for where, versions in sorted(theirs.items()):
        problem = version_difference(mine, versions, where)
        if problem:
            raise ClusterError(problem)
    failures = client.run(import_modules, modules, on_error="ignore")
    for where, failed in sorted(failures.items()):
        if failed:
            module, err = next(iter(failed.items()))
            raise ClusterError(
                f"worker {where} cannot import plugin module '{module}' ({err}); install the plugin"
                " on every worker"
            )


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
    """Whether :func:`dask_client` hands out a :class:`~calengine.thread_client.ThreadClient`: a job
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
    worker enforces) it then gets a :class:`~calengine.thread_client.ThreadClient` of ``workers``
    threads, the same tasks on the same kind of threads without importing ``distributed`` and
    starting its scheduler (0.4-0.6 s, a fifth of scoring 10M rows).  ``keep_heap``: this process owns
    its allocator (the ``calengine`` command), so a job on threads keeps freed memory for reuse
    (:func:`calengine.tasks.heap.kept_heap`).

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
        from .tasks.heap import kept_heap

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
        client = _connect(cluster, tls)
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


def _connect(address: str, tls: TLSConfig | None):
    from distributed import Client

    if "://" not in address:
        raise ClusterError(f"cluster address '{address}' needs a scheme; use tcp://HOST:PORT or tls://HOST:PORT")
    security = None
    if address.startswith("tls://"):
        if tls is None:
            raise ClusterError(
                f"'{address}' needs TLS credentials; pass --tls-ca-file, --tls-cert and --tls-key"
            )
        security = _security(tls)
        _check_tls_handshake(address, tls)
    elif tls is not None:
        raise ClusterError(f"TLS credentials given but '{address}' is not a tls:// address; use tls://HOST:PORT")
    else:
        warn_plain_tcp(address)
    try:
        client = Client(address, security=security, timeout="10s", set_as_default=False)
    except TypeError as exc:  # distributed's error for a TLS client without a certificate
        raise ClusterError(f"TLS connection to {address} failed ({exc}); check --tls-cert and --tls-key") from exc
    except (OSError, TimeoutError, ValueError) as exc:  # ValueError: tornado's "IOStream is not idle"
        raise ClusterError(_unreachable(address, exc)) from exc
    if not client.scheduler_info().get("workers"):
        try:
            client.wait_for_workers(1, timeout=10)
        except TimeoutError as exc:
            client.close()
            raise ClusterError(f"the scheduler at {address} has no workers; start one with 'dask worker {address}'") from exc
    return client


def _security(tls: TLSConfig):
    """A ``Security`` for ``tls``, after checking each file exists and the certificate and key load."""
    import ssl

    from distributed.security import Security

    for flag, path in (("--tls-ca-file", tls.ca_file), ("--tls-cert", tls.cert), ("--tls-key", tls.key)):
        if not os.path.isfile(path):
            raise ClusterError(f"{flag} '{path}' does not exist or is not a file; give the path of a PEM file")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    try:
        context.load_verify_locations(cafile=tls.ca_file)
    except (ssl.SSLError, ValueError) as exc:
        raise ClusterError(
            f"--tls-ca-file '{tls.ca_file}' is not a PEM CA certificate ({_ssl_reason(exc)}); give the CA that signed the scheduler's certificate"
        ) from exc
    try:
        context.load_cert_chain(tls.cert, tls.key)
    except (ssl.SSLError, ValueError) as exc:
        raise ClusterError(
            f"cannot load the client certificate '{tls.cert}' with key '{tls.key}' ({_ssl_reason(exc)});"
            " check that --tls-key is the unencrypted PEM private key of --tls-cert"
        ) from exc
    return Security(tls_ca_file=tls.ca_file, tls_client_cert=tls.cert, tls_client_key=tls.key, require_encryption=True)


def _check_tls_handshake(address: str, tls: TLSConfig, timeout: float = 10.0) -> None:
    """Shake hands with the scheduler before Dask does, and say in one line why it failed.

    Dask's own attempt at a plain ``tcp://`` scheduler fails in one of several ways depending on timing
    (tornado's "IOStream is not idle", a 20 s timeout, a traceback from the half-made client's
    ``__del__``), so the TLS handshake is tried here first with the same settings as Dask's
    ``Security`` (the CA verifies the scheduler's certificate; host names are not checked).
    """
    import socket
    import ssl

    _, host, port = _split_address(address)
    try:
        raw = socket.create_connection((host, int(port)), timeout=timeout)
    except (OSError, ValueError) as exc:
        raise ClusterError(_unreachable(address, exc)) from exc
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls.ca_file)
    context.check_hostname = False
    context.load_cert_chain(tls.cert, tls.key)
    try:
        with context.wrap_socket(raw, server_hostname=host):
            pass
    except OSError as exc:  # ssl.SSLError, a reset or a timeout in the middle of the handshake
        raise ClusterError(_tls_failed(address, _ssl_reason(exc))) from exc
    finally:
        raw.close()


def _split_address(address: str) -> tuple[str, str, str]:
    """``tls://[::1]:8786`` -> ``("tls", "::1", "8786")``: scheme, host without brackets, port text."""
    scheme, _, rest = address.partition("://")
    host, _, port = rest.rpartition(":")
    return scheme, host.strip("[]"), port


def _tls_failed(address: str, reason: str) -> str:
    return (
        f"{address} accepts connections but the TLS handshake failed ({reason}); the scheduler may be a"
        " plain tcp:// one (use tcp://), or its certificate is not signed by --tls-ca-file"
    )


def _ssl_reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or " ".join(str(exc).split())[:200] or type(exc).__name__


def _unreachable(address: str, exc: BaseException) -> str:
    """Why a connection failed: nothing listening, or a listener that speaks the other protocol."""
    scheme, host, port = _split_address(address)
    listening = _port_open(host, port)
    reason = " ".join(str(exc).split())[:200] or type(exc).__name__
    if listening and scheme == "tls":
        return _tls_failed(address, reason)
    if listening and scheme == "tcp":
        return (
            f"{address} accepts connections but does not answer as a tcp:// Dask scheduler ({reason});"
            " if it was started with --protocol tls, connect with tls:// and --tls-ca-file/--tls-cert/--tls-key"
        )
    return f"cannot reach the Dask scheduler at {address} ({reason}); start it with 'dask scheduler' or fix the address"


def _port_open(host: str, port: str) -> bool:
    import socket

    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except (OSError, ValueError):
        return False


_WARNED: set[str] = set()


def is_loopback(host: str) -> bool:
    import ipaddress

    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def warn_plain_tcp(address: str) -> bool:
    """One stderr line, once per process and address, when ``address`` is plain TCP beyond loopback."""
    scheme, _, rest = address.partition("://")
    host = rest.rpartition(":")[0] or rest
    if scheme != "tcp" or is_loopback(host) or address in _WARNED:
        return False
    _WARNED.add(address)
    sys.stderr.write(
        f"warning: {address} is plain tcp://: anyone who can reach it can run code on its workers and in"
        " this process; use tls:// (see README, 'Trust')\n"
    )
    return True
