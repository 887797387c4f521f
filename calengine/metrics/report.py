"""The evaluation report behind ``calengine evaluate ... --report DIR``: figures plus one HTML page.

Numbers alone do not show *where* a model is miscalibrated, so the report draws, for every evaluated
model (an :class:`ReportEntry`), the pictures Zadrozny & Elkan use to judge probability estimates and
the ROC view of Flach & Matsubara:

* reliability diagrams (observed frequency against mean predicted probability) with equal-width and
  equal-frequency bins, the number of examples per bin drawn underneath, calibrated against the raw
  learner and the diagonal; per class (one-vs-rest) and for the top-label confidence;
* the learned calibration map, score to probability, over held-out points;
* the ROC curve of each class with its convex hull (whose slopes are the isotonic probabilities);
* the error-reject curve (Duin & Tax), error among accepted rows against the fraction rejected;
* one table of every metric of :meth:`MetricAccumulator.result` for all models and their raw learners.

Everything is computed from the exact, merged :class:`~calengine.metrics.measures.MetricAccumulator` of each
model, so the report costs nothing extra on the cluster.

Output contract: ``DIR`` holds one PNG file per figure and ``index.html``.  The page is
self-contained (inline CSS, images embedded as base64 ``data:`` URIs, no script, no external
reference), so it can be mailed or moved alone.  Output is deterministic for a given matplotlib
version: fixed figure sizes and DPI, bundled fonts, matplotlib's default style regardless of the
user's ``matplotlibrc``, no timestamps or software stamps in the PNGs.  The directory appears
atomically (written beside ``DIR`` and renamed), and an existing non-empty ``DIR`` is never touched.
"""

from __future__ import annotations

import base64
import html
import io
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CalengineError, DataError, ParameterError
from .measures import MetricAccumulator

__all__ = ["ReportEntry", "write_report", "format_metric", "MAX_CLASSES", "MAP_MAX_POINTS"]

#: at most this many classes get their own reliability diagram / ROC panel (and calibration-map
#: columns their own panel); beyond it the page says which ones are shown.
MAX_CLASSES = 10

#: the calibration map is drawn from at most this many held-out rows (a seeded subsample beyond).
MAP_MAX_POINTS = 5000

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

_METRIC_HELP = (
    ("n", "number of evaluated examples"),
    ("n_classes", "number of classes"),
    ("brier", "mean squared error of the probabilities (lower is better)"),
    ("log_loss", "mean negative log-probability of the true class, in nats (lower is better)"),
    ("log_loss_bits", "the same in bits"),
    ("auc", "area under the ROC curve; multiclass: mean one-vs-rest AUC (higher is better)"),
    ("error_rate", "fraction misclassified by the most probable class"),
    ("ece", "expected calibration error of the top-label confidence, 15 equal-width bins"),
    ("mce", "largest calibration gap over those bins"),
    ("calibration_loss", "part of the Brier score due to miscalibration (exact, no binning)"),
    ("refinement_loss", "part of the Brier score due to limited separation; the two add up to brier"),
    ("confidence_q", "Duin & Tax: mean squared gap between confidence and correctness"),
    ("confidence_rho", "confidence_q / error_rate - 1/2 (n/a without errors)"),
    ("corp_brier.mcb", "CORP miscalibration: Brier score minus that of the isotonic (PAV) recalibration of the "
     "forecasts; meaningful for continuous scores, unlike calibration_loss"),
    ("corp_brier.dsc", "CORP discrimination: Brier score of the base rate minus that of the recalibration"),
    ("corp_brier.unc", "CORP uncertainty: Brier score of the base rate; brier = mcb - dsc + unc"),
    ("corp_log_loss.*", "the same for the log loss (binary: the reported log_loss; multiclass: sums of "
     "one-vs-rest binary log losses, as corp_brier sums one-vs-rest Brier scores)"),
)


@dataclass
class ReportEntry:
    """One evaluated model on the report page.

    ``label`` names it everywhere (it is HTML-escaped, so any text is safe).  ``calibrated`` holds the
    model's probabilities, ``raw`` those of its uncalibrated learner when the model can produce them
    (drawn for comparison), ``class_names`` one display name per class index.  ``calibration_map``, when
    given, is ``{"scores": (m, l), "probabilities": (m, l), "column_names": [l names]}``: the learner's
    held-out score and the calibrated probability of each binary column the calibrator fitted (one
    column per class for one-vs-rest, one per code-matrix column otherwise); rows beyond
    :data:`MAP_MAX_POINTS` are subsampled deterministically.
    """

    label: str
    calibrated: MetricAccumulator
    raw: MetricAccumulator | None
    class_names: list[str]
    calibration_map: dict | None = None
    #: a :class:`calengine.decisions.DecisionAccumulator` (``evaluate --cost-matrix``): adds a
    #: "Decisions" block, with the profit-vs-threshold curve for two classes
    decisions: Any = None
    #: the drift check of the calibrated probabilities (:meth:`MetricAccumulator.drift_check`), shown
    #: with its verdict when given
    drift: dict | None = None
    #: the model's ``lineage`` record (models written by ``calengine recalibrate``): one line saying
    #: which model it was recalibrated from, on which data and when
    lineage: dict | None = None


# --------------------------------------------------------------------------------------------------
# validation


@dataclass
class _Prepared:
    """A validated entry plus everything derived once (results, classes to draw, map arrays)."""

    index: int
    entry: ReportEntry
    names: list[str]
    result: dict
    raw_result: dict | None
    classes: list[int]  # class indices that get per-class panels
    class_note: str  # non-empty when the classes were capped
    map_scores: np.ndarray | None = None
    map_probs: np.ndarray | None = None
    map_names: list[str] = field(default_factory=list)
    map_note: str = ""
    map_band: dict | None = None  # bootstrap band of column 0 (see calengine.metrics.bootstrap)


def format_metric(value: Any) -> str:
    """A metric value for display: integers as such, floats to 6 significant digits, NaN/None as n/a."""
    if value is None:
        return "n/a"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    v = float(value)
    if math.isnan(v):
        return "n/a"
    return f"{v:.6g}"


def _check_out_dir(out_dir: Path) -> None:
    if out_dir.exists():
        if not out_dir.is_dir():
            raise DataError(f"report path '{out_dir}' is a file; choose a new directory for the report")
        if any(out_dir.iterdir()):
            raise DataError(
                f"report directory '{out_dir}' already exists and is not empty; "
                "choose a new directory or remove it first"
            )


def _positives_per_class(acc: MetricAccumulator) -> list[int]:
    """Examples of each class, read back through the public one-bin reliability diagram."""
    out = []
    for c in range(acc.n_classes):
        d = acc.reliability_diagram(bins=1, strategy="uniform", cls=c)
        out.append(int(round(float(d["observed_frequency"][0]) * int(d["count"][0]))))
    return out


def _choose_classes(acc: MetricAccumulator, names: list[str]) -> tuple[list[int], str]:
    """Classes with their own panels: the positive class when binary, else up to MAX_CLASSES."""
    k = acc.n_classes
    if k == 2:
        return [1], ""
    if k <= MAX_CLASSES:
        return list(range(k)), ""
    counts = _positives_per_class(acc)
    top = sorted(sorted(range(k), key=lambda c: (-counts[c], c))[:MAX_CLASSES])
    shown = ", ".join(names[c] for c in top)
    return top, (
        f"This model has {k} classes; per-class panels are capped at {MAX_CLASSES} and show the "
        f"{MAX_CLASSES} most frequent: {shown}."
    )


def _prepare_map(prep: _Prepared, cmap: Any) -> None:
    if not isinstance(cmap, dict) or not {"scores", "probabilities", "column_names"} <= set(cmap):
        raise ParameterError(
            f"entry {prep.index} ('{prep.entry.label}'): calibration_map must be a dict with keys "
            "'scores', 'probabilities' and 'column_names', or None"
        )
    try:
        scores = np.asarray(cmap["scores"], dtype=np.float64)
        probs = np.asarray(cmap["probabilities"], dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ParameterError(
            f"entry {prep.index} ('{prep.entry.label}'): calibration_map arrays must be numeric ({exc})"
        ) from None
    if scores.ndim == 1:
        scores = scores[:, None]
    if probs.ndim == 1:
        probs = probs[:, None]
    names = [str(c) for c in cmap["column_names"]]
    if scores.ndim != 2 or scores.shape != probs.shape or scores.shape[1] != len(names):
        raise ParameterError(
            f"entry {prep.index} ('{prep.entry.label}'): calibration_map scores {scores.shape} and "
            f"probabilities {probs.shape} must have the same (m, l) shape with l = {len(names)} column names"
        )
    m, l = scores.shape
    if m > MAP_MAX_POINTS:
        keep = np.sort(np.random.default_rng(0).choice(m, MAP_MAX_POINTS, replace=False))
        scores, probs = scores[keep], probs[keep]
    notes = []
    if m > MAP_MAX_POINTS:
        notes.append(f"Drawn from a fixed random subsample of {MAP_MAX_POINTS} of the {m} held-out rows.")
    if l > MAX_CLASSES:
        notes.append(f"The calibrator has {l} columns; the first {MAX_CLASSES} are shown.")
        scores, probs, names = scores[:, :MAX_CLASSES], probs[:, :MAX_CLASSES], names[:MAX_CLASSES]
    prep.map_scores, prep.map_probs, prep.map_names = scores, probs, names
    prep.map_note = " ".join(notes)
    if cmap.get("band") is not None:
        prep.map_band = _checked_band(prep, cmap["band"])
        band = prep.map_band
        prep.map_note = " ".join(filter(None, [prep.map_note, (
            f"Shaded: {band['level']:.0%} pointwise bootstrap band of the calibrator refitted on {band['B']}"
            f" resamples of the {band['n']} evaluated rows (seed {band['seed']}); where the model's map leaves"
            " it, the evaluated data disagree with the map.")]))


def _checked_band(prep: _Prepared, band: Any) -> dict:
    """A calibration-map band (``grid``, ``low``, ``high`` arrays of one length; ``B``, ``level``, ``n``)."""
    where = f"entry {prep.index} ('{prep.entry.label}')"
    try:
        arrays = {k: np.asarray(band[k], dtype=np.float64) for k in ("grid", "low", "high")}
        meta = {"B": int(band["B"]), "level": float(band["level"]), "n": int(band["n"]),
                "seed": int(band.get("seed", 0))}
    except (KeyError, TypeError, ValueError) as exc:
        raise ParameterError(
            f"{where}: calibration_map['band'] must hold grid, low, high, B, level and n ({exc})"
        ) from None
    g = arrays["grid"]
    if g.ndim != 1 or any(a.shape != g.shape for a in arrays.values()) or g.size == 0:
        raise ParameterError(f"{where}: calibration_map['band'] grid, low and high must be 1-D of one length")
    return {**arrays, **meta}


def _prepare(entries: Any) -> list[_Prepared]:
    if not isinstance(entries, (list, tuple)) or not entries:
        raise ParameterError("write_report needs a non-empty list of ReportEntry; evaluate at least one model")
    out = []
    for i, entry in enumerate(entries, start=1):
        if not isinstance(entry, ReportEntry):
            raise ParameterError(f"entry {i} is a {type(entry).__name__}, not a ReportEntry")
        where = f"entry {i} ('{entry.label}')"
        cal, raw = entry.calibrated, entry.raw
        if not isinstance(cal, MetricAccumulator):
            raise ParameterError(f"{where}: calibrated must be a MetricAccumulator")
        if raw is not None and not isinstance(raw, MetricAccumulator):
            raise ParameterError(f"{where}: raw must be a MetricAccumulator or None")
        if raw is not None and raw.n_classes != cal.n_classes:
            raise ParameterError(
                f"{where}: raw has {raw.n_classes} classes but calibrated has {cal.n_classes}; "
                "pass accumulators of the same evaluation"
            )
        if cal.n == 0 or (raw is not None and raw.n == 0):
            raise DataError(f"{where} has no evaluated rows; evaluate on a non-empty table")
        names = [str(c) for c in entry.class_names]
        if len(names) != cal.n_classes:
            raise ParameterError(
                f"{where}: {len(names)} class names for {cal.n_classes} classes; pass one name per class"
            )
        classes, note = _choose_classes(cal, names)
        prep = _Prepared(
            index=i,
            entry=entry,
            names=names,
            result=cal.result(),
            raw_result=raw.result() if raw is not None else None,
            classes=classes,
            class_note=note,
        )
        if entry.calibration_map is not None:
            _prepare_map(prep, entry.calibration_map)
        out.append(prep)
    return out


# --------------------------------------------------------------------------------------------------
# figures


@dataclass
class _Figure:
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


def _compact_count(c: int) -> str:
    if c < 10_000:
        return str(c)
    if c < 10_000_000:
        return f"{c / 1000:.0f}k"
    return f"{c / 1e6:.0f}M"


def _diagram_title(cls: int | None, names: list[str]) -> str:
    if cls is None:
        return "top-label confidence (accuracy of the predicted class)"
    return f"class {_plot_text(names[cls], 40)} (one-vs-rest)"


def _reliability_figure(prep: _Prepared, cls: int | None):
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
        max_count = 1
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
            max_count = max(max_count, int(d["count"].max()))
        if cls is not None:  # the CORP curve: PAV recalibration of the calibrated column, no bins
            c = cal.corp_curve(cls)
            ax.plot(np.concatenate((c["lo"], c["hi"][-1:])), np.concatenate((c["value"], c["value"][-1:])),
                    drawstyle="steps-post", color=_CORP, lw=1.0, label="calibrated, CORP (isotonic)")
        edges, widths, counts = cal_bins
        last_x = -1.0
        for lo, w, c in zip(edges[:-1], widths, counts):
            x = lo + w / 2
            if c > 0 and x - last_x >= 0.045:  # leave out labels that would overlap their neighbour
                axc.text(x, c, " " + _compact_count(int(c)), rotation=90, ha="center", va="bottom",
                         fontsize=6.5, color="#0b3d66")
                last_x = x
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(name, fontsize=10)
        ax.set_ylabel(observed)
        ax.tick_params(labelbottom=False)
        ax.legend(loc="upper left", fontsize=8, frameon=True)
        axc.set_ylim(0, max_count * 1.55)
        axc.set_xlabel(predicted)
        axc.set_ylabel("examples per bin", fontsize=8)
        axc.tick_params(labelsize=7)
    fig.suptitle(f"Reliability: {_diagram_title(cls, prep.names)}", fontsize=11)
    return fig


def _roc_figure(prep: _Prepared):
    """One panel per shown class: ROC curve (solid) and its upper convex hull (dashed), both models."""
    from .roc import convex_hull_vertices

    cal, raw = prep.entry.calibrated, prep.entry.raw
    classes = prep.classes
    fig, axes = _panel_grid(len(classes), panel=4.2 if len(classes) == 1 else 3.3)
    for ax, c in zip(axes, classes):
        ax.plot([0, 1], [0, 1], ls=":", color=_DIAG, lw=1.0)
        drawn = False
        for acc, label, colour in ((raw, "raw", _RAW), (cal, "calibrated", _CAL)):
            if acc is None:
                continue
            r = acc.roc_curve(cls=c)
            fpr, tpr = r["fpr"], r["tpr"]
            if np.isnan(fpr).any() or np.isnan(tpr).any():
                continue
            hull = convex_hull_vertices(fpr, tpr)
            area = float(np.trapezoid(tpr, fpr))
            hull_area = float(np.trapezoid(tpr[hull], fpr[hull]))
            keep = _thin(fpr.size, hull)
            ax.plot(fpr[keep], tpr[keep], color=colour, lw=1.4, label=f"{label} (AUC {area:.4f})")
            ax.plot(fpr[hull], tpr[hull], color=colour, lw=1.0, ls="--", marker=".", ms=3,
                    label=f"{label} hull (AUC {hull_area:.4f})")
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


def _error_reject_figure(prep: _Prepared):
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


def _plot_error_reject(ax, acc: MetricAccumulator, label: str, colour: str, lw: float = 1.4) -> None:
    d = acc.error_reject_curve()
    ok = ~np.isnan(d["error_rate"])
    x, y = d["reject_rate"][ok], d["error_rate"][ok]
    keep = _thin(x.size)
    ax.plot(x[keep], y[keep], color=colour, lw=lw, label=f"{label} (error {y[0]:.4g} at no reject)")


def _decisions_figure(prep: _Prepared):
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


def _decisions_table(prep: _Prepared) -> str:
    res = prep.entry.decisions.result()
    what = res["objective"]
    rows = [("calibrated model", res["calibrated"]), ("raw learner", res["raw"]),
            (f"best constant (always {res['best_constant']['class']})", res["best_constant"]),
            ("oracle (knows the class)", res["oracle"])]
    body = "".join(
        f"<tr><td>{_esc(name)}</td><td class=\"num\">{_esc(format_metric(r['total']))}</td>"
        f"<td class=\"num\">{_esc(format_metric(r['mean']))}</td></tr>"
        for name, r in rows if r is not None
    )
    return (f'<div class="scroll"><table><tr><th>policy</th><th>total {_esc(what)}</th><th>{_esc(what)} per row</th></tr>'
            f"{body}</table></div>")


def _map_figure(prep: _Prepared):
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


def _overview_figure(preps: list[_Prepared]):
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


def _render(make, *args) -> bytes:
    fig = make(*args)
    try:
        return _png(fig)
    finally:
        fig.clear()


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
td.num{text-align:right;font-variant-numeric:tabular-nums;font-family:ui-monospace,"DejaVu Sans Mono",monospace}
th.model{max-width:22em;overflow-wrap:anywhere}
details{margin:.6em 0}
summary{cursor:pointer;color:#0b5cad}
.bins{display:flex;flex-wrap:wrap;gap:14px;margin-top:6px}
dl.help{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;font-size:.88em}
dl.help dt{font-family:ui-monospace,"DejaVu Sans Mono",monospace}
dl.help dd{margin:0;color:#57606a}
footer{color:#57606a;font-size:.85em;padding-bottom:24px;margin-top:2em}
"""


_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _img(fig: _Figure) -> str:
    width, height = fig.size
    data = base64.b64encode(fig.png).decode("ascii")
    return (
        f'<figure><img src="data:image/png;base64,{data}" width="{width}" height="{height}" '
        f'alt="{_esc(fig.alt)}"><figcaption>{_esc(fig.caption)} '
        f"<span class=\"note\">({_esc(fig.filename)})</span></figcaption></figure>"
    )


def _flat_result(r: dict | None) -> dict | None:
    """Nested metrics (the CORP terms) as ``corp_brier.mcb``-style rows; per-class lists left out."""
    if r is None:
        return None
    out: dict = {}
    for key, value in r.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items() if not isinstance(v, (list, dict))})
        else:
            out[key] = value
    return out


def _metrics_table(preps: list[_Prepared]) -> str:
    keys: list[str] = []
    for prep in preps:
        for r in (_flat_result(prep.result), _flat_result(prep.raw_result)):
            for key in r or {}:
                if key not in keys:
                    keys.append(key)
    top = ['<th rowspan="2">metric</th>']
    sub = []
    columns: list[dict] = []
    for prep in preps:
        span = 2 if prep.raw_result is not None else 1
        top.append(f'<th class="model" colspan="{span}">#{prep.index} {_esc(prep.entry.label)}</th>')
        sub.append("<th>calibrated</th>")
        columns.append(_flat_result(prep.result))
        if prep.raw_result is not None:
            sub.append("<th>raw learner</th>")
            columns.append(_flat_result(prep.raw_result))
    rows = []
    for key in keys:
        cells = "".join(f'<td class="num">{_esc(format_metric(col.get(key)))}</td>' for col in columns)
        rows.append(f"<tr><th>{_esc(key)}</th>{cells}</tr>")
    return (
        '<div class="scroll"><table id="metrics-table"><thead>'
        f"<tr>{''.join(top)}</tr><tr>{''.join(sub)}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _bin_table(acc: MetricAccumulator, cls: int | None, strategy: str, heading: str) -> str:
    d = acc.reliability_diagram(bins=RELIABILITY_BINS, strategy=strategy, cls=cls)
    edges = d["bin_edges"]
    rows = []
    for j in range(RELIABILITY_BINS):
        cells = (j + 1, edges[j], edges[j + 1], d["mean_predicted"][j], d["observed_frequency"][j], d["count"][j])
        rows.append("<tr>" + "".join(f'<td class="num">{_esc(format_metric(v))}</td>' for v in cells) + "</tr>")
    return (
        f"<table><caption>{_esc(heading)}</caption><thead><tr><th>bin</th><th>from</th><th>to</th>"
        "<th>mean predicted</th><th>observed</th><th>count</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _drift_html(drift: dict, names: list[str]) -> str:
    """The drift check's verdict, its summary line and one row per tested column."""
    from .drift import drift_line

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
    """One sentence from a model's ``lineage`` record: what it was recalibrated from, on what, when."""
    parent = lineage.get("parent") or {}
    data = lineage.get("data") or {}
    how = "statistics updated" if lineage.get("mode") == "update" else "calibrators refitted"
    forget = lineage.get("forget")
    if lineage.get("mode") == "update" and forget not in (None, 1.0):
        how += f" (old weights x {forget:g})"
    paths = data.get("paths") or []
    where = paths[0] if len(paths) == 1 else f"{len(paths)} files"
    digest = str(parent.get("content_hash") or "")[:12]
    return (f"Recalibrated ({how}) from {parent.get('path') or 'a model in memory'}"
            + (f" (content hash {digest})" if digest else "")
            + f" on {data.get('rows', '?')} rows of {where}, {lineage.get('time', '')}.")


def _entry_section(prep: _Prepared, figs: dict[str, list[_Figure]]) -> str:
    e = prep.entry
    k = e.calibrated.n_classes
    parts = [
        f'<section id="entry-{prep.index}"><h2>#{prep.index} {_esc(e.label)}</h2>',
        f'<p class="note">{_esc(e.calibrated.n)} examples, {k} classes: '
        f"{_esc(', '.join(prep.names))}."
        + ("" if e.raw is not None else " The raw learner's probabilities were not available.")
        + "</p>",
        "<h3>Reliability diagrams</h3>",
        '<p class="note">Observed frequency against mean predicted probability per bin; points on the '
        "dotted diagonal are perfectly calibrated. Left: equal-width bins; right: equal-frequency bins. "
        "The bars below count the examples in each bin (filled: calibrated, outlined: raw learner). "
        "Per class, the green steps are the CORP curve: the isotonic recalibration of the calibrated "
        "probabilities, which needs no bins; the Brier score lost to its gap from the diagonal is corp_brier.mcb.</p>",
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
            tables.append(_bin_table(acc, primary, strategy, f"{who}, {name} bins"))
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
    parts.append("</section>")
    return "\n".join(parts)


def _page(title: str, preps: list[_Prepared], overview: _Figure | None, figs: dict[int, dict]) -> str:
    from ..version import __version__

    nav = "".join(
        f'<li><a href="#entry-{p.index}">#{p.index} {_esc(p.entry.label)}</a></li>' for p in preps
    )
    help_rows = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in _METRIC_HELP)
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
        '<p class="note">Every metric of each model and of its raw (uncalibrated) learner; '
        "6 significant digits, n/a where undefined.</p>",
        _metrics_table(preps),
        f"<details><summary>What the metrics mean</summary><dl class=\"help\">{help_rows}</dl></details>",
        "</section>",
    ]
    if overview is not None:
        body.append(f'<section id="overview"><h2>All models together</h2><div class="figs">{_img(overview)}</div></section>')
    for prep in preps:
        body.append(_entry_section(prep, figs[prep.index]))
    body.append(f"</main><footer>Written by calengine {_esc(__version__)}.</footer></body></html>")
    return "\n".join(body) + "\n"


# --------------------------------------------------------------------------------------------------
# entry point


def _import_matplotlib():
    try:
        import matplotlib
        import matplotlib.backends.backend_agg  # noqa: F401  (the only backend used)
        import matplotlib.style  # noqa: F401
    except ImportError:
        raise CalengineError(
            "the evaluation report needs matplotlib; install it with: pip install 'calengine[report]'"
        ) from None
    return matplotlib


def _entry_figures(prep: _Prepared) -> dict[str, list[_Figure]]:
    stem = f"model{prep.index:02d}"
    label = prep.entry.label
    targets: list[int | None] = list(prep.classes) + [None]
    reliability = []
    for cls in targets:
        suffix = "top-label" if cls is None else f"class{cls:03d}"
        what = "top-label confidence" if cls is None else f"class {prep.names[cls]} (one-vs-rest)"
        reliability.append(
            _Figure(
                f"{stem}-reliability-{suffix}.png",
                _render(_reliability_figure, prep, cls),
                f"Reliability diagram of {label}, {what}",
                f"Reliability, {what}.",
            )
        )
    maps = []
    if prep.map_scores is not None:
        maps.append(
            _Figure(f"{stem}-calibration-map.png", _render(_map_figure, prep),
                    f"Calibration map of {label}", "Learned calibration map over held-out points.")
        )
    roc = [
        _Figure(f"{stem}-roc.png", _render(_roc_figure, prep), f"ROC curves and convex hulls of {label}",
                "ROC curve (solid) and convex hull (dashed), calibrated and raw.")
    ]
    er = [
        _Figure(f"{stem}-error-reject.png", _render(_error_reject_figure, prep),
                f"Error-reject curve of {label}", "Error among accepted examples against reject rate.")
    ]
    out = {"reliability": reliability, "map": maps, "roc": roc, "error_reject": er}
    if prep.entry.decisions is not None and prep.entry.decisions.cost_matrix.n_classes == 2:
        out["decisions"] = [
            _Figure(f"{stem}-decisions-threshold.png", _render(_decisions_figure, prep),
                    f"Decision threshold curve of {label}",
                    "Total cost or profit of deciding the positive class above each threshold, calibrated and raw.")
        ]
    return out


def write_report(out_dir: str | Path, entries: list[ReportEntry], title: str = "calengine evaluation") -> Path:
    """Write the evaluation report of ``entries`` into the new directory ``out_dir``; return its index.html.

    ``out_dir`` must not exist or be an empty directory, otherwise :class:`DataError` is raised before
    anything is computed.  The directory gains one PNG per figure and ``index.html`` (which embeds the
    same images, so it also works alone) at once, by renaming a staging directory written beside it;
    on failure nothing is left behind.  Invalid entries raise :class:`ParameterError` (or
    :class:`DataError` for an accumulator without rows); a missing matplotlib raises
    :class:`CalengineError` naming the package to install.
    """
    from ..parquet.data import staged_directory

    target = Path(out_dir)
    _check_out_dir(target)
    preps = _prepare(entries)
    matplotlib = _import_matplotlib()

    rc = {
        "font.family": "DejaVu Sans",
        "font.size": 9,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "figure.facecolor": "white",
        "savefig.facecolor": "white",
        "agg.path.chunksize": 20000,
    }
    with matplotlib.style.context("default"), matplotlib.rc_context(rc):
        figs = {prep.index: _entry_figures(prep) for prep in preps}
        overview = None
        if len(preps) > 1:
            overview = _Figure("overview.png", _render(_overview_figure, preps),
                               "Top-label reliability and error-reject curves of all models",
                               "All models: top-label reliability and error-reject curves (calibrated).")
    page = _page(str(title), preps, overview, figs)

    with staged_directory(target) as staging:
        all_figs = [overview] if overview is not None else []
        for prep in preps:
            for group in figs[prep.index].values():
                all_figs.extend(group)
        for fig in all_figs:
            (staging / fig.filename).write_bytes(fig.png)
        (staging / "index.html").write_text(page, encoding="utf-8")
    return target.resolve() / "index.html"
