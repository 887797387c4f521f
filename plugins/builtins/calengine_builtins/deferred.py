"""scipy and scikit-learn helpers imported on first use, not when the plugin loads.

Loading a model imports every registered plugin module.  Importing scikit-learn costs 0.9 s (it
imports ``scipy.stats``) and ``scipy.special`` 0.2 s; a model of naive Bayes and isotonic calibration
needs neither to score, so the plugin modules reach them through these wrappers.
"""

from __future__ import annotations


def expit(x, out=None):
    """``scipy.special.expit``, imported on first use: scipy.special takes 0.2 s to import and most
    calibrators (isotonic, binning, PAV-based) never need it."""
    from scipy.special import expit as _expit

    return _expit(x) if out is None else _expit(x, out=out)


def check_is_fitted(estimator, attributes) -> None:
    """scikit-learn's ``check_is_fitted(estimator, attributes)``, importing scikit-learn only to raise
    its ``NotFittedError`` (with its message) when an attribute is missing."""
    if all(hasattr(estimator, a) for a in attributes):
        return
    from sklearn.utils.validation import check_is_fitted as _check

    _check(estimator, attributes)
