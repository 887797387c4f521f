"""Which metrics ``evaluate`` computes: ``calengine evaluate --metrics`` and ``evaluate_models(metrics=...)``
(issue 43 §4).

Why: a user who wants the Brier score, the log loss, the AUC and two ECEs of 10M rows should not wait
for the Newton fits of the calibration slope and the ICI, the cumulative tests, the Hosmer-Lemeshow
groups, the bootstrap of the debiased L2 error, the drift check, the error-reject curve and the raw
learner's whole column of the same.  A selection names the keys ``evaluate --json`` prints; only the
work those keys need is done (:func:`needs`), the rest is skipped, not computed and dropped.  A key
selected is the same bits as the same key of the full run (each metric is a sum of exact integer or
fixed-point pieces, which do not depend on what else is summed beside them).

The names (:data:`METRIC_NAMES`) are the metric keys of ``evaluate --json``, one name one key (a
companion such as ``ks_pvalue`` or ``smece_sigma`` is a key of its own, named when wanted), and three
sections of the output:

* ``raw``: the raw learner's metrics beside the calibrated ones, the same selection of keys;
* ``drift``: the drift check of the calibrated probabilities;
* ``error_reject``: the error-reject curve and its text table.

``n`` and ``n_classes`` (and ``model``) are always printed.  ``None`` (the default) is everything, and
the output is then the bytes it always was.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ParameterError
from ..plan.options import Constraint

__all__ = ["CORE_KEYS", "SUITE_KEYS", "SECTIONS", "METRIC_NAMES", "MAX_METRIC_NAMES", "MetricNames", "check_metrics",
           "select_keys", "needs"]

#: keys of :meth:`~calengine.metrics.measures.MetricAccumulator.result` (one pass with prefix sums)
CORE_KEYS = ("brier", "log_loss", "log_loss_bits", "auc", "error_rate", "ece", "mce", "calibration_loss",
             "refinement_loss", "confidence_q", "confidence_rho", "corp_brier", "corp_log_loss")
#: keys of the calibration metric suite (:func:`calengine.metrics.ranged.suite.calibration_suite`)
SUITE_KEYS = ("smece", "smece_sigma", "ks", "ks_pvalue", "kuiper", "kuiper_pvalue", "ecce_pvalue", "hosmer_lemeshow",
              "hosmer_lemeshow_df", "hosmer_lemeshow_pvalue", "calibration_intercept", "calibration_slope", "ici",
              "ece_equal_mass", "ece_classwise", "l2_ce_debiased")
#: sections of the output a selection may name besides metric keys
SECTIONS = ("raw", "drift", "error_reject")
#: keys every selection prints (naming them is allowed, and changes nothing)
ALWAYS = ("n", "n_classes")
#: every name ``metrics`` accepts, in the order of ``evaluate --json``
METRIC_NAMES = ALWAYS + CORE_KEYS + SUITE_KEYS + SECTIONS
#: the most names one selection may list (duplicates included): the known names a few times over
MAX_METRIC_NAMES = 4 * len(METRIC_NAMES)

#: what each suite key needs of the suite's passes (see :func:`needs`)
_SUITE_NEEDS = {
    "smece": {"smece"}, "smece_sigma": {"smece"},
    "ks": {"ks"}, "ks_pvalue": {"ks"}, "kuiper": {"ks"}, "kuiper_pvalue": {"ks"}, "ecce_pvalue": {"ks"},
    "hosmer_lemeshow": {"hl"}, "hosmer_lemeshow_df": {"hl"}, "hosmer_lemeshow_pvalue": {"hl"},
    "calibration_intercept": {"cox"}, "calibration_slope": {"cox"}, "ici": {"cox", "ici"},
    "ece_equal_mass": {"equal_mass"}, "ece_classwise": {"classwise"}, "l2_ce_debiased": {"l2"},
}


@dataclass(frozen=True)
class MetricNames(Constraint):
    """A selection of :data:`METRIC_NAMES`: a list, or one string of names separated by commas; at most
    :data:`MAX_METRIC_NAMES` names, a name given twice counted once; normalised to a frozenset (None:
    every metric)."""

    optional: bool = True

    def check(self, value, name):
        if value is None:
            return None
        if isinstance(value, str):
            names = [c.strip() for c in value.split(",")]
        elif isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(c, str) for c in value):
            names = [c.strip() for c in value]
        else:
            names = None
        if names is None or not names or any(not c for c in names):
            raise ParameterError(f"{name} takes metric names (a list, or separated by commas), got {value!r};"
                                 f" e.g. {name}='brier,log_loss,auc'", parameter=name)
        if len(names) > MAX_METRIC_NAMES:
            raise ParameterError(f"{name} lists {len(names)} names, more than {MAX_METRIC_NAMES}; name each metric"
                                 " once", parameter=name)
        unknown = [c for c in dict.fromkeys(names) if c not in METRIC_NAMES]
        if unknown:
            raise ParameterError(f"{name} names unknown metric '{unknown[0]}'; known: {', '.join(METRIC_NAMES)}",
                                 parameter=name)
        return frozenset(names)

    def words(self):
        return f"metric names (a list, or one string separated by commas) from: {', '.join(METRIC_NAMES)}"


def check_metrics(metrics, name: str = "metrics") -> frozenset | None:
    """``metrics`` as a frozenset of :data:`METRIC_NAMES` (None: everything), or a one-line
    :class:`~calengine.errors.ParameterError` naming ``name``."""
    return MetricNames().check(metrics, name)


def select_keys(result: dict, metrics: frozenset | None) -> dict:
    """``result`` (a metrics dict) with only the selected keys and :data:`ALWAYS`, in its own order."""
    if metrics is None:
        return result
    return {k: v for k, v in result.items() if k in metrics or k in ALWAYS}


def needs(metrics: frozenset | None) -> frozenset | None:
    """The suite's parts the selection needs (None: all): ``smece`` (the grid histograms), ``ks`` (the
    cumulative path), ``hl`` (the risk deciles), ``cox`` (the logistic fit), ``ici`` (its knots and
    spline), ``equal_mass``, ``classwise``, ``l2``."""
    if metrics is None:
        return None
    return frozenset(part for key in metrics for part in _SUITE_NEEDS.get(key, ()))
