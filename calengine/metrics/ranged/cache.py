"""A per-process cache of the score ranges an evaluation reads from its scratch directory, and of the
arrays the metric kernels derive from them, bounded by a byte budget.

Why: ``evaluate`` of a large table runs dozens of passes over each table's ranges (the first and
second passes of every metric, about ten Newton rounds of each logistic calibration fit), one task
per range and pass (:mod:`calengine.metrics.ranged.engine`).  Without a cache every task read its range
from disk again and every kernel recomputed what only depends on the range: the integer counts, and
for each Newton round of the calibration fits the logit basis (two logarithms and the spline's cubes
per value, a third of a round's work).  Here a range file is read once per process while it stays
cached, and a kernel asks its range for such arrays with :func:`derived`.

On a cluster the ranges are files in the workers' local directories (:mod:`calengine.metrics.ranged.workers`),
read by tasks on the worker holding them, so each worker's cache serves its own ranges the same way
(py-spy of a 10M-row ``evaluate --cluster`` without a cache: the logit bases, their spline cubes and
the counts were a quarter of the workers' busy samples).

Memory stays bounded: the cache holds at most :data:`RANGE_CACHE_BYTES` of ranges and derived arrays
(the ranges and their memos counted by ``nbytes``).  Passes sweep the ranges of one table in order,
over and over (the Newton rounds), a pattern under which least-recently-used eviction never hits
once a table outgrows the budget; so room is made by evicting ranges of *other* tables first (least
recently used first), and a range of the table being swept that does not fit is used uncached: the
first ranges of the table stay and every later pass hits them.  Cached arrays are read-only (a
kernel that wrote into one would change the next pass's input: it raises instead).

The cache never changes a result: a kernel gets the same arrays, computed by the same code, whether
they were cached or not.  ``evaluate`` drops its entries (:func:`forget`) before its scratch
directory goes away.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict

import numpy as np

__all__ = ["RANGE_CACHE_BYTES", "RangeCache", "CachedRange", "derived", "cached_range", "forget"]

#: the byte budget of this process's cache (ranges plus derived arrays, about 100 bytes a value): at 10M
#: rows a swept table's ranges and their derived arrays take about 1 GB, so its first half stays cached.
#: The cache fills after the chunks are evaluated, the phase that sets the peak memory of ``evaluate``.
RANGE_CACHE_BYTES = 512 << 20

_RANGE_SUFFIX = re.compile(r"-r\d+$")


def _nbytes(value, shared=()) -> int:
    """Bytes of the arrays in ``value``, not counting those that are in ``shared`` (a derived array
    may be the range's own, e.g. counts that were int64 already)."""
    if isinstance(value, np.ndarray):
        return 0 if any(value is x for x in shared) else int(value.nbytes)
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(x, shared) for x in value)
    return 0


def _frozen(value):
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif isinstance(value, (tuple, list)):
        for x in value:
            _frozen(x)
    return value


class CachedRange(tuple):
    """A range ``(v, pos, neg)`` as its cache hands it out: a tuple (kernels unpack it as any table)
    that also keeps arrays derived from it (:func:`derived`) while the cache admits them."""

    def __new__(cls, table, path: str, cache: "RangeCache"):
        self = super().__new__(cls, tuple(_frozen(np.asarray(x)) for x in table))
        self.path, self.cache, self.derived = path, cache, {}
        return self

    def memo(self, key, compute):
        with self.cache.lock:
            if key in self.derived:
                return self.derived[key]
        value = _frozen(compute())
        self.cache.admit(self, key, value)
        return value


def derived(table, key, compute):
    """``compute()``, an array (or tuple of arrays) that depends only on ``table`` and ``key``, kept on
    ``table`` when it is a :class:`CachedRange` (else computed every time: an in-memory table)."""
    memo = getattr(table, "memo", None)
    return compute() if memo is None else memo(key, compute)


class RangeCache:
    """Ranges loaded from ``.npy`` files by path, and their derived arrays, within ``budget`` bytes
    (see the module docstring for the eviction order).  Thread-safe: the tasks of a pass share it."""

    def __init__(self, budget: int) -> None:
        self.budget, self.used = int(budget), 0
        self.lock = threading.Lock()
        self._ranges: OrderedDict[str, CachedRange] = OrderedDict()
        self._sizes: dict[str, int] = {}

    def get(self, path: str, load) -> tuple:
        """The range stored at ``path``: cached, or ``load(path)`` (then cached if it fits)."""
        with self.lock:
            hit = self._ranges.get(path)
            if hit is not None:
                self._ranges.move_to_end(path)
                return hit
        table = CachedRange(load(path), path, self)
        with self.lock:
            if path in self._ranges:
                return self._ranges[path]
            size = _nbytes(tuple(table))
            if self._make_room(path, size):
                self._ranges[path] = table
                self._sizes[path] = size
                self.used += size
        return table

    def admit(self, table: CachedRange, key, value) -> None:
        """Keep ``value`` as ``table``'s ``key`` if ``table`` is cached and room can be made."""
        size = _nbytes(value, tuple(table))
        with self.lock:
            if self._ranges.get(table.path) is not table or key in table.derived:
                return
            if self._make_room(table.path, size):
                table.derived[key] = value
                self._sizes[table.path] += size
                self.used += size

    def _make_room(self, path: str, size: int) -> bool:
        """Evict ranges of other tables (least recently used first) until ``size`` more bytes fit."""
        if size > self.budget:
            return False
        table = _RANGE_SUFFIX.sub("", path)
        while self.used + size > self.budget:
            victim = next((p for p in self._ranges if _RANGE_SUFFIX.sub("", p) != table), None)
            if victim is None:
                return False
            self._evict(victim)
        return True

    def _evict(self, path: str) -> None:
        self._ranges.pop(path).derived.clear()
        self.used -= self._sizes.pop(path)

    def forget(self, directory: str) -> None:
        """Drop every range stored under ``directory`` (its files are about to go)."""
        prefix = os.path.join(os.path.abspath(directory), "")
        with self.lock:
            for path in [p for p in self._ranges if os.path.abspath(p).startswith(prefix)]:
                self._evict(path)

    def __len__(self) -> int:
        return len(self._ranges)


_CACHE = RangeCache(RANGE_CACHE_BYTES)


def cached_range(path: str, load) -> tuple:
    """The range at ``path`` from this process's cache (``load(path)`` reads it on a miss)."""
    return _CACHE.get(path, load)


def forget(directory: str) -> None:
    """Drop this process's cached ranges stored under ``directory``."""
    _CACHE.forget(directory)

