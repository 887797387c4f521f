"""``calengine score`` and ``calengine decide``: probabilities (and, with a cost matrix, decisions)
for every row of a Parquet table, written as a Parquet dataset.

A shell over :func:`calengine.score_table` (:func:`calengine.scores.table.score_parquet`); ``decide``
is ``score`` with a required ``--cost-matrix``, the same code path.
"""

from __future__ import annotations

import sys

from . import options


def add_parser(sub) -> None:
    from ..runtime import run_log

    score = sub.add_parser("score", help="write calibrated probabilities for a Parquet table")
    _add_model_and_output(score)
    score.add_argument("--intervals", action="store_true",
                       help="also write p_low/p_high for two-class Probing models (the interval the votes select)"
                            " and Venn-ABERS models (--method venn_abers: p0/p1, or their CVAP combination"
                            " in ensemble mode)")
    score.add_argument("--reject-below", type=float, default=None, metavar="CONF",
                       help="abstain (empty prediction) where the chosen class's probability is below CONF")
    _add_batch_rows(score)
    options.add_trust_option(score)
    options.add_cost_matrix_option(score)
    options.add_cluster_options(score)
    run_log.add_option(score)

    decide = sub.add_parser(
        "decide", help="write minimum-expected-cost decisions (and probabilities) for a Parquet table",
        description="Score DATA with MODEL_DIR and decide, per row, the class of least expected cost under a cost"
        " (or benefit) matrix: columns p_<class>, prediction, decision and expected_cost (minus the expected"
        " benefit for a benefit matrix).  Example: calengine decide model/ test.parquet --cost-matrix"
        ' \'{"classes": [0, 1], "benefits": [[0, 0], [-5, "amount - 5"]]}\' --output decisions/'
        " mails (decides 1) where p * amount > 5.",
    )
    _add_model_and_output(decide)
    _add_batch_rows(decide)
    options.add_trust_option(decide)
    options.add_cost_matrix_option(decide, required=True)
    decide.set_defaults(intervals=False, reject_below=None)
    options.add_cluster_options(decide)
    run_log.add_option(decide)


def _add_model_and_output(p) -> None:
    p.add_argument("model", metavar="MODEL_DIR")
    p.add_argument("data", metavar="DATA")
    p.add_argument("--output", required=True, metavar="OUT", help="Parquet dataset directory to create")
    p.add_argument("--keep", action="append", metavar="COL", help="copy this input column (repeatable)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --output that calengine scored before (only once the new one is complete)")


def _add_batch_rows(p) -> None:
    p.add_argument("--batch-rows", type=int, default=None, metavar="N",
                   help="rows per batch (default: the largest power of two up to 131072 that keeps a batch's"
                        " columns within 32 MiB as float64: 131072 rows up to 32 columns, 8192 at 500)")


def run(args) -> int:
    from ..errors import DataError
    from ..scores.table import SCORES_MARKER, check_scores_output, score_parquet

    try:  # the Python message names overwrite=True; here it is the flag
        check_scores_output(args.output, args.overwrite)
    except DataError:
        if not args.overwrite:
            raise DataError(f"output '{args.output}' already exists; choose a new --output, or pass --overwrite") from None
        raise DataError(f"--overwrite refuses to replace '{args.output}': it is not calengine's scored output"
                        f" (no {SCORES_MARKER}); choose a new --output") from None
    n = score_parquet(args.model, args.data, args.output, keep=args.keep, intervals=args.intervals,
                      reject_below=args.reject_below, cost_matrix=args.cost_matrix, batch_rows=args.batch_rows,
                      trust=args.trust_type, client=options.connect(args, map_only=True),
                      progress=options.progress(args), overwrite=args.overwrite)
    sys.stderr.write(f"{'decided' if args.cost_matrix is not None else 'scored'} {n} rows -> {args.output}\n")
    return 0
