"""MCGrad's core (``calengine.methods.mcgrad``): the rounds against a plain XGBoost loop written here from
the paper's description, planted segment miscalibration removed, and bad parameters in one line.

Oracles: the reference loop trains each round with ``xgboost.train`` on ``[segment codes, logit]`` (each
segment column one categorical feature, coded here by pandas) with the logit as base margin, and finds the unshrink factor with scipy's bounded scalar search (the
reference implementation's method) at a tight tolerance; the module uses Newton's method for it, so
the two agree only if both find the minimiser.  The worst-segment calibration error is
``evaluate --by``'s ECCE on the sigma scale (``calengine.metrics.segments``).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from calengine.errors import DataError, ParameterError
from calengine.methods.mcgrad import MCGradParams, fit_mcgrad, segment_codes, unshrink_factor
from calengine.metrics.segments import SegmentAccumulator

xgb = pytest.importorskip("xgboost")


def _planted(n, seed):
    """Scores sigmoid(b) of rows whose true logit is b + an offset per value of A and of B."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 4, n), rng.integers(0, 3, n)
    base = rng.normal(-1.0, 1.5, n)
    true = base + np.array([0.0, 0.6, -0.5, 0.3])[a] + np.array([0.0, -0.4, 0.5])[b]
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-true))).astype(np.int64)
    return 1.0 / (1.0 + np.exp(-base)), y, [np.array([f"a{v}" for v in a]), np.array([f"b{v}" for v in b])]


def _worst_ecce(p, y, segs):
    acc = SegmentAccumulator(("A", "B"), 2)
    acc.add({"A": segs[0], "B": segs[1]}, y, np.column_stack([1.0 - p, p]))
    return acc.result()["mce_sigma"]


def _reference(s, y, segs, params, seed):
    """MCGrad's rounds as plainly as xgboost and scipy say them (no early stopping)."""
    import pandas as pd

    X = np.column_stack([pd.Categorical(c, categories=sorted(set(c))).codes for c in segs])
    types = ["c"] * len(segs) + ["q"]
    f = np.log(s) - np.log1p(-s)
    for r in range(params.rounds):
        feats = np.column_stack([X, f]).astype(np.float32)
        booster = xgb.train({**params.booster_params(seed + r), "nthread": 1},
                            xgb.DMatrix(feats, label=y.astype(np.float32), base_margin=f, feature_types=types,
                                        enable_categorical=True),
                            num_boost_round=params.trees)
        f = f + booster.predict(xgb.DMatrix(feats, feature_types=types, enable_categorical=True), output_margin=True)
        z = np.clip(f, -10, 10)
        alpha = minimize_scalar(lambda a: np.mean(np.logaddexp(0, -a * z) * y + np.logaddexp(0, a * z) * (1 - y)),
                                bounds=(1e-8, 50), method="bounded", options={"xatol": 1e-12}).x
        f = alpha * f
    return 1.0 / (1.0 + np.exp(-f))


def test_rounds_equal_a_plain_xgboost_loop():
    """Three rounds of ten trees on 3,000 rows: the probabilities agree to 1e-6.  Why that tolerance:
    the boosters see the same float32 features and margins, so their trees are the same; what differs
    is the unshrink factor (Newton to 1e-12 relative here, Brent to 1e-12 absolute there), and with
    logits below 10 in magnitude a factor off by 1e-10 moves a probability by < 1e-9 per round; the
    margins' float32 round trip inside XGBoost accounts for the rest (measured: max 1.6e-8)."""
    s, y, segs = _planted(3000, 0)
    params = MCGradParams(rounds=3, early_stopping=False, trees=10, learning_rate=0.3)
    fit = fit_mcgrad(s, y, segs, params, seed=5)
    assert len(fit.boosters) == 3 and fit.holdout_loss == []
    got = fit.predict_proba(s, segment_codes(segs, fit.levels)[0])
    np.testing.assert_allclose(got, _reference(s, y, segs, params, 5), rtol=0, atol=1e-6)


def test_lightgbm_rounds_equal_a_plain_lightgbm_loop():
    """``booster=lightgbm``: three rounds against ``lightgbm.train`` with the logit as init score, the
    segment codes as ``categorical_feature`` (coded by pandas here) and MCGrad's settings in LightGBM's
    names, and scipy's unshrink: 1e-6, as for XGBoost (measured: below 1e-9)."""
    lgb = pytest.importorskip("lightgbm")
    import pandas as pd

    s, y, segs = _planted(3000, 0)
    params = MCGradParams(rounds=3, early_stopping=False, trees=10, learning_rate=0.3, booster="lightgbm")
    fit = fit_mcgrad(s, y, segs, params, seed=5)
    assert fit.library == "lightgbm" and fit.boosters[0].startswith(b"tree\n")
    X = np.column_stack([pd.Categorical(c, categories=sorted(set(c))).codes for c in segs]).astype(np.float64)
    f = np.log(s) - np.log1p(-s)
    for r in range(3):
        feats = np.column_stack([X, f])
        lgb_params = {"objective": "binary", "learning_rate": 0.3, "max_depth": 2, "num_leaves": 4,
                      "min_sum_hessian_in_leaf": params.min_child_weight, "lambda_l2": params.reg_lambda,
                      "min_gain_to_split": params.gamma, "boost_from_average": False, "seed": 5 + r,
                      "max_bin": params.max_bin,
                      "deterministic": True, "force_row_wise": True, "num_threads": 1, "verbosity": -1}
        data = lgb.Dataset(feats, label=y, init_score=f, categorical_feature=[0, 1],
                           params={"max_bin": params.max_bin, "verbosity": -1})
        f = f + lgb.train(lgb_params, data, num_boost_round=10).predict(feats, raw_score=True)
        z = np.clip(f, -10, 10)
        f = f * minimize_scalar(lambda a: np.mean(np.logaddexp(0, -a * z) * y + np.logaddexp(0, a * z) * (1 - y)),
                                bounds=(1e-8, 50), method="bounded", options={"xatol": 1e-12}).x
    got = fit.predict_proba(s, segment_codes(segs, fit.levels)[0])
    np.testing.assert_allclose(got, 1.0 / (1.0 + np.exp(-f)), rtol=0, atol=1e-6)


def test_planted_segment_miscalibration_is_removed():
    """Offsets of up to 0.6 on the logit per value of two columns: the global score's worst segment
    is off by 12 sigma on fresh rows; after MCGrad (early stopping on a 20 % holdout) every segment
    is within 4 sigma (measured 2.8) and the log loss falls."""
    s, y, segs = _planted(8000, 0)
    st, yt, segt = _planted(8000, 1)
    params = MCGradParams(rounds=10, trees=30, learning_rate=0.1)
    fit = fit_mcgrad(s, y, segs, params, seed=0)
    assert 1 <= len(fit.boosters) <= 10 and len(fit.holdout_loss) >= len(fit.boosters) + 1
    assert min(fit.holdout_loss) < fit.holdout_loss[0]  # the rounds kept improved the held-out rows
    pt = fit.predict_proba(st, segment_codes(segt, fit.levels)[0])
    before, after = _worst_ecce(st, yt, segt), _worst_ecce(pt, yt, segt)
    assert before > 8 and after < 4, (before, after)

    def ll(p):
        return -np.mean(yt * np.log(p) + (1 - yt) * np.log(1 - p))

    assert ll(pt) < ll(st) - 0.01, (ll(st), ll(pt))
    # unseen and missing segment values are missing codes: scored, finite, in (0, 1)
    odd = [np.array(["a9", None], dtype=object), np.array(["b0", "b7"])]
    codes = segment_codes(odd, fit.levels)[0]
    assert np.isnan(codes[:, 0]).all() and codes[0, 1] == 0 and np.isnan(codes[1, 1])
    p_odd = fit.predict_proba(np.array([0.3, 0.6]), codes)
    assert np.all((p_odd > 0) & (p_odd < 1))


def test_segment_features_are_one_code_column_per_segment_column():
    """The memory fix of issue 25: 1,000 segment values are one float32 column of codes (pandas'
    categorical codes as the oracle), not 1,000 one-hot columns; the codes follow the sorted levels."""
    rng = np.random.default_rng(0)
    seg = np.array([f"s{v:04d}" for v in rng.integers(0, 1000, 20_000)], dtype=object)
    X, levels = segment_codes([seg])
    assert X.shape == (20_000, 1) and X.dtype == np.float32 and len(levels[0]) == len(set(seg))
    np.testing.assert_array_equal(X[:, 0], pd_codes(seg))


def pd_codes(values):
    import pandas as pd

    return pd.Categorical(values, categories=sorted(set(values))).codes.astype(np.float32)


def test_unshrink_factor_is_the_no_intercept_logistic_regression():
    rng = np.random.default_rng(2)
    f = rng.normal(0, 3, 5000)
    y = (rng.random(5000) < 1 / (1 + np.exp(-0.7 * f))).astype(float)
    z = np.clip(f, -10, 10)
    ref = minimize_scalar(lambda a: np.mean(np.logaddexp(0, -a * z) * y + np.logaddexp(0, a * z) * (1 - y)),
                          bounds=(1e-8, 50), method="bounded", options={"xatol": 1e-12}).x
    assert unshrink_factor(f, y) == pytest.approx(ref, abs=1e-8)
    assert unshrink_factor(f, y) == pytest.approx(0.7, abs=0.05)


@pytest.mark.parametrize("kwargs, words", [
    ({"rounds": 0}, "rounds must be an integer from 1 to 1000"),
    ({"trees": 10**6}, "trees must be an integer from 1 to 10000"),
    ({"learning_rate": 0.0}, "learning_rate must be a number in (0, 1]"),
    ({"holdout": 0.95}, "holdout must be a number in (0, 0.9]"),
    ({"early_stopping": "yes"}, "early_stopping must be true or false"),
    ({"gamma": float("nan")}, "gamma must be a number from 0"),
    ({"booster": "catboost"}, "booster must be one of xgboost, lightgbm"),
])
def test_bad_parameters_are_one_line(kwargs, words):
    with pytest.raises(ParameterError) as err:
        MCGradParams(**kwargs)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_bad_data_is_one_line():
    s, y, segs = _planted(50, 0)
    with pytest.raises(DataError, match="labels 0 and 1"):
        fit_mcgrad(s, np.zeros_like(y), segs)
    with pytest.raises(DataError, match="one value of each segment column per row"):
        fit_mcgrad(s, y, [segs[0][:10]])
    with pytest.raises(DataError, match="early stopping"):
        fit_mcgrad(s[:3], np.array([0, 1, 0]), [segs[0][:3]], MCGradParams(holdout=0.01))


@pytest.mark.parametrize("booster, module, learner", [("xgboost", "calengine_xgboost", "XGBoostDask"),
                                                      ("lightgbm", "calengine_lightgbm", "LightGBMDask")])
def test_the_cluster_rounds_equal_the_in_process_core_on_one_worker(booster, module, learner):
    """fit_mcgrad_on_cluster: three partitions on one Dask worker, two rounds, each trained by xgboost_dask
    with the rows' logits as base margins (or lightgbm_dask, LightGBM's data-parallel learner, with them
    as init scores).  On one worker XGBoost sketches the rows as in one process, so the boosters are the
    core's; the unshrink sums are added per partition, in another order than one array's sum, so the
    factors may differ in the last bits: 1e-12 (measured: 0, bit for bit, for both libraries; the core
    hands LightGBM float64 features, as the cluster's frame holds them).  (On two workers XGBoost's
    distributed sketch differs: measured 0.11 after three such rounds, as for every xgboost_dask fit.)
    A learner that cannot train with base margins is one line."""
    pytest.importorskip(f"{booster}.dask")
    import importlib

    import dask.dataframe as dd
    import pandas as pd
    from distributed import Client, LocalCluster

    from calengine.fit.mcgrad.cluster import fit_mcgrad_on_cluster

    cls = getattr(importlib.import_module(module), learner)
    s, y, segs = _planted(2000, 0)
    params = MCGradParams(rounds=2, early_stopping=False, trees=10, learning_rate=0.3, booster=booster)
    ref = fit_mcgrad(s, y, segs, params, seed=5)
    X = segment_codes(segs, ref.levels)[0]
    ddf = dd.from_pandas(pd.DataFrame({"A": segs[0], "B": segs[1], "s": s, "y": y}), npartitions=3)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        got = fit_mcgrad_on_cluster(client, ddf, ["A", "B"], "s", "y", cls(n_estimators=10), params, seed=5)
        assert got.library == booster and got.levels == ref.levels and len(got.boosters) == 2
        np.testing.assert_allclose(got.alphas, ref.alphas, rtol=1e-12)
        np.testing.assert_allclose(got.predict_proba(s, X), ref.predict_proba(s, X), rtol=0, atol=1e-12)
        if booster != "xgboost":
            return
        es = fit_mcgrad_on_cluster(client, ddf, ["A", "B"], "s", "y", cls(n_estimators=10),
                                   MCGradParams(rounds=1, trees=10, learning_rate=0.3), seed=0)
        assert len(es.holdout_loss) >= len(es.boosters) + 1 and all(isinstance(v, float) for v in es.holdout_loss)
        from calengine_builtins.learners.naive_bayes import GaussianNBLearner  # a learner without base margins

        with pytest.raises(ParameterError, match="install the plugin of xgboost_dask"):
            fit_mcgrad_on_cluster(client, ddf, ["A", "B"], "s", "y", GaussianNBLearner(), params)
