"""The report's HTML page: one self-contained ``index.html`` around the figures of :mod:`.figures`.

The page embeds every PNG as a ``data:`` URI and carries a Content-Security-Policy that allows nothing
else (no script, no external reference); every piece of user text (model labels, class names, metric
values) goes through :func:`_esc`.
"""

from __future__ import annotations

import base64
import html
from typing import Any

from ..measures import MetricAccumulator
from .figures import RELIABILITY_BINS, ReportFigure
from .catalogue import DOCS_PAGE, explain, flat_keys, grouped_keys
from .prepare import PreparedEntry, format_metric

# --------------------------------------------------------------------------------------------------
# page


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;color:#1d1d1f;
background:#fafafa;line-height:1.45}
header,main,footer{max-width:1600px;margin:0 auto;padding:0 20px}
header{padding-top:18px}
h1{font-size:1.6em;margin:.3em 0}
h2{font-size:1.3em;border-bottom:2px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em;overflow-wrap:anywhere}
h3{font-size:1.05em;margin:1.2em 0 .4em}
nav ol{margin:.3em 0;padding-left:1.4em}
a{color:#0b5cad}
.note{color:#57606a;font-size:.92em;margin:.3em 0}
.figs{display:grid;grid-template-columns:repeat(auto-fit,minmax(620px,1fr));gap:14px}
figure{margin:0;background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:8px}
figure img{display:block;max-width:100%;height:auto;margin:0 auto}
figcaption{font-size:.85em;color:#57606a;margin-top:4px}
.scroll{overflow-x:auto}
table{border-collapse:collapse;background:#fff;font-size:.9em}
th,td{border:1px solid #d0d7de;padding:3px 8px}
th{background:#f0f3f6;text-align:left;vertical-align:bottom}
tr.group th{background:#e4ebf2;font-size:1.02em}
td.help{color:#57606a;font-size:.92em;max-width:46em}
td.num{text-align:right;font-variant-numeric:tabular-nums;font-family:ui-monospace,"DejaVu Sans Mono",monospace}
th.model{max-width:22em;overflow-wrap:anywhere}
details{margin:.6em 0}
summary{cursor:pointer;color:#0b5cad}
.bins{display:flex;flex-wrap:wrap;gap:14px;margin-top:6px}
footer{color:#57606a;font-size:.85em;padding-bottom:24px;margin-top:2em}
"""


_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _decisions_table(prep: PreparedEntry) -> str:
    res = prep.entry.decisions.result()
    what = res["objective"]
    per = "unit of weight" if res.get("weighted") else "row"
    rows = [("calibrated model", res["calibrated"]), ("raw learner", res["raw"]),
            (f"best constant (always {res['best_constant']['class']})", res["best_constant"]),
            ("oracle (knows the class)", res["oracle"])]
    body = "".join(
        f"<tr><td>{_esc(name)}</td><td class=\"num\">{_esc(format_metric(r['total']))}</td>"
        f"<td class=\"num\">{_esc(format_metric(r['mean']))}</td></tr>"
        for name, r in rows if r is not None
    )
    return (f'<div class="scroll"><table><tr><th>policy</th><th>total {_esc(what)}</th><th>{_esc(what)} per {per}</th></tr>'
            f"{body}</table></div>")


def _img(fig: ReportFigure) -> str:
    width, height = fig.size
    data = base64.b64encode(fig.png).decode("ascii")
    return (
        f'<figure><img src="data:image/png;base64,{data}" width="{width}" height="{height}" '
        f'alt="{_esc(fig.alt)}"><figcaption>{_esc(fig.caption)} '
        f"<span class=\"note\">({_esc(fig.filename)})</span></figcaption></figure>"
    )


def _cell(value: Any) -> str:
    """One value of the JSON in a table cell: numbers as :func:`format_metric`, text as itself, a list as
    its values when short, else its length (the curve or table it holds is drawn in the model's section)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        if len(value) <= 4 and all(v is None or isinstance(v, (int, float)) for v in value):
            return "[" + ", ".join(format_metric(v) for v in value) + "]"
        return f"list of {len(value)}"
    if isinstance(value, dict):
        return f"{len(value)} keys"
    return format_metric(value)


def _metrics_table(preps: list[PreparedEntry]) -> str:
    """Every key of each model's ``evaluate --json`` object (:mod:`.catalogue`), grouped, with the raw
    learner's value beside the calibrated one and one line saying what the key means."""
    keys: list[str] = []
    columns: list[dict] = []
    top = ['<th rowspan="2">metric</th>']
    sub = []
    for prep in preps:
        flat = flat_keys(prep.payload)
        raw = prep.payload.get("raw")
        for key in flat:
            if key != "raw" and key not in keys:
                keys.append(key)
        span = 2 if isinstance(raw, dict) else 1
        top.append(f'<th class="model" colspan="{span}">#{prep.index} {_esc(prep.entry.label)}</th>')
        sub.append("<th>calibrated</th>")
        columns.append(flat)
        if isinstance(raw, dict):
            sub.append('<th data-key="raw">raw learner</th>')
            columns.append(flat_keys(raw))
    top.append('<th rowspan="2">what it is (range; which way is better)</th>')
    width = len(columns) + 2
    rows = []
    for gid, heading, note, group in grouped_keys(keys):
        rows.append(f'<tr class="group" id="group-{gid}"><th colspan="{width}">{_esc(heading)}'
                    f' <span class="note">({_esc(note)})</span></th></tr>')
        for key in group:
            cells = "".join(f'<td class="num">{_esc(_cell(col.get(key)))}</td>' for col in columns)
            rows.append(f'<tr data-key="{_esc(key)}"><th><code>{_esc(key)}</code></th>{cells}'
                        f'<td class="help">{_esc(explain(key)[1])}</td></tr>')
    return (
        '<div class="scroll"><table id="metrics-table"><thead>'
        f"<tr>{''.join(top)}</tr><tr>{''.join(sub)}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _size(e) -> str:
    """How much was evaluated: the examples, or with ``--weight`` their total weight (read as counts)."""
    if e.weight is None:
        return f"{e.calibrated.n} examples"
    return f"total weight {format_metric(float(e.calibrated.n))} (column {e.weight})"


def _bin_table(acc: MetricAccumulator, cls: int | None, strategy: str, heading: str, weighted: bool = False) -> str:
    d = acc.reliability_diagram(bins=RELIABILITY_BINS, strategy=strategy, cls=cls)
    edges = d["bin_edges"]
    rows = []
    for j in range(RELIABILITY_BINS):
        cells = (j + 1, edges[j], edges[j + 1], d["mean_predicted"][j], d["observed_frequency"][j], d["count"][j])
        rows.append("<tr>" + "".join(f'<td class="num">{_esc(format_metric(v))}</td>' for v in cells) + "</tr>")
    return (
        f"<table><caption>{_esc(heading)}</caption><thead><tr><th>bin</th><th>from</th><th>to</th>"
        f"<th>mean predicted</th><th>observed</th><th>{'weight' if weighted else 'count'}</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _drift_html(drift: dict, names: list[str]) -> str:
    """The drift check's verdict, its summary line and one row per tested column."""
    from ..drift import drift_line

    rows = []
    for col in drift["columns"]:
        sz, hl = col["spiegelhalter"], col["reliability_chi2"]
        cells = (sz["z"], sz["p_value"], hl["chi2"], hl["df"], hl["p_value"])
        rows.append(f"<tr><td>{_esc(names[col['class']])}</td>"
                    + "".join(f'<td class="num">{_esc(format_metric(v))}</td>' for v in cells) + "</tr>")
    verdict = "recalibrate" if drift["verdict"] == "recalibrate" else "no significant drift"
    return (
        f'<h3>Calibration drift</h3><p class="drift-verdict"><strong>{_esc(verdict)}</strong>: '
        f"{_esc(drift_line(drift, names))}</p>"
        '<p class="note">Null hypothesis: the calibrated probabilities are right on this table. Spiegelhalter\'s z '
        "and a chi-square over 10 equal-count bins with the exact variance sum p(1-p) per bin; the smallest "
        "p-value times the number of tests (Bonferroni) is compared with alpha.</p>"
        "<table><thead><tr><th>class (vs rest)</th><th>z</th><th>p</th><th>chi2</th><th>df</th><th>p</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def lineage_text(lineage: dict) -> str:
    """One sentence from a model's ``lineage`` record: what it was recalibrated (or adapted to new class
    priors, :mod:`calengine.fit.label_shift`) from, on what, when."""
    parent = lineage.get("parent") or {}
    data = lineage.get("data") or {}
    paths = data.get("paths") or []
    where = paths[0] if len(paths) == 1 else f"{len(paths)} files"
    digest = str(parent.get("content_hash") or "")[:12]
    source = (f"from {parent.get('path') or 'a model in memory'}" + (f" (content hash {digest})" if digest else "")
              + f" on {data.get('rows', '?')}")
    if lineage.get("mode") == "adapt":
        applied = ", ".join(f"{p:.4f}" for p in (lineage.get("priors") or {}).get("applied") or [])
        return (f"Adapted to new class priors ({lineage.get('method', '?')}: {applied}) {source} unlabelled rows"
                f" of {where}, {lineage.get('time', '')}.")
    how = "statistics updated" if lineage.get("mode") == "update" else "calibrators refitted"
    forget = lineage.get("forget")
    if lineage.get("mode") == "update" and forget not in (None, 1.0):
        how += f" (old weights x {forget:g})"
    return f"Recalibrated ({how}) {source} rows of {where}, {lineage.get('time', '')}."


def _entry_section(prep: PreparedEntry, figs: dict[str, list[ReportFigure]]) -> str:
    e = prep.entry
    k = e.calibrated.n_classes
    parts = [
        f'<section id="entry-{prep.index}"><h2>#{prep.index} {_esc(e.label)}</h2>',
        f'<p class="note">{_esc(_size(e))}, {k} classes: '
        f"{_esc(', '.join(prep.names))}."
        + ("" if e.raw is not None else " The raw learner's probabilities were not available.")
        + "</p>",
        "<h3>Reliability diagrams</h3>",
        '<p class="note">Observed frequency against mean predicted probability per bin; points on the '
        "dotted diagonal are perfectly calibrated. Left: equal-width bins; right: equal-frequency bins. "
        + ("The bars below count the examples in each bin" if e.weight is None
           else f"The bars below sum the weights (column {_esc(e.weight)}) in each bin")
        + " (filled: calibrated, outlined: raw learner). "
        "Per class, the green steps are the CORP curve: the isotonic recalibration of the calibrated "
        "probabilities, which needs no bins; the Brier score lost to its gap from the diagonal is corp_brier.mcb. "
        "The smooth reliability diagram is relplot's: a reflected-Gaussian kernel regression of the outcome on "
        "the probability at the smooth ECE's bandwidth σ (smece_sigma), with a 95 % pointwise band (delta "
        "method), the raw learner's curve dashed, the equal-width bins as dots and the forecasts' density below; "
        "the mean gap between its curve and the diagonal is smece.</p>",
    ]
    if e.drift is not None:
        parts[2:2] = [_drift_html(e.drift, prep.names)]
    if e.lineage:
        parts.insert(2, f'<p class="note">{_esc(lineage_text(e.lineage))}</p>')
    if prep.class_note:
        parts.append(f'<p class="note">{_esc(prep.class_note)}</p>')
    parts.append('<div class="figs">' + "".join(_img(f) for f in figs["reliability"]) + "</div>")
    primary = 1 if k == 2 else None
    what = f"class {prep.names[1]}" if k == 2 else "the top-label confidence"
    tables = []
    for acc, who in ((e.calibrated, "calibrated"), (e.raw, "raw learner")):
        if acc is None:
            continue
        for strategy, name in (("uniform", "equal-width"), ("quantile", "equal-frequency")):
            tables.append(_bin_table(acc, primary, strategy, f"{who}, {name} bins", e.weight is not None))
    parts.append(
        f"<details><summary>Bin values for {_esc(what)}</summary>"
        '<p class="note">Equal-width bins run [from, to), the last one closed; equal-frequency bins run '
        "(from, to], the first one closed, and tied values are never split, so some may be empty.</p>"
        f'<div class="bins">{"".join(tables)}</div></details>'
    )
    parts.append("<h3>Calibration map</h3>")
    if figs["map"]:
        parts.append(
            '<p class="note">The learned map from the learner\'s held-out score to the calibrated '
            "probability, one panel per calibrated column; grey bars show where the held-out scores lie.</p>"
        )
        if prep.map_note:
            parts.append(f'<p class="note">{_esc(prep.map_note)}</p>')
        parts.append('<div class="figs">' + "".join(_img(f) for f in figs["map"]) + "</div>")
    else:
        parts.append('<p class="note">No calibration map was provided for this model.</p>')
    parts.append("<h3>ROC curve and convex hull</h3>")
    parts.append(
        '<p class="note">'
        + ("Positive class " + _esc(prep.names[1]) + ". " if k == 2 else "One-vs-rest, one panel per class. ")
        + "Dashed: the upper convex hull; its slopes are the probabilities isotonic calibration assigns, "
        "and any ranking can reach every point on it.</p>"
    )
    if prep.class_note:
        parts.append(f'<p class="note">{_esc(prep.class_note)}</p>')
    parts.append('<div class="figs">' + "".join(_img(f) for f in figs["roc"]) + "</div>")
    parts.append("<h3>Error-reject curve</h3>")
    parts.append(
        '<p class="note">Rejecting the least confident examples first: a well-ranked confidence makes the '
        "error among the accepted ones fall steadily.</p>"
    )
    parts.append('<div class="figs">' + "".join(_img(f) for f in figs["error_reject"]) + "</div>")
    if e.decisions is not None:
        import json

        res = e.decisions.result()
        parts.append("<h3>Decisions</h3>")
        parts.append(
            '<p class="note">Each row gets the class of least expected cost (greatest expected profit for a'
            " benefit matrix) under the matrix "
            f"<code>{_esc(json.dumps(res['cost_matrix']))}</code> (rows: decided class, columns: true"
            " class). The raw learner's probabilities decide by the same rule; the best constant policy and the"
            " oracle bracket what any model can reach.</p>"
        )
        parts.append(_decisions_table(prep))
        if e.decisions.cost_matrix.n_classes == 2:
            parts.append(
                '<p class="note">The curve: the same table decided by one threshold t on the probability of '
                f"{_esc(prep.names[1])} (dots: best t in hindsight; crosses: the decisions made, at the Bayes "
                "threshold p*, when the costs are constant; with per-row costs the decisions use a threshold per row"
                " and the curve is only a comparison).</p>"
            )
        if figs.get("decisions"):
            parts.append('<div class="figs">' + "".join(_img(f) for f in figs["decisions"]) + "</div>")
    if e.segments is not None:
        parts.append(_segments_html(e.segments))
    if e.prior_shift is not None:
        parts.append(_prior_shift_html(e.prior_shift))
    parts.append("</section>")
    return "\n".join(parts)


#: the most segments the report lists (``--json`` carries them all)
REPORT_SEGMENT_ROWS = 100


def _segments_html(seg: dict) -> str:
    """The ``evaluate --by`` block: the multicalibration error and the segments, worst first
    (:meth:`calengine.metrics.segments.SegmentAccumulator.result`)."""
    heads = ("segment", "rows", "mean p", "mean y", "ECE", "ECE (equal mass)", "Spiegelhalter z", "p(z), Holm",
             "ECCE (σ)", "p(ECCE), Holm", "log loss", "Brier")
    keys = ("rows", "mean_p", "mean_y", "ece", "ece_equal_mass", "spiegelhalter_z", "spiegelhalter_pvalue_holm",
            "ecce_sigma", "ecce_pvalue_holm", "log_loss", "brier")
    rows = seg["segments"][: REPORT_SEGMENT_ROWS + 1]
    body = "".join(
        "<tr><td>" + _esc("all rows" if r["column"] == "(all)" else f"{r['column']} = {r['value']}") + "</td>"
        + "".join(f'<td class="num">{_esc(format_metric(r.get(k)))}</td>' for k in keys) + "</tr>"
        for r in rows
    )
    more = len(seg["segments"]) - len(rows)
    return (
        "<h3>Calibration by segment</h3>"
        f'<p class="note">Segments of {_esc(", ".join(seg["by"]))}, worst first (largest ECCE on the sigma scale);'
        f" p-values Holm-adjusted over the segments. Multicalibration error (MCGrad):"
        f" {_esc(format_metric(seg['mce_sigma']))} σ, p = {_esc(format_metric(seg['mce_pvalue']))}."
        + (f" {more} more segments are in <code>--json</code>." if more > 0 else "") + "</p>"
        + '<div class="scroll"><table><tr>' + "".join(f"<th>{_esc(h)}</th>" for h in heads) + f"</tr>{body}</table></div>"
    )


def _prior_shift_html(shift: dict) -> str:
    """The ``evaluate --prior-shift`` block (:func:`calengine.metrics.prior_shift.prior_shift_table`): per
    class, the prior the model was calibrated to, the EM estimate from its probabilities, the bootstrap
    interval and the table's label rate, as ``--json`` carries them."""
    pct = f"{shift['level']:.0%}"
    heads = ("class", "training prior", "estimated prior (EM)", f"{pct} interval", "observed label rate")
    body = "".join(
        f"<tr><td>{_esc(c)}</td>"
        + "".join(f'<td class="num">{_esc(v)}</td>' for v in (
            f"{shift['training'][i]:.4f}", f"{shift['estimated'][i]:.4f}",
            f"[{shift['low'][i]:.4f}, {shift['high'][i]:.4f}]",
            "n/a" if shift["observed"] is None else f"{shift['observed'][i]:.4f}"))
        + "</tr>"
        for i, c in enumerate(shift["classes"])
    )
    from ..prior_shift import shift_amount

    drawn = "bootstrap resamples drawn by weight" if shift.get("weighted") else "bootstrap resamples"
    em = shift["em"]
    stopped = "" if em["converged"] else f" EM stopped after {em['iterations']} steps without converging."
    return (
        "<h3>Prior shift</h3>"
        f'<p class="note">The class priors of this table estimated from the model\'s probabilities alone (EM,'
        f" as <code>calengine adapt</code> runs it) over {_esc(shift_amount(shift, 'rows'))}, with a {pct} percentile"
        f" interval from {shift['replicates']} {drawn} of {shift['sample_rows']:,} rows (seed"
        f" {shift['seed']}); training priors: {_esc(shift['training_from'])}; observed: the label rates"
        f" of {_esc(shift_amount(shift, 'labelled_rows', 'labelled rows'))}.{_esc(stopped)}</p>"
        + "<table><tr>" + "".join(f"<th>{_esc(h)}</th>" for h in heads) + f"</tr>{body}</table>"
    )


def render_page(title: str, preps: list[PreparedEntry], overview: ReportFigure | None, figs: dict[int, dict]) -> str:
    from ...version import __version__

    nav = "".join(
        f'<li><a href="#entry-{p.index}">#{p.index} {_esc(p.entry.label)}</a></li>' for p in preps
    )
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # the page needs nothing but its own inline style and data: images; saying so to the browser
        # guarantees it never fetches anything, wherever the file is opened
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<header><h1>{_esc(title)}</h1>",
        f'<p class="note">{len(preps)} model{"s" if len(preps) != 1 else ""} evaluated on the same '
        "labelled table.</p>",
        '<nav><ol><li><a href="#metrics">Metrics</a></li>'
        + ('<li><a href="#overview">All models together</a></li>' if overview else "")
        + f"{nav}</ol></nav></header><main>",
        '<section id="metrics"><h2>Metrics</h2>',
        '<p class="note">Every key of <code>calengine evaluate --json</code> for each model and its raw '
        "(uncalibrated) learner, grouped; 6 significant digits, n/a where undefined. Definitions, formulas and "
        f"references: the page {_esc(DOCS_PAGE)}.</p>",
        _metrics_table(preps),
        "</section>",
    ]
    if overview is not None:
        body.append(f'<section id="overview"><h2>All models together</h2><div class="figs">{_img(overview)}</div></section>')
    for prep in preps:
        body.append(_entry_section(prep, figs[prep.index]))
    body.append(f"</main><footer>Written by calengine {_esc(__version__)}.</footer></body></html>")
    return "\n".join(body) + "\n"
