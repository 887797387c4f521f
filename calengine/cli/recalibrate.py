"""``calengine recalibrate``: refit (or update) a model's calibrators on new labelled data, keeping its
learners, into a new model directory that records its lineage.

A shell over :func:`calengine.fit.recalibrate.recalibrate_with_lineage`, the function
:func:`calengine.recalibrate` calls.
"""

from __future__ import annotations

import os
import sys

from . import options


def add_parser(sub) -> None:
    p = sub.add_parser(
        "recalibrate", help="refit a model's calibrators on new labelled data, keeping its learners",
        description="Keep every learner of MODEL_DIR as it is, score NEW_DATA with them and fit only the"
        " calibrators again (same method and parameters as stored), writing a new model directory whose"
        " manifest records its lineage (parent model and hash, data fingerprint, time, options)."
        " With --update, merge the new data's statistics into those stored in the model instead"
        " (isotonic: exact when the old and new PAV blocks do not interleave, else an approximation;"
        " binning: exact counts in the old bins; sigmoid, temperature: an approximate fit from a stored score"
        " summary); beta, rocch, venn_abers, ... cannot update.",
    )
    p.add_argument("model", metavar="MODEL_DIR", help="the model to recalibrate (left unchanged)")
    p.add_argument("data", metavar="NEW_DATA", help="labelled Parquet file, directory of Parquet files, or glob")
    p.add_argument("--target", required=True, metavar="COL", help="the label column of NEW_DATA")
    p.add_argument("--output", required=True, metavar="MODEL_DIR", help="model directory to create")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing model directory at --output (only once the new model is complete)")
    p.add_argument("--update", action="store_true",
                   help="merge the new data's statistics with the stored ones instead of refitting (isotonic, binning;"
                   " sigmoid and temperature approximately, from a stored score summary)")
    p.add_argument("--forget", type=float, default=1.0, metavar="LAMBDA",
                   help="with --update: multiply the stored statistics' weights by LAMBDA in [0, 1] first"
                   " (1: keep all, the default; 0: for isotonic the same as a plain recalibration, for binning the"
                   " old bins with only the new counts)")
    p.add_argument("--weight", metavar="COL",
                   help="a column of frequency weights of NEW_DATA (>= 0; weight 2 = the row twice) for every calibrator")
    options.add_trust_option(p)
    options.add_cluster_options(p)


def run(args) -> int:
    from ..errors import ParameterError
    from ..fit.recalibrate import check_recalibratable, parent_record, recalibrate_with_lineage
    from ..runtime.context import RunContext
    from ..model.artifact import load_model, save_model
    from ..parquet.data import check_columns, resolve_parquet_files
    from ..plugins.loading import model_requirements

    out = args.output
    if not args.overwrite and os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise ParameterError(f"output '{out}' already exists; choose a new path or pass --overwrite")
    model = load_model(args.model, trust=tuple(args.trust_type or ()))
    check_recalibratable(model, args.update, args.forget)
    files = resolve_parquet_files(args.data)
    # a misspelt --target fails from the Parquet footers, before a cluster starts
    check_columns(files, list(dict.fromkeys(list(model.encoder.input_columns) + [args.target]
                                            + ([args.weight] if args.weight else []))))
    with options.client(args, *model_requirements([model])) as client:
        new_model, info = recalibrate_with_lineage(
            RunContext(client, options.progress(args)), model, parent_record(args.model), files, args.target,
            update=args.update, forget=args.forget, command=["calengine", "recalibrate", *_argv(args)], weight=args.weight,
        )
    save_model(new_model, out, overwrite=args.overwrite)
    ex = info["exact"]
    how = (f"updated ({ex['exact']} exact, {ex['approximate']} approximate merges, forget {args.forget:g})"
           if args.update else "refitted")
    skipped = f" ({info['missing']} rows without a label skipped)" if info["missing"] else ""
    sys.stderr.write(f"recalibrated on {info['rows']} rows{skipped}: calibrators {how} -> {out}\n")
    return 0


def _argv(args) -> list[str]:
    """The command as the lineage records it: what decides the new model, no cluster secrets."""
    argv = [args.model, args.data, "--target", args.target, "--output", args.output]
    if args.update:
        argv += ["--update", "--forget", repr(args.forget)]
    if args.weight:
        argv += ["--weight", args.weight]
    if args.overwrite:
        argv.append("--overwrite")
    if args.cluster is not None:
        argv += ["--cluster", str(args.cluster)]
    return argv
