"""Sums that do not depend on how a table was cut: fixed-point accumulation.

Why: evaluation reduces a grouped table (distinct predicted values with their weighted positives and
negatives) that may live in score ranges on several workers.  ``np.sum`` of per-value terms over the
whole table and the same terms summed range by range differ in their last bits, because float
addition is not associative, so a metric would change with the number of workers.  Every sum a
metric needs is therefore taken in fixed point against a *scale* that every piece knows in advance
(the table's total weight, or a bound derived from it):

* :func:`fixed_sum` / :func:`fixed_sum_bins`: each term ``t`` becomes ``t / scale`` in units of
  ``2**-62``, held as two integer limbs of 31 bits (``floor`` and the rounded remainder), and the
  limbs are added as integers, which is associative.  Pieces' sums merge by integer addition, and
  :func:`fixed_to_float` rounds the total once, correctly.  The per-term error is ``scale * 2**-63``
  (plus the rounding of ``t / scale`` itself, relative 2**-53 of the term), so a sum of ``n`` terms is
  within ``n * scale * 2**-63`` of the exact sum of the terms: 1e-12 of ``scale`` at 10^7 values.
  Limbs are added as float64 (``np.sum``/``np.bincount``), exactly, in blocks of at most
  :data:`BLOCK` terms, so every partial sum stays below 2**53.  A binned sum whose bins are in order
  (a sorted table's bins are runs of its values) adds each bin's run with ``np.add.reduceat``, a
  fraction of ``np.bincount``'s cost: exact sums of the same limbs, so the same integers.
* :func:`fixed_units`: one int64 limb in units of ``scale * 2**-52``, for *prefix* sums (the path of
  cumulative calibration differences behind KS and Kuiper, cumulative weights when weights are
  fractional): integer prefix sums are exact, so a cumulative quantity at any value is the same
  whichever piece computed it, given the integer prefix of the pieces before it.

Counts that are integers need none of this: their sums and prefixes are exact int64 already.
"""

from __future__ import annotations

import numpy as np

__all__ = ["fixed_sum", "fixed_sum_counts", "fixed_sum_rows", "fixed_sum_bins", "fixed_sum_binnings",
           "fixed_sum_binnings_terms", "fixed_sum_bins_of", "fixed_sum_bins_of_terms", "fixed_to_float", "fixed_units",
           "bin_counts", "FIXED_BITS", "SUM_BITS"]

#: fixed-point resolution of :func:`fixed_units`: a term equal to ``scale`` is 2**52 units.
FIXED_BITS = 52

#: resolution of :func:`fixed_sum`: a term equal to ``scale`` is 2**62 units (two limbs of 31 bits).
SUM_BITS = 62
_HALF = 31
_LIMB = float(1 << _HALF)

#: terms per block: a block's limb sums stay exact in float64 (2**22 terms of at most 2**31).
BLOCK = 1 << 22


def _limbs(t, scale: float):
    x = np.asarray(t, dtype=np.float64).reshape(-1) * (_LIMB / scale)
    hi = np.floor(x)
    np.subtract(x, hi, out=x)  # in place: this runs on every term of every sum
    np.multiply(x, _LIMB, out=x)
    np.rint(x, out=x)
    return hi, x


def fixed_sum(t, scale: float) -> int:
    """``Σ t`` in units of ``scale * 2**-62`` (a Python int; see the module docstring).  ``scale``
    must be positive and the same for every piece whose sums are added."""
    t = np.asarray(t, dtype=np.float64).reshape(-1)
    total = 0
    for start in range(0, t.size, BLOCK):
        hi, lo = _limbs(t[start:start + BLOCK], scale)
        total += (int(np.sum(hi)) << _HALF) + int(np.sum(lo))
    return total


#: rows per block of :func:`fixed_sum_counts`: a limb (< 2**31, plus one) times a 16-bit piece of a
#: count is below 2**47, so a block's products add up below 2**63 in int64
_COUNT_BLOCK = 1 << 15


def fixed_sum_counts(t, counts, scale: float) -> int:
    """``Σ counts_i · t_i`` in the units of :func:`fixed_sum`, for non-negative integer ``counts``
    (int64, below 2**53): each term's limbs times its count, added as integers.

    Why: a row of count 2 must add exactly what the row given twice adds to :func:`fixed_sum`
    (``fixed_sum(t * counts)`` would round ``2 t`` once instead of ``t`` twice).  The counts are cut
    into 16-bit pieces so every block's products stay exact in int64."""
    t = np.asarray(t, dtype=np.float64).reshape(-1)
    c = np.asarray(counts, dtype=np.int64).reshape(-1)
    if t.size == 0:
        return 0
    hi, lo = _limbs(t, scale)
    pad = -t.size % _COUNT_BLOCK
    hi = np.pad(hi.astype(np.int64), (0, pad)).reshape(-1, _COUNT_BLOCK)
    lo = np.pad(lo.astype(np.int64), (0, pad)).reshape(-1, _COUNT_BLOCK)
    c = np.pad(c, (0, pad)).reshape(-1, _COUNT_BLOCK)
    total, shift = 0, 0
    top = int(c.max())
    while top >> shift:
        piece = (c >> shift) & 0xFFFF
        high = sum(np.einsum("ij,ij->i", hi, piece).tolist())
        low = sum(np.einsum("ij,ij->i", lo, piece).tolist())
        total += ((high << _HALF) + low) << shift
        shift += 16
    return total


def fixed_sum_rows(t, scale: float) -> list[int]:
    """:func:`fixed_sum` of each row of the 2-d array ``t`` (at most :data:`BLOCK` columns): the same
    integers, with the limbs of all rows taken in a few array operations."""
    hi, lo = _limbs(t, scale)
    hi, lo = hi.reshape(t.shape), lo.reshape(t.shape)
    return [(int(h) << _HALF) + int(low) for h, low in zip(np.sum(hi, axis=1).tolist(), np.sum(lo, axis=1).tolist())]


def fixed_sum_bins(index, t, scale: float, n_bins: int) -> list[int]:
    """Per-bin :func:`fixed_sum` of ``t`` grouped by ``index`` (ints in ``0..n_bins-1``)."""
    return fixed_sum_binnings([(index, n_bins)], t, scale)[0]


def fixed_sum_binnings(binnings, t, scale: float) -> list[list[int]]:
    """:func:`fixed_sum_bins` of ``t`` for each ``(index, n_bins)`` of ``binnings``: the limbs of the
    terms are taken once for all of them (a sweep bins the same terms several ways)."""
    return fixed_sum_binnings_terms(binnings, [t], scale)[0]


def fixed_sum_binnings_terms(binnings, terms, scale: float) -> list[list[list[int]]]:
    """:func:`fixed_sum_binnings` of each term array of ``terms`` (``out[term][binning]``): whether an
    index is in order, and where its bins' runs start, is found once for all the terms (a sweep
    bins three terms two ways)."""
    terms = [np.asarray(t, dtype=np.float64).reshape(-1) for t in terms]
    binnings = [(np.asarray(index, dtype=np.intp).reshape(-1), int(n_bins)) for index, n_bins in binnings]
    outs = [[[0] * n_bins for _, n_bins in binnings] for _ in terms]
    size = terms[0].size if terms else 0
    for start in range(0, size, BLOCK):
        runs = [_runs_of(index[start:start + BLOCK], n_bins) for index, n_bins in binnings]
        for out, t in zip(outs, terms):
            hi, lo = _limbs(t[start:start + BLOCK], scale)
            exact_runs = max(-float(hi.min()), float(hi.max())) * hi.size < 2.0**53 if hi.size else False
            for j, (index, n_bins) in enumerate(binnings):
                if runs[j] is not None and exact_runs:
                    h, l = _sum_runs(runs[j], hi, n_bins), _sum_runs(runs[j], lo, n_bins)
                else:
                    h, l = _limb_bins(index[start:start + BLOCK], hi, lo, n_bins)
                totals = _totals(h, l)
                out[j] = totals if start == 0 else [o + x for o, x in zip(out[j], totals)]
    return outs


def fixed_sum_bins_of(pairs, scale: float, n_bins: int) -> list[int]:
    """``Σ fixed_sum_bins(index, t, scale, n_bins)`` over the ``(index, t)`` of ``pairs``, per bin: the
    same integers (a sum of integers), with the pairs' limb sums added as int64 arrays before they
    become Python ints (the smooth ECE's grid bins two shares of every term, on grids of thousands
    of points)."""
    pairs = [(np.asarray(index, dtype=np.intp).reshape(-1), np.asarray(t, dtype=np.float64).reshape(-1))
             for index, t in pairs]
    if any(t.size > BLOCK for _, t in pairs):
        parts = [fixed_sum_bins(index, t, scale, n_bins) for index, t in pairs]
        return [sum(x) for x in zip(*parts)]
    h = l = np.zeros(n_bins, dtype=np.int64)
    for index, t in pairs:
        dh, dl = _limb_bins(index, *_limbs(t, scale), n_bins)
        h, l = h + dh, l + dl  # each below 2**53 (exact float sums of a block): no int64 overflow
    return _totals(h, l)


def fixed_sum_bins_of_terms(indices, terms, scale: float, n_bins: int) -> list[list[int]]:
    """``[fixed_sum_bins_of(list(zip(indices, ts)), scale, n_bins) for ts in terms]``: the same integers,
    each index's order checked and its bins' runs found once for all the terms (the smooth ECE's grid
    bins the two shares of three terms by the same two indices; checking and searching the runs anew
    for each was a quarter of its cost)."""
    indices = [np.asarray(index, dtype=np.intp).reshape(-1) for index in indices]
    terms = [[np.asarray(t, dtype=np.float64).reshape(-1) for t in ts] for ts in terms]
    if any(t.size > BLOCK for ts in terms for t in ts):
        return [fixed_sum_bins_of(list(zip(indices, ts)), scale, n_bins) for ts in terms]
    runs = [_runs_of(index, n_bins) for index in indices]
    out = []
    for ts in terms:
        h = l = np.zeros(n_bins, dtype=np.int64)
        for index, r, t in zip(indices, runs, ts):
            hi, lo = _limbs(t, scale)
            # _run_sums' conditions: a non-decreasing index, and every partial sum of hi exact
            if r is not None and max(-float(hi.min()), float(hi.max())) * index.size < 2.0**53:
                dh, dl = _sum_runs(r, hi, n_bins), _sum_runs(r, lo, n_bins)
            else:
                dh, dl = _limb_bins(index, hi, lo, n_bins)
            h, l = h + dh, l + dl  # each below 2**53 (exact float sums of a block): no int64 overflow
        out.append(_totals(h, l))
    return out


def _limb_bins(index, hi, lo, n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-bin sums of the limbs ``hi`` and ``lo`` grouped by ``index`` as int64 arrays: the runs of a
    non-decreasing index added (:func:`_run_sums`), else ``np.bincount`` (exact: below 2**53)."""
    runs = _run_sums(index, hi, lo, n_bins)
    if runs is None:
        # indices past n_bins - 1 are left out, as the runs leave them
        runs = (np.bincount(index, weights=hi, minlength=n_bins)[:n_bins].astype(np.int64),
                np.bincount(index, weights=lo, minlength=n_bins)[:n_bins].astype(np.int64))
    return runs


def _totals(h: np.ndarray, lo: np.ndarray) -> list[int]:
    """``(h << 31) + lo`` per bin as Python ints: in int64 when no bin can leave its range (``|h| <
    2**31``, ``|lo| < 2**62``), else one Python int at a time."""
    if not h.size or (int(np.max(np.abs(h))) < 1 << _HALF and int(np.max(np.abs(lo))) < 1 << 62):
        return ((h << _HALF) + lo).tolist()
    return [(x << _HALF) + y for x, y in zip(h.tolist(), lo.tolist())]


def _run_sums(idx, hi, lo, n_bins: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The per-bin sums of the limbs ``hi`` and ``lo`` (as int64 arrays) when ``idx`` is non-negative and
    non-decreasing, each bin a run of terms (then ``np.add.reduceat`` adds the runs); None otherwise,
    or when ``hi`` is too large for every partial sum to be exact in float64 in any order (``lo`` is
    below 2**31 and a block at most :data:`BLOCK` terms).  Indices past ``n_bins - 1`` are left out,
    as :func:`fixed_sum_bins`' ``np.bincount`` path leaves them."""
    if not idx.size or idx[0] < 0 or bool(np.any(idx[1:] < idx[:-1])):
        return None
    if not max(-float(hi.min()), float(hi.max())) * idx.size < 2.0**53:
        return None
    return _reduce_runs(idx, hi, n_bins), _reduce_runs(idx, lo, n_bins)


def _reduce_runs(index, values, n_bins: int) -> np.ndarray:
    """Per-bin sums of ``values`` (as int64) for a non-decreasing, non-negative ``index``: each bin's
    terms are one run, added by ``np.add.reduceat``; indices past ``n_bins - 1`` are left out."""
    return _sum_runs(_run_starts(index, n_bins), values, n_bins)


def _runs_of(index, n_bins: int):
    """:func:`_run_starts` of ``index`` when it is non-negative and non-decreasing, else None."""
    if not index.size or index[0] < 0 or bool(np.any(index[1:] < index[:-1])):
        return None
    return _run_starts(index, n_bins)


def _run_starts(index, n_bins: int) -> tuple:
    """Where the runs of the occupied bins of a non-decreasing ``index`` start: ``(live, starts, end)``,
    the occupied bins' mask, their runs' first positions and the end of the last one."""
    edges = np.searchsorted(index, np.arange(n_bins + 1), side="left")
    live = edges[1:] > edges[:-1]
    return live, edges[:-1][live], int(edges[-1])


def _sum_runs(runs: tuple, values, n_bins: int) -> np.ndarray:
    """Per-bin sums of ``values`` over the runs of :func:`_run_starts`, as int64."""
    live, starts, end = runs
    out = np.zeros(n_bins, dtype=values.dtype)
    if starts.size:
        # each live bin's run ends where the next live bin's starts (the bins between are empty)
        out[live] = np.add.reduceat(values[:end], starts)
    return out.astype(np.int64)


def bin_counts(index, counts, n_bins: int) -> list[int]:
    """Per-bin sums of integer ``counts`` (int64) grouped by ``index`` (ints in ``0..n_bins-1``), as
    Python ints: ``np.bincount(index, weights=counts)`` as the kernels took it (exact below 2**53),
    with a non-decreasing index (a sorted table's bins) the runs added as int64 instead."""
    index = np.asarray(index, dtype=np.intp).reshape(-1)
    counts = np.asarray(counts).reshape(-1)
    if (counts.dtype == np.int64 and index.size and 0 <= index[0] and index[-1] < n_bins
            and not bool(np.any(index[1:] < index[:-1]))):
        return _reduce_runs(index, counts, n_bins).tolist()
    return np.bincount(index, weights=counts.astype(np.float64), minlength=n_bins).astype(np.int64).tolist()


def fixed_to_float(total: int, scale: float) -> float:
    """A :func:`fixed_sum` total as the float64 nearest to ``total * scale * 2**-62``."""
    if not total or scale == 0.0:
        return 0.0
    m, e = np.frexp(scale)
    mant = int(m * 9007199254740992.0)  # scale = mant * 2**(e - 53), exactly
    shift = SUM_BITS + 53 - int(e)
    num = total * mant
    return num / (1 << shift) if shift >= 0 else float(num * (1 << -shift))


def fixed_units(x, scale: float) -> np.ndarray:
    """``x`` in int64 units of ``scale * 2**-52``, rounded to the nearest unit.

    Prefix sums of the result are exact, so a cumulative quantity evaluated at any value is the same
    however the table was cut; ``scale`` should be a global bound on ``Σ |x|`` (known before the pass),
    which keeps every prefix below 2**52 plus the number of terms."""
    x = np.asarray(x, dtype=np.float64)
    if scale <= 0.0:
        return np.zeros(x.shape, dtype=np.int64)
    return np.rint(x * (float(1 << FIXED_BITS) / scale)).astype(np.int64)
