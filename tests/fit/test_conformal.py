"""``calengine.conformalize`` (calengine/fit/conformal.py): the layer a table gives, checked against the
in-memory definitions (calengine.methods.conformal) on the model's own probabilities, and the same bits
however the table is cut, spilled or distributed."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import calengine
from calengine.errors import DataError, ParameterError
from calengine.methods import conformal as cf
from calengine.model.artifact import read_manifest, save_model

DATA = __import__("pathlib").Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A Pendigits model fitted on the train split; its test split is the calibration table, also cut
    into 7 files of small row groups; an Adult model for segments and weights."""
    root = tmp_path_factory.mktemp("conformal")
    model = calengine.fit_table(str(DATA / "pendigits_train.parquet"), "class", learner="gaussian_nb", cv=3)
    save_model(model, root / "pen")
    cal = pd.read_parquet(DATA / "pendigits_test.parquet")
    (root / "cut").mkdir()
    shuffled = cal.sample(frac=1.0, random_state=1)
    for i, idx in enumerate(np.array_split(np.arange(len(cal)), 7)):
        part = shuffled.iloc[idx]
        pq.write_table(pa.Table.from_pandas(part, preserve_index=False), root / "cut" / f"p{i}.parquet",
                       row_group_size=97)
    adult = calengine.fit_table(str(DATA / "adult" / "train.parquet"), "class", learner="gaussian_nb", cv=3)
    save_model(adult, root / "adult")
    return root, cal


def _probabilities(model, df):
    X = model.encoder.transform(df)
    return model.predict_proba_features(X), model.labels.encode(df["class"]), X


@pytest.mark.parametrize("score", ["lac", "aps", "raps", "topk"])
def test_thresholds_equal_the_definition_on_the_models_probabilities(work, score):
    root, cal = work
    m = calengine.conformalize(str(root / "pen"), str(DATA / "pendigits_test.parquet"), target="class", alpha=0.1,
                               score=score)
    P, y, X = _probabilities(m, cal)
    u = cf.row_uniforms(cf.row_hashes(X), 0) if score in ("aps", "raps") else None
    V = cf.true_scores(P, y, score, u, 0.01, 1)
    layer = m.conformal
    assert layer.thresholds[0, 0] == cf.threshold(V, 0.1)
    assert layer.randomized == (score in ("aps", "raps"))
    # the layer's sets are V <= t on the same rows, and its p-values say the same
    S = layer.sets(P, X, cal)
    assert np.array_equal(S, cf.class_scores(P, score, u, 0.01, 1) <= layer.thresholds[0, 0])
    assert np.array_equal(layer.p_values(P, X, cal) > 0.1, S)
    # and the p-values are the exact ones: a group of at most EXACT_KNOTS rows keeps every score as a knot
    exact = cf.p_values(V, cf.class_scores(P, score, u, 0.01, 1))
    assert np.array_equal(layer.p_values(P, X, cal), exact)


def test_mondrian_by_class_equals_per_class_thresholds(work):
    root, cal = work
    m = calengine.conformalize(str(root / "pen"), cal, target="class", alpha=0.05, mondrian="class", score="lac")
    P, y, X = _probabilities(m, cal)
    V = cf.true_scores(P, y, "lac")
    assert np.array_equal(m.conformal.thresholds[:, 0], cf.mondrian_thresholds(V, y, 0.05, 10))
    S = m.conformal.sets(P, X, cal)
    assert np.array_equal(S, cf.class_scores(P, "lac") <= cf.mondrian_thresholds(V, y, 0.05, 10)[None, :])


def test_any_partitioning_and_the_spilled_path_give_the_same_bytes(work, tmp_path, monkeypatch):
    """One file, seven files of 97-row groups, and seven files with every block spilled to scratch
    files: the same conformal.npz, byte for byte."""
    root, _ = work
    digests = []
    for i, (data, spill) in enumerate([(DATA / "pendigits_test.parquet", False), (root / "cut", False),
                                        (root / "cut", True)]):
        if spill:
            monkeypatch.setattr("calengine.plan.memory.SPILL_MIN_ROWS", 100)
        calengine.conformalize(str(root / "pen"), str(data), target="class", alpha=0.1, score="aps",
                               mondrian="class", output=tmp_path / f"m{i}")
        digests.append(read_manifest(tmp_path / f"m{i}")["files"]["conformal.npz"]["sha256"])
    assert len(set(digests)) == 1


@pytest.mark.cluster
@pytest.mark.slow
def test_a_local_cluster_gives_the_same_bytes(work, tmp_path):
    root, _ = work
    calengine.conformalize(str(root / "pen"), str(root / "cut"), target="class", alpha=0.1, score="raps",
                           output=tmp_path / "embedded")
    calengine.conformalize(str(root / "pen"), str(root / "cut"), target="class", alpha=0.1, score="raps",
                           cluster="local", workers=2, output=tmp_path / "cluster")
    a, b = (read_manifest(tmp_path / n)["files"]["conformal.npz"]["sha256"] for n in ("embedded", "cluster"))
    assert a == b


def test_segments_get_their_own_threshold_when_they_have_enough_rows(work):
    """Adult, Mondrian by race: segments with at least rows_needed(alpha) rows have their own threshold
    (the definition on their rows); the others, unseen values and missing values use the global one."""
    root, _ = work
    test = pd.read_parquet(DATA / "adult" / "test.parquet")
    alpha = 0.02  # 49 rows needed: the smallest race groups of a 2,000-row sample fall short
    cal = test.iloc[:2000]
    m = calengine.conformalize(str(root / "adult"), cal, target="class", alpha=alpha, mondrian="race")
    layer = m.conformal
    P, y, X = _probabilities(m, cal)
    V = cf.true_scores(P, y, "lac")
    counts = cal["race"].value_counts()
    own = sorted((str(r),) for r, n in counts.items() if n >= cf.rows_needed(alpha))
    short = [r for r, n in counts.items() if n < cf.rows_needed(alpha)]
    assert short and layer.keys == own
    assert layer.thresholds[0, 0] == cf.threshold(V, alpha)
    for j, (race,) in enumerate(layer.keys):
        assert layer.thresholds[1 + j, 0] == cf.threshold(V[cal["race"].to_numpy() == race], alpha)
    rows = test.iloc[2000:2400].copy()
    rows.loc[rows.index[:5], "race"] = "Martian"  # unseen
    rows.loc[rows.index[5:10], "race"] = None  # missing
    g = layer.segment_groups(rows)
    assert np.all(g[:10] == 0)
    assert np.all(g[rows["race"].isin(short).to_numpy(dtype=bool)] == 0)
    assert np.all(g[rows["race"].eq("White").fillna(False).to_numpy(dtype=bool)] > 0)


def test_weighted_layer_takes_the_threshold_of_the_next_level_up(work):
    root, _ = work
    test = pd.read_parquet(DATA / "adult" / "test.parquet").iloc[:3000].copy()
    test["w"] = np.where(test["sex"] == "Female", 3.0, 0.5)
    m = calengine.conformalize(str(root / "adult"), test, target="class", alpha=0.1, weight="w")
    layer = m.conformal
    P, y, X = _probabilities(m, test)
    V = cf.true_scores(P, y, "lac")
    w = test["w"].to_numpy()
    levels, th = layer.levels[0], layer.thresholds[0]
    finite = np.isfinite(levels)
    assert levels[0] == 0.0 and np.all(np.diff(levels[finite]) > 0)
    for lv, t in zip(levels[finite][::7], th[finite][::7]):
        assert t == cf.weighted_threshold(V, w, 0.1, lv)
    top = levels[finite][-1]
    assert cf.weighted_threshold(V, w, 0.1, top) < math.inf
    assert cf.weighted_threshold(V, w, 0.1, math.nextafter(top * (1 + 1e-9), math.inf)) == math.inf
    # a test row of weight between two levels gets the upper level's threshold: its set is a superset
    rows = test.iloc[:50].copy()
    rows["w"] = np.linspace(0.0, top * 1.5, 50)
    Pr, _, Xr = _probabilities(m, rows)
    S = layer.sets(Pr, Xr, rows)
    exact = np.array([cf.weighted_threshold(V, w, 0.1, wt) for wt in rows["w"]])
    assert np.all(S >= (cf.class_scores(Pr, "lac") <= exact[:, None]))
    assert np.all(S[rows["w"].to_numpy() > top])  # past the last level: every class
    with pytest.raises(DataError, match="weight column 'w'"):
        layer.sets(Pr, Xr, rows.drop(columns="w"))


def test_lineage_and_parent_are_recorded(work, tmp_path):
    root, cal = work
    calengine.conformalize(str(root / "pen"), str(DATA / "pendigits_test.parquet"), target="class", alpha=0.1,
                           output=tmp_path / "c")
    man = read_manifest(tmp_path / "c")
    parent = read_manifest(root / "pen")
    lin = man["lineage"]
    assert lin["mode"] == "conformal" and lin["parent"]["content_hash"] == parent["content_hash"]
    assert lin["conformal"]["alpha"] == 0.1 and lin["data"]["rows"] == len(cal)
    # everything but the layer, the lineage and the files table is the parent's
    for key in ("members", "labels", "features", "learner", "method", "code_matrix"):
        assert man[key] == parent[key]
    assert {k: v for k, v in man["files"].items() if k != "conformal.npz"} == parent["files"]
    # conformalizing a conformalized model replaces the layer and keeps the older lineage
    again = calengine.conformalize(str(tmp_path / "c"), cal, target="class", alpha=0.2)
    assert again.conformal.alpha == 0.2 and again.info["lineage"]["previous"]["mode"] == "conformal"


def test_recalibrating_drops_the_layer_with_a_warning(work, tmp_path):
    root, cal = work
    m = calengine.conformalize(str(root / "pen"), cal, target="class", alpha=0.1)
    with pytest.warns(UserWarning, match="conformal layer was computed on its old probabilities"):
        r = calengine.recalibrate(m, cal, target="class")
    assert r.conformal is None


@pytest.mark.parametrize("kwargs,error,text", [
    (dict(alpha=1.5), ParameterError, "alpha must be in (0, 1)"),
    (dict(alpha=0.0), ParameterError, "alpha must be in (0, 1)"),
    (dict(alpha=0.1, score="apx"), ParameterError, "score must be one of"),
    (dict(alpha=0.1, raps_lambda=0.1), ParameterError, "raps_lambda is a parameter of RAPS' penalty: add score='raps'"),
    (dict(alpha=0.1, score="lac", randomized=True), ParameterError, "randomized applies to the aps and raps"),
    (dict(alpha=0.1, score="raps", raps_k_reg=-1), ParameterError, "raps_k_reg must be an integer >= 0"),
    (dict(alpha=0.1, mondrian=""), ParameterError, "mondrian takes 'class' or segment columns"),
    (dict(alpha=0.1, weight="class"), ParameterError, "names the target column"),
    (dict(alpha=0.1, seed=-1), ParameterError, "seed must be an integer"),
])
def test_bad_options_are_typed_errors_naming_the_parameter(work, kwargs, error, text):
    root, cal = work
    with pytest.raises(error) as info:
        calengine.conformalize(str(root / "pen"), cal.iloc[:50], target="class", **kwargs)
    assert text in str(info.value)


def test_bad_data_is_one_line_and_nothing_is_written(work, tmp_path):
    root, cal = work
    out = tmp_path / "never"
    with pytest.raises(DataError, match=r"8 calibration rows are too few for alpha=0.1.*at least 9 rows"):
        calengine.conformalize(str(root / "pen"), cal.iloc[:8], target="class", alpha=0.1, output=out)
    no_nines = cal[cal["class"] != 9]
    with pytest.raises(DataError, match="mondrian='class' needs calibration rows of every class, and class 9 has none"):
        calengine.conformalize(str(root / "pen"), no_nines, target="class", alpha=0.1, mondrian="class", output=out)
    few = pd.concat([no_nines, cal[cal["class"] == 9].iloc[:3]])
    with pytest.raises(DataError, match="class 9 has 3 calibration rows, too few .* at least 9 rows"):
        calengine.conformalize(str(root / "pen"), few, target="class", alpha=0.1, mondrian="class", output=out)
    neg = cal.assign(w=1.0)
    neg.loc[neg.index[3], "w"] = -2.0
    with pytest.raises(DataError, match="weight column 'w' has negative weights"):
        calengine.conformalize(str(root / "pen"), neg, target="class", alpha=0.1, weight="w", output=out)
    with pytest.raises(DataError, match="every row of weight column 'w' is 0"):
        calengine.conformalize(str(root / "pen"), cal.assign(w=0.0), target="class", alpha=0.1, weight="w", output=out)
    with pytest.raises(DataError, match="target 'class' holds 'ten'"):
        calengine.conformalize(str(root / "pen"), cal.astype({"class": str}).assign(**{"class": "ten"}),
                               target="class", alpha=0.1, output=out)
    assert not out.exists()


# ---------------------------------------------------------------------------------------------- estimator


def test_calibrated_classifier_conformal_parameter_equals_the_table_path(work):
    """``CalibratedClassifier(conformal=...)``: the same thresholds as :func:`calengine.conformalize` of
    the same model on the same rows (one in-memory block, the same selection)."""
    from calengine import CalibratedClassifier

    root, cal = work
    train = pd.read_parquet(DATA / "pendigits_train.parquet")
    clf = CalibratedClassifier(learner="gaussian_nb", cv=3, conformal={"alpha": 0.1, "score": "aps",
                                                                      "mondrian": "class"})
    clf.fit(train.drop(columns="class"), train["class"], X_conformal=cal.drop(columns="class"),
            y_conformal=cal["class"])
    table = calengine.conformalize(clf.model_, cal, target="class", alpha=0.1, score="aps", mondrian="class")
    assert np.array_equal(clf.model_.conformal.thresholds, table.conformal.thresholds)
    S = clf.predict_set(cal.drop(columns="class"))
    assert S.shape == (len(cal), 10) and S.dtype == bool
    y = cal["class"].to_numpy()
    assert S[np.arange(len(y)), y].mean() >= 0.9
    assert np.array_equal(clf.predict_p_values(cal.drop(columns="class")) > 0.1, S)
    # numbers as conformal: alpha; weights: a weighted layer needs the test rows' weights
    clf2 = CalibratedClassifier(learner="gaussian_nb", cv=3, conformal=0.2).fit(train.drop(columns="class"), train["class"])
    w = np.linspace(0.5, 2.0, len(cal))
    clf2.conformalize(cal.drop(columns="class"), cal["class"], sample_weight=w)
    with pytest.raises(ParameterError, match="pass the rows' covariate-shift weights as sample_weight"):
        clf2.predict_set(cal.drop(columns="class"))
    assert clf2.predict_set(cal.drop(columns="class"), sample_weight=w).shape == (len(cal), 10)


@pytest.mark.parametrize("conformal,text", [(1.5, "conformal must be in (0, 1)"),
                                            ({"score": "aps"}, "conformal needs 'alpha'"),
                                            ({"alpha": 0.1, "scores": "aps"}, "unknown option(s) scores"),
                                            ({"alpha": 0.1, "score": "x"}, "conformal['score'] must be one of")])
def test_calibrated_classifier_bad_conformal_is_typed(conformal, text):
    from calengine import CalibratedClassifier

    X = np.random.default_rng(0).normal(size=(60, 2))
    y = (X[:, 0] > 0).astype(int)
    clf = CalibratedClassifier(learner="gaussian_nb", cv=3, conformal=conformal)
    with pytest.raises(ParameterError) as info:
        clf.fit(X, y, X_conformal=X, y_conformal=y)
    assert text in str(info.value)
    with pytest.raises(ParameterError, match="no conformal layer"):
        CalibratedClassifier(learner="gaussian_nb", cv=3).fit(X, y).predict_set(X)


#: random calibration/test splits of the segment-coverage test, and its Monte-Carlo slack in standard errors
SEGMENT_SPLITS = 200
SEGMENT_Z = 4.0


@pytest.mark.parametrize("column,alpha", [("relationship", 0.1), ("race", 0.1)])
def test_mondrian_coverage_per_segment_over_random_splits(work, column, alpha):
    """Mondrian by a segment column, the layer as ``conformalize`` builds it and ``score --sets`` applies it
    (:func:`calengine.fit.conformal.conformalize_arrays`, :meth:`ConformalLayer.sets`): over random
    calibration/test splits of Adult's test table, every segment that gets a threshold of its own covers
    its own test rows with E[coverage | segment] in the theory's band [1 - alpha, 1 - alpha + E[1/(n_s + 1)]]
    (n_s: the segment's calibration rows; randomised APS, so scores have no ties), within SEGMENT_Z standard
    errors.  By race the rarest races (about 12 calibration rows of 1,500) sometimes fall short of a threshold of their own
    (they then get the global one, as the docs say): only the splits that gave them one count."""
    from calengine.fit.conformal import check_options, conformalize_arrays
    from calengine.model.artifact import load_model

    root, _ = work
    model = load_model(root / "adult")
    pool = pd.read_parquet(DATA / "adult" / "test.parquet")
    X = model.encoder.transform(pool)
    P = model.predict_proba_features(X)
    y = model.labels.encode(pool["class"])
    seg = pool[column].astype(str).to_numpy()
    opts = check_options("class", alpha, "aps", mondrian=column)
    n_cal = 1500
    rng = np.random.default_rng(31)
    per_segment: dict[str, tuple[list, list]] = {}
    fell_back = 0
    for _ in range(SEGMENT_SPLITS):
        perm = rng.permutation(len(y))
        cal, test = perm[:n_cal], perm[n_cal:n_cal + 6000]
        layer = conformalize_arrays(model, X[cal], y[cal], opts, None, pool.iloc[cal])[0].conformal
        covered = layer.sets(P[test], X[test], pool.iloc[test])[np.arange(test.size), y[test]]
        for s in np.unique(seg[test]):
            if (s,) not in layer.keys:
                fell_back += 1
                continue
            rows = seg[test] == s
            cov, bound = per_segment.setdefault(s, ([], []))
            cov.append(covered[rows].mean())
            bound.append(1 / (int((seg[cal] == s).sum()) + 1))
    assert set(per_segment) == set(np.unique(seg))  # every segment had a threshold of its own in some splits
    assert (fell_back > 0) == (column == "race")
    for s, (cov, bound) in per_segment.items():
        cov = np.asarray(cov)
        assert cov.size >= SEGMENT_SPLITS // 4, (s, cov.size)
        se = cov.std(ddof=1) / math.sqrt(cov.size)
        assert cov.mean() >= 1 - alpha - SEGMENT_Z * se, (s, cov.mean(), se)
        assert cov.mean() <= 1 - alpha + np.mean(bound) + SEGMENT_Z * se, (s, cov.mean(), se)
