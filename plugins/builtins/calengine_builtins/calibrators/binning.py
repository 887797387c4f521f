"""``binning``: equal-frequency histogram binning (Zadrozny & Elkan 2001)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from calengine.errors import ModelFormatError, ParameterError
from calengine.reductions.pav import pool_ties, predict_step

from ._base import _BinaryCalibrator, _check_choice, _check_merged, _edges, _is_int, _light, _live, _sorted_piece


class BinningCalibrator(_BinaryCalibrator):
    """Equal-frequency histogram binning (Zadrozny & Elkan 2001).

    Sorting by score, cut ``i`` of ``b`` falls at ``round(i·n/b)`` examples (halves round up), moved
    forward past any scores tied with the example before the cut so that ties share a bin (bins
    left empty by that move disappear, so fewer than ``b`` bins may result).  With sample weights,
    which act as frequency weights, the cut falls at the first tie-group boundary whose cumulative
    weight exceeds ``i·W/b − h`` with ``h`` half the smallest positive weight, capped at 1/2 (for
    unit weights exactly the rule above).  A bin's estimate is its weighted positive fraction.

    Unseen scores: ``boundary="midpoint"`` (default) puts the boundary between two bins halfway
    between the highest score of the lower bin and the lowest of the upper one (a score exactly on
    it goes up); ``"lower"`` uses the last bin whose lowest score is at or below the score.  Scores
    outside the training range go to the end bins.

    ``n_bins``: an int ``>= 1``, or ``"auto"`` to choose ``b`` from {2, 3, 4, 5, 10, 15, 20, 30,
    40, 50} by ``cv``-fold stratified cross-validation (shuffled with ``random_state`` after sorting
    the rows by score, so the split does not depend on the row order) minimising
    the weighted Brier score of the held-out folds; ties go to the smaller ``b`` and only ``b`` up to
    the smallest training-fold size are tried.  With fewer than two examples of a class CV is
    impossible and ``b = 2`` is used.  ``cv_grid_``/``cv_brier_`` record the search (empty for an
    int ``n_bins``).

    Not monotone: like the original method, each bin keeps its own positive fraction, so a higher
    score can get a lower probability when the data say so.

    Reduction (integer ``n_bins`` only): three rounds.  (1) sorted: each score range's first and
    last score and total weight, class counts, smallest weight; the client places every cut target.
    (2) sorted, on the same ranges (or unions of them): the range holding a cut finds its tie group
    from the weight below the range.  (3) unsorted: per-bin sums, lowest and highest score.  Identical
    to the in-memory rule whenever the weight sums are exact (integer or dyadic weights); otherwise a
    target that ties a cumulative weight to rounding may fall on the other side.  ``n_bins="auto"``
    is not a reduction (``reduction_start`` returns ``None``): its CV split shuffles the rows in
    score order, which no mergeable statistic reproduces, so the engine gathers the scores.
    """

    name = "binning"
    GRID: ClassVar[tuple[int, ...]] = (2, 3, 4, 5, 10, 15, 20, 30, 40, 50)
    _state_fields = {
        "n_bins_": "int",
        "lo_": "array",
        "hi_": "array",
        "values_": "array",
        "boundaries_": "array",
        "boundary_": "str",
        "cv_grid_": "array",
        "cv_brier_": "array",
        "score_kind_": "str",
    }

    @property
    def weights_as_duplicates(self) -> bool:
        """Integer weights equal duplicated rows for an integer ``n_bins``; with ``"auto"`` the
        cross-validated choice of ``b`` splits rows, not weight, so duplicates land in other folds
        (the plugin kit's weight check reads this)."""
        return self.n_bins != "auto"

    def __init__(self, n_bins="auto", cv: int = 5, random_state=0, boundary: str = "midpoint"):
        self.n_bins = n_bins
        self.cv = cv
        self.random_state = random_state
        self.boundary = boundary

    def _check_params(self):
        if not (self.n_bins == "auto" if isinstance(self.n_bins, str) else _is_int(self.n_bins, 1)):
            raise ParameterError(
                f"n_bins must be 'auto' or a positive integer, got {self.n_bins!r}; pass e.g. 10"
            )
        if not _is_int(self.cv, 2):
            raise ParameterError(f"cv must be an integer >= 2, got {self.cv!r}; pass e.g. 5")
        _check_choice("boundary", self.boundary, ("midpoint", "lower"))

    @staticmethod
    def _pooled(s, y, w):
        """Tie groups of ``(s, y, w)`` (positive weights) plus the rounding slack of the cut rule."""
        return pool_ties(s, y, w), 0.5 * min(1.0, float(np.min(w)))

    @staticmethod
    def _bins(pooled, b):
        """``(lo, hi, values)`` of ``b`` equal-frequency bins over tie groups from :meth:`_pooled`."""
        (xs, wy, ws), half = pooled
        cum = np.cumsum(ws)
        targets = np.arange(1, b) * (cum[-1] / b) - half
        cuts = np.searchsorted(cum, targets, side="right") + 1
        cuts = np.unique(cuts[(cuts > 0) & (cuts < xs.size)])
        starts = np.concatenate(([0], cuts)).astype(np.intp)
        ends = np.concatenate((cuts, [xs.size])).astype(np.intp)
        values = np.add.reduceat(wy, starts) / np.add.reduceat(ws, starts)
        return xs[starts], xs[ends - 1], values

    @staticmethod
    def _predict_bins(lo, hi, values, boundary, s):
        if boundary == "lower":
            return predict_step(lo, values, s)
        mids = 0.5 * (hi[:-1] + lo[1:])
        return values[np.searchsorted(mids, s, side="right")]

    def _choose_bins(self, s, y, w):
        from sklearn.model_selection import StratifiedKFold

        n_splits = min(int(self.cv), int(np.count_nonzero(y == 1)), int(np.count_nonzero(y == 0)))
        if n_splits < 2:
            return 2, np.empty(0), np.empty(0)
        skf = StratifiedKFold(n_splits=n_splits, shuffle=True, random_state=self.random_state)
        folds = list(skf.split(s.reshape(-1, 1), y))
        smallest = min(len(train) for train, _ in folds)
        grid = [b for b in self.GRID if b <= smallest] or [smallest]
        loss = np.zeros(len(grid))
        for train, test in folds:
            pooled = self._pooled(s[train], y[train], w[train])
            for k, b in enumerate(grid):
                lo, hi, values = self._bins(pooled, b)
                p = self._predict_bins(lo, hi, values, self.boundary, s[test])
                loss[k] += float(np.sum(w[test] * (p - y[test]) ** 2))
        brier = loss / float(np.sum(w))
        best = int(np.flatnonzero(brier <= brier.min() * (1.0 + 1e-12) + 1e-300)[0])
        return grid[best], np.asarray(grid, dtype=np.float64), brier


    def _first_request(self, kind):
        if self.n_bins == "auto":
            # The CV split draws folds from the rows in score order with a random generator: it is
            # not a function of mergeable statistics, so the engine gathers the scores instead.
            return None
        return {"op": "bin_ranges", "kind": kind, "sorted": True}

    # Round 1 (sorted): per score range its first score and total weight, plus counts and the
    # smallest weight.  The client then knows every cut target W·i/b − h and which range (or end
    # group at 0 / 1) it falls in, and each range's cumulative weight offset.
    def _ps_bin_ranges(self, scores, y, sample_weight, request):
        s, yi, w, summ = _sorted_piece(scores, y, sample_weight, request["kind"], validate=True)
        min_w = float(np.min(w)) if w.size else math.inf
        max_live = float(s.max()) if s.size else -math.inf
        s, yi, w, e0, e1 = _edges(s, yi, w, request["kind"])
        xs, _, ws = pool_ties(s, yi, w)
        return {"op": "bin_ranges", **summ, "min_w": min_w, "max_live": max_live, "e0": e0, "e1": e1,
                "cat_first": xs[:1], "cat_last": xs[-1:], "cat_total": np.cumsum(ws)[-1:]}

    def _step_bin_ranges(self, stats, request):
        kind = self._red["kind"]
        _check_merged(stats, kind)
        b = int(self.n_bins)
        # Units in score order: the group at 0 (proba), the ranges, the group at 1 (proba).
        units: list[tuple[str, float]] = []
        if stats["e0"][1] > 0:
            units.append(("e0", float(stats["e0"][1])))
        units += [("range", float(t)) for t in stats["cat_total"]]
        if stats["e1"][1] > 0:
            units.append(("e1", float(stats["e1"][1])))
        ends, starts, acc = [], [], 0.0
        for _, weight in units:
            starts.append(acc)
            acc += weight
            ends.append(acc)
        half = 0.5 * min(1.0, float(stats["min_w"]))
        targets = np.arange(1, b) * (acc / b) - half
        unit_of = np.searchsorted(np.asarray(ends), targets, side="right")
        known, t_range, t_value = [], [], []
        range_no = np.cumsum([u == "range" for u, _ in units]) - 1
        for t, u in zip(targets, unit_of):
            if u >= len(units):
                continue  # the cut would fall after the last group: no bin
            name = units[u][0]
            if name == "e0":
                known.append(0.0)
            elif name == "e1":
                known.append(1.0)
            else:
                t_range.append(int(range_no[u]))
                t_value.append(float(t))
        offsets = np.asarray([st for (u, _), st in zip(units, starts) if u == "range"], dtype=np.float64)
        self._red.update(known=known, max_live=float(stats["max_live"]))
        if not t_range:
            return self._bins_request()
        r = np.asarray(t_range, dtype=np.intp)
        # Only the ranges holding a cut travel (at most n_bins - 1 of them): their first and last
        # score and the weight below them.
        return {"op": "bin_cuts", "kind": kind, "sorted": True, "first": np.asarray(stats["cat_first"])[r],
                "last": np.asarray(stats["cat_last"])[r], "offset": offsets[r],
                "target": np.asarray(t_value, dtype=np.float64)}

    # Round 2 (sorted, the ranges of round 1 or unions of them): for each cut the range holding it
    # finds the tie group where the cumulative weight, counted from the weight below the range,
    # first exceeds the target; that group's score is the highest score of a bin.
    def _ps_bin_cuts(self, scores, y, sample_weight, request):
        s, yi, w, _ = _sorted_piece(scores, y, sample_weight, request["kind"], validate=False)
        s, yi, w, _, _ = _edges(s, yi, w, request["kind"])
        xs, _, ws = pool_ties(s, yi, w)
        found: list[float] = []
        for first, last, offset, target in zip(request["first"], request["last"], request["offset"],
                                               request["target"]):
            if xs.size == 0 or last < xs[0] or first > xs[-1]:
                continue  # the range is not in this piece
            k = int(np.searchsorted(xs, first))
            if first < xs[0] or last > xs[-1] or xs[k] != first:
                raise RuntimeError(
                    "binning's second round needs whole score ranges of its first round (a piece "
                    f"spans [{xs[0]!r}, {xs[-1]!r}], which cuts the range [{first!r}, {last!r}]); "
                    "cut the data with the same boundaries in every round"
                )
            cum = np.cumsum(np.concatenate(([offset], ws[k:])))[1:]
            j = min(int(np.searchsorted(cum, target, side="right")), cum.size - 1)
            found.append(float(xs[k + j]))
        return {"op": "bin_cuts", "cat_u": np.asarray(found, dtype=np.float64)}

    def _step_bin_cuts(self, stats, request):
        self._red["known"] = list(self._red["known"]) + [float(u) for u in stats["cat_u"]]
        return self._bins_request()

    def _bins_request(self):
        u = np.unique(np.asarray(self._red["known"], dtype=np.float64))
        u = u[u < self._red["max_live"]]  # a cut after the highest group makes no bin
        self._red["u"] = u
        return {"op": "bin_sums", "kind": self._red["kind"], "sorted": False, "u": u}

    # Round 3 (unsorted): per bin (scores in (u_{k-1}, u_k]) the sums of w·y and w, lowest and
    # highest score.
    def _ps_bin_sums(self, scores, y, sample_weight, request):
        s, yi, w = _light(scores, y, sample_weight)
        if request["kind"] == "proba":
            s = np.clip(s, 0.0, 1.0)
        s, yi, w = _live(s, yi, w)
        u = request["u"]
        nb = u.size + 1
        idx = np.searchsorted(u, s, side="left")  # bin k holds u[k-1] < s <= u[k]
        lo = np.full(nb, math.inf)
        hi = np.full(nb, -math.inf)
        np.minimum.at(lo, idx, s)
        np.maximum.at(hi, idx, s)
        return {"op": "bin_sums", "wy": np.bincount(idx, weights=w * yi, minlength=nb),
                "w": np.bincount(idx, weights=w, minlength=nb), "min_lo": lo, "max_hi": hi}

    def _step_bin_sums(self, stats, request):
        lo, hi = np.asarray(stats["min_lo"], dtype=np.float64), np.asarray(stats["max_hi"], dtype=np.float64)
        self._finish(
            n_bins_=int(self.n_bins), lo_=lo, hi_=hi, values_=stats["wy"] / stats["w"],
            boundaries_=0.5 * (hi[:-1] + lo[1:]), boundary_=self.boundary,
            cv_grid_=np.empty(0), cv_brier_=np.empty(0),
            bin_weights_=np.asarray(stats["w"], dtype=np.float64),
            bin_positives_=np.asarray(stats["wy"], dtype=np.float64),
        )
        return None

    # Stored statistics for ``calengine recalibrate --update``: each bin's total weight and positive
    # weight, so new data's counts can be added to the old ones exactly.  Optional in the state, so
    # models saved before they existed still load (they cannot be updated, only recalibrated).
    _stat_fields: ClassVar[tuple[str, ...]] = ("bin_weights_", "bin_positives_")

    def to_state(self) -> dict[str, Any]:
        out = super().to_state()
        for key in self._stat_fields:
            if getattr(self, key, None) is not None:
                out[key] = np.array(getattr(self, key), dtype=np.float64)
        return out

    def from_state(self, state: dict[str, Any]) -> "BinningCalibrator":
        super().from_state(state)
        for key in self._stat_fields:
            self.__dict__.pop(key, None)
            if key in state:
                val = np.array(state[key], dtype=np.float64).reshape(-1)
                if val.shape != self.values_.shape:
                    raise ModelFormatError(
                        f"calibrator 'binning' state '{key}' has {val.size} entries for {self.values_.size}"
                        " bins; the model is damaged, refit it"
                    )
                setattr(self, key, val)
        return self

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        if self.n_bins != "auto":
            return self._fit_protocol(scores, y, sample_weight, score_kind)
        self._check_params()
        s, yi, w = self._check_fit(scores, y, sample_weight, score_kind)
        keep = w > 0
        # Sorting once up front makes every CV training fold an already sorted subsequence, and
        # makes the CV split independent of the row order (only the multiset of rows matters).
        order = np.argsort(s[keep], kind="stable")
        s, yi, w = s[keep][order], yi[keep][order], w[keep][order]
        b, self.cv_grid_, self.cv_brier_ = self._choose_bins(s, yi, w)
        self.n_bins_ = int(b)
        self.lo_, self.hi_, self.values_ = self._bins(self._pooled(s, yi, w), self.n_bins_)
        self.boundaries_ = 0.5 * (self.hi_[:-1] + self.lo_[1:])
        self.boundary_ = self.boundary
        # the bins' sums (bin k: hi_[k-1] < s <= hi_[k]), stored for recalibrate --update
        idx = np.searchsorted(self.hi_[:-1], s, side="left")
        self.bin_weights_ = np.bincount(idx, weights=w, minlength=self.values_.size).astype(np.float64)
        self.bin_positives_ = np.bincount(idx, weights=w * yi, minlength=self.values_.size).astype(np.float64)
        return self

    def predict(self, scores) -> np.ndarray:
        s = self._check_predict(scores)
        return self._predict_bins(self.lo_, self.hi_, self.values_, self.boundary_, s)
