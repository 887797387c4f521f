"""Exact order statistics of grouped scores spread over fragments: a partition reduction.

Why: a split-conformal threshold is the ``k``-th smallest calibration score of its group (weighted: the
smallest score whose cumulative weight reaches a target), and at calengine's scale the scores of one
group are spread over hundreds of fragments on several workers.  Nothing here depends on how the rows
were cut: every number the client combines is an integer count, an integer fixed-point weight sum, a
minimum or a maximum -- all associative and commutative -- so embedded, ``--cluster`` and any
partitioning give the same thresholds, bit for bit.

The protocol (a search on the bit patterns of the scores):

1. **blocks** (:func:`sorted_block`, one per fragment): the fragment's ``(group, score, weight)`` rows
   sorted by group, then by the score's order-preserving 64-bit key (:func:`order_keys`: ``a < b`` as
   floats exactly when ``key(a) < key(b)`` as unsigned integers); :func:`block_summary` returns per group
   the row count, the smallest and largest key and the largest weight.
2. **rounds** (:class:`Selection` on the client, :func:`block_query` on each block): the client holds,
   per group, disjoint key ranges that tile the group's scores, each with the exact mass below it and
   in it.  A round asks every block, for each range still to be narrowed, how many rows (and how much
   weight) fall in each of ``s`` equal sub-ranges of its keys, with their smallest and largest key --
   a ``searchsorted`` per sub-range on the sorted block, so a round reads a few pages of each block,
   not its rows -- or, for a range of a few rows, the keys themselves.  The client adds the counts
   and takes the minima and maxima, keeps the non-empty sub-ranges (shrunk to their smallest and
   largest key, so ties and gaps cost nothing) and asks again, until the range holding each target
   is a single value.  With ``s`` up to 65,536 a target is found in a handful of rounds.
3. **knots**: the same rounds narrow every range holding more than ``1 / resolution`` of a group's
   mass, so the final ranges give a table of (score, exact mass below it) with no gap heavier than
   that between consecutive knots: conservative conformal p-values within ``1 / resolution``
   (:meth:`Selection.knots`), exact at the threshold.

Weights are summed in fixed point: each weight becomes two 31-bit integer limbs of ``w / scale`` (the
scheme of :func:`calengine.reductions.exact.fixed_sum`, ``scale`` a power of two at least the largest
weight, so integer and dyadic weights are exact) and the limbs' prefix sums are integers; a
sub-range's weight is a difference of prefix sums, the same integer whichever block holds the rows.

The in-memory oracle is a sort (:func:`calengine.methods.conformal.threshold`); the tests cut random
tables into random fragments and check that the thresholds and knots equal it, and each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["order_keys", "key_values", "SortedBlock", "sorted_block", "block_summary", "merge_summaries",
           "block_query", "merge_answers", "Selection", "weight_scale", "MAX_SPLITS", "COLLECT_ROWS",
           "DEFAULT_RESOLUTION", "EXACT"]

_SIGN = np.uint64(1 << 63)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
#: the most sub-ranges one range is cut into in a round
MAX_SPLITS = 1 << 16
#: sub-range queries a round asks at most (over every range being narrowed)
ROUND_BUDGET = 1 << 18
#: a range of at most this many rows is resolved by collecting its keys instead of cutting it
COLLECT_ROWS = 64
#: knots per group by default: no gap between knots holds more than 1/1024 of the group's mass
DEFAULT_RESOLUTION = 1024
#: a group's ``resolution`` meaning "every distinct score is a knot" (exact p-values)
EXACT = -1
_HALF = 31
_LIMB = float(1 << _HALF)
#: the most rows the int64 limb sums can hold (each limb of a term is below 2**31)
MAX_ROWS = 1 << 32


def order_keys(values) -> np.ndarray:
    """Order-preserving uint64 keys of finite float64 values: ``a < b`` exactly when ``key(a) <
    key(b)``, and ``-0.0`` has the key of ``0.0``."""
    v = np.asarray(values, dtype=np.float64) + 0.0  # -0.0 -> 0.0
    bits = v.view(np.uint64)
    negative = (bits & _SIGN) != 0
    return np.where(negative, ~bits, bits | _SIGN)


def key_values(keys) -> np.ndarray:
    """The float64 values of :func:`order_keys` keys (its inverse)."""
    k = np.asarray(keys, dtype=np.uint64)
    positive = (k & _SIGN) != 0
    return np.where(positive, k & ~_SIGN, ~k).view(np.float64)


def weight_scale(largest: float) -> float:
    """The fixed-point scale of weights whose largest is ``largest``: the smallest power of two at least
    that large (so every weight is at most the scale and integer weights are exact)."""
    if not largest > 0:
        return 1.0
    m, e = math.frexp(float(largest))
    return math.ldexp(1.0, e if m > 0.5 else e - 1)


def _limbs(w: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """``w / scale`` as two integer limbs of 31 bits (``hi * 2**31 + lo`` in units of ``2**-62``)."""
    x = np.asarray(w, dtype=np.float64) * (_LIMB / scale)
    hi = np.floor(x)
    lo = np.rint((x - hi) * _LIMB)
    return hi.astype(np.int64), lo.astype(np.int64)


def fixed_total(hi: int, lo: int) -> int:
    return (int(hi) << _HALF) + int(lo)


# ---------------------------------------------------------------------------------------------- blocks


@dataclass
class SortedBlock:
    """One fragment's rows sorted by ``(group, key)``: group ``g``'s keys are ``keys[offsets[g]:offsets[g + 1]]``
    in increasing order; ``weights`` aligned with them (None: every row weighs 1)."""

    keys: np.ndarray
    offsets: np.ndarray
    weights: np.ndarray | None = None

    @property
    def n_groups(self) -> int:
        return int(self.offsets.shape[0] - 1)


def sorted_block(scores, groups, n_groups: int, weights=None) -> SortedBlock:
    """The :class:`SortedBlock` of rows ``(groups[i], scores[i], weights[i])``; rows of group ``-1`` or of
    weight 0 are left out (they count for no group).  ``scores`` must be finite."""
    keys = order_keys(scores)
    g = np.asarray(groups, dtype=np.int64).reshape(-1)
    w = None if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
    keep = g >= 0
    if w is not None:
        keep &= w > 0
    if not keep.all():
        keys, g = keys[keep], g[keep]
        w = None if w is None else w[keep]
    if n_groups == 1:
        if w is None:
            keys = np.sort(keys)
        else:
            order = np.argsort(keys, kind="stable")
            keys, w = keys[order], w[order]
    else:
        order = np.argsort(keys, kind="stable")
        small = np.int16 if n_groups <= np.iinfo(np.int16).max else np.int32
        order = order[np.argsort(g[order].astype(small), kind="stable")]  # radix: O(n)
        keys, g = keys[order], g[order]
        w = None if w is None else w[order]
    offsets = np.searchsorted(g, np.arange(n_groups + 1), side="left").astype(np.int64) if n_groups > 1 \
        else np.array([0, keys.size], dtype=np.int64)
    return SortedBlock(np.ascontiguousarray(keys), offsets, None if w is None else np.ascontiguousarray(w))


@dataclass
class Summary:
    """Per group: rows, smallest and largest key (``MAX`` / 0 for a group without rows) and the largest weight."""

    counts: np.ndarray
    mins: np.ndarray
    maxs: np.ndarray
    max_weight: float = 0.0


def block_summary(block: SortedBlock) -> Summary:
    off = block.offsets
    counts = np.diff(off)
    present = counts > 0
    mins = np.full(block.n_groups, _ALL, dtype=np.uint64)
    maxs = np.zeros(block.n_groups, dtype=np.uint64)
    if block.keys.size:
        mins[present] = block.keys[off[:-1][present]]
        maxs[present] = block.keys[off[1:][present] - 1]
    mw = float(block.weights.max()) if block.weights is not None and block.weights.size else 0.0
    return Summary(counts.astype(np.int64), mins, maxs, mw)


def merge_summaries(parts) -> Summary:
    parts = list(parts)
    return Summary(np.sum([p.counts for p in parts], axis=0), np.min([p.mins for p in parts], axis=0),
                   np.max([p.maxs for p in parts], axis=0), max(p.max_weight for p in parts))


# ---------------------------------------------------------------------------------------------- rounds


@dataclass
class Request:
    """A round's questions: range ``i`` of group ``groups[i]`` covers keys ``[starts[first[i]], his[i]]``
    cut at ``starts[first[i]:first[i + 1]]`` (sub-range ``j`` from ``starts[j]`` to the next start - 1, the
    last to ``his[i]``); ranges listed in ``collect`` want their keys instead (one start, no cuts)."""

    groups: np.ndarray
    first: np.ndarray
    starts: np.ndarray
    his: np.ndarray
    collect: np.ndarray
    scale: float = 1.0

    @property
    def n_ranges(self) -> int:
        return int(self.groups.shape[0])


@dataclass
class Answer:
    """One block's (or, merged, every block's) answer to a :class:`Request`: per sub-range its rows,
    weight limbs (None unweighted), smallest and largest key; and the collected ranges' keys with their
    range index (and weight limbs)."""

    counts: np.ndarray
    w_hi: np.ndarray | None
    w_lo: np.ndarray | None
    mins: np.ndarray
    maxs: np.ndarray
    got_range: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    got_keys: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))
    got_hi: np.ndarray | None = None
    got_lo: np.ndarray | None = None


def block_query(block: SortedBlock, req: Request) -> Answer:
    """This block's :class:`Answer` to ``req`` (runs in tasks; reads a few pages of a memory-mapped block
    per sub-range, all of a collected range's keys)."""
    keys = block.keys
    off = block.offsets
    n_sub = req.starts.shape[0]
    pos = np.empty(n_sub + 1, dtype=np.int64)  # start position of each sub-range; pos[end of range]
    ends = np.empty(req.n_ranges, dtype=np.int64)
    for g in np.unique(req.groups):
        ranges = np.flatnonzero(req.groups == g)
        lo_g, hi_g = int(off[g]), int(off[g + 1])
        seg = keys[lo_g:hi_g]
        subs = np.concatenate([np.arange(req.first[r], req.first[r + 1]) for r in ranges])
        pos[subs] = lo_g + np.searchsorted(seg, req.starts[subs], side="left")
        ends[ranges] = lo_g + np.searchsorted(seg, req.his[ranges], side="right")
    # the end of sub-range j is the start of j + 1, or the range's end for the last one
    nxt = np.empty(n_sub, dtype=np.int64)
    nxt[:-1] = pos[1:n_sub]
    last = req.first[1:] - 1
    nxt[last] = ends
    start = pos[:n_sub]
    counts = nxt - start
    live = counts > 0
    mins = np.full(n_sub, _ALL, dtype=np.uint64)
    maxs = np.zeros(n_sub, dtype=np.uint64)
    mins[live] = keys[start[live]]
    maxs[live] = keys[nxt[live] - 1]
    w_hi = w_lo = None
    H = L = None
    if block.weights is not None:
        hi, lo = _limbs(block.weights, req.scale)
        H = np.concatenate(([0], np.cumsum(hi)))
        L = np.concatenate(([0], np.cumsum(lo)))
        w_hi, w_lo = H[nxt] - H[start], L[nxt] - L[start]
    ans = Answer(counts, w_hi, w_lo, mins, maxs)
    if req.collect.size:
        parts_r, parts_k, parts_h, parts_l = [], [], [], []
        for r in req.collect:
            j = req.first[r]
            a, b = int(start[j]), int(nxt[j])
            if b > a:
                parts_r.append(np.full(b - a, r, dtype=np.int64))
                parts_k.append(keys[a:b])
                if H is not None:
                    parts_h.append(np.diff(H[a:b + 1]))
                    parts_l.append(np.diff(L[a:b + 1]))
        if parts_r:
            ans.got_range = np.concatenate(parts_r)
            ans.got_keys = np.concatenate(parts_k).astype(np.uint64)
            if H is not None:
                ans.got_hi, ans.got_lo = np.concatenate(parts_h), np.concatenate(parts_l)
    return ans


def merge_answers(answers) -> Answer:
    """The blocks' answers combined: sums, minima, maxima and the collected keys joined (any order)."""
    answers = list(answers)
    first = answers[0]
    weighted = first.w_hi is not None
    out = Answer(
        np.sum([a.counts for a in answers], axis=0),
        np.sum([a.w_hi for a in answers], axis=0) if weighted else None,
        np.sum([a.w_lo for a in answers], axis=0) if weighted else None,
        np.min([a.mins for a in answers], axis=0), np.max([a.maxs for a in answers], axis=0),
    )
    got = [a for a in answers if a.got_keys.size]
    if got:
        out.got_range = np.concatenate([a.got_range for a in got])
        out.got_keys = np.concatenate([a.got_keys for a in got])
        if weighted:
            out.got_hi = np.concatenate([a.got_hi for a in got])
            out.got_lo = np.concatenate([a.got_lo for a in got])
    return out


# ---------------------------------------------------------------------------------------------- client


@dataclass
class _Range:
    """Keys ``[lo, hi]`` of one group holding ``count`` rows of mass ``mass``; ``below`` the group's mass
    under ``lo``.  ``lo``/``hi`` are the smallest and largest key present once a round has seen the range."""

    lo: int
    hi: int
    count: int
    mass: int
    below: int
    exact: bool = False  # lo and hi are keys present (a round or the summary saw them)

    @property
    def single(self) -> bool:
        return self.exact and self.lo == self.hi


class Selection:
    """The client's side of the protocol (module docstring), for ``n_groups`` groups.

    ``summary``: the blocks' merged :class:`Summary`; ``weighted``: masses are weights (else counts);
    ``targets(totals)``: called once every group's total mass is known (an int per group, counts or
    fixed-point weights), returns ``[(group, tau), ...]``: find the smallest key whose mass at or below
    it is at least ``tau``.  ``resolution``: per group, the knots' largest gap as a share of its mass
    (0: no knots beyond the targets).  Use :meth:`request` / :meth:`absorb` until :meth:`request` returns
    None, then :meth:`found` and :meth:`knots`.
    """

    def __init__(self, summary: Summary, targets, weighted: bool = False, resolution: int | list = DEFAULT_RESOLUTION):
        self.weighted = weighted
        self.scale = weight_scale(summary.max_weight) if weighted else 1.0
        self.n_groups = int(summary.counts.shape[0])
        if int(summary.counts.sum()) >= MAX_ROWS:
            from ..errors import DataError

            raise DataError(f"conformal calibration takes at most {MAX_ROWS:,} rows; calibrate on a sample of the table")
        self._targets_of = targets
        self.resolution = list(resolution) if isinstance(resolution, (list, tuple, np.ndarray)) \
            else [int(resolution)] * self.n_groups
        self.ranges: list[list[_Range]] = []
        for g in range(self.n_groups):
            n = int(summary.counts[g])
            if n == 0:
                self.ranges.append([])
                continue
            r = _Range(int(summary.mins[g]), int(summary.maxs[g]), n, n, 0, exact=True)
            self.ranges.append([r])
        self.totals: list[int] | None = None if weighted else [int(c) for c in summary.counts]
        self.targets: list[tuple[int, int]] | None = None
        if not weighted:
            self._set_targets()
        self._pending: list[tuple[int, int, str]] | None = None  # (group, index in ranges, "split"/"collect")
        self.rounds = 0

    def _set_targets(self) -> None:
        self.targets = [(int(g), int(tau)) for g, tau in self._targets_of(list(self.totals))]

    # ------------------------------------------------------------------ rounds
    def _wanted(self, g: int, r: _Range) -> bool:
        if r.count == 0:
            return False
        if self.totals is None:  # weighted, before the first round: every range (the totals come with it)
            return True
        if r.single:
            return False
        total = self.totals[g]
        res = self.resolution[g]
        if res == EXACT or (res and r.mass * res > total):
            return True
        return any(tg == g and r.below < tau <= r.below + r.mass for tg, tau in self.targets)

    def request(self) -> Request | None:
        """The next round's :class:`Request`, or None when every target and knot is resolved."""
        todo = [(g, i) for g in range(self.n_groups) for i, r in enumerate(self.ranges[g]) if self._wanted(g, r)]
        if not todo:
            self._pending = None
            return None
        cut = [(g, i) for g, i in todo if self.ranges[g][i].count > COLLECT_ROWS or self.totals is None]
        splits = max(2, min(MAX_SPLITS, ROUND_BUDGET // max(1, len(cut))))
        groups, first, his, collect, pending, pieces = [], [0], [], [], [], []
        for g, i in todo:
            r = self.ranges[g][i]
            width = r.hi - r.lo + 1
            if r.count <= COLLECT_ROWS and self.totals is not None:
                cuts = [r.lo]
                collect.append(len(groups))
                kind = "collect"
            else:
                cuts = _cuts(r.lo, width, min(splits, width))
                kind = "split"
            groups.append(g)
            pieces.append(np.asarray(cuts, dtype=np.uint64))
            first.append(first[-1] + len(cuts))
            his.append(r.hi)
            pending.append((g, i, kind))
        self._pending = pending
        return Request(np.asarray(groups, dtype=np.int64), np.asarray(first, dtype=np.int64),
                       np.concatenate(pieces), np.asarray(his, dtype=np.uint64),
                       np.asarray(collect, dtype=np.int64), self.scale)

    def _mass(self, count: int, hi: int | None, lo: int | None) -> int:
        return fixed_total(hi, lo) if self.weighted else int(count)

    def absorb(self, req: Request, ans: Answer) -> None:
        """Replace each range of the last request by its non-empty sub-ranges (or its collected keys)."""
        self.rounds += 1
        replaced: dict[tuple[int, int], list[_Range]] = {}
        for idx, (g, i, kind) in enumerate(self._pending):
            r = self.ranges[g][i]
            below = r.below
            new: list[_Range] = []
            if kind == "collect":
                mine = np.flatnonzero(ans.got_range == idx)
                keys = ans.got_keys[mine]
                order = np.argsort(keys, kind="stable")
                keys = keys[order]
                uniq, startpos = np.unique(keys, return_index=True)
                counts = np.diff(np.append(startpos, keys.size))
                if self.weighted:
                    hi_s = np.add.reduceat(ans.got_hi[mine][order], startpos) if keys.size else np.empty(0, np.int64)
                    lo_s = np.add.reduceat(ans.got_lo[mine][order], startpos) if keys.size else np.empty(0, np.int64)
                for j, key in enumerate(uniq.tolist()):
                    m = self._mass(int(counts[j]), hi_s[j] if self.weighted else None, lo_s[j] if self.weighted else None)
                    new.append(_Range(int(key), int(key), int(counts[j]), m, below, exact=True))
                    below += m
            else:
                a, b = int(req.first[idx]), int(req.first[idx + 1])
                live = a + np.flatnonzero(ans.counts[a:b])  # most sub-ranges of a first round are empty
                counts = ans.counts[live].tolist()
                mins, maxs = ans.mins[live].tolist(), ans.maxs[live].tolist()
                his_, los_ = (ans.w_hi[live].tolist(), ans.w_lo[live].tolist()) if self.weighted else (None, None)
                for q, c in enumerate(counts):
                    m = self._mass(c, his_[q] if self.weighted else None, los_[q] if self.weighted else None)
                    new.append(_Range(mins[q], maxs[q], c, m, below, exact=True))
                    below += m
            replaced[(g, i)] = new
        for g in {g for g, _, _ in self._pending}:
            out = []
            for i, r in enumerate(self.ranges[g]):
                out.extend(replaced.get((g, i), [r]))
            self.ranges[g] = out
        if self.totals is None:  # weighted: the first round measured every group whole
            self.totals = [sum(r.mass for r in rs) for rs in self.ranges]
            self._set_targets()
        self._pending = None

    # ------------------------------------------------------------------ results
    def found(self) -> list[tuple[int, int, int] | None]:
        """Per target: ``(key, mass below it, mass at it)`` of its value, or None when ``tau`` exceeds the
        group's total (an infinite threshold)."""
        out = []
        for g, tau in self.targets:
            hit = None
            for r in self.ranges[g]:
                if r.below < tau <= r.below + r.mass:
                    assert r.single, "request() returned None with a target unresolved"
                    hit = (r.lo, r.below, r.mass)
                    break
            out.append(hit)
        return out

    def knots(self, g: int, keep: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
        """Group ``g``'s knot table ``(keys, mass below each key)``: the smallest key of every range with
        the mass below it and the key after its largest with the mass up to it, thinned so that no two
        consecutive knots enclose more than ``1 / resolution`` of the mass unless no knot lies between
        them; ``keep``: keys that stay (the threshold and the key after it).  Mass below a score ``s``
        is at least the mass of the largest knot at or below ``s``: that is the p-values' bound."""
        pairs: dict[int, int] = {}
        for r in self.ranges[g]:
            pairs.setdefault(r.lo, r.below)
            if r.hi + 1 <= int(_ALL):
                pairs[r.hi + 1] = r.below + r.mass
        keys = sorted(pairs)
        masses = [pairs[k] for k in keys]
        # the first key of each run of equal mass bounds every score of the run alike
        kk, mm = [], []
        for k, m in zip(keys, masses):
            if not mm or m != mm[-1]:
                kk.append(k)
                mm.append(m)
        total = self.totals[g] if self.totals else 0
        res = self.resolution[g]
        if res not in (0, EXACT) and len(kk) > 2:
            must = set(keep)
            gap = total / res
            kept = [0]
            for i in range(1, len(kk)):
                if kk[i] in must or i == len(kk) - 1 or mm[i + 1] - mm[kept[-1]] > gap:
                    kept.append(i)
            kk = [kk[i] for i in kept]
            mm = [mm[i] for i in kept]
        return np.asarray(kk, dtype=np.uint64), np.asarray(mm, dtype=object)


def _cuts(lo: int, width: int, s: int) -> np.ndarray:
    """``lo + floor(j * width / s)`` for ``j < s`` (``s <= width <= 2**64``) in uint64 arithmetic: the
    product is split as ``j * (width // s) + (j * (width % s)) // s``, each term below 2**64."""
    j = np.arange(s, dtype=np.uint64)
    q, rem = divmod(width, s)
    with np.errstate(over="ignore"):
        return np.uint64(lo) + j * np.uint64(q) + (j * np.uint64(rem)) // np.uint64(s)


def run_selection(selection: Selection, ask) -> Selection:
    """Drive ``selection`` to the end, ``ask(request)`` returning the merged :class:`Answer` of every block."""
    while True:
        req = selection.request()
        if req is None:
            return selection
        selection.absorb(req, ask(req))
