"""MCGrad multicalibration (Tax et al., "MCGrad: Multicalibration at Web Scale", KDD 2026, arXiv
2509.19884): the algorithm on arrays held in one process, with XGBoost (or LightGBM,
:mod:`calengine.methods.mcgrad_boosters`) as the round's booster.

This module is the algorithm's core and its in-process reference; :mod:`calengine.fit.mcgrad.cluster`
runs the same rounds with each booster trained across the Dask workers; :mod:`calengine.fit.mcgrad.table`
is ``calengine fit --method mcgrad --by ...`` over a Parquet table and
:mod:`calengine.model.mcgrad_member` stores and scores the rounds.

The algorithm, as the paper and its reference implementation (facebookincubator/MCGrad) run it for a
two-class problem:

* A row is its current logit ``f`` (round 0: the logit of the score to calibrate) and its segment
  features ``x``: each ``--by`` column as one **categorical** feature, its value's code among the
  values seen at fit time (sorted), as the reference hands LightGBM its categorical columns.  The trees
  split a categorical feature by a set of its values (XGBoost's partition-based categorical splits), so
  one split can put every segment with a like residual on one side, and the features take one column
  per ``--by`` column whatever the number of segments (a dense one-hot took one per *value*: 1,000
  segments at 10^5 rows were 2.3-2.8 GiB).  A value unseen at fit time, or a missing one, is a missing
  code (NaN): it follows each split's default branch, which the trees learnt from the rows with a
  missing value (or, with none, XGBoost's default).
* Round ``r`` trains a gradient-boosted booster on the features ``[x, f]`` to the log loss of the labels
  with **base margin** ``f``: its trees fit the log-loss gradient of the current prediction, so they
  learn corrections ``Δ(x, f)`` of the logit wherever a segment, or a region of scores within one, is
  off.  Then ``f ← α_r · (f + Δ)``, where ``α_r`` (the *unshrink* factor) is the logistic regression
  without intercept of the labels on the new logits clipped to ±10 (:func:`unshrink_factor`), undoing
  the shrinkage the boosters' learning rate and regularisation leave behind.
* Early stopping on held-out rows: a seeded share ``holdout`` of the rows is set aside, rounds are
  fitted on the rest while the held-out log loss falls (``patience`` more rounds are tried after the
  best one), and the number of rounds with the lowest held-out log loss (0 if none helps) is then fitted
  again on every row, as the reference does.

The booster's parameters default to the reference's tuned LightGBM settings carried over to XGBoost:
94 trees per round, learning rate 0.0287, depth 2 (LightGBM's 5 leaves; a depth-2 XGBoost tree has at
most 4), L2 0.0091, minimum split gain 0.15 and a minimum child weight standing in for LightGBM's 160
rows per leaf (XGBoost counts hessian: ``160 · p(1−p)`` at p ≈ 0.25 is 30).

Where this departs from the reference, and why: ``α`` is found by Newton's method on the (convex)
one-parameter log loss, projected onto the reference's bounds [1e-8, 50], rather than by a bounded Brent
search: each Newton step needs only a gradient and a curvature, sums over rows that a partitioned fit can
take as a reduction.  The holdout is a seeded row draw, not a stratified split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import DataError, ParameterError

__all__ = ["EarlyStopping", "MCGradParams", "MCGradFit", "fit_mcgrad", "unshrink_factor", "segment_codes", "logit"]

#: logits are clipped to this magnitude before the unshrink regression (the reference's epsilon)
UNSHRINK_CLIP = 10.0
#: the reference's bounds of the unshrink factor
UNSHRINK_BOUNDS = (1e-8, 50.0)
#: scores are clipped to [EPS, 1 - EPS] before their logit
EPS = 1e-12
#: the most rounds, and trees per round, a user may ask for
MAX_ROUNDS = 1000
MAX_TREES = 10_000


def logit(p) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), EPS, 1.0 - EPS)
    return np.log(p) - np.log1p(-p)


def sigmoid(f: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * f))


@dataclass(frozen=True)
class MCGradParams:
    """``--method-param`` of mcgrad: ``rounds`` (the most rounds; with ``early_stopping`` the held-out
    rows pick how many), ``early_stopping``, ``patience`` (rounds tried after the best one),
    ``holdout`` (share of rows held out for early stopping), ``booster`` (the library of the rounds,
    ``xgboost`` or ``lightgbm``: :mod:`calengine.methods.mcgrad_boosters`), and the round booster's ``trees``,
    ``learning_rate``, ``max_depth``, ``min_child_weight``, ``reg_lambda``, ``gamma`` (minimum split
    gain) and ``max_bin``."""

    rounds: int = 100
    early_stopping: bool = True
    patience: int = 0
    holdout: float = 0.2
    trees: int = 94
    learning_rate: float = 0.028729759162731475
    max_depth: int = 2
    min_child_weight: float = 30.0
    reg_lambda: float = 0.009131373863997217
    gamma: float = 0.15007305226251808
    max_bin: int = 256
    booster: str = "xgboost"

    def __post_init__(self) -> None:
        from .mcgrad_boosters import LIBRARIES

        if self.booster not in LIBRARIES:
            raise ParameterError(f"mcgrad's booster must be one of {', '.join(LIBRARIES)}, got {self.booster!r}")
        def integer(name, lo, hi):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
                raise ParameterError(f"mcgrad's {name} must be an integer from {lo} to {hi}, got {v!r}")

        integer("rounds", 1, MAX_ROUNDS)
        integer("patience", 0, MAX_ROUNDS)
        integer("trees", 1, MAX_TREES)
        integer("max_depth", 1, 16)
        integer("max_bin", 2, 65_536)
        if not isinstance(self.early_stopping, bool):
            raise ParameterError(f"mcgrad's early_stopping must be true or false, got {self.early_stopping!r}")
        for name, lo, hi, open_lo in (("holdout", 0.0, 0.9, True), ("learning_rate", 0.0, 1.0, True),
                                      ("min_child_weight", 0.0, 1e12, False), ("reg_lambda", 0.0, 1e12, False),
                                      ("gamma", 0.0, 1e12, False)):
            v = getattr(self, name)
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v <= hi
            ok = ok and (v > lo if open_lo else v >= lo)
            if not ok:
                bound = f"in ({lo:g}, {hi:g}]" if open_lo else f"from {lo:g} to {hi:g}"
                raise ParameterError(f"mcgrad's {name} must be a number {bound}, got {v!r}")

    def booster_params(self, seed: int) -> dict:
        """XGBoost's parameters of a round's booster.  ``base_score`` 0.5 (a margin of 0): the round's
        starting margin is always the row's base margin, never an intercept XGBoost would estimate."""
        return {
            "objective": "binary:logistic", "tree_method": "hist", "eta": float(self.learning_rate),
            "max_depth": int(self.max_depth), "min_child_weight": float(self.min_child_weight),
            "lambda": float(self.reg_lambda), "gamma": float(self.gamma), "max_bin": int(self.max_bin),
            "base_score": 0.5, "seed": int(seed), "verbosity": 0, "eval_metric": "logloss",
        }


def segment_codes(columns: list[np.ndarray], levels: list[list[str]] | None = None):
    """``(X, levels)``: the segment columns (arrays of values, read as strings) as float32 codes, column
    ``j`` a value's index in ``levels[j]`` (default: each column's sorted distinct values); a missing
    value, or one not in ``levels[j]``, is NaN (a missing category)."""
    import pandas as pd

    strings = [pd.Series(c, copy=False).astype("string") for c in columns]
    if levels is None:
        levels = [sorted(str(v) for v in s.dropna().unique()) for s in strings]
    n = len(strings[0]) if strings else 0
    X = np.empty((n, len(strings)), dtype=np.float32)
    for j, (s, lv) in enumerate(zip(strings, levels)):
        codes = pd.Index(lv, dtype="string").get_indexer(s)  # -1: a missing value, or one not in lv
        X[:, j] = np.where(codes >= 0, codes, np.nan)
    return X, [list(lv) for lv in levels]


def unshrink_sums(f: np.ndarray, y: np.ndarray, w: np.ndarray, alpha: float) -> tuple[float, float]:
    """Gradient and curvature in α of the weighted log loss of ``sigmoid(α · clip(f, ±10))`` over these
    rows: sums, so blocks of rows add (a reduction over partitions)."""
    z = np.clip(np.asarray(f, dtype=np.float64), -UNSHRINK_CLIP, UNSHRINK_CLIP)
    p = sigmoid(alpha * z)
    return float(np.sum(w * (p - y) * z)), float(np.sum(w * p * (1.0 - p) * z * z))


def unshrink_factor(f: np.ndarray, y: np.ndarray, w: np.ndarray | None = None, *, tol: float = 1e-12,
                    max_iter: int = 100, sums=None) -> float:
    """The α minimising the weighted log loss of ``sigmoid(α · clip(f, ±10))`` against ``y``, in
    [1e-8, 50]: Newton's method from α = 1 on the convex one-parameter loss, each step projected onto
    the bounds (module docstring).  ``sums(alpha)``: the summed :func:`unshrink_sums` of rows held
    elsewhere (then ``f``, ``y``, ``w`` are ignored)."""
    if sums is None:
        y = np.asarray(y, dtype=np.float64)
        w = np.ones_like(y) if w is None else np.asarray(w, dtype=np.float64)

        def sums(alpha):
            return unshrink_sums(f, y, w, alpha)

    lo, hi = UNSHRINK_BOUNDS
    alpha = 1.0
    for _ in range(max_iter):
        grad, curv = sums(alpha)
        if curv <= 0.0:
            break
        step = grad / curv
        new = min(max(alpha - step, lo), hi)
        if abs(new - alpha) <= tol * max(1.0, alpha):
            alpha = new
            break
        alpha = new
    return float(alpha)


def _log_loss(f: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    # -log sigmoid(f) = logaddexp(0, -f); -log(1 - sigmoid(f)) = logaddexp(0, f)
    return float(np.sum(w * np.where(y > 0, np.logaddexp(0.0, -f), np.logaddexp(0.0, f))) / np.sum(w))


@dataclass
class MCGradFit:
    """A fitted MCGrad: per round the booster (``library``'s bytes: XGBoost's UBJSON, LightGBM's text) and
    the unshrink factor; ``levels``: the values of each segment column, in code order; ``holdout_loss``:
    the held-out log loss after 0, 1, ... rounds of the early-stopping pass (empty without early stopping)."""

    boosters: list[bytes]
    alphas: list[float]
    levels: list[list[str]]
    holdout_loss: list[float] = field(default_factory=list)
    library: str = "xgboost"

    def apply(self, f: np.ndarray, X: np.ndarray) -> np.ndarray:
        """The calibrated logits of rows with logits ``f`` and segment codes ``X`` (:func:`segment_codes`)."""
        from .mcgrad_boosters import library

        lib = library(self.library)
        f = np.asarray(f, dtype=np.float64).copy()
        for blob, alpha in zip(self.boosters, self.alphas):
            f = alpha * (f + lib.delta(lib.load(blob), X, f))
        return f

    def predict_proba(self, scores, X) -> np.ndarray:
        """Calibrated probabilities of the positive class for probability ``scores``."""
        return sigmoid(self.apply(logit(scores), X))


def _round(lib, params: MCGradParams, X, f, y, w, seed: int):
    """One round on rows ``(X, f, y, w)`` with library ``lib``: ``(booster, alpha, new f)``."""
    booster = lib.train(params, X, f, y, w, seed)
    g = f + lib.delta(booster, X, f)
    alpha = unshrink_factor(g, y, w)
    return booster, alpha, alpha * g


class EarlyStopping:
    """The held-out log loss after 0, 1, ... rounds; ``best``: the number of rounds with the lowest
    (the first of ties); :meth:`add` says when ``patience`` rounds after the best have not improved."""

    def __init__(self, first: float, patience: int) -> None:
        self.losses, self.best, self.since, self.patience = [float(first)], 0, 0, int(patience)

    def add(self, loss: float) -> bool:
        """Record the next round's loss; True: stop."""
        self.losses.append(float(loss))
        if self.losses[-1] < self.losses[self.best]:
            self.best, self.since = len(self.losses) - 1, 0
            return False
        self.since += 1
        return self.since > self.patience


def holdout_mask(n: int, share: float, seed: int) -> np.ndarray:
    """A seeded draw of ``share`` of ``n`` rows (True: held out)."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 0x4D434744]))  # "MCGD"
    return rng.random(n) < share


def fit_mcgrad(scores, y, segments: list[np.ndarray], params: MCGradParams | None = None, *, weight=None,
               seed: int = 0) -> MCGradFit:
    """MCGrad on arrays (module docstring): ``scores`` the probabilities to calibrate, ``y`` 0/1 labels,
    ``segments`` one array of values per segment column, ``weight`` row weights (None: 1), ``seed``
    seeds the holdout draw and every booster (round ``r``'s booster: ``seed + r``)."""
    params = MCGradParams() if params is None else params
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    f0 = logit(scores).reshape(-1)
    if y.size != f0.size or not segments or any(len(c) != y.size for c in segments):
        raise DataError("mcgrad needs one score, one label and one value of each segment column per row")
    if not np.all((y == 0) | (y == 1)) or y.min() == y.max():
        raise DataError("mcgrad needs labels 0 and 1, both present")
    w = np.ones_like(y) if weight is None else np.asarray(weight, dtype=np.float64).reshape(-1)
    from .mcgrad_boosters import library

    lib = library(params.booster)
    X, levels = segment_codes(segments)
    rounds = int(params.rounds)
    history: list[float] = []
    if params.early_stopping:
        held = holdout_mask(y.size, params.holdout, seed)
        fit_rows, val_rows = np.flatnonzero(~held), np.flatnonzero(held)
        if fit_rows.size == 0 or val_rows.size == 0 or np.ptp(y[fit_rows]) == 0:
            raise DataError(f"mcgrad's early stopping holds out {params.holdout:g} of {y.size} rows and keeps no rows"
                            " of both classes on one side; give more rows or set early_stopping=false")
        f_fit, f_val = f0[fit_rows], f0[val_rows]
        stop = EarlyStopping(_log_loss(f_val, y[val_rows], w[val_rows]), params.patience)
        for r in range(rounds):
            booster, alpha, f_fit = _round(lib, params, X[fit_rows], f_fit, y[fit_rows], w[fit_rows], seed + r)
            f_val = alpha * (f_val + lib.delta(booster, X[val_rows], f_val))
            if stop.add(_log_loss(f_val, y[val_rows], w[val_rows])):
                break
        rounds, history = stop.best, stop.losses
    boosters, alphas, f = [], [], f0
    for r in range(rounds):
        booster, alpha, f = _round(lib, params, X, f, y, w, seed + r)
        boosters.append(lib.to_bytes(booster))
        alphas.append(alpha)
    return MCGradFit(boosters, alphas, levels, history, params.booster)
