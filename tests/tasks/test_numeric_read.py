"""A score-column fit reads its columns from Arrow into NumPy without pandas (calengine.tasks.numeric_read,
calengine.parquet.dataset.arrow_numpy): the arrays, label
counts and errors must be those of the pandas path it replaces, which remains for every other table."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calengine.errors import DataError
from calengine.parquet.data import LabelSpace
from calengine.parquet.dataset import arrow_numpy, describe_files
from calengine.plan.columns import ColumnReader
from calengine.tasks import partitions as pt


def test_arrow_numpy_views_sliced_arrays_and_falls_back_for_nulls():
    base = pa.array(np.arange(10, dtype=np.int16))
    np.testing.assert_array_equal(arrow_numpy(base.slice(3, 4)), [3, 4, 5, 6])
    np.testing.assert_array_equal(arrow_numpy(pa.array([0.5, 1.5], type=pa.float32())), np.float32([0.5, 1.5]))
    with_null = arrow_numpy(pa.array([1, None, 3], type=pa.int8()))
    assert np.isnan(with_null[1]) and with_null[2] == 3


def test_integer_labels_encode_as_the_pandas_path():
    import pandas as pd

    labels = LabelSpace.from_values([-3, 7, 2], "y")
    y = np.array([7, -3, 2, 2, 7], dtype=np.int8)
    np.testing.assert_array_equal(labels.encode(y), labels.encode(pd.Series(y)))
    with pytest.raises(DataError) as a:
        labels.encode(np.array([2, 5], dtype=np.int64))
    with pytest.raises(DataError) as b:
        labels.encode(pd.Series([2, 5]))
    assert str(a.value) == str(b.value)
    assert labels.index_of(np.int64(7)) == labels.index_of("7") == 2


def _fragments(tmp_path, n=900, weights=False, nulls=False):
    rng = np.random.default_rng(1)
    s = rng.random(n)
    y = pa.array((rng.random(n) < s).astype(np.int64) * 5 - 1, mask=(np.arange(n) % 97 == 3) if nulls else None)
    cols = {"s": s, "y": y}
    if weights:
        cols["w"] = rng.integers(0, 3, size=n).astype(np.float64)
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table(cols), path, row_group_size=200)
    return describe_files([str(path)], str(tmp_path), list(cols), 400).fragments


@pytest.mark.parametrize("nulls", [False, True])
def test_target_counts_are_the_pandas_paths(tmp_path, monkeypatch, nulls):
    frs = _fragments(tmp_path, nulls=nulls)
    fast = [pt.fragment_table_stats(fr, [], "y", ()) for fr in frs]
    monkeypatch.setattr(pt, "_target_counts", lambda *a: None)
    slow = [pt.fragment_table_stats(fr, [], "y", ()) for fr in frs]
    for a, b in zip(fast, slow):
        assert a.n_rows == b.n_rows and a.target.per_group == b.target.per_group
        assert a.target.missing == b.target.missing and a.columns == b.columns == {}


@pytest.mark.parametrize("weights,cv", [(False, None), (True, 3)])
def test_numeric_part_is_the_pandas_paths(tmp_path, monkeypatch, weights, cv):
    frs = _fragments(tmp_path, weights=weights)
    enc = pt.Encoding(ColumnReader(["s"], role="score", score_kind="proba"), LabelSpace.from_values([-1, 4], "y"), "y",
                      "w" if weights else None)
    plan = pt.FoldPlan(cv, 0)
    fast = [pt.load_part(fr, enc, plan, with_keys=True, order="F") for fr in frs]
    monkeypatch.setattr(pt, "_load_numeric_part", lambda *a: None)
    slow = [pt.load_part(fr, enc, plan, with_keys=True, order="F") for fr in frs]
    for a, b in zip(fast, slow):
        for name in ("X", "y", "folds", "keys", "w"):
            x, z = getattr(a, name), getattr(b, name)
            assert (x is None) == (z is None), name
            if x is not None:
                assert x.dtype == z.dtype and np.array_equal(x, z), name


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["int8", "uint8", "int16", "int32", "int64"]),
       st.lists(st.integers(-(2**31), 2**31 - 1), max_size=300), st.integers(0, 3))
def test_label_counts_of_a_row_group_are_numpys_unique(dtype, raw, squeeze):
    """The planning pass counts a row group's integer labels with a bincount when their values are
    near each other, and with np.unique otherwise: either way np.unique's values and counts, in order."""
    from calengine.tasks.numeric_read import _value_counts

    info = np.iinfo(dtype)
    y = np.clip(np.asarray(raw, dtype=np.int64) // (1 << (8 * squeeze)), info.min, info.max).astype(dtype)
    values, counts = _value_counts(y)
    want_values, want_counts = np.unique(y, return_counts=True)
    assert values.tolist() == want_values.tolist()
    assert counts.tolist() == want_counts.tolist()


@pytest.mark.parametrize("weights,cv,nulls", [(False, None, False), (True, 3, False), (False, 5, True)])
def test_learner_part_of_a_numeric_table_is_the_pandas_paths(tmp_path, monkeypatch, weights, cv, nulls):
    """A learner's features encoded from Arrow (FeatureEncoder.transform_arrow: float32 and integer
    columns, missing values filled as through pandas) are the pandas path's arrays, bit for bit; a
    string column or a missing target still goes through pandas."""
    import pandas as pd

    from calengine.plan.features import FeatureEncoder

    rng = np.random.default_rng(4)
    n = 900
    a = rng.normal(size=n).astype(np.float32)
    cols = {"a": pa.array(a, mask=(np.arange(n) % 11 == 2) if nulls else None), "b": rng.integers(-5, 5, size=n),
            "y": (rng.random(n) < 0.3).astype(np.int8)}
    if weights:
        cols["w"] = rng.integers(0, 3, size=n).astype(np.float64)
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table(cols), path, row_group_size=200)
    frs = describe_files([str(path)], str(tmp_path), list(cols), 400).fragments
    encoder = FeatureEncoder().fit(pd.read_parquet(path)[["a", "b"]])
    enc = pt.Encoding(encoder, LabelSpace.from_values([0, 1], "y"), "y", "w" if weights else None)
    plan = pt.FoldPlan(cv, 0)
    calls = []
    real = pt._load_numeric_part
    monkeypatch.setattr(pt, "_load_numeric_part", lambda *args: calls.append(real(*args)) or calls[-1])
    fast = [pt.load_part(fr, enc, plan, with_keys=True, order="F") for fr in frs]
    assert calls and all(c is not None for c in calls)
    monkeypatch.setattr(pt, "_load_numeric_part", lambda *a: None)
    slow = [pt.load_part(fr, enc, plan, with_keys=True, order="F") for fr in frs]
    for x_part, z_part in zip(fast, slow):
        for name in ("X", "y", "folds", "keys", "w"):
            x, z = getattr(x_part, name), getattr(z_part, name)
            assert (x is None) == (z is None), name
            if x is not None:
                assert x.dtype == z.dtype and x.tobytes(order="A") == z.tobytes(order="A"), name
                assert x.flags["F_CONTIGUOUS"] == z.flags["F_CONTIGUOUS"], name
    strings = FeatureEncoder().fit(pd.DataFrame({"a": ["u", "v"], "b": [1, 2]}))
    assert real(frs[0], pt.Encoding(strings, enc.labels, "y", None), plan, ["a", "b", "y"], False, "F", False) is None


def _assert_same_table_stats(a, b):
    assert a.n_rows == b.n_rows and list(a.columns) == list(b.columns)
    for name in a.columns:
        x, z = a.columns[name], b.columns[name]
        assert (x.name, x.kind, x.where) == (z.name, z.kind, z.where), name
        for field in ("n", "missing", "exact"):
            assert getattr(x.numeric, field) == getattr(z.numeric, field), (name, field)
        for field in ("values", "counts"):
            assert np.array_equal(getattr(x.numeric, field), getattr(z.numeric, field)), (name, field)
    assert a.target.per_group == b.target.per_group and a.target.missing == b.target.missing
    assert (a.weights is None) == (b.weights is None)


@pytest.mark.parametrize("n", [900, 30_000])
def test_planning_stats_of_a_numeric_table_are_the_pandas_paths(tmp_path, monkeypatch, n):
    """The planning pass summarises a learner's numeric columns from Arrow (float32 with nulls and
    non-finite values, integers with nulls, few and many distinct values, more values than the
    sample) and counts an integer target without pandas: the pandas path's statistics, bit for bit,
    so the encoder (fills, missing indicators) is the same."""
    rng = np.random.default_rng(8)
    a = rng.normal(size=n).astype(np.float32)
    a[::37] = np.inf
    a[5::41] = np.nan
    cols = {"a": pa.array(a, mask=np.arange(n) % 13 == 1), "b": pa.array(rng.integers(-3, 3, size=n),
                                                                          mask=np.arange(n) % 17 == 2),
            "c": rng.normal(size=n) * 1e6, "d": rng.integers(0, 2**62, size=n, dtype=np.int64),
            "y": rng.integers(0, 3, size=n).astype(np.int8)}
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table(cols), path, row_group_size=n // 3 + 1)
    frs = describe_files([str(path)], str(tmp_path), list(cols), 2 * (n // 3 + 1)).fragments
    assert len(frs) == 2 and len(frs[0].row_groups) == 2
    features = ["a", "b", "c", "d"]
    calls = []
    real = pt._numeric_table_stats
    monkeypatch.setattr(pt, "_numeric_table_stats", lambda *args: calls.append(real(*args)) or calls[-1])
    fast = [pt.fragment_table_stats(fr, features, "y", ()) for fr in frs]
    assert len(calls) == 2 and all(c is not None for c in calls)
    monkeypatch.setattr(pt, "_numeric_table_stats", lambda *a: None)
    slow = [pt.fragment_table_stats(fr, features, "y", ()) for fr in frs]
    for x, z in zip(fast, slow):
        _assert_same_table_stats(x, z)
    assert fast[0].columns["a"].numeric.missing > 0 and fast[0].columns["b"].numeric.missing > 0


@pytest.mark.parametrize("case", ["string feature", "string target", "missing target", "bool feature"])
def test_planning_stats_of_other_tables_take_the_pandas_path_after_one_read(tmp_path, monkeypatch, case):
    """A table the Arrow path does not summarise gets the pandas path's statistics from the same read."""
    from calengine.parquet import dataset
    from calengine.tasks import numeric_read

    rng = np.random.default_rng(9)
    n = 600
    cols = {"a": rng.normal(size=n), "y": rng.integers(0, 2, size=n)}
    if case == "string feature":
        cols["s"] = np.array(["u", "v", "w"])[rng.integers(0, 3, size=n)]
    if case == "bool feature":
        cols["s"] = rng.random(n) < 0.5
    if case == "string target":
        cols["y"] = np.array(["no", "yes"])[cols["y"]]
    if case == "missing target":
        cols["y"] = pa.array(cols["y"], mask=np.arange(n) % 7 == 0)
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table(cols), path, row_group_size=200)
    frs = describe_files([str(path)], str(tmp_path), list(cols), 400).fragments
    features = [c for c in cols if c != "y"]
    reads = []
    original = dataset._read_row_groups
    monkeypatch.setattr(dataset, "_read_row_groups", lambda *a: reads.append(1) or original(*a))
    got = [pt.fragment_table_stats(fr, features, "y", ()) for fr in frs]
    assert len(reads) == len(frs)  # one read per fragment, though the Arrow path declined
    assert all(numeric_read.numeric_table_stats(fr, dataset.read_fragment_table(fr, features + ["y"]), features,
                                                "y", []) is None for fr in frs)
    monkeypatch.setattr(pt, "_numeric_table_stats", lambda *a: None)
    want = [pt.fragment_table_stats(fr, features, "y", ()) for fr in frs]
    for x, z in zip(got, want):
        assert x.n_rows == z.n_rows and x.target.per_group == z.target.per_group
        assert x.target.missing == z.target.missing and list(x.columns) == list(z.columns)
        assert [c.kind for c in x.columns.values()] == [c.kind for c in z.columns.values()]
