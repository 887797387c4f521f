"""``calengine conformal``: attach a split-conformal layer to a fitted model, so that ``score --sets``
writes prediction sets holding the true class of at least 1 - alpha of the rows.

A shell over :func:`calengine.fit.conformal.conformalize_with_lineage`, the function
:func:`calengine.conformalize` calls (docs/guide/conformal.md is the user guide).
"""

from __future__ import annotations

import sys

from . import options

def add_parser(sub) -> None:
    from ..runtime import run_log

    p = sub.add_parser(
        "conformal", help="attach prediction sets with a coverage guarantee to a fitted model (split conformal)",
        description="Compute split-conformal thresholds from DATA, labelled rows the model did not train on, and"
        " write a copy of MODEL_DIR with a conformal layer: 'calengine score --sets' then writes for each row the"
        " set of classes that holds the true class for at least 1 - ALPHA of exchangeable rows.  The learners,"
        " calibrators and encoder are kept bit for bit; the new manifest's lineage records the parent.",
    )
    p.add_argument("model", metavar="MODEL_DIR", help="the fitted model (left unchanged)")
    p.add_argument("data", metavar="DATA", help="calibration rows: Parquet file, directory of Parquet files, or glob")
    p.add_argument("--target", required=True, metavar="COL", help="the class column of DATA")
    p.add_argument("--alpha", required=True, type=float, metavar="A",
                   help="miscoverage rate in (0, 1): sets hold the true class for at least 1 - A of the rows")
    p.add_argument("--output", required=True, metavar="MODEL_DIR", help="model directory to create")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing model directory at --output (only once the new model is complete)")
    p.add_argument("--score", default="lac", choices=("lac", "aps", "raps", "topk"),
                   help="nonconformity score: lac 1 - p_y (smallest sets), aps cumulative sorted probability"
                   " (adaptive sets), raps aps with a penalty on large sets, topk the rank of the class (default lac)")
    p.add_argument("--mondrian", metavar="class|COL[,COL]",
                   help="coverage per group: 'class' per true class, or per segment of these columns (segments"
                   " with too few rows, unseen or missing use the global threshold)")
    p.add_argument("--max-segments", type=int, default=None, metavar="N",
                   help="--mondrian COL: refuse more than N segments (default 1000, at most 20000)")
    p.add_argument("--weight", metavar="COL",
                   help="weighted conformal for covariate shift: a column of w(x) = dP_test/dP_cal (>= 0), read"
                   " from DATA and again from every table scored")
    p.add_argument("--raps-lambda", type=float, default=None, metavar="L",
                   help="--score raps: penalty per class beyond --raps-k-reg (default 0.01)")
    p.add_argument("--raps-k-reg", type=int, default=None, metavar="K",
                   help="--score raps: classes admitted without penalty (default 1)")
    p.add_argument("--no-randomize", dest="randomize", action="store_false", default=None,
                   help="aps/raps: the deterministic variant (no per-row uniform; sets cover at least 1 - A, often more)")
    p.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed of the aps/raps per-row uniforms, each a hash of the row and the seed (default 0)")
    options.add_trust_option(p)
    options.add_cluster_options(p)
    run_log.add_option(p)


def run(args) -> int:
    from ..fit.conformal import check_options, conformalize_with_lineage
    from ..fit.recalibrate import parent_record
    from ..model.artifact import load_model, save_model
    from ..parquet.data import check_columns, resolve_parquet_files
    from ..plugins.loading import model_requirements

    opts = check_options(args.target, args.alpha, args.score, args.mondrian, args.weight, args.randomize, args.seed,
                         args.raps_lambda, args.raps_k_reg, args.max_segments)
    out = options.check_model_output(args.output, args.overwrite)
    model = load_model(args.model, trust=tuple(args.trust_type or ()))
    parent = parent_record(args.model)
    files = resolve_parquet_files(args.data)
    columns = list(dict.fromkeys(list(model.encoder.input_columns) + [opts.target] + list(opts.by)
                                 + ([opts.weight] if opts.weight else [])))
    check_columns(files, columns)  # from the footers, before a cluster starts
    with options.client(args, *model_requirements([model]), map_only=True, keep_heap=True) as client:
        new_model, info = conformalize_with_lineage(client, model, parent, files, opts,
                                                    command=["calengine", "conformal", *_argv(args)],
                                                    progress=options.progress(args))
    save_model(new_model, out, overwrite=args.overwrite)
    sys.stderr.write(summary(new_model, info, args.output))
    return 0


def summary(model, info: dict, out: str) -> str:
    """What ``conformal`` prints: the layer, its rows and thresholds."""
    layer = model.conformal
    text = f"conformalized on {info['rows']} rows: {layer.describe()} -> {out}\n"
    if info["missing"]:
        text += f"  note: {info['missing']} rows without a label were left out\n"
    t = layer.thresholds[:, 0] if layer.weight is None else layer.thresholds[:, 0]
    if layer.mondrian == "class":
        names = [str(c) for c in model.labels.classes]
        shown = ", ".join(f"{n}: {v:.6g}" for n, v in list(zip(names, t))[:10])
        text += f"  thresholds per class: {shown}{' ...' if len(names) > 10 else ''}\n"
    elif layer.mondrian == "segments":
        text += (f"  global threshold {t[0]:.6g}; {info['segments_own']} of {info['segments_seen']} segments have"
                 " their own (the others use the global one)\n")
    else:
        text += f"  threshold {t[0]:.6g} ({int(layer.rows[0])} rows)\n"
    if layer.weight is not None:
        text += "  weighted: the thresholds above are for a test row of weight 0; heavier rows get larger ones\n"
    return text


def _argv(args) -> list[str]:
    """The command as the lineage records it: what decides the new model, no cluster secrets."""
    argv = [args.model, args.data, "--target", args.target, "--alpha", repr(args.alpha), "--output", args.output,
            "--score", args.score, "--seed", str(args.seed)]
    for flag, value in (("--mondrian", args.mondrian), ("--weight", args.weight), ("--raps-lambda", args.raps_lambda),
                        ("--raps-k-reg", args.raps_k_reg), ("--max-segments", args.max_segments)):
        if value is not None:
            argv += [flag, str(value)]
    if args.randomize is False:
        argv.append("--no-randomize")
    if args.overwrite:
        argv.append("--overwrite")
    if args.cluster is not None:
        argv += ["--cluster", str(args.cluster)]
    return argv
