"""Naive Bayes: Gaussian (and Duin & Tax's BayU), Bernoulli, multinomial, categorical and boosted.

Gaussian, multinomial and (with ``standardize=False``) Bernoulli naive Bayes can be fitted from
mergeable statistics (:mod:`._nb_stats`); all but the categorical and boosted ones store their fitted
estimator as arrays (:class:`._array_state._ArrayState`).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from calengine.base import SklearnLearner, is_sparse
from calengine.errors import DataError, ParameterError

from ._array_state import _DISCRETE_NB, _ArrayState, _scaler_attributes
from ._common import _check_input, _parse_positive_int, _scaler
from ._rowwise import column_sum, normalise_log, normalise_log_columns, row_matmul, transform_head
from ._nb_stats import (
    _block_group_moments,
    _chan_merge,
    _check_stats,
    _discrete_nb_stats,
    _merge_additive,
    _same_shapes,
    _set_discrete_nb,
    _stats_input,
    _validated,
    _zero_scale_to_one,
)


def _derive_discrete_nb(steps: dict[str, Any], nb_step: str) -> None:
    """feature_log_prob_ / class_log_prior_ of a restored Multinomial/BernoulliNB, and MaxAbsScaler's
    scale_, by the same code their ``fit`` runs (so the same bits)."""
    nb = steps[nb_step]
    nb.class_count_ = np.asarray(nb.class_count_, dtype=np.float64)
    nb.feature_count_ = np.ascontiguousarray(nb.feature_count_, dtype=np.float64)
    if nb.feature_count_.shape != (nb.class_count_.shape[0], int(nb.n_features_in_)):
        raise ValueError(f"feature counts of shape {nb.feature_count_.shape} for {nb.class_count_.shape[0]} classes")
    nb._update_feature_log_prob(nb._check_alpha())
    nb._update_class_log_prior(class_prior=nb.class_prior)
    scaler = steps.get("scale")
    if scaler is not None and type(scaler).__name__ == "MaxAbsScaler":
        scaler.scale_ = _zero_scale_to_one(scaler.max_abs_)


def _discrete_nb_score(learner, X) -> np.ndarray:
    """Multinomial/Bernoulli naive Bayes ``predict_proba`` (class 1 for two classes) with scikit-learn's
    formulas, its scalers and its input checks, but row-wise (:mod:`._rowwise`): a row's probability
    does not depend on the batch it is scored in, which scikit-learn's batched product does not promise."""
    Xt, nb = transform_head(learner.estimator_, X)
    Xt = nb._check_X(Xt)  # scikit-learn's validation (width, finiteness) and BernoulliNB's binarising
    flp = nb.feature_log_prob_
    if type(nb).__name__ == "BernoulliNB":
        neg = np.log(1.0 - np.exp(flp))
        jll = row_matmul(Xt, (flp - neg).T) + (nb.class_log_prior_ + neg.sum(axis=1))
    else:
        jll = row_matmul(Xt, flp.T) + nb.class_log_prior_
    P = normalise_log(jll)
    return P[:, 1].copy() if P.shape[1] == 2 else P


class GaussianNBLearner(_ArrayState, SklearnLearner):
    """Gaussian naive Bayes: the classic badly calibrated (overconfident) probability estimator.

    Unweighted, the fit is scikit-learn's ``GaussianNB`` itself.  With ``sample_weight`` it differs
    from ``GaussianNB`` in one place, on purpose: the variance smoothing ``epsilon_ = var_smoothing *
    max(column variance)`` takes the *weighted* variance of the columns, where scikit-learn takes the
    unweighted one (its class means and variances are weighted already).  calengine's contract is that
    a row of weight 2 is the row given twice; with the unweighted variance it was not (Adult's numeric
    columns, integer weights: probabilities up to 7e-4 from the duplicated rows, and 0.066 once
    isotonic steps had amplified it).  A weighted fit is the statistics fit (:meth:`partial_stats`,
    :meth:`fit_from_stats`) on one piece, so in memory and on a partitioned table it is one algorithm.
    """

    fitted_attributes = {"": ("classes_", "theta_", "var_", "class_count_", "class_prior_", "epsilon_", "n_features_in_")}

    name = "gaussian_nb"
    accepts_sample_weight = True
    score_kind = "proba"
    accepts_sparse = False
    score_reads_any_order = True  # score works on blocks of X.T; its fallbacks get a row-major copy

    def __init__(self, var_smoothing: float = 1e-9):
        self.var_smoothing = var_smoothing

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.naive_bayes import GaussianNB

        return GaussianNB(var_smoothing=self.var_smoothing)

    def fit(self, X, y, sample_weight=None):
        """Unweighted: scikit-learn's ``GaussianNB``.  Weighted: the statistics fit on one piece, whose
        variance smoothing comes from the weighted column variance (see the class docstring)."""
        if sample_weight is None:
            return super().fit(X, y)
        from calengine.base import check_weights, reject_sparse

        reject_sparse(self, X)
        w = check_weights(sample_weight, X.shape[0])
        yv = np.asarray(y)
        k = int(yv.max()) + 1 if yv.size else 0
        return self.fit_from_stats(self.partial_stats(X, yv, w, k), k)

    def score(self, X) -> np.ndarray:
        """P(class 1) (or every class's probability), as GaussianNB's ``predict_proba`` computes it
        but a block of rows at a time in a features-by-rows buffer: scikit-learn builds three
        full-size temporaries per class and sums 20-value rows one by one, which made scoring the
        largest share of a naive Bayes fit.  The per-row sum runs over features in order, so the log
        likelihoods differ from scikit-learn's by rounding only (about 1e-15) and are the same bits on
        every machine and for every batch (:mod:`._rowwise`: numpy's ``sum`` of a lone row is pairwise).  Anything unusual (not a dense float64 matrix of the fitted width, non-finite
        values) goes through scikit-learn, for its checks and messages, as a row-major copy (its sums
        follow the memory order): so a column-major ``X`` scores the same bits (``score_reads_any_order``)."""
        theta = self._stored("theta_")
        if (theta is None or not isinstance(X, np.ndarray) or X.ndim != 2 or X.dtype != np.float64
                or X.shape[1] != theta.shape[1] or X.shape[0] == 0):
            return super().score(np.ascontiguousarray(X) if isinstance(X, np.ndarray) and X.ndim == 2 else X)
        k, d = theta.shape
        n = X.shape[0]
        var = self._stored("var_")
        const = np.log(self._stored("class_prior_")) - 0.5 * np.log(2.0 * np.pi * var).sum(axis=1)
        jll = np.empty((k, n))
        block = 16384
        buf = np.empty((d, min(block, n)))
        for start in range(0, n, block):
            Xt = X[start : start + block].T
            b = buf[:, : Xt.shape[1]]
            for i in range(k):
                np.subtract(Xt, theta[i][:, None], out=b)
                np.multiply(b, b, out=b)
                np.divide(b, var[i][:, None], out=b)
                jll[i, start : start + Xt.shape[1]] = const[i] - 0.5 * column_sum(b)
        if not np.isfinite(jll).all():
            return super().score(np.ascontiguousarray(X))
        # normalise_log(jll.T)'s bits, on jll's contiguous class rows (only class 1's for two classes)
        if k == 2:
            return normalise_log_columns(jll, rows=[1])[0]
        return np.ascontiguousarray(normalise_log_columns(jll).T)

    # -- fitting from statistics (see calengine.base.Learner) -----------------------------------
    #
    # Per class: rows, weighted count, weighted mean and weighted sum of squared deviations (M2);
    # per column, over all rows: total weight, weighted mean and weighted M2 (the variance smoothing's
    # variance; unweighted it is GaussianNB's plain variance of X).  Pieces merge with Chan et al.'s
    # pairwise formulas: no raw sums of squares.

    supports_stats = True

    def partial_stats(self, X, y, sample_weight, n_classes: int) -> dict[str, Any]:
        X, y, w, k = _stats_input(self, X, y, sample_weight, n_classes)
        n, d = X.shape
        count = np.zeros(k)
        mean = np.zeros((k, d))
        m2 = np.zeros((k, d))
        order = np.argsort(y, kind="stable")
        bounds = np.searchsorted(y[order], np.arange(k + 1))
        for c in range(k):
            idx = order[bounds[c] : bounds[c + 1]]
            wc = w[idx]
            total = wc.sum()
            if idx.size == 0 or not total > 0:
                continue
            Xc = X[idx]
            mu = np.average(Xc, axis=0, weights=None if sample_weight is None else wc)
            dev = Xc - mu
            count[c] = total
            mean[c] = mu
            m2[c] = (dev * dev).sum(axis=0) if sample_weight is None else wc @ (dev * dev)
        if sample_weight is None:
            col_w = float(n)
            col_mean = X.mean(axis=0) if n else np.zeros(d)
            col_dev = X - col_mean
            col_m2 = (col_dev * col_dev).sum(axis=0)
        else:
            col_w = float(w.sum())
            col_mean = np.average(X, axis=0, weights=w) if col_w > 0 else np.zeros(d)
            col_dev = X - col_mean
            col_m2 = w @ (col_dev * col_dev) if n else np.zeros(d)
        return {
            "n": np.asarray(n, dtype=np.int64),
            "rows": np.bincount(y, minlength=k).astype(np.int64),
            "count": count,
            "mean": mean,
            "m2": m2,
            "col_w": np.asarray(col_w, dtype=np.float64),
            "col_mean": col_mean,
            "col_m2": col_m2,
        }

    def partial_stats_groups(self, X, y, groups, n_groups: int, sample_weight, n_classes: int) -> list:
        """Every group's statistics in one pass over ``X``'s columns.  Unweighted, the moments by
        (group, class) are computed a cache-sized block of rows at a time and the blocks merged
        (:func:`._nb_stats._block_group_moments`); weighted, sums by (group, class) are
        ``np.bincount`` over each feature.  M2 is the corrected two-pass sum (deviations from a first
        mean, minus the square of their sum), as accurate as ``partial_stats``."""
        X, y, w, k = _stats_input(self, X, y, sample_weight, n_classes)
        n, d = X.shape
        G = _parse_positive_int(n_groups, "n_groups")
        groups = np.asarray(groups)
        if groups.shape != (n,) or (n and (groups.min() < 0 or groups.max() >= G)):
            raise DataError(f"groups must hold one index 0..{G - 1} per row")
        gid = groups.astype(np.intp) * k + y
        Xt = np.ascontiguousarray(X.T)  # one row per feature: bincount reads it contiguously

        def sums(ids, weights, rows, m):
            return np.stack([np.bincount(ids, weights=r * weights if weights is not None else r, minlength=m)
                             for r in rows]).T if len(rows) else np.zeros((m, 0))

        def moments(ids, weights, m):
            """(count, mean, M2) of X's rows per id in 0..m-1, weighted (``weights`` None: unweighted)."""
            count = np.bincount(ids, weights=weights, minlength=m).astype(np.float64)
            used = count > 0
            safe = np.where(used, count, 1.0)[:, None]
            mean0 = np.where(used[:, None], sums(ids, weights, Xt, m) / safe, 0.0)
            dev = np.take(mean0.T, ids, axis=1)
            np.subtract(Xt, dev, out=dev)
            corr = np.where(used[:, None], sums(ids, weights, dev, m) / safe, 0.0)
            np.multiply(dev, dev, out=dev)
            m2 = np.where(used[:, None], sums(ids, weights, dev, m) - count[:, None] * corr * corr, 0.0)
            return count, mean0 + corr, np.maximum(m2, 0.0)

        if sample_weight is None:
            count, mean, m2 = _block_group_moments(Xt, gid, G * k)
        else:
            count, mean, m2 = moments(gid, w, G * k)
        rows = np.bincount(gid, minlength=G * k).reshape(G, k).astype(np.int64)
        count, mean, m2 = count.reshape(G, k), mean.reshape(G, k, d), m2.reshape(G, k, d)
        if sample_weight is None:
            # unweighted: a group's column moments are the merge of its class moments (no second pass)
            col_n, col_mean, col_m2 = count[:, 0], mean[:, 0], m2[:, 0]
            for c in range(1, k):
                col_n, col_mean, col_m2 = _chan_merge(
                    col_n[:, None], col_mean, col_m2, count[:, c, None], mean[:, c], m2[:, c]
                )
                col_n = col_n[:, 0]
        else:  # the weighted column moments (the variance smoothing's variance)
            col_n, col_mean, col_m2 = moments(groups.astype(np.intp), w, G)
        c = np.ascontiguousarray  # own C-ordered arrays, not views: the same layout pickled or not
        return [
            {
                "n": np.asarray(int(rows[g].sum()), dtype=np.int64),
                "rows": c(rows[g]),
                "count": c(count[g]),
                "mean": c(mean[g]),
                "m2": c(m2[g]),
                "col_w": np.asarray(float(col_n[g]), dtype=np.float64),
                "col_mean": c(col_mean[g]),
                "col_m2": c(col_m2[g]),
            }
            for g in range(G)
        ]

    def merge_stats(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        _same_shapes(self.name, a, b)
        count, mean, m2 = _chan_merge(
            a["count"][:, None], a["mean"], a["m2"], b["count"][:, None], b["mean"], b["m2"]
        )
        col_w, col_mean, col_m2 = _chan_merge(
            float(a["col_w"]), a["col_mean"], a["col_m2"], float(b["col_w"]), b["col_mean"], b["col_m2"]
        )
        return {
            "n": np.asarray(int(a["n"]) + int(b["n"]), dtype=np.int64),
            "rows": np.asarray(a["rows"]) + np.asarray(b["rows"]),
            "count": count[:, 0],
            "mean": mean,
            "m2": m2,
            "col_w": np.asarray(col_w, dtype=np.float64),
            "col_mean": col_mean,
            "col_m2": col_m2,
        }

    def fit_from_stats(self, stats: dict[str, Any], n_classes: int) -> "GaussianNBLearner":
        keys = ("n", "rows", "count", "mean", "m2", "col_w", "col_mean", "col_m2")
        k = _check_stats(self.name, stats, n_classes, keys)
        count = np.asarray(stats["count"], dtype=np.float64)
        mean = np.asarray(stats["mean"], dtype=np.float64)
        m2 = np.asarray(stats["m2"], dtype=np.float64)
        # GaussianNB leaves a class whose weights sum to ~0 (np.isclose) at mean 0, variance 0
        used = ~np.isclose(count, 0.0)
        theta = np.where(used[:, None], mean, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            var = np.where(used[:, None], m2 / np.where(used, count, 1.0)[:, None], 0.0)
        col_var = np.asarray(stats["col_m2"], dtype=np.float64) / float(stats["col_w"])  # weighted (docstring)
        smoothing = self.var_smoothing
        if not (isinstance(smoothing, numbers.Real) and not isinstance(smoothing, bool) and smoothing >= 0):
            _validated(self.make_estimator())  # scikit-learn's own refusal of the parameter, as fit's
        epsilon = np.float64(smoothing * np.max(col_var))
        # The fitted arrays, as to_state stores them; scikit-learn's GaussianNB is built from them only
        # when something needs it (estimator_), as for a loaded model: this learner scores from the
        # arrays, and importing scikit-learn was 0.9-2 s of a 5 s fit of Adult.  C order whatever the
        # statistics' layout (views in one process, copies after pickling), so the saved model's bytes
        # do not depend on where the statistics were merged.
        state = {"n_classes": k, "sparse_input": False, "classes_": np.arange(k),
                 "theta_": np.ascontiguousarray(theta), "var_": np.ascontiguousarray(var + epsilon),
                 "class_count_": count.copy(), "class_prior_": count / count.sum(), "epsilon_": epsilon,
                 "n_features_in_": int(mean.shape[1])}
        self.defer_state(state)
        self.n_classes_ = k
        return self


class BayesDiagonalLearner(GaussianNBLearner):
    """Duin & Tax's BayU: Gaussian densities with class-specific diagonal covariances (= GaussianNB)."""

    name = "bayes_diagonal"


class BernoulliNBLearner(_ArrayState, SklearnLearner):
    """Bernoulli naive Bayes on features binarised at ``binarize``.

    With ``standardize=True`` (default) the threshold applies to standardised features, so the default
    0.0 splits each numeric column at its mean; for sparse input the scaler does not centre, so 0.0 means
    "present / absent", the usual text setting.  ``standardize=False`` thresholds the raw values.
    """

    name = "bernoulli_nb"
    accepts_sample_weight = True
    score_kind = "proba"
    accepts_sparse = True

    def __init__(self, alpha: float = 1.0, binarize: float = 0.0, standardize: bool = True):
        self.alpha = alpha
        self.binarize = binarize
        self.standardize = standardize

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.naive_bayes import BernoulliNB
        from sklearn.pipeline import Pipeline

        nb = BernoulliNB(alpha=self.alpha, binarize=self.binarize)
        if not self.standardize:
            return nb
        return Pipeline([("scale", _scaler(sparse_input)), ("nb", nb)])

    @staticmethod
    def fitted_attributes(est) -> dict[str, tuple[str, ...]]:
        if not hasattr(est, "steps"):
            return {"": _DISCRETE_NB}
        return {"scale": _scaler_attributes(est.steps[0][1]), "nb": _DISCRETE_NB}

    def _derive(self, steps: dict[str, Any]) -> None:
        _derive_discrete_nb(steps, "nb" if "nb" in steps else "")

    def score(self, X) -> np.ndarray:
        return _discrete_nb_score(self, X)

    # -- fitting from statistics (see calengine.base.Learner), standardize=False only ------------
    #
    # Per class: rows, weighted count and weighted counts of ``x > binarize`` (raw sums when
    # ``binarize`` is None).  With ``standardize=True`` the threshold depends on the training rows'
    # mean and spread, so the counts are not additive over pieces: no statistics then.

    @property
    def supports_stats(self) -> bool:  # type: ignore[override]
        return not self.standardize

    def _require_stats(self) -> None:
        if self.standardize:
            raise NotImplementedError(
                "learner 'bernoulli_nb' can be fitted from statistics only with standardize=False "
                "(the threshold of standardised features depends on all training rows)"
            )

    def partial_stats(self, X, y, sample_weight, n_classes: int) -> dict[str, Any]:
        self._require_stats()
        return _discrete_nb_stats(self, X, y, sample_weight, n_classes, binarize=self.binarize)

    def merge_stats(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        self._require_stats()
        return _merge_additive(self.name, a, b)

    def fit_from_stats(self, stats: dict[str, Any], n_classes: int) -> "BernoulliNBLearner":
        self._require_stats()
        k = _check_stats(self.name, stats, n_classes, ("n", "rows", "count", "sums"))
        est = _validated(self.make_estimator())
        _set_discrete_nb(est, stats, k, np.asarray(stats["sums"], dtype=np.float64))
        self.estimator_ = est
        self.n_classes_ = k
        return self


def _refuse_negative_sparse(X) -> None:
    if is_sparse(X) and X.nnz and X.data.min() < 0:
        raise DataError(
            "multinomial_nb needs non-negative sparse features (counts, tf-idf); pass dense data "
            "(it is min-max scaled automatically) or use bernoulli_nb"
        )


class MultinomialNBLearner(_ArrayState, SklearnLearner):
    """Multinomial naive Bayes on features scaled to be non-negative.

    Dense input goes through ``MinMaxScaler(clip=True)`` (so test values outside the training range stay
    in [0, 1]); sparse input through ``MaxAbsScaler``, which keeps the matrix sparse and maps the
    non-negative counts or tf-idf values this model is meant for into [0, 1].  Sparse input with
    negative entries is refused with a :class:`DataError`.
    """

    name = "multinomial_nb"
    accepts_sample_weight = True
    score_kind = "proba"
    accepts_sparse = True

    def __init__(self, alpha: float = 1.0):
        self.alpha = alpha

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.naive_bayes import MultinomialNB
        from sklearn.pipeline import Pipeline
        from sklearn.preprocessing import MaxAbsScaler, MinMaxScaler

        scaler = MaxAbsScaler() if sparse_input else MinMaxScaler(clip=True)
        return Pipeline([("scale", scaler), ("nb", MultinomialNB(alpha=self.alpha))])

    @staticmethod
    def fitted_attributes(est) -> dict[str, tuple[str, ...]]:
        return {"scale": _scaler_attributes(est.steps[0][1]), "nb": _DISCRETE_NB}

    def _derive(self, steps: dict[str, Any]) -> None:
        _derive_discrete_nb(steps, "nb")

    def fit(self, X, y, sample_weight=None):
        _refuse_negative_sparse(X)
        return super().fit(X, y, sample_weight)

    def score(self, X) -> np.ndarray:
        return _discrete_nb_score(self, X)

    # -- fitting from statistics (see calengine.base.Learner) -----------------------------------
    #
    # Per class: rows, weighted count and weighted sums of the raw features; per column: the raw
    # minimum and maximum (the scalers ignore weights).  Both scalers are affine, so the per-class sums
    # of the scaled features follow from the raw sums: ``scale * (sums - data_min * count)`` for
    # MinMaxScaler (exactly 0 on constant columns, as scikit-learn computes them), ``sums / max_abs``
    # for MaxAbsScaler.

    supports_stats = True

    def partial_stats(self, X, y, sample_weight, n_classes: int) -> dict[str, Any]:
        _refuse_negative_sparse(X)
        return _discrete_nb_stats(self, X, y, sample_weight, n_classes, track_range=True)

    def merge_stats(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return _merge_additive(self.name, a, b)

    def fit_from_stats(self, stats: dict[str, Any], n_classes: int) -> "MultinomialNBLearner":
        keys = ("n", "rows", "count", "sums", "min", "max", "sparse")
        k = _check_stats(self.name, stats, n_classes, keys)
        sparse_input = bool(stats["sparse"])
        count = np.asarray(stats["count"], dtype=np.float64)
        sums = np.asarray(stats["sums"], dtype=np.float64)
        lo = np.asarray(stats["min"], dtype=np.float64)
        hi = np.asarray(stats["max"], dtype=np.float64)
        n, d = int(stats["n"]), sums.shape[1]
        est = _validated(self.make_estimator(sparse_input=sparse_input))
        scaler, nb = est.steps[0][1], est.steps[-1][1]
        scaler.n_features_in_ = d
        scaler.n_samples_seen_ = n
        if sparse_input:
            max_abs = np.maximum(np.abs(lo), np.abs(hi))
            scaler.max_abs_ = max_abs
            scaler.scale_ = _zero_scale_to_one(max_abs)
            feature_count = sums * (1.0 / scaler.scale_)
        else:
            f_lo, f_hi = scaler.feature_range
            data_range = hi - lo
            scaler.scale_ = (f_hi - f_lo) / _zero_scale_to_one(data_range)
            scaler.min_ = f_lo - lo * scaler.scale_
            scaler.data_min_ = lo
            scaler.data_max_ = hi
            scaler.data_range_ = data_range
            feature_count = scaler.scale_ * (sums - lo * count[:, None]) + f_lo * count[:, None]
            feature_count[:, data_range == 0] = (f_lo * count)[:, None]
            # training rows scale into the feature range: clip away rounding outside it
            feature_count = np.clip(feature_count, f_lo * count[:, None], f_hi * count[:, None])
        _set_discrete_nb(nb, stats, k, feature_count)
        self.estimator_ = est
        self.n_classes_ = k
        return self


def quantile_bin_edges(X: np.ndarray, n_bins: int, sample_weight=None) -> np.ndarray:
    """Inner quantile cut points of every column, shape ``(n_features, n_bins - 1)``.

    Cut points of a column with few distinct values coincide; the empty bins between them are harmless
    (CategoricalNB smooths them) and, unlike ``KBinsDiscretizer``, produce no warnings.

    With ``sample_weight``: the quantiles of the rows each repeated as often as its weight says --
    ``np.quantile``'s linear rule on the weighted order statistics (the row holding position ``p`` is
    the first whose cumulative weight exceeds ``p``) -- so integer weights give exactly the cut points
    of the duplicated rows and a weight of 0 leaves its row out, as the contract asks.
    """
    q = np.arange(1, n_bins) / n_bins
    if sample_weight is None:
        return np.ascontiguousarray(np.quantile(X, q, axis=0).T)
    w = np.asarray(sample_weight, dtype=np.float64)
    total = float(w.sum())
    h = np.maximum((total - 1.0) * q, 0.0)
    lo = np.floor(h)
    t = h - lo
    edges = np.empty((X.shape[1], q.size))
    for j in range(X.shape[1]):
        order = np.argsort(X[:, j], kind="stable")
        xs, cw = X[order, j], np.cumsum(w[order])
        last = xs.size - 1
        a = xs[np.minimum(np.searchsorted(cw, lo, side="right"), last)]
        b = xs[np.minimum(np.searchsorted(cw, lo + 1.0, side="right"), last)]
        diff = b - a  # numpy's _lerp, so integer weights give np.quantile's bits of the repeated rows
        edges[j] = np.where(t >= 0.5, b - diff * (1.0 - t), a + diff * t)
    return edges


def apply_bins(X: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Ordinal bin codes ``0..n_bins-1``: the number of cut points of the column at or below the value."""
    codes = np.empty(X.shape, dtype=np.intp)
    for j in range(X.shape[1]):
        codes[:, j] = np.searchsorted(edges[j], X[:, j], side="right")
    return codes


class CategoricalNBLearner(SklearnLearner):
    """Categorical naive Bayes on numeric columns discretised into ``n_bins`` quantile bins.

    The cut points are stored as an array ``edges`` (quantiles of the training data, weighted by
    ``sample_weight`` when given: :func:`quantile_bin_edges`);
    ``min_categories=n_bins`` makes every possible bin a known category, so a test value falling in a
    bin never seen for some class gets the smoothed (``alpha``) estimate instead of an error.
    """

    name = "categorical_nb"
    accepts_sample_weight = True
    score_kind = "proba"
    accepts_sparse = False

    def __init__(self, n_bins: int = 10, alpha: float = 1.0):
        self.n_bins = n_bins
        self.alpha = alpha

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.naive_bayes import CategoricalNB

        n_bins = _parse_positive_int(self.n_bins, "n_bins")
        return CategoricalNB(alpha=self.alpha, min_categories=n_bins)

    def fit(self, X, y, sample_weight=None):
        X = _check_input(self, X)
        n_bins = _parse_positive_int(self.n_bins, "n_bins")
        if n_bins < 2:
            raise ParameterError(f"n_bins must be at least 2, got {n_bins}")
        if sample_weight is not None:
            from calengine.base import check_weights

            sample_weight = check_weights(sample_weight, X.shape[0])
        edges = quantile_bin_edges(X, n_bins, sample_weight)  # weighted: the duplicated rows' cut points
        super().fit(apply_bins(X, edges), y, sample_weight)
        self.edges_ = edges
        return self

    def score(self, X) -> np.ndarray:
        X = _check_input(self, X, n_features=self.edges_.shape[0])
        # scikit-learn's per-feature sums, normalised row-wise (its logsumexp sums a lone row pairwise)
        P = normalise_log(self.estimator_.predict_joint_log_proba(apply_bins(X, self.edges_)))
        return P[:, 1].copy() if P.shape[1] == 2 else P

    def to_state(self) -> dict[str, Any]:
        state = super().to_state()
        state["edges"] = self.edges_
        return state

    def from_state(self, state: dict[str, Any]) -> "CategoricalNBLearner":
        super().from_state(state)
        self.edges_ = np.asarray(state["edges"], dtype=np.float64)
        return self


class BoostedNBLearner(SklearnLearner):
    """AdaBoost (SAMME) over Gaussian naive Bayes, the boosted naive Bayes of Elkan / Zadrozny & Elkan.

    Boosting pushes naive Bayes scores further towards 0 and 1, which is why the papers calibrate it;
    ``n_estimators=10`` follows their setting.
    """

    name = "boosted_nb"
    accepts_sample_weight = True
    score_kind = "proba"
    accepts_sparse = False

    def __init__(
        self, n_estimators: int = 10, learning_rate: float = 1.0, var_smoothing: float = 1e-9, random_state=None
    ):
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.var_smoothing = var_smoothing
        self.random_state = random_state

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.ensemble import AdaBoostClassifier
        from sklearn.naive_bayes import GaussianNB

        return AdaBoostClassifier(
            GaussianNB(var_smoothing=self.var_smoothing),
            n_estimators=self.n_estimators,
            learning_rate=self.learning_rate,
            random_state=self.random_state,
        )
