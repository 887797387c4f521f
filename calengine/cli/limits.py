"""The bounds of every size a user gives on the command line, checked before any work.

A number on the command line can cost memory or time out of all proportion to the few bytes it
takes to type (``evaluate --bootstrap 1000000000000`` refits a calibrator that many times; ``--workers
100000 --cluster`` would spawn that many processes).  Each bounded option is a row of :data:`LIMITS`:
the least and the greatest value accepted and why; :func:`check` refuses anything outside in one
line naming the bound, before a cluster starts or a row is read.  The README's table of limits is
this table (a test compares them).

``--worker-memory`` has a floor of its own, :data:`MIN_WORKER_MEMORY`: a Dask worker process that has
imported calengine, scikit-learn, pyarrow and the plugins holds about 263 MiB (measured RSS of a local
worker after a ``gaussian_nb`` fit of ``data/pima.parquet``), and Dask pauses a worker at 80 % of its
limit, so below 384 MiB a worker would be paused or restarted before its first task and the fit would
never finish.

Only the standard library is imported here, and :mod:`calengine.plan.options`, whose constraints hold the
bounds of ``fit``'s options for the Python API and the CLI alike (``calengine --help`` imports the CLI).
"""

from __future__ import annotations

from typing import NamedTuple


class Limit(NamedTuple):
    option: str  # the flag, as the user types it
    dest: str  # the argparse destination
    low: int
    high: int
    why: str  # what a value beyond ``high`` would cost (the README's table says it)


def _fit_limits():
    """``(parameter, constraint)`` of the fit options with an upper bound (:mod:`calengine.plan.options`,
    which imports only the standard library and :mod:`calengine.errors`)."""
    from ..plan.options import FitConfig, Integer, TableSpec

    for record in (FitConfig, TableSpec):
        for name, constraint in record._parameter_constraints.items():
            if isinstance(constraint, Integer) and constraint.why:
                yield name, constraint


#: every bounded integer option of the CLI (``--bootstrap 0``, the default, means no band)
LIMITS = (
    Limit("--bootstrap", "bootstrap", 2, 10_000,
          "each replicate refits the calibrator; 200 already gives a stable 90% band"),
    Limit("--prior-shift", "prior_shift", 2, 10_000,
          "each replicate runs EM on a resample of up to 200,000 rows' probabilities; 200 gives a stable 90% interval"),
    Limit("--seed", "seed", 0, 2**32 - 1, "seeds are 32 bits: a larger one would silently repeat a smaller one"),
    Limit("--folds", "folds", 2, 100, "each outer fold fits a whole model"),
    Limit("--workers", "workers", 1, 256, "each worker is a thread, or a process of about 263 MiB with --cluster"),
    Limit("--batch-rows", "batch_rows", 1, 4_194_304, "a batch is held in memory as float64 columns"),
    Limit("--max-iter", "max_iter", 1, 10_000, "each EM step of adapt is one pass over the new rows' posteriors"),
    Limit("--io-timeout", "io_timeout", 1, 86_400, "a stalled store is waited for that long before the error"),
    # the bounded options of a fit: the bounds Python's fit_table and CalibratedClassifier enforce too
    *(Limit("--" + name.replace("_", "-"), name, c.low, c.high, c.why.replace(" by ", " --by "))
      for name, c in _fit_limits()),
)

#: the smallest ``--worker-memory`` accepted, in bytes (see the module docstring)
MIN_WORKER_MEMORY = 384 * 2**20


def check(args) -> None:
    """Refuse, in one line naming the bound, any option of ``args`` outside its :data:`LIMITS` row
    or a ``--worker-memory`` below :data:`MIN_WORKER_MEMORY`; and an output (``--output``,
    ``--json-log``, ``--report``) named by a URL other than ``file://`` (see
    :func:`calengine.parquet.storage.local_output`), before any work."""
    from ..errors import ParameterError

    for limit in LIMITS:
        value = getattr(args, limit.dest, None)
        if value is None or (limit.dest == "bootstrap" and value == 0):  # --bootstrap 0: no band
            continue
        if value < limit.low:
            raise ParameterError(f"{limit.option} must be at least {limit.low} (and at most {limit.high}), got {value}")
        if value > limit.high:
            raise ParameterError(f"{limit.option} must be at most {limit.high}, got {value} ({limit.why})")
    from ..parquet.storage import local_output

    for dest, option in (("output", "--output"), ("json_log", "--json-log"), ("report", "--report")):
        value = getattr(args, dest, None)
        if isinstance(value, str):  # a URL output is refused now, before any work; file:// is its path
            setattr(args, dest, local_output(value, option))
    memory = getattr(args, "worker_memory", None)
    if memory is not None:
        from dask.utils import format_bytes, parse_bytes

        try:
            size = parse_bytes(memory)
            if size <= 0:
                raise ValueError
        except (ValueError, TypeError):
            raise ParameterError(f"--worker-memory must be a size such as 6GiB, got {memory!r}") from None
        if size < MIN_WORKER_MEMORY:
            raise ParameterError(
                f"--worker-memory {memory} is below the {format_bytes(MIN_WORKER_MEMORY)} a worker needs to start"
                " (it holds about 263 MiB once calengine is imported); give at least 384MiB, e.g. 2GiB"
            )
