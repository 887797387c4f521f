"""calengine: turn any classifier into an accurate class-probability estimator, on Dask.

Importing this package is cheap on purpose (``calengine --help`` must answer in well under a second):
the heavy libraries load only when a name that needs them is first used.
"""

from __future__ import annotations

from .hookspecs import hookimpl

from .version import MODEL_FORMAT_VERSION, __version__

__all__ = [
    "hookimpl", "__version__", "CalibratedClassifier", "fit_table", "score_table", "evaluate_models",
    "cross_validate_table", "load_model", "recalibrate", "table_splits",
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
    if name == "load_model":
        from .model.artifact import load_model

        return load_model
    raise AttributeError(f"module 'calengine' has no attribute {name!r}")
