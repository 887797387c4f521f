"""Mergeable statistics of the naive Bayes learners (private to :mod:`.naive_bayes`).

The naive Bayes learners implement the optional contract of ``calengine.base.Learner``
(``partial_stats`` / ``merge_stats`` / ``fit_from_stats``).  Statistics are dicts of small numpy
arrays (O(classes x features)); every dict carries ``rows`` (rows per class, int64) and ``count``
(weighted rows per class), which tell ``fit_from_stats`` whether every class was seen.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from calengine.base import is_sparse
from calengine.errors import DataError

from ._common import checked_array, _integral, _labels_of, _parse_positive_int, _reject_sparse


def _stats_input(learner, X, y, sample_weight, n_classes):
    """Validate one piece for ``partial_stats``: like ``fit``, except that zero rows and missing classes
    are allowed and weights may sum to zero.  Returns ``(X, y, w, k)`` with ``w`` all ones if unweighted.
    """
    _reject_sparse(learner, X)
    X = checked_array(X, accept_sparse="csr" if learner.accepts_sparse else False, ensure_min_samples=0)
    k = _parse_positive_int(n_classes, "n_classes")
    n = X.shape[0]
    y = _labels_of(y, n)
    if n:
        if not _integral(y) or y.min() < 0 or y.max() >= k:
            raise DataError(f"y must hold class indices 0..{k - 1} (n_classes={k})")
    y = y.astype(np.intp)
    if sample_weight is None:
        w = np.ones(n)
    else:
        w = np.asarray(sample_weight, dtype=np.float64)
        if w.shape != (n,):
            raise DataError(f"sample_weight has shape {w.shape} but X has {n} rows; give one weight per row")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise DataError("sample_weight must be finite and non-negative")
    return X, y, w, k


def _class_indicator(y: np.ndarray, w: np.ndarray, k: int) -> np.ndarray:
    """``(n, k)`` matrix with ``w[i]`` in column ``y[i]``: class sums of ``X`` are ``Y.T @ X``."""
    Y = np.zeros((len(y), k))
    Y[np.arange(len(y)), y] = w
    return Y


def _check_stats(name: str, stats: dict[str, Any], n_classes: int, keys: tuple[str, ...]) -> int:
    """Common checks of ``fit_from_stats``: keys present, ``n_classes`` rows, every class seen.

    Returns the number of classes.  Raises :class:`DataError` naming the fix.
    """
    k = _parse_positive_int(n_classes, "n_classes")
    missing = [key for key in keys if key not in stats]
    if missing:
        raise DataError(
            f"learner '{name}': statistics lack {', '.join(missing)}; pass the output of this learner's "
            "partial_stats/merge_stats"
        )
    rows = np.asarray(stats["rows"])
    if rows.shape != (k,):
        raise DataError(
            f"learner '{name}': statistics are for {rows.shape[0] if rows.ndim == 1 else '?'} classes "
            f"but n_classes={k}; compute partial_stats with the same n_classes"
        )
    empty = np.flatnonzero(rows <= 0)
    if empty.size:
        which = ", ".join(str(i) for i in empty)
        raise DataError(
            f"learner '{name}': class(es) {which} have no rows in the statistics; every class needs "
            "training rows (use stratified folds, or drop or merge the empty classes before fitting)"
        )
    if not np.asarray(stats["count"]).sum() > 0:
        raise DataError("sample_weight sums to zero; at least one row needs a positive weight")
    return k


def _same_shapes(name: str, a: dict[str, Any], b: dict[str, Any]) -> None:
    if a.keys() != b.keys() or any(np.shape(a[key]) != np.shape(b[key]) for key in a):
        raise DataError(
            f"learner '{name}': cannot merge statistics of different shapes (another learner, n_classes or "
            "number of features); compute every piece's partial_stats with the same learner and n_classes"
        )


def _chan_merge(na, ma, m2a, nb, mb, m2b):
    """Count, mean and sum of squared deviations of a union (Chan, Golub & LeVeque's pairwise update).

    ``n*`` are (weighted) counts broadcasting against the means; a side with count 0 contributes nothing.
    """
    n = na + nb
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(n > 0, nb / np.where(n > 0, n, 1.0), 0.0)
        delta = mb - ma
        mean = ma + delta * frac
        m2 = m2a + m2b + delta * delta * (na * frac)
    # exact copies when one side is empty (no rounding through the update)
    mean = np.where(nb == 0, ma, np.where(na == 0, mb, mean))
    m2 = np.where(nb == 0, m2a, np.where(na == 0, m2b, m2))
    return n, mean, m2


def _discrete_nb_stats(learner, X, y, sample_weight, n_classes, binarize=None, track_range=False):
    """Per class: rows, weighted count and weighted feature sums (of ``X`` binarised at ``binarize``
    when given); with ``track_range``, the column minimum and maximum of the raw values too."""
    from sklearn.utils.extmath import safe_sparse_dot

    X, y, w, k = _stats_input(learner, X, y, sample_weight, n_classes)
    n, d = X.shape
    Y = _class_indicator(y, w, k)
    Xc = X
    if binarize is not None and n:  # (scikit-learn's binarize refuses zero rows)
        from sklearn.preprocessing import binarize as _binarize

        Xc = _binarize(X, threshold=binarize, copy=True)
    stats = {
        "n": np.asarray(n, dtype=np.int64),
        "rows": np.bincount(y, minlength=k).astype(np.int64),
        "count": Y.sum(axis=0),
        "sums": np.asarray(safe_sparse_dot(Y.T, Xc), dtype=np.float64).reshape(k, d),
    }
    if track_range:
        sparse_x = is_sparse(X)
        if n == 0:
            lo, hi = np.full(d, np.inf), np.full(d, -np.inf)
        elif sparse_x:
            from sklearn.utils.sparsefuncs import min_max_axis

            lo, hi = (np.asarray(v, dtype=np.float64) for v in min_max_axis(X, axis=0))
        else:
            lo, hi = X.min(axis=0), X.max(axis=0)
        stats.update({"min": lo, "max": hi, "sparse": np.asarray(sparse_x)})
    return stats


def _merge_additive(name: str, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Merge of :func:`_discrete_nb_stats` results: sums add, ranges widen."""
    _same_shapes(name, a, b)
    out = {}
    for key in a:
        if key == "min":
            out[key] = np.minimum(a[key], b[key])
        elif key == "max":
            out[key] = np.maximum(a[key], b[key])
        elif key == "sparse":
            if int(a["n"]) and int(b["n"]) and bool(a[key]) != bool(b[key]):
                raise DataError(
                    f"learner '{name}': cannot merge statistics of dense and sparse pieces (the scaling "
                    "differs); give every partition in the same format"
                )
            out[key] = np.asarray(bool(b[key]) if not int(a["n"]) else bool(a[key]))
        else:
            out[key] = np.asarray(a[key]) + np.asarray(b[key])
    return out


def _set_discrete_nb(nb, stats: dict[str, Any], k: int, feature_count: np.ndarray):
    """Fill a fresh MultinomialNB/BernoulliNB with the attributes its ``fit`` sets, via its own update
    methods (so smoothing and priors follow scikit-learn's formulas exactly)."""
    nb.classes_ = np.arange(k)
    nb.n_features_in_ = int(feature_count.shape[1])
    nb.class_count_ = np.asarray(stats["count"], dtype=np.float64).copy()
    nb.feature_count_ = np.ascontiguousarray(feature_count, dtype=np.float64)
    alpha = nb._check_alpha()
    nb._update_feature_log_prob(alpha)
    nb._update_class_log_prior(class_prior=nb.class_prior)
    return nb


def _validated(est):
    """``est`` after scikit-learn's own parameter validation (what its ``fit`` runs first), applied to
    every step of a Pipeline: ``fit_from_stats`` rejects the parameters ``fit`` would reject."""
    for step in [s for _, s in est.steps] if hasattr(est, "steps") else [est]:
        check = getattr(step, "_validate_params", None)
        if check is not None:
            check()
    return est


def _zero_scale_to_one(scale: np.ndarray) -> np.ndarray:
    """scikit-learn's handling of (near) constant columns in scalers: a scale below 10 eps becomes 1."""
    scale = np.array(scale, dtype=np.float64, copy=True)
    scale[scale < 10 * np.finfo(np.float64).eps] = 1.0
    return scale


#: rows per block of :func:`_block_group_moments`: a block's features-by-rows slice and its deviations
#: (20 features x 4096 rows x 8 bytes = 640 KiB each) stay in the core's cache between the passes
MOMENT_BLOCK_ROWS = 4096


def _block_group_moments(Xt: np.ndarray, ids: np.ndarray, m: int):
    """Unweighted ``(count, mean, M2)`` of the columns of ``Xt`` (features by rows) per id ``0..m-1``.

    Why blocks: the corrected two-pass moments (deviations from a first mean, minus the square of their
    sum) need three reads of the rows; done over a whole fragment that is three trips to memory and a
    gathered copy of the matrix in id order.  Done on ``MOMENT_BLOCK_ROWS`` rows at a time, the three
    reads hit the cache, the sums by id are one small matrix product with the block's one-hot id matrix
    (no sort, no gather of the rows), and the blocks' moments merge with Chan et al.'s pairwise update
    -- the same update ``merge_stats`` applies to fragments, so this is the reduction done once more,
    inside the fragment.  Every block's sums run over its rows in a fixed order with one native
    thread (the engine pins them), so the result depends only on the rows and their order: the same
    bits on every scheduler.  Returns float64 arrays of shapes ``(m,)``, ``(m, d)``, ``(m, d)``.
    """
    d, n = Xt.shape
    count, mean, m2 = np.zeros(m), np.zeros((m, d)), np.zeros((m, d))
    step = MOMENT_BLOCK_ROWS
    onehot = np.zeros((min(step, n), m))
    rows = np.arange(min(step, n))
    for a in range(0, n, step):
        block = Xt[:, a : a + step]
        bid = ids[a : a + step]
        b = bid.shape[0]
        Y = onehot[:b]
        Y[rows[:b], bid] = 1.0
        cnt = np.bincount(bid, minlength=m).astype(np.float64)
        safe = np.where(cnt > 0, cnt, 1.0)
        mean0 = (block @ Y) / safe  # d x m; 0 for ids absent from the block
        dev = block - np.take(mean0, bid, axis=1)
        corr = (dev @ Y) / safe
        np.multiply(dev, dev, out=dev)
        bm2 = np.maximum(dev @ Y - cnt * corr * corr, 0.0)
        Y[rows[:b], bid] = 0.0  # the one-hot buffer back to zeros for the next block
        count, mean, m2 = _chan_merge(count[:, None], mean, m2, cnt[:, None], (mean0 + corr).T, bm2.T)
        count = count[:, 0]
    return count, mean, m2
