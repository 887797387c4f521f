"""Calibration per segment: ``calengine evaluate --by COL[,COL...]`` (issue 25 §2).

A model calibrated on average can be badly off for one country or one device type.  For every value
of every ``--by`` column (each column on its own, the union of their segments, as MCGrad's
multicalibration error takes them), plus the whole table, this measures: rows and weight, mean
prediction and outcome, log loss and Brier score, the ECE on 16 equal-width and on 16 equal-mass bins,
Spiegelhalter's z with its p-value, the ECCE on the sigma scale (the range of the cumulative
differences ``Σ (y - p)`` over the rows sorted by ``p``, over ``sqrt(Σ p (1 - p))``; Arrieta-Ibarra
et al. 2022) with its p-value, and Holm's correction of both p-values over the segments.  The
multicalibration error of MCGrad (Guy et al. 2025, "Measuring multi-calibration") is the largest
segment ECCE on the sigma scale, with its p-value.

Which probability: for two classes, the positive class's; for more, the top label's (the largest
probability against "the predicted class is right"), as calengine's ``ece`` does.  Log loss and Brier
score use the whole probability vector.

How it scales: the sums ride on ``evaluate``'s own pass (:func:`calengine.metrics.table.evaluate_chunk`
adds each batch's rows to a chunk's accumulator with the probabilities it scored for the metrics), so
a row is read and scored once for both.  Every statistic is a sum over rows, kept per segment and per cell of a
:data:`GRID`-cell grid of the probability, so a chunk's accumulator is a few arrays and merging adds
them (any chunking gives the same sums up to float addition order; the chunks are merged in a fixed
order).  The number of segments is bounded by ``max_segments`` (one line naming the column that
exceeds it).  The price: the ECCE's cumulative differences are taken at the grid's cell boundaries,
not after every row, so the range can be smaller than the row-by-row one by at most the largest
``|Σ (y - p)|`` inside one cell (1/1024 of the probability axis), and the equal-mass bins are made of
whole cells.  The equal-width ECE is exact (its bins are unions of 64 cells).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import DataError
# the bounds of ``by`` and ``max_segments`` are options of a fit too: they live with the others
from ..plan.options import DEFAULT_MAX_SEGMENTS, MAX_SEGMENTS_LIMIT, check_segment_options

__all__ = ["SegmentAccumulator", "format_segments", "check_segment_options", "holm", "GRID", "ECE_BINS",
           "DEFAULT_MAX_SEGMENTS", "MAX_SEGMENTS_LIMIT"]

#: cells of the probability grid each segment keeps (a power of two: cell boundaries are exact floats)
GRID = 1024
#: bins of the equal-width and equal-mass ECE (divides GRID)
ECE_BINS = 16
#: MAX_SEGMENTS_LIMIT, the largest max_segments: an accumulator holds 3 x GRID floats a segment (24 KiB)
_EPS = 1e-15
#: the whole table's key
ALL = ("(all)", "(all)")
_SCALARS = ("rows", "weight", "wy", "wp", "log_loss", "brier", "sz_num", "sz_den", "var")


@dataclass
class SegmentAccumulator:
    """Per-segment sums (module docstring).  ``keys[i]`` is ``(column, value)`` of segment ``i``;
    ``scalars[name][i]`` its sums, ``cells[name][i]`` its per-cell sums (``w``, ``wy``, ``wp``)."""

    by: tuple[str, ...]
    n_classes: int
    max_segments: int = DEFAULT_MAX_SEGMENTS
    keys: list = field(default_factory=list)
    scalars: dict = field(default_factory=dict)
    cells: dict = field(default_factory=dict)

    def __post_init__(self):
        self._index = {k: i for i, k in enumerate(self.keys)}
        if not self.scalars:
            self.scalars = {k: np.zeros(0) for k in _SCALARS}
            self.cells = {k: np.zeros((0, GRID)) for k in ("w", "wy", "wp")}

    # ------------------------------------------------------------------ building
    def _ids(self, keys: list) -> np.ndarray:
        new = [k for k in keys if k not in self._index]
        if new:
            if len(self.keys) + len(new) > self.max_segments + 1:  # + the whole table
                col = new[0][0]
                raise DataError(
                    f"by column '{col}' makes more than {self.max_segments} segments; segment over a column with"
                    f" fewer values (e.g. an age band rather than the age) or raise max_segments (at most"
                    f" {MAX_SEGMENTS_LIMIT})", parameter=("by", "max_segments")
                )
            for k in new:
                self._index[k] = len(self.keys)
                self.keys.append(k)
            grow = len(new)
            self.scalars = {k: np.concatenate((v, np.zeros(grow))) for k, v in self.scalars.items()}
            self.cells = {k: np.concatenate((v, np.zeros((grow, GRID)))) for k, v in self.cells.items()}
        return np.array([self._index[k] for k in keys], dtype=np.intp)

    def add(self, segments: dict, y: np.ndarray, P: np.ndarray, w: np.ndarray | None = None) -> None:
        """Add rows: ``segments`` maps each ``by`` column to its values (one per row: an array or a
        pandas Series), ``y`` the class indices, ``P`` the (n, k) probabilities, ``w`` the weights (None: 1)."""
        n = y.shape[0]
        if n == 0:
            return
        P = np.asarray(P, dtype=np.float64)
        w = np.ones(n) if w is None else np.asarray(w, dtype=np.float64)
        if self.n_classes == 2:
            p, hit = P[:, 1], (y == 1)
        else:
            top = np.argmax(P, axis=1)
            p, hit = P[np.arange(n), top], (top == y)
        yv = hit.astype(np.float64)
        p = np.clip(p, 0.0, 1.0)
        onehot = np.zeros_like(P)
        onehot[np.arange(n), y] = 1.0
        row = {
            "rows": (w > 0).astype(np.float64), "weight": w, "wy": w * yv, "wp": w * p,
            "log_loss": -w * np.log(np.clip(P[np.arange(n), y], _EPS, 1.0)),
            "brier": w * np.sum((P - onehot) ** 2, axis=1),
            "sz_num": w * (yv - p) * (1.0 - 2.0 * p), "sz_den": w * (1.0 - 2.0 * p) ** 2 * p * (1.0 - p),
            "var": w * p * (1.0 - p),
        }
        cell = np.minimum((p * GRID).astype(np.intp), GRID - 1)
        groups = [(ALL, np.zeros(n, dtype=np.intp), [ALL])]
        for col in self.by:
            codes, uniques = factorize(segments[col])
            groups.append((col, codes, [(col, u) for u in uniques]))
        for _, codes, keys in groups:
            ids = self._ids(keys)
            m = len(self.keys)
            seg = ids[codes]
            for name, v in row.items():
                self.scalars[name] += np.bincount(seg, weights=v, minlength=m)
            flat = seg * GRID + cell
            for name, v in (("w", w), ("wy", w * yv), ("wp", w * p)):
                self.cells[name] += np.bincount(flat, weights=v, minlength=m * GRID).reshape(m, GRID)

    def merge(self, other: "SegmentAccumulator") -> "SegmentAccumulator":
        """Add ``other``'s sums (its segments joined to these by key)."""
        ids = self._ids(list(other.keys))
        for name in _SCALARS:
            np.add.at(self.scalars[name], ids, other.scalars[name])
        for name in self.cells:
            np.add.at(self.cells[name], ids, other.cells[name])
        return self

    # ------------------------------------------------------------------ results
    def result(self) -> dict:
        """``{"by", "segments": [...worst first], "mce_sigma", "mce_pvalue", "worst"}`` (module docstring).
        Segments are ordered by ECCE on the sigma scale, largest first; the whole table comes first."""
        from .statistics import ecce_p_value

        rows = []
        for i, (col, value) in enumerate(self.keys):
            s = {k: float(v[i]) for k, v in self.scalars.items()}
            W = s["weight"]
            if W <= 0:
                continue
            cw, cy, cp = (self.cells[k][i] for k in ("w", "wy", "wp"))
            d = np.concatenate(([0.0], np.cumsum(cy - cp)))
            sigma = math.sqrt(s["var"]) if s["var"] > 0 else 0.0
            ecce = (float(d.max() - d.min()) / sigma) if sigma > 0 else math.nan
            z = s["sz_num"] / math.sqrt(s["sz_den"]) if s["sz_den"] > 0 else math.nan
            rows.append({
                "column": col, "value": value, "rows": int(round(s["rows"])), "weight": W,
                "mean_p": s["wp"] / W, "mean_y": s["wy"] / W,
                "log_loss": s["log_loss"] / W, "brier": s["brier"] / W,
                "ece": _ece_equal_width(cw, cy, cp), "ece_equal_mass": _ece_equal_mass(cw, cy, cp),
                "spiegelhalter_z": z,
                "spiegelhalter_pvalue": math.erfc(abs(z) / math.sqrt(2.0)) if math.isfinite(z) else math.nan,
                "ecce_sigma": ecce, "ecce_pvalue": ecce_p_value(ecce) if math.isfinite(ecce) else math.nan,
            })
        parts = [r for r in rows if (r["column"], r["value"]) != ALL]
        for key in ("spiegelhalter_pvalue", "ecce_pvalue"):
            for r, adj in zip(parts, holm([r[key] for r in parts])):
                r[key + "_holm"] = adj
        whole = [r for r in rows if (r["column"], r["value"]) == ALL]
        parts.sort(key=lambda r: (-(r["ecce_sigma"] if math.isfinite(r["ecce_sigma"]) else -1.0), str(r["column"]),
                                  str(r["value"])))
        finite = [r for r in rows if math.isfinite(r["ecce_sigma"])]
        worst = max(finite, key=lambda r: r["ecce_sigma"], default=None)
        mce = worst["ecce_sigma"] if worst else math.nan
        return {
            "by": list(self.by), "grid": GRID, "ece_bins": ECE_BINS, "segments": whole + parts,
            "mce_sigma": mce, "mce_pvalue": ecce_p_value(mce) if math.isfinite(mce) else math.nan,
            "worst": None if worst is None else {"column": worst["column"], "value": worst["value"]},
        }


def factorize(values) -> tuple[np.ndarray, list]:
    """Codes and values of a column's cells as segment names: strings (missing values are ``null``),
    so a value reads the same whichever file or chunk it came from."""
    import pandas as pd

    if isinstance(values, pd.Series) and not isinstance(values.dtype, pd.StringDtype):
        values = values.to_numpy()  # as the values always were (an Int64 column with nulls reads 3.0)
    s = pd.Series(values, copy=False)
    text = s.astype("string").fillna("null")
    codes, uniques = pd.factorize(text, sort=False)
    return codes.astype(np.intp), [str(u) for u in uniques]


def _ece_equal_width(cw, cy, cp) -> float:
    per = GRID // ECE_BINS
    bw, by, bp = (a.reshape(ECE_BINS, per).sum(axis=1) for a in (cw, cy, cp))
    total = bw.sum()
    return float(np.abs(by - bp).sum() / total) if total > 0 else math.nan


def _ece_equal_mass(cw, cy, cp) -> float:
    """ECE over ECE_BINS bins of about equal weight, each a run of whole cells."""
    total = cw.sum()
    if total <= 0:
        return math.nan
    cum = np.cumsum(cw)
    cuts = np.searchsorted(cum, total * np.arange(1, ECE_BINS) / ECE_BINS, side="left") + 1
    edges = np.unique(np.concatenate(([0], cuts, [GRID])))
    by = np.add.reduceat(cy, edges[:-1])
    bp = np.add.reduceat(cp, edges[:-1])
    return float(np.abs(by - bp).sum() / total)


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjustment of ``pvalues`` (NaN stays NaN and does not count as a test)."""
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, math.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    if m == 0:
        return out.tolist()
    order = ok[np.argsort(p[ok], kind="stable")]
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out[order] = adjusted
    return out.tolist()


#: segments ``evaluate --by`` prints (``--json`` carries them all)
TEXT_ROWS = 20


def format_segments(label: str, seg: dict, width: int | None = None) -> str:
    """The ``--by`` block of ``evaluate``'s text: the multicalibration error, then the whole table and
    the worst :data:`TEXT_ROWS` segments (by ECCE on the sigma scale), one line each; the p-values
    shown are Holm-adjusted over the segments."""
    from .report.text import terminal_width

    width = terminal_width(width)

    def num(v, spec):
        return "-" if v is None or not math.isfinite(v) else format(v, spec)

    shown = seg["segments"][: TEXT_ROWS + 1]
    names = [f"{r['column']}={r['value']}" if r["column"] != ALL[0] else "(all rows)" for r in shown]
    name_w = max(10, min(max(len(n) for n in names), 40, max(24, width - 92)))
    lines = [
        f"calibration by segment of {label} ({', '.join(seg['by'])}; {len(seg['segments']) - 1} segments):"
        f" multicalibration error {num(seg['mce_sigma'], '.3g')} sigma, p = {num(seg['mce_pvalue'], '.3g')}",
        f"{'segment':<{name_w}} {'rows':>9} {'mean p':>7} {'mean y':>7} {'ECE':>7} {'ECE mass':>8}"
        f" {'z':>7} {'p(z)':>8} {'ECCE σ':>7} {'p(ECCE)':>8} {'log loss':>8}",
    ]
    for n, r in zip(names, shown):
        n = n if len(n) <= name_w else n[: name_w - 1] + "…"
        lines.append(
            f"{n:<{name_w}} {r['rows']:>9} {num(r['mean_p'], '.4f'):>7} {num(r['mean_y'], '.4f'):>7}"
            f" {num(r['ece'], '.4f'):>7} {num(r['ece_equal_mass'], '.4f'):>8} {num(r['spiegelhalter_z'], '.2f'):>7}"
            f" {num(r.get('spiegelhalter_pvalue_holm'), '.2g'):>8} {num(r['ecce_sigma'], '.2f'):>7}"
            f" {num(r.get('ecce_pvalue_holm'), '.2g'):>8} {num(r['log_loss'], '.4f'):>8}"
        )
    if len(seg["segments"]) > TEXT_ROWS + 1:
        lines.append(f"... {len(seg['segments']) - TEXT_ROWS - 1} more segments in --json")
    return "\n".join(lines)
