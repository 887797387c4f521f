"""calengine's built-in learners: the base classifiers whose scores the engine calibrates.

The set covers the classifiers of the calibration literature the project reproduces: C4.5-style entropy
trees with optional Laplace leaves and (boosted) naive Bayes as in Zadrozny & Elkan, the nearest mean,
Fisher, BayU/BayQ, k-NN, Parzen and small-network classifiers of Duin & Tax, linear SVMs and logistic
regression, plus any scikit-learn classifier named by import path.

=====================  ==============  ===========  ==========================================  =================
registry name          sample weights  score_kind   sparse CSR input                            fit from stats
=====================  ==============  ===========  ==========================================  =================
decision_tree          yes             proba        yes                                         no
linear_svm             yes             decision     yes (scaling without centring)              no
logistic_regression    yes             proba        yes (scaling without centring)              no
gaussian_nb            yes             proba        no                                          yes
bernoulli_nb           yes             proba        yes (scaling without centring)              standardize=False
multinomial_nb         yes             proba        yes (max-abs scaling; needs values >= 0)    yes
categorical_nb         yes             proba        no                                          no
boosted_nb             yes             proba        no                                          no
knn                    no              proba        no                                          no
nearest_mean           yes             decision     yes                                         no
fisher_lda             no              decision     no                                          no
qda                    no              proba        no                                          no
bayes_diagonal         yes             proba        no                                          yes
bayes_full             no              proba        no                                          no
parzen                 yes             proba        no                                          no
mlp                    yes             proba        yes (scaling without centring)              no
sklearn                from the class  from class   from the class's input tags                 no
=====================  ==============  ===========  ==========================================  =================

"fit from stats": the learner implements the optional statistics contract of
:class:`calengine.base.Learner` (``supports_stats``): it is fitted over a partitioned table from small,
mergeable per-class statistics (counts, means and squared deviations, feature sums, column ranges)
without holding the rows, and k cross-validation folds cost one pass.  The result is the model ``fit``
gives on the same rows, up to floating-point rounding.  ``bernoulli_nb`` supports it only with
``standardize=False`` (its ``supports_stats`` is a property of the instance).

Each learner also carries ``accepts_sparse``; a sparse matrix given to a learner without sparse support
raises :class:`calengine.errors.DataError` naming the fix instead of densifying behind the user's back
(which could exhaust memory on a wide one-hot table).

The scikit-learn-backed learners subclass the public :class:`calengine.base.SklearnLearner`, exactly as a
third-party plugin would: sample weights reach every step of a Pipeline whose ``fit`` accepts them (the
scaler as well as the classifier), so that a weight of 2 means exactly "this row twice" for the
deterministic learners, and ``make_estimator(sparse_input)`` builds a non-centring scaler for CSR input.

Persistence: scikit-learn-backed learners hand their fitted estimator to the artifact, which stores it
with skops under :data:`calengine.model.allowlist.CORE_TRUSTED_TYPES`.  The learners written here (k-NN,
Parzen, nearest mean, and the discretiser of ``categorical_nb``) export only numpy arrays, ints, floats
and strings, so loading them involves no object deserialisation at all.

scikit-learn submodules are imported inside the methods that need them: the plugin is loaded whenever
the registry is built (``calengine --help`` included) and must stay cheap to import.
"""

from __future__ import annotations

import importlib
import math
import re
import threading
from typing import Any, ClassVar

import numpy as np

from calengine import hookimpl
from calengine.base import Learner, SklearnLearner, check_weights, is_sparse, reject_sparse, sparse_input_error
from calengine.errors import DataError, ParameterError
from calengine_builtins.deferred import expit

__all__ = [
    "LEARNERS",
    "BayesDiagonalLearner",
    "BayesFullLearner",
    "BernoulliNBLearner",
    "BoostedNBLearner",
    "CategoricalNBLearner",
    "DecisionTreeLearner",
    "FisherLDALearner",
    "GaussianNBLearner",
    "KNNLearner",
    "LinearSVMLearner",
    "LogisticRegressionLearner",
    "MLPLearner",
    "MultinomialNBLearner",
    "NearestMeanLearner",
    "ParzenLearner",
    "QDALearner",
    "SklearnClassifier",
    "apply_bins",
    "knn_counts_proba",
    "knn_distance_proba",
    "quantile_bin_edges",
]

#: number of float64 entries in one temporary block of distances (16 MiB); bounds the memory of the
#: k-NN, Parzen and bandwidth computations whatever the number of rows.
_BLOCK_ENTRIES = 1 << 21

#: the largest k tried when k-NN chooses k by leave-one-out error (Duin & Tax)
_LOO_MAX_K = 50


# ------------------------------------------------------------------------------------------ helpers


def _no_weights_error(name: str) -> ParameterError:
    return ParameterError(
        f"learner '{name}' does not accept sample weights; use costing "
        "(--method-param weighting=costing) instead"
    )


def _check_input(learner, X, *, n_features: int | None = None):
    """Validate ``X`` for ``learner``: CSR only when the learner supports it, float64, 2-D, finite.

    Returns the validated matrix.  Raises :class:`DataError` for sparse input to a dense-only learner
    and for a column count that differs from the one seen in ``fit``.
    """
    from sklearn.utils import check_array

    if is_sparse(X) and not learner.accepts_sparse:
        raise sparse_input_error(learner)
    X = check_array(X, accept_sparse="csr" if learner.accepts_sparse else False, dtype=np.float64)
    if n_features is not None and X.shape[1] != n_features:
        raise DataError(
            f"learner '{learner.name}' was fitted on {n_features} features but got {X.shape[1]}; "
            "score data encoded the same way as the training data"
        )
    return X


#: the public base class's checks are the built-ins' checks (one behaviour for every plugin)
_reject_sparse = reject_sparse
_check_weights = check_weights


def _check_labels(y, n: int) -> np.ndarray:
    y = np.asarray(y)
    if y.shape != (n,):
        raise DataError(f"y has shape {y.shape} but X has {n} rows; give one class index per row")
    integral = np.issubdtype(y.dtype, np.integer) or (
        np.issubdtype(y.dtype, np.floating) and np.all(np.isfinite(y)) and np.all(np.mod(y, 1) == 0)
    )
    if y.size == 0 or not integral or y.min() < 0:
        raise DataError("y must hold class indices 0..k-1")
    return y.astype(np.intp)


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


def _parse_positive_int(value, what: str) -> int:
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        value = int(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ParameterError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def _split_proba(P: np.ndarray) -> np.ndarray:
    """The contract's shape: class-1 column for two classes, the full matrix otherwise."""
    return P[:, 1].copy() if P.shape[1] == 2 else P


# ------------------------------------------------------------------------------------------ fitting from statistics
#
# The naive Bayes learners below implement the optional contract of ``calengine.base.Learner``
# (``partial_stats`` / ``merge_stats`` / ``fit_from_stats``).  Statistics are dicts of small numpy
# arrays (O(classes x features)); every dict carries ``rows`` (rows per class, int64) and ``count``
# (weighted rows per class), which tell ``fit_from_stats`` whether every class was seen.


def _stats_input(learner, X, y, sample_weight, n_classes):
    """Validate one piece for ``partial_stats``: like ``fit``, except that zero rows and missing classes
    are allowed and weights may sum to zero.  Returns ``(X, y, w, k)`` with ``w`` all ones if unweighted.
    """
    from sklearn.utils import check_array

    _reject_sparse(learner, X)
    X = check_array(
        X, accept_sparse="csr" if learner.accepts_sparse else False, dtype=np.float64, ensure_min_samples=0
    )
    k = _parse_positive_int(n_classes, "n_classes")
    n = X.shape[0]
    y = np.asarray(y)
    if y.shape != (n,):
        raise DataError(f"y has shape {y.shape} but X has {n} rows; give one class index per row")
    if n:
        integral = np.issubdtype(y.dtype, np.integer) or (
            np.issubdtype(y.dtype, np.floating) and np.all(np.isfinite(y)) and np.all(np.mod(y, 1) == 0)
        )
        if not integral or y.min() < 0 or y.max() >= k:
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


# ------------------------------------------------------------------------------------------ sklearn-backed


#: serialises building a lazily restored estimator (see _ArrayState.estimator_)
_RESTORE_LOCK = threading.Lock()


class _ArrayState:
    """Persistence of a scikit-learn-backed learner as plain arrays instead of a skops dump.

    Mixed in before :class:`SklearnLearner` by learners whose fitted estimator is a handful of arrays
    (naive Bayes, logistic regression).  ``to_state`` stores each attribute named in
    :attr:`fitted_attributes` (per Pipeline step; ``""`` is an estimator that is not a Pipeline) and
    ``from_state`` sets them on a fresh :meth:`make_estimator` and recomputes what follows from them
    (:meth:`_derive`), so the restored estimator predicts the same bits as the fitted one.

    Why: a skops dump of a 20 Newsgroups multinomial naive Bayes is 88 MB per member, mostly
    ``feature_log_prob_`` (a function of the stored counts) and zero counts of words a class never
    saw; as arrays the same member is a few MB (the model files store mostly-zero arrays sparse), and
    an all-pairs Pendigits model loads 225 small ``.npz`` instead of 225 skops files.  Models saved
    before (state ``{"estimator": ...}``) still load through :meth:`SklearnLearner.from_state`.
    """

    #: step name -> fitted attributes stored; a callable of the estimator when it depends on the build.
    fitted_attributes: ClassVar[Any] = {}

    def _attributes(self, est) -> dict[str, tuple[str, ...]]:
        spec = self.fitted_attributes
        return spec(est) if callable(spec) else spec

    def to_state(self) -> dict[str, Any]:
        est = self.estimator_
        steps = dict(est.steps) if hasattr(est, "steps") else {"": est}
        state: dict[str, Any] = {"n_classes": self.n_classes_, "sparse_input": _built_for_sparse(est)}
        for step, names in self._attributes(est).items():
            for name in names:
                value = getattr(steps[step], name)
                key = f"{step}__{name}" if step else name
                state[key] = value if value is None or isinstance(value, (int, float)) else np.asarray(value)
                if isinstance(value, np.generic):
                    state[key] = value.item()
        return state

    def from_state(self, state: dict[str, Any]):
        if "estimator" in state:  # saved by calengine before array state
            return super().from_state(state)
        for key, value in state.items():  # a fitted model's arrays are finite; NaN/inf mean tampering
            if isinstance(value, np.ndarray) and value.dtype.kind == "f" and not np.isfinite(value).all():
                raise ValueError(f"state '{key}' holds NaN or infinity")
        if self._defers(state):
            # build the scikit-learn estimator when something first needs it (see estimator_)
            self.__dict__.pop("_estimator", None)
            self.__dict__["_pending_state"] = dict(state)
            self.n_classes_ = int(state["n_classes"])
            return self
        self.estimator_ = self._restore(state)
        self.n_classes_ = int(state["n_classes"])
        return self

    def _defers(self, state: dict[str, Any]) -> bool:
        """Whether ``state`` can wait unbuilt (checked now, raising ``ValueError`` as ``_restore``
        would).  By default: one estimator whose stored attributes do not depend on how it is built."""
        if not (isinstance(self.fitted_attributes, dict) and set(self.fitted_attributes) == {""}):
            return False
        missing = [n for n in self.fitted_attributes[""] if n not in state]
        if missing:
            raise ValueError(f"state '{missing[0]}' is missing")
        n_classes = int(state["n_classes"])
        classes = np.asarray(state["classes_"])
        if classes.shape != (n_classes,):
            raise ValueError(f"{classes.shape[0] if classes.ndim else 0} classes stored for n_classes={n_classes}")
        return True

    @property
    def estimator_(self):
        """The fitted scikit-learn estimator; after :meth:`from_state` it is built on first use.

        Why lazily: building it imports scikit-learn (0.9 s, for ``scipy.stats``), and a model whose
        learner scores from its stored arrays (:class:`GaussianNBLearner`) never needs it, so ``score``
        of such a model starts that much sooner in the client and in every worker process."""
        d = self.__dict__
        if "_estimator" not in d:
            with _RESTORE_LOCK:  # the embedded scheduler's threads share one model object
                if "_estimator" not in d:
                    if "_pending_state" not in d:
                        raise AttributeError(f"'{type(self).__name__}' object has no attribute 'estimator_'")
                    d["_estimator"] = self._restore(d["_pending_state"])
                    d.pop("_pending_state", None)
        return d["_estimator"]

    @estimator_.setter
    def estimator_(self, est) -> None:
        self.__dict__.pop("_pending_state", None)
        self.__dict__["_estimator"] = est

    def _stored(self, name: str):
        """A stored attribute of the fitted estimator (``step__name`` for a Pipeline's step, as in the
        state), without building it if not yet built; None when there is none."""
        pending = self.__dict__.get("_pending_state")
        if pending is not None:
            return pending.get(name)
        est = self.__dict__.get("_estimator")
        step, _, attr = name.rpartition("__")
        if step:
            est = dict(getattr(est, "steps", ())).get(step)
        return getattr(est, attr, None)

    def _restore(self, state: dict[str, Any]):
        """A scikit-learn estimator holding ``state``'s attributes (and what follows from them)."""
        est = self._build_estimator(sparse_input=bool(state["sparse_input"]))
        steps = dict(est.steps) if hasattr(est, "steps") else {"": est}
        for step, names in self._attributes(est).items():
            for name in names:
                key = f"{step}__{name}" if step else name
                if key not in state:
                    raise ValueError(f"state '{key}' is missing")
                setattr(steps[step], name, state[key])
        self._derive(steps)
        n_classes = int(state["n_classes"])
        classes = np.asarray(getattr(steps[list(steps)[-1]], "classes_"))
        if classes.shape != (n_classes,):
            raise ValueError(f"{classes.shape[0] if classes.ndim else 0} classes stored for n_classes={n_classes}")
        return est

    def _derive(self, steps: dict[str, Any]) -> None:
        """Recompute attributes that follow from the stored ones (none by default)."""


def _built_for_sparse(est) -> bool:
    """Whether ``est`` was built by ``make_estimator(sparse_input=True)``: its scaler does not centre."""
    scaler = dict(est.steps).get("scale") if hasattr(est, "steps") else None
    if scaler is None:
        return False
    if type(scaler).__name__ == "MaxAbsScaler":
        return True
    return type(scaler).__name__ == "StandardScaler" and not scaler.with_mean


#: what a fitted StandardScaler / MinMaxScaler / MaxAbsScaler holds (MaxAbsScaler's scale_ is derived).
_STANDARD_SCALER = ("mean_", "var_", "scale_", "n_samples_seen_", "n_features_in_")
_MINMAX_SCALER = ("min_", "scale_", "data_min_", "data_max_", "data_range_", "n_samples_seen_", "n_features_in_")
_MAXABS_SCALER = ("max_abs_", "n_samples_seen_", "n_features_in_")
#: a discrete naive Bayes' counts; feature_log_prob_ and class_log_prior_ are derived by its own methods.
_DISCRETE_NB = ("classes_", "class_count_", "feature_count_", "n_features_in_")


def _scaler_attributes(scaler) -> tuple[str, ...]:
    return {"StandardScaler": _STANDARD_SCALER, "MinMaxScaler": _MINMAX_SCALER,
            "MaxAbsScaler": _MAXABS_SCALER}[type(scaler).__name__]


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




def _scaler(sparse_input: bool):
    """StandardScaler; for sparse input it only scales (centring would densify the matrix)."""
    from sklearn.preprocessing import StandardScaler

    return StandardScaler(with_mean=not sparse_input)


class DecisionTreeLearner(SklearnLearner):
    """Entropy-split decision tree with pruning controls: calengine's stand-in for C4.5/J48.

    ``min_samples_leaf=2`` mirrors J48's minimum of two objects per leaf; ``max_depth``,
    ``min_impurity_decrease`` and ``ccp_alpha`` (cost-complexity pruning) control the size of the tree.

    With ``laplace=True`` the score of a leaf is the Laplace estimate ``(n_i + 1) / (N + c)`` of Duin &
    Tax eq. (2) and Provost & Domingos, instead of the raw frequency ``n_i / N`` that makes unpruned
    trees output 0 and 1.  The per-leaf class counts ``n_i`` are re-counted from the training data with
    ``apply()`` (weighted counts when weights are given) and stored as an array in the state, so the
    estimate does not depend on how a scikit-learn version stores ``tree_.value``.
    """

    name = "decision_tree"
    accepts_sample_weight = True
    score_kind = "proba"
    accepts_sparse = True

    def __init__(
        self,
        criterion: str = "entropy",
        max_depth: int | None = None,
        min_samples_leaf: int = 2,
        min_impurity_decrease: float = 0.0,
        ccp_alpha: float = 0.0,
        laplace: bool = False,
        random_state=None,
    ):
        self.criterion = criterion
        self.max_depth = max_depth
        self.min_samples_leaf = min_samples_leaf
        self.min_impurity_decrease = min_impurity_decrease
        self.ccp_alpha = ccp_alpha
        self.laplace = laplace
        self.random_state = random_state

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.tree import DecisionTreeClassifier

        return DecisionTreeClassifier(
            criterion=self.criterion,
            max_depth=self.max_depth,
            min_samples_leaf=self.min_samples_leaf,
            min_impurity_decrease=self.min_impurity_decrease,
            ccp_alpha=self.ccp_alpha,
            random_state=self.random_state,
        )

    def fit(self, X, y, sample_weight=None):
        super().fit(X, y, sample_weight)
        k = self.n_classes_
        leaves = self.estimator_.apply(X)
        y_idx = np.searchsorted(self.estimator_.classes_, np.asarray(y))
        n_nodes = self.estimator_.tree_.node_count
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        counts = np.bincount(leaves * k + y_idx, weights=w, minlength=n_nodes * k)
        self.leaf_counts_ = counts.reshape(n_nodes, k).astype(np.float64)
        return self

    def score(self, X) -> np.ndarray:
        if not self.laplace:
            return super().score(X)
        counts = self.leaf_counts_[self.estimator_.apply(X)]
        k = self.n_classes_
        P = (counts + 1.0) / (counts.sum(axis=1, keepdims=True) + k)
        return _split_proba(P)

    def to_state(self) -> dict[str, Any]:
        state = super().to_state()
        state["leaf_counts"] = self.leaf_counts_
        return state

    def from_state(self, state: dict[str, Any]) -> "DecisionTreeLearner":
        super().from_state(state)
        self.leaf_counts_ = np.asarray(state["leaf_counts"], dtype=np.float64)
        return self


class LinearSVMLearner(SklearnLearner):
    """Standardised features + LinearSVC; its unbounded margin is the score to calibrate.

    Scaling matters: unscaled LinearSVC converges badly and calibrates worse (see the baselines in the
    project notes).  ``dual="auto"`` lets scikit-learn pick the faster formulation.
    """

    name = "linear_svm"
    accepts_sample_weight = True
    score_kind = "decision"
    accepts_sparse = True

    def __init__(self, C: float = 1.0, max_iter: int = 5000, random_state=None):
        self.C = C
        self.max_iter = max_iter
        self.random_state = random_state

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.pipeline import Pipeline
        from sklearn.svm import LinearSVC

        svm = LinearSVC(C=self.C, dual="auto", max_iter=self.max_iter, random_state=self.random_state)
        return Pipeline([("scale", _scaler(sparse_input)), ("svm", svm)])


class LogisticRegressionLearner(_ArrayState, SklearnLearner):
    """Standardised features + L2 logistic regression (lbfgs, deterministic); stored as arrays."""

    _LOGREG_ATTRIBUTES = ("classes_", "coef_", "intercept_", "n_iter_", "n_features_in_")

    @staticmethod
    def fitted_attributes(est) -> dict[str, tuple[str, ...]]:
        return {"scale": _scaler_attributes(est.steps[0][1]),
                "logreg": LogisticRegressionLearner._LOGREG_ATTRIBUTES}

    name = "logistic_regression"
    accepts_sample_weight = True
    score_kind = "proba"
    accepts_sparse = True

    def __init__(self, C: float = 1.0, max_iter: int = 1000):
        self.C = C
        self.max_iter = max_iter

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import Pipeline

        return Pipeline(
            [("scale", _scaler(sparse_input)), ("logreg", LogisticRegression(C=self.C, max_iter=self.max_iter))]
        )

    def _defers(self, state: dict[str, Any]) -> bool:
        """A dense model's state waits unbuilt: :meth:`score` needs only its arrays, and building the
        Pipeline imports scikit-learn (0.9 s of a scoring command's start, in the client and in every
        worker).  Sparse models, and states missing a key (which ``_restore`` reports), build at once."""
        keys = [f"scale__{n}" for n in _STANDARD_SCALER] + [f"logreg__{n}" for n in self._LOGREG_ATTRIBUTES]
        return not state.get("sparse_input") and all(k in state for k in keys)

    def _dense_arrays(self):
        """(mean, scale, coef, intercept) of a dense (centring StandardScaler) two-class model, from the
        stored state or the built Pipeline; None for anything else (sparse, several classes)."""
        if "_pending_state" not in self.__dict__:
            est = self.__dict__.get("_estimator")
            if est is None or _built_for_sparse(est):
                return None
        arrays = [self._stored(k) for k in ("scale__mean_", "scale__scale_", "logreg__coef_", "logreg__intercept_")]
        if not all(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in arrays):
            return None
        mean, scale, coef, intercept = arrays
        d = mean.shape[0] if mean.ndim == 1 else -1
        if scale.shape != (d,) or coef.shape != (1, d) or intercept.shape != (1,):
            return None
        return mean, scale, coef, intercept

    def score(self, X) -> np.ndarray:
        """P(class 1) of a dense two-class model computed from its arrays with scikit-learn's own
        operations in its order: StandardScaler's copy (same memory layout) minus ``mean_`` divided
        by ``scale_``, ``X @ coef_.T + intercept_`` and expit.  The same bits as the Pipeline's
        ``predict_proba`` (tested), without importing scikit-learn.  Anything else (sparse or
        non-float64 input, another width, several classes, non-finite values) goes through the
        Pipeline, for its checks and messages."""
        arrays = self._dense_arrays()
        if (arrays is None or not isinstance(X, np.ndarray) or X.ndim != 2 or X.dtype != np.float64
                or X.shape[0] == 0 or X.shape[1] != arrays[0].shape[0]):
            return super().score(X)
        mean, scale, coef, intercept = arrays
        Xs = np.array(X, copy=True, order="K")
        Xs -= mean
        Xs /= scale
        decision = (Xs @ coef.T + intercept).reshape(-1)
        if not np.isfinite(decision).all():
            return super().score(X)
        return expit(decision, out=decision)


class GaussianNBLearner(_ArrayState, SklearnLearner):
    """Gaussian naive Bayes: the classic badly calibrated (overconfident) probability estimator."""

    fitted_attributes = {"": ("classes_", "theta_", "var_", "class_count_", "class_prior_", "epsilon_", "n_features_in_")}

    name = "gaussian_nb"
    accepts_sample_weight = True
    score_kind = "proba"
    accepts_sparse = False

    def __init__(self, var_smoothing: float = 1e-9):
        self.var_smoothing = var_smoothing

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.naive_bayes import GaussianNB

        return GaussianNB(var_smoothing=self.var_smoothing)

    def score(self, X) -> np.ndarray:
        """P(class 1) (or every class's probability), as GaussianNB's ``predict_proba`` computes it
        but a block of rows at a time in a features-by-rows buffer: scikit-learn builds three
        full-size temporaries per class and sums 20-value rows one by one, which made scoring the
        largest share of a naive Bayes fit.  The per-row sum runs over features in order, so the log
        likelihoods differ from scikit-learn's by rounding only (about 1e-15) and are the same bits on
        every machine.  Anything unusual (not a dense float64 matrix of the fitted width, non-finite
        values) goes through scikit-learn, for its checks and messages."""
        theta = self._stored("theta_")
        if (theta is None or not isinstance(X, np.ndarray) or X.ndim != 2 or X.dtype != np.float64
                or X.shape[1] != theta.shape[1] or X.shape[0] == 0):
            return super().score(X)
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
                jll[i, start : start + Xt.shape[1]] = const[i] - 0.5 * b.sum(axis=0)
        if not np.isfinite(jll).all():
            return super().score(X)
        top = jll.max(axis=0)
        log_norm = top + np.log(np.exp(jll - top).sum(axis=0))
        proba = np.exp(jll - log_norm)
        return np.ascontiguousarray(proba[1]) if k == 2 else np.ascontiguousarray(proba.T)

    # -- fitting from statistics (see calengine.base.Learner) -----------------------------------
    #
    # Per class: rows, weighted count, weighted mean and weighted sum of squared deviations (M2);
    # per column, over all rows and unweighted (GaussianNB's epsilon_ uses the plain variance of X):
    # rows, mean and M2.  Pieces merge with Chan et al.'s pairwise formulas: no raw sums of squares.

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
        col_mean = X.mean(axis=0) if n else np.zeros(d)
        col_dev = X - col_mean
        return {
            "n": np.asarray(n, dtype=np.int64),
            "rows": np.bincount(y, minlength=k).astype(np.int64),
            "count": count,
            "mean": mean,
            "m2": m2,
            "col_mean": col_mean,
            "col_m2": (col_dev * col_dev).sum(axis=0),
        }

    def partial_stats_groups(self, X, y, groups, n_groups: int, sample_weight, n_classes: int) -> list:
        """Every group's statistics in one pass over ``X``'s columns.  Unweighted, the rows are put in
        (group, class) order once (a radix sort of the small ids, one gather of the transposed
        matrix) and each segment's moments are contiguous vector sums; weighted, sums by (group,
        class) are ``np.bincount`` over each feature.  M2 is the corrected two-pass sum (deviations
        from a first mean, minus the square of their sum), as accurate as ``partial_stats``."""
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

        def segment_moments(ids, m):
            """(count, mean, M2) unweighted, segment by segment of the id-sorted columns."""
            order = np.argsort(ids.astype(np.int16) if m < 2**15 else ids, kind="stable")
            bounds = np.concatenate([[0], np.cumsum(np.bincount(ids, minlength=m))])
            Xs = np.take(Xt, order, axis=1)
            count = np.diff(bounds).astype(np.float64)
            mean, m2 = np.zeros((m, d)), np.zeros((m, d))
            for g in range(m):
                a, b = bounds[g], bounds[g + 1]
                if a == b:
                    continue
                seg = Xs[:, a:b]
                mean0 = seg.sum(axis=1) / (b - a)
                dev = seg - mean0[:, None]
                corr = dev.sum(axis=1) / (b - a)
                np.multiply(dev, dev, out=dev)
                m2[g] = np.maximum(dev.sum(axis=1) - (b - a) * corr * corr, 0.0)
                mean[g] = mean0 + corr
            return count, mean, m2

        if sample_weight is None:
            count, mean, m2 = segment_moments(gid, G * k)
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
        else:
            _, col_mean, col_m2 = moments(groups.astype(np.intp), None, G)
        c = np.ascontiguousarray  # own C-ordered arrays, not views: the same layout pickled or not
        return [
            {
                "n": np.asarray(int(rows[g].sum()), dtype=np.int64),
                "rows": c(rows[g]),
                "count": c(count[g]),
                "mean": c(mean[g]),
                "m2": c(m2[g]),
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
        n, col_mean, col_m2 = _chan_merge(
            float(a["n"]), a["col_mean"], a["col_m2"], float(b["n"]), b["col_mean"], b["col_m2"]
        )
        return {
            "n": np.asarray(int(a["n"]) + int(b["n"]), dtype=np.int64),
            "rows": np.asarray(a["rows"]) + np.asarray(b["rows"]),
            "count": count[:, 0],
            "mean": mean,
            "m2": m2,
            "col_mean": col_mean,
            "col_m2": col_m2,
        }

    def fit_from_stats(self, stats: dict[str, Any], n_classes: int) -> "GaussianNBLearner":
        keys = ("n", "rows", "count", "mean", "m2", "col_mean", "col_m2")
        k = _check_stats(self.name, stats, n_classes, keys)
        count = np.asarray(stats["count"], dtype=np.float64)
        mean = np.asarray(stats["mean"], dtype=np.float64)
        m2 = np.asarray(stats["m2"], dtype=np.float64)
        # GaussianNB leaves a class whose weights sum to ~0 (np.isclose) at mean 0, variance 0
        used = ~np.isclose(count, 0.0)
        theta = np.where(used[:, None], mean, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            var = np.where(used[:, None], m2 / np.where(used, count, 1.0)[:, None], 0.0)
        col_var = np.asarray(stats["col_m2"], dtype=np.float64) / float(stats["n"])
        est = _validated(self.make_estimator())
        est.classes_ = np.arange(k)
        est.n_features_in_ = int(mean.shape[1])
        est.epsilon_ = np.float64(est.var_smoothing * np.max(col_var))
        # C order whatever the statistics' layout (views in one process, copies after pickling), so the
        # saved model's bytes do not depend on where the statistics were merged
        est.theta_ = np.ascontiguousarray(theta)
        est.var_ = np.ascontiguousarray(var + est.epsilon_)
        est.class_count_ = count.copy()
        est.class_prior_ = count / count.sum()
        self.estimator_ = est
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
        if is_sparse(X) and X.nnz and X.data.min() < 0:
            raise DataError(
                "multinomial_nb needs non-negative sparse features (counts, tf-idf); pass dense data "
                "(it is min-max scaled automatically) or use bernoulli_nb"
            )
        return super().fit(X, y, sample_weight)

    # -- fitting from statistics (see calengine.base.Learner) -----------------------------------
    #
    # Per class: rows, weighted count and weighted sums of the raw features; per column: the raw
    # minimum and maximum (the scalers ignore weights).  Both scalers are affine, so the per-class sums
    # of the scaled features follow from the raw sums: ``scale * (sums - data_min * count)`` for
    # MinMaxScaler (exactly 0 on constant columns, as scikit-learn computes them), ``sums / max_abs``
    # for MaxAbsScaler.

    supports_stats = True

    def partial_stats(self, X, y, sample_weight, n_classes: int) -> dict[str, Any]:
        if is_sparse(X) and X.nnz and X.data.min() < 0:
            raise DataError(
                "multinomial_nb needs non-negative sparse features (counts, tf-idf); pass dense data "
                "(it is min-max scaled automatically) or use bernoulli_nb"
            )
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


def quantile_bin_edges(X: np.ndarray, n_bins: int) -> np.ndarray:
    """Inner quantile cut points of every column, shape ``(n_features, n_bins - 1)``.

    Cut points of a column with few distinct values coincide; the empty bins between them are harmless
    (CategoricalNB smooths them) and, unlike ``KBinsDiscretizer``, produce no warnings.
    """
    q = np.arange(1, n_bins) / n_bins
    return np.ascontiguousarray(np.quantile(X, q, axis=0).T)


def apply_bins(X: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Ordinal bin codes ``0..n_bins-1``: the number of cut points of the column at or below the value."""
    codes = np.empty(X.shape, dtype=np.intp)
    for j in range(X.shape[1]):
        codes[:, j] = np.searchsorted(edges[j], X[:, j], side="right")
    return codes


class CategoricalNBLearner(SklearnLearner):
    """Categorical naive Bayes on numeric columns discretised into ``n_bins`` quantile bins.

    The cut points are stored as an array ``edges`` (unweighted quantiles of the training data);
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
        edges = quantile_bin_edges(X, n_bins)
        super().fit(apply_bins(X, edges), y, sample_weight)
        self.edges_ = edges
        return self

    def score(self, X) -> np.ndarray:
        X = _check_input(self, X, n_features=self.edges_.shape[0])
        return super().score(apply_bins(X, self.edges_))

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


class FisherLDALearner(SklearnLearner):
    """Fisher's linear discriminant (LinearDiscriminantAnalysis); its decision value is calibrated.

    scikit-learn's LDA has no sample weights, so neither does this learner.  ``shrinkage`` ("auto" or a
    float) needs ``solver="lsqr"`` or ``"eigen"``.
    """

    name = "fisher_lda"
    accepts_sample_weight = False
    score_kind = "decision"
    accepts_sparse = False

    def __init__(self, solver: str = "svd", shrinkage=None):
        self.solver = solver
        self.shrinkage = shrinkage

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

        return LinearDiscriminantAnalysis(solver=self.solver, shrinkage=self.shrinkage)


class QDALearner(SklearnLearner):
    """Standardised features + quadratic discriminant analysis (Gaussian classes, full covariances).

    ``reg_param`` shrinks each class covariance towards the identity.  The default 0.01 is not
    scikit-learn's 0.0: real tables routinely have collinear columns, where the unregularised fit
    fails.  Standardising first (QDA itself is invariant to it) makes that shrinkage mean the same for
    every column whatever its unit.  A class with no more rows than features has no full-rank
    covariance for the default ``solver="svd"`` whatever ``reg_param`` is: ``solver="eigen"`` with a
    ``shrinkage`` (e.g. 0.01, or "auto") fits it.  A fit that fails says which of the two to change.
    """

    name = "qda"
    accepts_sample_weight = False
    score_kind = "proba"
    accepts_sparse = False

    def __init__(self, reg_param: float = 0.01, solver: str = "svd", shrinkage=None):
        self.reg_param = reg_param
        self.solver = solver
        self.shrinkage = shrinkage

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.discriminant_analysis import QuadraticDiscriminantAnalysis
        from sklearn.pipeline import Pipeline

        qda = QuadraticDiscriminantAnalysis(reg_param=self.reg_param, solver=self.solver, shrinkage=self.shrinkage)
        return Pipeline([("scale", _scaler(sparse_input)), ("qda", qda)])

    def fit(self, X, y, sample_weight=None):
        try:
            return super().fit(X, y, sample_weight)
        except np.linalg.LinAlgError as exc:
            counts = np.bincount(np.asarray(y))
            if self.solver == "svd" and counts[counts > 0].min() <= np.shape(X)[1]:
                fix = "a class has no more rows than features: use solver=eigen with shrinkage=0.01"
            else:
                fix = f"use a larger reg_param than {self.reg_param} (e.g. 0.1) or a shrinkage"
            raise ParameterError(f"learner '{self.name}': a class covariance is singular; {fix}") from exc


class BayesFullLearner(QDALearner):
    """Duin & Tax's BayQ: Gaussian densities with arbitrary class covariances (= QDA)."""

    name = "bayes_full"


def _hidden_layers(value) -> tuple[int, ...]:
    """``10``, ``"10"``, ``"20,10"``, ``(20, 10)`` or ``[20, 10]`` -> a tuple of positive layer sizes."""
    if isinstance(value, str):
        parts = [p for p in re.split(r"[,\s]+", value.strip("()[] ")) if p]
        value = tuple(parts)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not value:
        raise ParameterError(f"hidden_layer_sizes must be an int or a list of ints, got {value!r}")
    return tuple(_parse_positive_int(v, "each hidden layer size") for v in value)


class MLPLearner(SklearnLearner):
    """Standardised features + a small multi-layer perceptron (default: one layer of 10 units).

    Duin & Tax's point is that a network's outputs are classifier-conditional estimates, not density
    based ones, which is why they are worth calibrating.  scikit-learn 1.9's MLPClassifier honours
    ``sample_weight``, so this learner does.
    """

    name = "mlp"
    accepts_sample_weight = True
    score_kind = "proba"
    accepts_sparse = True

    def __init__(
        self,
        hidden_layer_sizes=10,
        alpha: float = 1e-4,
        max_iter: int = 500,
        early_stopping: bool = False,
        random_state=None,
    ):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.alpha = alpha
        self.max_iter = max_iter
        self.early_stopping = early_stopping
        self.random_state = random_state

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.neural_network import MLPClassifier
        from sklearn.pipeline import Pipeline

        mlp = MLPClassifier(
            hidden_layer_sizes=_hidden_layers(self.hidden_layer_sizes),
            alpha=self.alpha,
            max_iter=self.max_iter,
            early_stopping=self.early_stopping,
            random_state=self.random_state,
        )
        return Pipeline([("scale", _scaler(sparse_input)), ("mlp", mlp)])



# ------------------------------------------------------------------------------------------ by import path

_PATH_RE = re.compile(r"sklearn(\.[A-Za-z_][A-Za-z0-9_]*)+")


class SklearnClassifier(SklearnLearner):
    """Any scikit-learn classifier named by import path, e.g. ``sklearn.ensemble.RandomForestClassifier``.

    Only classes defined under ``sklearn.`` that scikit-learn recognises as classifiers are accepted, so
    a model manifest can never make calengine import arbitrary code.  ``params`` go to the class;
    ``random_state``, when set (the engine sets it), is passed on if the class has that parameter and
    ``params`` does not already fix it.  The estimator is used as given, without scaling.

    ``accepts_sample_weight``, ``score_kind`` and ``accepts_sparse`` are properties of the instance,
    derived from the class: weights iff its ``fit`` takes ``sample_weight``; ``"proba"`` when it offers
    ``predict_proba`` (for example not ``SVC(probability=False)`` or a hinge-loss ``SGDClassifier``),
    else ``"decision"``; sparse input per the estimator's input tags.
    """

    name = "sklearn"

    def __init__(
        self,
        path: str = "sklearn.ensemble.HistGradientBoostingClassifier",
        params: dict | None = None,
        random_state=None,
    ):
        self.path = path
        self.params = params
        self.random_state = random_state

    def _resolve_class(self) -> type:
        from sklearn.base import BaseEstimator

        path = self.path
        if not isinstance(path, str) or not _PATH_RE.fullmatch(path):
            raise ParameterError(
                f"learner 'sklearn' needs an import path under 'sklearn.' such as "
                f"'sklearn.ensemble.RandomForestClassifier', got {path!r}"
            )
        module_name, _, attr = path.rpartition(".")
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            raise ParameterError(
                f"cannot import module '{module_name}' for learner path '{path}'; check the spelling"
            ) from None
        cls = getattr(module, attr, None)
        if cls is None:
            raise ParameterError(f"'{module_name}' has no attribute '{attr}'; check the learner path '{path}'")
        if not (
            isinstance(cls, type)
            and issubclass(cls, BaseEstimator)
            and (cls.__module__ == "sklearn" or cls.__module__.startswith("sklearn."))
        ):
            raise ParameterError(f"'{path}' is not a scikit-learn estimator class; name a classifier class")
        return cls

    def make_estimator(self, sparse_input: bool = False):
        from sklearn.base import is_classifier

        cls = self._resolve_class()
        params = self.params or {}
        if not isinstance(params, dict):
            raise ParameterError(f"params of learner 'sklearn' must be a dict, got {type(params).__name__}")
        try:
            est = cls(**params)
        except (TypeError, ValueError) as exc:
            raise ParameterError(f"bad parameters for '{self.path}': {exc}") from None
        if not is_classifier(est):
            raise ParameterError(f"'{self.path}' is not a classifier; name a scikit-learn classifier class")
        if not (hasattr(est, "predict_proba") or hasattr(est, "decision_function")):
            raise ParameterError(
                f"'{self.path}' offers neither predict_proba nor decision_function; its scores cannot be calibrated"
            )
        if (
            self.random_state is not None
            and "random_state" not in params
            and "random_state" in est.get_params(deep=False)
        ):
            est.set_params(random_state=self.random_state)
        return est

    def _reference(self):
        est = getattr(self, "estimator_", None)
        return est if est is not None else self.make_estimator()

    @property
    def accepts_sample_weight(self) -> bool:  # type: ignore[override]
        from sklearn.utils.validation import has_fit_parameter

        return bool(has_fit_parameter(self._reference(), "sample_weight"))

    @property
    def score_kind(self) -> str:  # type: ignore[override]
        return "proba" if hasattr(self._reference(), "predict_proba") else "decision"

    @property
    def accepts_sparse(self) -> bool:  # type: ignore[override]
        from sklearn.utils import get_tags

        return bool(get_tags(self._reference()).input_tags.sparse)


# ------------------------------------------------------------------------------------------ k-NN


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
            cache[cls] = NearestNeighbors().fit(Z) if len(Z) else None
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
        if self.n_classes_ == 2:
            return np.asarray(2.0 * (X @ (mu[1] - mu[0]))).ravel() + (mu_sq[0] - mu_sq[1])
        if is_sparse(X):
            x_sq = np.asarray(X.multiply(X).sum(axis=1)).ravel()
        else:
            x_sq = np.einsum("ij,ij->i", X, X)
        return np.asarray(2.0 * (X @ mu.T)) - mu_sq[None, :] - x_sq[:, None]

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
        """``log sum_{n in c} w_n exp(-|z - x_n|^2 / 2h^2)`` per row and class, in row blocks."""
        from scipy.special import logsumexp

        X_tr, y_tr = self.X_, self.y_
        c = self.n_classes_
        bounds = np.searchsorted(y_tr, np.arange(c + 1))
        log_w = np.log(self.w_)
        tr_sq = np.einsum("ij,ij->i", X_tr, X_tr)
        inv2h2 = 1.0 / (2.0 * self.bandwidth_**2)
        out = np.full((Z.shape[0], c), -np.inf)
        for sl in _row_blocks(Z.shape[0], X_tr.shape[0]):
            A = _squared_distances(Z[sl], X_tr, tr_sq)
            A *= -inv2h2
            A += log_w[None, :]
            for cls in range(c):
                s, e = bounds[cls], bounds[cls + 1]
                if e > s:
                    out[sl, cls] = logsumexp(A[:, s:e], axis=1)
        return out

    def score(self, X) -> np.ndarray:
        from scipy.special import logsumexp

        X = _check_input(self, X, n_features=self.X_.shape[1])
        L = self._class_log_sums((X - self.mean_) / self.scale_)
        P = np.exp(L - logsumexp(L, axis=1, keepdims=True))
        return _split_proba(P)

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


# ------------------------------------------------------------------------------------------ registry

LEARNERS: tuple[type[Learner], ...] = (
    DecisionTreeLearner,
    LinearSVMLearner,
    LogisticRegressionLearner,
    GaussianNBLearner,
    BernoulliNBLearner,
    MultinomialNBLearner,
    CategoricalNBLearner,
    BoostedNBLearner,
    KNNLearner,
    NearestMeanLearner,
    FisherLDALearner,
    QDALearner,
    BayesDiagonalLearner,
    BayesFullLearner,
    ParzenLearner,
    MLPLearner,
    SklearnClassifier,
)


@hookimpl
def register_learners(register):
    """Register every built-in learner class."""
    for cls in LEARNERS:
        register(cls)
