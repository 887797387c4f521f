"""Tests for calengine.methods.probing: Probing's minimax points and schedule, costing, bagging votes.

Oracle numbers come from the project notes (algorithms.md §a and §b), which were computed
independently of this implementation; the worked oracle run uses ``c_p(x) = 1[q(x) > p]``, the
classifier Corollary 1 says a perfect learner would return.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calengine.errors import ParameterError
from calengine.methods.probing import (
    DEFAULT_CLIP,
    ProbingSchedule,
    acceptance_from_costs,
    bagging_predict,
    costing_acceptance,
    costing_sample,
    importance_weights,
    interval_regret,
    k_minus_one_probabilities,
    majority_vote,
    minimax_ce,
    minimax_mse,
    minimax_point,
    positive_weight,
    probing_predict,
    run_probing,
    single_class_label,
    threshold_from_weight,
)

# (a, b, p_CE, KL(a||p_CE) = KL(b||p_CE), p_MSE) — notes §a, table of worked values.
TABLE = [
    (0.0, 1.0, 0.5, 0.693147180560, 0.5),
    (0.0, 0.5, 0.2, 0.223143551314, 0.25),
    (0.5, 1.0, 0.8, 0.223143551314, 0.75),
    (0.0, 0.2, 0.075717243419, 0.078737240537, 0.1),
    (0.2, 0.5, 0.344685577384, 0.050734205141, 0.35),
    (0.5, 0.8, 0.655314422616, 0.050734205141, 0.65),
    (0.8, 1.0, 0.924282756581, 0.078737240537, 0.9),
    (0.0, 0.25, 0.095406360424, 0.100269453164, 0.125),
    (0.25, 0.5, 16 / 43, 0.033840141012, 0.375),
    (0.1, 0.2, 0.147644730878, 0.009988333284, 0.15),
    (0.3, 0.7, 0.5, 0.082282878505, 0.5),
    (0.0, 0.1, 0.037297083468, 0.038010412670, 0.05),
    (0.0, 0.001, 0.000367928067, 0.000367995770, 0.0005),
    (0.999, 1.0, 0.999632071933, 0.000367995770, 0.9995),
]

Q = np.array([0.05, 0.1, 0.2, 0.3, 0.45, 0.55, 0.7, 0.8, 0.9, 0.95])

# Worked oracle run, t = 5 (notes §a): thresholds in creation order and predictions for Q.
CE_THRESHOLDS = [0.5, 0.2, 0.8, 0.075717243419, 0.924282756581]
CE_PREDICTIONS = [0.028143, 0.133718, 0.133718, 0.344686, 0.344686,
                  0.655314, 0.655314, 0.655314, 0.866282, 0.971857]
CE_ROUNDS = [  # counts per interval and CE scores before each split
    ([10], [6.931472]),
    ([5, 5], [1.115718, 1.115718]),
    ([3, 2, 5], [0.236212, 0.101468, 1.115718]),
    ([3, 2, 3, 2], [0.236212, 0.101468, 0.152203, 0.157474]),
    ([1, 2, 2, 3, 2], [0.028547, 0.033676, 0.101468, 0.152203, 0.157474]),
]
MSE_THRESHOLDS = [0.5, 0.25, 0.75, 0.125, 0.875]
MSE_PREDICTIONS = [0.0625, 0.0625, 0.1875, 0.375, 0.375, 0.625, 0.625, 0.8125, 0.9375, 0.9375]


def kl(p, q):
    """Bernoulli KL(p || q) in nats with 0 ln 0 = 0 (test-side reference)."""
    out = 0.0
    if p > 0:
        out += p * math.log(p / q)
    if p < 1:
        out += (1 - p) * math.log((1 - p) / (1 - q))
    return out


def oracle_fit_round(q):
    """fit_round for the oracle classifier c_p(x) = 1[q(x) > p]."""
    return lambda thresholds: [(q > p).astype(np.int64) for p in thresholds]


def oracle_votes(q, thresholds):
    return sum(((q > p).astype(np.int64) for p in thresholds), np.zeros(q.size, dtype=np.int64))


# ---------------------------------------------------------------------------------------------------
# minimax points
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("a, b, p_ce, kl_eq, p_mse", TABLE)
def test_minimax_table(a, b, p_ce, kl_eq, p_mse):
    assert minimax_ce(a, b) == pytest.approx(p_ce, abs=1e-9)
    assert minimax_mse(a, b) == pytest.approx(p_mse, abs=1e-9)
    got = minimax_ce(a, b)
    assert kl(a, got) == pytest.approx(kl_eq, abs=1e-9)
    assert kl(b, got) == pytest.approx(kl_eq, abs=1e-9)
    assert float(interval_regret(a, b, "cross_entropy")) == pytest.approx(kl_eq, abs=1e-9)


def test_minimax_vectorised_over_arrays():
    a = np.array([row[0] for row in TABLE])
    b = np.array([row[1] for row in TABLE])
    np.testing.assert_allclose(minimax_ce(a, b), [row[2] for row in TABLE], atol=1e-9, rtol=0)
    np.testing.assert_allclose(minimax_mse(a, b), [row[4] for row in TABLE], atol=1e-9, rtol=0)
    np.testing.assert_allclose(minimax_point(a, b, "squared"), (a + b) / 2)
    assert minimax_ce(a.reshape(2, 7), b.reshape(2, 7)).shape == (2, 7)
    assert isinstance(minimax_ce(0.0, 0.5), float) and isinstance(minimax_mse(0.0, 0.5), float)


def test_minimax_endpoint_conventions():
    # a = 0: closed form (1 - p)/p = (1/b) (1 - b)^(-(1 - b)/b), and p ~ b/e for small b
    for b in (0.5, 0.1, 1e-3, 1e-6):
        ratio = (1 / b) * (1 - b) ** (-(1 - b) / b)
        assert minimax_ce(0.0, b) == pytest.approx(1 / (1 + ratio), rel=1e-9)
    assert minimax_ce(0.0, 1e-8) == pytest.approx(1e-8 / math.e, rel=1e-6)
    # degenerate intervals (width < 1e-12) return the midpoint, including the closed ends
    assert minimax_ce(0.0, 0.0) == 0.0
    assert minimax_ce(1.0, 1.0) == 1.0
    a, b = 0.3, 0.3 + 5e-13
    assert minimax_ce(a, b) == (a + b) / 2


@settings(max_examples=200, deadline=None)
@given(a=st.floats(0.0, 1.0), b=st.floats(0.0, 1.0))
def test_minimax_symmetry(a, b):
    a, b = min(a, b), max(a, b)
    for f in (minimax_ce, minimax_mse):
        p = f(a, b)
        assert a <= p <= b
        assert p == pytest.approx(1.0 - f(1.0 - b, 1.0 - a), abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(a=st.floats(0.0, 1.0), b=st.floats(0.0, 1.0))
def test_minimax_ce_equalises_kl(a, b):
    a, b = min(a, b), max(a, b)
    if b - a < 1e-6:
        b = min(1.0, a + 1e-6)
        a = b - 1e-6
    p = minimax_ce(a, b)
    assert a < p < b
    ka, kb = kl(a, p), kl(b, p)
    assert ka == pytest.approx(kb, rel=1e-6, abs=1e-15)
    # and it is the minimax point: moving it raises the worst-case regret
    for q in (p * (1 - 1e-3) if p > a else p, p + (b - p) * 1e-3):
        assert max(kl(a, q), kl(b, q)) >= max(ka, kb) - 1e-15


def test_minimax_ce_narrow_intervals_stay_inside():
    # the naive quotient (H(b) - H(a)) / (b - a) loses ~1e-16/d here; the implementation must not
    for a in (0.3, 0.7, 0.999, 1e-4):
        for d in (1e-9, 1e-10, 1e-11):
            b = a + d
            p = minimax_ce(a, b)
            assert a < p < b
            # the exact point differs from the midpoint by O(d^2), far below float resolution here
            assert abs(p - (a + b) / 2) <= 1e-3 * d


def test_minimax_rejects_bad_intervals():
    for a, b in [(0.6, 0.4), (-0.1, 0.5), (0.5, 1.1), (float("nan"), 0.5)]:
        with pytest.raises(ParameterError):
            minimax_ce(a, b)
        with pytest.raises(ParameterError):
            minimax_mse(a, b)


# ---------------------------------------------------------------------------------------------------
# weights and costing
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("p, w", [(0.5, 1.0), (0.2, 4.0), (0.8, 0.25), (0.1, 9.0)])
def test_weights_and_thresholds(p, w):
    assert positive_weight(p) == pytest.approx(w, rel=1e-12)
    assert threshold_from_weight(w) == pytest.approx(p, rel=1e-12)
    y = np.array([1, 0, 1, 0])
    np.testing.assert_allclose(importance_weights(y, p), [w, 1, w, 1])
    np.testing.assert_allclose(importance_weights(y, p, bounded=True), [1 - p, p, 1 - p, p])
    # bounded weights are the paper's weights times p: same minimiser
    np.testing.assert_allclose(importance_weights(y, p, bounded=True), p * importance_weights(y, p))


def test_weights_reject_bad_input():
    for p in (0.0, 1.0, -0.5, 2.0, float("nan")):
        with pytest.raises(ParameterError):
            importance_weights([0, 1], p)
    with pytest.raises(ParameterError):
        threshold_from_weight(0.0)
    with pytest.raises(ValueError):
        importance_weights([0, 2], 0.5)


def test_costing_acceptance_worked_example():
    y = np.array([1, 0, 0, 1, 0])
    np.testing.assert_allclose(importance_weights(y, 0.2), [4, 1, 1, 4, 1])
    np.testing.assert_allclose(costing_acceptance(y, 0.2), [1, 0.25, 0.25, 1, 0.25])
    np.testing.assert_allclose(acceptance_from_costs([4, 1, 1, 4, 1]), [1, 0.25, 0.25, 1, 0.25])


@pytest.mark.parametrize("p", [0.001, 0.1, 0.3, 0.4999, 0.5, 0.6, 0.9, 0.999])
def test_costing_acceptance_general_rule(p):
    y = np.array([1, 0, 1, 0, 0])
    acc = costing_acceptance(y, p)
    pos, neg = (1.0, p / (1 - p)) if p < 0.5 else ((1 - p) / p, 1.0)
    np.testing.assert_allclose(acc, np.where(y == 1, pos, neg), rtol=1e-12)
    # with a single class present, Z is that class's weight and everything is kept
    np.testing.assert_allclose(costing_acceptance(np.ones(3, int), p), 1.0)
    np.testing.assert_allclose(costing_acceptance(np.zeros(3, int), p), 1.0)


def test_costing_sample_frequencies_match_acceptance():
    # 40 000 copies of a 5-example pattern in one seeded draw.  Each empirical frequency is a mean of
    # 40 000 Bernoulli(acc) draws, standard deviation <= 0.5 / sqrt(40 000) = 0.0025; the tolerance
    # 0.0125 is 5 sigma (two-sided tail ~6e-7 per check), loose enough never to flake yet far below
    # the gaps between the acceptance values tested (>= 0.1).
    reps = 40_000
    for p in (0.2, 0.3, 0.75):
        y = np.tile(np.array([1, 0, 0, 1, 0]), reps)
        acc = costing_acceptance(y[:5], p)
        mask = costing_sample(y, p, np.random.default_rng([12345, 7]))
        freq = mask.reshape(reps, 5).mean(axis=0)
        np.testing.assert_allclose(freq, acc, atol=0.0125, rtol=0)
        # examples with acceptance 1 are always kept
        assert mask.reshape(reps, 5)[:, acc == 1.0].all()


def test_costing_sample_is_deterministic_given_rng():
    y = np.array([1, 0, 0, 1, 0] * 20)
    m1 = costing_sample(y, 0.2, np.random.default_rng([1, 3]))
    m2 = costing_sample(y, 0.2, np.random.default_rng([1, 3]))
    m3 = costing_sample(y, 0.2, np.random.default_rng([1, 4]))
    np.testing.assert_array_equal(m1, m2)
    assert m1.dtype == bool and m1.shape == y.shape
    assert not np.array_equal(m1, m3)
    with pytest.raises(TypeError):
        costing_sample(y, 0.2, 42)


def test_costing_single_class_sample(caplog):
    y = np.array([1] + [0] * 9)
    # p = 0.001: negatives kept w.p. ~0.001, so this seed keeps only the positive
    with caplog.at_level("WARNING", logger="calengine.methods.probing"):
        mask = costing_sample(y, 0.001, np.random.default_rng([0, 0]))
    assert mask[0] and single_class_label(y[mask]) == 1
    assert "constant classifier" in caplog.text
    assert single_class_label(np.array([0, 0])) == 0
    assert single_class_label(np.array([0, 1])) is None
    with pytest.raises(ValueError):
        single_class_label(np.array([], dtype=int))


# ---------------------------------------------------------------------------------------------------
# Algorithm 1 and 2: the worked oracle run
# ---------------------------------------------------------------------------------------------------


def test_oracle_run_cross_entropy():
    sched = run_probing(oracle_fit_round(Q), n_train=Q.size, t=5, loss="cross_entropy", batch=1)
    np.testing.assert_allclose(sched.thresholds, CE_THRESHOLDS, atol=1e-9, rtol=0)
    np.testing.assert_allclose(sched.boundaries, [0.0] + sorted(CE_THRESHOLDS) + [1.0], atol=1e-9, rtol=0)
    assert sched.done and sched.n_classifiers == 5 and [len(r) for r in sched.rounds] == [1] * 5
    p, low, high = probing_predict(oracle_votes(Q, sched.thresholds), sched.boundaries, "cross_entropy")
    np.testing.assert_allclose(p, CE_PREDICTIONS, atol=5e-7, rtol=0)
    assert np.all((low < Q) & (Q <= high))  # the oracle's truth lies in its reported interval


def test_oracle_run_cross_entropy_counts_and_scores_per_round():
    sched = ProbingSchedule(5, "cross_entropy")
    votes = np.zeros(Q.size, dtype=np.int64)
    for (counts, scores), expected_p in zip(CE_ROUNDS, CE_THRESHOLDS):
        got_counts, got_scores = sched.interval_scores(votes)
        np.testing.assert_array_equal(got_counts, counts)
        np.testing.assert_allclose(got_scores, scores, atol=5e-7, rtol=0)
        (p,) = sched.next_thresholds(votes)
        assert p == pytest.approx(expected_p, abs=1e-9)
        votes = votes + (Q > p)
    assert sched.next_thresholds(votes) == []


def test_oracle_run_squared():
    sched = run_probing(oracle_fit_round(Q), n_train=Q.size, t=5, loss="squared", batch=1)
    np.testing.assert_allclose(sched.thresholds, MSE_THRESHOLDS, atol=1e-12, rtol=0)
    p, _, _ = sched.predict(oracle_votes(Q, sched.thresholds))
    np.testing.assert_allclose(p, MSE_PREDICTIONS, atol=1e-12, rtol=0)


@pytest.mark.parametrize("loss, expected", [("cross_entropy", CE_THRESHOLDS), ("squared", MSE_THRESHOLDS)])
@pytest.mark.parametrize("batch", [2, 3, 5])
def test_oracle_run_batched(loss, expected, batch):
    # Round 2 splits both halves (a tie), round 3 the two best of four: the same set of thresholds
    # as the sequential run, found in three rounds instead of five.
    sched = run_probing(oracle_fit_round(Q), n_train=Q.size, t=5, loss=loss, batch=batch)
    np.testing.assert_allclose(sched.thresholds, expected, atol=1e-9, rtol=0)
    assert [len(r) for r in sched.rounds] == [1, 2, 2]


def _reference_thresholds(q, t, loss, batch, rule=None):
    """Independent re-implementation: intervals located by comparing q to the end points."""
    bounds = [0.0, 1.0]
    made = []
    while len(made) < t:
        b = np.array(bounds)
        idx = np.searchsorted(b, q, side="left") - 1  # interval k holds b[k] < q <= b[k+1]
        idx = np.clip(idx, 0, b.size - 2)
        counts = np.bincount(idx, minlength=b.size - 1)
        regrets = []
        for lo, hi in zip(b[:-1], b[1:]):
            if loss == "cross_entropy":
                regrets.append(kl(lo, minimax_ce(lo, hi)))
            else:
                regrets.append((hi - lo) ** 2 if rule == "width_squared" else hi - lo)
        scores = counts * np.array(regrets)
        order = [k for k in range(scores.size) if scores[k] > 0] or list(range(scores.size))
        picked = []
        for _ in range(min(batch, t - len(made))):
            if not order:
                break
            best = max(scores[k] for k in order)
            k = next(k for k in order if scores[k] >= best * (1 - 1e-12))
            picked.append(k)
            order.remove(k)
        new = [float(minimax_point(b[k], b[k + 1], loss)) for k in picked]
        made += new
        bounds = sorted(bounds + new)
    return made


@settings(max_examples=40, deadline=None)
@given(
    q=st.lists(st.floats(0.0, 1.0), min_size=0, max_size=40),
    t=st.integers(1, 12),
    batch_frac=st.floats(0.0, 1.0),
    loss=st.sampled_from(["cross_entropy", "squared"]),
    rule=st.sampled_from([None, "width_squared"]),
)
def test_batched_schedule_matches_reference(q, t, batch_frac, loss, rule):
    q = np.array(q, dtype=float)
    batch = 1 + int(batch_frac * (t - 1))
    rule = rule if loss == "squared" else None
    sched = run_probing(oracle_fit_round(q), n_train=q.size, t=t, loss=loss, batch=batch, interval_rule=rule)
    assert len(sched.thresholds) == t  # exactly t, whatever the batch
    assert all(len(r) <= batch for r in sched.rounds)
    assert sched.boundaries.size == t + 2
    np.testing.assert_allclose(sched.thresholds, _reference_thresholds(q, t, loss, batch, rule), atol=1e-12)


@pytest.mark.parametrize("t, batch", [(1, 1), (7, 3), (10, 4), (10, 10), (25, 6)])
def test_batch_produces_exactly_t_thresholds(t, batch):
    rng = np.random.default_rng([99, t, batch])
    n = 50

    def fit_round(thresholds):  # inconsistent, noisy classifiers: the schedule must still finish
        return [(rng.random(n) < 1 - p).astype(np.int64) for p in thresholds]

    sched = run_probing(fit_round, n_train=n, t=t, loss="cross_entropy", batch=batch)
    assert len(sched.thresholds) == t and sched.done
    assert sched.boundaries.size == t + 2
    assert np.all(np.diff(sched.boundaries) >= 0)
    assert sorted(sched.thresholds) == sched.boundaries[1:-1].tolist()
    assert all(1 <= len(r) <= batch for r in sched.rounds) and sum(map(len, sched.rounds)) == t


def test_empty_intervals_are_split_last():
    # everyone votes 1 for the first classifier, so [0, 0.5] is empty and [0.5, 1] must be split
    sched = ProbingSchedule(3, "squared", batch=2)
    assert sched.next_thresholds(np.zeros(4, int)) == [0.5]
    assert sched.next_thresholds(np.ones(4, int)) == [0.75]  # batch=2 but only one non-empty interval
    # with no training examples at all every interval scores 0: split the leftmost
    empty = ProbingSchedule(3, "cross_entropy")
    empty.next_thresholds(np.zeros(0, int))
    assert empty.next_thresholds(np.zeros(0, int)) == [pytest.approx(0.2)]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    t=st.integers(1, 15),
    loss=st.sampled_from(["cross_entropy", "squared"]),
    batch=st.integers(1, 4),
)
def test_predictions_monotone_in_vote_count(seed, t, loss, batch):
    rng = np.random.default_rng(seed)
    n = 30
    fit = lambda ths: [rng.integers(0, 2, n) for _ in ths]  # noqa: E731 - arbitrary classifiers
    sched = run_probing(fit, n_train=n, t=t, loss=loss, batch=min(batch, t))
    for clip in (DEFAULT_CLIP, None):
        p, low, high = probing_predict(np.arange(t + 1), sched.boundaries, loss, clip=clip)
        assert np.all(np.diff(p) >= 0)
        assert np.all(np.diff(low) >= 0) and np.all(np.diff(high) >= 0)
        assert np.all((low <= p) & (p <= high))  # clipping moves the interval with its point


def test_clipping():
    boundaries = np.array([0.0, 0.0005, 0.5, 0.9995, 1.0])
    raw, low, high = probing_predict([0, 1, 2, 3], boundaries, "cross_entropy", clip=None)
    assert raw[0] < 0.001 and raw[3] > 0.999
    np.testing.assert_allclose(raw[[0, 3]], [minimax_ce(0, 0.0005), minimax_ce(0.9995, 1)])
    np.testing.assert_array_equal(low, boundaries[:-1])
    np.testing.assert_array_equal(high, boundaries[1:])
    clipped, clow, chigh = probing_predict([0, 1, 2, 3], boundaries, "cross_entropy")
    np.testing.assert_allclose(clipped, [0.001, raw[1], raw[2], 0.999])
    # the intervals are clipped like the points: [0, 0.0005] -> [0.001, 0.001], [0.0005, 0.5] -> [0.001, 0.5]
    np.testing.assert_array_equal(clow, [0.001, 0.001, 0.5, 0.999])
    np.testing.assert_array_equal(chigh, [0.001, 0.5, 0.999, 0.999])
    mse, _, _ = probing_predict([0, 3], boundaries, "squared", clip=(0.01, 0.99))
    np.testing.assert_allclose(mse, [0.01, 0.99])
    # an always-0 classifier keeps shrinking the lowest interval towards 0 (by ~e per split)
    always_0 = lambda ths: [np.zeros(5, int) for _ in ths]  # noqa: E731
    sched = run_probing(always_0, n_train=5, t=10, loss="cross_entropy", batch=1)
    assert sched.boundaries[1] < 1e-4
    assert sched.predict(np.zeros(5, int))[0][0] == 0.001
    assert sched.predict(np.zeros(5, int), clip=None)[0][0] < 1e-4
    # vote-array shape is preserved
    assert probing_predict(np.zeros((2, 3), int), boundaries, "squared")[0].shape == (2, 3)


def test_schedule_state_round_trip():
    sched = run_probing(oracle_fit_round(Q), n_train=Q.size, t=5, loss="squared", batch=2)
    state = sched.to_state()
    assert all(isinstance(v, (int, str, np.ndarray)) for v in state.values())
    again = ProbingSchedule.from_state(state)
    assert again.thresholds == sched.thresholds and again.rounds == sched.rounds
    np.testing.assert_array_equal(again.boundaries, sched.boundaries)
    bad = dict(state, boundaries=state["boundaries"][::-1])
    with pytest.raises(ValueError):
        ProbingSchedule.from_state(bad)


# ---------------------------------------------------------------------------------------------------
# contract violations and bad parameters
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(t=0),
        dict(t=-3),
        dict(t=2.5),
        dict(t=True),
        dict(t=5, loss="log_loss"),
        dict(t=5, batch=0),
        dict(t=5, batch=-1),
        dict(t=5, batch=6),
        dict(t=5, loss="cross_entropy", interval_rule="width"),
        dict(t=5, loss="squared", interval_rule="kl"),
        dict(t=5, loss="squared", interval_rule="area"),
    ],
)
def test_bad_parameters_raise_parameter_error(kwargs):
    with pytest.raises(ParameterError) as info:
        ProbingSchedule(**kwargs)
    assert "\n" not in str(info.value)
    with pytest.raises(ParameterError):
        run_probing(oracle_fit_round(Q), Q.size, **kwargs)


def test_bad_clip_and_loss_in_predict():
    b = np.array([0.0, 0.5, 1.0])
    for clip in [(0.9, 0.1), (-0.1, 0.5), (0.1,), "x"]:
        with pytest.raises(ParameterError):
            probing_predict([0], b, "cross_entropy", clip=clip)
    with pytest.raises(ParameterError):
        probing_predict([0], b, "hinge")


def test_votes_contract_violations():
    sched = ProbingSchedule(3)
    with pytest.raises(ValueError):
        sched.next_thresholds(np.ones(4, int))  # no classifier yet, so every count must be 0
    sched.next_thresholds(np.zeros(4, int))
    with pytest.raises(ValueError):
        sched.next_thresholds(np.zeros(5, int))  # different training set size
    with pytest.raises(ValueError):
        sched.next_thresholds(np.array([0, 1, 2, 0]))  # only one classifier exists
    with pytest.raises(ValueError):
        sched.next_thresholds(np.array([0.5, 0, 0, 0]))
    with pytest.raises(ValueError):
        probing_predict([3], np.array([0.0, 0.5, 1.0]), "squared")
    with pytest.raises(ValueError):
        run_probing(lambda ths: [], 4, 2)
    with pytest.raises(ValueError):
        run_probing(lambda ths: [np.full(4, 2) for _ in ths], 4, 2)


# ---------------------------------------------------------------------------------------------------
# bagging, majority vote, multiclass
# ---------------------------------------------------------------------------------------------------


def test_bagging_predict():
    votes = np.array([0, 1, 5, 10])
    np.testing.assert_allclose(bagging_predict(votes, 10), [0, 0.1, 0.5, 1.0])
    np.testing.assert_allclose(bagging_predict(votes, 10, clip=DEFAULT_CLIP), [0.001, 0.1, 0.5, 0.999])
    with pytest.raises(ValueError):
        bagging_predict([11], 10)
    with pytest.raises(ParameterError):
        bagging_predict([0], 0)


def test_majority_vote():
    np.testing.assert_array_equal(majority_vote([0, 1, 2, 3], 3), [0, 0, 1, 1])
    np.testing.assert_array_equal(majority_vote([1, 2, 3], 4), [0, 1, 1])
    np.testing.assert_array_equal(majority_vote([1, 2, 3], 4, tie=0), [0, 0, 1])


def test_k_minus_one_probabilities():
    P = np.array([[0.2, 0.3], [0.7, 0.5], [0.6, 0.3999]])
    out = k_minus_one_probabilities(P)
    np.testing.assert_allclose(out.sum(axis=1), 1.0)
    np.testing.assert_allclose(out[0], [0.2, 0.3, 0.5])  # untouched: the paper's values
    # row 2: last = -0.2 < 0.001 -> 0.001, others rescaled to sum 0.999
    np.testing.assert_allclose(out[1], [0.7 * 0.999 / 1.2, 0.5 * 0.999 / 1.2, 0.001])
    # row 3: last = 0.0001 < 0.001 -> floored too
    assert out[2, 2] == pytest.approx(0.001)
    paper = k_minus_one_probabilities(P, floor=None)
    np.testing.assert_allclose(paper[:, 2], [0.5, -0.2, 0.0001])
    with pytest.raises(ParameterError):
        k_minus_one_probabilities(P, floor=1.0)
    with pytest.raises(ValueError):
        k_minus_one_probabilities(np.array([0.2, 0.3]))
