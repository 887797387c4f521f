"""``calengine evaluate``: metrics of one or more models on a labelled Parquet table, as text or JSON,
with an optional HTML report.

A shell over :func:`calengine.evaluate_models`: what it prints is the result's
:meth:`~calengine.metrics.evaluation.Evaluation.to_text` or ``json.dumps`` of its ``to_json()``.
"""

from __future__ import annotations

import json

from . import options


def add_parser(sub) -> None:
    p = sub.add_parser("evaluate", help="metrics of one or more models on a labelled Parquet table")
    p.add_argument("paths", nargs="+", metavar="MODEL_DIR... DATA",
                   help="one or more model directories, then the data to evaluate on")
    p.add_argument("--target", required=True, metavar="COL")
    p.add_argument("--weight", metavar="COL",
                   help="column of non-negative row weights: every metric, test, decision cost (--cost-matrix),"
                        " bootstrap resample (--bootstrap), prior-shift estimate (--prior-shift) and report bar weighs"
                        " rows by it (a weight of 2 counts as the row twice)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--report", metavar="DIR", help="also write figures and one self-contained HTML page to DIR")
    p.add_argument("--alpha", type=float, default=0.01, metavar="A",
                   help="significance level of the calibration drift check on the calibrated probabilities "
                        "(Spiegelhalter's z and a 10-bin reliability chi-square, Bonferroni over the tests and "
                        "one-vs-rest columns); 'recalibrate' when the adjusted p-value is below A (default: 0.01)")
    p.add_argument("--bootstrap", type=int, default=0, metavar="B",
                   help="with --report: draw a 90%% pointwise band on each two-class model's calibration map from B"
                        " refits of its calibrator on bootstrap resamples of the evaluated data (parallel tasks;"
                        " default 0 = no band; 200 is a sensible choice); with --json: the band as"
                        " 'calibration_band' (grid, low, median, high)")
    p.add_argument("--by", metavar="COL[,COL...]",
                   help="also the calibration of every segment: each value of each column (ECE, Spiegelhalter's z,"
                        " ECCE on the sigma scale, Holm-corrected p-values, worst first) and MCGrad's multicalibration"
                        " error over them")
    p.add_argument("--max-segments", type=int, default=None, metavar="N",
                   help="refuse --by columns with more than N segments in all (default 1000, at most 20000)")
    p.add_argument("--prior-shift", type=int, nargs="?", const=200, default=None, metavar="B",
                   help="also the class priors of DATA estimated from the model's probabilities alone (adapt's EM),"
                        " with a 90%% interval from B bootstrap resamples (default 200), beside the priors the model"
                        " was calibrated to and DATA's label rates; --json key 'prior_shift'")
    p.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed of the --bootstrap and --prior-shift resamples (same seed, same band and interval, on"
                        " any number of workers)")
    p.add_argument("--metrics", metavar="NAME[,NAME...]",
                   help="compute only these: keys of --json (brier, log_loss, auc, ece, ece_equal_mass, smece, ...;"
                        " each name one key) and the sections raw (the raw learner's row, same keys), drift and"
                        " error_reject; the rest is skipped, not computed (default: everything); not with --report")
    options.add_trust_option(p)
    options.add_cost_matrix_option(p, evaluate=True)
    options.add_cluster_options(p)


def run(args) -> int:
    from ..errors import ParameterError
    from ..metrics.drift import check_alpha
    from ..metrics.evaluation import check_bootstrap, check_weight_option, evaluate_models
    from ..metrics.selection import check_metrics

    if len(args.paths) < 2:
        raise ParameterError("evaluate needs MODEL_DIR... DATA: at least one model directory, then the data")
    try:
        check_alpha(args.alpha)
    except ParameterError:
        raise ParameterError(f"--alpha must be strictly between 0 and 1, got {args.alpha:g}; e.g. --alpha 0.01") from None
    check_weight_option(args.weight)
    metrics = check_metrics(args.metrics)
    if metrics is not None and args.report:
        raise ParameterError("--report draws every metric's figure and table; drop --metrics or --report")
    if args.max_segments is not None and args.by is None:
        raise ParameterError("--max-segments bounds --by; add --by COL or drop --max-segments")
    if args.by is not None:
        from ..metrics.segments import DEFAULT_MAX_SEGMENTS, check_segment_options

        check_segment_options(args.by, DEFAULT_MAX_SEGMENTS if args.max_segments is None else args.max_segments)
    if args.bootstrap:
        check_bootstrap(args.bootstrap)
        if not args.report and not args.json:
            raise ParameterError("--bootstrap draws its band in the report or writes it in the JSON; add --report DIR or --json")
    result = evaluate_models(args.paths[:-1], args.paths[-1], args.target, weight=args.weight,
                             cost_matrix=args.cost_matrix,
                             bootstrap=args.bootstrap, seed=args.seed, alpha=args.alpha, report=args.report or None,
                             trust=args.trust_type, client=options.connect(args, map_only=True, keep_heap=True),
                             progress=options.progress(args), by=args.by, max_segments=args.max_segments,
                             prior_shift=args.prior_shift or 0, metrics=metrics)
    print(json.dumps(result.to_json()) if args.json else result.to_text())
    return 0
