"""Does a calibrator's reduction protocol fit what its ``fit`` fits?  The plugin kit's check and the
engine's first-use probe.

A calibrator that implements the reduction protocol (:class:`calengine.base.Calibrator`) is fitted on a
partitioned table from per-piece statistics; in memory it is fitted by ``fit``.  Nothing forces the two
to agree: a ``merge_stats`` that drops its second argument gives a calibrator that passes every
in-memory test and, through the CLI on an 8-file table, probabilities 0.3 away from the in-memory fit,
silently.  This module runs the protocol the way the engine does -- pieces that are arbitrary row
partitions for unsorted requests, disjoint increasing score ranges that never split a tie for sorted
ones, statistics merged in any tree that keeps the pieces' order -- and measures the largest difference
of the fitted maps on a grid of scores.

* :func:`fit_over_pieces` drives the protocol over one cutting and one merge tree;
* :func:`reduction_disagreement` compares it with ``fit`` on the same rows;
* :func:`check_reduction_once` is the engine's probe: at the first reduction fit of a calibrator class
  (with given parameters and score kind) in a process, two small fixed cuttings are compared with
  ``fit``; a disagreement is one :class:`~calengine.errors.PluginError` line naming the plugin.

Nothing here needs Dask.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from ..errors import CalengineError, PluginError

__all__ = ["fit_over_pieces", "reduction_disagreement", "check_reduction_once", "probe_rows", "REDUCTION_ATOL"]

#: largest difference, in probability, between the reduction's map and ``fit``'s that the probe and
#: the kit accept: closed forms agree to rounding, iterative fits to their solver's tolerance
REDUCTION_ATOL = 1e-6


def probe_rows(n: int, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(scores, y, grid)``: ``n`` rows of a logistic relation with ties, and a grid covering them."""
    rng = np.random.default_rng(seed)
    s = np.round(rng.normal(size=n), 2)  # rounded: ties, which sorted pieces must keep together
    y = (rng.random(n) < 1 / (1 + np.exp(-2 * s))).astype(np.int64)
    y[:2] = (0, 1)
    if kind == "proba":
        s = 1 / (1 + np.exp(-s))
        grid = np.linspace(0.0, 1.0, 101)
    else:
        grid = np.linspace(s.min() - 1, s.max() + 1, 101)
    return s, y, grid


def _row_pieces(n: int, n_pieces: int, rng: np.random.Generator | None) -> list[np.ndarray]:
    """Row indices of ``n_pieces`` arbitrary pieces: shuffled rows, random cuts, an empty piece and a
    one-row piece included when there are enough pieces (``rng`` None: contiguous, near-equal)."""
    if rng is None:
        return [a for a in np.array_split(np.arange(n), n_pieces)]
    order = rng.permutation(n)
    inner = np.sort(rng.integers(1, n, size=max(0, n_pieces - 3)))
    cuts = np.concatenate(([0, 0, 1], inner, [n]))  # piece 0 empty, piece 1 one row
    cuts = np.maximum.accumulate(cuts)
    return [order[a:b] for a, b in zip(cuts[:-1], cuts[1:])]


def _range_pieces(s: np.ndarray, n_pieces: int, rng: np.random.Generator | None) -> list[np.ndarray]:
    """Row indices of increasing score ranges (ties never split), a one-row range first if possible."""
    order = np.argsort(s, kind="stable")
    ss = s[order]
    starts = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1]])  # where each tie group begins
    if rng is None:
        chosen = starts[np.linspace(0, len(starts), n_pieces, endpoint=False).astype(int)[1:]]
    else:
        k = min(len(starts) - 1, max(0, n_pieces - 1))
        chosen = np.sort(rng.choice(starts[1:], size=k, replace=False)) if k else np.empty(0, int)
    cuts = np.unique(np.concatenate(([0], chosen, [len(s)])))
    return [order[a:b] for a, b in zip(cuts[:-1], cuts[1:])]


def _merge(cal, parts: list[dict[str, Any]], rng: np.random.Generator | None):
    """Merge ``parts`` in a tree that keeps their order: left to right, or random adjacent pairs."""
    parts = list(parts)
    while len(parts) > 1:
        i = 0 if rng is None else int(rng.integers(0, len(parts) - 1))
        parts[i : i + 2] = [cal.merge_stats(parts[i], parts[i + 1])]
    return parts[0]


def fit_over_pieces(cal, s, y, w, kind: str, n_pieces: int, rng: np.random.Generator | None = None,
                    max_rounds: int = 500):
    """Fit ``cal`` by its reduction protocol over ``n_pieces`` pieces of ``(s, y, w)``; ``None`` when it
    declares no reduction for ``kind``.  ``rng`` picks the cutting and the merge tree (None: a fixed,
    near-equal cutting merged left to right)."""
    request = cal.reduction_start(kind)
    if request is None:
        return None
    rows = _row_pieces(len(s), n_pieces, rng)
    ranges = None
    rounds = 0
    while request is not None:
        rounds += 1
        if rounds > max_rounds:
            raise PluginError(f"calibrator '{cal.name}' did not finish its reduction in {max_rounds} rounds")
        if request.get("sorted"):
            ranges = ranges if ranges is not None else _range_pieces(s, n_pieces, rng)
            use = ranges
        else:
            use = rows
        parts = [cal.partial_stats(s[i], y[i], w[i], request) for i in use if len(i)]
        request = cal.reduction_step(_merge(cal, parts, rng), request)
    return cal


def reduction_disagreement(make: Callable[[], Any], s, y, w, kind: str, grid, n_pieces: int,
                           rng: np.random.Generator | None = None) -> float | None:
    """Largest ``|p_reduction - p_fit|`` on ``grid``; ``None`` if the calibrator has no reduction."""
    by_reduction = fit_over_pieces(make(), s, y, w, kind, n_pieces, rng)
    if by_reduction is None:
        return None
    in_memory = make().fit(s, y, sample_weight=w, score_kind=kind)
    a = np.asarray(by_reduction.predict(grid), dtype=float)
    b = np.asarray(in_memory.predict(grid), dtype=float)
    if a.shape != b.shape:
        return float("inf")
    diff = np.abs(a - b)
    return float("inf") if not np.all(np.isfinite(diff)) else float(diff.max(initial=0.0))


_CHECKED: dict[tuple, None] = {}
_LOCK = threading.Lock()


def check_reduction_once(calibrator, kind: str) -> None:
    """The engine's probe, before a calibrator is fitted as a reduction on a table.

    Users install plugins whose tests they never ran.  Once per process for each calibrator class,
    parameters and score kind, the protocol is run over two fixed cuttings of 120 probe rows (five
    row pieces merged left to right, and four score ranges), and compared with ``fit`` on the same
    rows; a difference over :data:`REDUCTION_ATOL` is refused in one line naming the plugin, before
    any table is read into the fit.  It costs two small fits.
    """
    from ..plugins.calls import describe, distribution_of, plugin_errors

    cls = type(calibrator)
    key = (cls.__module__, cls.__qualname__, repr(sorted(calibrator.get_params(deep=False).items(), key=str)), kind)
    with _LOCK:
        if key in _CHECKED:
            return
    from ..base import fresh_copy as clone

    s, y, grid = probe_rows(120, kind, seed=0)
    w = np.ones(len(s))
    worst = 0.0
    try:
        with plugin_errors(calibrator, "fit"):
            for pieces in (5, 4):
                found = reduction_disagreement(lambda: clone(calibrator), s, y, w, kind, grid, pieces)
                if found is None:
                    break
                worst = max(worst, found)
    except CalengineError:
        return  # the probe rows do not suit it (its own one-line refusal): the real fit will say so
    if worst > REDUCTION_ATOL:
        raise PluginError(
            f"{describe(calibrator)} (plugin code from {distribution_of(cls)}) is unusable on a partitioned"
            f" table: its reduction protocol (partial_stats/merge_stats/reduction_step) fits a map up to"
            f" {worst:.3g} away from its own fit on the same 120 rows; report it to the plugin's authors"
            " (calengine.testing.check_calibrator shows it), or choose another method", parameter="method")
    with _LOCK:
        _CHECKED[key] = None
