"""Split conformal classification on plain arrays: nonconformity scores, thresholds, sets, p-values.

Split conformal prediction (Vovk et al. 2005; Angelopoulos & Bates 2021, §1-2) turns any model's class
probabilities ``P`` into prediction *sets* that contain the true class of a new row with probability at
least ``1 - alpha``, assuming only that the calibration rows and the new row are exchangeable.  Every
score here is a **nonconformity** score ``V(x, c)`` (larger = the class fits the row worse); a
calibration row contributes ``V(x_i, y_i)``, and the set of a new row is ``{c : V(x, c) <= t}`` for the
threshold ``t`` below.  This module is the definition and the in-memory oracle; the scale-out version
(:mod:`calengine.reductions.selection`, :mod:`calengine.fit.conformal`) computes the same thresholds
bit for bit over any partitioning.

Scores (``P`` sorted per row by decreasing probability; ``p_c`` the probability of class ``c``)

* ``lac``  (Sadinle, Lei & Wasserman 2019): ``V = 1 - p_c``.
* ``aps``  (Romano, Sesia & Candès 2020): ``V = C_c - u * p_c`` with ``C_c = sum of p_j over the
  classes with p_j >= p_c`` (the cumulative sorted probability up to and including ``c``; classes of
  equal probability enter together, so a set never depends on the order of the classes) and ``u`` a
  uniform number of the row (0 for the non-randomised variant).  ``C_c - u * p_c`` is MAPIE's form
  (``cumsum - u * p``), kept so thresholds equal MAPIE's on the same rows.
* ``raps`` (Angelopoulos et al. 2021): the APS score plus ``lam * max(o_c - k_reg, 0)`` with
  ``o_c = #{j : p_j >= p_c}`` the 1-based rank of ``c`` (MAPIE's ``cutoff``).
* ``topk``: ``V = #{j : p_j > p_c}``, the number of classes ranked strictly above ``c`` (0 for the most
  probable class; MAPIE's 0-based position).  Its set is the ``t + 1`` most probable classes, ties
  included.

Threshold.  With ``n`` calibration scores, ``t`` is the ``k``-th smallest, ``k = ceil((n + 1)(1 - alpha))``
(:func:`order_rank`); when ``k > n`` the threshold is infinite (every set is every class) and
:func:`rows_needed` says how many rows a finite one needs.  ``alpha`` is read as the decimal the user
wrote (``0.1`` is 1/10 exactly, via ``repr``), so ``k`` never moves by one through float rounding of
``(n + 1)(1 - alpha)``.  Then ``P(Y in C(X)) >= 1 - alpha`` for exchangeable rows, and ``<= 1 - alpha +
1 / (n + 1)`` when the scores have no ties (the randomised APS/RAPS make ties improbable).

Weighted conformal (Tibshirani, Barber, Candès & Ramdas 2019, covariate shift): calibration row ``i`` has
weight ``w_i = w(x_i)`` (the likelihood ratio of test to calibration covariates) and a test row weight
``w``; the threshold is the ``1 - alpha`` quantile of ``sum_i w_i δ(V_i) + w δ(+inf)`` normalised,
i.e. the smallest ``V_i`` with ``sum_{V_j <= V_i} w_j >= (1 - alpha)(W + w)``, ``W = sum w_i``, and
infinite when ``(1 - alpha)(W + w) > W``.  With every weight 1 it is the unweighted threshold.

Mondrian (Vovk et al. 2005 §4.5): thresholds per group of calibration rows -- per true class (class
conditional coverage: a candidate class ``c`` is tested against class ``c``'s threshold) or per
segment of a row -- computed by the same rule within each group.

P-values: ``p_c(x) = (#{i : V_i >= V(x, c)} + 1) / (n + 1)`` (weighted: ``(sum_{V_i >= V} w_i + w) /
(W + w)``), the non-smoothed conformal p-value; ``{c : p_c > alpha}`` is exactly the set of the
threshold rule (crepes' ``predict_set`` uses ``p >= alpha``: it differs only when ``(n + 1) alpha`` is an
integer, where it adds the classes with ``p = alpha``).

Randomisation: a row's uniform ``u`` is a hash of the seed and the row itself (:func:`row_uniforms` of
:func:`row_hashes`: the model's encoded input row, the numbers the model reads), never a draw from a
stream shared with other rows, so a row's set depends on the row and the seed alone, whichever rows it
is scored with, on one thread or a cluster.  Rows with identical inputs share their ``u``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..errors import DataError, ParameterError

__all__ = [
    "SCORES", "RANDOMISABLE", "check_alpha", "check_score", "check_raps", "order_rank", "rows_needed",
    "class_scores", "true_scores", "row_hashes", "row_uniforms", "threshold", "weighted_threshold",
    "mondrian_thresholds", "prediction_sets", "p_values", "exact_fraction",
]

#: the nonconformity scores ``--score`` takes
SCORES = ("lac", "aps", "raps", "topk")
#: the scores with a randomised variant (a per-row uniform ``u``)
RANDOMISABLE = ("aps", "raps")
#: the stream a row's uniform is drawn from (apart from every other seeded stream of calengine)
_UNIFORM_STREAM = 0x434F4E46  # "CONF"


# ---------------------------------------------------------------------------------------------- checks


def check_alpha(alpha, name: str = "alpha") -> float:
    """``alpha`` as a float in (0, 1); one :class:`ParameterError` naming ``name`` otherwise."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)):
        raise ParameterError(f"{name} must be a number in (0, 1) (the miscoverage rate, e.g. 0.1), got {alpha!r}")
    value = float(alpha)
    if not (0.0 < value < 1.0):
        raise ParameterError(f"{name} must be in (0, 1) (the miscoverage rate, e.g. 0.1), got {alpha!r}")
    return value


def check_score(score, name: str = "score") -> str:
    if score not in SCORES:
        raise ParameterError(f"{name} must be one of {', '.join(SCORES)}, got {score!r}")
    return str(score)


def check_raps(lam, k_reg, lam_name: str = "raps_lambda", k_name: str = "raps_k_reg") -> tuple[float, int]:
    """RAPS' penalty ``lam`` (a finite number >= 0) and ``k_reg`` (an integer >= 0)."""
    if isinstance(lam, bool) or not isinstance(lam, (int, float, np.integer, np.floating)) \
            or not math.isfinite(float(lam)) or float(lam) < 0:
        raise ParameterError(f"{lam_name} must be a finite number >= 0 (the penalty per class beyond k_reg), got {lam!r}")
    if isinstance(k_reg, bool) or not isinstance(k_reg, (int, np.integer)) or int(k_reg) < 0:
        raise ParameterError(f"{k_name} must be an integer >= 0 (classes admitted without penalty), got {k_reg!r}")
    return float(lam), int(k_reg)


def exact_fraction(alpha: float) -> Fraction:
    """``alpha`` as the decimal it was written as: ``Fraction(repr(alpha))`` (0.1 -> 1/10), so the
    rank ``ceil((n + 1)(1 - alpha))`` is exact and never one off through float rounding."""
    return Fraction(repr(float(alpha)))


def order_rank(n: int, alpha: float) -> int:
    """``k = ceil((n + 1)(1 - alpha))``, exactly (see :func:`exact_fraction`); ``k > n`` means the
    threshold is infinite."""
    a = exact_fraction(alpha)
    return int(math.ceil((int(n) + 1) * (1 - a)))


def rows_needed(alpha: float) -> int:
    """The fewest calibration rows (or, weighted, total weight in rows of weight 1) whose threshold is
    finite at ``alpha``: the smallest ``n`` with ``ceil((n + 1)(1 - alpha)) <= n``, i.e. ``n >=
    (1 - alpha) / alpha``."""
    a = exact_fraction(alpha)
    return int(math.ceil((1 - a) / a))


# ---------------------------------------------------------------------------------------------- scores


def _sorted_rows(P: np.ndarray):
    """Per row: the classes in decreasing probability (ties by class index), the probabilities in that
    order, and for each sorted position the last position of its run of equal probabilities."""
    n, k = P.shape
    order = np.argsort(-P, axis=1, kind="stable")
    Ps = np.take_along_axis(P, order, axis=1)
    last = np.empty((n, k), dtype=np.intp)
    last[:, k - 1] = k - 1
    tied = Ps[:, 1:] == Ps[:, :-1]
    for i in range(k - 2, -1, -1):
        last[:, i] = np.where(tied[:, i], last[:, i + 1], i)
    return order, Ps, last


def _ranked(P: np.ndarray):
    """The cumulative sorted probability ``C`` and the rank ``o = #{j : p_j >= p_c}`` of each class, in
    class order.  Classes of equal probability share the cumulative sum and rank of the last of them."""
    n, k = P.shape
    order, Ps, last = _sorted_rows(P)
    cs = np.cumsum(Ps, axis=1)
    C = np.empty((n, k))
    o = np.empty((n, k), dtype=np.int64)
    rows = np.arange(n)[:, None]
    C[rows, order] = np.take_along_axis(cs, last, axis=1)
    o[rows, order] = last + 1
    return C, o


def _above(P: np.ndarray) -> np.ndarray:
    """``#{j : p_j > p_c}`` per row and class (float64, class order): the first sorted position of the
    class's run of equal probabilities."""
    n, k = P.shape
    order, Ps, _ = _sorted_rows(P)
    first = np.empty((n, k), dtype=np.intp)
    first[:, 0] = 0
    tied = Ps[:, 1:] == Ps[:, :-1]
    for i in range(1, k):
        first[:, i] = np.where(tied[:, i - 1], first[:, i - 1], i)
    out = np.empty((n, k))
    out[np.arange(n)[:, None], order] = first
    return out


def _check_probabilities(P) -> np.ndarray:
    P = np.asarray(P, dtype=np.float64)
    if P.ndim != 2 or P.shape[1] < 2:
        raise DataError(f"class probabilities must be an (n, k) array with k >= 2 classes, got shape {P.shape}")
    if P.size and not np.all(np.isfinite(P)):
        raise DataError("class probabilities hold NaN or infinity; conformal scores need finite probabilities")
    return P


def class_scores(P, score: str, u=None, lam: float = 0.0, k_reg: int = 0) -> np.ndarray:
    """``V(x, c)`` for every row and class, shape (n, k) (module docstring).  ``u``: the rows' uniforms
    for the randomised ``aps``/``raps`` (None: 0, the non-randomised variant); ignored by ``lac`` and
    ``topk``."""
    P = _check_probabilities(P)
    score = check_score(score)
    if score == "lac":
        return 1.0 - P
    if score == "topk":
        return _above(P)  # strictly greater: ties share the best rank
    C, o = _ranked(P)
    V = C if u is None else C - np.asarray(u, dtype=np.float64).reshape(-1, 1) * P
    if score == "raps":
        V = V + np.maximum(lam * (o - int(k_reg)), 0.0)
    return V


def true_scores(P, y, score: str, u=None, lam: float = 0.0, k_reg: int = 0) -> np.ndarray:
    """``V(x_i, y_i)`` of calibration rows (``y``: class indices): the same numbers as
    :func:`class_scores` at the true class, bit for bit."""
    y = np.asarray(y, dtype=np.intp)
    if check_score(score) == "lac":  # 1 - p_y: the one entry of class_scores a row needs, not its k
        P = _check_probabilities(P)
        return 1.0 - P[np.arange(P.shape[0]), y]
    V = class_scores(P, score, u, lam, k_reg)
    return V[np.arange(V.shape[0]), y]


# ---------------------------------------------------------------------------------------------- rows


_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_NAN_BITS = np.uint64(0x7FF8000000000000)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 arrays (wrapping arithmetic): a bijection that spreads every bit."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))


def _canonical_bits(v: np.ndarray) -> np.ndarray:
    """The bits of float64 values with every NaN one pattern and -0.0 as 0.0 (equal numbers, equal bits)."""
    v = np.asarray(v, dtype=np.float64)
    bits = (v + 0.0).view(np.uint64)  # -0.0 + 0.0 == +0.0
    return np.where(np.isnan(v), _NAN_BITS, bits)


def row_hashes(X) -> np.ndarray:
    """A 64-bit hash of each row of the encoded feature matrix ``X`` (dense, or scipy sparse): the
    identity of a row for its randomisation.  A dense row hashes its values in column order; a sparse
    row the set of its (column, value) pairs, so zeros stored explicitly or not hash alike.  The same
    numbers give the same hash in any batch, process or machine."""
    import scipy.sparse as sp

    if sp.issparse(X):
        X = sp.csr_matrix(X)
        X.sum_duplicates()
        keep = X.data != 0
        cols = X.indices[keep].astype(np.uint64)
        vals = _canonical_bits(X.data[keep])
        rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))[keep]
        terms = _mix(_mix(cols) ^ vals)
        h = np.zeros(X.shape[0], dtype=np.uint64)
        with np.errstate(over="ignore"):
            np.add.at(h, rows, terms)  # wrapping sum: the pairs as a set
        return _mix(h ^ np.uint64(X.shape[1]))
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise DataError(f"features must be a 2-D array, got shape {X.shape}")
    h = np.full(X.shape[0], np.uint64(X.shape[1]), dtype=np.uint64)
    for j in range(X.shape[1]):
        h = _mix(h ^ _canonical_bits(X[:, j]))
    return h


def row_uniforms(hashes: np.ndarray, seed: int) -> np.ndarray:
    """A uniform number in [0, 1) per row from its :func:`row_hashes` value and ``seed`` (53 bits)."""
    s = _mix(np.asarray([(int(seed) & 0xFFFFFFFFFFFFFFFF) ^ _UNIFORM_STREAM], dtype=np.uint64))[0]
    x = _mix(np.asarray(hashes, dtype=np.uint64) ^ s)
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


# ---------------------------------------------------------------------------------------------- thresholds


def _finite_scores(scores, where: str = "calibration scores") -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if s.size and not np.all(np.isfinite(s)):
        raise DataError(f"{where} hold NaN or infinity; conformal thresholds need finite scores")
    return s


def threshold(scores, alpha: float) -> float:
    """The split-conformal threshold of calibration ``scores``: the ``ceil((n + 1)(1 - alpha))``-th
    smallest, ``inf`` when that exceeds ``n`` (module docstring).  The in-memory oracle of the reduction."""
    alpha = check_alpha(alpha)
    s = np.sort(_finite_scores(scores))
    k = order_rank(s.size, alpha)
    return float(s[k - 1]) if k <= s.size else math.inf


def _check_weights(weights, n: int, name: str = "weights") -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if w.shape != (n,):
        raise ParameterError(f"{name} must hold one weight per calibration score ({n}), got {w.shape[0]}")
    if not np.all(np.isfinite(w)) or (w.size and w.min() < 0):
        raise ParameterError(f"{name} must be finite and >= 0 (a likelihood ratio per row)")
    return w


def weighted_threshold(scores, weights, alpha: float, test_weight: float) -> float:
    """Tibshirani et al.'s weighted threshold for a test row of weight ``test_weight``: the smallest
    score ``V_i`` with ``sum_{V_j <= V_i} w_j >= (1 - alpha)(W + test_weight)``; ``inf`` when none is.
    Sums are exact (Python fractions of the float weights), the oracle of the reduction's fixed-point sums."""
    alpha = check_alpha(alpha)
    s = _finite_scores(scores)
    w = _check_weights(weights, s.size)
    a = exact_fraction(alpha)
    order = np.argsort(s, kind="stable")
    s, w = s[order], w[order]
    total = sum(Fraction(float(x)) for x in w)
    need = (1 - a) * (total + Fraction(float(test_weight)))
    acc = Fraction(0)
    i = 0
    while i < s.size:
        j = i
        while j < s.size and s[j] == s[i]:
            acc += Fraction(float(w[j]))
            j += 1
        if acc >= need and acc > 0:
            return float(s[i])
        i = j
    return math.inf


def mondrian_thresholds(scores, groups, alpha: float, n_groups: int | None = None) -> np.ndarray:
    """The threshold of each group ``0 .. n_groups - 1`` from the scores of its rows (``inf`` for a group
    with too few rows, including none)."""
    s = _finite_scores(scores)
    g = np.asarray(groups, dtype=np.intp).reshape(-1)
    n_groups = int(g.max(initial=-1)) + 1 if n_groups is None else int(n_groups)
    return np.array([threshold(s[g == j], alpha) for j in range(n_groups)], dtype=np.float64)


def prediction_sets(V, thresholds) -> np.ndarray:
    """``V(x, c) <= t`` as a boolean (n, k) array; ``thresholds`` a scalar, one per row (n,), one per class
    (k,) for class-conditional thresholds given as ``(1, k)``, or a full (n, k) array."""
    V = np.asarray(V, dtype=np.float64)
    t = np.asarray(thresholds, dtype=np.float64)
    if t.ndim == 1 and t.shape[0] == V.shape[0]:
        t = t[:, None]
    return V <= t


def p_values(cal_scores, test_scores, weights=None, test_weight=None) -> np.ndarray:
    """Conformal p-values of ``test_scores`` (any shape) against ``cal_scores`` (module docstring): exact,
    ``(#{V_i >= s} + 1) / (n + 1)``, or weighted ``(sum_{V_i >= s} w_i + w) / (W + w)`` with ``test_weight``
    ``w`` (a scalar or one per test score)."""
    cal = np.sort(_finite_scores(cal_scores))
    s = np.asarray(test_scores, dtype=np.float64)
    if weights is None:
        at_least = cal.size - np.searchsorted(cal, s, side="left")
        return (at_least + 1.0) / (cal.size + 1.0)
    w = _check_weights(weights, cal.size)
    order = np.argsort(_finite_scores(cal_scores), kind="stable")
    w = w[order]
    tail = np.concatenate((np.cumsum(w[::-1])[::-1], [0.0]))  # tail[i] = sum of w over sorted[i:]
    W = float(tail[0])
    wt = np.broadcast_to(np.asarray(1.0 if test_weight is None else test_weight, dtype=np.float64), s.shape)
    return (tail[np.searchsorted(cal, s, side="left")] + wt) / (W + wt)
