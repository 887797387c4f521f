"""What runs inside the tasks of a partition-native fit: pure, module-level, picklable functions.

Every function here receives *descriptions* -- fragments (file, row groups), the encoding, the fold
plan, unfitted or fitted plugin objects -- reads its own rows from Parquet, and returns something
small: statistics, a fitted learner, or the held-out scores of one fragment (which stay on the worker
that computed them until the calibrators are fitted).  Graph building lives in
:mod:`calengine.fit.table`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataError
from ..plugins.batch_probe import scores_of, take_rows
from ..plugins.calls import plugin_errors
from ..plan.folds import fragment_folds, fragment_sample_keys
from ..runtime.heap import trims_heap, trims_heap_even_when_kept
from .numeric_read import load_numeric_part as _load_numeric_part
from .numeric_read import numeric_table_stats as _numeric_table_stats
from .numeric_read import target_counts as _target_counts
from .spill import SpilledBlock, SplitWriter, load_sets, piece_parts, spill_block


@dataclass(frozen=True)
class Encoding:
    """How a task turns a fragment into features, class indices and (``--weight``) row weights."""

    encoder: Any  # FeatureEncoder, or a ColumnReader for a model whose learner arrived fitted
    labels: Any  # LabelSpace
    target: str
    weight: str | None = None


@dataclass(frozen=True)
class FoldPlan:
    """Folds (``cv`` None: no folds, every row is training data) and the code matrix, if any."""

    cv: int | None
    seed: int
    code_matrix: np.ndarray | None = None


@dataclass(frozen=True)
class Unit:
    """One learner to fit: on the rows outside ``fold`` (None: all rows), for code-matrix column
    ``column`` (None: the classes themselves)."""

    fold: int | None
    column: int | None


@dataclass(frozen=True)
class CalSet:
    """Rows whose scores calibrate one member: the rows of ``fold`` (None: every row), of code column
    ``column`` if given, each scored by ``learners[fold of the row]`` (``per_fold``) or ``learners[0]``."""

    fold: int | None
    column: int | None
    learners: tuple[int, ...]  # indices into the learner list the score task receives
    per_fold: bool = False


@dataclass
class Part:
    """A fragment's labelled rows, encoded: features, class indices, folds, sample keys, row weights
    (None: unweighted) and costing keys (None unless asked for)."""

    X: Any
    y: np.ndarray
    folds: np.ndarray | None
    keys: np.ndarray | None
    w: np.ndarray | None = None
    cost_keys: np.ndarray | None = None

    def costing_mask(self, w_max: float) -> np.ndarray:
        """Rows a costing sample keeps: each with probability w / ``w_max`` (Zadrozny, Langford & Abe
        2003), drawn from the row's own seeded number, so the sample is the same on any worker."""
        return self.cost_keys < self.w / w_max


def load_part(fragment, enc: Encoding, plan: FoldPlan | None, with_keys: bool = False, order: str = "C",
              costing: bool = False) -> Part:
    """Read and encode a fragment; rows whose label is missing are dropped (the client counted them).

    ``order="F"``: dense features in Fortran order (see :meth:`FeatureEncoder.transform`), for the
    statistics and scoring passes, which take rows by fancy indexing (a C-ordered copy) or read
    columns; it saves a transposing copy of the fragment.  ``costing``: also the rows' costing keys
    (:meth:`Part.costing_mask`).  Weights were checked by the planning pass; they are read as they are.
    """
    from ..parquet.dataset import read_fragment
    from ..plan.columns import check_fit_scores
    from ..plan.folds import fragment_costing_keys

    columns = list(dict.fromkeys(list(enc.encoder.input_columns) + [enc.target] + ([enc.weight] if enc.weight else [])))
    arrays = _load_numeric_part(fragment, enc, plan, columns, with_keys, order, costing)
    if arrays is not None:
        check_fit_scores(enc.encoder, arrays[0])
        return Part(*arrays)
    df = read_fragment(fragment, columns)
    series = df[enc.target]
    present = series.notna().to_numpy()
    y_all = np.full(len(df), -1, dtype=np.int64)
    if present.any():
        y_all[present] = enc.labels.encode(series[present])
    folds = None
    if plan is not None and plan.cv:
        folds = fragment_folds(y_all, fragment, enc.labels.n_classes, plan.cv, plan.seed)[present]
    keys = fragment_sample_keys(fragment, plan.seed if plan else 0)[present] if with_keys else None
    kept = df.loc[present] if not present.all() else df
    X = enc.encoder.transform(kept, order=order)
    check_fit_scores(enc.encoder, X)
    w = kept[enc.weight].to_numpy(dtype=np.float64, na_value=np.nan) if enc.weight else None
    cost_keys = fragment_costing_keys(fragment, plan.seed if plan else 0)[present] if costing else None
    return Part(X, y_all[present], folds, keys, w, cost_keys)


def unit_rows(part: Part, unit: Unit, plan: FoldPlan) -> tuple[np.ndarray, np.ndarray]:
    """(mask of the unit's training rows, target of every row) within a part."""
    mask = np.ones(part.y.shape[0], dtype=bool)
    if unit.fold is not None:
        mask &= part.folds != unit.fold
    if unit.column is None:
        return mask, part.y
    code = plan.code_matrix[part.y, unit.column]
    return mask & (code != 0), (code == 1).astype(np.int64)


# ---------------------------------------------------------------------------------------------- statistics


@trims_heap
def fragment_table_stats(fragment, feature_columns, target, text_columns, weight: str | None = None):
    """Column statistics, per-row-group label counts and (``weight``) the checked weights' sums of one
    fragment (the encoding's reduction)."""
    from ..reductions.column_stats import partition_stats
    from ..parquet.dataset import fragment_frame, read_fragment, read_fragment_table

    cols = list(dict.fromkeys(list(feature_columns) + ([target] if target else []) + ([weight] if weight else [])))
    keys = [(fragment.file_key, g) for g in fragment.row_groups]
    if target and not feature_columns and not weight:
        stats = _target_counts(fragment, target, keys)
        if stats is not None:
            return stats
    if target and feature_columns and not weight:  # a learner's table: numbers skip pandas
        table = read_fragment_table(fragment, cols)
        stats = _numeric_table_stats(fragment, table, list(feature_columns), target, keys)
        if stats is not None:
            return stats
        df = fragment_frame(fragment, table, cols)
    else:
        df = read_fragment(fragment, cols)
    return partition_stats(
        df, list(feature_columns), target, where=f"'{fragment.path}'", group_keys=keys,
        group_rows=list(fragment.group_rows), text_columns=tuple(text_columns), weight=weight,
    )


def as_given(obj):
    """``obj`` itself: a learner that arrived fitted, held by the scheduler like any fitted learner."""
    return obj


def merge_in_order(parts: list, merge):
    """``merge(merge(p1, p2), p3)...`` over the parts that are not None (None when all are): the one
    left-to-right merge every reduction of the fit uses, so results never depend on completion order."""
    out = None
    for p in parts:
        if p is not None:
            out = p if out is None else merge(out, p)
    return out


def merge_all(*parts):
    """Merge table statistics left to right (``a.merge(b)``): one node of a tree reduction."""
    return merge_in_order(list(parts), lambda a, b: a.merge(b))


def fragment_label_counts(fragment, target, weight: str | None = None):
    """Per-row-group label counts (and checked weight sums) of a fragment, without feature statistics."""
    return fragment_table_stats(fragment, [], target, (), weight)


@trims_heap
def fragment_learner_stats(fragment, enc: Encoding, plan: FoldPlan, learner, columns: tuple) -> dict:
    """A learner's statistics per (fold, column) of one fragment: fold None when there are no folds.

    ``columns``: code-matrix columns to compute (``(None,)`` for the classes themselves).
    """
    from ..runtime.threads import pin_native_threads

    pin_native_threads()
    part = load_part(fragment, enc, plan, order="F")
    out = {}
    n_groups = plan.cv or 1
    for column in columns:
        mask, target = unit_rows(part, Unit(None, column), plan)
        n_classes = enc.labels.n_classes if column is None else 2
        groups = part.folds if plan.cv else np.zeros(part.y.shape[0], dtype=np.int64)
        X, w = part.X, part.w
        if not mask.all():
            idx = np.flatnonzero(mask)
            X, target, groups = X[idx], target[idx], groups[idx]
            w = None if w is None else w[idx]
        with plugin_errors(learner, "fit"):
            stats = learner.partial_stats_groups(X, target, groups, n_groups, w, n_classes)
        for g in range(n_groups):
            out[(g if plan.cv else None, column)] = stats[g]
    return out


def fit_learner_from_stats(learner, stats, n_classes: int, seed: int):
    """A fresh copy of ``learner`` fitted from merged statistics."""
    from .arrays import learner_errors, seeded
    from ..runtime.threads import pin_native_threads

    pin_native_threads()
    est = seeded(learner, seed)
    with learner_errors(est):
        est.fit_from_stats(stats, n_classes)
    return est


# ---------------------------------------------------------------------------------------------- learners


@trims_heap
def fit_unit_learner(
    fragments, enc: Encoding, plan: FoldPlan, unit: Unit, learner, seed: int,
    quotas: np.ndarray | None = None, rates: np.ndarray | None = None, costing: float | None = None,
):
    """Assemble a unit's training rows on this worker from the fragments and fit ``learner`` on them.

    With ``quotas`` (rows to keep per class of the unit's target) the rows are a bounded, stratified
    sample: per class the rows with the smallest seeded sample keys (prefiltered with ``rates``).
    Weighted rows (``--weight``) reach the learner as ``sample_weight``; with ``costing`` (the
    table's largest weight, for a learner without weights) they become a costing sample instead:
    each row kept with probability w / max w, unweighted, and a class of positive weight that the
    draw missed keeps its nearest miss over all fragments (:func:`calengine.tasks.arrays.nearest_misses`).
    """
    import scipy.sparse as sp

    from .arrays import TrainingData, check_costing_sample, fit_learner, nearest_per_class

    Xs, ts, ks, ws = [], [], [], []
    misses = []  # costing: per fragment, each class's nearest miss (X row, target, key, acceptance)
    for fragment in fragments:
        part = load_part(fragment, enc, plan, with_keys=quotas is not None, costing=costing is not None)
        mask, target = unit_rows(part, unit, plan)
        if costing is not None:
            drawn, accept = part.costing_mask(costing), part.w / costing
            near = nearest_per_class(part.cost_keys, accept, mask & ~drawn & (accept > 0), target)
            misses.append((part.X[near], target[near], part.cost_keys[near], accept[near]))
            mask &= drawn
        if quotas is not None:
            mask &= part.keys < rates[target]
        idx = np.flatnonzero(mask)
        if idx.size == 0:
            continue
        Xs.append(part.X[idx])
        ts.append(target[idx])
        if quotas is not None:
            ks.append(part.keys[idx])
        if part.w is not None and costing is None:
            ws.append(part.w[idx])
    if costing is not None:
        _add_nearest_misses(Xs, ts, ks, misses)
    if not Xs:
        raise DataError("a learner's training rows are empty; check the data, cv and multiclass", parameter=("cv", "multiclass"))
    X = sp.vstack(Xs, format="csr") if sp.issparse(Xs[0]) else np.concatenate(Xs)
    t = np.concatenate(ts)
    w = np.concatenate(ws) if ws else None
    del Xs
    if quotas is not None:
        keys = np.concatenate(ks)
        keep = []
        for c, quota in enumerate(quotas):
            rows = np.flatnonzero(t == c)
            if rows.size > quota:
                rows = rows[np.argsort(keys[rows], kind="stable")[: int(quota)]]
            keep.append(rows)
        idx = np.sort(np.concatenate(keep))
        X, t = X[idx], t[idx]
        w = None if w is None else w[idx]
    if costing is not None:
        check_costing_sample(t, enc.labels.n_classes if unit.column is None else 2)
    return fit_learner(TrainingData(X, t, w), None, learner, seed)


def _add_nearest_misses(Xs: list, ts: list, ks: list, misses: list) -> None:
    """Append to the drawn rows the nearest miss (over all fragments, the first on ties) of each class
    that no fragment's costing draw kept; sample keys 0 put such a row ahead of any ``--max-train-rows``
    quota, which it must not lose."""
    from .arrays import nearest_per_class

    if not misses:
        return
    present = np.unique(np.concatenate(ts)) if ts else np.empty(0, np.int64)
    target = np.concatenate([m[1] for m in misses])
    keys = np.concatenate([m[2] for m in misses])
    accept = np.concatenate([m[3] for m in misses])
    add = nearest_per_class(keys, accept, ~np.isin(target, present), target)
    if add.size:
        import scipy.sparse as sp

        rows = [m[0] for m in misses]
        Xs.append((sp.vstack(rows, format="csr") if sp.issparse(rows[0]) else np.concatenate(rows))[add])
        ts.append(target[add])
        ks.append(np.zeros(add.size))


@trims_heap
def assemble_training(fragments, enc: Encoding):
    """Every labelled row, encoded, as one :class:`calengine.tasks.arrays.TrainingData` on this worker.

    The in-memory route of the methods that need the whole table in one process (Probing, bagging):
    the table is assembled on a worker, never on the client.
    """
    import scipy.sparse as sp

    from .arrays import TrainingData

    parts = [load_part(f, enc, None) for f in fragments]
    Xs = [p.X for p in parts]
    X = sp.vstack(Xs, format="csr") if sp.issparse(Xs[0]) else np.concatenate(Xs)
    return TrainingData(X, np.concatenate([p.y for p in parts]))


# ---------------------------------------------------------------------------------------------- scores


@dataclass
class ScoreBlock:
    """Held-out scores of one fragment for every calibration set: ``sets[i] = (S, T, W)`` with ``S`` the
    (n, l) scores, ``T`` the (n, l) 0/1 targets of each score column and ``W`` the rows' weights
    (``--weight``; None: unweighted, every row weighs 1)."""

    sets: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]

    def __sizeof__(self) -> int:
        # Dask sizes task results with sys.getsizeof; without this a block of a million rows counted as
        # 56 bytes, so workers never spilled held-out scores and their memory grew with the table.
        return object.__sizeof__(self) + sum(
            S.nbytes + T.nbytes + (0 if W is None else W.nbytes) for S, T, W in self.sets
        )


def loaded(block) -> ScoreBlock:
    """A score block in memory, whether it was spilled (:mod:`calengine.tasks.spill`) or not."""
    return ScoreBlock(load_sets(block)) if isinstance(block, SpilledBlock) else block


def column_targets_of(y: np.ndarray, n_columns: int, column, plan: FoldPlan) -> np.ndarray:
    if column is not None:
        return (plan.code_matrix[y, column] == 1).astype(np.int8)[:, None]
    if n_columns == 1:
        return (y == 1).astype(np.int8)[:, None]
    return (y[:, None] == np.arange(n_columns)[None, :]).astype(np.int8)


@trims_heap
def _rows_to_score(learner, X, idx: np.ndarray):
    """Rows ``idx`` (ascending) of ``X`` for ``learner.score``: ``X`` itself when they are all its rows
    and the learner reads any memory order alike (``Learner.score_reads_any_order``), else a copy."""
    if idx.size == X.shape[0] and getattr(learner, "score_reads_any_order", False) is True:
        return X
    return take_rows(X, idx)


def score_fragment(fragment, enc: Encoding, plan: FoldPlan, calsets: list[CalSet], learners: list,
                   spill_dir: str | None = None):
    """The held-out scores of this fragment's rows for every calibration set: a :class:`ScoreBlock`,
    or with ``spill_dir`` the same block written there (:mod:`calengine.tasks.spill`)."""
    from ..model.calibrated import as_columns
    from ..runtime.threads import pin_native_threads

    pin_native_threads()
    part = load_part(fragment, enc, plan, order="F")
    out = []
    for cs in calsets:
        mask = np.ones(part.y.shape[0], dtype=bool)
        if cs.fold is not None:
            mask &= part.folds == cs.fold
        if cs.column is not None:
            mask &= plan.code_matrix[part.y, cs.column] != 0
        if part.w is not None:
            # frequency weights: a row of weight 0 is a row absent, so its score bounds no bin or block
            mask &= part.w > 0
        idx = np.flatnonzero(mask)
        if cs.per_fold:
            S = None
            for g, li in enumerate(cs.learners):
                rows = np.flatnonzero(part.folds[idx] == g)
                if rows.size == 0:
                    continue
                with plugin_errors(learners[li], "score"):
                    s = as_columns(scores_of(learners[li], take_rows(part.X, idx[rows])))
                if cs.column is not None:
                    s = s[:, :1]
                if S is None:
                    S = np.empty((idx.size, s.shape[1]))
                S[rows] = s
            if S is None:
                S = np.empty((0, 1))
        else:
            with plugin_errors(learners[cs.learners[0]], "score"):
                S = (as_columns(scores_of(learners[cs.learners[0]], _rows_to_score(learners[cs.learners[0]], part.X, idx)))
                     if idx.size else np.empty((0, 1)))
            if cs.column is not None:
                S = S[:, :1]
        out.append((S, column_targets_of(part.y[idx], S.shape[1], cs.column, plan), None if part.w is None else part.w[idx]))
    return spill_block(ScoreBlock(out), spill_dir)


#: rows of a block the quantile summary reads at most (every k-th row beyond): see :func:`block_summary`
SUMMARY_SAMPLE_ROWS = 1 << 16


@trims_heap
def block_summary(block: ScoreBlock, points: int = 64) -> list[dict]:
    """Per calibration set: rows, per-column min / max, and a small quantile summary of each column
    (used only to cut score ranges for sorted calibrator rounds).

    The quantiles are those of every k-th row, at most :data:`SUMMARY_SAMPLE_ROWS` of them: a range
    boundary may fall anywhere without changing a fit (ranges only share out the work; every sorted
    reduction is exact over any cutting that keeps ties together), so the summary needs only to cut
    ranges of similar size, and a strided sample of 65,536 rows places a 1/64 quantile within a
    fraction of a percent of its rank.  Exact quantiles of every row partitioned the whole block, the
    fit's largest cost after the sort itself (7 % of a 10M-row isotonic fit's CPU).  Deterministic:
    the same rows, the same boundaries.
    """
    out = []
    for S, _, _ in loaded(block).sets:
        n = S.shape[0]
        if n == 0:
            out.append({"n": 0})
            continue
        sample = S[:: -(-n // SUMMARY_SAMPLE_ROWS)]
        q = np.linspace(0.0, 1.0, min(points, sample.shape[0]))
        out.append({"n": n, "min": S.min(axis=0), "max": S.max(axis=0), "quantiles": np.quantile(sample, q, axis=0)})
    return out


#: rows of a score block that one ``partial_stats`` call sees at most (divided by the columns of a
#: whole score matrix): see :func:`block_partial_stats`
STATS_CHUNK_ROWS = 1 << 18


@trims_heap
def block_partial_stats(block: ScoreBlock, requests: list) -> list:
    """``partial_stats`` of each (calset, column, calibrator, request) on this block (None: no rows).
    Column ``None``: a multiclass scaling's whole score matrix (read by
    :func:`calengine.model.calibrated.matrix_scores` for the raw kind given as a fifth entry) with the
    rows' class indices.

    The block is handed to the calibrator in consecutive chunks of :data:`STATS_CHUNK_ROWS` rows whose
    statistics are merged left to right (``merge_stats``), not whole.  Why: a calibrator's partial
    statistics make several float64 temporaries of the piece's length (Platt's pass: the logit, the
    margin, two ``expit`` and their products), so a whole block of a 1M-row fragment cost ~100 MiB of
    heap per task thread, and the rounds of a sigmoid fit were the embedded process's peak (430-520
    MiB, varying with how two threads' temporaries overlapped; benchmarks/results/score_columns_speed.md).
    Chunks of 2^18 rows keep each task's temporaries at a few MiB, in cache, whatever the block's size.  The protocol already requires
    ``merge_stats`` to combine the statistics of any cutting of the rows, and the cutting depends only
    on the block's rows, so a fit is the same on one thread, many workers or a cluster.
    """
    out = []
    from ..model.calibrated import matrix_scores

    block = loaded(block)
    for cs_index, column, cal, request, *raw_kind in requests:
        S, T, W = block.sets[cs_index]
        n = S.shape[0]
        step = max(1, STATS_CHUNK_ROWS // (S.shape[1] if column is None else 1))
        merged = None
        for a in range(0, n, step):
            b = min(n, a + step)
            w = _weights(None if W is None else W[a:b], b - a)
            with plugin_errors(cal, "fit"):
                if column is None:
                    Z = matrix_scores(np.ascontiguousarray(S[a:b], dtype=np.float64), raw_kind[0] if raw_kind else "")
                    stats = cal.partial_stats(Z, np.argmax(T[a:b], axis=1), w, request)
                else:
                    s = np.ascontiguousarray(S[a:b, column], dtype=np.float64)
                    stats = cal.partial_stats(s, T[a:b, column].astype(np.int64), w, request)
                merged = merge_in_order([merged, stats], cal.merge_stats)
        out.append(merged)
    return out


def _weights(W: np.ndarray | None, n: int) -> np.ndarray:
    """A piece's weights as the calibrator protocol takes them (ones when unweighted)."""
    return np.ones(n) if W is None else np.asarray(W, dtype=np.float64)


def split_block(block: ScoreBlock, problems: list) -> dict:
    """Cut each (calset, column) problem's scores into score ranges: ``{(problem, range): (s, t, w)}``
    (``w`` None when unweighted).

    ``problems``: ``(problem id, calset index, column, boundaries)``; a score ``s`` falls in range
    ``searchsorted(boundaries, s, side="right")``, so tied scores always share a range.
    """
    out = {}
    for pid, s, t, w, cuts in _range_sorted(block, problems):
        for rng in range(len(cuts) - 1):
            # own copies, not views of one sorted array: a piece Dask spills to disk frees its memory
            a, b = cuts[rng], cuts[rng + 1]
            out[(pid, rng)] = (s[a:b].copy(), t[a:b].copy(), None if w is None else w[a:b].copy())
    return out


def _range_sorted(block: ScoreBlock, problems: list):
    """Per problem of :func:`split_block`: ``(problem id, s, t, w, cuts)``, the block's rows of that
    problem in range order (each range's rows in block order) and the row offsets where the ranges
    start (``cuts[r]:cuts[r + 1]`` is range ``r``; ``len(boundaries) + 2`` entries)."""
    block = loaded(block)
    for pid, cs_index, column, boundaries in problems:
        S, T, W = block.sets[cs_index]
        r = np.searchsorted(boundaries, S[:, column], side="right")
        # range ids are small integers: as uint16 numpy's stable sort is a radix sort, O(n) and ~7x
        # faster than on int64 (the same order); this split is a pass over every held-out score
        order = np.argsort(r.astype(np.uint16) if len(boundaries) < 2**16 - 1 else r, kind="stable")
        # in range order (targets stay int8: 9 bytes a row, 17 with weights)
        s, t = S[order, column], T[order, column]
        w = None if W is None else W[order]
        yield pid, s, t, w, np.searchsorted(r[order], np.arange(len(boundaries) + 2))


@trims_heap_even_when_kept
def split_blocks(problems: list, *blocks: ScoreBlock, spill_dir: str | None = None):
    """:func:`split_block` over consecutive blocks, each range's pieces concatenated in block order;
    with ``spill_dir``, a :class:`~calengine.tasks.spill.SpilledSplit` instead: each block's rows are
    written there in range order as the block is cut (the task holds one block at a time), to one
    file per problem and array for the whole group, and ``SpilledSplit.piece(key)`` names a range's
    rows in those files (:mod:`calengine.tasks.spill`).

    A range task then fetches one piece per group of blocks instead of one per block: the number of
    pieces grows with (groups x ranges) rather than (blocks x ranges), which kept the client-side
    scheduler's task count, and so its memory, growing with the square of the table size.  The
    concatenation is in block order, so a range task sees exactly the rows it saw one piece per block.

    Why one file per group, not per piece: two ``.npy`` files per (block, range) made the scratch
    files grow with the square of the table (10^8 rows: 10^4 files; 10^9: 10^6), and writing,
    reading and removing them was a quarter of a 10^8-row isotonic fit's samples (py-spy; issue 43).
    """
    if spill_dir is not None:  # one block at a time: each block's rows go to disk before the next is cut
        with SplitWriter(spill_dir) as writer:
            for b in blocks:
                for pid, s, t, w, cuts in _range_sorted(b, problems):
                    writer.append(pid, s, t, w, cuts)
            return writer.result()
    splits = [split_block(b, problems) for b in blocks]
    if len(splits) == 1:
        return splits[0]
    return {key: _concatenate_pieces([sp[key] for sp in splits]) for key in splits[0]}


def _concatenate_pieces(pieces: list) -> tuple:
    """``(s, t, w)`` pieces of one problem concatenated in order (``w`` None when none is weighted)."""
    s = np.concatenate([p[0] for p in pieces])
    t = np.concatenate([p[1] for p in pieces])
    if all(p[2] is None for p in pieces):
        return s, t, None
    return s, t, np.concatenate([_weights(p[2], p[0].shape[0]) for p in pieces])


def take_many(mapping: dict, keys: list) -> list:
    """Some entries of a task result, in order (a tiny task, so each range task fetches only its own
    pieces)."""
    return [mapping[key] for key in keys]


@trims_heap_even_when_kept
def ranges_partial_stats(items: list, *parts: list) -> list:
    """:func:`range_partial_stats` of a batch of score ranges (:func:`calengine.fit.calibrators._range_groups`):
    ``items`` are ``(position, calibrator, request)``, ``parts`` one :func:`take_many` list per split,
    a range's pieces at its position in each.  The heap is trimmed once for the batch, not per range
    (a ``--by`` fit's batches hold up to thousands of small ranges, and trimming after each was 7 %
    of a 3M-row, 1,000-segment isotonic fit's samples)."""
    return [range_partial_stats(cal, request, *[p[pos] for p in parts]) for pos, cal, request in items]


def range_partial_stats(cal, request, *pieces):
    """``partial_stats`` of one score range gathered from every fragment (None: the range is empty).
    Not a task of its own: :func:`ranges_partial_stats` runs it on a batch of ranges and trims the heap
    once for the batch."""
    pieces = [p for piece in pieces for p in piece_parts(piece) if p[0].size]
    if not pieces:
        return None
    s, t, w = _concatenate_pieces(pieces)
    with plugin_errors(cal, "fit"):
        return cal.partial_stats(s, t.astype(np.int64), _weights(w, s.shape[0]), request)


@trims_heap
def fit_calibrator_gathered(cal, score_kind: str, *pieces):
    """The in-memory fallback: every score of one problem on this worker, then ``fit``."""
    if pieces:
        s, t, w = _concatenate_pieces(list(pieces))
    else:
        s, t, w = np.empty(0), np.empty(0, dtype=np.int64), None
    with plugin_errors(cal, "fit"):
        cal.fit(s, t.astype(np.int64), sample_weight=w, score_kind=score_kind)
    return cal


def block_column(block: ScoreBlock, cs_index: int, column: int):
    """(scores, targets, weights or None) of one calibration problem in one block."""
    S, T, W = loaded(block).sets[cs_index]
    return np.ascontiguousarray(S[:, column]), T[:, column].astype(np.int64), W
