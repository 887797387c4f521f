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
    "arrow_udf", "adapt_priors",
]


#: modules that moved into the wings (issue 39), old path -> new path: importing an old path still
#: works for one release, with a DeprecationWarning naming the new one (``calengine.cluster`` was split in
#: three: its names are looked up in each)
_MOVED = {
    "calengine.booster_checks": "calengine.boosters.checks",
    "calengine.booster_guard": "calengine.boosters.guard",
    "calengine.booster_native": "calengine.boosters.native",
    "calengine.library_models": "calengine.boosters.model_files",
    "calengine.registry": "calengine.plugins.registry",
    "calengine.plugin_calls": "calengine.plugins.calls",
    "calengine.score_columns": "calengine.adapters.score_columns",
    "calengine.prefit": "calengine.adapters.prefit",
    "calengine.wrapped_estimator": "calengine.adapters.wrapped_estimator",
    "calengine.thread_client": "calengine.runtime.thread_client",
    "calengine.progress": "calengine.runtime.progress",
    "calengine.run_log": "calengine.runtime.run_log",
    "calengine.testing_cluster": "calengine.testing.cluster",
    "calengine.estimator_declared": "calengine.testing.declared",
    "calengine.cluster": ("calengine.runtime.client", "calengine.runtime.connection", "calengine.runtime.versions"),
}


class _MovedModules:
    """The import system's finder and loader of :data:`_MOVED`'s old paths."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname not in _MOVED:
            return None
        import importlib.util

        return importlib.util.spec_from_loader(fullname, cls)

    @staticmethod
    def create_module(spec):
        import importlib
        import types
        import warnings

        new = _MOVED[spec.name]
        names = new if isinstance(new, tuple) else (new,)
        warnings.warn(f"{spec.name} moved and this path goes in the next minor release; import {' or '.join(names)} instead",
                      DeprecationWarning, stacklevel=2)
        modules = [importlib.import_module(n) for n in names]
        if len(modules) == 1:
            # the module itself, so state set through either name is one; the import system sets the
            # module's __spec__ to the old name's, which exec_module puts back
            _SPECS[spec.name] = modules[0].__spec__
            return modules[0]
        alias = types.ModuleType(spec.name, f"Deprecated: the names of {', '.join(names)}.")

        def __getattr__(attr):
            for m in modules:
                if hasattr(m, attr):
                    return getattr(m, attr)
            raise AttributeError(f"module {spec.name!r} has no attribute {attr!r}")

        alias.__getattr__ = __getattr__
        return alias

    @staticmethod
    def exec_module(module):
        if module.__spec__ is not None and module.__spec__.name in _SPECS:
            module.__spec__ = _SPECS.pop(module.__spec__.name)


_SPECS: dict = {}


import sys as _sys  # noqa: E402

if not any(f is _MovedModules for f in _sys.meta_path):
    _sys.meta_path.append(_MovedModules)
del _sys


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
