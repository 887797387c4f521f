"""The partition-native fit: metadata-only planning, statistics as reductions, folds from row identity,
the three learner routes, and agreement with the in-memory engine on the same folds."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import calengine
from calengine.reductions.column_stats import partition_stats
from calengine.parquet.dataset import describe_dataset
from calengine.errors import DataError
from calengine.plan.features import FeatureEncoder
from calengine.plan.folds import check_folds, fold_class_counts, fragment_folds, table_folds
from cli_helpers import PIMA



def write_table(df: pd.DataFrame, folder, files: int = 3, row_group_sizes=(50, 70, 33)):
    """Write ``df`` as ``files`` Parquet files, file ``i`` with row groups of ``row_group_sizes[i]``."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(len(df)), files)):
        table = pa.Table.from_pandas(df.iloc[part].reset_index(drop=True), preserve_index=False)
        pq.write_table(table, folder / f"part-{i}.parquet", row_group_size=row_group_sizes[i % len(row_group_sizes)])
    return folder


def _frame(n=600, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    y = (X[:, 0] + 0.5 * X[:, 1] + rng.normal(scale=0.8, size=n) > 0.3).astype(np.int64)
    df = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    df["a"] = df["a"].round(1)  # ties
    df.loc[rng.random(n) < 0.05, "b"] = np.nan
    df["colour"] = rng.choice(["red", "green", "blue", None], size=n)
    df["class"] = y
    return df


# ---------------------------------------------------------------------------------------------- planning


def test_describe_reads_footers_only_and_resolves_absolute_paths(tmp_path, monkeypatch):
    write_table(_frame(), tmp_path / "t")
    monkeypatch.chdir(tmp_path)
    ds = describe_dataset("t", ["a", "class"], fragment_rows=60)
    assert all(f.path.startswith(str(tmp_path)) for f in ds.fragments)
    assert ds.n_rows == 600
    assert {f.file_key for f in ds.fragments} == {"part-0.parquet", "part-1.parquet", "part-2.parquet"}
    assert all(f.n_rows <= 70 for f in ds.fragments)  # one row group when a group exceeds the budget


def test_a_column_whose_type_differs_between_files_is_one_line(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    pq.write_table(pa.table({"x": [1.0, 2.0], "class": [0, 1]}), folder / "a.parquet")
    pq.write_table(pa.table({"x": ["1", "2"], "class": [0, 1]}), folder / "b.parquet")
    with pytest.raises(DataError) as info:
        describe_dataset(folder, ["x", "class"])
    msg = str(info.value)
    assert "'x'" in msg and "a.parquet" in msg and "b.parquet" in msg and "\n" not in msg


def test_a_file_missing_a_column_is_one_line(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    pq.write_table(pa.table({"x": [1.0, 2.0], "class": [0, 1]}), folder / "a.parquet")
    pq.write_table(pa.table({"class": [0, 1]}), folder / "b.parquet")
    with pytest.raises(DataError, match="'x' is missing from .*b.parquet"):
        describe_dataset(folder, ["x", "class"])


# ---------------------------------------------------------------------------------------------- statistics


@st.composite
def frames_and_cuts(draw):
    n = draw(st.integers(1, 120))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    nums = rng.integers(0, 7, size=n).astype(float)
    nums[rng.random(n) < 0.2] = np.nan
    cats = rng.choice(["a", "b", "c", "dd", None], size=n)
    df = pd.DataFrame({"num": nums, "flt": rng.normal(size=n).round(2), "cat": cats, "flag": rng.random(n) < 0.5})
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=6)))
    return df, [0, *cuts, n]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames_and_cuts(), st.integers(1, 4))
def test_encoding_from_merged_partition_statistics_equals_the_in_memory_fit(case, max_categories):
    df, bounds = case
    whole = FeatureEncoder(max_categories=max_categories).fit(df)
    stats = None
    for lo, hi in zip(bounds[:-1], bounds[1:]):  # empty and one-row partitions included
        part = partition_stats(df.iloc[lo:hi], list(df.columns))
        stats = part if stats is None else stats.merge(part)
    merged = FeatureEncoder(max_categories=max_categories).fit_stats(stats)
    assert merged.to_json() == whole.to_json()
    np.testing.assert_array_equal(merged.transform(df), whole.transform(df))


def test_median_is_exact_and_matches_numpy():
    rng = np.random.default_rng(3)
    values = rng.integers(0, 1000, size=5001).astype(float)
    df = pd.DataFrame({"x": values})
    parts = [partition_stats(df.iloc[i : i + 700], ["x"]) for i in range(0, 5001, 700)]
    stats = parts[0]
    for p in parts[1:]:
        stats = stats.merge(p)
    assert stats.columns["x"].numeric.median() == np.median(values)
    assert stats.columns["x"].numeric.exact


# ---------------------------------------------------------------------------------------------- folds


def test_folds_are_a_function_of_the_row_not_of_the_fragmentation(tmp_path):
    write_table(_frame(900), tmp_path / "t")
    ref = None
    for fragment_rows in (1, 60, 10**6):
        ds = describe_dataset(tmp_path / "t", ["class"], fragment_rows=fragment_rows)
        parts = []
        for fr in ds.fragments:
            y = pq.ParquetFile(fr.path).read_row_groups(list(fr.row_groups), columns=["class"])["class"].to_numpy()
            parts.append(fragment_folds(y.astype(np.int64), fr, 2, 5, seed=4))
        folds = np.concatenate(parts)
        if ref is None:
            ref = folds
        np.testing.assert_array_equal(folds, ref)
    np.testing.assert_array_equal(table_folds(tmp_path / "t", "class", cv=5, seed=4), ref)
    assert not np.array_equal(table_folds(tmp_path / "t", "class", cv=5, seed=5), ref)


def test_folds_are_stratified_and_counted_from_label_counts_alone(tmp_path):
    df = _frame(2000, seed=1)
    write_table(df, tmp_path / "t", row_group_sizes=(97, 130, 211))
    folds = table_folds(tmp_path / "t", "class", cv=5, seed=0)
    y = df["class"].to_numpy()
    actual = np.array([[np.sum((folds == f) & (y == c)) for c in (0, 1)] for f in range(5)])
    ds = describe_dataset(tmp_path / "t", ["class"])
    groups = {}
    for fr in ds.fragments:
        yy = pq.ParquetFile(fr.path).read_row_groups(list(fr.row_groups), columns=["class"])["class"].to_numpy()
        start = 0
        for g, n in zip(fr.row_groups, fr.group_rows):
            groups[(fr.file_key, g)] = np.bincount(yy[start : start + n], minlength=2)
            start += n
    np.testing.assert_array_equal(fold_class_counts(groups, 2, 5, 0), actual)
    expected = np.bincount(y) / 5
    n_groups = len(groups)
    assert np.all(np.abs(actual - expected) <= n_groups)


def test_a_class_too_rare_for_the_folds_fails_in_one_line():
    counts = np.array([[5, 1], [5, 1], [5, 0], [5, 0], [5, 0]])
    with pytest.raises(DataError, match="rarest class .'yes'. has 2 rows, fewer than cv=5 folds"):
        check_folds(counts, ["no", "yes"], 5)
    counts = np.array([[5, 3], [5, 3], [5, 0]])
    with pytest.raises(DataError, match="fold 2 holds no row of class 'yes'"):
        check_folds(counts, ["no", "yes"], 3)


# ---------------------------------------------------------------------------------------------- fits


def _fit_cli(cli, data, out, *args):
    r = cli("fit", data, "--target", "class", "--output", out, *args)
    assert r.returncode == 0, r
    return calengine.load_model(out)


@pytest.mark.parametrize(
    "learner, method, tol",
    [("decision_tree", "isotonic", 0.0), ("decision_tree", "sigmoid", 1e-9), ("gaussian_nb", "sigmoid", 1e-9),
     ("gaussian_nb", "isotonic", None), ("logistic_regression", "binning", 0.0)],
)
def test_partition_fit_equals_the_in_memory_engine_on_the_same_folds(tmp_path, cli, learner, method, tol):
    """Learners see the same rows in the same order, so the in-memory route is bit-identical; naive
    Bayes from statistics differs from the one-shot fit by rounding only."""
    from calengine.runtime.client import dask_client
    from calengine.fit.arrays import CalibrationPlan, fit_members
    from calengine.plan.features import FeatureEncoder
    from calengine.parquet.data import LabelSpace
    from calengine.model.calibrated import CalibratedModel
    from calengine.plugins.registry import make, make_learner
    from calengine.tasks.arrays import TrainingData

    df = pd.read_parquet(PIMA)
    folder = write_table(df, tmp_path / "pima", row_group_sizes=(100, 64, 37))
    ours = _fit_cli(cli, folder, tmp_path / "m", "--learner", learner, "--method", method, "--seed", "3")
    folds = table_folds(folder, "class", cv=5, seed=3)
    full = pd.concat([pd.read_parquet(f) for f in sorted(folder.glob("*.parquet"))], ignore_index=True)
    feats = full.drop(columns=["class"])
    enc = FeatureEncoder().fit(feats)
    labels = LabelSpace.from_series(full["class"], "class")
    data = TrainingData(enc.transform(feats), labels.encode(full["class"]), folds=folds)
    plan = CalibrationPlan(make_learner(learner), make("calibrators", method), cv=5, seed=3)
    with dask_client() as client:
        members = fit_members(client, data, plan)
    theirs = CalibratedModel(enc, labels, members, np.array([[-1], [1]], dtype=np.int8), None, np.array([len(full)]))
    assert enc.to_json() == ours.encoder.to_json()
    P_ours = ours.predict_proba_features(data.X)
    P_theirs = theirs.predict_proba_features(data.X)
    if tol is None:  # isotonic on NB scores that differ by rounding: a tied score may split, rarely
        assert np.mean(np.abs(P_ours - P_theirs) > 1e-9) < 0.01
    else:
        np.testing.assert_allclose(P_ours, P_theirs, rtol=0, atol=tol)


def test_manifest_records_route_rows_and_missing_targets(tmp_path, cli):
    df = _frame(400)
    df.loc[:9, "class"] = None
    folder = write_table(df, tmp_path / "t")
    out = tmp_path / "m"
    r = cli("fit", folder, "--target", "class", "--learner", "gaussian_nb", "--output", out)
    assert r.returncode == 0, r
    assert "dropped 10 rows" in r.stderr
    training = json.loads((out / "manifest.json").read_text())["extra"]["x_training"]
    assert training["route"] == "stats" and training["rows"] == 390 and training["dropped_missing_target"] == 10


@pytest.mark.parametrize("method", ["isotonic"])
def test_a_score_column_model_is_the_same_bytes_however_the_table_is_cut(tmp_path, cli, method):
    """Issue 43 §1: the same rows cut into 2 or 7 files (other row groups) give model files equal byte
    for byte -- isotonic's reduction is exact over any cut, and the manifest records no cut.  (Sigmoid
    and temperature: tests/scenarios/test_cut_invariance.py.)"""
    rng = np.random.default_rng(43)
    s = np.round(rng.random(6000), 3)  # ties within and across files
    df = pd.DataFrame({"s": s, "class": (rng.random(6000) < s**1.5).astype(np.int64)})
    files = {}
    for n_files, groups in ((2, (1000, 700)), (7, (90, 333, 51))):
        out = tmp_path / f"m{n_files}"
        r = cli("fit", write_table(df, tmp_path / f"t{n_files}", n_files, groups), "--target", "class", "--scores", "s",
                "--method", method, "--output", out)
        assert r.returncode == 0, r
        files[n_files] = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert files[2].keys() == files[7].keys()
    for name in files[2]:
        assert files[2][name] == files[7][name], name


def test_bounded_sample_route_fits_learners_on_at_most_n_rows(tmp_path, cli):
    folder = write_table(_frame(3000), tmp_path / "t")
    model = _fit_cli(cli, folder, tmp_path / "m", "--learner", "decision_tree", "--max-train-rows", "200",
                     "--method", "isotonic")
    assert model.info["x_training"]["route"] == "sample"
    for member in model.members:
        tree = member.learners[0].estimator_
        n = int(tree.tree_.n_node_samples[0])
        assert 190 <= n <= 200, n
    # calibration used every held-out row: the members' isotonic blocks carry every row's weight
    assert sum(m.calibrators[0].weights_.sum() for m in model.members) == 3000


def test_route_in_memory_refuses_rows_beyond_worker_memory_in_one_line(tmp_path):
    import dask
    import distributed  # noqa: F401 - its config defaults must be loaded before we override them

    from calengine.errors import DataError

    folder = write_table(_frame(3000), tmp_path / "t")
    # an embedded worker with a tiny limit that never pauses: the plan itself must refuse
    quiet = {f"distributed.worker.memory.{k}": False for k in ("target", "spill", "pause", "terminate")}
    with dask.config.set(quiet), pytest.raises(DataError) as info:
        calengine.fit_table(folder, "class", learner="decision_tree", worker_memory="200kB")
    msg = str(info.value)
    assert "\n" not in msg and "max_train_rows" in msg and "statistics" in msg and "GiB" in msg
    # the same plan with a sample that fits goes through
    with dask.config.set(quiet):
        model = calengine.fit_table(folder, "class", learner="decision_tree", worker_memory="3MB", max_train_rows=300)
    assert model.info["x_training"]["route"] == "sample"


def test_same_table_cut_differently_into_fragments_gives_the_same_model(tmp_path):
    from calengine.runtime.client import dask_client
    from calengine.fit.table import TableSpec, fit_table
    from calengine.fit.training import FitConfig

    folder = write_table(_frame(1200), tmp_path / "t", row_group_sizes=(40, 90, 200))
    P = []
    for fragment_rows, workers in ((1, 1), (150, 2), (10**6, 2)):
        spec = TableSpec(str(folder), "class", fragment_rows=fragment_rows)
        with dask_client(workers=workers) as client:
            model = fit_table(client, spec, FitConfig(learner="gaussian_nb", method="isotonic", seed=2))
        X = model.encoder.transform(_frame(1200).drop(columns=["class"]))
        P.append(model.predict_proba_features(X))
    np.testing.assert_allclose(P[0], P[1], atol=1e-12)
    np.testing.assert_allclose(P[0], P[2], atol=1e-12)


@pytest.mark.cluster
def test_relative_data_path_with_workers_in_another_directory(tmp_path, cli):
    """The client resolves DATA; workers started elsewhere read the same absolute files."""
    from calengine.testing.cluster import start_dask_processes, stop_processes

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    address, procs = start_dask_processes(cwd=elsewhere, memory_limit=None)
    try:
        r = cli("fit", "data/pima.parquet", "--target", "class", "--learner", "decision_tree", "--cluster", address,
                "--output", tmp_path / "m")
        assert r.returncode == 0, r
    finally:
        stop_processes(procs)


def test_route_stats_is_refused_for_probing_in_one_line(tmp_path):
    from calengine.errors import ParameterError

    folder = write_table(_frame(300), tmp_path / "t")
    with pytest.raises(ParameterError, match="drop route='stats'"):
        calengine.fit_table(folder, "class", learner="gaussian_nb", method="probing", route="stats")


# ---------------------------------------------------------------------------------------------- fsspec URLs


def test_fsspec_urls_give_the_same_model_as_the_local_path(tmp_path):
    """A table named by an fsspec URL (``memory://`` in-process, ``file://`` on worker processes) is
    listed, planned and read through fsspec, with file keys -- so folds -- identical to the local path."""
    import fsspec

    df = _frame(900)
    folder = write_table(df, tmp_path / "t", row_group_sizes=(40, 90, 200))
    fs = fsspec.filesystem("memory")
    for f in sorted(folder.iterdir()):
        fs.pipe(f"/calengine-test-{tmp_path.name}/{f.name}", f.read_bytes())
    X = None
    P = []
    for data, cluster in ((str(folder), None), (f"memory://calengine-test-{tmp_path.name}", None),
                          (folder.as_uri(), "local")):
        model = calengine.fit_table(data, "class", cluster=cluster, workers=2 if cluster else None,
                                    learner="gaussian_nb", method="isotonic", seed=3)
        X = model.encoder.transform(df.drop(columns=["class"]))
        P.append(model.predict_proba_features(X))
    np.testing.assert_array_equal(P[0], P[1])
    np.testing.assert_array_equal(P[0], P[2])


def test_a_url_without_a_file_system_or_files_is_one_line(tmp_path):
    with pytest.raises(DataError, match="no file system for 'nosuchscheme://'"):
        calengine.fit_table("nosuchscheme://bucket/table", "class")
    with pytest.raises(DataError, match="does not exist"):
        calengine.fit_table((tmp_path / "missing").as_uri(), "class")


def test_cli_fits_and_scores_a_file_url(tmp_path, cli):
    folder = write_table(_frame(600), tmp_path / "t")
    r = cli("fit", folder.as_uri(), "--target", "class", "--learner", "gaussian_nb", "--output", tmp_path / "m")
    assert r.returncode == 0, r.stderr
    r = cli("score", tmp_path / "m", folder.as_uri(), "--output", tmp_path / "s")
    assert r.returncode == 0, r.stderr
    scored = pd.read_parquet(tmp_path / "s")
    assert len(scored) == 600


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=7),
    n_bounds=st.integers(0, 4),
    group=st.integers(1, 7),
    seed=st.integers(0, 2**16),
)
def test_grouped_split_gives_each_range_the_rows_of_per_block_splits_in_block_order(sizes, n_bounds, group, seed):
    """split_blocks over consecutive blocks = split_block of each block, pieces concatenated in block
    order, for every (problem, range) -- so range tasks see the same rows in the same order whatever
    the grouping (ties included: scores are drawn from a few values)."""
    from calengine.tasks import partitions as pt

    rng = np.random.default_rng(seed)
    blocks = []
    for n in sizes:
        S = rng.integers(0, 6, size=(n, 2)).astype(np.float64) / 5
        T = rng.integers(0, 2, size=(n, 2)).astype(np.int8)
        W = rng.random(n) if seed % 2 else None  # weighted fits carry a weight per row (None: unweighted)
        blocks.append(pt.ScoreBlock([(S, T, W)]))
    bounds = np.unique(rng.integers(0, 6, n_bounds) / 5)
    problems = [(0, 0, 0, bounds), (1, 0, 1, bounds[:1])]
    single = [pt.split_block(b, problems) for b in blocks]
    for start in range(0, len(blocks), group):
        grouped = pt.split_blocks(problems, *blocks[start : start + group])
        for key, (s, t, w) in grouped.items():
            np.testing.assert_array_equal(s, np.concatenate([sp[key][0] for sp in single[start : start + group]]))
            np.testing.assert_array_equal(t, np.concatenate([sp[key][1] for sp in single[start : start + group]]))
            if seed % 2:
                np.testing.assert_array_equal(w, np.concatenate([sp[key][2] for sp in single[start : start + group]]))
            else:
                assert w is None
        assert set(grouped) == set(single[0])


class _LateFuture:
    """A distributed future that finishes just after ``result(timeout=1.0)`` gave up on it, as on a
    loaded machine: the first wait times out, and by then its status is already "finished"."""

    def __init__(self, outcome):
        self.outcome, self.waits, self.status = outcome, 0, "pending"

    def result(self, timeout=None):
        self.waits += 1
        if self.waits == 1:
            self.status = "finished" if not isinstance(self.outcome, BaseException) else "error"
            raise TimeoutError("timed out after 1 s.")
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    def done(self):
        return self.status != "pending"


def test_a_merge_finishing_as_the_wait_times_out_is_returned_not_reported_as_a_timeout():
    """The planning merge's wait polls in 1 s steps; a merge that finished between a step's timeout
    and the check is its result, not "the Dask scheduler did not answer in time" (a CI run under
    load 5 failed so), and a merge that raised TimeoutError itself still raises it."""
    from calengine.fit.table import _result_unless_lost

    class _Client:
        status = "running"

    late = _LateFuture({"stats": 1})
    assert _result_unless_lost(_Client(), late) == {"stats": 1} and late.waits == 2
    with pytest.raises(TimeoutError, match="its own"):
        _result_unless_lost(_Client(), _LateFuture(TimeoutError("its own")))
