"""scipy and scikit-learn helpers imported on first use, not when the plugin loads.

Loading a model imports every registered plugin module.  Importing scikit-learn costs 0.9 s (it
imports ``scipy.stats``) and ``scipy.special`` 0.2 s; a model of naive Bayes and isotonic calibration
needs neither to score, so the plugin modules reach them through these wrappers.
"""

from __future__ import annotations


def expit(x, out=None):
    """The logistic function ``1 / (1 + exp(-x))``, as ``scipy.special.expit`` computes it.

    Float64 arrays (every calibrator's scores) take NumPy's ``exp`` in scipy's own formula, so scoring
    with a sigmoid never imports ``scipy.special`` (0.2-0.35 s of a scoring command's 1 s start).  On
    x86-64 without AVX-512 NumPy's float64 ``exp`` is the C library's, and the result has scipy's bits
    (tested over 10M values from 1e-300 to 800 in magnitude); with AVX-512, NumPy's own vectorised
    ``exp`` puts it within 4 ulps of scipy's (measured).  Anything
    else (other dtypes, scalars of other types) goes to scipy, whose float32 kernel differs from
    NumPy's."""
    import numpy as np

    if (isinstance(x, np.ndarray) and x.dtype == np.float64 and x.ndim
            and (out is None or (isinstance(out, np.ndarray) and out.dtype == np.float64))):
        with np.errstate(over="ignore"):  # exp(-x) -> inf for x < -709: 1 / inf = 0, as scipy gives
            r = np.negative(x, out=out)
            np.exp(r, out=r)
            np.add(r, 1.0, out=r)
            return np.divide(1.0, r, out=r)
    from scipy.special import expit as _expit

    return _expit(x) if out is None else _expit(x, out=out)


def check_is_fitted(estimator, attributes) -> None:
    """scikit-learn's ``check_is_fitted(estimator, attributes)``, importing scikit-learn only to raise
    its ``NotFittedError`` (with its message) when an attribute is missing."""
    if all(hasattr(estimator, a) for a in attributes):
        return
    from sklearn.utils.validation import check_is_fitted as _check

    _check(estimator, attributes)
