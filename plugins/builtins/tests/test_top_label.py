"""``top_label`` (Gupta & Ramdas, ICLR 2022): one binary calibrator of the top probability per predicted
class, the global one for classes predicted too rarely.

Oracles: an in-memory reference that groups the rows by argmax and fits each group with scikit-learn
(isotonic), numpy (the equal-mass bins) or scipy (Platt on the logit), to 1e-9 in the calibrated top
probability (1e-6 for scipy's optimiser); hypothesis over random partitionings (the reduction equals
``fit``); the full rows' rule (sum 1, proportional, capped below the top); top-label ECE improving on
Pendigits with naive Bayes; the CLI from a learner and from ``--scores ... --score-kind proba``; bad
parameters and damaged states in one line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calengine.errors import DataError, ModelFormatError, ParameterError
from calengine.reductions.calibrators import fit_by_reduction
from calengine_builtins.calibrators import TopLabelCalibrator
from calengine_builtins.calibrators.top_label import BASES, share_rest
from calengine.testing.cluster import run_cli

REPO = Path(__file__).resolve().parents[3]

PENDIGITS = REPO / "data" / "pendigits_test.parquet"


def _probs(seed: int, n: int, k: int, scale: float = 3.0, ties: bool = False):
    """Over-confident softmax probabilities of noisy logits (``ties``: rounded to multiples of 1/64, so
    tied top probabilities are exactly equal -- scikit-learn's isotonic regression also pools values
    1e-15 apart, which renormalised rows would produce; rows then sum to 1 within 5/128)."""
    r = np.random.default_rng(seed)
    y = r.integers(0, k, n)
    Z = r.normal(size=(n, k))
    Z[np.arange(n), y] += 1.5
    E = np.exp(scale * (Z - Z.max(axis=1, keepdims=True)))
    P = E / E.sum(axis=1, keepdims=True)
    if ties:
        P = np.round(P * 64) / 64
    return P, y


def _equal_mass_bins(t, hit, b):
    """numpy reference of equal-mass binning with unit weights (Zadrozny & Elkan's rule as calengine
    states it): cut i at round-half-up(i n / b) sorted rows, moved forward past ties; unseen scores go
    to the bin whose midpoint boundary they pass."""
    order = np.argsort(t, kind="stable")
    ts, hs = t[order], hit[order]
    n = ts.size
    cuts = []
    for i in range(1, b):
        j = int(np.floor(i * n / b + 0.5))
        while 0 < j < n and ts[j] == ts[j - 1]:
            j += 1
        if 0 < j < n:
            cuts.append(j)
    starts = np.unique([0] + cuts)
    ends = np.append(starts[1:], n)
    lo, hi = ts[starts], ts[ends - 1]
    values = np.array([hs[a:e].mean() for a, e in zip(starts, ends)])
    mids = 0.5 * (hi[:-1] + lo[1:])
    return lambda s: values[np.searchsorted(mids, s, side="right")]


def _platt_logit(t, hit):
    """scipy's BFGS on Platt's objective (smoothed targets) on logit(t)."""
    from scipy.optimize import minimize

    f = np.log(np.clip(t, 1e-12, 1 - 1e-12)) - np.log1p(-np.clip(t, 1e-12, 1 - 1e-12))
    n_pos, n_neg = hit.sum(), (1 - hit).sum()
    tt = np.where(hit == 1, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))

    def obj(th):
        z = th[0] * f + th[1]
        q = 1 / (1 + np.exp(-z))
        return np.sum((tt - 1) * z + np.logaddexp(0, z)), np.array([np.sum((tt - 1 + q) * f), np.sum(tt - 1 + q)])

    a, b = minimize(obj, [0.0, 0.0], jac=True, method="BFGS", options={"gtol": 1e-11, "maxiter": 10000}).x
    return lambda s: 1 / (1 + np.exp(a * (np.log(s) - np.log1p(-s)) + b))


def _reference(P, y, base: str, min_rows: int, n_bins: int = 15):
    """Top-label calibration in memory: rows grouped by argmax, one map per group (the global map for
    groups under ``min_rows`` rows or with one outcome); returns the calibrated top probability."""
    from sklearn.isotonic import IsotonicRegression

    c = P.argmax(axis=1)
    t = P[np.arange(len(y)), c]
    hit = (y == c).astype(np.int64)

    def fit(rows):
        if base == "isotonic":
            iso = IsotonicRegression(out_of_bounds="clip").fit(t[rows], hit[rows])
            return iso.predict
        if base == "binning":
            return _equal_mass_bins(t[rows], hit[rows], max(2, min(n_bins, int(rows.sum()) // 50)))
        return _platt_logit(t[rows], hit[rows])

    everything = fit(np.ones(len(y), bool))
    out = np.empty(len(y))
    for cls in np.unique(c):
        rows = c == cls
        small = rows.sum() < min_rows or hit[rows].all() or not hit[rows].any()
        out[rows] = (everything if small else fit(rows))(t[rows])
    return out


@pytest.mark.parametrize("base,min_rows,tol", [("binning", 100, 1e-9), ("isotonic", 100, 1e-9),
                                               ("isotonic", 600, 1e-9), ("sigmoid", 100, 1e-6)])
def test_equals_the_in_memory_reference(base, min_rows, tol):
    P, y = _probs(0, 3000, 5, ties=base == "isotonic")
    # 40 rows that put 0.8 (plus a fifth of their own mass) on class 3 or 4: near-ties of the top value
    odd = (np.arange(40) % 2)[:, None]
    P[:40] = P[:40] * 0.2 + 0.8 * (np.eye(5)[4] * odd + np.eye(5)[3] * (1 - odd))
    cal = TopLabelCalibrator(base=base, min_rows=min_rows).fit(P, y, score_kind="proba")
    Q = cal.predict(P)
    rows = np.arange(len(y))
    c = P.argmax(axis=1)
    np.testing.assert_allclose(Q[rows, c], _reference(P, y, base, min_rows), atol=tol, rtol=0)
    counts = np.bincount(c, minlength=5)
    assert list(cal.fallback_) == [int(n < min_rows) for n in counts]
    if min_rows == 600:
        assert 0 < cal.fallback_.sum() < 5  # some classes use the global map, some their own


def test_full_rows_sum_to_one_keep_the_decision_and_share_in_proportion():
    P, y = _probs(1, 2000, 4)
    cal = TopLabelCalibrator(base="isotonic").fit(P, y, score_kind="proba")
    Q = cal.predict(P)
    rows = np.arange(len(y))
    c = P.argmax(axis=1)
    t = Q[rows, c]
    np.testing.assert_allclose(Q.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(Q >= 0)
    others = Q.copy()
    others[rows, c] = -1
    keep = t > 1 / 4
    assert np.all(others.max(axis=1)[keep] < t[keep])  # the model's decision, strictly
    assert np.array_equal(Q.argmax(axis=1)[keep], c[keep])
    # rows where nothing is capped: the other classes keep their proportions
    R = P.copy()
    R[rows, c] = 0
    scale = (1 - t) / R.sum(axis=1)
    free = np.all(R * scale[:, None] < t[:, None], axis=1)
    assert free.sum() > 100
    Qo = Q.copy()
    Qo[rows, c] = 0
    np.testing.assert_allclose(Qo[free], (R * scale[:, None])[free], atol=1e-12)


def test_share_rest_water_fills():
    Q = np.array([[-1, 0.6, 0.3, 0.1], [-1, 0, 0, 0], [-1, 0.2, 0.2, 0.2], [-1, 0.5, 0.5, 0.0], [-1, 0.9, 0.1, 0.0]])
    mass = np.array([0.6, 0.6, 0.95, 0.7, 0.6])
    cap = np.array([0.4, 0.4, 0.05, 0.3, 0.4])
    out = share_rest(Q, mass, cap)
    np.testing.assert_allclose(out.sum(axis=1), mass, atol=1e-15)
    np.testing.assert_allclose(out[0], [0, 0.36, 0.18, 0.06])  # no cap binds: proportional
    np.testing.assert_allclose(out[1], [0, 0.2, 0.2, 0.2])  # nothing to be proportional to: equal
    np.testing.assert_allclose(out[2], [0, 0.95 / 3] * 1 + [0.95 / 3] * 2)  # cap below 1/k: equal
    np.testing.assert_allclose(out[3], [0, 0.3, 0.3, 0.1])  # both capped, the rest to the zero entry
    np.testing.assert_allclose(out[4], [0, 0.4, 0.2, 0.0])  # one capped, its excess to the other


def _cut(n: int, cuts: list[int]) -> list[slice]:
    edges = [0, *sorted(min(c, n) for c in cuts), n]
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), k=st.integers(2, 5), n=st.integers(30, 400),
       cuts=st.lists(st.integers(0, 400), max_size=6), base=st.sampled_from(["binning", "isotonic", "sigmoid"]),
       kind=st.sampled_from(["proba", "decision"]))
def test_any_partitioning_gives_the_same_fit(seed, k, n, cuts, base, kind):
    P, y = _probs(seed, n, k, ties=seed % 2 == 0)
    S = P if kind == "proba" else np.log(np.clip(P, 1e-300, 1))
    w = np.random.default_rng(seed).integers(0, 3, n).astype(float)
    if not 0 < np.sum(w * (y == P.argmax(axis=1))) < w.sum():
        return
    cal = TopLabelCalibrator(base=base, min_rows=20)
    whole = cal.fit(S, y, sample_weight=w, score_kind=kind)
    parted = fit_by_reduction(TopLabelCalibrator(base=base, min_rows=20), [(S[c], y[c], w[c]) for c in _cut(n, cuts)],
                              kind, n_classes=k)
    np.testing.assert_allclose(parted.predict(S), whole.predict(S), atol=1e-9 if base == "sigmoid" else 1e-12)
    # a weight of 2 is the row twice (min_rows and the bins per class count weight)
    rows = np.repeat(np.arange(n), w.astype(int))
    twice = TopLabelCalibrator(base=base, min_rows=20).fit(S[rows], y[rows], score_kind=kind)
    np.testing.assert_allclose(twice.predict(S), whole.predict(S), atol=1e-7)


def test_two_classes_on_one_column_and_state_round_trip():
    P, y = _probs(2, 1500, 2)
    p, yb = P[:, 1], y
    cal = TopLabelCalibrator(base="isotonic").fit(p, yb, score_kind="proba")
    q = cal.predict(p)
    assert q.shape == p.shape
    np.testing.assert_allclose(q, cal.calibrate_rows(np.column_stack((1 - p, p)))[:, 1], atol=0)
    P4, y4 = _probs(3, 1500, 4)
    for c in (cal, TopLabelCalibrator(base="sigmoid", min_rows=500).fit(P4, y4, score_kind="proba")):
        S = np.column_stack((1 - p, p)) if c.binary_ else P4
        state = c.to_state()
        assert all(isinstance(v, (int, float, str, bool, np.ndarray)) for v in state.values())
        back = TopLabelCalibrator(base=c.base).from_state(state)
        got = back.predict(S[:, 1] if c.binary_ else S)
        assert np.array_equal(got, c.predict(S[:, 1] if c.binary_ else S))
    for edit in ({"fallback_": np.array([2.0, 0, 0, 0])}, {"n_classes_": 3}, {"c9__lo_": np.zeros(2)}):
        with pytest.raises(ModelFormatError, match="damaged"):
            TopLabelCalibrator(base="sigmoid").from_state({**state, **edit})
    missing = {k: v for k, v in state.items() if not k.startswith("c1__")}
    if not state["fallback_"][1]:
        with pytest.raises(ModelFormatError, match="lacks the map"):
            TopLabelCalibrator(base="sigmoid").from_state(missing)


def test_bad_parameters_and_data_are_one_line():
    P, y = _probs(4, 300, 3)
    for params, match in (({"base": "beta"}, "base must be"), ({"min_rows": 0}, "min_rows must be"),
                          ({"min_rows": 2.5}, "min_rows must be"), ({"n_bins": True}, "n_bins must be")):
        with pytest.raises(ParameterError, match=match):
            TopLabelCalibrator(**params).fit(P, y, score_kind="proba")
    with pytest.raises(DataError, match="score_kind='proba'"):
        TopLabelCalibrator().fit(P * 3, y, score_kind="proba")
    with pytest.raises(DataError, match="NaN or infinite"):
        TopLabelCalibrator().fit(np.where(P > 0.9, np.nan, P), y, score_kind="proba")
    cal = TopLabelCalibrator().fit(P, y, score_kind="proba")
    with pytest.raises(DataError, match="fitted on 3 score columns"):
        cal.predict(P[:, :2])


def test_top_label_ece_improves_on_pendigits_with_naive_bayes():
    """GaussianNB's probabilities on Pendigits are far too confident; top-label calibration on one half
    brings the other half's top-label ECE (calengine's ``ece``) down, without changing a decision
    whose calibrated confidence stays above 1/k."""
    from sklearn.naive_bayes import GaussianNB

    from calengine.metrics.measures import evaluate_predictions

    df = pd.read_parquet(PENDIGITS)
    X, y = df.drop(columns="class").to_numpy(float), df["class"].to_numpy().astype(int)
    nb = GaussianNB().fit(X[::3], y[::3])
    rest = np.arange(len(y)) % 3 != 0
    P, yr = nb.predict_proba(X[rest]), y[rest]
    cal_rows = np.arange(len(yr)) % 2 == 0
    raw = evaluate_predictions(yr[~cal_rows], P[~cal_rows])
    for base in ("binning", "isotonic", "sigmoid"):
        cal = TopLabelCalibrator(base=base).fit(P[cal_rows], yr[cal_rows], score_kind="proba")
        got = evaluate_predictions(yr[~cal_rows], cal.predict(P[~cal_rows]))
        assert got["ece"] < 0.5 * raw["ece"], (base, got["ece"], raw["ece"])
        assert got["log_loss"] < raw["log_loss"]


def test_cli_from_a_learner_and_from_probability_columns(tmp_path):
    """Both routes through the CLI: a learner's probabilities (cross-validated members) and k probability
    columns of a table; the score-column model equals the calibrator fitted in memory on the same rows."""
    import calengine

    df = pd.read_parquet(PENDIGITS)
    data = tmp_path / "pendigits.parquet"
    df.to_parquet(data, row_group_size=500)
    model = tmp_path / "m"
    r = run_cli("fit", data, "--target", "class", "--learner", "gaussian_nb", "--method", "top_label",
                "--method-param", "base=isotonic", "--cv", "2", "--output", model)
    assert r.returncode == 0, r
    fitted = calengine.load_model(model)
    assert all(m.calibrators[0].name == "top_label" and m.calibrators[0].n_classes_ == 10 for m in fitted.members)
    P_model = fitted.predict_proba(df.drop(columns="class"))
    np.testing.assert_allclose(P_model.sum(axis=1), 1.0, atol=1e-9)

    from sklearn.naive_bayes import GaussianNB

    X, y = df.drop(columns="class").to_numpy(float), df["class"].to_numpy().astype(int)
    P = GaussianNB().fit(X[::3], y[::3]).predict_proba(X)
    scores = pd.DataFrame({f"s_{c}": P[:, c] for c in range(10)} | {"class": y})
    sdata = tmp_path / "scores.parquet"
    scores.to_parquet(sdata, row_group_size=700)
    cols = ",".join(f"s_{c}" for c in range(10))
    smodel = tmp_path / "s"
    r = run_cli("fit", sdata, "--target", "class", "--scores", cols, "--score-kind", "proba",
                "--method", "top_label", "--output", smodel)
    assert r.returncode == 0, r
    got = calengine.load_model(smodel).predict_frame(scores)[[f"p_{c}" for c in range(10)]].to_numpy()
    want = TopLabelCalibrator().fit(P, y, score_kind="proba").predict(P)
    np.testing.assert_allclose(got, want, atol=1e-12)
    with pytest.raises(ParameterError, match="base must be"):
        calengine.calibrate_scores(scores, "class", cols, method="top_label", method_params={"base": "beta"})


@pytest.mark.parametrize("base", BASES)
def test_a_top_class_always_right_or_always_wrong_gets_the_smoothed_hit_rate(base):
    """Rows on which the model's top class is always right (or always wrong) support no binary map, not
    even the global one: every row's top probability becomes (hits + 1) / (n + 2), by weight, the rows
    still sum to 1 with the decision kept, and the constant survives the model file."""
    P, _ = _probs(4, 300, 3)
    top = P.argmax(axis=1)
    w = np.random.default_rng(1).uniform(0.5, 2.0, size=len(top))
    for y, hits in ((top, w.sum()), ((top + 1) % 3, 0.0)):
        cal = TopLabelCalibrator(base=base).fit(P, y, sample_weight=w, score_kind="proba")
        expected = (hits + 1.0) / (w.sum() + 2.0)
        assert cal.constant_ == pytest.approx(expected, rel=1e-12) and np.all(cal.fallback_ == 1)
        out = cal.predict(P)
        np.testing.assert_allclose(out[np.arange(len(top)), top], expected, rtol=1e-12)
        np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-12)
        if expected > 1 / 3:
            assert np.array_equal(out.argmax(axis=1), top)
        again = TopLabelCalibrator(base=base).from_state(cal.to_state())
        np.testing.assert_array_equal(again.predict(P), out)
    state = TopLabelCalibrator(base=base).fit(P, top, score_kind="proba").to_state()
    with pytest.raises(ModelFormatError, match="constant_"):
        TopLabelCalibrator(base=base).from_state({**state, "constant_": 1.5})
