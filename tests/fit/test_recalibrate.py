"""``calengine recalibrate``: new calibrators on new data, the learners kept bit for bit.

Oracles: the update merges against refits on the union of old and new rows (isotonic, when its
blocks do not interleave; binning counts in the old bins), computed independently here; drift is
simulated by a prevalence shift of a known logistic model.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

import calengine
from calengine.errors import DataError, ModelFormatError, ParameterError
from calengine.fit.recalibrate import binning_request, merge_binning, merge_isotonic, merge_summary_fit
from calengine.model.artifact import content_hash, load_model, read_manifest, save_model
from calengine_builtins.calibrators import BinningCalibrator, IsotonicCalibrator
from cli_helpers import assert_one_line_error


def _table(n: int, seed: int, shift: float = 0.0) -> pd.DataFrame:
    """y ~ Bernoulli(sigmoid(2 x1 - x2 + shift)): ``shift`` moves the prevalence, not the ranking."""
    rng = np.random.default_rng(seed)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    p = 1.0 / (1.0 + np.exp(-(2.0 * x1 - x2 + shift)))
    return pd.DataFrame({"x1": x1, "x2": x2, "class": np.where(rng.random(n) < p, "pos", "neg")})


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("recal")
    _table(1500, 0).to_parquet(root / "old.parquet", index=False)
    _table(1500, 1, shift=2.0).to_parquet(root / "shift_a.parquet", index=False)
    _table(3000, 2, shift=2.0).to_parquet(root / "shift_b.parquet", index=False)
    models = {}
    for name, kw in {
        "sigmoid": dict(learner="logistic_regression", method="sigmoid", mode="refit"),
        "isotonic": dict(learner="gaussian_nb", method="isotonic"),
        "binning": dict(learner="gaussian_nb", method="binning", method_params={"n_bins": 5}),
        "beta": dict(learner="gaussian_nb", method="beta", mode="refit"),
    }.items():
        m = calengine.fit_table(str(root / "old.parquet"), "class", **kw)
        save_model(m, root / name)
        models[name] = root / name
    return root, models


def _brier(model, df):
    p = model.predict_proba(df)[:, list(model.classes_).index("pos")]
    return float(np.mean((p - (df["class"] == "pos")) ** 2))


def _auc(p, y):
    from sklearn.metrics import roc_auc_score

    return roc_auc_score(y, p)


# ---------------------------------------------------------------------------------------------- refit


def test_recalibrating_on_shifted_data_fixes_calibration_and_keeps_the_learners(work):
    root, models = work
    old = load_model(models["sigmoid"])
    new = calengine.recalibrate(models["sigmoid"], str(root / "shift_a.parquet"), "class")
    held = pd.read_parquet(root / "shift_b.parquet")
    before, after = _brier(old, held), _brier(new, held)
    assert after < before - 0.01, (before, after)  # measured: 0.130 -> 0.105
    X = old.encoder.transform(held, order="F")
    for m_old, m_new in zip(old.members, new.members):
        assert np.array_equal(m_old.scores(X), m_new.scores(X))  # learners bit-identical
    # a strictly increasing calibrator on a single member: the ranking, so the AUC, is unchanged
    y = held["class"] == "pos"
    pos = list(old.classes_).index("pos")
    assert _auc(new.predict_proba(held)[:, pos], y) == pytest.approx(_auc(old.predict_proba(held)[:, pos], y), abs=1e-12)
    # the calibrator is what changed: the shifted data has a higher prevalence
    assert new.predict_proba(held)[:, pos].mean() > old.predict_proba(held)[:, pos].mean() + 0.1


def test_each_ensemble_member_is_refitted_on_all_new_data(work):
    root, models = work
    old = load_model(models["isotonic"])
    new = calengine.recalibrate(old, str(root / "shift_a.parquet"), "class")
    assert len(new.members) == len(old.members) == 5
    n_new = len(pd.read_parquet(root / "shift_a.parquet"))
    for m in new.members:
        assert m.calibrators[0].weights_.sum() == pytest.approx(n_new)  # every row calibrates every member
    # the same as fitting a fresh isotonic calibrator on the member's scores of the new rows, in memory
    df = pd.read_parquet(root / "shift_a.parquet")
    X = old.encoder.transform(df, order="F")
    t = (old.labels.encode(df["class"]) == 1).astype(int)
    for m_old, m_new in zip(old.members, new.members):
        ref = IsotonicCalibrator().fit(m_old.scores(X)[:, 0], t, score_kind=m_old.raw.score_kind)
        for key in ("lo_", "hi_", "values_", "weights_"):
            np.testing.assert_allclose(getattr(m_new.calibrators[0], key), getattr(ref, key), rtol=1e-12)


def _states_equal(a, b):
    for ma, mb in zip(a.members, b.members):
        for ca, cb in zip(ma.calibrators, mb.calibrators):
            sa, sb = ca.to_state(), cb.to_state()
            assert sa.keys() == sb.keys()
            for key in sa:
                if isinstance(sa[key], np.ndarray):
                    np.testing.assert_allclose(sa[key], sb[key], rtol=1e-12)
                else:
                    assert sa[key] == sb[key]
        np.testing.assert_array_equal(ma.raw.lo, mb.raw.lo)


_WHOLE: dict = {}


@settings(max_examples=4, deadline=None)
@given(st.lists(st.integers(1, 1499), min_size=1, max_size=4, unique=True), st.integers(37, 400),
       st.sampled_from(["binning", "isotonic"]))
def test_partitioning_of_the_new_data_does_not_change_the_result(work, tmp_path_factory, cuts, row_group, name):
    """Files and row groups cut at random: the same calibrators (refit for binning's three rounds,
    update for isotonic's sorted round plus the block merge) as from one file."""
    root, models = work
    update = name == "isotonic"
    if name not in _WHOLE:
        _WHOLE[name] = calengine.recalibrate(models[name], str(root / "shift_a.parquet"), "class", update=update)
    df = pd.read_parquet(root / "shift_a.parquet")
    parts = tmp_path_factory.mktemp("parts")
    bounds = [0, *sorted(cuts), len(df)]
    for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        df.iloc[a:b].to_parquet(parts / f"p{k}.parquet", index=False, row_group_size=row_group)
    _states_equal(_WHOLE[name], calengine.recalibrate(models[name], str(parts), "class", update=update))


def test_a_real_local_cluster_gives_the_embedded_result(work):
    from distributed import Client, LocalCluster

    root, models = work
    embedded = calengine.recalibrate(models["isotonic"], str(root / "shift_a.parquet"), "class", update=True)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as lc, Client(lc) as c:
        on_cluster = calengine.recalibrate(models["isotonic"], str(root / "shift_a.parquet"), "class", update=True, client=c)
    for a, b in zip(embedded.members, on_cluster.members):
        np.testing.assert_allclose(a.calibrators[0].values_, b.calibrators[0].values_, rtol=1e-12)
        np.testing.assert_allclose(a.calibrators[0].weights_, b.calibrators[0].weights_, rtol=1e-12)


def _three_classes(n: int, seed: int, shift: float) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    c = rng.choice(3, size=n, p=[0.5 - shift, 0.3, 0.2 + shift])
    x = rng.normal(size=(n, 2)) + np.array([[0, 0], [1.5, 0], [0, 1.5]])[c]
    return pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "class": np.array(["u", "v", "w"])[c]})


@pytest.mark.parametrize("multiclass", [None, "all_pairs:coupling"])
def test_multiclass_columns_are_recalibrated_on_their_own_rows(tmp_path, multiclass):
    _three_classes(600, 0, 0.0).to_parquet(tmp_path / "old.parquet", index=False)
    new_df = _three_classes(700, 1, 0.2)
    kw = {"multiclass": multiclass} if multiclass else {}
    old = calengine.fit_table(str(tmp_path / "old.parquet"), "class", learner="gaussian_nb", method="binning",
                              method_params={"n_bins": "auto"}, **kw)
    new = calengine.recalibrate(old, new_df, "class")
    counts = new_df["class"].value_counts().reindex(["u", "v", "w"]).to_numpy()
    M = new.code_matrix
    for member in new.members:
        for b, cal in enumerate(member.calibrators):
            used = counts[M[:, b] != 0].sum()  # a column is calibrated on the rows of the classes it uses
            assert cal.bin_weights_.sum() == used
            assert cal.bin_positives_.sum() == counts[M[:, b] == 1].sum()
    P = new.predict_proba(new_df)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    # the shifted prevalence of class w is picked up
    w = list(new.classes_).index("w")
    assert P[:, w].mean() > old.predict_proba(new_df)[:, w].mean() + 0.05
    # and update works on the auto-binned model (its bins' counts are stored by the in-memory fit too)
    upd = calengine.recalibrate(old, new_df, "class", update=True)
    for m_old, m_upd in zip(old.members, upd.members):
        for b, (c_old, c_upd) in enumerate(zip(m_old.calibrators, m_upd.calibrators)):
            assert c_upd.bin_weights_.sum() == pytest.approx(c_old.bin_weights_.sum() + counts[M[:, b] != 0].sum())
            np.testing.assert_array_equal(c_upd.hi_[:-1], c_old.hi_[:-1])  # the old cuts


def test_models_without_calibrators_are_refused():
    from types import SimpleNamespace

    from calengine.fit.recalibrate import check_recalibratable

    fake = SimpleNamespace(members=[SimpleNamespace()], info={"method": "probing"})
    with pytest.raises(ParameterError, match="no separate calibrators"):
        check_recalibratable(fake, False, 1.0)


# ---------------------------------------------------------------------------------------------- update oracles


def _iso(s, y, w=None):
    return IsotonicCalibrator().fit(np.asarray(s, float), np.asarray(y), sample_weight=w)


def test_isotonic_update_equals_the_refit_on_the_union_when_blocks_do_not_interleave():
    # old: rates increase with the score, so every old block is one tie group (a single score)
    s_old = np.repeat([1.0, 2.0, 3.0, 4.0], 4)
    y_old = np.array([0, 0, 0, 1, 0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1])
    # new: rates 0, 1/2, 2/3, 3/4, 1 at 0.5, 1, 2, 3, 5 -- single-score blocks too
    s_new = np.array([0.5, 1, 1, 2, 2, 2, 3, 3, 3, 3, 5])
    y_new = np.array([0, 0, 1, 0, 1, 1, 1, 1, 1, 0, 1])
    old, new = _iso(s_old, y_old), _iso(s_new, y_new)
    assert np.all(old.lo_ == old.hi_) and np.all(new.lo_ == new.hi_)
    merged, exact = merge_isotonic(old, new)
    assert exact
    ref = _iso(np.concatenate((s_old, s_new)), np.concatenate((y_old, y_new)))
    for key in ("lo_", "hi_", "values_", "weights_"):
        np.testing.assert_allclose(getattr(merged, key), getattr(ref, key), rtol=1e-12)
    # by hand: score 1 pools old 1/4 and new 1/2 -> 2/6; the old 1s at 4 and the new 1 at 5 pool -> 1
    assert merged.predict(np.array([1.0]))[0] == pytest.approx(2 / 6)
    assert merged.predict(np.array([5.0]))[0] == 1.0


def test_isotonic_update_of_interleaved_blocks_is_flagged_approximate():
    # the counterexample of the docs: old block {1: y=1, 3: y=0} (one level 0.5); new points at 2 and
    # 2.5 split it in the union's fit (old row at 1 -> ~0, old row at 3 -> ~1)
    old = _iso([1.0, 3.0], [1, 0])
    new = _iso([2.0, 2.5], [0, 1], w=np.array([1000.0, 1000.0]))
    merged, exact = merge_isotonic(old, new)
    assert not exact
    ref = _iso([1.0, 2.0, 2.5, 3.0], [1, 0, 1, 0], w=np.array([1.0, 1000, 1000, 1]))
    assert ref.predict(np.array([3.0]))[0] > 0.99
    assert merged.weights_.sum() == pytest.approx(2002.0)  # still all the weight, still isotonic
    assert np.all(np.diff(merged.values_) > 0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 1)), min_size=2, max_size=30),
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 1)), min_size=2, max_size=30),
    st.sampled_from([1.0, 0.5, 0.0]),
)
def test_isotonic_update_property(old_rows, new_rows, forget):
    so, yo = (np.array(v, dtype=float) for v in zip(*old_rows))
    sn, yn = (np.array(v, dtype=float) for v in zip(*new_rows))
    if len(set(yo)) < 2 or len(set(yn)) < 2:
        return
    old, new = _iso(so, yo.astype(int)), _iso(sn, yn.astype(int))
    merged, exact = merge_isotonic(old, new, forget)
    assert np.all(np.diff(merged.values_) > 0)
    assert merged.weights_.sum() == pytest.approx(forget * len(so) + len(sn))
    if exact:  # the oracle: isotonic regression of the (weighted) union of rows
        w = np.concatenate((np.full(len(so), forget), np.ones(len(sn))))
        keep = w > 0
        s, y = np.concatenate((so, sn))[keep], np.concatenate((yo, yn)).astype(int)[keep]
        ref = _iso(s, y, w[keep])
        grid = np.linspace(-1, 7, 33)
        np.testing.assert_allclose(merged.predict(grid), ref.predict(grid), rtol=1e-12, atol=1e-15)
    if forget == 0.0:
        grid = np.linspace(-1, 7, 33)
        np.testing.assert_allclose(merged.predict(grid), new.predict(grid), rtol=1e-12, atol=1e-15)


def _bin_stats(old, s, y):
    req = binning_request(old)
    return old.partial_stats(np.asarray(s, float), np.asarray(y), np.ones(len(s)), req)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([1.0, 0.25]), st.integers(1, 6))
def test_binning_update_adds_counts_in_the_old_bins(seed, forget, n_pieces):
    rng = np.random.default_rng(seed)
    so, sn = rng.normal(size=80), rng.normal(0.5, 1.5, size=50)
    yo, yn = (rng.random(80) < 0.4).astype(int), (rng.random(50) < 0.6).astype(int)
    yo[:2], yn[:2] = (0, 1), (0, 1)
    old = BinningCalibrator(n_bins=4).fit(so, yo)
    # new data's statistics from random pieces, merged in order: the same as from the whole
    cut = np.sort(rng.choice(np.arange(1, 50), size=n_pieces - 1, replace=False)) if n_pieces > 1 else []
    pieces = np.split(np.arange(50), cut)
    stats = None
    for idx in pieces:
        part = _bin_stats(old, sn[idx], yn[idx])
        stats = part if stats is None else old.merge_stats(stats, part)
    merged = merge_binning(old, stats, forget)
    # oracle, by hand: bin k holds hi_[k-1] < s <= hi_[k] (the old cut scores)
    cuts = old.hi_[:-1]
    bo, bn = np.searchsorted(cuts, so, side="left"), np.searchsorted(cuts, sn, side="left")
    w = forget * np.bincount(bo, minlength=4) + np.bincount(bn, minlength=4)
    wy = forget * np.bincount(bo, weights=yo, minlength=4) + np.bincount(bn, weights=yn, minlength=4)
    np.testing.assert_allclose(merged.bin_weights_, w, rtol=1e-12)
    np.testing.assert_allclose(merged.values_, wy / w, rtol=1e-12)
    if forget == 1.0:  # = the binning calibrator's own per-bin round on the union of rows
        union = _bin_stats(old, np.concatenate((so, sn)), np.concatenate((yo, yn)))
        np.testing.assert_allclose(merged.values_, union["wy"] / union["w"], rtol=1e-12)
        np.testing.assert_array_equal(merged.lo_, union["min_lo"])
        np.testing.assert_array_equal(merged.hi_, union["max_hi"])


def test_binning_stores_its_counts_for_both_fits_and_round_trips():
    rng = np.random.default_rng(3)
    s, y = rng.normal(size=200), (rng.random(200) < 0.3).astype(int)
    for n_bins in (6, "auto"):
        cal = BinningCalibrator(n_bins=n_bins).fit(s, y)
        assert cal.bin_weights_.sum() == 200 and cal.bin_positives_.sum() == y.sum()
        np.testing.assert_allclose(cal.bin_positives_ / cal.bin_weights_, cal.values_, rtol=1e-12)
        back = BinningCalibrator(n_bins=n_bins).from_state(cal.to_state())
        np.testing.assert_array_equal(back.bin_weights_, cal.bin_weights_)
        state = cal.to_state()
        del state["bin_weights_"], state["bin_positives_"]  # a model saved before they existed
        assert not hasattr(BinningCalibrator(n_bins=n_bins).from_state(state), "bin_weights_")


@pytest.mark.parametrize("cls", ["sigmoid", "temperature"])
@pytest.mark.parametrize("kind", ["decision", "proba"])
def test_summary_update_is_close_to_the_refit_on_the_union(cls, kind):
    """Not exact (the docs say so): bounded against the oracle, the refit on the union of rows."""
    from calengine_builtins.calibrators import SigmoidCalibrator, TemperatureCalibrator

    C = {"sigmoid": SigmoidCalibrator, "temperature": TemperatureCalibrator}[cls]
    rng = np.random.default_rng(11)

    def draw(n, shift):
        f = rng.normal(size=n) * 2
        y = (rng.random(n) < 1 / (1 + np.exp(-(1.5 * f + shift)))).astype(int)
        return (1 / (1 + np.exp(-f)) if kind == "proba" else f), y

    (so, yo), (sn, yn) = draw(3000, 0.0), draw(2000, 1.0)
    old, new = C().fit(so, yo, score_kind=kind), C().fit(sn, yn, score_kind=kind)
    grid = np.quantile(np.concatenate((so, sn)), np.linspace(0.001, 0.999, 41))
    for forget, ref_rows in [(1.0, (np.concatenate((so, sn)), np.concatenate((yo, yn)), None)),
                             (0.0, (sn, yn, None)),
                             (0.5, (np.concatenate((so, sn)), np.concatenate((yo, yn)),
                                    np.concatenate((np.full(3000, 0.5), np.ones(2000)))))]:
        merged = merge_summary_fit(old, new, forget)
        ref = C().fit(ref_rows[0], ref_rows[1], sample_weight=ref_rows[2], score_kind=kind)
        assert np.max(np.abs(merged.predict(grid) - ref.predict(grid))) < 1e-3, forget  # measured: 2e-4 to 4e-4
        # the stored sums themselves merge exactly
        np.testing.assert_allclose(merged.hist_wpos_.sum() + merged.hist_wneg_.sum(), forget * 3000 + 2000)


def test_sigmoid_update_through_the_engine(work):
    root, models = work
    old = load_model(models["sigmoid"])
    held = pd.read_parquet(root / "shift_b.parquet")
    upd = calengine.recalibrate(models["sigmoid"], str(root / "shift_a.parquet"), "class", update=True, forget=0.0)
    ref = calengine.recalibrate(models["sigmoid"], str(root / "shift_a.parquet"), "class")
    # forget=0: only the new data's summary counts -- close to the plain recalibration
    assert np.max(np.abs(upd.predict_proba(held) - ref.predict_proba(held))) < 2e-3
    assert _brier(upd, held) < _brier(old, held) - 0.01
    assert upd.info["lineage"]["exact_updates"] == {"exact": 0, "approximate": 1}


# ---------------------------------------------------------------------------------------------- lineage


def test_lineage_is_recorded_and_validated(work, tmp_path):
    root, models = work
    out = tmp_path / "m2"
    calengine.recalibrate(models["isotonic"], str(root / "shift_a.parquet"), "class", update=True, forget=0.5, output=out)
    man = read_manifest(out)
    lin = man["lineage"]
    assert lin["mode"] == "update" and lin["forget"] == 0.5 and lin["data"]["rows"] == 1500
    assert lin["parent"]["content_hash"] == read_manifest(models["isotonic"])["content_hash"]
    assert len(lin["data"]["fingerprint"]) == 64 and lin["time"].endswith("+00:00")
    assert load_model(out).info["lineage"] == lin
    # a second recalibration keeps the first one's record
    out3 = tmp_path / "m3"
    calengine.recalibrate(out, str(root / "shift_b.parquet"), "class", output=out3)
    assert read_manifest(out3)["lineage"]["previous"] == lin
    # malformed lineage: one line naming what is wrong
    for bad, frag in [({"mode": "sideways"}, "'mode' of lineage"), ({"forget": 2.0}, "'forget' of lineage"),
                      ({"parent": {"content_hash": "xyz"}}, "content_hash"), ({"data": "x"}, "'data'")]:
        doc = json.loads((out / "manifest.json").read_text())
        doc["lineage"].update(bad)
        doc["content_hash"] = content_hash(doc)
        (out / "manifest.json").write_text(json.dumps(doc))
        with pytest.raises(ModelFormatError, match=frag) as err:
            load_model(out)
        assert "\n" not in str(err.value)
        doc["lineage"] = lin
        doc["content_hash"] = content_hash(doc)
        (out / "manifest.json").write_text(json.dumps(doc))
    load_model(out)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=True) | st.text(max_size=70),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
_GOOD = {
    "mode": "refit", "parent": {"path": "/m", "content_hash": "0" * 64},
    "data": {"paths": ["/d.parquet"], "rows": 3, "fingerprint": "f"}, "target": "class", "forget": 1.0,
    "time": "2026-01-01T00:00:00+00:00", "command": ["calengine"], "exact_updates": None,
}


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([("mode",), ("parent",), ("parent", "path"), ("parent", "content_hash"), ("data",),
                        ("data", "paths"), ("data", "rows"), ("data", "fingerprint"), ("time",), ("forget",),
                        ("command",), ("previous",), ()]), _json)
def test_malformed_lineage_is_one_line_never_a_crash(path, value):
    from calengine.model.checks import check_lineage

    doc = json.loads(json.dumps(_GOOD))
    if not path:
        doc = value
    else:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    try:
        check_lineage(doc)
    except ModelFormatError as exc:
        assert "\n" not in str(exc) and "lineage" in str(exc)


def test_the_data_fingerprint_follows_the_content(tmp_path):
    from calengine.fit.recalibrate import data_fingerprint

    _table(50, 0).to_parquet(tmp_path / "a.parquet", index=False)
    f1 = data_fingerprint([str(tmp_path / "a.parquet")])
    assert data_fingerprint([str(tmp_path / "a.parquet")]) == f1
    _table(50, 1).to_parquet(tmp_path / "a.parquet", index=False)
    assert data_fingerprint([str(tmp_path / "a.parquet")]) != f1


# ---------------------------------------------------------------------------------------------- errors


def test_python_errors(work, tmp_path):
    root, models = work
    new = str(root / "shift_a.parquet")
    with pytest.raises(ParameterError, match="can for isotonic, binning, sigmoid, temperature"):
        calengine.recalibrate(models["beta"], new, "class", update=True)
    with pytest.raises(ParameterError, match="needs update"):
        calengine.recalibrate(models["sigmoid"], new, "class", forget=0.5)
    with pytest.raises(ParameterError, match=r"in \[0, 1\]"):
        calengine.recalibrate(models["isotonic"], new, "class", update=True, forget=1.5)
    one_class = _table(100, 5)
    one_class["class"] = "pos"
    with pytest.raises(DataError, match="no rows of class neg"):
        calengine.recalibrate(models["isotonic"], one_class, "class")


def test_cli_recalibrate_then_evaluate(work, cli, tmp_path):
    root, models = work
    out = tmp_path / "m2"
    r = cli("recalibrate", models["isotonic"], root / "shift_a.parquet", "--target", "class", "--output", out)
    assert r.returncode == 0, r
    assert "recalibrated on 1500 rows" in r.stderr
    assert read_manifest(out)["lineage"]["command"][:2] == ["calengine", "recalibrate"]
    ev = cli("evaluate", models["isotonic"], out, root / "shift_b.parquet", "--target", "class", "--json")
    assert ev.returncode == 0, ev
    before, after = ev.json()["models"]
    assert after["brier"] < before["brier"] - 0.01
    assert after["raw"]["brier"] == before["raw"]["brier"]  # proba learner: raw map unchanged
    assert "lineage" not in before["model"]
    assert after["model"]["lineage"]["parent"]["content_hash"] == read_manifest(models["isotonic"])["content_hash"]
    report = tmp_path / "report"
    rep = cli("evaluate", out, root / "shift_b.parquet", "--target", "class", "--report", report)
    assert rep.returncode == 0, rep
    page = (report / "index.html").read_text()
    assert f"Recalibrated (calibrators refitted) from {models['isotonic']}" in page and "on 1500 rows of" in page
    assert "Recalibrated" in rep.stdout  # the text output says it too


def _main(capsys, *argv) -> tuple[int, str]:
    """The CLI's own entry point in this process (the subprocess runs below cover the same path)."""
    from calengine.cli import main

    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def test_cli_errors_are_one_line(work, cli, tmp_path, capsys):
    root, models = work
    new = root / "shift_a.parquet"
    # a binning model saved before the statistics were stored
    old_style = load_model(models["binning"])
    for m in old_style.members:
        for cal in m.calibrators:
            del cal.bin_weights_, cal.bin_positives_
    save_model(old_style, tmp_path / "old_binning")
    other = _table(200, 7)
    other.loc[:5, "class"] = "maybe"
    other.to_parquet(tmp_path / "other.parquet", index=False)
    cases = [
        (["--target", "class"], tmp_path / "other.parquet", models["isotonic"], ["maybe"]),
        (["--target", "class", "--update"], new, tmp_path / "old_binning", ["without --update first"]),
        (["--target", "class", "--update"], new, models["beta"], ["'beta'", "isotonic, binning", "without --update"]),
        (["--target", "class", "--forget", "0.3"], new, models["isotonic"], ["needs --update"]),
    ]
    for extra, data, model, frags in cases:
        code, err = _main(capsys, "recalibrate", model, data, "--output", tmp_path / "out", *extra)
        assert code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
        assert all(f in err for f in frags), (frags, err)
        assert not (tmp_path / "out").exists()
    # and as a user runs it
    r = cli("recalibrate", models["isotonic"], new, "--target", "label", "--output", tmp_path / "out")
    assert_one_line_error(r, "column 'label'")
    (tmp_path / "exists").mkdir()
    (tmp_path / "exists" / "f").write_text("x")
    r = cli("recalibrate", models["isotonic"], new, "--target", "class", "--output", tmp_path / "exists")
    assert_one_line_error(r, "already exists", "--overwrite")
    assert (tmp_path / "exists" / "f").read_text() == "x"
