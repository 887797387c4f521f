"""``evaluate --by``: per-segment calibration (calengine.metrics.segments) against pandas/numpy
computations of the same definitions, chunking invariance, Holm's correction, and the CLI on Adult."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calengine.errors import DataError, ParameterError
from calengine.metrics.segments import ALL, GRID, SegmentAccumulator, check_segment_options, holm
from calengine.metrics.statistics import ecce_p_value
from cli_helpers import REPO, run_cli

ADULT = REPO / "data" / "adult"


def _data(n=4000, seed=0, k=2):
    rng = np.random.default_rng(seed)
    a = rng.choice(["x", "y", "z"], size=n, p=[0.5, 0.3, 0.2])
    b = rng.choice([1, 2], size=n).astype(object)
    b[rng.random(n) < 0.05] = None
    logits = rng.normal(size=(n, k)) * 1.5
    P = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    P = np.round(P, 3)
    P /= P.sum(axis=1, keepdims=True)
    if k == 2:  # segment x is under-predicted by 0.15
        y = (rng.random(n) < np.clip(P[:, 1] + np.where(a == "x", 0.15, 0.0), 0, 1)).astype(np.int64)
    else:
        y = (rng.random(n)[:, None] > np.cumsum(P, axis=1)).sum(axis=1).clip(0, k - 1)
    w = rng.integers(0, 4, size=n).astype(np.float64)
    return {"a": a, "b": b}, y, P, w


def _oracle(mask, y, P, w):
    """The definitions, row by row (top label for k > 2)."""
    n = int(mask.sum())
    Pm, ym, wm = P[mask], y[mask], w[mask]
    if P.shape[1] == 2:
        p, hit = Pm[:, 1], (ym == 1).astype(float)
    else:
        top = Pm.argmax(axis=1)
        p, hit = Pm[np.arange(n), top], (top == ym).astype(float)
    W = wm.sum()
    bins = np.minimum((p * 16).astype(int), 15)
    ece = sum(abs(np.sum(wm[bins == b] * (hit[bins == b] - p[bins == b]))) for b in range(16)) / W
    z = np.sum(wm * (hit - p) * (1 - 2 * p)) / math.sqrt(np.sum(wm * (1 - 2 * p) ** 2 * p * (1 - p)))
    order = np.argsort(p, kind="stable")
    d = np.concatenate(([0.0], np.cumsum((wm * (hit - p))[order])))
    sigma = math.sqrt(np.sum(wm * p * (1 - p)))
    ll = -np.sum(wm * np.log(np.clip(Pm[np.arange(n), ym], 1e-15, 1))) / W
    onehot = np.eye(P.shape[1])[ym]
    brier = np.sum(wm * ((Pm - onehot) ** 2).sum(axis=1)) / W
    cell = np.minimum((p * GRID).astype(int), GRID - 1)
    within = max(np.abs(np.sum(wm[cell == c] * (hit[cell == c] - p[cell == c]))) for c in np.unique(cell))
    return {"rows": int((wm > 0).sum()), "weight": W, "mean_p": np.sum(wm * p) / W, "mean_y": np.sum(wm * hit) / W,
            "ece": ece, "spiegelhalter_z": z, "ecce_exact": (d.max() - d.min()) / sigma,
            "ecce_slack": 2 * within / sigma, "log_loss": ll, "brier": brier}


@pytest.mark.parametrize("k", [2, 4])
def test_every_segment_matches_the_row_by_row_definitions(k):
    seg, y, P, w = _data(k=k, seed=k)
    acc = SegmentAccumulator(("a", "b"), k)
    acc.add(seg, y, P, w)
    res = acc.result()
    got = {(r["column"], r["value"]): r for r in res["segments"]}
    masks = {ALL: np.ones(len(y), bool)}
    for v in ("x", "y", "z"):
        masks[("a", v)] = seg["a"] == v
    masks[("b", "1")] = np.array([x == 1 for x in seg["b"]])
    masks[("b", "2")] = np.array([x == 2 for x in seg["b"]])
    masks[("b", "null")] = np.array([x is None for x in seg["b"]])
    assert set(got) == set(masks)
    for key, mask in masks.items():
        want, r = _oracle(mask, y, P, w), got[key]
        for name in ("rows", "weight", "mean_p", "mean_y", "ece", "spiegelhalter_z", "log_loss", "brier"):
            assert r[name] == pytest.approx(want[name], rel=1e-9, abs=1e-12), (key, name)
        # the grid's range can only miss excursions inside one cell
        assert want["ecce_exact"] - want["ecce_slack"] - 1e-9 <= r["ecce_sigma"] <= want["ecce_exact"] + 1e-9
        assert r["ecce_pvalue"] == pytest.approx(ecce_p_value(r["ecce_sigma"]))
    worst = max(res["segments"], key=lambda r: r["ecce_sigma"])
    assert res["mce_sigma"] == worst["ecce_sigma"]
    assert res["worst"] == {"column": worst["column"], "value": worst["value"]}
    parts = res["segments"][1:]
    assert [r["ecce_sigma"] for r in parts] == sorted((r["ecce_sigma"] for r in parts), reverse=True)
    if k == 2:  # the planted segment is the worst one, and it is significant after Holm's correction
        assert res["worst"] == {"column": "a", "value": "x"}
        assert got[("a", "x")]["ecce_pvalue_holm"] < 1e-6


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 600), min_size=1, max_size=5), st.randoms(use_true_random=False))
def test_any_chunking_merges_to_the_same_sums(cuts, rnd):
    seg, y, P, w = _data(n=600, seed=3)
    whole = SegmentAccumulator(("a", "b"), 2)
    whole.add(seg, y, P, w)
    bounds = [0] + sorted(cuts) + [600]
    parts = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        part = SegmentAccumulator(("a", "b"), 2)
        part.add({c: v[lo:hi] for c, v in seg.items()}, y[lo:hi], P[lo:hi], w[lo:hi])
        parts.append(part)
    merged = parts[0]
    for p in parts[1:]:
        merged.merge(p)
    a = {(r["column"], r["value"]): r for r in whole.result()["segments"]}
    b = {(r["column"], r["value"]): r for r in merged.result()["segments"]}
    assert set(a) == set(b)
    for key in a:
        for name, v in a[key].items():
            if isinstance(v, float) and math.isfinite(v):
                assert b[key][name] == pytest.approx(v, rel=1e-9, abs=1e-12), (key, name)


def test_a_weight_of_two_is_the_row_twice():
    seg, y, P, _ = _data(n=800, seed=7)
    w = np.random.default_rng(1).integers(1, 3, size=800).astype(float)
    weighted = SegmentAccumulator(("a",), 2)
    weighted.add({"a": seg["a"]}, y, P, w)
    rep = np.repeat(np.arange(800), w.astype(int))
    twice = SegmentAccumulator(("a",), 2)
    twice.add({"a": seg["a"][rep]}, y[rep], P[rep])
    for r1, r2 in zip(weighted.result()["segments"], twice.result()["segments"]):
        for name in ("weight", "mean_p", "ece", "ece_equal_mass", "spiegelhalter_z", "ecce_sigma", "log_loss"):
            assert r1[name] == pytest.approx(r2[name], rel=1e-9)


def test_holm_against_hand_computed_values():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    out = holm([0.5, math.nan, 0.2])
    assert out[0] == pytest.approx(0.5) and math.isnan(out[1]) and out[2] == pytest.approx(0.4)


def test_bounds_and_bad_options():
    acc = SegmentAccumulator(("a",), 2, max_segments=2)
    with pytest.raises(DataError, match="'a' makes more than 2 segments"):
        acc.add({"a": np.array(["p", "q", "r"])}, np.array([0, 1, 0]), np.full((3, 2), 0.5))
    for bad in ("", "a,,b", "a,a"):
        with pytest.raises(ParameterError):
            check_segment_options(bad, 10)
    with pytest.raises(ParameterError, match="max_segments"):
        check_segment_options("a", 0)


@pytest.fixture(scope="module")
def adult_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("m") / "model"
    r = run_cli("--quiet", "fit", ADULT / "train.parquet", "--target", "class", "--positive", ">50K",
                "--learner", "gaussian_nb", "--method", "isotonic", "--output", out)
    assert r.returncode == 0, r
    return out


def test_cli_by_on_adult(adult_model):
    r = run_cli("--quiet", "evaluate", adult_model, ADULT / "test.parquet", "--target", "class", "--by", "sex,race",
                "--json")
    assert r.returncode == 0, r
    out = r.json()
    seg = out["segments"]
    assert seg["by"] == ["sex", "race"]
    names = {(s["column"], s["value"]) for s in seg["segments"]}
    assert ("sex", "Female") in names and ("race", "Black") in names and ("(all)", "(all)") in names
    whole = seg["segments"][0]
    assert whole["column"] == "(all)" and whole["rows"] == 16281
    # the whole table's numbers are evaluate's own (exact) ones, up to the grid's cell slack for ECCE
    assert whole["log_loss"] == pytest.approx(out["log_loss"], rel=1e-9)
    assert whole["ecce_sigma"] == pytest.approx(out["kuiper"], rel=0.05)
    by_sex = {s["value"]: s for s in seg["segments"] if s["column"] == "sex"}
    assert by_sex["Female"]["rows"] + by_sex["Male"]["rows"] == 16281
    text = run_cli("--quiet", "evaluate", adult_model, ADULT / "test.parquet", "--target", "class", "--by", "sex")
    assert text.returncode == 0 and "calibration by segment" in text.stdout and "sex=Female" in text.stdout


@pytest.mark.parametrize("args,message", [
    (["--by", "no_such_column"], "no_such_column"),
    (["--by", "fnlwgt", "--max-segments", "50"], "makes more than 50 segments"),
    (["--by", "sex", "--max-segments", "0"], "--max-segments must be"),
    (["--max-segments", "5"], "--max-segments bounds --by"),
    (["--by", "class"], "is the target"),
])
def test_cli_bad_by_is_one_line(adult_model, args, message):
    r = run_cli("--quiet", "evaluate", adult_model, ADULT / "test.parquet", "--target", "class", *args)
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], r


def test_report_and_python_api_carry_the_segments(adult_model, tmp_path):
    import calengine

    ev = calengine.evaluate_models(adult_model, ADULT / "test.parquet", "class", by=["race"],
                                   report=tmp_path / "report")
    seg = ev.to_json()["segments"]
    assert seg["by"] == ["race"] and seg["segments"][0]["rows"] == 16281
    page = (tmp_path / "report" / "index.html").read_text()
    assert "Calibration by segment" in page and "race = Black" in page
    assert f"{seg['segments'][1]['rows']}" in page
