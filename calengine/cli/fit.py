"""``calengine fit``: fit a calibrated model on a Parquet table and save it.

A shell over :func:`calengine.fit.table.fit_table`, the function :func:`calengine.fit_table` calls.
"""

from __future__ import annotations

import sys

from . import options


def add_parser(sub) -> None:
    from ..runtime import run_log

    p = sub.add_parser("fit", help="fit a calibrated model on a Parquet table")
    p.add_argument("data", metavar="DATA", help="Parquet file, directory of Parquet files, or glob")
    options.add_config_options(p)
    p.add_argument("--calibration-data", metavar="DATA", help="calibrate on this table instead of folds")
    p.add_argument("--max-train-rows", type=int, default=None, metavar="N",
                   help="fit each learner on a seeded, stratified sample of at most N rows drawn on the workers"
                   " (statistics, calibration and evaluation still use every row)")
    p.add_argument("--route", choices=("auto", "stats", "in-memory", "sample"), default="auto",
                   help="how learners meet the rows: from mergeable statistics (learners that support it),"
                   " rows assembled on one worker, or a sample (--max-train-rows); default: auto")
    p.add_argument("--prefit", metavar="PATH",
                   help="calibrate a model trained elsewhere, never refitted: an XGBoost booster (.json/.ubj), a"
                   " LightGBM text model (.txt) or a scikit-learn classifier saved with skops (.skops); it reads its"
                   " own feature names, else --features A,B,... in its order")
    options.add_trust_option(p)
    p.add_argument("--by", metavar="COL[,COL...]",
                   help="also fit one calibrator per segment (value tuple of these columns), blended with the global"
                   " map by w = n/(n+K); unseen or missing segments use the global map")
    p.add_argument("--max-segments", type=int, default=None, metavar="N",
                   help="refuse --by columns with more than N segments (default 1000, at most 20000)")
    p.add_argument("--shrinkage", metavar="K", default=None,
                   help="--by: calibration rows at which a segment's own map gets half the say (default 20;"
                   " 0: none, inf: the global map only)")
    p.add_argument("--output", required=True, metavar="MODEL_DIR", help="model directory to create")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing model directory at --output (only once the new model is complete)")
    options.add_cluster_options(p)
    run_log.add_option(p)


def run(args) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from ..fit.score_columns import learner_fit_runs_as_map, runs_as_map, score_columns_info
    from ..fit.table import fit_table
    from ..model.artifact import save_model

    if args.by is None and (args.max_segments is not None or args.shrinkage is not None):
        from ..errors import ParameterError

        raise ParameterError("--max-segments and --shrinkage apply to a segment-wise fit; add --by COL or drop them")
    out = options.check_model_output(args.output, args.overwrite)
    # Loading the plugins (importing scikit-learn: ~1 s) and starting a local cluster (spawning worker
    # processes: ~2 s) are independent, so the plugins load in a thread while the cluster starts.  A
    # misspelt name still fails before any data is read; the cluster started meanwhile is closed.
    # Not ``with``: its exit would wait for the loading thread, so a Ctrl-C during the imports would
    # only take effect once they finish.
    pool = ThreadPoolExecutor(1, thread_name_prefix="calengine-plugins")
    try:
        prepared = pool.submit(options.prepare_fit, args)
        if args.cluster != "local":
            prepared.result()  # embedded or remote: nothing slow to overlap, so fail fast on names
        progress = options.progress(args)
        column_map = runs_as_map(args.scores, args.prefit, args.by, args.method)  # no learner to train
        map_only = column_map
        if not map_only and args.cluster is None:  # the plugins are loaded: a learner from statistics?
            config, spec, plugins, _ = prepared.result()
            map_only = learner_fit_runs_as_map(config, spec, plugins)
        # an embedded map of score columns keeps its freed memory for reuse: tasks, chunks and rounds
        # reallocate the same sizes (a learner's per-fragment matrices are larger: glibc's defaults)
        with options.client(args, lambda: prepared.result()[3], map_only=map_only, keep_heap=column_map) as client:
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
    extras = []
    if training.get("weight"):
        extras.append(f"weighted by '{training['weight']}'" + (" (costing)" if training.get("weighting") == "costing" else ""))
    if model.class_rates is not None:
        extras.append("sampling-corrected")
    segments = model.info.get("x_segments")
    if segments:
        extras.append(f"by {','.join(segments['by'])}: {segments['segments_fitted']} of {segments['segments_seen']}"
                      f" segments with their own map (K={segments['shrinkage']})")
    mcgrad = model.info.get("x_mcgrad")
    if mcgrad:
        members = mcgrad["members"]
        if mcgrad.get("pooled") and len(members) > 1:  # one set of rounds, applied by every member
            rounds = f"{members[0]['rounds']} (shared by the {len(members)} members)"
        else:
            rounds = ",".join(str(m["rounds"]) for m in members)
        extras.append(f"by {','.join(mcgrad['by'])}: {mcgrad['segments_seen']} segments, MCGrad rounds kept {rounds}")
    extra = f", {', '.join(extras)}" if extras else ""
    scores = score_columns_info(model)
    if scores is not None:
        columns = ", ".join(f"'{c}'" for c in scores["columns"])
        rows = training.get("calibration_rows") or training.get("rows")
        sys.stderr.write(
            f"calibrated score column{'s' if len(scores['columns']) > 1 else ''} {columns} ({scores['kind']}) with"
            f" {args.method} on {rows} rows, {model.labels.n_classes} classes{extra} -> {args.output}\n"
        )
        return 0
    if model.info.get("learner") == "prefit":
        lp = model.info.get("learner_params", {})
        sys.stderr.write(
            f"calibrated the {lp.get('library')} model '{lp.get('source')}' (--prefit, not refitted) with {args.method}"
            f" on {training.get('calibration_rows') or training.get('rows')} rows, {model.labels.n_classes} classes{extra}"
            f" -> {args.output}\n"
        )
        return 0
    sys.stderr.write(
        f"fitted {model.info['learner']} + {args.method} on {training.get('rows')} rows"
        f" ({training.get('route')} route), {model.labels.n_classes} classes,"
        f" {n_members} member{'s' if n_members != 1 else ''}{extra} -> {args.output}\n"
    )
    return 0
