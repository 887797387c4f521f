"""The metrics as a terminal shows them: the table of ``calengine evaluate`` (models across, or models
as rows when they do not fit), the error-reject table, the drift lines and the decisions block.

They live beside what they format so that the Python API (:func:`calengine.evaluate_models`) prints
exactly what the CLI prints, without going through argv.  Every function returns text without a
trailing newline and fits it to ``width`` columns (default: the terminal's, ``$COLUMNS``, 100 when
not a terminal).  Only the standard library is imported at module level: ``calengine --help``
imports this module through ``calengine.cli``'s re-exports and must stay fast.
"""

from __future__ import annotations

import math

__all__ = [
    "METRIC_ORDER", "SHORT_METRIC", "terminal_width", "format_metrics_table", "format_error_reject",
    "format_drift", "format_decisions", "finite", "with_suite_rows",
]

#: the rows of the metrics table, in order (a metric no model has is left out)
METRIC_ORDER = (
    "n", "brier", "log_loss", "log_loss_bits", "auc", "error_rate", "ece", "mce",
    "calibration_loss", "refinement_loss", "brier_mcb", "brier_dsc", "brier_unc", "confidence_q", "confidence_rho",
    "ece_equal_mass", "ece_classwise", "l2_ce_debiased", "l2_ce_low", "l2_ce_high", "smece", "ks", "ks_pvalue",
    "kuiper", "kuiper_pvalue", "ecce_pvalue", "hosmer_lemeshow_pvalue", "calibration_slope", "calibration_intercept",
    "ici",
)

#: column headers of the models-as-rows layout (the JSON keys, shortened where long)
SHORT_METRIC = {"log_loss_bits": "ll_bits", "error_rate": "error", "calibration_loss": "cal_loss",
                "refinement_loss": "ref_loss", "confidence_q": "q", "confidence_rho": "rho",
                "brier_mcb": "mcb", "brier_dsc": "dsc", "brier_unc": "unc", "ece_equal_mass": "ece_em",
                "ece_classwise": "ece_cw", "l2_ce_debiased": "l2_ce", "ks_pvalue": "ks_p", "kuiper_pvalue": "kuiper_p",
                "ecce_pvalue": "ecce_p", "hosmer_lemeshow_pvalue": "hl_p", "calibration_slope": "slope",
                "calibration_intercept": "intercept"}


def terminal_width(width: int | None = None) -> int:
    """The width tables must fit: ``width``, else the terminal's ($COLUMNS; 100 when not a terminal)."""
    import shutil

    return width or shutil.get_terminal_size((100, 24)).columns


def finite(obj):
    """JSON has no NaN/inf: they become null (e.g. rho when the error rate is 0), in nested dicts and
    lists too."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [finite(v) for v in obj]
    return obj


def with_suite_rows(metrics: dict | None) -> dict | None:
    """``metrics`` with the debiased L2 error's ``{value, low, high}`` as the flat rows ``l2_ce_debiased``,
    ``l2_ce_low`` and ``l2_ce_high`` of the text tables (the JSON keeps the dict)."""
    if metrics is None or not isinstance(metrics.get("l2_ce_debiased"), dict):
        return metrics
    l2 = metrics["l2_ce_debiased"]
    return {**metrics, "l2_ce_debiased": l2["value"], "l2_ce_low": l2["low"], "l2_ce_high": l2["high"]}


def format_metrics_table(rows: list[tuple[str, dict | None]], width: int | None = None) -> str:
    """Metrics down, models across: easy to read for any number of metrics.  When the models do not
    fit across ``width`` (the terminal's), models become rows instead, and the metric columns are cut
    into blocks that each fit (the model label repeated), so no line is wider than the terminal."""
    rows = [(name, m) for name, m in rows if m is not None]
    keys = [k for k in METRIC_ORDER if any(k in m for _, m in rows)]
    limit = terminal_width(width)
    if max(len(k) for k in keys) + sum(2 + max(14, len(name)) for name, _ in rows) > limit:
        return _metrics_by_model(rows, keys, limit)
    width = max(len(k) for k in keys)
    cols = [max(14, len(name)) for name, _ in rows]
    header = f"{'metric':<{width}}  " + "  ".join(f"{name:>{w}}" for (name, _), w in zip(rows, cols))
    lines = [header, "-" * len(header)]
    for k in keys:
        cells = [_metric_cell(m.get(k), w, 6) for (_, m), w in zip(rows, cols)]
        lines.append(f"{k:<{width}}  " + "  ".join(cells))
    return "\n".join(lines)


def _metric_cell(v, width: int, digits: int) -> str:
    """One right-aligned metric value: integers as such, NaN and missing values as n/a."""
    if isinstance(v, int):
        return f"{v:>{width}d}"
    if isinstance(v, float) and v == v:
        return f"{v:>{width}.{digits}f}"
    return f"{'n/a':>{width}}"


def _metrics_by_model(rows, keys: list[str], limit: int) -> str:
    """One row per model, metric columns in blocks no wider than ``limit``.  Labels longer than a
    quarter of the width are listed once above the table and the rows carry their number."""
    names = [name for name, _ in rows]
    legend: list[str] = []
    if max(len(n) for n in names) > limit // 4:
        legend = [f"[{i}] {n}" for i, n in enumerate(names, 1)]
        names = [f"[{i}]" for i in range(1, len(rows) + 1)]
    name_w = max(5, *(len(n) for n in names))
    head = {k: SHORT_METRIC.get(k, k) for k in keys}
    cell = {k: max(len(head[k]), 8 if k != "n" else max(len(str(m.get("n", ""))) for _, m in rows)) for k in keys}
    blocks, block, used = [], [], name_w
    for k in keys:
        if block and used + 2 + cell[k] > limit:
            blocks.append(block)
            block, used = [], name_w
        block.append(k)
        used += 2 + cell[k]
    blocks.append(block)
    lines = legend + ([""] if legend else [])
    for j, b in enumerate(blocks):
        if j:
            lines.append("")
        header = f"{'model':<{name_w}}  " + "  ".join(f"{head[k]:>{cell[k]}}" for k in b)
        lines += [header, "-" * len(header)]
        for name, (_, m) in zip(names, rows):
            cells = [_metric_cell(m.get(k), cell[k], 4) for k in b]
            lines.append(f"{name:<{name_w}}  " + "  ".join(cells))
    return "\n".join(lines)


#: the reject rates of the text error-reject table.
REJECT_RATES = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)


def format_error_reject(labels: list[str], accs: list, width: int | None = None, ids: list[str] | None = None) -> str:
    """Error rate among accepted rows at a few reject rates (the error-reject curve, Duin & Tax) of
    each :class:`~calengine.metrics.measures.MetricAccumulator` in ``accs``: models across while that
    fits ``width`` (the terminal's), else one row per model.  ``ids``: the models' numbers in a legend
    already printed (the metrics table's), used instead of long labels."""
    targets = REJECT_RATES
    # each accumulator finds the last curve point at or below each reject rate (range by range when
    # its tables are cut into score ranges): the whole curve is never built here
    table = [acc.error_reject_at(targets) for acc in accs]
    cell = max(14, *(len(lb) for lb in labels))
    limit = terminal_width(width)
    if 14 + (cell + 2) * len(labels) > limit:
        shown = labels
        lines = ["error rate after rejecting the least confident rows (columns: reject rate)"]
        if ids is not None:
            shown = ids
        elif max(len(lb) for lb in labels) + 8 * len(targets) > limit:
            lines += [f"[{i}] {lb}" for i, lb in enumerate(labels, 1)]
            shown = [f"[{i}]" for i in range(1, len(labels) + 1)]
        name = max(5, *(len(lb) for lb in shown))
        lines.append(f"{'model':<{name}}  " + "  ".join(f"{t:>6.2f}" for t in targets))
        for lb, row in zip(shown, table):
            lines.append(f"{lb:<{name}}  " + "  ".join(f"{v:>6.4f}" if v is not None else f"{'n/a':>6}" for v in row))
        return "\n".join(lines)
    lines = ["error rate after rejecting the least confident rows",
             f"{'reject rate':<12}  " + "  ".join(f"{lb:>{cell}}" for lb in labels)]
    for i, t in enumerate(targets):
        cells = [f"{row[i]:>{cell}.4f}" if row[i] is not None else f"{'n/a':>{cell}}" for row in table]
        lines.append(f"{t:<12.2f}  " + "  ".join(cells))
    return "\n".join(lines)


def format_drift(labels: list[str], drifts: list[dict], class_names: list[list[str]], width: int | None = None,
                 ids: list[str] | None = None) -> str:
    """One ``calibration drift: ... -> verdict`` line per model (``drifts``: each model's
    :meth:`~calengine.metrics.measures.MetricAccumulator.drift_check`), wrapped to ``width`` (the
    terminal's); several models are named by ``ids`` (the metrics table's numbers) or their labels."""
    import textwrap

    from ..drift import drift_line

    limit = terminal_width(width)
    out = []
    for i, (lb, d, names) in enumerate(zip(labels, drifts, class_names)):
        line = drift_line(d, names)
        if len(drifts) > 1:
            line = f"{ids[i] if ids else lb} {line}"
        out.append(textwrap.fill(line, width=limit, subsequent_indent="    ", break_on_hyphens=False))
    return "\n".join(out)


def format_decisions(label: str, d: dict) -> str:
    """The ``--cost-matrix`` block of ``evaluate``: each policy's total and mean per row, or per unit of
    weight with ``--weight`` (``d``: a
    :class:`~calengine.decisions.DecisionAccumulator`'s result)."""
    what = d["objective"]
    rows = [("calibrated model", d["calibrated"]), ("raw learner", d["raw"]),
            (f"best constant (always {d['best_constant']['class']})", d["best_constant"]),
            ("oracle (knows the class)", d["oracle"])]
    name = max(len(r[0]) for r in rows)
    size, per = (f"total weight {d['n']:.6g}", "per weight") if d.get("weighted") else (f"{d['n']} rows", "per row")
    lines = [f"decisions of {label} under the cost matrix ({what}, {'higher' if what == 'profit' else 'lower'} is better;"
             f" {size})",
             f"{'policy':<{name}}  {'total ' + what:>16}  {per:>12}"]
    for nm, r in rows:
        if r is not None:
            lines.append(f"{nm:<{name}}  {r['total']:>16.6g}  {r['mean']:>12.6g}")
    if d.get("best_threshold"):
        p_star = d.get("bayes_threshold")
        bits = [f"Bayes threshold p* = {p_star:.4g}" if p_star is not None else "per-row thresholds (column costs)"]
        for key, b in d["best_threshold"].items():
            bits.append(f"best threshold in hindsight, {key}: {b['threshold']:.3f} ({what} {b['total']:.6g})")
        lines.append("; ".join(bits))
    return "\n".join(lines)
