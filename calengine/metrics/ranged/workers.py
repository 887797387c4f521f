"""The ranges of an evaluation on a Dask cluster, kept as files in the workers' local directories.

Why (issue 22 §1: every process's peak flat from 10M to 100M rows): held as task results, the chunks'
tables and the ranges were all in the workers' memory at once (three tables of 24 bytes a value per
kind: 1.5 GB a worker at 10M rows), so a worker's peak grew with the table until Dask's spill
heuristics capped it near 70 % of its limit, and the scheduler kept two picking tasks per range and
every range's future until the end.  Here:

* **storage**: a chunk's tables and every range are ``.npy`` files in the local directory of the
  worker that computed them (under ``calengine-ranges/<evaluation>/``), exactly as embedded
  ``evaluate`` writes them to its scratch directory; a handle is ``("disk", path, address)``, small
  and gathered by the client at once, so no future outlives its wave of tasks.  A worker holds in
  memory only what its running task reads and its range cache
  (:mod:`~calengine.metrics.ranged.cache`, a fixed budget), whatever the table's size.
* **placement**: every task that reads a file runs on the worker holding it (``workers=[address]``,
  no other worker allowed).  A range's build needs a slice of every chunk's table: the slices held
  by another worker come as a task pinned there (:func:`slices_of`) whose result Dask moves, one per
  group of consecutive ranges, holder and destination; derived ranges (a binary model's class 0 and
  top label) read the class-1 ranges the same way (:func:`slices_between`, one a block and holder).
  Nothing assumes a shared file system.
* **heap**: the range tasks trim the heap after each range (as the score-range tasks of fits do as
  they end, :func:`~calengine.runtime.heap.trims_heap_even_when_kept`): their 2 MB temporaries, kept on
  the heap where ``MALLOC_MMAP_THRESHOLD_`` is raised, beside the range cache's arrays, left holes
  that grew with the number of ranges a worker processed.  30M rows, workers' peaks: untrimmed
  1,063 / 1,064 MiB in one run and 1,365 / 1,062 in another, trimmed once a task 1,260 / 1,286,
  trimmed after every range 1,048 / 1,049 and 1,044 / 1,043.
* **task counts**: builds and kernel passes run as a few tasks per worker, each over a block of
  consecutive ranges of one worker (:data:`BLOCKS_PER_WORKER`; derived ranges in blocks of
  :data:`DERIVED_BLOCK`, in waves), so the number of tasks alive does not grow with the table (the
  scheduler's bookkeeping did: +227 % from 10M to 100M); the census answers' histograms are folded
  as each wave arrives (:func:`~calengine.metrics.ranged.engine.fold_census`).
* **the scheduler's log**: Dask's scheduler keeps the last 1,000 batches of messages it sent to each
  worker (``distributed.admin.low-level-log-length``), task specifications and their arguments
  included, so every task an evaluation submits, not only those alive, counts in the scheduler's
  peak until that log is full (measured on 2 workers: 1,600 one-line tasks +10 MiB, +16 MiB from about
  2,400 on): derived ranges go in blocks of :data:`DERIVED_BLOCK` with one piece task a holder, and
  lists of file handles go :func:`packed`, so that the tasks' number and bytes grow little with the
  table.
* **maps**: no file stays mapped.  A slice's bounds are found in a sample of the file's values and
  one window read from it (:func:`~calengine.metrics.ranged.engine._read_slice`); before, the pages a
  binary search touched stayed resident while a file was mapped, and over a table's ranges they
  covered its chunk files' values (100M rows: workers 1,606 / 1,540 MiB with the maps kept to the
  table's end, 974 / 990 without; a build block still held 255 MiB of its own chunk files' pages at
  its end).  A block, and a task cutting pieces for another worker, drops its files' samples when it
  ends (:func:`_drop_locators`).
* **lost workers**: a task pinned to a worker that has left would wait for it forever (its files
  went with it), so the client waits on pinned tasks through :func:`gather_pinned`, which raises
  :class:`~calengine.errors.ClusterError` as soon as one of their workers is gone.
* **cleanup**: the files go with the evaluation (:func:`drop_evaluation` on every worker, from
  :meth:`~calengine.metrics.ranged.engine.RangedTables.release`), on success and on error; the chunks'
  files go as soon as their table's ranges are built.

Every range holds the values the in-memory path would hold, merged in the same order by the same
functions (:func:`~calengine.metrics.ranged.engine.build_range`, :func:`~calengine.metrics.ranged.engine.derive_range`),
so results are bit-identical to embedded ``evaluate``.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter

from ...runtime.heap import release_freed_memory, trims_heap_even_when_kept
from . import kernels
from . import engine as re_
from .cache import forget

__all__ = ["BLOCKS_PER_WORKER", "OnWorkers", "gather_pinned", "ranges_on_workers", "run_kernels", "drop_evaluation", "blocks_by_worker"]

#: each worker runs a table's builds, and each kernel pass over a table, as about this many tasks (one
#: per block of consecutive ranges): enough to keep a worker's queue from running dry between blocks,
#: few enough that the scheduler's task count does not depend on the number of ranges.
BLOCKS_PER_WORKER = 2
#: derived ranges (a binary model's class 0 and top label) a task: the class-1 slices a task reads from
#: another worker are in its memory together (6 MB a range, about half of them remote).  Why 8: every
#: task the scheduler sends stays in its log of recent messages (Dask keeps the last 1,000 batches
#: sent to each worker), so the derived tables' tasks set most of the scheduler's growth with the
#: table: at 4 a block and one piece task per block and class-1 range they were 978 of the 1,383 tasks
#: of a 100M-row evaluation; at 8 and one piece task per block and holder, 399 of 804.  A worker's
#: pieces of two waves (8 blocks, under 100 MB) stay well below the build's and the kernels' peaks.
DERIVED_BLOCK = 8
#: the directory, under a worker's local directory, that holds every evaluation's files.
ROOT = "calengine-ranges"


def _worker():
    from distributed import get_worker

    return get_worker()


def worker_dir(evaluation: str) -> str:
    """This worker's directory of ``evaluation``'s files (in task; created on first use)."""
    path = os.path.join(_worker().local_directory, ROOT, evaluation)
    os.makedirs(path, exist_ok=True)
    return path


def _located(handle) -> tuple:
    """A handle of a file written here, with this worker's address."""
    return (handle[0], handle[1], _worker().address)


@trims_heap_even_when_kept
def chunk_on_worker(evaluation: str, index: int, *args) -> dict:
    """:func:`~calengine.metrics.ranged.engine.chunk_tables` of one chunk (task; ``args`` its arguments up
    to ``spill_dir``), its tables written to this worker's directory: the result is small (sketches,
    handles), gathered by the client."""
    part = re_.chunk_tables(*args, worker_dir(evaluation), index)
    part["tables"] = {kind: [None if h is None else _located(h) for h in hs] for kind, hs in part["tables"].items()}
    return part


def pick_on_worker(evaluation: str, part_tables: list, kind: str, j: int, index: int) -> tuple:
    """Table ``j`` of a chunk whose class-0 and top-label tables were not kept (task, on the chunk's
    worker): written beside the chunk's class-1 table (:func:`~calengine.metrics.ranged.engine.pick_table`)."""
    return _located(re_.pick_table({"tables": {kind: part_tables}}, kind, j, worker_dir(evaluation), index))


def packed(handles: list) -> tuple:
    """``("files", runs)``: handles of files as a task argument, each run of consecutive handles sharing
    kind, directory and worker once and their file names in one string (:func:`unpacked` undoes it).
    Why: the scheduler keeps every task it sends in its log of recent messages (Dask keeps the last
    1,000 batches sent to each worker), and a task's list of handles, each a tuple of long paths, grew
    with the table (the 50 chunk files of a worker at 100M rows, 11 KB a build task); packed, a handle
    costs its file name.  Only plain tuples and strings: the scheduler unpickles them too."""
    runs: list = []
    for kind, path, address in handles:
        directory, name = os.path.split(path)
        if runs and runs[-1][:3] == (kind, directory, address):
            runs[-1][3].append(name)
        else:
            runs.append((kind, directory, address, [name]))
    return ("files", tuple((k, d, a, "\n".join(names)) for k, d, a, names in runs))


def unpacked(files) -> list:
    """The handles :func:`packed` packed (in task); anything else (the pieces a task of another
    worker cut) as it is."""
    if not (isinstance(files, tuple) and files[:1] == ("files",)):
        return files
    return [(k, os.path.join(d, name), a) for k, d, a, names in files[1] for name in names.split("\n")]


@trims_heap_even_when_kept
def slices_of(files: tuple, lo_value, hi_value) -> list:
    """The values ``[lo_value, hi_value)`` (None: unbounded) of several files of this worker (task;
    ``files`` :func:`packed`): one task, not one per chunk, for the pieces of a group another worker's
    builds read, moved there by Dask as in-memory tables.  The files' samples go with the task
    (:func:`_drop_locators`)."""
    return slices_between([(h, lo_value, hi_value) for h in unpacked(files)])


@trims_heap_even_when_kept
def slices_between(wanted: list) -> list:
    """``[("mem", table), ...]``: the values ``[lo, hi)`` of each ``(handle, lo, hi)`` of ``wanted``,
    files of this worker (task): the pieces of another worker's block.  The files' samples go when
    the pieces are read (when they were maps, the pages a holder's binary searches touched stayed
    resident until the files went: 100M rows, 160-170 MiB at a worker's kernel-phase peak, 73-75
    without)."""
    try:
        return [("mem", re_.load_table(h, lo, hi)) for h, lo, hi in wanted]
    finally:
        _drop_locators([h for h, _, _ in wanted])


def build_block(evaluation: str, label: str, first: int, edges: list, census, owners: tuple, *sources) -> list:
    """Ranges ``first, first + 1, ...`` of table ``label`` (task), ``edges`` their ``len + 1`` edges,
    each built by :func:`~calengine.metrics.ranged.engine.build_range` from one input per chunk, in chunk
    order: chunk ``c``'s is the next of ``sources[owners[c]]`` (the files of this worker,
    :func:`packed`, or the pieces moved here from another, both in chunk order), and written to this
    worker's directory: ``[(handle, census answer), ...]``."""
    sources = [iter(unpacked(s)) for s in sources]
    inputs = [next(sources[s]) for s in owners]
    d = worker_dir(evaluation)
    out = []
    try:
        for r, bounds in enumerate(zip(edges[:-1], edges[1:]), first):
            handle, answer = re_.build_range(bounds, os.path.join(d, f"{label}-r{r}"), *inputs, census=census)
            out.append((_located(handle), answer))
            release_freed_memory(even_when_kept=True)
    finally:
        _drop_locators(inputs)
    return _census_folded(out, census)


def _census_folded(out: list, census) -> list:
    """A block's ``(handle, census answer)`` pairs with the answers' histograms folded into the first
    (:func:`~calengine.metrics.ranged.engine.fold_census`, exact integers): the block sends one histogram
    through the scheduler, not one per range; the client folds the blocks' as they arrive."""
    if census is None:
        return out
    return list(zip([h for h, _ in out], re_.fold_census([a for _, a in out])))


def _drop_locators(inputs: list) -> None:
    """Drop this process's entries (:data:`~calengine.metrics.ranged.engine.LOCATORS`: samples of the values)
    of the files a block read slices of, so that a worker keeps entries only for the files a running
    task reads, however many files the evaluation writes (a sample is 1/4096 of a file's values)."""
    re_.forget_locators([h[:2] for h in inputs if h[0] == "disk"])


def derive_block(evaluation: str, label: str, which: str, census, items: list, *sources) -> list:
    """Derived ranges (task): ``items`` ``[(r, slices, inputs), ...]`` as
    :func:`~calengine.metrics.ranged.engine.derive_range` takes them, an input either a class-1 range file
    of this worker or ``("piece", s, n)``: the ``n``-th of ``sources[s]``, pieces of another worker's
    files (:func:`slices_between`, one task a holder and block); written to this worker's directory."""
    d = worker_dir(evaluation)
    out = []
    try:
        for r, slices, inputs in items:
            inputs = [sources[h[1]][h[2]] if h[0] == "piece" else h for h in inputs]
            handle, answer = re_.derive_range(which, os.path.join(d, f"{label}-r{r}"), census, slices, *inputs)
            out.append((_located(handle), answer))
            release_freed_memory(even_when_kept=True)
    finally:
        _drop_locators([h for _, _, inputs in items for h in inputs])
    return _census_folded(out, census)


def run_kernels(kernel, handles: tuple, requests: list) -> list:
    """:func:`~calengine.metrics.ranged.engine.run_kernel` on each of a block of ranges (task, on their
    worker; ``handles`` :func:`packed`); the smooth-ECE grid histograms, which the client only adds
    up, come back folded into the block's first answer (:func:`~calengine.metrics.ranged.engine.fold_grids`)."""
    out = []
    for h, q in zip(unpacked(handles), requests):
        out.append(re_.run_kernel(kernel, h, q))
        release_freed_memory(even_when_kept=True)
    return re_.fold_grids(out) if kernel is kernels.grids else out


def remove_files(files: tuple) -> None:
    """Remove files of this worker (task; ``files`` :func:`packed`): a table's chunk files once its
    ranges are built."""
    re_.remove_chunk_files([h[:2] for h in unpacked(files)])


def drop_evaluation(evaluation: str, dask_worker=None) -> None:
    """Remove ``evaluation``'s files from this worker and forget what this process cached or located of
    them (``client.run`` on every worker, which passes ``dask_worker``:
    :meth:`~calengine.metrics.ranged.engine.RangedTables.release`).  An
    evaluation's ranges of one kind are ``"<evaluation>/<kind>"``, released apart (one kind's tables
    may still be read when the other's go); the evaluation's directory goes with its last kind."""
    path = os.path.join(dask_worker.local_directory, ROOT, evaluation)
    forget(path)
    prefix = os.path.join(path, "")
    with re_.LOCATORS_LOCK:
        for p in [p for p in re_.LOCATORS if p.startswith(prefix)]:
            del re_.LOCATORS[p]
    shutil.rmtree(path, ignore_errors=True)
    for parent in (os.path.dirname(path), os.path.dirname(os.path.dirname(path))):
        if os.path.basename(parent) == ROOT:
            break
        try:
            os.rmdir(parent)  # empty once every kind is released
        except OSError:
            break


# ---- client side -------------------------------------------------------------------------------------

def blocks_by_worker(n: int, workers: list[str]) -> list[tuple[int, int, str]]:
    """``[(start, stop, address), ...]``: ``n`` consecutive ranges cut into about
    :data:`BLOCKS_PER_WORKER` blocks a worker, dealt to the workers in turn."""
    count = max(1, min(n, BLOCKS_PER_WORKER * len(workers)))
    bounds = [n * b // count for b in range(count + 1)]
    return [(lo, hi, workers[b % len(workers)]) for b, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])) if hi > lo]


def _pinned(client, address: str, fn, *args):
    return client.submit(fn, *args, workers=[address], allow_other_workers=False, pure=False)


#: seconds between the checks, while the client waits on pinned tasks, that their workers are still there
WATCH_SECONDS = 1.0


def gather_pinned(client, futures: list, addresses) -> list:
    """``client.gather(futures)`` of tasks pinned to the workers ``addresses``; raises
    :class:`~calengine.errors.WorkerLostError` (nothing gathered) when one of those workers leaves the
    cluster first.  Why: Dask keeps a task whose only allowed worker is gone waiting for that worker,
    and the files it reads went with it, so a plain ``gather`` would hang.  The check reads the
    client's view of the workers, refreshed by Dask every few seconds."""
    from ...errors import WorkerLostError

    addresses = set(addresses)
    waiting = list(futures)
    while waiting:
        try:
            waiting[0].result(timeout=WATCH_SECONDS)  # a task's own error is raised here, as gather raises it
        except TimeoutError:
            gone = sorted(addresses - set(client.scheduler_info(n_workers=-1)["workers"]))
            if gone:
                raise WorkerLostError(
                    f"worker {gone[0]} left the cluster during evaluate: the score ranges on its local disk went with"
                    " it; nothing was published; run the command again on workers that stay up", worker=gone[0]) from None
        waiting = [f for f in waiting if not f.done()]
    return client.gather(futures)


def ranges_on_workers(client, evaluation: str, handles: list, sketches: list[dict], label: str, census) -> tuple:
    """One table's ranges built on the workers from its chunks' files ``handles`` (one per chunk, in
    chunk order): ``(range handles, census answers, edges)``.  The table is built group by group
    (:data:`~calengine.metrics.ranged.engine.GROUP_BYTES` of values a group): each worker's builds of a
    group read its own chunks' files and one piece of each other worker's chunks, so a worker holds
    at most one group's pieces at a time; the chunk files go when the table is built."""
    workers = sorted({h[2] for h in handles} | set(client.scheduler_info()["workers"]))
    edges = [None, *re_.range_boundaries(sketches), None]
    R = len(edges) - 1
    groups = min(R, -(-sum(s["size"] for s in sketches) * 24 // re_.GROUP_BYTES))
    per = -(-R // max(1, groups))
    holders = sorted({h[2] for h in handles})
    files = {x: packed([h for h in handles if h[2] == x]) for x in holders}  # each holder's, in chunk order
    owners = tuple(holders.index(h[2]) for h in handles)  # chunk c's input: the next of sources[owners[c]]
    built: list = []
    pending = None
    for g0 in range(0, R, per):
        g1 = min(R, g0 + per)
        pieces: dict = {}  # (holder, destination) -> the future of the holder's pieces of this group
        futures = []
        for lo, hi, w in blocks_by_worker(g1 - g0, workers):
            sources = []
            for x in holders:
                if x != w and (x, w) not in pieces:
                    pieces[(x, w)] = _pinned(client, x, slices_of, files[x], edges[g0], edges[g1])
                sources.append(files[x] if x == w else pieces[(x, w)])
            futures.append(_pinned(client, w, build_block, evaluation, label, g0 + lo, edges[g0 + lo:g0 + hi + 1],
                                   census, owners, *sources))
        # one group is built while the previous one's results come back: a worker holds the pieces of
        # at most two groups, and the scheduler the tasks of two
        if pending is not None:
            _arrived(built, gather_pinned(client, pending, workers), census)
        pending = futures
    _arrived(built, gather_pinned(client, pending, workers), census)
    gather_pinned(client, [_pinned(client, w, remove_files, files[w]) for w in holders], holders)
    return built[0], built[1], edges


def _arrived(built: list, blocks: list, census) -> None:
    """Add a wave's ``(handle, answer)`` blocks to ``built`` (``[handles, answers]``), the census
    answers' histograms folded as they arrive (:func:`~calengine.metrics.ranged.engine.fold_census`)."""
    pairs = [p for block in blocks for p in block]
    if not built:
        built.extend(([], []))
    built[0].extend(p[0] for p in pairs)
    answers = built[1] + [p[1] for p in pairs]
    built[1][:] = answers if census is None else re_.fold_census(answers)


def derived_on_workers(client, evaluation: str, which: str, ranges1: list, edges1: list, sketches: list[dict],
                       label: str, census) -> tuple:
    """The class-0 or top-label table's ranges of a binary model whose every chunk is mirrored, from the
    class-1 ranges ``ranges1`` (handles, edges ``edges1``): ``(handles, census answers)``.  Derived
    ranges are built in blocks of :data:`DERIVED_BLOCK` consecutive ranges, each on the worker holding
    most of the class-1 ranges the block reads; the slices held elsewhere come as one piece per block
    and holder (:func:`slices_between`).  The blocks go in waves of :data:`BLOCKS_PER_WORKER` a worker:
    a worker holds the pieces of two waves at most (submitted at once, the pieces of every block were
    cut as soon as the class-1 ranges existed: half a top-label table moved in memory)."""
    edges = [None, *re_.range_boundaries([re_.mapped_sketch(s, which) for s in sketches]), None]
    plans = [re_.derived_slices(which, lo, hi, edges1) for lo, hi in zip(edges[:-1], edges[1:])]
    workers = sorted({h[2] for h in ranges1})
    blocks = []
    for lo in range(0, len(plans), DERIVED_BLOCK):
        hi = min(len(plans), lo + DERIVED_BLOCK)
        reads = Counter(ranges1[i][2] for plan in plans[lo:hi] for i, _ in plan)
        blocks.append((lo, hi, max(sorted(reads), key=reads.__getitem__) if reads else workers[0]))
    built: list = []
    pending = None
    wave = BLOCKS_PER_WORKER * len(workers)
    for b0 in range(0, len(blocks), wave):
        futures = []
        for lo, hi, w in blocks[b0:b0 + wave]:
            wanted: dict = {}  # holder -> {class-1 range: the slices this block reads of it}
            for plan in plans[lo:hi]:
                for i, ab in plan:
                    if ranges1[i][2] != w:
                        wanted.setdefault(ranges1[i][2], {}).setdefault(i, []).append(ab)
            sources, at = [], {}
            for s, (x, slices) in enumerate(sorted(wanted.items())):
                wanted_here = [(ranges1[i], *_union(ab)) for i, ab in slices.items()]
                sources.append(_pinned(client, x, slices_between, wanted_here))
                at.update({i: ("piece", s, n) for n, i in enumerate(slices)})
            items = [(r, [ab for _, ab in plans[r]], [at.get(i, ranges1[i]) for i, _ in plans[r]])
                     for r in range(lo, hi)]
            futures.append(_pinned(client, w, derive_block, evaluation, label, which, census, items, *sources))
        if pending is not None:
            _arrived(built, gather_pinned(client, pending, workers), census)
        pending = futures
    _arrived(built, gather_pinned(client, pending or [], workers), census)
    return built[0], built[1]


def _union(slices: list) -> tuple:
    """The least ``[a, b)`` (None: unbounded) holding every slice of ``slices``."""
    a = None if any(s[0] is None for s in slices) else min(s[0] for s in slices)
    b = None if any(s[1] is None for s in slices) else max(s[1] for s in slices)
    return a, b


def map_on_workers(client, kernel, ranges: list, requests: list) -> list:
    """``kernel`` on every range (handles), run on the workers holding them: each worker's ranges cut
    into :data:`BLOCKS_PER_WORKER` tasks, so a pass is a fixed number of tasks whatever the number of
    ranges (each range's answer is its own: the order they are computed in changes nothing); the
    answers in range order."""
    mine: dict = {}
    for r, h in enumerate(ranges):
        mine.setdefault(h[2], []).append(r)
    futures = []
    for w, rs in mine.items():
        count = min(len(rs), BLOCKS_PER_WORKER)
        for b in range(count):
            block = rs[len(rs) * b // count:len(rs) * (b + 1) // count]
            futures.append((block, _pinned(client, w, run_kernels, kernel, packed([ranges[r] for r in block]),
                                           [requests[r] for r in block])))
    out: list = [None] * len(ranges)
    for (block, _), answers in zip(futures, gather_pinned(client, [f for _, f in futures], mine)):
        for r, a in zip(block, answers):
            out[r] = a
    return out


class OnWorkers:
    """What :func:`~calengine.metrics.ranged.engine.evaluate_ranged` and
    :class:`~calengine.metrics.ranged.engine.RangedTables` call to keep an evaluation's tables on the
    workers (passed in by :func:`calengine.metrics.table.evaluate_table`: this module builds on
    :mod:`~calengine.metrics.ranged.engine`, which therefore does not import it)."""

    chunk = staticmethod(chunk_on_worker)
    pick = staticmethod(pick_on_worker)
    ranges = staticmethod(ranges_on_workers)
    derived = staticmethod(derived_on_workers)
    map = staticmethod(map_on_workers)
    drop = staticmethod(drop_evaluation)
    gather = staticmethod(gather_pinned)
