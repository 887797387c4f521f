"""``calengine conformal``: attach a split-conformal layer to a fitted model, without refitting it.

The flow (graph building; what runs in tasks is in :mod:`calengine.scores.conformal`):

1. **scores**: one task per chunk of the calibration table scores its labelled rows with the model
   and keeps their nonconformity scores sorted by group (:func:`~calengine.scores.conformal.calibration_chunk`;
   from :data:`~calengine.plan.memory.SPILL_MIN_ROWS` rows on, as files of the job's scratch
   directory); the client gathers per chunk only the group counts, the smallest and largest score,
   the class counts and, for ``--mondrian COL``, the chunk's segments.
2. **checks**: too few rows for ``alpha`` (the threshold would be infinite: the message says how many a
   finite one needs), a class without calibration rows under ``--mondrian class``, weights all zero,
   more segments than ``max_segments`` -- one line each, nothing written.
3. **thresholds**: the exact order statistics of every group, and each group's knot table for
   p-values, by the rounds of :class:`calengine.reductions.selection.Selection` over the chunks'
   blocks (a round is one small task per chunk, answers merged as they arrive: integer sums, minima
   and maxima, so any partitioning gives the same bits).
4. **layer**: a copy of the model with a :class:`~calengine.model.conformal.ConformalLayer` and a
   lineage record (mode ``conformal``: the parent's path and content hash, the data's fingerprint,
   the options) -- the learners, calibrators and encoder are the parent's, bit for bit.

Mondrian by segment (``--mondrian COL[,COL]``) follows ``fit --by``'s rule for rare segments: a
segment gets a threshold of its own when its calibration rows suffice for a finite one at ``alpha``
(at least :func:`~calengine.methods.conformal.rows_needed`); every other segment -- too few rows, unseen
in calibration, or a missing value in a segment column -- uses the global threshold of all the rows.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataError, ParameterError
from ..methods import conformal as cf
from ..reductions import selection as sel

__all__ = ["ConformalOptions", "check_options", "conformalize_table", "conformalize_with_lineage", "conformalize"]

#: the default RAPS penalty and number of classes admitted without it (Angelopoulos et al. 2021's
#: examples use lambda = 0.01 with k_reg found by tuning; 1 keeps the top class free)
DEFAULT_RAPS_LAMBDA = 0.01
DEFAULT_RAPS_K_REG = 1


@dataclass(frozen=True)
class ConformalOptions:
    """Everything ``conformal`` takes besides the model and the data, checked (:func:`check_options`)."""

    target: str
    alpha: float
    score: str = "lac"
    mondrian: str = "none"
    by: tuple[str, ...] = ()
    weight: str | None = None
    randomized: bool = False
    seed: int = 0
    lam: float = 0.0
    k_reg: int = 0
    max_segments: int = 1000
    resolution: int = sel.DEFAULT_RESOLUTION
    #: what the messages call each option: the Python parameters, or the CLI's flags
    names: tuple = ()

    def name(self, key: str) -> str:
        return dict(self.names).get(key, key)

    def given(self, key: str, value) -> str:
        """How the user gave an option: ``--alpha 0.1`` on the command line, ``alpha=0.1`` in Python."""
        name = self.name(key)
        return f"{name} {value}" if name.startswith("--") else f"{name}={value!r}"


@contextmanager
def _naming(*parameters: str):
    """A :class:`ParameterError` from a shared check (worded with the names it was given) carries the
    Python parameters it is about, so the CLI maps them to flags (:mod:`calengine.cli.parameters`)."""
    try:
        yield
    except ParameterError as exc:
        if exc.parameters:
            raise
        raise ParameterError(str(exc), parameter=parameters) from None


def check_options(target, alpha, score="lac", mondrian=None, weight=None, randomized=None, seed=0,
                  raps_lambda=None, raps_k_reg=None, max_segments=None, names=None) -> ConformalOptions:
    """The :class:`ConformalOptions` of the arguments, or one :class:`ParameterError` naming the one at
    fault (``names``: how to call each parameter -- the CLI passes its flags)."""
    names = {"alpha": "alpha", "score": "score", "mondrian": "mondrian", "weight": "weight", "seed": "seed",
             "randomized": "randomized", "raps_lambda": "raps_lambda", "raps_k_reg": "raps_k_reg",
             "target": "target", "max_segments": "max_segments", **(names or {})}
    if not isinstance(target, str) or not target:
        raise ParameterError(f"{names['target']} must name the class column, got {target!r}", parameter="target")
    with _naming("alpha"):
        alpha = cf.check_alpha(alpha, names["alpha"])
    with _naming("score"):
        score = cf.check_score(score, names["score"])
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**32:
        raise ParameterError(f"{names['seed']} must be an integer from 0 to 2**32 - 1, got {seed!r}",
                             parameter="seed")
    if randomized is not None and not isinstance(randomized, bool):
        raise ParameterError(f"{names['randomized']} must be True or False, got {randomized!r}",
                             parameter="randomized")
    if randomized is not None and score not in cf.RANDOMISABLE:
        raise ParameterError(f"{names['randomized']} applies to the aps and raps scores; {score} has no randomised variant",
                             parameter="randomized")
    if randomized is None:
        randomized = score in cf.RANDOMISABLE
    lam, k_reg = 0.0, 0
    if score == "raps":
        with _naming("raps_lambda", "raps_k_reg"):
            lam, k_reg = cf.check_raps(DEFAULT_RAPS_LAMBDA if raps_lambda is None else raps_lambda,
                                   DEFAULT_RAPS_K_REG if raps_k_reg is None else raps_k_reg,
                                       names["raps_lambda"], names["raps_k_reg"])
    elif raps_lambda is not None or raps_k_reg is not None:
        key = "raps_lambda" if raps_lambda is not None else "raps_k_reg"
        raise ParameterError(f"{names[key]} is a parameter of RAPS' penalty: add {names['score']}='raps' or drop"
                             f" {names[key]}", parameter=(key, "score"))
    from ..metrics.segments import DEFAULT_MAX_SEGMENTS, MAX_SEGMENTS_LIMIT, check_segment_options

    max_segments = DEFAULT_MAX_SEGMENTS if max_segments is None else max_segments
    if isinstance(max_segments, bool) or not isinstance(max_segments, int) or not 1 <= max_segments <= MAX_SEGMENTS_LIMIT:
        raise ParameterError(f"{names['max_segments']} must be from 1 to {MAX_SEGMENTS_LIMIT}, got {max_segments!r}",
                             parameter="max_segments")
    kind, by = "none", ()
    if mondrian is not None:
        if mondrian == "class":
            kind = "class"
        else:
            try:
                by = check_segment_options(mondrian, max_segments)
            except ParameterError:
                raise ParameterError(f"{names['mondrian']} takes 'class' or segment columns separated by commas,"
                                     f" got {mondrian!r}; e.g. {names['mondrian']}='country,device'",
                                     parameter="mondrian") from None
            kind = "segments"
    if weight is not None and (not isinstance(weight, str) or not weight):
        raise ParameterError(f"{names['weight']} must name a column of weights, got {weight!r}", parameter="weight")
    clash = [c for c in (weight, *by) if c == target]
    if clash:
        raise ParameterError(f"{names['weight'] if weight == target else names['mondrian']} names the target column"
                             f" '{target}'; give another column",
                             parameter=("weight" if weight == target else "mondrian"))
    if weight is not None and weight in by:
        raise ParameterError(f"{names['weight']}={weight!r} is also a {names['mondrian']} column; give another column",
                             parameter=("weight", "mondrian"))
    return ConformalOptions(target=target, alpha=alpha, score=score, mondrian=kind, by=by, weight=weight,
                            randomized=randomized, seed=int(seed), lam=lam, k_reg=k_reg, max_segments=max_segments,
                            names=tuple(sorted(names.items())))


# ---------------------------------------------------------------------------------------------- driver


def _ask(client, blocks, lookups, progress=None):
    """A round of :class:`~calengine.reductions.selection.Selection`: the request sent once, one task per
    block, answers merged as they arrive (the merge is exact and order-free)."""
    from ..scores.conformal import query_block
    from ..runtime.thread_client import as_completed

    def ask(req):
        req_f = client.scatter(req, broadcast=True) if len(blocks) > 1 else req
        futures = [client.submit(query_block, b, lk, req_f, pure=False) for b, lk in zip(blocks, lookups)]
        merged = None
        for fut in as_completed(client, futures):
            ans = fut.result()
            merged = ans if merged is None else sel.merge_answers([merged, ans])
        return merged

    return ask


def _global_groups(opts: ConformalOptions, infos, n_classes: int):
    """``(n_groups, keys, lookups, summary)``: the job's groups, its segments (sorted), per block the
    map from the job's group to the block's (None when they agree) and the merged summary."""
    summaries = [i[0] for i in infos]
    if opts.mondrian != "segments":
        return summaries[0].counts.shape[0], [], [None] * len(infos), sel.merge_summaries(summaries)
    keys = sorted({tuple(k) for i in infos for k in i[4]})
    if len(keys) > opts.max_segments:
        raise DataError(
            f"{opts.given('mondrian', ','.join(opts.by))} makes more than {opts.max_segments} segments ({len(keys)});"
            " use columns with fewer values (e.g. an age band rather than the age) or raise"
            f" {opts.name('max_segments')} (at most 20000)", parameter=("mondrian", "max_segments")
        )
    index = {k: 1 + j for j, k in enumerate(keys)}
    G = 1 + len(keys)
    lookups, counts, mins, maxs = [], np.zeros(G, dtype=np.int64), np.full(G, np.iinfo(np.uint64).max, np.uint64), \
        np.zeros(G, dtype=np.uint64)
    max_w = 0.0
    for info in infos:
        summ, local_keys = info[0], info[4]
        lk = np.full(G, -1, dtype=np.int64)
        lk[0] = 0
        for j, key in enumerate(local_keys):
            lk[index[tuple(key)]] = 1 + j
        lookups.append(lk)
        present = np.flatnonzero(lk >= 0)
        loc = lk[present]
        counts[present] += summ.counts[loc]
        mins[present] = np.minimum(mins[present], summ.mins[loc])
        maxs[present] = np.maximum(maxs[present], summ.maxs[loc])
        max_w = max(max_w, summ.max_weight)
    return G, keys, lookups, sel.Summary(counts, mins, maxs, max_w)


#: a group of at most this many calibration rows keeps every distinct score as a knot (exact p-values) ...
EXACT_KNOTS = 16_384
#: ... as long as the layer's knots stay within this many over all groups; beyond, p-values are bounded
#: from above within 1/resolution (:data:`calengine.reductions.selection.DEFAULT_RESOLUTION` per group,
#: fewer when there are many groups)
KNOT_BUDGET = 1 << 20


def _resolutions(counts: np.ndarray, own: list[int]) -> list[int]:
    """Per group: :data:`~calengine.reductions.selection.EXACT` for a small group, the knots' resolution
    for a large one, 0 for a group without a threshold of its own (it has no knots)."""
    per_group = max(16, min(EXACT_KNOTS, KNOT_BUDGET // max(1, len(own))))
    coarse = max(16, min(sel.DEFAULT_RESOLUTION, per_group))
    own_set = set(own)
    return [0 if g not in own_set else (sel.EXACT if counts[g] <= per_group else coarse) for g in range(len(counts))]


def _level_ints(total: int, a) -> list[int]:
    """Test-weight levels (fixed-point ints, ascending) of a weighted group of total ``total``: the largest
    weight whose threshold is finite, then sqrt(2) apart below it, and 0."""
    from ..model.conformal import MAX_LEVELS

    top = (a * total) // (1 - a)  # floor(a W / (1 - a)): (1 - a)(W + w) <= W
    top = int(top)
    levels = {0, top}
    for j in range(1, MAX_LEVELS - 1):
        levels.add(int(top * 2.0 ** (-j / 2)))
    return sorted(levels)


def _float_down(units: int, scale: float) -> float:
    """The largest float64 at most ``units * scale * 2**-62`` (a level stored must not exceed its exact value)."""
    from fractions import Fraction

    exact = Fraction(units) * Fraction(scale) / (1 << 62)
    x = float(exact)
    return math.nextafter(x, 0.0) if Fraction(x) > exact else x


def _to_float(units, scale: float, weighted: bool) -> float:
    if not weighted:
        return float(units)
    from ..reductions.exact import fixed_to_float

    return fixed_to_float(int(units), scale)


def conformalize_table(client, model, files: list[str], opts: ConformalOptions, *, batch_rows: int | None = None,
                       chunk_rows: int = 1_000_000, progress=None) -> tuple[Any, dict]:
    """The model with a conformal layer computed from the labelled rows of ``files`` (module docstring).
    Returns ``(new_model, info)``, ``info = {"rows", "missing", "rounds", "groups", ...}``; the new
    model's ``info`` does not hold the lineage yet (:func:`conformalize_with_lineage` adds it)."""
    from ..parquet.data import check_columns
    from ..plan.memory import held_out_scratch
    from ..runtime.progress import gather_in_order
    from ..scores.conformal import block_info, calibration_chunk, drop_block
    from ..scores.table import default_batch_rows, plan_chunks, share_model

    _check_weight_column(model, opts)
    columns = list(dict.fromkeys(list(model.encoder.input_columns) + [opts.target] + list(opts.by)
                                 + ([opts.weight] if opts.weight else [])))
    check_columns(files, columns)
    batch_rows = default_batch_rows(len(columns)) if batch_rows is None else batch_rows
    chunks = [c for c in plan_chunks(files, columns, chunk_rows) if c.n_rows > 0]
    if not chunks:
        raise DataError("the calibration table has no rows; conformal calibration needs labelled rows the model did"
                        " not train on")
    n_rows = sum(c.n_rows for c in chunks)
    model_f = share_model(client, model)
    with held_out_scratch(client, n_rows) as scratch:
        blocks = [client.submit(calibration_chunk, model_f, c, _spec(opts), batch_rows, scratch, pure=False)
                  for c in chunks]
        try:
            infos = gather_in_order(client, [client.submit(block_info, b, pure=False) for b in blocks], progress,
                                    "conformal scores")
            return _solve(model, opts, infos, n_rows, lambda lookups: _ask(client, blocks, lookups, progress))
        finally:
            try:
                client.gather([client.submit(drop_block, b, pure=False) for b in blocks])
            except Exception:  # noqa: BLE001 - the scratch directory goes anyway; the job's own error matters
                pass


def conformalize_arrays(model, X, y, opts: ConformalOptions, weights=None, frame=None) -> tuple[Any, dict]:
    """:func:`conformalize_table` of rows held in memory: ``X`` encoded as the model reads it, ``y`` class
    indices, ``weights`` the weight column's values, ``frame`` the rows' DataFrame (segment columns).
    One block, the same selection, so the same thresholds as the table path on the same rows."""
    from ..reductions.column_stats import checked_weights
    from ..scores.conformal import CalibrationBlock, block_info, query_block

    k = model.n_classes
    y = np.asarray(y, dtype=np.int64)
    w = None if weights is None else checked_weights(__import__("pandas").Series(weights), opts.name("weight"))
    P = model.predict_proba_features(X)
    u = cf.row_uniforms(cf.row_hashes(X), opts.seed) if opts.randomized else None
    V = cf.true_scores(P, y, opts.score, u, opts.lam, opts.k_reg)
    live = np.ones(y.size, dtype=bool) if w is None else w > 0
    keys: list = []
    if opts.mondrian == "segments":
        from ..model.segmented import segment_codes

        if frame is None or any(c not in frame.columns for c in opts.by):
            raise DataError(f"{opts.given('mondrian', ','.join(opts.by))} needs those columns in X (a DataFrame)",
                            parameter="mondrian")
        keys, codes = segment_codes(frame, opts.by)
        seg = codes >= 0
        scores = np.concatenate([V, V[seg]])
        groups = np.concatenate([np.zeros(V.size, dtype=np.int64), 1 + codes[seg]])
        ws = None if w is None else np.concatenate([w, w[seg]])
    else:
        scores, ws = V, w
        groups = y if opts.mondrian == "class" else np.zeros(V.size, dtype=np.int64)
    n_groups = {"none": 1, "class": k, "segments": 1 + len(keys)}[opts.mondrian]
    block = CalibrationBlock(sel.sorted_block(scores, groups, n_groups, ws), int(live.sum()), 0,
                             np.bincount(y[live], minlength=k), list(keys), 0.0 if w is None else float(w.sum()))
    infos = [block_info(block)]

    def ask_factory(lookups):
        return lambda req: query_block(block, lookups[0], req)

    return _solve(model, opts, infos, int(y.size), ask_factory)


def _spec(opts: ConformalOptions):
    from ..scores.conformal import CalibrationSpec

    return CalibrationSpec(opts.target, opts.score, opts.randomized, opts.seed, opts.lam, opts.k_reg, opts.mondrian,
                           opts.by, opts.weight)


def _check_weight_column(model, opts: ConformalOptions) -> None:
    if opts.weight is not None and model.encoder is not None and opts.weight in model.encoder.input_columns:
        raise DataError(f"{opts.given('weight', opts.weight)} is a column the model reads; give a column of weights"
                        " (w(x), the likelihood ratio of test to calibration rows)", parameter="weight")


def _solve(model, opts: ConformalOptions, infos: list, n_rows: int, ask_factory) -> tuple[Any, dict]:
    """Checks, thresholds and the layer from the blocks' ``infos`` (:func:`calengine.scores.conformal.block_info`);
    ``ask_factory(lookups)`` gives the function answering a selection round over the blocks."""
    import copy

    from ..model.conformal import ConformalLayer

    k = model.n_classes
    need = cf.rows_needed(opts.alpha)
    rows = int(sum(i[1] for i in infos))
    missing = int(sum(i[2] for i in infos))
    class_counts = np.sum([i[3] for i in infos], axis=0)
    if opts.weight is not None and n_rows - missing > 0 and not sum(i[5] for i in infos) > 0:
        raise DataError(f"every row of {opts.name('weight')} column '{opts.weight}' is 0; weighted conformal"
                        " needs rows of positive weight", parameter="weight")
    if rows == 0:
        raise DataError(f"the calibration table has no labelled rows (target '{opts.target}' is missing on"
                        f" all {missing} rows); conformal calibration needs labelled rows")
    _check_rows(opts, rows, class_counts, model, need)
    G, keys, lookups, summary = _global_groups(opts, infos, k)
    counts = summary.counts
    own = [g for g in range(G) if counts[g] >= need]  # segments below it use the global threshold
    a = cf.exact_fraction(opts.alpha)
    per_target: list[tuple[int, int]] = []  # (group, level index)
    level_units: dict[int, list[int]] = {}

    def targets(totals):
        out = []
        per_target.clear()
        for g in own:
            if opts.weight is None:
                out.append((g, cf.order_rank(int(totals[g]), opts.alpha)))
                per_target.append((g, 0))
            else:
                level_units[g] = _level_ints(int(totals[g]), a)
                for j, lv in enumerate(level_units[g]):
                    out.append((g, int(math.ceil((1 - a) * (int(totals[g]) + lv)))))
                    per_target.append((g, j))
        return out

    selection = sel.Selection(summary, targets, weighted=opts.weight is not None, resolution=_resolutions(counts, own))
    sel.run_selection(selection, ask_factory(lookups))
    found = selection.found()
    weighted = opts.weight is not None
    scale = selection.scale
    by_group: dict[int, dict[int, tuple]] = {}
    for (g, j), hit in zip(per_target, found):
        if hit is None:  # cannot happen for groups of `own` (tau <= total): the checks above refuse those
            raise DataError(f"calibration group {g} has no finite threshold at {opts.given('alpha', opts.alpha)}",
                            parameter="alpha")
        by_group.setdefault(g, {})[j] = hit
    L = max((len(v) for v in by_group.values()), default=1)
    if opts.mondrian == "segments":
        groups = [0] + [g for g in own if g != 0]
        layer_keys = [keys[g - 1] for g in groups[1:]]
    else:
        groups = list(range(G))
        layer_keys = []
    thresholds = np.empty((len(groups), L))
    levels = np.empty((len(groups), L)) if weighted else None
    kv, km, offs = [], [], [0]
    for i, g in enumerate(groups):
        hits = by_group[g]
        keys_g = np.array([hits[j][0] for j in sorted(hits)], dtype=np.uint64)
        th = sel.key_values(keys_g)
        if weighted:
            lv = [_float_down(u, scale) for u in level_units[g]]
            # levels whose floats coincide keep the first (its threshold holds for every weight up to it)
            keep = [0] + [j for j in range(1, len(lv)) if lv[j] > lv[j - 1]]
            lv, th = [lv[j] for j in keep], th[keep]
            # a group with fewer levels is padded with infinite ones: a weight above its last level gets
            # an infinite threshold there, which is the rule's answer for it
            levels[i] = lv + [math.inf] * (L - len(lv))
            thresholds[i] = np.concatenate((th, np.full(L - len(lv), math.inf)))
        else:
            thresholds[i] = th
        t_key = int(keys_g[-1]) if keys_g.size else None
        kk, mm = selection.knots(g, keep=() if t_key is None else (t_key, t_key + 1))
        kv.append(sel.key_values(kk))
        km.append(np.array([_to_float(m, scale, weighted) for m in mm], dtype=np.float64))
        offs.append(offs[-1] + kk.size)
    totals = np.array([_to_float(selection.totals[g], scale, weighted) for g in groups], dtype=np.float64)
    layer = ConformalLayer(
        score=opts.score, alpha=opts.alpha, thresholds=thresholds, rows=counts[groups].astype(np.int64),
        totals=totals, knot_values=np.concatenate(kv) if kv else np.empty(0),
        knot_masses=np.concatenate(km) if km else np.empty(0), knot_offsets=np.asarray(offs, dtype=np.int64),
        randomized=opts.randomized, seed=opts.seed, lam=opts.lam, k_reg=opts.k_reg, mondrian=opts.mondrian,
        by=opts.by, keys=layer_keys, weight=opts.weight, levels=levels,
    )
    new_model = copy.copy(model)
    new_model.conformal = layer
    new_model.info = dict(model.info)
    info = {"rows": rows, "missing": missing, "rounds": selection.rounds, "groups": len(groups),
            "segments_seen": len(keys), "segments_own": len(layer_keys)}
    return new_model, info


def _check_rows(opts: ConformalOptions, rows: int, class_counts: np.ndarray, model, need: int) -> None:
    """One line when the threshold would be infinite: too few rows overall, or of a class under
    ``mondrian="class"``."""
    alpha = opts.given("alpha", opts.alpha)
    mondrian = opts.given("mondrian", "class")
    if opts.mondrian == "class":
        short = [(str(c), int(n)) for c, n in zip(model.labels.classes, class_counts) if n < need]
        if short:
            absent = [c for c, n in short if n == 0]
            if absent:
                raise DataError(
                    f"{mondrian} needs calibration rows of every class, and class {absent[0]} has none"
                    f" (classes: {', '.join(map(str, model.labels.classes))}); add rows of it, or drop {mondrian}",
                    parameter="mondrian",
                )
            c, n = short[0]
            raise DataError(
                f"{mondrian}: class {c} has {n} calibration rows, too few for {alpha} (its threshold would be"
                f" infinite); each class needs at least {need} rows, or use a larger {opts.name('alpha')}",
                parameter=("mondrian", "alpha"),
            )
    if rows < need:
        raise DataError(
            f"{rows} calibration rows are too few for {alpha}: the threshold would be infinite (every set would"
            f" hold every class); at least {need} rows are needed, or use a larger {opts.name('alpha')}",
            parameter="alpha",
        )


# ---------------------------------------------------------------------------------------------- lineage and API


def lineage_record(parent: dict, files: list[str], opts: ConformalOptions, info: dict, command) -> dict:
    import datetime

    from .label_shift import data_paths
    from .recalibrate import data_fingerprint

    conformal = {"score": opts.score, "alpha": opts.alpha, "randomized": opts.randomized, "seed": opts.seed,
                 "mondrian": opts.mondrian}
    if opts.score == "raps":
        conformal["raps"] = {"lambda": opts.lam, "k_reg": opts.k_reg}
    if opts.by:
        conformal["by"] = list(opts.by)
    if opts.weight:
        conformal["weight"] = opts.weight
    return {
        "mode": "conformal",
        "parent": parent,
        "data": {"paths": data_paths(files), "rows": int(info["rows"]), "fingerprint": data_fingerprint(files)},
        "target": opts.target,
        "conformal": conformal,
        "missing_labels": int(info["missing"]),
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": list(command) if command else None,
    }


def conformalize_with_lineage(client, model, parent: dict, files: list[str], opts: ConformalOptions, *,
                              command=None, progress=None, recorded_paths=None):
    """:func:`conformalize_table` plus the lineage record in the new model's ``info["lineage"]``."""
    new_model, info = conformalize_table(client, model, files, opts, progress=progress)
    lineage = lineage_record(parent, files, opts, info, command)
    if recorded_paths is not None:
        lineage["data"]["paths"] = list(recorded_paths)
    if model.info.get("lineage"):
        lineage["previous"] = model.info["lineage"]
    new_model.info["lineage"] = lineage
    return new_model, info


def conformalize(model, data, target: str, alpha: float, *, score: str = "lac", mondrian=None, weight=None,
                 randomized: bool | None = None, seed: int = 0, raps_lambda=None, raps_k_reg=None,
                 max_segments: int | None = None, output=None, overwrite: bool = False, trust=(), client=None,
                 cluster=None, workers=None, worker_memory=None, progress=None):
    """Attach a split-conformal layer to a fitted model (``calengine conformal``; see docs/guide/conformal.md).

    ``model``: a model directory (recorded as the parent, with its content hash) or a loaded model.
    ``data``: calibration rows the model did not train on -- a Parquet path (file, directory, glob or
    URL), a list of them, or a pandas DataFrame -- with the class column ``target``.  ``alpha``: the
    miscoverage rate in (0, 1): sets hold the true class of at least ``1 - alpha`` of exchangeable rows.
    ``score``: ``"lac"``, ``"aps"``, ``"raps"`` or ``"topk"``; ``randomized`` (default True for aps and
    raps): the randomised variant, each row's uniform a hash of its encoded features and ``seed``;
    ``raps_lambda``/``raps_k_reg`` (default 0.01 and 1): RAPS' penalty.  ``mondrian``: ``"class"``
    (coverage per true class) or segment columns (a name, ``"a,b"`` or a list; at most ``max_segments``
    segments, default 1,000).  ``weight``: a column of covariate-shift weights w(x) (Tibshirani et al.
    2019), read again from every table scored with the model.  With ``output`` the new model is saved
    there (``overwrite`` replaces a model directory).  ``client``/``cluster``/``workers``/
    ``worker_memory``: as for :func:`calengine.recalibrate`.  Returns the new
    :class:`~calengine.model.calibrated.CalibratedModel`; every bad input is a typed
    :class:`~calengine.errors.CalengineError` raised before anything is written.
    """
    import os
    import tempfile
    from pathlib import Path

    from ..runtime.client import job_client
    from ..model.artifact import load_model, save_model
    from ..parquet.data import table_files
    from ..plugins.loading import model_requirements
    from ..runtime.progress import as_progress
    from .recalibrate import parent_record

    opts = check_options(target, alpha, score, mondrian, weight, randomized, seed, raps_lambda, raps_k_reg, max_segments)
    if output is not None and not overwrite and os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        raise ParameterError(f"output '{output}' already exists; choose a new path or pass overwrite=True")
    if isinstance(model, (str, Path)):
        parent, model = parent_record(model), load_model(model, trust=tuple(trust or ()))
    else:
        parent = {"path": None, "content_hash": None}
    with tempfile.TemporaryDirectory(prefix="calengine-conformal-") as tmp:
        files, recorded = table_files(data, tmp, "calibration.parquet")
        with job_client(client, cluster=cluster, workers=workers, memory_limit=worker_memory,
                        requirements=model_requirements([model]), map_only=True) as c:
            new_model, _ = conformalize_with_lineage(c, model, parent, files, opts, progress=as_progress(progress),
                                                     recorded_paths=recorded)
    if output is not None:
        save_model(new_model, output, overwrite=overwrite)
    return new_model
