"""Fitting a calibrator as a reduction: the in-process driver of the protocol on ``Calibrator``.

On a cluster the calibration scores are spread over partitions of a table held by Dask workers.
A calibrator that implements the optional protocol documented on :class:`calengine.base.Calibrator`
is fitted without gathering them: the scores stay on the workers, and each round only small
statistics travel::

    client                                   workers (one task per piece)
    ------                                   ----------------------------
    request = cal.reduction_start(kind)
                     --- request (a small dict) -->
                                             stats_i = cal.partial_stats(s_i, y_i, w_i, request)
                     <-- stats_i (small arrays) ---
    stats = merge_stats(...merge_stats(stats_1, stats_2)..., stats_k)   (fixed order)
    request = cal.reduction_step(stats, request)     # None: cal is fitted
    ...repeat...

A request with ``"sorted": True`` asks for *score ranges*: every piece holds the rows of one interval
of scores, pieces are disjoint and in increasing order, and a group of tied scores is never split.
The engine gets such pieces by choosing boundaries ``b_1 < ... < b_{R-1}`` (e.g. from quantiles of
a sample) and sending each row to piece :func:`range_index` ``(s, b)``; this module's
:func:`sorted_pieces` does the same in one process.  Unsorted requests take the pieces as they are
(table partitions), merged left to right.

:func:`fit_by_reduction` runs the protocol in one process: the tests use it to check that a
reduction gives the same fit for every cutting of the data, the built-in calibrators' ``fit`` runs
it on a single piece (so ``fit`` and the distributed fit are one algorithm), and the engine uses it
as its fallback.  Nothing here needs Dask.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from ..errors import DataError

__all__ = ["fit_by_reduction", "sorted_pieces", "range_index", "Piece"]

#: one piece of calibration data: ``(scores, y, sample_weight or None)``.
Piece = Tuple[Any, Any, Optional[Any]]

_EMPTY = "calibration data is empty; pass at least one example of each class"


def range_index(scores, boundaries) -> np.ndarray:
    """Score range of every score: ``searchsorted(boundaries, s, side="right")``, in ``0..R-1``.

    ``boundaries`` are ``R - 1`` strictly increasing values; range ``r`` holds the scores ``s`` with
    ``b_r <= s < b_{r+1}``.  Equal scores always get the same index, so a range never splits a tie
    group, and ranges are in increasing score order.
    """
    b = np.asarray(boundaries, dtype=np.float64).reshape(-1)
    return np.searchsorted(b, np.asarray(scores, dtype=np.float64), side="right")


def sorted_pieces(scores, y, sample_weight, n_pieces: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Cut ``(scores, y, sample_weight)`` into at most ``n_pieces`` score ranges, increasing.

    Cuts fall near equal row counts and are moved up to the end of a tie group, so ties stay in one
    piece (and a piece may be absorbed by its neighbour).  ``sample_weight`` ``None`` means ones.
    Empty input gives no pieces.
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    yv = np.asarray(y).reshape(-1)
    w = np.ones(s.size) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).reshape(-1)
    if s.size == 0:
        return []
    k = max(1, int(n_pieces))
    order = np.argsort(s, kind="stable")
    ss = s[order]
    # Boundaries: the score at each equal-count position; range_index puts ties on one side.
    pos = (np.arange(1, k) * s.size) // k
    bounds = np.unique(ss[pos[(pos > 0) & (pos < s.size)]])
    bounds = bounds[bounds > ss[0]]
    idx = range_index(ss, bounds)
    cuts = np.flatnonzero(np.diff(idx)) + 1
    return [
        (ss[a:b], yv[order[a:b]], w[order[a:b]])
        for a, b in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [s.size])))
    ]


def _arrays(piece: Piece) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    s, y, w = piece
    s = np.asarray(s)
    y = np.asarray(y)
    w = np.ones(s.shape[0] if s.ndim else 1) if w is None else np.asarray(w)
    return s, y, w


def _concatenate(pieces: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]):
    """The pieces as one ``(s, y, w)``, or ``None`` when they are malformed (validation will say why)."""
    try:
        if any(s.ndim != 1 or y.ndim != 1 or w.ndim != 1 or not (len(s) == len(y) == len(w)) for s, y, w in pieces):
            return None
        s = np.concatenate([p[0] for p in pieces]).astype(np.float64)
        if not np.all(np.isfinite(s)):
            return None
        return s, np.concatenate([p[1] for p in pieces]), np.concatenate([p[2] for p in pieces])
    except (TypeError, ValueError):
        return None


def fit_by_reduction(calibrator, pieces: Sequence[Piece], score_kind: str = "decision", n_classes: int | None = None):
    """Fit ``calibrator`` by its reduction protocol over ``pieces``; returns the calibrator.

    ``pieces`` is a list of ``(scores, y, sample_weight)`` (weight ``None``: ones).  Unsorted requests
    see the non-empty pieces as given, merged left to right; sorted requests see all rows re-cut into
    ``len(pieces)`` score ranges by :func:`sorted_pieces` (the same cut in every round).  If
    ``reduction_start`` returns ``None`` the calibrator is fitted with ``fit`` on the concatenation.
    Raises :class:`calengine.errors.DataError` when every piece is empty.

    ``n_classes``: the matrix form of a multiclass scaling (``Calibrator.multiclass``): pieces hold
    ``(n, k)`` scores and class indices, and ``reduction_start`` is called with ``n_classes=k``.
    """
    if n_classes is None:
        request = calibrator.reduction_start(score_kind)
    else:
        request = calibrator.reduction_start(score_kind, n_classes=n_classes)
        if request is None or request.get("sorted"):
            raise TypeError(f"multiclass calibrator '{calibrator.name}' must start an unsorted reduction")
    given = [_arrays(p) for p in pieces]
    live = [p for p in given if p[0].ndim == 0 or p[0].shape[0] > 0]
    if not live:
        raise DataError(_EMPTY)
    if request is None:
        whole = _concatenate(live)
        if whole is None:
            whole = live[0] if len(live) == 1 else tuple(np.concatenate([p[k] for p in live]) for k in range(3))
        return calibrator.fit(whole[0], whole[1], sample_weight=whole[2], score_kind=score_kind)
    ranges = None
    while request is not None:
        if request.get("sorted"):
            if ranges is None:
                whole = None if len(pieces) == 1 else _concatenate(live)
                # One piece is one score range as it is; malformed pieces cannot be sorted, so they
                # are handed over as they are and partial_stats rejects them.
                ranges = live if whole is None else sorted_pieces(*whole, len(pieces))
            use = ranges
        else:
            use = live
        stats = None
        for s, y, w in use:
            part = calibrator.partial_stats(s, y, w, request)
            stats = part if stats is None else calibrator.merge_stats(stats, part)
        request = calibrator.reduction_step(stats, request)
    return calibrator
