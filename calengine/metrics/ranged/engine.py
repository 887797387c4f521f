"""Evaluation of a large table in bounded memory: grouped tables partitioned by score range (issue 22 §1).

Why: :class:`~calengine.metrics.measures.MetricAccumulator` keeps every distinct predicted value of
every class column; merged in one process that is three numbers per row and column (4.2 GB at 10M
rows of continuous probabilities).  Here no process ever holds a whole table:

1. **chunks** (:func:`chunk_tables`, one task per chunk of rows): the chunk's accumulators, built as
   ``evaluate`` always built them, are written as ``.npy`` files to the scratch directory when the
   client runs in this process (``spill_dir``), or on a cluster to the local directory of the worker
   that ran the task (:mod:`calengine.metrics.ranged.workers`); only a sketch comes back: each table's
   size and its values at :data:`SKETCH_POINTS` evenly spaced count quantiles;
2. **range cuts** (:func:`range_boundaries`): from the merged sketches, boundaries at equal row counts,
   so each range holds about ``1/R`` of the rows, ``R`` chosen for about :data:`RANGE_VALUES` values per
   range; deterministic for a given table and chunking (no randomness), and results never depend on
   them (the metrics are bit-identical for any cut);
3. **ranges** (:func:`build_range`, one task per table and range): the slices of the chunks' tables
   falling in the range merged in chunk order (exactly as the accumulator merges), written back to
   the scratch directory or to a worker's local directory; a chunk's files are removed as soon as the
   ranges of its tables are written, so scratch holds each table once.  On a cluster a table's ranges
   are built in groups of consecutive ranges (:data:`GROUP_BYTES`), each worker's builds reading one
   piece per group of each chunk another worker holds.  A binary model whose rows have
   ``P[:, 0] == 1 - P[:, 1]`` exactly (one calibrator returning ``1 - p``: checked on each chunk's tables,
   :func:`derivable`) keeps only the class-1 table of a chunk: the class-0 and top-label ranges are
   derived from slices of the class-1 ranges (:func:`derive_range`; ``1 - v`` rounds, so each derived
   range reads the class-1 values whose mirror falls in it, found by :func:`mirror_slices`, never a cut
   of class 1 that could split one mirrored value), two tables fewer to group, spill and merge;
   embedded, a derived class-0 range is not even written: its handle names the class-1 range files it
   is derived from again when a kernel reads it (``("derived", ...)``, see :func:`derive_range`);
4. **metrics**: the kernels of :mod:`calengine.metrics.ranged.core_kernels` and :mod:`calengine.metrics.ranged.kernels`
   run as tasks on the ranges (:meth:`RangedTables.mapper`; on a cluster on the worker holding each
   range's file; a range read stays in the process's :mod:`~calengine.metrics.ranged.cache` within
   its byte budget, with the arrays the kernels derive from it) and this process combines
   their small answers
   (:mod:`calengine.metrics.ranged.core`, :mod:`calengine.metrics.ranged.suite`): it holds O(ranges + bins).

Length: past the house's ~600 lines because the chunk, range and derived-range tasks and
:class:`RangedTables` share one storage convention (handles ``("disk", path)`` / ``("mem", arrays)``,
:func:`_save`, :func:`load_table`, the sampled entries of chunk files, which files go when): a split would
spread those rules over modules that import each other.  On a cluster a handle is ``("disk", path,
address)``, the address that of the worker holding the file; the files go, with what the workers
cached of them, when the tables are frozen or the evaluation fails (:meth:`RangedTables.release`).

The scratch directory is the caller's (``evaluate`` uses a :class:`tempfile.TemporaryDirectory` in
``$TMPDIR``, removed on success, error and Ctrl-C).  Integer counts (unweighted rows, integer weights)
give results bit-identical to the in-memory accumulator; fractional weights are counted in integer
units of ``total / 2**52`` of a total added in chunk order, so they agree with it to the last few bits.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import uuid

import numpy as np

from ...tasks.spill import load_npy, save_npy
from . import core_kernels as ck
from .cache import cached_range
from .core import add_lists, core_result, error_reject_at, error_reject_points, ranged_drift
from ...reductions.tables import binary_top, empty_table, merge_all, merge_tables, mirror_table

__all__ = ["RangedTables", "chunk_tables", "range_boundaries", "build_range", "SKETCH_POINTS", "RANGE_VALUES",
           "RANGED_MIN_ROWS", "evaluate_ranged"]

#: count quantiles each chunk reports per table (the sketch the range cuts are chosen from).
SKETCH_POINTS = 256
#: about this many distinct values per range: a range's table is 24 bytes a value (6 MB).
RANGE_VALUES = 250_000
#: at most this many ranges per table.
MAX_RANGES = 512
#: on a cluster, a table's ranges are built in groups of consecutive ranges whose slices of the chunks'
#: tables hold about this many bytes (24 a value): see :func:`calengine.metrics.ranged.workers.ranges_on_workers`.
GROUP_BYTES = 128 << 20
#: ``evaluate`` cuts tables into ranges from this many rows on (with ``--report`` too: its figures are
#: drawn from the ranges, :mod:`calengine.metrics.ranged.curves`): below it one process holds the tables
#: comfortably and the in-memory accumulator needs fewer tasks.
RANGED_MIN_ROWS = 1_000_000

_NAMES = ("value", "pos", "neg")


def _save(table, path: str) -> tuple:
    for name, arr in zip(_NAMES, table):
        save_npy(f"{path}.{name}.npy", arr)  # a full scratch disk is one error line (tasks/spill.py)
    return ("disk", path)


def load_table(handle, lo_value=None, hi_value=None):
    """A stored table, or with bounds only its values in ``[lo_value, hi_value)`` (a range task reads
    its slice of each chunk's table, not the table: see :func:`_read_slice`)."""
    kind, data = handle[0], handle[1]  # a file on a cluster has its worker's address third
    if kind == "disk" and (lo_value is not None or hi_value is not None):
        return _read_slice(data, lo_value, hi_value)
    if kind == "disk":
        arrays = [load_npy(f"{data}.{name}.npy", mmap_mode="r") for name in _NAMES]
    elif kind == "derived":
        arrays = list(_rederived(handle))
    else:
        arrays = list(data)
    if lo_value is None and hi_value is None:
        return tuple(np.array(a) for a in arrays)
    lo, hi = _bounds(arrays[0], lo_value, hi_value)
    return tuple(np.array(a[lo:hi]) for a in arrays)


def _bounds(v, lo_value, hi_value) -> tuple[int, int]:
    return _bounds_by(lambda x: int(np.searchsorted(v, x, side="left")), v.size, lo_value, hi_value)


def _bounds_by(locate, n: int, lo_value, hi_value) -> tuple[int, int]:
    """The positions of ``[lo_value, hi_value)`` (None: unbounded) among ``n`` sorted values, ``locate(x)``
    the first position whose value is at least ``x``."""
    return (0 if lo_value is None else locate(lo_value)), (n if hi_value is None else locate(hi_value))


#: the chunk files this process reads slices of, by path: a sample of their values and where each
#: file's data start.  Each of a table's range tasks reads its slice of every chunk's files: opening
#: them anew per task cost twenty times the read (7,200 maps at 10M rows), so what locating a slice
#: needs is kept.  Not a map of the file: the pages its binary searches touched stayed mapped in this
#: process, and across a table's builds they added up (100M rows on 2 workers: 51 chunk files, 255 MiB
#: of a worker's peak, against 25 MiB at 10M; ``benchmarks/results/evaluate_cluster_s12.md``).
#: Entries go when the chunk's files are removed (:func:`remove_chunk_files`).
LOCATORS: dict = {}
LOCATORS_LOCK = threading.Lock()

#: values between two entries of a file's sample (:func:`_located`): a slice's bound is found in the
#: sample, then in one window of at most this many values read from the file (32 KiB of float64)
SAMPLE_STRIDE = 4096


def _sampled(path: str) -> tuple:
    """``(sample, files, n)`` of the table stored at ``path``: every :data:`SAMPLE_STRIDE`-th value
    (read through a map that goes with this call: a few pages, one a sample value), each array's
    ``(file, data offset, dtype)`` and the number of values."""
    maps = [load_npy(f"{path}.{name}.npy", mmap_mode="r") for name in _NAMES]
    sample = np.array(maps[0][::SAMPLE_STRIDE])
    return sample, [(f"{path}.{name}.npy", m.offset, m.dtype) for name, m in zip(_NAMES, maps)], int(maps[0].size)


def _located(entry: tuple, value) -> int:
    """``np.searchsorted(values, value, side="left")`` over the file of ``entry`` (:func:`_sampled`),
    reading one window of its values: the sample puts the answer after a sampled value below
    ``value`` and at or before the next sampled value, which is at or above it."""
    sample, files, n = entry
    i = int(np.searchsorted(sample, value, side="left"))
    if i == 0:
        return 0
    start, stop = (i - 1) * SAMPLE_STRIDE + 1, min(n, i * SAMPLE_STRIDE)
    f, off, dt = files[0]
    window = np.fromfile(f, dtype=dt, count=stop - start, offset=off + start * dt.itemsize)
    return start + int(np.searchsorted(window, value, side="left"))


def _read_slice(path: str, lo_value, hi_value, keep: bool = True) -> tuple:
    """The values in ``[lo_value, hi_value)`` (None: unbounded) of the table stored at ``path``, read
    from its files.  Without ``keep`` the file's entry is not entered in :data:`LOCATORS`: the reads of
    a derived range's kernels (:func:`_rederived`), which come after the class-1 files' entries were
    dropped."""
    with LOCATORS_LOCK:
        entry = LOCATORS.get(path)
    if entry is None:
        entry = _sampled(path)
        if keep:
            with LOCATORS_LOCK:
                entry = LOCATORS.setdefault(path, entry)
    lo, hi = _bounds_by(lambda x: _located(entry, x), entry[2], lo_value, hi_value)
    return tuple(np.fromfile(f, dtype=dt, count=hi - lo, offset=off + lo * dt.itemsize) for f, off, dt in entry[1])


def _sketch(table) -> dict:
    v, a, b = table
    m = np.asarray(a, dtype=np.float64) + np.asarray(b, dtype=np.float64)
    if v.size == 0:
        return {"size": 0, "values": [], "weight": 0.0}
    cum = np.cumsum(m)
    levels = cum[-1] * (np.arange(1, SKETCH_POINTS + 1) / SKETCH_POINTS)
    idx = np.minimum(np.searchsorted(cum, levels, side="left"), v.size - 1)
    return {"size": int(v.size), "values": v[idx].tolist(), "weight": float(cum[-1]) / SKETCH_POINTS}


def _tables_of(arrays: dict) -> list:
    """A :meth:`MetricAccumulator.to_arrays` dict as its k class tables and the top-label table."""
    ptr = arrays["class_ptr"]
    cls = [(arrays["class_value"][lo:hi], arrays["class_pos"][lo:hi], arrays["class_neg"][lo:hi])
           for lo, hi in zip(ptr[:-1], ptr[1:])]
    return cls + [(arrays["top_value"], arrays["top_correct"], arrays["top_wrong"])]


def chunk_tables(evaluate_chunk, model, chunk, target: str, batch_rows: int, with_raw: bool, cost_matrix, weight,
                 spill_dir: str, index: int) -> dict:
    """One chunk's tables (task): ``{"tables": {kind: [handle per table]}, "sketch": {kind: [...]},
    "n": {kind: n}, "decisions": ...}``; handles are of files in ``spill_dir``.
    ``evaluate_chunk``: :func:`calengine.metrics.table.evaluate_chunk` (passed in: the scores side calls
    this module, not the other way round)."""
    part = evaluate_chunk(model, chunk, target, batch_rows, with_raw, cost_matrix, weight, accumulators=True)
    out = {"tables": {}, "sketch": {}, "n": {}, "decisions": part.get("decisions"), "segments": part.get("segments"),
           "conformal": part.get("conformal")}
    for kind in ("calibrated", "raw"):
        acc = part[kind]
        if acc is None:
            continue
        # a binary chunk whose class-0 and top-label tables are its class-1 table's mirror and merged
        # halves keeps only that table: the others' ranges are derived from its ranges (derive_range).
        # A chunk of complementary batches only is one by construction: its other tables are never
        # built; any other chunk is checked on its tables
        t1 = acc.complementary_table()
        if t1 is not None:
            tables, mirrored, n = [None, t1, None], True, acc.n
        else:
            arrays = acc.to_arrays()
            tables, n = _tables_of(arrays), arrays["n"].item()
            mirrored = derivable(tables)
        out["n"][kind] = n
        out.setdefault("mirrored", {})[kind] = mirrored
        keep = [j == 1 or not mirrored for j in range(len(tables))]
        out["sketch"][kind] = [_sketch(t) if k else None for t, k in zip(tables, keep)]
        out["tables"][kind] = [_save(t, os.path.join(spill_dir, f"c{index}-{kind}-{j}")) if k else None
                               for j, (t, k) in enumerate(zip(tables, keep))]
    return out


def derivable(tables: list) -> bool:
    """Whether a binary chunk's class-0 and top-label tables (integer counts) are those its class-1 table
    gives (:func:`~calengine.reductions.tables.mirror_table`, :func:`~calengine.reductions.tables.binary_top`):
    true of every chunk whose rows have ``P[:, 0] == 1 - P[:, 1]`` exactly.  Checked on the tables
    themselves, so nothing is derived that would differ from the grouped rows in one bit."""
    if len(tables) != 3 or tables[1][1].dtype.kind != "i" or tables[1][2].dtype.kind != "i":
        return False
    return all(_same_table(t, d(tables[1])) for t, d in ((tables[0], mirror_table), (tables[2], binary_top)))


def _same_table(a, b) -> bool:
    return all(x.dtype == z.dtype and np.array_equal(x, z) for x, z in zip(a, b))


def small_part(part: dict) -> dict:
    """What the client needs of a chunk task's result (task): everything but in-memory tables."""
    return {"sketch": part["sketch"], "n": part["n"], "decisions": part["decisions"],
            "mirrored": part.get("mirrored", {}), "segments": part.get("segments"), "conformal": part.get("conformal")}


def range_boundaries(sketches: list[dict], values_per_range: int | None = None) -> list[float]:
    """Strictly increasing boundaries cutting one table into ranges of about equal row counts, from
    the chunks' sketches; ``R = ceil(Σ sizes / values_per_range)`` ranges at most (ties may merge;
    default :data:`RANGE_VALUES`)."""
    values_per_range = RANGE_VALUES if values_per_range is None else values_per_range
    total_size = sum(s["size"] for s in sketches)
    R = int(min(MAX_RANGES, max(1, -(-total_size // max(1, values_per_range)))))
    if R == 1:
        return []
    vals = np.concatenate([np.asarray(s["values"], dtype=np.float64) for s in sketches if s["size"]])
    wts = np.concatenate([np.full(len(s["values"]), s["weight"]) for s in sketches if s["size"]])
    order = np.argsort(vals, kind="stable")
    vals, cum = vals[order], np.cumsum(wts[order])
    levels = cum[-1] * np.arange(1, R) / R
    picks = vals[np.minimum(np.searchsorted(cum, levels, side="left"), vals.size - 1)]
    return sorted(set(float(x) for x in picks if x > vals[0]))


def build_range(bounds: tuple, spill_path: str | None, *handles, census: dict | None = None):
    """One range's table (task): the chunks' slices in ``[bounds[0], bounds[1])`` (None: unbounded)
    merged in chunk order, stored at ``spill_path`` or returned as arrays: ``(handle, answer)``, the
    answer that of :func:`calengine.metrics.ranged.kernels.census` for the request ``census`` (None without
    one: fractional weights): the calibration suite's first pass over the range, run while the range is
    in memory instead of in a later task that reads it again."""
    pieces = [load_table(h, *bounds) for h in handles]
    if all(p[1].dtype.kind == "i" and p[2].dtype.kind == "i" for p in pieces):
        # integer counts add exactly in any order: one stable sort of all the pieces, not one per chunk
        table = merge_all(pieces)
    else:
        # fractional weights are added chunk by chunk, in chunk order, as the in-memory accumulator adds them
        table = None
        for piece in pieces:
            table = piece if table is None else merge_tables(table, piece)
    return _stored(table, spill_path, census)


def _stored(table, spill_path: str | None, census: dict | None) -> tuple:
    handle = _save(table, spill_path) if spill_path is not None else ("mem", table)
    return handle, _census_answer(table, census)


def _census_answer(table, census: dict | None) -> dict | None:
    """:func:`build_range`'s answer for the request ``census`` on ``table`` (None without one)."""
    if census is None:
        return None
    from .kernels import census as census_kernel

    answer = census_kernel(table, census)
    core = census.get("core")
    if core is not None:
        # the core metrics' range-local pieces (core_kernels.column_local / top_pieces), from the range
        # in memory now instead of from a later task that reads it again (see RangedTables.result)
        req = {**core, "unit": census["unit"], "scale": census["scale"]}
        answer["core"] = ck.top_pieces(table, req) if core.get("top") else ck.column_local(table, req)
        flags = {} if core.get("top") else {"clip": core["clip"], "brier": core["brier"]}
        answer["core_for"] = (census["scale"], flags)
    return answer


def builder_requests(k: int, n: int, parts: frozenset | None = None) -> dict:
    """The request each table's range builders answer (:func:`_stored`), by table key (``("class", c)``
    or ``("top",)``) for a model of ``k`` classes and ``n`` rows (integer counts): the calibration
    suite's first pass (:func:`~calengine.metrics.ranged.suite.census_requests`) and, under ``"core"``, the
    range-local pieces of :func:`~calengine.metrics.ranged.core_result`.  ``parts``: the suite's parts
    the evaluation wants (:func:`calengine.metrics.selection.needs`; None: all)."""
    from ..measures import LOG_LOSS_CLIP
    from .suite import census_requests

    out = census_requests(k, None, float(n), parts)
    for key in out:
        core = {"top": True} if key == ("top",) else {"clip": LOG_LOSS_CLIP, "brier": k > 2 or key[1] == 1}
        out[key] = {**out[key], "core": core}
    return out


# ---- ranges of a binary model's class-0 and top-label tables, derived from its class-1 ranges ----------

_HALF_UP = float(np.nextafter(0.5, 1.0))
_ONE_BITS = struct.unpack("<q", struct.pack("<d", 1.0))[0]


def _first_below(c: float) -> float:
    """The least ``v`` in ``[0, 1]`` with ``1 - v < c`` (in float64; ``0 < c <= 1``): ``1 - v`` is
    non-increasing in ``v``, and non-negative floats order as their bit patterns, so a binary search
    over those (62 steps) finds it however ``1 - v`` rounds."""
    lo, hi = 0, _ONE_BITS
    while lo < hi:
        mid = (lo + hi) // 2
        if 1.0 - _float_of_bits(mid) < c:
            hi = mid
        else:
            lo = mid + 1
    return _float_of_bits(lo)


def _float_of_bits(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<q", bits))[0]


def mirror_slices(which: str, lo, hi) -> list[tuple]:
    """The class-1 values ``[a, b)`` (None: unbounded) whose rows fall in ``[lo, hi)`` of the class-0
    table (``which="class0"``: values ``1 - v``) or of the top-label table (``"top"``: ``v`` above 0.5,
    ``1 - v`` at or below it), in increasing order of ``v``."""
    below = (None if hi is None else _first_below(hi), None if lo is None else _first_below(lo))
    if which == "class0":
        return [below]
    # top-label values are >= 0.5: the lower half mirrored (v <= 0.5), the upper half as it is (v > 0.5)
    lower = (below[0], _HALF_UP if below[1] is None else min(below[1], _HALF_UP))
    upper = (_HALF_UP if lo is None else max(lo, _HALF_UP), hi)
    return [lower, upper]


def derived_slices(which: str, lo, hi, edges1: list) -> list[tuple[int, tuple]]:
    """``[(r, (a, b)), ...]``: the class-1 ranges ``r`` (edges ``edges1``, None at both ends) and their
    slices ``[a, b)`` holding the rows of ``[lo, hi)`` of the class-0 or top-label table, in value order."""
    out = []
    for a, b in mirror_slices(which, lo, hi):
        if a is not None and b is not None and not a < b:
            continue
        for r, (e0, e1) in enumerate(zip(edges1[:-1], edges1[1:])):
            if (a is None or e1 is None or a < e1) and (b is None or e0 is None or e0 < b):
                out.append((r, (a, b)))
    return out


def derive_range(which: str, spill_path: str | None, census: dict | None, slices: list, *handles):
    """One range of a binary model's class-0 (``which="class0"``) or top-label (``"top"``) table (task),
    from the slices ``[a, b)`` of the class-1 ranges ``handles`` (one slice per handle, in value order;
    see :func:`mirror_slices`): the mirror (:func:`~calengine.reductions.tables.mirror_table`) or the merged
    halves (:func:`~calengine.reductions.tables.binary_top`) of those rows.  Censused as :func:`build_range`
    censuses a range; kept as it keeps one, except a class-0 range whose class-1 ranges are files of
    this process (embedded; on a cluster a handle must name the worker that holds its file, and the
    slices may have come from another worker): then nothing is written and the handle is ``("derived", spill_path, which, slices,
    class-1 paths)``, which a kernel derives again from those files (:func:`_rederived`, through the
    range cache under ``spill_path``).

    Why class 0 only: its builder's census and core pieces are all ``evaluate`` reads of it (no kernel
    read a class-0 range back at 10M rows), and its derivation (a reversal) costs less than reading a
    file, so writing it was a quarter of the range bytes for nothing.  The top-label ranges are read
    by three passes (the sweep and the error-reject curve); deriving one again merges two sorted
    halves, more than reading it back costs (measured: a wash at 10M rows, a loss wherever the range
    cache misses on every pass), so they are written as before.  The kernels get the same arrays either
    way: the same slices of the same files, derived by the same function."""
    table = _derived_table(which, slices, [lambda a, b, h=h: load_table(h, a, b) for h in handles])
    if which == "class0" and spill_path is not None and handles and all(h[0] == "disk" and len(h) == 2
                                                                        for h in handles):
        handle = ("derived", spill_path, which, tuple(slices), tuple(h[1] for h in handles))
        return handle, _census_answer(table, census)
    return _stored(table, spill_path, census)


def _derived_table(which: str, slices: list, readers: list):
    """The class-0 or top-label table of the class-1 rows ``reader(a, b)`` gives for each slice."""
    pieces = [read(a, b) for read, (a, b) in zip(readers, slices)]
    t1 = tuple(np.concatenate([p[i] for p in pieces]) for i in range(3)) if pieces else empty_table()
    return mirror_table(t1) if which == "class0" else binary_top(t1)


def _rederived(handle) -> tuple:
    """The table of a ``("derived", ...)`` handle (:func:`derive_range`), from the class-1 range files."""
    _, _, which, slices, paths = handle
    return _derived_table(which, slices, [lambda a, b, p=p: _read_slice(p, a, b, keep=False) for p in paths])


def run_kernel(kernel, handle, request):
    """A kernel on one stored range (task); a range on disk comes from this process's cache
    (:mod:`calengine.metrics.ranged.cache`): read once per process while it fits the budget, with the
    arrays the kernels derive from it (counts, the logit bases of every Newton round).  A derived range
    that was not written (:func:`derive_range`) is derived again on a miss."""
    if handle[0] == "disk":
        return kernel(cached_range(handle[1], _load_path), request)
    if handle[0] == "derived":
        return kernel(cached_range(handle[1], lambda _path: _rederived(handle)), request)
    return kernel(load_table(handle), request)


def _load_path(path: str):
    return load_table(("disk", path))


class RangedTables:
    """The grouped tables of one evaluation, every table a list of range handles living in tasks'
    results (futures of ``client``): the same metric methods as :class:`MetricAccumulator` that
    ``evaluate`` reads, computed range by range (see the module docstring)."""

    def __init__(self, client, n_classes: int, n, class_ranges: list[list], top_ranges: list,
                 censuses: dict | None = None, evaluation: str | None = None, workers=None):
        self.client, self.n_classes, self.n = client, n_classes, n
        self.class_ranges, self.top_ranges = class_ranges, top_ranges
        #: on a Dask cluster, the evaluation whose files in the workers' local directories hold these
        #: ranges (:mod:`calengine.metrics.ranged.workers`; the ranges are their handles); None: futures
        #: of files in the caller's scratch directory
        self.evaluation = evaluation
        #: with ``evaluation``: the :class:`~calengine.metrics.ranged.workers.OnWorkers` that maps and drops them
        self.workers = workers
        #: the suite's first pass per table, answered by the range builders (integer counts only)
        self.censuses = censuses or {}
        self._cache: dict = {}
        #: the drift check's pieces, filled by result()'s pass over the tested columns (core_result)
        self._drift_pieces: dict = {}

    def _cached(self, key, compute):
        """Answers are kept: the ranges live only as long as the client and the scratch directory."""
        if key not in self._cache:
            if self.client is None:
                from ...errors import ParameterError

                raise ParameterError(f"{key[0]} was not computed before this evaluation's ranges were released;"
                                     " call it while evaluate_models runs, or evaluate with a report")
            self._cache[key] = compute()
        return self._cache[key]

    def freeze(self, error_reject: bool = True) -> "RangedTables":
        """Compute what ``evaluate`` prints from these tables later (the thinned error-reject curve and
        its text table, unless ``error_reject`` is false: ``evaluate --metrics`` without it) and release
        the ranges: after this only answers already computed are available."""
        from ..report.text import REJECT_RATES

        if error_reject:
            self.error_reject_points()
            self.error_reject_at(REJECT_RATES)
        self.release()
        return self

    def release(self) -> None:
        """Drop the ranges (on a cluster their files on the workers go, with what the workers cached of
        them); only answers already computed stay available.  Called by :meth:`freeze`, and by
        ``evaluate`` when it fails."""
        if self.evaluation is not None and self.client is not None:
            self.client.run(self.workers.drop, self.evaluation)
        self.client, self.class_ranges, self.top_ranges, self.censuses = None, None, None, {}
        self._drift_pieces = {}

    def mapper(self, kernel, ranges, requests):
        if kernel is ck.tally:
            known = self._census_tallies(ranges, requests)
            if known is not None:
                return known
        if self.evaluation is not None:
            return self.workers.map(self.client, kernel, ranges, requests)
        futures = [self.client.submit(run_kernel, kernel, r, q, pure=False) for r, q in zip(ranges, requests)]
        return self.client.gather(futures)

    def _census_tallies(self, ranges, requests) -> list | None:
        """The tallies of a table whose builders counted it already (the census's size and counts are
        :func:`~calengine.metrics.ranged.core_kernels.tally`'s, for integer counts): no pass over its ranges."""
        if any(q.get("unit") is not None for q in requests):
            return None
        for key, answers in self.censuses.items():
            table = self.top_ranges if key == ("top",) else self.class_ranges[key[1]]
            if ranges is table and len(answers) == len(ranges):
                return [{"size": a["size"], "pos": a["pos"], "neg": a["neg"]} for a in answers]
        return None

    def _local_pieces(self) -> dict:
        """The core metrics' range-local pieces the builders computed, by table, as
        :func:`~calengine.metrics.ranged.core_result` takes them: ``(scale, flags, answers)``."""
        out = {}
        for key, answers in self.censuses.items():
            if answers and all("core" in a and a["core_for"] == answers[0]["core_for"] for a in answers):
                out[key] = (*answers[0]["core_for"], [a["core"] for a in answers])
        return out

    def _unit(self):
        return float(self.n) / float(1 << 52) if isinstance(self.n, float) else None

    def _require_rows(self) -> None:
        from ...errors import DataError

        if self.n == 0:
            raise DataError("no rows to evaluate (or every weight is 0); pass at least one labelled prediction"
                            " with a positive weight")

    def result(self, drift: bool = True) -> dict:
        """:meth:`calengine.metrics.measures.MetricAccumulator.result` from the score ranges; with
        ``drift`` the drift check's pieces are taken in the same pass (without, :meth:`drift_check`
        would read the ranges for them: ``evaluate --metrics`` without ``drift``)."""
        from ..measures import LOG_LOSS_CLIP

        self._require_rows()
        # the builders' local pieces, and the drift check's pieces taken in the same pass as the AUC's
        return self._cached(("result",), lambda: core_result(
            self.class_ranges, self.top_ranges, n=self.n, unit=self._unit(), clip=LOG_LOSS_CLIP, mapper=self.mapper,
            local=self._local_pieces(), drift=self._drift_pieces if drift else None))

    def calibration_suite(self, seed: int = 0, parts: frozenset | None = None) -> dict:
        """:meth:`calengine.metrics.measures.MetricAccumulator.calibration_suite` from the score ranges
        (``parts``: only those parts of the suite; the builders' census was requested for the same)."""
        from . import core_kernels as ck
        from .suite import calibration_suite

        self._require_rows()
        unit = self._unit()

        def compute():
            tallies = self.mapper(ck.tally, self.top_ranges, [{"unit": unit}] * len(self.top_ranges))
            scale = float(sum(t["pos"] + t["neg"] for t in tallies))
            # the builders' census answers were computed for scale = n: use them only for that scale
            censuses = self.censuses if unit is None and scale == float(self.n) else None
            return calibration_suite(self.class_ranges, self.top_ranges, unit=unit, scale=scale, seed=seed,
                                     mapper=self.mapper, censuses=censuses, parts=parts)

        return self._cached(("calibration_suite", seed, parts), compute)

    def smooth_reliability(self, sigma: float | None = None) -> dict:
        """:meth:`calengine.metrics.measures.MetricAccumulator.smooth_reliability` from the score ranges."""
        from . import core_kernels as ck
        from .suite import smooth_reliability_curve

        self._require_rows()
        unit = self._unit()
        if sigma is None:
            sigma = self.calibration_suite()["smece_sigma"]

        def compute():
            tallies = self.mapper(ck.tally, self.top_ranges, [{"unit": unit}] * len(self.top_ranges))
            scale = float(sum(t["pos"] + t["neg"] for t in tallies))
            return smooth_reliability_curve(self.class_ranges, self.top_ranges, float(sigma), unit=unit, scale=scale,
                                            mapper=self.mapper)

        return self._cached(("smooth_reliability", float(sigma)), compute)

    def drift_check(self, alpha: float = 0.01) -> dict:
        self._require_rows()
        return self._cached(("drift_check", alpha),
                            lambda: ranged_drift(self.class_ranges, alpha, unit=self._unit(), mapper=self.mapper,
                                                 pieces=self._drift_pieces))

    def error_reject_points(self, max_points: int = 101) -> dict:
        self._require_rows()
        return self._cached(("error_reject_points", max_points), lambda: error_reject_points(
            self.top_ranges, max_points=max_points, unit=self._unit(), mapper=self.mapper))

    def error_reject_at(self, rates) -> list:
        self._require_rows()
        return self._cached(("error_reject_at", tuple(rates)), lambda: error_reject_at(
            self.top_ranges, rates, unit=self._unit(), mapper=self.mapper))

    # ---- report curves (calengine.metrics.ranged.curves): the figures of ``evaluate --report`` ------

    def _class_table(self, cls):
        if cls is None:
            return self.top_ranges
        if isinstance(cls, bool) or not isinstance(cls, (int, np.integer)) or not 0 <= cls < self.n_classes:
            from ...errors import ParameterError

            raise ParameterError(f"cls must be a class index in 0..{self.n_classes - 1}, got {cls!r}")
        return self.class_ranges[int(cls)]

    def _integer_counts(self) -> None:
        if self._unit() is not None:
            from ...errors import ParameterError

            raise ParameterError("the report's curves need integer counts; evaluate without weight for a report", parameter="weight")

    def reliability_diagram(self, bins: int = 15, strategy: str = "uniform", cls: int | None = None) -> dict:
        """:meth:`MetricAccumulator.reliability_diagram` (same bins; the forecast sums in fixed point)."""
        from .curves import reliability_bins

        self._require_rows()
        self._integer_counts()
        return self._cached(("reliability_diagram", bins, strategy, cls), lambda: reliability_bins(
            self._class_table(cls), bins=bins, strategy=strategy, mapper=self.mapper))

    def corp_curve(self, cls: int) -> dict:
        """:meth:`MetricAccumulator.corp_curve` of class column ``cls``: the same blocks."""
        from .curves import corp_curve

        self._require_rows()
        self._integer_counts()
        return self._cached(("corp_curve", cls), lambda: corp_curve(self._class_table(cls), mapper=self.mapper))

    def roc_thinned(self, cls: int, max_points: int | None = None) -> dict | None:
        """The thinned ROC curve of class column ``cls`` with its hull (:func:`~calengine.metrics.ranged.curves.roc_thinned`)."""
        from .curves import ROC_MAX_POINTS, roc_thinned

        self._require_rows()
        self._integer_counts()
        mp = ROC_MAX_POINTS if max_points is None else max_points
        return self._cached(("roc_thinned", cls, mp), lambda: roc_thinned(
            self._class_table(cls), max_points=mp, mapper=self.mapper))

    def error_reject_thinned(self, max_points: int | None = None) -> dict:
        """The error-reject points the report draws (:func:`~calengine.metrics.ranged.curves.error_reject_thinned`)."""
        from .curves import ROC_MAX_POINTS, error_reject_thinned

        self._require_rows()
        self._integer_counts()
        mp = ROC_MAX_POINTS if max_points is None else max_points
        return self._cached(("error_reject_thinned", mp), lambda: error_reject_thinned(
            self.top_ranges, max_points=mp, mapper=self.mapper))

    def __repr__(self) -> str:
        return f"RangedTables(n_classes={self.n_classes}, n={self.n})"


def _ranges_of_table(client, handles: list, sketches: list[dict], spill_dir: str, label: str, census: dict) -> tuple:
    """The futures of one table's ranges (files in ``spill_dir``) and of their census answers (for the
    request ``census``), and the ranges' edges (None: unbounded).  On a cluster:
    :func:`calengine.metrics.ranged.workers.ranges_on_workers`."""
    edges = [None, *range_boundaries(sketches), None]
    built = [client.submit(build_range, (lo, hi), os.path.join(spill_dir, f"{label}-r{r}"), *handles, census=census,
                           pure=False)
             for r, (lo, hi) in enumerate(zip(edges[:-1], edges[1:]))]
    return (*_handles_and_answers(client, built), edges)


def _derived_ranges(client, which: str, ranges1: list, edges1: list, sketches: list[dict], spill_dir: str, label: str,
                    census: dict) -> tuple:
    """The futures of the class-0 or top-label table's ranges (and census answers) of a binary model
    whose every chunk is mirrored: cut by their own sketches (the class-1 sketches mapped), each read
    from the slices of the class-1 ranges ``ranges1`` (edges ``edges1``) its rows come from."""
    edges = [None, *range_boundaries([mapped_sketch(s, which) for s in sketches]), None]
    built = []
    for r, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        plan = derived_slices(which, lo, hi, edges1)
        built.append(client.submit(derive_range, which, os.path.join(spill_dir, f"{label}-r{r}"), census,
                                   [ab for _, ab in plan], *[ranges1[i] for i, _ in plan], pure=False))
    return _handles_and_answers(client, built)


def _handles_and_answers(client, built: list) -> tuple[list, list]:
    """The futures of the ranges' handles and of their census answers, from the futures of their
    build tasks' ``(handle, answer)`` pairs (handles of files: small).  The pairs are awaited here (the
    builds of a table run side by side) and handed on as futures already holding them: on the threads
    of a :class:`~calengine.runtime.thread_client.ThreadClient` a task picking them would wait for its build on
    a pool thread, and behind every build the next queued picking task held the other thread, so the
    ranges were built one at a time (1M rows: none of 24 builds overlapped another)."""
    pairs = client.gather(built)
    return client.scatter([p[0] for p in pairs]), client.scatter([p[1] for p in pairs])


def mapped_sketch(sketch: dict, which: str) -> dict:
    """A class-1 sketch as a sketch of the class-0 (``1 - v``) or top-label (``max(v, 1 - v)``) table:
    only the cut points are chosen from it (results never depend on them)."""
    v = np.asarray(sketch["values"], dtype=np.float64)
    m = 1.0 - v if which == "class0" else np.maximum(v, 1.0 - v)
    return {**sketch, "values": m.tolist()}


def evaluate_ranged(client, evaluate_chunk, model_f, k: int, chunks, target: str, batch_rows: int, with_raw: bool,
                    cost_matrix, weight, spill_dir: str | None, progress=None, workers=None,
                    parts: frozenset | None = None) -> dict:
    """``{"calibrated": RangedTables, "raw": RangedTables}`` (and ``"decisions"``) of ``chunks``:
    what :func:`calengine.metrics.table.evaluate_table` returns, without a whole table anywhere.
    ``evaluate_chunk`` evaluates one chunk (see :func:`chunk_tables`); ``model_f`` is the model as
    shared with the client, ``k`` its number of classes.  ``spill_dir``: where tables are written (the
    embedded case), or None on a Dask cluster, with ``workers`` :class:`calengine.metrics.ranged.workers.OnWorkers`:
    in the workers' local directories, removed if this fails (passed in by the caller: that module
    builds on this one).  ``parts``: the calibration suite's parts the caller will ask for
    (:func:`calengine.metrics.selection.needs`; None: all): the range builders census only those."""
    if (spill_dir is None) == (workers is None):
        raise ValueError("evaluate_ranged takes either spill_dir (embedded) or workers (a Dask cluster)")
    evaluation = None if spill_dir is not None else uuid.uuid4().hex
    try:
        return _evaluate_ranged(client, evaluate_chunk, model_f, k, chunks, target, batch_rows, with_raw, cost_matrix,
                                weight, spill_dir, evaluation, progress, workers, parts)
    except BaseException:
        if evaluation is not None:
            with contextlib.suppress(Exception):  # the evaluation's own error is the one to report
                client.run(workers.drop, evaluation)
        raise


def _evaluate_ranged(client, evaluate_chunk, model_f, k, chunks, target, batch_rows, with_raw, cost_matrix, weight,
                     spill_dir, evaluation, progress, rw, suite_parts=None) -> dict:
    from ...errors import DataError
    from ...runtime.progress import gather_in_order

    args = (evaluate_chunk, model_f)
    tail = (target, batch_rows, with_raw, cost_matrix, weight)
    if evaluation is None:
        parts = [client.submit(chunk_tables, *args, c, *tail, spill_dir, i, pure=False) for i, c in enumerate(chunks)]
        small = gather_in_order(client, [client.submit(small_part, p, pure=False) for p in parts], progress, "evaluate")
    else:
        # the chunks' tables are files on the workers: their results are small and come here whole
        small = gather_in_order(client, [client.submit(rw.chunk, evaluation, i, *args, c, *tail, pure=False)
                                         for i, c in enumerate(chunks)], progress, "evaluate")
    out, pending = {}, []
    for kind in ("calibrated", "raw"):
        if kind not in small[0]["n"]:
            continue
        n = small[0]["n"][kind]
        for s in small[1:]:
            n = n + s["n"][kind]
        if weight and n == 0:
            raise DataError(f"weight column '{weight}' is 0 on every row; give the rows to evaluate a positive value",
                            parameter="weight")
        # integer counts: the suite's first pass over each range runs in the task that builds it
        # (its request needs the total, known now); fractional weights' integer units are not
        unit_free = not isinstance(n, float) and n > 0
        requests = builder_requests(k, n, suite_parts) if unit_free else {}
        mirrored = [s.get("mirrored", {}).get(kind, False) for s in small]
        derive = all(mirrored)  # class 0 and top label from class 1's ranges; else every table from chunks
        ranges, censuses = {}, {}
        # class 1 first when the others derive from its ranges, last when a mirrored chunk's others
        # derive from its chunk table (its files go once its ranges are written)
        order = (1, 0, 2) if derive else ((0, 2, 1) if any(mirrored) else range(k + 1))
        for j in order:
            key = ("class", j) if j < k else ("top",)
            label = f"{kind}-{j}"
            if derive and j != 1:
                which = "class0" if j == 0 else "top"
                sk = [s["sketch"][kind][1] for s in small]
                if evaluation is None:
                    table, answers = _derived_ranges(client, which, ranges[1], edges1, sk, spill_dir, label,
                                                     requests.get(key))
                else:
                    table, answers = rw.derived(client, f"{evaluation}/{kind}", which, ranges[1], edges1, sk, label,
                                                           requests.get(key))
                ranges[j] = table
                if unit_free:
                    censuses[key] = answers
                continue
            sketches = [s["sketch"][kind][j] or mapped_sketch(s["sketch"][kind][1], "class0" if j == 0 else "top")
                        for s in small]
            if evaluation is None:
                # the handle of table j of every chunk, picked where the chunk's result lives (a mirrored
                # chunk's class-0 and top-label tables derived from its class-1 table when others are not)
                hs = [client.submit(pick_table, p, kind, j, spill_dir, i, pure=False) for i, p in enumerate(parts)]
                table, answers, edges = _ranges_of_table(client, hs, sketches, spill_dir, label, requests.get(key))
                # the chunks' files of this table are read by its range tasks only: once those are
                # written they go (scratch would otherwise hold every table twice)
                client.gather(table)
                remove_chunk_files(client.gather(hs))
            else:
                hs = [s["tables"][kind][j] for s in small]
                missing = [i for i, h in enumerate(hs) if h is None]
                holders = [small[i]["tables"][kind][1][2] for i in missing]
                picked = rw.gather(client, [client.submit(rw.pick, evaluation, small[i]["tables"][kind], kind, j, i,
                                                          workers=[w], allow_other_workers=False, pure=False)
                                            for i, w in zip(missing, holders)], holders)
                for i, h in zip(missing, picked):
                    hs[i] = h
                table, answers, edges = rw.ranges(client, f"{evaluation}/{kind}", hs, sketches, label,
                                                             requests.get(key))
            ranges[j] = table
            if unit_free:
                censuses[key] = answers
            if derive:
                edges1 = edges
        if derive and spill_dir is not None:
            client.gather([*ranges[0], *ranges[2]])
            forget_locators(client.gather(ranges[1]))
        pending.append((kind, n, ranges, censuses))
    if evaluation is None:
        # every table's ranges are submitted before the client waits for any census answer: the
        # workers build the next table's ranges while the last ranges of one are built
        flat = client.gather([f for _, _, _, c in pending for fs in c.values() for f in fs])
        for _, _, _, censuses in pending:
            for key, fs in censuses.items():
                censuses[key], flat = flat[:len(fs)], flat[len(fs):]
    for kind, n, ranges, censuses in pending:
        out[kind] = RangedTables(client, k, n, [ranges[j] for j in range(k)], ranges[k], censuses=censuses,
                                 evaluation=None if evaluation is None else f"{evaluation}/{kind}", workers=rw)
    if cost_matrix is not None:
        out["decisions"] = small[0]["decisions"]
        for s in small[1:]:
            out["decisions"].merge(s["decisions"])
    if small[0].get("segments") is not None:  # evaluate --by: the segment sums of the same pass, in chunk order
        from ...tasks.partitions import merge_all

        out["segments"] = merge_all(*[s["segments"] for s in small])
    if small[0].get("conformal") is not None:  # a conformal model: its sets' sums, in chunk order
        from ...tasks.partitions import merge_all

        out["conformal"] = merge_all(*[s["conformal"] for s in small])
    return out


def fold_census(answers: list) -> list:
    """``answers`` (one census answer per range, in range order) with the per-range histograms added
    into the first answer: its ``"grid"`` (the smooth-ECE grid sums) and ``"logit_hist"`` (the logit
    histogram) become the table's, the others' are dropped.  Why: they are the bulk of an answer (50 KB
    of Python integers per range of class 1), and the client held them all until the end, O(ranges):
    at 100M rows a third of its peak.  The calibration suite only ever adds them up (``add_lists``,
    ``_logit_histogram``, reading a missing entry as empty), in exact integers, so folding them as they
    arrive changes no bit.  Folding a folded list with more answers is folding them all."""
    if not answers:
        return answers
    first = dict(answers[0])
    grids = [a["grid"] for a in answers if a.get("grid")]
    if grids:
        first["grid"] = _summed_grids(grids)
    hists = [a["logit_hist"] for a in answers if a.get("logit_hist")]
    if hists:
        rows: dict = {}
        for h in hists:
            for j, row in enumerate(zip(h["m"], h["a"], h["mx"], h["ax"]), start=h["first"]):
                if row[0]:
                    rows[j] = [p + q for p, q in zip(rows[j], row)] if j in rows else list(row)
        lo = min(rows, default=0)
        span = [rows.get(j, [0, 0, 0, 0]) for j in range(lo, max(rows, default=-1) + 1)]
        first["logit_hist"] = {**hists[0], "first": lo, **{k: [r[i] for r in span] for i, k in enumerate("m a mx ax".split())}}
    rest = [{k: v for k, v in a.items() if k not in ("grid", "logit_hist")} for a in answers[1:]]
    return [first, *rest]


def fold_grids(answers: list) -> list:
    """``answers`` (the :func:`~calengine.metrics.ranged.kernels.grids` answers of consecutive ranges) with their
    histograms added into the first answer, the others left empty.  Why: a range's answer is the grid's
    exact sums as Python integers (about 80 KB a range of class 1); unfolded, a pass at 100M rows
    (400 ranges a table) moved 32 MB through the scheduler to the client, whose peaks grew with the
    table.  The suite only adds them up (``_combine_grids``, in exact integers, reading an empty answer
    as nothing), so folding changes no bit."""
    if len(answers) < 2 or not any(answers):
        return answers
    return [_summed_grids(answers), *({} for _ in answers[1:])]


def _summed_grids(grids: list[dict]) -> dict:
    """``{size: (one, f, y)}`` grid sums added up over ``grids`` (each such a dict, sizes missing from
    some of them read as nothing)."""
    sizes = dict.fromkeys(size for g in grids for size in g)
    return {size: tuple(add_lists(g[size][i] for g in grids if size in g) for i in range(3)) for size in sizes}


def remove_chunk_files(handles) -> None:
    for kind, path in handles:
        if kind == "disk":
            with LOCATORS_LOCK:
                LOCATORS.pop(path, None)
            for name in _NAMES:
                try:
                    os.remove(f"{path}.{name}.npy")
                except FileNotFoundError:
                    pass


def forget_locators(handles) -> None:
    """Drop this process's entries (samples, :data:`LOCATORS`) of the files of ``handles`` (``(kind, path)``)
    it read slices of, e.g. the class-1 range files the derived ranges read (the files stay: the
    kernels read them)."""
    with LOCATORS_LOCK:
        for kind, path in handles:
            if kind == "disk":
                LOCATORS.pop(path, None)


def pick_table(part: dict, kind: str, j: int, spill_dir: str, index: int = 0):
    """Table ``j`` of a chunk's result; a mirrored chunk's class-0 or top-label table is derived from
    its class-1 table here (and stored as the chunk's own would have been)."""
    handle = part["tables"][kind][j]
    if handle is not None:
        return handle
    table = load_table(part["tables"][kind][1])
    table = mirror_table(table) if j == 0 else binary_top(table)
    return _save(table, os.path.join(spill_dir, f"c{index}-{kind}-{j}"))
