"""Neighbours and kernels: k-NN with Duin & Tax's estimators, the nearest mean, and Parzen windows.

These learners are written here rather than wrapped: their states are the (standardised) training
set or class means as arrays, so a model loads without deserialising any object.  Distances are
computed in blocks of rows whose size :data:`_BLOCK_ENTRIES` bounds, whatever the number of rows.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from calengine.base import Learner, is_sparse
from calengine.errors import DataError, ParameterError

from ._common import (
    _check_input,
    _check_labels,
    _check_weights,
    _no_weights_error,
    _parse_positive_int,
    _split_proba,
)
from ._rowwise import normalise_log, row_matmul, row_sum, squared_distances

#: number of float64 entries in one temporary block of distances (16 MiB); bounds the memory of the
#: k-NN, Parzen and bandwidth computations whatever the number of rows.
_BLOCK_ENTRIES = 1 << 21

#: the largest k tried when k-NN chooses k by leave-one-out error (Duin & Tax)
_LOO_MAX_K = 50


def _row_blocks(n_rows: int, n_cols: int):
    """Slices over ``n_rows`` rows such that a block of ``rows x n_cols`` floats stays within budget."""
    step = max(1, _BLOCK_ENTRIES // max(1, n_cols))
    for start in range(0, n_rows, step):
        yield slice(start, min(n_rows, start + step))


def _squared_distances(A: np.ndarray, B: np.ndarray, B_sq: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances between the rows of ``A`` and ``B`` (``B_sq``: row norms of B)."""
    A_sq = np.einsum("ij,ij->i", A, A)
    D = A @ B.T
    D *= -2.0
    D += A_sq[:, None]
    D += B_sq[None, :]
    np.maximum(D, 0.0, out=D)
    return D


def _identity_scaling(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Means 0 and scales 1: raw distances, as Duin & Tax's k-NN and Parzen use them."""
    return np.zeros(X.shape[1]), np.ones(X.shape[1])


def _standardisation(X: np.ndarray, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(Weighted) column means and standard deviations; constant columns get scale 1."""
    mean = np.average(X, axis=0, weights=w)
    var = np.average((X - mean) ** 2, axis=0, weights=w)
    scale = np.sqrt(var)
    scale[~(scale > 0)] = 1.0
    return mean, scale



def knn_counts_proba(counts, k: int) -> np.ndarray:
    """Duin & Tax eq. (4), the Bayes cell estimate ``P1_i = (k_i + 1) / (k + c)``.

    ``counts``: neighbour counts per class, shape ``(..., c)``, summing to ``k`` along the last axis.
    Never 0 or 1, even for ``k = 1`` (where it gives 2/3 and 1/3 for two classes).
    """
    counts = np.asarray(counts, dtype=np.float64)
    c = counts.shape[-1]
    return (counts + 1.0) / (float(k) + c)


def knn_distance_proba(d, majority) -> np.ndarray:
    """Duin & Tax eq. (5) for the majority class, completed to a probability vector.

    ``d``: shape ``(n, c)`` (or ``(c,)``), ``d[:, j]`` the distance to the ``k_i``-th nearest training
    object of class ``j`` where ``k_i`` is the majority class's neighbour count; ``majority``: the
    majority class index per row.  The majority class gets ``P2_i = 1 - (c-1) d_i / sum_j d_j``.

    The paper defines no estimate for the other classes; here they share ``1 - P2_i`` in proportion to
    ``1 / d_j`` (their densities are taken inversely proportional to the distances, the same argument
    that motivates eq. 5).  For two classes this is exactly ``d_i / (d_i + d_j)``, i.e. eq. 5 applied to
    the other class.  Degenerate rows: all distances 0 -> ``1/c`` everywhere; other classes at distance
    0 share the remainder equally; classes at infinite distance (no training objects) get 0.
    """
    d = np.asarray(d, dtype=np.float64)
    single = d.ndim == 1
    d = np.atleast_2d(d)
    n, c = d.shape
    rows = np.arange(n)
    majority = np.broadcast_to(np.asarray(majority, dtype=np.intp), (n,))
    d_i = d[rows, majority]
    total = d.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(np.isinf(total), 0.0, d_i / np.where(total > 0, total, 1.0))
    p_i = np.where(total > 0, 1.0 - (c - 1) * ratio, 1.0 / c)
    others = d.copy()
    others[rows, majority] = np.inf
    zero = others == 0
    with np.errstate(divide="ignore"):
        inv = 1.0 / others
    inv = np.where(zero.any(axis=1, keepdims=True), zero.astype(np.float64), inv)
    norm = inv.sum(axis=1, keepdims=True)
    share = np.divide(inv, norm, out=np.zeros_like(inv), where=norm > 0)
    P = share * (1.0 - p_i)[:, None]
    P[rows, majority] = p_i
    return P[0] if single else P


def _neighbour_counts(labels: np.ndarray, n_classes: int) -> np.ndarray:
    """Per-row class counts of a ``(m, k)`` matrix of neighbour labels."""
    m = labels.shape[0]
    counts = np.zeros((m, n_classes), dtype=np.float64)
    np.add.at(counts, (np.repeat(np.arange(m), labels.shape[1]), labels.ravel()), 1.0)
    return counts


class KNNLearner(Learner):
    """k-nearest neighbours on standardised features (``standardize=False``: raw distances, as Duin &
    Tax), with their posterior estimators.

    * ``n_neighbors``: an int, or ``"loo"`` (default) to choose k in ``1..min(50, n-1)`` by the
      leave-one-out error of the majority vote on the training set (Duin & Tax's k-NN); ties in the
      error go to the smaller k, ties in a vote to the lower class index.  An int larger than the
      training set is reduced to its size.
    * ``estimator``: ``"counts"`` -> ``P1 = (k_i + 1)/(k + c)``; ``"distance"`` -> ``P2`` for the
      majority class (see :func:`knn_distance_proba` for the other classes; majority ties go to the
      class with the smaller ``d_i``, then the lower index; a class with fewer than ``k_i`` training
      objects uses its farthest one); ``"sklearn"`` -> plain ``k_i / k``, which is exactly what
      ``KNeighborsClassifier(weights="uniform").predict_proba`` returns.  Duin & Tax found P2 better only
      for k = 1.

    No sample weights (a weighted vote would change what k means); dense input only.  The state is the
    standardisation, the standardised training set and its labels, all arrays; the neighbour indexes are
    rebuilt on first use after loading and are not pickled to Dask workers.
    """

    name = "knn"
    accepts_sample_weight = False
    score_kind = "proba"
    accepts_sparse: ClassVar[bool] = False

    _ESTIMATORS = ("counts", "distance", "sklearn")

    def __init__(self, n_neighbors="loo", estimator: str = "counts", standardize: bool = True):
        self.n_neighbors = n_neighbors
        self.estimator = estimator
        self.standardize = standardize

    def check_params(self) -> None:
        """Bad parameter values fail when the learner is made (``calengine.params.Params.check_params``)."""
        self._check_params()

    def _check_params(self):
        if self.estimator not in self._ESTIMATORS:
            raise ParameterError(
                f"estimator of learner 'knn' must be one of {', '.join(self._ESTIMATORS)}, got {self.estimator!r}"
            )
        if isinstance(self.n_neighbors, str) and self.n_neighbors.strip().lower() == "loo":
            return "loo"
        return _parse_positive_int(self.n_neighbors, "n_neighbors of learner 'knn' (or \"loo\")")

    def __getstate__(self):
        state = dict(super().__getstate__())
        state.pop("_index_cache", None)
        return state

    def _index(self, cls: int | None = None):
        """Cached NearestNeighbors over the training set (``cls=None``) or over one class."""
        from sklearn.neighbors import NearestNeighbors

        cache = self.__dict__.setdefault("_index_cache", {})
        if cls not in cache:
            Z = self.X_ if cls is None else self.X_[self.y_ == cls]
            # a k-d tree measures each query against training rows one pair at a time, so a row's
            # neighbours never depend on the batch; brute force ("auto" picks it for small or wide
            # sets) computes distances by batched matrix products, whose last bits, and so ties, do
            cache[cls] = NearestNeighbors(algorithm="kd_tree").fit(Z) if len(Z) else None
        return cache[cls]

    def fit(self, X, y, sample_weight=None):
        if sample_weight is not None:
            raise _no_weights_error(self.name)
        k_param = self._check_params()
        X = _check_input(self, X)
        y = _check_labels(y, X.shape[0])
        self.__dict__.pop("_index_cache", None)
        self.mean_, self.scale_ = _standardisation(X) if self.standardize else _identity_scaling(X)
        self.X_ = (X - self.mean_) / self.scale_
        self.y_ = y
        self.n_classes_ = int(y.max()) + 1
        n = X.shape[0]
        self.k_ = self._loo_k() if k_param == "loo" else min(k_param, n)
        return self

    def _loo_k(self) -> int:
        """The k in ``1..min(50, n-1)`` with the fewest leave-one-out majority-vote errors."""
        n = self.X_.shape[0]
        K = min(_LOO_MAX_K, n - 1)
        if K < 1:
            return 1
        nn = self._index()
        errors = np.zeros(K)
        for sl in _row_blocks(n, 4 * (K + 1)):
            ind = nn.kneighbors(self.X_[sl], n_neighbors=K + 1, return_distance=False)
            rows = np.arange(sl.start, sl.stop)
            is_self = ind == rows[:, None]
            # drop each row's own index; if duplicates pushed it out of the list, drop the farthest
            drop = is_self & (np.cumsum(is_self, axis=1) == 1)
            drop[~is_self.any(axis=1), -1] = True
            labels = self.y_[ind[~drop].reshape(len(rows), K)]
            truth = self.y_[sl]
            counts = np.zeros((len(rows), self.n_classes_))
            for j in range(K):
                counts[np.arange(len(rows)), labels[:, j]] += 1.0
                errors[j] += np.count_nonzero(counts.argmax(axis=1) != truth)
        return int(np.argmin(errors)) + 1

    def score(self, X) -> np.ndarray:
        X = _check_input(self, X, n_features=self.X_.shape[1])
        Z = (X - self.mean_) / self.scale_
        k, c = self.k_, self.n_classes_
        nn = self._index()
        out = np.empty((Z.shape[0], c))
        for sl in _row_blocks(Z.shape[0], 4 * k * c):
            ind = nn.kneighbors(Z[sl], n_neighbors=k, return_distance=False)
            counts = _neighbour_counts(self.y_[ind], c)
            if self.estimator == "sklearn":
                out[sl] = counts / k
            elif self.estimator == "counts":
                out[sl] = knn_counts_proba(counts, k)
            else:
                out[sl] = self._distance_block(Z[sl], counts)
        return _split_proba(out)

    def _distance_block(self, Z: np.ndarray, counts: np.ndarray) -> np.ndarray:
        k, c = self.k_, self.n_classes_
        m = Z.shape[0]
        Dc = np.full((m, c, k), np.inf)
        for cls in range(c):
            index = self._index(cls)
            if index is None:
                continue
            kk = min(k, index.n_samples_fit_)
            dist, _ = index.kneighbors(Z, n_neighbors=kk)
            Dc[:, cls, :kk] = dist
            Dc[:, cls, kk:] = dist[:, -1:]
        k_major = counts.max(axis=1).astype(np.intp)
        d = Dc[np.arange(m), :, k_major - 1]
        candidates = np.where(counts == counts.max(axis=1, keepdims=True), d, np.inf)
        majority = np.argmin(candidates, axis=1)
        return knn_distance_proba(d, majority)

    def to_state(self) -> dict[str, Any]:
        return {
            "n_classes": self.n_classes_,
            "k": self.k_,
            "mode": self.estimator,
            "mean": self.mean_,
            "scale": self.scale_,
            "X": self.X_,
            "y": self.y_,
        }

    def from_state(self, state: dict[str, Any]) -> "KNNLearner":
        self.__dict__.pop("_index_cache", None)
        self.n_classes_ = int(state["n_classes"])
        self.k_ = int(state["k"])
        self.estimator = str(state["mode"])
        self.mean_ = np.asarray(state["mean"], dtype=np.float64)
        self.scale_ = np.asarray(state["scale"], dtype=np.float64)
        self.X_ = np.asarray(state["X"], dtype=np.float64)
        self.y_ = np.asarray(state["y"], dtype=np.intp)
        return self


# ------------------------------------------------------------------------------------------ nearest mean


class NearestMeanLearner(Learner):
    """Nearest mean classifier on the raw features, as Duin & Tax use it (no standardisation).

    Score: for two classes ``S(x) = |x - m0|^2 - |x - m1|^2`` (positive -> class 1); otherwise
    ``-|x - m_c|^2`` per class.  Means are weighted means when weights are given (a weight of 2 is
    exactly a duplicated row).  Works on CSR input without densifying it.  Scale features beforehand if
    their units differ: the rule is, by design, not scale invariant.
    """

    name = "nearest_mean"
    accepts_sample_weight = True
    score_kind = "decision"
    accepts_sparse: ClassVar[bool] = True

    def fit(self, X, y, sample_weight=None):
        X = _check_input(self, X)
        y = _check_labels(y, X.shape[0])
        w = _check_weights(sample_weight, X.shape[0])
        if w is None:
            w = np.ones(X.shape[0])
        c = int(y.max()) + 1
        M = np.zeros((X.shape[0], c))
        M[np.arange(X.shape[0]), y] = w
        totals = M.sum(axis=0)
        if np.any(totals <= 0):
            missing = ", ".join(str(i) for i in np.flatnonzero(totals <= 0))
            raise DataError(
                f"nearest_mean: class(es) {missing} have no rows with positive weight; every class needs one"
            )
        sums = np.asarray(X.T @ M).T
        self.means_ = sums / totals[:, None]
        self.n_classes_ = c
        return self

    def score(self, X) -> np.ndarray:
        X = _check_input(self, X, n_features=self.means_.shape[1])
        mu = self.means_
        mu_sq = np.einsum("ij,ij->i", mu, mu)
        # products row-wise (:mod:`._rowwise`): a row's score does not depend on its batch
        if self.n_classes_ == 2:
            return 2.0 * row_matmul(X, (mu[1] - mu[0])[:, None]).ravel() + (mu_sq[0] - mu_sq[1])
        if is_sparse(X):
            x_sq = np.asarray(X.multiply(X).sum(axis=1)).ravel()
        else:
            x_sq = row_sum(X * X)
        return 2.0 * row_matmul(X, mu.T) - mu_sq[None, :] - x_sq[:, None]

    def to_state(self) -> dict[str, Any]:
        return {"n_classes": self.n_classes_, "means": self.means_}

    def from_state(self, state: dict[str, Any]) -> "NearestMeanLearner":
        self.n_classes_ = int(state["n_classes"])
        self.means_ = np.asarray(state["means"], dtype=np.float64)
        return self


# ------------------------------------------------------------------------------------------ Parzen


class ParzenLearner(Learner):
    """Parzen (Gaussian kernel density) classifier with one bandwidth on standardised features
    (``standardize=False``: on the raw features).

    Class ``c`` gets the density ``F_c(x) = sum_{n in c} w_n K_h(x - x_n) / W_c`` and the prior
    ``W_c / W``, so the posterior is ``sum_{n in c} w_n K_h(x - x_n)`` normalised over classes
    (Duin & Tax eq. 1); computed with log-sum-exp, so far-away points still get a proper posterior.

    ``bandwidth="loo"`` (default) maximises the weighted leave-one-out log-likelihood of the class
    densities, ``sum_n w_n log F_c^(-n)(x_n)`` (Duin 1976, as used by Duin & Tax), over a log grid of
    16 values spanning three decades around Silverman's rule, then refines it with a bounded scalar
    search between the grid neighbours of the best point.  Above ``max_loo_samples`` rows the search
    runs on a random subset of that size (``random_state``) and the result is rescaled by the
    asymptotic rate ``(m / n)^(1/(d+4))``; ``max_loo_samples=None`` uses every row.  A positive float
    fixes ``h``.  Rows with zero weight are dropped.

    Memory: distances are computed in blocks of rows (about 16 MiB each), for scoring and for the
    bandwidth search alike.  Time is proportional to (rows scored) x (training rows).
    """

    name = "parzen"
    accepts_sample_weight = True
    #: the bandwidth is chosen by leave-one-out likelihood, where a duplicated row is its own neighbour
    weights_as_duplicates = False
    score_kind = "proba"
    accepts_sparse: ClassVar[bool] = False

    _GRID_SIZE = 16
    _GRID_DECADES = (-2.0, 1.0)

    def __init__(self, bandwidth="loo", max_loo_samples: int | None = 2000, random_state=None, standardize: bool = True):
        self.bandwidth = bandwidth
        self.max_loo_samples = max_loo_samples
        self.random_state = random_state
        self.standardize = standardize

    def _bandwidth_param(self):
        value = self.bandwidth
        if isinstance(value, str):
            if value.strip().lower() == "loo":
                return "loo"
            try:
                value = float(value)
            except ValueError:
                value = None
        if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
            if math.isfinite(value) and value > 0:
                return float(value)
        raise ParameterError(
            f"bandwidth of learner 'parzen' must be \"loo\" or a positive number, got {self.bandwidth!r}"
        )

    def fit(self, X, y, sample_weight=None):
        h_param = self._bandwidth_param()
        X = _check_input(self, X)
        y = _check_labels(y, X.shape[0])
        w = _check_weights(sample_weight, X.shape[0])
        if w is None:
            w = np.ones(X.shape[0])
        self.n_classes_ = int(y.max()) + 1
        self.mean_, self.scale_ = _standardisation(X, w) if self.standardize else _identity_scaling(X)
        keep = w > 0
        order = np.argsort(y[keep], kind="stable")
        self.X_ = ((X[keep] - self.mean_) / self.scale_)[order]
        self.y_ = y[keep][order]
        self.w_ = w[keep][order]
        self.bandwidth_ = self._loo_bandwidth() if h_param == "loo" else h_param
        return self

    # -- bandwidth -----------------------------------------------------------------------------

    def _loo_bandwidth(self) -> float:
        from scipy.optimize import minimize_scalar
        from sklearn.utils import check_random_state

        Z, y, w = self.X_, self.y_, self.w_
        n, d = Z.shape
        limit = self.max_loo_samples
        if limit is not None:
            limit = _parse_positive_int(limit, "max_loo_samples of learner 'parzen'")
        if limit is not None and n > limit:
            rng = check_random_state(self.random_state)
            pick = np.sort(rng.choice(n, size=limit, replace=False))  # stays sorted by class
            Z, y, w = Z[pick], y[pick], w[pick]
        m = Z.shape[0]
        rescale = (m / n) ** (1.0 / (d + 4))
        h_ref = (4.0 / (d + 2)) ** (1.0 / (d + 4)) * m ** (-1.0 / (d + 4))
        grid = h_ref * np.logspace(*self._GRID_DECADES, self._GRID_SIZE)
        ll = _loo_log_likelihood(Z, y, w, grid, self.n_classes_)
        if ll is None:  # no class has two rows: the likelihood is undefined, fall back to the rule
            return float(h_ref * rescale)
        best = int(np.argmax(ll))
        lo = np.log(grid[max(best - 1, 0)])
        hi = np.log(grid[min(best + 1, len(grid) - 1)])
        h = grid[best]
        if hi > lo:
            res = minimize_scalar(
                lambda t: -_loo_log_likelihood(Z, y, w, np.array([np.exp(t)]), self.n_classes_)[0],
                bounds=(lo, hi),
                method="bounded",
                options={"xatol": 0.01},
            )
            if np.isfinite(res.fun) and -res.fun >= ll[best]:
                h = float(np.exp(res.x))
        return float(h * rescale)

    # -- scoring ---------------------------------------------------------------------------------

    def _class_log_sums(self, Z: np.ndarray) -> np.ndarray:
        """``log sum_{n in c} w_n exp(-|z - x_n|^2 / 2h^2)`` per row and class, in row blocks.

        Row-wise in a fixed order (:mod:`._rowwise`): distances summed feature by feature, kernel
        sums training row by training row, so a row's posterior does not depend on its batch."""
        X_tr, y_tr = self.X_, self.y_
        c = self.n_classes_
        bounds = np.searchsorted(y_tr, np.arange(c + 1))
        log_w = np.log(self.w_)
        inv2h2 = 1.0 / (2.0 * self.bandwidth_**2)
        out = np.full((Z.shape[0], c), -np.inf)
        for sl in _row_blocks(Z.shape[0], X_tr.shape[0]):
            A = squared_distances(Z[sl], X_tr)
            A *= -inv2h2
            A += log_w[None, :]
            for cls in range(c):
                s, e = bounds[cls], bounds[cls + 1]
                if e > s:
                    out[sl, cls] = _row_logsumexp_t(np.ascontiguousarray(A[:, s:e].T))
        return out

    def score(self, X) -> np.ndarray:
        X = _check_input(self, X, n_features=self.X_.shape[1])
        L = self._class_log_sums((X - self.mean_) / self.scale_)
        return _split_proba(normalise_log(L))

    def to_state(self) -> dict[str, Any]:
        return {
            "n_classes": self.n_classes_,
            "bandwidth": self.bandwidth_,
            "mean": self.mean_,
            "scale": self.scale_,
            "X": self.X_,
            "y": self.y_,
            "w": self.w_,
        }

    def from_state(self, state: dict[str, Any]) -> "ParzenLearner":
        self.n_classes_ = int(state["n_classes"])
        self.bandwidth_ = float(state["bandwidth"])
        self.mean_ = np.asarray(state["mean"], dtype=np.float64)
        self.scale_ = np.asarray(state["scale"], dtype=np.float64)
        self.X_ = np.asarray(state["X"], dtype=np.float64)
        self.y_ = np.asarray(state["y"], dtype=np.intp)
        self.w_ = np.asarray(state["w"], dtype=np.float64)
        return self


def _row_logsumexp_t(At: np.ndarray) -> np.ndarray:
    """``logsumexp`` of each *column* of ``At`` (training rows by scored rows), summed training row
    by training row in order: contiguous adds, one per training row."""
    from ._rowwise import column_sum

    top = At.max(axis=0)
    safe = np.where(np.isfinite(top), top, 0.0)
    At -= safe
    np.exp(At, out=At)
    with np.errstate(divide="ignore"):
        return np.log(column_sum(At)) + safe


def _loo_log_likelihood(Z, y, w, hs, n_classes) -> np.ndarray | None:
    """Weighted leave-one-out log-likelihood of the per-class Gaussian KDEs, one value per bandwidth.

    ``Z`` rows sorted by class.  A row whose class has no other positive weight contributes nothing;
    returns ``None`` when no row contributes.
    """
    from scipy.special import logsumexp

    d = Z.shape[1]
    hs = np.asarray(hs, dtype=np.float64)
    total = np.zeros(len(hs))
    bounds = np.searchsorted(y, np.arange(n_classes + 1))
    contributed = False
    for cls in range(n_classes):
        s, e = bounds[cls], bounds[cls + 1]
        if e - s < 2:
            continue
        Zc, wc = Z[s:e], w[s:e]
        log_wc = np.log(wc)
        sq = np.einsum("ij,ij->i", Zc, Zc)
        W = wc.sum()
        for sl in _row_blocks(e - s, e - s):
            D = _squared_distances(Zc[sl], Zc, sq)
            m = D.shape[0]
            D[np.arange(m), np.arange(sl.start, sl.stop)] = np.inf
            rest = W - wc[sl]
            valid = rest > 1e-12 * W
            if not valid.any():
                continue
            contributed = True
            wv = wc[sl][valid]
            log_rest = np.log(rest[valid])
            Dv = D[valid]
            for g, h in enumerate(hs):
                lse = logsumexp(log_wc[None, :] - Dv / (2.0 * h * h), axis=1)
                ll = lse - log_rest - 0.5 * d * np.log(2.0 * np.pi * h * h)
                total[g] += float(wv @ ll)
    return total if contributed else None
