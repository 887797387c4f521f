"""``none``: the uncalibrated baseline every other method is compared with."""

from __future__ import annotations

import math

import numpy as np

from ._base import _BinaryCalibrator, _check_choice, _check_merged, _max_abs


class NoCalibration(_BinaryCalibrator):
    """The uncalibrated baseline: the learner's own probability, or a rescaled decision value.

    * ``score_kind="proba"``: the score itself, clipped to [0, 1] (``mode_ = "proba"``).
    * ``score_kind="decision"``: Zadrozny & Elkan's (2002, §2) linear rescaling into [0, 1], fitted on
      the calibration scores and clipped outside them.  ``rescale="minmax"`` (default) maps
      ``[min, max]`` of the calibration scores onto [0, 1]; ``rescale="symmetric"`` is the paper's
      ``(f + a) / 2a`` with ``a = max |f|``, which keeps a zero score at 1/2.  Constant calibration
      scores give 1/2 everywhere.  The chosen rule is recorded in ``mode_``.

    The labels are validated like every calibrator's (both classes required) but not used.
    Reduction: one unsorted round (validation, minimum and maximum), exact.
    """

    name = "none"
    _state_fields = {"mode_": "str", "lo_": "float", "hi_": "float", "score_kind_": "str"}

    def __init__(self, rescale: str = "minmax"):
        self.rescale = rescale

    def _check_params(self):
        _check_choice("rescale", self.rescale, ("minmax", "symmetric"))

    def _first_request(self, kind):
        return {"op": "summary", "kind": kind, "sorted": False}

    def _summary_extra(self, s, yi, w, request):
        return {
            "min_live": float(s.min()) if s.size else math.inf,
            "max_live": float(s.max()) if s.size else -math.inf,
            "max_abs": _max_abs(s),
        }

    def _step_summary(self, stats, request):
        kind = self._red["kind"]
        _check_merged(stats, kind)
        if kind == "proba":
            self._finish(mode_="proba", lo_=0.0, hi_=1.0)
        elif self.rescale == "minmax":
            self._finish(mode_="minmax", lo_=float(stats["min_live"]), hi_=float(stats["max_live"]))
        else:
            a = float(stats["max_abs"])
            self._finish(mode_="symmetric", lo_=-a, hi_=a)
        return None

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        if self.mode_ == "proba":
            return s
        if self.hi_ <= self.lo_:
            return np.full(s.shape, 0.5)
        return np.clip((s - self.lo_) / (self.hi_ - self.lo_), 0.0, 1.0)
