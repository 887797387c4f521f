"""Label shift: new class priors from unlabelled rows, and probabilities put on those priors.

Under *label shift* (prior shift) the class balance changes and the class-conditional distributions
p(x | y) stay.  Bayes' rule then gives the posteriors on the new population from the old ones,

    p'(c | x) = p(c | x) · π'_c / π_c / Σ_j p(j | x) · π'_j / π_j,

with π the priors the model's probabilities are calibrated to and π' the new ones: the class-prior
form of :mod:`calengine.methods.sampling` with "rates" r_c = π_c / π'_c, which this module reuses
(:func:`calengine.methods.sampling.correct`) rather than carrying a second reweighting.

Two estimators of π' from rows without labels:

* **EM** (Saerens, Latinne & Decaestecker 2002, "Adjusting the outputs of a classifier to new a
  priori probabilities: a simple procedure", Neural Computation 14): start at π' = π; E-step, every
  row's posteriors re-weighted by π'/π as above; M-step, π' = the mean of those re-weighted posteriors
  over the rows.  It is the maximum-likelihood estimate of the priors when the model is calibrated
  for the old population.  Each step is one sum over rows (:func:`em_sums`), so on a partitioned
  table it is one reduction over fragments; the sums are fixed-point
  (:func:`calengine.reductions.exact.fixed_sum` with scale 1: every term is a probability), so the
  estimate is the same bit for bit however the rows are cut into fragments, and the same as the
  in-memory :func:`em_priors`.
* **BBSE** (Lipton, Wang & Smola 2018, "Detecting and correcting for label shift with black box
  predictors", ICML): with C[i, j] = P(ŷ = i, y = j) the joint distribution of hard predictions and
  labels on labelled rows of the *old* population and μ[i] = P(ŷ = i) on the new rows,
  q(ŷ) = Σ_y C[ŷ, y] w_y with w_y = π'_y / π_y, so w = C⁻¹ μ and π' = w ⊙ (column sums of C).  The
  solution is projected onto the probability simplex (Euclidean projection, Duchi et al. 2008), since
  sampling noise can make it negative.  It assumes only that C is invertible, not that the model is
  calibrated: a check on EM.  A singular C (a class never predicted) is solved by least squares.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import DataError, ParameterError
from ..reductions.exact import fixed_sum, fixed_sum_counts, fixed_to_float
from ..reductions.tables import is_integral
from .sampling import correct

#: estimated priors below this are kept at it: a class the EM drives towards 0 keeps a (tiny) prior,
#: so the adapted model's rates stay finite and a row can still be given that class
PRIOR_FLOOR = 1e-9
#: bounds of ``max_iter`` (the CLI's ``--max-iter``; calengine.cli.limits has the same row)
MAX_ITER_BOUNDS = (1, 10_000)
#: the defaults of ``tol`` and ``max_iter``
DEFAULT_TOL = 1e-6
DEFAULT_MAX_ITER = 1000


def shifted_posteriors(P: np.ndarray, train: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``P`` (n, k), calibrated to priors ``train``, re-weighted to priors ``new`` (module docstring)."""
    return correct(P, np.asarray(train, dtype=np.float64) / np.asarray(new, dtype=np.float64))


def em_sums(P: np.ndarray, train: np.ndarray, new: np.ndarray, weights=None, scale: float | None = None) -> list[int]:
    """One EM step's statistic of a block of rows: per class, the fixed-point sum of the re-weighted
    posteriors (units of 2**-62 of ``scale``; integers, so blocks merge by addition, in any order).

    ``weights``: the rows' weights (counts).  With ``scale`` None they must be integers: each row's
    units are added ``weight`` times (:func:`calengine.reductions.exact.fixed_sum_counts`), so a row of
    weight 2 adds what the row twice adds.  Fractional weights need ``scale``, a bound on every
    weight known to every block before the step (the table's largest weight): the terms are the
    weighted posteriors, summed against that scale.  Without weights ``scale`` is 1."""
    Q = shifted_posteriors(P, train, new)
    if weights is None:
        return [fixed_sum(Q[:, c], 1.0) for c in range(Q.shape[1])]
    if scale is None:
        return [fixed_sum_counts(Q[:, c], weights, 1.0) for c in range(Q.shape[1])]
    w = np.asarray(weights, dtype=np.float64)
    return [fixed_sum(Q[:, c] * w, scale) for c in range(Q.shape[1])]


def check_em_options(tol, max_iter) -> None:
    """``tol`` a number in (0, 1), ``max_iter`` an integer within :data:`MAX_ITER_BOUNDS`."""
    lo, hi = MAX_ITER_BOUNDS
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or not lo <= max_iter <= hi:
        raise ParameterError(f"max_iter must be an integer from {lo} to {hi} (EM steps, each one pass over the"
                             f" rows' posteriors), got {max_iter!r}", parameter="max_iter")
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0.0 < float(tol) < 1.0:
        raise ParameterError(f"tol must be a number in (0, 1) (the largest change of a prior that ends EM), got {tol!r}",
                             parameter="tol")


def check_priors(priors, k: int, what: str) -> np.ndarray:
    """``k`` positive finite priors, normalised to sum 1; DataError naming ``what`` otherwise."""
    p = np.asarray(priors, dtype=np.float64).reshape(-1)
    if p.shape != (k,) or not np.all(np.isfinite(p)) or np.any(p <= 0):
        raise DataError(f"{what} must be {k} positive class priors, got {p.tolist()}")
    return p / p.sum()


@dataclass
class EMResult:
    """The EM estimate and how it got there."""

    priors: np.ndarray
    iterations: int
    converged: bool
    #: the largest change of a prior in the last step
    last_change: float
    history: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"priors": [float(p) for p in self.priors], "iterations": self.iterations,
                "converged": self.converged, "last_change": float(self.last_change)}


def run_em(step: Callable[[np.ndarray], list[int]], n_rows, train: np.ndarray, *, tol: float = DEFAULT_TOL,
           max_iter: int = DEFAULT_MAX_ITER, scale: float = 1.0) -> EMResult:
    """Saerens et al.'s EM from the start π' = ``train``: ``step(new)`` returns the per-class
    fixed-point sums of the rows' posteriors re-weighted to ``new`` (:func:`em_sums`, summed over
    every block of rows, in units of ``scale``), ``n_rows`` the number of rows (their total weight
    when rows are weighted).  Stops when no prior moves by ``tol`` or more, or after ``max_iter``
    steps (``converged`` False)."""
    check_em_options(tol, max_iter)
    if not n_rows > 0:
        raise DataError("the table to adapt to has no rows; label-shift adaptation needs unlabelled rows")
    train = check_priors(train, len(train), "the training priors")
    new = train.copy()
    change, history = np.inf, [new.copy()]
    for it in range(1, int(max_iter) + 1):
        sums = step(new)
        updated = np.array([fixed_to_float(s, scale) for s in sums]) / n_rows
        updated = np.maximum(updated, PRIOR_FLOOR)
        updated /= updated.sum()
        change = float(np.max(np.abs(updated - new)))
        new = updated
        history.append(new.copy())
        if change < tol:
            return EMResult(new, it, True, change, history)
    return EMResult(new, int(max_iter), False, change, history)


def em_priors(P: np.ndarray, train, *, tol: float = DEFAULT_TOL, max_iter: int = DEFAULT_MAX_ITER,
              sample_weight=None) -> EMResult:
    """EM on posteriors held in memory, ``P`` (n, k) calibrated to priors ``train``: the same
    fixed-point sums as the reduction over fragments, so the same estimate bit for bit.
    ``sample_weight``: non-negative row weights (counts; integer weights give the bits of the rows
    repeated, fractional ones are summed against the largest weight, as the reduction does)."""
    P = np.asarray(P, dtype=np.float64)
    if P.ndim != 2 or P.shape[1] != len(train):
        raise DataError(f"posteriors must be an (n, {len(train)}) array, got shape {P.shape}")
    train = np.asarray(train, dtype=np.float64)
    if sample_weight is None:
        return run_em(lambda new: em_sums(P, train, new), P.shape[0], train, tol=tol, max_iter=max_iter)
    w, total, scale = weight_terms(sample_weight, P.shape[0])
    return run_em(lambda new: em_sums(P, train, new, w, scale), total, train, tol=tol, max_iter=max_iter,
                  scale=1.0 if scale is None else scale)


def weight_terms(sample_weight, n: int):
    """``(weights, total, scale)`` for :func:`em_sums` from in-memory row weights: int64 counts, their
    int total and scale None when every weight is an integer (below 2**53), else float64 weights,
    their total (a fixed-point sum against the largest weight, as the reduction takes it) and the
    largest weight as the scale.  Negative, NaN or infinite weights are one line."""
    w = np.asarray(sample_weight, dtype=np.float64).reshape(-1)
    if w.shape != (n,):
        raise DataError(f"sample_weight has {w.size} values but there are {n} rows; pass one weight per row")
    if not np.all(np.isfinite(w)) or (w.size and w.min() < 0):
        raise DataError("sample_weight must be finite and non-negative; give every row a weight >= 0")
    from ..reductions.column_stats import MAX_WEIGHT

    if w.size and w.max() > MAX_WEIGHT:
        raise DataError(f"sample_weight holds {w.max():g}; weights must be at most {MAX_WEIGHT:g}: divide them by a"
                        " constant")
    if is_integral(w):
        c = w.astype(np.int64)
        return c, int(c.sum()), None
    scale = float(w.max())
    return w, fixed_to_float(fixed_sum(w, scale), scale), scale


def project_simplex(v: np.ndarray) -> np.ndarray:
    """The point of the probability simplex nearest to ``v`` (Euclidean; Duchi et al. 2008, Fig. 1)."""
    v = np.asarray(v, dtype=np.float64)
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    rho = np.flatnonzero(u - css / np.arange(1, v.size + 1) > 0)[-1]
    return np.maximum(v - css[rho] / (rho + 1.0), 0.0)


def bbse_priors(joint_counts: np.ndarray, predicted_counts: np.ndarray) -> dict:
    """BBSE's estimate (module docstring) from integer counts: ``joint_counts[i, j]`` labelled rows of
    the old population predicted ``i`` with label ``j``, ``predicted_counts[i]`` new rows predicted ``i``.

    Returns ``{"priors", "raw", "weights", "condition"}``: the estimate on the simplex, the solution
    before projection, the importance weights w = π'/π of the labelled table, and C's condition number
    (large: the classes are hard to tell apart and the estimate is noisy)."""
    C = np.asarray(joint_counts, dtype=np.float64)
    mu = np.asarray(predicted_counts, dtype=np.float64)
    if C.sum() <= 0:
        raise DataError("the labelled table has no rows with a label; BBSE needs labelled rows of the old population")
    if mu.sum() <= 0:
        raise DataError("the table to adapt to has no rows; label-shift adaptation needs unlabelled rows")
    C = C / C.sum()
    mu = mu / mu.sum()
    source = C.sum(axis=0)
    if np.any(source <= 0):
        missing = int(np.flatnonzero(source <= 0)[0])
        raise DataError(f"the labelled table has no rows of class index {missing}; BBSE needs labelled rows of"
                        " every class of the model")
    w = np.linalg.lstsq(C, mu, rcond=None)[0]
    raw = w * source
    return {"priors": project_simplex(raw), "raw": raw, "weights": w, "condition": float(np.linalg.cond(C))}


def adapted_rates(parent_rates: np.ndarray | None, train: np.ndarray, new: np.ndarray) -> np.ndarray:
    """The class rates (:mod:`calengine.methods.sampling`) of a model whose probabilities are those of
    a model with ``parent_rates`` (None: no correction) moved from priors ``train`` to ``new``:
    p' ∝ p_parent · new / train ∝ p_raw / (r_parent · train / new).  Scaled so the largest rate is 1."""
    k = len(train)
    base = np.ones(k) if parent_rates is None else np.asarray(parent_rates, dtype=np.float64)
    rates = base * np.asarray(train, dtype=np.float64) / np.maximum(np.asarray(new, dtype=np.float64), PRIOR_FLOOR)
    return rates / rates.max()
