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

__all__ = ["fixed_sum", "fixed_sum_counts", "fixed_sum_rows", "fixed_sum_bins", "fixed_sum_binnings", "fixed_to_float", "fixed_units",
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
    t = np.asarray(t, dtype=np.float64).reshape(-1)
    binnings = [(np.asarray(index, dtype=np.intp).reshape(-1), int(n_bins)) for index, n_bins in binnings]
    outs = [[0] * n_bins for _, n_bins in binnings]
    for start in range(0, t.size, BLOCK):
        hi, lo = _limbs(t[start:start + BLOCK], scale)
        for j, (index, n_bins) in enumerate(binnings):
            idx = index[start:start + BLOCK]
            runs = _run_sums(idx, hi, lo, n_bins)
            if runs is None:
                # the bins' limb sums are exact integers below 2**53: as int64, then Python ints per bin
                # (a comprehension over lists: the logit histogram has thousands of bins per range)
                runs = (np.bincount(idx, weights=hi, minlength=n_bins).astype(np.int64).tolist(),
                        np.bincount(idx, weights=lo, minlength=n_bins).astype(np.int64).tolist())
            outs[j] = [o + (h << _HALF) + low for o, h, low in zip(outs[j], *runs)]
    return outs


def _run_sums(idx, hi, lo, n_bins: int) -> tuple[list, list] | None:
    """The per-bin sums of the limbs ``hi`` and ``lo`` (as int lists) when ``idx`` is non-negative and
    non-decreasing, each bin a run of terms (then ``np.add.reduceat`` adds the runs); None otherwise,
    or when ``hi`` is too large for every partial sum to be exact in float64 in any order (``lo`` is
    below 2**31 and a block at most :data:`BLOCK` terms).  Indices past ``n_bins - 1`` are left out,
    as :func:`fixed_sum_bins`' ``np.bincount`` path leaves them."""
    if not idx.size or idx[0] < 0 or bool(np.any(idx[1:] < idx[:-1])):
        return None
    if not max(-float(hi.min()), float(hi.max())) * idx.size < 2.0**53:
        return None
    return _reduce_runs(idx, hi, n_bins).tolist(), _reduce_runs(idx, lo, n_bins).tolist()


def _reduce_runs(index, values, n_bins: int) -> np.ndarray:
    """Per-bin sums of ``values`` (as int64) for a non-decreasing, non-negative ``index``: each bin's
    terms are one run, added by ``np.add.reduceat``; indices past ``n_bins - 1`` are left out."""
    edges = np.searchsorted(index, np.arange(n_bins + 1), side="left")
    live = edges[1:] > edges[:-1]
    out = np.zeros(n_bins, dtype=values.dtype)
    if live.any():
        # each live bin's run ends where the next live bin's starts (the bins between are empty)
        out[live] = np.add.reduceat(values[:edges[-1]], edges[:-1][live])
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
