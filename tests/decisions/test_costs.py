"""Issue 25's two ``--by`` costs: the fit reads and factorises the segment columns once per fragment,
``evaluate --by`` scores each row once, and a segment-wise model applies its segments' maps in one
pass per batch (``Calibrator.predict_grouped``) with the same bits as segment by segment."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calengine.plugins import registry


def _isotonic(rng, n, kind, interpolation="step"):
    s = rng.random(n).round(2) if kind == "proba" else rng.normal(size=n).round(1)
    y = (rng.random(n) < (s if kind == "proba" else 1 / (1 + np.exp(-s)))).astype(np.int64)
    y[:2] = [0, 1]
    return registry.make("calibrators", "isotonic", {"interpolation": interpolation}).fit(s, y, score_kind=kind)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), groups=st.integers(1, 12), kind=st.sampled_from(["proba", "decision"]))
def test_isotonic_predict_grouped_is_each_fit_s_predict_bit_for_bit(seed, groups, kind):
    rng = np.random.default_rng(seed)
    cals = [_isotonic(rng, int(rng.integers(2, 60)), kind) for _ in range(groups)]
    sizes = rng.integers(1, 40, size=groups)
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    parts = []
    for cal, m in zip(cals, sizes):
        # scores on the fit's own block starts (ties: side="right"), between them, -0.0 and outside
        pool = np.concatenate((cal.lo_, cal.hi_, [-0.0, 0.0, 1.0]))
        s = np.where(rng.random(m) < 0.5, rng.choice(pool, m), rng.random(m) if kind == "proba" else rng.normal(size=m))
        parts.append(s)
    scores = np.concatenate(parts)
    want = np.concatenate([cal.predict(s) for cal, s in zip(cals, parts)])
    got = type(cals[0]).predict_grouped(cals, scores, bounds)
    assert got.dtype == np.float64 and got.view(np.uint64).tolist() == want.view(np.uint64).tolist()


def test_predict_grouped_falls_back_to_the_loop_for_linear_fits_and_other_calibrators():
    rng = np.random.default_rng(1)
    s = rng.random(30)
    bounds = np.array([0, 10, 30])
    linear = [_isotonic(rng, 50, "proba", "linear") for _ in range(2)]
    want = np.concatenate([linear[0].predict(s[:10]), linear[1].predict(s[10:])])
    np.testing.assert_array_equal(type(linear[0]).predict_grouped(linear, s, bounds), want)
    y = (rng.random(200) < 0.4).astype(np.int64)
    sig = [registry.make("calibrators", "sigmoid", {}).fit(rng.normal(size=200), y) for _ in range(2)]
    want = np.concatenate([sig[0].predict(s[:10]), sig[1].predict(s[10:])])
    np.testing.assert_array_equal(type(sig[0]).predict_grouped(sig, s, bounds), want)


@pytest.mark.parametrize("method", ["isotonic", "sigmoid"])
def test_segmented_member_one_pass_is_the_row_by_row_blend(method):
    """Every row's probability, scored in one batch of all segments, equals that row scored alone by
    the module docstring's blend: weights 0 and 1, unseen segments (-1), out-of-range and NaN codes."""
    from calengine.model.calibrated import Member, RawMap
    from calengine.model.segmented import SegmentedMember

    rng = np.random.default_rng(7)

    def cal():
        s = rng.random(300).round(2)
        y = (rng.random(300) < np.clip(s + rng.normal(0, 0.2), 0, 1)).astype(np.int64)
        return registry.make("calibrators", method, {}).fit(s, y, score_kind="proba")

    n_seg = 40
    weights = rng.random(n_seg)
    weights[:5], weights[5:8] = 0.0, 1.0
    base = Member([], [[0]], [cal()], RawMap("proba", np.zeros(1), np.ones(1)))
    member = SegmentedMember(base, [[cal()] for _ in range(n_seg)], weights, 20.0)
    n = 3000
    seg = rng.integers(-1, n_seg + 3, size=n).astype(np.float64)
    seg[:7] = np.nan
    S = rng.random((n, 1)).round(3)
    got = member.column_probabilities(seg[:, None], S)
    G = base.column_probabilities(None, S)[:, 0]
    want = G.copy()
    for i in range(n):
        j = int(seg[i]) if np.isfinite(seg[i]) else -1
        if 0 <= j < n_seg and weights[j] > 0:
            own = np.clip(member.segment_cals[j][0].predict(S[i]), 0.0, 1.0)[0]
            want[i] = weights[j] * own + (1.0 - weights[j]) * G[i]
    assert got.shape == (n, 1)
    np.testing.assert_array_equal(got[:, 0], want)
    # and each row scored alone gives its bits in the batch
    alone = np.array([member.column_probabilities(seg[[i], None], S[[i]])[0, 0] for i in range(0, n, 37)])
    np.testing.assert_array_equal(alone, got[::37, 0])


@pytest.fixture(scope="module")
def by_model(tmp_path_factory):
    """A small ``--by`` table (three row groups, a label missing here and there) and its model."""
    import calengine

    rng = np.random.default_rng(3)
    n = 3000
    g = rng.choice(["a", "b", "c", "d"], size=n).astype(object)
    g[rng.random(n) < 0.03] = None
    s = rng.random(n).round(3)
    y = (rng.random(n) < np.clip(s + np.select([g == "b", g == "c"], [-0.2, 0.2], 0.0), 0, 1)).astype(float)
    y[rng.random(n) < 0.02] = np.nan
    df = pd.DataFrame({"s": s, "g": g, "y": y})
    path = tmp_path_factory.mktemp("costs") / "t.parquet"
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path, row_group_size=1000)
    model = calengine.fit_table(str(path), "y", scores=("s",), method="isotonic", by="g", fragment_rows=1000)
    return path, df, model


def test_fit_by_reads_the_segment_column_once_per_fragment(by_model, monkeypatch):
    """The counting pass keeps each fragment's codes on the worker: the scoring pass reads no ``--by``
    column, and the model is the one the rows give (each segment's in-memory isotonic, K = 20 blend)."""
    import calengine
    from calengine.parquet import dataset

    path, df, model = by_model
    reads = []
    read = dataset.read_fragment

    def counting(fragment, columns):
        reads.append(tuple(columns))
        return read(fragment, columns)

    monkeypatch.setattr(dataset, "read_fragment", counting)
    again = calengine.fit_table(str(path), "y", scores=("s",), method="isotonic", by="g", fragment_rows=1000)
    with_g = [c for c in reads if "g" in c]
    assert len(with_g) == 3, reads  # one read of the segment column per fragment: the counts
    labelled = df[df["y"].notna()]
    np.testing.assert_array_equal(again.predict_proba(labelled[["s", "g"]]), model.predict_proba(labelled[["s", "g"]]))
    member = model.members[0]
    for j, (value,) in enumerate(model.encoder.keys):
        rows = (labelled["g"] == value).to_numpy()
        want = registry.make("calibrators", "isotonic", {}).fit(labelled["s"][rows].to_numpy(),
                                                                labelled["y"][rows].to_numpy().astype(np.int64),
                                                                score_kind="proba")
        np.testing.assert_array_equal(member.segment_cals[j][0].lo_, want.lo_)
        np.testing.assert_allclose(member.segment_cals[j][0].values_, want.values_, rtol=1e-12)


def test_evaluate_by_scores_each_row_once_and_reports_the_rows_segments(by_model, monkeypatch):
    """One scoring pass feeds the metrics and the segment report (each labelled row scored once), and
    the report's sums are those of the model's probabilities of every row."""
    from calengine.metrics.evaluation import evaluate_models
    from calengine.metrics.segments import SegmentAccumulator
    from calengine.model.calibrated import CalibratedModel

    path, df, model = by_model
    scored = []
    both, proba = CalibratedModel.both_proba_features, CalibratedModel.predict_proba_features

    def count_both(self, X):
        scored.append(X.shape[0])
        return both(self, X)

    def count_proba(self, X):
        scored.append(X.shape[0])
        return proba(self, X)

    labelled = df[df["y"].notna()].reset_index(drop=True)
    lpath = path.parent / "labelled.parquet"
    labelled.to_parquet(lpath, row_group_size=1000)
    monkeypatch.setattr(CalibratedModel, "both_proba_features", count_both)
    monkeypatch.setattr(CalibratedModel, "predict_proba_features", count_proba)
    ev = evaluate_models(model, str(lpath), "y", by="g")
    monkeypatch.undo()
    assert sum(scored) == len(labelled)
    acc = SegmentAccumulator(("g",), 2)
    acc.add({"g": labelled["g"].to_numpy()}, labelled["y"].to_numpy().astype(np.int64),
            model.predict_proba(labelled[["s", "g"]]))
    want = {(r["column"], r["value"]): r for r in acc.result()["segments"]}
    got = {(r["column"], r["value"]): r for r in ev.segments[0]["segments"]}
    assert got.keys() == want.keys() and len(got) == 6  # all rows, a..d, null
    for key, r in want.items():
        assert got[key]["rows"] == r["rows"]
        for name in ("mean_p", "mean_y", "log_loss", "ece", "ecce_sigma", "spiegelhalter_z"):
            assert got[key][name] == pytest.approx(r[name], rel=1e-9, abs=1e-12), (key, name)


@pytest.mark.parametrize("values", [
    pd.Series(["b", "a", None, "b", "null"], dtype="str"), pd.Series(["b", "a", None, "b"], dtype=object),
    pd.Series([3, None, 1, 3], dtype="Int64"), pd.Series([0.25, np.nan, 1.0, 0.25]), pd.Series([True, False, True]),
    pd.Series(["x", "y", None, "x"], dtype="category"), pd.Series(pd.to_datetime(["2024-01-02", None, "2024-01-02"])),
], ids=["str", "object", "Int64", "float", "bool", "category", "datetime"])
def test_segments_are_factorised_from_the_series_as_from_its_values(values):
    """The fit and the report factorise a batch's Series as it is (no Python objects for Arrow strings):
    the same names and codes as from the column's NumPy values."""
    from calengine.metrics import segments as metric
    from calengine.model import segmented

    for factorize in (segmented._factorize, metric._factorize):
        codes, names = factorize(values)
        want_codes, want_names = factorize(values.to_numpy())
        assert names == want_names and codes.tolist() == want_codes.tolist()
