"""``calengine.mlflow``: calibrated models as MLflow models (the ``calengine`` flavor with a pyfunc).

``save_model(model_dir, path)`` writes one, ``log_model(model_dir, artifact_path)`` logs one to the
active run, ``load_model(model_uri)`` returns the calengine model inside one, and
``mlflow.pyfunc.load_model(uri).predict(df)`` scores a DataFrame into ``p_<class>`` columns.  This
module is also the pyfunc's ``loader_module`` (MLflow imports it by this name and calls
``_load_pyfunc``).  The work lives in :mod:`calengine.export.mlflow`; see its docstring for the
contract (no pickles, pinned requirements, what MLflow stamps).
"""

from __future__ import annotations

from .export.mlflow import FLAVOR_NAME, load_model, log_model, save_model
from .export.mlflow import load_pyfunc as _load_pyfunc  # the name MLflow calls on a loader_module

__all__ = ["FLAVOR_NAME", "save_model", "log_model", "load_model", "_load_pyfunc"]
