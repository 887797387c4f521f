"""Input checks and small helpers every built-in learner module shares (private).

One behaviour for every learner: the same messages for a bad ``X``, ``y`` or weight vector, the
contract's score shape, and the one scaler the scikit-learn-backed learners put in front of their
estimator.  scikit-learn is imported inside the functions (the plugin must stay cheap to import).
"""

from __future__ import annotations

import re

import numpy as np

from calengine.base import check_weights, reject_sparse
from calengine.errors import DataError, ParameterError


def _no_weights_error(name: str) -> ParameterError:
    return ParameterError(
        f"learner '{name}' does not accept sample weights; fit it through calengine fit --weight or"
        " CalibratedClassifier.fit(sample_weight=...), which train it on a costing sample of the weighted rows"
    )


def checked_array(X, *, accept_sparse, ensure_min_samples: int = 1):
    """``sklearn.utils.check_array(X, accept_sparse=..., dtype=np.float64, ensure_min_samples=...)``,
    without importing scikit-learn for what the engine hands a learner: a 2-D NumPy array of numbers,
    every value finite, at least ``ensure_min_samples`` rows and one column.  That is returned as
    float64 (no copy when it is float64 already); anything else (sparse matrices, frames, lists, NaN,
    infinities, empty or 1-D input) goes to ``check_array`` itself, so its result and its error
    messages are scikit-learn's.  Importing scikit-learn took 0.9-2 s of a 5 s fit of a 32,561-row
    table whose learner (naive Bayes from statistics) never calls it."""
    if (isinstance(X, np.ndarray) and X.ndim == 2 and X.dtype.kind in "fiu"
            and X.shape[0] >= ensure_min_samples and X.shape[1] >= 1):
        out = np.asarray(X, dtype=np.float64)
        # one sum finds a NaN or an infinity (as check_array's own first test); a sum that overflows
        # on finite values goes to check_array, which looks at every value
        with np.errstate(over="ignore", invalid="ignore"):
            if np.isfinite(out.sum()):
                return out
    from sklearn.utils import check_array

    return check_array(X, accept_sparse=accept_sparse, dtype=np.float64, ensure_min_samples=ensure_min_samples)


def _check_input(learner, X, *, n_features: int | None = None):
    """Validate ``X`` for ``learner``: CSR only when the learner supports it, float64, 2-D, finite.

    Returns the validated matrix.  Raises :class:`DataError` for sparse input to a dense-only learner
    and for a column count that differs from the one seen in ``fit``.
    """
    reject_sparse(learner, X)
    X = checked_array(X, accept_sparse="csr" if learner.accepts_sparse else False)
    if n_features is not None and X.shape[1] != n_features:
        raise DataError(
            f"learner '{learner.name}' was fitted on {n_features} features but got {X.shape[1]}; "
            "score data encoded the same way as the training data"
        )
    return X


#: the public base class's checks are the built-ins' checks (one behaviour for every plugin)
_reject_sparse = reject_sparse
_check_weights = check_weights


def _labels_of(y, n: int) -> np.ndarray:
    """``y`` as an array of shape ``(n,)``, else :class:`DataError`."""
    y = np.asarray(y)
    if y.shape != (n,):
        raise DataError(f"y has shape {y.shape} but X has {n} rows; give one class index per row")
    return y


def _integral(y: np.ndarray) -> bool:
    """Whether every value of ``y`` is a whole number (integers, or finite floats without a fraction)."""
    return bool(np.issubdtype(y.dtype, np.integer) or (
        np.issubdtype(y.dtype, np.floating) and np.all(np.isfinite(y)) and np.all(np.mod(y, 1) == 0)
    ))


def _check_labels(y, n: int) -> np.ndarray:
    y = _labels_of(y, n)
    if y.size == 0 or not _integral(y) or y.min() < 0:
        raise DataError("y must hold class indices 0..k-1")
    return y.astype(np.intp)


def _parse_positive_int(value, what: str) -> int:
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        value = int(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ParameterError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def _split_proba(P: np.ndarray) -> np.ndarray:
    """The contract's shape: class-1 column for two classes, the full matrix otherwise."""
    return P[:, 1].copy() if P.shape[1] == 2 else P


def _scaler(sparse_input: bool):
    """StandardScaler; for sparse input it only scales (centring would densify the matrix)."""
    from sklearn.preprocessing import StandardScaler

    return StandardScaler(with_mean=not sparse_input)


def int32_indices(X, learner: str):
    """CSR/CSC ``X`` with int32 indices, as scikit-learn's tree and liblinear code require (they refuse
    int64-indexed matrices, which scipy makes for large or concatenated matrices); other input as given.
    A matrix whose entries do not fit int32 indexing is one line naming the fix."""
    from calengine.base import is_sparse

    if not is_sparse(X) or not hasattr(X, "indptr") or (X.indices.dtype == np.int32 and X.indptr.dtype == np.int32):
        return X
    limit = np.iinfo(np.int32).max
    if X.nnz > limit or max(X.shape) > limit:
        raise DataError(
            f"learner '{learner}' takes sparse matrices of at most {limit} stored entries and rows, got"
            f" {X.nnz} entries in shape {X.shape}; fit on fewer rows (--max-train-rows)"
        )
    X = X.copy()
    X.indices = X.indices.astype(np.int32)
    X.indptr = X.indptr.astype(np.int32)
    return X
