"""A calibrated model as an MLflow model: the ``calengine`` flavor plus a pyfunc that loads it.

:func:`save_model` writes an MLflow model directory whose ``data/model`` is a copy of the calengine
model directory (its ``manifest.json`` and exactly the files that manifest lists, so the copy is a
function of the model and :func:`calengine.load_model` checks every byte of it again on load).  The
pyfunc flavor names a ``loader_module`` (:mod:`calengine.mlflow`) instead of a ``PythonModel``:
MLflow then stores no Python object at all (a ``PythonModel`` is cloudpickled into ``python_model.pkl``,
which runs code on load), and loading rebuilds the model from JSON and arrays as every calengine
model is rebuilt.

The pyfunc predicts a pandas DataFrame with one float64 ``p_<class>`` column per class, row for row in
the input's order and with its index, by the model's own scoring path
(:meth:`~calengine.model.calibrated.CalibratedModel.predict_frame`), so the probabilities are
``calengine score``'s.  The requirements MLflow records are pinned to the installed versions of
calengine and of the plugin distributions the model's manifest names (the ones loading needs),
never inferred (MLflow's inference would load the model in a subprocess).

Determinism: ``data/``, ``requirements.txt``, ``python_env.yaml`` and ``conda.yaml`` are functions of
the model and the installed versions; MLflow itself stamps ``MLmodel`` with ``utc_time_created``,
a random ``model_uuid`` (and, when logged, ``run_id``/``model_id``/``artifact_path``), which is why the
export manifest names the source model's content hash rather than a digest of the directory.

MLflow is an optional dependency (``pip install 'calengine[mlflow]'``; ``mlflow-skinny`` suffices).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ..errors import CalengineError, DataError

#: the flavor's name in ``MLmodel`` and the module MLflow imports to load the pyfunc
FLAVOR_NAME = "calengine"
LOADER_MODULE = "calengine.mlflow"
#: where, inside the MLflow model directory, the calengine model directory is stored
DATA_DIR = "model"


def _mlflow():
    try:
        import mlflow
        import mlflow.pyfunc  # noqa: F401
    except ImportError:
        raise CalengineError(
            "exporting to MLflow needs mlflow (mlflow-skinny suffices); install it with: pip install 'calengine[mlflow]'"
        ) from None
    return mlflow


def _stage_model_copy(model_dir, manifest: dict, into: Path) -> Path:
    """Copy ``manifest.json`` and the files it lists (nothing else) into ``into/DATA_DIR``."""
    from ..model.artifact import MANIFEST

    src, dst = Path(model_dir), into / DATA_DIR
    for rel in [MANIFEST, *sorted(manifest.get("files", {}))]:
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, target)
    return dst


def pip_requirements(manifest: dict) -> list[str]:
    """``calengine==<installed>`` and ``<distribution>==<installed>`` for every plugin distribution the
    model's manifest names, sorted: what a fresh environment installs to load and score the model."""
    from importlib import metadata

    from ..version import __version__

    reqs = {"calengine": __version__}
    for origin in (manifest.get("plugins") or {}).values():
        dist = (origin or {}).get("distribution")
        if dist and dist != "calengine":
            try:
                reqs[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                raise DataError(f"the model needs plugin distribution '{dist}', which is not installed;"
                                " install it before exporting") from None
    return [f"{name}=={version}" for name, version in sorted(reqs.items())]


def save_model(model_dir, path, *, trust=(), mlflow_model=None) -> dict:
    """Write the calengine model at ``model_dir`` as an MLflow model directory ``path`` (which must not
    exist).  Returns the flavor's configuration (also in ``MLmodel`` under ``calengine``).

    Also the ``save_model`` of the flavor :func:`log_model` hands to ``mlflow.models.Model.log``."""
    mlflow = _mlflow()
    from mlflow.models import Model

    from ..version import __version__
    from ..model.artifact import load_model, read_manifest

    model = load_model(model_dir, trust=tuple(trust))  # refuses a damaged model before anything is written
    manifest = read_manifest(model_dir)
    reqs = pip_requirements(manifest)
    conf = {
        "calengine_version": __version__,
        "data": f"data/{DATA_DIR}",
        "model_content_hash": manifest["content_hash"],
        "classes": [str(c) for c in model.labels.classes],
        "columns": [f"p_{c}" for c in model.labels.classes],
        "trust": sorted(str(t) for t in trust),
    }
    mlflow_model = mlflow_model if mlflow_model is not None else Model()
    mlflow_model.add_flavor(FLAVOR_NAME, **conf)
    with tempfile.TemporaryDirectory(prefix="calengine-mlflow-") as staging:
        data = _stage_model_copy(model_dir, manifest, Path(staging))
        mlflow.pyfunc.save_model(path=os.fspath(path), loader_module=LOADER_MODULE, data_path=os.fspath(data),
                                 mlflow_model=mlflow_model, pip_requirements=reqs)
    return conf


def log_model(model_dir, artifact_path: str = "model", *, trust=(), **kwargs):
    """Log the calengine model at ``model_dir`` as an MLflow logged model named ``artifact_path`` (linked to
    the active run, if there is one); returns MLflow's ``ModelInfo``, whose ``model_uri`` loads it.

    ``kwargs`` go to ``mlflow.models.Model.log`` (``registered_model_name``, ``tags``, ``params``, ...)."""
    _mlflow()
    import sys

    from mlflow.models import Model

    flavor = sys.modules[__name__]
    return Model.log(artifact_path=None, name=artifact_path, flavor=flavor, model_dir=os.fspath(model_dir),
                     trust=tuple(trust), **kwargs)


def _local_model_path(model_uri: str) -> Path:
    _mlflow()
    from mlflow.artifacts import download_artifacts

    return Path(download_artifacts(artifact_uri=str(model_uri)))


def _flavor_conf(local: Path) -> dict:
    from mlflow.models import Model

    mlmodel = Model.load(os.fspath(local))
    conf = mlmodel.flavors.get(FLAVOR_NAME)
    if conf is None:
        raise DataError(f"'{local}' is an MLflow model without the '{FLAVOR_NAME}' flavor; export it with"
                        " calengine export --format mlflow or calengine.mlflow.save_model")
    return conf


def load_model(model_uri, trust=()):
    """The calengine model inside the MLflow model at ``model_uri`` (a path, ``runs:/``, ``models:/``, ...),
    loaded with :func:`calengine.load_model` and the trusted types it was exported with (plus ``trust``)."""
    local = _local_model_path(model_uri)
    conf = _flavor_conf(local)
    from ..model.artifact import load_model as load_calengine_model

    return load_calengine_model(local / conf["data"], trust=tuple(conf.get("trust", ())) + tuple(trust))


class PyfuncModel:
    """What ``mlflow.pyfunc.load_model`` wraps: scores a pandas DataFrame into ``p_<class>`` columns."""

    def __init__(self, model):
        self.model = model
        self.columns = [f"p_{c}" for c in model.labels.classes]

    def predict(self, model_input, params=None):
        import pandas as pd

        if isinstance(model_input, dict):
            model_input = pd.DataFrame(model_input)
        if not isinstance(model_input, pd.DataFrame):
            raise DataError(f"a calengine pyfunc model scores a pandas DataFrame with the model's input columns,"
                            f" got {type(model_input).__name__}")
        out = self.model.predict_frame(model_input)[self.columns]
        out.index = model_input.index
        return out

    def get_raw_model(self):
        """The calengine model (MLflow's ``PyFuncModel.get_raw_model`` returns this)."""
        return self.model


def load_pyfunc(data_path, model_config=None):
    """MLflow's loader-module entry point: ``data_path`` is the stored calengine model directory."""
    from ..model.artifact import load_model as load_calengine_model

    data = Path(data_path)
    trust: tuple = ()
    mlmodel = data.parent.parent / "MLmodel"
    if mlmodel.is_file():
        trust = tuple(_flavor_conf(data.parent.parent).get("trust", ()))
    return PyfuncModel(load_calengine_model(data, trust=trust))
