"""Calibrators fitted as reductions over the held-out score blocks of a table fit (step 6 of
:mod:`calengine.fit.table`), and of ``calengine recalibrate`` (:mod:`calengine.fit.recalibrate`).

A calibrator with the reduction protocol (:class:`calengine.base.Calibrator`) runs it in rounds: each
round sends one small task per score block, or per score range for rounds that need sorted scores
(the blocks are cut at boundaries read off merged quantile summaries, so a range's rows fit a
worker), and merges the returned statistics in a fixed order, so the fit is the same bits on any
number of workers.  A calibrator without the protocol gets its scores gathered on one worker, after a
check that they fit its memory.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import DataError, ParameterError
from ..plan.memory import check_fits_memory, range_rows_for
from ..plugins.calls import plugin_errors
from ..runtime.progress import gather_in_order
from ..tasks import partitions as pt

__all__ = ["fit_calibrators", "calibration_problems", "refuse_code_matrix", "summary_points"]


def merge_summaries(parts: list[dict]) -> dict:
    live = [p for p in parts if p["n"]]
    if not live:
        return {"n": 0}
    n = sum(p["n"] for p in live)
    lo = np.min([p["min"] for p in live], axis=0)
    hi = np.max([p["max"] for p in live], axis=0)
    values = np.concatenate([p["quantiles"] for p in live], axis=0)
    weights = np.concatenate([np.full(len(p["quantiles"]), p["n"] / len(p["quantiles"])) for p in live])
    return {"n": n, "min": lo, "max": hi, "values": values, "weights": weights}


def _boundaries(summary: dict, column: int, n_ranges: int) -> np.ndarray:
    """Score values cutting a problem's scores into about ``n_ranges`` ranges of similar size."""
    if n_ranges <= 1:
        return np.empty(0)
    v = summary["values"][:, column]
    order = np.argsort(v, kind="stable")
    v, w = v[order], summary["weights"][order]
    cum = np.cumsum(w)
    targets = cum[-1] * np.arange(1, n_ranges) / n_ranges
    cuts = v[np.minimum(np.searchsorted(cum, targets), v.size - 1)]
    return np.unique(cuts)


#: quantile points of a block's summary per score range a sorted round may cut, and their bounds
SUMMARY_POINTS_PER_RANGE = 8
SUMMARY_POINTS_MIN, SUMMARY_POINTS_MAX = 64, 4096


def summary_points(n_rows: int, memory_limit: float) -> int:
    """Quantile points each score block's summary (:func:`calengine.tasks.partitions.block_summary`)
    takes for a calibration set of ``n_rows`` rows: :data:`SUMMARY_POINTS_PER_RANGE` per score range
    the sorted rounds will cut (:func:`_boundaries`), at least 64, at most 4096.

    Why: the blocks of a table are alike, so their 64-point grids fall at nearly the same ranks and a
    merged summary cuts no finer than 1/64 of the rows however many blocks there are.  At 10^8 rows a
    4 GiB worker's 50 ranges of 2M rows (2 % each) were cut on that 1.6 % grid: 1.6M to 3.0M rows, and
    the largest range task set the workers' peak, 21 % above 10^7 rows' (5 ranges, 1.9M-2.1M rows).
    A range boundary never changes a fit (every sorted reduction is exact over any cutting that keeps
    ties together), only which task holds which rows.  The client holds blocks x points values per
    score column: 3 MiB for 100 blocks at the cap."""
    n_ranges = max(1, math.ceil(n_rows / range_rows_for(memory_limit)))
    return int(min(SUMMARY_POINTS_MAX, max(SUMMARY_POINTS_MIN, SUMMARY_POINTS_PER_RANGE * n_ranges)))


def calibration_problems(merged: list[dict], calibrator) -> list[tuple[int, int | None]]:
    """The (calibration set, score column) problems of a fit: one per score column, or, for a multiclass
    scaling (``calibrator.multiclass``) of a set with k > 1 columns, one ``(set, None)`` for the whole
    score matrix."""
    out: list[tuple[int, int | None]] = []
    for i, m in enumerate(merged):
        n_cols = len(m["min"])
        if getattr(calibrator, "multiclass", False) and n_cols > 1:
            out.append((i, None))
        else:
            out.extend((i, b) for b in range(n_cols))
    return out


def refuse_code_matrix(calibrator, multiclass: str | None, k: int) -> None:
    """``--multiclass CODE:COMBINER`` with a multiclass scaling is one line: the scaling maps the k
    scores to class probabilities itself, it is the combiner."""
    if multiclass and k > 2 and getattr(calibrator, "multiclass", False):
        raise ParameterError(
            f"method={calibrator.name!r} calibrates the k-class score vector as a whole and is its own combiner;"
            " drop multiclass (or pick a one-column calibrator such as sigmoid or isotonic)",
            parameter=("method", "multiclass"),
        )


class ScoreBlocks:
    """The held-out score blocks of a fit, as futures: one per fragment, made by ``make()``.

    Held-out scores are the one O(rows) thing a fit keeps in cluster memory, so when a round of
    :func:`fit_calibrators` has cut them into score ranges and nothing else needs them, they are
    released (:meth:`release`); a later round that needs them again makes them again (:meth:`get`: the
    same tasks, so the same bits)."""

    def __init__(self, make):
        self._make = make
        self._futures = make()

    def get(self) -> list:
        if self._futures is None:
            self._futures = self._make()
        return self._futures

    def release(self) -> None:
        self._futures = None


def fit_calibrators(run, blocks: ScoreBlocks, summaries, problems, calibrator, score_kind, ctx,
                    raw_kind: str = "") -> list:
    """Fit one clone of ``calibrator`` per (calibration set, score column) problem over the score blocks.

    Calibrators with a reduction protocol run it in rounds: every round sends one tiny task per block
    (or per score range for sorted rounds) and merges the returned statistics in a fixed order; the
    others get their scores gathered on one worker (:func:`_fit_gathered`).

    ``run``: the :class:`~calengine.runtime.context.RunContext` (client, progress; with a ``spill_dir``
    the blocks are on disk there, :mod:`calengine.tasks.spill`, and so go the pieces of the score ranges
    cut from them).  ``blocks`` are released once every pending round reads only score ranges
    (:class:`ScoreBlocks`).  ``ctx``: what bounds a task's memory (``memory_limit``, ``n_rows``).

    A problem ``(set, None)`` (:func:`calibration_problems`) fits a multiclass scaling on the set's whole
    score matrix, read as :func:`calengine.model.calibrated.matrix_scores` reads ``raw_kind`` scores.
    """
    from ..base import fresh_copy

    cals = [fresh_copy(calibrator) for _ in problems]
    requests = _start(cals, problems, summaries, calibrator, score_kind)
    fallback = [i for i, r in enumerate(requests) if r is None]
    ranges = _Ranges(run, blocks, problems, summaries, ctx)
    rounds = 0
    while pending := [i for i, r in enumerate(requests) if r is not None]:
        rounds += 1
        unsorted = [i for i in pending if not requests[i].get("sorted")]
        sorted_ = [i for i in pending if requests[i].get("sorted")]
        block_futures = []
        if unsorted:
            args = [(problems[i][0], problems[i][1], cals[i], requests[i], raw_kind) for i in unsorted]
            block_futures = [run.client.submit(pt.block_partial_stats, b, args, pure=False) for b in blocks.get()]
        progress = run.progress if rounds == 1 else None
        ranges.cut([i for i in sorted_ if i not in ranges.n_ranges_of], progress)
        if not unsorted and not fallback and all(i in ranges.n_ranges_of for i in pending):
            blocks.release()  # each block is freed once its split has run
        range_tasks = ranges.submit(set(sorted_), cals, requests)  # running while the blocks' statistics merge
        merged: dict[int, Any] = {}
        if unsorted:
            merged.update(zip(unsorted, _merge_blocks(run.client, block_futures, [cals[i] for i in unsorted], progress)))
        merged.update(ranges.gather(range_tasks, cals, progress))
        for i in pending:
            with plugin_errors(cals[i], "fit"):
                requests[i] = cals[i].reduction_step(merged[i], requests[i])
        if rounds > 500:
            raise ParameterError(f"calibrator '{calibrator.name}' did not finish its reduction in 500 rounds")
    for i in fallback:  # refused in one line when a set's scores would not fit one worker's memory
        check_fits_memory(ctx, summaries[problems[i][0]]["n"], f"calibrator '{calibrator.name}' (fitted in memory)", 24.0)
    return _fit_gathered(run, blocks, cals, [(i, *problems[i]) for i in fallback], score_kind)


def _start(cals: list, problems: list, summaries: list, calibrator, score_kind) -> list:
    """Each clone's first reduction request (None: it has no reduction and is fitted gathered); a plugin
    whose reduction disagrees with its own fit is caught here, once per process and form."""
    requests = []
    for cal, (cs, col) in zip(cals, problems):
        with plugin_errors(cal, "fit"):
            if col is None:  # a multiclass scaling of the whole score matrix: always unsorted
                request = cal.reduction_start(score_kind, n_classes=len(summaries[cs]["min"]))
                if request is None or request.get("sorted"):
                    raise ParameterError(f"multiclass calibrator '{cal.name}' must start an unsorted reduction")
                requests.append(request)
            else:
                requests.append(cal.reduction_start(score_kind))
    if any(r is not None for r in requests):
        from ..reductions.agreement import check_reduction_once

        # in each form this fit runs: one column, and the matrix form of a multiclass scaling
        if any(col is not None and requests[i] is not None for i, (_, col) in enumerate(problems)):
            check_reduction_once(calibrator, score_kind)
        for k in sorted({len(summaries[cs]["min"]) for cs, col in problems if col is None}):
            check_reduction_once(calibrator, score_kind, n_classes=k)
    return requests


class _Ranges:
    """The sorted problems' score ranges: cut from the blocks once per problem (the first round that
    asks for them sorted), batched into tasks, and their statistics computed each round."""

    def __init__(self, run, blocks: ScoreBlocks, problems: list, summaries: list, ctx):
        self.run, self.blocks, self.problems, self.summaries, self.ctx = run, blocks, problems, summaries, ctx
        self.n_ranges_of: dict[int, int] = {}
        #: ([(problem, range), ...], piece futures per split) of every batch of ranges
        self.groups: list = []

    def cut(self, new: list[int], progress=None) -> None:
        """Cut the blocks into the score ranges of the problems ``new``."""
        if not new:
            return
        client, ctx = self.run.client, self.ctx
        specs = []
        for i in new:
            cs, col = self.problems[i]
            n_ranges = max(1, math.ceil(self.summaries[cs]["n"] / range_rows_for(ctx.memory_limit)))
            specs.append((i, cs, col, _boundaries(self.summaries[cs], col, n_ranges)))
            self.n_ranges_of[i] = n_ranges
        bl = self.blocks.get()
        n_workers = len(client.scheduler_info().get("workers", {}))
        size = _split_group_size(len(bl), ctx, n_workers)
        splits = [client.submit(pt.split_blocks, specs, *bl[j : j + size], spill_dir=self.run.spill_dir, pure=False)
                  for j in range(0, len(bl), size)]
        if self.run.spill_dir is not None:
            # the splits are small handles of files (spill.SpilledSplit): each range task is handed
            # its own slices, with no piece-taking task per (split, batch) -- those grew with the
            # square of the table (10^9 rows: 62,500 tasks)
            handles = gather_in_order(client, splits, progress, "score ranges")
            for group in _range_groups(specs, self.summaries, ctx, n_workers):
                self.groups.append((group, [[h.piece(key) for key in group] for h in handles]))
        else:
            for group in _range_groups(specs, self.summaries, ctx, n_workers):
                self.groups.append((group, [client.submit(pt.take_many, sp, group, pure=False) for sp in splits]))

    def submit(self, live: set[int], cals: list, requests: list) -> list:
        """This round's tasks for the problems in ``live``: ``[(the (problem, range) pairs a task
        computes, its future), ...]``."""
        range_tasks = []
        for group, parts in self.groups:
            items = [(pos, cals[i], requests[i]) for pos, (i, _) in enumerate(group) if i in live]
            if items:
                range_tasks.append(([group[pos] for pos, _, _ in items],
                                    self.run.client.submit(pt.ranges_partial_stats, items, *parts, pure=False)))
        return range_tasks

    def gather(self, range_tasks: list, cals: list, progress) -> dict[int, Any]:
        """The merged statistics of each problem of ``range_tasks``, its ranges merged in order."""
        flat = [f for _, f in range_tasks]
        results = gather_in_order(self.run.client, flat, progress, "calibrators") if flat else []
        range_stats: dict = {}
        for (pairs, _), stats in zip(range_tasks, results):
            range_stats.update(zip(pairs, stats))
        live = sorted({i for pairs, _ in range_tasks for i, _ in pairs})
        return {i: _calibrator_stats(cals[i], [range_stats[(i, r)] for r in range(self.n_ranges_of[i])]) for i in live}


def _fit_gathered(run, blocks: ScoreBlocks, cals: list, gathered: list[tuple], score_kind) -> list:
    """The calibrators without a reduction, ``gathered = [(index, set, column), ...]``, each fitted on
    one worker from its gathered scores; ``cals`` with them in place."""
    client = run.client
    for i, cs, col in gathered:
        pieces = [client.submit(pt.block_column, b, cs, col, pure=False) for b in blocks.get()]
        cals[i] = client.submit(pt.fit_calibrator_gathered, cals[i], score_kind, *pieces, pure=False)
    if gathered:
        for (i, _, _), cal in zip(gathered, client.gather([cals[i] for i, _, _ in gathered])):
            cals[i] = cal
    return cals


def _split_group_size(n_blocks: int, ctx, n_workers: int) -> int:
    """Consecutive score blocks cut into ranges by one task: groups of about four ranges' rows (a
    task's memory stays a small multiple of a range task's), and at least one group per worker."""
    rows_per_group = 4 * range_rows_for(ctx.memory_limit)
    groups = max(max(1, n_workers), math.ceil(ctx.n_rows / rows_per_group))
    return max(1, math.ceil(n_blocks / groups))


def _range_groups(specs: list, summaries: list, ctx, n_workers: int) -> list[list]:
    """The sorted problems' ``(problem, range)`` pairs, in order, batched so that one task computes
    the statistics of many small ranges: a segment-wise fit (:mod:`calengine.fit.segments`) has one
    problem per (member, segment), and one task per range made a thousand segments a thousand range
    tasks (and as many piece-taking tasks per split), which cost its 1M-row fit 7x the global fit's
    wall.  A batch holds about one range's rows (the memory bound of a range task) and there are at
    least as many batches as workers when there are that many ranges.  Batching changes only which
    task computes a range, never a range's rows or the order its statistics are merged in."""
    pairs = [((i, r), summaries[cs]["n"] / (len(bounds) + 1)) for i, cs, _, bounds in specs
             for r in range(len(bounds) + 1)]
    budget = max(1.0, min(range_rows_for(ctx.memory_limit), sum(rows for _, rows in pairs) / max(1, n_workers)))
    groups: list[list] = []
    rows_in = 0.0
    for pair, rows in pairs:
        if not groups or (groups[-1] and rows_in + rows > budget):
            groups.append([])
            rows_in = 0.0
        groups[-1].append(pair)
        rows_in += rows
    return groups


def _merge_blocks(client, futures: list, cals: list, progress) -> list:
    """Per calibrator in ``cals``, the left-to-right merge of every block's statistics (the merge
    :func:`_calibrator_stats` makes, the same bits), gathering the blocks' results one at a time in
    submission order and releasing each once merged.  ``futures`` is emptied.

    Why not gather them all and merge: a round's per-block results stay on the worker until gathered,
    and the first round of a sigmoid or temperature fit returns ~0.7 MiB a block (its Newton start
    histogram), so at 10^8 rows (100 fragments) the held results were ~70-100 MiB of an embedded
    process's ~370 MiB peak, which is how that peak still grew 25 % from 10^7 rows.  Tasks run in about
    submission order, so only a few results wait at a time whatever the number of blocks."""
    from ..plugins.calls import plugin_errors

    if progress is not None:
        progress.start("calibrators", len(futures))
    acc: list = [None] * len(cals)
    futures.reverse()
    while futures:
        parts = client.gather(futures.pop())
        for j, cal in enumerate(cals):
            with plugin_errors(cal, "fit"):
                acc[j] = pt.merge_in_order([acc[j], parts[j]], cal.merge_stats)
        if progress is not None:
            progress.advance()
    if progress is not None:
        progress.finish()
    if any(m is None for m in acc):
        raise DataError("calibration data is empty; pass at least one example of each class")
    return acc


def _calibrator_stats(cal, parts: list):
    from ..plugins.calls import plugin_errors

    with plugin_errors(cal, "fit"):
        merged = pt.merge_in_order(parts, cal.merge_stats)
    if merged is None:
        raise DataError("calibration data is empty; pass at least one example of each class")
    return merged
