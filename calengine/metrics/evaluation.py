"""Evaluating fitted models on a labelled table: ``calengine evaluate``, and the same from Python.

:func:`evaluate_models` runs what the command runs: per model one exact reduction of metric
accumulators over the table's chunks (:func:`calengine.metrics.table.evaluate_table`, calibrated and
raw learner side by side), the drift check of the calibrated probabilities, and on request the
cost-matrix decisions, bootstrap bands of the calibration map and the HTML report.  It returns an
:class:`Evaluation`, whose :meth:`~Evaluation.to_json` is the object ``evaluate --json`` prints and
whose :meth:`~Evaluation.to_text` is the text ``evaluate`` prints: the command is a shell over this
function, so a Python user gets the same numbers and the same tables without argv.

The table is never loaded into this process: chunks are evaluated where they are read and only their
accumulators come back (from :data:`~calengine.metrics.ranged.engine.RANGED_MIN_ROWS` rows on, score ranges
that stay where they were built, the report's figures included).  The report's calibration maps read at most
:data:`~calengine.metrics.report.MAP_MAX_POINTS` rows of the table's first file.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

from ..errors import DataError, ParameterError

__all__ = ["Evaluation", "evaluate_models", "model_labels", "check_bootstrap", "check_report_dir", "check_weight_option"]


@dataclass
class Evaluation:
    """What :func:`evaluate_models` measured, one entry per model in the order given.

    ``models``: the loaded models; ``names``: what tells them apart in the raw learners' rows (the
    directory's name, ``model i`` for a model passed loaded); ``labels``: :func:`model_labels`;
    ``accumulators``: ``{"calibrated": MetricAccumulator, "raw": MetricAccumulator}`` (and
    ``"decisions"``: a :class:`~calengine.decisions.DecisionAccumulator` with a cost matrix);
    ``results``: the same as :meth:`result` dicts; ``drifts``: the drift check of the calibrated
    probabilities; ``bands``: the bootstrap bands (with ``bootstrap``), else None; ``report``: the
    report directory written, else None.
    """

    models: list
    names: list[str]
    labels: list[str]
    accumulators: list[dict]
    results: list[dict]
    drifts: list[dict]
    bands: list[dict] | None = None
    report: str | None = None
    #: with ``by``: per model, :meth:`calengine.metrics.segments.SegmentAccumulator.result`
    segments: list[dict] | None = None
    #: the weight column every number was weighted by (``weight``), else None
    weight: str | None = None
    #: with ``prior_shift``: per model, :func:`calengine.metrics.prior_shift.prior_shift_table`
    prior_shifts: list[dict] | None = None
    #: per model, the coverage of its prediction sets (:mod:`calengine.metrics.conformal`; None for a model
    #: without a conformal layer), or None when no model has one
    conformal: list | None = None
    #: the selection ``metrics`` (:mod:`calengine.metrics.selection`): None, every metric; else the names
    #: computed (``raw``, ``drift``, ``error_reject`` are sections; ``drifts`` holds None without ``drift``)
    metrics: frozenset | None = None

    def _has(self, section: str) -> bool:
        return self.metrics is None or section in self.metrics

    def to_json(self) -> dict[str, Any]:
        """The object ``evaluate --json`` prints (that line is ``json.dumps`` of it): one model's
        metrics with ``raw``, ``drift``, ``error_reject``, ``model`` (and ``decisions``,
        ``calibration_band`` when asked for), or ``{"models": [{"label": ..., ...}, ...]}`` for
        several; NaN and infinities are None, as JSON has neither."""
        from .report.text import finite

        payloads = []
        for i, (m, acc, res, drift) in enumerate(zip(self.models, self.accumulators, self.results, self.drifts)):
            payload = dict(res["calibrated"])
            if self._has("raw"):
                payload["raw"] = res.get("raw")
            if self._has("drift"):
                payload["drift"] = drift
            if self._has("error_reject"):
                payload["error_reject"] = _curve_points(acc["calibrated"].error_reject_points())
            payload["model"] = {"learner": m.info.get("learner"), "method": m.info.get("method")}
            if m.info.get("lineage"):
                payload["model"]["lineage"] = m.info["lineage"]
            if "decisions" in res:
                payload["decisions"] = res["decisions"]
            if self.segments is not None:
                payload["segments"] = self.segments[i]
            if self.prior_shifts is not None:
                payload["prior_shift"] = self.prior_shifts[i]
            if self.conformal is not None and self.conformal[i] is not None:
                payload["conformal"] = self.conformal[i]
            if self.bands is not None:
                from .bootstrap import band_json

                payload["calibration_band"] = band_json(self.bands[i])
            payloads.append(payload)
        out = payloads[0] if len(payloads) == 1 else {"models": [{"label": lb, **p} for lb, p in zip(self.labels, payloads)]}
        return finite(out)

    def to_text(self, width: int | None = None) -> str:
        """The text ``evaluate`` prints, without its final newline: the metrics table (calibrated
        beside raw learner), the drift lines, the lineage of recalibrated models, the error-reject
        table, the decisions under a cost matrix and the report's path, each fitted to ``width``
        columns (default: the terminal's, ``$COLUMNS``)."""
        from .corp import with_brier_rows
        from .report.text import (
            format_decisions,
            format_drift,
            format_error_reject,
            format_metrics_table,
            with_suite_rows,
        )

        several = len(self.models) > 1
        rows = []
        for lb, res, m, name in zip(self.labels, self.results, self.models, self.names):
            rows.append((f"raw {m.info.get('learner')} ({name})" if several else "raw learner",
                         with_suite_rows(with_brier_rows(res.get("raw")))))
            rows.append((lb, with_suite_rows(with_brier_rows(res["calibrated"]))))
        table = format_metrics_table(rows, width)
        # the metrics table numbered its rows (raw, calibrated, raw, ...): the same numbers name the models below
        step = 2 if self._has("raw") else 1  # without the raw learners' rows the models' rows are 1, 2, ...
        ids = ([f"[{i}]" for i in range(step, step * len(self.models) + 1, step)] if table.startswith("[1] ")
               else None)
        class_names = [[str(c) for c in m.labels.classes] for m in self.models]
        lines = [table, ""]
        if self._has("drift"):
            lines += [format_drift(self.labels, self.drifts, class_names, width, ids=ids), ""]
        lineages = [(lb, m.info["lineage"]) for lb, m in zip(self.labels, self.models) if m.info.get("lineage")]
        if lineages:
            from .report import lineage_text

            lines += [f"{lb}: {lineage_text(lineage)}" if several else lineage_text(lineage) for lb, lineage in lineages]
            lines.append("")
        if self._has("error_reject"):
            lines.append(format_error_reject(self.labels, [acc["calibrated"] for acc in self.accumulators], width,
                                             ids=ids))
        elif lines[-1] == "":
            lines.pop()
        for lb, res in zip(self.labels, self.results):
            if "decisions" in res:
                lines += ["", format_decisions(lb, res["decisions"])]
        if self.segments is not None:
            from .segments import format_segments

            for lb, seg in zip(self.labels, self.segments):
                lines += ["", format_segments(lb, seg, width)]
        if self.conformal is not None:
            from .conformal import format_conformal

            lines += [s for lb, c in zip(self.labels, self.conformal) if c is not None
                      for s in ("", format_conformal(lb, c))]
        if self.prior_shifts is not None:
            from .prior_shift import prior_shift_text

            lines += [s for lb, shift in zip(self.labels, self.prior_shifts) for s in ("", prior_shift_text(lb, shift))]
        if self.report is not None:
            lines += ["", f"report: {os.path.join(self.report, 'index.html')}"]
        return "\n".join(lines)


def evaluate_models(models, data, target: str, *, weight: str | None = None, cost_matrix=None, bootstrap: int = 0,
                    seed: int = 0, alpha: float = 0.01, report=None, trust=(), client=None, cluster=None,
                    workers=None, progress=None, by=None, max_segments: int | None = None,
                    prior_shift: int = 0, metrics=None) -> Evaluation:
    """Evaluate one or more fitted models on a labelled table, exactly as ``calengine evaluate`` does.

    ``models``: a model directory or loaded :class:`~calengine.model.calibrated.CalibratedModel`, or a
    list of them (``trust``: extra types skops may load).  ``data``: a Parquet path (file, directory,
    glob or URL), a list of them, or a pandas DataFrame; ``target``: its class column; ``weight``: a
    column of non-negative row weights that every metric and test uses, and the decisions' costs, the
    bootstrap resamples, the prior-shift estimate and the report's bars too (a weight of 2 is the row
    twice).
    ``seed`` also draws the bootstrap interval of ``l2_ce_debiased``.
    ``cost_matrix`` (a :class:`~calengine.decisions.costs.CostMatrix`, a dict, a JSON/YAML file or
    inline JSON): also the profit or cost of each policy's decisions.  ``bootstrap`` B >= 2: a 90 %
    pointwise band on each two-class model's calibration map from B refits on resamples drawn with
    ``seed``.  ``alpha``: the drift check's significance level.  ``report``: a new (or empty)
    directory for the figures and the HTML page.  ``client``: as for
    :func:`calengine.runtime.client.job_client`, else ``cluster``/``workers``; without a cluster the chunks
    run on a thread pool of this process.  ``by``: segment columns (a name, ``"a,b"`` or a list): the
    calibration of every segment (:mod:`calengine.metrics.segments`, at most ``max_segments``, default
    1,000, counted over all the columns), summed in the metrics' pass (each row scored once).
    ``prior_shift`` B >= 2: also the class priors of the table estimated from each model's
    probabilities alone (``adapt``'s EM), with a 90 % interval from B bootstrap resamples drawn with
    ``seed``, beside the training priors and the observed label rates
    (:func:`calengine.metrics.prior_shift.prior_shift_table`).  A model with a conformal layer
    (:func:`calengine.conformalize`) also gets the coverage of its prediction sets, overall, per class
    and per ``by`` segment, and their sizes (:mod:`calengine.metrics.conformal`).  Every bad input is a
    :class:`~calengine.errors.CalengineError` raised before any work starts.

    ``metrics``: None (every metric), or a selection of the keys ``evaluate --json`` prints (a list, or
    names separated by commas; :data:`calengine.metrics.selection.METRIC_NAMES`, with the sections
    ``raw``, ``drift`` and ``error_reject``): only those are computed and returned, each the same bits
    as in the full evaluation; the raw learner's tables are built only with ``raw`` (or a cost matrix,
    whose decisions compare its policy).  Refused with ``report`` (the page draws every metric).
    """
    import tempfile

    from ..runtime.client import job_client
    from ..decisions.costs import cost_matrix_for_table, load_cost_matrix
    from ..model.artifact import load_model
    from ..parquet.data import table_files
    from ..plugins.loading import model_requirements
    from ..runtime.progress import as_progress
    from .table import evaluate_table
    from .drift import check_alpha

    alpha = check_alpha(alpha)
    check_weight_option(weight)
    from .selection import check_metrics, needs

    metrics = check_metrics(metrics)
    if metrics is not None and report is not None:
        raise ParameterError("report draws every metric's figure and table; drop metrics or report",
                             parameter=("metrics", "report"))
    if by is not None:
        from .segments import DEFAULT_MAX_SEGMENTS, check_segment_options

        max_segments = DEFAULT_MAX_SEGMENTS if max_segments is None else max_segments
        by = check_segment_options(by, max_segments)
    parsed_costs = None if cost_matrix is None else load_cost_matrix(cost_matrix)
    given = list(models) if isinstance(models, (list, tuple)) else [models]
    if not given:
        raise ParameterError("evaluate_models() needs at least one model: a model directory or a loaded model")
    named = [isinstance(m, (str, os.PathLike)) for m in given]
    loaded = [load_model(m, trust=tuple(trust or ())) if n else m for m, n in zip(given, named)]
    if prior_shift:
        from .prior_shift import check_prior_shift
        from ..plan.options import check_seed
        from .bootstrap import check_bootstrap_options

        check_bootstrap_options(prior_shift, 0.9)
        seed = check_seed(seed)
        for m in loaded:
            check_prior_shift(m)
    sources = [os.fspath(m) if n else f"model {i}" for i, (m, n) in enumerate(zip(given, named), 1)]
    report = None if report is None else os.fspath(report)
    prog = as_progress(progress)
    # a range task still running when a failure ends the evaluation (a full scratch disk, a plugin's
    # error) may write into the directory while it is removed: that must not replace the failure
    with tempfile.TemporaryDirectory(prefix="calengine-evaluate-", ignore_cleanup_errors=True) as scratch:
        files, _ = table_files(data, scratch)
        if report is not None:
            check_report_dir(report)
        costs = [cost_matrix_for_table(parsed_costs, m, files) for m in loaded]
        if bootstrap:
            from ..plan.options import check_seed

            check_bootstrap(bootstrap, loaded)
            seed = check_seed(seed)
        with _forgetting(scratch), job_client(client, cluster=cluster, workers=workers,
                                              requirements=model_requirements(loaded), map_only=True) as c:
            # large tables are cut into score ranges spilled to the scratch directory (on a cluster: kept on
            # the workers); the report's figures are drawn from the ranges too (calengine.metrics.ranged.curves)
            from ..runtime.thread_client import ThreadClient

            spill = scratch if isinstance(c, ThreadClient) else None
            if by is not None:
                _check_segment_columns(files, by, target, weight)
            seg_opt = None if by is None else (by, max_segments)
            _warn_scratch(c, files, loaded, spill)

            def attempt() -> Evaluation:
                """The evaluation on this client, from the first row scored to the last number: run once,
                or again from the start when a worker holding its score ranges leaves (:func:`_restarting`)."""
                accs: list = []
                bands = shifts = None
                with _releasing(accs):
                    # the raw learner's tables only when its metrics are selected, or the decisions compare its policy
                    accs.extend(evaluate_table(c, m, files, target, progress=prog, cost_matrix=cm, weight=weight,
                                               with_raw=metrics is None or "raw" in metrics or cm is not None,
                                               ranged=True, spill_dir=spill, segments=seg_opt,
                                               suite_parts=needs(metrics))
                                for m, cm in zip(loaded, costs))
                    # --by: the segment sums came with the metrics' pass (each row scored once for both)
                    segments = None if by is None else [a.pop("segments").result() for a in accs]
                    # a conformal model's sets, from the same pass
                    sets = [a.pop("conformal").result(m.conformal, [str(label) for label in m.labels.classes], weight is not None)
                            if "conformal" in a else None for a, m in zip(accs, loaded)]
                    conformal = sets if any(x is not None for x in sets) else None
                    if bootstrap:
                        from .bootstrap import table_calibration_map_band

                        # a seeded sample of the evaluated rows scored where they are read, never the whole table
                        bands = [table_calibration_map_band(c, m, files, target, bootstrap, seed=seed,
                                                            weight=weight) for m in loaded]
                    if prior_shift:
                        from .prior_shift import prior_shift_table

                        shifts = [prior_shift_table(c, m, files, target, replicates=prior_shift, seed=seed,
                                                    progress=prog, weight=weight) for m in loaded]
                    # ranged tables are read by tasks of this client, in this scratch directory: every number
                    # is computed before either goes away (freeze keeps the answers and drops the ranges)
                    # the raw tables of a cost matrix's decisions without "raw" selected: no metrics of them
                    results = [{k: _metrics(acc, seed, metrics) for k, acc in a.items()
                                if k != "raw" or metrics is None or "raw" in metrics} for a in accs]
                    drifts = [a["calibrated"].drift_check(alpha=alpha) if metrics is None or "drift" in metrics
                              else None for a in accs]
                    result = Evaluation(
                        models=loaded, names=[os.path.basename(os.path.normpath(s)) for s in sources],
                        labels=model_labels(loaded, sources), accumulators=accs, results=results, drifts=drifts,
                        bands=bands, report=report, segments=segments, prior_shifts=shifts, weight=weight,
                        conformal=conformal, metrics=metrics,
                    )
                    if report is not None:
                        _write_report(result, files)
                    for a in accs:
                        for acc in a.values():
                            if hasattr(acc, "freeze"):
                                acc.freeze(error_reject=metrics is None or "error_reject" in metrics)
                return result

            result = _restarting(c, attempt)
    return result


#: how many times ``evaluate`` on a cluster starts again after a worker holding its score ranges left
MAX_RESTARTS = 2


def _restarting(client, attempt):
    """``attempt()``, run again from the start (at most :data:`MAX_RESTARTS` times, with a warning line each
    time) when a worker that held its score ranges leaves the cluster while workers remain.

    Why: the ranges of ``evaluate --cluster`` are files on the workers' own disks
    (:mod:`calengine.metrics.ranged.workers`), so Dask cannot recompute a lost worker's share the way it
    recomputes lost task results, and the evaluation as planned cannot finish (before, it stopped with
    the error).  Starting again re-scores the table on the workers left (and on any the cluster adds,
    e.g. a nanny's restart of the lost one); the first attempt's files on the survivors are removed
    when it fails (:func:`_releasing`, :func:`~calengine.metrics.ranged.workers.gather_pinned`), and
    the results are the same bits as an uninterrupted run (every sum is exact, every seed fixed)."""
    import warnings

    from ..errors import WorkerLostError

    for restart in range(MAX_RESTARTS + 1):
        try:
            return attempt()
        except WorkerLostError as exc:
            try:
                left = len(client.scheduler_info(n_workers=-1)["workers"])
            except Exception:  # noqa: BLE001 - a cluster that cannot say is not one to start again on
                left = 0
            if restart == MAX_RESTARTS or not left:
                raise
            warnings.warn(f"worker {exc.worker} left the cluster during evaluate, taking the score ranges on its"
                          f" local disk; evaluating again from the start on the {left} worker(s) left"
                          f" (restart {restart + 1} of at most {MAX_RESTARTS})", stacklevel=2)


#: bytes a score range file holds per distinct forecast (its value, positives and negatives: 8 bytes each)
RANGE_BYTES_PER_VALUE = 24


def _warn_scratch(client, files, models, scratch: str | None) -> None:
    """Warn, before any row is scored, when the disk that will hold a large evaluation's range files
    (``scratch`` embedded; each worker's local directory on a cluster) has less free space than they may
    take: :data:`RANGE_BYTES_PER_VALUE` per distinct forecast and table, counted as if every row had its
    own forecast (continuous probabilities do), for each model's calibrated and raw scores, each class's
    table (a binary model's class 0 is not written embedded) and the top-label table.

    Why a warning and not an error: the bound is reached only when forecasts are all distinct, and a
    table with few distinct scores needs a fraction of it; an evaluation that does run out stops with
    one ``error:`` line anyway (:func:`calengine.tasks.spill.save_npy`), but only after its chunks were
    scored, which at 10^8 rows is minutes of work.  Tables below
    :data:`~calengine.metrics.ranged.engine.RANGED_MIN_ROWS` rows write no ranges and are not checked."""
    import warnings

    from ..parquet.dataset import describe_files
    from .ranged import engine as range_eval

    rows = sum(f.n_rows for f in describe_files(files, None, []).fragments)  # footers only; columns are checked later
    if rows < range_eval.RANGED_MIN_ROWS:
        return
    on_workers = scratch is None
    tables = sum(2 * (m.n_classes + (1 if on_workers or m.n_classes > 2 else 0)) for m in models)
    # plus 5 %: the chunk files of the table being cut coexist with the ranges written before it, and
    # files take whole blocks (measured at 10M rows: bound 915 MiB, scratch peak 917 MiB)
    need = RANGE_BYTES_PER_VALUE * rows * tables * 1.05
    if on_workers:
        try:
            disks = client.run(_local_disk)
        except Exception:  # noqa: BLE001 - a check that cannot run is no reason to stop the evaluation
            return
        # workers on one host may share a disk: count each (host, device) once
        free = sum(dict(disks.values()).values())
        where = "the workers' local directories"
        fix = "start the workers with --local-directory on larger disks"
    else:
        import shutil

        free = shutil.disk_usage(scratch).free
        where = f"'{os.path.dirname(scratch) or scratch}'"
        fix = "point TMPDIR at a larger disk"
    if free < need:
        gib = 2.0**30
        warnings.warn(f"evaluate may write up to {need / gib:.1f} GiB of scratch files to {where} ({tables} tables of "
                      f"up to {rows:,} distinct forecasts, {RANGE_BYTES_PER_VALUE} bytes each), which have "
                      f"{free / gib:.1f} GiB free; if they fill up it stops with an error: {fix}", stacklevel=3)


def _local_disk(dask_worker) -> tuple:
    """``((host, device), free bytes)`` of this worker's local directory (run on each worker)."""
    import shutil
    import socket

    d = dask_worker.local_directory
    return (socket.gethostname(), os.stat(d).st_dev), shutil.disk_usage(d).free


def _check_segment_columns(files, by, target, weight) -> None:
    """``--by`` names columns of the table other than the target and the weight (one line, before work)."""
    from ..parquet.data import check_columns

    missing = [c for c in by if c in (target, weight)]
    if missing:
        raise ParameterError(f"by column '{missing[0]}' is the target or the weight; segment over another column",
                             parameter="by")
    check_columns(files, list(by))


@contextlib.contextmanager
def _forgetting(scratch: str):
    """Drop this process's cached ranges of ``scratch`` (:mod:`calengine.metrics.ranged.cache`) when the
    evaluation ends, however it ends: the directory goes next, and the cache's memory with it."""
    from .ranged.cache import forget

    try:
        yield
    finally:
        forget(scratch)


@contextlib.contextmanager
def _releasing(accs: list):
    """Release the ranges of the accumulators in ``accs`` (a list filled inside) if the evaluation
    fails: on a cluster they are files in the workers' local directories, which outlive this call
    (:meth:`~calengine.metrics.ranged.engine.RangedTables.release`); on success :meth:`freeze` released them."""
    try:
        yield
    except BaseException:
        for a in accs:
            for acc in a.values():
                if hasattr(acc, "release"):
                    with contextlib.suppress(Exception):  # the evaluation's own error is the one to report
                        acc.release()
        raise


def _metrics(acc, seed: int, metrics: frozenset | None = None) -> dict:
    """An accumulator's result; a :class:`~calengine.metrics.measures.MetricAccumulator`'s (or its range-partitioned
    :class:`~calengine.metrics.ranged.engine.RangedTables`') with the
    calibration metric suite (:mod:`calengine.metrics.ranged.suite`) added, its bootstrap drawn with ``seed``.
    ``metrics`` (:mod:`calengine.metrics.selection`): only those keys, and only the passes they need."""
    from .measures import MetricAccumulator
    from .ranged.engine import RangedTables
    from .selection import CORE_KEYS, needs, select_keys

    if not isinstance(acc, (MetricAccumulator, RangedTables)):
        return acc.result()
    if metrics is None:
        return {**acc.result(), **acc.calibration_suite(seed=seed)}
    if metrics.isdisjoint(CORE_KEYS):
        acc._require_rows()
        core = {"n": acc.n, "n_classes": acc.n_classes}
    elif isinstance(acc, RangedTables):
        core = acc.result(drift="drift" in metrics)
    else:
        core = acc.result()
    parts = needs(metrics)
    return select_keys({**core, **(acc.calibration_suite(seed=seed, parts=parts) if parts else {})}, metrics)


def model_labels(models, dirs) -> list[str]:
    """``learner + method [combine rule, code matrix, refit] (directory)``: everything that tells two
    models of one table apart (three Pendigits models differing only in their code matrix or mode all
    read "gaussian_nb + isotonic" before); the directory name is added when there are several."""
    labels = []
    for m in models:
        extras = [m.combine_rule] if m.combine_rule else []
        if m.info.get("multiclass"):
            extras.append(str(m.info["multiclass"]))
        elif (m.info.get("method_params") or {}).get("multiclass"):
            extras.append(str(m.info["method_params"]["multiclass"]))
        if m.info.get("mode") == "refit" and not m.info.get("calibration_data"):
            extras.append("refit")
        labels.append(f"{m.info.get('learner')} + {m.info.get('method')}" + (f" [{', '.join(extras)}]" if extras else ""))
    if len(set(labels)) < len(labels) or len(models) > 1:
        labels = [f"{lb} ({os.path.basename(os.path.normpath(d))})" for lb, d in zip(labels, dirs)]
    return labels


#: the most bootstrap replicates a band is drawn from (the CLI's bound, calengine.cli.limits, is the same)
MAX_BOOTSTRAP = 10_000


def check_weight_option(weight) -> None:
    """``weight`` is None or a column name (its values are checked where each batch is read)."""
    if weight is None:
        return
    if not isinstance(weight, str) or not weight:
        raise ParameterError(f"weight must be a column name, got {weight!r}; e.g. weight='w'", parameter="weight")


def check_bootstrap(replicates, models=()) -> None:
    """``replicates`` is bounded by :data:`MAX_BOOTSTRAP`; ``bootstrap`` needs at least 2 replicates, and draws bands for two-class models with one
    calibrator (the band is that calibrator's map refitted)."""
    if replicates < 2:
        raise ParameterError(f"bootstrap needs at least 2 replicates, got {replicates}; e.g. bootstrap=200",
                             parameter="bootstrap")
    if replicates > MAX_BOOTSTRAP:
        raise ParameterError(
            f"bootstrap must be from 2 to {MAX_BOOTSTRAP}, got {replicates} (each replicate refits the calibrator);"
            " e.g. bootstrap=200", parameter="bootstrap"
        )
    for m in models:
        if m.n_classes != 2 or len(getattr(m.members[0], "calibrators", ())) != 1:
            raise ParameterError(
                f"bootstrap draws bands for two-class models with a calibrator ({m.info.get('learner')} +"
                f" {m.info.get('method')} is not one); drop bootstrap", parameter="bootstrap"
            )


def check_report_dir(path: str) -> None:
    """The report goes to a new or empty directory: an existing one is never touched."""
    if os.path.exists(path) and not (os.path.isdir(path) and not os.listdir(path)):
        raise DataError(f"report directory '{path}' already exists and is not empty; choose a new directory",
                        parameter="report")


def _curve_points(curve: dict) -> dict:
    """The thinned error-reject curve (at most 101 points: JSON stays small) as lists of floats."""
    return {k: [float(v) for v in curve[k]] for k in ("threshold", "reject_rate", "error_rate")}


def _write_report(ev: Evaluation, files: list[str]) -> None:
    """The figures and the HTML page of ``ev`` in ``ev.report`` (:func:`calengine.metrics.report.write_report`)."""
    from .report import ReportEntry, write_report

    entries = []
    js = ev.to_json()
    payloads = [js] if len(ev.models) == 1 else [{k: v for k, v in p.items() if k != "label"} for p in js["models"]]
    for i, (m, acc, lb) in enumerate(zip(ev.models, ev.accumulators, ev.labels)):
        cmap = calibration_map_sample(m, files)
        if ev.bands is not None:
            cmap["band"] = ev.bands[i]
        entries.append(
            ReportEntry(
                label=lb,
                calibrated=acc["calibrated"],
                raw=acc.get("raw"),
                class_names=[str(c) for c in m.labels.classes],
                calibration_map=cmap,
                decisions=acc.get("decisions"),
                drift=ev.drifts[i],
                lineage=m.info.get("lineage"),
                segments=None if ev.segments is None else ev.segments[i],
                prior_shift=None if ev.prior_shifts is None else ev.prior_shifts[i],
                weight=ev.weight,
                payload=payloads[i],
                conformal=None if ev.conformal is None else ev.conformal[i],
            )
        )
    write_report(ev.report, entries)


def calibration_map_sample(model, files: list[str], max_rows: int = 5000) -> dict:
    """The report's calibration map of ``model``: the first member's scores and calibrated column
    probabilities on up to ``max_rows`` rows of the table's first file (a seeded subsample beyond)."""
    import numpy as np

    from ..parquet.data import read_table

    df = read_table(files[:1], list(model.encoder.input_columns))
    if len(df) > max_rows:
        df = df.sample(max_rows, random_state=0)
    X = model.encoder.transform(df)
    member = model.members[0]
    S = member.scores(X)
    R = member.column_probabilities(X, S)
    k = model.n_classes
    names = [str(model.labels.classes[1])] if S.shape[1] == 1 and k == 2 else [f"column {b}" for b in range(S.shape[1])]
    if S.shape[1] == k:
        names = [str(c) for c in model.labels.classes]
    return {"scores": np.asarray(S), "probabilities": np.asarray(R), "column_names": names}
