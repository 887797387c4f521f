"""``top_label``: top-label calibration (Gupta & Ramdas, "Top-label calibration and multiclass-to-binary
reductions", ICLR 2022).

A k-class model is *top-label calibrated* when, for every class ``c``, ``P(y = c | ĉ = c, t) = t``:
the confidence ``t = max_j p_j`` it gives its predicted class ``ĉ = argmax_j p_j`` is the probability
that this prediction is right, separately for each predicted class.  The paper's reduction: for each
class ``c``, fit a *binary* calibrator of ``t`` against ``1[y = c]`` on the rows predicted as ``c``
(their "top-label histogram binning" uses equal-mass bins).  What this calibrator fits:

* ``base``: the binary calibrator per predicted class -- ``"binning"`` (default, the paper's: equal-mass
  bins, ``n_bins`` of them, default 15, capped per class at ``rows // 50`` (rows counted by weight) so
  that a bin holds 50 rows or more, as in the paper's experiments, never below 2), ``"isotonic"`` or
  ``"sigmoid"`` (``on="logit"``).
* ``min_rows`` (default 100): a class predicted for fewer calibration rows than this (counted by
  weight, as everywhere in calengine: a weight of 2 is the row twice), or whose rows are all right or
  all wrong, has too little to fit a map on; its rows get the *global* top-label calibrator instead,
  the same base fitted on every row's ``(t, 1[y = ĉ])`` (the paper's "confidence calibration").
  ``fallback_`` records which classes use it.  When the model's top class is right on *every*
  calibration row (near-separable data, small tables), or wrong on every one, no binary calibrator
  can be fitted even globally; every class then gets the constant ``constant_ = (hits + 1) / (n + 2)``
  (hits and rows counted by weight): the posterior mean of the hit rate under a uniform prior, the one
  figure those rows support (a base fitted on them would say 1 or 0, certainty no finite sample
  gives).
* Probabilities in: ``score_kind="proba"`` uses the k columns as the model's probabilities; decision
  values and logits go through their softmax first.  The predicted class is the first largest column.

Output (the paper calibrates only the top probability; calengine returns full rows): the predicted
class gets the calibrated ``t' = base_ĉ(t)`` and the other classes share ``1 − t'`` in proportion to
their input probabilities, so every row sums to 1.  Plain proportional rescaling keeps the argmax
only while ``t'`` stays at least the largest rescaled probability; an over-confident model's
``t'`` often does not (on 4-class logits scaled by 3, a tenth of the rows), and the other classes'
shares are not calibrated claims -- only ``t'`` is.  So no other class is given more than ``t'``:
:func:`share_rest` caps them at ``t'`` and hands the excess to the uncapped ones in proportion
(water-filling), which keeps ``t'`` exact, the row sum 1 and the model's decision (the cap is
``t'·(1 − 2⁻⁴⁰)``, :data:`TIE_BREAK`, so a capped class does not tie ``t'``: ties go to the lowest
class index in calengine's decisions and metrics).  The one case left is ``t' ≤ 1/k``: the other
``k − 1`` classes must then hold ``1 − t' ≥ (k − 1) t'``, at least ``t'`` each on average, so they
share it equally and the argmax may move -- the calibrated statement "the predicted class is right
with probability ``t'``" is kept over the decision.

Reduction (the multiclass protocol of :class:`calengine.base.Calibrator`, unsorted pieces of
``(S (n, k), y, w)``): every round is ONE pass over each piece that runs, for all classes at once,
the base calibrators' own reduction rounds keyed by the predicted class (plus the global one, keyed
``k``).  Bases whose rounds are unsorted (``sigmoid``) run round for round on the rows of their
class.  Bases whose rounds need score ranges (``isotonic``, ``binning``) cannot get them from
arbitrary pieces, so for them the pass collects each class's tie groups of ``t`` (distinct values
with ``Σ w·1[y = c]`` and ``Σ w``: merged exactly by a sorted union, in any order) and the client runs
the base's own protocol on those groups as one piece; their memory is the number of distinct ``t``
values, up to one per row for continuous probabilities (rounding the model's probabilities to 1e-6
bounds it to 10^6 per class); ``sigmoid`` needs no such memory.  The first pass also
counts each class's rows, which decides the fallbacks; a class that falls back is dropped from later
rounds.  Two classes on one column are the k = 2 case (``[1 − p, p]``; ``predict`` returns ``p``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from calengine.base import Calibrator
from calengine.errors import DataError, ModelFormatError, ParameterError
from calengine.reductions.pav import pool_ties
from calengine_builtins.deferred import check_is_fitted

from ._base import _check_kind, _is_int
from .multiclass_scaling import (
    MAX_CLASSES,
    _LinearScaling,
    check_class_weights,
    check_matrix_piece,
    check_n_classes,
    softmax,
)

#: the other classes are capped just below the calibrated top probability, so that a capped class does
#: not tie it (a tie would hand the argmax to the lowest class index); 2^-40 relative is far below
#: any calibration error and far above rounding
TIE_BREAK = 1.0 - 2.0**-40
#: the base calibrators ``top_label`` can use, by registry name
BASES = ("binning", "isotonic", "sigmoid")
#: the paper's smallest bin: 50 calibration rows
ROWS_PER_BIN = 50
#: the largest ``min_rows`` and ``n_bins`` accepted (bounded sizes, see the common standards)
MAX_MIN_ROWS = 10**9
MAX_BINS = 10**4


def _union_groups(a: tuple, b: tuple) -> tuple:
    """Sorted union of two tie-group tables ``(xs, wy, ws)``; equal values add (exact, associative)."""
    xs = np.concatenate((a[0], b[0]))
    wy = np.concatenate((a[1], b[1]))
    ws = np.concatenate((a[2], b[2]))
    u, inv = np.unique(xs, return_inverse=True)
    return u, np.bincount(inv, weights=wy, minlength=u.size), np.bincount(inv, weights=ws, minlength=u.size)


def _group_rows(groups: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tie groups as weighted rows: each group once as a hit (weight ``Σ w·y``) and once as a miss."""
    xs, wy, ws = groups
    s = np.concatenate((xs, xs))
    y = np.concatenate((np.ones(xs.size, np.int64), np.zeros(xs.size, np.int64)))
    w = np.concatenate((wy, np.maximum(ws - wy, 0.0)))
    order = np.argsort(s, kind="stable")
    return s[order], y[order], w[order]


def share_rest(Q: np.ndarray, mass: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Share ``mass[i]`` among row ``i``'s entries in proportion to ``Q[i]`` (the predicted class's entry
    is −1 there and gets 0), none above ``cap[i]``: ``min(λ_i Q_ij, cap_i)`` with ``λ_i`` making the row sum to
    ``mass[i]`` (water-filling: capped entries give their excess to the others, again in proportion).
    Entries of 0 get nothing unless every positive one is capped; then they share what is left
    equally.  When even ``cap`` for every other class is not enough (``mass > (k − 1) cap``, i.e.
    ``cap < 1/k``) the mass is shared equally."""
    n, k = Q.shape
    out = np.empty_like(Q)
    order = np.argsort(-Q, axis=1, kind="stable")
    Qs = np.take_along_axis(Q, order, axis=1)[:, : k - 1]  # the k - 1 other classes, largest first
    tail = np.cumsum(Qs[:, ::-1], axis=1)[:, ::-1]  # sum of the entries from j on
    res = np.full((n, k - 1), np.nan)
    done = np.zeros(n, dtype=bool)
    for j in range(k - 1):  # j entries capped: λ = (mass − j cap) / (sum of the rest)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            lam = (mass - j * cap) / tail[:, j]
            ok = ~done & (tail[:, j] > 0) & (lam >= 0) & (lam * Qs[:, j] <= cap)
        if ok.any():
            res[ok] = np.minimum(lam[ok, None] * Qs[ok], cap[ok, None])
            done |= ok
    # every positive entry capped and mass left: the zero entries share it equally (at most cap each)
    n_pos = np.count_nonzero(Qs > 0, axis=1)
    left = mass - n_pos * cap
    zeros = ~done & (n_pos < k - 1) & (left >= 0) & (left <= (k - 1 - n_pos) * cap)
    if zeros.any():
        share = left[zeros] / (k - 1 - n_pos[zeros])
        res[zeros] = np.where(Qs[zeros] > 0, cap[zeros, None], share[:, None])
        done |= zeros
    res[~done] = (mass[~done] / (k - 1))[:, None]
    sorted_out = np.concatenate((res, np.zeros((n, 1))), axis=1)
    np.put_along_axis(out, order, sorted_out, axis=1)
    return out


class TopLabelCalibrator(Calibrator):
    """Top-label calibration (module docstring): one binary ``base`` calibrator of the top probability
    per predicted class, the global one for classes predicted fewer than ``min_rows`` times.

    Fitted state: ``n_classes_``, ``score_kind_``, ``binary_``, ``fallback_`` (0/1 per class), ``constant_``
    (only when the top class was always right or always wrong: then no base is fitted) and each fitted
    base's own state under ``c<j>__<key>`` (``g__<key>`` for the global one), so the model file holds
    plain arrays only.
    """

    name = "top_label"
    multiclass: ClassVar[bool] = True
    #: the calibrated top probability is not monotone in any one column's score
    monotone: ClassVar[bool] = False

    def __init__(self, base: str = "binning", min_rows: int = 100, n_bins: int = 15):
        self.base = base
        self.min_rows = min_rows
        self.n_bins = n_bins

    # ------------------------------------------------------------------ parameters and bases

    def check_params(self) -> None:
        if self.base not in BASES:
            raise ParameterError(
                f"calibrator 'top_label': base must be {', '.join(repr(b) for b in BASES)}, got {self.base!r};"
                " pick one of those (binning is the paper's)"
            )
        if not (_is_int(self.min_rows, 1) and self.min_rows <= MAX_MIN_ROWS):
            raise ParameterError(
                f"calibrator 'top_label': min_rows must be an integer in 1..{MAX_MIN_ROWS}, got {self.min_rows!r};"
                " pass e.g. 100"
            )
        if not (_is_int(self.n_bins, 1) and self.n_bins <= MAX_BINS):
            raise ParameterError(
                f"calibrator 'top_label': n_bins must be an integer in 1..{MAX_BINS}, got {self.n_bins!r}; pass e.g. 15"
            )

    def _make_base(self, n_rows: int | None = None):
        from .binning import BinningCalibrator
        from .isotonic import IsotonicCalibrator
        from .scaling import SigmoidCalibrator

        if self.base == "binning":
            bins = int(self.n_bins) if n_rows is None else max(2, min(int(self.n_bins), n_rows // ROWS_PER_BIN))
            return BinningCalibrator(n_bins=bins)
        if self.base == "isotonic":
            return IsotonicCalibrator()
        return SigmoidCalibrator(on="logit")

    @property
    def _grouped(self) -> bool:
        """Whether the base's rounds need score ranges (then its rows travel as tie groups)."""
        return self.base != "sigmoid"

    # ------------------------------------------------------------------ the rows a base sees

    @staticmethod
    def _probabilities(S: np.ndarray, kind: str) -> np.ndarray:
        if kind == "proba":
            if S.size and (S.min() < -1e-9 or S.max() > 1.0 + 1e-9):
                raise DataError(
                    f"score_kind='proba' but scores range over [{S.min():.6g}, {S.max():.6g}]; "
                    "pass score_kind='decision' (logits) for scores that are not probabilities"
                )
            return np.clip(S, 0.0, 1.0)
        return softmax(S)

    @staticmethod
    def _as_matrix(scores, binary: bool, kind: str) -> np.ndarray:
        if not binary:
            return scores
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
        return np.column_stack((1.0 - s, s)) if kind == "proba" else np.column_stack((np.zeros_like(s), s))

    def _top(self, scores, y, sample_weight, request, validate: bool):
        """``(t, predicted class, hit, w)`` of a piece's live rows."""
        S = self._as_matrix(scores, request["binary"], request["kind"])
        if validate:
            S, yi, w = check_matrix_piece(S, y, sample_weight, request["k"])
        else:
            S, yi = np.asarray(S, dtype=np.float64), np.asarray(y).astype(np.int64)
            w = np.ones(S.shape[0]) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        P = self._probabilities(S, request["kind"])
        keep = w > 0
        P, yi, w = P[keep], yi[keep], w[keep]
        c = np.argmax(P, axis=1) if P.size else np.zeros(0, np.int64)
        t = P[np.arange(P.shape[0]), c]
        return t, c, (yi == c).astype(np.int64), w

    # ------------------------------------------------------------------ the reduction

    def reduction_start(self, score_kind: str = "decision", n_classes: int | None = None):
        self.check_params()
        _check_kind(score_kind)
        for key in [k for k in vars(self) if k.endswith("_") and not k.startswith("_")] + ["_red"]:
            self.__dict__.pop(key, None)
        binary = n_classes is None
        k = 2 if binary else check_n_classes(self.name, n_classes)
        bases = {key: self._make_base() for key in range(k + 1)}  # classes, then the global one (key k)
        subs = {key: (None if self._grouped else cal.reduction_start("proba")) for key, cal in bases.items()}
        self._red = {"kind": score_kind, "k": k, "binary": binary, "bases": bases, "first": True}
        return {"op": "top", "kind": score_kind, "sorted": False, "k": k, "binary": binary, "first": True,
                "subs": subs}

    def partial_stats(self, scores, y, sample_weight, request):
        t, c, hit, w = self._top(scores, y, sample_weight, request, validate=request["first"])
        k = request["k"]
        out: dict[str, Any] = {"op": "top"}
        if request["first"]:
            out["w_class"] = np.bincount(c, weights=w, minlength=k).astype(np.float64)
            out["hits"] = np.bincount(c, weights=w * hit, minlength=k).astype(np.float64)
        per = {}
        for key, sub in request["subs"].items():
            rows = slice(None) if key == k else (c == key)
            tk, hk, wk = t[rows], hit[rows], w[rows]
            if tk.size == 0:
                continue
            if self._grouped:
                per[key] = pool_ties(tk, hk, wk)
            else:
                per[key] = self._red_base(key).partial_stats(tk, hk, wk, sub)
        out["per"] = per
        return out

    def _red_base(self, key: int):
        return self._red["bases"][key]

    def merge_stats(self, a, b):
        out = {key: a[key] + b[key] for key in ("w_class", "hits") if key in a}
        per = dict(a["per"])
        for key, sb in b["per"].items():
            if key not in per:
                per[key] = sb
            elif self._grouped:
                per[key] = _union_groups(per[key], sb)
            else:
                per[key] = self._red_base(key).merge_stats(per[key], sb)
        return {"op": "top", **out, "per": per}

    def reduction_step(self, stats, request):
        red, k = self._red, self._red["k"]
        subs = dict(request["subs"])
        if request["first"]:
            hits, w_class = (np.asarray(stats[key], dtype=np.float64) for key in ("hits", "w_class"))
            if not w_class.sum() > 0:
                check_class_weights(w_class)  # "every sample_weight is zero ..."
            fallback = (w_class < self.min_rows) | (hits <= 0) | (hits >= w_class)
            red["fallback"] = fallback
            red["n_rows"] = np.concatenate((w_class, [w_class.sum()]))
            for c in np.flatnonzero(fallback):
                subs.pop(int(c), None)
            if not 0 < hits.sum() < w_class.sum():  # always right (or wrong): the constant (module docstring)
                red["constant"] = float((hits.sum() + 1.0) / (w_class.sum() + 2.0))
                red["fallback"] = np.ones(k, dtype=bool)
                subs = {}
        fitted = red.setdefault("fitted", {})
        nxt = {}
        for key, sub in subs.items():
            stat = stats["per"].get(key)
            if self._grouped:
                fitted[key] = self._fit_groups(stat, int(red["n_rows"][key]))
                continue
            more = self._red_base(key).reduction_step(stat, sub)
            if more is None:
                fitted[key] = self._red_base(key)
            elif more.get("sorted"):
                raise ParameterError(f"top_label's base '{self.base}' asked for score ranges mid-fit; use another base")
            else:
                nxt[key] = more
        if nxt:
            return {**request, "first": False, "subs": nxt}
        self._finish()
        return None

    def _fit_groups(self, groups, n_rows: int):
        """The base's own protocol on one piece: the class's tie groups as weighted rows."""
        from calengine.reductions.calibrators import fit_by_reduction

        return fit_by_reduction(self._make_base(n_rows), [_group_rows(groups)], "proba")

    def _finish(self) -> None:
        red = self._red
        k = red["k"]
        self.n_classes_, self.score_kind_, self.binary_ = k, red["kind"], red["binary"]
        self.fallback_ = red["fallback"].astype(np.int64)
        self.constant_ = red.get("constant", np.nan)
        self.bases_ = {key: cal for key, cal in red["fitted"].items()}
        del self._red

    #: ``(n, k)`` scores with class indices, or one column with 0/1 labels (two classes): the reduction
    #: on one piece, exactly as the linear scalings fit
    fit = _LinearScaling.fit

    # ------------------------------------------------------------------ predict and state

    def predict(self, scores) -> np.ndarray:
        check_is_fitted(self, ["n_classes_", "score_kind_", "binary_", "fallback_", "bases_"])
        S = np.asarray(self._as_matrix(scores, self.binary_, self.score_kind_), dtype=np.float64)
        if S.ndim != 2 or S.shape[1] != self.n_classes_:
            raise DataError(f"calibrator '{self.name}' was fitted on {self.n_classes_} score columns but got shape {S.shape}")
        if not np.all(np.isfinite(S)):
            raise DataError("scores contain NaN or infinite values; drop or repair those rows")
        P = self._probabilities(S, self.score_kind_)
        return self.calibrate_rows(P)[:, 1] if self.binary_ else self.calibrate_rows(P)

    def calibrate_rows(self, P: np.ndarray) -> np.ndarray:
        """Rows of probabilities with the top one calibrated and the others rescaled (module docstring)."""
        n, k = P.shape
        rows = np.arange(n)
        c = np.argmax(P, axis=1) if n else np.zeros(0, np.int64)
        t = P[rows, c]
        t_new = np.empty(n)
        constant = getattr(self, "constant_", np.nan)
        if np.isfinite(constant):  # no map was fitted: every row gets the smoothed hit rate
            t_new.fill(constant)
        else:
            for key in np.unique(c):
                mask = c == key
                cal = self.bases_[k] if self.fallback_[key] else self.bases_[key]
                t_new[mask] = cal.predict(t[mask])
        t_new = np.clip(t_new, 0.0, 1.0)
        others = P.copy()
        others[rows, c] = -1.0  # sorts last: share_rest gives it nothing
        out = share_rest(others, 1.0 - t_new, t_new * TIE_BREAK)
        out[rows, c] = t_new
        return out

    def to_state(self) -> dict[str, Any]:
        check_is_fitted(self, ["n_classes_", "bases_"])
        out: dict[str, Any] = {"n_classes_": int(self.n_classes_), "score_kind_": self.score_kind_,
                               "binary_": bool(self.binary_), "fallback_": np.asarray(self.fallback_, dtype=np.float64)}
        if np.isfinite(getattr(self, "constant_", np.nan)):  # written only when used: older models load as before
            out["constant_"] = float(self.constant_)
        for key, cal in sorted(self.bases_.items()):
            prefix = "g" if key == self.n_classes_ else f"c{key}"
            for name, value in cal.to_state().items():
                out[f"{prefix}__{name}"] = value
        return out

    def from_state(self, state: dict[str, Any]) -> "TopLabelCalibrator":
        def damaged(what):
            return ModelFormatError(f"calibrator '{self.name}' state {what}; the model is damaged, refit it")

        try:
            k = int(np.asarray(state["n_classes_"]))
            kind = str(np.asarray(state["score_kind_"]))
            binary = bool(np.asarray(state["binary_"]))
            fallback = np.asarray(state["fallback_"], dtype=np.float64).reshape(-1)
            constant = float(np.asarray(state.get("constant_", np.nan)))
        except (KeyError, TypeError, ValueError):
            raise damaged("lacks n_classes_, score_kind_, binary_ or fallback_") from None
        if "constant_" in state and not (0.0 < constant < 1.0 and np.all(fallback == 1)):
            raise damaged("'constant_' is invalid")
        if not 2 <= k <= MAX_CLASSES or (binary and k != 2) or kind not in ("proba", "decision") or fallback.shape != (k,) \
                or not np.all((fallback == 0) | (fallback == 1)):
            raise damaged("'n_classes_', 'binary_', 'score_kind_' or 'fallback_' is invalid")
        parts: dict[int, dict[str, Any]] = {}
        for name, value in state.items():
            prefix, sep, rest = name.partition("__")
            if not sep:
                continue
            key = k if prefix == "g" else (int(prefix[1:]) if prefix[:1] == "c" and prefix[1:].isdigit() else -1)
            if not 0 <= key <= k:
                raise damaged(f"has the unknown entry {name!r}")
            parts.setdefault(key, {})[rest] = value
        need = set() if np.isfinite(constant) else {c for c in range(k) if not fallback[c]} | ({k} if fallback.any() else set())
        if not need <= set(parts):
            raise damaged("lacks the map of a predicted class")
        self.bases_ = {key: self._make_base().from_state(part) for key, part in parts.items()}
        self.n_classes_, self.score_kind_, self.binary_, self.fallback_ = k, kind, binary, fallback.astype(np.int64)
        self.constant_ = constant
        return self
