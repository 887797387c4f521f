"""The one place that decides where tasks run.

* no ``--cluster``: an embedded scheduler in this process (``LocalCluster(processes=False)``), its
  worker threads sharing the client's memory, so nothing is copied;
* ``--cluster`` alone (``"local"``): a ``LocalCluster`` of worker processes on this machine;

(both local forms listen on 127.0.0.1 only, with their logs silenced: errors reach the user as one
line from the CLI, not as worker log records);
* ``--cluster tcp://HOST:PORT`` or ``tls://...``: that scheduler.

Before any work goes to separate worker processes, :func:`check_workers` compares versions of the
packages that decide a model's bits (calengine, its plugins, scikit-learn, numpy, scipy, pandas,
pyarrow, dask, distributed, cloudpickle, Python) and that every worker imports the plugin modules the
job uses.  Dask's own check only warns and ignores several of these.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from .errors import ClusterError
from .tasks import pinned_native_threads

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


#: Share of a worker's memory limit that held task results may occupy before Dask spills them to the
#: worker's local disk, on the clusters calengine starts.  The one O(rows) thing a fit holds is the
#: held-out scores that exact isotonic/ROC calibration needs sorted across the whole table (9 bytes a
#: row); spilling them beyond a small fixed budget keeps a worker's peak memory the same at 10M and
#: 100M rows (Dask's default, 60 %, would let them grow with the table until the limit).  Remote
#: workers keep their own setting: ``distributed.worker.memory.target`` in their Dask configuration.
HELD_DATA_FRACTION = 1 / 32


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


def check_workers(client, distributions: tuple[str, ...], modules: tuple[str, ...]) -> None:
    """Refuse, with one line, to run on workers whose environment differs from the client's."""
    mine = environment_versions(distributions)
    theirs = client.run(environment_versions, distributions)
    theirs["scheduler"] = client.run_on_scheduler(environment_versions, distributions)
    for where, versions in sorted(theirs.items()):
        for pkg, version in mine.items():
            if versions.get(pkg) != version:
                raise ClusterError(
                    f"{pkg} differs: client has {version}, {where} has {versions.get(pkg)}; install the"
                    " same versions on the client, scheduler and every worker (one image for all)"
                )
    failures = client.run(import_modules, modules)
    for where, failed in sorted(failures.items()):
        if failed:
            module, err = next(iter(failed.items()))
            raise ClusterError(
                f"worker {where} cannot import plugin module '{module}' ({err}); install the plugin"
                " on every worker"
            )


def default_threads() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


@contextmanager
def dask_client(
    cluster: str | None = None,
    workers: int | None = None,
    tls: TLSConfig | None = None,
    distributions: tuple[str, ...] = (),
    modules: tuple[str, ...] = (),
    memory_limit: str | None = None,
) -> Iterator[object]:
    """Yield a ``distributed.Client`` for ``cluster`` (see the module docstring), closed afterwards.

    ``memory_limit`` (e.g. ``"6GiB"``) caps each worker of a local cluster (Dask's ``memory_limit``:
    workers spill, pause and are restarted beyond it); a remote cluster's workers set their own.
    ``distributions`` may be a callable returning ``(distributions, modules)``: it is called once the
    cluster has started, so the caller can load plugins while worker processes spawn.
    """

    def requirements():
        return distributions() if callable(distributions) else (distributions, modules)

    local_memory = {} if memory_limit is None else {"memory_limit": memory_limit}
    import dask
    from distributed import Client, LocalCluster

    # Worker processes may start their own children (joblib inside a third-party learner).  Workers we
    # start keep at most HELD_DATA_FRACTION of their memory limit in held task results (Dask's spill
    # "target"; the least recently used results go to the worker's local disk beyond it).
    with dask.config.set({"distributed.worker.daemon": False, "distributed.worker.memory.target": HELD_DATA_FRACTION}):
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
            try:
                # tasks run as threads of this process: pin its native pools for the whole job
                with pinned_native_threads():
                    yield client
            finally:
                client.close()
                lc.close()
            return
        if cluster == "local":
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
                check_workers(client, *requirements())
                yield client
            finally:
                client.close()
                lc.close()
            return
        client = _connect(cluster, tls)
        try:
            check_workers(client, *requirements())
            yield client
        finally:
            client.close()


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


def _connect(address: str, tls: TLSConfig | None):
    from distributed import Client

    security = None
    if address.startswith("tls://"):
        if tls is None:
            raise ClusterError(
                f"'{address}' needs TLS credentials; pass --tls-ca-file, --tls-cert and --tls-key"
            )
        from distributed.security import Security

        security = Security(
            tls_ca_file=tls.ca_file,
            tls_client_cert=tls.cert,
            tls_client_key=tls.key,
            require_encryption=True,
        )
    elif tls is not None:
        raise ClusterError(f"TLS credentials given but '{address}' is not a tls:// address; use tls://HOST:PORT")
    if "://" not in address:
        raise ClusterError(f"cluster address '{address}' needs a scheme; use tcp://HOST:PORT or tls://HOST:PORT")
    try:
        client = Client(address, security=security, timeout="10s", set_as_default=False)
    except TypeError as exc:  # distributed's error for a TLS client without a certificate
        raise ClusterError(f"TLS connection to {address} failed ({exc}); check --tls-cert and --tls-key") from exc
    except (OSError, TimeoutError) as exc:
        raise ClusterError(
            f"cannot reach the Dask scheduler at {address} ({exc}); start it with 'dask scheduler' or fix the address"
        ) from exc
    if not client.scheduler_info().get("workers"):
        try:
            client.wait_for_workers(1, timeout=10)
        except TimeoutError as exc:
            client.close()
            raise ClusterError(f"the scheduler at {address} has no workers; start one with 'dask worker {address}'") from exc
    return client
