"""Segment-wise calibration: ``calengine fit ... --by COL[,COL...]`` (issue 25 §1).

A model calibrated on average can be off for one country or one age band.  ``--by`` fits, after the
global model, one calibrator per segment (the tuple of values of the ``--by`` columns) and per member,
on exactly the held-out scores the member's global calibrator was fitted on (its fold's rows in
``ensemble`` mode, every row of ``--calibration-data``, or every row for ``--scores`` / ``--prefit``),
and blends it with the global map (:mod:`calengine.model.segmented` scores it).

The flow, each step a pass of one task per fragment:

1. **Counts**: per fragment, the calibration weight of every (segment, member, class)
   (:func:`segment_counts`), merged in fragment order on the client.  A segment gets its own map when
   every member's calibration set holds every class of it; the others (and rows with a missing
   ``--by`` value, and segments unseen at fit time) use the global map.  More than ``--max-segments``
   segments is one line, raised by the first task that sees too many.
2. **Scores**: per fragment, one task scores its calibration rows with each member's learners and
   groups them by segment (:func:`segment_score_fragment`): a :class:`ScoreBlock` whose sets are the
   (member, segment) pairs.  The rows' segments are the codes the counting task kept on the worker
   (4 bytes a row), so the ``--by`` columns are read and factorised once per fragment: factorising
   a string column was the larger part of what the ``--by`` fit added to the global one, and it
   had been done twice.
3. **Calibrators**: :func:`calengine.fit.calibrators.fit_calibrators`, the reduction driver of the
   global fit, runs every calibrator's own protocol (``reduction_start`` / ``partial_stats`` /
   ``merge_stats`` / ``reduction_step``) over those blocks: an unsorted round is one task per block
   computing the statistics of every segment at once, merged in block order; a sorted round
   (isotonic) cuts each segment's scores into score ranges with the same splitting tasks, one per
   group of blocks, and one task computes the statistics of many small ranges
   (:func:`calengine.fit.calibrators._range_groups`).  So the model is the same bits on any
   partitioning, and thousands of segments do not mean thousands of tasks (at 1M rows and 1,000
   segments the sorted round had been 2,002 tasks, 7x the global fit's wall).

Shrinkage (why the blend): a segment's isotonic map fitted on a few hundred rows is a staircase of
a few steps whose noise costs more log loss than its bias saves; pulling it towards the global map of
the same score by ``w = n_eff / (n_eff + K)`` (``n_eff``: the segment's calibration weight in the
member's calibration set, frequency weights counting as rows) keeps large segments on their own map
and small ones near the global one, for every calibrator alike (isotonic and binning have no
parameters a prior could centre on).  The default ``K = 20`` was chosen by measurement
(``benchmarks/bench_segment_fits.py``, ``benchmarks/results/segment_fits.md``): on Adult (``--by
sex,race,age_band``) and on a table with planted per-segment offsets, K = 20 and K = 50 tied on test
log loss (within 3e-4, the lowest of K in {0, 20, 50, 200, 1000, inf}) and K = 20 had the lower
worst-segment ECE and ECCE on both; K = 0 overfits small segments (Adult's log loss worse than the
global map's) and larger K drifts back to the global map.  Chosen on those test tables, not out of fold.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..errors import DataError, ParameterError
from ..plugins.batch_probe import take_rows

__all__ = ["DEFAULT_SHRINKAGE", "check_shrinkage", "fit_segmented", "segment_counts", "segment_score_fragment"]

#: the default ``--shrinkage`` K (module docstring: chosen by measurement)
DEFAULT_SHRINKAGE = 20.0


def check_shrinkage(k) -> float:
    """``shrinkage``: a number >= 0, or ``inf`` (every segment on the global map); None: the default
    (:class:`~calengine.plan.options.TableSpec` holds the constraint)."""
    from ..plan.options import check_option

    return DEFAULT_SHRINKAGE if k is None else check_option("shrinkage", k)


def blend_weight(n_eff: np.ndarray, k: float) -> np.ndarray:
    """``w = n_eff / (n_eff + K)``: 1 for K = 0, 0 for K = inf."""
    n_eff = np.asarray(n_eff, dtype=np.float64)
    if math.isinf(k):
        return np.zeros_like(n_eff)
    if k == 0:
        return np.ones_like(n_eff)
    return n_eff / (n_eff + k)


# ---------------------------------------------------------------------------------------------- in tasks


def fragment_frame(fragment, enc, by: tuple[str, ...]):
    """The fragment's target, weight and ``--by`` columns, and the mask of rows with a label (the rows
    :func:`calengine.tasks.partitions.load_part` keeps, in the same order)."""
    from ..parquet.dataset import read_fragment

    columns = list(dict.fromkeys([enc.target] + ([enc.weight] if enc.weight else []) + list(by)))
    df = read_fragment(fragment, columns)
    return df, df[enc.target].notna().to_numpy()


def segment_counts(fragment, enc, plan, by: tuple[str, ...], n_sets: int, max_segments: int,
                   keep_codes: bool = False) -> dict:
    """In-task: ``{"keys": [...], "weights": (segments, n_sets, k), "unkeyed": weight}`` of this
    fragment's calibration rows; set ``i`` is fold ``i``'s rows (every row without folds).
    ``keep_codes``: also ``"codes"``, each labelled row's index into ``keys`` (``-1``: a missing
    value), in the order :func:`calengine.tasks.partitions.load_part` keeps the rows, so the scoring
    pass (:func:`segment_score_fragment`) neither reads nor factorises the ``--by`` columns again."""
    from ..model.segmented import segment_codes
    from ..plan.folds import fragment_folds

    df, present = fragment_frame(fragment, enc, by)
    k = enc.labels.n_classes
    y_all = np.full(len(df), -1, dtype=np.int64)
    if present.any():
        y_all[present] = enc.labels.encode(df[enc.target][present])
    kept = df.loc[present] if not present.all() else df
    y = y_all[present]
    sets = fragment_folds(y_all, fragment, k, plan.cv, plan.seed)[present] if plan.cv else np.zeros(y.size, np.intp)
    w = kept[enc.weight].to_numpy(dtype=np.float64, na_value=np.nan) if enc.weight else np.ones(y.size)
    keys, codes = segment_codes(kept, by)
    if len(keys) > max_segments:
        raise too_many(by, max_segments)
    live = w > 0
    keyed = live & (codes >= 0)
    flat = (codes[keyed] * n_sets + sets[keyed]) * k + y[keyed]
    weights = np.bincount(flat, weights=w[keyed], minlength=len(keys) * n_sets * k).reshape(len(keys), n_sets, k)
    out = {"keys": keys, "weights": weights, "unkeyed": float(w[live & (codes < 0)].sum())}
    if keep_codes:
        out["codes"] = codes.astype(np.int32)  # at most MAX_SEGMENTS_LIMIT keys: 4 bytes a row, kept on the worker
    return out


def counts_only(counted: dict) -> dict:
    """In-task: a :func:`segment_counts` result without its per-row codes (what the client gathers)."""
    return {k: v for k, v in counted.items() if k != "codes"}


def too_many(by, max_segments: int) -> DataError:
    from ..metrics.segments import MAX_SEGMENTS_LIMIT

    return DataError(
        f"by={','.join(by)!r} makes more than {max_segments} segments; segment over columns with fewer values"
        f" (e.g. an age band rather than the age) or raise max_segments (at most {MAX_SEGMENTS_LIMIT})",
        parameter=("by", "max_segments"),
    )


def segment_score_fragment(fragment, enc, plan, members: list, counted: dict, key_index: dict):
    """In-task: a :class:`calengine.tasks.partitions.ScoreBlock` of this fragment's calibration rows
    whose set ``m * S + j`` holds member ``m``'s held-out scores of segment ``j`` (``S`` segments).
    ``counted``: the fragment's :func:`segment_counts` with ``keep_codes`` (its rows' segments)."""
    from ..tasks import partitions as pt
    from ..runtime.threads import pin_native_threads

    pin_native_threads()
    part = pt.load_part(fragment, enc, plan, order="F")
    codes = counted["codes"]
    if codes.size != part.y.size:
        raise DataError(f"'{fragment.path}' changed while the job ran ({part.y.size} labelled rows read,"
                        f" {codes.size} counted); do not modify the data during a fit")
    lookup = np.array([key_index.get(key, -1) for key in counted["keys"]] + [-1], dtype=np.intp)
    seg = lookup[codes]
    n_seg = len(key_index)
    # int16 segment indices sort by radix (numpy's stable sort of 16-bit integers): O(rows); same order
    small = np.int16 if n_seg <= np.iinfo(np.int16).max else np.int32
    sets = []
    for m, member in enumerate(members):
        mask = seg >= 0
        if plan.cv:
            mask &= part.folds == m
        if part.w is not None:
            mask &= part.w > 0
        idx = np.flatnonzero(mask)
        S = member.scores(take_rows(part.X, idx)) if idx.size else np.empty((0, member.n_columns))
        T = pt.column_targets_of(part.y[idx], S.shape[1], None, plan)
        W = None if part.w is None else part.w[idx]
        order = np.argsort(seg[idx].astype(small), kind="stable")
        bounds = np.searchsorted(seg[idx][order], np.arange(n_seg + 1))
        for j in range(n_seg):
            r = order[bounds[j] : bounds[j + 1]]
            sets.append((S[r], T[r], None if W is None else W[r]))
    return pt.ScoreBlock(sets)


# ---------------------------------------------------------------------------------------------- the fit


def check_segment_columns(spec, by) -> None:
    from ..parquet.data import parquet_columns, resolve_parquet_files
    from ..parquet.dataset import dataset_root
    from ..parquet.storage import absolute

    data = spec.calibration_data or spec.data
    files = resolve_parquet_files(data)
    names = parquet_columns(files, dataset_root(data, [absolute(f) for f in files]))
    missing = [c for c in by if c not in names]
    if missing:
        which = "calibration_data" if spec.calibration_data else "the table"
        raise DataError(f"by column '{missing[0]}' is not in {which}; name columns of the table (it has"
                        f" {', '.join(names[:8])}{', ...' if len(names) > 8 else ''})",
                        parameter=("by", "calibration_data"))


def count_segments(client, spec, config, ctx, by: tuple[str, ...], progress):
    """``(plan, fragments, n_sets, counts)``: the calibration rows' fold plan (folds of a learner's fit;
    none for ``--calibration-data``, ``--scores``, ``--prefit``), their fragments, the number of
    calibration sets and each fragment's :func:`segment_counts`, in fragment order (also the first
    pass of ``--method mcgrad``, :mod:`calengine.fit.mcgrad.table`)."""
    return _count_segments(client, spec, config, ctx, by, progress)[:4]


def _count_segments(client, spec, config, ctx, by: tuple[str, ...], progress, keep_codes: bool = False):
    """:func:`count_segments` plus the count tasks' futures (with ``keep_codes``, holding each
    fragment's per-row segment codes on the workers; the client gathers the counts only)."""
    from ..runtime.progress import gather_in_order
    from ..tasks import partitions as pt

    cal_mode = spec.calibration_data is not None
    folds = not (cal_mode or spec.scores or spec.prefit)
    plan = pt.FoldPlan(config.cv if folds else None, config.seed)
    fragments = ctx.cal_fragments if cal_mode else ctx.fragments
    n_sets = config.cv if folds else 1
    counted = [client.submit(segment_counts, fr, ctx.enc, plan, by, n_sets, spec.max_segments, keep_codes,
                             pure=False) for fr in fragments]
    small = [client.submit(counts_only, c, pure=False) for c in counted] if keep_codes else counted
    parts = gather_in_order(client, small, progress, "segments")
    return plan, fragments, n_sets, parts, counted


def fit_segmented(client, spec, config, progress, plugins, plan_table, fit_table):
    """The global model of ``spec`` / ``config``, then its per-segment calibrators (module docstring).

    ``plan_table`` / ``fit_table``: those of :mod:`calengine.fit.table`, which calls this function for a
    spec with ``by`` (passed in rather than imported: that module imports this one)."""
    from ..plugins import registry
    from ..model.calibrated import raw_kind_of
    from ..model.segmented import SegmentEncoder, SegmentedMember
    from ..plugins.loading import get_plugins
    from ..runtime.progress import gather_in_order
    from ..tasks import partitions as pt
    from ..runtime.context import RunContext
    from .calibrators import ScoreBlocks, merge_summaries, calibration_problems, fit_calibrators
    plugins = plugins or get_plugins()
    by = spec.by  # checked at the door (calengine.plan.options), with what a segment-wise fit refuses
    k_shrink = check_shrinkage(spec.shrinkage)
    registry.make("calibrators", config.method, config.method_params, plugins)  # a misspelt name: before work
    check_segment_columns(spec, by)
    base_spec = replace(spec, by=None)
    ctx = plan_table(client, base_spec, progress)
    # 1. counts: which segments get their own map
    plan, fragments, n_sets, parts, counted = _count_segments(client, spec, config, ctx, by, progress, keep_codes=True)
    totals: dict = {}
    unkeyed = 0.0
    for p in parts:
        unkeyed += p["unkeyed"]
        for key, arr in zip(p["keys"], p["weights"]):
            totals[key] = totals[key] + arr if key in totals else arr.copy()
    if len(totals) > spec.max_segments:
        raise too_many(by, spec.max_segments)
    keys = sorted(totals)
    fitted = [key for key in keys if np.all(totals[key] > 0)]
    key_index = {key: j for j, key in enumerate(fitted)}
    n_eff = np.array([[totals[key][m].sum() for key in fitted] for m in range(n_sets)]).reshape(n_sets, len(fitted))

    model = fit_table(client, base_spec, config, progress, plugins, ctx=ctx)
    members = list(model.members)
    if any(getattr(m, "kind", None) != "calibrated" for m in members):
        raise ParameterError("a segment-wise fit (by) needs a model of calibrated members; drop by", parameter="by")
    if len(members) != n_sets:
        raise ParameterError(f"a segment-wise fit (by) expected {n_sets} members, the model has {len(members)}",
                             parameter="by")

    # 2. and 3. held-out scores grouped by segment, and the calibrators' reductions over them
    by_set: dict[int, list] = {}
    if fitted:
        members_f = client.submit(pt.as_given, members, pure=False)

        def make_blocks():
            return [client.submit(segment_score_fragment, fr, ctx.enc, plan, members_f, c, key_index, pure=False)
                    for fr, c in zip(fragments, counted)]

        blocks = ScoreBlocks(make_blocks)
        summaries = gather_in_order(
            client, [client.submit(pt.block_summary, b, pure=False) for b in blocks.get()], progress, "segment scores"
        )
        merged = [merge_summaries([s[i] for s in summaries]) for i in range(n_sets * len(fitted))]
        calibrator = registry.make("calibrators", config.method, config.method_params, plugins)
        problems = calibration_problems(merged, calibrator)
        learner = members[0].learners[0]
        cals = fit_calibrators(RunContext(client, progress), blocks, merged, problems, calibrator, learner.score_kind,
                               ctx, raw_kind_of(learner))
        del blocks
        for (i, _), cal in zip(problems, cals):
            by_set.setdefault(i, []).append(cal)
    weights = blend_weight(n_eff, k_shrink)
    model.members = [
        SegmentedMember(m, [by_set[i * len(fitted) + j] for j in range(len(fitted))], weights[i], k_shrink)
        for i, m in enumerate(members)
    ]
    model.encoder = SegmentEncoder(model.encoder, by, fitted)
    model.info["x_segments"] = {
        "by": list(by), "shrinkage": "inf" if math.isinf(k_shrink) else k_shrink, "max_segments": spec.max_segments,
        "segments_seen": len(keys), "segments_fitted": len(fitted),
        "global_weight": float(unkeyed + sum(totals[key].sum() for key in keys if key not in key_index)),
    }
    return model
