"""``calengine cv``: cross-validated metrics of a configuration on one labelled table.

A shell over :func:`calengine.fit.cross_validation.cross_validate`, the function
:func:`calengine.cross_validate_table` calls.
"""

from __future__ import annotations

import json

from . import options


def add_parser(sub) -> None:
    p = sub.add_parser("cv", help="cross-validated metrics of a configuration on one labelled table")
    p.add_argument("data", metavar="DATA", help="Parquet file, directory of Parquet files, or glob")
    options.add_config_options(p)
    p.add_argument("--prefit", metavar="PATH",
                   help="evaluate the calibration of a model trained elsewhere, never refitted (as fit --prefit: an"
                   " XGBoost booster .json/.ubj, a LightGBM text model .txt or a skops scikit-learn classifier):"
                   " each fold is calibrated on the other K-1 and scored")
    options.add_trust_option(p)
    p.add_argument("--folds", type=int, default=5, metavar="K",
                   help="outer folds: K models, each fitted on K-1 folds and scored on the last (default: 5)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(calibration_data=None, max_train_rows=None, route="auto")
    options.add_cluster_options(p)


def run(args) -> int:
    from ..errors import ParameterError
    from ..fit.cross_validation import cross_validate, format_cv
    from ..metrics.report.text import finite

    if args.folds < 2:
        raise ParameterError(f"--folds must be at least 2, got {args.folds}")
    if args.method == "mcgrad":  # it needs --by, which cv does not take
        raise ParameterError("calengine cv does not run --method mcgrad (it needs --by); fit it with calengine fit"
                             " ... --by COL and measure it on a held-out table with calengine evaluate --by")
    config, spec, plugins, requirements = options.prepare_fit(args)
    with options.client(args, *requirements) as client:
        result = cross_validate(client, spec, config, folds=args.folds, plugins=plugins)
    what = f"scores {args.scores}" if args.scores else (
        f"prefit {args.prefit}" if args.prefit else (args.learner or "gaussian_nb"))
    label = f"{what} + {args.method}" + "".join(
        f" [{x}]" for x in (args.multiclass, "refit" if args.mode == "refit" else None) if x
    )
    if args.json:
        print(json.dumps(finite({"label": label, **result.to_json()})))
    else:
        print(format_cv(result, label))
    return 0
