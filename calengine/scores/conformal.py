"""What runs in tasks for ``calengine conformal`` and ``score --sets``: a chunk's calibration scores,
kept sorted where they were computed, and a batch's prediction sets written as Parquet columns.

Calibration (:func:`calibration_chunk`): a chunk's labelled rows are scored by the model, each row's
nonconformity score at its true class is computed (:func:`calengine.methods.conformal.true_scores`,
the randomised scores' uniforms hashed from the encoded row), and the rows are kept as a
:class:`~calengine.reductions.selection.SortedBlock` of ``(group, score, weight)`` -- in the task's
memory, or from :data:`~calengine.plan.memory.SPILL_MIN_ROWS` rows on as ``.npy`` files of the job's
scratch directory (:class:`SpilledSorted`), so no process holds more than a few chunks whatever the
table's size.  The selection rounds then query the blocks (:func:`query_block`): a few pages each.

The columns ``score --sets`` writes are built by :func:`calengine.model.conformal.set_columns`.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field

import numpy as np

from ..methods import conformal as cf
from ..reductions import selection as sel
from ..runtime.heap import trims_heap

__all__ = ["CalibrationSpec", "CalibrationBlock", "SpilledSorted", "calibration_chunk", "block_info",
           "query_block"]


@dataclass(frozen=True)
class CalibrationSpec:
    """What a calibration task computes: the score and its parameters, the grouping and the weight."""

    target: str
    score: str
    randomized: bool = False
    seed: int = 0
    lam: float = 0.0
    k_reg: int = 0
    mondrian: str = "none"  # "none", "class" or "segments"
    by: tuple[str, ...] = ()
    weight: str | None = None


@dataclass(frozen=True)
class SpilledSorted:
    """A :class:`~calengine.reductions.selection.SortedBlock` whose arrays are ``.npy`` files."""

    keys: str
    weights: str | None
    offsets: np.ndarray


@dataclass
class CalibrationBlock:
    """One chunk's calibration rows, sorted (or spilled), and what the client needs to know of them.

    Groups are the chunk's own: 0 for marginal coverage; the class for ``mondrian="class"``; for
    segments, 0 holds every row (the global threshold) and ``1 + j`` the rows of ``keys[j]``, the
    chunk's segments in order of appearance (:meth:`lookup` maps the job's segments to them)."""

    block: object
    rows: int = 0
    missing: int = 0
    class_counts: np.ndarray | None = None
    keys: list = field(default_factory=list)
    weight_total: float = 0.0


def _spill(block: sel.SortedBlock, directory: str) -> SpilledSorted:
    from ..tasks.spill import save_npy

    stem = os.path.join(directory, f"conformal-{uuid.uuid4().hex}")
    save_npy(stem + ".keys.npy", block.keys)
    wpath = None
    if block.weights is not None:
        wpath = stem + ".w.npy"
        save_npy(wpath, block.weights)
    return SpilledSorted(stem + ".keys.npy", wpath, block.offsets)


def _loaded(block) -> sel.SortedBlock:
    if not isinstance(block, SpilledSorted):
        return block
    from ..tasks.spill import load_npy

    keys = load_npy(block.keys, mmap_mode="r")  # a round reads a few pages of it
    weights = None if block.weights is None else load_npy(block.weights)
    return sel.SortedBlock(keys, block.offsets, weights)


@trims_heap
def calibration_chunk(model, chunk, spec: CalibrationSpec, batch_rows: int, scratch: str | None = None) -> CalibrationBlock:
    """The chunk's :class:`CalibrationBlock` (runs in tasks): rows without a label are counted and
    left out, rows of weight 0 count for nothing, an unknown label or a bad weight is one line."""
    from ..model.segmented import segment_codes
    from .table import batches, weight_column

    k = model.n_classes
    columns = list(dict.fromkeys(list(model.encoder.input_columns) + [spec.target] + list(spec.by)
                                 + ([spec.weight] if spec.weight else [])))
    scores, groups, weights = [], [], []
    class_counts = np.zeros(k, dtype=np.int64)
    missing = 0
    key_index: dict = {}
    total_w = 0.0
    for df in batches(chunk, columns, batch_rows):
        present = df[spec.target].notna().to_numpy()
        missing += int((~present).sum())
        if not present.all():
            df = df.loc[present]
        if not len(df):
            continue
        y = model.labels.encode(df[spec.target])
        w = weight_column(df, spec.weight)
        X = model.encoder.transform(df, order="F")
        P = model.predict_proba_features(X)
        u = cf.row_uniforms(cf.row_hashes(X), spec.seed) if spec.randomized else None
        V = cf.true_scores(P, y, spec.score, u, spec.lam, spec.k_reg)
        live = np.ones(y.size, dtype=bool) if w is None else w > 0
        class_counts += np.bincount(y[live], minlength=k)
        total_w += 0.0 if w is None else float(w.sum())
        if spec.mondrian == "segments":
            batch_keys, codes = segment_codes(df, spec.by)
            local = np.array([key_index.setdefault(key, len(key_index)) for key in batch_keys] + [-1], dtype=np.int64)
            seg = local[codes]
            scores += [V, V[seg >= 0]]
            groups += [np.zeros(V.size, dtype=np.int64), 1 + seg[seg >= 0]]
            if w is not None:
                weights += [w, w[seg >= 0]]
        else:
            scores.append(V)
            groups.append(y.astype(np.int64) if spec.mondrian == "class" else np.zeros(V.size, dtype=np.int64))
            if w is not None:
                weights.append(w)
    keys = sorted(key_index, key=key_index.get)
    n_groups = {"none": 1, "class": k, "segments": 1 + len(keys)}[spec.mondrian]
    V = np.concatenate(scores) if scores else np.empty(0)
    g = np.concatenate(groups) if groups else np.empty(0, dtype=np.int64)
    w = (np.concatenate(weights) if weights else np.empty(0)) if spec.weight else None
    block = sel.sorted_block(V, g, n_groups, w)
    rows = int(np.sum(class_counts))
    stored = _spill(block, scratch) if scratch is not None and block.keys.size else block
    return CalibrationBlock(stored, rows, missing, class_counts, keys, total_w)


def block_info(cb: CalibrationBlock) -> tuple:
    """``(summary, rows, missing, class_counts, keys, weight_total)``: what the client gathers of a block."""
    return (sel.block_summary(_loaded(cb.block)), cb.rows, cb.missing, cb.class_counts, cb.keys, cb.weight_total)


def query_block(cb: CalibrationBlock, lookup, req: sel.Request) -> sel.Answer:
    """The block's answer to a selection round (runs in tasks).  ``lookup``: the job's group index ->
    this block's (-1: none here), or None when they agree."""
    block = _loaded(cb.block)
    if lookup is None:
        return sel.block_query(block, req)
    local = np.asarray(lookup, dtype=np.int64)[req.groups]
    here = local >= 0
    n_sub = req.starts.shape[0]
    if not here.any():
        return _empty_answer(n_sub, block.weights is not None)
    # ask this block about its own groups only; the others answer nothing
    idx = np.flatnonzero(here)
    sub_idx = np.concatenate([np.arange(req.first[r], req.first[r + 1]) for r in idx])
    first = np.concatenate(([0], np.cumsum(np.diff(req.first)[idx]))).astype(np.int64)
    remap = {int(r): i for i, r in enumerate(idx)}
    inner = sel.Request(local[idx], first, req.starts[sub_idx], req.his[idx],
                        np.asarray([remap[int(c)] for c in req.collect if int(c) in remap], dtype=np.int64), req.scale)
    got = sel.block_query(block, inner)
    out = _empty_answer(n_sub, block.weights is not None)
    out.counts[sub_idx] = got.counts
    out.mins[sub_idx] = got.mins
    out.maxs[sub_idx] = got.maxs
    if got.w_hi is not None:
        out.w_hi[sub_idx] = got.w_hi
        out.w_lo[sub_idx] = got.w_lo
    if got.got_keys.size:
        out.got_range = idx[got.got_range]
        out.got_keys = got.got_keys
        out.got_hi, out.got_lo = got.got_hi, got.got_lo
    return out


def _empty_answer(n_sub: int, weighted: bool) -> sel.Answer:
    return sel.Answer(np.zeros(n_sub, dtype=np.int64), np.zeros(n_sub, dtype=np.int64) if weighted else None,
                      np.zeros(n_sub, dtype=np.int64) if weighted else None,
                      np.full(n_sub, np.iinfo(np.uint64).max, dtype=np.uint64), np.zeros(n_sub, dtype=np.uint64),
                      got_hi=np.empty(0, dtype=np.int64) if weighted else None,
                      got_lo=np.empty(0, dtype=np.int64) if weighted else None)


def drop_block(cb: CalibrationBlock) -> None:
    """Remove a spilled block's files (runs in tasks; the scratch directory goes anyway at the end)."""
    if isinstance(cb.block, SpilledSorted):
        for path in (cb.block.keys, cb.block.weights):
            if path:
                try:
                    os.remove(path)
                except OSError:
                    pass
