"""Grouped tables: the sufficient statistic of every evaluation metric, and how they are cut and merged.

A grouped table of one probability column is three arrays of one length: the sorted distinct values
``v`` of the column, and per value the weight of the rows at that value that have the event
(``pos``) and that do not (``neg``).  Unweighted rows, and rows whose weights are all integers, are
counted in int64, so merging tables is exact in any order; fractional weights make the counts
float64 (merging then adds floats, in the order the pieces are merged: chunk order, on every
scheduler).  Every metric of :mod:`calengine.metrics` is a function of these tables (AUC with ties,
the Flach-Matsubara split, CORP's isotonic recalibration, equal-count bins, KS and Kuiper on the
cumulative differences, the Cox fit of the outcome on logit(p), ...), which is why one structure
serves the whole suite.

A table can be cut into *score ranges* (:func:`cut_points`): range ``r`` holds the values ``v`` with
``b_{r-1} <= v < b_r`` for strictly increasing boundaries, so a range never splits a value group and
ranges are in increasing value order.  The same boundaries cut every chunk's table, and the pieces of
one range from all chunks merge into that range's table (:func:`merge_tables`, in chunk order).
:class:`~calengine.metrics.measures.MetricAccumulator` builds and merges its tables with these functions;
:mod:`calengine.metrics.ranged.suite` reads them as lists of ranges.
"""

from __future__ import annotations

import numpy as np

__all__ = ["empty_table", "group_rows", "row_keys", "group_keys", "merge_tables", "merge_all", "cut_points", "slice_range",
           "is_integral", "as_counts", "complementary", "mirror_table", "binary_top"]


def empty_table():
    return np.empty(0, np.float64), np.empty(0, np.int64), np.empty(0, np.int64)


def as_counts(w) -> np.ndarray:
    """Weights as counts: int64 when every weight is an integer (exact merges), else float64."""
    w = np.asarray(w, dtype=np.float64)
    return w.astype(np.int64) if is_integral(w) else w


def is_integral(w: np.ndarray) -> bool:
    return bool(w.size == 0 or (np.all(w == np.floor(w)) and np.max(w) < 2.0**53))


def _sort_order(values, kind, integral: bool):
    """The order that sorts ``values``: ``np.argsort(values, kind=kind)``, or another sorting order
    where that cannot change a sum (``integral``: integer counts add up alike in any order).

    Non-negative floats without ``-0.0`` (probabilities, as every table holds) sort as their int64 bit
    patterns in a stable sort, about twice as fast and the same permutation as a stable float sort."""
    if (kind == "stable" or integral) and values.size and not np.signbit(values).any():
        return np.argsort(values.view(np.int64), kind="stable")
    return np.argsort(values, kind=kind)


def _collapse(values, pos, neg, kind=None):
    """Sum ``pos``/``neg`` over equal ``values``; the three arrays sorted by value.  ``kind="stable"``
    suits concatenations of sorted tables (the merge case); equal values are added in input order."""
    dtype = np.result_type(pos.dtype, neg.dtype)
    if values.size == 0:
        return np.empty(0, np.float64), np.empty(0, dtype), np.empty(0, dtype)
    order = _sort_order(values, kind, dtype.kind != "f")
    v = values[order]
    new = v[1:] != v[:-1]
    if new.all():  # every value distinct (continuous scores): nothing to add up
        return v, pos[order].astype(dtype, copy=False), neg[order].astype(dtype, copy=False)
    starts = np.flatnonzero(np.concatenate(([True], new)))
    return (v[starts], np.add.reduceat(pos[order], starts).astype(dtype, copy=False),
            np.add.reduceat(neg[order], starts).astype(dtype, copy=False))


def row_keys(values: np.ndarray, is_pos: np.ndarray) -> np.ndarray:
    """Unweighted rows as sortable int64 keys ``bits(value) << 1 | is_pos`` (``-0.0`` read as ``0.0``):
    for probabilities (non-negative floats, whose bit patterns order as the floats do, and below
    2**62) sorting the keys sorts the rows by value, so :func:`group_keys` groups a batch, or a
    whole chunk's batches at once, with one plain integer sort instead of an indirect one.
    Values must lie in [0, 1] (the accumulator validates them)."""
    bits = (np.asarray(values, dtype=np.float64) + 0.0).view(np.int64)
    return (bits << 1) | np.asarray(is_pos, dtype=np.int64)


def group_keys(keys) -> tuple:
    """The grouped table of rows given as :func:`row_keys` (one array or a list of arrays): the same
    three arrays as :func:`group_rows` of those rows, unweighted."""
    k = np.sort(np.concatenate(keys) if isinstance(keys, list) else keys)
    if k.size == 0:
        return empty_table()
    v = (k >> 1).view(np.float64)
    pos = k & 1
    new = v[1:] != v[:-1]
    if new.all():
        return v, pos, 1 - pos
    starts = np.flatnonzero(np.concatenate(([True], new)))
    a = np.add.reduceat(pos, starts)
    return v[starts], a, np.diff(np.append(starts, k.size)) - a


def group_rows(values: np.ndarray, is_pos: np.ndarray, weight: np.ndarray | None = None):
    """Grouped table of one batch: ``values`` (n,) floats (``-0.0`` is read as ``0.0``), ``is_pos`` (n,)
    booleans, ``weight`` (n,) non-negative counts (int64 or float64, see :func:`as_counts`) or None."""
    values = np.asarray(values, dtype=np.float64) + 0.0
    if weight is None:
        if values.size and values.min() >= 0.0 and values.max() <= 1.0:
            return group_keys(row_keys(values, is_pos))
        pos = is_pos.astype(np.int64)
        return _collapse(values, pos, 1 - pos)
    w = np.asarray(weight)
    zero = np.zeros(1, dtype=w.dtype)
    return _collapse(values, np.where(is_pos, w, zero), np.where(is_pos, zero, w))


def complementary(P: np.ndarray) -> bool:
    """Whether a batch of binary probabilities ``P`` (n, 2) has ``P[:, 0] == 1 - P[:, 1]`` exactly on every
    row (in float64, as :func:`mirror_table` computes it): then its class-0 and top-label tables are
    functions of its class-1 table and need not be grouped (a sigmoid, isotonic or any calibrator that
    returns ``1 - p`` for class 0 gives such batches; a renormalised row may miss by an ulp and does not)."""
    return P.shape[1] == 2 and bool(np.array_equal(P[:, 0], 1.0 - P[:, 1]))


def mirror_table(table):
    """The class-0 table of integer-count rows whose class-1 table is ``table``, for rows with
    ``P[:, 0] == 1 - P[:, 1]`` (:func:`complementary`): values ``1 - v`` (``-0.0`` read as ``0.0``) in
    increasing order, events and non-events swapped.  ``1 - v`` rounds, so neighbouring distinct ``v``
    (below 0.5) can meet on one value: those groups are added (integer counts: exact in any order).
    Non-increasing in ``v``, so a reversal sorts it and equal values are adjacent: no sort."""
    v, a, b = table
    m = (1.0 - v[::-1]) + 0.0
    pos, neg = b[::-1], a[::-1]
    if m.size == 0:
        return m, pos.copy(), neg.copy()
    new = m[1:] != m[:-1]
    if new.all():
        return m, pos.copy(), neg.copy()
    starts = np.flatnonzero(np.concatenate(([True], new)))
    return m[starts], np.add.reduceat(pos, starts), np.add.reduceat(neg, starts)


def binary_top(table):
    """The top-label table (confidence ``max(P[:, 0], P[:, 1])``, correct / wrong) of integer-count rows
    whose class-1 table is ``table``, for rows with ``P[:, 0] == 1 - P[:, 1]`` (:func:`complementary`).

    The predicted class is the argmax with ties to class 0: class 1 exactly when ``v > 0.5`` (then
    ``1 - v < 0.5 < v`` without rounding), the confidence ``v`` and a row correct when it is an event; at
    ``v <= 0.5`` class 0 with confidence ``1 - v >= 0.5``, correct when it is a non-event: the mirror of the
    lower half (:func:`mirror_table`) merged with the upper half."""
    v = table[0]
    cut = int(np.searchsorted(v, 0.5, side="right"))
    return merge_all([mirror_table(tuple(x[:cut] for x in table)), tuple(x[cut:] for x in table)])


def merge_tables(a, b):
    """Union of two grouped tables, the counts of equal values added (``a``'s first)."""
    dtype = np.result_type(a[1].dtype, b[1].dtype)
    if a[0].size == 0 or b[0].size == 0:
        t = b if a[0].size == 0 else a
        return t if t[1].dtype == dtype else (t[0], t[1].astype(dtype), t[2].astype(dtype))
    return _collapse(np.concatenate((a[0], b[0])), np.concatenate((a[1], b[1])), np.concatenate((a[2], b[2])),
                     kind="stable")


def merge_all(tables):
    """Union of integer-count tables in one stable sort: what :func:`merge_tables` gives merging them
    one after the other (integer sums do not depend on their order; float counts must be merged in
    order with :func:`merge_tables`)."""
    tables = [t for t in tables if t[0].size]
    if len(tables) <= 1:
        return tables[0] if tables else empty_table()
    return _collapse(*(np.concatenate([t[i] for t in tables]) for i in range(3)), kind="stable")


def cut_points(table, boundaries) -> np.ndarray:
    """Indices cutting a sorted table at ``boundaries`` (R - 1 increasing values): range ``r`` is
    ``table[idx[r]:idx[r + 1]]`` (R + 1 indices, first 0, last the table's size)."""
    v = table[0]
    inner = np.searchsorted(v, np.asarray(boundaries, dtype=np.float64), side="left")
    return np.concatenate(([0], inner, [v.size])).astype(np.intp)


def slice_range(table, lo: int, hi: int):
    """Own copies of entries ``lo:hi`` (a piece Dask may spill frees its memory)."""
    return table[0][lo:hi].copy(), table[1][lo:hi].copy(), table[2][lo:hi].copy()
