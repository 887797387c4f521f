"""Options several commands share, and what they turn into: parameter values, the fit configuration,
progress, and the Dask client of ``--cluster`` and its companions.

Only the standard library is imported at module level (``calengine --help`` imports this module).
"""

from __future__ import annotations

import argparse
import ast
from typing import Any


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
    """``K=V`` pairs of a repeatable ``flag`` as a dict, each value read by :func:`parse_value`."""
    from ..errors import ParameterError

    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ParameterError(f"{flag} expects KEY=VALUE, got '{pair}' (e.g. {flag} max_depth=8)")
        out[key.strip()] = parse_value(value)
    return out


# ---------------------------------------------------------------------------------------------- options


def add_global_options(p: argparse.ArgumentParser, default) -> None:
    """--version, --strict-plugins, --io-timeout, --progress/--quiet: accepted before or after the subcommand."""
    p.add_argument("--version", action="store_true", default=default, help="print the version and exit")
    p.add_argument(
        "--strict-plugins", action="store_true", default=default,
        help="fail if any plugin fails to load (also: CALENGINE_STRICT_PLUGINS=1)",
    )
    p.add_argument(
        "--io-timeout", type=int, default=default, metavar="SECONDS",
        help="give up, in one line, on a remote table (an fsspec URL) that does not answer within SECONDS"
        " (default 60; also CALENGINE_IO_TIMEOUT)",
    )
    progress = p.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=default,
                          help="always show progress")
    progress.add_argument("--quiet", dest="progress", action="store_false", default=default,
                          help="never show progress")


def add_cluster_options(p: argparse.ArgumentParser) -> None:
    """``--cluster`` and what goes with it: read by :func:`client`."""
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


def add_config_options(p: argparse.ArgumentParser) -> None:
    """What to fit and from which columns: shared by ``fit`` and ``cv`` (which fits it K times); read
    by :func:`fit_inputs`."""
    p.add_argument("--target", required=True, metavar="COL", help="the class column")
    p.add_argument("--positive", metavar="VALUE", help="the positive class of a two-class target")
    p.add_argument("--learner", default=None, metavar="NAME[,NAME...]",
                   help="registered learner name or scikit-learn import path (default: gaussian_nb); several,"
                   " separated by commas, are each calibrated and combined by --combine")
    p.add_argument("--combine", choices=("min", "max", "median", "mean", "product"), default=None,
                   help="rule combining several learners' calibrated posteriors (default with several: mean)")
    p.add_argument("--learner-param", action="append", metavar="K=V", help="learner parameter (repeatable)")
    p.add_argument("--method", default="isotonic", metavar="NAME",
                   help="calibrator name, or probing / bagging (default: isotonic)")
    p.add_argument("--method-param", action="append", metavar="K=V", help="method parameter (repeatable)")
    p.add_argument("--mode", choices=("ensemble", "refit"), default=None,
                   help="ensemble: k learner/calibrator pairs averaged; refit: out-of-fold scores calibrate,"
                   " learner refitted on all rows (default: ensemble)")
    p.add_argument("--multiclass", metavar="CODE[:COMBINER]",
                   help="one binary learner per column of a code matrix: one_vs_all, all_pairs, dense_ecoc,"
                   " sparse_ecoc, k_minus_one or file:PATH (CSV/JSON of -1/0/+1), combined by normalize,"
                   " least_squares, coupling, pairwise_coupling, wu_lin_weng or k_minus_one"
                   " (e.g. all_pairs:coupling; default: the learner's own multiclass scores, normalised)")
    p.add_argument("--combiner-param", action="append", metavar="K=V",
                   help="parameter of the --multiclass combiner, e.g. tol=1e-6 for coupling (repeatable)")
    p.add_argument("--cv", type=int, default=None, metavar="K", help="stratified folds (default: 5)")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="seed for folds and learners (default: 0)")
    p.add_argument("--features", metavar="COLS", help="comma-separated feature columns (default: all but target)")
    p.add_argument("--exclude", action="append", metavar="COL", help="leave this column out (repeatable)")
    p.add_argument("--text-column", action="append", metavar="COL", help="encode as hashed bag of words")
    p.add_argument("--max-categories", type=int, default=100, metavar="N",
                   help="one-hot columns per categorical column; rarer values share <other> (default: 100)")
    p.add_argument("--scores", metavar="S[,S2,...]",
                   help="calibrate these score columns of a model computed elsewhere instead of fitting a learner:"
                   " one column for two classes (the positive class's score), or one per class, matched to the"
                   " classes by --classes, else by the columns' names (the class itself, or ending in _CLASS, -CLASS,"
                   " .CLASS, :CLASS or =CLASS, e.g. p_0,p_1,p_2); every row calibrates, no folds")
    p.add_argument("--score-kind", choices=("proba", "decision", "logit"), default="proba",
                   help="what --scores hold: probabilities in [0, 1], decision values (any number, larger ="
                   " more likely) or logits (log-odds; softmax over k columns) (default: proba)")
    p.add_argument("--classes", metavar="C1,C2,...",
                   help="the classes of the --scores columns, in the columns' order")
    p.add_argument("--weight", metavar="COL",
                   help="a column of frequency weights (>= 0; weight 2 = the row twice): learners get them as"
                   " sample_weight (a costing sample for learners without weights), every calibrator sums them")
    sampling = p.add_mutually_exclusive_group()
    sampling.add_argument("--negative-sampling", type=float, default=None, metavar="RATE",
                          help="the negative class was kept at RATE in (0, 1] (positives all): probabilities are"
                          " corrected to the population, p' = p / (p + (1 - p) / RATE) (Elkan 2001)")
    sampling.add_argument("--class-sampling", metavar="CLASS=RATE,...",
                          help="each named class was kept at RATE (others at 1): p'_c proportional to p_c / RATE_c")


def add_cost_matrix_option(p: argparse.ArgumentParser, required: bool = False, evaluate: bool = False) -> None:
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


def add_trust_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trust-type", action="append", metavar="TYPE", help="extra type skops may load")


# ---------------------------------------------------------------------------------------------- values


def fit_inputs(args):
    """(FitConfig, TableSpec) of the :func:`add_config_options` of ``fit`` and ``cv``, every
    ``K=V`` parameter parsed."""
    from ..fit.table import TableSpec
    from ..fit.training import FitConfig

    from ..errors import ParameterError
    from ..methods.sampling import parse_class_sampling

    scores = tuple(c.strip() for c in args.scores.split(",") if c.strip()) if args.scores else None
    if args.scores is not None and not scores:
        raise ParameterError("--scores needs at least one column name")
    prefit = getattr(args, "prefit", None)  # ``fit`` only
    if scores or prefit:
        given = [flag for flag, value in (("--learner", args.learner), ("--learner-param", args.learner_param),
                                          ("--cv", args.cv), ("--mode", args.mode)) if value is not None]
        if given:
            what = "--scores fits none: every row calibrates the score columns" if scores else \
                "--prefit refits none: every row calibrates the saved model's scores"
            raise ParameterError(
                f"{given[0]} applies to learners, and {what} (for the out-of-fold evaluation of that calibration,"
                " run calengine cv DATA --scores ... --folds K)"
            )
    config = FitConfig(
        learner=args.learner or "gaussian_nb",
        learner_params=parse_params(args.learner_param, "--learner-param"),
        method=args.method,
        method_params=parse_params(args.method_param, "--method-param"),
        mode=args.mode or "ensemble",
        cv=5 if args.cv is None else args.cv,
        seed=args.seed,
        multiclass=args.multiclass,
        combiner_params=parse_params(args.combiner_param, "--combiner-param"),
        combine=args.combine,
        negative_sampling=args.negative_sampling,
        class_sampling=parse_class_sampling(args.class_sampling),
    )
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
        weight=args.weight,
        scores=scores,
        score_kind=args.score_kind,
        classes=tuple(c.strip() for c in args.classes.split(",")) if args.classes else None,
        prefit=prefit,
        trust=tuple(getattr(args, "trust_type", None) or ()),
        by=getattr(args, "by", None),  # ``fit --by`` only
        max_segments=1_000 if getattr(args, "max_segments", None) is None else args.max_segments,
        shrinkage=getattr(args, "shrinkage", None),
    )
    return config, spec


def prepare_fit(args):
    """(FitConfig, TableSpec, plugins, worker requirements) of ``fit`` and ``cv``: every name resolved
    and every parameter parsed (:func:`calengine.fit.training.prepare_fit`), so a typo fails before
    any data is read."""
    from ..fit.training import prepare_fit as resolve

    config, spec = fit_inputs(args)
    plugins, requirements = resolve(config, spec)
    return config, spec, plugins, requirements


def check_model_output(output: str, overwrite: bool) -> str:
    """The absolute path of a command's ``--output`` model directory: new, empty, or with ``--overwrite``
    a calengine model directory (anything else is never replaced); one line otherwise."""
    import os

    from ..errors import DataError

    out = os.path.abspath(output)
    if os.path.exists(out) and not (os.path.isdir(out) and not os.listdir(out)):
        if not overwrite:
            raise DataError(f"output '{output}' already exists; choose a new --output, or pass --overwrite")
        if not os.path.isfile(os.path.join(out, "manifest.json")):
            raise DataError(f"--overwrite refuses to replace '{output}': it is not a calengine model directory")
    return out


def progress(args):
    from ..runtime.progress import Progress

    return Progress(enabled=args.progress)


def tls(args):
    from ..runtime.connection import TLSConfig
    from ..errors import ClusterError

    given = [args.tls_ca_file, args.tls_cert, args.tls_key]
    if not any(given):
        return None
    if not all(given):
        raise ClusterError("TLS needs all of --tls-ca-file, --tls-cert and --tls-key")
    return TLSConfig(args.tls_ca_file, args.tls_cert, args.tls_key)


def client(args, distributions=(), modules=(), map_only: bool = False, keep_heap: bool = False):
    """The job's Dask client (:func:`calengine.runtime.client.dask_client`); ``distributions`` may be a callable
    returning ``(distributions, modules)``, called once the cluster is up.  ``map_only``: the command
    only maps tasks over chunks and reduces their results (score, decide, evaluate), so without
    ``--cluster`` it runs on a :class:`~calengine.runtime.thread_client.ThreadClient` and never imports
    ``distributed``; ``keep_heap``: such a job keeps freed memory for reuse
    (:func:`calengine.runtime.heap.kept_heap`; this process is the command's own)."""
    from ..runtime.client import dask_client, runs_on_threads
    from ..errors import ParameterError

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
    from ..runtime.run_log import observed  # dashboard link on a terminal; cluster and tasks for --json-log

    if runs_on_threads(args.cluster, memory, map_only):  # no distributed: none of its logging to set up
        return observed(dask_client(None, workers=args.workers, map_only=True, keep_heap=keep_heap), None)
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
    import calengine.boosters.guard
    import calengine.runtime.client

    calengine.runtime.client.QUIET_WORKER_STDERR = True
    calengine.boosters.guard.FILTER_CHATTER = True  # XGBoost's in-process workers print "got rank" lines
    return observed(dask_client(args.cluster, workers=args.workers, tls=tls(args), distributions=distributions,
                                modules=modules, memory_limit=memory), args.cluster)


def connect(args, map_only: bool = False, keep_heap: bool = False):
    """The ``client`` a Python API function takes from the CLI (see :func:`calengine.runtime.client.job_client`):
    called with the workers' requirements once the job has checked its inputs, it opens :func:`client`
    for this command's options (``map_only``, ``keep_heap``: as there)."""
    return lambda distributions, modules: client(args, distributions, modules, map_only=map_only, keep_heap=keep_heap)
