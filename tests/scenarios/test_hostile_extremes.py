"""Finite but extreme inputs (issue 42 §2, §3, §6 and the ``cv --weight`` message): scores around 1e305,
weights of 1e308, a sampling rate of 1e-320.  Each overflowed a sum, and ``fit`` exited 0 with a model that
``calengine score`` then refused as damaged, or ``evaluate`` died in a traceback (or, with large but
not overflowing weights, looped for ever on a p-value's series).

What holds now: a bound on each of those inputs, refused before anything is fitted in one line naming
the column or flag and the bound; ``evaluate`` within the bounds gives the unweighted metrics' values
and p-values of 0 at once; and whatever the inputs, ``save_model`` loads the directory it wrote before
publishing it, so a model ``calengine score`` would refuse is never published.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import calengine
from calengine.errors import DataError, ParameterError
from cli_helpers import assert_one_line_error, run_cli


def _scores_table(path: Path, n: int = 2000, seed: int = 0, scale: float = 1.0, shift: float = 0.0,
                  weight: float | None = None) -> Path:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    s = rng.normal(size=n) + y
    cols = {"s": scale * (shift + s), "y": y}
    if weight is not None:
        cols["w"] = rng.integers(1, 5, n) * weight
    pq.write_table(pa.table(cols), path)
    return path


def _nothing_published(out: Path) -> None:
    assert not out.exists(), f"{out} was published"
    assert not [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    d = tmp_path_factory.mktemp("extremes")
    return {
        "huge_scores": _scores_table(d / "huge_scores.parquet", scale=1e305, shift=3.0),
        "huge_weights": _scores_table(d / "huge_weights.parquet", weight=1e308 / 4),
        "plain": _scores_table(d / "plain.parquet"),
        "edge": _scores_table(d / "edge.parquet", scale=1e50 / 5, weight=2.5e99),
        "heavy": _scores_table(d / "heavy.parquet", weight=2.5e99),
        "counts": _scores_table(d / "counts.parquet", weight=1.0),
    }


FIT = ("fit", "{data}", "--scores", "s", "--score-kind", "decision", "--target", "y", "--quiet")
CASES = {
    # the three cases, then neighbours that overflowed the same sums
    "scores 1e305 sigmoid": ("huge_scores", ("--method", "sigmoid"), ("score column 's'", "1e+50")),
    "weights 1e308": ("huge_weights", ("--method", "sigmoid", "--weight", "w"), ("weight column 'w'", "1e+100")),
    "negative sampling 1e-320": ("plain", ("--method", "sigmoid", "--negative-sampling", "1e-320"),
                                 ("--negative-sampling", "1e-18")),
    "scores 1e305 temperature": ("huge_scores", ("--method", "temperature"), ("score column 's'", "1e+50")),
    "class sampling 1e300": ("plain", ("--method", "isotonic", "--class-sampling", "1=1e300"),
                             ("--class-sampling 1", "1e+18")),
    "class sampling twice": ("plain", ("--method", "isotonic", "--class-sampling", "1=0.5,1=0.3"),
                             ("--class-sampling", "'1' twice")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_extreme_inputs_are_refused_up_front_and_nothing_is_published(case, tables, tmp_path):
    """Each case exited 0 and published a model ``calengine score`` refused (or let the last of two
    rates win): now one line naming the column or flag and its bound, exit 2, no model directory."""
    table, extra, says = CASES[case]
    out = tmp_path / "m"
    args = [a.replace("{data}", str(tables[table])) for a in FIT]
    assert_one_line_error(run_cli(*args, *extra, "--output", out), *says)
    _nothing_published(out)


def test_inputs_at_the_bounds_fit_and_score(tables, tmp_path):
    """Weights up to 1e100 and decision scores up to 1e50 fit with every summing calibrator, and the
    published model scores: the bounds keep every sum finite, they do not merely move the overflow."""
    for method in ("sigmoid", "temperature", "sigmoid_nobias", "isotonic"):
        out = tmp_path / method
        r = run_cli("--quiet", "fit", tables["edge"], "--scores", "s", "--score-kind", "decision", "--target", "y",
                    "--method", method, "--weight", "w", "--output", out)
        assert r.returncode == 0 and "warning" not in r.stderr, r
        r = run_cli("--quiet", "score", out, tables["edge"], "--output", tmp_path / f"{method}.parquet")
        assert r.returncode == 0, r
        p = pd.read_parquet(tmp_path / f"{method}.parquet")["p_1"].to_numpy()
        assert np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))


def test_recalibrate_refuses_extreme_scores_too(tables, tmp_path):
    r = run_cli("--quiet", "fit", tables["plain"], "--scores", "s", "--score-kind", "decision", "--target", "y",
                "--method", "sigmoid", "--output", tmp_path / "m")
    assert r.returncode == 0, r
    for update in ((), ("--update",)):
        out = tmp_path / f"r{len(update)}"
        assert_one_line_error(run_cli("recalibrate", tmp_path / "m", tables["huge_scores"], "--target", "y", *update,
                                      "--output", out), "score column 's'", "1e+50")
        _nothing_published(out)


def test_a_model_that_would_not_load_is_never_published(tmp_path):
    """The safety net under the bounds: ``save_model`` loads what it wrote before the rename that
    publishes it.  A sigmoid whose stored score summary holds an infinity (what the overflowing sums
    made) is one DataError naming the array; the output does not exist, an existing model replaced
    with ``overwrite`` stays as it was, and the same model without the infinity saves and loads."""
    from calengine.model.artifact import load_model, save_model

    rng = np.random.default_rng(1)
    s = rng.normal(size=500)
    df = pd.DataFrame({"s": s, "y": (rng.random(500) < 1 / (1 + np.exp(-2 * s))).astype(int)})
    model = calengine.calibrate_scores(df, "y", "s", method="sigmoid", score_kind="decision")
    save_model(model, tmp_path / "old")
    before = (tmp_path / "old" / "manifest.json").read_bytes()
    cal = model.members[0].calibrators[0]
    good = cal.hist_sneg_.copy()
    cal.hist_sneg_[np.flatnonzero(cal.hist_wneg_ > 0)[0]] = np.inf
    for target, overwrite in ((tmp_path / "new", False), (tmp_path / "old", True)):
        with pytest.raises(DataError, match="would not load.*hist_sneg_.*holds NaN or infinity") as err:
            save_model(model, target, overwrite=overwrite)
        assert "\n" not in str(err.value) and ".tmp-" not in str(err.value)
    _nothing_published(tmp_path / "new")
    assert (tmp_path / "old" / "manifest.json").read_bytes() == before
    cal.hist_sneg_ = good
    save_model(model, tmp_path / "new")
    np.testing.assert_array_equal(load_model(tmp_path / "new").predict_frame(df)["p_1"], model.predict_frame(df)["p_1"])


def test_evaluate_with_weights_of_1e308_is_one_line(tables, tmp_path):
    r = run_cli("--quiet", "fit", tables["plain"], "--scores", "s", "--score-kind", "decision", "--target", "y",
                "--method", "sigmoid", "--output", tmp_path / "m")
    assert r.returncode == 0, r
    assert_one_line_error(run_cli("evaluate", tmp_path / "m", tables["huge_weights"], "--target", "y", "--weight", "w"),
                          "--weight column 'w'", "1e+100")


def test_evaluate_with_weights_at_the_bound_finishes_with_the_metrics_of_the_counts(tables, tmp_path):
    """Weights of 2.5e99 times 1..4 against the same rows weighted 1..4: every metric that is a ratio of
    weighted sums agrees, and the tests whose statistic grows with the total weight (it counts rows)
    give p-values of 0 -- at once: the KS and Kuiper series once needed a number of terms growing with
    the statistic, and the run never ended."""
    r = run_cli("--quiet", "fit", tables["plain"], "--scores", "s", "--score-kind", "decision", "--target", "y",
                "--method", "sigmoid", "--output", tmp_path / "m")
    assert r.returncode == 0, r
    big = run_cli("--quiet", "evaluate", tmp_path / "m", tables["heavy"], "--target", "y", "--weight", "w", "--json",
                  timeout=240)
    unit = run_cli("--quiet", "evaluate", tmp_path / "m", tables["counts"], "--target", "y", "--weight", "w", "--json")
    assert big.returncode == 0 and unit.returncode == 0, (big, unit)
    a, b = big.json(), unit.json()
    for key in ("brier", "log_loss", "auc", "error_rate", "ece", "calibration_slope", "calibration_intercept"):
        assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-12), key
    assert a["ks_pvalue"] == 0.0 and a["kuiper_pvalue"] == 0.0 and np.isfinite(a["ks"])


@pytest.mark.timeout(60)
def test_ks_and_kuiper_tails_of_huge_statistics_are_zero_at_once():
    from calengine.metrics.statistics import TAIL_ZERO, ks_sf, kuiper_sf

    start = time.perf_counter()
    for x in (TAIL_ZERO * 1.0001, 1e6, 1e60, 1e300):
        assert ks_sf(x) == 0.0 and kuiper_sf(x) == 0.0
    assert time.perf_counter() - start < 1.0
    assert ks_sf(5.0) == pytest.approx(1.1466e-06, rel=1e-3) and kuiper_sf(TAIL_ZERO) < 1e-15


def test_class_sampling_names_a_class_once():
    from calengine.methods.sampling import parse_class_sampling, sampling_rates

    with pytest.raises(ParameterError, match="'a' twice"):
        parse_class_sampling("a=0.5,a=0.3")
    with pytest.raises(ParameterError, match="'1' twice"):
        sampling_rates([0, 1], class_sampling={"1": 0.5, 1: 0.3})
    with pytest.raises(ParameterError, match="1e-18"):
        sampling_rates([0, 1], negative_sampling=1e-320)
    assert sampling_rates([0, 1], class_sampling={"1": 1e-18, "0": 1e18}).tolist() == [1e18, 1e-18]


def test_python_weights_above_the_bound_are_one_line():
    from calengine.metrics.measures import MetricAccumulator

    y, P = np.array([0, 1]), np.array([[0.7, 0.3], [0.2, 0.8]])
    with pytest.raises(DataError, match="at most 1e\\+100"):
        MetricAccumulator(2).add(y, P, sample_weight=[1.0, 1e308])
    X = np.random.default_rng(0).normal(size=(40, 2))
    yy = (X[:, 0] > 0).astype(int)
    with pytest.raises(DataError, match="sample_weight holds 1e\\+200; weights must be at most 1e\\+100"):
        calengine.CalibratedClassifier(learner="gaussian_nb", method="sigmoid", cv=2).fit(X, yy, sample_weight=np.full(40, 1e200))


def test_cv_weight_errors_name_the_users_table(tmp_path):
    """cv fits each fold from a scratch Parquet file; its weight errors named that file
    (``/tmp/calengine-cv-.../fold-0.parquet``) and a row of it.  The user's table is checked first."""
    rng = np.random.default_rng(0)
    n = 600
    y = rng.integers(0, 2, n)
    w = np.ones(n)
    w[7] = -1.0
    pd.DataFrame({"s": 1 / (1 + np.exp(-(rng.normal(size=n) + y))), "y": y, "w": w, "x": rng.normal(size=n)}
                 ).to_parquet(tmp_path / "negw.parquet")
    for extra in (("--scores", "s"), ("--learner", "gaussian_nb")):
        r = run_cli("cv", tmp_path / "negw.parquet", "--target", "y", "--weight", "w", "--folds", "2", *extra)
        assert_one_line_error(r, "weight column 'w'", "row 7 of the table", "negw.parquet")
        assert "calengine-cv-" not in r.stderr
