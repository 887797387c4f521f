"""``rocch``: ROC convex hull calibration (Fawcett & Niculescu-Mizil 2007; Flach & Matsubara 2007)."""

from __future__ import annotations

import numpy as np

from calengine.metrics.roc import convex_hull_vertices, edge_probability
from calengine.reductions.pav import predict_step

from ._base import _add_end_groups, _BinaryCalibrator, _check_bool, _check_merged, _merge_blocks, _tie_groups


def _hull_sums(lo, hi, pos, neg):
    """ROC convex hull over segments given in increasing score order; edges in increasing order.

    The hull of the concatenated ROC curves of disjoint score ranges is the hull over the ranges'
    hull vertices, so merging hulls this way is exact (counts are sums of the segments' counts).
    """
    if lo.size <= 1:
        return lo, hi, pos, neg
    P, N = pos[::-1], neg[::-1]
    fp = np.concatenate(([0.0], np.cumsum(N)))
    tp = np.concatenate(([0.0], np.cumsum(P)))
    vert = convex_hull_vertices(fp, tp)
    starts, ends = vert[:-1], vert[1:]
    ep = np.add.reduceat(P, starts)
    en = np.add.reduceat(N, starts)
    ehi = hi[::-1][starts]
    elo = lo[::-1][ends - 1]
    return elo[::-1].copy(), ehi[::-1].copy(), ep[::-1].copy(), en[::-1].copy()


class ROCHullCalibrator(_BinaryCalibrator):
    """ROC convex hull calibration (Fawcett & Niculescu-Mizil 2007; Flach & Matsubara 2007, Def. 3).

    Builds the training ROC curve (tied scores form one segment), takes its upper convex hull, and
    gives every score under a hull edge that edge's positive fraction; with ``laplace=True`` the
    LexProb estimate ``(Δn⁺ + 1) / (Δn⁺ + Δn⁻ + 2)``.  Without Laplace this equals ``isotonic`` (PAV
    with ties pooled) exactly.  Unseen scores use the same right-continuous step rule as
    ``isotonic``: the edge whose lowest training score is the largest one at or below the score,
    clipped at both ends.

    Monotone unless ``laplace=True``: the correction pulls small edges towards 1/2 more than large
    ones, which can put a lower probability above a higher one.

    Fitted state (increasing score order): ``lo_``, ``hi_`` score range of each edge, ``pos_``,
    ``neg_`` weighted counts, ``values_`` probabilities.

    Reduction: one sorted round.  A score range's statistics are the edges of its own ROC hull;
    merging takes the hull over both ranges' edges, which is the hull of the concatenated curve
    (every vertex of the whole hull is a vertex of its range's hull), with exact edge counts.
    """

    name = "rocch"
    _state_fields = {
        "lo_": "array",
        "hi_": "array",
        "pos_": "array",
        "neg_": "array",
        "values_": "array",
        "laplace_": "bool",
        "score_kind_": "str",
    }

    def __init__(self, laplace: bool = False):
        self.laplace = laplace

    def _check_params(self):
        _check_bool("laplace", self.laplace)

    def _first_request(self, kind):
        return {"op": "hull", "kind": kind, "sorted": True}

    def _ps_hull(self, scores, y, sample_weight, request):
        summ, e0, e1, xs, wy, ws = _tie_groups(scores, y, sample_weight, request["kind"])
        lo, hi, pos, neg = _hull_sums(xs, xs, wy, ws - wy)
        e0 = np.array([e0[0], e0[1] - e0[0]])  # [pos, neg]
        e1 = np.array([e1[0], e1[1] - e1[0]])
        return {"op": "hull", **summ, "e0": e0, "e1": e1, "lo": lo, "hi": hi, "pos": pos, "neg": neg}

    def _merge_hull(self, a, b):
        return _merge_blocks(a, b, ("lo", "hi", "pos", "neg"), _hull_sums)

    def _step_hull(self, stats, request):
        _check_merged(stats, self._red["kind"])
        laplace = _check_bool("laplace", self.laplace)
        lo, hi, pos, neg = stats["lo"], stats["hi"], stats["pos"], stats["neg"]
        e0, e1 = stats["e0"], stats["e1"]
        head, tail = e0[0] + e0[1] > 0, e1[0] + e1[1] > 0
        if head or tail:
            (lo, hi), (pos, neg) = _add_end_groups(head, tail, e0, e1, (lo, hi), (pos, neg))
            lo, hi, pos, neg = _hull_sums(lo, hi, pos, neg)
        self._finish(lo_=lo, hi_=hi, pos_=pos, neg_=neg, values_=edge_probability(pos, neg, laplace),
                     laplace_=laplace)
        return None

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        return predict_step(self.lo_, self.values_, s)
