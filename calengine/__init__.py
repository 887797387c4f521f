"""calengine: turn any classifier into an accurate class-probability estimator, on Dask.

Importing this package is cheap on purpose (``calengine --help`` must answer in well under a second):
the heavy libraries load only when a name that needs them is first used.
"""

from __future__ import annotations

import os as _os

# The test suite sets CALENGINE_REQUIRE_INSTALLED to the site-packages directory it must import calengine
# from, so that neither a test nor any process a test starts (the CLI, Dask workers) can silently import the
# source checkout instead of what users install: a wheel once lacked calengine.decisions while every test
# passed, because every test imported the checkout.  Unset (every user's case), this costs one lookup.
_required = _os.environ.get("CALENGINE_REQUIRE_INSTALLED")
if _required and not _os.path.realpath(__file__).startswith(_os.path.realpath(_required) + _os.sep):
    raise ImportError(
        f"calengine was imported from {_os.path.dirname(__file__)}, not from the installed distribution in"
        f" {_required} (CALENGINE_REQUIRE_INSTALLED): install it (pip install . ./plugins/builtins) and run"
        " the venv's pytest, which does not put the checkout on sys.path"
    )
del _os, _required

from .hookspecs import hookimpl  # noqa: E402

from .version import MODEL_FORMAT_VERSION, __version__  # noqa: E402

__all__ = [
    "hookimpl", "__version__", "CalibratedClassifier", "fit_table", "score_table", "evaluate_models",
    "cross_validate_table", "load_model", "recalibrate", "table_splits", "calibrate_scores",
    "arrow_udf", "adapt_priors", "conformalize",
]


def __getattr__(name: str):
    if name == "CalibratedClassifier":
        from .estimator import CalibratedClassifier

        return CalibratedClassifier
    if name == "fit_table":
        from .fit.table import fit_parquet

        return fit_parquet
    if name == "score_table":
        from .scores.table import score_parquet

        return score_parquet
    if name == "evaluate_models":
        from .metrics.evaluation import evaluate_models

        return evaluate_models
    if name == "cross_validate_table":
        from .fit.cross_validation import cross_validate_parquet

        return cross_validate_parquet
    if name == "table_splits":
        from .plan.folds import table_splits

        return table_splits
    if name == "recalibrate":
        from .fit.recalibrate import recalibrate

        return recalibrate
    if name == "adapt_priors":
        from .fit.label_shift import adapt_priors

        return adapt_priors
    if name == "conformalize":
        from .fit.conformal import conformalize

        return conformalize
    if name == "calibrate_scores":
        from .fit.scores_api import calibrate_scores

        return calibrate_scores
    if name == "arrow_udf":
        from .export.arrow import arrow_udf

        return arrow_udf
    if name == "load_model":
        from .model.artifact import load_model

        return load_model
    raise AttributeError(f"module 'calengine' has no attribute {name!r}")
