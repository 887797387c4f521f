"""``calengine adapt``: a model's probabilities moved to the class priors of new, unlabelled rows.

The flow: the new table's fragments are scored once by the parent model (one task per fragment; the
posteriors stay on the workers, 8 bytes per row and class), then every EM step of
:mod:`calengine.methods.label_shift` is ONE reduction over those fragments -- a task per fragment
returns k fixed-point sums of its re-weighted posteriors, the client adds them and updates the priors,
until no prior moves by ``tol``.  BBSE, the check, needs a confusion matrix of hard predictions on
labelled rows of the old population: a model does not keep its calibration rows, so those come from
``labelled`` (a table with the model's target column, e.g. the calibration data or a held-out split);
its counts are integers, one more reduction.  Labels in the new table itself (its target column, when
present) are only counted, as a check beside the estimates; a label the model never saw is one line.  Every task maps over fragments and the client reduces,
so without ``--cluster`` the job runs on a thread pool (``map_only``: no scheduler to start, and an
EM step costs a thread hand-off per fragment rather than a scheduler round trip).

The training priors π are the class totals of the rows the model's calibrators met, recorded at fit
time in the manifest (``extra.x_class_totals``), divided by the model's class rates when it corrects
for class sampling (its probabilities are on the population's scale).  Models saved before that record
existed have no π: then the ``labelled`` table's class rates are used (it must come from the population
the model was calibrated on), and without one adaptation is refused in one line.

The adapted model is the parent with new class rates (:func:`calengine.methods.label_shift.adapted_rates`),
so scoring it applies p'(c|x) ∝ p(c|x)·π'_c/π_c through the class-sampling correction every model
already carries, and its manifest's lineage records the parent (path, content hash), the data, both
estimates, the method used and the EM's convergence.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import DataError, ParameterError
from ..methods import label_shift as ls
from ..scores.posteriors import confusion_chunk, em_reduction, score_posteriors, training_priors

#: estimators ``method`` may name
METHODS = ("em", "bbse")


def check_method(method: str) -> None:
    if method not in METHODS:
        raise ParameterError(f"method must be one of {', '.join(METHODS)}, got {method!r}", parameter="method")


def adapt_table(run, model, files: list[str], *, method: str = "em", labelled: list[str] | None = None,
                tol: float = ls.DEFAULT_TOL, max_iter: int = ls.DEFAULT_MAX_ITER, batch_rows: int = 65536,
                chunk_rows: int = 1_000_000) -> tuple[Any, dict[str, Any]]:
    """The adapted model and what was estimated: ``(new_model, info)`` with ``info`` = ``{"rows",
    "training_priors", "training_priors_from", "em", "bbse", "method", "priors", "labelled_rows",
    "observed"}`` (``bbse`` None without ``labelled``; ``observed`` the table's own class rates when it
    has the target column, else None).  ``method`` names the estimate the new model applies.  The new model's
    ``info`` does not hold the lineage yet: :func:`adapt_with_lineage` adds it."""
    import copy

    from ..parquet.data import check_columns, parquet_columns
    from ..runtime.progress import gather_in_order
    from ..scores.table import plan_chunks, share_model

    check_method(method)
    ls.check_em_options(tol, max_iter)
    if method == "bbse" and not labelled:
        raise ParameterError("method='bbse' needs labelled rows of the old population: give labelled (a table)"
                             f" with the model's target column '{model.labels.target}'",
                             parameter=("method", "labelled"))
    columns = list(model.encoder.input_columns)
    check_columns(files, columns)
    target = model.labels.target
    if labelled:
        check_columns(labelled, list(dict.fromkeys(columns + [target])))
    chunks = [c for c in plan_chunks(files, columns, chunk_rows) if c.n_rows > 0]
    if not chunks:
        raise DataError("the table to adapt to has no rows; label-shift adaptation needs unlabelled rows")
    client, progress = run.client, run.progress
    model_f = share_model(client, model)

    joint = None
    if labelled:
        lchunks = [c for c in plan_chunks(labelled, list(dict.fromkeys(columns + [target])), chunk_rows)
                   if c.n_rows > 0]
        if not lchunks:
            raise DataError("the labelled table has no rows; BBSE needs labelled rows of the old population",
                            parameter="labelled")
        counted = gather_in_order(client, [client.submit(confusion_chunk, model_f, c, target, batch_rows, pure=False)
                                           for c in lchunks], progress, "labelled rows")
        joint = np.sum([j for j, _ in counted], axis=0)

    train, source = training_priors(model)
    if train is None:
        if joint is None:
            raise DataError(f"{source}; give labelled (a table of the population it was calibrated on, with its"
                            f" target column '{target}') to take the training priors from, or fit the model again",
                            parameter="labelled")
        counts = joint.sum(axis=0)
        if np.any(counts <= 0):
            raise DataError("the labelled table lacks a class of the model; it needs rows of every class",
                            parameter="labelled")
        train, source = counts / counts.sum(), "class rates of the --labelled table"

    labelled_here = target in parquet_columns(files)
    blocks, n_rows, predicted, observed, _ = score_posteriors(client, model_f, chunks, batch_rows,
                                                              target if labelled_here else None, progress)
    if n_rows == 0:
        raise DataError("the table to adapt to has no rows; label-shift adaptation needs unlabelled rows")
    em = em_reduction(client, blocks, n_rows, train, tol, max_iter)
    del blocks
    bbse = ls.bbse_priors(joint, predicted) if joint is not None else None
    priors = em.priors if method == "em" else np.maximum(bbse["priors"], ls.PRIOR_FLOOR)
    priors = priors / priors.sum()

    new_model = copy.copy(model)
    new_model.class_rates = ls.adapted_rates(model.class_rates, train, priors)
    new_model.info = {k: v for k, v in model.info.items() if k != "negative_sampling"}
    from .recalibrate import drop_conformal

    drop_conformal(new_model, "adapted")
    info = {
        "rows": n_rows, "training_priors": train, "training_priors_from": source, "em": em, "bbse": bbse,
        "method": method, "priors": priors, "labelled_rows": None if joint is None else int(joint.sum()),
        "observed": None if observed is None or observed.sum() == 0 else observed / observed.sum(),
    }
    return new_model, info


def lineage_record(parent: dict[str, Any], files: list[str], info: dict[str, Any], tol: float, max_iter: int,
                   command: list[str] | None, labelled: list[str] | None) -> dict[str, Any]:
    """What an adapted model's manifest records (``lineage``, mode ``adapt``): the parent, the new
    rows (paths, count, footer fingerprint), the priors (training, EM with its convergence, BBSE, the
    ones applied), the method, the labelled rows BBSE used, time and command."""
    import datetime

    from .recalibrate import data_fingerprint

    bbse = info["bbse"]
    return {
        "mode": "adapt",
        "parent": parent,
        "data": {"paths": data_paths(files), "rows": int(info["rows"]), "fingerprint": data_fingerprint(files)},
        "method": info["method"],
        "priors": {
            "training": [float(p) for p in info["training_priors"]],
            "training_from": info["training_priors_from"],
            "em": info["em"].to_json() | {"tol": float(tol), "max_iter": int(max_iter)},
            "bbse": None if bbse is None else {"priors": [float(p) for p in bbse["priors"]],
                                                "unprojected": [float(p) for p in bbse["raw"]],
                                                "condition": (float(bbse["condition"]) if np.isfinite(bbse["condition"])
                                                              else None)},
            "applied": [float(p) for p in info["priors"]],
            # the table's own labels, when it has the target column: a check, never used by the estimates
            "observed": None if info["observed"] is None else [float(p) for p in info["observed"]],
        },
        "labelled": None if not labelled else {"paths": data_paths(labelled), "rows": info["labelled_rows"],
                                               "fingerprint": data_fingerprint(labelled)},
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": list(command) if command else None,
    }


def data_paths(files: list[str]) -> list[str]:
    import os

    from ..parquet.storage import is_url

    return [str(f) if is_url(str(f)) else os.path.abspath(str(f)) for f in files]


def adapt_with_lineage(run, model, parent: dict[str, Any], files: list[str], *, method: str = "em",
                       labelled: list[str] | None = None, tol: float = ls.DEFAULT_TOL,
                       max_iter: int = ls.DEFAULT_MAX_ITER, command: list[str] | None = None,
                       recorded_paths: list[str] | None = None, recorded_labelled: list[str] | None = None):
    """:func:`adapt_table` plus the lineage record in the new model's ``info["lineage"]`` (``recorded_*``:
    what it records of the tables instead of their files, e.g. ``["<DataFrame>"]``)."""
    new_model, info = adapt_table(run, model, files, method=method, labelled=labelled, tol=tol, max_iter=max_iter)
    lineage = lineage_record(parent, files, info, tol, max_iter, command, labelled)
    if recorded_paths is not None:
        lineage["data"]["paths"] = list(recorded_paths)
    if recorded_labelled is not None and lineage["labelled"] is not None:
        lineage["labelled"]["paths"] = list(recorded_labelled)
    if model.info.get("lineage"):
        lineage["previous"] = model.info["lineage"]
    new_model.info["lineage"] = lineage
    return new_model, info


def adapt_priors(model, data, *, method: str = "em", labelled=None, tol: float = ls.DEFAULT_TOL,
                 max_iter: int = ls.DEFAULT_MAX_ITER, output=None, overwrite: bool = False, cluster=None, workers=None,
                 worker_memory=None, progress=None, client=None):
    """Adapt a model to the class priors of unlabelled rows (``calengine adapt``; module docstring).

    ``model``: a model directory (recorded as the parent, with its content hash) or a loaded model.
    ``data``: the new rows (a Parquet path, a list of them, or a pandas DataFrame); their labels, if
    any, are not read.  ``method``: ``"em"`` (default) or ``"bbse"``, the estimate the new model
    applies.  ``labelled``: labelled rows of the old population (with the model's target column), for
    BBSE.  ``tol``/``max_iter``: EM stops when no prior moves by ``tol``, or after ``max_iter`` steps.
    ``client``/``cluster``/``workers``/``worker_memory``: as for :func:`calengine.recalibrate`.  With
    ``output`` the new model is saved there.  Returns the new
    :class:`~calengine.model.calibrated.CalibratedModel`; ``info["lineage"]["priors"]`` holds the estimates.
    """
    import os
    import tempfile
    from pathlib import Path

    from ..runtime.client import job_client
    from ..model.artifact import load_model, save_model
    from ..parquet.data import table_files
    from ..plugins.loading import model_requirements
    from ..runtime.context import RunContext
    from ..runtime.progress import as_progress
    from .recalibrate import parent_record

    if output is not None and not overwrite and os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        raise ParameterError(f"output '{output}' already exists; choose a new path or pass overwrite=True")
    check_method(method)
    ls.check_em_options(tol, max_iter)
    if isinstance(model, (str, Path)):
        parent, model = parent_record(model), load_model(model)
    else:
        parent = {"path": None, "content_hash": None}
    with tempfile.TemporaryDirectory(prefix="calengine-adapt-") as tmp:
        files, recorded = table_files(data, tmp, "new.parquet")
        lab, lab_recorded = table_files(labelled, tmp, "labelled.parquet") if labelled is not None else (None, None)
        with job_client(client, cluster=cluster, workers=workers, memory_limit=worker_memory,
                        requirements=model_requirements([model]), map_only=True) as c:
            new_model, _ = adapt_with_lineage(RunContext(c, as_progress(progress)), model, parent, files, method=method,
                                              labelled=lab, tol=tol, max_iter=max_iter, recorded_paths=recorded,
                                              recorded_labelled=lab_recorded)
    if output is not None:
        save_model(new_model, output, overwrite=overwrite)
    return new_model

