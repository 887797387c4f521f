"""Probing and bagging over a partitioned Parquet table: samples drawn where the rows are.

:mod:`calengine.fit.probing` runs Probing and bagging on a table held in one process, and sends every
classifier's votes on every training row back to the client.  This driver runs them on the fragments
of :mod:`calengine.fit.table`, so that Probing with costing scales with its *samples*, not with
the table:

* **Votes stay on the workers.**  Per fragment, a future holds the vote count of each of its rows per
  column (small integers).  After a round, one task per fragment reads and encodes the fragment
  (:func:`calengine.tasks.partitions.load_part`), applies the round's new classifiers and returns the
  new vote array; a tiny task per fragment returns its histograms (``np.bincount`` per column), the
  client adds them up in fragment order and asks each column's schedule
  (:meth:`calengine.methods.probing.ProbingSchedule.next_thresholds_from_counts`) for the next thresholds.
  The schedule depends on the votes only through that histogram, so the thresholds are exactly those
  of the in-memory driver given the same classifiers.  The client never holds a per-row array.
* **Costing samples are drawn on the workers.**  For each new (column, threshold ``p``, costing round)
  the rejection sample keeps row ``i`` with probability ``c_i / Z`` (``c`` the importance weights of
  :func:`calengine.methods.probing.importance_weights`).  ``Z`` is the *global* maximum cost: it depends only
  on ``p`` and which of the two targets occur, which the client knows from the class counts, so a
  row's acceptance does not depend on its fragment.  Each row's uniform draw comes from a generator
  seeded by (seed, column, classifier, costing round, file key, row group) and indexed by the row's
  place among the labelled rows of its row group, so the sample does not depend on how the table is
  cut into fragments, on the scheduler or on the number of workers.  One sampling task per fragment
  reads the fragment once and returns the sampled rows of every probe of the round; one fit task per
  probe concatenates its pieces in fragment order and fits the learner unweighted
  (:func:`calengine.tasks.probing.fit_or_constant`); the costing rounds of a classifier vote by
  majority, as in the in-memory driver.  The expected size of every sample (the sum of acceptance
  probabilities, from the class counts) is checked against a worker's memory before anything runs,
  and the probes of a round go in waves whose samples fit the cluster's memory together.  Costing at
  ``p`` near 1/2 accepts nearly every row (the first threshold, 1/2, accepts all of them), so those
  samples are about the table's size; ``--max-train-rows N`` raises ``Z`` so that every expected
  sample holds at most ``N`` rows (any ``Z >= max c`` is a valid rejection sampler, only a smaller
  one).  Weighted fits ignore ``--max-train-rows``.
* **Weights** (``weighting=weights``, learners that honour ``sample_weight``): a weighted fit needs
  every row, so each weighted probe assembles the whole table, read fragment by fragment inside its
  fit task, on one worker (checked against the worker's memory; recorded as route ``in-memory``),
  exactly as the in-memory route of :mod:`calengine.fit.table` fits a unit.  Votes still stay on
  the workers.  Given the same seed the classifiers are those of the in-memory driver (same rows, same
  order, same weights, same learner seeds), so the model is the same.
* **Bagging** draws partition-native bootstrap samples: each row enters bag ``(column, i)``
  ``Poisson(1)`` times (seeded like costing), the standard distributed bootstrap: the bag's size is
  random with mean ``n`` rather than exactly ``n``; ``--max-train-rows m`` makes it ``Poisson(m/n)``,
  an m-out-of-n bootstrap of expected size ``m``.  Bagging needs no votes during the fit.
* The **raw-learner map** (:class:`calengine.model.calibrated.RawMap`, for evaluation's baseline) is a reduction
  of ``max |score|`` of every column's first classifier over the fragments.

The result is the same :class:`calengine.model.vote.VoteMember` the in-memory driver makes, so saving,
scoring and evaluation do not change.  Routes recorded in the model's ``x_training.route``:
``costing-sample`` (Probing with costing), ``in-memory`` (Probing with weights), ``bootstrap-sample``
(bagging).  ``--route in-memory`` forces the old driver on the table assembled on one worker.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..methods import probing
from ..parquet.dataset import file_key_hash
from ..errors import DataError
from ..tasks.partitions import load_part
from ..runtime.progress import gather_in_order

_PROBE_STREAM = 0x50524F42  # "PROB"
_BOOT_STREAM = 0x424F4F54  # "BOOT"

#: a sampling task returns at most this share of a worker's memory: a round whose samples would
#: return more from one fragment is split into several sampling tasks (each reads the fragment once)
_SAMPLE_TASK_SHARE = 1 / 8


# ---------------------------------------------------------------------------------------------- in tasks


@dataclass(frozen=True)
class Draw:
    """One sample to draw on the workers: a costing sample (``accept``: acceptance probability of a
    row whose binary target is 0 / 1) or a bootstrap (``accept`` None: Poisson(``rate``) copies per
    row).

    ``stream`` and ``identity`` seed the row draws: (seed, stream, file key, row group, *identity).
    """

    column_class: int | None
    identity: tuple[int, ...]
    accept: tuple[float, float] | None
    stream: int = _PROBE_STREAM
    #: bootstrap only: Poisson(rate) copies per row (rate < 1: an m-out-of-n bootstrap)
    rate: float = 1.0


def binary_target(y: np.ndarray, column_class: int | None) -> np.ndarray:
    """0/1 target of a reduction column (as :func:`calengine.tasks.probing.binary_target`)."""
    if column_class is None:
        return (y == 1).astype(np.int64)
    return (y == column_class).astype(np.int64)


def _row_generator(seed: int, stream: int, file_key: str, group: int, identity: tuple[int, ...]):
    lo, hi = file_key_hash(file_key)
    words = [int(seed) & 0xFFFFFFFF, stream, lo, hi, int(group) & 0xFFFFFFFF, *[int(i) & 0xFFFFFFFF for i in identity]]
    return np.random.default_rng(np.random.SeedSequence(words))


def draw_counts(fragment, labelled_rows: tuple[int, ...], draw: Draw, y01: np.ndarray, seed: int) -> np.ndarray:
    """How many times each labelled row of ``fragment`` enters the sample ``draw`` (0/1 for costing).

    ``labelled_rows[g]``: rows with a label in the fragment's ``g``-th row group (the rows
    :func:`~calengine.tasks.partitions.load_part` keeps); row ``j`` of a row group always gets the
    ``j``-th draw of that row group's generator, whatever the fragment it is read in.
    """
    out = np.empty(y01.shape[0], dtype=np.int64)
    start = 0
    for g, n in zip(fragment.row_groups, labelled_rows):
        if n == 0:
            continue
        rng = _row_generator(seed, draw.stream, fragment.file_key, g, draw.identity)
        if draw.accept is None:
            out[start : start + n] = rng.poisson(draw.rate, size=n)
        else:
            acc = np.asarray(draw.accept, dtype=float)[y01[start : start + n]]
            out[start : start + n] = rng.random(n) < acc
        start += n
    if start != y01.shape[0]:
        raise DataError(
            f"'{fragment.path}' changed while the job ran ({y01.shape[0]} labelled rows read, {start} planned);"
            " do not modify the data during a fit"
        )
    return out


def sample_fragment(fragment, enc, labelled_rows: tuple[int, ...], draws: list[Draw], seed: int) -> list:
    """Read one fragment once and draw every sample in ``draws`` from it: ``[(X, y01), ...]``."""
    part = load_part(fragment, enc, None)
    out = []
    for d in draws:
        y01 = binary_target(part.y, d.column_class)
        copies = draw_counts(fragment, labelled_rows, d, y01, seed)
        idx = np.repeat(np.arange(copies.size), copies) if d.accept is None else np.flatnonzero(copies)
        out.append((part.X[idx], y01[idx]))
    return out


def take(items: list, i: int):
    """One sample of a sampling task's result (a tiny task: each fit fetches only its own pieces)."""
    return items[i]


def _stack(pieces):
    import scipy.sparse as sp

    Xs = [p[0] for p in pieces]
    if sp.issparse(Xs[0]):
        return sp.vstack(Xs, format="csr")
    return np.concatenate(Xs)


def fit_sample(learner, seed: int, *pieces):
    """Fit one classifier on a sample's pieces, concatenated in fragment order (a constant classifier
    when the sample holds a single class)."""
    from ..tasks.probing import fit_or_constant

    y = np.concatenate([p[1] for p in pieces]) if pieces else np.empty(0, dtype=np.int64)
    if y.size == 0:
        raise DataError("a Probing or bagging sample is empty; check the data (every row lacks a label?)")
    X = _stack(pieces)
    del pieces
    return fit_or_constant(X, y, None, learner, seed)


def fit_weighted(fragments, enc, column_class: int | None, p: float, bounded: bool, learner, seed: int):
    """One weighted Probing classifier: every row, read fragment by fragment on this worker, weighted
    with :func:`calengine.methods.probing.importance_weights`, fitted once (as the in-memory driver does)."""
    from ..tasks.probing import fit_or_constant

    pieces = []
    for fragment in fragments:
        part = load_part(fragment, enc, None)
        pieces.append((part.X, binary_target(part.y, column_class)))
    X = _stack(pieces)
    y01 = np.concatenate([q[1] for q in pieces])
    del pieces
    return fit_or_constant(X, y01, probing.importance_weights(y01, p, bounded=bounded), learner, seed)


def update_votes(fragment, enc, votes, n_columns: int, dtype: str, new: list):
    """The fragment's vote counts after the round's classifiers ``new`` = ``[(column, [voters of its
    costing rounds]), ...]`` (``votes`` None before the first round).  Returns a new array."""
    from ..runtime.threads import pin_native_threads

    pin_native_threads()
    part = load_part(fragment, enc, None)
    out = np.zeros((part.y.shape[0], n_columns), dtype=dtype) if votes is None else votes.copy()
    for column, rounds in new:
        v = sum(r.votes(part.X).astype(np.int64) for r in rounds)
        v = probing.majority_vote(v, len(rounds)) if len(rounds) > 1 else v
        out[:, column] += v.astype(out.dtype)
    return out


def vote_histograms(votes, lengths: tuple[int, ...]) -> list[np.ndarray]:
    """Per column ``c``, ``bincount`` of the fragment's vote counts with ``lengths[c]`` bins."""
    return [np.bincount(votes[:, c].astype(np.int64), minlength=n) for c, n in enumerate(lengths)]


def first_score_extent(fragment, enc, voters: list) -> np.ndarray:
    """Per column, ``max |score|`` of its first classifier over the fragment's rows (0 without rows)."""
    from ..model.calibrated import as_columns
    from ..runtime.threads import pin_native_threads

    pin_native_threads()
    part = load_part(fragment, enc, None)
    out = np.zeros(len(voters))
    if part.y.shape[0] == 0:
        return out
    for c, voter in enumerate(voters):
        if voter.learner is None:
            out[c] = abs(float(voter.constant))
        else:
            out[c] = float(np.abs(as_columns(voter.learner.score(part.X))[:, 0]).max())
    return out


# ---------------------------------------------------------------------------------------------- planning


def costing_acceptance(
    n_neg: int, n_pos: int, p: float, bounded: bool = False, max_rows: int | None = None
) -> tuple[float, float]:
    """Acceptance probability of a row with binary target 0 / 1 at threshold ``p``: ``c / Z`` with
    ``Z`` the largest cost over the targets that occur (what :func:`probing.acceptance_from_costs`
    gives on the whole column).

    ``max_rows`` (``--max-train-rows``): raise ``Z`` so that the expected sample holds at most that
    many rows.  Any ``Z >= max c`` is a valid rejection sampler (the kept rows are still an i.i.d.
    sample of the cost-reweighted distribution, Zadrozny, Langford & Abe), only a smaller one.
    """
    c = probing.importance_weights(np.array([0, 1]), p, bounded=bounded)
    present = np.array([n_neg > 0, n_pos > 0])
    if not present.any():
        raise DataError("the training table has no rows")
    z = float(c[present].max())
    if max_rows:
        z = max(z, float(n_neg * c[0] + n_pos * c[1]) / max_rows)
    return float(c[0] / z), float(c[1] / z)


def expected_rows(n_neg: int, n_pos: int, accept: tuple[float, float] | None, rate: float = 1.0) -> float:
    """Expected size of a sample: the sum of the acceptance probabilities (``rate * n`` for a bootstrap)."""
    if accept is None:
        return float(n_neg + n_pos) * rate
    return n_neg * accept[0] + n_pos * accept[1]


def labelled_rows_per_group(ctx) -> list[tuple[int, ...]]:
    """Per fragment, the rows with a label in each of its row groups (from the planning counts)."""
    out = []
    for fr in ctx.fragments:
        out.append(tuple(int(np.sum(ctx.group_counts.get((fr.file_key, g), 0))) for g in fr.row_groups))
    return out


def _column_counts(ctx, column_class: int | None) -> tuple[int, int]:
    n = int(ctx.n_rows)
    n_pos = int(ctx.class_counts[1 if column_class is None else column_class])
    return n - n_pos, n_pos


def _per_row_bytes(ctx) -> float:
    from ..plan.memory import feature_width as _feature_width

    return 8.0 * (_feature_width(ctx.enc) + 2)


def _n_workers(client) -> int:
    return max(1, len(client.scheduler_info().get("workers", {})))


def _waves(sizes: list[float], budget: float) -> list[list[int]]:
    """Consecutive groups of sample indices whose expected rows add up to at most ``budget`` (at least
    one sample each): the samples held in the cluster's memory at once."""
    waves, current, total = [], [], 0.0
    for i, s in enumerate(sizes):
        if current and total + s > budget:
            waves.append(current)
            current, total = [], 0.0
        current.append(i)
        total += s
    if current:
        waves.append(current)
    return waves


def _chunk_limit(ctx, per_row: float) -> float:
    """How many fragments' worth of rows one sampling task may return (sum of acceptance fractions)."""
    if not math.isfinite(ctx.memory_limit):
        return math.inf
    largest = max((fr.n_rows for fr in ctx.fragments), default=1)
    return max(1.0, ctx.memory_limit * _SAMPLE_TASK_SHARE / (max(1, largest) * per_row))


# ---------------------------------------------------------------------------------------------- drivers


def draw_and_fit(client, ctx, learner, draws: list[Draw], seeds: list[int], seed: int, what: str) -> list:
    """Futures of the classifiers fitted on ``draws``, drawn on the workers.

    Every sample's expected size must fit one worker; the draws go in waves whose expected sizes add
    up to what the cluster's workers hold together (the next wave starts when the previous one's
    classifiers are fitted and its samples released).
    """
    from distributed import as_completed

    from ..plan.memory import check_fits_memory as _check_fits_memory

    per_row = _per_row_bytes(ctx)
    sizes = []
    for d in draws:
        n_neg, n_pos = _column_counts(ctx, d.column_class)
        e = expected_rows(n_neg, n_pos, d.accept, d.rate)
        sizes.append(e + 4.0 * math.sqrt(e) + 1.0)  # a sample is rarely much larger than expected
    if sizes:
        _check_fits_memory(ctx, int(max(sizes)), what, per_row)
    budget = _n_workers(client) * ctx.memory_limit / (3.0 * per_row) if math.isfinite(ctx.memory_limit) else math.inf
    labelled = labelled_rows_per_group(ctx)
    n = max(1, ctx.n_rows)
    chunk_limit = _chunk_limit(ctx, per_row)
    out: list = [None] * len(draws)
    for wave in _waves(sizes, budget):
        chunks = _waves([sizes[i] / n for i in wave], chunk_limit)
        fits = []
        for chunk in chunks:
            members = [wave[j] for j in chunk]
            chunk_draws = [draws[i] for i in members]
            samples = [
                client.submit(sample_fragment, fr, ctx.enc, labelled[j], chunk_draws, seed, pure=False)
                for j, fr in enumerate(ctx.fragments)
            ]
            for k, i in enumerate(members):
                pieces = [client.submit(take, s, k, pure=False) for s in samples]
                out[i] = client.submit(fit_sample, learner, seeds[i], *pieces, pure=False)
                fits.append(out[i])
            del samples, pieces
        if len(fits) < len(draws):  # more waves to come: hold one wave's samples at a time
            for f in as_completed(fits, loop=client.loop):
                if f.status == "error":
                    f.result()  # raises the task's error here
    return out


def _progress(progress, label: str, total: int):
    if progress is not None:
        progress.start(label, total)


def _vote_dtype(t: int) -> str:
    return str(np.min_scalar_type(t))


def fit_probing(client, ctx, learner, s: dict, columns: list, seed: int, progress) -> tuple[list, list, str]:
    """Probing's classifiers per column and the schedules' boundaries; votes stay on the workers."""
    from ..plan.memory import check_fits_memory as _check_fits_memory
    from .probing import probing_weighting
    from ..tasks.arrays import task_seed

    weighting = probing_weighting(learner, s["weighting"])
    rounds = s["costing_rounds"] if weighting == "costing" else 1
    bounded = bool(s["bounded_weights"])
    if weighting == "weights":
        try:
            _check_fits_memory(ctx, ctx.n_rows, "--method probing with weighting=weights (every row per weighted fit)")
        except DataError as exc:
            raise DataError(
                f"{exc}; or draw costing samples instead (method_params weighting=costing, which honours"
                " max_train_rows)", parameter=("method_params", "max_train_rows")) from None
    schedules = [probing.ProbingSchedule(s["t"], s["loss"], s["batch"], s["interval_rule"]) for _ in columns]
    n = int(ctx.n_rows)
    hist = [np.array([n], dtype=np.int64) for _ in columns]
    voters: list[list] = [[] for _ in columns]  # futures, then fitted voters: voters[c][i][r]
    votes = [None] * len(ctx.fragments)
    dtype = _vote_dtype(s["t"])
    _progress(progress, "probing", s["t"] * rounds * len(columns))
    reported = 0
    while not all(sched.done for sched in schedules):
        new = []  # (column, classifier, threshold)
        for c, sched in enumerate(schedules):
            if not sched.done:
                for p in sched.next_thresholds_from_counts(hist[c], n):
                    new.append((c, len(voters[c]), float(p)))
                    voters[c].append(None)
        if weighting == "costing":
            draws, seeds = [], []
            for c, i, p in new:
                accept = costing_acceptance(*_column_counts(ctx, columns[c]), p, bounded, ctx.spec.max_train_rows)
                for r in range(rounds):
                    draws.append(Draw(columns[c], (c, i, r), accept))
                    seeds.append(task_seed(seed, c, i, r))
            fitted = draw_and_fit(
                client, ctx, learner, draws, seeds, seed, "one Probing classifier's costing sample"
            )
        else:
            fitted = [
                client.submit(
                    fit_weighted, ctx.fragments, ctx.enc, columns[c], p, bounded, learner, task_seed(seed, c, i, 0),
                    pure=False,
                )
                for c, i, p in new
            ]
        round_fits = []
        for j, (c, i, _) in enumerate(new):
            voters[c][i] = fitted[j * rounds : (j + 1) * rounds]
            round_fits.append((c, voters[c][i]))
        if all(sched.done for sched in schedules):
            break
        votes = [
            client.submit(update_votes, fr, ctx.enc, votes[j], len(columns), dtype, round_fits, pure=False)
            for j, fr in enumerate(ctx.fragments)
        ]
        lengths = tuple(sched.n_classifiers + 1 for sched in schedules)
        parts = gather_in_order(
            client, [client.submit(vote_histograms, v, lengths, pure=False) for v in votes], None, "votes"
        )
        if progress is not None:
            progress.advance(len(new) * rounds)
            reported += len(new) * rounds
        hist = [np.sum([q[c] for q in parts], axis=0) for c in range(len(columns))]
    del votes
    flat = [f for column in voters for rs in column for f in rs]
    got = client.gather(flat)
    if progress is not None:
        progress.advance(len(flat) - reported)
        progress.finish()
    it = iter(got)
    fitted_voters = [[[next(it) for _ in rs] for rs in column] for column in voters]
    route = "costing-sample" if weighting == "costing" else "in-memory"
    return fitted_voters, [sched.boundaries for sched in schedules], route


def fit_bagging(client, ctx, learner, s: dict, columns: list, seed: int, progress) -> tuple[list, list, str]:
    """Bagging's classifiers: Poisson(1) bootstrap samples drawn on the workers (Poisson(m / n), an
    m-out-of-n bootstrap of expected size m, with ``--max-train-rows m``)."""
    from ..tasks.arrays import task_seed

    rate = 1.0
    if ctx.spec.max_train_rows and ctx.spec.max_train_rows < ctx.n_rows:
        rate = ctx.spec.max_train_rows / ctx.n_rows
    draws, seeds = [], []
    for c, col_class in enumerate(columns):
        for i in range(s["t"]):
            draws.append(Draw(col_class, (c, i), None, _BOOT_STREAM, rate))
            seeds.append(task_seed(seed, c, i))
    futures = draw_and_fit(client, ctx, learner, draws, seeds, seed, "one bagging classifier's bootstrap sample")
    got = gather_in_order(client, futures, progress, "bagging")
    t = s["t"]
    voters = [[[v] for v in got[c * t : (c + 1) * t]] for c in range(len(columns))]
    return voters, [np.array([0.0, 1.0]) for _ in columns], "bootstrap-sample"


def raw_map(client, ctx, learner, voters: list):
    """The raw-learner map of the first classifier of every column, reduced over the fragments."""
    from ..model.calibrated import RawMap

    k = len(voters)
    if learner.score_kind == "proba":
        return RawMap(learner.score_kind, np.zeros(k), np.ones(k))
    first = client.scatter([column[0][0] for column in voters], broadcast=False, hash=False)
    parts = client.gather(
        [client.submit(first_score_extent, fr, ctx.enc, first, pure=False) for fr in ctx.fragments]
    )
    a = np.max(parts, axis=0)
    return RawMap(learner.score_kind, -a, a)


def fit_reduction_partitioned(client, ctx, learner, config, plugins, progress):
    """Probing or bagging on the fragments of ``ctx``: ``(members, code matrix, combiner, column
    counts, route)``, the first four as :func:`calengine.fit.probing.fit_reduction_members` returns them."""
    from ..model.vote import VoteMember
    from .probing import column_classes, method_settings, vote_code_matrix

    s = method_settings(config.method, config.method_params)
    labels = ctx.enc.labels
    k = labels.n_classes
    columns = column_classes(k, s["multiclass"])
    if ctx.n_rows == 0:
        raise DataError("the training table has no rows")
    if config.method == "probing":
        voters, boundaries, route = fit_probing(client, ctx, learner, s, columns, config.seed, progress)
    else:
        voters, boundaries, route = fit_bagging(client, ctx, learner, s, columns, config.seed, progress)
    raw = raw_map(client, ctx, learner, voters)
    member = VoteMember(config.method, voters, boundaries, s.get("loss", "cross_entropy"), s["clip"], raw)
    matrix, combiner = vote_code_matrix(k, s["multiclass"], plugins)
    counts = np.full(matrix.shape[1], ctx.n_rows, dtype=np.int64)
    return [member], matrix, combiner, counts, route
