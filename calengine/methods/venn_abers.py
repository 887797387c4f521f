"""Venn–ABERS predictors: the pair (p0, p1) of two isotonic fits per test score, computed fast.

Vovk & Petej (2014) and Vovk, Petej & Fedorova (2015, "Large-scale probabilistic predictors with and
without guarantees of validity") define the inductive Venn–ABERS predictor (IVAP): for a test score
``s`` and a calibration set ``C``,

* ``p0(s)`` = the isotonic (PAV) fit of ``C ∪ {(s, 0)}`` evaluated at ``s``,
* ``p1(s)`` = the isotonic fit of ``C ∪ {(s, 1)}`` evaluated at ``s``,

and one of the two is a perfectly calibrated probability (the *validity* guarantee, for exchangeable
data), so ``[p0, p1]`` is the interval that carries the guarantee.  A single probability, minimising
the worst-case log loss over the two, is ``p = p1 / (1 − p0 + p1)``.

The brute-force definition costs two PAV fits per test score.  Here the values are precomputed for
every position a test score can take among the ``k`` distinct calibration scores: tied with the j-th
(its row joins that group, ties pooled as everywhere in calengine) or strictly inside the j-th gap
(``k + 1`` gaps, the two ends included).  Prediction is then one binary search per test score.

Precomputation (the same idea as the paper's Algorithms 1–3, in PAV form rather than on the
cumulative sum diagram): PAV blocks of a contiguous stretch of the ordered points are unions of
blocks of the whole fit, so the fit with the test point is the test point's group merged with some
trailing blocks of the PAV of the points to its left and some leading blocks of the PAV of the points
to its right; merging adjacent violators in any order yields the unique isotonic fit.  The prefix and
suffix PAVs for *every* split point come from one left-to-right and one right-to-left stack pass whose
blocks are immutable linked nodes (a persistent stack), so each query starts from its own prefix and
suffix state and merges only the few blocks its test point violates.  Sorting is O(n log n); the
passes are O(k) plus, per query, the number of blocks merged (small in practice: a test label only
pools the blocks it disagrees with; measured in README.md).

Weights: calibration rows may carry frequency weights (a weight of 2 = the row twice); the test row
always has weight 1, as in the definition.  Validity is a property of exchangeable unweighted data.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "venn_abers_tables",
    "venn_abers_pairs",
    "merge_pair",
    "cvap_pairs",
]


def _prefix_stack(w: list, wy: list):
    """Persistent left-to-right PAV stack: ``head[j]`` = top block after groups ``0..j``.

    Nodes are (weight, weighted positives, previous node); ``-1`` is the empty stack.
    """
    nw, nwy, prev = [], [], []
    head = [-1] * len(w)
    top = -1
    for j in range(len(w)):
        cw, cwy = w[j], wy[j]
        while top != -1 and nwy[top] * cw >= cwy * nw[top]:
            cw += nw[top]
            cwy += nwy[top]
            top = prev[top]
        nw.append(cw)
        nwy.append(cwy)
        prev.append(top)
        top = len(nw) - 1
        head[j] = top
    return nw, nwy, prev, head


def _suffix_stack(w: list, wy: list):
    """Persistent right-to-left PAV stack: ``head[j]`` = first block of the fit of groups ``j..k-1``."""
    nw, nwy, nxt = [], [], []
    k = len(w)
    head = [-1] * (k + 1)
    top = -1
    for j in range(k - 1, -1, -1):
        cw, cwy = w[j], wy[j]
        while top != -1 and nwy[top] * cw <= cwy * nw[top]:
            cw += nw[top]
            cwy += nwy[top]
            top = nxt[top]
        nw.append(cw)
        nwy.append(cwy)
        nxt.append(top)
        top = len(nw) - 1
        head[j] = top
    return nw, nwy, nxt, head


def venn_abers_tables(w, wy):
    """``(tie_p0, tie_p1, gap_p0, gap_p1)`` for tie groups of weight ``w`` and weighted positives ``wy``.

    The groups are the distinct calibration scores in increasing order (see
    :func:`calengine.reductions.pav.pool_ties`).  ``tie_*[j]`` is the value for a test score equal to
    the j-th distinct score, ``gap_*[j]`` for a test score strictly between the (j−1)-th and the j-th
    (``gap_*[0]`` below all, ``gap_*[k]`` above all).
    """
    w = [float(v) for v in np.asarray(w, dtype=np.float64)]
    wy = [float(v) for v in np.asarray(wy, dtype=np.float64)]
    k = len(w)
    lw, lwy, lprev, lhead = _prefix_stack(w, wy)
    rw, rwy, rnext, rhead = _suffix_stack(w, wy)
    rhead[k] = -1

    def value(cw: float, cwy: float, pl: int, pr: int) -> float:
        while True:
            if pl != -1 and lwy[pl] * cw >= cwy * lw[pl]:
                cw += lw[pl]
                cwy += lwy[pl]
                pl = lprev[pl]
            elif pr != -1 and rwy[pr] * cw <= cwy * rw[pr]:
                cw += rw[pr]
                cwy += rwy[pr]
                pr = rnext[pr]
            else:
                return cwy / cw

    tie = np.empty((2, k))
    gap = np.empty((2, k + 1))
    for label in (0, 1):
        for j in range(k):
            pl = lhead[j - 1] if j > 0 else -1
            tie[label, j] = value(w[j] + 1.0, wy[j] + label, pl, rhead[j + 1])
        for j in range(k + 1):
            pl = lhead[j - 1] if j > 0 else -1
            gap[label, j] = value(1.0, float(label), pl, rhead[j])
    np.clip(tie, 0.0, 1.0, out=tie)
    np.clip(gap, 0.0, 1.0, out=gap)
    return tie[0], tie[1], gap[0], gap[1]


def venn_abers_pairs(xs, tie_p0, tie_p1, gap_p0, gap_p1, scores):
    """``(p0, p1)`` per test score from the precomputed tables: one binary search per score."""
    xs = np.asarray(xs, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    j = np.searchsorted(xs, s, side="left")
    jc = np.minimum(j, xs.size - 1)
    tied = (j < xs.size) & (xs[jc] == s)
    p0 = np.where(tied, np.asarray(tie_p0)[jc], np.asarray(gap_p0)[j])
    p1 = np.where(tied, np.asarray(tie_p1)[jc], np.asarray(gap_p1)[j])
    return p0, p1


def merge_pair(p0, p1):
    """The single probability ``p1 / (1 − p0 + p1)`` (minimax log loss over the pair; Vovk et al. 2015)."""
    p0 = np.asarray(p0, dtype=np.float64)
    p1 = np.asarray(p1, dtype=np.float64)
    den = 1.0 - p0 + p1
    return np.clip(np.divide(p1, den, out=np.full_like(p1, 0.5), where=den > 0), 0.0, 1.0)


def cvap_pairs(p0s, p1s):
    """Cross Venn–ABERS (CVAP): combine K IVAP pairs, arrays of shape (K, n), by geometric means.

    Vovk, Petej & Fedorova (2015) merge the K folds' pairs as ``p = GM(p1) / (GM(1 − p0) + GM(p1))``.
    That is :func:`merge_pair` of the pair ``(1 − GM(1 − p0), GM(p1))``, which is returned (the
    merged ``p`` always lies between its two values) so that the interval and the probability of a
    CVAP come from one formula.  The two values are returned sorted (``low <= high``): geometric
    means can, rarely, cross for narrow, very different folds' intervals.
    """
    p0s = np.asarray(p0s, dtype=np.float64)
    p1s = np.asarray(p1s, dtype=np.float64)
    with np.errstate(divide="ignore"):
        gm1 = np.exp(np.mean(np.log(p1s), axis=0))
        gm0 = np.exp(np.mean(np.log1p(-p0s), axis=0))
    a, b = 1.0 - gm0, gm1
    return np.minimum(a, b), np.maximum(a, b), merge_pair(a, b)
