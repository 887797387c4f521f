"""Bootstrap bands of a calibration map: the definition, reproducibility, coverage, and the CLI/report."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from calengine.errors import ParameterError
from calengine.metrics.bootstrap import REPLICATES_PER_TASK, bootstrap_band
from calengine_builtins.calibrators import IsotonicCalibrator, SigmoidCalibrator, VennAbersCalibrator

from cli_helpers import PIMA, assert_one_line_error, run_cli



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
def pima_model(pima_sigmoid_model):
    return pima_sigmoid_model


def test_cli_bootstrap_without_report_or_json_is_one_line(pima_model, tmp_path):
    r = run_cli("evaluate", pima_model, PIMA, "--target", "class", "--bootstrap", "20")
    assert_one_line_error(r, "--bootstrap", "--report DIR or --json")


def test_cli_json_carries_the_band_the_python_api_computes(pima_model):
    """``--json --bootstrap`` writes the band that ``table_calibration_map_band`` gives for the same
    model, table, B and seed (same numbers, as lists), and nothing is written without --bootstrap."""
    import json

    from distributed import Client, LocalCluster

    from calengine.metrics.bootstrap import table_calibration_map_band
    from calengine.model.artifact import load_model

    r = run_cli("--quiet", "evaluate", pima_model, PIMA, "--target", "class", "--json",
                "--bootstrap", "30", "--seed", "4", "--workers", "2")
    assert r.returncode == 0, r
    band = json.loads(r.stdout)["calibration_band"]
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as lc, \
            Client(lc) as client:
        want = table_calibration_map_band(client, load_model(pima_model), [str(PIMA)], "class", 30, seed=4)
    assert (band["B"], band["seed"], band["level"], band["n"]) == (30, 4, 0.9, 768)
    for key in ("grid", "low", "median", "high"):
        assert band[key] == want[key].tolist(), key
    assert all(lo <= md <= hi for lo, md, hi in zip(band["low"], band["median"], band["high"]))
    plain = run_cli("--quiet", "evaluate", pima_model, PIMA, "--target", "class", "--json", "--workers", "1")
    assert "calibration_band" not in json.loads(plain.stdout)


def test_cli_report_draws_the_band(pima_model, tmp_path):
    out = tmp_path / "rep"
    r = run_cli("--quiet", "evaluate", pima_model, PIMA, "--target", "class", "--report", out,
                "--bootstrap", "30", "--seed", "4", "--workers", "1")
    assert r.returncode == 0, r
    page = (out / "index.html").read_text()
    assert "90% pointwise bootstrap band" in page and "30 resamples of the 768 evaluated rows (seed 4)" in page
    assert (out / "model01-calibration-map.png").stat().st_size > 0


def _split_table(tmp_path):
    """Pima as two files of several row groups (several chunks, several batches)."""
    import pyarrow.parquet as pq

    t = pq.read_table(PIMA)
    d = tmp_path / "split"
    d.mkdir()
    pq.write_table(t.slice(0, 500), d / "a.parquet", row_group_size=120)
    pq.write_table(t.slice(500), d / "b.parquet", row_group_size=100)
    return d, t.to_pandas()


def test_table_sample_is_bounded_seeded_and_the_same_on_any_number_of_workers(pima_model, tmp_path):
    """The sample of a partitioned table: every labelled row when k >= n (the same multiset of scores
    as scoring the whole table), exactly k distinct rows otherwise, and the same arrays whether one
    or two workers compute and merge the pieces (they finish in different orders)."""
    from distributed import Client, LocalCluster

    from calengine.metrics.bootstrap import sample_table_scores, table_calibration_map_band
    from calengine.model.artifact import load_model
    from calengine.parquet.data import resolve_parquet_files

    d, df = _split_table(tmp_path)
    files = resolve_parquet_files(str(d))
    model = load_model(pima_model)
    whole = model.members[0].scores(model.encoder.transform(df))[:, 0]
    results = []
    for workers in (1, 2):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=False, dashboard_address=None) as lc, \
                Client(lc) as client:
            all_rows = sample_table_scores(client, model, files, "class", 10_000, seed=1, chunk_rows=200, batch_rows=50)
            some = sample_table_scores(client, model, files, "class", 300, seed=1, chunk_rows=200, batch_rows=50)
            band = table_calibration_map_band(client, model, files, "class", 20, seed=1, max_rows=300)
            results.append((some, band))
        assert np.array_equal(np.sort(all_rows[0]), np.sort(whole))
        assert all_rows[1].sum() == int((df["class"] == model.labels.classes[1]).sum())
        assert some[0].size == 300 and np.isin(some[0], whole).all()
    (s1, b1), (s2, b2) = results
    assert np.array_equal(s1[0], s2[0]) and np.array_equal(s1[1], s2[1])
    assert np.array_equal(b1["low"], b2["low"]) and np.array_equal(b1["high"], b2["high"]) and b1["n"] == 300
