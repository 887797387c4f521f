"""``isotonic``: pool-adjacent-violators with ties pooled first (Zadrozny & Elkan 2002)."""

from __future__ import annotations

import numpy as np

from calengine.reductions.pav import pav_sums, predict_linear, predict_step

from ._base import _add_end_groups, _BinaryCalibrator, _check_choice, _check_merged, _merge_blocks, _tie_groups


class IsotonicCalibrator(_BinaryCalibrator):
    """Isotonic regression by pool-adjacent-violators (Zadrozny & Elkan 2002), always increasing.

    Tied scores are pooled before PAV (see :mod:`calengine.reductions.pav`), which makes the fit identical to
    ``rocch`` and to scikit-learn's ``IsotonicRegression`` at training scores, and invariant to any
    strictly increasing transformation of the scores.  ``interpolation`` decides unseen scores:

    * ``"step"`` (default, the papers' rule): the value of the last block whose lowest training
      score is at or below the score; clipped to the end blocks outside the training range.
    * ``"linear"`` (scikit-learn's ``out_of_bounds="clip"``): linear between consecutive distinct
      training scores, clipped outside.

    Fitted state: the blocks ``lo_``, ``hi_``, ``values_``, ``weights_`` (increasing score order)
    and the rule used, ``interpolation_``.

    Reduction: one sorted round.  A score range's statistics are its PAV blocks (exact sums of
    ``w·y`` and ``w``, lowest and highest score); merging two ranges runs PAV over their blocks,
    which is exact because the ranges are disjoint in score (PAV blocks of a contiguous stretch are
    contained in blocks of the whole fit).  Identical to :func:`calengine.reductions.pav.pav` for integer weights.
    """

    name = "isotonic"
    _state_fields = {
        "lo_": "array",
        "hi_": "array",
        "values_": "array",
        "weights_": "array",
        "interpolation_": "str",
        "score_kind_": "str",
    }

    def __init__(self, interpolation: str = "step"):
        self.interpolation = interpolation

    def _check_params(self):
        _check_choice("interpolation", self.interpolation, ("step", "linear"))

    def _first_request(self, kind):
        return {"op": "pav", "kind": kind, "sorted": True}

    def _ps_pav(self, scores, y, sample_weight, request):
        summ, e0, e1, xs, wy, ws = _tie_groups(scores, y, sample_weight, request["kind"])
        lo, hi, bwy, bw = pav_sums(xs, xs, wy, ws)
        return {"op": "pav", **summ, "e0": e0, "e1": e1, "lo": lo, "hi": hi, "wy": bwy, "w": bw}

    def _merge_pav(self, a, b):
        return _merge_blocks(a, b, ("lo", "hi", "wy", "w"), pav_sums)

    def _step_pav(self, stats, request):
        _check_merged(stats, self._red["kind"])
        lo, hi, wy, w = stats["lo"], stats["hi"], stats["wy"], stats["w"]
        e0, e1 = stats["e0"], stats["e1"]
        head, tail = e0[1] > 0, e1[1] > 0
        if head or tail:
            (lo, hi), (wy, w) = _add_end_groups(head, tail, e0, e1, (lo, hi), (wy, w))
            lo, hi, wy, w = pav_sums(lo, hi, wy, w)
        self._finish(lo_=lo, hi_=hi, values_=np.clip(wy / w, 0.0, 1.0), weights_=w,
                     interpolation_=self.interpolation)
        return None

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        if self.interpolation_ == "linear":
            return predict_linear(self.lo_, self.hi_, self.values_, s)
        return predict_step(self.lo_, self.values_, s)

    @classmethod
    def predict_grouped(cls, calibrators: list, scores, bounds) -> np.ndarray:
        """Many step fits in one pass (the engine's hook for segment-wise models): each row's block is
        the count of its own fit's block starts at or below its score, found by one lexicographic
        sort of every fit's block starts and every row, keyed by (fit, score, block starts first), so
        ties count as ``np.searchsorted(lo, s, side="right")`` counts them; the same bits as
        :meth:`predict`, fit by fit.  Linear interpolation, mixed score kinds, or a fit without
        blocks take the loop."""
        first = calibrators[0]
        if any(getattr(c, "interpolation_", None) != "step" or getattr(c, "score_kind_", None) != first.score_kind_
               or getattr(c, "lo_", np.empty(0)).size == 0 for c in calibrators):
            return super().predict_grouped(calibrators, scores, bounds)
        s = first._check_predict(scores)
        lengths = np.array([c.lo_.size for c in calibrators], dtype=np.intp)
        offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        n_knots = int(lengths.sum())
        group = np.repeat(np.arange(len(calibrators)), np.diff(np.asarray(bounds, dtype=np.intp)))
        keys = (np.concatenate((np.zeros(n_knots, np.int8), np.ones(s.size, np.int8))),
                np.concatenate([c.lo_ for c in calibrators] + [s]),
                np.concatenate((np.repeat(np.arange(len(calibrators)), lengths), group)))
        order = np.lexsort(keys)
        knots_before = np.cumsum(order < n_knots)
        position = np.empty(order.size, dtype=np.intp)
        position[order] = np.arange(order.size)
        count = knots_before[position[n_knots:]] - offsets[group]
        idx = np.clip(count - 1, 0, lengths[group] - 1)
        return np.concatenate([c.values_ for c in calibrators])[offsets[group] + idx]
