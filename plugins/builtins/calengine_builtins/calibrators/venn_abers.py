"""``venn_abers``: inductive Venn–ABERS predictors (Vovk & Petej 2014; Vovk, Petej & Fedorova 2015)."""

from __future__ import annotations

from typing import Any

import numpy as np

from calengine.errors import ModelFormatError

from ._base import _add_end_groups, _BinaryCalibrator, _check_merged, _tie_groups


class VennAbersCalibrator(_BinaryCalibrator):
    """Inductive Venn–ABERS (Vovk & Petej 2014; Vovk, Petej & Fedorova 2015): two isotonic fits per score.

    For a test score ``s``, ``p0`` is the isotonic fit of the calibration data plus ``(s, 0)`` at
    ``s`` and ``p1`` the same with ``(s, 1)``; ``predict`` returns the merged probability
    ``p1 / (1 − p0 + p1)`` and :meth:`predict_interval` the pair ``(p0, p1)``, whose width shrinks
    as the calibration data grow and which carries the method's validity guarantee.  All values are
    precomputed at fit time for every position of a test score among the distinct calibration scores
    (:mod:`calengine.methods.venn_abers`), so prediction is one binary search per score.  Ties are
    pooled as in ``isotonic``; weights are frequency weights of the calibration rows (the test row
    has weight 1), so a weight of 2 gives the same fit as the row twice.

    In a cross-validated ``ensemble`` model, the k members' pairs are combined by the paper's cross
    Venn–ABERS (CVAP) formula rather than by averaging (see :class:`calengine.model.calibrated.CalibratedModel`).

    Fitted state: ``xs_`` (distinct calibration scores), ``tie_p0_``/``tie_p1_`` (a test score equal
    to ``xs_[j]``), ``gap_p0_``/``gap_p1_`` (strictly between ``xs_[j-1]`` and ``xs_[j]``; index 0 below
    all, ``k`` above all).

    Reduction: one sorted round.  A score range's statistics are its tie groups (exact sums of
    ``w·y`` and ``w``); ranges concatenate, and the tables are computed from all groups at the end.
    """

    name = "venn_abers"
    _state_fields = {
        "xs_": "array",
        "tie_p0_": "array",
        "tie_p1_": "array",
        "gap_p0_": "array",
        "gap_p1_": "array",
        "score_kind_": "str",
    }

    def _first_request(self, kind):
        return {"op": "groups", "kind": kind, "sorted": True}

    def _ps_groups(self, scores, y, sample_weight, request):
        summ, e0, e1, xs, wy, ws = _tie_groups(scores, y, sample_weight, request["kind"])
        return {"op": "groups", **summ, "e0": e0, "e1": e1, "cat_xs": xs, "cat_wy": wy, "cat_w": ws}

    def _step_groups(self, stats, request):
        from calengine.methods.venn_abers import venn_abers_tables

        _check_merged(stats, self._red["kind"])
        xs, wy, w = stats["cat_xs"], stats["cat_wy"], stats["cat_w"]
        e0, e1 = stats["e0"], stats["e1"]
        head, tail = e0[1] > 0, e1[1] > 0
        if head or tail:
            (xs,), (wy, w) = _add_end_groups(head, tail, e0, e1, (xs,), (wy, w))
        t0, t1, g0, g1 = venn_abers_tables(w, wy)
        self._finish(xs_=np.asarray(xs, dtype=np.float64), tie_p0_=t0, tie_p1_=t1, gap_p0_=g0, gap_p1_=g1)
        return None

    def from_state(self, state: dict[str, Any]) -> "VennAbersCalibrator":
        """Restore the tables, refusing ones that do not fit together (a damaged or tampered model)."""
        super().from_state(state)
        k = self.xs_.size
        ok = (
            k > 0 and self.tie_p0_.size == k and self.tie_p1_.size == k
            and self.gap_p0_.size == k + 1 and self.gap_p1_.size == k + 1
            and bool(np.all(np.diff(self.xs_) > 0))
            and all(np.all((a >= 0.0) & (a <= 1.0)) for a in (self.tie_p0_, self.tie_p1_, self.gap_p0_, self.gap_p1_))
        )
        if not ok:
            raise ModelFormatError(
                "calibrator 'venn_abers' state is inconsistent (table lengths, score order or values outside"
                " [0, 1]); the model is damaged, refit it"
            )
        return self

    def predict_interval(self, scores) -> tuple[np.ndarray, np.ndarray]:
        """``(p0, p1)`` per score: the two isotonic fits with the score labelled 0 and 1 (``p0 <= p1``)."""
        from calengine.methods.venn_abers import venn_abers_pairs

        s = self._check_predict(scores)
        return venn_abers_pairs(self.xs_, self.tie_p0_, self.tie_p1_, self.gap_p0_, self.gap_p1_, s)

    def predict(self, scores) -> np.ndarray:
        from calengine.methods.venn_abers import merge_pair

        return merge_pair(*self.predict_interval(scores))
