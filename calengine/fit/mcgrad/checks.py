"""``calengine fit --method mcgrad``'s ``--method-param``s and the learner that trains its rounds, checked
before any data is read (:func:`calengine.fit.training.prepare_fit` and :mod:`calengine.fit.mcgrad.table`
call :func:`check_mcgrad`); what MCGrad does not serve is refused with the job's other options
(:func:`calengine.plan.options.check_job`).  Apart from the fit so that the fit's configuration check
imports neither the segment fits nor the cluster code."""

from __future__ import annotations

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
    """``(spec.by, params)``: MCGrad's parameters (:class:`~calengine.methods.mcgrad.MCGradParams`), and the
    learner that trains its rounds installed; one line for the first problem, before any data is read.
    What MCGrad does not serve is refused with the job's other options (:func:`calengine.plan.options.check_job`)."""
    params = mcgrad_params(config.method_params)
    learner = booster_learner(params)
    if learner not in plugins.classes["learners"]:
        raise ParameterError(f"method='mcgrad' trains its rounds with the '{learner}' learner, which is not"
                             f" installed: pip install {_PLUGIN[learner]} in the repository)", parameter="method")
    return spec.by, params
