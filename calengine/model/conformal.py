"""A fitted model's conformal layer: thresholds that turn its probabilities into prediction sets.

``calengine conformal`` (:mod:`calengine.fit.conformal`) attaches a :class:`ConformalLayer` to any
fitted model without touching the rest of it; scoring with ``--sets`` then writes, per row, the set
``{c : V(x, c) <= t}`` (:mod:`calengine.methods.conformal` defines ``V`` and ``t``).  The layer holds
only numbers: the score's name and parameters, ``alpha``, the seed of the randomised scores, and per
**group** a threshold, the group's calibration rows and mass, and a table of knots for p-values.

Groups: one (marginal coverage); one per class (``mondrian="class"``: candidate class ``c`` is tested
against class ``c``'s threshold); or, for ``mondrian=("col", ...)``, group 0 -- every calibration row,
the *global* threshold -- and one group per segment (the tuple of values of those columns, read as
strings, as ``fit --by`` reads them) that had enough calibration rows for a finite threshold.  A row
whose segment has no group of its own (unseen in calibration, too few rows there, or a missing value
in a segment column) gets the global threshold: marginal coverage, not its segment's.

Weighted conformal (``weight``): each group holds thresholds at a ladder of test weights ``levels``
(ascending; the last is the largest test weight whose threshold is finite); a row of weight ``w``
takes the threshold of the smallest level at least ``w`` (a larger level's threshold is at least as
large: the set can only grow, so coverage holds), and a row heavier than the last level gets every
class, as Tibshirani et al.'s rule says for it.

On disk: the manifest's ``conformal`` object (:meth:`ConformalLayer.to_json`) and ``conformal.npz``
(its arrays), listed and hashed in the files table like every other file, so the content hash and
the lineage cover it; :meth:`ConformalLayer.from_parts` checks every field and array before a row is
scored (a damaged or edited layer is one :class:`~calengine.errors.ModelFormatError`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DataError, ModelFormatError
from ..methods import conformal as cf
from ..reductions.column_stats import checked_weights

__all__ = ["ConformalLayer", "ARRAYS_FILE", "MONDRIAN_KINDS", "MAX_LEVELS", "MAX_KNOTS", "set_columns"]

#: the layer's array file in the model directory
ARRAYS_FILE = "conformal.npz"
MONDRIAN_KINDS = ("none", "class", "segments")
#: test-weight levels of a weighted layer (per group)
MAX_LEVELS = 64
#: the most knots a layer may hold (over all groups)
MAX_KNOTS = 1 << 22
#: the most groups a layer may hold (classes, or segments + 1)
MAX_GROUPS = 20_001


def _damaged(what: str) -> ModelFormatError:
    return ModelFormatError(f"the conformal layer of this model is damaged: {what}; conformalize the model again")


@dataclass
class ConformalLayer:
    """See the module docstring.  ``thresholds[g, j]`` is group ``g``'s threshold at level ``j``
    (one level, ``levels`` None, without weights); ``knots``: the concatenated knot scores and the
    mass below each, group ``g``'s in ``knot_offsets[g]:knot_offsets[g + 1]``."""

    score: str
    alpha: float
    thresholds: np.ndarray
    rows: np.ndarray
    totals: np.ndarray
    knot_values: np.ndarray
    knot_masses: np.ndarray
    knot_offsets: np.ndarray
    randomized: bool = False
    seed: int = 0
    lam: float = 0.0
    k_reg: int = 0
    mondrian: str = "none"
    by: tuple[str, ...] = ()
    keys: list = field(default_factory=list)
    weight: str | None = None
    levels: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.by = tuple(self.by)
        self.keys = [tuple(str(v) for v in k) for k in self.keys]
        self._index = {k: i for i, k in enumerate(self.keys)}

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_index", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._index = {k: i for i, k in enumerate(self.keys)}

    # ------------------------------------------------------------------ what scoring reads
    @property
    def n_groups(self) -> int:
        return int(self.thresholds.shape[0])

    @property
    def input_columns(self) -> list[str]:
        """The columns of a scored table the layer reads besides the model's: the segment columns and
        the weight column."""
        return list(self.by) + ([self.weight] if self.weight else [])

    def describe(self) -> str:
        """One line: ``aps (randomised), alpha 0.1, Mondrian by class, weighted by w``."""
        parts = [self.score + (" (randomised)" if self.randomized else "")]
        if self.score == "raps":
            parts[0] += f" lambda={self.lam:g} k_reg={self.k_reg}"
        parts.append(f"alpha {self.alpha:g}")
        if self.mondrian == "class":
            parts.append("Mondrian by class")
        elif self.mondrian == "segments":
            parts.append(f"Mondrian by {','.join(self.by)} ({len(self.keys)} segments)")
        if self.weight:
            parts.append(f"weighted by {self.weight}")
        return ", ".join(parts)

    def segment_groups(self, df) -> np.ndarray:
        """Each row's group for ``mondrian="segments"``: 1 + its segment's index, 0 (global) for a segment
        without a threshold of its own or a missing value."""
        from .segmented import segment_codes

        missing = [c for c in self.by if c not in df.columns]
        if missing:
            raise DataError(f"segment column '{missing[0]}' is not in the table; this model's conformal layer is"
                            f" Mondrian by {','.join(self.by)}: score a table holding those columns")
        keys, codes = segment_codes(df, self.by)
        lookup = np.array([self._index.get(k, -1) + 1 for k in keys] + [0], dtype=np.intp)
        return lookup[codes]

    def row_weights(self, df) -> np.ndarray | None:
        """The test rows' weights (the layer's weight column) for weighted conformal; None unweighted."""
        if not self.weight:
            return None
        if self.weight not in df.columns:
            raise DataError(f"weight column '{self.weight}' is not in the table; this model's conformal layer is"
                            f" weighted: its sets depend on each row's weight, give the column '{self.weight}'")
        return checked_weights(df[self.weight], self.weight)

    def _level_thresholds(self, groups: np.ndarray, w: np.ndarray) -> np.ndarray:
        """Per row: the threshold of the smallest level of its group at least its weight (inf above the last)."""
        out = np.empty(w.shape[0])
        for g in np.unique(groups):
            rows = groups == g
            lv, th = self.levels[g], self.thresholds[g]
            j = np.searchsorted(lv, w[rows], side="left")
            out[rows] = np.where(j < lv.shape[0], th[np.minimum(j, lv.shape[0] - 1)], math.inf)
        return out

    def thresholds_for(self, n: int, n_classes: int, df=None, weights=None) -> np.ndarray:
        """The threshold each (row, class) is compared with, broadcastable to (n, k)."""
        if self.mondrian == "segments":
            groups = self.segment_groups(df)
        else:
            groups = np.zeros(n, dtype=np.intp)
        if self.weight is None:
            if self.mondrian == "class":
                return self.thresholds[:, 0][None, :]
            return self.thresholds[groups, 0][:, None]
        w = self.row_weights(df) if weights is None else np.asarray(weights, dtype=np.float64)
        if self.mondrian == "class":
            return np.column_stack([self._level_thresholds(np.full(n, c, dtype=np.intp), w) for c in range(n_classes)])
        return self._level_thresholds(groups, w)[:, None]

    def uniforms(self, X) -> np.ndarray | None:
        """The rows' uniforms for a randomised score (None otherwise): a hash of each encoded row and the seed."""
        if not self.randomized:
            return None
        return cf.row_uniforms(cf.row_hashes(X), self.seed)

    def class_scores(self, P, X) -> np.ndarray:
        return cf.class_scores(P, self.score, self.uniforms(X), self.lam, self.k_reg)

    def sets(self, P, X, df=None, weights=None) -> np.ndarray:
        """The prediction sets of rows with probabilities ``P`` and encoded features ``X`` (``df``: their
        frame, for the segment and weight columns), as an (n, k) boolean array."""
        V = self.class_scores(P, X)
        return V <= self.thresholds_for(V.shape[0], V.shape[1], df, weights)

    def p_values(self, P, X, df=None, weights=None) -> np.ndarray:
        """Conformal p-values (n, k): ``(mass at or above V(x, c) + w) / (total + w)`` of the group the pair
        is tested against, ``w`` the row's weight (1 unweighted), bounded from above by the knot table
        (exact when every calibration score is a knot; never more than 1 / resolution too large)."""
        V = self.class_scores(P, X)
        n, k = V.shape
        w = np.ones(n) if self.weight is None else (self.row_weights(df) if weights is None
                                                      else np.asarray(weights, dtype=np.float64))
        if self.mondrian == "class":
            groups = np.broadcast_to(np.arange(k)[None, :], (n, k))
        elif self.mondrian == "segments":
            groups = np.broadcast_to(self.segment_groups(df)[:, None], (n, k))
        else:
            groups = np.zeros((n, k), dtype=np.intp)
        out = np.empty((n, k))
        for g in np.unique(groups):
            mask = groups == g
            a, b = int(self.knot_offsets[g]), int(self.knot_offsets[g + 1])
            vals, mass = self.knot_values[a:b], self.knot_masses[a:b]
            j = np.searchsorted(vals, V[mask], side="right") - 1
            below = np.where(j >= 0, mass[np.maximum(j, 0)], 0.0)
            wt = np.broadcast_to(w[:, None], (n, k))[mask]
            total = float(self.totals[g])
            out[mask] = np.clip((total - below + wt) / (total + wt), 0.0, 1.0)
        return out

    # ------------------------------------------------------------------ storage
    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "score": self.score, "alpha": float(self.alpha), "randomized": bool(self.randomized), "seed": int(self.seed),
            "mondrian": self.mondrian, "groups": self.n_groups, "arrays": ARRAYS_FILE,
        }
        if self.score == "raps":
            d["raps"] = {"lambda": float(self.lam), "k_reg": int(self.k_reg)}
        if self.mondrian == "segments":
            d["by"] = list(self.by)
            d["keys"] = [list(k) for k in self.keys]
        if self.weight:
            d["weight"] = self.weight
        return d

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"thresholds": np.asarray(self.thresholds, dtype=np.float64),
               "rows": np.asarray(self.rows, dtype=np.int64), "totals": np.asarray(self.totals, dtype=np.float64),
               "knot_values": np.asarray(self.knot_values, dtype=np.float64),
               "knot_masses": np.asarray(self.knot_masses, dtype=np.float64),
               "knot_offsets": np.asarray(self.knot_offsets, dtype=np.int64)}
        if self.levels is not None:
            out["levels"] = np.asarray(self.levels, dtype=np.float64)
        return out

    @classmethod
    def from_parts(cls, desc: Any, arrays: dict[str, np.ndarray], n_classes: int) -> "ConformalLayer":
        """The layer of a manifest's ``conformal`` object and its arrays, every field checked (untrusted
        input): the score and its parameters, the groups, the thresholds (and weight levels), the
        calibration counts and the p-value knots, in that order."""
        if not isinstance(desc, dict):
            raise _damaged("'conformal' is not an object")
        score, alpha, randomized, seed, lam, k_reg = _checked_score(desc)
        mondrian, by, keys = _checked_groups(desc)
        weight = desc.get("weight")
        if weight is not None and (not isinstance(weight, str) or not weight):
            raise _damaged("'weight' is not a column name")
        G = {"none": 1, "class": n_classes, "segments": 1 + len(keys)}[mondrian]
        if desc.get("groups") != G:
            raise _damaged(f"it holds {desc.get('groups')!r} groups where {G} are expected")
        need = {"thresholds", "rows", "totals", "knot_values", "knot_masses", "knot_offsets"} | ({"levels"} if weight else set())
        if set(arrays) != need:
            raise _damaged(f"its arrays are {sorted(arrays)}, not {sorted(need)}")
        th, levels = _checked_thresholds(arrays, G, bool(weight))
        rows, totals, kv, km, ko = _checked_knots(arrays, G)
        return cls(score=score, alpha=float(alpha), thresholds=th, rows=rows, totals=totals, knot_values=kv,
                   knot_masses=km, knot_offsets=ko, randomized=randomized, seed=int(seed), lam=lam, k_reg=k_reg,
                   mondrian=mondrian, by=tuple(by), keys=[tuple(k) for k in keys], weight=weight, levels=levels)


def _checked_score(desc: dict) -> tuple:
    """``(score, alpha, randomized, seed, lambda, k_reg)`` of a manifest's conformal object."""
    score = desc.get("score")
    if score not in cf.SCORES:
        raise _damaged(f"unknown score {str(score)[:40]!r}")
    alpha = desc.get("alpha")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise _damaged("alpha is not a number in (0, 1)")
    randomized = desc.get("randomized", False)
    seed = desc.get("seed", 0)
    if not isinstance(randomized, bool) or isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise _damaged("randomized or seed is malformed")
    if randomized and score not in cf.RANDOMISABLE:
        raise _damaged(f"score {score} has no randomised variant")
    lam, k_reg = 0.0, 0
    if score == "raps":
        raps = desc.get("raps")
        if not isinstance(raps, dict):
            raise _damaged("raps parameters are missing")
        try:
            lam, k_reg = cf.check_raps(raps.get("lambda"), raps.get("k_reg"))
        except Exception:  # noqa: BLE001 - a ParameterError of cf is damage here
            raise _damaged("raps parameters are malformed") from None
    return score, alpha, randomized, seed, lam, k_reg


def _checked_groups(desc: dict) -> tuple:
    """``(mondrian, by, keys)``: the Mondrian kind, and for segments their distinct columns and keys."""
    mondrian = desc.get("mondrian", "none")
    if mondrian not in MONDRIAN_KINDS:
        raise _damaged(f"unknown mondrian kind {str(mondrian)[:40]!r}")
    by, keys = (), []
    if mondrian == "segments":
        by, keys = desc.get("by"), desc.get("keys")
        if not isinstance(by, list) or not by or not all(isinstance(c, str) and c for c in by) or len(set(by)) != len(by):
            raise _damaged("'by' does not name distinct columns")
        if not isinstance(keys, list) or len(keys) >= MAX_GROUPS or not all(
                isinstance(k, list) and len(k) == len(by) and all(isinstance(v, str) for v in k) for k in keys):
            raise _damaged("segment keys are not one string per segment column")
        if len({tuple(k) for k in keys}) != len(keys):
            raise _damaged("a segment key repeats")
    return mondrian, by, keys


def _checked_thresholds(arrays: dict, G: int, weighted: bool) -> tuple:
    """``(thresholds, levels)``: one finite threshold per group, or for weighted conformal one per weight
    level, the levels finite, increasing and padded with +inf (threshold +inf) to a common length."""
    th = np.asarray(arrays["thresholds"])
    L = th.shape[1] if th.ndim == 2 else 0
    if th.dtype != np.float64 or th.ndim != 2 or th.shape[0] != G or not 1 <= L <= MAX_LEVELS \
            or (not weighted and L != 1):
        raise _damaged("thresholds are not numbers, one per group (and level)")
    if not weighted:
        if not np.all(np.isfinite(th)):
            raise _damaged("thresholds are not finite")
        return th, None
    levels = np.asarray(arrays["levels"])
    if levels.dtype != np.float64 or levels.shape != th.shape:
        raise _damaged("weight levels are not one per threshold")
    pad = np.isposinf(levels)
    real = ~pad
    if not (np.all(np.isfinite(levels[real])) and np.all(levels[real] >= 0) and np.all(real[:, 0])
            and np.all(np.diff(pad.astype(np.int8), axis=1) >= 0) and np.all(np.isposinf(th[pad]))
            and np.all(np.isfinite(th[real]))):
        raise _damaged("weight levels are not finite weights >= 0 followed by infinite padding")
    with np.errstate(invalid="ignore"):
        steps_l, steps_t = np.diff(levels, axis=1), np.diff(th, axis=1)
    both = real[:, 1:]
    if np.any(steps_l[both] <= 0) or np.any(steps_t[both] < 0):
        raise _damaged("weight levels are not increasing with non-decreasing thresholds")
    return th, levels


def _checked_knots(arrays: dict, G: int) -> tuple:
    """``(rows, totals, knot values, knot masses, knot offsets)``: positive counts per group, and each
    group's p-value knots increasing, finite, within their offsets and never above the group's total."""
    rows, totals = np.asarray(arrays["rows"]), np.asarray(arrays["totals"])
    if rows.dtype != np.int64 or rows.shape != (G,) or np.any(rows < 1):
        raise _damaged("calibration rows are not a positive count per group")
    if totals.dtype != np.float64 or totals.shape != (G,) or not np.all(np.isfinite(totals)) or np.any(totals <= 0):
        raise _damaged("calibration totals are not a positive number per group")
    kv, km, ko = (np.asarray(arrays[k]) for k in ("knot_values", "knot_masses", "knot_offsets"))
    if ko.dtype != np.int64 or ko.shape != (G + 1,) or ko[0] != 0 or np.any(np.diff(ko) < 0) \
            or kv.dtype != np.float64 or km.dtype != np.float64 or kv.ndim != 1 or kv.shape != km.shape \
            or int(ko[-1]) != kv.shape[0] or kv.shape[0] > MAX_KNOTS:
        raise _damaged("the p-value knots do not fit their offsets")
    if not (np.all(np.isfinite(kv)) and np.all(np.isfinite(km))) or np.any(km < 0):
        raise _damaged("the p-value knots are not finite")
    for g in range(G):
        a, b = int(ko[g]), int(ko[g + 1])
        if np.any(np.diff(kv[a:b]) <= 0) or np.any(np.diff(km[a:b]) < 0) or (b > a and km[b - 1] > totals[g] * (1 + 1e-12)):
            raise _damaged(f"the p-value knots of group {g} are not increasing")
    return rows, totals, kv, km, ko


def set_columns(sets: np.ndarray, typed_classes: np.ndarray, class_names: list[str]) -> dict:
    """``{"set": pyarrow ListArray, "in_<c>": bool arrays, "set_size": int32}`` of a boolean (n, k) matrix;
    ``typed_classes``: the class labels in the class column's own type (the list's values)."""
    import pyarrow as pa

    n, k = sets.shape
    size = sets.sum(axis=1, dtype=np.int32)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(size, out=offsets[1:])
    members = np.flatnonzero(sets.ravel()) % k
    values = pa.array(typed_classes[members])
    out = {"set": pa.ListArray.from_arrays(pa.array(offsets), values)}
    for i, c in enumerate(class_names):
        out[f"in_{c}"] = sets[:, i]
    out["set_size"] = size
    return out
