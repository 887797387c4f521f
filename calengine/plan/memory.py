"""How much one worker can hold: the memory arithmetic of the partition-native fit.

Apart from the drivers (:mod:`calengine.fit.table`, :mod:`calengine.fit.table_probing`) so both use
one set of estimates, and one wording of the refusal that names the other routes.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile

from ..parquet.dataset import DEFAULT_FRAGMENT_ROWS
from ..errors import DataError


def fragment_rows_for(memory_limit: float, n_columns: int) -> int:
    """Rows per fragment such that a task's copies of one fragment (Arrow, pandas, encoded float64,
    a learner's view: about 32 bytes per value) stay within 1/8 of a worker's memory."""
    if not math.isfinite(memory_limit):
        return DEFAULT_FRAGMENT_ROWS
    rows = int(memory_limit / 8 / (32 * max(1, n_columns + 1)))
    return max(10_000, min(DEFAULT_FRAGMENT_ROWS, rows))


def range_rows_for(memory_limit: float, default: int = 2_000_000) -> int:
    """Rows per score range of a sorted calibrator round: a range task holds its scores and targets
    within 1/8 of a worker's memory.  Measured, a range task's working set is about 110 bytes a row
    (the pieces it receives, their concatenation, the sort's copies), so the budget is 128 bytes a row:
    at 64 a 512 MiB worker's range tasks took it from 270 MiB to 377 MiB, near Dask's pause threshold."""
    if not math.isfinite(memory_limit):
        return default
    return max(10_000, min(default, int(memory_limit / 8 / 128)))


def worker_memory_limit(client) -> float:
    """The smallest memory limit of the cluster's workers (inf when they have none).

    A :class:`~calengine.runtime.thread_client.ThreadClient` (an embedded fit of score columns) has no Dask
    worker: its limit is the one Dask gives the embedded scheduler's single worker by default (the
    machine's memory, or the process's cgroup or RSS limit if lower, times the share of the cores its
    threads use), so a fit plans its fragments and ranges, and refuses what would not fit, the same on
    either client."""
    from ..runtime.thread_client import ThreadClient

    if isinstance(client, ThreadClient):
        return float(int(_machine_memory() * min(1.0, client.threads / (os.cpu_count() or 1))))
    limits = [w.get("memory_limit") or 0 for w in client.scheduler_info().get("workers", {}).values()]
    limits = [m for m in limits if m]
    return float(min(limits)) if limits else math.inf


def _machine_memory() -> float:
    """Dask's ``distributed.system.MEMORY_LIMIT`` without importing ``distributed``: the physical memory,
    capped by a cgroup (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) and ``RLIMIT_RSS``."""
    import resource

    limit = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) > 0:
            limit = min(limit, float(text))
    try:
        rss = resource.getrlimit(resource.RLIMIT_RSS)[0]
    except (OSError, ValueError, AttributeError):
        rss = resource.RLIM_INFINITY
    if rss not in (resource.RLIM_INFINITY, -1) and rss > 0:
        limit = min(limit, float(rss))
    return limit


def feature_width(enc) -> int:
    """Encoded columns of a row (text columns counted as 100, their usual non-zeros)."""
    width = 0
    for c in enc.encoder.columns_:
        width += 100 if c.kind == "text" else c.width(enc.encoder.text_hash_bits)
    return width


def check_fits_memory(ctx, rows: int, what: str, per_row_bytes: float | None = None) -> None:
    """Refuse, in one line, to assemble more rows on one worker than its memory limit allows."""
    per_row = per_row_bytes if per_row_bytes is not None else 8.0 * (feature_width(ctx.enc) + 2)
    need = 3.0 * rows * per_row  # reading + encoding + the learner's own copy
    if need > ctx.memory_limit:
        raise DataError(
            f"{what} needs about {_gib(need)} on one worker ({rows} rows), but workers have"
            f" {_gib(ctx.memory_limit)}; fit on a sample (max_train_rows N), use a learner that fits"
            " from statistics (gaussian_nb, multinomial_nb, see 'calengine plugins'), or give workers more"
            " memory (worker_memory)", parameter=("max_train_rows", "worker_memory"))


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


#: Rows from which an embedded fit keeps its held-out scores on disk (:mod:`calengine.tasks.spill`):
#: one default score range.  Below it they take at most ~34 MiB; from it on, the process holds a bounded
#: number of fragments and ranges at a time, so its peak stops growing with the table.
SPILL_MIN_ROWS = 2_000_000


def spills_held_out(client, n_rows: int) -> bool:
    """Whether a fit's held-out scores go to a scratch directory: from :data:`SPILL_MIN_ROWS` rows, and
    only when every worker sees the driver's file system -- in-process workers (the embedded scheduler,
    whose limit is the machine's memory, so Dask would only spill their results itself past 60 % of it)
    or the worker processes of a local cluster this job started (``--cluster local``; Dask spills
    their results too, but pickled through its own buffer, and their peaks still grew by a third from
    10^7 to 10^8 rows).  Any other cluster's workers spill there only if they prove they share it
    (:func:`held_out_scratch`)."""
    if n_rows < SPILL_MIN_ROWS:
        return False
    from ..runtime.thread_client import ThreadClient

    if isinstance(client, ThreadClient):  # tasks are threads of this process
        return True
    from distributed import LocalCluster

    plain = getattr(client, "plain", client)  # a CheckedClient wraps the distributed.Client
    if isinstance(getattr(plain, "cluster", None), LocalCluster):
        return True
    workers = client.scheduler_info().get("workers", {})
    return bool(workers) and all(str(addr).startswith("inproc://") for addr in workers)


@contextlib.contextmanager
def held_out_scratch(client, n_rows: int):
    """Yield a scratch directory for the fit's held-out scores (None when they stay in memory); it is
    removed when the block ends, however it ends.

    From :data:`SPILL_MIN_ROWS` rows the scores go to disk when :func:`spills_held_out` knows the
    workers see this process's file system, and on any other cluster when every worker proves it reads
    a file written here and writes one beside it (:func:`workers_share`): ``dask worker`` processes
    started on this host (or on hosts sharing the directory) would keep them in memory otherwise, and
    their peaks would grow with the table (``benchmarks/results/score_columns_scale.md``).  Workers
    that do not share the directory keep the scores in memory and spill them through Dask, as before."""
    known = spills_held_out(client, n_rows)  # False below SPILL_MIN_ROWS
    if not known and n_rows < SPILL_MIN_ROWS:
        yield None
        return
    # a task still running when a failure ends the fit may write into it while it is removed: that must
    # not replace the failure with a cleanup error
    with tempfile.TemporaryDirectory(prefix="calengine-fit-", ignore_cleanup_errors=True) as scratch:
        yield scratch if known or workers_share(client, scratch) else None


def workers_share(client, directory: str) -> bool:
    """Whether every worker of ``client``'s cluster reads the random token this process writes to a file
    of ``directory`` and can create a file there (:func:`calengine.parquet.storage.sees_directory`, run once
    on each worker by ``Client.run``): the same path on another host's disk has another file, or none."""
    import uuid

    from ..parquet.storage import PROBE_NAME, sees_directory

    token = uuid.uuid4().hex
    with open(os.path.join(directory, PROBE_NAME), "w") as fh:
        fh.write(token)
    plain = getattr(client, "plain", client)  # a CheckedClient wraps the distributed.Client
    answers = plain.run(sees_directory, directory, token)
    return bool(answers) and all(answers.values())
