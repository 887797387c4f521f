"""ROC analysis shared by the ROC-hull calibrator, the metrics and the LexProb plugin.

Conventions (Flach & Matsubara 2007; Fawcett & Niculescu-Mizil 2007):

* A **segment** is a group of examples with the same score.  Segments are listed from the highest
  score to the lowest, so walking them traces the ROC curve from (0, 0) to (N⁻, N⁺); tied scores
  form one diagonal piece of the curve.  Counts are weighted (a weight of 2 counts an example
  twice); zero-weight examples are dropped.
* The **hull** is the upper convex hull of the cumulative points (FP, TP).  Collinear points are
  dropped, so consecutive hull edges have strictly decreasing slopes.  Every segment under a hull
  edge gets the edge's positive fraction ``Δn⁺ / (Δn⁺ + Δn⁻)``, or with Laplace's correction
  ``(Δn⁺ + 1) / (Δn⁺ + Δn⁻ + 2)`` (LexProb).  Without Laplace this equals isotonic regression with
  tied scores pooled (:mod:`calengine.reductions.pav`); with Laplace the edge probabilities need not be monotone.
* The Brier score splits exactly into calibration and refinement loss over any partition on which
  the predictions are constant (Flach & Matsubara, Theorem 1); no binning approximation is involved.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import DataError
from ..reductions.pav import check_binary_data, check_scores

__all__ = [
    "ROCSegments",
    "HullEdges",
    "roc_segments",
    "roc_points",
    "convex_hull_vertices",
    "edge_probability",
    "hull_edges",
    "hull_segment_probabilities",
    "auc",
    "brier_decomposition",
]


class ROCSegments(NamedTuple):
    """Distinct scores in decreasing order with the (weighted) positives and negatives at each."""

    scores: np.ndarray
    pos: np.ndarray
    neg: np.ndarray


class HullEdges(NamedTuple):
    """Edges of the ROC convex hull, from the highest scores to the lowest.

    ``hi``/``lo``: highest and lowest training score under the edge; ``pos``/``neg``: weighted counts
    under the edge; ``prob``: the edge's probability (with or without Laplace); ``n_segments``: how
    many ROC segments the edge covers.
    """

    hi: np.ndarray
    lo: np.ndarray
    pos: np.ndarray
    neg: np.ndarray
    prob: np.ndarray
    n_segments: np.ndarray


def roc_segments(scores, y, sample_weight=None) -> ROCSegments:
    """Group ``scores`` into ROC segments (distinct scores, decreasing) with weighted class counts.

    ``y`` in {0, 1}; ``sample_weight`` ``None`` or non-negative.  One class alone is allowed (the
    curve is then a straight line along one axis).  Raises :class:`calengine.errors.DataError` on
    invalid input.
    """
    s, yi, w = check_binary_data(scores, y, sample_weight, require_both_classes=False)
    keep = w > 0
    s, yi, w = s[keep], yi[keep], w[keep]
    order = np.argsort(-s, kind="stable")
    s, yi, w = s[order], yi[order], w[order]
    starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    pos = np.add.reduceat(w * yi, starts)
    tot = np.add.reduceat(w, starts)
    return ROCSegments(s[starts], pos, tot - pos)


def roc_points(segments: ROCSegments):
    """Cumulative ROC points ``(fp, tp)``, each of length ``len(segments) + 1``, starting at (0, 0)."""
    fp = np.concatenate(([0.0], np.cumsum(segments.neg)))
    tp = np.concatenate(([0.0], np.cumsum(segments.pos)))
    return fp, tp


def convex_hull_vertices(fp, tp) -> np.ndarray:
    """Indices of the upper-convex-hull vertices of the ROC points, first and last point included.

    ``fp`` and ``tp`` must be non-decreasing (as produced by :func:`roc_points`).  Points on a
    straight line between two vertices are not vertices, so consecutive edges have strictly
    decreasing slopes (monotone-chain scan, O(n)).
    """
    fp = np.asarray(fp, dtype=np.float64).tolist()
    tp = np.asarray(tp, dtype=np.float64).tolist()
    hull: list[int] = []
    for k in range(len(fp)):
        xk, yk = fp[k], tp[k]
        while len(hull) >= 2:
            i, j = hull[-2], hull[-1]
            # Cross product of (j - i) and (k - i): >= 0 means j is not strictly above the chord i→k.
            if (fp[j] - fp[i]) * (yk - tp[i]) - (tp[j] - tp[i]) * (xk - fp[i]) >= 0.0:
                hull.pop()
            else:
                break
        hull.append(k)
    return np.asarray(hull, dtype=np.intp)


def edge_probability(pos, neg, laplace: bool = False) -> np.ndarray:
    """Positive fraction ``pos / (pos + neg)``, or ``(pos + 1) / (pos + neg + 2)`` with Laplace."""
    pos = np.asarray(pos, dtype=np.float64)
    neg = np.asarray(neg, dtype=np.float64)
    if laplace:
        return (pos + 1.0) / (pos + neg + 2.0)
    return pos / (pos + neg)


def hull_edges(segments: ROCSegments, laplace: bool = False) -> HullEdges:
    """Coarsen ROC segments into the edges of their convex hull (see the module docstring)."""
    n = segments.scores.size
    if n == 0:
        empty = np.empty(0, dtype=np.float64)
        return HullEdges(empty, empty, empty, empty, empty, np.empty(0, dtype=np.intp))
    fp, tp = roc_points(segments)
    vert = convex_hull_vertices(fp, tp)
    starts = vert[:-1]
    ends = vert[1:]  # exclusive segment index
    pos = np.add.reduceat(segments.pos, starts)
    neg = np.add.reduceat(segments.neg, starts)
    return HullEdges(
        hi=segments.scores[starts],
        lo=segments.scores[ends - 1],
        pos=pos,
        neg=neg,
        prob=edge_probability(pos, neg, laplace),
        n_segments=ends - starts,
    )


def hull_segment_probabilities(segments: ROCSegments, laplace: bool = False) -> np.ndarray:
    """Probability of every ROC segment (same order as ``segments``): that of its hull edge."""
    edges = hull_edges(segments, laplace)
    return np.repeat(edges.prob, edges.n_segments)


def auc(scores, y, sample_weight=None) -> float:
    """Area under the ROC curve, a tied positive/negative pair counting one half.

    ``AUC = Σ_i n_i⁻ (n_i⁺ / 2 + Σ_{j before i} n_j⁺) / (N⁺ N⁻)`` over segments from high to low
    (weighted counts).  Raises :class:`calengine.errors.DataError` when one class is missing, because
    the AUC is then undefined.
    """
    seg = roc_segments(scores, y, sample_weight)
    n_pos = float(seg.pos.sum())
    n_neg = float(seg.neg.sum())
    if n_pos <= 0 or n_neg <= 0:
        raise DataError("AUC needs both classes but the data holds only one; evaluate on more data")
    before = np.cumsum(seg.pos) - seg.pos
    return float(np.sum(seg.neg * (0.5 * seg.pos + before)) / (n_pos * n_neg))


def brier_decomposition(p_hat, y, segments=None, sample_weight=None) -> tuple[float, float]:
    """Exact split of the Brier score into ``(calibration_loss, refinement_loss)``.

    Over a partition into segments on which ``p_hat`` is constant, with ``n_i`` examples of which a
    fraction ``p_i`` is positive (weighted):
    ``cal = Σ n_i (p̂_i − p_i)² / N`` and ``ref = Σ n_i p_i (1 − p_i) / N``; they add up to the Brier
    score.  ``segments`` (one key per example, e.g. the ranker's scores) defines the partition;
    ``None`` groups identical values of ``p_hat`` (the ROC curve the estimator itself induces, which
    makes Flach & Matsubara's Theorem 2 hold).  ``p_hat`` must lie in [0, 1] and be constant within
    each given segment up to ``1e-9`` (its weighted mean is used); otherwise
    :class:`calengine.errors.DataError`.
    """
    p = check_scores(p_hat, "p_hat")
    if p.size and (p.min() < 0.0 or p.max() > 1.0):
        raise DataError("p_hat must lie in [0, 1]; pass probabilities, not raw scores")
    _, yi, w = check_binary_data(p, y, sample_weight, require_both_classes=False)
    keys = p if segments is None else check_scores(segments, "segments")
    if keys.shape[0] != p.shape[0]:
        raise DataError(
            f"segments has {keys.shape[0]} entries but p_hat has {p.shape[0]}; pass one key per example"
        )
    keep = w > 0
    p, yi, w, keys = p[keep], yi[keep], w[keep], keys[keep]
    _, group = np.unique(keys, return_inverse=True)
    n_groups = int(group.max()) + 1
    n_i = np.bincount(group, weights=w, minlength=n_groups)
    pos_i = np.bincount(group, weights=w * yi, minlength=n_groups)
    phat_i = np.bincount(group, weights=w * p, minlength=n_groups) / n_i
    if segments is not None:
        lo = np.full(n_groups, np.inf)
        hi = np.full(n_groups, -np.inf)
        np.minimum.at(lo, group, p)
        np.maximum.at(hi, group, p)
        if np.any(hi - lo > 1e-9):
            raise DataError(
                "p_hat varies inside a segment; pass segments on which the prediction is constant "
                "(or segments=None to group identical predictions)"
            )
    total = float(n_i.sum())
    frac = pos_i / n_i
    cal = float(np.sum(n_i * (phat_i - frac) ** 2) / total)
    ref = float(np.sum(n_i * frac * (1.0 - frac)) / total)
    return cal, ref
