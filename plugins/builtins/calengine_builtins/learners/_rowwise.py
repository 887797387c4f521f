"""Row-wise arithmetic in a fixed order: a row's score never depends on the other rows scored with it.

Why: a batched matrix product (``X @ W`` through BLAS) picks its kernel, blocking and summation order
by the shapes involved, and so does numpy's pairwise summation of a reduction (``A.sum(axis=1)`` sums
a lone row pairwise but many rows one column after another).  A row scored alone and the same row
scored among others then differ in the last bits, and a calibrator whose steps sit exactly on training
scores (isotonic, binning) turns that into a different probability (0.22 apart was seen).

How it is proved: every function here loops in Python over the *summed* axis and applies numpy's
element-wise ``multiply``/``add``/``subtract`` to whole columns.  Those ufuncs are correctly rounded
IEEE operations on each element (vectorised or not, and never fused into an FMA), so entry ``i`` of
the result is ``((x_i0 w_0 + x_i1 w_1) + x_i2 w_2) + ...`` in exactly that order, whatever ``n`` is and
whatever rows surround row ``i``.  ``max`` is exact in any order.  Sparse CSR products go through
scipy, whose kernel walks each row's stored entries in order, one row at a time: row-wise already.

The cost is one numpy call per summed index (features, hidden units, classes), each over all rows of
the batch: small next to reading the rows for the narrow tables calibration sees (benchmarked in
``benchmarks/bench_scoring.py``).  tests/scores/test_batch_independence.py checks every built-in learner.
"""

from __future__ import annotations

import numpy as np

from calengine.base import is_sparse


#: rows per block of :func:`row_matmul`: its transposed block and accumulators stay in cache
_BLOCK_ROWS = 4096


def row_matmul(X, W: np.ndarray) -> np.ndarray:
    """``X @ W`` with each row's sums over ``W``'s rows taken in index order (see the module).

    Blocks of rows are transposed so every step is a contiguous multiply-add over the block; the
    blocking changes only memory traffic, never the order of any entry's sum."""
    W = np.asarray(W, dtype=np.float64)
    if is_sparse(X):
        return np.asarray(X @ W, dtype=np.float64)
    n, d = X.shape
    m = W.shape[1]
    out = np.zeros((n, m))
    if d == 0 or n == 0:
        return out
    Wc = [np.ascontiguousarray(W[j])[:, None] for j in range(d)]
    acc = np.empty((m, min(n, _BLOCK_ROWS)))
    tmp = np.empty_like(acc)
    for start in range(0, n, _BLOCK_ROWS):
        Xt = np.ascontiguousarray(X[start : start + _BLOCK_ROWS].T)
        b = Xt.shape[1]
        a, t = acc[:, :b], tmp[:, :b]
        np.multiply(Wc[0], Xt[0], out=a)
        for j in range(1, d):
            np.multiply(Wc[j], Xt[j], out=t)
            a += t
        out[start : start + b] = a.T
    return out


def row_sum(A: np.ndarray) -> np.ndarray:
    """``A.sum(axis=1)`` summed column by column in index order."""
    A = np.asarray(A, dtype=np.float64)
    out = np.array(A[:, 0], dtype=np.float64, copy=True) if A.shape[1] else np.zeros(A.shape[0])
    for j in range(1, A.shape[1]):
        out += A[:, j]
    return out


def column_sum(A: np.ndarray) -> np.ndarray:
    """``A.sum(axis=0)`` summed row by row in index order (for features-by-rows buffers)."""
    out = np.array(A[0], dtype=np.float64, copy=True)
    for j in range(1, A.shape[0]):
        out += A[j]
    return out


def row_logsumexp(A: np.ndarray) -> np.ndarray:
    """``log(sum(exp(A), axis=1))`` per row, stable, in a fixed order; a row of ``-inf`` gives ``-inf``."""
    top = A.max(axis=1)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(row_sum(np.exp(A - safe[:, None]))) + safe


def normalise_log(jll: np.ndarray) -> np.ndarray:
    """Class probabilities from joint log-likelihoods ``(n, k)``: ``exp(jll - logsumexp(jll))``."""
    return np.exp(jll - row_logsumexp(jll)[:, None])


def normalise_log_columns(J: np.ndarray, rows=None) -> np.ndarray:
    """:func:`normalise_log` of ``J.T`` for a classes-by-rows ``J`` (``(k, n)``), transposed: the same
    bits, each step the same element-wise operation on the same values, but over contiguous rows of
    ``J`` instead of the short rows of an ``(n, k)`` copy (whose per-row max and sums cost more than
    the arithmetic).  ``rows``: only those rows of the result (class indices), e.g. ``[1]`` for the
    positive class of two."""
    top = J.max(axis=0)
    safe = np.where(np.isfinite(top), top, 0.0)
    total = np.exp(J[0] - safe)
    for j in range(1, J.shape[0]):
        total += np.exp(J[j] - safe)
    with np.errstate(divide="ignore"):
        lse = np.log(total) + safe
    return np.exp(J[list(range(J.shape[0])) if rows is None else list(rows)] - lse)


def softmax(Z: np.ndarray) -> np.ndarray:
    """Row-wise softmax in a fixed order (max first, so no overflow)."""
    E = np.exp(Z - Z.max(axis=1, keepdims=True))
    E /= row_sum(E)[:, None]
    return E


def squared_distances(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``|a - b|^2`` for every row pair, summed over features in order (exact differences, no
    ``|a|^2 - 2ab + |b|^2`` cancellation)."""
    D = np.zeros((A.shape[0], B.shape[0]))
    tmp = np.empty_like(D)
    for j in range(A.shape[1]):
        np.subtract(A[:, j : j + 1], B[:, j], out=tmp)
        np.multiply(tmp, tmp, out=tmp)
        D += tmp
    return D


def transform_head(est, X):
    """``X`` through every step of a Pipeline but the last (scalers: element-wise per row), and the
    last step; ``(X, est)`` for an estimator that is not a Pipeline."""
    if not hasattr(est, "steps"):
        return X, est
    for _, step in est.steps[:-1]:
        X = step.transform(X)
    return X, est.steps[-1][1]


def linear_decision(X, coef: np.ndarray, intercept) -> np.ndarray:
    """``X @ coef.T + intercept`` row-wise; ``(n,)`` for a single output, as scikit-learn's."""
    scores = row_matmul(X, np.asarray(coef).T) + intercept
    return scores.ravel() if scores.shape[1] == 1 else scores
