"""Fitting on the score columns of a table (``calengine fit --scores``): options, reader, API.

A learner with :attr:`calengine.base.Learner.prefit` -- today :class:`calengine.adapters.score_columns.ScoreColumns`,
the scores of a model computed elsewhere -- goes through the ordinary partition-native fit of
:mod:`calengine.fit.table` with three differences, all made there: no folds (nothing is fitted, so
every row of DATA, or of ``--calibration-data``, feeds the calibrators through the same reductions),
the learner handed on as it is (never cloned), and the model's encoder a
:class:`~calengine.plan.columns.ColumnReader` of exactly the columns it reads.  This module holds the
rest: the checks that need the table's columns, how the score columns become that reader
and learner, the class-sampling correction every fit can record (``--negative-sampling``,
``--class-sampling``); the Python API, :func:`calengine.fit.scores_api.calibrate_scores`, is apart.

``--prefit PATH`` (:mod:`calengine.adapters.prefit`) takes the same route with a saved model as the learner:
:func:`prefit_spec` opens and checks the file before any data is read and makes its feature columns
the ones the model's :class:`~calengine.plan.columns.ColumnReader` reads; the options it refuses are
refused with those of ``--scores``, at the door (:func:`calengine.plan.options.check_job`).

The multiclass calibration of a k-column score matrix is whatever the engine does for any learner's
(n, k) scores (today one calibrator per column and the ``normalize`` combiner), so a calibrator of
whole score vectors plugs in for score columns and learners alike.
"""

from __future__ import annotations

from typing import Any

from ..errors import DataError


# ---------------------------------------------------------------------------------------------- checks


def check_table_columns(files: list[str], root, names: list[str], spec) -> None:
    """The target, ``--weight`` and ``--scores`` columns exist and play one part each (one line each)."""
    from ..parquet.data import check_columns

    if spec.target not in names:
        check_columns(files, [spec.target], root)
    if spec.weight:
        if spec.weight not in names:
            check_columns(files, [spec.weight], root)
        if spec.weight == spec.target:
            raise DataError(f"weight {spec.weight} is the target column; give a column of weights", parameter="weight")
        if spec.weight in (spec.features or ()) or spec.weight in (spec.scores or ()):
            raise DataError(f"weight column '{spec.weight}' cannot also be a feature or a score column",
                            parameter="weight")
    if spec.prefit:
        missing = [c for c in spec.features if c not in names]
        if missing:
            raise DataError(
                f"the prefit model reads the feature column '{missing[0]}', which the table does not have; give a"
                f" table with its columns ({', '.join(spec.features)})", parameter="prefit"
            )
        if spec.target in spec.features:
            raise DataError(f"the target '{spec.target}' is a feature column of the prefit model; give the class column",
                            parameter="prefit")
    if not spec.scores:
        return
    missing = [c for c in spec.scores if c not in names]
    if missing:
        check_columns(files, missing, root)
    if spec.target in spec.scores:
        raise DataError(f"the target '{spec.target}' cannot also be a score column; remove it from scores",
                        parameter="scores")


def check_sampling(config, classes: list) -> None:
    """The sampling rates fit the target's classes (before anything is fitted)."""
    from ..methods.sampling import sampling_rates

    sampling_rates(classes, config.negative_sampling, config.class_sampling)


def runs_as_map(scores, prefit, by, method: str) -> bool:
    """Whether a fit is a map over fragments whose statistics are merged in fixed trees or in the client,
    and nothing else: a fit of score columns or of a ``--prefit`` model (no learner is trained), not
    segment-wise (``--by``) and not MCGrad (whose rounds compute Dask collections).  Without
    ``--cluster`` such a fit runs on a :class:`~calengine.runtime.thread_client.ThreadClient`
    (:func:`calengine.runtime.client.dask_client`'s ``map_only``), as ``score`` does: importing ``distributed``
    and starting the embedded scheduler took ~1 s of CPU of a 10M-row sigmoid fit's ~8 s, and Dask's
    task handling another ~13 % of its busy samples (``benchmarks/results/score_columns_speed_s8.md``).
    The tasks are the same functions on the same kind of threads, so the model is the same bits."""
    return bool(scores or prefit) and not by and method != "mcgrad"


def learner_fit_runs_as_map(config, spec, plugins) -> bool:
    """Whether a learner's fit is, like :func:`runs_as_map`'s, a map over fragments whose statistics
    are merged in fixed trees or in the client: one learner fitted from mergeable statistics (the
    ``stats`` route: naive Bayes, linear discriminants, ...), calibrated by a calibrator (not Probing
    or bagging, not MCGrad), not segment-wise, not sampled (``max_train_rows``), and not a costing
    sample of weighted rows.  Its tasks (per-fragment statistics, their merges, the fitted learners,
    held-out scores, calibrator summaries) are submitted after their inputs, so without ``--cluster``
    they run on a :class:`~calengine.runtime.thread_client.ThreadClient` as the same functions on the
    same kind of threads: the same model bytes, without importing ``distributed`` and starting its
    scheduler (0.5-1 s of a 5 s fit of Adult; its task handling was a tenth of a 10M-row fit's
    samples, py-spy).  Any other learner (assembled rows, a cluster learner, several learners)
    keeps the embedded Dask scheduler."""
    from .training import ENGINE_METHODS, resolve_learner, split_learners

    if runs_as_map(spec.scores, spec.prefit, spec.by, config.method):
        return True
    if spec.scores or spec.prefit or spec.by or config.method == "mcgrad" or config.method in ENGINE_METHODS:
        return False
    if len(split_learners(config.learner)) != 1 or getattr(config, "combine", None):
        return False
    if spec.route not in ("auto", "stats") or spec.max_train_rows:
        return False
    learner = resolve_learner(config, plugins)
    if not getattr(learner, "supports_stats", False) or getattr(learner, "prefit", False):
        return False
    if getattr(learner, "trains_on_cluster", False):
        return False
    return not (spec.weight and not learner.accepts_sample_weight)


def prefit_spec(spec):
    """(the checked :class:`~calengine.adapters.prefit.Prefit` learner of ``spec.prefit``, ``spec`` with its
    feature columns): the file is opened, validated and loaded here, before any data is read."""
    from dataclasses import replace

    from ..adapters.prefit import open_prefit

    learner = open_prefit(spec.prefit, spec.features, spec.trust)
    return learner, replace(spec, features=list(learner.columns))


# ---------------------------------------------------------------------------------------------- the model


def score_reader(spec, labels):
    """The model's reader of ``spec.scores``, in class order (:func:`calengine.adapters.score_columns.order_score_columns`)."""
    from ..plan.columns import ColumnReader
    from ..adapters.score_columns import order_score_columns

    return ColumnReader(order_score_columns(list(spec.scores), labels, list(spec.classes or ()) or None),
                        role="score", score_kind=spec.score_kind)


def score_learner(ctx):
    """The :class:`~calengine.adapters.score_columns.ScoreColumns` learner of a planned ``--scores`` fit."""
    from ..adapters.score_columns import ScoreColumns

    return ScoreColumns(columns=list(ctx.enc.encoder.columns), kind=ctx.spec.score_kind,
                        n_classes=ctx.enc.labels.n_classes)


def with_sampling(model, config):
    """``model`` with the class-sampling correction of ``config`` recorded (unchanged without one)."""
    from ..methods.sampling import sampling_rates

    rates = sampling_rates(list(model.labels.classes), config.negative_sampling, config.class_sampling)
    if rates is not None:
        model.class_rates = rates
        model.info["negative_sampling"] = config.negative_sampling
    return model


def score_columns_info(model) -> dict[str, Any] | None:
    """``{"columns", "kind"}`` of a score-column model (what the CLI prints), else None."""
    for m in model.members:
        for lr in getattr(m, "learners", ()):
            if getattr(lr, "prefit", False) and hasattr(lr, "kind"):
                return {"columns": list(lr.columns), "kind": lr.kind}
    return None
