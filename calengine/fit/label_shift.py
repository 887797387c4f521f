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

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataError, ParameterError
from ..methods import label_shift as ls
from ..metrics.exact import fixed_sum, fixed_to_float
from ..metrics.tables import is_integral
from ..tasks.heap import trims_heap

#: estimators ``method`` may name
METHODS = ("em", "bbse")


@dataclass
class PosteriorBlock:
    """One fragment's posteriors under the parent model, how many rows it predicts as each class,
    (when the table carries the model's target column) how many rows hold each label, and (when
    asked for, see :func:`posterior_chunk`) the seeded sample of its rows the bootstrap resamples."""

    P: np.ndarray
    predicted: np.ndarray
    observed: np.ndarray | None = None
    #: ``(keys, P, weights)`` of the rows with the smallest seeded keys, in key order (``weights`` None
    #: without a weight column); None: not asked for
    sample: tuple | None = None
    #: the rows' weights (float64, one per row of ``P``), None without a weight column
    weights: np.ndarray | None = None


#: stream of the prior-shift bootstrap's per-row sampling keys (apart from the calibration band's,
#: :mod:`calengine.metrics.bootstrap`, so the two samples of one evaluation are independent)
_SAMPLE_STREAM = 0x50534854  # "PSHT"


def _bottom_rows(keys: np.ndarray, P: np.ndarray, k: int, w: np.ndarray | None = None) -> tuple:
    """``(keys, P, w)`` of the ``k`` rows with the smallest keys, in key order (ties by the
    probabilities, then the weights: any arrival order of the pieces gives the same arrays)."""
    order = np.lexsort(((() if w is None else (w,)) + (*P.T[::-1], keys)))[:k]
    return keys[order], P[order], None if w is None else w[order]


@trims_heap
def posterior_chunk(model, chunk, batch_rows: int, target: str | None = None,
                    sample: tuple[int, int] | None = None, weight: str | None = None) -> PosteriorBlock:
    """The parent model's class probabilities of a fragment's rows (runs in tasks).  ``target``: the
    model's target column, present in this table: its labels are counted (never used by the
    estimates), and a label the model never saw is one line.  ``sample = (k, seed)``: also keep the
    ``k`` rows with the smallest uniform keys, drawn from a stream seeded by ``seed``, the file's
    identity, the chunk's first row group and the batch (the scheme of
    :func:`calengine.metrics.bootstrap.chunk_score_sample`): a seeded uniform sample of the table that
    depends on the table and the seed only, never on workers or task order.  ``weight``: a column of
    row weights (counts): the label and prediction counts become weight totals, the block keeps the
    weights for the EM, and the sample holds rows of positive weight with their weights (a bad
    weight is one line)."""
    from ..scores.table import _batches, _weight_column

    k = model.n_classes
    parts, wparts = [], []
    observed = np.zeros(k, dtype=np.float64 if weight else np.int64) if target else None
    keys, kept, kept_w = np.empty(0), np.empty((0, k)), (np.empty(0) if weight else None)
    if sample is not None:
        from ..parquet.dataset import file_key_hash

        lo, hi = file_key_hash(chunk.file_key)
        first = int(chunk.row_groups[0]) if chunk.row_groups else 0
    columns = list(dict.fromkeys(list(model.encoder.input_columns) + ([target] if target else [])
                                 + ([weight] if weight else [])))
    for b, df in enumerate(_batches(chunk, columns, batch_rows)):
        if not len(df):
            continue
        w = _weight_column(df, weight)
        if target:
            present = df[target].notna().to_numpy()
            labels = _known_labels(model, df[target][present])
            observed += (np.bincount(labels, minlength=k) if w is None
                         else np.bincount(labels, weights=w[present], minlength=k))
        P = model.predict_proba_features(model.encoder.transform(df, order="F"))
        parts.append(P)
        if w is not None:
            wparts.append(w)
        if sample is not None:
            ss = np.random.SeedSequence([int(sample[1]) & 0xFFFFFFFF, _SAMPLE_STREAM, lo, hi, first, b])
            u = np.random.default_rng(ss).random(len(df))
            if w is None:
                keys, kept, _ = _bottom_rows(np.concatenate([keys, u]), np.concatenate([kept, P]), int(sample[0]))
            else:
                pos = w > 0
                keys, kept, kept_w = _bottom_rows(np.concatenate([keys, u[pos]]), np.concatenate([kept, P[pos]]),
                                                  int(sample[0]), np.concatenate([kept_w, w[pos]]))
    P = np.concatenate(parts) if parts else np.empty((0, k))
    W = (np.concatenate(wparts) if wparts else np.empty(0)) if weight else None
    predicted = np.argmax(P, axis=1)
    return PosteriorBlock(P, (np.bincount(predicted, minlength=k).astype(np.int64) if W is None
                              else np.bincount(predicted, weights=W, minlength=k)), observed,
                          None if sample is None else (keys, kept, kept_w), W)


def _known_labels(model, labels):
    """Class indices of ``labels`` (no missing values); a value the model never saw is one line saying
    so for ``adapt`` (matched as :meth:`LabelSpace.encode` matches: numbers as numbers, else text)."""
    try:
        return model.labels.encode(labels)
    except DataError:
        import pandas as pd

        for v in labels.unique():
            try:
                model.labels.encode(pd.Series([v], dtype=labels.dtype))
            except DataError:
                raise DataError(
                    f"column '{model.labels.target}' of the table to adapt to holds {str(v)!r}, a class the model was"
                    f" not trained on (classes: {', '.join(map(str, model.labels.classes))}); adapt estimates the"
                    " priors of the model's own classes: drop those rows, or fit a model that knows the class"
                ) from None
        raise


def block_rows(block: PosteriorBlock) -> tuple:
    """``(rows, predicted, observed, weights)``: ``weights`` None, or ``(total, largest, integral)`` of
    the block's weights (``total`` an int when ``integral``)."""
    w = block.weights
    if w is None:
        stats = None
    elif is_integral(w):
        c = w.astype(np.int64)
        stats = (int(c.sum()) if w.size * float(w.max(initial=0.0)) < 2.0**62 else sum(c.tolist()),
                 float(w.max(initial=0.0)), True)
    else:
        stats = (float(w.sum()), float(w.max(initial=0.0)), False)
    return int(block.P.shape[0]), block.predicted, block.observed, stats


def block_sample(block: PosteriorBlock) -> tuple:
    return block.sample


@dataclass
class Weights:
    """What the EM needs of a weight column over all blocks: the total weight (an int when every
    weight is an integer) and ``scale``: None for integer weights (each row's sums counted ``weight``
    times), else the largest weight, the scale fractional weighted sums are taken against."""

    total: float
    scale: float | None


def score_posteriors(client, model_f, chunks, batch_rows: int, target: str | None, progress,
                     sample: tuple[int, int] | None = None, weight: str | None = None):
    """Graph building: one :func:`posterior_chunk` task per chunk, whose blocks stay on the workers.
    Returns ``(blocks, n_rows, predicted, observed, weights)`` (``observed`` None without ``target``;
    ``weights`` a :class:`Weights`, None without ``weight``).  A fractional total is one more
    reduction, a fixed-point sum against the largest weight, so it is the same bits however the rows
    are cut (and the in-memory :func:`calengine.methods.label_shift.weight_terms`' total)."""
    from ..progress import gather_in_order

    blocks = [client.submit(posterior_chunk, model_f, c, batch_rows, target, sample, weight, pure=False)
              for c in chunks]
    sized = gather_in_order(client, [client.submit(block_rows, b, pure=False) for b in blocks], progress, "posteriors")
    n_rows = int(sum(s[0] for s in sized))
    predicted = np.sum([s[1] for s in sized], axis=0)
    observed = np.sum([s[2] for s in sized], axis=0) if target else None
    weights = None
    if weight:
        stats = [s[3] for s in sized]
        if all(integral for _, _, integral in stats):
            weights = Weights(sum(t for t, _, _ in stats), None)
        else:
            scale = max(m for _, m, _ in stats)
            sums = client.gather([client.submit(block_weight_sum, b, scale, pure=False) for b in blocks])
            weights = Weights(fixed_to_float(sum(sums), scale), scale)
    return blocks, n_rows, predicted, observed, weights


def block_weight_sum(block: PosteriorBlock, scale: float) -> int:
    """A fragment's total weight in fixed point against ``scale`` (runs in tasks)."""
    return fixed_sum(block.weights, scale)


def em_reduction(client, blocks, n_rows, train: np.ndarray, tol: float, max_iter: int,
                 weights: Weights | None = None) -> ls.EMResult:
    """Saerens et al.'s EM over the posterior ``blocks``: each step one reduction of fixed-point sums
    (weighted by the blocks' weights when ``weights`` is given, over their total weight)."""
    scale = None if weights is None else weights.scale

    def step(new):
        parts = client.gather([client.submit(block_em_sums, b, train, new, scale, pure=False) for b in blocks])
        return [sum(p[c] for p in parts) for c in range(len(new))]

    total = n_rows if weights is None else weights.total
    return ls.run_em(step, total, train, tol=tol, max_iter=max_iter, scale=1.0 if scale is None else scale)


def block_em_sums(block: PosteriorBlock, train: np.ndarray, new: np.ndarray, scale: float | None = None) -> list[int]:
    """A fragment's EM statistic (:func:`calengine.methods.label_shift.em_sums`); runs in tasks.
    A weighted block's weights are counts when ``scale`` is None (every weight of the table an
    integer), else summed against ``scale``."""
    if block.weights is None:
        return ls.em_sums(block.P, train, new)
    w = block.weights.astype(np.int64) if scale is None else block.weights
    return ls.em_sums(block.P, train, new, w, scale)


@trims_heap
def confusion_chunk(model, chunk, target: str, batch_rows: int) -> tuple[np.ndarray, int]:
    """``(joint, missing)``: counts of (predicted class, label) over a labelled fragment's rows, and
    the rows without a label (skipped).  A label the model does not know is one line."""
    from ..scores.table import _batches

    k = model.n_classes
    joint = np.zeros((k, k), dtype=np.int64)
    missing = 0
    columns = sorted(set(model.encoder.input_columns) | {target})
    for df in _batches(chunk, columns, batch_rows):
        present = df[target].notna().to_numpy()
        missing += int((~present).sum())
        df = df.loc[present]
        if not len(df):
            continue
        y = model.labels.encode(df[target])
        pred = np.argmax(model.predict_proba_features(model.encoder.transform(df, order="F")), axis=1)
        joint += np.bincount(pred * k + y, minlength=k * k).reshape(k, k)
    return joint, missing


def training_priors(model) -> tuple[np.ndarray | None, str]:
    """The priors ``model``'s probabilities are calibrated to, and where they come from; ``(None,
    reason)`` for a model that does not record its calibration class totals (see the module docstring)."""
    record = model.info.get("x_class_totals")
    if not isinstance(record, dict) or not isinstance(record.get("totals"), list):
        return None, "this model does not record its calibration class totals (it was fitted before they were)"
    totals = np.asarray(record["totals"], dtype=np.float64)
    if totals.shape != (model.n_classes,) or not np.all(np.isfinite(totals)) or np.any(totals <= 0):
        return None, "this model's calibration class totals are not one positive number per class"
    if model.class_rates is not None:
        totals = totals / model.class_rates
    return totals / totals.sum(), f"class totals of its {record.get('table', 'training')} table"


def check_method(method: str) -> None:
    if method not in METHODS:
        raise ParameterError(f"--method must be one of {', '.join(METHODS)}, got {method!r}")


def adapt_table(client, model, files: list[str], *, method: str = "em", labelled: list[str] | None = None,
                tol: float = ls.DEFAULT_TOL, max_iter: int = ls.DEFAULT_MAX_ITER, batch_rows: int = 65536,
                chunk_rows: int = 1_000_000, progress=None) -> tuple[Any, dict[str, Any]]:
    """The adapted model and what was estimated: ``(new_model, info)`` with ``info`` = ``{"rows",
    "training_priors", "training_priors_from", "em", "bbse", "method", "priors", "labelled_rows",
    "observed"}`` (``bbse`` None without ``labelled``; ``observed`` the table's own class rates when it
    has the target column, else None).  ``method`` names the estimate the new model applies.  The new model's
    ``info`` does not hold the lineage yet: :func:`adapt_with_lineage` adds it."""
    import copy

    from ..parquet.data import check_columns, parquet_columns
    from ..progress import gather_in_order
    from ..scores.table import plan_chunks, share_model

    check_method(method)
    ls.check_em_options(tol, max_iter)
    if method == "bbse" and not labelled:
        raise ParameterError("--method bbse needs labelled rows of the old population: give --labelled DATA with the"
                             f" model's target column '{model.labels.target}'")
    columns = list(model.encoder.input_columns)
    check_columns(files, columns)
    target = model.labels.target
    if labelled:
        check_columns(labelled, list(dict.fromkeys(columns + [target])))
    chunks = [c for c in plan_chunks(files, columns, chunk_rows) if c.n_rows > 0]
    if not chunks:
        raise DataError("the table to adapt to has no rows; label-shift adaptation needs unlabelled rows")
    model_f = share_model(client, model)

    joint = None
    if labelled:
        lchunks = [c for c in plan_chunks(labelled, list(dict.fromkeys(columns + [target])), chunk_rows)
                   if c.n_rows > 0]
        if not lchunks:
            raise DataError("the --labelled table has no rows; BBSE needs labelled rows of the old population")
        counted = gather_in_order(client, [client.submit(confusion_chunk, model_f, c, target, batch_rows, pure=False)
                                           for c in lchunks], progress, "labelled rows")
        joint = np.sum([j for j, _ in counted], axis=0)

    train, source = training_priors(model)
    if train is None:
        if joint is None:
            raise DataError(f"{source}; give --labelled DATA (rows of the population it was calibrated on, with its"
                            f" target column '{target}') to take the training priors from, or fit the model again")
        counts = joint.sum(axis=0)
        if np.any(counts <= 0):
            raise DataError("the --labelled table lacks a class of the model; it needs rows of every class")
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
        "data": {"paths": _paths(files), "rows": int(info["rows"]), "fingerprint": data_fingerprint(files)},
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
        "labelled": None if not labelled else {"paths": _paths(labelled), "rows": info["labelled_rows"],
                                               "fingerprint": data_fingerprint(labelled)},
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": list(command) if command else None,
    }


def _paths(files: list[str]) -> list[str]:
    import os

    from ..parquet.storage import is_url

    return [str(f) if is_url(str(f)) else os.path.abspath(str(f)) for f in files]


def adapt_with_lineage(client, model, parent: dict[str, Any], files: list[str], *, method: str = "em",
                       labelled: list[str] | None = None, tol: float = ls.DEFAULT_TOL,
                       max_iter: int = ls.DEFAULT_MAX_ITER, command: list[str] | None = None, progress=None,
                       recorded_paths: list[str] | None = None, recorded_labelled: list[str] | None = None):
    """:func:`adapt_table` plus the lineage record in the new model's ``info["lineage"]`` (``recorded_*``:
    what it records of the tables instead of their files, e.g. ``["<DataFrame>"]``)."""
    new_model, info = adapt_table(client, model, files, method=method, labelled=labelled, tol=tol, max_iter=max_iter,
                                  progress=progress)
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

    from ..cluster import job_client
    from ..model.artifact import load_model, save_model
    from ..parquet.data import table_files
    from ..plugins import model_requirements
    from ..progress import as_progress
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
            new_model, _ = adapt_with_lineage(c, model, parent, files, method=method, labelled=lab, tol=tol,
                                              max_iter=max_iter, progress=as_progress(progress),
                                              recorded_paths=recorded, recorded_labelled=lab_recorded)
    if output is not None:
        save_model(new_model, output, overwrite=overwrite)
    return new_model


# ------------------------------------------------------------------------------ evaluate --prior-shift

#: ``evaluate --prior-shift`` without a number: bootstrap replicates of the EM estimate
DEFAULT_PRIOR_SHIFT_REPLICATES = 200
#: the two-sided level of its percentile interval
PRIOR_SHIFT_LEVEL = 0.9
#: replicates computed by one task: one block of :func:`_em_distinct` on a 200,000-row sample (its EM
#: steps take a few milliseconds per replicate)
PRIOR_SHIFT_REPLICATES_PER_TASK = 25


def check_prior_shift(model) -> np.ndarray:
    """The training priors ``evaluate --prior-shift`` compares with, or one line: a model that does not
    record them."""
    train, reason = training_priors(model)
    if train is None:
        raise DataError(f"--prior-shift compares with the priors the model was calibrated to, and {reason}; fit the"
                        " model again, or drop --prior-shift")
    return train


def _em_replicates(P: np.ndarray, train: np.ndarray, seeds, tol: float, max_iter: int,
                   weights: np.ndarray | None = None, start: np.ndarray | None = None) -> np.ndarray:
    """EM estimates on one bootstrap resample of the rows of ``P`` per seed (a plain row bootstrap: the
    resample's multiplicities weigh the rows, so each step is a weighted mean of re-weighted posteriors).
    With ``weights`` the resample draws rows in proportion to them, as many draws as the total weight
    (at most :data:`calengine.metrics.bootstrap.BOOTSTRAP_MAX_ROWS`), as ``evaluate --bootstrap`` does.
    ``start``: where every replicate's EM starts (default ``train``): see :func:`_em_distinct`."""
    U, inv = distinct_rows(P)
    return _em_distinct(U, inv, train, seeds, tol, max_iter, weights, start)


def distinct_rows(P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(U, inv)``: the distinct rows of ``P`` (in lexicographic order) and each row's index among them,
    ``P == U[inv]``; a row of zeros is left out (``inv`` -1: re-weighted, it stays zeros)."""
    P = np.asarray(P, dtype=np.float64)
    n = P.shape[0]
    if n == 0:
        return P.copy(), np.empty(0, dtype=np.int64)
    order = np.lexsort(P.T[::-1])
    S = P[order]
    first = np.concatenate(([True], np.any(S[1:] != S[:-1], axis=1)))
    ids = np.cumsum(first) - 1
    U = S[first]
    live = U.sum(axis=1) > 0
    if not live.all():
        remap = np.where(live, np.cumsum(live) - 1, -1)
        U, ids = U[live], remap[ids]
    inv = np.empty(n, dtype=np.int64)
    inv[order] = ids
    return U, inv


#: bytes of the two float64 arrays (replicates x distinct rows) of a block of :func:`_em_distinct`: 25
#: replicates of a 200,000-row sample
_EM_BLOCK_BYTES = 80 * 2**20


def _em_distinct(U: np.ndarray, inv: np.ndarray, train: np.ndarray, seeds, tol: float, max_iter: int,
                 weights: np.ndarray | None = None, start: np.ndarray | None = None) -> np.ndarray:
    """:func:`_em_replicates` of the rows ``U[inv]`` (:func:`distinct_rows`), vectorised: a resample's
    multiplicities are counted per distinct row (a step map's probabilities take few values), and the
    replicates of a block -- :data:`_EM_BLOCK_BYTES` bounds its arrays -- take their EM steps together,
    each step two matrix products over (replicates x distinct rows): the sums of one replicate at a
    time (up to rounding) without a pass of Python per replicate and step.  A replicate leaves the
    block at its own last step.  ``start``: where every replicate's EM starts (default ``train``); the
    estimate on the whole table starts each replicate near its own and takes fewer steps to the same
    maximum (the log-likelihood is concave in the priors, so EM reaches it from any start, to ``tol``)."""
    from ..metrics.bootstrap import _Resampler

    k = U.shape[1]
    sampler = _Resampler(inv.shape[0], weights)
    train = np.asarray(train, dtype=np.float64)
    start = train if start is None else np.asarray(start, dtype=np.float64)
    m = U.shape[0]
    seeds = list(seeds)
    out = np.empty((len(seeds), k))
    block = int(max(1, min(len(seeds), _EM_BLOCK_BYTES // (16 * max(m, 1)))))
    for lo in range(0, len(seeds), block):
        group = seeds[lo:lo + block]
        W = np.empty((len(group), m))
        for j, ss in enumerate(group):
            rows = inv[sampler.draw(np.random.default_rng(ss))]
            W[j] = np.bincount(rows[rows >= 0], minlength=m)
        out[lo:lo + len(group)] = _em_block(U, W, train, start, tol, max_iter, sampler.size)
    return out


def _em_block(U: np.ndarray, W: np.ndarray, train: np.ndarray, start: np.ndarray, tol: float, max_iter: int,
              size: int) -> np.ndarray:
    """The EM of each row of counts ``W`` (replicates x distinct rows) over the posteriors ``U``
    (distinct rows x classes), all replicates at once: row ``i`` re-weighted to priors ``new`` is
    ``U_i * a / (U_i . a)`` with ``a = new / train`` (:func:`calengine.methods.label_shift.shifted_posteriors`),
    so a step's per-class sums over the rows are ``a * ((W / (a U.T)) U)``."""
    B = W.shape[0]
    Ut = np.ascontiguousarray(U.T)
    out = np.empty((B, U.shape[1]))
    idx = np.arange(B)
    new = np.tile(start, (B, 1))
    buf = np.empty_like(W)
    for _ in range(int(max_iter)):
        a = new / train
        M = buf[: idx.size]
        np.matmul(a, Ut, out=M)  # each row's normaliser under each replicate's priors
        np.divide(W, M, out=M)
        updated = np.maximum(a * (M @ U) / size, ls.PRIOR_FLOOR)
        updated /= updated.sum(axis=1, keepdims=True)
        done = np.max(np.abs(updated - new), axis=1) < tol
        new = updated
        if done.any():
            out[idx[done]] = new[done]
            idx, new, W = idx[~done], new[~done], W[~done]
            if not idx.size:
                return out
    out[idx] = new
    return out


def prior_shift_table(client, model, files: list[str], target: str, *, replicates: int = DEFAULT_PRIOR_SHIFT_REPLICATES,
                      seed: int = 0, level: float = PRIOR_SHIFT_LEVEL, tol: float = ls.DEFAULT_TOL,
                      max_iter: int = ls.DEFAULT_MAX_ITER, max_rows: int | None = None, batch_rows: int = 65536,
                      chunk_rows: int = 1_000_000, progress=None, weight: str | None = None) -> dict[str, Any]:
    """``evaluate --prior-shift``: the class priors of an evaluated table estimated from ``model``'s
    probabilities alone, beside the priors it was calibrated to and the table's own label rates.

    The estimate is ``adapt``'s EM (:func:`em_reduction`: the same reduction, the same bits), over
    every row with the model's input columns (a missing label does not matter to it).  Its interval is
    the percentile interval of ``replicates`` EM estimates on plain bootstrap resamples of rows,
    replicate ``r`` drawing from ``SeedSequence(seed).spawn(replicates)[r]`` in whichever task runs it
    (the scheme of :mod:`calengine.metrics.bootstrap`): the same interval on any number of workers.
    Every replicate's EM starts at the whole table's estimate (its maximum is the same as from the
    training priors, to ``tol``, in about half the steps), and the replicates run vectorised
    (:func:`_em_distinct`), with progress per task of :data:`PRIOR_SHIFT_REPLICATES_PER_TASK`.
    The resampled rows are a seeded uniform sample of at most ``max_rows`` (default
    :data:`calengine.metrics.bootstrap.BOOTSTRAP_MAX_ROWS`) rows' probabilities, drawn in the scoring
    pass (:func:`posterior_chunk`); on a larger table the interval is that of a table of ``max_rows``
    rows, wider than the full table's (``sample_rows`` says so).  The interval covers the sampling
    error of the rows, not a miscalibration of the model: EM is the maximum-likelihood estimate only
    when the model's probabilities are calibrated on the training population.

    ``weight``: a column of row weights (counts).  The EM then weighs each row (integer weights: the
    same bits as the rows repeated; :func:`calengine.methods.label_shift.em_sums`), the label rates
    are weighted, the sample holds rows of positive weight and each resample draws from it in
    proportion to the weights, as many draws as the sample's total weight (at most
    :data:`calengine.metrics.bootstrap.BOOTSTRAP_MAX_ROWS`).

    Returns ``{"classes", "training", "training_from", "estimated", "low", "high", "observed", "rows",
    "labelled_rows", "sample_rows", "replicates", "level", "seed", "em", "weighted"}`` (lists over
    classes; ``observed``: the label rates of the labelled rows; with ``weight``, ``weighted`` is True
    and ``rows`` and ``labelled_rows`` are totals of weight, ints when every weight is an integer).
    """
    from ..metrics.bootstrap import BOOTSTRAP_MAX_ROWS, _check
    from ..parquet.data import check_columns
    from ..progress import gather_in_order
    from ..scores.table import plan_chunks, share_model

    _check(replicates, level)
    ls.check_em_options(tol, max_iter)
    max_rows = BOOTSTRAP_MAX_ROWS if max_rows is None else int(max_rows)
    train = check_prior_shift(model)
    columns = list(dict.fromkeys(list(model.encoder.input_columns) + [target] + ([weight] if weight else [])))
    check_columns(files, columns)
    chunks = [c for c in plan_chunks(files, columns, chunk_rows) if c.n_rows > 0]
    if not chunks:
        raise DataError("the evaluated table has no rows; --prior-shift needs rows to estimate the priors of")
    model_f = share_model(client, model)
    blocks, n_rows, _, observed, weights = score_posteriors(client, model_f, chunks, batch_rows, target, progress,
                                                            sample=(max_rows, seed), weight=weight)
    if weights is not None and not weights.total > 0:
        raise DataError(f"every row of the evaluated table has weight 0 in --weight column '{weight}'; --prior-shift"
                        " needs rows of positive weight")
    em = em_reduction(client, blocks, n_rows, train, tol, max_iter, weights)
    keys, S, W = np.empty(0), np.empty((0, model.n_classes)), (np.empty(0) if weight else None)
    for part in client.gather([client.submit(block_sample, b, pure=False) for b in blocks]):
        keys, S, W = _bottom_rows(np.concatenate([keys, part[0]]), np.concatenate([S, part[1]]), max_rows,
                                  None if W is None else np.concatenate([W, part[2]]))
    del blocks
    children = np.random.SeedSequence(int(seed)).spawn(int(replicates))
    groups = [children[i:i + PRIOR_SHIFT_REPLICATES_PER_TASK]
              for i in range(0, int(replicates), PRIOR_SHIFT_REPLICATES_PER_TASK)]
    U, inv = distinct_rows(S)
    U_f, inv_f = client.scatter(U, broadcast=False), client.scatter(inv, broadcast=False)
    W_f = None if W is None else client.scatter(W, broadcast=False)
    futures = [client.submit(_em_distinct, U_f, inv_f, train, g, tol, max_iter, W_f, em.priors, pure=False)
               for g in groups]
    draws = np.concatenate(gather_in_order(client, futures, progress, "prior-shift resamples"), axis=0)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(draws, [alpha, 1.0 - alpha], axis=0)
    labelled = observed.sum()
    labelled = int(labelled) if weights is None or weights.scale is None else float(labelled)
    rows = n_rows if weights is None else weights.total
    return {
        "classes": [str(c) for c in model.labels.classes], "training": train.tolist(),
        "training_from": training_priors(model)[1], "estimated": em.priors.tolist(), "low": low.tolist(),
        "high": high.tolist(), "observed": (observed / labelled).tolist() if labelled else None, "rows": rows,
        "labelled_rows": labelled, "sample_rows": int(S.shape[0]), "replicates": int(replicates),
        "level": float(level), "seed": int(seed), "em": em.to_json(), "weighted": weights is not None,
    }


def shift_amount(shift: dict[str, Any], key: str, noun: str = "rows") -> str:
    """``rows`` or ``labelled_rows`` of a :func:`prior_shift_table` result for display: ``"10,010
    rows"``, or with weights ``"rows of total weight 12,345"``."""
    v = shift[key]
    if not shift.get("weighted"):
        return f"{v:,} {noun}"
    return f"{noun} of total weight " + (f"{v:,}" if isinstance(v, int) else f"{v:,.6g}")


def prior_shift_text(label: str, shift: dict[str, Any]) -> str:
    """``evaluate``'s text of :func:`prior_shift_table`: one row per class."""
    pct = f"{shift['level']:.0%}"
    drawn = "weighted resamples" if shift.get("weighted") else "resamples"
    head = [f"prior shift of {label}: EM estimate from the model's probabilities of {shift_amount(shift, 'rows')},",
            f"  {pct} bootstrap interval from {shift['replicates']} {drawn} of {shift['sample_rows']:,} rows"
            + ("" if shift["em"]["converged"] else f" (EM stopped after {shift['em']['iterations']} steps)")]
    width = max(5, *(len(c) for c in shift["classes"]))
    rows = [*head, f"{'class':<{width}}  training  estimated  {pct + ' interval':<17}  observed"]
    for i, c in enumerate(shift["classes"]):
        obs = "-" if shift["observed"] is None else f"{shift['observed'][i]:.4f}"
        interval = f"[{shift['low'][i]:.4f}, {shift['high'][i]:.4f}]"
        rows.append(f"{c:<{width}}  {shift['training'][i]:8.4f}  {shift['estimated'][i]:9.4f}  {interval:<17}  {obs:>8}")
    rows.append(f"(training: {shift['training_from']}; observed: label rates of"
                f" {shift_amount(shift, 'labelled_rows', 'labelled rows')})")
    return "\n".join(rows)
