"""What a platform team asks of a batch job: the dashboard link, and a machine-readable record of the run.

``calengine fit|score ... --json-log FILE`` writes one JSON object to FILE when the command ends,
successfully or not (written to a temporary file beside FILE, then renamed)::

    {"format": "calengine-run-log/1", "command": "fit", "argv": [...], "cwd": "...",
     "started": "2026-11-24T00:00:00Z", "wall_seconds": 12.3, "exit_code": 0, "error": null,
     "versions": {"python": ..., "calengine": ..., "scikit-learn": ..., ..., plugin distributions},
     "cluster": {"kind": "embedded|local|remote", "scheduler": "tls://...", "dashboard": url or null,
                 "workers": [{"address", "host", "name", "nthreads", "memory_limit"}, ...]},
     "tasks": {"count": N, "compute_seconds": S, "by_kind": {prefix: {"count", "compute_seconds"}},
               "by_worker": {address: {"count", "compute_seconds"}}},
     "rows_read": R, "output": "/absolute/path"}

FILE is a regular file or a new path: a device (``/dev/full``, ``/dev/null``), a directory, a FIFO, a
symbolic link, the command's own ``--output`` or a path inside it, and any input (the data, the model
directory, the cost matrix, TLS files) or a path inside one are refused in one line before any work,
since the rename would replace whatever FILE names.  A record that cannot be written once the work is
done (the disk filled up meanwhile) is one ``warning:`` line; the exit code stays the work's own, and
no temporary file is left beside FILE.

``rows_read`` is the number of rows the job fitted on (the model's training rows, from its manifest)
or scored (the rows written).  ``tasks`` counts the Dask tasks that ran while the client was open,
from the scheduler's task stream (a re-run of a lost worker's task counts again).

:func:`observed` wraps the job's Dask client: it prints the scheduler's dashboard link on stderr when
stderr is a terminal and the scheduler serves a dashboard (``--cluster`` only), and collects the
cluster layout and the task stream for the record.  Both are no-ops cost-wise without ``--json-log``
beyond one scheduler query.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable

FORMAT = "calengine-run-log/1"


def add_option(parser) -> None:
    parser.add_argument("--json-log", metavar="FILE", default=None,
                        help="write a JSON record of the run to FILE (command, versions, cluster, tasks, rows,"
                        " wall time, output, exit code)")


class _Run:
    """The record of the command being run (one per process: the CLI runs one command)."""

    def __init__(self, args, argv: list[str]):
        self.path = getattr(args, "json_log", None)
        self.record: dict[str, Any] = {
            "format": FORMAT,
            "command": args.command,
            "argv": ["calengine", *argv],
            "cwd": os.getcwd(),
            "started": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "cluster": None,
            "tasks": None,
        }
        self.args = args
        self.t0 = time.perf_counter()


_current: _Run | None = None

# the record of published outputs is a stdlib-only module beside parquet.data, which publishes (the
# import graph stays acyclic and --help lean); these names stay importable from here
from ..parquet.published import PUBLISHED, note_published  # noqa: E402, F401


def output_published(args) -> str | None:
    """The command's ``--output`` if this process has published it, else None.  After that point an
    interrupt no longer fails the command (see the README's exit codes): the work is done."""
    output = getattr(args, "output", None)
    if isinstance(output, str) and os.path.realpath(output) in PUBLISHED:
        return output
    return None


def run(command: Callable[[Any], int], args, argv: list[str]) -> int:
    """Run ``command(args)``; with ``--json-log``, write the record however it ends (exceptions
    propagate unchanged to the CLI, which turns them into one line)."""
    global _current
    _current = _Run(args, argv)
    if _current.path is None:
        return command(args)
    _check_writable(_current.path, args)
    code, error = 1, None
    try:
        code = command(args)
        return code
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        raise
    except KeyboardInterrupt:
        code, error = (0, None) if output_published(args) else (130, "interrupted")
        raise
    except Exception as exc:
        from ..errors import CalengineError

        code, error = (2 if isinstance(exc, CalengineError) else 1), f"{type(exc).__name__}: {exc}"
        raise
    finally:
        _finish(_current, code, error)
        _current = None


@contextmanager
def observed(client_context, cluster: str | None):
    """Enter ``client_context`` (a :func:`calengine.runtime.client.dask_client`), announce the dashboard and,
    for the record, note the cluster's layout and the tasks that ran."""
    with client_context as client:
        run = _current
        dashboard = _dashboard_link(client)
        if cluster is not None and dashboard and sys.stderr.isatty():
            sys.stderr.write(f"dashboard: {dashboard}\n")
        if run is None or run.path is None:
            yield client
            return
        run.record["cluster"] = _layout(client, cluster, dashboard)
        records = getattr(client, "task_records", None)
        if records is not None:  # a ThreadClient keeps its own task stream
            yield client
            run.record["tasks"] = _task_summary(records)
            return
        from distributed import get_task_stream

        with get_task_stream(client=client) as stream:
            yield client
        run.record["tasks"] = _task_summary(stream.data)


def _serves_dashboard(dask_scheduler) -> bool:
    """Runs on the scheduler: whether its HTTP server carries the Bokeh dashboard.  The HTTP server
    itself (health, metrics) always runs, so ``services["dashboard"]`` is there even with
    ``--no-dashboard`` or without bokeh installed, where there is no dashboard to open."""
    return bool(getattr(getattr(dask_scheduler, "http_application", None), "applications", None))


def _dashboard_link(client) -> str | None:
    """The dashboard's URL, or None when the scheduler serves none."""
    try:
        if not client.run_on_scheduler(_serves_dashboard):
            return None
        return client.dashboard_link or None
    except Exception:  # noqa: BLE001 - no link is better than a failed job
        return None


def _layout(client, cluster: str | None, dashboard: str | None) -> dict:
    info = client.scheduler_info()
    workers = [
        {"address": addr, "host": w.get("host"), "name": str(w.get("name")), "nthreads": w.get("nthreads"),
         "memory_limit": w.get("memory_limit")}
        for addr, w in sorted(info.get("workers", {}).items())
    ]
    kind = "embedded" if cluster is None else "local" if cluster == "local" else "remote"
    return {"kind": kind, "scheduler": info.get("address"), "dashboard": dashboard, "workers": workers}


def _task_summary(records: list[dict]) -> dict:
    from dask.utils import key_split

    by_kind: dict[str, dict] = {}
    by_worker: dict[str, dict] = {}
    total = 0.0
    for r in records:
        seconds = sum(s["stop"] - s["start"] for s in r.get("startstops", ()) if s.get("action") == "compute")
        total += seconds
        for table, name in ((by_kind, key_split(r.get("key"))), (by_worker, r.get("worker"))):
            entry = table.setdefault(str(name), {"count": 0, "compute_seconds": 0.0})
            entry["count"] += 1
            entry["compute_seconds"] += seconds
    for table in (by_kind, by_worker):
        for entry in table.values():
            entry["compute_seconds"] = round(entry["compute_seconds"], 6)
    return {"count": len(records), "compute_seconds": round(total, 6), "by_kind": dict(sorted(by_kind.items())),
            "by_worker": dict(sorted(by_worker.items()))}


def _versions() -> dict[str, str]:
    from importlib import metadata

    from .versions import environment_versions

    plugins = []
    for ep in metadata.entry_points(group="calengine"):
        if ep.dist is not None:
            plugins.append(ep.dist.name)
    return environment_versions(tuple(sorted(set(plugins))))


def _rows_and_output(args) -> tuple[int | None, str | None]:
    output = getattr(args, "output", None)
    if output is None:
        return None, None
    output = os.path.abspath(output)
    try:
        if args.command == "fit":
            with open(os.path.join(output, "manifest.json")) as fh:
                return json.load(fh)["extra"]["x_training"]["rows"], output
        if args.command in ("score", "decide"):  # decide writes what score writes
            import pyarrow.dataset as ds

            return ds.dataset(output, format="parquet").count_rows(), output
    except (OSError, KeyError, ValueError, TypeError):
        pass  # nothing (complete) was written: a failed run
    return None, output


#: the arguments naming what a command reads (inputs) and writes (outputs): a log must be neither
_INPUTS = ("data", "model", "calibration_data", "cost_matrix", "tls_ca_file", "tls_cert", "tls_key", "paths")
_OUTPUTS = ("output", "report")


def _named_paths(args, names: tuple[str, ...]) -> list[str]:
    """The local paths ``args`` gives under ``names`` (globs expanded; URLs and inline JSON left out)."""
    import glob

    out = []
    for name in names:
        values = getattr(args, name, None)
        for value in values if isinstance(values, list) else [values]:
            if not isinstance(value, str) or not value or "://" in value or value.lstrip().startswith("{"):
                continue
            out += glob.glob(value) if glob.has_magic(value) else [value]
    return [os.path.realpath(v) for v in out]


def _within(path: str, other: str) -> bool:
    return path == other or path.startswith(other.rstrip(os.sep) + os.sep)


def _check_writable(path: str, args=None) -> None:
    """Refuse, before any work, a --json-log path the record could not be written to, or whose
    writing would replace something else than a log: a device, a directory, a link, an input or
    (a path inside) the command's output."""
    import stat

    from ..errors import ParameterError

    if os.path.isdir(path):
        raise ParameterError(f"--json-log '{path}' is a directory; name a file, e.g. {os.path.join(path, 'run.json')}")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise ParameterError(f"--json-log '{path}' cannot be examined ({exc.strerror}); name a new file") from None
    if mode is not None and not stat.S_ISREG(mode):
        what = "a symbolic link" if stat.S_ISLNK(mode) else "a device, FIFO or socket"
        raise ParameterError(
            f"--json-log '{path}' is {what}, not a regular file; the log replaces its file, so name a regular"
            " file or a new path, e.g. run.json"
        )
    real = os.path.realpath(path)
    if args is not None:
        for output in _named_paths(args, _OUTPUTS):
            if _within(real, output):
                raise ParameterError(
                    f"--json-log '{path}' is inside the command's output '{output}'; write the log beside it"
                )
        for source in _named_paths(args, _INPUTS):
            if _within(real, source):
                raise ParameterError(
                    f"--json-log '{path}' is, or is inside, the input '{source}'; the log would replace it: name a new file"
                )
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise ParameterError(f"--json-log '{path}' cannot be written ('{parent}' is not a writable directory)")


def _finish(run: _Run, code: int, error: str | None) -> None:
    record = run.record
    record["wall_seconds"] = round(time.perf_counter() - run.t0, 3)
    record["exit_code"] = code
    record["error"] = error
    try:
        record["versions"] = _versions()
    except Exception as exc:  # noqa: BLE001 - the record is still worth writing
        record["versions"] = {"error": f"{type(exc).__name__}: {exc}"}
    if code == 0:
        record["rows_read"], record["output"] = _rows_and_output(run.args)
    else:
        record["rows_read"], record["output"] = None, None
    path = os.path.abspath(run.path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "x") as fh:
            json.dump(record, fh, indent=1, default=str)
            fh.write("\n")
        _check_writable(path)  # still a regular file or nothing: the rename must not replace anything else
        os.replace(tmp, path)
    except BaseException as exc:  # noqa: BLE001 - the work is done (or failed) already: the log must not change that
        from ..parquet.data import os_error_meaning

        if os.path.isfile(tmp):
            try:
                os.remove(tmp)
            except OSError:
                pass
        if not isinstance(exc, Exception):  # a second Ctrl-C: no temporary file left, the interrupt goes on
            raise
        reason = os_error_meaning(exc) if isinstance(exc, OSError) else str(exc)
        sys.stderr.write(f"warning: the --json-log record was not written to '{run.path}': {reason}; the exit code"
                         f" ({code}) is the command's own\n")
