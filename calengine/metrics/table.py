"""Evaluating a fitted model on a labelled table, chunk by chunk: the pass that reads the rows.

The chunks are the scoring's (:func:`calengine.scores.table.plan_chunks`): each task streams its rows in
batches, scores them with the shared model and adds them to exact, mergeable metric accumulators
(:class:`~calengine.metrics.measures.MetricAccumulator`, with decisions and segments beside them),
merged in chunk order in the client; from a million rows on, the bounded-memory engine
(:mod:`calengine.metrics.ranged.core`) cuts the tables into score ranges instead.
"""

from __future__ import annotations

from ..errors import DataError
from ..runtime.heap import trims_heap
from ..runtime.progress import Progress, gather_in_order
from ..scores.table import batches, default_batch_rows, plan_chunks, share_model, weight_column


@trims_heap
def evaluate_chunk(model, chunk, target: str, batch_rows: int, with_raw: bool, cost_matrix=None,
                   weight: str | None = None, segments: tuple | None = None, accumulators: bool = False) -> dict:
    """Metric accumulators (as arrays; with ``accumulators``, as the
    :class:`~calengine.metrics.measures.MetricAccumulator` objects, for a caller in the same process
    that reads only some of their tables: :func:`calengine.metrics.ranged.engine.chunk_tables`) for the
    calibrated and, optionally, raw probabilities, rows
    weighted by the column ``weight`` when given; with ``cost_matrix``, also a
    :class:`~calengine.decisions.DecisionAccumulator` of both's decisions; with ``segments``
    (``(by columns, max_segments)``, ``evaluate --by``), also ``"segments"``: the
    :class:`~calengine.metrics.segments.SegmentAccumulator` of the same probabilities, so a row is
    scored once for both."""
    from ..metrics.measures import MetricAccumulator

    k = model.n_classes
    cal = MetricAccumulator(k)
    raw = MetricAccumulator(k) if with_raw else None
    decisions = None
    cost_columns = set()
    if cost_matrix is not None:
        from ..decisions.accumulate import DecisionAccumulator

        decisions = DecisionAccumulator(cost_matrix)
        cost_columns = set(cost_matrix.columns)
    by, seg = (), None
    if segments is not None:
        from ..metrics.segments import SegmentAccumulator

        by = tuple(segments[0])
        seg = SegmentAccumulator(by, k, segments[1])
    layer, conf = getattr(model, "conformal", None), None
    if layer is not None:  # a conformal model: its sets' coverage, from the same pass (calengine.metrics.conformal)
        from .conformal import ConformalAccumulator

        conf = ConformalAccumulator(k, by, segments[1] if segments is not None else 1000)
    columns = sorted(set(model.encoder.input_columns) | {target} | cost_columns | ({weight} if weight else set())
                     | set(by) | set(layer.input_columns if layer is not None else ()))
    for df in batches(chunk, columns, batch_rows):
        y = model.labels.encode(df[target])
        w = weight_column(df, weight)
        X = model.encoder.transform(df)
        if with_raw:
            P, Q = model.both_proba_features(X)
            raw.add(y, Q, sample_weight=w)
        else:
            P = model.predict_proba_features(X)
        cal.add(y, P, sample_weight=w)
        if decisions is not None:
            decisions.add(y, P, Q if with_raw else None, df, sample_weight=w)
        if seg is not None:
            seg.add({c: df[c] for c in by}, y, P, w)  # Series: Arrow strings are factorised as they are
        if conf is not None:
            conf.add(y, layer.sets(P, X, df), w, {c: df[c] for c in by})
    if accumulators:
        out = {"calibrated": cal, "raw": raw}
    else:
        out = {"calibrated": cal.to_arrays(), "raw": raw.to_arrays() if raw is not None else None}
    if decisions is not None:
        out["decisions"] = decisions
    if seg is not None:
        out["segments"] = seg
    if conf is not None:
        out["conformal"] = conf
    return out


def evaluate_table(
    client,
    model,
    files: list[str],
    target: str,
    with_raw: bool = True,
    batch_rows: int | None = None,
    chunk_rows: int = 1_000_000,
    progress: Progress | None = None,
    cost_matrix=None,
    weight: str | None = None,
    ranged: bool = False,
    spill_dir: str | None = None,
    segments: tuple | None = None,
    suite_parts: frozenset | None = None,
) -> dict[str, dict]:
    """{"calibrated": MetricAccumulator, "raw": MetricAccumulator}: one exact reduction over all chunks.

    With ``cost_matrix`` also ``"decisions"``: the merged :class:`~calengine.decisions.DecisionAccumulator`.
    ``weight``: a column of non-negative row weights every metric uses (a weight counts as rows).
    ``ranged``: from :data:`~calengine.metrics.ranged.engine.RANGED_MIN_ROWS` rows on, the tables are cut
    into score ranges that no process holds whole (:func:`calengine.metrics.ranged.engine.evaluate_ranged`,
    written to ``spill_dir`` when given) and the values are :class:`~calengine.metrics.ranged.engine.RangedTables`.
    ``segments``: ``(by columns, max_segments)`` of ``evaluate --by``: also ``"segments"``, the
    chunks' :class:`~calengine.metrics.segments.SegmentAccumulator` merged in chunk order, from the
    same pass (the batches and chunks are those of the metrics, which read the ``--by`` columns too).
    ``suite_parts``: the calibration suite's parts that will be asked of ranged tables
    (:func:`calengine.metrics.selection.needs`; None: all): their builders census only those."""
    import functools

    from ..parquet.data import check_columns
    from ..metrics.measures import MetricAccumulator

    if cost_matrix is not None:
        cost_matrix = cost_matrix.for_classes(list(model.labels.classes))
    cost_columns = list(cost_matrix.columns) if cost_matrix is not None else []
    columns = list(dict.fromkeys(list(model.encoder.input_columns) + [target] + cost_columns
                                 + ([weight] if weight else [])))
    by = list(segments[0]) if segments is not None else []
    layer = getattr(model, "conformal", None)
    check_columns(files, list(dict.fromkeys(columns + by + list(layer.input_columns if layer is not None else []))))
    batch_rows = default_batch_rows(len(columns)) if batch_rows is None else batch_rows
    chunks = [c for c in plan_chunks(files, columns, chunk_rows) if c.n_rows > 0]
    if not chunks:
        raise DataError("the evaluation table has no rows")
    from .ranged import engine as range_eval

    model_f = share_model(client, model)
    chunk_fn = evaluate_chunk if segments is None else functools.partial(evaluate_chunk, segments=segments)
    if ranged and sum(c.n_rows for c in chunks) >= range_eval.RANGED_MIN_ROWS:
        from .ranged.workers import OnWorkers

        # embedded: files in spill_dir; on a Dask cluster: in the workers' local directories
        return range_eval.evaluate_ranged(client, chunk_fn, model_f, model.n_classes, chunks, target, batch_rows,
                                          with_raw, cost_matrix, weight, spill_dir, progress,
                                          workers=None if spill_dir is not None else OnWorkers(), parts=suite_parts)
    futures = [
        client.submit(chunk_fn, model_f, chunk, target, batch_rows, with_raw, cost_matrix, weight, pure=False)
        for chunk in chunks
    ]
    parts = gather_in_order(client, futures, progress, "evaluate")
    out = {}
    for key in ("calibrated", "raw"):
        if parts[0][key] is None:
            continue
        acc = MetricAccumulator.from_arrays(parts[0][key])
        for p in parts[1:]:
            acc.merge(MetricAccumulator.from_arrays(p[key]))
        if weight and acc.n == 0:
            raise DataError(f"weight column '{weight}' is 0 on every row; give the rows to evaluate a positive value",
                            parameter="weight")
        out[key] = acc
    if cost_matrix is not None:
        merged = parts[0]["decisions"]
        for p in parts[1:]:
            merged.merge(p["decisions"])
        out["decisions"] = merged
    from ..tasks.partitions import merge_all

    if segments is not None:
        out["segments"] = merge_all(*[p["segments"] for p in parts])  # in chunk order
    if parts[0].get("conformal") is not None:
        out["conformal"] = merge_all(*[p["conformal"] for p in parts])  # in chunk order
    return out
