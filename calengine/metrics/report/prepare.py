"""Validation and the per-entry numbers a report draws, computed once before any figure.

:func:`prepare_entries` checks every :class:`ReportEntry` (accumulators with rows, class names, the calibration
map's shapes, the bootstrap band) and derives what both the figures (:mod:`.figures`) and the page
(:mod:`.page`) read: the metric results, the classes that get their own panels (at most
:data:`MAX_CLASSES`) and the subsampled map arrays (at most :data:`MAP_MAX_POINTS` rows).  Nothing here
imports matplotlib, so a bad entry is refused before the plotting library is even looked for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import DataError, ParameterError
from ..measures import MetricAccumulator
from ..ranged.engine import RangedTables

#: what an entry's ``calibrated``/``raw`` may be: an in-memory accumulator, or the score ranges of a
#: large evaluation (``evaluate --report`` from RANGED_MIN_ROWS rows on), read while they live
_ACCUMULATORS = (MetricAccumulator, RangedTables)

#: at most this many classes get their own reliability diagram / ROC panel (and calibration-map
#: columns their own panel); beyond it the page says which ones are shown.
MAX_CLASSES = 10

#: the calibration map is drawn from at most this many held-out rows (a seeded subsample beyond).
MAP_MAX_POINTS = 5000


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
    #: ``evaluate --by``: :meth:`calengine.metrics.segments.SegmentAccumulator.result`, shown as a table
    segments: dict | None = None
    #: ``evaluate --prior-shift``: :func:`calengine.metrics.prior_shift.prior_shift_table`, shown as a table
    prior_shift: dict | None = None
    #: ``evaluate --weight COL``: the weight column the accumulators were weighted by; the page and the
    #: figures then say "weight" where they say "examples" (bars and bin tables sum the weights)
    weight: str | None = None
    #: this model's object of ``evaluate --json`` (one payload of
    #: :meth:`calengine.metrics.evaluation.Evaluation.to_json`, ``raw`` included): the metric table shows
    #: every key of it (:mod:`.catalogue`).  None: the accumulators' metrics and calibration suite.
    payload: dict | None = None


# --------------------------------------------------------------------------------------------------
# validation


@dataclass
class PreparedEntry:
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
    #: the JSON object the metric table lists (``entry.payload``, or derived from the accumulators)
    payload: dict = field(default_factory=dict)
    #: relplot's smooth reliability curve and band of the calibrated (and raw) probabilities
    #: (:meth:`MetricAccumulator.smooth_reliability`), or None where it is undefined
    smooth: dict | None = None
    raw_smooth: dict | None = None


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


def check_out_dir(out_dir: Path) -> None:
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


def _prepare_map(prep: PreparedEntry, cmap: Any) -> None:
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


def _checked_band(prep: PreparedEntry, band: Any) -> dict:
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


def prepare_entries(entries: Any) -> list[PreparedEntry]:
    if not isinstance(entries, (list, tuple)) or not entries:
        raise ParameterError("write_report needs a non-empty list of ReportEntry; evaluate at least one model")
    out = []
    for i, entry in enumerate(entries, start=1):
        if not isinstance(entry, ReportEntry):
            raise ParameterError(f"entry {i} is a {type(entry).__name__}, not a ReportEntry")
        where = f"entry {i} ('{entry.label}')"
        cal, raw = entry.calibrated, entry.raw
        if not isinstance(cal, _ACCUMULATORS):
            raise ParameterError(f"{where}: calibrated must be a MetricAccumulator")
        if raw is not None and not isinstance(raw, _ACCUMULATORS):
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
        prep = PreparedEntry(
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
        _prepare_payload(prep, where)
        prep.smooth = _smooth(cal, prep.payload.get("smece_sigma"))
        raw_payload = prep.payload.get("raw")
        if raw is not None and isinstance(raw_payload, dict):
            prep.raw_smooth = _smooth(raw, raw_payload.get("smece_sigma"))
        out.append(prep)
    return out


def _prepare_payload(prep: PreparedEntry, where: str) -> None:
    """The entry's ``evaluate --json`` object, or the same keys from its accumulators (the metrics and
    the calibration suite; ``raw`` for the raw learner) when it was made without ``evaluate``."""
    entry = prep.entry
    if entry.payload is not None:
        if not isinstance(entry.payload, dict):
            raise ParameterError(f"{where}: payload must be the model's evaluate --json object (a dict), or None")
        prep.payload = entry.payload
        return
    payload = {**prep.result, **entry.calibrated.calibration_suite()}
    if entry.raw is not None:
        payload["raw"] = {**prep.raw_result, **entry.raw.calibration_suite()}
    if entry.drift is not None:
        payload["drift"] = entry.drift
    prep.payload = payload


def _smooth(acc, sigma) -> dict | None:
    """The smooth reliability curve at the smooth ECE's bandwidth; None where the ECE is undefined."""
    if not isinstance(sigma, (int, float)) or isinstance(sigma, bool) or not math.isfinite(sigma) or sigma <= 0:
        return None
    return acc.smooth_reliability(float(sigma))
