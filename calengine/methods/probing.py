"""Pure algorithmic core of Langford & Zadrozny's Probing reduction, costing and bagging votes.

Probing turns a learner of *weighted binary classifiers* into a class-probability estimator: a
classifier trained with positives weighted ``(1-p)/p`` and negatives ``1`` answers "is
``D(y=1|x) > p``?", so classifiers at a few well-chosen thresholds bracket ``D(y=1|x)`` in an interval,
and the prediction is the interval's minimax point for the loss of interest (cross-entropy or
squared error).  This module holds everything about that reduction that does not touch data
distribution: the thresholds and intervals (:class:`ProbingSchedule`, the state of the paper's
Algorithm 1), the predictor (:func:`probing_predict`, Algorithm 2), the weights, costing's rejection
sampling for learners that ignore weights, and the vote arithmetic shared with bagging.

Why a schedule object instead of one loop: Algorithm 1 picks each threshold from the votes of the
classifiers learned so far, which makes it inherently sequential.  The Dask engine drives it in
*rounds*: :meth:`ProbingSchedule.next_thresholds` hands out up to ``batch`` thresholds at once (one
Dask task each), the engine sends back their votes, and the schedule picks the next round.  With
``batch=1`` this is exactly the paper's algorithm; :func:`run_probing` is the reference sequential
driver built on the same state.

Nothing here uses a global random state: costing takes a :class:`numpy.random.Generator` that the
caller seeds from (user seed, classifier index, costing round), so results do not depend on which
worker ran what.

Errors: settings a user can choose (``t``, ``loss``, ``batch``, ``interval_rule``, ``clip``,
``floor``, thresholds ``p``) raise :class:`calengine.errors.ParameterError`; malformed arrays handed
over by calling code (votes out of range, wrong shapes, labels other than 0/1) raise
:class:`ValueError`, because they signal a bug in the caller rather than a bad command line.

Reference values (minimax points, the worked oracle run) are in the project notes, section a.

The module is long (~720 lines) on purpose: it is the paper's reduction in one place, Algorithm 1's
schedule, Algorithm 2's predictor and the weights/costing they share, with no data distribution in it.
Split by algorithm, the threshold and interval checks both algorithms must apply identically would
have to live apart from both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.special import expit, rel_entr

from ..errors import ParameterError

__all__ = [
    "LOSSES",
    "INTERVAL_RULES",
    "DEFAULT_CLIP",
    "minimax_ce",
    "minimax_mse",
    "minimax_point",
    "interval_regret",
    "positive_weight",
    "threshold_from_weight",
    "importance_weights",
    "acceptance_from_costs",
    "costing_acceptance",
    "costing_sample",
    "single_class_label",
    "ProbingSchedule",
    "probing_predict",
    "run_probing",
    "bagging_predict",
    "majority_vote",
    "k_minus_one_probabilities",
]

log = logging.getLogger(__name__)

#: Supported probabilistic losses, as spelled in method parameters.
LOSSES = ("cross_entropy", "squared")

#: Interval-selection rules per loss; the first entry is the paper's rule and the default.
#: ``"kl"``: ``|S_a| KL(a || p_hat)``.  ``"width"``: ``|S_a| (b - a)`` as printed in the paper for
#: squared error.  ``"width_squared"``: ``|S_a| (b - a)^2``, proportional to the actual worst-case
#: squared-error regret ``(b - a)^2 / 4`` of the interval (notes §a, recommendation 4).
INTERVAL_RULES = {"cross_entropy": ("kl",), "squared": ("width", "width_squared")}

#: The paper's clipping of predictions (§4.2): "project p_hat(x) into [0.001, 0.999]".
DEFAULT_CLIP = (0.001, 0.999)

#: Intervals narrower than this get the midpoint as their cross-entropy minimax point (notes §a,
#: recommendation 1): the exact point tends to the midpoint anyway and floating point cannot tell
#: them apart usefully.
_DEGENERATE_WIDTH = 1e-12

#: Relative tolerance under which two interval scores count as tied (then the leftmost wins).
_TIE_RTOL = 1e-12


# --------------------------------------------------------------------------------------------------
# Minimax points and interval scores
# --------------------------------------------------------------------------------------------------


def _check_interval(a, b) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ParameterError("interval end points must be finite numbers; pass a, b with 0 <= a <= b <= 1")
    if np.any(a < 0) or np.any(b > 1) or np.any(a > b):
        raise ParameterError("an interval [a, b] must satisfy 0 <= a <= b <= 1; pass sorted end points in [0, 1]")
    return a, b


def _log1p_ratio(r: np.ndarray) -> np.ndarray:
    """``log1p(r) / r`` for ``r > 0``, with its limits 1 at ``r = 0`` and 0 at ``r = inf``."""
    out = np.ones_like(r)
    finite = np.isfinite(r) & (r > 0)
    out[finite] = np.log1p(r[finite]) / r[finite]
    out[np.isposinf(r)] = 0.0
    return out


def minimax_ce(a, b):
    """Cross-entropy minimax point of ``[a, b]``: ``1 / (1 + exp((H(b) - H(a)) / (b - a)))``.

    The point equalises ``KL(a || p) = KL(b || p)``, so it minimises the worst-case log-loss regret
    when all we know is that ``D(y=1|x)`` lies in ``[a, b]``.  Conventions (notes §a, rec. 1):
    ``H(0) = H(1) = 0``; intervals narrower than 1e-12 return the midpoint ``(a + b) / 2``.

    The entropy difference quotient is evaluated in a cancellation-free form,
    ``ln((1-a)/b) + g(d/(1-b)) - g(d/a)`` with ``d = b - a`` and ``g(r) = log1p(r)/r``, which equals
    ``(H(b) - H(a)) / d`` exactly but stays accurate for narrow intervals away from 0 (the naive
    quotient loses ~``1e-16 / d`` absolute accuracy there, enough to push the point outside a
    1e-10-wide interval).  The result is always inside ``[a, b]``.

    Accepts scalars or broadcastable arrays; returns a float for scalar input, else an array.
    Raises ParameterError unless ``0 <= a <= b <= 1``.
    """
    a, b = _check_interval(a, b)
    a, b = np.broadcast_arrays(a, b)
    d = b - a
    wide = d >= _DEGENERATE_WIDTH
    out = np.array((a + b) / 2.0, dtype=float)
    if np.any(wide):
        aw, bw, dw = a[wide], b[wide], d[wide]
        with np.errstate(divide="ignore", over="ignore"):  # huge ratios are fine: g(inf) = 0
            r_low = np.where(aw > 0, dw / np.where(aw > 0, aw, 1.0), np.inf)
            r_high = np.where(bw < 1, dw / np.where(bw < 1, 1.0 - bw, 1.0), np.inf)
        slope = np.log1p(-aw) - np.log(bw) + _log1p_ratio(r_high) - _log1p_ratio(r_low)
        out[wide] = np.clip(expit(-slope), aw, bw)
    return float(out) if out.ndim == 0 else out


def minimax_mse(a, b):
    """Squared-error minimax point of ``[a, b]``: the midpoint ``(a + b) / 2``.

    Vectorised like :func:`minimax_ce`; raises ParameterError unless ``0 <= a <= b <= 1``.
    """
    a, b = _check_interval(a, b)
    out = (a + b) / 2.0
    return float(out) if out.ndim == 0 else out


def _check_loss(loss: str) -> str:
    if loss not in LOSSES:
        raise ParameterError(f"unknown Probing loss {loss!r}; use one of {', '.join(LOSSES)}")
    return loss


def minimax_point(a, b, loss: str):
    """Minimax point of ``[a, b]`` for ``loss`` ("cross_entropy" or "squared")."""
    return minimax_ce(a, b) if _check_loss(loss) == "cross_entropy" else minimax_mse(a, b)


def interval_regret(a, b, loss: str, interval_rule: str | None = None) -> np.ndarray:
    """Per-example score of refining ``[a, b]``, before multiplying by ``|S_a|`` (Algorithm 1, 2a).

    cross_entropy ("kl"): ``KL(a || p_hat)`` with ``p_hat = minimax_ce(a, b)`` (equal to
    ``KL(b || p_hat)``, the paper's footnote); squared: ``b - a`` ("width", the paper's rule) or
    ``(b - a)**2`` ("width_squared").  Returns an array shaped like the broadcast of ``a`` and ``b``.
    """
    rule = _check_rule(_check_loss(loss), interval_rule)
    a, b = _check_interval(a, b)
    a, b = np.broadcast_arrays(a, b)
    if rule == "kl":
        p = np.asarray(minimax_ce(a, b), dtype=float)
        regret = rel_entr(a, p) + rel_entr(1.0 - a, 1.0 - p)
        # KL(a || p) = KL(b || p) exactly, but next to 0 or 1 the rounded p can land on an end point
        # (p == b == 1 for [1 - 1e-12, 1]), where KL(a || p) is inf: such an interval cannot be split
        # in floating point, and KL(b || p) scores it so (0) instead of an inf that poisons the ranking
        # (Probing of a column whose weighted rows are all of one class kept splitting next to 1)
        if not np.all(np.isfinite(regret)):
            regret = np.where(np.isfinite(regret), regret, rel_entr(b, p) + rel_entr(1.0 - b, 1.0 - p))
        return regret
    width = b - a
    return width if rule == "width" else width * width


def _check_rule(loss: str, interval_rule: str | None) -> str:
    allowed = INTERVAL_RULES[loss]
    if interval_rule is None:
        return allowed[0]
    if interval_rule not in allowed:
        raise ParameterError(
            f"interval_rule {interval_rule!r} does not apply to loss {loss!r}; use one of "
            f"{', '.join(allowed)} (or leave it unset for the paper's rule)"
        )
    return interval_rule


# --------------------------------------------------------------------------------------------------
# Weights and costing
# --------------------------------------------------------------------------------------------------


def _check_threshold(p) -> float:
    try:
        p = float(p)
    except (TypeError, ValueError):
        raise ParameterError(f"threshold p must be a number strictly between 0 and 1, got {p!r}") from None
    if not 0.0 < p < 1.0:
        raise ParameterError(f"threshold p must be strictly between 0 and 1, got {p!r}; weights need 0 < p < 1")
    return p


def _check_y01(y01) -> np.ndarray:
    y = np.asarray(y01)
    if y.ndim != 1:
        raise ValueError(f"labels must be a 1-D array of 0/1, got shape {y.shape}")
    if y.size and not np.all((y == 0) | (y == 1)):
        raise ValueError("labels must be 0/1 (1 = the positive class of this binary problem)")
    return y.astype(bool)


def positive_weight(p) -> float:
    """Weight of a positive example (negatives weigh 1) that makes a weighted-error minimiser
    predict 1 exactly when ``D(y=1|x) > p`` (the paper's Corollary 1): ``(1 - p) / p``."""
    p = _check_threshold(p)
    return (1.0 - p) / p


def threshold_from_weight(w) -> float:
    """Inverse of :func:`positive_weight`: the threshold ``1 / (1 + w)`` probed by positive weight ``w > 0``."""
    try:
        w = float(w)
    except (TypeError, ValueError):
        raise ParameterError(f"positive weight must be a positive number, got {w!r}") from None
    if not (w > 0 and np.isfinite(w)):
        raise ParameterError(f"positive weight must be a finite number > 0, got {w!r}")
    return 1.0 / (1.0 + w)


def importance_weights(y01, p, bounded: bool = False) -> np.ndarray:
    """Per-example weights for training the classifier that probes threshold ``p``.

    Default (the paper's ``i_p(y)``): positives ``(1 - p) / p``, negatives ``1``.  ``bounded=True``
    multiplies everything by ``p`` (positives ``1 - p``, negatives ``p``): the same minimiser, but
    weights stay in [0, 1], which suits learners that misbehave with very large weights.
    Raises ParameterError unless ``0 < p < 1``; ValueError if ``y01`` is not a 1-D 0/1 array.
    """
    p = _check_threshold(p)
    y = _check_y01(y01)
    if bounded:
        return np.where(y, 1.0 - p, p)
    return np.where(y, (1.0 - p) / p, 1.0)


def acceptance_from_costs(costs) -> np.ndarray:
    """Costing's acceptance probabilities ``c / Z`` with ``Z = max c`` over the given examples.

    Cost-proportionate rejection sampling keeps example ``i`` with probability ``c_i / Z``; the kept
    examples are an i.i.d. sample of the cost-reweighted distribution, so an *unweighted* learner on
    them minimises the weighted error.  ``Z = max c`` is the smallest valid ``Z``: it gives the
    largest samples, and the most costly examples are always kept (so a non-empty input never gives
    an empty sample).  Empty input gives an empty array.  Raises ValueError for negative or
    non-finite costs, or when all costs are zero (nothing could be accepted).
    """
    c = np.asarray(costs, dtype=float)
    if c.ndim != 1:
        raise ValueError(f"costs must be a 1-D array, got shape {c.shape}")
    if c.size == 0:
        return c.copy()
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        raise ValueError("costs must be finite and non-negative")
    z = c.max()
    if z <= 0:
        raise ValueError("all costs are zero, so rejection sampling would accept nothing")
    return c / z


def costing_acceptance(y01, p) -> np.ndarray:
    """Acceptance probabilities for costing the Probing classifier at threshold ``p``.

    ``c / Z`` with ``c`` the importance weights of :func:`importance_weights` (either scaling gives
    the same ratios).  When both classes are present: ``p < 1/2`` keeps every positive and each
    negative with probability ``p / (1 - p)``; ``p >= 1/2`` keeps every negative and each positive with
    probability ``(1 - p) / p``.  With one class only, ``Z`` is that class's weight and all are kept.
    """
    return acceptance_from_costs(importance_weights(y01, p))


def costing_sample(y01, p, rng: np.random.Generator) -> np.ndarray:
    """One costing round: boolean mask of the examples kept by rejection sampling at threshold ``p``.

    Each example is drawn at most once (no replacement, which keeps the sample i.i.d. from the
    reweighted distribution, the reason the paper uses costing): example ``i`` is kept iff an
    independent ``U(0, 1)`` draw from ``rng`` is below its acceptance probability, so probability-1
    examples are always kept and probability-0 ones never.  ``rng`` must be a
    :class:`numpy.random.Generator` seeded by the caller for this (classifier, round); it consumes
    exactly ``len(y01)`` uniforms.  Small expected samples (``sum(c) / Z``) are logged at INFO, and a
    sample holding a single class at WARNING, because then the caller must fall back to a constant
    classifier (see :func:`single_class_label`).
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator seeded by the caller (numpy.random.default_rng)")
    y = _check_y01(y01)
    acc = costing_acceptance(y, p)
    mask = rng.random(y.size) < acc
    if y.size:
        expected = float(acc.sum())
        if expected < min(50.0, 0.5 * y.size):
            log.info("costing at p=%.6g: expected sample size %.1f of %d examples", p, expected, y.size)
        kept = y[mask]
        if kept.size and (kept.all() or not kept.any()):
            log.warning(
                "costing at p=%.6g kept %d examples, all of class %d: use a constant classifier this round",
                p, kept.size, int(kept[0]),
            )
    return mask


def single_class_label(y01_sample) -> int | None:
    """The only label present in a (costed) sample, or ``None`` if both 0 and 1 occur.

    Learners require both classes, so a round whose sample holds a single class is replaced by the
    constant classifier predicting that label (notes §b).  Raises ValueError for an empty sample,
    which costing never produces from non-empty data.
    """
    y = _check_y01(y01_sample)
    if y.size == 0:
        raise ValueError("empty sample: costing keeps the highest-cost examples, so the input data was empty")
    if y.all():
        return 1
    if not y.any():
        return 0
    return None


# --------------------------------------------------------------------------------------------------
# Algorithm 1: the schedule of thresholds
# --------------------------------------------------------------------------------------------------


def _check_int(name: str, value, low: int, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ParameterError(f"{name} must be an integer, got {value!r}; {fix}")
    if value < low:
        raise ParameterError(f"{name} must be >= {low}, got {value}; {fix}")
    return int(value)


def _check_votes(votes, n_classifiers: int) -> np.ndarray:
    v = np.asarray(votes)
    if v.ndim != 1:
        raise ValueError(f"votes must be a 1-D array (one count per training example), got shape {v.shape}")
    if v.dtype == bool:
        v = v.astype(np.int64)
    elif not np.issubdtype(v.dtype, np.integer):
        if not np.issubdtype(v.dtype, np.number) or not np.all(np.isfinite(v)) or np.any(v != np.round(v)):
            raise ValueError("votes must be whole numbers: how many classifiers voted 1 for each example")
        v = v.astype(np.int64)
    if v.size and (v.min() < 0 or v.max() > n_classifiers):
        raise ValueError(
            f"votes must lie in 0..{n_classifiers} (the number of classifiers learned so far), "
            f"got values in {int(v.min())}..{int(v.max())}"
        )
    return v.astype(np.int64, copy=False)


def _rank_intervals(scores: np.ndarray, k: int) -> list[int]:
    """Indices of up to ``k`` intervals to split, best first.

    Highest score first; scores within relative 1e-12 of the best remaining count as tied and the
    leftmost wins (notes §a, rec. 3).  Zero-score intervals (no training example in them, or zero
    width) are candidates only when every interval scores zero.
    """
    candidates = [i for i in range(scores.size) if scores[i] > 0]
    if not candidates:
        candidates = list(range(scores.size))
    chosen: list[int] = []
    while len(chosen) < k and candidates:
        best = max(scores[i] for i in candidates)
        cutoff = best - _TIE_RTOL * abs(best)
        pick = next(i for i in candidates if scores[i] >= cutoff)  # candidates stay in ascending order
        chosen.append(pick)
        candidates.remove(pick)
    return chosen


class ProbingSchedule:
    """The state of Probing-Learner (Algorithm 1): intervals, thresholds, and which to probe next.

    Parameters
    ----------
    t : int >= 1
        Number of classifiers (thresholds) in total; the end state has ``t + 1`` intervals.
    loss : "cross_entropy" | "squared"
        Chooses the minimax point (``minimax_ce`` / midpoint) and the interval rule.
    batch : int, 1 <= batch <= t
        Most intervals split per round.  ``batch=1`` is the paper's algorithm; larger values trade a
        little statistical efficiency (later splits cannot react to earlier ones of the same round)
        for fewer sequential rounds on a cluster.  A round never splits more intervals than exist
        with a positive score, nor goes beyond ``t`` thresholds in total, so rounds may be smaller
        (round 1 always has one threshold: there is one interval).
    interval_rule : None | "kl" | "width" | "width_squared"
        ``None`` takes the paper's rule for the loss (see :data:`INTERVAL_RULES`).

    Protocol: call :meth:`next_thresholds` with the vote counts of all classifiers learned so far
    (all zeros before the first), fit one classifier per returned threshold, add their 0/1 votes to
    the counts, and repeat until it returns ``[]`` (equivalently until :attr:`done`).  Thresholds are
    committed when returned, so every returned threshold must be fitted before the next call.
    A distributed driver passes only the histogram of the votes instead
    (:meth:`next_thresholds_from_counts`): the choice depends on nothing else.
    """

    def __init__(self, t: int, loss: str = "cross_entropy", batch: int = 1, interval_rule: str | None = None):
        self.t = _check_int("t", t, 1, "Probing needs at least one classifier (the paper used t=100)")
        self.loss = _check_loss(loss)
        self.batch = _check_int("batch", batch, 1, "use batch=1 for the paper's sequential schedule")
        if self.batch > self.t:
            raise ParameterError(f"batch={self.batch} exceeds t={self.t}; use a batch between 1 and t")
        self.interval_rule = _check_rule(self.loss, interval_rule)
        self._boundaries: list[float] = [0.0, 1.0]
        self._thresholds: list[float] = []
        self._round_sizes: list[int] = []
        self._n_train: int | None = None

    # -- read-only views ---------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """True once ``t`` thresholds have been handed out."""
        return len(self._thresholds) >= self.t

    @property
    def n_classifiers(self) -> int:
        """Thresholds handed out so far (each must correspond to one fitted classifier)."""
        return len(self._thresholds)

    @property
    def thresholds(self) -> list[float]:
        """Thresholds in creation order (classifier ``i`` was fitted at ``thresholds[i]``)."""
        return list(self._thresholds)

    @property
    def boundaries(self) -> np.ndarray:
        """Sorted interval end points, ``[0, ..sorted thresholds.., 1]``: ``n_classifiers + 2`` values."""
        return np.array(self._boundaries, dtype=float)

    @property
    def rounds(self) -> list[list[float]]:
        """Thresholds grouped by the round that created them (creation order within a round)."""
        out, start = [], 0
        for size in self._round_sizes:
            out.append(self._thresholds[start:start + size])
            start += size
        return out

    # -- Algorithm 1 ---------------------------------------------------------------------------------

    def interval_scores(self, votes) -> tuple[np.ndarray, np.ndarray]:
        """``(counts, scores)`` per current interval, left to right, for the given vote counts.

        ``counts[k]`` is ``|S_a|`` for interval ``k``: the training examples with exactly ``k`` votes
        (Algorithm 2 predicts from interval ``k`` for them).  ``scores[k] = counts[k]`` times the
        per-example regret of the interval (:func:`interval_regret`).  Useful for logging the choice.
        """
        v = _check_votes(votes, self.n_classifiers)
        return self._scores_from_counts(np.bincount(v, minlength=self.n_classifiers + 1))

    def _scores_from_counts(self, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        b = np.asarray(self._boundaries, dtype=float)
        scores = counts * interval_regret(b[:-1], b[1:], self.loss, self.interval_rule)
        return counts, scores

    def _check_counts(self, counts, n_examples) -> tuple[np.ndarray, int]:
        """A vote histogram padded to one entry per interval; ValueError when it cannot be one."""
        n = _check_int("n_examples", n_examples, 0, "pass the number of training examples")
        c = np.asarray(counts)
        if c.ndim != 1:
            raise ValueError(f"counts must be a 1-D histogram of vote counts, got shape {c.shape}")
        if c.size and not np.issubdtype(c.dtype, np.integer):
            if not np.issubdtype(c.dtype, np.number) or not np.all(np.isfinite(c)) or np.any(c != np.round(c)):
                raise ValueError("counts must be whole numbers: how many examples have exactly v votes")
        c = c.astype(np.int64)
        if c.size and c.min() < 0:
            raise ValueError("counts must be non-negative: how many examples have exactly v votes")
        width = self.n_classifiers + 1
        if c.size > width and np.any(c[width:]):
            raise ValueError(
                f"votes must lie in 0..{self.n_classifiers} (the number of classifiers learned so far), "
                f"but counts has examples with up to {int(np.flatnonzero(c)[-1])} votes"
            )
        out = np.zeros(width, dtype=np.int64)
        out[: min(width, c.size)] = c[:width]
        if int(out.sum()) != n:
            raise ValueError(
                f"counts sum to {int(out.sum())} examples but n_examples is {n}; pass a histogram of every example"
            )
        return out, n

    def next_thresholds(self, votes) -> list[float]:
        """Choose the next round's thresholds and split their intervals; ``[]`` once done.

        ``votes[i]`` = how many of the classifiers learned so far voted 1 on training example ``i``
        (1-D integers in ``0..n_classifiers``; all zeros before the first round; same length every
        round).  Picks up to ``batch`` intervals by ``|S_a| * score`` (see :func:`_rank_intervals` for
        ties and empty intervals), replaces each chosen ``[a, b]`` by ``[a, p], [p, b]`` with ``p`` its
        minimax point, and returns the new ``p`` values best-interval first.  Raises ValueError for
        malformed votes.  The choice depends on the votes only through their histogram: this is
        :meth:`next_thresholds_from_counts` of ``np.bincount(votes)``.
        """
        v = _check_votes(votes, self.n_classifiers)
        return self.next_thresholds_from_counts(np.bincount(v, minlength=self.n_classifiers + 1), v.size)

    def next_thresholds_from_counts(self, counts, n_examples: int) -> list[float]:
        """:meth:`next_thresholds` from the histogram of the votes: ``counts[v]`` training examples
        have exactly ``v`` votes (``v`` in ``0..n_classifiers``; a shorter histogram is padded with
        zeros), ``n_examples`` of them in all (the same every round).

        This is what a distributed driver sends: the per-example votes stay where the rows are, and
        only their merged histogram reaches the schedule.  Raises ValueError for a histogram that is
        not one of ``n_examples`` vote counts of the classifiers learned so far.
        """
        counts, n = self._check_counts(counts, n_examples)
        if self._n_train is not None and n != self._n_train:
            raise ValueError(
                f"votes has {n} entries but earlier rounds had {self._n_train}; "
                "pass one count per training example, always the same examples"
            )
        self._n_train = n
        counts, scores = self._scores_from_counts(counts)
        if self.done:
            return []
        k = min(self.batch, self.t - self.n_classifiers)
        chosen = _rank_intervals(scores, k)
        b = self._boundaries
        new = [float(minimax_point(b[i], b[i + 1], self.loss)) for i in chosen]
        log.debug(
            "probing round %d: counts=%s scores=%s -> split %s at %s",
            len(self._round_sizes) + 1, counts.tolist(), np.round(scores, 6).tolist(),
            [(b[i], b[i + 1]) for i in chosen], new,
        )
        self._boundaries = sorted(b + new)
        self._thresholds.extend(new)
        self._round_sizes.append(len(new))
        return new

    # -- Algorithm 2 and persistence ---------------------------------------------------------------

    def predict(self, votes, clip: tuple[float, float] | None = DEFAULT_CLIP):
        """:func:`probing_predict` with this schedule's boundaries and loss."""
        return probing_predict(votes, self.boundaries, self.loss, clip=clip)

    def to_state(self) -> dict[str, Any]:
        """Flat dict of scalars, strings and numpy arrays (fits the model artifact's ``.npz`` rules)."""
        return {
            "t": self.t,
            "loss": self.loss,
            "batch": self.batch,
            "interval_rule": self.interval_rule,
            "thresholds": np.array(self._thresholds, dtype=float),
            "boundaries": self.boundaries,
            "round_sizes": np.array(self._round_sizes, dtype=np.int64),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "ProbingSchedule":
        """Rebuild a schedule saved with :meth:`to_state`; raises ValueError if it is inconsistent."""
        sched = cls(int(state["t"]), str(state["loss"]), int(state["batch"]), str(state["interval_rule"]))
        thresholds = [float(x) for x in np.asarray(state["thresholds"], dtype=float)]
        boundaries = [float(x) for x in np.asarray(state["boundaries"], dtype=float)]
        sizes = [int(x) for x in np.asarray(state["round_sizes"])]
        if (
            sum(sizes) != len(thresholds)
            or len(thresholds) > sched.t
            or boundaries != sorted([0.0, 1.0] + thresholds)
        ):
            raise ValueError("inconsistent Probing state: boundaries must be [0, 1] plus the thresholds, sorted")
        sched._thresholds, sched._boundaries, sched._round_sizes = thresholds, boundaries, sizes
        return sched

    def __repr__(self) -> str:
        return (
            f"ProbingSchedule(t={self.t}, loss={self.loss!r}, batch={self.batch}, "
            f"interval_rule={self.interval_rule!r}, n_classifiers={self.n_classifiers})"
        )


# --------------------------------------------------------------------------------------------------
# Algorithm 2, driver, bagging, multiclass
# --------------------------------------------------------------------------------------------------


def _check_clip(clip) -> tuple[float, float] | None:
    if clip is None:
        return None
    try:
        lo, hi = (float(c) for c in clip)
    except (TypeError, ValueError):
        raise ParameterError(f"clip must be None or a pair (low, high), got {clip!r}") from None
    if not 0.0 <= lo <= hi <= 1.0:
        raise ParameterError(f"clip must satisfy 0 <= low <= high <= 1, got {clip!r}; e.g. clip=(0.001, 0.999)")
    return lo, hi


def probing_predict(votes, boundaries, loss: str, clip: tuple[float, float] | None = DEFAULT_CLIP):
    """Probing-Predictor (Algorithm 2): ``(p, low, high)`` arrays for the given vote counts.

    An example with ``n`` votes (``0 <= n <= len(boundaries) - 2``) falls in the ``n``-th interval
    counting from 0 in ascending order, ``[low, high] = [boundaries[n], boundaries[n+1]]``; counting
    votes is the paper's sorting of inconsistent classifier outputs.  ``p`` is that interval's minimax
    point for ``loss``, clipped to ``clip`` (default the paper's ``[0.001, 0.999]``; ``None`` keeps the
    raw point).  The interval is clipped the same way, so ``low <= p <= high`` always holds: a row
    whose votes select ``[0, 0.0005]`` reports ``p = low = high = 0.001``, the estimate actually used,
    instead of an interval that excludes its own prediction.  Monotone non-decreasing in ``n``.
    ``votes`` may be any integer array shape; outputs have the same shape.
    """
    loss = _check_loss(loss)
    clip = _check_clip(clip)
    bnd = np.asarray(boundaries, dtype=float)
    if bnd.ndim != 1 or bnd.size < 2 or np.any(np.diff(bnd) < 0) or bnd[0] < 0 or bnd[-1] > 1:
        raise ValueError("boundaries must be a sorted 1-D array of at least 2 points in [0, 1]")
    v = np.asarray(votes)
    flat = _check_votes(v.reshape(-1), bnd.size - 2)
    points = np.asarray(minimax_point(bnd[:-1], bnd[1:], loss), dtype=float)
    lows, highs = bnd[:-1], bnd[1:]
    if clip is not None:
        points = np.clip(points, clip[0], clip[1])
        lows, highs = np.clip(lows, clip[0], clip[1]), np.clip(highs, clip[0], clip[1])
    shape = v.shape
    return points[flat].reshape(shape), lows[flat].reshape(shape), highs[flat].reshape(shape)


def run_probing(
    fit_round: Callable[[list[float]], Sequence[np.ndarray]],
    n_train: int,
    t: int,
    loss: str = "cross_entropy",
    batch: int = 1,
    interval_rule: str | None = None,
) -> ProbingSchedule:
    """Drive Algorithm 1 to completion and return the fitted :class:`ProbingSchedule`.

    ``fit_round(thresholds)`` must fit one classifier per threshold (with :func:`importance_weights`
    or costing) and return, in the same order, each classifier's 0/1 votes on the ``n_train``
    training examples.  The driver accumulates the votes and asks the schedule for the next round
    until ``t`` thresholds exist.  The engine runs one Dask task per threshold inside ``fit_round``;
    the schedule's thresholds (creation order) say which classifier is which.  Raises
    ParameterError for bad ``t``/``loss``/``batch``/``interval_rule`` and ValueError if ``fit_round``
    breaks its contract.
    """
    schedule = ProbingSchedule(t, loss=loss, batch=batch, interval_rule=interval_rule)
    n_train = _check_int("n_train", n_train, 0, "pass the number of training examples")
    votes = np.zeros(n_train, dtype=np.int64)
    while True:
        thresholds = schedule.next_thresholds(votes)
        if not thresholds:
            return schedule
        results = list(fit_round(list(thresholds)))
        if len(results) != len(thresholds):
            raise ValueError(f"fit_round returned {len(results)} vote arrays for {len(thresholds)} thresholds")
        for p, r in zip(thresholds, results):
            r = np.asarray(r)
            if r.shape != (n_train,) or not np.all((r == 0) | (r == 1)):
                raise ValueError(
                    f"fit_round must return 0/1 votes of shape ({n_train},) for each threshold; "
                    f"got shape {r.shape} at p={p:.6g}"
                )
            votes += r.astype(np.int64)


def bagging_predict(votes, n_classifiers: int, clip: tuple[float, float] | None = None) -> np.ndarray:
    """Bagging's probability estimate: the fraction of ``n_classifiers`` classifiers voting 1.

    No clipping by default (the plain estimate, which is often exactly 0 or 1: the weakness of
    bagging that Probing addresses); pass ``clip=(0.001, 0.999)`` for log-loss comparisons with
    Probing.  Raises ValueError if a count is outside ``0..n_classifiers``.
    """
    n = _check_int("n_classifiers", n_classifiers, 1, "bagging needs at least one classifier")
    clip = _check_clip(clip)
    v = np.asarray(votes)
    flat = _check_votes(v.reshape(-1), n)
    p = (flat / n).reshape(v.shape)
    return np.clip(p, clip[0], clip[1]) if clip is not None else p


def majority_vote(votes, n_classifiers: int, tie: int = 1) -> np.ndarray:
    """Costing's aggregate classifier: 1 where more than half of ``n_classifiers`` vote 1.

    An exact tie (possible for even ``n_classifiers``) returns ``tie`` (default 1, "ties go to the
    positive class"); prefer an odd number of costing rounds to avoid ties altogether.
    """
    n = _check_int("n_classifiers", n_classifiers, 1, "costing needs at least one round")
    if tie not in (0, 1):
        raise ParameterError(f"tie must be 0 or 1, got {tie!r}")
    v = np.asarray(votes)
    flat = _check_votes(v.reshape(-1), n)
    out = np.where(2 * flat > n, 1, np.where(2 * flat == n, tie, 0))
    return out.reshape(v.shape).astype(np.int64)


def k_minus_one_probabilities(P_binary, floor: float | None = 0.001) -> np.ndarray:
    """Multiclass Probing: class probabilities ``(n, k)`` from ``k - 1`` one-vs-rest estimates.

    The paper probes ``1[y = l]`` for ``l = 1..k-1`` and sets ``p_k = 1 - sum_{l<k} p_l``, which can go
    negative.  Documented deviation (notes §a, rec. 6): if ``p_k < floor``, set ``p_k = floor`` and
    rescale the other ``k - 1`` columns so the row sums to 1 (they then sum to ``1 - floor``).  Rows
    with ``p_k >= floor`` are the paper's values unchanged.  ``floor=None`` returns the paper's values
    as they are (rows sum to 1 but may have a negative last entry).  Only the last column is
    floored; the others keep the clipping Probing already applied to them.
    """
    P = np.asarray(P_binary, dtype=float)
    if P.ndim != 2 or P.shape[1] < 1:
        raise ValueError(f"P_binary must have shape (n, k-1) with k >= 2, got {P.shape}")
    if not np.all(np.isfinite(P)) or np.any(P < 0) or np.any(P > 1):
        raise ValueError("P_binary must hold probabilities in [0, 1]")
    if floor is not None:
        try:
            floor = float(floor)
        except (TypeError, ValueError):
            raise ParameterError(f"floor must be None or a number in [0, 1), got {floor!r}") from None
        if not 0.0 <= floor < 1.0:
            raise ParameterError(f"floor must be in [0, 1), got {floor!r}; the paper-style default is 0.001")
    s = P.sum(axis=1)
    last = 1.0 - s
    if floor is None:
        return np.column_stack([P, last])
    low = last < floor  # implies s > 1 - floor > 0, so the rescaling below is well defined
    scale = np.ones_like(s)
    scale[low] = (1.0 - floor) / s[low]
    return np.column_stack([P * scale[:, None], np.where(low, floor, last)])
