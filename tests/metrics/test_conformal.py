"""``evaluate`` of a model with a conformal layer (calengine/metrics/conformal.py): coverage and its
Clopper-Pearson interval (statsmodels' beta interval as the oracle), per class and per segment worst
first, set sizes -- the same numbers from the in-memory pass, the range-partitioned pass, the text,
``--json`` and the HTML report."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

import calengine
from calengine.metrics.conformal import ConformalAccumulator, clopper_pearson
from calengine.model.artifact import save_model
from cli_helpers import run_cli

DATA = __import__("pathlib").Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(scope="module")
def conformal_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("cmetrics")
    model = calengine.fit_table(str(DATA / "pendigits_train.parquet"), "class", learner="gaussian_nb", cv=3)
    test = pd.read_parquet(DATA / "pendigits_test.parquet")
    test["hand"] = np.where(test["x1"] > 50, "right", "left")
    cal, held = test.iloc[:1700], test.iloc[1700:]
    m = calengine.conformalize(model, cal, target="class", alpha=0.1, score="aps")
    save_model(m, root / "m")
    held.to_parquet(root / "held.parquet", index=False)
    return root, m, held


def _expected(m, held):
    X = m.encoder.transform(held)
    S = m.conformal.sets(m.predict_proba_features(X), X, held)
    y = m.labels.encode(held["class"])
    return S, y


def test_clopper_pearson_equals_statsmodels():
    from statsmodels.stats.proportion import proportion_confint

    for x, n in ((0, 10), (10, 10), (3, 17), (950, 1000), (1, 1), (4511, 5000)):
        lo, hi = proportion_confint(x, n, alpha=0.05, method="beta")
        assert np.allclose(clopper_pearson(x, n), (lo, hi), rtol=1e-12, atol=1e-15)


def test_evaluate_json_is_the_sets_coverage(conformal_model, tmp_path):
    root, m, held = conformal_model
    r = run_cli("evaluate", root / "m", root / "held.parquet", "--target", "class", "--by", "hand", "--json", "--quiet")
    assert r.returncode == 0, r
    c = r.json()["conformal"]
    S, y = _expected(m, held)
    hit = S[np.arange(len(y)), y]
    assert c["rows"] == len(y) and c["alpha"] == 0.1 and c["target_coverage"] == 0.9
    assert c["coverage"] == pytest.approx(hit.mean(), abs=0, rel=1e-15)
    assert c["coverage_ci"] == pytest.approx(list(clopper_pearson(hit.sum(), len(y))))
    assert c["mean_set_size"] == pytest.approx(S.sum(axis=1).mean())
    assert c["empty_share"] == pytest.approx((S.sum(axis=1) == 0).mean())
    sizes = S.sum(axis=1)
    assert [s["size"] for s in c["set_sizes"]] == sorted(set(sizes.tolist()))
    for s in c["set_sizes"]:
        assert s["rows"] == int((sizes == s["size"]).sum())
        assert s["coverage"] == pytest.approx(hit[sizes == s["size"]].mean())
    strata = {tuple(s["sizes"]): s["coverage"] for s in c["sscv_strata"]}
    assert c["sscv"] == pytest.approx(max(abs(v - 0.9) for v in strata.values()))
    cov = [x["coverage"] for x in c["classes"]]
    assert cov == sorted(cov)  # worst first
    for x in c["classes"]:
        rows = y == int(x["class"])
        assert x["rows"] == int(rows.sum()) and x["coverage"] == pytest.approx(hit[rows].mean())
    segs = {s["value"]: s for s in c["segments"]}
    for hand in ("left", "right"):
        rows = (held["hand"] == hand).to_numpy()
        assert segs[hand]["coverage"] == pytest.approx(hit[rows].mean())
    assert [s["coverage"] for s in c["segments"]] == sorted(s["coverage"] for s in c["segments"])


def test_text_and_report_show_the_sets(conformal_model, tmp_path):
    root, m, _ = conformal_model
    r = run_cli("evaluate", root / "m", root / "held.parquet", "--target", "class", "--report", tmp_path / "rep",
                "--quiet")
    assert r.returncode == 0, r
    assert "prediction sets of gaussian_nb + isotonic (aps (randomised), alpha 0.1):" in r.stdout
    assert "coverage " in r.stdout and "(worst first)" in r.stdout
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "<h3>Prediction sets</h3>" in html and "Coverage by class, worst first" in html
    assert (tmp_path / "rep" / "model01-conformal-coverage.png").stat().st_size > 1000
    assert (tmp_path / "rep" / "model01-conformal-sizes.png").stat().st_size > 1000


def test_the_range_partitioned_pass_gives_the_same_numbers(conformal_model, monkeypatch):
    """From RANGED_MIN_ROWS rows on evaluate cuts its tables into score ranges; the conformal sums ride
    with the chunks either way: the same result."""
    root, m, held = conformal_model
    small = calengine.evaluate_models(str(root / "m"), str(root / "held.parquet"), "class").conformal[0]
    monkeypatch.setattr("calengine.metrics.ranged.engine.RANGED_MIN_ROWS", 100)
    ranged = calengine.evaluate_models(str(root / "m"), str(root / "held.parquet"), "class").conformal[0]
    assert ranged == small


def test_weighted_evaluation_uses_the_effective_sample_size():
    acc = ConformalAccumulator(3)
    y = np.array([0, 1, 2, 0])
    S = np.array([[1, 0, 0], [0, 0, 1], [0, 0, 1], [1, 1, 0]], dtype=bool)
    acc.add(y, S, np.array([1.0, 2.0, 1.0, 0.0]))

    class Layer:
        alpha, score, mondrian = 0.1, "lac", "none"

        def describe(self):
            return "lac"

    r = acc.result(Layer(), ["a", "b", "c"], weighted=True)
    assert r["rows"] == 3 and r["weight"] == 4.0
    assert r["coverage"] == pytest.approx(2 / 4)
    assert r["effective_rows"] == pytest.approx(16 / 6)
    assert r["ci_method"].startswith("clopper-pearson on Kish")
    assert r["coverage_ci"] == pytest.approx(list(clopper_pearson(0.5 * 16 / 6, 16 / 6)))
