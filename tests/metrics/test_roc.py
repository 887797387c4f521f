"""ROC segments, convex hull, AUC and the Flach–Matsubara Brier decomposition (notes §d, §f)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from calengine.errors import DataError
from calengine.reductions.pav import pav, predict_step
from calengine.metrics.roc import (
    auc,
    brier_decomposition,
    convex_hull_vertices,
    edge_probability,
    hull_edges,
    hull_segment_probabilities,
    roc_points,
    roc_segments,
)

# LexRank worked example (seed 004, Examples 1, 4, 5): segments high→low 2+3−, 4+1−, 3+1−, 1+5−.
COUNTS = [(2, 3), (4, 1), (3, 1), (1, 5)]
LEX_SCORE = np.concatenate([np.full(p + n, 3.0 - i) for i, (p, n) in enumerate(COUNTS)])
LEX_Y = np.concatenate([[1] * p + [0] * n for p, n in COUNTS])
SIZES = [p + n for p, n in COUNTS]


def brier(p, y):
    return float(np.mean((np.asarray(p) - np.asarray(y)) ** 2))


def test_lexrank_segments_and_auc():
    seg = roc_segments(LEX_SCORE, LEX_Y)
    assert seg.scores.tolist() == [3.0, 2.0, 1.0, 0.0]
    assert seg.pos.tolist() == [2, 4, 3, 1]
    assert seg.neg.tolist() == [3, 1, 1, 5]
    assert auc(LEX_SCORE, LEX_Y) == pytest.approx(0.62, abs=1e-12)
    fp, tp = roc_points(seg)
    assert fp.tolist() == [0, 3, 4, 5, 10] and tp.tolist() == [0, 2, 6, 9, 10]


def test_lexprob_hull_pooled_and_laplace():
    seg = roc_segments(LEX_SCORE, LEX_Y)
    edges = hull_edges(seg)
    assert edges.pos.tolist() == [9, 1] and edges.neg.tolist() == [5, 5]
    assert edges.n_segments.tolist() == [3, 1]
    assert edges.hi.tolist() == [3.0, 0.0] and edges.lo.tolist() == [1.0, 0.0]
    np.testing.assert_allclose(edges.prob, [9 / 14, 1 / 6], atol=1e-12)
    np.testing.assert_allclose(hull_edges(seg, laplace=True).prob, [10 / 16, 2 / 8], atol=1e-12)
    np.testing.assert_allclose(hull_segment_probabilities(seg), [9 / 14] * 3 + [1 / 6], atol=1e-12)


def test_brier_decomposition_lexprob_numbers():
    seg = roc_segments(LEX_SCORE, LEX_Y)
    p_plain = np.repeat(hull_segment_probabilities(seg), SIZES)
    cal, ref = brier_decomposition(p_plain, LEX_Y)
    assert cal == pytest.approx(0.0, abs=1e-12)
    assert ref == pytest.approx(0.202381, abs=1e-6)
    assert brier(p_plain, LEX_Y) == pytest.approx(0.202381, abs=1e-6)

    p_lap = np.repeat(hull_segment_probabilities(seg, laplace=True), SIZES)
    assert brier(p_lap, LEX_Y) == pytest.approx(0.204688, abs=1e-6)
    cal, ref = brier_decomposition(p_lap, LEX_Y)  # default: groups of identical p_hat (hull segments)
    assert (cal, ref) == pytest.approx((0.002307, 0.202381), abs=1e-6)
    cal, ref = brier_decomposition(p_lap, LEX_Y, segments=LEX_SCORE)  # the 4 LexRank segments
    assert (cal, ref) == pytest.approx((0.025521, 0.179167), abs=1e-6)
    assert cal + ref == pytest.approx(brier(p_lap, LEX_Y), abs=1e-12)


def test_brier_decomposition_tree_example():
    leaf_emp = np.repeat([p / (p + n) for p, n in COUNTS], SIZES)
    assert brier_decomposition(leaf_emp, LEX_Y) == pytest.approx((0.0, 0.179167), abs=1e-6)
    leaf_lap = np.repeat([3 / 7, 5 / 7, 4 / 6, 2 / 8], SIZES)
    cal, ref = brier_decomposition(leaf_lap, LEX_Y)
    assert (cal, ref) == pytest.approx((0.005513, 0.179167), abs=1e-6)
    assert cal + ref == pytest.approx(0.184680, abs=1e-6)


def test_all_tied_ranker_refinement_is_quarter():
    y = np.array([0, 1] * 5)
    assert brier_decomposition(np.full(10, 0.5), y) == pytest.approx((0.0, 0.25))


def test_brier_decomposition_rejects_varying_prediction_in_segment():
    with pytest.raises(DataError, match="varies inside a segment"):
        brier_decomposition([0.2, 0.3], [0, 1], segments=[1.0, 1.0])
    with pytest.raises(DataError, match=r"\[0, 1\]"):
        brier_decomposition([0.2, 1.3], [0, 1])
    with pytest.raises(DataError, match="one key per example"):
        brier_decomposition([0.2, 0.3], [0, 1], segments=[1.0])


def test_collinear_points_are_not_hull_vertices():
    seg = roc_segments([3, 3, 3, 3, 2, 2, 2, 2, 1, 1], [1, 0, 0, 0, 1, 0, 0, 0, 0, 0])
    edges = hull_edges(seg)
    # 3: 1+3−, 2: 1+3−, 1: 0+2− → the first two are collinear (slope 1/3), then slope 0.
    assert edges.n_segments.tolist() == [2, 1]
    vert = convex_hull_vertices(*roc_points(seg))
    assert vert.tolist() == [0, 2, 3]


def test_vertical_and_horizontal_edges():
    seg = roc_segments([5, 4, 3, 2], [1, 1, 0, 0])
    edges = hull_edges(seg)
    assert edges.prob.tolist() == [1.0, 0.0]
    assert edges.n_segments.tolist() == [2, 2]


def test_auc_matches_sklearn_with_ties_and_weights():
    rng = np.random.default_rng(7)
    s = rng.integers(0, 6, size=300).astype(float)
    y = (rng.random(300) < s / 6).astype(int)
    w = rng.uniform(0.0, 2.0, size=300)
    assert auc(s, y) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert auc(s, y, w) == pytest.approx(roc_auc_score(y, s, sample_weight=w), abs=1e-12)


def test_auc_one_class_is_a_data_error():
    with pytest.raises(DataError, match="both classes"):
        auc([0.1, 0.2], [1, 1])


def test_edge_probability():
    assert edge_probability(3, 1).tolist() == 0.75
    assert edge_probability(3, 1, laplace=True).tolist() == pytest.approx(4 / 6)


def test_rocch_equals_pav_on_tie_heavy_random_data():
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(2, 60))
        s = rng.integers(0, 8, size=n).astype(float)
        y = rng.integers(0, 2, size=n)
        w = rng.choice([0.5, 1.0, 2.0], size=n)
        seg = roc_segments(s, y, w)
        hull_p = hull_segment_probabilities(seg)
        b = pav(s, y, w)
        np.testing.assert_allclose(predict_step(b.lo, b.value, seg.scores), hull_p, atol=1e-12)
        edges = hull_edges(seg)
        np.testing.assert_array_equal(edges.lo[::-1], b.lo)
        np.testing.assert_array_equal(edges.hi[::-1], b.hi)


ranked = st.integers(1, 40).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 5), min_size=n, max_size=n),
        st.lists(st.integers(0, 1), min_size=n, max_size=n),
    )
)


@settings(max_examples=50, deadline=None)
@given(ranked)
def test_hull_is_concave_and_above_the_curve(d):
    s, y = (np.asarray(v, float) for v in d)
    seg = roc_segments(s, y)
    fp, tp = roc_points(seg)
    vert = convex_hull_vertices(fp, tp)
    assert vert[0] == 0 and vert[-1] == len(fp) - 1
    dx, dy = np.diff(fp[vert]), np.diff(tp[vert])
    # Strictly decreasing slopes (cross products of consecutive edges negative).
    assert np.all(dx[:-1] * dy[1:] - dy[:-1] * dx[1:] < 0)
    # Every ROC point lies on or below the hull.
    # Every ROC point lies on or below (to the right of) every directed hull edge.
    i, j = vert[:-1, None], vert[1:, None]
    cross = (fp[j] - fp[i]) * (tp[None, :] - tp[i]) - (tp[j] - tp[i]) * (fp[None, :] - fp[i])
    assert np.all(cross <= 1e-9)
    p = hull_segment_probabilities(seg)
    assert np.all(np.diff(p) <= 1e-12)  # high scores first: probabilities non-increasing


@settings(max_examples=50, deadline=None)
@given(ranked, st.integers(0, 10_000))
def test_decomposition_adds_up_to_brier(d, seed):
    s, y = (np.asarray(v, float) for v in d)
    rng = np.random.default_rng(seed)
    levels = rng.random(6)
    p = levels[s.astype(int)]
    cal, ref = brier_decomposition(p, y, segments=s)
    assert cal >= 0 and 0 <= ref <= 0.25 + 1e-12
    assert cal + ref == pytest.approx(brier(p, y), abs=1e-12)
    cal2, ref2 = brier_decomposition(p, y)
    assert cal2 + ref2 == pytest.approx(brier(p, y), abs=1e-12)
