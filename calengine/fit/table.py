"""Fitting on a partitioned Parquet table: the client plans, the workers read.

The story of ``calengine fit DATA`` (and of :func:`calengine.fit_table`, which it calls):

1. **Describe** the table from Parquet footers (:mod:`calengine.parquet.dataset`): fragments of row groups,
   absolute paths, column types checked across files.  The client never reads a row.
2. **Statistics** of every column as a reduction over fragments (:mod:`calengine.reductions.column_stats`):
   the feature encoding and the label space come from merged statistics.
3. **Folds** are a seeded function of each row's place (:mod:`calengine.plan.folds`); the client checks
   from per-row-group label counts that every fold holds every class.
4. **Learners**, one per (fold, code column) unit, by one of three routes recorded in the manifest:
   ``stats`` (learners that declare ``supports_stats``: one pass over the fragments gives every fold's
   statistics; fold f's learner is fitted from the merge of the other folds'), ``in-memory`` (the
   unit's rows assembled on one worker, refused in one line when they would not fit its memory) and
   ``sample`` (``--max-train-rows``: a seeded stratified sample assembled on a worker); learners that
   train on the cluster themselves (``trains_on_cluster``: xgboost.dask, lightgbm.dask) take the
   ``cluster`` route of :mod:`calengine.fit.cluster_learners`, one fold after another.
5. **Scores** of the held-out rows are computed per fragment and stay on the workers.
6. **Calibrators** are fitted as reductions over those scores (the calibrator's own protocol, see
   :class:`calengine.base.Calibrator`); a calibrator without one gets its scores gathered on one worker.
7. The fitted objects make the same :class:`calengine.model.calibrated.CalibratedModel` as before.

Probing and bagging (:mod:`calengine.fit.table_probing`) keep each row's votes on the workers and
draw costing and bootstrap samples there; the client sees only vote histograms and fitted voters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..tasks import partitions as pt
from ..plugins import registry
from ..errors import DataError, ParameterError
from ..plan.memory import check_fits_memory, fragment_rows_for, held_out_scratch, worker_memory_limit
from ..runtime.progress import Progress, gather_in_order
# TableSpec and ROUTES live with the other checks of a job's options; importable here as before
from ..plan.options import ROUTES, TableSpec  # noqa: F401
from ..runtime.context import RunContext
from .calibrators import ScoreBlocks, merge_summaries, calibration_problems, fit_calibrators, refuse_code_matrix, summary_points



@dataclass
class Context:
    """What the planning pass learnt: shared by every fit of one job."""

    spec: TableSpec
    fragments: tuple
    enc: pt.Encoding
    n_rows: int
    dropped: int
    group_counts: dict  # (file key, row group) -> class counts
    class_counts: np.ndarray
    cal_fragments: tuple = ()
    memory_limit: float = math.inf
    #: ``--weight``: the training table's weight sums per label and largest weight (WeightStat)
    weights: Any = None
    #: labelled rows of ``--calibration-data`` (0 without one)
    cal_rows: int = 0
    #: ``--calibration-data``'s total per class (weights when weighted), in class order; None without one
    cal_class_totals: Any = None


# ---------------------------------------------------------------------------------------------- planning


def plan_table(client, spec: TableSpec, progress: Progress | None = None) -> Context:
    """Describe the table, reduce its column statistics, and fit the encoding and label space."""
    from ..parquet.data import LabelSpace, parquet_columns, resolve_parquet_files
    from ..parquet.dataset import dataset_root, describe_dataset, describe_files
    from ..plan.columns import check_numeric_columns
    from ..plan.features import FeatureEncoder, select_feature_columns
    from ..parquet.storage import absolute
    from .score_columns import check_table_columns, score_reader

    files = resolve_parquet_files(spec.data)
    root = dataset_root(spec.data, [absolute(f) for f in files])
    names = parquet_columns(files, root)  # with the Hive partition keys below DATA
    check_table_columns(files, root, names, spec)
    weight = [spec.weight] if spec.weight else []
    if spec.scores or spec.prefit:  # read as they are: no statistics to encode them
        feature_cols, stats_cols = list(spec.scores or spec.features), []
    else:
        feature_cols = select_feature_columns(names, spec.target, spec.features, list(spec.exclude or []) + weight)
        stats_cols = feature_cols
    memory_limit = worker_memory_limit(client)
    fragment_rows = spec.fragment_rows or fragment_rows_for(memory_limit, len(feature_cols))
    dataset = describe_files(files, root, feature_cols + [spec.target] + weight, fragment_rows)
    # a scikit-learn --prefit model reads its columns as they are (strings, categories, NaN: its own
    # pipeline encodes them); a booster's features must be numbers
    raw_features = bool(spec.prefit) and _prefit_reads_frames(spec.prefit)
    check_numeric_columns(dataset, list(spec.scores or ()), "score")
    check_numeric_columns(dataset, list(spec.features or ()) if spec.prefit and not raw_features else [], "feature")
    check_numeric_columns(dataset, weight, "weight")
    if not dataset.fragments:
        raise DataError("the training table has no rows")
    stats = tree_merge(
        client, lambda fr: client.submit(pt.fragment_table_stats, fr, stats_cols, spec.target, spec.text_columns,
                                         spec.weight, pure=False),
        dataset.fragments, progress, "statistics",
    )
    labels = LabelSpace.from_values(stats.target.totals().keys(), spec.target, spec.positive)
    if spec.scores:
        encoder = score_reader(spec, labels)
    elif spec.prefit:
        from ..plan.columns import ColumnReader

        encoder = ColumnReader(list(spec.features), role="feature", allow_missing=True, as_frame=raw_features)
    else:
        encoder = FeatureEncoder(max_categories=spec.max_categories, text_columns=tuple(spec.text_columns))
        encoder.fit_stats(stats)
    if stats.weights is not None:
        stats.weights.check(labels.classes, "the training table")
    group_counts = _class_counts_per_group(stats.target, labels)
    class_counts = np.sum(list(group_counts.values()), axis=0) if group_counts else np.zeros(labels.n_classes)
    ctx = Context(
        spec=spec, fragments=dataset.fragments, enc=pt.Encoding(encoder, labels, spec.target, spec.weight),
        n_rows=int(class_counts.sum()), dropped=int(stats.target.missing), group_counts=group_counts,
        class_counts=np.asarray(class_counts, dtype=np.int64), memory_limit=memory_limit, weights=stats.weights,
    )
    if spec.calibration_data:
        cal = describe_dataset(spec.calibration_data, feature_cols + [spec.target] + weight, fragment_rows)
        check_numeric_columns(cal, list(spec.scores or ()), "score")
        check_numeric_columns(cal, list(spec.features or ()) if spec.prefit and not raw_features else [], "feature")
        check_numeric_columns(cal, weight, "weight")
        if not cal.fragments:
            raise DataError("the calibration_data table has no rows", parameter="calibration_data")
        counts = gather_in_order(
            client, [client.submit(pt.fragment_label_counts, fr, spec.target, spec.weight, pure=False)
                     for fr in cal.fragments],
            None, "calibration labels",
        )
        merged = pt.merge_all(*counts)
        unknown = set(merged.target.totals()) - set(labels.classes)
        unknown = {v for v in unknown if str(v) not in {str(c) for c in labels.classes}}
        if unknown:
            raise DataError(
                f"calibration_data holds label {sorted(map(str, unknown))[0]!r}, not seen in the training"
                f" table (classes: {', '.join(map(str, labels.classes))}); use tables with the same labels",
                parameter="calibration_data",
            )
        if merged.weights is not None:
            merged.weights.check(labels.classes, "--calibration-data")
        ctx.cal_fragments = cal.fragments
        ctx.cal_rows = int(sum(merged.target.totals().values()))
        ctx.cal_class_totals = _class_totals(merged.weights.per_label if merged.weights is not None
                                             else merged.target.totals(), labels)
    return ctx


def _prefit_reads_frames(path: str) -> bool:
    """Whether the ``--prefit`` model at ``path`` is a scikit-learn estimator (skops), which reads its
    feature columns as a DataFrame of the table's own values (:class:`~calengine.plan.columns.ColumnReader`
    ``as_frame``)."""
    from ..adapters.prefit import library_of

    return library_of(path) == "sklearn"


def tree_merge(client, submit_leaf, items: list, progress: Progress | None, label: str, fan_in: int = 8):
    """Merge per-fragment statistics on the workers, ``fan_in`` at a time in fragment order, so the
    client receives one merged result however many fragments there are (a fixed tree: deterministic).

    Each group's merge is submitted right after its ``fan_in`` leaves, so Dask (which ranks tasks by
    submission) merges a group as soon as its leaves are done, and the client keeps no leaf futures:
    a leaf's statistics are released once merged.  Holding every leaf until the last one finished
    cost a 512 MiB worker 90 MiB of statistics on a 70-fragment table and pushed it to Dask's pause
    threshold, where a worker stops running tasks.
    """
    from ..runtime.thread_client import as_completed

    level = []
    sizes = []
    for i in range(0, len(items), fan_in):
        group = [submit_leaf(item) for item in items[i : i + fan_in]]
        level.append(client.submit(pt.merge_all, *group, pure=False) if len(group) > 1 else group[0])
        sizes.append(len(group))
        del group
    if progress is not None:
        progress.start(label, len(items))
    size_of = {id(f): n for f, n in zip(level, sizes)}
    for done in as_completed(client, level):
        if _failed(done):
            # cancelled (the client lost the scheduler: Dask cancels every future it holds) or failed:
            # raise now; merges submitted after the loss would wait forever (nothing answers them)
            done.result()
        if progress is not None:
            progress.advance(size_of[id(done)])
    if progress is not None:
        progress.finish()
    while len(level) > 1:
        level = [client.submit(pt.merge_all, *level[i : i + fan_in], pure=False) for i in range(0, len(level), fan_in)]
    return _result_unless_lost(client, level[0])


def _failed(future) -> bool:
    """Whether a finished ``future`` (Dask's, or a :class:`~calengine.runtime.thread_client.ThreadClient`'s
    :class:`concurrent.futures.Future`) was cancelled or raised."""
    status = getattr(future, "status", None)  # a Dask future's
    if status is not None:
        return status != "finished"
    return future.cancelled() or future.exception() is not None


def _result_unless_lost(client, future):
    """``future.result()``, or :class:`CommClosedError` once the client has given up on its scheduler.

    Why not a plain ``result()``: a fit whose scheduler was killed during planning once waited here
    forever in CI (py-spy), and the interleaving was not reproduced (distributed cancels the futures it
    holds, and those submitted while it reconnects, when it gives up).  Polling bounds the wait by the
    client's own connect timeout whatever the cause: once the client is closing or closed, nothing
    will answer this future.  (A :class:`~calengine.runtime.thread_client.ThreadClient`'s threads cannot be
    lost: its result is waited for.)"""
    from ..runtime.thread_client import ThreadClient

    if isinstance(client, ThreadClient):
        return future.result()
    from distributed.comm.core import CommClosedError

    while True:
        try:
            return future.result(timeout=1.0)
        except TimeoutError:
            if future.done():
                # done by now: its value, or its own error (a TimeoutError the merge raised included),
                # never this wait's timeout (a merge that finished just after the wait gave up was
                # once reported as "the Dask scheduler did not answer in time")
                return future.result()
            if getattr(client, "status", "running") in ("closing", "closed"):
                raise CommClosedError("the client lost its connection to the Dask scheduler") from None


def _class_counts_per_group(target_stat, labels) -> dict:
    index = {}
    out = {}
    for key, counts in target_stat.per_group.items():
        arr = np.zeros(labels.n_classes, dtype=np.int64)
        for value, c in counts.items():
            if value not in index:
                index[value] = labels.index_of(value)
            arr[index[value]] += c
        out[key] = arr
    return out


# ---------------------------------------------------------------------------------------------- the fit


def fit_table(client, spec: TableSpec, config, progress: Progress | None = None, plugins=None, ctx=None):
    """Fit ``config`` on the table ``spec`` describes, on the cluster behind ``client``.

    The two records were checked when they were made, and against each other by the door that made them
    (:func:`~calengine.fit.training.prepare_fit`, :func:`~calengine.plan.options.check_job`): this
    function reads them, and checks only what needs the table."""
    from ..plugins.loading import get_plugins
    from .training import ENGINE_METHODS, split_learners

    plugins = plugins or get_plugins()
    if config.method == "mcgrad":  # the global fit uncalibrated, then MCGrad's rounds (issue 25 §3)
        from .mcgrad.table import fit_mcgrad_table

        return fit_mcgrad_table(client, spec, config, progress, plugins, plan_table, fit_table)
    if spec.by:  # the global fit, then one calibrator per segment
        from .segments import fit_segmented

        return fit_segmented(client, spec, config, progress, plugins, plan_table, fit_table)
    from .score_columns import check_sampling, score_learner, with_sampling

    if spec.prefit:
        from .score_columns import prefit_spec

        learner, spec = prefit_spec(spec)  # the file checked and its feature columns known, before any work
    ctx = ctx or plan_table(client, spec, progress)
    check_sampling(config, ctx.enc.labels.classes)
    if spec.scores:
        return with_sampling(_fit_calibrated(client, ctx, score_learner(ctx), config, progress, plugins), config)
    if spec.prefit:
        learner.check_classes(ctx.enc.labels)
        return with_sampling(_fit_calibrated(client, ctx, learner, config, progress, plugins), config)
    learners = split_learners(config.learner)
    if len(learners) > 1 or config.combine:
        return with_sampling(_fit_combined(client, ctx, config, learners, progress, plugins), config)
    from .training import resolve_learner

    learner = resolve_learner(config, plugins)
    if ctx.enc.encoder.is_sparse and not learner.accepts_sparse:  # text columns give CSR features
        from ..base import sparse_input_error

        raise sparse_input_error(learner)
    if config.method in ENGINE_METHODS:
        return with_sampling(_fit_reduction_method(client, ctx, learner, config, progress, plugins), config)
    return with_sampling(_fit_calibrated(client, ctx, learner, config, progress, plugins), config)


def _info(ctx: Context, learner, config, route: str) -> dict[str, Any]:
    from .training import model_info

    training = {
        "route": route,
        "rows": ctx.n_rows,
        "dropped_missing_target": ctx.dropped,
        "fragments": len(ctx.fragments),
        "max_train_rows": ctx.spec.max_train_rows,
    }
    if route == "prefit":
        # nothing was trained, and the calibrators' reductions are exact over any cut of the rows: a
        # score-column (or --prefit) model is the same bytes however the table is cut into files
        # (issue 43 §1), so the cut is not recorded
        del training["fragments"]
    if ctx.spec.weight:  # only weighted fits record it, so every other manifest stays as it was
        training["weight"] = ctx.spec.weight
        training["weighting"] = "costing" if _costing(ctx, learner, route) is not None else "weights"
    if ctx.cal_rows:
        training["calibration_rows"] = ctx.cal_rows
    return {**model_info(learner, config, ctx.spec.calibration_data is not None), "x_training": training,
            "x_class_totals": _calibration_class_totals(ctx)}


def _class_totals(per_label: dict, labels) -> list[float]:
    """A ``{label value: count or weight}`` table as one total per class, in class order (labels are
    matched by their text, as the label space matches them)."""
    by_text: dict[str, float] = {}
    for v, c in per_label.items():
        by_text[str(v)] = by_text.get(str(v), 0.0) + float(c)
    return [by_text.get(str(c), 0.0) for c in labels.classes]


def _calibration_class_totals(ctx: Context) -> dict[str, Any]:
    """The class totals of the rows the calibrators met (``--calibration-data``, else every training
    row: cross-validation calibrates on each row once), weighted when ``--weight`` is given: the
    training priors label-shift adaptation (:mod:`calengine.fit.label_shift`) divides out."""
    if ctx.cal_class_totals is not None:
        totals, table = ctx.cal_class_totals, "calibration_data"
    else:
        per_label = ctx.weights.per_label if ctx.weights is not None else dict(zip(ctx.enc.labels.classes,
                                                                                   ctx.class_counts.tolist()))
        totals, table = _class_totals(per_label, ctx.enc.labels), "training"
    return {"totals": totals, "table": table, "weighted": ctx.weights is not None}


def _costing(ctx: Context, learner, route: str) -> float | None:
    """The largest weight when the learner meets weighted rows as a costing sample (learners without
    ``sample_weight``, and learners that train on the cluster, whose rows arrive as a data frame), else
    None.  A prefit learner is never fitted: its weights go to the calibrators only."""
    if not ctx.spec.weight or route == "prefit":
        return None
    if route == "cluster" or not learner.accepts_sample_weight:
        return float(ctx.weights.max)
    return None


def _route(ctx: Context, learner) -> str:
    from .cluster_learners import check_cluster_route

    if getattr(learner, "prefit", False):
        return "prefit"
    if check_cluster_route(ctx.spec, learner):
        return "cluster"
    weights_by_costing = bool(ctx.spec.weight) and not learner.accepts_sample_weight
    if ctx.spec.route != "auto":
        if ctx.spec.route == "stats" and weights_by_costing:
            raise ParameterError(
                f"learner '{learner.name}' takes no sample weights, so weight draws a costing sample for it,"
                " which statistics cannot do; drop route='stats'", parameter=("weight", "route")
            )
        if ctx.spec.route == "stats" and not getattr(learner, "supports_stats", False):
            raise ParameterError(f"learner '{learner.name}' cannot be fitted from statistics; drop route='stats'",
                                 parameter="route")
        if ctx.spec.route == "sample" and not ctx.spec.max_train_rows:
            raise ParameterError("route='sample' needs max_train_rows", parameter=("route", "max_train_rows"))
        return ctx.spec.route
    if ctx.spec.max_train_rows:
        return "sample"
    return "stats" if getattr(learner, "supports_stats", False) and not weights_by_costing else "in-memory"


def _fit_calibrated(client, ctx: Context, learner, config, progress, plugins):
    from .arrays import MODES
    from ..plan.folds import check_folds, fold_class_counts
    from ..model.calibrated import CalibratedModel, one_vs_all_matrix, raw_kind_of
    from .training import resolve_multiclass

    labels = ctx.enc.labels
    k = labels.n_classes
    calibrator = registry.make("calibrators", config.method, config.method_params, plugins)
    uncalibrated = config.method == "none" and not config.held_out  # held_out: MCGrad's base (fit/mcgrad_table.py)
    cal_mode = ctx.spec.calibration_data is not None
    if config.mode not in MODES:
        raise ParameterError(f"mode must be one of {', '.join(MODES)}, got {config.mode!r}", parameter="mode")
    M = combiner = None
    refuse_code_matrix(calibrator, config.multiclass, k)
    if config.multiclass and k > 2:
        M, combiner = resolve_multiclass(config.multiclass, k, config.seed, plugins, config.combiner_params)
        if cal_mode or uncalibrated:
            raise ParameterError(
                "multiclass with a code matrix needs cross-validated calibration; drop"
                " calibration_data / method='none', or drop multiclass",
                parameter=("multiclass", "calibration_data", "method"),
            )
    prefit = getattr(learner, "prefit", False)  # nothing to fit: every row (or cal table) calibrates
    cv = None if (uncalibrated or cal_mode or prefit) else config.cv
    if cv is not None:
        if not isinstance(cv, int) or cv < 2:
            raise DataError(f"cv must be at least 2 (got {cv}); or use calibration_data for a hold-out table",
                            parameter=("cv", "calibration_data"))
        check_folds(fold_class_counts(ctx.group_counts, k, cv, config.seed), labels.classes, cv)
    plan = pt.FoldPlan(cv, config.seed, M)
    columns = list(range(M.shape[1])) if M is not None else [None]
    folds = list(range(cv)) if cv else []
    refit = cv is not None and config.mode == "refit"
    units: list[pt.Unit] = [pt.Unit(f, c) for f in folds for c in columns]
    if refit or cv is None:
        units += [pt.Unit(None, c) for c in columns]
    seeds = [_unit_seed(config.seed, u, cv, M is not None) for u in units]
    route = _route(ctx, learner)
    fitted = _fit_units(client, ctx, plan, units, seeds, learner, route, progress)
    uidx = {u: i for i, u in enumerate(units)}

    # calibration sets: whose scores calibrate which member
    if cv is not None and not refit:
        calsets = [pt.CalSet(f, c, (uidx[pt.Unit(f, c)],)) for f in folds for c in columns]
    elif refit:
        calsets = [pt.CalSet(None, c, tuple(uidx[pt.Unit(g, c)] for g in folds), per_fold=True) for c in columns]
    else:
        calsets = [pt.CalSet(None, c, (uidx[pt.Unit(None, c)],)) for c in columns]
    score_fragments = ctx.cal_fragments if cal_mode else ctx.fragments
    with held_out_scratch(client, ctx.cal_rows if cal_mode else ctx.n_rows) as spill:
        def make_blocks():
            return [
                client.submit(pt.score_fragment, fr, ctx.enc, plan, calsets, fitted, spill, pure=False)
                for fr in score_fragments
            ]

        blocks = ScoreBlocks(make_blocks)
        points = summary_points(ctx.cal_rows if cal_mode else ctx.n_rows, ctx.memory_limit)
        summaries = gather_in_order(
            client, [client.submit(pt.block_summary, b, points, pure=False) for b in blocks.get()], progress,
            "held-out scores",
        )
        merged = [merge_summaries([s[i] for s in summaries]) for i in range(len(calsets))]
        for i, m in enumerate(merged):
            if m["n"] == 0:
                raise DataError("a calibration set is empty; lower cv or add data", parameter="cv")
        problems = calibration_problems(merged, calibrator)
        run = RunContext(client, progress, spill_dir=spill)
        cals = fit_calibrators(run, blocks, merged, problems, calibrator, learner.score_kind, ctx, raw_kind_of(learner))
        del blocks  # fit_calibrators may have released them already
    learner_objs = client.gather(fitted)
    by_set: dict[int, list] = {}
    for (i, _), cal in zip(problems, cals):
        by_set.setdefault(i, []).append(cal)
    members = _members(learner_objs, uidx, calsets, merged, by_set, raw_kind_of(learner), M, folds, refit)
    if M is not None:
        counts = ((M != 0) * ctx.class_counts[:, None]).sum(axis=0).astype(np.int64)
        code_matrix = M
    else:
        code_matrix = one_vs_all_matrix(k) if k > 2 else np.array([[-1], [1]], dtype=np.int8)
        combiner = registry.make("combiners", "normalize", {}, plugins) if k > 2 else None
        counts = np.full(code_matrix.shape[1], ctx.n_rows, dtype=np.int64)
    info = _info(ctx, learner, config, route)
    if M is not None:
        info["multiclass"] = config.multiclass
    return CalibratedModel(
        encoder=ctx.enc.encoder, labels=labels, members=members, code_matrix=code_matrix,
        combiner=combiner, column_counts=counts, info=info,
    )


def _unit_seed(seed: int, unit: pt.Unit, cv: int | None, code: bool) -> int:
    """The seeds the in-memory engine uses, so both paths seed learners alike."""
    from ..tasks.arrays import task_seed

    fold = unit.fold if unit.fold is not None else (cv if cv else 0)
    if code:
        return task_seed(seed, fold, unit.column)
    return task_seed(seed, fold)


def _fit_units(client, ctx: Context, plan, units, seeds, learner, route, progress) -> list:
    """A future of the fitted learner of every unit, by ``route``."""
    k = ctx.enc.labels.n_classes
    if route == "prefit":  # arrived fitted: handed on as it is, never cloned
        return [client.submit(pt.as_given, learner, pure=False) for _ in units]
    costing = _costing(ctx, learner, route)
    if route == "cluster":
        from .cluster_learners import fit_units_on_cluster
        from ..plan.folds import fold_class_counts

        fold_counts = fold_class_counts(ctx.group_counts, k, plan.cv, plan.seed) if plan.cv else None
        rows = [int(_unit_target_counts(ctx, plan, u, fold_counts).sum()) for u in units]
        return fit_units_on_cluster(RunContext(client, progress), ctx, plan, units, seeds, rows, learner, costing)
    if route == "stats":
        columns = tuple(dict.fromkeys(u.column for u in units))
        futures = [
            client.submit(pt.fragment_learner_stats, fr, ctx.enc, plan, learner, columns, pure=False)
            for fr in ctx.fragments
        ]
        parts = gather_in_order(client, futures, progress, "learner statistics")
        folds = list(range(plan.cv)) if plan.cv else [None]
        per_fold = {}
        for key in parts[0]:
            per_fold[key] = pt.merge_in_order([p[key] for p in parts], learner.merge_stats)
        out = []
        for u, seed in zip(units, seeds):
            keep = [per_fold[(f, u.column)] for f in folds if f != u.fold or u.fold is None]
            stats = pt.merge_in_order(keep, learner.merge_stats)
            n_classes = k if u.column is None else 2
            out.append(client.submit(pt.fit_learner_from_stats, learner, stats, n_classes, seed, pure=False))
        return out
    out = []
    fold_counts = None
    if plan.cv:
        from ..plan.folds import fold_class_counts

        fold_counts = fold_class_counts(ctx.group_counts, k, plan.cv, plan.seed)
    for u, seed in zip(units, seeds):
        target_counts = _unit_target_counts(ctx, plan, u, fold_counts)
        rows = int(target_counts.sum())
        quotas = rates = None
        if route == "sample":
            quotas = _quotas(target_counts, ctx.spec.max_train_rows)
            rates = np.minimum(1.0, quotas * 1.05 / np.maximum(target_counts, 1) + 64.0 / np.maximum(target_counts, 1))
            rows = int(quotas.sum() * 1.05 + 64 * len(quotas))
        check_fits_memory(ctx, rows, "one learner's training rows")
        out.append(client.submit(pt.fit_unit_learner, ctx.fragments, ctx.enc, plan, u, learner, seed, quotas, rates,
                                 costing, pure=False))
    return out


def _unit_target_counts(ctx: Context, plan, unit: pt.Unit, fold_counts) -> np.ndarray:
    """Rows per target value of a unit's training rows (classes, or 0/1 for a code column)."""
    counts = ctx.class_counts.astype(np.int64).copy()
    if unit.fold is not None:
        counts -= fold_counts[unit.fold]
    if unit.column is None:
        return counts
    code = plan.code_matrix[:, unit.column]
    return np.array([counts[code == -1].sum(), counts[code == 1].sum()], dtype=np.int64)


def _quotas(counts: np.ndarray, n: int) -> np.ndarray:
    """Rows per class of a stratified sample of at most ``n`` rows (largest remainders; >= 1 each)."""
    total = counts.sum()
    if total <= n:
        return counts.astype(np.int64)
    exact = counts * (n / total)
    q = np.floor(exact).astype(np.int64)
    rest = n - q.sum()
    order = np.argsort(-(exact - q), kind="stable")
    q[order[:rest]] += 1
    q = np.minimum(np.maximum(q, np.minimum(counts, 1)), counts)
    return q


def _members(learners, uidx, calsets, merged, by_set, score_kind, M, folds, refit) -> list:
    from .arrays import column_member
    from ..model.calibrated import Member, RawMap

    def raw(i):
        m = merged[i]
        if score_kind in ("proba", "logit"):
            return RawMap(score_kind, np.zeros(len(m["min"])), np.ones(len(m["min"])))
        a = np.maximum(np.abs(m["min"]), np.abs(m["max"]))
        return RawMap(score_kind, -a, a)

    members = []
    if M is None:
        for i, cs in enumerate(calsets):
            li = uidx[pt.Unit(None, None)] if refit else cs.learners[0]
            n_cols = len(merged[i]["min"])
            members.append(Member([learners[li]], [list(range(n_cols))], by_set[i], raw(i)))
        return members
    n_cols = M.shape[1]
    groups = [None] if refit else folds
    for f in groups:
        sets = [i for i, cs in enumerate(calsets) if cs.fold == f]
        sets.sort(key=lambda i: calsets[i].column)
        lrs = [learners[uidx[pt.Unit(None if refit else f, calsets[i].column)]] for i in sets]
        cals = [by_set[i][0] for i in sets]
        ranges = [(float(merged[i]["min"][0]), float(merged[i]["max"][0])) for i in sets]
        assert len(lrs) == n_cols
        members.append(column_member(lrs, cals, ranges))
    return members


# ---------------------------------------------------------------------------------------------- others


def _fit_reduction_method(client, ctx: Context, learner, config, progress, plugins):
    """Probing and bagging on the fragments (:mod:`calengine.fit.table_probing`): costing and bootstrap
    samples drawn on the workers, votes kept there.  ``--route in-memory`` keeps the old driver on the
    whole table assembled on one worker (never the client)."""
    from ..model.calibrated import CalibratedModel

    if getattr(learner, "trains_on_cluster", False) and ctx.spec.route != "in-memory":
        raise ParameterError(
            f"method={config.method!r} fits many weighted classifiers, each on one worker; learner"
            f" '{learner.name}' trains on the whole cluster: use method isotonic/sigmoid/..., or"
            " route='in-memory' to fit it in one worker's memory", parameter=("method", "route")
        )
    if ctx.spec.route == "stats":
        raise ParameterError(
            f"method={config.method!r} fits many weighted or sampled classifiers, not one from statistics;"
            " drop route='stats' (or use route='in-memory', or max_train_rows)",
            parameter=("method", "route", "max_train_rows"),
        )
    if ctx.spec.route == "in-memory":
        from .probing import fit_reduction_members

        check_fits_memory(ctx, ctx.n_rows, f"--method {config.method} (the whole table on one worker)")
        data_f = client.submit(pt.assemble_training, ctx.fragments, ctx.enc, pure=False)
        members, code_matrix, combiner, counts = fit_reduction_members(
            client, data_f, ctx.enc.labels, learner, config, plugins, progress, n_rows=ctx.n_rows
        )
        route = "in-memory"
    else:
        from .table_probing import fit_reduction_partitioned

        members, code_matrix, combiner, counts, route = fit_reduction_partitioned(
            client, ctx, learner, config, plugins, progress
        )
    return CalibratedModel(
        encoder=ctx.enc.encoder, labels=ctx.enc.labels, members=members, code_matrix=code_matrix,
        combiner=combiner, column_counts=counts, info=_info(ctx, learner, config, route),
    )


def _fit_combined(client, ctx: Context, config, learners, progress, plugins):
    """Several base learners on the same folds, combined by ``config.combine`` (Duin & Tax)."""
    from .training import combined_configs, combined_model

    configs = combined_configs(config, learners, plugins)
    return combined_model([fit_table(client, ctx.spec, sub, progress, plugins, ctx=ctx) for sub in configs], config.combine)


# ---------------------------------------------------------------------------------------------- Python API


def fit_parquet(data, target: str, *, cluster=None, workers=None, worker_memory=None, progress=None, **options):
    """Fit a calibrated model on a Parquet table from Python, exactly as ``calengine fit`` does.

    ``options`` are the fields of :class:`TableSpec` (``positive``, ``features``, ``exclude``,
    ``text_columns``, ``max_categories``, ``calibration_data``, ``max_train_rows``, ``route``) and of
    :class:`calengine.fit.training.FitConfig` (``learner``, ``learner_params``, ``method``,
    ``method_params``, ``mode``, ``cv``, ``seed``, ``multiclass``, ``combiner_params``, ``combine``).
    ``cluster``: None (embedded), ``"local"`` or a scheduler address.  Returns the
    :class:`~calengine.model.calibrated.CalibratedModel`; save it with :func:`calengine.model.artifact.save_model`.
    """
    from dataclasses import fields

    from ..runtime.client import dask_client
    from .training import FitConfig, prepare_fit

    spec_fields = {f.name for f in fields(TableSpec)}
    config_fields = {f.name for f in fields(FitConfig)}
    unknown = sorted(set(options) - spec_fields - config_fields)
    if unknown:
        raise ParameterError(
            f"fit_table() got unknown option(s) {', '.join(unknown)}; valid: {', '.join(sorted(spec_fields | config_fields))}"
        )
    spec = TableSpec(data=str(data), target=target, **{k: v for k, v in options.items() if k in spec_fields})
    config = FitConfig(**{k: v for k, v in options.items() if k in config_fields})
    plugins, _ = prepare_fit(config, spec)  # every name and parameter checked, as `calengine fit` does, before a client starts
    with dask_client(cluster, workers=workers, memory_limit=worker_memory) as client:
        return fit_table(client, spec, config, progress=Progress(enabled=progress), plugins=plugins)
