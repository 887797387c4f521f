"""Mapping a fitted model over the partitions of any size of table: scoring.

The unit of work is a *chunk*: a run of row groups of one Parquet file holding at most ``chunk_rows``
rows.  Each chunk is a Dask task that streams its rows in batches, so memory is bounded by the batch,
not the table.  The model reaches the workers as the result of one task (:func:`share_model`), so
losing every worker loses nothing the scheduler cannot recompute.

Scoring writes one Parquet part per chunk into a staging directory beside the target, checks that the
row count matches the input, and only then renames the staging directory onto the target.
Evaluation reads the same chunks (:mod:`calengine.metrics.table`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..parquet.data import staged_directory
from ..errors import DataError
from ..runtime.progress import Progress, gather_in_order
from ..runtime.heap import trims_heap


#: float64 bytes of one batch's input columns that :func:`default_batch_rows` aims at
BATCH_BYTES = 32 * 2**20


def default_batch_rows(n_columns: int) -> int:
    """Rows per batch when the user gives none: the largest power of two in [4,096, 131,072] whose
    batch of ``n_columns`` float64 columns stays within :data:`BATCH_BYTES` (131,072 rows up to 32
    columns, 8,192 at 500).

    Why: per-batch work in Python (Arrow to pandas, the encoder's per-column loop, building the
    output) holds the GIL, so on 20 columns 131,072-row batches scored 10M rows 17 % faster on two
    threads than 65,536 (1.75 against 2.1 s) and 10 % faster on one; 262,144 was slower again (the
    batch leaves the cache).  A fixed row count would let a 500-column table take 0.5 GB per batch
    and thread, hence the byte budget."""
    rows = BATCH_BYTES // (8 * max(1, int(n_columns)))
    power = 1 << max(0, rows.bit_length() - 1)
    return int(min(131_072, max(4_096, power)))


def plan_chunks(files: list[str], columns: list[str], chunk_rows: int = 1_000_000):
    """The table's fragments (whole row groups, at most ``chunk_rows`` rows each), planned from the
    Parquet footers alone, with absolute paths so workers started anywhere can read them."""
    from ..parquet.dataset import describe_files

    return describe_files(files, None, columns, chunk_rows).fragments


def batches(chunk, columns: list[str] | None, batch_rows: int):
    """The chunk's rows as pandas DataFrames of at most ``batch_rows`` rows (runs in tasks)."""
    for _, df in _arrow_batches(chunk, columns, batch_rows, frames=True):
        yield df


def _arrow_batches(chunk, columns: list[str] | None, batch_rows: int, frames):
    """The chunk's rows as ``(RecordBatch, DataFrame or None)`` pairs of at most ``batch_rows`` rows
    (runs in tasks).  ``frames``: True converts every batch to pandas (with the file's Hive partition
    keys as columns), False none, or a callable of the batch deciding it per batch.

    A read that fails (a corrupt data page, a file truncated or replaced since planning, a file the
    worker cannot see) is a :class:`DataError` naming the file; errors of the caller's own work on a
    batch are not relabelled, because only the read is inside the ``try``.
    """
    from ..parquet.dataset import read_error
    from ..parquet.storage import partition_frame
    from ..parquet.storage import parquet_file

    if not chunk.row_groups:
        return
    wanted = columns
    keys = dict(getattr(chunk, "partition", ()))
    if columns is not None and keys:
        columns = [c for c in columns if c not in keys]
    try:
        pf = parquet_file(chunk.path)
    except Exception as exc:  # noqa: BLE001 - pyarrow and fsspec raise several types for damaged files
        raise read_error(chunk, exc) from exc
    with pf:
        try:
            batches = pf.iter_batches(batch_size=batch_rows, row_groups=list(chunk.row_groups), columns=columns)
        except Exception as exc:  # noqa: BLE001
            raise read_error(chunk, exc) from exc
        while True:
            try:
                batch = next(batches)
                # one block per column: numeric columns without nulls become views of the Arrow
                # buffers instead of being copied into one 2-D block (5x cheaper; the encoder reads
                # column by column anyway)
                convert = frames(batch) if callable(frames) else frames
                df = batch.to_pandas(split_blocks=True) if convert else None
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001
                raise read_error(chunk, exc) from exc
            if df is not None and keys and wanted:
                df = partition_frame(df, tuple(keys.items()), wanted, batch.num_rows)
            yield batch, df


# ---------------------------------------------------------------------------------------------- score


def _the_model(model):
    return model


def share_model(client, model):
    """A future of ``model`` that the scheduler can recompute.

    Scattered data lives only on workers: when all of them die, every task needing it fails even
    after replacements join.  A task holding the model is kept by the scheduler and simply runs again
    on a new worker.  (Dask's "Sending large graph" warning is about repeating data in many tasks;
    here it is sent once.)
    """
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sending large graph")
        return client.submit(_the_model, model, pure=False)



@trims_heap
def score_chunk(
    model, chunk, out_path: str, keep: tuple[str, ...], batch_rows: int, extra: bool, reject_below: float | None,
    cost_matrix=None, sets: bool = False, p_values: bool = False,
) -> int:
    """Score one chunk into ``out_path`` (one Parquet file); returns the number of rows written.

    With ``cost_matrix`` (a :class:`~calengine.decisions.CostMatrix` in the model's class order), the
    columns it reads are read too (written only when kept) and ``decision``/``expected_cost`` added.
    ``sets``/``p_values`` (a model with a conformal layer): also the prediction set of each row
    (``set``, ``in_<class>``, ``set_size``) and its conformal p-values (``pvalue_<class>``), see
    :mod:`calengine.scores.conformal`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    layer = model.conformal if (sets or p_values) else None
    cost_columns = set(cost_matrix.columns) if cost_matrix is not None else set()
    columns = sorted(set(model.encoder.input_columns) | set(keep) | cost_columns
                     | set(layer.input_columns if layer is not None else ()))
    # Plain scoring (only probabilities and the prediction written) skips pandas after the first
    # batch: the encoder reads the Arrow columns and the output table is built from the arrays under
    # the first batch's schema, so the file is the one the pandas path writes.  See _arrow_output.
    # Sets of a layer that reads no column of its own (segments, weights) stay on that path.
    plain = not keep and cost_matrix is None and not extra and reject_below is None \
        and not getattr(chunk, "partition", ()) and (layer is None or not layer.input_columns)
    writer = None
    base_schema = None
    written = 0

    def needs_frame(batch) -> bool:
        return not (plain and writer is not None and model.encoder.reads_arrow(batch.schema))

    try:
        for batch, df in _arrow_batches(chunk, columns, batch_rows, frames=needs_frame):
            if df is None:
                X = model.encoder.transform_arrow(batch, order="F")
                P, prediction, _ = model.scored_features(X)
                table = _arrow_output(base_schema, P, prediction)
            else:
                X = model.encoder.transform(df, order="F")
                frame = model.predict_frame(df, keep=list(keep), extra_outputs=extra, reject_below=reject_below, X=X)
                if cost_matrix is not None:
                    _add_decisions(frame, df, model, cost_matrix)
                table = pa.Table.from_pandas(frame, preserve_index=False)
                P = None if layer is None else frame[[f"p_{c}" for c in model.labels.classes]].to_numpy(np.float64)
            if base_schema is None:
                base_schema = table.schema
            if layer is not None:
                table = _with_conformal(table, model, layer, P, X, df, sets, p_values)
            if writer is None:
                writer = pq.ParquetWriter(out_path, table.schema, **writer_options(table.schema))
            writer.write_table(table)
            written += table.num_rows
    finally:
        if writer is not None:
            writer.close()
    return written


def _with_conformal(table, model, layer, P, X, df, sets: bool, p_values: bool):
    """``table`` with the conformal layer's columns appended: the set, ``in_<class>`` and ``set_size``
    (``sets``), ``pvalue_<class>`` (``p_values``)."""
    from ..model.calibrated import typed_labels
    from ..model.conformal import set_columns

    classes = model.labels.classes
    if sets:
        typed = typed_labels(np.asarray(classes, dtype=object), classes)
        for name, values in set_columns(layer.sets(P, X, df), typed, [str(c) for c in classes]).items():
            table = table.append_column(name, values if not isinstance(values, np.ndarray) else pa_array(values))
    if p_values:
        pv = layer.p_values(P, X, df)
        for i, c in enumerate(classes):
            table = table.append_column(f"pvalue_{c}", pa_array(pv[:, i]))
    return table


def pa_array(values):
    import pyarrow as pa

    return pa.array(values)


def _arrow_output(schema, P, prediction):
    """The scored table of probabilities ``P`` and predictions (``p_<class>`` columns, then
    ``prediction``) built from the arrays under ``schema``, the schema :meth:`pyarrow.Table.from_pandas`
    gave the chunk's first batch: same column types and metadata, and NaN becomes null as
    ``from_pandas`` makes it."""
    import pyarrow as pa

    arrays = [P[:, i] for i in range(P.shape[1])] + [prediction]
    return pa.Table.from_arrays(
        [pa.array(a, type=f.type, from_pandas=True) for a, f in zip(arrays, schema)], schema=schema
    )


def writer_options(schema) -> dict:
    """Parquet options for scored output: zstd, and dictionary encoding only for columns that are not
    floating point.  Probabilities are high-entropy doubles, so a dictionary page is built, found
    useless and abandoned for every batch: measured on a 3-column scored batch, dictionary attempts
    made writing 2.2x slower and the file 23 % larger (0.162 against 0.074 s and 18.9 against 15.2
    MB per 1M rows).  The prediction and any kept string column keep their dictionaries; booleans and
    lists (``score --sets``' ``in_<class>`` and ``set``) take none either: a dictionary of two values
    saves nothing, and one of sets cost a quarter of a sets batch's write (0.49 against 0.57 CPU s per
    1M rows of 10 classes)."""
    import pyarrow.types as t

    return {"compression": "zstd",
            "use_dictionary": [f.name for f in schema if not (t.is_floating(f.type) or t.is_boolean(f.type)
                                                               or t.is_list(f.type))]}


def _add_decisions(frame, df, model, cost_matrix) -> None:
    """Add ``decision`` (the class of least expected cost, typed like ``prediction``) and
    ``expected_cost`` to a scored frame, from its ``p_<class>`` columns and ``df``'s cost columns."""
    import numpy as np

    from ..decisions.decide import decide_indices
    from ..model.calibrated import typed_labels

    P = np.column_stack([frame[f"p_{c}"].to_numpy(dtype=np.float64) for c in model.labels.classes])
    index, cost = decide_indices(P, cost_matrix, df)
    classes = model.labels.classes
    frame["decision"] = typed_labels(np.asarray(classes, dtype=object)[index], classes)
    frame["expected_cost"] = cost


def score_table(
    client,
    model,
    files: list[str],
    output: str,
    keep: tuple[str, ...] = (),
    batch_rows: int | None = None,
    chunk_rows: int = 1_000_000,
    extra_outputs: bool = False,
    reject_below: float | None = None,
    progress: Progress | None = None,
    cost_matrix=None,
    overwrite: bool = False,
    sets: bool = False,
    p_values: bool = False,
) -> int:
    """Score every row of ``files`` into the Parquet dataset directory ``output``; returns rows written.

    ``batch_rows`` None: :func:`default_batch_rows` of the columns read.
    ``cost_matrix`` (a :class:`~calengine.decisions.CostMatrix`, its classes those of the model) adds
    the minimum-expected-cost ``decision`` and its ``expected_cost``; None keeps the plain fast path.
    ``overwrite`` replaces an existing ``output`` only if it is calengine's own scored output (its
    :data:`SCORES_MARKER` proves it; :func:`check_scores_output`), and only once the new one is complete.
    ``sets``/``p_values``: the conformal layer's prediction sets and p-values (:func:`score_chunk`)."""
    from ..parquet.data import check_columns

    if cost_matrix is not None:
        cost_matrix = cost_matrix.for_classes(list(model.labels.classes))
    cost_columns = list(cost_matrix.columns) if cost_matrix is not None else []
    layer_columns = list(model.conformal.input_columns) if (sets or p_values) and model.conformal is not None else []
    columns = list(dict.fromkeys(list(model.encoder.input_columns) + list(keep) + cost_columns + layer_columns))
    check_columns(files, columns, never_suggest=[getattr(model.labels, "target", None)])
    batch_rows = default_batch_rows(len(columns)) if batch_rows is None else batch_rows
    chunks = [c for c in plan_chunks(files, columns, chunk_rows) if c.n_rows > 0]
    expected = sum(c.n_rows for c in chunks)
    check_scores_output(output, overwrite)
    with staged_directory(output, replace=overwrite) as staging:
        model_f = share_model(client, model)
        futures = [
            client.submit(
                score_chunk, model_f, chunk, str(Path(staging) / f"part-{i:05d}.parquet"), tuple(keep),
                batch_rows, extra_outputs, reject_below, cost_matrix, sets, p_values, pure=False,
            )
            for i, chunk in enumerate(chunks)
        ]
        written = sum(gather_in_order(client, futures, progress, "score"))
        if written != expected:
            raise DataError(
                f"wrote {written} rows but the input has {expected}; nothing was published, run score again"
            )
        _write_scores_marker(Path(staging), model, cost_matrix is not None)
    return written


#: the file that marks a directory as calengine's scored output (``score``/``decide``), so ``overwrite``
#: replaces only what calengine wrote -- never a user's own dataset named by mistake.  Its name starts
#: with ``_``, so Parquet readers (pyarrow, Spark, calengine itself) skip it when reading the dataset.
SCORES_MARKER = "_calengine_scores.json"


def _write_scores_marker(directory: Path, model, decided: bool) -> None:
    import json

    from ..version import __version__

    marker = {"format": "calengine-scores", "calengine": __version__, "command": "decide" if decided else "score",
              "classes": [c if isinstance(c, (str, int, float, bool)) else str(c) for c in model.labels.classes]}
    (directory / SCORES_MARKER).write_text(json.dumps(marker, sort_keys=True) + "\n")


def check_scores_output(output, overwrite: bool) -> None:
    """Refuse, in one line, an ``output`` that exists (and is not an empty directory) unless ``overwrite``,
    and with ``overwrite`` anything that is not calengine's scored output (no :data:`SCORES_MARKER`).
    Called before any work starts, so a refusal leaves nothing half-done."""
    import os

    from ..parquet.storage import is_url

    text = os.fspath(output)
    if is_url(text) or not os.path.lexists(text) or (os.path.isdir(text) and not os.listdir(text)):
        return
    if not overwrite:
        raise DataError(f"output '{text}' already exists; choose a new path or pass overwrite=True")
    if not (os.path.isdir(text) and not os.path.islink(text) and os.path.isfile(os.path.join(text, SCORES_MARKER))):
        raise DataError(f"overwrite refuses to replace '{text}': it is not calengine's scored output"
                        f" (no {SCORES_MARKER}); choose a new path")


def score_parquet(model, data, output, *, keep=(), intervals: bool = False, reject_below: float | None = None,
                  cost_matrix=None, batch_rows: int | None = None, trust=(), client=None, cluster=None,
                  workers=None, progress=None, overwrite: bool = False, sets: bool = False,
                  p_values: bool = False) -> int:
    """Score a table with a fitted model into the Parquet dataset ``output``, exactly as ``calengine
    score`` does (with ``cost_matrix``, as ``calengine decide``); returns the rows written.

    ``model``: a model directory or a loaded :class:`~calengine.model.calibrated.CalibratedModel`;
    ``trust``: extra types skops may load.  ``data``: a Parquet path (file, directory, glob or URL), a
    list of them, or a pandas DataFrame.  ``keep``: input columns copied to the output.
    ``intervals``: also ``p_low``/``p_high`` (two-class Probing and Venn-ABERS models).
    ``reject_below``: leave ``prediction`` empty (and set ``rejected``) where the chosen class's
    probability is below it.  ``cost_matrix``: a :class:`~calengine.decisions.costs.CostMatrix`, a
    dict, a JSON/YAML file or inline JSON (see :func:`~calengine.decisions.costs.load_cost_matrix`);
    adds ``decision`` and ``expected_cost``.  ``sets`` (a model with a conformal layer, from
    :func:`calengine.conformalize`): adds ``set`` (the classes of the row's prediction set), a
    boolean ``in_<class>`` per class and ``set_size``; ``p_values``: ``pvalue_<class>``.  ``batch_rows``: rows per batch (default: sized from the
    columns read).  ``client``: as for :func:`calengine.runtime.client.job_client`, else
    ``cluster``/``workers``; without a cluster the chunks run on a thread pool of this process.
    ``overwrite``: replace an existing ``output`` that is calengine's own scored output (anything else
    is refused).  The output appears only when complete; every bad input is a :class:`~calengine.errors.CalengineError`
    raised before any work starts.
    """
    import os
    import tempfile

    from ..runtime.client import job_client
    from ..decisions.costs import cost_matrix_for_table, load_cost_matrix
    from ..errors import ParameterError
    from ..model.artifact import load_model
    from ..parquet.data import table_files
    from ..plugins.loading import model_requirements
    from ..runtime.progress import as_progress

    if batch_rows is not None and batch_rows < 1:
        raise ParameterError(f"batch_rows must be at least 1, got {batch_rows}", parameter="batch_rows")
    if reject_below is not None and not 0.0 <= reject_below <= 1.0:
        raise ParameterError(f"reject_below must be a probability in [0, 1], got {reject_below}",
                             parameter="reject_below")
    check_scores_output(output, overwrite)  # before the model is read: an occupied output fails at once
    parsed_costs = None if cost_matrix is None else load_cost_matrix(cost_matrix)
    named = isinstance(model, (str, os.PathLike))
    loaded = load_model(model, trust=tuple(trust or ())) if named else model
    if intervals and not loaded.has_intervals:
        name = f"'{model}'" if named else "the model"
        raise ParameterError(
            f"intervals applies to two-class Probing models and Venn-ABERS models; {name}"
            f" ({loaded.info.get('learner')} + {loaded.info.get('method')}) has no intervals; drop intervals"
            " or refit with method='venn_abers'", parameter=("intervals", "method")
        )
    if (sets or p_values) and loaded.conformal is None:
        name = f"'{model}'" if named else "the model"
        parameter = "sets" if sets else "p_values"
        raise ParameterError(
            f"{parameter} needs a model with a conformal layer, and {name} has none; attach one with calengine.conformalize"
            " (the command line: calengine conformal) and score that", parameter=parameter
        )
    with tempfile.TemporaryDirectory(prefix="calengine-score-") as scratch:
        files, _ = table_files(data, scratch)
        keep = tuple(keep or ())
        clash = [k for k in keep if k == "prediction" or k.startswith("p_")]
        if sets:
            clash += [k for k in keep if k in ("set", "set_size") or k.startswith("in_")]
        if p_values:
            clash += [k for k in keep if k.startswith("pvalue_")]
        if clash:
            raise ParameterError(f"keep {clash[0]} would collide with an output column; rename it first",
                                 parameter="keep")
        costs = cost_matrix_for_table(parsed_costs, loaded, files)
        if costs is not None:
            taken = [k for k in keep if k in ("decision", "expected_cost")]
            if taken:
                raise ParameterError(f"keep {taken[0]} would collide with an output column of cost_matrix; rename it"
                                     " first", parameter=("keep", "cost_matrix"))
        with job_client(client, cluster=cluster, workers=workers, requirements=model_requirements([loaded]),
                        map_only=True) as c:
            return score_table(c, loaded, files, os.fspath(output), keep=keep, batch_rows=batch_rows,
                               extra_outputs=intervals, reject_below=reject_below, progress=as_progress(progress),
                               cost_matrix=costs, overwrite=overwrite, sets=sets, p_values=p_values)


# ---------------------------------------------------------------------------------------------- evaluate


def weight_column(df, weight: str | None):
    """The batch's weights as float64 (:func:`calengine.reductions.column_stats.checked_weights`), or None."""
    if not weight:
        return None
    from ..reductions.column_stats import checked_weights

    return checked_weights(df[weight], weight)
