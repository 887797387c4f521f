"""``fit --by``: one calibrator per segment (calengine.fit.segments, calengine.model.segmented) against
the same calibrator fitted in memory on each segment's rows, over random partitionings; the shrinkage
blend; unseen and missing segments on the global map; save/load; the CLI on Adult; bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import calengine
from calengine.errors import ParameterError
from cli_helpers import REPO, assert_one_line_error, run_cli

ADULT = REPO / "data" / "adult"


def _table(seed: int, n: int = 1200) -> pd.DataFrame:
    """A score column ``s`` calibrated on average, with segment ``g`` = b over-predicted and c
    under-predicted, a tiny one-class segment d (global map), and rows whose ``g`` is missing."""
    rng = np.random.default_rng(seed)
    g = rng.choice(["a", "b", "c"], size=n, p=[0.5, 0.3, 0.2]).astype(object)
    s = rng.random(n).round(2)
    shift = np.select([g == "b", g == "c"], [-0.2, 0.2], 0.0)
    y = (rng.random(n) < np.clip(s + shift, 0.0, 1.0)).astype(np.int64)
    g[:3], y[:3] = "d", 1
    g[rng.random(n) < 0.03] = None
    return pd.DataFrame({"s": s, "g": g, "y": y})


def _write(df: pd.DataFrame, path, row_group: int):
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path, row_group_size=row_group)
    return path


def _fit(path, fragment_rows, method, shrinkage, **extra):
    from calengine.runtime.client import dask_client
    from calengine.fit.table import TableSpec, fit_table
    from calengine.fit.training import FitConfig

    spec = TableSpec(str(path), "y", fragment_rows=fragment_rows, scores=("s",), by="g", shrinkage=shrinkage, **extra)
    with dask_client(workers=2) as client:
        return fit_table(client, spec, FitConfig(method=method))


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), fragment_rows=st.sampled_from([53, 400, 10**6]),
       row_group=st.sampled_from([53, 250, 5000]), method=st.sampled_from(["isotonic", "sigmoid"]),
       weighted=st.booleans())
def test_segment_maps_equal_in_memory_fits_on_any_partitioning(tmp_path, seed, fragment_rows, row_group, method,
                                                               weighted):
    from calengine.plugins import registry

    df = _table(seed)
    w = np.random.default_rng(seed).integers(0, 4, len(df)).astype(np.float64) if weighted else np.ones(len(df))
    w[:3] = 1.0
    df["w"] = w
    path = _write(df, tmp_path / f"t{seed}_{fragment_rows}_{row_group}_{method}_{weighted}.parquet", row_group)
    model = _fit(path, fragment_rows, method, 0, weight="w" if weighted else None)
    member = model.members[0]
    keys = model.encoder.keys
    assert keys == [("a",), ("b",), ("c",)]  # d has one class: the global map
    got = model.predict_proba(df[["s", "g"]])[:, 1]
    kind = member.learners[0].score_kind
    live = w > 0  # a row of weight 0 is a row absent (its score bounds nothing)

    def oracle(rows):
        return registry.make("calibrators", method, {}).fit(df["s"][rows].to_numpy(), df["y"][rows].to_numpy(),
                                                            sample_weight=w[rows], score_kind=kind)

    for j, (value,) in enumerate(keys):
        rows = (df["g"] == value).to_numpy() & live
        np.testing.assert_allclose(got[rows], oracle(rows).predict(df["s"][rows].to_numpy()),
                                   atol=1e-12 if method == "isotonic" else 1e-6)
        assert member.weights[j] == 1.0
    glob = oracle(live)
    other = ~df["g"].isin(["a", "b", "c"]).to_numpy() & live  # d and missing
    np.testing.assert_allclose(got[other], glob.predict(df["s"][other].to_numpy()),
                               atol=1e-12 if method == "isotonic" else 1e-6)


def test_many_segments_are_few_range_tasks_and_each_segment_its_own_in_memory_isotonic(tmp_path, monkeypatch):
    """Issue 25: thousands of segments must not mean thousands of tasks.  About 60 segments: the sorted
    round is a couple of batched range tasks; with ranges cut at 150 rows (large segments span several
    ranges, batches span segments) still fewer tasks than ranges, and every segment's map is its
    in-memory isotonic fit."""
    import distributed

    from calengine.plugins import registry
    from calengine.fit import calibrators

    rng = np.random.default_rng(5)
    n = 6000
    g = rng.zipf(1.3, n) % 60
    s = rng.random(n).round(3)
    y = (rng.random(n) < np.clip(s + (g % 5 - 2) / 10, 0, 1)).astype(np.int64)
    df = pd.DataFrame({"s": s, "g": g.astype(str), "y": y})
    path = _write(df, tmp_path / "t.parquet", 700)
    names, pairs = [], []
    submit, groups = distributed.Client.submit, calibrators._range_groups

    def counting(self, fn, *args, **kwargs):
        names.append(getattr(fn, "__name__", ""))
        return submit(self, fn, *args, **kwargs)

    def grouping(*args):
        out = groups(*args)
        pairs.extend(p for grp in out for p in grp)
        return out

    monkeypatch.setattr(distributed.Client, "submit", counting)
    monkeypatch.setattr(calibrators, "_range_groups", grouping)
    model = _fit(path, 1500, "isotonic", 0)
    keys = model.encoder.keys
    assert len(keys) > 30 and len(pairs) > 30
    assert names.count("ranges_partial_stats") <= 4  # the global fit's one, and about one per worker
    monkeypatch.setattr(calibrators, "range_rows_for", lambda memory_limit: 150)
    names.clear()
    pairs.clear()
    model = _fit(path, 1500, "isotonic", 0)
    assert model.encoder.keys == keys
    assert len(pairs) > 100 and names.count("ranges_partial_stats") < 0.9 * len(pairs)
    got = model.predict_proba(df[["s", "g"]])[:, 1]
    for (value,) in keys:
        rows = (df["g"] == value).to_numpy()
        want = registry.make("calibrators", "isotonic", {}).fit(df["s"][rows].to_numpy(), y[rows], score_kind="proba")
        np.testing.assert_allclose(got[rows], want.predict(df["s"][rows].to_numpy()), atol=1e-12)


@given(sizes=st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 4)), min_size=1, max_size=30),
       workers=st.integers(1, 4), limit=st.sampled_from([100, 1000, 10**6]))
@settings(max_examples=25, deadline=None)
def test_range_batches_keep_every_range_in_order_within_a_range_s_rows(sizes, workers, limit):
    from types import SimpleNamespace
    from unittest import mock

    from calengine.fit import calibrators

    specs = [(i, i, 0, np.zeros(cuts)) for i, (_, cuts) in enumerate(sizes)]
    summaries = [{"n": n} for n, _ in sizes]
    with mock.patch.object(calibrators, "range_rows_for", lambda memory_limit: limit):
        groups = calibrators._range_groups(specs, summaries, SimpleNamespace(memory_limit=1.0), workers)
    assert [p for grp in groups for p in grp] == [(i, r) for i, (_, cuts) in enumerate(sizes) for r in range(cuts + 1)]
    rows = {(i, r): n / (cuts + 1) for i, (n, cuts) in enumerate(sizes) for r in range(cuts + 1)}
    for grp in groups:
        assert len(grp) == 1 or sum(rows[p] for p in grp) <= limit + 1e-9


def test_shrinkage_blends_towards_the_global_map_and_survives_save_and_load(tmp_path):
    df = _table(3)
    path = _write(df, tmp_path / "t.parquet", 300)
    model = _fit(path, 500, "isotonic", 50)
    member = model.members[0]
    s = np.linspace(0, 1, 11)
    for j, (value,) in enumerate(model.encoder.keys):
        n = float((df["g"] == value).sum())
        assert member.weights[j] == pytest.approx(n / (n + 50), rel=1e-15)
        want = member.weights[j] * member.segment_cals[j][0].predict(s) + (1 - member.weights[j]) * \
            member.base.calibrators[0].predict(s)
        got = model.predict_proba(pd.DataFrame({"s": s, "g": value}))[:, 1]
        np.testing.assert_allclose(got, want, atol=1e-15)
    unseen = model.predict_proba(pd.DataFrame({"s": s, "g": ["zz"] * 6 + [None] * 5}))[:, 1]
    np.testing.assert_array_equal(unseen, member.base.calibrators[0].predict(s))
    # a row's probability does not depend on its neighbours
    one = np.array([model.predict_proba(df[["s", "g"]].iloc[[i]])[0, 1] for i in range(0, len(df), 97)])
    np.testing.assert_array_equal(one, model.predict_proba(df[["s", "g"]])[::97, 1])
    from calengine.model.artifact import save_model

    save_model(model, tmp_path / "m")
    loaded = calengine.load_model(tmp_path / "m")
    np.testing.assert_array_equal(loaded.predict_proba(df[["s", "g"]]), model.predict_proba(df[["s", "g"]]))
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["features"]["by"] == ["g"] and manifest["features"]["keys"] == [["a"], ["b"], ["c"]]
    assert manifest["members"][0]["meta"]["weights"] == list(member.weights)
    assert manifest["members"][0]["meta"]["shrinkage"] == 50.0
    assert manifest["extra"]["x_segments"]["segments_fitted"] == 3
    assert not list((tmp_path / "m").rglob("*.pkl"))
    from calengine.fit.recalibrate import check_recalibratable

    with pytest.raises(ParameterError, match="fit the model again"):
        check_recalibratable(loaded, False, 1.0)


def test_segments_are_named_as_evaluate_by_names_them():
    from calengine.metrics import segments as metric
    from calengine.model import segmented

    assert segmented.MAX_SEGMENTS == metric.MAX_SEGMENTS_LIMIT
    values = np.array(["x", None, 3, "x", np.nan, "null"], dtype=object)
    assert [list(v) for v in segmented._factorize(values)] == [list(v) for v in metric.factorize(values)]
    keys, codes = segmented.segment_codes(pd.DataFrame({"a": values, "b": [1, 1, 2, 2, 1, 1]}), ("a", "b"))
    assert [keys[c] if c >= 0 else None for c in codes] == [("x", "1"), None, ("3", "2"), ("x", "2"), None,
                                                             ("null", "1")]


def test_shrinkage_values():
    from calengine.fit.segments import DEFAULT_SHRINKAGE, blend_weight, check_shrinkage

    assert check_shrinkage(None) == DEFAULT_SHRINKAGE
    assert check_shrinkage("inf") == math.inf and check_shrinkage("0") == 0.0
    np.testing.assert_array_equal(blend_weight([0.0, 10.0], 0.0), [1.0, 1.0])
    np.testing.assert_array_equal(blend_weight([10.0, 30.0], math.inf), [0.0, 0.0])
    np.testing.assert_allclose(blend_weight([10.0, 30.0], 10.0), [0.5, 0.75])
    for bad in ("-1", "nan", "x", True):
        with pytest.raises(ParameterError, match="shrinkage must"):
            check_shrinkage(bad)


def test_cli_on_adult_fit_by_score_and_evaluate_by(tmp_path):
    model = tmp_path / "m"
    r = run_cli("fit", ADULT / "train.parquet", "--target", "class", "--by", "sex,race", "--cv", "2",
                "--output", model)
    assert r.returncode == 0, r
    assert "segments with their own map" in r.stderr
    r = run_cli("score", model, ADULT / "test.parquet", "--output", tmp_path / "s.parquet", "--keep", "sex")
    assert r.returncode == 0, r
    assert len(pd.read_parquet(tmp_path / "s.parquet")) == 16281
    r = run_cli("evaluate", model, ADULT / "test.parquet", "--target", "class", "--by", "sex", "--json")
    assert r.returncode == 0, r
    assert "sex" in r.stdout
    pd.read_parquet(ADULT / "test.parquet").drop(columns=["race"]).to_parquet(tmp_path / "norace.parquet")
    assert_one_line_error(run_cli("score", model, tmp_path / "norace.parquet", "--output", tmp_path / "x.parquet"),
                          "race")
    train = ADULT / "train.parquet"
    for extra, fragment in ((["--by", "nope"], "'nope' is not in the table"),
                            (["--by", "age", "--max-segments", "10"], "more than 10 segments")):
        assert_one_line_error(run_cli("fit", train, "--target", "class", *extra, "--output", tmp_path / "bad"),
                              fragment)


def test_fits_by_does_not_serve_are_one_line():
    from calengine.fit.table import TableSpec
    from calengine.fit.training import FitConfig
    from calengine.plan.options import check_job  # what a segment-wise fit refuses is checked at the door

    def _refuse(spec, config):
        check_job(config, spec)

    spec = TableSpec("t.parquet", "y", by=("g",))
    # Python errors name the parameters (the CLI writes them as flags: tests/cli)
    for config, fragment in ((FitConfig(mode="refit"), "mode='refit'"), (FitConfig(method="none"), "method='none'"),
                             (FitConfig(method="probing"), "method='probing'"),
                             (FitConfig(multiclass="all_pairs:coupling"), "drop multiclass")):
        with pytest.raises(ParameterError, match=fragment):
            _refuse(spec, config)
    with pytest.raises(ParameterError, match="target"):
        _refuse(TableSpec("t.parquet", "y", by=("y",)), FitConfig())
