"""What ``calengine fit --method mcgrad`` refuses, and its ``--method-param``s, checked before any data
is read (:func:`calengine.fit.training.prepare_fit` and :mod:`calengine.fit.mcgrad.table` call
:func:`check_mcgrad`).  Apart from the fit so that the fit's configuration check imports neither the
segment fits nor the cluster code."""

from __future__ import annotations

from dataclasses import replace

from ...errors import ParameterError

__all__ = ["BOOSTER_LEARNER", "booster_learner", "check_mcgrad", "mcgrad_params"]

#: the learner that trains every round across the workers by default (plugin calengine-xgboost)
BOOSTER_LEARNER = "xgboost_dask"
#: the plugin that provides each rounds library's cluster learner
_PLUGIN = {"xgboost_dask": "calengine-xgboost (plugins/xgboost", "lightgbm_dask": "calengine-lightgbm (plugins/lightgbm"}


def booster_learner(params) -> str:
    """The cluster learner that trains the rounds of ``params.booster``."""
    from ...methods.mcgrad_boosters import library

    return library(params.booster).learner


def mcgrad_params(method_params: dict):
    """``--method-param``s as :class:`~calengine.methods.mcgrad.MCGradParams` (unknown names: one line)."""
    from dataclasses import fields

    from ...methods.mcgrad import MCGradParams

    known = [f.name for f in fields(MCGradParams)]
    unknown = [k for k in method_params if k not in known]
    if unknown:
        raise ParameterError(f"mcgrad has no parameter '{unknown[0]}'; its method_params names are {', '.join(known)}",
                             parameter="method_params")
    values = dict(method_params)
    for k in ("learning_rate", "min_child_weight", "reg_lambda", "gamma", "holdout"):  # 1 means 1.0
        if isinstance(values.get(k), int) and not isinstance(values[k], bool):
            values[k] = float(values[k])
    return MCGradParams(**values)


def check_mcgrad(spec, config, plugins):
    """MCGrad's refusals and its parameters (:class:`~calengine.methods.mcgrad.MCGradParams`), checked before
    any data is read: one line for the first problem."""
    from ...metrics.segments import check_segment_options

    by = check_segment_options(spec.by, spec.max_segments) if spec.by else ()
    _refuse(replace(spec, by=by), config)
    params = mcgrad_params(config.method_params)
    learner = booster_learner(params)
    if learner not in plugins.classes["learners"]:
        raise ParameterError(f"method='mcgrad' trains its rounds with the '{learner}' learner, which is not"
                             f" installed: pip install {_PLUGIN[learner]} in the repository)", parameter="method")
    return by, params


def _refuse(spec, config) -> None:
    """One line for what MCGrad does not serve, before any work."""
    if not spec.by:
        raise ParameterError("method='mcgrad' multicalibrates over segments; name them with by (a column or a list of columns)"
                             " (for one global map choose method isotonic, sigmoid, ...)", parameter=("method", "by"))
    if spec.shrinkage is not None:
        raise ParameterError("shrinkage blends segment-wise calibrators; method='mcgrad' has none: drop shrinkage",
                             parameter=("shrinkage", "method"))
    if config.mode == "refit":
        raise ParameterError("method='mcgrad' fits its rounds on each fold member's held-out probabilities, and"
                             " mode='refit' keeps no fold members: use mode='ensemble' (the default)",
                             parameter=("method", "mode"))
    if config.multiclass or config.combine or (not (spec.scores or spec.prefit) and _several(config.learner)):
        raise ParameterError("method='mcgrad' calibrates one learner's two-class probability; drop multiclass /"
                             " combine / the extra learners", parameter=("method", "multiclass", "combine"))
    if config.negative_sampling is not None or config.class_sampling:
        raise ParameterError("method='mcgrad' does not correct class-sampled data; drop negative_sampling /"
                             " class_sampling", parameter=("method", "negative_sampling", "class_sampling"))
    if spec.scores and spec.score_kind != "proba":
        raise ParameterError(f"method='mcgrad' reads probability scores; score_kind={spec.score_kind!r} columns"
                             " are not: give probabilities (score_kind='proba')", parameter=("method", "score_kind"))
    clash = [c for c in spec.by if c in {spec.target, spec.weight} - {None} or c in (spec.scores or ())]
    if clash:
        raise ParameterError(f"by column '{clash[0]}' is the target, the weight or a score column; segment over"
                             " another column", parameter="by")


def _several(learner) -> bool:
    """Several base learners (``"a,b"`` or a list): what ``--combine`` fits."""
    if isinstance(learner, str):
        return len([p for p in learner.split(",") if p.strip()]) > 1
    return isinstance(learner, (list, tuple)) and len(learner) > 1
