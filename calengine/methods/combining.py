"""Fixed rules for combining the calibrated posteriors of several classifiers (Duin & Tax, §4).

Each base classifier is calibrated on its own, so its outputs are comparable class posteriors; the
rule then works class by class over the classifiers and the result is renormalised so each row sums
to 1.  ``product`` is computed in log space (many small posteriors would underflow); a row where every
combined value is 0 becomes uniform.
"""

from __future__ import annotations

import numpy as np

from ..errors import ParameterError

RULES = ("min", "max", "median", "mean", "product")


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise ParameterError(f"unknown combining rule '{rule}'; choose one of {', '.join(RULES)}")
    return rule


def combine_posteriors(posteriors: list[np.ndarray], rule: str) -> np.ndarray:
    """Combine ``(n, k)`` posteriors of several classifiers by ``rule``; rows of the result sum to 1."""
    check_rule(rule)
    stack = np.stack([np.asarray(p, dtype=np.float64) for p in posteriors])
    if rule == "product":
        with np.errstate(divide="ignore"):
            logs = np.log(stack).sum(axis=0)
        top = logs.max(axis=1, keepdims=True)
        safe = np.where(np.isfinite(top), top, 0.0)
        combined = np.exp(logs - safe)
    else:
        combined = {"min": np.min, "max": np.max, "median": np.median, "mean": np.mean}[rule](stack, axis=0)
    total = combined.sum(axis=1, keepdims=True)
    k = combined.shape[1]
    return np.where(total > 0, combined / np.where(total > 0, total, 1.0), 1.0 / k)
