"""Recalibration without refitting: new labelled data -> new calibrators, the same learners.

When the population drifts, a model's *ranking* often survives while its probabilities go stale.
Refitting the learners is the expensive part of a fit; the calibrators are cheap.  This module keeps
every learner of a saved model bit for bit, scores the new data with them, and fits only the
calibrators again:

* **refit** (default): each calibrator is fitted from scratch on the new data, with the method and
  parameters stored in the model.  This runs the calibrators' own reduction protocol over the new
  table's partitions, exactly as ``calengine fit`` fits them (:func:`calengine.fit.calibrators.fit_calibrators`):
  the scores stay on the workers, only small statistics travel, and a calibrator without a reduction
  has its scores gathered on one worker (never the client).
* **update** (``update=True``): the new data's statistics are merged with statistics stored in the
  model, old ones weighted by ``forget`` first (exponential forgetting).  Only methods whose
  statistics are mergeable can do this: see :data:`UPDATABLE` and :func:`merge_isotonic` /
  :func:`merge_binning` (exact, in the senses they state) and :func:`merge_summary_fit` (sigmoid,
  temperature: an approximation from a stored score summary).

Ensembles (``--mode ensemble``, k members differing only in their learners): each member's
calibrators are refitted on *all* the new data, scored by that member's own learner; the members'
calibration sets (cross-validation folds) belong to the old data and mean nothing for the new.

The raw map (the "raw learner" baseline of ``evaluate``, :class:`calengine.model.calibrated.RawMap`)
depends on calibration scores for decision-valued learners (a = max |f|): refit recomputes it from the
new data's scores, update takes the larger of the old and the new a (the max over the union).
Probability learners' raw map is the identity and stays.  Combiners hold no fitted state (built
from parameters only), so there is nothing to refit there.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataError, ParameterError
from ..reductions.pav import pav_sums
from ..runtime.heap import trims_heap
from ..tasks.partitions import ScoreBlock

#: calibrators whose ``--update`` is implemented, and what the merge is
UPDATABLE = ("isotonic", "binning", "sigmoid", "temperature")
#: those whose update fits from a stored score summary (see :func:`merge_summary_fit`)
SUMMARY_FITTED = ("sigmoid", "temperature")


# ---------------------------------------------------------------------------------------------- tasks


@dataclass
class RecalBlock(ScoreBlock):
    """A chunk's scores for every (member, column) problem (one set each, one column), plus the
    chunk's class counts and the rows whose label was missing."""

    class_counts: Any = None
    missing: int = 0
    #: with ``weight``: the chunk's total weight per class (None: unweighted)
    class_weights: Any = None


@trims_heap
def score_new_chunk(model, chunk, target: str, problems: list[tuple[int, int]], batch_rows: int,
                    weight: str | None = None) -> RecalBlock:
    """Scores and 0/1 targets of one chunk for each ``(member, column)`` problem (runs in tasks).

    A column's rows are those the code matrix uses (code != 0), as at fit time; the learners' scores
    are computed by the stored learners (:meth:`Member.scores`), so they are the scores ``score`` sees.
    ``weight``: a column of frequency weights, checked (one line for a bad one) and carried with the
    rows into every calibrator's reduction.
    """
    from ..plan.columns import check_fit_scores
    from ..reductions.column_stats import row_weights
    from ..scores.table import batches

    M = model.code_matrix
    k = model.n_classes
    columns = sorted(set(model.encoder.input_columns) | {target} | ({weight} if weight else set()))
    parts: list[list[tuple]] = [[] for _ in problems]
    counts = np.zeros(k, dtype=np.int64)
    class_weights = np.zeros(k) if weight else None
    missing = 0
    members = sorted({m for m, _ in problems})
    for df in batches(chunk, columns, batch_rows):
        present = df[target].notna().to_numpy()
        missing += int((~present).sum())
        if not present.all():
            df = df.loc[present]
        if len(df) == 0:
            continue
        y = model.labels.encode(df[target])
        counts += np.bincount(y, minlength=k)
        w = row_weights(df[weight], weight, "the new data") if weight else None
        if w is not None:
            class_weights += np.bincount(y, weights=w, minlength=k)
        X = model.encoder.transform(df, order="F")
        check_fit_scores(model.encoder, X)
        S = {m: model.members[m].scores(X) for m in members}
        for p, (m, b) in enumerate(problems):
            if b is None:  # a multiclass scaling's whole score matrix, targets one-hot per class
                keep = slice(None) if w is None else w > 0
                T = (y[keep, None] == np.arange(k)[None, :]).astype(np.int8)
                parts[p].append((S[m][keep], T, None if w is None else w[keep]))
                continue
            code = M[y, b]
            keep = code != 0 if w is None else (code != 0) & (w > 0)  # weight 0: the row is absent
            parts[p].append((S[m][keep, b], (code[keep] == 1).astype(np.int8), None if w is None else w[keep]))
    sets = []
    for (_, b), pieces in zip(problems, parts):
        if b is None:
            n_cols = model.members[problems[0][0]].n_columns if not pieces else pieces[0][0].shape[1]
            s2 = np.concatenate([q[0] for q in pieces]) if pieces else np.empty((0, n_cols))
            t2 = np.concatenate([q[1] for q in pieces]) if pieces else np.empty((0, n_cols), dtype=np.int8)
            ws = (np.concatenate([q[2] for q in pieces]) if pieces else np.empty(0)) if weight else None
            sets.append((s2, t2, ws))
            continue
        s = np.concatenate([q[0] for q in pieces]) if pieces else np.empty(0)
        t = np.concatenate([q[1] for q in pieces]) if pieces else np.empty(0, dtype=np.int8)
        ws = (np.concatenate([q[2] for q in pieces]) if pieces else np.empty(0)) if weight else None
        sets.append((s[:, None], t[:, None], ws))
    return RecalBlock(sets, counts, missing, class_weights)


def block_counts(block: RecalBlock) -> tuple[np.ndarray, int, Any]:
    return block.class_counts, block.missing, block.class_weights


@dataclass
class _Budget:
    """What :func:`calengine.fit.calibrators.fit_calibrators` reads of a fit's context."""

    n_rows: int
    memory_limit: float


# ---------------------------------------------------------------------------------------------- checks


def check_recalibratable(model, update: bool, forget: float) -> None:
    """One-line errors for models and options recalibration cannot serve, before any data is read."""
    from ..model.calibrated import Member

    if not (isinstance(forget, (int, float)) and not isinstance(forget, bool) and 0.0 <= forget <= 1.0):
        raise ParameterError(f"forget must be a number in [0, 1] (the weight kept by the old statistics), got"
                             f" {forget!r}", parameter="forget")
    if forget != 1.0 and not update:
        raise ParameterError("forget weights the stored statistics, so it needs update; add update or drop forget",
                             parameter=("forget", "update"))
    kinds = sorted({type(m).__name__ for m in model.members if not isinstance(m, Member)})
    if kinds:
        raise ParameterError(
            f"this model's members ({', '.join(kinds)}, method '{model.info.get('method')}') have no separate"
            " calibrators to refit; recalibrate works on models fitted with a calibration method (isotonic,"
            " sigmoid, binning, ...): fit the model again on the new data instead"
        )
    if not update:
        return
    for m in model.members:
        if getattr(m, "scales_matrix", False):
            raise ParameterError(
                f"update merges one-column statistics, and this model's '{m.calibrators[0].name}' calibrates the"
                " k-class score vector as a whole; recalibrate without update to refit it on the new data",
                parameter="update",
            )
        for cal in m.calibrators:
            if cal.name not in UPDATABLE:
                raise ParameterError(
                    f"update merges stored statistics, which method '{cal.name}' does not have (it can for"
                    f" {', '.join(UPDATABLE)}); recalibrate without update to refit '{cal.name}' on the new data",
                    parameter="update",
                )
            if not has_update_stats(cal):
                raise ParameterError(
                    f"this model's '{cal.name}' calibrators were saved without the statistics update merges"
                    " (a model from before they were stored); recalibrate without update first, then recalibrate"
                    " that model with it", parameter="update"
                )


def has_update_stats(cal) -> bool:
    if cal.name == "isotonic":
        return all(hasattr(cal, a) for a in ("lo_", "hi_", "values_", "weights_"))
    if cal.name == "binning":
        return getattr(cal, "bin_weights_", None) is not None and getattr(cal, "bin_positives_", None) is not None
    if cal.name in SUMMARY_FITTED:
        return getattr(cal, "hist_wpos_", None) is not None
    return False


def merge_summary_fit(old, new, forget: float = 1.0):
    """Sigmoid or temperature fitted on the merged score summaries of ``old`` (weights times
    ``forget``) and ``new`` -- an approximation, stated as such.

    Platt's and temperature's Newton iterations need every score at the current parameters: no
    finite statistic merges exactly.  The models store instead a summary on a fixed grid (bins of
    width 1/8 in asinh of the score, or of its logit for probabilities): per bin and class the total
    weight and the weighted sum of scores.  These *sums* merge exactly; the fit then treats each bin's
    rows of one class as sitting at their mean score (a weighted pseudo-row), which is exact for the
    class weights (Platt's smoothed targets) and off only by the spread of scores within a bin (the
    loss is smooth, so the error is second order in that spread).  The tests bound it against the
    refit on the union.
    """
    from sklearn.base import clone

    sums = {k: forget * getattr(old, k) + getattr(new, k) for k in ("hist_wpos_", "hist_wneg_", "hist_spos_", "hist_sneg_")}
    rows_s, rows_y, rows_w = [], [], []
    for wk, sk, label in (("hist_wpos_", "hist_spos_", 1), ("hist_wneg_", "hist_sneg_", 0)):
        live = sums[wk] > 0
        rows_s.append(sums[sk][live] / sums[wk][live])
        rows_y.append(np.full(int(live.sum()), label))
        rows_w.append(sums[wk][live])
    out = clone(old)
    out.fit(np.concatenate(rows_s), np.concatenate(rows_y), sample_weight=np.concatenate(rows_w),
            score_kind=old.score_kind_)
    for key, value in sums.items():
        setattr(out, key, value)
    return out


# ---------------------------------------------------------------------------------------------- merges


def merge_isotonic(old, new, forget: float = 1.0):
    """An isotonic calibrator fitted on the stored blocks of ``old`` (weights times ``forget``) and
    the blocks of ``new`` (fitted on the new data), pooled again by PAV.  Returns ``(calibrator, exact)``.

    A PAV block is a stretch of tie groups whose own isotonic fit is one level, so in the fit of any
    superset where it stays *contiguous* (no other point's score falls inside its score range) it lies
    within one block.  Hence PAV over the union of the two block lists equals isotonic regression on
    the union of the raw rows -- exactly, up to rounding -- whenever the blocks' score ranges do not
    interleave (single-score blocks at equal scores pool as ties, which is exact too).  ``exact``
    says whether that held; when it does not (a new score falls strictly inside an old multi-score
    block, or the reverse), blocks are ordered by their lowest score and the result is an
    approximation: still isotonic, with the right total weights, but not the refit on the union.
    """
    from sklearn.base import clone

    lo = np.concatenate((old.lo_, new.lo_))
    hi = np.concatenate((old.hi_, new.hi_))
    w = np.concatenate((old.weights_ * forget, new.weights_))
    wy = np.concatenate((old.values_ * old.weights_ * forget, new.values_ * new.weights_))
    keep = w > 0
    lo, hi, w, wy = lo[keep], hi[keep], w[keep], wy[keep]
    order = np.lexsort((hi, lo))
    lo, hi, w, wy = lo[order], hi[order], w[order], wy[order]
    # equal single-score blocks are one tie group
    point = lo == hi
    same = np.concatenate(([False], point[1:] & point[:-1] & (lo[1:] == lo[:-1])))
    if same.any():
        starts = np.flatnonzero(~same)
        lo, hi = lo[starts], hi[starts]
        w, wy = np.add.reduceat(w, starts), np.add.reduceat(wy, starts)
    exact = bool(np.all(hi[:-1] < lo[1:]))
    lo, hi, wy, w = pav_sums(lo, hi, wy, w)
    out = clone(old)
    out.lo_, out.hi_, out.values_, out.weights_ = lo, hi, np.clip(wy / w, 0.0, 1.0), w
    out.interpolation_ = old.interpolation_
    out.score_kind_ = old.score_kind_
    return out, exact


def binning_request(old) -> dict[str, Any]:
    """The binning calibrator's own per-bin-sums round with the OLD bins' cuts (bin k: u[k-1] < s <= u[k])."""
    return {"op": "bin_sums", "kind": old.score_kind_, "sorted": False, "u": np.asarray(old.hi_[:-1], dtype=np.float64)}


def merge_binning(old, stats: dict[str, Any], forget: float = 1.0):
    """The binning calibrator with the stored bins of ``old`` and, per bin, ``forget`` times the old
    weight and positive weight plus the new data's (``stats``: the round of :func:`binning_request`).

    Exact for what it is: the same bins (cut scores fixed at the old fit), counts of old plus new rows,
    so with ``forget=1`` the estimates equal those of the old rows and the new rows counted in the
    old bins.  It is *not* a refit on the union, whose equal-frequency cuts would move.  Each bin's
    lowest and highest score (and so the midpoint boundaries) become those of the union.
    """
    from sklearn.base import clone

    w = forget * old.bin_weights_ + np.asarray(stats["w"], dtype=np.float64)
    wy = forget * old.bin_positives_ + np.asarray(stats["wy"], dtype=np.float64)
    lo = np.minimum(old.lo_, np.asarray(stats["min_lo"], dtype=np.float64))
    hi = np.maximum(old.hi_, np.asarray(stats["max_hi"], dtype=np.float64))
    if np.any(w <= 0):
        raise DataError("a bin has no weight left after forgetting and no new rows; use a larger forget or recalibrate"
                        " without update", parameter=("forget", "update"))
    out = clone(old)
    out.n_bins_, out.lo_, out.hi_, out.values_ = old.n_bins_, lo, hi, wy / w
    out.boundaries_, out.boundary_ = 0.5 * (hi[:-1] + lo[1:]), old.boundary_
    out.cv_grid_, out.cv_brier_, out.score_kind_ = old.cv_grid_, old.cv_brier_, old.score_kind_
    out.bin_weights_, out.bin_positives_ = w, wy
    return out


# ---------------------------------------------------------------------------------------------- lineage


def data_fingerprint(files: list[str]) -> str:
    """SHA-256 of every file's base name and Parquet footer (row groups with their row counts, byte
    sizes and column statistics; the schema): it changes when the data change, and not when the files
    are merely copied or touched (no mtimes).  Reads footers only, never the rows."""
    from ..parquet.storage import parquet_file

    h = hashlib.sha256()
    for f in files:
        with parquet_file(f) as pf:
            md = pf.metadata.to_dict()
        h.update(json.dumps([str(f).rsplit("/", 1)[-1], md], sort_keys=True, default=str).encode())
    return h.hexdigest()


def lineage_record(parent: dict[str, Any], files: list[str], rows: int, update: bool, forget: float,
                   target: str, command: list[str] | None, exact: dict[str, int]) -> dict[str, Any]:
    import datetime
    import os

    from ..parquet.storage import is_url

    paths = [str(f) if is_url(str(f)) else os.path.abspath(str(f)) for f in files]
    return {
        "mode": "update" if update else "refit",
        "parent": parent,
        "data": {"paths": paths, "rows": int(rows), "fingerprint": data_fingerprint(files)},
        "target": target,
        "forget": float(forget),
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": list(command) if command else None,
        "exact_updates": exact if update else None,
    }


# ---------------------------------------------------------------------------------------------- driver


def recalibrate_table(run, model, files: list[str], target: str, *, update: bool = False, forget: float = 1.0,
                      batch_rows: int = 65536, chunk_rows: int = 1_000_000, weight: str | None = None):
    """The model with every learner kept and its calibrators fitted again on ``files``, on the client
    of ``run`` (a :class:`~calengine.runtime.context.RunContext`, whose progress shows the passes).

    Returns ``(new_model, info)`` with ``info = {"rows", "missing", "exact"}``; ``exact`` counts
    calibrators whose update was exact / approximate (see :func:`merge_isotonic`).  The new model's
    ``info`` does not yet hold the lineage: :func:`recalibrate` adds it.  ``weight``: a column of
    frequency weights of the new rows (weight 2 = the row twice), for every calibrator's sums.
    """
    import copy

    from sklearn.base import clone

    from ..model.calibrated import RawMap, calibrator_kind
    from ..parquet.data import check_columns
    from ..plan.memory import worker_memory_limit
    from ..plugins.calls import plugin_errors
    from ..runtime.progress import gather_in_order
    from ..scores.table import plan_chunks, share_model
    from ..tasks import partitions as pt
    from .calibrators import ScoreBlocks, merge_summaries, fit_calibrators

    check_recalibratable(model, update, forget)
    if weight is not None and (weight == target or weight in model.encoder.input_columns):
        raise DataError(f"weight {weight} is a column the model reads (or the target); give a column of weights",
                        parameter="weight")
    columns = list(dict.fromkeys(list(model.encoder.input_columns) + [target] + ([weight] if weight else [])))
    check_columns(files, columns)
    chunks = [c for c in plan_chunks(files, columns, chunk_rows) if c.n_rows > 0]
    if not chunks:
        raise DataError("the new data has no rows; recalibration needs labelled rows of every class")
    problems = [(m, None if cols is None else cols[0]) for m, member in enumerate(model.members)
                for cols in member.calibrator_columns()]
    position = {problem: i for i, problem in enumerate(problems)}

    def stored(i):  # the model's calibrator of problem i
        m, b = problems[i]
        return model.members[m].calibrators[0 if b is None else b]

    client, progress = run.client, run.progress
    model_f = share_model(client, model)

    def make_blocks():
        return [client.submit(score_new_chunk, model_f, c, target, problems, batch_rows, weight, pure=False)
                for c in chunks]

    blocks = ScoreBlocks(make_blocks)
    summaries = gather_in_order(client, [client.submit(pt.block_summary, b, pure=False) for b in blocks.get()],
                                progress, "new scores")
    counted = client.gather([client.submit(block_counts, b, pure=False) for b in blocks.get()])
    class_counts = np.sum([c for c, _, _ in counted], axis=0)
    missing = int(sum(m for _, m, _ in counted))
    if weight is not None:
        from ..reductions.column_stats import WeightStat

        totals = np.sum([cw for _, _, cw in counted], axis=0)
        WeightStat(weight, dict(zip(model.labels.classes, map(float, totals)))).check(model.labels.classes,
                                                                                      "the new data")
    absent = [str(c) for c, n in zip(model.labels.classes, class_counts) if n == 0]
    if absent:
        raise DataError(
            f"the new data has no rows of class {', '.join(absent)} (the model's classes are"
            f" {', '.join(map(str, model.labels.classes))}); recalibration needs labelled rows of every class"
        )
    merged = [merge_summaries([s[i] for s in summaries]) for i in range(len(problems))]
    budget = _Budget(int(class_counts.sum()), worker_memory_limit(client))

    new_cals: dict[int, Any] = {}
    exact = {"exact": 0, "approximate": 0}
    if update:
        fit_now = [i for i in range(len(problems)) if stored(i).name in ("isotonic", *SUMMARY_FITTED)]
        bins = [i for i in range(len(problems)) if i not in fit_now]
    else:
        fit_now, bins = list(range(len(problems))), []

    # refit (and isotonic's new blocks): the calibrators' own reduction, grouped by identical configuration
    groups: dict[str, list[int]] = {}
    for i in fit_now:
        cal = stored(i)
        key = json.dumps([cal.name, repr(sorted(cal.get_params(deep=False).items())),
                          model.members[problems[i][0]].raw.score_kind])
        groups.setdefault(key, []).append(i)
    for idx in groups.values():
        proto = clone(stored(idx[0]))
        raw_kind = model.members[problems[idx[0]][0]].raw.score_kind
        fitted = fit_calibrators(run, blocks, merged,
                                 [(i, None if problems[i][1] is None else 0) for i in idx], proto,
                                 calibrator_kind(raw_kind) if raw_kind == "logit" else raw_kind, budget, raw_kind)
        for i, cal in zip(idx, fitted):
            new_cals[i] = cal
    if update:
        for i in fit_now:
            old_cal = stored(i)
            if old_cal.name == "isotonic":
                new_cals[i], ok = merge_isotonic(old_cal, new_cals[i], forget)
            else:
                with plugin_errors(old_cal, "fit"):
                    new_cals[i], ok = merge_summary_fit(old_cal, new_cals[i], forget), False
            exact["exact" if ok else "approximate"] += 1
    if bins:
        args = [(i, 0, stored(i), binning_request(stored(i))) for i in bins]
        results = gather_in_order(
            client, [client.submit(pt.block_partial_stats, blk, args, pure=False) for blk in blocks.get()],
            None, "bin counts")
        for j, i in enumerate(bins):
            cal = stored(i)
            with plugin_errors(cal, "fit"):
                stats = pt.merge_in_order([r[j] for r in results], cal.merge_stats)
            new_cals[i] = merge_binning(cal, stats, forget)
            exact["exact"] += 1

    members = []
    for m, member in enumerate(model.members):
        here = [position[(m, None if cols is None else cols[0])] for cols in member.calibrator_columns()]
        cals = [new_cals[i] for i in here]
        raw = member.raw
        if raw.score_kind == "decision":
            a = np.concatenate([np.maximum(np.abs(merged[i]["min"]), np.abs(merged[i]["max"])) for i in here])
            if update:
                a = np.maximum(a, np.maximum(np.abs(raw.lo), np.abs(raw.hi)))
            raw = RawMap("decision", -a, a)
        new_member = copy.copy(member)
        new_member.calibrators = cals
        new_member.raw = raw
        members.append(new_member)
    new_model = copy.copy(model)
    new_model.members = members
    new_model.info = dict(model.info)
    drop_conformal(new_model, "recalibrated")
    return new_model, {"rows": int(class_counts.sum()), "missing": missing, "exact": exact}


def drop_conformal(model, how: str) -> None:
    """Drop ``model``'s conformal layer, with a warning: its thresholds were computed on the probabilities
    this change replaces, so its sets would no longer carry the coverage guarantee."""
    if getattr(model, "conformal", None) is None:
        return
    import warnings

    warnings.warn(f"the model's conformal layer was computed on its old probabilities, so the {how} model does not"
                  " keep it; attach a new one with 'calengine conformal' on fresh calibration rows", stacklevel=3)
    model.conformal = None


def parent_record(path) -> dict[str, Any]:
    """The lineage's ``parent``: the model directory's absolute path and manifest content hash."""
    import os

    from ..model.artifact import read_manifest

    return {"path": os.path.abspath(str(path)), "content_hash": read_manifest(path)["content_hash"]}


def recalibrate_with_lineage(run, model, parent: dict[str, Any], files: list[str], target: str, *,
                             update: bool = False, forget: float = 1.0, command: list[str] | None = None,
                             recorded_paths: list[str] | None = None, weight: str | None = None):
    """:func:`recalibrate_table` plus the lineage record in the new model's ``info["lineage"]``."""
    new_model, info = recalibrate_table(run, model, files, target, update=update, forget=forget, weight=weight)
    lineage = lineage_record(parent, files, info["rows"], update, forget, target, command, info["exact"])
    if weight is not None:  # only weighted recalibrations record it, so every other lineage stays as it was
        lineage["weight"] = weight
    if recorded_paths is not None:
        lineage["data"]["paths"] = list(recorded_paths)
    if model.info.get("lineage"):
        lineage["previous"] = model.info["lineage"]
    new_model.info["lineage"] = lineage
    return new_model, info


def recalibrate(model, data, target: str, *, update: bool = False, forget: float = 1.0, output=None,
                overwrite: bool = False, cluster=None, workers=None, worker_memory=None, progress=None,
                client=None, weight: str | None = None):
    """Recalibrate a model on new labelled data, keeping its learners (``calengine recalibrate``).

    ``model``: a model directory (recorded as the parent, with its content hash) or a loaded model
    (parent path and hash then unknown: ``None``).  ``data``: a Parquet path (file, directory or
    glob), a list of them, or a pandas DataFrame (written to a temporary Parquet file first).
    ``update``/``forget``: see the module docstring.  ``weight``: a column of frequency weights.  ``client``: as for
    :func:`calengine.runtime.client.job_client` (e.g. an existing Dask client); otherwise
    ``cluster``/``workers``/``worker_memory`` as for :func:`calengine.fit_table`, the workers checked
    for the model's plugins.  With ``output`` the
    new model is saved there (``overwrite`` to replace one).  Returns the new
    :class:`~calengine.model.calibrated.CalibratedModel`; ``info["lineage"]`` is what its manifest records.
    """
    import os
    import tempfile
    from ..runtime.context import RunContext
    from pathlib import Path

    from ..runtime.client import job_client
    from ..model.artifact import load_model, save_model
    from ..plugins.loading import model_requirements
    from ..parquet.data import table_files
    from ..runtime.progress import as_progress

    if output is not None and not overwrite and os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        raise ParameterError(f"output '{output}' already exists; choose a new path or pass overwrite=True")
    if isinstance(model, (str, Path)):
        parent, model = parent_record(model), load_model(model)
    else:
        parent = {"path": None, "content_hash": None}
    check_recalibratable(model, update, forget)
    prog = as_progress(progress)
    with tempfile.TemporaryDirectory(prefix="calengine-recal-") as tmp:
        files, recorded = table_files(data, tmp, "new.parquet")
        with job_client(client, cluster=cluster, workers=workers, memory_limit=worker_memory,
                        requirements=model_requirements([model])) as c:
            new_model, _ = recalibrate_with_lineage(RunContext(c, prog), model, parent, files, target, update=update,
                                                    forget=forget, recorded_paths=recorded, weight=weight)
    if output is not None:
        save_model(new_model, output, overwrite=overwrite)
    return new_model
