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
* the smooth reliability diagram of Błasiok & Nakkiran (relplot's kernel curve with its band), beside the
  binned ones;
* one table of every key of ``evaluate --json`` for all models and their raw learners, grouped and
  explained (:mod:`.catalogue`).

Everything is computed from the exact, merged :class:`~calengine.metrics.measures.MetricAccumulator` of each
model, or, for a large evaluation, from its tables cut into score ranges
(:class:`~calengine.metrics.ranged.engine.RangedTables`, read while the evaluation runs: the curves of
:mod:`calengine.metrics.ranged.curves`), so the report costs nothing extra on the cluster and no whole
table in this process.

Output contract: ``DIR`` holds one PNG file per figure and ``index.html``.  The page is
self-contained (inline CSS, images embedded as base64 ``data:`` URIs, no script, no external
reference), so it can be mailed or moved alone.  Output is deterministic for a given matplotlib
version: fixed figure sizes and DPI, bundled fonts, matplotlib's default style regardless of the
user's ``matplotlibrc``, no timestamps or software stamps in the PNGs.  The directory appears
atomically (written beside ``DIR`` and renamed), and an existing non-empty ``DIR`` is never touched.

The package reads in the order a report is made: :mod:`.prepare` validates the entries and derives
their numbers, :mod:`.figures` draws them, :mod:`.page` lays out the HTML, and :func:`write_report`
here runs the three and publishes the directory.

Modules:

* :mod:`.catalogue`: Every key of ``evaluate --json``, grouped and explained: what the report's metric table shows.
* :mod:`.figures`: The report's figures.
* :mod:`.page`: The report's HTML page.
* :mod:`.prepare`: Validation and the per-entry numbers a report draws, computed once before any figure.
* :mod:`.text`: The metrics as a terminal shows them.
"""

from __future__ import annotations

from pathlib import Path

from .figures import entry_figures, ReportFigure, import_matplotlib, overview_figure, render_figure
from .page import render_page, lineage_text
from .prepare import MAP_MAX_POINTS, MAX_CLASSES, ReportEntry, check_out_dir, prepare_entries, format_metric

__all__ = ["ReportEntry", "write_report", "format_metric", "lineage_text", "MAX_CLASSES", "MAP_MAX_POINTS"]

def write_report(out_dir: str | Path, entries: list[ReportEntry], title: str = "calengine evaluation") -> Path:
    """Write the evaluation report of ``entries`` into the new directory ``out_dir``; return its index.html.

    ``out_dir`` must not exist or be an empty directory, otherwise :class:`DataError` is raised before
    anything is computed.  The directory gains one PNG per figure and ``index.html`` (which embeds the
    same images, so it also works alone) at once, by renaming a staging directory written beside it;
    on failure nothing is left behind.  Invalid entries raise :class:`ParameterError` (or
    :class:`DataError` for an accumulator without rows); a missing matplotlib raises
    :class:`CalengineError` naming the package to install.
    """
    from ...parquet.data import staged_directory

    target = Path(out_dir)
    check_out_dir(target)
    preps = prepare_entries(entries)
    matplotlib = import_matplotlib()

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
        figs = {prep.index: entry_figures(prep) for prep in preps}
        overview = None
        if len(preps) > 1:
            overview = ReportFigure("overview.png", render_figure(overview_figure, preps),
                               "Top-label reliability and error-reject curves of all models",
                               "All models: top-label reliability and error-reject curves (calibrated).")
    page = render_page(str(title), preps, overview, figs)

    with staged_directory(target) as staging:
        all_figs = [overview] if overview is not None else []
        for prep in preps:
            for group in figs[prep.index].values():
                all_figs.extend(group)
        for fig in all_figs:
            (staging / fig.filename).write_bytes(fig.png)
        (staging / "index.html").write_text(page, encoding="utf-8")
    return target.resolve() / "index.html"
