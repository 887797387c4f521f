"""``calengine adapt``: estimate the class priors of unlabelled rows (EM, and BBSE as a check) and write
a model whose probabilities are corrected to them, recording both estimates and the parent model.

A shell over :func:`calengine.fit.label_shift.adapt_with_lineage`, the function
:func:`calengine.adapt_priors` calls.
"""

from __future__ import annotations

import os
import sys

from . import options


def add_parser(sub) -> None:
    p = sub.add_parser(
        "adapt", help="correct a model's probabilities to the class priors of new, unlabelled rows (label shift)",
        description="Estimate the class priors of DATA (rows without labels) by the EM of Saerens, Latinne &"
        " Decaestecker (2002) from MODEL_DIR's probabilities and, with --labelled, by BBSE (Lipton et al. 2018)"
        " as a check; write a copy of the model whose probabilities are p(c|x) re-weighted by new/old prior and"
        " normalised, with both estimates and the parent model in its manifest's lineage.",
    )
    p.add_argument("model", metavar="MODEL_DIR", help="the model to adapt (left unchanged)")
    p.add_argument("data", metavar="DATA", help="the new rows: Parquet file, directory of Parquet files, or glob")
    p.add_argument("--output", required=True, metavar="MODEL_DIR", help="model directory to create")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing model directory at --output (only once the new model is complete)")
    p.add_argument("--method", default="em", choices=("em", "bbse"),
                   help="the estimate the new model applies (default em; bbse needs --labelled)")
    p.add_argument("--labelled", metavar="DATA",
                   help="labelled rows of the population the model was calibrated on (with its target column, e.g."
                   " a held-out split): BBSE's confusion matrix, and the training priors of a model that does not"
                   " record them")
    p.add_argument("--max-iter", type=int, default=1000, metavar="N", help="at most N EM steps (default 1000)")
    p.add_argument("--tol", type=float, default=1e-6, metavar="T",
                   help="EM stops when no prior changes by T or more in a step (default 1e-6)")
    options.add_trust_option(p)
    options.add_cluster_options(p)


def run(args) -> int:
    from ..errors import ParameterError
    from ..fit.label_shift import adapt_with_lineage, check_method
    from ..runtime.context import RunContext
    from ..fit.recalibrate import parent_record
    from ..methods.label_shift import check_em_options
    from ..model.artifact import load_model, save_model
    from ..parquet.data import check_columns, resolve_parquet_files
    from ..plugins.loading import model_requirements

    check_method(args.method)
    check_em_options(args.tol, args.max_iter)
    out = args.output
    if not args.overwrite and os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise ParameterError(f"output '{out}' already exists; choose a new path or pass --overwrite")
    model = load_model(args.model, trust=tuple(args.trust_type or ()))
    files = resolve_parquet_files(args.data)
    check_columns(files, list(model.encoder.input_columns))  # from the footers, before a cluster starts
    labelled = resolve_parquet_files(args.labelled) if args.labelled else None
    with options.client(args, *model_requirements([model]), map_only=True) as client:
        new_model, info = adapt_with_lineage(
            RunContext(client, options.progress(args)), model, parent_record(args.model), files, method=args.method,
            labelled=labelled, tol=args.tol, max_iter=args.max_iter, command=["calengine", "adapt", *_argv(args)],
        )
    save_model(new_model, out, overwrite=args.overwrite)
    sys.stderr.write(summary(model, info, out))
    return 0


def summary(model, info, out: str) -> str:
    """What ``adapt`` prints: the priors per class (training, EM, BBSE) and the EM's convergence."""
    classes = [str(c) for c in model.labels.classes]
    em, bbse = info["em"], info["bbse"]

    def row(name, values):
        return f"  {name:<10}" + "".join(f" {v:>10.4f}" for v in values) + "\n"

    width = max(10, *map(len, classes))
    text = f"adapted on {info['rows']} rows: class priors estimated, {info['method']} applied -> {out}\n"
    text += "  " + " " * 10 + "".join(f" {c[:width]:>10}" for c in classes) + "\n"
    text += row("training", info["training_priors"])
    text += row("em", em.priors)
    if bbse is not None:
        text += row("bbse", bbse["priors"])
    if info.get("observed") is not None:
        text += row("observed", info["observed"])
    state = f"converged in {em.iterations} steps" if em.converged else (
        f"did NOT converge in {em.iterations} steps (last change {em.last_change:.2g}; raise --max-iter)")
    text += f"  EM {state}; training priors from the {info['training_priors_from']}"
    text += "" if bbse is not None else "; no BBSE check (give --labelled DATA)"
    return text + "\n"


def _argv(args) -> list[str]:
    """The command as the lineage records it: what decides the new model, no cluster secrets."""
    argv = [args.model, args.data, "--output", args.output, "--method", args.method,
            "--max-iter", str(args.max_iter), "--tol", repr(args.tol)]
    if args.labelled:
        argv += ["--labelled", args.labelled]
    if args.overwrite:
        argv.append("--overwrite")
    if args.cluster is not None:
        argv += ["--cluster", str(args.cluster)]
    return argv
