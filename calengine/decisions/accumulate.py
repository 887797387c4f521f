"""Mergeable totals that evaluate decision policies on a labelled table, chunk by chunk.

``evaluate --cost-matrix`` runs one task per chunk; each folds its rows into a
:class:`DecisionAccumulator` and the client merges them.  Every statistic is a sum, so the merged
result equals the one computed on the whole table at once (up to float rounding of the sums):

- the realised cost of the calibrated model's minimum-expected-cost decisions, and of the raw
  learner's (same rule, uncalibrated probabilities: what calibration changes);
- the cost of each constant policy "always decide class j" (the best of them is the baseline any
  model must beat) and of the oracle that knows the true class (the floor);
- for two classes, the cost of "decide class 1 when p > t" for every t on a fixed grid, for both
  probability sets: per grid cell the sum of (C[1, y] - C[0, y]) of rows whose p falls in it, so the
  curve is a cumulative sum.  Exact on the grid, whatever the number of rows.

With row weights (``evaluate --cost-matrix --weight COL``) every sum weighs its rows, read as counts:
a row of weight 2 adds what the row given twice adds, ``n`` and the decided counts become totals of
weight (floats), and rows of weight 0 add nothing.
"""

from __future__ import annotations

import numpy as np

from .costs import CostMatrix
from .decide import decide_indices

#: thresholds of the two-class curve: 0, 0.001, ..., 1
GRID = np.linspace(0.0, 1.0, 1001)


class DecisionAccumulator:
    """Totals of decision costs, mergeable across chunks; :meth:`result` reports them (costs, or
    profits when the matrix holds benefits)."""

    KEYS = ("calibrated", "raw")

    def __init__(self, cost_matrix: CostMatrix):
        self.cost_matrix = cost_matrix
        k = cost_matrix.n_classes
        self.n = 0
        #: True once a weighted batch was added: ``n``, ``decided`` and ``count`` then hold weights (floats)
        self.weighted = False
        self.total = {key: 0.0 for key in self.KEYS}
        self.decided = {key: np.zeros(k, dtype=np.int64) for key in self.KEYS}
        self.constant = np.zeros(k)
        self.oracle = 0.0
        self.seen = {key: False for key in self.KEYS}
        self.base = 0.0  # two classes: cost of deciding class 0 for every row
        self.delta = {key: np.zeros(GRID.size + 1) for key in self.KEYS}
        self.count = {key: np.zeros(GRID.size + 1, dtype=np.int64) for key in self.KEYS}

    def add(self, y: np.ndarray, P: np.ndarray, raw: np.ndarray | None = None, frame=None,
            sample_weight: np.ndarray | None = None) -> "DecisionAccumulator":
        """Fold in one batch: ``y`` true class indices, ``P`` calibrated and ``raw`` uncalibrated (n, k)
        probabilities, ``frame`` holding the cost columns, ``sample_weight`` non-negative row weights
        (validated by the caller; None: every row counts once); returns ``self``."""
        y = np.asarray(y, dtype=np.int64)
        if y.size == 0:
            return self
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        if w is not None:
            self._to_weights()
        cm = self.cost_matrix
        C = cm.cost_table(y, frame)  # (n, k): cost of each decision given the truth
        Cw = C if w is None else C * w[:, None]
        self.n += y.size if w is None else float(w.sum())
        self.constant += Cw.sum(axis=0)
        self.oracle += float(C.min(axis=1).sum() if w is None else (C.min(axis=1) * w).sum())
        two = cm.n_classes == 2
        if two:
            self.base += float(Cw[:, 0].sum())
            gain = Cw[:, 1] - Cw[:, 0]
        rows = np.arange(y.size)
        for key, probs in (("calibrated", P), ("raw", raw)):
            if probs is None:
                continue
            self.seen[key] = True
            d, _ = decide_indices(probs, cm, frame)
            self.total[key] += float(Cw[rows, d].sum())
            self.decided[key] += np.bincount(d, weights=w, minlength=cm.n_classes)
            if two:
                cell = np.searchsorted(GRID, np.asarray(probs, dtype=np.float64)[:, 1], side="left")
                self.delta[key] += np.bincount(cell, weights=gain, minlength=GRID.size + 1)
                self.count[key] += np.bincount(cell, weights=w, minlength=GRID.size + 1)
        return self

    def _to_weights(self) -> None:
        """Hold ``n`` and the counts as float totals of weight (once a weighted batch or accumulator arrives)."""
        if not self.weighted:
            self.weighted = True
            self.n = float(self.n)
            for key in self.KEYS:
                self.decided[key] = self.decided[key].astype(np.float64)
                self.count[key] = self.count[key].astype(np.float64)

    def merge(self, other: "DecisionAccumulator") -> "DecisionAccumulator":
        """Fold ``other`` (unchanged) into ``self`` and return ``self``."""
        if other.cost_matrix.n_classes != self.cost_matrix.n_classes:
            raise ValueError("cannot merge decision accumulators of different class counts")
        if getattr(other, "weighted", False):
            self._to_weights()
        self.n += other.n
        self.constant += other.constant
        self.oracle += other.oracle
        self.base += other.base
        for key in self.KEYS:
            self.total[key] += other.total[key]
            self.decided[key] += other.decided[key]
            self.delta[key] += other.delta[key]
            self.count[key] += other.count[key]
            self.seen[key] = self.seen[key] or other.seen[key]
        return self

    # ------------------------------------------------------------------------------------------ results

    def threshold_curve(self, key: str = "calibrated") -> dict:
        """Two classes: ``{"threshold": t, "cost": total cost of deciding class 1 when p > t, "share":
        fraction of rows decided class 1}`` on :data:`GRID`; costs in the matrix's sign (see :meth:`sign`)."""
        if self.cost_matrix.n_classes != 2:
            raise ValueError("the threshold curve needs two classes")
        # rows in cell c have GRID[c-1] < p <= GRID[c]; "p > GRID[g]" holds for cells c > g
        above = self.delta[key][::-1].cumsum()[::-1]  # above[c] = sum of cells >= c
        cost = self.base + above[1:]
        share = self.count[key][::-1].cumsum()[::-1][1:] / self._denominator
        return {"threshold": GRID.copy(), "cost": self.sign * cost + 0.0, "share": share}  # + 0.0: no -0.0

    @property
    def _denominator(self) -> float:
        """What means and shares divide by: the rows (at least 1), or the total weight when positive."""
        return self.n if self.weighted and self.n > 0 else max(self.n, 1)

    def _number(self, c):
        """A count as JSON: an int for rows, a float total of weight once weighted."""
        return float(c) if self.weighted else int(c)

    @property
    def sign(self) -> float:
        """-1 when the user wrote benefits (results are profits), else 1."""
        return -1.0 if self.cost_matrix.benefit else 1.0

    def result(self, curve_points: int | None = 101) -> dict:
        """A JSON-ready summary.  ``objective`` says whether the numbers are costs (lower is better) or
        profits (higher is better); ``curve_points`` thins the threshold curve (None: all 1001)."""
        s, n = self.sign, self._denominator
        names = [str(c) for c in self.cost_matrix.classes]
        pick = np.argmax if s < 0 else np.argmin
        objective = "profit" if s < 0 else "cost"

        def policy(total: float) -> dict:
            return {"total": s * total + 0.0, "mean": s * total / n + 0.0}  # + 0.0: no -0.0

        out: dict = {"objective": objective, "n": self._number(self.n), "cost_matrix": self.cost_matrix.to_dict()}
        if self.weighted:
            out["weighted"] = True  # n and the decided counts are totals of weight; means are per unit of weight
        for key in self.KEYS:
            if self.seen[key]:
                out[key] = {**policy(self.total[key]),
                            "decided": {nm: self._number(c) for nm, c in zip(names, self.decided[key])}}
            else:
                out[key] = None
        best = int(np.argmin(self.constant))
        out["best_constant"] = {"class": self.cost_matrix.classes[best], **policy(float(self.constant[best]))}
        out["constant"] = {nm: policy(float(v)) for nm, v in zip(names, self.constant)}
        out["oracle"] = policy(self.oracle)
        if self.cost_matrix.n_classes == 2:
            out["bayes_threshold"] = self.cost_matrix.bayes_threshold()
            curves = {key: self.threshold_curve(key) for key in self.KEYS if self.seen[key]}
            idx = np.arange(GRID.size)
            if curve_points is not None and curve_points < GRID.size:
                idx = np.unique(np.linspace(0, GRID.size - 1, curve_points).round().astype(int))
            out["threshold_curve"] = {"threshold": [float(t) for t in GRID[idx]]}
            out["best_threshold"] = {}
            for key, c in curves.items():
                out["threshold_curve"][key] = [float(v) for v in c["cost"][idx]]
                b = int(pick(c["cost"]))
                out["best_threshold"][key] = {"threshold": float(GRID[b]), "total": float(c["cost"][b])}
        return out
