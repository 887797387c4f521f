"""Cross-validated evaluation of a configuration on one table (``calengine cv``).

Most shipped datasets have no test split, so "how well calibrated is gaussian_nb + isotonic on pima?"
needs outer folds: the table's labelled rows are split into K stratified folds (seeded, as
:func:`calengine.parquet.data.stratified_folds` does for calibration); for each fold a complete model — its
own feature encoding, its own inner calibration folds, exactly what ``calengine fit`` builds — is
fitted on the other K-1 folds and scored on the held-out one.  The metrics of each fold come from
the same :class:`~calengine.metrics.measures.MetricAccumulator` as ``calengine evaluate``; the report is each
metric's mean and standard deviation (ddof=1) over the folds, for the calibrated model and the raw
learner.

The K fits run side by side: each fold's :func:`calengine.fit.training.fit_model` is started from its own
client thread and submits its learner/calibrator tasks to the same cluster, and every held-out fold
is scored in a task.  The table is read into the client's memory (this is the in-memory fit path of
the Python API, meant for tables that fit one machine, as every shipped dataset does); a fold's
encoder sees only its training rows, so the held-out fold never leaks into the model.

Score columns (``--scores``), a model trained elsewhere (``--prefit``) and weighted rows (``--weight``)
take the partition-native fit instead: each fold's training rows are written to a scratch Parquet file
and fitted by :func:`calengine.fit.table.fit_table`, exactly as ``calengine fit`` would fit them, so
``cv --scores`` and ``cv --prefit`` are the out-of-fold evaluation of the calibration itself (a prefit
model is never refitted: the folds only split the rows that calibrate it; its file is opened and
checked once before any data is read, and every fold must calibrate the same bytes).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DataError, ParameterError

#: metrics reported with mean and spread (``n`` is reported as the rows per fold)
CV_METRICS = (
    "brier", "log_loss", "auc", "error_rate", "ece", "mce", "calibration_loss", "refinement_loss",
    "brier_mcb", "brier_dsc", "brier_unc", "confidence_q", "confidence_rho",
)


@dataclass
class CVResult:
    """Per-fold metrics and their summary: ``summary[kind][metric] = {"mean", "std", "min", "max"}``."""

    folds: int
    seed: int
    rows: int
    per_fold: list[dict[str, Any]] = field(default_factory=list)  # {"n", "calibrated": {...}, "raw": {...}}
    summary: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"folds": self.folds, "seed": self.seed, "rows": self.rows, "summary": self.summary,
                "per_fold": self.per_fold}


def fold_metrics(model, X, y: np.ndarray, sample_weight: np.ndarray | None = None) -> dict[str, Any]:
    """Metrics of ``model`` on one held-out fold, calibrated and raw (runs in a task).

    ``sample_weight`` (``--weight``): the held-out rows' frequency weights, which every metric reads as
    ``calengine evaluate --weight`` does (``n`` stays the fold's row count; the metrics' own ``n`` is the
    total weight)."""
    from ..metrics.measures import MetricAccumulator

    P, Q = model.both_proba_features(X)
    k = model.n_classes
    return {
        "n": int(len(y)),
        "calibrated": MetricAccumulator(k).add(y, P, sample_weight=sample_weight).result(),
        "raw": MetricAccumulator(k).add(y, Q, sample_weight=sample_weight).result(),
    }


def cross_validate(client, spec, config, folds: int = 5, plugins=None) -> CVResult:
    """Fit ``config`` on K-1 folds of the table ``spec`` names and score the held-out fold, K times.

    ``spec`` is a :class:`calengine.fit.table.TableSpec` (``calibration_data``, ``max_train_rows``
    and ``route`` do not apply: every fold fits in memory with cross-validated calibration); ``config``
    a :class:`calengine.fit.training.FitConfig`.  Outer folds are stratified and seeded from
    ``config.seed``; inner calibration folds (``config.cv``) are drawn within each training part.
    """
    from concurrent.futures import ThreadPoolExecutor

    from ..parquet.data import LabelSpace, read_table, resolve_parquet_files, stratified_folds
    from ..parquet.dataset import dataset_root
    from ..plan.features import FeatureEncoder, select_feature_columns
    from ..plugins.loading import get_plugins
    from ..parquet.storage import absolute
    from ..tasks.arrays import TrainingData
    from ..plan.options import check_job
    from .training import fit_model

    import numbers

    if isinstance(folds, bool) or not isinstance(folds, numbers.Integral) or folds < 2:
        raise ParameterError(f"folds must be an integer >= 2 (the outer folds), got {folds!r}", parameter="folds")
    if spec.calibration_data:
        raise ParameterError("cross-validation evaluates cross-validated calibration; calibration_data does not"
                             " apply", parameter="calibration_data")
    check_job(config, spec)
    plugins = plugins or get_plugins()
    prefit_sha = None
    if getattr(spec, "prefit", None):
        from .score_columns import prefit_spec

        learner, spec = prefit_spec(spec)  # checked, its feature columns known, before any data is read
        prefit_sha = learner.sha256
    files = resolve_parquet_files(spec.data)
    root = dataset_root(spec.data, [absolute(f) for f in files])
    from ..parquet.data import parquet_columns

    names = parquet_columns(files, root)
    weight = [spec.weight] if getattr(spec, "weight", None) else []
    if getattr(spec, "scores", None):
        feature_cols = list(spec.scores)
    else:
        feature_cols = select_feature_columns(names, spec.target, spec.features, list(spec.exclude or []) + weight)
    df = read_table(files, list(dict.fromkeys(feature_cols + [spec.target] + weight)), root)
    if weight:  # here, on the user's table: each fold's fit checks them again in its scratch file
        from ..reductions.column_stats import row_weights

        row_weights(df[spec.weight], spec.weight, f"the table '{spec.data}'")
    present = df[spec.target].notna().to_numpy()
    df = df.loc[present].reset_index(drop=True)
    labels = LabelSpace.from_series(df[spec.target], spec.target, spec.positive)
    y = labels.encode(df[spec.target])
    outer = stratified_folds(y, int(folds), config.seed, labels.classes, parameter="folds")

    by_table = bool(getattr(spec, "scores", None) or prefit_sha or weight)
    scratch = tempfile.TemporaryDirectory(prefix="calengine-cv-") if by_table else None

    def run_fold(i: int):
        train, test = outer[i]
        if by_table:
            # score columns and weighted rows: the fold's training rows go through fit_table, the fit
            # `calengine fit` runs (its checks, its weighted reductions, no learner for --scores)
            model = _fit_fold_table(client, spec, config, df.iloc[train], scratch.name, i, plugins)
            if prefit_sha and model.info.get("learner_params", {}).get("sha256") != prefit_sha:
                raise DataError(f"prefit {spec.prefit} changed while the folds were calibrated; run again",
                                parameter="prefit")
            X_test = model.encoder.transform(df.iloc[test])
            w_test = df[spec.weight].to_numpy(dtype=np.float64)[test] if weight else None
            return client.submit(fold_metrics, model, X_test, y[test], w_test, pure=False).result()
        encoder = FeatureEncoder(max_categories=spec.max_categories, text_columns=tuple(spec.text_columns))
        encoder.fit(df.iloc[train][feature_cols])
        data = TrainingData(X=encoder.transform(df.iloc[train]), y=y[train])
        model = fit_model(client, data, labels, encoder, config, plugins=plugins)  # K fits at once: no bars
        X_test = encoder.transform(df.iloc[test])
        return client.submit(fold_metrics, model, X_test, y[test], pure=False).result()

    try:
        with ThreadPoolExecutor(max_workers=int(folds), thread_name_prefix="calengine-cv") as pool:
            per_fold = list(pool.map(run_fold, range(int(folds))))
    finally:
        if scratch is not None:
            scratch.cleanup()
    if not per_fold:
        raise DataError("cross-validation produced no folds")
    return CVResult(folds=int(folds), seed=config.seed, rows=int(len(y)), per_fold=per_fold,
                    summary=summarise(per_fold))


def _fit_fold_table(client, spec, config, train_rows, scratch: str, i: int, plugins):
    """A fold's model fitted by :func:`calengine.fit.table.fit_table` on its training rows, written to
    ``scratch`` (the workers read them there: a scratch directory of the client's machine, so this
    path needs workers that share its file system, as every local cluster does)."""
    import os
    from dataclasses import replace

    from .table import fit_table

    from ..errors import CalengineError

    path = os.path.join(scratch, f"fold-{i}.parquet")
    train_rows.to_parquet(path, index=False)
    try:
        return fit_table(client, replace(spec, data=path), config, plugins=plugins)
    except CalengineError as exc:  # a message naming the scratch file names the user's table instead
        text = str(exc)
        if path in text and len(exc.args) >= 1 and exc.args[0] == text:
            exc.args = (text.replace(f"'{path}'", f"the training rows of outer fold {i} of '{spec.data}'")
                        .replace(path, f"the training rows of outer fold {i} of '{spec.data}'"),) + exc.args[1:]
        raise


def summarise(per_fold: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Mean, standard deviation (ddof=1), min and max of each metric over the folds (NaN-free folds
    only: rho is undefined for a fold without errors), the CORP Brier terms among them."""
    from ..metrics.corp import with_brier_rows

    out: dict[str, dict[str, dict[str, float]]] = {}
    for kind in ("calibrated", "raw"):
        out[kind] = {}
        for metric in CV_METRICS:
            values = np.array([with_brier_rows(f[kind]).get(metric, np.nan) for f in per_fold if f.get(kind)],
                              dtype=float)
            values = values[np.isfinite(values)]
            if not len(values):
                continue
            out[kind][metric] = {
                "mean": float(values.mean()),
                "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
                "min": float(values.min()),
                "max": float(values.max()),
            }
    return out


def format_cv(result: CVResult, label: str) -> str:
    """Metrics down; calibrated and raw mean ± standard deviation across (fits 80 columns)."""
    sizes = [f["n"] for f in result.per_fold]
    lines = [
        f"{label}: {result.folds}-fold cross-validation on {result.rows} rows"
        f" ({min(sizes)}-{max(sizes)} held out per fold, seed {result.seed})",
        f"{'metric':<17}  {'calibrated mean':>15}  {'± std':>8}  {'raw mean':>10}  {'± std':>8}",
    ]
    lines.append("-" * len(lines[-1]))
    for metric in CV_METRICS:
        cal = result.summary["calibrated"].get(metric)
        raw = result.summary["raw"].get(metric)
        if cal is None and raw is None:
            continue
        c = f"{cal['mean']:>15.4f}  {cal['std']:>8.4f}" if cal else f"{'n/a':>15}  {'':>8}"
        r = f"{raw['mean']:>10.4f}  {raw['std']:>8.4f}" if raw else f"{'n/a':>10}  {'':>8}"
        lines.append(f"{metric:<17}  {c}  {r}")
    return "\n".join(lines)


def cross_validate_parquet(data, target: str, *, folds: int = 5, cluster=None, workers=None, **options) -> CVResult:
    """``calengine cv`` from Python (``calengine.cross_validate_table``): ``options`` are the fields of
    :class:`~calengine.fit.table.TableSpec` and :class:`~calengine.fit.training.FitConfig`, as for
    :func:`calengine.fit_table`."""
    from dataclasses import fields

    from ..runtime.client import dask_client
    from .table import TableSpec
    from .training import FitConfig

    spec_fields = {f.name for f in fields(TableSpec)} - {"calibration_data", "max_train_rows", "route", "fragment_rows"}
    config_fields = {f.name for f in fields(FitConfig)}
    unknown = sorted(set(options) - spec_fields - config_fields)
    if unknown:
        raise ParameterError(
            f"cross_validate_table() got unknown option(s) {', '.join(unknown)};"
            f" valid: {', '.join(sorted(spec_fields | config_fields))}"
        )
    spec = TableSpec(data=str(data), target=target, **{k: v for k, v in options.items() if k in spec_fields})
    config = FitConfig(**{k: v for k, v in options.items() if k in config_fields})
    with dask_client(cluster, workers=workers) as client:
        return cross_validate(client, spec, config, folds=folds)
