"""Multiclass scalings: calibrators of a k-class model's whole score matrix (issue 21 §3).

``temperature`` on k columns fits ONE temperature of ``softmax(z / T)``.  Oracles: scikit-learn's own
temperature scaling (the calibrator ``CalibratedClassifierCV(method="temperature")`` fits, on the same
logits and weights) to 1e-6 in ``T``; hypothesis over random partitionings of the rows (empty and
one-row parts included) and "weight 2 = the row twice"; the binary calibrator as it was, bit for bit, on
one column.  End to end: the partitioned fit of score columns (the oracle's T, probabilities
``softmax(z / T)``), ``recalibrate``, a learner's k-column scores in memory and through the CLI, and
the one-line refusals.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from calengine.errors import DataError, ModelFormatError, ParameterError
from calengine.reductions.calibrators import fit_by_reduction
from calengine_builtins.calibrators import TemperatureCalibrator
from calengine_builtins.calibrators.scaling import TemperatureCalibrator as BinaryTemperature
from calengine.testing import rewrite_manifest
from calengine.testing.cluster import assert_one_line_error, run_cli


def load_manifest(model) -> dict:
    return json.loads((Path(model) / "manifest.json").read_text())


def _logits(seed: int, n: int, k: int, strength: float = 1.5, scale: float = 2.5):
    r = np.random.default_rng(seed)
    y = r.integers(0, k, n)
    Z = r.normal(size=(n, k))
    Z[np.arange(n), y] += strength
    return Z * scale, y


def _sklearn_temperature(Z, y, w=None) -> float:
    from sklearn.calibration import _TemperatureScaling

    return float(1.0 / _TemperatureScaling().fit(Z, y, sample_weight=w).beta_)


def _softmax(Z):
    E = np.exp(Z - Z.max(axis=1, keepdims=True))
    return E / E.sum(axis=1, keepdims=True)


# ------------------------------------------------------------------------------------------ the calibrator


@pytest.mark.parametrize("seed,k,scale", [(0, 3, 2.5), (1, 10, 0.3), (2, 5, 8.0), (3, 2, 1.0)])
def test_temperature_equals_sklearns_on_the_same_logits(seed, k, scale):
    Z, y = _logits(seed, 800, k, scale=scale)
    w = np.random.default_rng(seed).uniform(0.2, 3.0, y.size)
    for weights in (None, w):
        cal = TemperatureCalibrator().fit(Z, y, sample_weight=weights)
        assert cal.n_classes_ == k
        assert cal.temperature_ == pytest.approx(_sklearn_temperature(Z, y, weights), abs=1e-6, rel=1e-6)
        np.testing.assert_allclose(cal.predict(Z), _softmax(Z / cal.temperature_), rtol=1e-12)


def test_probability_scores_are_scaled_as_log_probabilities():
    """For probabilities the logits are log p: a multinomial model's logits up to a row constant."""
    Z, y = _logits(4, 600, 4)
    P = _softmax(Z)
    a = TemperatureCalibrator().fit(P, y, score_kind="proba")
    b = TemperatureCalibrator().fit(Z, y)
    assert a.temperature_ == pytest.approx(b.temperature_, rel=1e-9)
    np.testing.assert_allclose(a.predict(P), b.predict(Z), atol=1e-12)
    with pytest.raises(DataError, match="score_kind='proba'"):
        TemperatureCalibrator().fit(Z, y, score_kind="proba")


def test_one_column_is_the_binary_calibrator_bit_for_bit():
    r = np.random.default_rng(5)
    s = r.normal(size=500) * 3
    y = (r.random(500) < 1 / (1 + np.exp(-s / 2))).astype(int)
    for kind, scores in (("decision", s), ("proba", 1 / (1 + np.exp(-s)))):
        new = TemperatureCalibrator().fit(scores, y, score_kind=kind)
        old = BinaryTemperature().fit(scores, y, score_kind=kind)
        assert new.temperature_ == old.temperature_
        assert np.array_equal(new.predict(scores), old.predict(scores))
        assert new.to_state().keys() == old.to_state().keys()
        assert not hasattr(new, "n_classes_")


def _cut(n: int, cuts: list[int]) -> list[slice]:
    edges = [0, *sorted(min(c, n) for c in cuts), n]
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), k=st.integers(2, 6), n=st.integers(2, 120),
       cuts=st.lists(st.integers(0, 120), max_size=8), kind=st.sampled_from(["decision", "proba"]))
def test_any_partitioning_gives_the_same_temperature(seed, k, n, cuts, kind):
    """Pieces as the engine cuts them (empty and one-row parts too), merged in order: the same fit."""
    Z, y = _logits(seed, n, k, scale=1.0 + seed % 5)
    y[:2] = [0, 1]  # two classes at least
    S = _softmax(Z) if kind == "proba" else Z
    w = np.random.default_rng(seed).integers(0, 3, n).astype(float)
    w[:2] = 1.0
    whole = TemperatureCalibrator().fit(S, y, sample_weight=w, score_kind=kind)
    pieces = [(S[c], y[c], w[c]) for c in _cut(n, cuts)]
    parted = fit_by_reduction(TemperatureCalibrator(), pieces, kind, n_classes=k)
    assert parted.temperature_ == pytest.approx(whole.temperature_, rel=1e-9)
    # a weight of 2 is the row twice (weight 0: the row absent)
    rows = np.repeat(np.arange(n), w.astype(int))
    twice = TemperatureCalibrator().fit(S[rows], y[rows], score_kind=kind)
    assert twice.temperature_ == pytest.approx(whole.temperature_, rel=1e-9)


def test_bad_input_is_one_line():
    Z, y = _logits(6, 100, 3)
    bad = Z.copy()
    bad[3, 1] = np.nan
    with pytest.raises(DataError, match="NaN or infinite"):
        TemperatureCalibrator().fit(bad, y)
    with pytest.raises(DataError, match="only one class"):
        TemperatureCalibrator().fit(Z, np.zeros_like(y))
    with pytest.raises(DataError, match="class indices 0..2"):
        TemperatureCalibrator().fit(Z, y + 1)
    with pytest.raises(DataError, match="every sample_weight is zero"):
        TemperatureCalibrator().fit(Z, y, sample_weight=np.zeros(y.size))
    cal = TemperatureCalibrator().fit(Z, y)
    with pytest.raises(DataError, match="fitted on 3 score columns"):
        cal.predict(Z[:, :2])
    with pytest.raises(ParameterError, match="between 2 and"):
        fit_by_reduction(TemperatureCalibrator(), [(np.zeros((2, 1001)), [0, 1], None)], n_classes=1001)


def test_state_round_trip_and_damage():
    Z, y = _logits(7, 300, 4)
    cal = TemperatureCalibrator().fit(Z, y)
    state = cal.to_state()
    assert set(state) == {"temperature_", "score_kind_", "n_classes_"}
    back = TemperatureCalibrator().from_state(state)
    assert np.array_equal(back.predict(Z), cal.predict(Z))
    for key, value in (("n_classes_", 1), ("n_classes_", 2.5), ("temperature_", -1.0), ("temperature_", np.inf)):
        with pytest.raises(ModelFormatError, match="damaged"):
            TemperatureCalibrator().from_state({**state, key: value})


def test_all_equal_logits_give_unit_temperature():
    y = np.array([0, 1, 2, 1])
    cal = TemperatureCalibrator().fit(np.full((4, 3), 2.0), y)
    assert cal.temperature_ == 1.0
    np.testing.assert_allclose(cal.predict(np.zeros((1, 3))), [[1 / 3] * 3])


# ------------------------------------------------------------------------------------------ the engine


def _features_table(seed: int, n: int = 900, k: int = 3) -> pd.DataFrame:
    r = np.random.default_rng(seed)
    y = r.integers(0, k, n)
    X = r.normal(size=(n, 4)) + np.eye(k, 4)[y] * 1.5
    df = pd.DataFrame(X, columns=[f"x{j}" for j in range(4)])
    df["y"] = y
    return df


def test_in_memory_learner_fits_one_temperature_per_member():
    from calengine import CalibratedClassifier

    df = _features_table(8)
    X, y = df.drop(columns="y").to_numpy(), df["y"].to_numpy()
    clf = CalibratedClassifier(learner="logistic_regression", method="temperature", cv=3).fit(X, y)
    expected = []
    for member in clf.model_.members:
        (cal,) = member.calibrators
        assert cal.n_classes_ == 3 and cal.score_kind_ == "proba"
        p = member.learners[0].score(X[:20])
        expected.append(_softmax(np.log(np.clip(p, 1e-12, 1)) / cal.temperature_))
    np.testing.assert_allclose(clf.predict_proba(X[:20]), np.mean(expected, axis=0), atol=1e-12)
    with pytest.raises(ParameterError, match="its own combiner"):
        CalibratedClassifier(learner="logistic_regression", method="temperature", cv=3,
                             multiclass="all_pairs:coupling").fit(X, y)


def test_score_columns_fit_one_temperature_end_to_end(tmp_path):
    """--scores s0..s3 --score-kind logit: the partitioned fit reads the logits (not the one-vs-rest
    log-odds the per-column calibrators see) and finds scikit-learn's T; score writes softmax(z/T);
    recalibrate refits it; --update and --multiclass are refused in one line."""
    Z, y = _logits(9, 2400, 4)
    df = pd.DataFrame({f"s{j}": Z[:, j] for j in range(4)})
    df["y"] = y
    data = tmp_path / "scores.parquet"
    df.to_parquet(data, row_group_size=500)
    model = tmp_path / "model"
    args = ["--target", "y", "--scores", "s0,s1,s2,s3", "--classes", "0,1,2,3", "--score-kind", "logit",
            "--method", "temperature"]
    r = run_cli("fit", data, *args, "--output", model)
    assert r.returncode == 0, r
    (member,) = load_manifest(model)["members"]
    (cal,) = member["calibrators"]
    t = cal["state"]["scalars"]["temperature_"]
    assert cal["state"]["scalars"]["n_classes_"] == 4
    assert t == pytest.approx(_sklearn_temperature(Z, y), abs=1e-6)
    out = tmp_path / "scored.parquet"
    assert run_cli("score", model, data, "--output", out).returncode == 0
    scored = pd.read_parquet(out)
    np.testing.assert_allclose(scored[[f"p_{j}" for j in range(4)]].to_numpy(), _softmax(Z / t), atol=1e-9)
    again = tmp_path / "again"
    assert run_cli("recalibrate", model, data, "--target", "y", "--output", again).returncode == 0
    (member,) = load_manifest(again)["members"]
    assert member["calibrators"][0]["state"]["scalars"]["temperature_"] == pytest.approx(t, rel=1e-12)
    assert_one_line_error(run_cli("recalibrate", model, data, "--target", "y", "--update", "--output",
                                  tmp_path / "upd"), "--update", "refit")
    # damage: a class count that does not fit the model is refused on load
    rewrite_manifest(model, lambda m: m["members"][0]["calibrators"][0]["state"]["scalars"].update(temperature_=-2.0))
    assert_one_line_error(run_cli("score", model, data, "--output", tmp_path / "x.parquet"), "temperature_")


def test_cli_learner_fit_and_refusals(tmp_path):
    df = _features_table(10)
    data = tmp_path / "train.parquet"
    df.to_parquet(data, row_group_size=300)
    model = tmp_path / "model"
    r = run_cli("fit", data, "--target", "y", "--learner", "logistic_regression", "--method", "temperature",
                "--cv", "3", "--output", model)
    assert r.returncode == 0, r
    members = load_manifest(model)["members"]
    assert len(members) == 3 and all(len(m["calibrators"]) == 1 for m in members)
    ev = run_cli("evaluate", model, data, "--target", "y")
    assert ev.returncode == 0 and "log_loss" in ev.stdout, ev
    assert_one_line_error(
        run_cli("fit", data, "--target", "y", "--learner", "logistic_regression", "--method", "temperature",
                "--multiclass", "all_pairs:coupling", "--output", tmp_path / "m2"), "its own combiner")
    plugins = run_cli("plugins", "temperature")
    assert plugins.returncode == 0 and "softmax" in plugins.stdout, plugins


# ------------------------------------------------------------------------------------------ linear scalings


def _scipy_fit(cal, Z, y, w):
    """scipy.optimize on the calibrator's own objective (mean weighted log loss + ODIR), from the same
    start (W = I, b = 0); its gradient is the analytic one of the same formula."""
    from scipy.optimize import minimize

    from calengine_builtins.calibrators.multiclass_solvers import linear_loss_grad

    k = Z.shape[1]
    cal._red = {"k": k, "total": float(w.sum())}
    Zin = cal._inputs(Z, "decision")
    theta0 = np.concatenate((np.eye(k).reshape(-1) if cal._full else np.ones(k), np.zeros(k)))

    def fg(theta):
        return cal.objective(*linear_loss_grad(Zin, y, w, theta, cal._full), theta)

    res = minimize(fg, theta0, jac=True, method="L-BFGS-B",
                   options={"gtol": 1e-13, "ftol": 1e-16, "maxiter": 10000, "maxcor": 30})
    del cal._red
    return res.x


@pytest.mark.parametrize("name,params", [
    ("vector_scaling", {}), ("matrix_scaling", {"reg_lambda": 0.1, "reg_mu": 0.1}),
    ("matrix_scaling", {"reg_lambda": 0.0, "reg_mu": 0.0}), ("dirichlet", {"reg_lambda": 0.1, "reg_mu": 0.1}),
    ("dirichlet", {"form": "diagonal"}),
])
def test_linear_scalings_equal_scipy_on_the_same_objective(name, params):
    from calengine_builtins.calibrators import (DirichletCalibrator, MatrixScalingCalibrator,
                                                VectorScalingCalibrator)

    cls = {"vector_scaling": VectorScalingCalibrator, "matrix_scaling": MatrixScalingCalibrator,
           "dirichlet": DirichletCalibrator}[name]
    Z, y = _logits(11, 1200, 4)
    Z[:, 0] *= 1.7  # one class over-confident: the maps differ from temperature scaling
    w = np.random.default_rng(11).uniform(0.2, 2.0, y.size)
    cal = cls(**params).fit(Z, y, sample_weight=w)
    fitted = np.concatenate((cal.coef_.reshape(-1), cal.intercept_))
    np.testing.assert_allclose(fitted, _scipy_fit(cls(**params), Z, y, w), atol=1e-6)
    P = cal.predict(Z)
    assert P.shape == Z.shape and np.allclose(P.sum(axis=1), 1.0)
    back = cls(**params).from_state(cal.to_state())
    assert np.array_equal(back.predict(Z), P)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(4, 80), cuts=st.lists(st.integers(0, 80), max_size=6),
       name=st.sampled_from(["vector_scaling", "matrix_scaling", "dirichlet"]))
@example(seed=90, n=4, cuts=[1], name="vector_scaling")  # slopes near 1,600: agree to 1.6e-7 relative
def test_linear_scalings_do_not_depend_on_the_partitioning(seed, n, cuts, name):
    """The same optimum from the pieces' merged statistics as from the whole table, to the solver's
    tolerance: relative 1e-6 (on 4 rows the slopes can reach thousands, where an absolute 1e-7 is
    below the Newton stop's own rounding), absolute 1e-7 near zero."""
    from calengine_builtins.calibrators import (DirichletCalibrator, MatrixScalingCalibrator,
                                                VectorScalingCalibrator)

    cls = {"vector_scaling": VectorScalingCalibrator, "matrix_scaling": MatrixScalingCalibrator,
           "dirichlet": DirichletCalibrator}[name]
    Z, y = _logits(seed, n, 3, scale=1.0)
    y[:3] = [0, 1, 2]
    w = np.random.default_rng(seed).integers(0, 3, n).astype(float)
    w[:3] = 1.0
    whole = cls(reg_lambda=0.1, reg_mu=0.1).fit(Z, y, sample_weight=w)
    pieces = [(Z[c], y[c], w[c]) for c in _cut(n, cuts)]
    parted = fit_by_reduction(cls(reg_lambda=0.1, reg_mu=0.1), pieces, "decision", n_classes=3)
    np.testing.assert_allclose(parted.coef_, whole.coef_, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(parted.intercept_, whole.intercept_, rtol=1e-6, atol=1e-7)


def test_linear_scalings_refuse_bad_parameters_and_too_many_classes():
    from calengine_builtins.calibrators import DirichletCalibrator, MatrixScalingCalibrator

    Z, y = _logits(12, 50, 3)
    with pytest.raises(ParameterError, match="form must be"):
        DirichletCalibrator(form="half").fit(Z, y)
    with pytest.raises(ParameterError, match="reg_lambda"):
        MatrixScalingCalibrator(reg_lambda=-1.0).fit(Z, y)
    with pytest.raises(ParameterError, match="at most\\s+100 classes"):
        MatrixScalingCalibrator().fit(np.zeros((2, 101)), [0, 1])


@pytest.mark.parametrize("name,params", [("matrix_scaling", {"reg_lambda": 0.1, "reg_mu": 0.1}),
                                         ("dirichlet", {"form": "diagonal"})])
def test_partitioned_score_column_fit_equals_the_in_memory_fit(name, params):
    """calibrate_scores over a partitioned table: the calibrator of the logits' log-softmax (what a
    multiclass scaling reads of k logit columns), fitted in one process on the same rows."""
    from scipy.special import log_softmax

    import calengine
    from calengine_builtins.calibrators import DirichletCalibrator, MatrixScalingCalibrator

    cls = {"matrix_scaling": MatrixScalingCalibrator, "dirichlet": DirichletCalibrator}[name]
    Z, y = _logits(13, 1500, 3)
    df = pd.DataFrame({f"s{j}": Z[:, j] for j in range(3)})
    df["y"] = y
    model = calengine.calibrate_scores(df, "y", scores=["s0", "s1", "s2"], classes=[0, 1, 2], score_kind="logit",
                                       method=name, method_params=params)
    (member,) = model.members
    (cal,) = member.calibrators
    ref = cls(**params).fit(log_softmax(Z, axis=1), y)
    np.testing.assert_allclose(cal.coef_, ref.coef_, atol=1e-6)
    np.testing.assert_allclose(cal.intercept_, ref.intercept_, atol=1e-6)
    P = model.predict_proba(df[["s0", "s1", "s2"]])
    np.testing.assert_allclose(P, ref.predict(log_softmax(Z, axis=1)), atol=1e-9)


def test_refit_mode_fits_one_scaling_on_the_out_of_fold_scores():
    """mode='refit' (in memory): the out-of-fold scores of every row calibrate one scaling."""
    from calengine import CalibratedClassifier

    df = _features_table(14, n=600)
    X, y = df.drop(columns="y").to_numpy(), df["y"].to_numpy()
    clf = CalibratedClassifier(learner="logistic_regression", method="vector_scaling", cv=3, mode="refit").fit(X, y)
    (member,) = clf.model_.members
    (cal,) = member.calibrators
    assert cal.coef_.shape == (3,) and not cal.binary_
    np.testing.assert_allclose(clf.predict_proba(X[:5]).sum(axis=1), 1.0)


def test_lbfgs_ends_within_the_round_budget_with_its_best_point():
    """A badly conditioned objective (the scalings on real logits crawl like this) ends after at most
    MAX_EVALUATIONS evaluations, below the engine's 500-round bound, with the best accepted point and
    converged False; a well-conditioned one ends by its gradient rule."""
    from calengine_builtins.calibrators.multiclass_solvers import MAX_EVALUATIONS, lbfgs_start, lbfgs_update

    def run(scales):
        a = np.asarray(scales, dtype=np.float64)
        st, x, calls, best = lbfgs_start(np.ones_like(a)), np.ones_like(a), 0, np.inf
        while x is not None:
            f, g = float(0.5 * np.sum(a * x**2)), a * x
            best = min(best, f)
            calls += 1
            x = lbfgs_update(st, f, g)
        return st, calls, best

    st, calls, best = run(np.logspace(0, 1, 8))
    assert st["converged"] and np.max(np.abs(st["x"])) < 1e-9 and calls < 100
    st, calls, best = run(np.logspace(-6, 6, 60))
    assert calls <= MAX_EVALUATIONS and st["converged"] is False
    assert float(0.5 * np.sum(np.logspace(-6, 6, 60) * st["x"] ** 2)) == best  # the best point is kept
