"""Drift check (calengine.metrics.drift): hand-computed statistics, p-values uniform under calibration
(seeded replicates), tiny p-values under a shift, Bonferroni over columns, merging, bad alpha."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import kstest

from calengine.errors import ParameterError
from calengine.metrics.drift import DRIFT_CLIP, calibration_drift, drift_line, reliability_chi2, spiegelhalter
from calengine.metrics.measures import MetricAccumulator

P4 = np.array([0.2, 0.4, 0.6, 0.8])


def _table(p, y):
    v, inv = np.unique(p, return_inverse=True)
    pos = np.bincount(inv, weights=y, minlength=v.size).astype(np.int64)
    return v, pos, np.bincount(inv, minlength=v.size) - pos


def test_spiegelhalter_by_hand():
    # y all 1: Σ(y-p)(1-2p) = .48 + .12 - .08 - .12 = 0.40; Σ(1-2p)²p(1-p) = .0576+.0096+.0096+.0576 = .1344
    s = spiegelhalter(*_table(P4, np.ones(4)))
    assert s["z"] == pytest.approx(0.4 / math.sqrt(0.1344), abs=1e-12)
    assert s["z"] == pytest.approx(1.091089, abs=1e-6)
    assert s["p_value"] == pytest.approx(0.275234, abs=1e-6)
    # y = 0 1 0 1: the four terms cancel, z = 0, p = 1
    s = spiegelhalter(*_table(P4, np.array([0, 1, 0, 1])))
    assert s["z"] == pytest.approx(0.0, abs=1e-15) and s["p_value"] == pytest.approx(1.0)


def test_reliability_chi2_by_hand():
    # two bins {0.2, 0.4}, {0.6, 0.8}; y all 1: O = 2, 2; E = 0.6, 1.4; V = 0.4, 0.4
    # chi2 = 1.4²/0.4 + 0.6²/0.4 = 5.8 on 2 df, p = exp(-2.9)
    r = reliability_chi2(*_table(P4, np.ones(4)), bins=2)
    assert r["chi2"] == pytest.approx(5.8, abs=1e-12) and r["df"] == 2
    assert r["p_value"] == pytest.approx(math.exp(-2.9), abs=1e-12)


def test_tied_values_are_never_split_across_bins():
    p = np.array([0.3] * 6 + [0.7] * 2)
    r = reliability_chi2(*_table(p, np.array([1, 0, 0, 1, 0, 0, 1, 1])), bins=4)
    assert r["df"] == 2  # only two value groups, so only two non-empty bins


def test_degenerate_forecasts():
    half = spiegelhalter(*_table(np.full(10, 0.5), np.arange(10) % 2))
    assert math.isnan(half["z"]) and math.isnan(half["p_value"])
    # a forecast of exactly 0 followed by an event is read as DRIFT_CLIP: one row does not decide alone
    p = np.concatenate((np.zeros(1), np.linspace(0.05, 0.95, 999)))
    y = (np.random.default_rng(0).uniform(size=1000) < p).astype(int)
    y[0] = 1
    d = MetricAccumulator(2).add(y, p).drift_check()
    assert d["columns"][0]["spiegelhalter"]["p_value"] > 1e-3
    assert 0 < DRIFT_CLIP < 1e-3


def _calibrated(rng, n):
    p = rng.beta(2.0, 3.0, size=n)
    return (rng.uniform(size=n) < p).astype(np.int64), p


def test_p_values_are_uniform_under_calibration():
    """300 seeded replicates of calibrated data: each test rejects at about its level, the p-values
    pass a KS test for uniformity, and the Bonferroni verdict's false-alarm rate stays <= alpha."""
    rng = np.random.default_rng(20261124)
    pz, phl, verdicts = [], [], []
    for _ in range(300):
        y, p = _calibrated(rng, 1000)
        d = MetricAccumulator(2).add(y, p).drift_check(alpha=0.05)
        col = d["columns"][0]
        pz.append(col["spiegelhalter"]["p_value"])
        phl.append(col["reliability_chi2"]["p_value"])
        verdicts.append(d["verdict"] == "recalibrate")
    pz, phl = np.array(pz), np.array(phl)
    for ps in (pz, phl):
        assert 0.02 <= np.mean(ps < 0.05) <= 0.09
        assert kstest(ps, "uniform").pvalue > 0.01
    assert np.mean(verdicts) <= 0.07


def test_shifted_data_is_flagged():
    rng = np.random.default_rng(7)
    p = rng.beta(2.0, 3.0, size=5000)
    shifted = 1.0 / (1.0 + np.exp(-(np.log(p / (1 - p)) + 0.6)))  # the truth moved up by 0.6 in logit
    y = (rng.uniform(size=p.size) < shifted).astype(np.int64)
    d = MetricAccumulator(2).add(y, p).drift_check()
    col = d["columns"][0]
    assert col["spiegelhalter"]["p_value"] < 1e-6 and col["spiegelhalter"]["z"] > 0
    assert col["reliability_chi2"]["p_value"] < 1e-6
    assert d["p_value"] < 1e-6 and d["verdict"] == "recalibrate"
    line = drift_line(d)
    assert line.startswith("calibration drift: z = ") and line.endswith("-> recalibrate")
    # the same forecasts on calibrated outcomes: no alarm
    y_ok = (rng.uniform(size=p.size) < p).astype(np.int64)
    assert MetricAccumulator(2).add(y_ok, p).drift_check()["verdict"] == "ok"


def test_overconfidence_is_seen_by_the_reliability_test():
    """Truth = forecast pulled halfway to 1/2: Spiegelhalter sees it too, the chi-square overwhelmingly."""
    rng = np.random.default_rng(3)
    p = rng.uniform(size=5000)
    y = (rng.uniform(size=p.size) < 0.5 + 0.5 * (p - 0.5)).astype(np.int64)
    d = MetricAccumulator(2).add(y, p).drift_check()
    assert d["columns"][0]["reliability_chi2"]["p_value"] < 1e-6 and d["verdict"] == "recalibrate"


def test_multiclass_tests_every_column_with_bonferroni():
    rng = np.random.default_rng(5)
    P = rng.dirichlet([2.0, 2.0, 2.0], size=3000)
    y = (rng.uniform(size=3000)[:, None] > np.cumsum(P, axis=1)).sum(axis=1)
    d = MetricAccumulator(3).add(y, P).drift_check()
    assert [c["class"] for c in d["columns"]] == [0, 1, 2] and d["n_tests"] == 6
    ps = [c[t]["p_value"] for c in d["columns"] for t in ("spiegelhalter", "reliability_chi2")]
    assert d["p_value"] == pytest.approx(min(1.0, 6 * min(ps)))
    assert d["verdict"] == "ok"
    # class 2 twice as frequent as forecast
    y2 = y.copy()
    y2[(y != 2) & (rng.uniform(size=y.size) < P[:, 2])] = 2
    d2 = MetricAccumulator(3).add(y2, P).drift_check()
    assert d2["verdict"] == "recalibrate"
    assert "[class c vs rest, worst of 3]" in drift_line(d2, ["a", "b", "c"])


def test_merged_accumulators_give_the_same_tests():
    rng = np.random.default_rng(11)
    y, p = _calibrated(rng, 3000)
    merged = MetricAccumulator(2)
    for lo in range(0, 3000, 700):
        merged.merge(MetricAccumulator(2).add(y[lo:lo + 700], p[lo:lo + 700]))
    assert merged.drift_check() == MetricAccumulator(2).add(y, p).drift_check()


@pytest.mark.parametrize("alpha", [0, 1, -0.1, 1.5, "0.01", True, float("nan")])
def test_bad_alpha(alpha):
    with pytest.raises(ParameterError, match="alpha must be"):
        calibration_drift([_table(P4, np.ones(4))] * 2, alpha=alpha)


# --------------------------------------------------------------------------------------------------
# the report and the CLI


def test_report_shows_the_verdict_and_every_tested_column(tmp_path):
    from calengine.metrics.report import ReportEntry, write_report

    rng = np.random.default_rng(2)
    p = rng.uniform(size=2000)
    y = (rng.uniform(size=p.size) < np.minimum(1.0, p + 0.2)).astype(np.int64)
    acc = MetricAccumulator(2).add(y, p)
    index = write_report(tmp_path / "r", [ReportEntry("m", acc, None, ["no", "yes"], drift=acc.drift_check())])
    page = index.read_text(encoding="utf-8")
    assert '<p class="drift-verdict"><strong>recalibrate</strong>: calibration drift: z = ' in page
    assert "<tr><td>yes</td><td class=\"num\">" in page  # the tested column, by class name
    assert '<tr data-key="corp_brier.mcb"><th><code>corp_brier.mcb</code></th>' in page


@pytest.fixture(scope="module")
def pima_nb(tmp_path_factory):
    from cli_helpers import run_cli

    out = tmp_path_factory.mktemp("drift") / "nb"
    r = run_cli("--quiet", "fit", "data/pima.parquet", "--target", "class", "--cv", "3", "--output", out)
    assert r.returncode == 0, r
    return out


def test_cli_evaluate_json_and_table_carry_corp_and_drift(pima_nb, tmp_path):
    import pyarrow.parquet as pq
    from cli_helpers import REPO, run_cli

    m = run_cli("evaluate", pima_nb, "data/pima.parquet", "--target", "class", "--json").json()
    for r in (m, m["raw"]):
        for name in ("corp_brier", "corp_log_loss"):
            c = r[name]
            assert c["score"] == pytest.approx(c["mcb"] - c["dsc"] + c["unc"], abs=1e-12)
        assert r["corp_brier"]["score"] == pytest.approx(r["brier"], abs=1e-12)
    assert m["raw"]["corp_brier"]["mcb"] > m["corp_brier"]["mcb"]  # isotonic removes most miscalibration
    assert m["drift"]["verdict"] == "ok" and m["drift"]["alpha"] == 0.01 and m["drift"]["n_tests"] == 2
    # prior shift: every positive kept, 40% of the negatives (seeded); the model's base rate is now wrong
    table = pq.read_table(REPO / "data" / "pima.parquet")  # this process's directory may be any
    y = table.column("class").to_numpy()
    keep = (y == 1) | (np.random.default_rng(0).uniform(size=y.size) < 0.4)
    pq.write_table(table.filter(keep), tmp_path / "shifted.parquet")
    r = run_cli("evaluate", pima_nb, tmp_path / "shifted.parquet", "--target", "class", "--alpha", "0.001",
                env={"COLUMNS": "100"})
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    assert [line.split()[0] for line in lines if line.startswith("brier_")] == ["brier_mcb", "brier_dsc", "brier_unc"]
    drift = next(i for i, line in enumerate(lines) if line.startswith("calibration drift: z = "))
    text = " ".join(line.strip() for line in lines[drift:drift + 3])
    assert "alpha = 0.001 -> recalibrate" in text and max(map(len, lines)) <= 100


def test_cli_alpha_out_of_range_is_one_line(pima_nb):
    from cli_helpers import assert_one_line_error, run_cli

    assert_one_line_error(run_cli("evaluate", pima_nb, "data/pima.parquet", "--target", "class", "--alpha", "1"),
                          "--alpha must be strictly between 0 and 1, got 1")
