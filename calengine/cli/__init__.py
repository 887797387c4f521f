"""``calengine fit | score | decide | evaluate | cv | recalibrate | adapt | conformal | plugins``: a thin shell.

Each command is a module of this package (``fit``, ``score`` for score and decide, ``evaluate``,
``cv``, ``recalibrate``, ``adapt``, ``conformal``, ``plugins``) with ``add_parser(sub)``, which registers its subcommand, and
``run(args)``, which validates what only the command line can get wrong, calls the function the
Python API also calls (``calengine.fit.table.fit_table``, :func:`calengine.score_table`,
:func:`calengine.evaluate_models`, ...) and prints.  Options shared by several commands are in
:mod:`calengine.cli.options`; what the tables look like is in :mod:`calengine.metrics.report.text`.

Only the standard library is imported at module level so ``calengine --help`` answers at once; each
command imports what it needs.  Any :class:`calengine.errors.CalengineError` (and argument errors)
becomes one ``error: ...`` line on stderr and exit code 2, with no traceback and no partial output.

The names this module exported when it was one file (``format_metrics_table``, ``METRIC_ORDER``,
``parse_params``, ...) are still importable from here.

Modules:

* :mod:`.__main__`: ``python -m calengine.cli``, as before the CLI became a package (``python -m calengine``
  is the same).
* :mod:`.adapt`: ``calengine adapt``.
* :mod:`.conformal`: ``calengine conformal``.
* :mod:`.cv`: ``calengine cv``.
* :mod:`.evaluate`: ``calengine evaluate``.
* :mod:`.export`: ``calengine export``.
* :mod:`.fit`: ``calengine fit``.
* :mod:`.limits`: The bounds of every size a user gives on the command line, checked before any work.
* :mod:`.options`: Options several commands share, and what they turn into.
* :mod:`.parameters`: The Python parameter an error names -> the flag the command line reports it under.
* :mod:`.plugins`: ``calengine plugins [NAME]``.
* :mod:`.recalibrate`: ``calengine recalibrate``.
* :mod:`.score`: ``calengine score`` and ``calengine decide``.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import adapt, conformal, cv, evaluate, export, fit, plugins, recalibrate, score
from .options import add_global_options, parse_params, parse_value

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE
_SILENCE_AFTER_ERROR = False
#: the warning lines this process has written (:func:`_show_warning`)
_WARNED: set[str] = set()

#: subcommand -> its ``run(args)``
COMMANDS = {"fit": fit.run, "score": score.run, "decide": score.run, "evaluate": evaluate.run, "cv": cv.run,
            "recalibrate": recalibrate.run, "plugins": plugins.run, "export": export.run,
            "adapt": adapt.run, "conformal": conformal.run}

__all__ = [
    "main", "entry", "build_parser", "parse_value", "parse_params", "COMMANDS", "EXIT_USAGE", "EXIT_INTERRUPTED",
    "EXIT_BROKEN_PIPE",
    "format_metrics_table", "format_error_reject", "format_drift", "format_decisions", "METRIC_ORDER", "SHORT_METRIC",
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, as for every other bad input
        sys.stderr.write(f"error: {message}; see '{self.prog} --help'\n")
        raise SystemExit(EXIT_USAGE)


class _GlobalSubparsers:
    """``add_parser`` that gives every subcommand the global options as a parent parser."""

    def __init__(self, action, common: argparse.ArgumentParser):
        self._action, self._common = action, common

    def add_parser(self, name: str, **kwargs):
        return self._action.add_parser(name, parents=[self._common], **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="calengine",
        description="Calibrated class probabilities from any classifier, on Dask.",
    )
    add_global_options(parser, argparse.SUPPRESS)
    parser.set_defaults(version=False, strict_plugins=False, progress=None, io_timeout=None)
    # every subcommand accepts the global flags too (``calengine fit ... --progress``); their default is
    # SUPPRESS there, so a flag given before the subcommand is not reset by the subcommand's parser
    common = argparse.ArgumentParser(add_help=False)
    add_global_options(common, argparse.SUPPRESS)
    sub = _GlobalSubparsers(parser.add_subparsers(dest="command", parser_class=_Parser), common)
    for command in (fit, score, evaluate, cv, recalibrate, adapt, conformal, export, plugins):  # the order of --help
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from ..version import __version__

        print(__version__)
        return 0
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    if args.strict_plugins:
        os.environ["CALENGINE_STRICT_PLUGINS"] = "1"
    _warnings_as_lines()
    from ..runtime import run_log
    from ..errors import CalengineError

    try:
        from . import limits

        limits.check(args)
        if args.io_timeout is not None:  # read by calengine.parquet.storage here and in local workers
            os.environ["CALENGINE_IO_TIMEOUT"] = str(args.io_timeout)
        return run_log.run(COMMANDS[args.command], args, sys.argv[1:] if argv is None else list(argv))
    except CalengineError as exc:
        from .parameters import cli_message

        return _fail(cli_message(exc, parser, args.command), EXIT_USAGE)
    except KeyboardInterrupt:
        published = run_log.output_published(args)
        if published is not None:  # the work is done: exit 0 says the output is complete (README: exit codes)
            sys.stderr.write(f"warning: interrupted after '{published}' was published; it is complete\n")
            return 0
        return _fail("interrupted; no output was published", EXIT_INTERRUPTED)
    except BrokenPipeError:
        return _broken_pipe()
    except Exception as exc:  # noqa: BLE001 - only failures of the cluster itself are turned into one line
        from ..runtime.client import cluster_failure

        message = cluster_failure(exc) or _disk_full(exc) or _out_of_memory(exc)
        if message is None:
            raise
        return _fail(message, EXIT_USAGE)


def _in_chain(exc: BaseException | None, wanted) -> BaseException | None:
    """The first exception of ``exc``'s chain (itself, then its causes and contexts) for which
    ``wanted`` is true, or None: a task's failure reaches the CLI wrapped by Dask or the caller."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if wanted(exc):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _out_of_memory(exc: BaseException) -> str | None:
    """One line for memory the system refused (``MemoryError``, or ``ENOMEM`` from a map or a thread),
    naming the process's address-space limit when one is set (``ulimit -v``) and what to change; None
    for any other failure."""
    import errno
    import resource

    found = _in_chain(exc, lambda e: isinstance(e, MemoryError) or (isinstance(e, OSError)
                                                                     and e.errno == errno.ENOMEM))
    if found is None:
        return None
    what = " ".join(str(found).split())[:160] or type(found).__name__
    try:
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (OSError, ValueError):
        limit = resource.RLIM_INFINITY
    if limit != resource.RLIM_INFINITY:
        return (f"out of memory ({what}): this process may use {limit / 2**30:.1f} GiB of address space"
                " (ulimit -v); raise that limit, or run with fewer --workers or on a cluster (--cluster)")
    return f"out of memory ({what}); free memory on this machine, or run with fewer --workers or on a cluster (--cluster)"


def _disk_full(exc: BaseException) -> str | None:
    """One line for a full disk or quota met anywhere (a library's own temporary files, Dask's spill
    directory), where no writer of ours turned it into a :class:`CalengineError` first; None for any
    other failure, which stays a traceback (a bug to report)."""
    import errno

    from ..parquet.data import os_error_meaning
    from ..tasks.spill import SCRATCH_FIX

    found = _in_chain(exc, lambda e: isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT))
    if found is None:
        return None
    where = f" writing '{found.filename}'" if found.filename else ""
    return f"{os_error_meaning(found)}{where}; {SCRATCH_FIX}"


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """One ``warning: ...`` line, as the CLI writes its own warnings: Python's default format (the
    file and line of the warning, then that source line) is for developers, and a library's message
    spread over several lines (scikit-learn's convergence advice) would break the one-line rule.  A
    warning already written is not written again: the filters' once-per-place rule does not hold across
    the threads and ``catch_warnings`` blocks of a fit."""
    text = " ".join(str(message).split())
    if category is not UserWarning:
        text = f"{text} ({category.__name__})"
    if text in _WARNED:  # the same warning from every fold's fit is one line, not one per fold
        return
    _WARNED.add(text)
    try:
        (file or sys.stderr).write(f"warning: {text}\n")
    except (OSError, ValueError):  # stderr closed or gone: a warning is not worth failing for
        pass


def _warnings_as_lines() -> None:
    """Python warnings raised in this process (the client, and the embedded scheduler's worker threads)
    reach the terminal as :func:`_show_warning` lines; which warnings show is left to the filters."""
    import warnings

    warnings.showwarning = _show_warning


def _broken_pipe() -> int:
    """stdout's reader went away (``calengine evaluate ... | head -1``): end quietly with 141, the
    status a shell reports for a command ended by SIGPIPE (as ``cat``, ``grep`` and ``yes`` end there),
    so ``set -o pipefail`` scripts see what they see for those.  What is still buffered for stdout goes
    nowhere, so the interpreter's flush at exit cannot complain either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def _fail(message: str, code: int) -> int:
    """Write the one ``error:`` line.  From the console script, whatever the interpreter or Dask would
    print while shutting down after it (atexit handlers closing a half-started cluster, a second
    Ctrl-C) goes nowhere: the line above is the whole report."""
    import signal

    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    if _SILENCE_AFTER_ERROR:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not print a traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
    return code


def entry() -> None:
    """The ``calengine`` console script: :func:`main`, and an exit code."""
    global _SILENCE_AFTER_ERROR
    _SILENCE_AFTER_ERROR = True
    code = main()
    if code == 0:
        import signal

        # the work is done and its output in place: a Ctrl-C while the interpreter shuts down (closing a
        # cluster, flushing stdout) must not turn that into death by signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            code = _broken_pipe()
    if code == EXIT_INTERRUPTED:
        # Ctrl-C.  Every staging area is gone and the cluster closed by now, but a thread of the embedded
        # scheduler may still be inside a learner's fit, which nothing can interrupt, and the interpreter
        # would wait for it before exiting (measured: up to 20 s after the error line).  Leave now.
        sys.stdout.flush()
        os._exit(code)
    raise SystemExit(code)


#: names importable from ``calengine.cli`` since it was one module, and where they live now (loaded
#: on first use, so that ``calengine --help`` imports none of them)
_MOVED = {
    **dict.fromkeys(("format_metrics_table", "format_error_reject", "format_drift", "format_decisions",
                     "METRIC_ORDER", "SHORT_METRIC"), ("calengine.metrics.report.text", None)),
    "_terminal_width": ("calengine.metrics.report.text", "terminal_width"),
    "_metric_cell": ("calengine.metrics.report.text", None),
    "_metrics_by_model": ("calengine.metrics.report.text", None),
    "_curve_points": ("calengine.metrics.evaluation", None),
    "_finite": ("calengine.metrics.report.text", "finite"),
    "_model_labels": ("calengine.metrics.evaluation", "model_labels"),
    "_calibration_map": ("calengine.metrics.evaluation", "calibration_map_sample"),
    "_check_report_dir": ("calengine.metrics.evaluation", "check_report_dir"),
    "_band_json": ("calengine.metrics.bootstrap", "band_json"),
    "_plugin_requirements": ("calengine.plugins.loading", "plugin_requirements"),
    "_installed_requirements": ("calengine.plugins.loading", "installed_requirements"),
    "_client": ("calengine.cli.options", "client"),
    "_tls": ("calengine.cli.options", "tls"),
    "_progress": ("calengine.cli.options", "progress"),
    "_prepare_fit": ("calengine.cli.options", "prepare_fit"),
    **{f"_add_{name}": ("calengine.cli.options", f"add_{name}")
       for name in ("cluster_options", "config_options", "cost_matrix_option", "global_options")},
    **{f"cmd_{name}": (f"calengine.cli.{name}", "run") for name in ("fit", "score", "evaluate", "cv", "plugins",
                                                                    "recalibrate")},
    "cmd_decide": ("calengine.cli.score", "run"),
}


def __getattr__(name: str):
    if name in _MOVED:
        import importlib

        module, attr = _MOVED[name]
        return getattr(importlib.import_module(module), attr or name)
    raise AttributeError(f"module 'calengine.cli' has no attribute {name!r}")
