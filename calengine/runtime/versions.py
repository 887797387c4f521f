"""Client and workers must run the same packages: the checks that refuse a cluster whose versions differ.

Before any work goes to separate worker processes, :func:`check_workers` compares versions of the
packages that decide a model's bits (calengine, its plugins, scikit-learn, numpy, scipy, pandas,
pyarrow, dask, distributed, cloudpickle, Python) and that every worker imports the plugin modules the
job uses.  Dask's own check only warns and ignores several of these.  Workers may join after that
check, so the client handed to the job (:class:`CheckedClient`) also wraps every task it submits in
:class:`VersionChecked`: the task compares the versions of the worker that runs it with the client's
and fails, naming the difference, before doing any work.
"""

from __future__ import annotations

import sys

from ..errors import ClusterError

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
