"""``sigmoid --method-param on=logit|score`` (issue 21 §3): Platt's sigmoid fitted on ``logit(p)`` of a
probability score, or on the score as given.

Oracles: ``scipy.optimize`` minimising Platt's objective (smoothed targets, weighted) on ``logit(p)``
to 1e-6 in ``A, B``; ``on=logit`` on decision values is ``on=score`` bit for bit; hypothesis over random
partitionings (the reduction equals ``fit``) and "weight 2 = the row twice"; the plugin kit's
reduction-agreement check; models saved before ``on`` existed load and score as before; the SQL export
run in DuckDB equals ``calengine score``; bad values are one line.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import calengine
from calengine.errors import DataError, ModelFormatError, ParameterError
from calengine.reductions.calibrators import fit_by_reduction
from calengine_builtins.calibrators import SigmoidCalibrator
from calengine.testing.cluster import assert_one_line_error, run_cli

EPS = 1e-12


def _logit(p):
    p = np.clip(p, EPS, 1 - EPS)
    return np.log(p) - np.log1p(-p)


def _rows(seed: int, n: int, extremes: bool = False):
    """Overconfident probabilities with the known link P(y|p) = σ(0.5 logit p − 0.4); with
    ``extremes`` some rows are exactly 0 and 1 (a learner's predict_proba can return them)."""
    r = np.random.default_rng(seed)
    z = r.normal(-1.0, 2.5, n)
    p = 1 / (1 + np.exp(-z))
    y = (r.random(n) < 1 / (1 + np.exp(-(0.5 * z - 0.4)))).astype(np.int64)
    if extremes:
        p[:3], p[3:6] = 0.0, 1.0
    return p, y


def _scipy_platt(f, y, w=None):
    """Platt's objective (his smoothed targets, weighted cross-entropy) minimised by scipy's BFGS."""
    from scipy.optimize import minimize

    w = np.ones(f.size) if w is None else w
    n_pos, n_neg = w[y == 1].sum(), w[y == 0].sum()
    t = np.where(y == 1, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))

    def obj(theta):
        zz = theta[0] * f + theta[1]  # P = σ(−zz)
        q = 1 / (1 + np.exp(-zz))
        val = np.sum(w * ((t - 1) * zz + np.logaddexp(0, zz)))
        g = w * (t - 1 + q)
        return val, np.array([np.sum(g * f), np.sum(g)])

    res = minimize(obj, [0.0, np.log((n_neg + 1) / (n_pos + 1))], jac=True, method="BFGS",
                   options={"gtol": 1e-11, "maxiter": 10000})
    return res.x


@pytest.mark.parametrize("seed,n,extremes", [(0, 500, False), (1, 3000, True), (2, 80, False)])
def test_logit_fit_equals_scipy_on_platts_objective(seed, n, extremes):
    p, y = _rows(seed, n, extremes)
    w = np.random.default_rng(seed).uniform(0.2, 3.0, n)
    for weights in (None, w):
        cal = SigmoidCalibrator(on="logit").fit(p, y, sample_weight=weights, score_kind="proba")
        a, b = _scipy_platt(_logit(p), y, weights)
        assert cal.a_ == pytest.approx(a, abs=1e-6, rel=1e-6)
        assert cal.b_ == pytest.approx(b, abs=1e-6, rel=1e-6)
        np.testing.assert_allclose(cal.predict(p), 1 / (1 + np.exp(cal.a_ * _logit(p) + cal.b_)), rtol=1e-12)
    # on the generated link the fit recovers slope and intercept (P = σ(−A logit p − B))
    if n >= 3000:
        assert -cal.a_ == pytest.approx(0.5, abs=0.1) and -cal.b_ == pytest.approx(-0.4, abs=0.15)


def test_score_is_platt_on_the_probability_and_logit_is_the_default():
    p, y = _rows(3, 800)
    score = SigmoidCalibrator(on="score").fit(p, y, score_kind="proba")
    a, b = _scipy_platt(p, y)
    assert (score.a_, score.b_) == pytest.approx((a, b), abs=1e-6)
    default = SigmoidCalibrator().fit(p, y, score_kind="proba")
    assert default.on == default.on_ == "logit"
    assert np.array_equal(default.predict(p), SigmoidCalibrator(on="logit").fit(p, y, score_kind="proba").predict(p))


def test_decision_values_are_the_same_fit_either_way():
    p, y = _rows(4, 600)
    z = _logit(p) * 3.0
    a = SigmoidCalibrator(on="score").fit(z, y)
    b = SigmoidCalibrator(on="logit").fit(z, y)
    assert (a.a_, a.b_) == (b.a_, b.b_)
    assert np.array_equal(a.predict(z), b.predict(z))


def _cut(n: int, cuts: list[int]) -> list[slice]:
    edges = [0, *sorted(min(c, n) for c in cuts), n]
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(4, 150), cuts=st.lists(st.integers(0, 150), max_size=8),
       on=st.sampled_from(["logit", "score"]))
def test_any_partitioning_gives_the_same_fit(seed, n, cuts, on):
    p, y = _rows(seed, n, extremes=seed % 3 == 0)
    y[:2] = [0, 1]
    w = np.random.default_rng(seed).integers(0, 3, n).astype(float)
    w[:2] = 1.0
    whole = SigmoidCalibrator(on=on).fit(p, y, sample_weight=w, score_kind="proba")
    parted = fit_by_reduction(SigmoidCalibrator(on=on), [(p[c], y[c], w[c]) for c in _cut(n, cuts)], "proba")
    grid = np.linspace(0, 1, 41)
    np.testing.assert_allclose(parted.predict(grid), whole.predict(grid), atol=1e-9)
    rows = np.repeat(np.arange(n), w.astype(int))
    twice = SigmoidCalibrator(on=on).fit(p[rows], y[rows], score_kind="proba")
    np.testing.assert_allclose(twice.predict(grid), whole.predict(grid), atol=1e-7)


class _OnScore(SigmoidCalibrator):
    """The kit instantiates the class without arguments: one class per setting."""

    def __init__(self, on: str = "score"):
        super().__init__(on=on)


class _OnLogit(SigmoidCalibrator):
    def __init__(self, on: str = "logit"):
        super().__init__(on=on)


@pytest.mark.parametrize("cls", [_OnScore, _OnLogit])
def test_the_plugin_kit_and_its_reduction_agreement_check_pass(cls):
    from calengine.reductions.agreement import check_reduction_once
    from calengine.testing import check_calibrator

    check_calibrator(cls)
    for kind in ("proba", "decision"):
        check_reduction_once(cls(), kind)  # raises PluginError on disagreement


def test_state_round_trip_and_models_from_before_on_load_as_score():
    p, y = _rows(5, 500)
    grid = np.linspace(0, 1, 101)
    for on in ("logit", "score"):
        cal = SigmoidCalibrator(on=on).fit(p, y, score_kind="proba")
        state = cal.to_state()
        assert state["on_"] == on
        back = SigmoidCalibrator(on="logit" if on == "score" else "score").from_state(state)
        assert np.array_equal(back.predict(grid), cal.predict(grid))
    old = SigmoidCalibrator(on="score").fit(p, y, score_kind="proba")
    state = {k: v for k, v in old.to_state().items() if k != "on_"}  # what an older calengine wrote
    loaded = SigmoidCalibrator().from_state(state)  # the new default is on="logit" ...
    assert loaded.on_ == "score"  # ... but the old model was fitted on the score, and scores as before
    assert np.array_equal(loaded.predict(grid), old.predict(grid))
    with pytest.raises(ModelFormatError, match="'on_' is 'bogus'.*damaged"):
        SigmoidCalibrator().from_state({**state, "on_": "bogus"})


def test_bad_values_are_one_line():
    p, y = _rows(6, 100)
    for bad in ("logits", None, 1):
        with pytest.raises(ParameterError, match="on must be 'score' or 'logit'"):
            SigmoidCalibrator(on=bad).fit(p, y, score_kind="proba")
    with pytest.raises(DataError, match="score_kind='proba' but scores range over"):
        SigmoidCalibrator(on="logit").fit(p * 3 - 1, y, score_kind="proba")
    # on=score keeps Platt's use of any number (as before): no range check
    SigmoidCalibrator(on="score").fit(p * 3 - 1, y, score_kind="proba")


def test_cli_fit_on_score_columns_and_a_bad_value(tmp_path):
    p, y = _rows(7, 2000)
    data = tmp_path / "t.parquet"
    pd.DataFrame({"s": p, "y": y}).to_parquet(data)
    for on in ("logit",):  # on=score through the API below; one CLI fit keeps the test lean
        out = tmp_path / f"m_{on}"
        r = run_cli("fit", str(data), "--target", "y", "--scores", "s", "--method", "sigmoid",
                    "--method-param", f"on={on}", "--output", str(out))
        assert r.returncode == 0, r.stderr
        manifest = json.loads((out / "manifest.json").read_text())
        assert f'"on": "{on}"' in json.dumps(manifest)
        model = calengine.load_model(out)
        want = SigmoidCalibrator(on=on).fit(p, y, score_kind="proba").predict(p)
        np.testing.assert_allclose(model.predict_frame(pd.DataFrame({"s": p}))["p_1"], want, atol=1e-9)
    r = run_cli("fit", str(data), "--target", "y", "--scores", "s", "--method", "sigmoid",
                "--method-param", "on=logits", "--output", str(tmp_path / "bad"))
    assert_one_line_error(r, "on must be 'score' or 'logit'")
    assert not (tmp_path / "bad").exists()


def test_sql_export_of_on_logit_in_duckdb_equals_calengine_score():
    duckdb = pytest.importorskip("duckdb")
    from calengine.export.sql import model_sql

    p, y = _rows(8, 3000)
    cal = pd.DataFrame({"s": np.round(p, 5), "y": y})
    test = pd.DataFrame({"s": np.concatenate([np.linspace(0, 1, 1001), [0.0, 1.0, 1e-15, 1 - 1e-15, 1 + 1e-10]])})
    for on in ("logit", "score"):
        model = calengine.calibrate_scores(cal, "y", "s", method="sigmoid", method_params={"on": on}, score_kind="proba")
        con = duckdb.connect()
        con.register("input", test)
        got = con.execute(model_sql(model)).df()["p_1"].to_numpy(dtype=np.float64)
        want = model.predict_frame(test)["p_1"].to_numpy()
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert "LN(" in model_sql(calengine.calibrate_scores(cal, "y", "s", method="sigmoid", score_kind="proba"))
