"""From a table (or arrays) and a configuration to a :class:`CalibratedModel`.

This is the story of ``calengine fit`` in one module: resolve plugins by name, encode features, assign
folds, hand the plan to the engine (or to the Probing/bagging drivers), and assemble the model with the
combiner that turns per-column probabilities into classes.  The CLI and the Python estimator both call
:func:`fit_model`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..plugins import registry
from ..parquet.data import LabelSpace, stratified_folds
# FitConfig, ENGINE_METHODS and split_learners live with the other checks of a job's options; importable here as before
from ..plan.options import ENGINE_METHODS, FitConfig, check_cv, check_seed, split_learners  # noqa: F401
from .arrays import CalibrationPlan, fit_code_members, fit_members
from ..errors import ParameterError
from ..model.calibrated import CalibratedModel, one_vs_all_matrix
from ..plugins.loading import PluginSet, get_plugins
from ..runtime.context import RunContext
from ..runtime.progress import Progress
from ..tasks.arrays import TrainingData

def explicit_splits(cv, X, y: np.ndarray, split_params: dict | None = None) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """``cv`` as a list of (train rows, held-out rows), or None when it is a number of folds.

    Accepts what scikit-learn's ``cv`` parameters accept: an int (calengine's own seeded, stratified
    folds of the rows as given; ``calengine.table_splits`` gives ``calengine fit --cv``'s), a splitter object with ``split(X, y, groups)``
    (``StratifiedKFold``, ``GroupKFold``, ``LeaveOneGroupOut``, ``ShuffleSplit``, ...), or an iterable of (train, test)
    index arrays.  ``split_params`` (``{"groups": g}``, or what metadata routing sent) are passed to
    ``split``; a splitter that requests groups and gets none, groups of the wrong length, and any
    ``ValueError`` of the splitter (more folds than groups) are one-line :class:`DataError` /
    :class:`ParameterError`.  Every pair must hold valid row indices and non-empty train and held-out parts.
    """
    import numbers

    if isinstance(cv, numbers.Integral) and not isinstance(cv, bool):
        check_cv(cv)
        return None
    n = len(y)
    if isinstance(cv, (str, bytes, bool)) or cv is None or not (hasattr(cv, "split") or hasattr(cv, "__iter__")):
        raise ParameterError(
            f"cv must be a number of folds >= 2, a splitter such as StratifiedKFold(5), or a list of"
            f" (train, test) index pairs; got {cv!r}"
        )
    pairs = _split(cv, X, y, dict(split_params or {})) if hasattr(cv, "split") else list(cv)
    out = []
    for i, pair in enumerate(pairs):
        try:
            train, test = pair
            train = np.asarray(train).ravel()
            test = np.asarray(test).ravel()
        except (TypeError, ValueError):
            raise ParameterError(f"cv split {i} is not a (train, test) pair of index arrays") from None
        if train.dtype == bool or test.dtype == bool:
            train, test = np.flatnonzero(train), np.flatnonzero(test)
        if not (np.issubdtype(train.dtype, np.integer) and np.issubdtype(test.dtype, np.integer)):
            raise ParameterError(f"cv split {i} holds non-integer row indices; pass integer index arrays")
        if len(train) == 0 or len(test) == 0:
            raise ParameterError(f"cv split {i} has an empty train or test part; every split needs both")
        if min(train.min(), test.min()) < 0 or max(train.max(), test.max()) >= n:
            raise ParameterError(f"cv split {i} holds row indices outside 0..{n - 1}; the splits must index X's rows")
        out.append((train.astype(np.int64), test.astype(np.int64)))
    if not out:
        raise ParameterError("cv gave no splits; pass a splitter or at least one (train, test) pair")
    return out


def split_requests(cv) -> list[str]:
    """The metadata ``cv.split`` requests under scikit-learn's metadata routing: ``["groups"]`` for
    the group splitters (they request it whether or not routing is enabled), ``[]`` for the others."""
    from sklearn.utils.metadata_routing import get_routing_for_object

    split = getattr(get_routing_for_object(cv), "split", None)
    requests = getattr(split, "requests", None) or {}
    return sorted(name for name, alias in requests.items() if alias is True or isinstance(alias, str))


def cv_name(cv) -> str:
    """``cv`` as a message names it, on one line (``cv=GroupKFold(n_splits=5, ...)``, ``cv=5``, or the
    number of splits of a list)."""
    if hasattr(cv, "split") or not hasattr(cv, "__len__"):
        return "cv=" + " ".join(repr(cv).split())
    return f"cv (a list of {len(cv)} splits)"


def _split(cv, X, y, params: dict) -> list:
    """``list(cv.split(X, y, **params))`` with the splitter's complaints as one typed line each."""
    from ..errors import DataError

    name = cv_name(cv)
    if "groups" in split_requests(cv) and params.get("groups") is None:
        raise DataError(
            f"{name} splits by groups but fit got none; pass one group label per row: fit(X, y, groups=g);"
            " cross_val_score(..., params={'groups': g}); Pipeline.fit(X, y, <step>__groups=g), or groups=g"
            " with sklearn.set_config(enable_metadata_routing=True)"
        )
    groups = params.get("groups")
    if groups is not None and len(groups) != len(y):
        raise DataError(f"groups has {len(groups)} labels but X has {len(y)} rows; pass one group label per row")
    try:
        return list(cv.split(X, y, **params))
    except TypeError as exc:
        raise ParameterError(f"{name} could not split the rows with {sorted(params)} ({exc}); pass a splitter whose"
                             f" split(X, y, groups) takes them") from exc
    except ValueError as exc:
        raise ParameterError(f"{name} could not split the rows: {exc}") from exc


def folds_of_splits(splits, n_rows: int) -> np.ndarray | None:
    """The fold number of each row when ``splits`` partition the rows (every row held out exactly once,
    trained on in every other split), else None (the splits are then used pair by pair)."""
    folds = np.full(n_rows, -1, dtype=np.int32)
    for i, (train, test) in enumerate(splits):
        if np.any(folds[test] != -1):
            return None
        folds[test] = i
    if np.any(folds == -1):
        return None
    for i, (train, test) in enumerate(splits):
        if len(train) + len(test) != n_rows or len(np.unique(train)) != len(train) or np.any(folds[train] == i):
            return None
    return folds


def resolve_learner(config: FitConfig, plugins: PluginSet):
    """The learner instance for ``config.learner``: a registered name, a scikit-learn import path, a
    calengine :class:`~calengine.base.Learner`, or a scikit-learn classifier instance (wrapped)."""
    from ..base import Learner

    learner = config.learner
    if isinstance(learner, str):
        made = registry.make_learner(learner, config.learner_params, plugins)
        if getattr(made, "prefit", False):
            # score_columns (and any learner that arrives fitted) is what --scores builds, not a
            # learner one can fit on feature columns
            raise ParameterError(
                f"learner '{learner}' is not fitted on features; to calibrate score columns give scores,"
                " or prefit for a saved model (calengine.calibrate_scores)", parameter=("scores", "prefit")
            )
        return made
    if not isinstance(learner, Learner):
        if not (hasattr(learner, "fit") and (hasattr(learner, "predict_proba") or hasattr(learner, "decision_function"))):
            raise ParameterError(
                "learner must be a registered name, a scikit-learn import path, a calengine Learner or a"
                f" scikit-learn classifier; got {type(learner).__name__}"
            )
        from ..adapters.wrapped_estimator import EstimatorLearner

        learner = EstimatorLearner(estimator=learner)
    return learner.set_params(**config.learner_params) if config.learner_params else learner


def fit_model(
    client,
    data: TrainingData,
    labels: LabelSpace,
    encoder,
    config: FitConfig,
    cal_data: TrainingData | None = None,
    progress: Progress | None = None,
    plugins: PluginSet | None = None,
) -> CalibratedModel:
    """Fit every member on the cluster behind ``client`` and assemble the model."""
    plugins = plugins or get_plugins()
    learners = split_learners(config.learner)
    if len(learners) > 1 or config.combine:
        return _fit_combined(RunContext(client, progress, plugins=plugins), data, labels, encoder, config, learners,
                             cal_data)
    learner = resolve_learner(config, plugins)
    from ..base import reject_sparse

    reject_sparse(learner, data.X)  # one line naming the fix, not a crash inside the learner
    k = labels.n_classes
    info = model_info(learner, config, cal_data is not None)
    if config.method in ENGINE_METHODS:
        from .probing import fit_reduction_members

        members, code_matrix, combiner, counts = fit_reduction_members(
            client, data, labels, learner, config, plugins, progress
        )
    else:
        calibrator = registry.make("calibrators", config.method, config.method_params, plugins)
        uncalibrated = config.method == "none"
        if not uncalibrated and cal_data is None and data.folds is None and data.splits is None:
            data.folds = fold_assignment(data.y, config.cv, config.seed, labels.classes)
        if data.splits is not None and config.mode == "refit":
            raise ParameterError(
                "mode 'refit' needs splits whose held-out parts cover every row exactly once (each row"
                " gets one out-of-fold score); use such a splitter (KFold, StratifiedKFold, ...) or mode 'ensemble'"
            )
        plan = CalibrationPlan(
            learner=learner,
            calibrator=calibrator,
            mode=config.mode,
            cv=config.cv,
            seed=config.seed,
            uncalibrated=uncalibrated,
        )
        from .calibrators import refuse_code_matrix

        refuse_code_matrix(calibrator, config.multiclass, k)
        if config.multiclass and k > 2:
            code_matrix, combiner = resolve_multiclass(
                config.multiclass, k, config.seed, plugins, config.combiner_params
            )
            if cal_data is not None or uncalibrated:
                raise ParameterError(
                    "multiclass with a code matrix needs cross-validated calibration; drop"
                    " calibration_data / method='none', or drop multiclass",
                    parameter=("multiclass", "calibration_data", "method"),
                )
            members = fit_code_members(client, data, plan, code_matrix, progress=progress)
            counts = (code_matrix[data.y] != 0).sum(axis=0).astype(np.int64)
            info["multiclass"] = config.multiclass
        else:
            members = fit_members(client, data, plan, cal_data=cal_data, progress=progress)
            code_matrix = one_vs_all_matrix(k) if k > 2 else np.array([[-1], [1]], dtype=np.int8)
            combiner = registry.make("combiners", "normalize", {}, plugins) if k > 2 else None
            counts = np.full(code_matrix.shape[1], len(data.y), dtype=np.int64)
    return CalibratedModel(
        encoder=encoder,
        labels=labels,
        members=members,
        code_matrix=code_matrix,
        combiner=combiner,
        column_counts=counts,
        info=info,
    )


def model_info(learner, config: FitConfig, calibration_data: bool) -> dict[str, Any]:
    """What the manifest records of a fit's configuration (both fit paths)."""
    return {
        "learner": registry.learner_label(learner),
        "learner_params": learner.get_params(deep=False),
        "method": config.method,
        "method_params": dict(config.method_params),
        "mode": config.mode,
        "cv": config.cv,
        "seed": config.seed,
        "calibration_data": calibration_data,
    }


def _params_for(learner, index: int, params: dict[str, Any], plugins: PluginSet) -> dict[str, Any]:
    """Parameters for base learner ``index``: ``NAME.key`` (or ``INDEX.key``) targets one learner,
    a bare ``key`` every learner that has it."""
    if not isinstance(learner, str):
        return {}
    valid = set(registry.lookup("learners", learner if "." not in learner else registry.SKLEARN_PATH_LEARNER,
                                plugins)._get_param_names())
    out = {}
    for key, value in params.items():
        prefix, dot, name = key.rpartition(".")
        if dot:
            if prefix in (learner, str(index)):
                out[name] = value
        elif key in valid:
            out[key] = value
    return out


def prepare_fit(config: FitConfig, spec, plugins: PluginSet | None = None):
    """``(plugins, (distributions, modules))`` for fitting ``config`` on the table of ``spec`` (a
    :class:`~calengine.fit.table.TableSpec`): the rules between the two records checked
    (:func:`calengine.plan.options.check_job`; each record checked itself when it was made) and every
    learner, calibrator and parameter name resolved, so a typo fails before any data is read or a
    cluster starts; the requirements are what every worker must have
    (:func:`calengine.plugins.loading.plugin_requirements`)."""
    from dataclasses import replace

    from ..plan.options import check_job
    from ..plugins.loading import plugin_requirements

    check_job(config, spec)
    plugins = plugins or get_plugins()
    if getattr(spec, "scores", None):
        from ..adapters.score_columns import ScoreColumns

        learners = [ScoreColumns()]  # its module must import on the workers
    elif getattr(spec, "prefit", None):
        from ..adapters.prefit import requirement_learners

        learners = requirement_learners(spec.prefit)  # the file itself is read by fit_table
    else:
        base = split_learners(config.learner)
        learners = [
            resolve_learner(replace(config, learner=lr, learner_params=_params_for(lr, i, config.learner_params, plugins)
                                    if len(base) > 1 else config.learner_params), plugins)
            for i, lr in enumerate(base)
        ]
    calibrator = None
    if config.method == "mcgrad":  # MCGrad's refusals and parameters, before any data is read
        from .mcgrad.checks import booster_learner, check_mcgrad

        _, mc_params = check_mcgrad(spec, config, plugins)
        calibrator = registry.make("calibrators", "none", {}, plugins)
        learners.append(registry.make("learners", booster_learner(mc_params), {}, plugins))  # it trains on every worker
    elif config.method not in ENGINE_METHODS:
        calibrator = registry.make("calibrators", config.method, config.method_params, plugins)
    code, sep, comb = (config.multiclass or "").rpartition(":")
    if sep and comb and code.lower() != "file":  # the combiner's parameters, checked before any data is read
        registry.make("combiners", comb, config.combiner_params, plugins)
    return plugins, plugin_requirements([*learners, calibrator], plugins)


def _fit_combined(run, data, labels, encoder, config, learners, cal_data) -> CalibratedModel:
    """Fit each base learner with the same folds and method, then combine by ``config.combine``."""
    configs = combined_configs(config, learners, run.plugins)
    models = [fit_model(run.client, data, labels, encoder, sub, cal_data, run.progress, run.plugins) for sub in configs]
    return combined_model(models, config.combine)


def combined_configs(config: FitConfig, learners: list, plugins: PluginSet) -> list[FitConfig]:
    """One configuration per base learner of a ``--combine`` fit, each with its own parameters
    (``NAME.key`` or ``INDEX.key`` for one learner, a bare ``key`` for every learner that has it)."""
    from dataclasses import replace

    from ..methods.combining import check_rule

    check_rule(config.combine or "mean")
    if len(learners) < 2:
        raise ParameterError("combine needs at least two learners, e.g. learner='nearest_mean,fisher_lda,knn'",
                             parameter=("combine", "learner"))
    params = dict(config.learner_params)
    for key in params:
        if not any(_params_for(lr, i, {key: None}, plugins) for i, lr in enumerate(learners)):
            raise ParameterError(
                f"learner_params {key} matches none of the learners {', '.join(map(str, learners))};"
                " prefix it with the learner name (e.g. knn.n_neighbors=5)",
                parameter="learner_params",
            )
    return [
        replace(config, learner=lr, learner_params=_params_for(lr, i, params, plugins), combine=None)
        for i, lr in enumerate(learners)
    ]


def combined_model(models: list[CalibratedModel], combine: str | None) -> CalibratedModel:
    """The base learners' models as one, their posteriors combined by ``combine`` (Duin & Tax)."""
    from ..methods.combining import check_rule

    rule = check_rule(combine or "mean")
    first = models[0]
    info = dict(first.info)
    info["learner"] = ",".join(m.info["learner"] for m in models)
    info["learner_params"] = {str(i): m.info["learner_params"] for i, m in enumerate(models)}
    info["combine"] = rule
    if "x_training" in info:  # partition-native fits: each base learner took its own route
        info["x_training"] = {**info["x_training"], "route": ",".join(m.info["x_training"]["route"] for m in models)}
    return CalibratedModel(
        encoder=first.encoder,
        labels=first.labels,
        members=[mem for m in models for mem in m.members],
        code_matrix=first.code_matrix,
        combiner=first.combiner,
        column_counts=first.column_counts,
        info=info,
        member_groups=[i for i, m in enumerate(models) for _ in m.members],
        combine_rule=rule,
    )


def resolve_multiclass(spec: str, k: int, seed: int, plugins: PluginSet, params: dict[str, Any] | None = None):
    """(code matrix, combiner) for ``CODE:COMBINER``; the combiner checks it can use the matrix.

    ``CODE`` alone picks a sensible combiner: normalize for one_vs_all, coupling for the others.
    """
    from ..methods.codematrix import make_matrix

    code, sep, comb = spec.rpartition(":")
    if not sep or code.lower() == "file":
        code, comb = spec, ""
    M = make_matrix(code, k, seed=seed)
    if not comb:
        from ..methods.codematrix import is_one_vs_all

        comb = "normalize" if is_one_vs_all(M) else "coupling"
    combiner = registry.make("combiners", comb, params or {}, plugins)
    from ..plugins.calls import plugin_errors

    with plugin_errors(combiner, "combine"):  # a CodeMatrixError (its refusal) passes unchanged
        combiner.check_matrix(M)
    probe_combiner(combiner, M, params or {})
    return M, combiner


def probe_combiner(combiner, M: np.ndarray, params: dict[str, Any]) -> None:
    """Combine two rows of consistent column estimates now, at fit time.

    A combiner uses its parameters only when it combines, which is when a model is scored: a value it
    cannot use (``--combiner-param tol=abc`` for a plugin without ``check_params``) used to give a model
    that ``fit`` published and ``score`` then called damaged.  Two rows cost nothing next to a fit; a
    failure is one line naming the combiner and the parameters given, before any data is read.
    """
    from ..errors import CalengineError
    from ..plugins.calls import describe, plugin_errors

    k = M.shape[0]
    P = np.vstack([np.full(k, 1.0 / k), np.arange(1, k + 1) / (k * (k + 1) / 2)])
    R = (P @ (M == 1)) / (P @ (M != 0))
    try:
        with plugin_errors(combiner, "combine"):
            out = np.asarray(combiner.combine(R, M, np.ones(M.shape[1], dtype=np.int64)), dtype=float)
    except CalengineError as exc:
        if not params:
            raise
        given = ", ".join(f"{key}={value!r}" for key, value in params.items())
        raise ParameterError(
            f"{describe(combiner)} cannot combine with combiner_params {given}: {exc}", parameter="combiner_params"
        ) from None
    if out.shape != P.shape or not np.all(np.isfinite(out)):
        from ..errors import PluginError
        from ..plugins.calls import distribution_of

        raise PluginError(
            f"{describe(combiner)} (plugin code from {distribution_of(type(combiner))}) returned"
            f" {out.shape} {'non-finite ' if out.shape == P.shape else ''}probabilities for 2 rows of {k}"
            " classes; try another combiner, or report it to the plugin's authors"
        )


def fold_assignment(y: np.ndarray, cv: int, seed: int, classes=None) -> np.ndarray:
    """The fold number of every row (stratified, shuffled from ``seed``)."""
    folds = np.empty(len(y), dtype=np.int32)
    for i, (_, held) in enumerate(stratified_folds(y, cv, seed, classes)):
        folds[held] = i
    return folds
