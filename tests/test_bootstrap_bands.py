"""Bootstrap bands of a calibration map: the definition, reproducibility, coverage, and the CLI/report."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from calengine.errors import ParameterError
from calengine.metrics.bootstrap import REPLICATES_PER_TASK, bootstrap_band
from calengine_builtins.calibrators import IsotonicCalibrator, SigmoidCalibrator, VennAbersCalibrator

from cli_helpers import REPO, assert_one_line_error, run_cli

PIMA = REPO / "data" / "pima.parquet"


def _data(n, seed, slope=1.5):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    return s, (rng.random(n) < expit(slope * s)).astype(int)


def test_band_is_the_percentiles_of_the_defined_refits():
    """Oracle: replicate r = refit on rows rng_r.integers(0, n, n), rng_r from SeedSequence(seed).spawn(B)[r]."""
    s, y = _data(80, 0)
    grid = np.array([-1.0, 0.0, 0.5, 2.0])
    band = bootstrap_band(IsotonicCalibrator(), s, y, 7, seed=3, grid=grid, level=0.8)
    maps = []
    for ss in np.random.SeedSequence(3).spawn(7):
        idx = np.random.default_rng(ss).integers(0, 80, 80)
        maps.append(IsotonicCalibrator().fit(s[idx], y[idx]).predict(grid))
    low, med, high = np.quantile(maps, [0.1, 0.5, 0.9], axis=0)
    # (1 - 0.8) / 2 is 0.1 only up to rounding, hence not bit-exact
    np.testing.assert_allclose(band["low"], low, rtol=0, atol=1e-12)
    np.testing.assert_allclose(band["median"], med, rtol=0, atol=1e-12)
    np.testing.assert_allclose(band["high"], high, rtol=0, atol=1e-12)
    assert (band["B"], band["level"], band["n"], band["seed"]) == (7, 0.8, 80, 3)
    assert np.all(band["low"] <= band["high"])


def test_same_seed_same_band_with_or_without_dask_tasks():
    from distributed import Client, LocalCluster

    s, y = _data(300, 1)
    B = 2 * REPLICATES_PER_TASK + 3  # three tasks, the last one partial
    ref = bootstrap_band(VennAbersCalibrator(), s, y, B, seed=5)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as lc, \
            Client(lc) as client:
        got = bootstrap_band(VennAbersCalibrator(), s, y, B, seed=5, client=client)
    for key in ("grid", "low", "high", "median"):
        np.testing.assert_array_equal(got[key], ref[key])
    other = bootstrap_band(VennAbersCalibrator(), s, y, B, seed=6)
    assert not np.array_equal(other["low"], ref["low"])


def test_band_covers_the_true_map_at_about_its_level():
    """Coverage on generated data with a known calibration function, P(y=1 | s) = σ(1.5 s).

    40 independent data sets of 300 rows, a 90 % band from 60 replicates of ``sigmoid`` each, checked
    at 7 scores: 280 (data set, score) pairs.  Measured coverage 0.81 (the percentile bootstrap
    under-covers a little at n = 300); the bound 0.7 leaves ~3 binomial standard errors of 40 data
    sets (coverage is correlated along one curve), and a wrong truth (σ(3 s)) must be covered far less,
    so a band that is too wide (or everywhere) fails as well as one that is too narrow.
    """
    grid = np.linspace(-1.5, 1.5, 7)
    covered, wrong = [], []
    for r in range(40):
        s, y = _data(300, 100 + r)
        band = bootstrap_band(SigmoidCalibrator(), s, y, 60, seed=r, grid=grid)
        covered.append((band["low"] <= expit(1.5 * grid)) & (expit(1.5 * grid) <= band["high"]))
        wrong.append((band["low"] <= expit(3 * grid)) & (expit(3 * grid) <= band["high"]))
    assert 0.7 <= np.mean(covered) <= 0.98
    assert np.mean(wrong) < 0.35


def test_bad_parameters_are_parameter_errors():
    s, y = _data(50, 2)
    with pytest.raises(ParameterError, match="at least 2"):
        bootstrap_band(SigmoidCalibrator(), s, y, 1)
    with pytest.raises(ParameterError, match="level"):
        bootstrap_band(SigmoidCalibrator(), s, y, 10, level=1.5)


@pytest.fixture(scope="module")
def pima_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("bb") / "m"
    r = run_cli("--quiet", "fit", PIMA, "--target", "class", "--cv", "3", "--method", "sigmoid",
                "--workers", "1", "--output", out)
    assert r.returncode == 0, r
    return out


def test_cli_bootstrap_without_report_is_one_line(pima_model, tmp_path):
    r = run_cli("evaluate", pima_model, PIMA, "--target", "class", "--bootstrap", "20")
    assert_one_line_error(r, "--bootstrap", "--report DIR")


def test_cli_report_draws_the_band(pima_model, tmp_path):
    out = tmp_path / "rep"
    r = run_cli("--quiet", "evaluate", pima_model, PIMA, "--target", "class", "--report", out,
                "--bootstrap", "30", "--seed", "4", "--workers", "1")
    assert r.returncode == 0, r
    page = (out / "index.html").read_text()
    assert "90% pointwise bootstrap band" in page and "30 resamples of the 768 evaluated rows (seed 4)" in page
    assert (out / "model01-calibration-map.png").stat().st_size > 0
