"""What ``evaluate`` reports of a model with a conformal layer: do its prediction sets keep their promise?

For a labelled table, per row the set ``C(x)`` of the layer (:meth:`calengine.model.conformal.ConformalLayer.sets`)
and whether it holds the true class.  Reported (``evaluate --json`` key ``conformal``, docs/guide/conformal.md
lists every key):

* **marginal coverage** ``P(Y in C(X))`` with a Clopper-Pearson interval (exact binomial, 95 %); with
  ``--weight`` the rows are weighted and the interval is taken on Kish's effective sample size
  ``(sum w)^2 / sum w^2`` (an approximation, said so in ``ci_method``);
* coverage **per class** and **per segment** of ``--by`` columns (each column on its own, as ``evaluate
  --by`` takes them), worst first -- the coverage a Mondrian layer protects, or the gaps a marginal one
  leaves;
* the **set sizes**: their mean and distribution, the share of empty sets, and coverage per size with
  the size-stratified coverage violation ``SSCV = max_j |coverage(stratum j) - (1 - alpha)|`` over the
  strata of set sizes that occur, the strata of Angelopoulos et al. 2021 (:data:`SSCV_STRATA`: sizes
  0-1, 2-3, 4-10, 11-100, ...; empty sets count with size 1, or every model with an empty set would
  score 1 - alpha).

How it scales: every number is a sum over rows -- counts per class, per size, per segment -- kept per
chunk by :class:`ConformalAccumulator` on ``evaluate``'s own pass (each row scored once for the metrics
and the sets) and merged in chunk order; the number of segments is bounded by ``--max-segments``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import DataError

__all__ = ["ConformalAccumulator", "clopper_pearson", "format_conformal", "CI_LEVEL"]

#: the two-sided level of the coverage intervals
CI_LEVEL = 0.95
#: rows the text prints per table (``--json`` holds them all)
TEXT_ROWS = 20
#: the set-size strata of the size-stratified coverage violation (Angelopoulos et al. 2021, Table 4):
#: 0-1, 2-3, 4-10, 11-100, 101-1000 and more classes; an empty set shares the first stratum with size 1
SSCV_STRATA = ((0, 1), (2, 3), (4, 10), (11, 100), (101, 1000), (1001, 1 << 62))


def clopper_pearson(covered: float, n: float, level: float = CI_LEVEL) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a binomial proportion ``covered / n``; fractional counts
    (an effective sample size) are taken as they are, the beta quantiles being defined for them."""
    from scipy.stats import beta

    if not n > 0:
        return math.nan, math.nan
    a = (1.0 - level) / 2.0
    x = min(max(covered, 0.0), n)
    lo = 0.0 if x <= 0 else float(beta.ppf(a, x, n - x + 1))
    hi = 1.0 if x >= n else float(beta.ppf(1 - a, x + 1, n - x))
    return lo, hi


@dataclass
class ConformalAccumulator:
    """Sums of one chunk (or many, merged) for the module docstring's report."""

    n_classes: int
    by: tuple = ()
    max_segments: int = 1000
    rows: int = 0
    weight: float = 0.0
    weight2: float = 0.0
    covered: float = 0.0
    size_sum: float = 0.0
    class_rows: np.ndarray = None
    class_weight: np.ndarray = None
    class_weight2: np.ndarray = None
    class_covered: np.ndarray = None
    class_size: np.ndarray = None
    size_weight: np.ndarray = None
    size_covered: np.ndarray = None
    #: (column, value) -> [rows, weight, weight^2, covered, size sum]
    segments: dict = field(default_factory=dict)

    def __post_init__(self):
        k = self.n_classes
        for name, shape in (("class_rows", k), ("class_weight", k), ("class_weight2", k), ("class_covered", k),
                            ("class_size", k),
                            ("size_weight", k + 1), ("size_covered", k + 1)):
            if getattr(self, name) is None:
                setattr(self, name, np.zeros(shape))

    def add(self, y: np.ndarray, sets: np.ndarray, w: np.ndarray | None = None, segments: dict | None = None) -> None:
        """Add rows: class indices ``y``, boolean sets (n, k), weights ``w`` (None: 1), and for ``by`` the
        rows' segment columns (``{column: values}``)."""
        n, k = sets.shape
        if n == 0:
            return
        w = np.ones(n) if w is None else np.asarray(w, dtype=np.float64)
        hit = sets[np.arange(n), y].astype(np.float64)
        size = sets.sum(axis=1)
        self.rows += int((w > 0).sum())
        self.weight += float(w.sum())
        self.weight2 += float((w * w).sum())
        self.covered += float((w * hit).sum())
        self.size_sum += float((w * size).sum())
        self.class_rows += np.bincount(y, weights=(w > 0).astype(np.float64), minlength=k)
        self.class_weight += np.bincount(y, weights=w, minlength=k)
        self.class_weight2 += np.bincount(y, weights=w * w, minlength=k)
        self.class_covered += np.bincount(y, weights=w * hit, minlength=k)
        self.class_size += np.bincount(y, weights=w * size, minlength=k)
        self.size_weight += np.bincount(size, weights=w, minlength=k + 1)
        self.size_covered += np.bincount(size, weights=w * hit, minlength=k + 1)
        for col in self.by:
            from .segments import factorize

            codes, values = factorize(segments[col])
            m = len(values)
            sums = [np.bincount(codes, weights=v, minlength=m) for v in
                    ((w > 0).astype(np.float64), w, w * w, w * hit, w * size)]
            for j, value in enumerate(values):
                self._segment((col, value))[:] += [s[j] for s in sums]

    def _segment(self, key) -> np.ndarray:
        if key not in self.segments:
            if len(self.segments) >= self.max_segments:
                raise DataError(f"--by column '{key[0]}' makes more than {self.max_segments} segments; evaluate by a"
                                " column with fewer values or raise --max-segments (at most 20000)")
            self.segments[key] = np.zeros(5)
        return self.segments[key]

    def merge(self, other: "ConformalAccumulator") -> "ConformalAccumulator":
        for name in ("rows", "weight", "weight2", "covered", "size_sum"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("class_rows", "class_weight", "class_weight2", "class_covered", "class_size", "size_weight",
                     "size_covered"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for key, v in other.segments.items():
            self._segment(key)[:] += v
        return self

    def result(self, layer, classes: list, weighted: bool = False) -> dict:
        """The report's numbers (module docstring); ``layer``: the model's conformal layer, ``classes``
        the class names, ``weighted``: the rows carry ``evaluate --weight`` weights."""
        alpha = float(layer.alpha)
        target = 1.0 - alpha
        W = self.weight
        if not W > 0:
            raise DataError("the evaluated table has no rows of positive weight; conformal coverage needs rows")

        def interval(covered, weight, weight2, rows):
            n = (weight * weight / weight2) if weighted and weight2 > 0 else rows
            return list(clopper_pearson(covered / weight * n if weight > 0 else 0.0, n))

        sizes = []
        for s in range(self.n_classes + 1):
            if self.size_weight[s] > 0:
                sizes.append({"size": s, "weight" if weighted else "rows": _num(self.size_weight[s], weighted),
                              "share": float(self.size_weight[s] / W),
                              "coverage": float(self.size_covered[s] / self.size_weight[s])})
        strata = []
        for lo, hi in SSCV_STRATA:
            top = min(hi, self.n_classes)
            if lo > self.n_classes:
                break
            w = float(self.size_weight[lo:top + 1].sum())
            if w > 0:
                strata.append({"sizes": [lo, top], "share": w / W,
                               "coverage": float(self.size_covered[lo:top + 1].sum() / w)})
        sscv = max((abs(r["coverage"] - target) for r in strata), default=math.nan)
        per_class = []
        for c, name in enumerate(classes):
            if self.class_weight[c] > 0:
                per_class.append({
                    "class": str(name), "rows": int(round(self.class_rows[c])),
                    **({"weight": float(self.class_weight[c])} if weighted else {}),
                    "coverage": float(self.class_covered[c] / self.class_weight[c]),
                    "coverage_ci": interval(self.class_covered[c], self.class_weight[c], self.class_weight2[c],
                                            self.class_rows[c]),
                    "mean_set_size": float(self.class_size[c] / self.class_weight[c]),
                })
        per_class.sort(key=lambda r: (r["coverage"], r["class"]))
        segs = []
        for (col, value), (rows, w, w2, cov, size) in self.segments.items():
            if w > 0:
                segs.append({"column": col, "value": value, "rows": int(round(rows)),
                             **({"weight": float(w)} if weighted else {}),
                             "coverage": float(cov / w), "coverage_ci": interval(cov, w, w2, rows),
                             "mean_set_size": float(size / w)})
        segs.sort(key=lambda r: (r["coverage"], str(r["column"]), str(r["value"])))
        out = {
            "layer": layer.describe(), "score": layer.score, "alpha": alpha, "target_coverage": target,
            "mondrian": layer.mondrian, "rows": int(self.rows),
            "coverage": float(self.covered / W), "coverage_ci": interval(self.covered, W, self.weight2, self.rows),
            "ci_level": CI_LEVEL,
            "ci_method": "clopper-pearson" + (" on Kish's effective sample size" if weighted else ""),
            "mean_set_size": float(self.size_sum / W),
            "empty_share": float(self.size_weight[0] / W),
            "set_sizes": sizes, "sscv": sscv, "sscv_strata": strata, "classes": per_class,
        }
        if weighted:
            out["weight"] = float(W)
            out["effective_rows"] = float(W * W / self.weight2) if self.weight2 > 0 else 0.0
        if self.by:
            out["by"] = list(self.by)
            out["segments"] = segs
        return out


def _num(v: float, weighted: bool):
    return float(v) if weighted else int(round(v))


def format_conformal(label: str, r: dict) -> str:
    """``evaluate``'s text of a conformal result: coverage and its interval, sizes, classes and segments
    worst first."""
    lo, hi = r["coverage_ci"]
    weighted = "weight" in r
    lines = [
        f"prediction sets of {label} ({r['layer']}):",
        f"  coverage {r['coverage']:.4f} [{lo:.4f}, {hi:.4f}] ({r['ci_level']:.0%} {r['ci_method']}) on"
        f" {r['rows']:,} rows{' (weighted)' if weighted else ''}; target >= {r['target_coverage']:.4f}",
        f"  mean set size {r['mean_set_size']:.3f}; empty sets {r['empty_share']:.2%}; size-stratified coverage"
        f" violation {r['sscv']:.4f} (strata " + ", ".join(f"{a}-{b}" for a, b in (s['sizes'] for s in r['sscv_strata']))
        + ")",
        f"  {'size':>6} {'share':>8} {'coverage':>9}",
    ]
    for row in r["set_sizes"][:TEXT_ROWS]:
        lines.append(f"  {row['size']:>6} {row['share']:>8.2%} {row['coverage']:>9.4f}")
    width = max(5, *(len(c["class"]) for c in r["classes"][:TEXT_ROWS])) if r["classes"] else 5
    lines.append(f"  {'class':<{width}} {'rows':>9} {'coverage':>9} {'95% interval':>17} {'mean size':>9}   (worst first)")
    for c in r["classes"][:TEXT_ROWS]:
        a, b = c["coverage_ci"]
        lines.append(f"  {c['class']:<{width}} {c['rows']:>9,} {c['coverage']:>9.4f} {f'[{a:.3f}, {b:.3f}]':>17}"
                     f" {c['mean_set_size']:>9.3f}")
    if len(r["classes"]) > TEXT_ROWS:
        lines.append(f"  ... {len(r['classes']) - TEXT_ROWS} more classes in --json")
    if r.get("segments"):
        segs = r["segments"]
        names = [f"{s['column']}={s['value']}" for s in segs[:TEXT_ROWS]]
        nw = max(10, min(40, max(len(n) for n in names)))
        lines.append(f"  {'segment':<{nw}} {'rows':>9} {'coverage':>9} {'95% interval':>17} {'mean size':>9}   (worst first)")
        for n, s in zip(names, segs):
            a, b = s["coverage_ci"]
            n = n if len(n) <= nw else n[: nw - 1] + "…"
            lines.append(f"  {n:<{nw}} {s['rows']:>9,} {s['coverage']:>9.4f} {f'[{a:.3f}, {b:.3f}]':>17}"
                         f" {s['mean_set_size']:>9.3f}")
        if len(segs) > TEXT_ROWS:
            lines.append(f"  ... {len(segs) - TEXT_ROWS} more segments in --json")
    return "\n".join(lines)
