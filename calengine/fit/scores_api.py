"""``calengine.calibrate_scores``: ``calengine fit DATA --scores`` from Python.

Apart from :mod:`calengine.fit.score_columns` (the options, reader and learner the table fit uses)
because it drives the table fit itself: one module each way keeps the fit's imports acyclic.
"""

from __future__ import annotations

import os

from ..errors import ParameterError

__all__ = ["calibrate_scores"]


def calibrate_scores(data, target: str, scores=None, *, method: str = "isotonic", method_params: dict | None = None,
                     score_kind: str = "proba", classes=None, positive=None, weight: str | None = None,
                     calibration_data=None, negative_sampling: float | None = None,
                     class_sampling: dict | None = None, seed: int = 0, output=None, overwrite: bool = False,
                     cluster=None, workers=None, worker_memory=None, progress=None, prefit=None, features=None,
                     trust=()):
    """Calibrate the score column(s) of a table against ``target``: ``calengine fit DATA --scores``;
    or, with ``prefit=PATH`` instead of ``scores``, the scores of a model trained elsewhere:
    ``calengine fit DATA --prefit PATH`` (:mod:`calengine.adapters.prefit`; ``features``: its feature columns
    when the file names none, ``trust``: extra types a skops file may hold).

    ``data`` (and ``calibration_data``): a Parquet path (file, directory, glob or URL) or a pandas
    DataFrame.  ``scores``: a column name, a comma-separated string or a list (one column for two
    classes, or one per class: see :mod:`calengine.adapters.score_columns` for how columns meet classes, and
    ``classes`` to name them in order).  ``score_kind``: ``"proba"``, ``"decision"`` or ``"logit"``.
    ``weight``: a column of frequency weights.  ``negative_sampling`` / ``class_sampling``: the
    rates at which classes were kept (:mod:`calengine.methods.sampling`).  ``output``: save the model
    there too.  Returns the :class:`~calengine.model.calibrated.CalibratedModel`; every bad input is
    a :class:`~calengine.errors.CalengineError` raised before anything is written.
    """
    import tempfile

    from ..runtime.client import dask_client
    from ..parquet.data import table_files
    from ..runtime.progress import Progress
    from .score_columns import runs_as_map
    from ..plan.options import FitConfig, TableSpec, check_job
    from .table import fit_table

    if (scores is None) == (prefit is None):
        raise ParameterError("give scores=COLUMNS (score columns of the table) or prefit=PATH (a saved model), not both")
    if isinstance(scores, str):
        scores = [s.strip() for s in scores.split(",") if s.strip()]
    if isinstance(features, str):
        features = [f.strip() for f in features.split(",") if f.strip()]
    if prefit is None and not scores:
        raise ParameterError("scores must name at least one score column")
    if output is not None and not overwrite and os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        raise ParameterError(f"output '{output}' already exists; choose a new path or pass overwrite=True")
    with tempfile.TemporaryDirectory(prefix="calengine-scores-") as tmp:
        spec = TableSpec(
            data=_one_path(data, tmp, "data.parquet", table_files), target=target, positive=positive,
            calibration_data=None if calibration_data is None else _one_path(calibration_data, tmp, "cal.parquet", table_files),
            weight=weight, scores=tuple(scores) if scores else None, score_kind=score_kind,
            classes=None if classes is None else tuple(classes),
            prefit=None if prefit is None else os.fspath(prefit), features=list(features) if features else None,
            trust=tuple(trust or ()),
        )
        config = FitConfig(method=method, method_params=dict(method_params or {}), seed=seed,
                           negative_sampling=negative_sampling, class_sampling=class_sampling)
        check_job(config, spec)
        map_only = runs_as_map(scores, prefit, None, method)
        with dask_client(cluster, workers=workers, memory_limit=worker_memory, map_only=map_only) as client:
            model = fit_table(client, spec, config, progress=Progress(enabled=progress))
    if output is not None:
        from ..model.artifact import save_model

        save_model(model, output, overwrite=overwrite)
    return model


def _one_path(data, tmp: str, name: str, table_files) -> str:
    """A path for a :class:`~calengine.fit.table.TableSpec`: ``data`` itself, or a DataFrame written to ``tmp``."""
    if hasattr(data, "to_parquet"):
        files, _ = table_files(data, tmp, name)
        return files[0]
    return os.fspath(data)
