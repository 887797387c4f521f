"""Built-in calibrators: worked-example oracles (notes §d, e, f, h), scikit-learn agreement,
input validation, and properties every calibrator must keep (range, monotonicity, weights as
frequencies, exact state round-trip)."""

from __future__ import annotations

import io
import json

import numpy as np
import pluggy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar
from scipy.special import expit
from sklearn.calibration import _sigmoid_calibration
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

import calengine.hookspecs
from calengine.base import Calibrator
from calengine.errors import DataError, ParameterError
from calengine_builtins import calibrators as cal_mod
from calengine_builtins.calibrators import (
    BetaCalibrator,
    BinningCalibrator,
    IsotonicCalibrator,
    NoCalibration,
    ROCHullCalibrator,
    SigmoidCalibrator,
    SigmoidNoBiasCalibrator,
    TemperatureCalibrator,
)

NAMES = ["none", "sigmoid", "isotonic", "binning", "rocch", "beta", "temperature", "sigmoid_nobias", "venn_abers"]
#: the multiclass scalings (plugins/builtins/plugins/builtins/tests/test_multiclass_scaling.py tests them; on one column they are two-class
#: calibrators, which the plugin kit checks in tests/testing/test_checks.py)
MULTICLASS_SCALINGS = ["vector_scaling", "matrix_scaling", "dirichlet", "top_label"]
BY_NAME = {cls.name: cls for cls in cal_mod.CALIBRATORS}
#: calibrators whose predictions must be non-decreasing in the score (with default parameters).
MONOTONE = ["none", "sigmoid", "isotonic", "rocch", "beta", "temperature", "sigmoid_nobias", "venn_abers"]


def make(name, **params):
    if name == "binning" and "n_bins" not in params:
        params["n_bins"] = 3  # "auto" draws a random CV split, which depends on the rows
    return BY_NAME[name](**params)


def roundtrip(cal: Calibrator) -> Calibrator:
    """Store the state the way the model artifact does (.npz without pickle, scalars in JSON)."""
    state = cal.to_state()
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    scalars = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    for v in scalars.values():
        assert isinstance(v, (bool, int, float, str)), type(v)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as npz:
        loaded = {k: npz[k] for k in npz.files}
    loaded.update(json.loads(json.dumps(scalars)))
    return type(cal)(**cal.get_params()).from_state(loaded)


# --------------------------------------------------------------------------------------------------
# registration


def test_hook_registers_every_builtin():
    pm = pluggy.PluginManager(calengine.hookspecs.PROJECT)
    pm.add_hookspecs(calengine.hookspecs)
    pm.register(cal_mod)
    found = []
    pm.hook.register_calibrators(register=found.append)
    assert sorted(cls.name for cls in found) == sorted(NAMES + MULTICLASS_SCALINGS)
    for cls in found:
        assert issubclass(cls, Calibrator)


# --------------------------------------------------------------------------------------------------
# sigmoid (Platt, Lin–Lin–Weng)


def test_sigmoid_toy_oracle():
    c = SigmoidCalibrator().fit([-2, -1, 0, 1, 2], [0, 0, 1, 1, 1])
    assert c.a_ == pytest.approx(-0.792359, abs=1e-6)
    assert c.b_ == pytest.approx(-0.418651, abs=1e-6)
    f = np.array([-3.0, 0.5, 4.0])
    np.testing.assert_allclose(c.predict(f), 1 / (1 + np.exp(c.a_ * f + c.b_)), atol=1e-15)


@pytest.mark.parametrize("scale", [1.0, 1000.0])
def test_sigmoid_matches_sklearn(scale):
    rng = np.random.default_rng(5)
    n = 400
    y = (rng.random(n) < 0.4).astype(int)
    f = scale * (rng.normal(size=n) + 1.3 * y)
    w = rng.uniform(0.2, 2.0, size=n)
    for weights in (None, w):
        c = SigmoidCalibrator().fit(f, y, sample_weight=weights)
        a, b = _sigmoid_calibration(f, y, sample_weight=weights)
        assert c.a_ == pytest.approx(a, rel=1e-4)
        assert c.b_ == pytest.approx(b, rel=1e-4, abs=1e-4)


def test_sigmoid_anticorrelated_scores_give_the_best_constant():
    f = np.array([-2.0, -1.0, 1.0, 2.0, 3.0])
    y = np.array([1, 1, 0, 0, 1])
    c = SigmoidCalibrator().fit(f, y)
    assert c.a_ == 0.0
    t_bar = (2 * (4 / 5) + 2 * (1 / 4) + 4 / 5) / 5  # mean of Platt's targets (N+=3, N-=2)
    np.testing.assert_allclose(c.predict([-5.0, 5.0]), [t_bar, t_bar], atol=1e-12)


# --------------------------------------------------------------------------------------------------
# isotonic and rocch


S_UNIT = np.arange(1, 9) / 10.0
Y_UNIT = np.array([0, 1, 0, 0, 1, 0, 1, 1])
T_UNIT = np.array([0.0, 0.15, 0.35, 0.45, 0.55, 0.65, 0.9])


def test_isotonic_worked_example_both_semantics():
    step = IsotonicCalibrator().fit(S_UNIT, Y_UNIT)
    lin = IsotonicCalibrator(interpolation="linear").fit(S_UNIT, Y_UNIT)
    np.testing.assert_allclose(step.predict(T_UNIT), [0, 0, 1 / 3, 1 / 3, 0.5, 0.5, 1], atol=1e-6)
    np.testing.assert_allclose(lin.predict(T_UNIT), [0, 1 / 6, 1 / 3, 5 / 12, 0.5, 0.75, 1], atol=1e-6)


def test_isotonic_ties_weights_example():
    s = [0.2, 0.2, 0.2, 0.5, 0.5, 0.7, 0.9, 0.9]
    y = [1, 0, 0, 1, 0, 0, 1, 1]
    w = [1, 1, 2, 1, 3, 1, 1, 0.5]
    for interp in ("step", "linear"):
        c = IsotonicCalibrator(interpolation=interp).fit(s, y, sample_weight=w)
        np.testing.assert_allclose(c.predict([0.2, 0.5, 0.7, 0.9]), [2 / 9] * 3 + [1], atol=1e-6)


def test_isotonic_matches_sklearn():
    rng = np.random.default_rng(1)
    n = 500
    s = np.round(rng.normal(size=n), 1)
    y = (rng.random(n) < expit(1.5 * s)).astype(int)
    w = rng.uniform(0.1, 2.0, size=n)
    ref = IsotonicRegression(out_of_bounds="clip").fit(s, y, sample_weight=w)
    test = np.linspace(-5, 5, 1001)
    step = IsotonicCalibrator().fit(s, y, sample_weight=w)
    lin = IsotonicCalibrator(interpolation="linear").fit(s, y, sample_weight=w)
    np.testing.assert_allclose(step.predict(s), ref.predict(s), atol=1e-10)
    np.testing.assert_allclose(lin.predict(s), ref.predict(s), atol=1e-10)
    np.testing.assert_allclose(lin.predict(test), ref.predict(test), atol=1e-10)


def test_rocch_equals_isotonic_on_tie_heavy_data():
    rng = np.random.default_rng(2)
    grid = np.linspace(-1, 9, 101)
    for _ in range(50):
        n = int(rng.integers(4, 80))
        s = rng.integers(0, 8, size=n).astype(float)
        y = rng.integers(0, 2, size=n)
        y[:2] = [0, 1]
        a = ROCHullCalibrator().fit(s, y)
        b = IsotonicCalibrator().fit(s, y)
        np.testing.assert_allclose(a.predict(grid), b.predict(grid), atol=1e-12)


def test_rocch_lexprob_example_with_laplace():
    counts = [(2, 3), (4, 1), (3, 1), (1, 5)]
    s = np.concatenate([np.full(p + n, 3.0 - i) for i, (p, n) in enumerate(counts)])
    y = np.concatenate([[1] * p + [0] * n for p, n in counts])
    plain = ROCHullCalibrator().fit(s, y)
    lap = ROCHullCalibrator(laplace=True).fit(s, y)
    np.testing.assert_allclose(plain.predict([3, 2, 1, 0]), [9 / 14] * 3 + [1 / 6], atol=1e-12)
    np.testing.assert_allclose(lap.predict([3, 2, 1, 0]), [10 / 16] * 3 + [2 / 8], atol=1e-12)
    p = lap.predict(s)
    assert np.mean((p - y) ** 2) == pytest.approx(0.204688, abs=1e-6)
    # Unseen scores: step rule (between 0 and 1 the lower edge holds), clipped at both ends.
    np.testing.assert_allclose(plain.predict([-7, 0.5, 2.5, 99]), [1 / 6, 1 / 6, 9 / 14, 9 / 14], atol=1e-12)


def test_rocch_laplace_can_be_non_monotone():
    # Edge 1: one positive alone (slope ∞) → (1+1)/(1+2) = 2/3; edge 2: 10+ 1− → 11/13 > 2/3.
    s = np.array([9.0] + [5.0] * 11 + [1.0] * 5)
    y = np.array([1] + [1] * 10 + [0] + [0] * 5)
    c = ROCHullCalibrator(laplace=True).fit(s, y)
    assert c.predict([9.0])[0] == pytest.approx(2 / 3)
    assert c.predict([5.0])[0] == pytest.approx(11 / 13)


# --------------------------------------------------------------------------------------------------
# binning

S_BIN = [0.05, 0.1, 0.15, 0.2, 0.3, 0.35, 0.5, 0.55, 0.6, 0.7, 0.8, 0.9]
Y_BIN = [0, 0, 1, 0, 0, 1, 0, 1, 1, 1, 0, 1]
T_BIN = [0.0, 0.22, 0.25, 0.45, 0.65, 1.0]


def test_binning_midpoint_example():
    c = BinningCalibrator(n_bins=3).fit(S_BIN, Y_BIN)
    np.testing.assert_allclose(c.lo_, [0.05, 0.3, 0.6])
    np.testing.assert_allclose(c.hi_, [0.2, 0.55, 0.9])
    np.testing.assert_allclose(c.values_, [0.25, 0.5, 0.75])
    np.testing.assert_allclose(c.predict(T_BIN), [0.25, 0.25, 0.5, 0.5, 0.75, 0.75], atol=1e-12)


def test_binning_lower_rule_example():
    c = BinningCalibrator(n_bins=3, boundary="lower").fit(S_BIN, Y_BIN)
    np.testing.assert_allclose(c.predict(T_BIN), [0.25, 0.25, 0.25, 0.5, 0.75, 0.75], atol=1e-12)


def test_binning_keeps_ties_together():
    c = BinningCalibrator(n_bins=2).fit([0.1, 0.2, 0.2, 0.2, 0.3, 0.4], [0, 1, 1, 0, 1, 1])
    np.testing.assert_allclose(c.lo_, [0.1, 0.3])
    np.testing.assert_allclose(c.hi_, [0.2, 0.4])
    np.testing.assert_allclose(c.values_, [0.5, 1.0])


def test_binning_cut_rounds_half_up_and_sizes_are_balanced():
    s = np.arange(10.0)
    y = np.arange(10) % 2
    c = BinningCalibrator(n_bins=4).fit(s, y)  # cuts at round(2.5)=3, 5, round(7.5)=8
    assert c.lo_.tolist() == [0, 3, 5, 8]
    c = BinningCalibrator(n_bins=3).fit(s, y)  # cuts at round(3.33)=3, round(6.67)=7
    assert c.lo_.tolist() == [0, 3, 7]


def test_binning_auto_chooses_from_grid_by_cv():
    rng = np.random.default_rng(0)
    s = rng.normal(size=600)
    y = (rng.random(600) < expit(2 * s)).astype(int)
    c = BinningCalibrator().fit(s, y)
    assert c.n_bins_ in BinningCalibrator.GRID
    assert c.cv_grid_.tolist() == list(BinningCalibrator.GRID)
    best = np.flatnonzero(c.cv_brier_ == c.cv_brier_.min())[0]
    assert c.n_bins_ == c.cv_grid_[best]
    again = BinningCalibrator().fit(s, y)
    assert again.n_bins_ == c.n_bins_ and np.array_equal(again.cv_brier_, c.cv_brier_)


def test_binning_auto_respects_fold_size():
    s = np.arange(12.0)
    y = np.array([0, 1] * 6)
    c = BinningCalibrator().fit(s, y)  # 5 folds of 12 → training folds of 9 or 10 examples
    assert c.cv_grid_.max() <= 9


def test_binning_auto_with_a_lone_positive_uses_two_bins():
    c = BinningCalibrator().fit([0.1, 0.2, 0.3, 0.4], [0, 0, 0, 1])
    assert c.n_bins_ == 2 and c.cv_grid_.size == 0


# --------------------------------------------------------------------------------------------------
# beta, temperature, sigmoid without bias, none


def test_beta_matches_unpenalised_logistic_regression():
    rng = np.random.default_rng(4)
    n = 800
    y = (rng.random(n) < 0.5).astype(int)
    p = np.clip(expit(rng.normal(size=n) + 1.5 * (2 * y - 1)) ** 1.7, 1e-6, 1 - 1e-6)
    w = rng.uniform(0.5, 2.0, size=n)
    c = BetaCalibrator().fit(p, y, sample_weight=w, score_kind="proba")
    X = np.column_stack((np.log(p), -np.log1p(-p)))
    ref = LogisticRegression(C=1e12, tol=1e-12, max_iter=10_000).fit(X, y, sample_weight=w)
    assert ref.coef_[0].min() > 0
    np.testing.assert_allclose([c.a_, c.b_, c.c_], [*ref.coef_[0], ref.intercept_[0]], rtol=1e-4, atol=1e-4)
    test = np.linspace(0.01, 0.99, 9)
    np.testing.assert_allclose(
        c.predict(test), ref.predict_proba(np.column_stack((np.log(test), -np.log1p(-test))))[:, 1], atol=1e-5
    )


def test_beta_drops_a_negative_coefficient():
    rng = np.random.default_rng(8)
    n = 600
    p = rng.uniform(0.01, 0.99, size=n)
    # P(y=1) falls for small s and for large s alike: the full fit wants a < 0.
    y = (rng.random(n) < np.where(p < 0.5, 1 - p, p) ** 3).astype(int)
    c = BetaCalibrator().fit(p, y, score_kind="proba")
    assert c.a_ >= 0 and c.b_ >= 0
    assert c.a_ == 0.0 or c.b_ == 0.0
    grid = np.linspace(0.001, 0.999, 200)
    assert np.all(np.diff(c.predict(grid)) >= -1e-12)


def test_beta_maps_decision_scores_through_the_logistic_function():
    rng = np.random.default_rng(9)
    f = rng.normal(size=300) * 2
    y = (rng.random(300) < expit(f)).astype(int)
    dec = BetaCalibrator().fit(f, y, score_kind="decision")
    prob = BetaCalibrator().fit(expit(f), y, score_kind="proba")
    np.testing.assert_allclose(dec.predict(f), prob.predict(expit(f)), atol=1e-9)


def test_temperature_minimises_log_loss():
    rng = np.random.default_rng(6)
    n = 500
    y = (rng.random(n) < 0.5).astype(int)
    z = 3.0 * (rng.normal(size=n) + (2 * y - 1))  # over-confident logits
    c = TemperatureCalibrator().fit(z, y)

    def loss(log_t):
        p = np.clip(expit(z / np.exp(log_t)), 1e-300, 1 - 1e-16)
        return -np.mean(y * np.log(p) + (1 - y) * np.log1p(-p))

    ref = minimize_scalar(loss, bounds=(-5, 5), method="bounded", options={"xatol": 1e-10})
    assert np.log(c.temperature_) == pytest.approx(ref.x, abs=1e-5)
    assert c.temperature_ > 1
    pc = TemperatureCalibrator().fit(expit(z), y, score_kind="proba")
    assert pc.temperature_ == pytest.approx(c.temperature_, rel=1e-9)
    assert pc.predict([0.5])[0] == pytest.approx(0.5)


def test_sigmoid_nobias_duin_tax_oracle():
    S = np.array([-2, -1, -0.5, 0.5, 1, 2])
    y = np.array([0, 0, 1, 0, 1, 1])
    c = SigmoidNoBiasCalibrator().fit(S, y)
    assert c.alpha_ == pytest.approx(1.351112, abs=1e-6)
    np.testing.assert_allclose(
        c.predict(S), [0.062842, 0.205689, 0.337254, 0.662746, 0.794311, 0.937158], atol=1e-6
    )
    assert c.predict([0.0])[0] == 0.5


def test_sigmoid_nobias_separable_is_bounded_and_proba_keeps_half():
    c = SigmoidNoBiasCalibrator().fit([-1.0, 1.0], [0, 1])
    assert c.alpha_ == SigmoidNoBiasCalibrator.ALPHA_MAX
    assert c.predict([0.5])[0] == pytest.approx(1.0)
    pc = SigmoidNoBiasCalibrator().fit([0.2, 0.4, 0.6, 0.9, 0.3], [0, 1, 0, 1, 0], score_kind="proba")
    assert pc.predict([0.5])[0] == pytest.approx(0.5)
    anti = SigmoidNoBiasCalibrator().fit([-2.0, 2.0], [1, 0])
    assert anti.alpha_ == 0.0
    assert anti.predict([-5.0, 5.0]).tolist() == [0.5, 0.5]


def test_none_proba_and_rescaling():
    pc = NoCalibration().fit([0.2, 0.7, 0.9], [0, 1, 1], score_kind="proba")
    assert pc.mode_ == "proba"
    np.testing.assert_allclose(pc.predict([0.0, 0.3, 1.0]), [0.0, 0.3, 1.0])
    dc = NoCalibration().fit([-1.0, 3.0, 1.0], [0, 1, 1])
    assert dc.mode_ == "minmax"
    np.testing.assert_allclose(dc.predict([-5.0, -1.0, 0.0, 3.0, 8.0]), [0, 0, 0.25, 1, 1])
    sc = NoCalibration(rescale="symmetric").fit([-1.0, 3.0, 1.0], [0, 1, 1])
    assert sc.mode_ == "symmetric"
    np.testing.assert_allclose(sc.predict([-3.0, 0.0, 1.5, 4.0]), [0, 0.5, 0.75, 1])
    flat = NoCalibration().fit([2.0, 2.0], [0, 1])
    assert flat.predict([1.0, 2.0, 3.0]).tolist() == [0.5, 0.5, 0.5]


# --------------------------------------------------------------------------------------------------
# validation


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "scores, y, w, match",
    [
        ([0.1, np.nan, 0.3], [0, 1, 1], None, "NaN or infinite"),
        ([0.1, np.inf, 0.3], [0, 1, 1], None, "NaN or infinite"),
        ([0.1, 0.2, 0.3], [0, 1, 2], None, "0 or 1"),
        ([0.1, 0.2, 0.3], [0, 1], None, "differ in length"),
        ([0.1, 0.2, 0.3], [0, 1, 1], [1.0, -1.0, 1.0], "negative"),
        ([0.1, 0.2, 0.3], [0, 1, 1], [1.0, 1.0], "one weight per score"),
        ([0.1, 0.2, 0.3], [1, 1, 1], None, "only one class.*fewer folds"),
        ([0.1, 0.2, 0.3], [0, 1, 1], [1.0, 0.0, 0.0], "only one class"),
        ([], [], None, "empty"),
    ],
)
def test_bad_input_is_a_data_error(name, scores, y, w, match):
    with pytest.raises(DataError, match=match):
        make(name).fit(scores, y, sample_weight=w)


@pytest.mark.parametrize("name", NAMES)
def test_bad_score_kind_and_predict_input(name):
    with pytest.raises(ParameterError, match="score_kind"):
        make(name).fit([0.1, 0.9], [0, 1], score_kind="logit")
    c = make(name).fit([0.1, 0.4, 0.9], [0, 1, 1])
    with pytest.raises(DataError, match="NaN"):
        c.predict([0.5, np.nan])
    with pytest.raises(DataError, match="1-D"):
        c.predict([[0.5, 0.2]])
    assert c.predict([]).shape == (0,)


@pytest.mark.parametrize("name", ["none", "beta", "temperature", "sigmoid_nobias"])
def test_probability_scores_outside_unit_interval(name):
    with pytest.raises(DataError, match="score_kind='decision'"):
        make(name).fit([-0.5, 0.5, 2.0], [0, 1, 1], score_kind="proba")


@pytest.mark.parametrize(
    "cls, params",
    [
        (IsotonicCalibrator, {"interpolation": "cubic"}),
        (BinningCalibrator, {"n_bins": 0}),
        (BinningCalibrator, {"n_bins": "many"}),
        (BinningCalibrator, {"n_bins": 2.5}),
        (BinningCalibrator, {"cv": 1}),
        (BinningCalibrator, {"boundary": "upper"}),
        (ROCHullCalibrator, {"laplace": "yes"}),
        (NoCalibration, {"rescale": "zscore"}),
    ],
)
def test_bad_parameters(cls, params):
    with pytest.raises(ParameterError):
        cls(**params).fit([0.1, 0.5, 0.9], [0, 1, 1])


# --------------------------------------------------------------------------------------------------
# properties (hypothesis)


@st.composite
def calib_data(draw, max_n=30):
    n = draw(st.integers(0, max_n))
    pool = draw(st.sampled_from(["ties", "floats"]))
    if pool == "ties":
        elem = st.integers(-4, 4).map(float)
    else:
        # Rounded so that the increasing transformation below keeps distinct scores distinct.
        elem = st.floats(-50, 50, allow_nan=False, allow_infinity=False).map(lambda v: round(v, 4))
    s = draw(st.lists(elem, min_size=n + 2, max_size=n + 2))
    y = [0, 1] + draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    w = [1, 1] + draw(st.lists(st.sampled_from([0, 1, 2, 3]), min_size=n, max_size=n))
    return np.array(s), np.array(y), np.array(w, dtype=float)


def as_kind(s, kind):
    return expit(s / 10.0) if kind == "proba" else s


GRID = np.concatenate([np.linspace(-60, 60, 241), [-1e6, 1e6]])
GRID.sort()


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=40, deadline=None)
@given(data=calib_data(), kind=st.sampled_from(["decision", "proba"]))
def test_output_in_unit_interval_and_monotone(name, data, kind):
    s, y, w = data
    c = make(name).fit(as_kind(s, kind), y, sample_weight=w, score_kind=kind)
    p = c.predict(as_kind(GRID, kind))
    assert p.shape == GRID.shape
    assert np.all((p >= 0) & (p <= 1))
    if name in MONOTONE:
        assert np.all(np.diff(p) >= -1e-12)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=40, deadline=None)
@given(data=calib_data(), kind=st.sampled_from(["decision", "proba"]))
def test_weight_two_equals_duplicated_rows(name, data, kind):
    s, y, w = data
    rows = np.repeat(np.arange(s.size), w.astype(int))
    a = make(name).fit(as_kind(s, kind), y, sample_weight=w, score_kind=kind)
    b = make(name).fit(as_kind(s[rows], kind), y[rows], score_kind=kind)
    t = as_kind(GRID, kind)
    np.testing.assert_allclose(a.predict(t), b.predict(t), atol=1e-7)


@pytest.mark.parametrize("scores, kind", [
    ([12.75] * 4, "decision"),            # hypothesis's counterexample: one score for every row
    ([50.0, 60.0, 50.0, 70.0], "decision"),  # distinct scores whose probabilities clip to the same value
    ([0.3] * 4, "proba"),
])
def test_beta_on_one_probability_is_the_weighted_mean(scores, kind):
    """When every live row has the same clipped probability, beta's features are constant and its
    ridge optimum is a = b = 0, c = logit(weighted mean), exactly: the weighted fit and the rows
    repeated give the same bits (Newton on the near-singular problem stopped 3.6e-7 apart)."""
    s, y, w = np.array(scores), np.array([0, 1, 0, 1]), np.array([1.0, 1.0, 2.0, 2.0])
    rows = np.repeat(np.arange(4), w.astype(int))
    a = make("beta").fit(s, y, sample_weight=w, score_kind=kind)
    b = make("beta").fit(s[rows], y[rows], score_kind=kind)
    assert (a.a_, a.b_, a.c_) == (b.a_, b.b_, b.c_) == (0.0, 0.0, 0.0)
    t = as_kind(GRID, kind)
    np.testing.assert_array_equal(a.predict(t), np.full(t.shape, 0.5))
    w2 = np.array([0.0, 1.0, 3.0, 1.0])  # a weight-0 row is not live: the mean is 2/5
    c = make("beta").fit(s, y, sample_weight=w2, score_kind=kind)
    assert c.c_ == pytest.approx(np.log(2.0 / 3.0), abs=1e-15) and c.a_ == c.b_ == 0.0


VARIANTS = {
    "binning_auto": ("binning", {"n_bins": "auto"}),
    "rocch_laplace": ("rocch", {"laplace": True}),
    "isotonic_linear": ("isotonic", {"interpolation": "linear"}),
}


@pytest.mark.parametrize("name", NAMES + list(VARIANTS))
@settings(max_examples=30, deadline=None)
@given(data=calib_data(), kind=st.sampled_from(["decision", "proba"]))
def test_state_round_trip_is_exact(name, data, kind):
    s, y, w = data
    base, params = VARIANTS.get(name, (name, {}))
    c = make(base, **params).fit(as_kind(s, kind), y, sample_weight=w, score_kind=kind)
    r = roundtrip(c)
    t = as_kind(GRID, kind)
    np.testing.assert_array_equal(r.predict(t), c.predict(t))
    assert r.to_state().keys() == c.to_state().keys()


@pytest.mark.parametrize("name", ["isotonic", "rocch", "binning"])
@settings(max_examples=40, deadline=None)
@given(data=calib_data())
def test_invariant_to_increasing_transformation(name, data):
    s, y, w = data
    c = make(name).fit(s, y, sample_weight=w)
    g = lambda v: np.exp(v / 25.0) * 3.0 + 1.0  # noqa: E731 - strictly increasing
    d = make(name).fit(g(s), y, sample_weight=w)
    if name == "binning":
        s = s[w > 0]  # midpoint boundaries between bins move with the transformation; bins do not
    np.testing.assert_allclose(d.predict(g(s)), c.predict(s), atol=1e-12)


# --------------------------------------------------------------------------------------------------
# end to end: calibrating an over-confident learner (scikit-learn's test_calibration behaviour)


def test_isotonic_and_sigmoid_lower_brier_of_gaussian_nb():
    from sklearn.datasets import make_classification
    from sklearn.naive_bayes import GaussianNB

    X, y = make_classification(
        n_samples=3000, n_features=20, n_informative=4, n_redundant=10, random_state=42
    )
    X_tr, y_tr = X[:1000], y[:1000]
    X_cal, y_cal = X[1000:2000], y[1000:2000]
    X_te, y_te = X[2000:], y[2000:]
    nb = GaussianNB().fit(X_tr, y_tr)
    p_cal = nb.predict_proba(X_cal)[:, 1]
    p_te = nb.predict_proba(X_te)[:, 1]
    raw = np.mean((p_te - y_te) ** 2)
    for name in ("isotonic", "sigmoid", "beta", "binning", "rocch"):
        c = BY_NAME[name]().fit(p_cal, y_cal, score_kind="proba")
        assert np.mean((c.predict(p_te) - y_te) ** 2) < raw, name
