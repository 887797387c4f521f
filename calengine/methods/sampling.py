"""Probabilities of a model trained on class-downsampled data, put back on the population's scale.

Teams with tables of 10^8 rows rarely train (or calibrate) on all of them: the majority class -- the
negatives of click or fraud data -- is kept with probability ``r`` and the positives all.  A model
calibrated on such a sample estimates p' = P(y = 1 | x, kept), not P(y = 1 | x).  By Bayes' rule with
the sampling independent of x given the class (Elkan 2001, "The foundations of cost-sensitive
learning", Theorem 2; the standard correction for negative-downsampled click data, He et al. 2014),

    P(y = 1 | x) = p' / (p' + (1 - p') / r),

and with every class c kept at its own rate r_c (a class-prior form for k classes)

    P(y = c | x) = (p'_c / r_c) / sum_j (p'_j / r_j).

Rates above 1 (a class *up*-sampled, each row repeated r times on average) fit the same formula.
The correction is applied after calibration, to the model's class probabilities, so it composes with
every method; it is monotone in p' for two classes, so Venn-ABERS and Probing intervals map end to end.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import DataError, ParameterError

#: the range of a sampling rate: the share of a table's rows kept (or, above 1, repeated) cannot be
#: finer than one row in 10**18 (a table holds fewer than 2**63 rows), and within it the correction's
#: ``p / r`` and its sums over classes stay finite (``1 / MIN_RATE`` times any class count is far from
#: float64's 1.8e308).  A rate beyond it (``--negative-sampling 1e-320``) made every corrected
#: probability infinite: the fit published a model that ``calengine score`` then refused.
MIN_RATE, MAX_RATE = 1e-18, 1e18


def correct(P: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """``(n, k)`` class probabilities of the population from those of the sample (module docstring).

    A row whose corrected weights all vanish (probability 0 on every class) keeps its probabilities."""
    P = np.asarray(P, dtype=np.float64)
    Q = P / np.asarray(rates, dtype=np.float64)[None, :]
    total = Q.sum(axis=1, keepdims=True)
    ok = total[:, 0] > 0
    out = P.copy()
    out[ok] = Q[ok] / total[ok]
    return out


def correct_positive(p: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """The corrected probability of class index 1 of a two-class model, for a vector ``p`` of
    probabilities of that class (Elkan's formula with r = rates[0] / rates[1])."""
    p = np.asarray(p, dtype=np.float64)
    return correct(np.column_stack([1.0 - p, p]), rates)[:, 1]


def sampling_rates(classes: list, negative_sampling: float | None = None,
                   class_sampling: dict | None = None) -> np.ndarray | None:
    """The rate at which each class (in model order) was kept, or None when nothing was sampled.

    ``negative_sampling``: two classes only, the share of the negative class (index 0) kept, in (0, 1]
    (the positive class kept whole).  ``class_sampling``: ``{class: rate}`` for any number of classes,
    classes matched by their text (``"1"`` names the class ``1``), unnamed classes at rate 1, rates
    positive and finite.  Giving both, or a rate outside its range, is a one-line
    :class:`ParameterError`.
    """
    if negative_sampling is None and not class_sampling:
        return None
    if negative_sampling is not None and class_sampling:
        raise ParameterError("give negative_sampling (two classes) or class_sampling, not both",
                             parameter=("negative_sampling", "class_sampling"))
    k = len(classes)
    if negative_sampling is not None:
        r = rate(negative_sampling, "negative_sampling")
        if not r <= 1.0:
            raise ParameterError(
                f"negative_sampling is the share of negative rows kept, in (0, 1]; got {negative_sampling!r}"
                " (for one negative in ten, write 0.1)", parameter="negative_sampling"
            )
        if k != 2:
            raise ParameterError(
                f"negative_sampling applies to two-class targets and this one has {k} classes; give each"
                " class's rate with class_sampling CLASS=RATE,...", parameter=("negative_sampling", "class_sampling")
            )
        return np.array([r, 1.0])
    names = {str(c): i for i, c in enumerate(classes)}
    rates = np.ones(k)
    seen: set[str] = set()
    for key, value in dict(class_sampling).items():
        if str(key) in seen:  # {"1": 0.5, 1: 0.3}: two rates for one class, as --classes 1,1 is refused
            raise ParameterError(f"class_sampling names class {str(key)!r} twice; give each class one rate",
                                 parameter="class_sampling")
        seen.add(str(key))
        if str(key) not in names:
            raise ParameterError(
                f"class_sampling names class {str(key)!r}, which is not a class of the target"
                f" ({', '.join(map(str, classes))})", parameter="class_sampling"
            )
        rates[names[str(key)]] = rate(value, "class_sampling", key)
    return rates


def rate(value: Any, parameter: str, key: Any = None) -> float:
    """``value`` as a sampling rate of ``parameter`` (its class ``key`` for ``class_sampling``)."""
    what = parameter if key is None else f"{parameter} {key}"
    try:
        r = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{what} must be a number (a sampling rate), got {value!r}", parameter=parameter) from None
    if isinstance(value, bool) or not np.isfinite(r) or r <= 0:
        raise ParameterError(f"{what} must be a positive, finite sampling rate, got {value!r}", parameter=parameter)
    if not MIN_RATE <= r <= MAX_RATE:
        raise ParameterError(f"{what} must be a sampling rate from {MIN_RATE:g} to {MAX_RATE:g} (a share of the rows"
                             f" kept, e.g. 0.01 for one in a hundred), got {value!r}", parameter=parameter)
    return r


def parse_class_sampling(text: str | None) -> dict[str, float] | None:
    """``"a=0.1,b=0.5"`` -> ``{"a": 0.1, "b": 0.5}`` (the text of ``--class-sampling``)."""
    if text is None:
        return None
    out: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ParameterError(f"class_sampling expects CLASS=RATE,..., got '{text}' (e.g. 0=0.1,1=1)",
                                 parameter="class_sampling")
        if key.strip() in out:  # a=0.5,a=0.3: the last rate would silently win
            raise ParameterError(f"class_sampling names class '{key.strip()}' twice; give each class one rate",
                                 parameter="class_sampling")
        out[key.strip()] = rate(value.strip(), "class_sampling", key.strip())
    return out


def sampling_json(rates: np.ndarray, negative_sampling: float | None) -> dict[str, Any]:
    """What a manifest records of the correction (``"sampling"``)."""
    return {"rates": [float(r) for r in rates],
            "negative_sampling": None if negative_sampling is None else float(negative_sampling)}


def check_sampling_json(d: Any, k: int) -> np.ndarray:
    """The rates of a manifest's ``sampling`` record for ``k`` classes; DataError when malformed."""
    if not isinstance(d, dict) or not isinstance(d.get("rates"), list):
        raise DataError("'sampling' is not an object with a list of rates")
    rates = d["rates"]
    if len(rates) != k or not all(isinstance(r, (int, float)) and not isinstance(r, bool) for r in rates):
        raise DataError(f"'sampling' must give {k} rates, one per class")
    arr = np.asarray(rates, dtype=np.float64)
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise DataError("'sampling' rates must be positive and finite")
    return arr
