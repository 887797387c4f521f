"""``calengine fit | score | evaluate | cv | plugins``.

Only the standard library is imported at module level so ``calengine --help`` answers at once; each
command imports what it needs.  Any :class:`calengine.errors.CalengineError` (and argument errors)
becomes one ``error: ...`` line on stderr and exit code 2, with no traceback and no partial output.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from typing import Any

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, as for every other bad input
        sys.stderr.write(f"error: {message}; see '{self.prog} --help'\n")
        raise SystemExit(EXIT_USAGE)


def parse_value(text: str) -> Any:
    """``8`` -> 8, ``0.5`` -> 0.5, ``true`` -> True, ``none`` -> None, ``(10,5)`` -> (10, 5), else the string."""
    lowered = text.strip().lower()
    if lowered in {"none", "null"}:
        return None
    if lowered in {"true", "false"}:
        return lowered == "true"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_params(pairs: list[str] | None, flag: str) -> dict[str, Any]:
    from .errors import ParameterError

    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ParameterError(f"{flag} expects KEY=VALUE, got '{pair}' (e.g. {flag} max_depth=8)")
        out[key.strip()] = parse_value(value)
    return out


def _add_cluster_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cluster", nargs="?", const="local", default=None, metavar="ADDRESS",
        help="run on Dask: alone, a LocalCluster of worker processes; with tcp://HOST:PORT or tls://HOST:PORT,"
        " that scheduler (default: an embedded scheduler in this process)",
    )
    p.add_argument("--workers", type=int, default=None, help="workers (threads when embedded, processes with --cluster)")
    p.add_argument("--worker-memory", default=None, metavar="SIZE",
                   help="memory limit of each local worker, e.g. 6GiB (Dask spills, pauses and restarts beyond it)")
    p.add_argument("--tls-ca-file", help="CA certificate for a tls:// scheduler")
    p.add_argument("--tls-cert", help="client certificate for a tls:// scheduler")
    p.add_argument("--tls-key", help="client private key for a tls:// scheduler")


def _add_config_options(p: argparse.ArgumentParser) -> None:
    """What to fit and from which columns: shared by ``fit`` and ``cv`` (which fits it K times)."""
    p.add_argument("--target", required=True, metavar="COL", help="the class column")
    p.add_argument("--positive", metavar="VALUE", help="the positive class of a two-class target")
    p.add_argument("--learner", default="gaussian_nb", metavar="NAME[,NAME...]",
                   help="registered learner name or scikit-learn import path (default: gaussian_nb); several,"
                   " separated by commas, are each calibrated and combined by --combine")
    p.add_argument("--combine", choices=("min", "max", "median", "mean", "product"), default=None,
                   help="rule combining several learners' calibrated posteriors (default with several: mean)")
    p.add_argument("--learner-param", action="append", metavar="K=V", help="learner parameter (repeatable)")
    p.add_argument("--method", default="isotonic", metavar="NAME",
                   help="calibrator name, or probing / bagging (default: isotonic)")
    p.add_argument("--method-param", action="append", metavar="K=V", help="method parameter (repeatable)")
    p.add_argument("--mode", choices=("ensemble", "refit"), default="ensemble",
                   help="ensemble: k learner/calibrator pairs averaged; refit: out-of-fold scores calibrate,"
                   " learner refitted on all rows (default: ensemble)")
    p.add_argument("--multiclass", metavar="CODE[:COMBINER]",
                   help="one binary learner per column of a code matrix: one_vs_all, all_pairs, dense_ecoc,"
                   " sparse_ecoc, k_minus_one or file:PATH (CSV/JSON of -1/0/+1), combined by normalize,"
                   " least_squares, coupling, pairwise_coupling, wu_lin_weng or k_minus_one"
                   " (e.g. all_pairs:coupling; default: the learner's own multiclass scores, normalised)")
    p.add_argument("--combiner-param", action="append", metavar="K=V",
                   help="parameter of the --multiclass combiner, e.g. tol=1e-6 for coupling (repeatable)")
    p.add_argument("--cv", type=int, default=5, metavar="K", help="stratified folds (default: 5)")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="seed for folds and learners (default: 0)")
    p.add_argument("--features", metavar="COLS", help="comma-separated feature columns (default: all but target)")
    p.add_argument("--exclude", action="append", metavar="COL", help="leave this column out (repeatable)")
    p.add_argument("--text-column", action="append", metavar="COL", help="encode as hashed bag of words")
    p.add_argument("--max-categories", type=int, default=100, metavar="N",
                   help="one-hot columns per categorical column; rarer values share <other> (default: 100)")


def _add_cost_matrix_option(p: argparse.ArgumentParser, required: bool = False, evaluate: bool = False) -> None:
    """``--cost-matrix``: shared by ``decide``, ``score`` and ``evaluate`` (see calengine.decisions.costs)."""
    what = ("report the total and mean cost (or profit) of the calibrated model's minimum-expected-cost decisions"
            " against the raw learner's, the best constant decision and the oracle" if evaluate
            else "add columns decision (class of least expected cost) and expected_cost (minus the expected"
            " benefit for a benefit matrix)")
    p.add_argument(
        "--cost-matrix", required=required, metavar="FILE|JSON",
        help=f"{what}.  A JSON (or YAML) file or inline JSON: {{\"classes\": [0, 1], \"costs\": [[0, 1], [5, 0]]}},"
        " rows = decided class, columns = true class; \"benefits\" instead of \"costs\" for gains; an entry may"
        " be a linear expression of numeric columns, e.g. \"amount - 5\" (the columns are read, not written"
        " unless --keep)",
    )


def _add_global_options(p: argparse.ArgumentParser, default) -> None:
    """--version, --strict-plugins, --progress/--quiet: accepted before or after the subcommand."""
    p.add_argument("--version", action="store_true", default=default, help="print the version and exit")
    p.add_argument(
        "--strict-plugins", action="store_true", default=default,
        help="fail if any plugin fails to load (also: CALENGINE_STRICT_PLUGINS=1)",
    )
    progress = p.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=default,
                          help="always show progress")
    progress.add_argument("--quiet", dest="progress", action="store_false", default=default,
                          help="never show progress")


class _GlobalSubparsers:
    """``add_parser`` that gives every subcommand the global options as a parent parser."""

    def __init__(self, action, common: argparse.ArgumentParser):
        self._action, self._common = action, common

    def add_parser(self, name: str, **kwargs):
        return self._action.add_parser(name, parents=[self._common], **kwargs)


def build_parser() -> argparse.ArgumentParser:
    from . import run_log

    parser = _Parser(
        prog="calengine",
        description="Calibrated class probabilities from any classifier, on Dask.",
    )
    _add_global_options(parser, argparse.SUPPRESS)
    parser.set_defaults(version=False, strict_plugins=False, progress=None)
    # every subcommand accepts the global flags too (``calengine fit ... --progress``); their default is
    # SUPPRESS there, so a flag given before the subcommand is not reset by the subcommand's parser
    common = argparse.ArgumentParser(add_help=False)
    _add_global_options(common, argparse.SUPPRESS)
    sub = _GlobalSubparsers(parser.add_subparsers(dest="command", parser_class=_Parser), common)

    fit = sub.add_parser("fit", help="fit a calibrated model on a Parquet table")
    fit.add_argument("data", metavar="DATA", help="Parquet file, directory of Parquet files, or glob")
    _add_config_options(fit)
    fit.add_argument("--calibration-data", metavar="DATA", help="calibrate on this table instead of folds")
    fit.add_argument("--max-train-rows", type=int, default=None, metavar="N",
                     help="fit each learner on a seeded, stratified sample of at most N rows drawn on the workers"
                     " (statistics, calibration and evaluation still use every row)")
    fit.add_argument("--route", choices=("auto", "stats", "in-memory", "sample"), default="auto",
                     help="how learners meet the rows: from mergeable statistics (learners that support it),"
                     " rows assembled on one worker, or a sample (--max-train-rows); default: auto")
    fit.add_argument("--output", required=True, metavar="MODEL_DIR", help="model directory to create")
    fit.add_argument("--overwrite", action="store_true",
                     help="replace an existing model directory at --output (only once the new model is complete)")
    _add_cluster_options(fit)
    run_log.add_option(fit)

    score = sub.add_parser("score", help="write calibrated probabilities for a Parquet table")
    score.add_argument("model", metavar="MODEL_DIR")
    score.add_argument("data", metavar="DATA")
    score.add_argument("--output", required=True, metavar="OUT", help="Parquet dataset directory to create")
    score.add_argument("--keep", action="append", metavar="COL", help="copy this input column (repeatable)")
    score.add_argument("--intervals", action="store_true",
                       help="also write p_low/p_high for two-class Probing models (the interval the votes select)"
                            " and Venn-ABERS models (--method venn_abers: p0/p1, or their CVAP combination"
                            " in ensemble mode)")
    score.add_argument("--reject-below", type=float, default=None, metavar="CONF",
                       help="abstain (empty prediction) where the chosen class's probability is below CONF")
    score.add_argument("--batch-rows", type=int, default=None, metavar="N",
                       help="rows per batch (default: the largest power of two up to 131072 that keeps a batch's"
                            " columns within 32 MiB as float64: 131072 rows up to 32 columns, 8192 at 500)")
    score.add_argument("--trust-type", action="append", metavar="TYPE", help="extra type skops may load")
    _add_cost_matrix_option(score)
    _add_cluster_options(score)
    run_log.add_option(score)

    decide = sub.add_parser(
        "decide", help="write minimum-expected-cost decisions (and probabilities) for a Parquet table",
        description="Score DATA with MODEL_DIR and decide, per row, the class of least expected cost under a cost"
        " (or benefit) matrix: columns p_<class>, prediction, decision and expected_cost (minus the expected"
        " benefit for a benefit matrix).  Example: calengine decide model/ test.parquet --cost-matrix"
        ' \'{"classes": [0, 1], "benefits": [[0, 0], [-5, "amount - 5"]]}\' --output decisions/'
        " mails (decides 1) where p * amount > 5.",
    )
    decide.add_argument("model", metavar="MODEL_DIR")
    decide.add_argument("data", metavar="DATA")
    decide.add_argument("--output", required=True, metavar="OUT", help="Parquet dataset directory to create")
    decide.add_argument("--keep", action="append", metavar="COL", help="copy this input column (repeatable)")
    decide.add_argument("--batch-rows", type=int, default=None, metavar="N",
                        help="rows per batch (default: the largest power of two up to 131072 that keeps a batch's"
                             " columns within 32 MiB as float64: 131072 rows up to 32 columns, 8192 at 500)")
    decide.add_argument("--trust-type", action="append", metavar="TYPE", help="extra type skops may load")
    _add_cost_matrix_option(decide, required=True)
    decide.set_defaults(intervals=False, reject_below=None)
    _add_cluster_options(decide)
    run_log.add_option(decide)

    ev = sub.add_parser("evaluate", help="metrics of one or more models on a labelled Parquet table")
    ev.add_argument("paths", nargs="+", metavar="MODEL_DIR... DATA",
                    help="one or more model directories, then the data to evaluate on")
    ev.add_argument("--target", required=True, metavar="COL")
    ev.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ev.add_argument("--report", metavar="DIR", help="also write figures and one self-contained HTML page to DIR")
    ev.add_argument("--alpha", type=float, default=0.01, metavar="A",
                    help="significance level of the calibration drift check on the calibrated probabilities "
                         "(Spiegelhalter's z and a 10-bin reliability chi-square, Bonferroni over the tests and "
                         "one-vs-rest columns); 'recalibrate' when the adjusted p-value is below A (default: 0.01)")
    ev.add_argument("--bootstrap", type=int, default=0, metavar="B",
                    help="with --report: draw a 90%% pointwise band on each two-class model's calibration map from B"
                         " refits of its calibrator on bootstrap resamples of the evaluated data (parallel tasks;"
                         " default 0 = no band; 200 is a sensible choice); with --json: the band as"
                         " 'calibration_band' (grid, low, median, high)")
    ev.add_argument("--seed", type=int, default=0, metavar="N",
                    help="seed of the --bootstrap resamples (same seed, same band, on any number of workers)")
    ev.add_argument("--trust-type", action="append", metavar="TYPE", help="extra type skops may load")
    _add_cost_matrix_option(ev, evaluate=True)
    _add_cluster_options(ev)

    cv = sub.add_parser("cv", help="cross-validated metrics of a configuration on one labelled table")
    cv.add_argument("data", metavar="DATA", help="Parquet file, directory of Parquet files, or glob")
    _add_config_options(cv)
    cv.add_argument("--folds", type=int, default=5, metavar="K",
                    help="outer folds: K models, each fitted on K-1 folds and scored on the last (default: 5)")
    cv.add_argument("--json", action="store_true", help="one JSON object on stdout")
    cv.set_defaults(calibration_data=None, max_train_rows=None, route="auto")
    _add_cluster_options(cv)

    _add_recalibrate_parser(sub)

    pl = sub.add_parser("plugins", help="list loaded plugins and failures, or one learner/method/combiner's parameters")
    pl.add_argument("name", nargs="?", metavar="NAME",
                    help="a learner, calibrator (--method) or combiner name: list its parameters and defaults")
    pl.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return parser


def _add_recalibrate_parser(sub) -> None:
    rc = sub.add_parser(
        "recalibrate", help="refit a model's calibrators on new labelled data, keeping its learners",
        description="Keep every learner of MODEL_DIR as it is, score NEW_DATA with them and fit only the"
        " calibrators again (same method and parameters as stored), writing a new model directory whose"
        " manifest records its lineage (parent model and hash, data fingerprint, time, options)."
        " With --update, merge the new data's statistics into those stored in the model instead"
        " (isotonic: exact when the old and new PAV blocks do not interleave, else an approximation;"
        " binning: exact counts in the old bins; sigmoid, temperature: an approximate fit from a stored score"
        " summary); beta, rocch, venn_abers, ... cannot update.",
    )
    rc.add_argument("model", metavar="MODEL_DIR", help="the model to recalibrate (left unchanged)")
    rc.add_argument("data", metavar="NEW_DATA", help="labelled Parquet file, directory of Parquet files, or glob")
    rc.add_argument("--target", required=True, metavar="COL", help="the label column of NEW_DATA")
    rc.add_argument("--output", required=True, metavar="MODEL_DIR", help="model directory to create")
    rc.add_argument("--overwrite", action="store_true",
                    help="replace an existing model directory at --output (only once the new model is complete)")
    rc.add_argument("--update", action="store_true",
                    help="merge the new data's statistics with the stored ones instead of refitting (isotonic, binning;"
                    " sigmoid and temperature approximately, from a stored score summary)")
    rc.add_argument("--forget", type=float, default=1.0, metavar="LAMBDA",
                    help="with --update: multiply the stored statistics' weights by LAMBDA in [0, 1] first"
                    " (1: keep all, the default; 0: for isotonic the same as a plain recalibration, for binning the"
                    " old bins with only the new counts)")
    rc.add_argument("--trust-type", action="append", metavar="TYPE", help="extra type skops may load")
    _add_cluster_options(rc)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from . import __version__

        print(__version__)
        return 0
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    if args.strict_plugins:
        os.environ["CALENGINE_STRICT_PLUGINS"] = "1"
    from .errors import CalengineError

    try:
        from . import run_log

        return run_log.run(COMMANDS[args.command], args, sys.argv[1:] if argv is None else list(argv))
    except CalengineError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        return _fail("interrupted; no output was published", EXIT_INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 - only failures of the cluster itself are turned into one line
        from .cluster import cluster_failure

        message = cluster_failure(exc)
        if message is None:
            raise
        return _fail(message, EXIT_USAGE)


EXIT_INTERRUPTED = 130
_SILENCE_AFTER_ERROR = False


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
    if code == EXIT_INTERRUPTED:
        # Ctrl-C.  Every staging area is gone and the cluster closed by now, but a thread of the embedded
        # scheduler may still be inside a learner's fit, which nothing can interrupt, and the interpreter
        # would wait for it before exiting (measured: up to 20 s after the error line).  Leave now.
        sys.stdout.flush()
        os._exit(code)
    raise SystemExit(code)


# ---------------------------------------------------------------------------------------------- commands


def _progress(args):
    from .progress import Progress

    return Progress(enabled=args.progress)


def _tls(args):
    from .cluster import TLSConfig
    from .errors import ClusterError

    given = [args.tls_ca_file, args.tls_cert, args.tls_key]
    if not any(given):
        return None
    if not all(given):
        raise ClusterError("TLS needs all of --tls-ca-file, --tls-cert and --tls-key")
    return TLSConfig(args.tls_ca_file, args.tls_cert, args.tls_key)


def _client(args, distributions=(), modules=(), map_only: bool = False):
    """The job's Dask client (:func:`calengine.cluster.dask_client`); ``distributions`` may be a callable
    returning ``(distributions, modules)``, called once the cluster is up.  ``map_only``: the command
    only maps tasks over chunks and reduces their results (score, decide, evaluate), so without
    ``--cluster`` it runs on a :class:`~calengine.thread_client.ThreadClient` and never imports
    ``distributed``."""
    from .cluster import dask_client, runs_on_threads
    from .errors import ParameterError

    if args.workers is not None and args.workers < 1:
        raise ParameterError(f"--workers must be at least 1, got {args.workers}")
    memory = getattr(args, "worker_memory", None)
    if memory is not None:
        from dask.utils import parse_bytes

        try:
            if parse_bytes(memory) <= 0:
                raise ValueError
        except (ValueError, TypeError):
            raise ParameterError(f"--worker-memory must be a size such as 6GiB, got {memory!r}") from None
        if args.cluster not in (None, "local"):
            raise ParameterError("--worker-memory applies to local clusters; start remote workers with 'dask worker --memory-limit'")
    from .run_log import observed  # dashboard link on a terminal; cluster and tasks for --json-log

    if runs_on_threads(args.cluster, memory, map_only):  # no distributed: none of its logging to set up
        return observed(dask_client(None, workers=args.workers, map_only=True), None)
    import logging

    import distributed  # noqa: F401 - its logging configuration first, then ours on top

    # errors reach the user as one line from main(); Dask's client-side log records (reconnect attempts
    # after losing the scheduler, with their tracebacks) would only bury it
    for name in ["distributed", *logging.root.manager.loggerDict]:
        if name == "distributed" or name.startswith("distributed."):
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    # a cluster start cut short (Ctrl-C while the plugins load beside it) leaves asyncio tasks whose
    # exceptions nobody retrieves; asyncio would log each with a traceback
    logging.getLogger("asyncio").setLevel(logging.CRITICAL + 1)
    import calengine.cluster

    calengine.cluster.QUIET_WORKER_STDERR = True
    return observed(dask_client(args.cluster, workers=args.workers, tls=_tls(args), distributions=distributions,
                                modules=modules, memory_limit=memory), args.cluster)


def _prepare_fit(args):
    """(FitConfig, TableSpec, plugins, worker requirements) of ``calengine fit``: every name resolved
    and every parameter parsed, so a typo fails before any data is read."""
    from dataclasses import replace

    from . import registry
    from .errors import ParameterError
    from .fit.table import TableSpec
    from .plugins import get_plugins
    from .fit.training import ENGINE_METHODS, FitConfig, _params_for, check_seed, resolve_learner, split_learners

    check_seed(args.seed)
    if args.max_categories < 1:
        raise ParameterError(f"--max-categories must be at least 1, got {args.max_categories}")
    plugins = get_plugins()
    config = FitConfig(
        learner=args.learner,
        learner_params=parse_params(args.learner_param, "--learner-param"),
        method=args.method,
        method_params=parse_params(args.method_param, "--method-param"),
        mode=args.mode,
        cv=args.cv,
        seed=args.seed,
        multiclass=args.multiclass,
        combiner_params=parse_params(args.combiner_param, "--combiner-param"),
        combine=args.combine,
    )
    if config.combiner_params and not args.multiclass:
        raise ParameterError("--combiner-param needs --multiclass CODE:COMBINER to name the combiner")
    if args.multiclass and args.method in ENGINE_METHODS:
        raise ParameterError(
            f"--multiclass does not apply to --method {args.method}; use --method-param multiclass=k_minus_one|one_vs_rest"
        )
    base = split_learners(config.learner)
    learners = [
        resolve_learner(replace(config, learner=lr, learner_params=_params_for(lr, i, config.learner_params, plugins)
                                if len(base) > 1 else config.learner_params), plugins)
        for i, lr in enumerate(base)
    ]
    calibrator = None
    if args.method not in ENGINE_METHODS:
        calibrator = registry.make("calibrators", args.method, config.method_params, plugins)
    spec = TableSpec(
        data=args.data,
        target=args.target,
        positive=args.positive,
        features=args.features.split(",") if args.features else None,
        exclude=args.exclude,
        text_columns=tuple(args.text_column or ()),
        max_categories=args.max_categories,
        calibration_data=args.calibration_data,
        max_train_rows=args.max_train_rows,
        route=args.route,
    )
    return config, spec, plugins, _plugin_requirements([*learners, calibrator])


def _plugin_requirements(objects) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(distributions, modules) workers need for these plugin objects."""
    from .plugins import get_plugins

    plugins = get_plugins()
    dists, modules = set(), set()
    for obj in objects:
        if obj is None:
            continue
        modules.add(type(obj).__module__)
        for kind in ("learners", "calibrators", "combiners"):
            try:
                origin = plugins.origin(kind, obj.name)
            except KeyError:
                continue
            if origin.distribution not in ("(in-process)", "unknown"):
                dists.add(origin.distribution)
    for dist in list(dists):
        dists.update(_installed_requirements(dist))
    return tuple(sorted(dists - {"calengine"})), tuple(sorted(modules))


def _installed_requirements(dist: str) -> set[str]:
    """The distributions a plugin distribution requires that are installed here (its library, e.g.
    ``xgboost-cpu``): workers must have the same versions of those too, not only of the plugin."""
    from importlib import metadata

    from packaging.requirements import InvalidRequirement, Requirement

    out = set()
    try:
        requires = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return out
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an optional extra, or not for this platform
        try:
            metadata.version(req.name)
        except metadata.PackageNotFoundError:
            continue
        out.add(req.name)
    return out


def _model_plugin_objects(model) -> list:
    objs = [model.combiner]
    for m in model.members:
        parts = m.parts()
        objs += list(parts["learners"])[:1] + list(parts["calibrators"])[:1]
    return objs


def cmd_fit(args) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from .model.artifact import save_model
    from .errors import DataError
    from .fit.table import fit_table

    out = os.path.abspath(args.output)
    if os.path.exists(out) and not (os.path.isdir(out) and not os.listdir(out)):
        if not args.overwrite:
            raise DataError(f"output '{args.output}' already exists; choose a new --output, or pass --overwrite")
        if not os.path.isfile(os.path.join(out, "manifest.json")):
            raise DataError(f"--overwrite refuses to replace '{args.output}': it is not a calengine model directory")
    # Loading the plugins (importing scikit-learn: ~1 s) and starting a local cluster (spawning worker
    # processes: ~2 s) are independent, so the plugins load in a thread while the cluster starts.  A
    # misspelt name still fails before any data is read; the cluster started meanwhile is closed.
    # Not ``with``: its exit would wait for the loading thread, so a Ctrl-C during the imports would
    # only take effect once they finish.
    pool = ThreadPoolExecutor(1, thread_name_prefix="calengine-plugins")
    try:
        prepared = pool.submit(_prepare_fit, args)
        if args.cluster != "local":
            prepared.result()  # embedded or remote: nothing slow to overlap, so fail fast on names
        progress = _progress(args)
        with _client(args, lambda: prepared.result()[3]) as client:
            config, spec, plugins, _ = prepared.result()
            model = fit_table(client, spec, config, progress=progress, plugins=plugins)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    save_model(model, out, plugins, overwrite=args.overwrite)
    training = model.info.get("x_training", {})
    if training.get("dropped_missing_target"):
        sys.stderr.write(
            f"note: dropped {training['dropped_missing_target']} rows whose target '{args.target}' is missing\n"
        )
    n_members = len(model.members)
    sys.stderr.write(
        f"fitted {model.info['learner']} + {args.method} on {training.get('rows')} rows"
        f" ({training.get('route')} route), {model.labels.n_classes} classes,"
        f" {n_members} member{'s' if n_members != 1 else ''} -> {args.output}\n"
    )
    return 0


def cmd_score(args) -> int:
    from .model.artifact import load_model
    from .parquet.data import resolve_parquet_files
    from .errors import ParameterError
    from .scores.table import score_table

    if args.batch_rows is not None and args.batch_rows < 1:
        raise ParameterError(f"--batch-rows must be at least 1, got {args.batch_rows}")
    if args.reject_below is not None and not 0.0 <= args.reject_below <= 1.0:
        raise ParameterError(f"--reject-below must be a probability in [0, 1], got {args.reject_below}")
    parsed_costs = _parse_cost_matrix(args)
    model = load_model(args.model, trust=tuple(args.trust_type or ()))
    if args.intervals and not model.has_intervals:
        raise ParameterError(
            f"--intervals applies to two-class Probing models and Venn-ABERS models; '{args.model}'"
            f" ({model.info.get('learner')} + {model.info.get('method')}) has no intervals; drop --intervals"
            " or refit with --method venn_abers"
        )
    files = resolve_parquet_files(args.data)
    keep = tuple(args.keep or ())
    clash = [k for k in keep if k == "prediction" or k.startswith("p_")]
    if clash:
        raise ParameterError(f"--keep {clash[0]} would collide with an output column; rename it first")
    cost_matrix = _load_cost_matrix(parsed_costs, model, files)
    if cost_matrix is not None:
        taken = [k for k in keep if k in ("decision", "expected_cost")]
        if taken:
            raise ParameterError(f"--keep {taken[0]} would collide with an output column of --cost-matrix; rename it first")
    dists, modules = _plugin_requirements(_model_plugin_objects(model))
    with _client(args, dists, modules, map_only=True) as client:
        n = score_table(client, model, files, args.output, keep=keep, batch_rows=args.batch_rows,
                        extra_outputs=args.intervals, reject_below=args.reject_below, progress=_progress(args),
                        cost_matrix=cost_matrix)
    sys.stderr.write(f"{'decided' if cost_matrix is not None else 'scored'} {n} rows -> {args.output}\n")
    return 0


def cmd_decide(args) -> int:
    """``calengine decide``: ``score`` with a required ``--cost-matrix`` (the same code path)."""
    return cmd_score(args)


def _parse_cost_matrix(args):
    """The ``--cost-matrix`` of ``args`` parsed and validated (before the model loads: a typo fails at
    once), or None."""
    if getattr(args, "cost_matrix", None) is None:
        return None
    from .decisions.costs import load_cost_matrix

    return load_cost_matrix(args.cost_matrix)


def _load_cost_matrix(parsed, model, files):
    """``parsed`` in ``model``'s class order, its columns checked against the table (before any cluster
    starts), or None."""
    if parsed is None:
        return None
    from .parquet.data import check_columns

    cm = parsed.for_classes(list(model.labels.classes))
    check_columns(files, cm.columns)
    return cm


METRIC_ORDER = (
    "n", "brier", "log_loss", "log_loss_bits", "auc", "error_rate", "ece", "mce",
    "calibration_loss", "refinement_loss", "brier_mcb", "brier_dsc", "brier_unc", "confidence_q", "confidence_rho",
)


def cmd_evaluate(args) -> int:
    from .metrics.corp import with_brier_rows
    from .model.artifact import load_model
    from .parquet.data import resolve_parquet_files
    from .errors import ParameterError
    from .scores.table import evaluate_table

    if len(args.paths) < 2:
        raise ParameterError("evaluate needs MODEL_DIR... DATA: at least one model directory, then the data")
    from .metrics.drift import check_alpha

    try:
        check_alpha(args.alpha)
    except ParameterError:
        raise ParameterError(f"--alpha must be strictly between 0 and 1, got {args.alpha:g}; e.g. --alpha 0.01") from None
    model_dirs, data = args.paths[:-1], args.paths[-1]
    parsed_costs = _parse_cost_matrix(args)
    models = [load_model(m, trust=tuple(args.trust_type or ())) for m in model_dirs]
    files = resolve_parquet_files(data)
    if args.report:
        _check_report_dir(args.report)
    cost_matrices = [_load_cost_matrix(parsed_costs, m, files) for m in models]
    bands = None
    if args.bootstrap:
        _check_bootstrap(args, models)
    objects = [o for m in models for o in _model_plugin_objects(m)]
    dists, modules = _plugin_requirements(objects)
    with _client(args, dists, modules, map_only=True) as client:
        accs = [evaluate_table(client, m, files, args.target, with_raw=True, progress=_progress(args),
                               cost_matrix=cm) for m, cm in zip(models, cost_matrices)]
        if args.bootstrap:
            bands = _bootstrap_bands(args, models, files, client)
    labels = _model_labels(models, model_dirs)
    results = [{k: acc.result() for k, acc in a.items()} for a in accs]
    drifts = [a["calibrated"].drift_check(alpha=args.alpha) for a in accs]
    if args.report:
        _write_report(args.report, models, accs, labels, files, drifts=drifts, bands=bands)
    if args.json:
        payloads = []
        for m, a, res, drift in zip(models, accs, results, drifts):
            payload = dict(res["calibrated"])
            payload["raw"] = res.get("raw")
            payload["drift"] = drift
            payload["error_reject"] = _curve_points(a["calibrated"].error_reject_curve())
            payload["model"] = {"learner": m.info.get("learner"), "method": m.info.get("method")}
            if m.info.get("lineage"):
                payload["model"]["lineage"] = m.info["lineage"]
            if "decisions" in res:
                payload["decisions"] = res["decisions"]
            if bands is not None:
                payload["calibration_band"] = _band_json(bands[len(payloads)])
            payloads.append(payload)
        out = payloads[0] if len(payloads) == 1 else {"models": [{"label": lb, **p} for lb, p in zip(labels, payloads)]}
        print(json.dumps(_finite(out), sort_keys=False))
        return 0
    rows = []
    for lb, res, m, d in zip(labels, results, models, model_dirs):
        raw = f"raw {m.info.get('learner')} ({os.path.basename(os.path.normpath(d))})" if len(models) > 1 else "raw learner"
        rows.append((raw, with_brier_rows(res.get("raw"))))
        rows.append((lb, with_brier_rows(res["calibrated"])))
    table = format_metrics_table(rows)
    print(table)
    print()
    # the metrics table numbered its rows (raw, calibrated, raw, ...): the same numbers name the models here
    ids = [f"[{i}]" for i in range(2, 2 * len(models) + 1, 2)] if table.startswith("[1] ") else None
    print(format_drift(labels, drifts, [[str(c) for c in m.labels.classes] for m in models], ids=ids))
    print()
    lineages = [(lb, m.info.get("lineage")) for lb, m in zip(labels, models) if m.info.get("lineage")]
    if lineages:
        from .metrics.report import lineage_text

        for lb, lineage in lineages:
            print(f"{lb}: {lineage_text(lineage)}" if len(models) > 1 else lineage_text(lineage))
        print()
    print(format_error_reject(labels, [a["calibrated"] for a in accs], ids=ids))
    for lb, res in zip(labels, results):
        if "decisions" in res:
            print()
            print(format_decisions(lb, res["decisions"]))
    if args.report:
        print(f"\nreport: {os.path.join(args.report, 'index.html')}")
    return 0


def format_decisions(label: str, d: dict) -> str:
    """The ``--cost-matrix`` block of ``evaluate``: each policy's total and mean per row."""
    what = d["objective"]
    rows = [("calibrated model", d["calibrated"]), ("raw learner", d["raw"]),
            (f"best constant (always {d['best_constant']['class']})", d["best_constant"]),
            ("oracle (knows the class)", d["oracle"])]
    name = max(len(r[0]) for r in rows)
    lines = [f"decisions of {label} under the cost matrix ({what}, {'higher' if what == 'profit' else 'lower'} is better;"
             f" {d['n']} rows)",
             f"{'policy':<{name}}  {'total ' + what:>16}  {'per row':>12}"]
    for nm, r in rows:
        if r is not None:
            lines.append(f"{nm:<{name}}  {r['total']:>16.6g}  {r['mean']:>12.6g}")
    if d.get("best_threshold"):
        p_star = d.get("bayes_threshold")
        bits = [f"Bayes threshold p* = {p_star:.4g}" if p_star is not None else "per-row thresholds (column costs)"]
        for key, b in d["best_threshold"].items():
            bits.append(f"best threshold in hindsight, {key}: {b['threshold']:.3f} ({what} {b['total']:.6g})")
        lines.append("; ".join(bits))
    return "\n".join(lines)


def format_drift(labels: list[str], drifts: list[dict], class_names: list[list[str]], width: int | None = None,
                 ids: list[str] | None = None) -> str:
    """One ``calibration drift: ... -> verdict`` line per model, wrapped to ``width`` (the terminal's);
    several models are named by ``ids`` (the metrics table's numbers) or their labels."""
    import textwrap

    from .metrics.drift import drift_line

    limit = _terminal_width(width)
    out = []
    for i, (lb, d, names) in enumerate(zip(labels, drifts, class_names)):
        line = drift_line(d, names)
        if len(drifts) > 1:
            line = f"{ids[i] if ids else lb} {line}"
        out.append(textwrap.fill(line, width=limit, subsequent_indent="    ", break_on_hyphens=False))
    return "\n".join(out)


def _model_labels(models, dirs) -> list[str]:
    """``learner + method [combine rule, code matrix, refit] (directory)``: everything that tells two
    models of one table apart (three Pendigits models differing only in their code matrix or mode all
    read "gaussian_nb + isotonic" before); the directory name is added when there are several."""
    labels = []
    for m in models:
        extras = [m.combine_rule] if m.combine_rule else []
        if m.info.get("multiclass"):
            extras.append(str(m.info["multiclass"]))
        elif (m.info.get("method_params") or {}).get("multiclass"):
            extras.append(str(m.info["method_params"]["multiclass"]))
        if m.info.get("mode") == "refit" and not m.info.get("calibration_data"):
            extras.append("refit")
        labels.append(f"{m.info.get('learner')} + {m.info.get('method')}" + (f" [{', '.join(extras)}]" if extras else ""))
    if len(set(labels)) < len(labels) or len(models) > 1:
        labels = [f"{lb} ({os.path.basename(os.path.normpath(d))})" for lb, d in zip(labels, dirs)]
    return labels


def _check_report_dir(path: str) -> None:
    from .errors import DataError

    if os.path.exists(path) and not (os.path.isdir(path) and not os.listdir(path)):
        raise DataError(f"--report directory '{path}' already exists and is not empty; choose a new directory")


def _curve_points(curve: dict, max_points: int = 101) -> dict:
    """The error-reject curve thinned to at most ``max_points`` points (JSON stays small)."""
    import numpy as np

    n = len(curve["reject_rate"])
    idx = np.unique(np.linspace(0, n - 1, min(n, max_points)).round().astype(int))
    return {k: [float(v) for v in np.asarray(curve[k])[idx]] for k in ("threshold", "reject_rate", "error_rate")}


def format_error_reject(labels: list[str], accs: list, width: int | None = None, ids: list[str] | None = None) -> str:
    """Error rate among accepted rows at a few reject rates (the error-reject curve, Duin & Tax):
    models across while that fits ``width`` (the terminal's), else one row per model.  ``ids``: the
    models' numbers in a legend already printed (the metrics table's), used instead of long labels."""
    import numpy as np

    targets = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)
    curves = [acc.error_reject_curve() for acc in accs]
    table = []
    for c in curves:
        r = np.asarray(c["reject_rate"])
        e = np.asarray(c["error_rate"])
        row = []
        for t in targets:
            ok = np.flatnonzero(r <= t + 1e-12)
            row.append(float(e[ok[-1]]) if len(ok) else None)
        table.append(row)
    cell = max(14, *(len(lb) for lb in labels))
    limit = _terminal_width(width)
    if 14 + (cell + 2) * len(labels) > limit:
        shown = labels
        lines = ["error rate after rejecting the least confident rows (columns: reject rate)"]
        if ids is not None:
            shown = ids
        elif max(len(lb) for lb in labels) + 8 * len(targets) > limit:
            lines += [f"[{i}] {lb}" for i, lb in enumerate(labels, 1)]
            shown = [f"[{i}]" for i in range(1, len(labels) + 1)]
        name = max(5, *(len(lb) for lb in shown))
        lines.append(f"{'model':<{name}}  " + "  ".join(f"{t:>6.2f}" for t in targets))
        for lb, row in zip(shown, table):
            lines.append(f"{lb:<{name}}  " + "  ".join(f"{v:>6.4f}" if v is not None else f"{'n/a':>6}" for v in row))
        return "\n".join(lines)
    lines = ["error rate after rejecting the least confident rows",
             f"{'reject rate':<12}  " + "  ".join(f"{lb:>{cell}}" for lb in labels)]
    for i, t in enumerate(targets):
        cells = [f"{row[i]:>{cell}.4f}" if row[i] is not None else f"{'n/a':>{cell}}" for row in table]
        lines.append(f"{t:<12.2f}  " + "  ".join(cells))
    return "\n".join(lines)


def _terminal_width(width: int | None = None) -> int:
    """The width tables must fit: ``width``, else the terminal's ($COLUMNS; 100 when not a terminal)."""
    import shutil

    return width or shutil.get_terminal_size((100, 24)).columns


def _check_bootstrap(args, models) -> None:
    """``--bootstrap`` needs ``--report`` or ``--json`` (where the band goes) and two-class calibrator models."""
    from .errors import ParameterError

    if args.bootstrap < 2:
        raise ParameterError(f"--bootstrap needs at least 2 replicates, got {args.bootstrap}; e.g. --bootstrap 200")
    if not args.report and not args.json:
        raise ParameterError("--bootstrap draws its band in the report or writes it in the JSON; add --report DIR or --json")
    for m in models:
        if m.n_classes != 2 or len(getattr(m.members[0], "calibrators", ())) != 1:
            raise ParameterError(
                f"--bootstrap draws bands for two-class models with a calibrator ({m.info.get('learner')} +"
                f" {m.info.get('method')} is not one); drop --bootstrap"
            )


def _band_json(band: dict) -> dict:
    """A bootstrap band as JSON: the grid of scores and the band's low/median/high map values at each,
    with B, level, seed and the number of rows resampled (what a caller needs to redraw or compare it)."""
    return {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in band.items()}


def _bootstrap_bands(args, models, files, client) -> list:
    """One :func:`calengine.metrics.bootstrap.table_calibration_map_band` per model: a seeded sample of
    the evaluated rows scored where they are read, never the whole table in this process."""
    from .metrics.bootstrap import table_calibration_map_band

    return [table_calibration_map_band(client, m, files, args.target, args.bootstrap, seed=args.seed) for m in models]


def _write_report(out: str, models, accs, labels, files, drifts=None, bands=None) -> None:
    from .parquet.data import read_table
    from .metrics.report import ReportEntry, write_report

    entries = []
    for i, (m, a, lb) in enumerate(zip(models, accs, labels)):
        cmap = _calibration_map(m, files, read_table)
        if bands is not None:
            cmap["band"] = bands[i]
        entries.append(
            ReportEntry(
                label=lb,
                calibrated=a["calibrated"],
                raw=a.get("raw"),
                class_names=[str(c) for c in m.labels.classes],
                calibration_map=cmap,
                decisions=a.get("decisions"),
                drift=drifts[i] if drifts else None,
                lineage=m.info.get("lineage"),
            )
        )
    write_report(out, entries)


def _calibration_map(model, files, read_table, max_rows: int = 5000) -> dict:
    """Scores and calibrated column probabilities of the first member on up to ``max_rows`` rows."""
    import numpy as np

    df = read_table(files[:1], list(model.encoder.input_columns))
    if len(df) > max_rows:
        df = df.sample(max_rows, random_state=0)
    X = model.encoder.transform(df)
    member = model.members[0]
    S = member.scores(X)
    R = member.column_probabilities(X, S)
    k = model.n_classes
    names = [str(model.labels.classes[1])] if S.shape[1] == 1 and k == 2 else [f"column {b}" for b in range(S.shape[1])]
    if S.shape[1] == k:
        names = [str(c) for c in model.labels.classes]
    return {"scores": np.asarray(S), "probabilities": np.asarray(R), "column_names": names}


def _finite(obj):
    """JSON has no NaN/inf: they become null (e.g. rho when the error rate is 0)."""
    import math

    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def format_metrics_table(rows: list[tuple[str, dict | None]], width: int | None = None) -> str:
    """Metrics down, models across: easy to read for any number of metrics.  When the models do not
    fit across ``width`` (the terminal's), models become rows instead, and the metric columns are cut
    into blocks that each fit (the model label repeated), so no line is wider than the terminal."""
    rows = [(name, m) for name, m in rows if m is not None]
    keys = [k for k in METRIC_ORDER if any(k in m for _, m in rows)]
    limit = _terminal_width(width)
    if max(len(k) for k in keys) + sum(2 + max(14, len(name)) for name, _ in rows) > limit:
        return _metrics_by_model(rows, keys, limit)
    width = max(len(k) for k in keys)
    cols = [max(14, len(name)) for name, _ in rows]
    header = f"{'metric':<{width}}  " + "  ".join(f"{name:>{w}}" for (name, _), w in zip(rows, cols))
    lines = [header, "-" * len(header)]
    for k in keys:
        cells = [_metric_cell(m.get(k), w, 6) for (_, m), w in zip(rows, cols)]
        lines.append(f"{k:<{width}}  " + "  ".join(cells))
    return "\n".join(lines)


def _metric_cell(v, width: int, digits: int) -> str:
    """One right-aligned metric value: integers as such, NaN and missing values as n/a."""
    if isinstance(v, int):
        return f"{v:>{width}d}"
    if isinstance(v, float) and v == v:
        return f"{v:>{width}.{digits}f}"
    return f"{'n/a':>{width}}"


#: column headers of the models-as-rows layout (the JSON keys, shortened where long)
SHORT_METRIC = {"log_loss_bits": "ll_bits", "error_rate": "error", "calibration_loss": "cal_loss",
                "refinement_loss": "ref_loss", "confidence_q": "q", "confidence_rho": "rho",
                "brier_mcb": "mcb", "brier_dsc": "dsc", "brier_unc": "unc"}


def _metrics_by_model(rows, keys: list[str], limit: int) -> str:
    """One row per model, metric columns in blocks no wider than ``limit``.  Labels longer than a
    quarter of the width are listed once above the table and the rows carry their number."""
    names = [name for name, _ in rows]
    legend: list[str] = []
    if max(len(n) for n in names) > limit // 4:
        legend = [f"[{i}] {n}" for i, n in enumerate(names, 1)]
        names = [f"[{i}]" for i in range(1, len(rows) + 1)]
    name_w = max(5, *(len(n) for n in names))
    head = {k: SHORT_METRIC.get(k, k) for k in keys}
    cell = {k: max(len(head[k]), 8 if k != "n" else max(len(str(m.get("n", ""))) for _, m in rows)) for k in keys}
    blocks, block, used = [], [], name_w
    for k in keys:
        if block and used + 2 + cell[k] > limit:
            blocks.append(block)
            block, used = [], name_w
        block.append(k)
        used += 2 + cell[k]
    blocks.append(block)
    lines = legend + ([""] if legend else [])
    for j, b in enumerate(blocks):
        if j:
            lines.append("")
        header = f"{'model':<{name_w}}  " + "  ".join(f"{head[k]:>{cell[k]}}" for k in b)
        lines += [header, "-" * len(header)]
        for name, (_, m) in zip(names, rows):
            cells = [_metric_cell(m.get(k), cell[k], 4) for k in b]
            lines.append(f"{name:<{name_w}}  " + "  ".join(cells))
    return "\n".join(lines)


def cmd_plugins(args) -> int:
    """List every plugin, failures and name clashes included (a clash stops every other command, so
    this one must still show what is installed), or describe one registered NAME."""
    from .plugins import get_plugins

    plugins = get_plugins(allow_clashes=True)
    if args.name:
        return _describe_plugin(plugins, args.name, args.json)
    records = [r.as_dict() for r in plugins.records]
    if args.json:
        print(json.dumps({"plugins": records, "failures": [r for r in records if r["error"]],
                          "clashes": plugins.clashes}))
        return 0
    for r in records:
        status = "FAILED" if r["error"] else ("CLASH" if r["clashes"] else "ok")
        print(f"{r['name']}  ({r['distribution']} {r['version']})  {status}")
        if r["error"]:
            print(f"    error: {r['error']}")
        for kind, names in r["registered"].items():
            if names:
                print(f"    {kind}: {', '.join(sorted(names))}")
        for clash in r["clashes"]:
            print(f"    clash: {clash}")
    if not records:
        print("no plugins installed (pip install calengine-builtins)")
    return 0


def _describe_plugin(plugins, name: str, as_json: bool) -> int:
    from .errors import UnknownPluginError
    from .registry import describe

    found = [describe(kind, name, plugins) for kind in plugins.classes if name in plugins.classes[kind]]
    if not found:
        known = sorted({n for table in plugins.classes.values() for n in table})
        raise UnknownPluginError(
            f"no learner, calibrator or combiner is named '{name}'; installed: {', '.join(known) or 'none'}"
        )
    if as_json:
        print(json.dumps(found if len(found) > 1 else found[0], default=repr))
        return 0
    for d in found:
        print(f"{d['kind']} {d['name']}  ({d['distribution']} {d['version']}; {d['class']})")
        if d["summary"]:
            print(f"    {d['summary']}")
        if not d["parameters"]:
            print("    no parameters")
        for p in d["parameters"]:
            print(f"    {p['name']} = {p['default']!r}")
    return 0


def cmd_recalibrate(args) -> int:
    """A thin shell over :func:`calengine.fit.recalibrate.recalibrate`."""
    from .fit.recalibrate import check_recalibratable, parent_record, recalibrate_with_lineage
    from .model.artifact import load_model, save_model
    from .parquet.data import check_columns, resolve_parquet_files
    from .errors import ParameterError

    out = args.output
    if not args.overwrite and os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise ParameterError(f"output '{out}' already exists; choose a new path or pass --overwrite")
    model = load_model(args.model, trust=tuple(args.trust_type or ()))
    check_recalibratable(model, args.update, args.forget)
    files = resolve_parquet_files(args.data)
    # a misspelt --target fails from the Parquet footers, before a cluster starts
    check_columns(files, list(dict.fromkeys(list(model.encoder.input_columns) + [args.target])))
    dists, modules = _plugin_requirements(_model_plugin_objects(model))
    with _client(args, dists, modules) as client:
        new_model, info = recalibrate_with_lineage(
            client, model, parent_record(args.model), files, args.target, update=args.update, forget=args.forget,
            command=["calengine", "recalibrate", *_recalibrate_argv(args)], progress=_progress(args),
        )
    save_model(new_model, out, overwrite=args.overwrite)
    ex = info["exact"]
    how = (f"updated ({ex['exact']} exact, {ex['approximate']} approximate merges, forget {args.forget:g})"
           if args.update else "refitted")
    skipped = f" ({info['missing']} rows without a label skipped)" if info["missing"] else ""
    sys.stderr.write(f"recalibrated on {info['rows']} rows{skipped}: calibrators {how} -> {out}\n")
    return 0


def _recalibrate_argv(args) -> list[str]:
    argv = [args.model, args.data, "--target", args.target, "--output", args.output]
    if args.update:
        argv += ["--update", "--forget", repr(args.forget)]
    if args.overwrite:
        argv.append("--overwrite")
    if args.cluster is not None:
        argv += ["--cluster", str(args.cluster)]
    return argv


def cmd_cv(args) -> int:
    """``calengine cv``: a thin shell over :func:`calengine.fit.cross_validation.cross_validate`."""
    from .fit.cross_validation import cross_validate, format_cv
    from .errors import ParameterError

    if args.folds < 2:
        raise ParameterError(f"--folds must be at least 2, got {args.folds}")
    config, spec, plugins, requirements = _prepare_fit(args)
    with _client(args, *requirements) as client:
        result = cross_validate(client, spec, config, folds=args.folds, plugins=plugins)
    label = f"{args.learner} + {args.method}" + "".join(
        f" [{x}]" for x in (args.multiclass, "refit" if args.mode == "refit" else None) if x
    )
    if args.json:
        print(json.dumps(_finite({"label": label, **result.to_json()})))
    else:
        print(format_cv(result, label))
    return 0


COMMANDS = {"fit": cmd_fit, "score": cmd_score, "evaluate": cmd_evaluate, "cv": cmd_cv, "plugins": cmd_plugins}
COMMANDS["decide"] = cmd_decide
COMMANDS["recalibrate"] = cmd_recalibrate


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
