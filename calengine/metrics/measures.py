"""Evaluation of probability estimates as an exact, mergeable reduction over partitions.

Test tables may be larger than memory, so every metric is computed from a :class:`MetricAccumulator`
that each Dask task fills from its own partition (:meth:`MetricAccumulator.add`), ships back as a flat
dict of numpy arrays (:meth:`MetricAccumulator.to_arrays`) and folds into the others
(:meth:`MetricAccumulator.merge`).  The array functions at the bottom of this module are the
one-partition case.

Why grouped counts instead of running sums: AUC with ties, the calibration / refinement split of the
Brier score (Flach & Matsubara, "On classification, ranking, and probability estimation"), quantile
reliability bins and the error-reject curve (Duin & Tax, "Classifier conditional posterior
probabilities") all depend on *which rows share a predicted value*.  The accumulator therefore keeps,
for every class column ``c``, the sorted distinct values of ``P[:, c]`` with how many rows at that
value have ``y == c`` (positives) and ``y != c`` (negatives), and one more table of the same shape for
the top-label confidence (``max_c P[:, c]``, split into correctly and wrongly classified rows).  Counts
are integers (the sums of the rows' weights when they are given: float64 only for fractional weights)
and the value keys are exact floats, so merging in any order produces bit-identical tables, and every metric is a deterministic function of them: results do not depend on the partition
layout at all.  The price is memory proportional to the number of *distinct* predicted values; scores
with few distinct values (trees, isotonic, binning) cost almost nothing, continuous scores cost
three numbers per distinct value and class.

Conventions shared by all functions here:

* ``y``: shape ``(n,)``, integer class indices ``0..k-1``.
* ``P``: shape ``(n, k)``, probabilities in ``[0, 1]`` whose rows sum to 1 within ``1e-6``.  For
  ``k == 2`` a 1-D array of class-1 probabilities is also accepted and read as ``(1 - p, p)``.
* The predicted class is ``argmax`` of the row; ties go to the lowest class index.
* Segments of the Brier decomposition are groups of exactly equal predicted probability (``-0.0`` and
  ``0.0`` are the same value); no tolerance is applied.

The module is a little over 600 lines because :class:`MetricAccumulator` is one mergeable state that
every exact metric reads (AUC with ties, the Brier split, CORP, error-reject): the metrics sit beside the
tables they share so that a merge and every reader agree on one layout.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import DataError, ParameterError
from .corp import isotonic_recalibration
from .ranged.core import core_result, error_reject_at, error_reject_points, ranged_drift
from ..reductions.tables import as_counts, binary_top, complementary, mirror_table
from ..reductions.tables import empty_table as _empty_table
from ..reductions.tables import group_keys as _group_keys
from ..reductions.tables import group_rows as _group_rows
from ..reductions.tables import merge_all as _merge_all
from ..reductions.tables import merge_tables as _merge_tables
from ..reductions.tables import row_keys as _row_keys

__all__ = [
    "LOG_LOSS_CLIP",
    "ROW_SUM_TOLERANCE",
    "MetricAccumulator",
    "evaluate_predictions",
    "reliability_diagram",
    "error_reject_curve",
]

#: probabilities are clipped to ``[LOG_LOSS_CLIP, 1]`` before the log, so one confident mistake costs
#: at most ``-ln(1e-15) ≈ 34.54`` nats instead of infinity (scikit-learn clips at float64 eps instead,
#: ≈ 36.04 nats; the two agree whenever no true-class probability is below 1e-15).
LOG_LOSS_CLIP = 1e-15

#: how far a row of ``P`` may sum away from 1 before it is rejected.
ROW_SUM_TOLERANCE = 1e-6

#: number of equal-width bins of the top-label confidence behind ``ece`` and ``mce``.
ECE_BINS = 15

_ARRAY_KEYS = (
    "n_classes",
    "n",
    "class_ptr",
    "class_value",
    "class_pos",
    "class_neg",
    "top_value",
    "top_correct",
    "top_wrong",
)


# --------------------------------------------------------------------------------------------------
# grouped tables: (sorted distinct values, positive counts, negative counts), see calengine.reductions.tables


# --------------------------------------------------------------------------------------------------
# input validation


def _check_n_classes(n_classes: Any) -> int:
    if isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer)) or n_classes < 2:
        raise ParameterError(
            f"n_classes must be an integer >= 2, got {n_classes!r}; pass the number of classes of the task"
        )
    return int(n_classes)


def _validate(y, P, n_classes: int | None):
    """Return ``(y, P)`` as int64 ``(n,)`` and float64 ``(n, k)`` arrays, or raise :class:`DataError`."""
    P = np.asarray(P)
    y = np.asarray(y)
    if P.dtype == object or not (np.issubdtype(P.dtype, np.number) or P.dtype == bool):
        raise DataError(
            f"probabilities must be numeric, got dtype {P.dtype}; pass a float array P of shape (n, k)"
        )
    P = P.astype(np.float64, copy=False)
    if P.ndim == 1:
        if n_classes not in (None, 2):
            raise DataError(
                f"P is 1-D but the task has {n_classes} classes; pass P with shape (n, {n_classes})"
            )
        P = np.column_stack((1.0 - P, P))
    if P.ndim != 2:
        raise DataError(
            f"P must have shape (n, k), got shape {P.shape}; pass one row of class probabilities per example"
        )
    k = P.shape[1]
    if n_classes is not None and k != n_classes:
        raise DataError(
            f"P has {k} columns but the task has {n_classes} classes; pass one probability column per class"
        )
    if k < 2:
        raise DataError(f"P must have at least 2 columns, got {k}; pass one probability column per class")
    if y.ndim != 1:
        raise DataError(f"y must be 1-D, got shape {y.shape}; pass one class index per example")
    if y.shape[0] != P.shape[0]:
        raise DataError(
            f"y has {y.shape[0]} rows but P has {P.shape[0]}; "
            "pass labels and probabilities for the same examples"
        )
    if y.dtype == bool:
        y = y.astype(np.int64)
    elif np.issubdtype(y.dtype, np.integer):
        y = y.astype(np.int64, copy=False)
    elif np.issubdtype(y.dtype, np.floating):
        if not np.all(np.isfinite(y)) or np.any(y != np.round(y)):
            raise DataError("y holds non-integer or missing values; pass integer class indices 0..k-1")
        y = y.astype(np.int64)
    else:
        raise DataError(
            f"y must hold integer class indices, got dtype {y.dtype}; encode labels as 0..k-1 first"
        )
    if y.size and (y.min() < 0 or y.max() >= k):
        bad = int(y.min()) if y.min() < 0 else int(y.max())
        raise DataError(f"y contains class index {bad} outside 0..{k - 1}; encode labels as 0..{k - 1} first")
    # within [0, 1] means finite (a NaN makes min and max NaN): the finiteness pass only on failure
    if P.size and not (P.min() >= 0.0 and P.max() <= 1.0):
        if not np.all(np.isfinite(P)):
            raise DataError("P contains NaN or infinite values; drop or impute those rows before evaluating")
        raise DataError(
            f"P has values outside [0, 1] (min {P.min():.6g}, max {P.max():.6g}); "
            "pass probabilities, not raw scores"
        )
    if P.shape[0]:
        # two columns' row sum is one addition, the float P.sum(axis=1) gives, without its strided reduction
        dev = np.abs((P[:, 0] + P[:, 1] if k == 2 else P.sum(axis=1)) - 1.0)
        worst = int(np.argmax(dev))
        if dev[worst] > ROW_SUM_TOLERANCE:
            raise DataError(
                f"row {worst} of P sums to {P[worst].sum():.9g}, not 1 (tolerance {ROW_SUM_TOLERANCE:g}); "
                "normalise each row of probabilities first"
            )
    return y, P


def _total(table):
    """The rows (total weight) of a table: an int for integer counts, a float for fractional weights."""
    t = table[1].sum() + table[2].sum()
    return float(t) if table[1].dtype.kind == "f" else int(t)


def _check_weight(sample_weight, n: int):
    """``sample_weight`` as counts (int64 when every weight is an integer, else float64), or None."""
    if sample_weight is None:
        return None
    w = np.asarray(sample_weight)
    if w.dtype == object or not (np.issubdtype(w.dtype, np.number) or w.dtype == bool):
        raise DataError(f"sample_weight must be numeric, got dtype {w.dtype}; pass one non-negative weight per row")
    if w.shape != (n,):
        raise DataError(f"sample_weight has shape {w.shape} but there are {n} rows; pass one weight per row")
    w = w.astype(np.float64)
    if not np.all(np.isfinite(w)):
        raise DataError("sample_weight contains NaN or infinite values; give every row a finite weight >= 0")
    if w.size and w.min() < 0.0:
        raise DataError(f"sample_weight contains negative values (min {w.min():g}); weights must be >= 0")
    from ..reductions.column_stats import MAX_WEIGHT

    if w.size and w.max() > MAX_WEIGHT:  # totals and their products (the tests' statistics) stay finite
        raise DataError(f"sample_weight holds {w.max():g}; weights must be at most {MAX_WEIGHT:g}: divide them by a"
                        " constant")
    return as_counts(w)


# --------------------------------------------------------------------------------------------------
# the accumulator


def _grouped(pending: list) -> list:
    """A table's waiting batches as grouped tables: its row-key arrays grouped together in one sort,
    its (integer-count) tables as they are."""
    keys = [p for p in pending if isinstance(p, np.ndarray)]
    return [p for p in pending if not isinstance(p, np.ndarray)] + ([_group_keys(keys)] if keys else [])


def _count_array(x) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.float64) if x.dtype.kind == "f" else x.astype(np.int64)


class MetricAccumulator:
    """Exact, mergeable sufficient statistics for every metric of :meth:`result`.

    ``MetricAccumulator(k)`` starts empty; :meth:`add` folds in a batch ``(y, P)`` and :meth:`merge`
    folds in another accumulator, both in place and returning ``self`` so they chain inside a Dask
    reduction.  Merging is associative and commutative with bit-identical internal state, so the
    partitioning and reduction order never change any result.  Empty batches are allowed (empty
    partitions are common); :meth:`result` needs at least one row.
    """

    def __init__(self, n_classes: int):
        self.n_classes = _check_n_classes(n_classes)
        self.n = 0
        # per class c: (sorted distinct values of P[:, c], #rows with y == c, #rows with y != c)
        self._cls = [_empty_table() for _ in range(self.n_classes)]
        # top-label confidence: (sorted distinct max_c P[:, c], #correct, #wrong)
        self._top = _empty_table()

    # Integer-count batches wait in _pending (a list of grouped tables per class, then the top label's),
    # merged in one stable sort when a table is read: merging each into the running table re-sorted it
    # per batch.  Integer sums do not depend on order (same bits); fractional weights merge in order.
    @property
    def _cls(self) -> list:
        self._flush()
        return self._cls_tables

    @_cls.setter
    def _cls(self, tables) -> None:
        self._pending, self._mirrored, self._cls_tables = None, None, tables

    @property
    def _top(self):
        self._flush()
        return self._top_table

    @_top.setter
    def _top(self, table) -> None:
        self._pending, self._mirrored, self._top_table = None, None, table

    # Unweighted batches wait as row keys (tables.row_keys), all of a table's grouped in one integer
    # sort when it is read: per-batch grouping and the merge of the batches cost 19 % of a 10M evaluate.
    # Unweighted binary batches with P[:, 0] == 1 - P[:, 1] on every row (tables.complementary) wait as
    # class-1 keys only (_mirrored): grouped in one sort, their class-0 and top-label tables are derived
    # from that table (tables.mirror_table, tables.binary_top: no sort), so one table is sorted, not three.
    def _flush(self) -> None:
        pending, self._pending = self.__dict__.get("_pending"), None
        mirrored, self._mirrored = self.__dict__.get("_mirrored"), None
        if mirrored:
            t1 = _group_keys(mirrored)
            pending = pending or [[], [], []]
            for waiting, table in zip(pending, (mirror_table(t1), t1, binary_top(t1))):
                waiting.append(table)
        if pending:
            self._cls_tables = [_merge_all([t, *_grouped(p)]) for t, p in zip(self._cls_tables, pending[:-1])]
            self._top_table = _merge_all([self._top_table, *_grouped(pending[-1])])

    def complementary_table(self):
        """The class-1 table, when every row so far came in unweighted binary batches with ``P[:, 0] ==
        1 - P[:, 1]`` on every row (:func:`~calengine.reductions.tables.complementary`); else None.  Then
        the class-0 and top-label tables are :func:`~calengine.reductions.tables.mirror_table` and
        :func:`~calengine.reductions.tables.binary_top` of it, bit for bit, and a caller that derives them
        later (:func:`calengine.metrics.ranged.engine.chunk_tables`) need not build or check them.  The
        accumulator is left as it was."""
        mirrored = self.__dict__.get("_mirrored")
        if not mirrored or self.__dict__.get("_pending") or any(t[0].size for t in self._cls_tables) \
                or self._top_table[0].size:
            return None
        return _group_keys(mirrored)

    # ---- building ---------------------------------------------------------------------------------

    def add(self, y: np.ndarray, P: np.ndarray, sample_weight=None) -> "MetricAccumulator":
        """Fold in one batch: ``y`` (n,) class indices, ``P`` (n, k) probabilities and optionally
        ``sample_weight`` (n,) non-negative weights; returns ``self``.

        A weight is a count: a row of weight 2 is the row given twice, in every metric (the tests'
        sample size is the total weight).  Integer weights keep the tables' counts exact integers;
        fractional ones make them float64 (merged in chunk order).  Rows of weight 0 are left out.
        Raises :class:`~calengine.errors.DataError` on shape mismatch, NaN/inf, values outside
        ``[0, 1]``, rows not summing to 1 within ``1e-6``, labels outside ``0..k-1`` or negative,
        NaN or non-numeric weights; the accumulator is left unchanged in that case.
        """
        y, P = _validate(y, P, self.n_classes)
        w = _check_weight(sample_weight, y.size)
        if w is not None and not np.all(w > 0):
            keep = w > 0
            y, P, w = y[keep], P[keep], w[keep]
        if y.size == 0:
            return self
        P = P + 0.0  # fold -0.0 into 0.0 so the two never form separate segments
        if w is None and self._top_table[1].dtype.kind != "f" and complementary(P):
            if self.__dict__.get("_mirrored") is None:
                self._mirrored = []
            self._mirrored.append(_row_keys(P[:, 1], y == 1))
            self.n += int(y.size)
            return self
        pred = np.argmax(P, axis=1)
        conf = P[np.arange(P.shape[0]), pred]
        if w is None and self._top_table[1].dtype.kind != "f":
            pieces = [_row_keys(P[:, c], y == c) for c in range(self.n_classes)]
            pieces.append(_row_keys(conf, pred == y))
            self._wait(pieces)
            self.n += int(y.size)
            return self
        pieces = [_group_rows(P[:, c], y == c, w) for c in range(self.n_classes)]
        pieces.append(_group_rows(conf, pred == y, w))
        if pieces[-1][1].dtype.kind == "f" or self._top_table[1].dtype.kind == "f":
            self._cls = [_merge_tables(t, piece) for t, piece in zip(self._cls, pieces)]
            self._top = _merge_tables(self._top, pieces[-1])
            self.n = _total(self._top)
            return self
        self._wait(pieces)
        self.n += _total(pieces[-1])
        return self

    def _wait(self, pieces: list) -> None:
        if self.__dict__.get("_pending") is None:
            self._pending = [[] for _ in pieces]
        for waiting, piece in zip(self._pending, pieces):
            waiting.append(piece)

    def merge(self, other: "MetricAccumulator") -> "MetricAccumulator":
        """Fold ``other`` (unchanged) into ``self`` and return ``self``; class counts must agree."""
        if not isinstance(other, MetricAccumulator):
            raise TypeError(f"can only merge a MetricAccumulator, got {type(other).__name__}")
        if other.n_classes != self.n_classes:
            raise DataError(
                f"cannot merge evaluations of {self.n_classes} and {other.n_classes} classes; "
                "evaluate every partition with the same number of classes"
            )
        for c in range(self.n_classes):
            self._cls[c] = _merge_tables(self._cls[c], other._cls[c])
        self._top = _merge_tables(self._top, other._top)
        self.n = _total(self._top)
        return self

    # ---- serialisation ----------------------------------------------------------------------------

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The full state as a flat dict of numpy arrays (safe for ``np.savez`` without pickle).

        Keys: ``n_classes`` and ``n`` (0-d int64); ``class_ptr`` (k+1 int64 offsets) delimiting class
        ``c``'s table at ``[class_ptr[c], class_ptr[c+1])`` within ``class_value`` (float64),
        ``class_pos`` and ``class_neg`` (int64); ``top_value`` (float64), ``top_correct`` and
        ``top_wrong`` (int64) for the top-label confidence.
        """
        sizes = [t[0].size for t in self._cls]
        return {
            "n_classes": np.asarray(self.n_classes, dtype=np.int64),
            "n": np.asarray(self.n, dtype=np.float64 if isinstance(self.n, float) else np.int64),
            "class_ptr": np.concatenate(([0], np.cumsum(sizes))).astype(np.int64),
            "class_value": np.concatenate([t[0] for t in self._cls]),
            "class_pos": np.concatenate([t[1] for t in self._cls]),
            "class_neg": np.concatenate([t[2] for t in self._cls]),
            "top_value": self._top[0].copy(),
            "top_correct": self._top[1].copy(),
            "top_wrong": self._top[2].copy(),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "MetricAccumulator":
        """Rebuild an accumulator from :meth:`to_arrays` output; malformed input raises DataError."""
        missing = [key for key in _ARRAY_KEYS if key not in arrays]
        if missing:
            raise DataError(
                f"metric state lacks {', '.join(missing)}; "
                "pass the dict produced by MetricAccumulator.to_arrays()"
            )
        k = int(np.asarray(arrays["n_classes"]))
        if k < 2:
            raise DataError(
                f"metric state has n_classes={k}; pass the dict produced by MetricAccumulator.to_arrays()"
            )
        self = cls(k)
        ptr = np.asarray(arrays["class_ptr"], dtype=np.int64)
        cv = np.asarray(arrays["class_value"], dtype=np.float64)
        cp, cn = _count_array(arrays["class_pos"]), _count_array(arrays["class_neg"])
        tv = np.asarray(arrays["top_value"], dtype=np.float64)
        tc, tw = _count_array(arrays["top_correct"]), _count_array(arrays["top_wrong"])
        n_arr = np.asarray(arrays["n"])
        n = float(n_arr) if n_arr.dtype.kind == "f" else int(n_arr)
        ok = (
            ptr.shape == (k + 1,)
            and ptr[0] == 0
            and ptr[-1] == cv.size
            and np.all(np.diff(ptr) >= 0)
            and cv.shape == cp.shape == cn.shape
            and tv.shape == tc.shape == tw.shape
            and cv.ndim == 1
            and tv.ndim == 1
        )
        if ok:
            bounds = [slice(ptr[c], ptr[c + 1]) for c in range(k)]
            tables = [(cv[sl], cp[sl], cn[sl]) for sl in bounds]
            ok = all(
                math.isclose(float(t[1].sum() + t[2].sum()), n, rel_tol=1e-9)
                and np.all(t[1] >= 0)
                and np.all(t[2] >= 0)
                and np.all(np.diff(t[0]) > 0)
                for t in tables + [(tv, tc, tw)]
            )
        if not ok:
            raise DataError(
                "metric state arrays are inconsistent (offsets, shapes, ordering or counts); "
                "pass the unmodified dict produced by MetricAccumulator.to_arrays()"
            )
        self.n = n
        self._cls = [(t[0].copy(), t[1].copy(), t[2].copy()) for t in tables]
        self._top = (tv.copy(), tc.copy(), tw.copy())
        return self

    # ---- metrics ----------------------------------------------------------------------------------

    def _require_rows(self) -> None:
        if self.n == 0:
            raise DataError("no rows to evaluate (or every weight is 0); pass at least one labelled prediction"
                            " with a positive weight")

    def result(self) -> dict[str, Any]:
        """All metrics of the rows seen so far; raises DataError when there are none.

        Returns a dict with ``n`` and ``n_classes`` (int) and these floats:

        * ``brier``: binary ``mean (y - P[:, 1])²`` in [0, 1]; multiclass ``mean Σ_c (1[y=c] - P[:, c])²``
          in [0, 2].
        * ``calibration_loss`` + ``refinement_loss`` == ``brier`` (Flach & Matsubara, segments = equal
          predicted values; multiclass: the sum of the one-vs-rest decompositions of every column).
        * ``log_loss`` (nats) and ``log_loss_bits``: ``mean -log(clip(P[i, y_i], 1e-15, 1))``.
        * ``auc``: binary on ``P[:, 1]``, exact with ties counted one half; multiclass: unweighted mean of
          one-vs-rest AUCs over classes having both positives and negatives.  NaN if none has.
        * ``error_rate``: fraction of rows whose argmax (ties → lowest index) differs from ``y``.
        * ``ece`` / ``mce``: weighted mean / maximum of ``|accuracy - mean confidence|`` over the non-empty
          of 15 equal-width bins ``[j/15, (j+1)/15)`` (last bin closed) of the top-label confidence.
        * ``confidence_q``: Duin & Tax ``mean (C - p_sel)²``, ``p_sel`` the top-label confidence and
          ``C = 1`` if the row is classified correctly; ``confidence_rho = q/ε - 1/2`` with
          ``ε = error_rate`` (NaN when ε = 0).

        and two dicts, the CORP decomposition (:mod:`calengine.metrics.corp`) of the Brier score and
        of the log loss by isotonic recalibration, meaningful for continuous scores where
        ``calibration_loss`` is not: ``corp_brier`` and ``corp_log_loss``, each
        ``{"score", "mcb", "dsc", "unc"}`` with ``score = mcb - dsc + unc``; binary: column 1;
        multiclass: sums over the one-vs-rest columns plus ``per_class``.
                Exact, in memory: this method.  Bounded memory, from score ranges:
                :func:`calengine.metrics.ranged.core.core_result`.
"""
        self._require_rows()
        return core_result([[t] for t in self._cls], [self._top], n=self.n, unit=self._unit(), clip=LOG_LOSS_CLIP)

    def _unit(self):
        """Fractional weights: the kernels count them in integer units of ``total / 2**52``
        (:func:`calengine.metrics.ranged.kernels.counts`); None for integer counts."""
        return float(self.n) / float(1 << 52) if isinstance(self.n, float) else None

    def calibration_suite(self, seed: int = 0, parts: frozenset | None = None) -> dict:
        """The calibration metric suite of issue 22 (equal-mass and class-wise ECE, the debiased L2
        error with its bootstrap interval drawn with ``seed``, smooth ECE, KS, Kuiper, ECCE and
        Hosmer-Lemeshow tests, the Cox calibration slope and intercept, ICI) from this accumulator's
        tables, each table one score range; see :mod:`calengine.metrics.ranged.suite`.  ``parts``: only
        those parts of it (:func:`calengine.metrics.selection.needs`; None: all).

        Exact, in memory: this method.  Bounded memory, from score ranges:
        :func:`calengine.metrics.ranged.suite.calibration_suite`.
        """
        from .ranged.suite import calibration_suite

        self._require_rows()
        return calibration_suite([[t] for t in self._cls], [self._top], unit=self._unit(), seed=seed, parts=parts)

    def smooth_reliability(self, sigma: float | None = None) -> dict:
        """relplot's smooth reliability curve with its 95 % band, of the column the smooth ECE measures
        (class 1 for two classes, else the top-label confidence), at bandwidth ``sigma`` (default: the
        smooth ECE's ``smece_sigma``); see :func:`calengine.metrics.statistics.smooth_reliability`.

        Exact, in memory: this method.  Bounded memory, from score ranges:
        :meth:`calengine.metrics.ranged.engine.RangedTables.smooth_reliability` (the same function).
        """
        from .ranged.kernels import counts
        from .ranged.suite import smooth_reliability_curve

        self._require_rows()
        if sigma is None:
            sigma = self.calibration_suite()["smece_sigma"]
        unit = self._unit()
        scale = float(np.sum(counts(self._top, unit)[3]))
        return smooth_reliability_curve([[t] for t in self._cls], [self._top], float(sigma), unit=unit, scale=scale)

    def drift_check(self, alpha: float = 0.01) -> dict:
        """Tests of "these probabilities are calibrated on these rows"; see :mod:`calengine.metrics.drift`.

        Exact, in memory: this method.  Bounded memory, from score ranges:
        :func:`calengine.metrics.ranged.core.ranged_drift` (this method runs it on one range).
        """
        self._require_rows()
        return ranged_drift([[t] for t in self._cls], alpha, unit=self._unit())

    # ---- report curves ----------------------------------------------------------------------------

    @staticmethod
    def _binned(v, pos, neg, edges, right_closed: bool = False):
        """Per bin: row count, Σ value, positive count (floats).

        Bins are ``[edges[j], edges[j+1])`` with the last one closed, or with ``right_closed``
        ``(edges[j], edges[j+1]]`` with the first one closed.
        """
        n_bins = edges.size - 1
        side = "left" if right_closed else "right"
        idx = np.clip(np.searchsorted(edges[1:-1], v, side=side), 0, n_bins - 1)
        w = (pos + neg).astype(np.float64)
        cnt = np.bincount(idx, weights=w, minlength=n_bins)
        conf_sum = np.bincount(idx, weights=w * v, minlength=n_bins)
        pos_sum = np.bincount(idx, weights=pos.astype(np.float64), minlength=n_bins)
        return cnt, conf_sum, pos_sum

    def _class_arg(self, cls, *, default_binary: bool) -> int:
        if cls is None and default_binary and self.n_classes == 2:
            return 1
        if isinstance(cls, bool) or not isinstance(cls, (int, np.integer)) or not 0 <= cls < self.n_classes:
            raise ParameterError(
                f"cls must be a class index in 0..{self.n_classes - 1}, got {cls!r}"
                + ("" if default_binary and self.n_classes == 2 else "; pass the class to plot")
            )
        return int(cls)

    def reliability_diagram(self, bins: int = 15, strategy: str = "uniform", cls: int | None = None) -> dict:
        """Observed frequency against mean predicted probability, per bin.

        ``cls=None`` bins the top-label confidence and observes accuracy (the diagram behind ``ece``);
        ``cls=c`` bins ``P[:, c]`` and observes the frequency of ``y == c``.

        ``strategy="uniform"``: ``bins`` equal-width bins ``[j/bins, (j+1)/bins)`` on [0, 1], the last
        one closed.  ``"quantile"``: edges at the minimum, the inverted-CDF quantiles ``j/bins`` and the
        maximum of the predicted values, bins ``(edges[j], edges[j+1]]`` with the first one closed, so
        each holds about ``n/bins`` rows; rows with equal values are never split, which can leave a
        bin empty (repeated edges).

        Returns arrays: ``bin_edges`` (bins+1), and per bin ``mean_predicted``, ``observed_frequency``
        (both NaN for empty bins) and ``count`` (int64).
                Exact, in memory: this method.  Bounded memory, from score ranges:
                :func:`calengine.metrics.ranged.curves.reliability_bins`.
"""
        if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
            raise ParameterError(f"bins must be a positive integer, got {bins!r}")
        if strategy not in ("uniform", "quantile"):
            raise ParameterError(f"strategy must be 'uniform' or 'quantile', got {strategy!r}")
        self._require_rows()
        if cls is None:
            v, pos, neg = self._top
        else:
            v, pos, neg = self._cls[self._class_arg(cls, default_binary=False)]
        if strategy == "uniform":
            edges = np.linspace(0.0, 1.0, int(bins) + 1)
        else:
            # inner edge j = smallest value whose cumulative count reaches j·n/bins (integer arithmetic)
            scaled_cum = np.cumsum(pos + neg) * int(bins)
            levels = np.arange(1, int(bins), dtype=np.int64) * self.n
            inner = v[np.minimum(np.searchsorted(scaled_cum, levels, side="left"), v.size - 1)]
            edges = np.concatenate(([v[0]], inner, [v[-1]]))
        cnt, conf_sum, pos_sum = self._binned(v, pos, neg, edges, right_closed=strategy == "quantile")
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_pred = np.where(cnt > 0, conf_sum / cnt, np.nan)
            observed = np.where(cnt > 0, pos_sum / cnt, np.nan)
        return {
            "bin_edges": edges,
            "mean_predicted": mean_pred,
            "observed_frequency": observed,
            "count": np.rint(cnt).astype(np.int64) if pos.dtype.kind != "f" else cnt,
        }

    def error_reject_curve(self) -> dict:
        """Error rate among accepted rows as the least confident rows are rejected (Duin & Tax).

        A row is accepted iff its top-label confidence is ``>= threshold``.  Thresholds are the distinct
        confidences in increasing order followed by ``+inf``, so the first point rejects nothing
        (``error_rate`` = overall error rate) and the last rejects everything (``error_rate`` NaN, no
        row accepted).  Rows of equal confidence are always rejected together.

        Returns arrays of equal length: ``threshold``, ``reject_rate`` in [0, 1], ``error_rate`` (among
        accepted rows) and ``n_accepted`` (int64).
                Exact, in memory: this method.  Bounded memory, from score ranges:
                :func:`calengine.metrics.ranged.core.error_reject_points` (thinned).
"""
        self._require_rows()
        v, correct, wrong = self._top
        rejected = np.concatenate(([0], np.cumsum(correct + wrong)))
        wrong_rejected = np.concatenate(([0], np.cumsum(wrong)))
        accepted = self.n - rejected
        with np.errstate(invalid="ignore", divide="ignore"):
            err = np.where(accepted > 0, (wrong_rejected[-1] - wrong_rejected) / accepted, np.nan)
        return {
            "threshold": np.concatenate((v, [np.inf])),
            "reject_rate": rejected / self.n,
            "error_rate": err,
            "n_accepted": accepted.astype(np.int64) if correct.dtype.kind != "f" else accepted,
        }

    def error_reject_points(self, max_points: int = 101) -> dict:
        """:meth:`error_reject_curve` thinned to at most ``max_points`` evenly spread points (the
        first rejects nothing, the last everything): ``threshold``, ``reject_rate``, ``error_rate``
        and ``n_accepted``, as a range-partitioned evaluation computes them
        (:func:`calengine.metrics.ranged.core.error_reject_points`).

        Exact, in memory: this method.  Bounded memory, from score ranges:
        :func:`calengine.metrics.ranged.core.error_reject_points`.
        """
        self._require_rows()
        return error_reject_points([self._top], max_points=max_points, unit=self._unit())

    def error_reject_at(self, rates) -> list:
        """The error rate among accepted rows at the last point of :meth:`error_reject_curve` whose
        reject rate is at most each of ``rates`` (the text table of ``evaluate``); see
        :func:`calengine.metrics.ranged.core.error_reject_at`.

        Exact, in memory: this method.  Bounded memory, from score ranges:
        :func:`calengine.metrics.ranged.core.error_reject_at`.
        """
        self._require_rows()
        return error_reject_at([self._top], rates, unit=self._unit())

    def roc_curve(self, cls: int | None = None) -> dict:
        """One-vs-rest ROC curve of column ``cls`` (default: class 1 when there are two classes).

        Points run from ``(0, 0)`` (threshold ``+inf``) to ``(1, 1)``, one per distinct predicted value in
        decreasing order; a row counts as positive iff its probability is ``>= threshold``, so tied rows
        move together (a diagonal step).  Returns arrays ``fpr``, ``tpr``, ``threshold``; the rates are
        NaN when the class has no positives or no negatives.  The trapezoidal area under this curve
        equals the tie-aware ``auc``.
                Exact, in memory: this method.  Bounded memory, from score ranges:
                :func:`calengine.metrics.ranged.curves.roc_thinned` (thinned).
"""
        self._require_rows()
        v, pos, neg = self._cls[self._class_arg(cls, default_binary=True)]
        tp = np.concatenate(([0], np.cumsum(pos[::-1])))
        fp = np.concatenate(([0], np.cumsum(neg[::-1])))
        with np.errstate(invalid="ignore", divide="ignore"):
            tpr = tp / tp[-1] if tp[-1] else np.full(tp.shape, np.nan)
            fpr = fp / fp[-1] if fp[-1] else np.full(fp.shape, np.nan)
        return {"fpr": fpr, "tpr": tpr, "threshold": np.concatenate(([np.inf], v[::-1]))}

    def corp_curve(self, cls: int | None = None) -> dict:
        """The CORP reliability curve of column ``cls`` (default: class 1 of two): the isotonic (PAV)
        recalibration of ``P[:, cls]`` as blocks, arrays ``lo``/``hi`` (lowest and highest forecast in the
        block), ``value`` (the block's observed frequency) and ``count`` (rows).  Dimitriadis, Gneiting &
        Jordan draw this step function instead of binned points: no bin choice, and the score the
        forecasts lose against it is ``corp_brier["mcb"]`` (``corp_log_loss["mcb"]``).

        Exact, in memory: this method.  Bounded memory, from score ranges:
        :func:`calengine.metrics.ranged.curves.corp_curve`.
        """
        self._require_rows()
        v, pos, neg = self._cls[self._class_arg(cls, default_binary=True)]
        starts, bpos, bneg = isotonic_recalibration(v, pos, neg)
        ends = np.concatenate((starts[1:], [v.size])) - 1
        cnt = bpos + bneg
        return {"lo": v[starts], "hi": v[ends], "value": bpos / cnt,
                "count": cnt if cnt.dtype.kind == "f" else cnt.astype(np.int64)}

    def __repr__(self) -> str:
        return f"MetricAccumulator(n_classes={self.n_classes}, n={self.n})"


# --------------------------------------------------------------------------------------------------
# array functions (the one-partition case)


def _n_classes_of(P) -> int:
    shape = np.shape(P)
    if len(shape) == 1:
        return 2
    if len(shape) != 2:
        raise DataError(
            f"P must have shape (n, k), got shape {shape}; pass one row of class probabilities per example"
        )
    return shape[1]


def _accumulate(y, P) -> MetricAccumulator:
    k = _n_classes_of(P)
    if k < 2:
        raise DataError(f"P must have at least 2 columns, got {k}; pass one probability column per class")
    return MetricAccumulator(k).add(y, P)


def evaluate_predictions(y, P) -> dict:
    """All metrics of :meth:`MetricAccumulator.result` for in-memory ``y`` (n,) and ``P`` (n, k)."""
    return _accumulate(y, P).result()


def reliability_diagram(y, P, n_bins: int = 15, strategy: str = "uniform", cls: int | None = None) -> dict:
    """See :meth:`MetricAccumulator.reliability_diagram`; ``cls=None`` is the top-label diagram."""
    return _accumulate(y, P).reliability_diagram(bins=n_bins, strategy=strategy, cls=cls)


def error_reject_curve(y, P) -> dict:
    """See :meth:`MetricAccumulator.error_reject_curve`."""
    return _accumulate(y, P).error_reject_curve()
