"""What every built-in calibrator shares (private): validation, the exact state round-trip, and the
plumbing of the reduction protocol documented on :class:`calengine.base.Calibrator`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from calengine.base import SCORE_KINDS, Calibrator
from calengine.errors import DataError, ModelFormatError, ParameterError
from calengine.reductions.pav import check_binary_data, check_scores, pool_ties
from calengine_builtins.deferred import check_is_fitted

#: scores given as probabilities are clipped to [EPS, 1 - EPS] before a logarithm or logit.
EPS = 1e-12
#: tolerance for probability scores that leave [0, 1] by rounding only.
_PROBA_TOL = 1e-9


class _BinaryCalibrator(Calibrator):
    """Common validation and exact state round-trip for the built-in calibrators.

    ``_state_fields`` maps each fitted attribute to its kind (``"array"``, ``"float"``, ``"int"``,
    ``"bool"``, ``"str"``); :meth:`to_state` exports exactly those, and :meth:`from_state` coerces
    what the artifact reader hands back (0-d arrays, JSON numbers) to the same types.
    """

    _state_fields: ClassVar[dict[str, str]] = {}

    def to_state(self) -> dict[str, Any]:
        check_is_fitted(self, list(self._state_fields))
        out: dict[str, Any] = {}
        for key, kind in self._state_fields.items():
            val = getattr(self, key)
            out[key] = np.array(val, dtype=np.float64) if kind == "array" else val
        return out

    def from_state(self, state: dict[str, Any]) -> "_BinaryCalibrator":
        for key, kind in self._state_fields.items():
            if key not in state:
                raise ModelFormatError(
                    f"calibrator '{self.name}' state lacks '{key}'; the model is damaged or from "
                    "another calengine version, refit it"
                )
            val = state[key]
            if kind == "array":
                val = np.array(val, dtype=np.float64).reshape(-1)
            elif kind == "float":
                val = float(np.asarray(val))
            elif kind == "int":
                val = int(np.asarray(val))
            elif kind == "bool":
                val = bool(np.asarray(val))
            else:
                val = str(np.asarray(val)) if isinstance(val, np.ndarray) else str(val)
            setattr(self, key, val)
        return self

    def _check_fit(self, scores, y, sample_weight, score_kind, proba_range=True):
        """Validate ``fit``'s arguments; probability scores must lie in [0, 1] if ``proba_range``."""
        _check_kind(score_kind)
        s, y, w = check_binary_data(scores, y, sample_weight)
        if score_kind == "proba" and proba_range:
            s = _as_probability(s)
        self.score_kind_ = score_kind
        return s, y, w

    def _check_predict(self, scores) -> np.ndarray:
        check_is_fitted(self, list(self._state_fields))
        s = check_scores(scores)
        if self.score_kind_ == "proba":
            s = _as_probability(s)
        return s

    # ------------------------------------------------------------------ reduction protocol plumbing
    #
    # Subclasses implement ``_first_request(kind)`` and, per round name ``op``, ``_ps_<op>`` (the
    # piece statistics), optionally ``_merge_<op>`` (default: :func:`_merge_dicts`) and ``_step_<op>``.
    # Solver state between rounds lives in ``self._red`` (it travels with the pickled calibrator) and
    # is removed once fitted.

    #: whether ``fit`` rejects probability scores outside [0, 1] (sigmoid uses the raw score).
    _proba_range: ClassVar[bool] = True

    def _check_params(self) -> None:
        """Raise :class:`ParameterError` for invalid constructor parameters (before any data)."""

    def check_params(self) -> None:
        """The engine's hook (:meth:`calengine.params.Params.check_params`): a bad value fails at fit
        time, before any data is read."""
        self._check_params()

    def _first_request(self, kind: str) -> dict[str, Any] | None:
        return None

    def reduction_start(self, score_kind: str = "decision") -> dict[str, Any] | None:
        self._check_params()
        _check_kind(score_kind)
        for key in self._state_fields:
            self.__dict__.pop(key, None)
        self.__dict__.pop("_red", None)
        request = self._first_request(score_kind)
        if request is not None:
            self._red = {"kind": score_kind}
        return request

    def partial_stats(self, scores, y, sample_weight, request: dict[str, Any]) -> dict[str, Any]:
        return getattr(self, "_ps_" + request["op"])(scores, y, sample_weight, request)

    def merge_stats(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        merge = getattr(self, "_merge_" + a["op"], None)
        return merge(a, b) if merge is not None else _merge_dicts(a, b)

    def reduction_step(self, stats: dict[str, Any], request: dict[str, Any]) -> dict[str, Any] | None:
        return getattr(self, "_step_" + request["op"])(stats, request)

    def _finish(self, **fitted) -> None:
        for key, value in fitted.items():
            setattr(self, key, value)
        self.score_kind_ = self._red["kind"]
        del self._red

    def _fit_protocol(self, scores, y, sample_weight, score_kind):
        """``fit`` = the reduction protocol on one piece (so both are the same algorithm)."""
        from calengine.reductions.calibrators import fit_by_reduction

        return fit_by_reduction(self, [(scores, y, sample_weight)], score_kind=score_kind)

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        """The reduction protocol on one piece (see :meth:`_fit_protocol`)."""
        return self._fit_protocol(scores, y, sample_weight, score_kind)

    def _ps_summary(self, scores, y, sample_weight, request):
        """First unsorted round: validation, class counts and weights, score range, extras."""
        s, yi, w = _check_piece(scores, y, sample_weight)
        stats = {"op": "summary", **_summary(s, yi, w)}
        stats.update(self._summary_extra(*_live(s, yi, w), request))
        return stats

    def _summary_extra(self, s, yi, w, request) -> dict[str, Any]:
        return {}


def _as_probability(s: np.ndarray) -> np.ndarray:
    """Clip probability scores that leave [0, 1] by rounding; reject anything further out."""
    if s.size and (s.min() < -_PROBA_TOL or s.max() > 1.0 + _PROBA_TOL):
        raise DataError(
            f"score_kind='proba' but scores range over [{s.min():.6g}, {s.max():.6g}]; "
            "pass score_kind='decision' for scores that are not probabilities"
        )
    return np.clip(s, 0.0, 1.0)


def _logit(p: np.ndarray) -> np.ndarray:
    """``logit(p)`` of ``p`` clipped to ``[EPS, 1 - EPS]``: the same bits as of ``p`` clipped to
    ``[0, 1]`` first (the inner clip's bounds lie outside the outer's), so callers pass raw scores."""
    p = np.clip(p, EPS, 1.0 - EPS)
    return np.log(p) - np.log1p(-p)


def _check_choice(name: str, value, choices: tuple[str, ...]) -> None:
    """Raise :class:`ParameterError` unless ``value`` is one of ``choices``."""
    if value not in choices:
        options = " or ".join(repr(c) for c in choices)
        raise ParameterError(f"{name} must be {options}, got {value!r}; pick one of those")


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterError(f"{name} must be True or False, got {value!r}; pass a boolean")
    return bool(value)


def _is_int(value, minimum: int) -> bool:
    """True for an integer (not a bool) of at least ``minimum``."""
    return (
        isinstance(value, (int, np.integer))
        and not isinstance(value, (bool, np.bool_))
        and value >= minimum
    )



# ---------------------------------------------------------------------------------------------------
# fitting as a reduction (the protocol documented on calengine.base.Calibrator)
#
# Every built-in calibrator except ``binning`` with ``n_bins="auto"`` implements the protocol, and its
# ``fit`` *is* the protocol run on a single piece (calengine.reductions.calibrators.fit_by_reduction),
# so the in-memory fit and the partition-native fit are one algorithm.  Requests and statistics are
# dicts with an ``"op"`` key naming the round; the calibrator dispatches on it.  Statistics merge by
# key: ``min_*``/``max_*`` take the minimum/maximum, ``cat_*`` concatenate (a before b), anything
# else adds.  The first round validates every piece with fit's messages; the properties of the whole
# data (all weights zero, one class only, probabilities outside [0, 1]) are checked on the merged
# statistics in ``reduction_step``, again with fit's messages.  Later rounds see the same rows and
# skip the validation.
#
# Probability scores are clipped to [0, 1], which can turn scores just outside (by rounding) into ties
# with 0 or 1 that a score range may split.  The sorted fits therefore keep the rows at exactly 0 and
# 1 (after clipping) out of the per-range summaries and carry their sums separately (``e0``/``e1``):
# they sit at the two ends of the score order whichever piece they came from.


def _check_kind(score_kind) -> None:
    if score_kind not in SCORE_KINDS:
        raise ParameterError(
            f"score_kind must be one of {', '.join(SCORE_KINDS)}, got {score_kind!r}; "
            "use 'proba' for probabilities and 'decision' for unbounded scores"
        )


def _check_piece(scores, y, sample_weight):
    """:func:`check_binary_data` for one piece: a piece may hold one class or only zero weights."""
    try:
        wv = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    except (TypeError, ValueError):
        wv = None
    if wv is not None and wv.ndim == 1 and wv.size and np.all(wv == 0.0):
        s, yi, _ = check_binary_data(scores, y, np.ones_like(wv), require_both_classes=False)
        return s, yi, wv
    return check_binary_data(scores, y, sample_weight, require_both_classes=False)


def _light(scores, y, sample_weight):
    """A piece already validated in the first round: plain arrays, nothing checked."""
    s = np.asarray(scores, dtype=np.float64)
    yi = (np.asarray(y) == 1).astype(np.int64)
    w = np.ones(s.shape[0]) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    return s, yi, w


def _unit(w: np.ndarray) -> bool:
    """Whether every weight is 1, as in the engine's unweighted pieces.  Sums of ``w·x`` are then the
    sums of ``x`` to the bit (``1·x`` is ``x`` exactly, and the terms are added in the same order), and
    weight totals are exact counts, so a calibrator may skip the products without changing a fit."""
    return bool(np.all(w == 1.0))


def _live(s, yi, w):
    """Drop zero-weight rows (they carry no information)."""
    keep = w > 0
    if np.all(keep):
        return s, yi, w
    return s[keep], yi[keep], w[keep]


def _summary(s: np.ndarray, yi: np.ndarray, w: np.ndarray, weights: bool = True) -> dict[str, Any]:
    """Statistics every first round collects: live class counts, raw score range and, if
    ``weights``, the weight of each class."""
    pos = yi == 1
    if weights and _unit(w):  # every row live, weighing 1: the class weights are the exact counts
        n_pos = int(np.count_nonzero(pos))
        return {"n_pos": n_pos, "n_neg": w.size - n_pos, "min_s": float(s.min()), "max_s": float(s.max()),
                "w_pos": float(n_pos), "w_neg": float(w.size - n_pos)}
    live = w > 0
    n_live = int(np.count_nonzero(live))
    n_pos = int(np.count_nonzero(pos if n_live == w.size else pos & live))
    out = {"n_pos": n_pos, "n_neg": n_live - n_pos, "min_s": float(s.min()), "max_s": float(s.max())}
    if weights:
        out["w_pos"] = float(np.sum(w, where=pos))
        out["w_neg"] = float(np.sum(w, where=~pos))
    return out


def _check_merged(stats: dict[str, Any], kind: str, proba_range: bool = True) -> None:
    """Raise what ``fit`` raises for the whole data (the checks are run on tiny stand-ins, so the
    messages are fit's own)."""
    if stats["n_pos"] + stats["n_neg"] == 0:
        check_binary_data([0.0], [0], [0.0])  # "every sample_weight is zero; ..."
    if stats["n_pos"] == 0 or stats["n_neg"] == 0:
        check_binary_data([0.0], [1 if stats["n_pos"] else 0])  # "... holds only one class ..."
    if kind == "proba" and proba_range:
        _as_probability(np.array([stats["min_s"], stats["max_s"]]))


def _merge_dicts(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, va in a.items():
        vb = b[key]
        if key == "op":
            out[key] = va
        elif key.startswith("min_"):
            out[key] = np.minimum(va, vb)
        elif key.startswith("max_"):
            out[key] = np.maximum(va, vb)
        elif key.startswith("cat_"):
            out[key] = np.concatenate((va, vb))
        else:
            out[key] = va + vb
    return out


def _max_abs(x: np.ndarray) -> float:
    return float(np.max(np.abs(x))) if x.size else 0.0


def _edges(s, yi, w, kind):
    """Split live, clipped rows into those at exactly 0 / 1 (``proba`` only) and the rest.

    Returns ``(middle_s, middle_y, middle_w, e0, e1)`` with ``e0``/``e1`` = ``[Σ w y, Σ w]``.
    """
    zero = np.zeros(2)
    if kind != "proba":
        return s, yi, w, zero, zero.copy()
    at0 = s == 0.0
    at1 = s == 1.0
    mid = ~(at0 | at1)
    e0 = np.array([np.sum(w[at0] * yi[at0]), np.sum(w[at0])], dtype=np.float64)
    e1 = np.array([np.sum(w[at1] * yi[at1]), np.sum(w[at1])], dtype=np.float64)
    return s[mid], yi[mid], w[mid], e0, e1


def _sorted_piece(scores, y, sample_weight, kind, validate: bool):
    """Validated (or light), clipped, live rows of a sorted-round piece, and its summary."""
    if validate:
        s, yi, w = _check_piece(scores, y, sample_weight)
        summ = _summary(s, yi, w, weights=False)
    else:
        s, yi, w = _light(scores, y, sample_weight)
        summ = {}
    if kind == "proba":
        s = np.clip(s, 0.0, 1.0)
    s, yi, w = _live(s, yi, w)
    return s, yi, w, summ


def _tie_groups(scores, y, sample_weight, kind):
    """The first sorted round's view of a piece: its validated live rows pooled into tie groups
    ``(xs, Σ w·y, Σ w)``, the rows at exactly 0 / 1 apart (:func:`_edges`), and its summary.

    Returns ``(summary, e0, e1, xs, wy, ws)``."""
    s, yi, w, summ = _sorted_piece(scores, y, sample_weight, kind, validate=True)
    s, yi, w, e0, e1 = _edges(s, yi, w, kind)
    return (summ, e0, e1, *pool_ties(s, yi, w))


def _merge_blocks(a: dict[str, Any], b: dict[str, Any], keys: tuple[str, ...], join) -> dict[str, Any]:
    """Merge of two sorted-round statistics whose ``keys`` are per-block arrays (``a``'s blocks lie
    below ``b``'s): ``join`` runs over the concatenated blocks, everything else merges by
    :func:`_merge_dicts`."""
    rest = [{k: v for k, v in d.items() if k not in keys} for d in (a, b)]
    out = _merge_dicts(*rest)
    out.update(zip(keys, join(*(np.concatenate((a[k], b[k])) for k in keys))))
    return out


def _add_ends(mid: np.ndarray, first: float, last: float, head: bool, tail: bool) -> np.ndarray:
    """``mid`` with ``first`` prepended if ``head`` and ``last`` appended if ``tail``."""
    return np.concatenate(([first] if head else [], mid, [last] if tail else [])).astype(np.float64)


def _add_end_groups(head: bool, tail: bool, e0, e1, scores, sums) -> tuple[list, list]:
    """Per-group arrays of a sorted fit with the groups at exactly 0 and 1 (carried apart as ``e0`` and
    ``e1``, see :func:`_edges`) put back at the ends: every array of ``scores`` gets 0.0 before and
    1.0 after, the i-th array of ``sums`` ``e0[i]`` before and ``e1[i]`` after (``head``/``tail``:
    whether there is a group at 0 / at 1)."""
    return ([_add_ends(a, 0.0, 1.0, head, tail) for a in scores],
            [_add_ends(a, e0[i], e1[i], head, tail) for i, a in enumerate(sums)])
