"""The report's figures: reliability diagrams, calibration maps, ROC curves with hulls, error-reject and
decision-threshold curves, one PNG each.

Everything is drawn from the prepared entries of :mod:`.prepare` with matplotlib's Agg canvas (no
pyplot, no global figure state) at fixed sizes and :data:`DPI`, saved by :func:`_png` without the
software stamp, so the same accumulators give the same PNG bytes for a given matplotlib.
"""

from __future__ import annotations

import io
import math
import struct
from dataclasses import dataclass

import numpy as np

from ...errors import CalengineError
from ..measures import MetricAccumulator
from .prepare import PreparedEntry


#: bins of every reliability diagram (15, like the ``ece`` metric, so the picture matches the number).
RELIABILITY_BINS = 15

#: figure resolution; figure sizes are fixed in inches, so pixel sizes are fixed too.
DPI = 100

#: curves with more points are thinned (evenly, keeping the hull vertices) before drawing; a few
#: thousand points are indistinguishable from millions at these figure sizes and render far faster.
CURVE_MAX_POINTS = 4000

_CAL = "#1f77b4"
_RAW = "#ff7f0e"
_DIAG = "#7f7f7f"
_CORP = "#2ca02c"
_ENTRY_COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)
#: narrowest drawn count bar, so a bin of tied values (zero width in equal-frequency binning) shows.
_MIN_BAR = 0.008


# --------------------------------------------------------------------------------------------------
# figures


@dataclass
class ReportFigure:
    filename: str
    png: bytes
    alt: str
    caption: str

    @property
    def size(self) -> tuple[int, int]:
        """Pixel width and height, read from the PNG header (IHDR follows the 8-byte signature)."""
        return struct.unpack(">II", self.png[16:24])


def _plot_text(text: str, limit: int = 60) -> str:
    """Text safe for matplotlib: ``$`` would start mathtext; long names are shortened."""
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("$", r"\$")


def _new_figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _margins(fig, left=0.65, right=0.2, top=0.6, bottom=0.55, wspace=0.25, hspace=0.3) -> dict:
    """Subplot parameters from margins in inches; a fixed layout is faster than constrained layout and
    keeps every figure's geometry independent of its text."""
    width, height = fig.get_size_inches()
    return {
        "left": left / width,
        "right": 1 - right / width,
        "top": 1 - top / height,
        "bottom": bottom / height,
        "wspace": wspace,
        "hspace": hspace,
    }


def _panel_grid(n: int, panel: float = 3.3, max_cols: int = 3, left: float = 0.65, right: float = 0.2,
                gap: float = 0.75, top: float = 0.75, bottom: float = 0.55, vgap: float = 0.75):
    """A figure of ``n`` square panels of ``panel`` inches in rows of ``max_cols``; spare axes hidden."""
    ncols = min(n, max_cols)
    nrows = math.ceil(n / ncols)
    width = left + right + ncols * panel + (ncols - 1) * gap
    height = top + bottom + nrows * panel + (nrows - 1) * vgap
    fig = _new_figure(width, height)
    axes = fig.subplots(
        nrows, ncols, squeeze=False,
        gridspec_kw=_margins(fig, left=left, right=right, top=top, bottom=bottom,
                             wspace=gap / panel, hspace=vgap / panel),
    )
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _thin(n: int, keep: np.ndarray | None = None) -> np.ndarray:
    """Indices of at most about CURVE_MAX_POINTS evenly spread points, plus ``keep``, in order."""
    if n <= CURVE_MAX_POINTS:
        return np.arange(n)
    idx = np.rint(np.linspace(0, n - 1, CURVE_MAX_POINTS)).astype(np.intp)
    if keep is not None:
        idx = np.concatenate((idx, keep))
    return np.unique(idx)


def _compact_count(c: float) -> str:
    """A bar's label: a row count (or a total of weight, shown to three significant digits below 10,000)."""
    if c < 10_000:
        return str(int(c)) if c == int(c) else f"{c:.3g}"
    if c < 10_000_000:
        return f"{c / 1000:.0f}k"
    return f"{c / 1e6:.0f}M"


def _diagram_title(cls: int | None, names: list[str]) -> str:
    if cls is None:
        return "top-label confidence (accuracy of the predicted class)"
    return f"class {_plot_text(names[cls], 40)} (one-vs-rest)"


def _reliability_figure(prep: PreparedEntry, cls: int | None):
    """Calibrated vs raw vs diagonal; equal-width bins left, equal-frequency right; counts below."""
    cal, raw = prep.entry.calibrated, prep.entry.raw
    fig = _new_figure(10.0, 6.2)
    grid = fig.add_gridspec(2, 2, height_ratios=(3.0, 1.4), **_margins(fig, top=0.6, hspace=0.06, wspace=0.2))
    observed = "accuracy" if cls is None else "observed frequency"
    predicted = "mean confidence" if cls is None else "mean predicted probability"
    for j, (strategy, name) in enumerate((("uniform", "equal-width bins"), ("quantile", "equal-frequency bins"))):
        ax = fig.add_subplot(grid[0, j])
        axc = fig.add_subplot(grid[1, j], sharex=ax)
        ax.plot([0, 1], [0, 1], ls=":", color=_DIAG, lw=1.2, label="perfectly calibrated")
        cal_bins = None
        max_count = 0.0
        for acc, label, colour, marker in ((raw, "raw learner", _RAW, "s"), (cal, "calibrated", _CAL, "o")):
            if acc is None:
                continue
            d = acc.reliability_diagram(bins=RELIABILITY_BINS, strategy=strategy, cls=cls)
            ok = d["count"] > 0
            ax.plot(d["mean_predicted"][ok], d["observed_frequency"][ok], marker=marker, ms=4, lw=1.4,
                    color=colour, label=label)
            edges = d["bin_edges"]
            widths = np.maximum(np.diff(edges), _MIN_BAR)
            if acc is cal:
                axc.bar(edges[:-1], d["count"], width=widths, align="edge", color=colour, alpha=0.55,
                        edgecolor=colour, lw=0.6, label=label)
                cal_bins = (edges, widths, d["count"])
            else:
                axc.bar(edges[:-1], d["count"], width=widths, align="edge", fill=False, edgecolor=colour,
                        lw=1.0, label=label)
            max_count = max(max_count, float(d["count"].max()))
        if cls is not None:  # the CORP curve: PAV recalibration of the calibrated column, no bins
            c = cal.corp_curve(cls)
            ax.plot(np.concatenate((c["lo"], c["hi"][-1:])), np.concatenate((c["value"], c["value"][-1:])),
                    drawstyle="steps-post", color=_CORP, lw=1.0, label="calibrated, CORP (isotonic)")
        edges, widths, counts = cal_bins
        last_x = -1.0
        for lo, w, c in zip(edges[:-1], widths, counts):
            x = lo + w / 2
            if c > 0 and x - last_x >= 0.045:  # leave out labels that would overlap their neighbour
                axc.text(x, c, " " + _compact_count(c), rotation=90, ha="center", va="bottom",
                         fontsize=6.5, color="#0b3d66")
                last_x = x
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(name, fontsize=10)
        ax.set_ylabel(observed)
        ax.tick_params(labelbottom=False)
        ax.legend(loc="upper left", fontsize=8, frameon=True)
        axc.set_ylim(0, (max_count or 1.0) * 1.55)
        axc.set_xlabel(predicted)
        axc.set_ylabel("examples per bin" if prep.entry.weight is None else "weight per bin", fontsize=8)
        axc.tick_params(labelsize=7)
    fig.suptitle(f"Reliability: {_diagram_title(cls, prep.names)}", fontsize=11)
    return fig


def _smooth_figure(prep: PreparedEntry):
    """relplot's smooth reliability diagram: the kernel-smoothed curve of the calibrated probabilities with
    its 95 % band, the raw learner's curve, the 15 equal-width bins for comparison, and the forecasts'
    density underneath; of the column the smooth ECE measures (class 1 for two classes, else the
    top-label confidence)."""
    cal_curve, raw_curve = prep.smooth, prep.raw_smooth
    k = prep.entry.calibrated.n_classes
    cls = 1 if k == 2 else None
    fig = _new_figure(5.6, 6.2)
    grid = fig.add_gridspec(2, 1, height_ratios=(3.0, 1.0), **_margins(fig, top=0.6, hspace=0.06))
    ax = fig.add_subplot(grid[0, 0])
    axd = fig.add_subplot(grid[1, 0], sharex=ax)
    ax.plot([0, 1], [0, 1], ls=":", color=_DIAG, lw=1.2, label="perfectly calibrated")
    t = cal_curve["mesh"]
    ax.fill_between(t, cal_curve["low"], cal_curve["high"], color=_CAL, alpha=0.2, lw=0,
                    label="calibrated, 95 % band")
    ax.plot(t, cal_curve["mu"], color=_CAL, lw=1.6, label=f"calibrated, smooth (σ = {cal_curve['sigma']:.3g})")
    if raw_curve is not None:
        ax.plot(raw_curve["mesh"], raw_curve["mu"], color=_RAW, lw=1.2, ls="--",
                label=f"raw learner, smooth (σ = {raw_curve['sigma']:.3g})")
    d = prep.entry.calibrated.reliability_diagram(bins=RELIABILITY_BINS, strategy="uniform", cls=cls)
    ok = d["count"] > 0
    ax.plot(d["mean_predicted"][ok], d["observed_frequency"][ok], ls="none", marker="o", ms=3.5, color="#444444",
            label=f"calibrated, {RELIABILITY_BINS} equal-width bins")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("accuracy" if cls is None else "observed frequency")
    ax.tick_params(labelbottom=False)
    ax.legend(loc="upper left", fontsize=7.5, frameon=True)
    axd.fill_between(t, 0, cal_curve["density"], color=_CAL, alpha=0.45, lw=0)
    axd.set_ylim(0, float(np.max(cal_curve["density"])) * 1.15 or 1.0)
    axd.set_xlabel("confidence" if cls is None else "predicted probability")
    axd.set_ylabel("density", fontsize=8)
    axd.tick_params(labelsize=7)
    fig.suptitle(f"Smooth reliability: {_diagram_title(cls, prep.names)}", fontsize=11)
    return fig


def _roc_figure(prep: PreparedEntry):
    """One panel per shown class: ROC curve (solid) and its upper convex hull (dashed), both models."""
    cal, raw = prep.entry.calibrated, prep.entry.raw
    classes = prep.classes
    fig, axes = _panel_grid(len(classes), panel=4.2 if len(classes) == 1 else 3.3)
    for ax, c in zip(axes, classes):
        ax.plot([0, 1], [0, 1], ls=":", color=_DIAG, lw=1.0)
        drawn = False
        for acc, label, colour in ((raw, "raw", _RAW), (cal, "calibrated", _CAL)):
            if acc is None:
                continue
            r = roc_data(acc, c)
            if r is None:
                continue
            ax.plot(r["fpr"], r["tpr"], color=colour, lw=1.4, label=f"{label} (AUC {r['area']:.4f})")
            ax.plot(r["hull_fpr"], r["hull_tpr"], color=colour, lw=1.0, ls="--", marker=".", ms=3,
                    label=f"{label} hull (AUC {r['hull_area']:.4f})")
            drawn = True
        if not drawn:
            ax.text(0.5, 0.5, "undefined: the class has no\npositive or no negative examples",
                    ha="center", va="center", fontsize=8, transform=ax.transAxes)
        else:
            ax.legend(loc="lower right", fontsize=7)
        ax.set_xlim(-0.01, 1.01)
        ax.set_ylim(-0.01, 1.01)
        ax.set_title(f"{_plot_text(prep.names[c], 40)} vs rest", fontsize=9)
        ax.set_xlabel("false positive rate", fontsize=8)
        ax.set_ylabel("true positive rate", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle("ROC curve and its convex hull", fontsize=11)
    return fig


def _error_reject_figure(prep: PreparedEntry):
    """Error among accepted rows as the least confident are rejected, calibrated vs raw."""
    fig = _new_figure(6.0, 4.4)
    fig.subplots_adjust(**_margins(fig, top=0.45))
    ax = fig.add_subplot()
    for acc, label, colour in ((prep.entry.raw, "raw learner", _RAW), (prep.entry.calibrated, "calibrated", _CAL)):
        if acc is None:
            continue
        _plot_error_reject(ax, acc, label, colour)
    ax.set_xlim(-0.01, 1.01)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("reject rate (least confident rejected first)")
    ax.set_ylabel("error rate among accepted")
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title("Error-reject curve", fontsize=11)
    return fig


def roc_data(acc, cls: int) -> dict | None:
    """What the ROC panel of class ``cls`` draws: the curve thinned to about :data:`CURVE_MAX_POINTS`
    evenly spread points plus its hull vertices (``fpr``, ``tpr``), the upper convex hull
    (``hull_fpr``, ``hull_tpr``) and both areas; None when the class lacks positives or negatives.
    An evaluation cut into score ranges computes it range by range (``acc.roc_thinned``: the same
    points, the area summed per range); an in-memory accumulator from its whole curve."""
    from ..roc import convex_hull_vertices

    if hasattr(acc, "roc_thinned"):
        r = acc.roc_thinned(cls, CURVE_MAX_POINTS)
        if r is None:
            return None
        r = dict(r)
    else:
        c = acc.roc_curve(cls=cls)
        fpr, tpr = c["fpr"], c["tpr"]
        if np.isnan(fpr).any() or np.isnan(tpr).any():
            return None
        hull = convex_hull_vertices(fpr, tpr)
        keep = _thin(fpr.size, hull)
        r = {"fpr": fpr[keep], "tpr": tpr[keep], "hull_fpr": fpr[hull], "hull_tpr": tpr[hull],
             "area": float(np.trapezoid(tpr, fpr))}
    r["hull_area"] = float(np.trapezoid(r["hull_tpr"], r["hull_fpr"]))
    return r


def error_reject_data(acc) -> dict:
    """What the error-reject figure draws: ``reject_rate`` and ``error_rate`` at about
    :data:`CURVE_MAX_POINTS` evenly spread points of the curve (its last point, rejecting everything,
    has no error rate and is left out); range by range for an evaluation cut into score ranges."""
    if hasattr(acc, "error_reject_thinned"):
        d = acc.error_reject_thinned(CURVE_MAX_POINTS)
        ok = ~np.isnan(d["error_rate"])
        return {"reject_rate": d["reject_rate"][ok], "error_rate": d["error_rate"][ok]}
    d = acc.error_reject_curve()
    ok = ~np.isnan(d["error_rate"])
    x, y = d["reject_rate"][ok], d["error_rate"][ok]
    keep = _thin(x.size)
    return {"reject_rate": x[keep], "error_rate": y[keep]}


def _plot_error_reject(ax, acc: MetricAccumulator, label: str, colour: str, lw: float = 1.4) -> None:
    d = error_reject_data(acc)
    x, y = d["reject_rate"], d["error_rate"]
    ax.plot(x, y, color=colour, lw=lw, label=f"{label} (error {y[0]:.4g} at no reject)")


def _decisions_figure(prep: PreparedEntry):
    """Two classes: total cost (or profit) of "decide class 1 when p > t" against t, calibrated and raw,
    with the Bayes threshold p* (constant costs) and each curve's best threshold marked."""
    d = prep.entry.decisions
    res = d.result(curve_points=None)
    what = res["objective"]
    fig = _new_figure(6.0, 4.4)
    fig.subplots_adjust(**_margins(fig, left=0.85, top=0.45))
    ax = fig.add_subplot()
    t = np.asarray(res["threshold_curve"]["threshold"])
    for key, label, colour in (("raw", "raw learner", _RAW), ("calibrated", "calibrated", _CAL)):
        if key not in res["threshold_curve"]:
            continue
        y = np.asarray(res["threshold_curve"][key])
        best = res["best_threshold"][key]
        ax.plot(t, y, color=colour, lw=1.4, label=f"{label} (best t = {best['threshold']:.3f}: {best['total']:.4g})")
        ax.plot([best["threshold"]], [best["total"]], marker="o", color=colour, ms=5)
        if res.get("bayes_threshold") is not None and res.get(key):
            # the decisions actually made: the minimum-expected-cost rule is the threshold p*
            ax.plot([res["bayes_threshold"]], [res[key]["total"]], marker="x", color=colour, ms=9, mew=2,
                    label=f"{label} decisions at p*: {res[key]['total']:.4g}")
    if res.get("bayes_threshold") is not None:
        ax.axvline(res["bayes_threshold"], color="#444", ls="--", lw=1,
                   label=f"Bayes threshold p* = {res['bayes_threshold']:.3g}")
    const = res["best_constant"]
    ax.axhline(const["total"], color="#888", ls=":", lw=1, label=f"best constant (always {const['class']})")
    ax.set_xlim(-0.01, 1.01)
    ax.set_xlabel(f"threshold t: decide {prep.names[1]} when p({prep.names[1]}) > t")
    ax.set_ylabel(f"total {what}")
    ax.legend(loc="best", fontsize=8)
    ax.set_title(f"{what.capitalize()} against decision threshold", fontsize=11)
    return fig


def _map_figure(prep: PreparedEntry):
    """Learned score-to-probability map per calibrator column, with the held-out score histogram."""
    scores, probs, names = prep.map_scores, prep.map_probs, prep.map_names
    l = scores.shape[1]
    fig, axes = _panel_grid(l, panel=4.2 if l == 1 else 3.3)
    for j, ax in enumerate(axes):
        s, p = scores[:, j], probs[:, j]
        ok = np.isfinite(s) & np.isfinite(p)
        s, p = s[ok], p[ok]
        ax.set_title(_plot_text(names[j], 40), fontsize=9)
        ax.set_xlabel("learner score", fontsize=8)
        ax.set_ylabel("calibrated probability", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_ylim(-0.02, 1.02)
        if s.size == 0:
            ax.text(0.5, 0.5, "no finite held-out scores", ha="center", va="center", fontsize=8,
                    transform=ax.transAxes)
            continue
        hist = ax.twinx()
        hist.hist(s, bins=30, color="#c7c7c7", alpha=0.6, zorder=0)
        hist.set_ylim(0, hist.get_ylim()[1] * 4)  # keep the histogram in the lower quarter
        hist.set_yticks([])
        hist.grid(False)
        ax.set_zorder(hist.get_zorder() + 1)
        ax.patch.set_visible(False)
        order = np.lexsort((p, s))
        s_sorted, p_sorted = s[order], p[order]
        same_score = s_sorted[1:] == s_sorted[:-1]
        if not np.any(same_score & (np.abs(p_sorted[1:] - p_sorted[:-1]) > 1e-9)):
            # a function of the score (the univariate calibrators): join the points as a step curve;
            # otherwise the points alone are the honest picture
            ax.plot(s_sorted, p_sorted, color=_CAL, lw=1.0, drawstyle="steps-post", alpha=0.9)
        ax.scatter(s, p, s=5, color=_CAL, alpha=0.35, linewidths=0)
        band = prep.map_band if j == 0 else None
        if band is not None:
            ax.fill_between(band["grid"], band["low"], band["high"], color=_RAW, alpha=0.25,
                            linewidth=0, label=f"{band['level']:.0%} bootstrap band (B = {band['B']})")
            ax.legend(loc="upper left", fontsize=7)
    fig.suptitle("Calibration map: held-out learner score → calibrated probability", fontsize=11)
    return fig


def overview_figure(preps: list[PreparedEntry]):
    """All models together: top-label reliability (equal-width bins) and error-reject curves."""
    fig = _new_figure(11.0, 4.6)
    ax_rel, ax_er = fig.subplots(1, 2, gridspec_kw=_margins(fig, top=0.6, wspace=0.2))
    ax_rel.plot([0, 1], [0, 1], ls=":", color=_DIAG, lw=1.2)
    for prep in preps:
        colour = _ENTRY_COLOURS[(prep.index - 1) % len(_ENTRY_COLOURS)]
        name = f"#{prep.index} {_plot_text(prep.entry.label, 45)}"
        d = prep.entry.calibrated.reliability_diagram(bins=RELIABILITY_BINS, strategy="uniform", cls=None)
        ok = d["count"] > 0
        ax_rel.plot(d["mean_predicted"][ok], d["observed_frequency"][ok], marker="o", ms=3.5, lw=1.3,
                    color=colour, label=name)
        _plot_error_reject(ax_er, prep.entry.calibrated, name, colour, lw=1.3)
    ax_rel.set_xlim(-0.02, 1.02)
    ax_rel.set_ylim(-0.02, 1.02)
    ax_rel.set_xlabel("mean top-label confidence")
    ax_rel.set_ylabel("accuracy")
    ax_rel.set_title("Reliability of the top label (equal-width bins)", fontsize=10)
    ax_rel.legend(loc="upper left", fontsize=7)
    ax_er.set_xlim(-0.01, 1.01)
    ax_er.set_ylim(bottom=0)
    ax_er.set_xlabel("reject rate")
    ax_er.set_ylabel("error rate among accepted")
    ax_er.set_title("Error-reject curves", fontsize=10)
    ax_er.legend(loc="upper right", fontsize=7)
    fig.suptitle("All models, calibrated", fontsize=11)
    return fig


def render_figure(make, *args) -> bytes:
    fig = make(*args)
    try:
        return _png(fig)
    finally:
        fig.clear()


def import_matplotlib():
    try:
        import matplotlib
        import matplotlib.backends.backend_agg  # noqa: F401  (the only backend used)
        import matplotlib.style  # noqa: F401
    except ImportError:
        raise CalengineError(
            "the evaluation report needs matplotlib; install it with: pip install 'calengine[report]'"
        ) from None
    return matplotlib


def entry_figures(prep: PreparedEntry) -> dict[str, list[ReportFigure]]:
    stem = f"model{prep.index:02d}"
    label = prep.entry.label
    targets: list[int | None] = list(prep.classes) + [None]
    reliability = []
    for cls in targets:
        suffix = "top-label" if cls is None else f"class{cls:03d}"
        what = "top-label confidence" if cls is None else f"class {prep.names[cls]} (one-vs-rest)"
        reliability.append(
            ReportFigure(
                f"{stem}-reliability-{suffix}.png",
                render_figure(_reliability_figure, prep, cls),
                f"Reliability diagram of {label}, {what}",
                f"Reliability, {what}.",
            )
        )
    if prep.smooth is not None:
        what = "top-label confidence" if prep.entry.calibrated.n_classes > 2 else f"class {prep.names[1]}"
        reliability.append(
            ReportFigure(
                f"{stem}-reliability-smooth.png",
                render_figure(_smooth_figure, prep),
                f"Smooth reliability diagram of {label}, {what}",
                f"Smooth reliability (relplot's kernel curve and 95 % band), {what}.",
            )
        )
    maps = []
    if prep.map_scores is not None:
        maps.append(
            ReportFigure(f"{stem}-calibration-map.png", render_figure(_map_figure, prep),
                    f"Calibration map of {label}", "Learned calibration map over held-out points.")
        )
    roc = [
        ReportFigure(f"{stem}-roc.png", render_figure(_roc_figure, prep), f"ROC curves and convex hulls of {label}",
                "ROC curve (solid) and convex hull (dashed), calibrated and raw.")
    ]
    er = [
        ReportFigure(f"{stem}-error-reject.png", render_figure(_error_reject_figure, prep),
                f"Error-reject curve of {label}", "Error among accepted examples against reject rate.")
    ]
    out = {"reliability": reliability, "map": maps, "roc": roc, "error_reject": er}
    if prep.entry.decisions is not None and prep.entry.decisions.cost_matrix.n_classes == 2:
        out["decisions"] = [
            ReportFigure(f"{stem}-decisions-threshold.png", render_figure(_decisions_figure, prep),
                    f"Decision threshold curve of {label}",
                    "Total cost or profit of deciding the positive class above each threshold, calibrated and raw.")
        ]
    return out
