"""Weighted pool-adjacent-violators (PAV) with tied scores pooled first, and its two prediction rules.

Isotonic calibration (Zadrozny & Elkan 2002) fits the non-decreasing step function of the score that
minimises weighted squared error (and, by Brümmer & du Preez, every other proper scoring rule).
Tied scores are pooled into one block *before* PAV runs.  Without that step PAV could split a group
of identical scores according to the order of their labels, so two examples with the same score
would get different probabilities; with it, PAV agrees exactly with the ROC convex hull method
(Fawcett & Niculescu-Mizil 2007, see :mod:`calengine.metrics.roc`) and with scikit-learn's
``IsotonicRegression`` at every training score.

Ties are exact float equality (scikit-learn also merges scores closer than ``1e-15``; calengine does
not, so a score never merges with a different one).  Zero-weight examples carry no information and
are dropped before anything else.

The O(n) PAV pass runs in compiled code (SciPy's, the pass ``scipy.optimize.isotonic_regression``
wraps, loaded without importing ``scipy.optimize``: :func:`_compiled_pava`) over the distinct scores
only, after an O(n log n) sort, so a million examples take well under a second.  The sort is the
whole cost, so :func:`pool_ties` avoids NumPy's stable argsort (a plain value sort for unit
weights, the unstable argsort otherwise) while returning exactly what the stable sort defines.  At
10M scores a fit took 0.15-0.5 of one stable argsort with unit weights and 0.6-1.0 with float
weights, against 1.3-2.1 before (two runs on a loaded 2-core machine; benchmarks/results/pav.md).

This module also holds :func:`check_binary_data`, the input validation every binary calibrator and
the ROC helpers share, so that all of them reject bad data with the same messages.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np

from ..errors import DataError

__all__ = [
    "PAVBlocks",
    "check_binary_data",
    "check_scores",
    "pool_ties",
    "pav",
    "pav_sums",
    "predict_step",
    "predict_linear",
]


def check_scores(scores, what: str = "scores") -> np.ndarray:
    """Return ``scores`` as a 1-D float64 array, rejecting anything that is not finite.

    Raises :class:`calengine.errors.DataError` for a non-1-D or non-numeric input and for NaN or
    infinite values.
    """
    try:
        s = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{what} must be numbers ({exc}); pass one numeric column") from None
    if s.ndim != 1:
        raise DataError(f"{what} must be 1-D, got shape {s.shape}; pass a single column of scores")
    if s.size and not np.all(np.isfinite(s)):
        bad = int(np.count_nonzero(~np.isfinite(s)))
        raise DataError(
            f"{what} hold {bad} NaN or infinite value(s); drop or impute those rows before calibrating"
        )
    return s


def check_binary_data(scores, y, sample_weight=None, *, require_both_classes: bool = True):
    """Validate one calibration column and return ``(scores, y, weights)`` as float64, int64, float64.

    Contract: ``scores`` finite 1-D; ``y`` the same length, only 0 and 1 (bools or floats equal to 0/1
    are accepted); ``sample_weight`` ``None`` (all ones) or finite, non-negative, same length, not all
    zero.  With ``require_both_classes`` the positive-weight examples must hold both labels.  Every
    violation raises :class:`calengine.errors.DataError` with a one-line message naming the fix.
    """
    s = check_scores(scores)
    if s.size == 0:
        raise DataError("calibration data is empty; pass at least one example of each class")
    try:
        yv = np.asarray(y)
        if yv.dtype == object:
            yv = yv.astype(np.float64)
    except (TypeError, ValueError):
        raise DataError("labels y must be 0 or 1; encode the positive class as 1 and the rest as 0") from None
    if yv.ndim != 1:
        raise DataError(f"labels y must be 1-D, got shape {yv.shape}; pass one label per score")
    if yv.shape[0] != s.shape[0]:
        raise DataError(
            f"scores and y differ in length ({s.shape[0]} vs {yv.shape[0]}); pass one label per score"
        )
    if yv.dtype.kind not in "biuf":
        raise DataError("labels y must be 0 or 1; encode the positive class as 1 and the rest as 0")
    # integer labels (the engine's) are checked and converted as they are; the float copy, which the
    # first round of every calibrator paid for each row, is made only for float labels or the message
    yf = None if yv.dtype.kind in "biu" and np.all((yv == 0) | (yv == 1)) else yv.astype(np.float64)
    if yf is not None and not np.all((yf == 0.0) | (yf == 1.0)):
        bad = np.unique(yf[(yf != 0.0) & (yf != 1.0)])[:3]
        raise DataError(
            f"labels y must be 0 or 1, found {', '.join(repr(float(b)) for b in bad)}; "
            "encode the positive class as 1 and the rest as 0"
        )
    yi = yv.astype(np.int64) if yf is None else yf.astype(np.int64)
    if sample_weight is None:
        w = np.ones(s.shape[0], dtype=np.float64)
    else:
        try:
            w = np.asarray(sample_weight, dtype=np.float64)
        except (TypeError, ValueError):
            raise DataError(
                "sample_weight must be numbers; pass non-negative floats, one per score"
            ) from None
        if w.ndim != 1 or w.shape[0] != s.shape[0]:
            raise DataError(
                f"sample_weight has shape {w.shape} but there are {s.shape[0]} scores; "
                "pass one weight per score"
            )
        if not np.all(np.isfinite(w)):
            raise DataError("sample_weight holds NaN or infinite values; pass finite non-negative weights")
        if np.any(w < 0):
            raise DataError("sample_weight holds negative values; pass non-negative weights")
        if not np.any(w > 0):
            raise DataError("every sample_weight is zero; give at least one example a positive weight")
    if require_both_classes:
        live = w > 0
        n_pos = int(np.count_nonzero(yi[live] == 1))
        n_neg = int(np.count_nonzero(yi[live] == 0))
        if n_pos == 0 or n_neg == 0:
            only = 1 if n_pos else 0
            raise DataError(
                f"calibration data holds only one class (every weighted label is {only}); "
                "use more data or fewer folds so both classes reach the calibrator"
            )
    return s, yi, w


class PAVBlocks(NamedTuple):
    """The fitted isotonic step function, one entry per block, in increasing score order.

    ``lo``/``hi``: lowest and highest training score in the block; ``value``: weighted positive
    fraction (strictly increasing from block to block); ``weight``: total weight of the block.
    """

    lo: np.ndarray
    hi: np.ndarray
    value: np.ndarray
    weight: np.ndarray


def pool_ties(scores, y, sample_weight=None):
    """Merge identical scores: returns ``(distinct_scores, weighted_sum_y, weight)`` in increasing order.

    ``y`` may be any real target (0/1 labels for calibration).  Zero-weight examples are dropped.
    Returns sums rather than means so that callers can re-pool without rounding drift; the mean of
    a group is ``weighted_sum_y / weight``.  Inputs are assumed validated (see
    :func:`check_binary_data`); lengths must match.

    The result is defined by a stable sort: each group's score is its first example in input order
    (which decides the sign of a zero score) and its sums add the examples in input order.  Two
    routes compute exactly that result:

    * 0/1 integer labels with unit weights (the common calibration case, and what :func:`pav` gets
      without ``sample_weight``): every sum is an exact integer, so the order inside a group cannot
      change it.  The groups come from two plain value sorts (all scores, and the scores of the
      smaller class), with no permutation at all; a value sort is several times cheaper than the
      stable argsort it replaces, which dominated the fit at 10M scores.
    * anything else: float sums depend on the order of their terms, so the stable order is needed;
      :func:`_stable_order` gets it from the cheaper unstable argsort.
    """
    s = np.asarray(scores, dtype=np.float64)
    yv = np.asarray(y)
    if yv.dtype.kind not in "biu":
        yv = yv.astype(np.float64)
    w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    if w is not None:
        keep = w > 0
        if not np.all(keep):
            s, yv, w = s[keep], yv[keep], w[keep]
        if np.all(w == 1.0):
            w = None
    if s.size == 0:
        empty = np.empty(0, dtype=np.float64)
        return empty, empty.copy(), empty.copy()
    binary = yv.dtype.kind in "biu" and _is_zero_one(yv)
    if w is None and binary:
        pooled = _pool_unit_binary(s, yv)
        if pooled is not None:
            return pooled
    if w is None:
        w = np.ones_like(s)
    if binary and yv.dtype.kind != "b":
        yv = yv != 0  # the gather below moves 1 byte per example, not 8; w * True is w, w * False 0.0
    order, s_sorted, new_group = _stable_order(s)
    w = w[order]
    wy = w * yv[order]
    if new_group is None:  # no ties: every group is one example, its sums are the example's own
        return s_sorted, wy, w
    starts = np.flatnonzero(new_group)
    return s_sorted[starts], np.add.reduceat(wy, starts), np.add.reduceat(w, starts)


def _is_zero_one(y: np.ndarray) -> bool:
    """Whether integer or bool labels are all 0 or 1 (one pass, no float copy)."""
    if y.dtype.kind == "b":
        return True
    return bool(np.all((y == 0) | (y == 1)))


def _group_starts_flags(s_sorted: np.ndarray) -> np.ndarray | None:
    """``True`` where a sorted array starts a new run of equal values, or ``None`` if there are no ties.

    Equality is float ``==``, so ``-0.0`` and ``0.0`` are one group, as in the stable-sort definition.
    """
    flags = np.empty(s_sorted.size, dtype=bool)
    flags[0] = True
    np.not_equal(s_sorted[1:], s_sorted[:-1], out=flags[1:])
    return None if np.all(flags) else flags


def _stable_order(s: np.ndarray):
    """``(order, s[order], new_group_flags or None)`` with ``order`` equal to ``argsort(kind="stable")``.

    NumPy's default argsort is about twice as fast as its stable one on float64 (measured 1.0 s
    against 2.2 s at 10M normal scores), and its order can differ from the stable one only inside
    runs of equal scores.  Those runs are put back in input order by sorting ``group * n + index``
    (one int64 value sort, ~0.25 s at 10M): group numbers do not decrease along the sorted array, so
    that sort moves indices only within their own run.  NaN (unvalidated input; every NaN is its own
    group) falls back to the stable argsort, whose NaN order the cheap route does not reproduce.
    """
    n = s.size
    order = np.argsort(s)
    s_sorted = s[order]
    if np.isnan(s_sorted[-1]):
        order = np.argsort(s, kind="stable")
        s_sorted = s[order]
        return order, s_sorted, _group_starts_flags(s_sorted)
    flags = _group_starts_flags(s_sorted)
    if flags is not None:  # reordering within runs keeps the flags (and the values, but for the sign of zero)
        base = np.cumsum(flags, dtype=np.int64)
        base -= 1
        base *= n
        key = base + order
        key.sort()
        key -= base
        order = key
        # Equal scores differ in bits only as -0.0 and 0.0: re-read the zero run in its new order.
        lo = int(np.searchsorted(s_sorted, 0.0, side="left"))
        hi = int(np.searchsorted(s_sorted, 0.0, side="right"))
        if hi - lo > 1:
            s_sorted[lo:hi] = s[order[lo:hi]]
    return order, s_sorted, flags


def _pool_unit_binary(s: np.ndarray, y: np.ndarray):
    """:func:`pool_ties` for unit weights and 0/1 labels, from value sorts only (see there for why).

    Group sizes come from the sorted scores; the labels enter through the sorted scores of the
    smaller class, counted per group either by locating each of them (``searchsorted`` of the class
    into all scores, then ``bincount``) or, when there are fewer groups than class members, by
    cumulative counts at the group ends.  The first-in-input-order rule only matters for the sign
    of a zero score and is applied directly.  Returns ``None`` for NaN scores (unvalidated input:
    each NaN is its own group, which counting by value cannot express).
    """
    n = s.size
    a = np.sort(s)
    if np.isnan(a[-1]):
        return None
    flags = _group_starts_flags(a)
    if flags is None:
        xs, starts = a, None
        size = np.ones(n, dtype=np.int64)
    else:
        starts = np.flatnonzero(flags)
        xs = a[starts]
        size = np.diff(starts, append=n)
    pos = y.astype(bool, copy=False) if y.dtype.kind == "b" else y != 0
    n_pos = int(np.count_nonzero(pos))
    minority_is_pos = n_pos <= n - n_pos
    m = np.sort(s[pos if minority_is_pos else ~pos])
    if xs.size <= m.size:
        k = np.diff(np.searchsorted(m, xs, side="right"), prepend=0)
    else:
        k = np.bincount(np.searchsorted(a, m, side="left"), minlength=n)
        if starts is not None:
            k = k[starts]
    wy = k if minority_is_pos else size - k
    g = int(np.searchsorted(xs, 0.0, side="left"))
    if g < xs.size and xs[g] == 0.0:
        xs[g] = s[np.argmax(s == 0.0)]
    return xs, wy.astype(np.float64), size.astype(np.float64)


def pav(scores, y, sample_weight=None) -> PAVBlocks:
    """Weighted isotonic (non-decreasing) regression of ``y`` on ``scores``, ties pooled first.

    Returns :class:`PAVBlocks`; the fitted value of a training example is the value of the block
    holding its score.  Adjacent blocks with equal values are merged, so values strictly increase.
    ``y`` in [0, 1] gives values in [0, 1].  Validates its input with :func:`check_binary_data`
    without requiring both classes (a single class yields one block).
    """
    s, yi, w = check_binary_data(scores, y, sample_weight, require_both_classes=False)
    xs, wy, ws = pool_ties(s, yi, None if sample_weight is None else w)
    if xs.size == 1:
        return PAVBlocks(xs.copy(), xs.copy(), wy / ws, ws)
    starts = _pav_starts(wy / ws, ws)
    # Recompute every block mean from exact group sums, then merge any neighbours that are not
    # strictly increasing (equal means, or a last-ulp disagreement in the compiled pass).
    while True:
        bw = np.add.reduceat(ws, starts)
        bv = np.add.reduceat(wy, starts) / bw
        bad = np.flatnonzero(bv[1:] <= bv[:-1])
        if bad.size == 0:
            break
        starts = np.delete(starts, bad + 1)
    ends = np.concatenate((starts[1:], [xs.size])) - 1
    return PAVBlocks(xs[starts], xs[ends], np.clip(bv, 0.0, 1.0), bw)


def _pav_starts(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """First index of every block of the weighted increasing isotonic regression of ``values``
    (positive ``weights``): ``scipy.optimize.isotonic_regression(...).blocks[:-1]``, computed by the
    same compiled pass (:func:`_compiled_pava`)."""
    n = values.shape[0]
    r = np.full(n + 1, -1, dtype=np.intp)
    _, _, r, b = _compiled_pava()(np.array(values, dtype=np.float64, order="C", copy=True),
                                  np.array(weights, dtype=np.float64, order="C", copy=True), r)
    return np.asarray(r[:b], dtype=np.intp)


_PAVA = None
_PAVA_LOCK = threading.Lock()


def _compiled_pava():
    """SciPy's compiled PAV pass, ``pava(x, w, r) -> (x, w, r, number of blocks)``, which
    ``scipy.optimize.isotonic_regression`` wraps (SciPy >= 1.12, the version calengine requires).

    Why not through ``scipy.optimize``: importing that package (its minimisers, linear programming,
    sparse linear algebra) cost ~0.5 s of CPU, a tenth of a 10M-row isotonic fit of a score column, for
    this one function.  The extension module is loaded from its file under its own name, so a later
    ``import scipy.optimize`` reuses it; a SciPy whose module is elsewhere takes the public route."""
    global _PAVA
    with _PAVA_LOCK:  # task threads may ask at once; the module is loaded once
        if _PAVA is None:
            _PAVA = _load_pava()
    return _PAVA


def _load_pava():
    """``pava`` of ``scipy.optimize._pava_pybind``: from ``sys.modules`` if loaded, else from its file
    in SciPy's folder (found without importing SciPy), else through ``scipy.optimize``."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    name = "scipy.optimize._pava_pybind"
    module = sys.modules.get(name)
    if module is not None:
        return module.pava
    package = importlib.util.find_spec("scipy")
    for folder in (package.submodule_search_locations or ()) if package is not None else ():
        finder = importlib.machinery.FileFinder(
            os.path.join(folder, "optimize"),
            (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES))
        spec = finder.find_spec(name)
        if spec is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[name] = module
            return module.pava
    from scipy.optimize._pava_pybind import pava

    return pava


def predict_step(lo, value, scores) -> np.ndarray:
    """Right-continuous step prediction: the value of the last block whose lowest score is <= s.

    ``lo`` must be strictly increasing.  Scores below the first block get the first value and scores
    above the last block the last value (clipping), so the output stays within ``value``'s range.
    This is Zadrozny & Elkan's rule inside blocks; in the gap between two blocks the previous block
    holds until the next block's lowest score is reached.
    """
    lo = np.asarray(lo, dtype=np.float64)
    value = np.asarray(value, dtype=np.float64)
    s = check_scores(scores)
    idx = np.searchsorted(lo, s, side="right") - 1
    np.clip(idx, 0, lo.size - 1, out=idx)
    return value[idx]


def linear_knots(lo, hi, value):
    """Interpolation knots ``(x, y)`` of the piecewise-linear isotonic fit (scikit-learn's semantics).

    Inside a block the fit is flat; between the highest score of one block and the lowest score of
    the next it is linear.  Single-score blocks contribute one knot, so ``x`` strictly increases.
    """
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    value = np.asarray(value, dtype=np.float64)
    x = np.column_stack((lo, hi)).ravel()
    yv = np.repeat(value, 2)
    keep = np.ones(x.size, dtype=bool)
    keep[1::2] = hi > lo
    return x[keep], yv[keep]


def predict_linear(lo, hi, value, scores) -> np.ndarray:
    """Linear interpolation between consecutive distinct training scores, clipped outside the range.

    Matches ``sklearn.isotonic.IsotonicRegression(out_of_bounds="clip")`` fitted on the same data; at
    training scores it equals :func:`predict_step`.
    """
    x, yv = linear_knots(lo, hi, value)
    s = check_scores(scores)
    return np.interp(s, x, yv)


def pav_sums(lo, hi, wy, w):
    """PAV over weighted points given by exact sums ``(wy, w)`` (increasing order), like :func:`pav`.

    Shared by the isotonic calibrator's reduction (merging per-range blocks) and ``recalibrate
    --update`` (re-pooling stored blocks with new ones).

    Block means are recomputed from the exact sums and neighbours that are not strictly increasing
    are merged, so the result is the unique maximal-block isotonic fit.  Returns ``(lo, hi, wy, w)``
    of the blocks.  Points may be tie groups or blocks of an earlier PAV over a score range: PAV over
    the blocks of disjoint score ranges equals PAV over their points.
    """
    if lo.size <= 1:
        return lo, hi, wy, w
    starts = _pav_starts(wy / w, w)
    while True:
        bw = np.add.reduceat(w, starts)
        bwy = np.add.reduceat(wy, starts)
        bv = bwy / bw
        bad = np.flatnonzero(bv[1:] <= bv[:-1])
        if bad.size == 0:
            break
        starts = np.delete(starts, bad + 1)
    ends = np.concatenate((starts[1:], [lo.size])) - 1
    return lo[starts], hi[ends], bwy, bw
