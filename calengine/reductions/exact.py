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

Sums with no scale known in advance (a fit's class weights, a weighted histogram, Newton's sums over
rows; issue 43 §1) are :class:`ExactSums`: :func:`exact_sum`, :func:`exact_sums`, :func:`exact_sum_bins`.
Each piece's sum is exact (integer limbs on one global grid of powers of two, fine enough for any
float64), pieces merge by integer addition, and :meth:`ExactSums.to_float` rounds the total once,
correctly, as :func:`math.fsum` does: any partition and order of the terms gives the same float.
Their cost beside ``np.sum``/``np.bincount``: ``benchmarks/bench_exact_sums.py``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["fixed_sum", "fixed_sum_counts", "fixed_sum_rows", "fixed_sum_bins", "fixed_sum_binnings",
           "fixed_sum_binnings_terms", "fixed_sum_bins_of", "fixed_sum_bins_of_terms", "fixed_to_float", "fixed_units",
           "bin_counts", "FIXED_BITS", "SUM_BITS", "ExactSums", "exact_sum", "exact_sums", "exact_sum_bins"]

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


# ---------------------------------------------------------------------------------------------------
# scale-free exact sums: floats of any magnitude, no scale known in advance

#: the grid of :class:`ExactSums`: limb ``k`` counts units of ``2**(_GRID0 + 31 k)``; ``2**-1074`` (the
#: smallest subnormal) divides every float64, so the lowest limb holds any float's last bits
_GRID0 = -1074
_GRID = 31
#: terms per block of :func:`exact_sums` / :func:`exact_sum_bins`: a level's integers are at most
#: ``2**30 + 1`` in magnitude, so 2**21 of them add up exactly in float64 (below 2**52)
_EXACT_BLOCK = 1 << 21
#: terms from this magnitude on are added in float beside the exact sum: rounding one to a level
#: could pass the largest float
_EXACT_MAX = 2.0**1023


class ExactSums:
    """Exact sums of float64 terms, one per bin, that add by integer arithmetic (:meth:`__add__`), so a
    sum does not depend on how its terms were cut into pieces or in which order the pieces merge.

    Why: a fit that sums float weights or per-row terms (Platt's Newton sums, a weighted histogram)
    piece by piece and adds the pieces in float gets last bits that depend on the cut, and Newton's
    stopping rules carry such bits into the model.  Fixed point (:func:`fixed_sum`) needs a scale every
    piece knows in advance; weights have none.  Here each bin's sum is held as integer limbs on a
    global grid of powers of two (limb ``j`` in units of ``2**(-1074 + 31 (k0 + j))``), wide enough for
    any float64 term, and :meth:`to_float` rounds the exact total once, correctly (as
    :func:`math.fsum` does).  Non-finite terms, and finite ones of magnitude 2**1023 or more, are added
    in float beside (``inf``/``nan`` arithmetic is order-free; two huge terms of one sign overflow in
    any order), and the result is non-finite if any term was.

    Sparse: only the bins whose sum is not zero are held (``rows``, increasing, with their ``limbs``:
    int64 ``(len(rows), L)``), so a histogram of 40,960 cells of which a piece fills a few thousand
    travels and merges at the size of those.  After :meth:`_normalized` every limb but the last lies
    in ``[0, 2**31)`` and the last carries the sign.

    Carries are deferred: :meth:`__add__` adds limbs without propagating them (``loose`` counts the
    normalised sums added in since the last propagation) and propagates only every
    :data:`_LOOSE_ADDS` additions.  Why: a fit merges one piece per fragment into a running total, and
    propagating the carries of the total's ~40,000 bins at every merge was 60 % of a 1,000-fragment
    sigmoid fit.  The limbs stand for the same exact value either way (:meth:`to_float` reads any
    limbs), and each normalised limb is below 2**32 in magnitude, so 2**20 of them stay far below
    int64's range.
    """

    __slots__ = ("n_bins", "rows", "k0", "limbs", "special", "loose")
    __array_ufunc__ = None  # ``array + ExactSums`` is not elementwise: numpy defers to __radd__

    def __init__(self, n_bins: int, rows: np.ndarray, k0: int, limbs: np.ndarray, special: np.ndarray | None = None,
                 loose: int = 0):
        self.n_bins = int(n_bins)
        self.rows = rows
        self.k0 = int(k0)
        self.limbs = limbs
        self.special = special
        self.loose = int(loose)

    def __reduce__(self):
        return (ExactSums, (self.n_bins, self.rows, self.k0, self.limbs, self.special, self.loose))

    def __add__(self, other: "ExactSums") -> "ExactSums":
        if isinstance(other, (int, float)) and other == 0:
            return self
        if not isinstance(other, ExactSums):
            return NotImplemented
        if other.n_bins != self.n_bins:
            raise ValueError(f"cannot add exact sums of {self.n_bins} and {other.n_bins} bins")
        a, b = self, other
        if not a.limbs.size:
            return _with_special(b, a.special)
        if not b.limbs.size:
            return _with_special(a, b.special)
        loose = a.loose + b.loose + 1
        if a.rows.size < b.rows.size:
            a, b = b, a  # add the smaller into the larger
        lo = min(a.k0, b.k0)
        top = max(a.k0 + a.limbs.shape[1], b.k0 + b.limbs.shape[1])
        if a.k0 == lo and a.k0 + a.limbs.shape[1] == top and _within(b.rows, a.rows):
            rows, out, adds = a.rows, a.limbs.copy(), (b,)  # b's bins and limbs within a's: no re-layout
        else:
            rows = np.union1d(a.rows, b.rows)
            out, adds = np.zeros((rows.size, top - lo), dtype=np.int64), (a, b)
        for x in adds:
            out[np.searchsorted(rows, x.rows), x.k0 - lo:x.k0 - lo + x.limbs.shape[1]] += x.limbs
        total = ExactSums(self.n_bins, rows, lo, out, None, loose)
        if loose >= _LOOSE_ADDS:
            total = total._normalized()
        return _with_special(total, a.special, b.special)

    __radd__ = __add__

    def _normalized(self) -> "ExactSums":
        """Carries propagated (every limb but the last in ``[0, 2**31)``), bins whose sum is zero and
        zero limbs at either end dropped; the values are unchanged."""
        # each limb's bins contiguous for the carry pass, and one more limb for the top's carry
        by_limb = np.zeros((self.limbs.shape[1] + 1, self.limbs.shape[0]), dtype=np.int64)
        by_limb[:-1] = self.limbs.T
        for j in range(by_limb.shape[0] - 1):
            carry = by_limb[j] >> _GRID  # floor division: negative limbs borrow
            by_limb[j] -= carry << _GRID
            by_limb[j + 1] += carry
        limbs = by_limb.T
        nonzero = limbs != 0
        keep = np.any(nonzero, axis=1)
        live = np.flatnonzero(np.any(nonzero, axis=0))
        if not live.size:
            return ExactSums(self.n_bins, self.rows[:0], 0, limbs[:0, :0], self.special)
        limbs = limbs[:, live[0]:live[-1] + 1]
        if not keep.all():
            return ExactSums(self.n_bins, self.rows[keep], self.k0 + int(live[0]), limbs[keep], self.special)
        return ExactSums(self.n_bins, self.rows, self.k0 + int(live[0]), np.ascontiguousarray(limbs), self.special)

    def to_float(self) -> np.ndarray:
        """Each bin's exact sum rounded once to the nearest float64 (ties to even), as ``math.fsum``."""
        out = np.zeros(self.n_bins)
        shift = _GRID0 + _GRID * self.k0
        for i, row in zip(self.rows.tolist(), self.limbs.tolist()):
            n = 0
            for v in reversed(row):
                n = (n << _GRID) + v
            out[i] = _int_times_pow2(n, shift)
        if self.special is not None:
            with np.errstate(invalid="ignore", over="ignore"):
                out = out + self.special
        return out

    def __repr__(self) -> str:
        return f"ExactSums({self.to_float().tolist()!r})"


#: additions a running :class:`ExactSums` takes before its carries are propagated (see its docstring)
_LOOSE_ADDS = 1 << 20


def _within(small: np.ndarray, big: np.ndarray) -> bool:
    """Whether every value of the increasing ``small`` is in the increasing ``big``."""
    if not small.size:
        return True
    at = np.searchsorted(big, small)
    return bool(at[-1] < big.size and np.array_equal(big[np.minimum(at, big.size - 1)], small))


def _with_special(x: ExactSums, *specials) -> ExactSums:
    parts = [s for s in (x.special, *specials) if s is not None]
    if not parts or (len(parts) == 1 and x.special is not None):
        return x
    total = parts[0]
    with np.errstate(invalid="ignore", over="ignore"):
        for s in parts[1:]:
            total = total + s
    return ExactSums(x.n_bins, x.rows, x.k0, x.limbs, total, x.loose)


def _int_times_pow2(n: int, shift: int) -> float:
    """``n * 2**shift`` correctly rounded to float64 (CPython's int true division and int-to-float
    conversion round correctly, subnormals included); ``±inf`` past the largest float."""
    try:
        return float(n << shift) if shift >= 0 else n / (1 << -shift)
    except OverflowError:
        return math.inf if n > 0 else -math.inf


def exact_sums(terms) -> ExactSums:
    """:class:`ExactSums` of each array of ``terms`` (one bin per array, e.g. a Newton step's objective,
    gradient and Hessian sums)."""
    parts = [_exact_levels(np.asarray(t, dtype=np.float64).reshape(-1), None, 1) for t in terms]
    return _stack(parts)


def exact_sum(t) -> ExactSums:
    """:class:`ExactSums` of one bin: ``Σ t`` exactly (``.to_float()[0]`` is ``math.fsum(t)``)."""
    return exact_sums([t])


def exact_sum_bins(index, t, n_bins: int) -> ExactSums:
    """Per-bin :class:`ExactSums` of ``t`` grouped by ``index`` (ints in ``0..n_bins-1``)."""
    return _exact_levels(np.asarray(t, dtype=np.float64).reshape(-1), np.asarray(index, dtype=np.intp).reshape(-1),
                         int(n_bins))


def _stack(parts: list[ExactSums]) -> ExactSums:
    """One :class:`ExactSums` whose bins are the bins of ``parts`` in order."""
    n_bins = sum(p.n_bins for p in parts)
    special = None
    if any(p.special is not None for p in parts):
        special = np.concatenate([p.special if p.special is not None else np.zeros(p.n_bins) for p in parts])
    live = [p for p in parts if p.limbs.size]
    if not live:
        return ExactSums(n_bins, np.zeros(0, dtype=np.intp), 0, np.zeros((0, 0), dtype=np.int64), special)
    lo = min(p.k0 for p in live)
    hi = max(p.k0 + p.limbs.shape[1] for p in live)
    rows, blocks, offset = [], [], 0
    for p in parts:
        if p.limbs.size:
            block = np.zeros((p.rows.size, hi - lo), dtype=np.int64)
            block[:, p.k0 - lo:p.k0 - lo + p.limbs.shape[1]] = p.limbs
            rows.append(p.rows + offset)
            blocks.append(block)
        offset += p.n_bins
    return ExactSums(n_bins, np.concatenate(rows), lo, np.concatenate(blocks), special)


def _exact_levels(t: np.ndarray, index, n_bins: int) -> ExactSums:
    """The exact per-bin sums of ``t`` (``index`` None: one bin), block by block: each block's terms are
    peeled into levels on the global grid, from the top down -- at level ``q`` every residual is
    rounded to a multiple of ``2**q`` (an integer ``n`` of at most 31 bits times ``2**q``), the
    integers are added (exactly, in float64), and ``t - n 2**q`` (exact) is left for the next level
    -- until no residual is left; the last possible level, ``2**-1074``, takes every float exactly.

    Blocks of one sum are small (2**16 terms: a level's passes run in the cache, on two buffers
    allocated once); a binned sum's blocks are large (a bincount allocates its cells)."""
    levels: dict[int, np.ndarray] = {}
    parts = []  # flushed level totals, and the float sums of non-finite terms
    block = _SMALL_BLOCK if index is None else _EXACT_BLOCK
    buffers = (np.empty(min(block, t.size)), np.empty(min(block, t.size)))
    for n_blocks, start in enumerate(range(0, t.size, block)):
        if n_blocks and n_blocks % 1024 == 0:  # a level's int64 total stays below 2**62
            parts.append(_from_levels(levels, n_bins, None))
            levels = {}
        tb = t[start:start + block]
        ib = None if index is None else index[start:start + block]
        special = _exact_block(tb, ib, n_bins, buffers, levels)
        if special is not None:
            parts.append(ExactSums(n_bins, np.zeros(0, dtype=np.intp), 0, np.zeros((0, 0), dtype=np.int64),
                                      special))
    total = _from_levels(levels, n_bins, None)
    for x in parts:
        total = total + x
    return total


def _from_levels(levels: dict, n_bins: int, special) -> ExactSums:
    """The :class:`ExactSums` whose bins hold ``Σ_k levels[k] 2**(-1074 + 31 k)`` (int64 arrays)."""
    if not levels:
        return ExactSums(n_bins, np.zeros(0, dtype=np.intp), 0, np.zeros((0, 0), dtype=np.int64), special)
    k_lo, k_hi = min(levels), max(levels)
    rows = np.arange(n_bins)
    if n_bins > 1:  # only the bins some level reached (a histogram's pieces fill a few of its cells)
        occupied = np.zeros(n_bins, dtype=bool)
        for v in levels.values():
            occupied |= v != 0
        rows = np.flatnonzero(occupied)
    limbs = np.zeros((rows.size, k_hi - k_lo + 3), dtype=np.int64)  # two limbs for the carries
    for k, v in levels.items():
        limbs[:, k - k_lo] += v[rows]
    return ExactSums(n_bins, rows, k_lo, limbs, special)._normalized()


#: terms per block of a one-bin sum (see :func:`_exact_levels`)
_SMALL_BLOCK = 1 << 16


def _top_level(top: float) -> int:
    """The smallest grid index ``k`` with ``top <= 2**(q_k + 30)``: a level's integers stay within 2**30."""
    return max(0, -(-(math.frexp(top)[1] - 30 - _GRID0) // _GRID))


def _exact_block(t: np.ndarray, index, n_bins: int, buffers, levels: dict):
    """Add the level sums of the block ``t`` (see :func:`_exact_levels`) to ``levels`` (grid index ->
    int64 per bin); return the float sums per bin of its non-finite or huge terms, or None."""
    special = None
    top = max(-float(t.min()), float(t.max())) if t.size else 0.0
    if not top < _EXACT_MAX:  # nan, inf, or a term within a rounding of the largest float
        # non-finite terms, and finite ones within a rounding of the largest float, are added in float
        # beside: inf/nan arithmetic does not depend on the order, and two of the huge ones of one sign
        # overflow in any order (of opposite signs their difference may round by the order)
        bad = ~(np.abs(t) < _EXACT_MAX)
        with np.errstate(invalid="ignore", over="ignore"):
            special = (np.array([float(np.sum(t[bad]))]) if index is None
                       else np.bincount(index[bad], weights=t[bad], minlength=n_bins)[:n_bins])
        t = np.where(bad, 0.0, t)
        top = float(np.max(np.abs(t))) if t.size else 0.0
    if top == 0.0:
        return special
    k = _top_level(top)
    r, idx = t, index
    hi_buf, r_buf = (b[:t.size] for b in buffers)
    while True:
        q = _GRID0 + _GRID * k
        if q <= 971:
            # r rounded to a multiple of 2**q in two float operations: r + C lies in C's binade, whose
            # spacing is 2**q (|r| <= 2**(q + 30) < 2**(q + 51)), so the addition rounds r there, once
            magic = 1.5 * 2.0 ** (q + 52)
            hi = np.add(r, magic, out=hi_buf[:r.size])
            np.subtract(hi, magic, out=hi)
            # multiples of 2**q below 2**(q + 31) in magnitude: every partial sum is exact
            s = np.sum(hi) if idx is None else np.bincount(idx, weights=hi, minlength=n_bins)[:n_bins]
            v = np.rint(np.ldexp(np.asarray(s, dtype=np.float64).reshape(-1), -q)).astype(np.int64)
            levels[k] = levels[k] + v if k in levels else v
        else:  # the magic constant would overflow: scale exactly with ldexp instead
            n = np.rint(np.ldexp(r, -q))
            s = np.sum(n) if idx is None else np.bincount(idx, weights=n, minlength=n_bins)[:n_bins]
            v = np.asarray(s, dtype=np.float64).reshape(-1).astype(np.int64)
            levels[k] = levels[k] + v if k in levels else v
            hi = np.ldexp(n, q)
        if k == 0:
            break
        r = np.subtract(r, hi, out=r_buf[:r.size])  # exact: the residual is below 2**(q - 1)
        live = int(np.count_nonzero(r))
        if not live:
            break
        k -= 1
        if live < r.size // 4:  # most terms are done: carry on with the rest only
            keep = np.flatnonzero(r)
            r = r[keep]
            idx = None if idx is None else idx[keep]
            # small residuals (tiny terms): skip the levels above the largest of them
            k = min(k, _top_level(max(-float(r.min()), float(r.max()))))
    return special
