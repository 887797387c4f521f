"""Every key of ``evaluate --json``, grouped and explained: what the report's metric table shows.

The table is derived from the JSON object of the same evaluation (:func:`flat_keys` of
:meth:`calengine.metrics.evaluation.Evaluation.to_json`'s payload), never from a list typed here, so a key
added to the JSON appears in the report the day it is added; :data:`CATALOGUE` only says which group it
belongs to and what it means.  A key it does not know still appears, under "Other" with no explanation,
and ``tests/metrics/report/test_catalogue.py`` fails until it is explained.

An entry explains a key, or with a trailing ``.*`` every key below a prefix (the option blocks, whose
inner keys include class names from the data).  Each line says what the number is, its range and which
way is better; the definitions, formulas and references are on the documentation page
:data:`DOCS_PAGE` names.
"""

from __future__ import annotations

from typing import Any

#: where each key is defined, with its formula and reference (the report is a file that may travel
#: alone, and the project has no documentation URL yet, so the page is named in words)
DOCS_PAGE = "'Measuring calibration' in calengine's documentation (docs/guide/measuring-calibration.md)"

#: (group id, heading, one line on the group), in the order the table shows them
GROUPS = (
    ("size", "Size", "what was evaluated"),
    ("scores", "Accuracy and proper scores", "one number for the whole forecast; lower is better"),
    ("decompositions", "Score decompositions",
     "a proper score split into miscalibration, discrimination and uncertainty"),
    ("binned", "Binned calibration errors", "gaps between predicted and observed frequency over bins; 0 is perfect"),
    ("smooth", "Smooth (kernel) measures", "bin-free calibration errors; 0 is perfect"),
    ("tests", "Statistical tests of calibration",
     "null hypothesis: the probabilities are calibrated; a small p-value rejects it"),
    ("slope", "Calibration slope and intercept", "Cox's logistic recalibration line; slope 1, intercept 0 is perfect"),
    ("ranking", "Ranking", "how well the probabilities order the rows, whatever their calibration"),
    ("confidence", "Confidence and rejection", "how useful the confidence is for abstaining"),
    ("drift", "Drift check", "is this table still what the model was calibrated for?"),
    ("decisions", "Decisions", "evaluate --cost-matrix: cost or profit of the decisions"),
    ("segments", "Segments", "evaluate --by: calibration of every segment"),
    ("prior_shift", "Prior shift", "evaluate --prior-shift: the class priors the probabilities imply"),
    ("band", "Calibration-map band", "evaluate --bootstrap: the bootstrap band of the calibration map"),
    ("model", "Model", "what was evaluated"),
    ("other", "Other", "keys this report does not explain yet"),
)

_P = "p-value in [0, 1]; small rejects calibration"

#: key (or ``prefix.*``) -> (group id, explanation: what it is; range; which way is better)
CATALOGUE: dict[str, tuple[str, str]] = {
    "n": ("size", "rows evaluated (with --weight: their total weight)"),
    "n_classes": ("size", "number of classes"),
    "raw": ("size", "the same keys for the uncalibrated learner: the 'raw learner' column"),
    "brier": ("scores", "Brier score: mean squared error of the probabilities; [0, 2] (binary [0, 1]); lower is better"),
    "log_loss": ("scores", "mean negative log-probability of the true class, in nats; [0, ∞); lower is better"),
    "log_loss_bits": ("scores", "log_loss in bits; [0, ∞); lower is better"),
    "error_rate": ("scores", "share of rows whose most probable class is wrong; [0, 1]; lower is better"),
    "calibration_loss": ("decompositions", "part of brier due to miscalibration over groups of equal forecast"
                         " (Flach & Matsubara; equals brier for continuous scores: read corp_brier.mcb then);"
                         " [0, brier]; lower is better"),
    "refinement_loss": ("decompositions", "part of brier due to limited separation; calibration_loss +"
                        " refinement_loss = brier; lower is better"),
    "corp_brier.score": ("decompositions", "CORP (Dimitriadis et al. 2021): the Brier score decomposed; = mcb - dsc + unc"),
    "corp_brier.mcb": ("decompositions", "CORP miscalibration: Brier score minus that of the isotonic (PAV)"
                       " recalibration; ≥ 0; lower is better"),
    "corp_brier.dsc": ("decompositions", "CORP discrimination: Brier score of the base rate minus that of the"
                       " recalibration; ≥ 0; higher is better"),
    "corp_brier.unc": ("decompositions", "CORP uncertainty: Brier score of the base rate; a property of the data"),
    "corp_brier.per_class": ("decompositions", "multiclass: the one-vs-rest terms of each class, summed above"),
    "corp_log_loss.*": ("decompositions", "the same CORP decomposition of the log loss (score = mcb - dsc + unc;"
                        " mcb lower is better, dsc higher is better)"),
    "ece": ("binned", "expected calibration error of the top-label confidence, 15 equal-width bins; [0, 1];"
            " lower is better"),
    "mce": ("binned", "largest calibration gap over those 15 bins; [0, 1]; lower is better"),
    "ece_equal_mass": ("binned", "ECE over 15 equal-mass bins of the top-label confidence; [0, 1]; lower is better"),
    "ece_classwise": ("binned", "mean over the classes of the one-vs-rest ECE (15 equal-width bins); [0, 1];"
                      " lower is better"),
    "l2_ce_debiased.value": ("binned", "Kumar, Liang & Ma's debiased L2 calibration error (15 equal-mass bins);"
                             " [0, 1]; lower is better"),
    "l2_ce_debiased.low": ("binned", "lower end of its 90 % bootstrap interval (200 replicates, --seed)"),
    "l2_ce_debiased.high": ("binned", "upper end of that interval: 0 inside it means no detectable error"),
    "smece": ("smooth", "smooth ECE (Błasiok & Nakkiran 2023, relplot): reflected-Gaussian kernel regression of"
              " the outcome on the probability, no bins; [0, 1]; lower is better; its curve is drawn below"),
    "smece_sigma": ("smooth", "the kernel bandwidth smECE chose (the smallest σ with smECE(σ) ≤ σ); the smooth"
                    " reliability curve uses it"),
    "ici": ("smooth", "integrated calibration index (Austin & Steyerberg): mean |spline recalibration - p|;"
            " [0, 1]; lower is better"),
    "ks": ("tests", "Kolmogorov-Smirnov statistic of the cumulative calibration differences, in standard"
           " deviations; ≥ 0; lower is better"),
    "ks_pvalue": ("tests", f"its {_P}"),
    "kuiper": ("tests", "Kuiper statistic (range of the same path), in standard deviations; ≥ 0; lower is better"),
    "kuiper_pvalue": ("tests", f"its {_P}"),
    "ecce_pvalue": ("tests", f"ECCE-R test (Arrieta-Ibarra et al., as MCGrad computes it); {_P}"),
    "hosmer_lemeshow": ("tests", "Hosmer-Lemeshow chi-square over 10 groups of risk; ≥ 0; lower is better"),
    "hosmer_lemeshow_df": ("tests", "its degrees of freedom (groups - 2)"),
    "hosmer_lemeshow_pvalue": ("tests", f"its {_P}"),
    "calibration_slope": ("slope", "slope of Cox's logistic regression of the outcome on logit(p); 1 is perfect,"
                          " < 1 over-confident, > 1 under-confident"),
    "calibration_intercept": ("slope", "its intercept; 0 is perfect, > 0 the probabilities are too low"),
    "auc": ("ranking", "area under the ROC curve (multiclass: mean one-vs-rest); [0, 1], 0.5 is chance;"
            " higher is better"),
    "confidence_q": ("confidence", "Duin & Tax: mean squared gap between the confidence and correctness; [0, 1];"
                     " lower is better"),
    "confidence_rho": ("confidence", "Duin & Tax: confidence_q / error_rate - 1/2 (n/a without errors);"
                       " lower is better"),
    "error_reject.*": ("confidence", "the error-reject curve (threshold, reject_rate, error_rate lists): error among"
                       " the accepted rows as the least confident are rejected; drawn below"),
    "drift.alpha": ("drift", "significance level of the drift check (--alpha)"),
    "drift.n_tests": ("drift", "tests combined (Spiegelhalter's z and a reliability chi-square per column)"),
    "drift.p_value": ("drift", f"Bonferroni-adjusted smallest p-value; {_P}"),
    "drift.verdict": ("drift", "'recalibrate' when drift.p_value < drift.alpha, else no significant drift"),
    "drift.columns": ("drift", "each column's z, chi-square and p-values: the table in the model's section"),
    "decisions.*": ("decisions", "cost or profit per policy (calibrated, raw, best constant, oracle), the"
                    " decisions taken and the threshold curve: the Decisions block below"),
    "segments.*": ("segments", "every segment's calibration, worst first, and the multicalibration error"
                   " (mce_sigma, mce_pvalue): the 'Calibration by segment' block below"),
    "prior_shift.*": ("prior_shift", "training, estimated (EM) and observed class priors with the interval:"
                      " the 'Prior shift' block below"),
    "calibration_band.*": ("band", "the calibration map's pointwise bootstrap band (grid, low, median, high):"
                           " shaded on the calibration map below"),
    "model.learner": ("model", "the learner"),
    "model.method": ("model", "the calibration method"),
    "model.lineage.*": ("model", "what this model was recalibrated or adapted from: the line in its section"),
}


def flat_keys(payload: dict, prefix: str = "") -> dict[str, Any]:
    """``payload`` as ``{"a.b.c": leaf}``: dicts are walked, anything else (numbers, strings, lists) is a
    leaf.  ``raw`` (the raw learner's payload) is a column of the table, not rows, so it stays a leaf."""
    out: dict[str, Any] = {}
    for key, value in payload.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and name != "raw":
            inner = flat_keys(value, name + ".")
            out.update(inner if inner else {name: value})
        else:
            out[name] = value
    return out


def explain(key: str) -> tuple[str, str]:
    """``(group id, explanation)`` of a flattened key: its own entry, else the longest ``prefix.*`` entry
    that covers it, else ``("other", "")``."""
    if key in CATALOGUE:
        return CATALOGUE[key]
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        entry = CATALOGUE.get(".".join(parts[:i]) + ".*")
        if entry is not None:
            return entry
    return ("other", "")


def grouped_keys(keys) -> list[tuple[str, str, str, list[str]]]:
    """``[(group id, heading, note, keys in first-seen order)]`` over non-empty groups, in :data:`GROUPS` order."""
    by_group: dict[str, list[str]] = {}
    for key in keys:
        by_group.setdefault(explain(key)[0], []).append(key)
    return [(gid, heading, note, by_group[gid]) for gid, heading, note in GROUPS if gid in by_group]
