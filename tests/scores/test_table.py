"""Scoring and evaluation do not depend on how the table is cut into chunks and batches: the same
model over the same rows gives the same scores bit for bit and the same metric accumulators (exact
per-value tables), whatever ``batch_rows`` and ``chunk_rows`` are (hypothesis)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import calengine
from calengine.runtime.client import dask_client
from calengine.metrics.table import evaluate_table
from calengine.scores.table import score_table


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(5)
    n = 900
    df = pd.DataFrame(rng.normal(size=(n, 3)), columns=["a", "b", "c"])
    df["a"] = df["a"].round(1)  # tied scores
    df["colour"] = rng.choice(["red", "green", None], size=n)
    df["y"] = rng.choice(["u", "v", "w"], size=n, p=[0.5, 0.3, 0.2])
    folder = Path(tempfile.mkdtemp(prefix="calengine-batches-"))
    for i, (part, rg) in enumerate(zip(np.array_split(np.arange(n), 3), (37, 100, 250))):
        pq.write_table(pa.Table.from_pandas(df.iloc[part].reset_index(drop=True), preserve_index=False),
                       folder / f"part-{i}.parquet", row_group_size=rg)
    model = calengine.fit_table(folder, "y", learner="gaussian_nb", method="isotonic")
    files = sorted(str(p) for p in folder.iterdir())
    with dask_client(workers=2) as client:
        reference = _score(client, model, files, 65536, 10**6)
        acc = evaluate_table(client, model, files, "y")
        yield client, model, files, reference, {k: v.to_arrays() for k, v in acc.items()}


def _score(client, model, files, batch_rows, chunk_rows) -> pd.DataFrame:
    with tempfile.TemporaryDirectory() as out:
        score_table(client, model, files, out + "/s", batch_rows=batch_rows, chunk_rows=chunk_rows)
        return pd.concat([pd.read_parquet(p) for p in sorted(Path(out, "s").glob("*.parquet"))], ignore_index=True)


@settings(max_examples=8, deadline=None)
@given(batch_rows=st.integers(1, 400), chunk_rows=st.integers(1, 1000))
def test_scores_and_metrics_do_not_depend_on_batches_or_chunks(setup, batch_rows, chunk_rows):
    client, model, files, reference, ref_acc = setup
    got = _score(client, model, files, batch_rows, chunk_rows)
    pd.testing.assert_frame_equal(got, reference, check_exact=True)
    acc = evaluate_table(client, model, files, "y", batch_rows=batch_rows, chunk_rows=chunk_rows)
    for kind, arrays in ref_acc.items():
        mine = acc[kind].to_arrays()
        assert mine.keys() == arrays.keys()
        for key in arrays:
            np.testing.assert_array_equal(mine[key], arrays[key], err_msg=f"{kind} {key}")


def test_default_batch_rows_keeps_a_batch_within_its_byte_budget():
    """131,072 rows up to 32 columns (measured fastest on 20), then halving as columns double so a
    batch of float64 columns stays within 32 MiB, never below 4,096 rows."""
    from calengine.scores.table import BATCH_BYTES, default_batch_rows

    assert [default_batch_rows(c) for c in (0, 1, 20, 32, 33, 64, 65, 500, 10_000)] == [
        131_072, 131_072, 131_072, 131_072, 65_536, 65_536, 32_768, 8_192, 4_096]
    for c in range(1, 2_000):
        rows = default_batch_rows(c)
        assert rows & (rows - 1) == 0 and 4_096 <= rows <= 131_072
        assert rows * c * 8 <= BATCH_BYTES or rows == 4_096
        assert rows == 131_072 or 2 * rows * c * 8 > BATCH_BYTES  # the largest power of two that fits


@pytest.mark.parametrize("labels", ["str", "int", "bool"])
def test_arrow_path_writes_the_bytes_the_pandas_path_writes(tmp_path, labels, monkeypatch):
    """Plain scoring encodes Arrow batches without pandas after a chunk's first batch; the files are
    byte for byte those of the pandas path, for float32/int/nullable-int/non-finite features (fills
    and missing indicators) and string, integer and boolean classes."""
    from calengine.plan.features import FeatureEncoder
    from calengine.scores.table import plan_chunks, score_chunk

    rng = np.random.default_rng(11)
    n = 3000
    df = pd.DataFrame({"f32": rng.normal(size=n).astype(np.float32), "i64": rng.integers(-5, 5, n),
                       "f64": rng.normal(size=n)})
    df.loc[rng.random(n) < 0.1, "f32"] = np.nan
    df.loc[rng.random(n) < 0.02, "f64"] = np.inf
    df["inull"] = pd.array(np.where(rng.random(n) < 0.1, None, rng.integers(0, 9, n)), dtype="Int64")
    y = rng.random(n) < 1 / (1 + np.exp(-df["i64"].to_numpy() / 2))
    df["y"] = {"str": np.where(y, "yes", "no"), "int": y.astype(np.int64) * 7, "bool": y}[labels]
    src = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), src, row_group_size=700)
    model = calengine.fit_table(src, "y", learner="gaussian_nb", method="sigmoid", cv=3)
    assert any(c.missing_indicator for c in model.encoder.columns_)
    (chunk,) = plan_chunks([str(src)], model.encoder.input_columns, 10**6)

    used = []
    original = FeatureEncoder.transform_arrow

    def spy(self, batch, order="C"):
        used.append(batch.num_rows)
        return original(self, batch, order)

    monkeypatch.setattr(FeatureEncoder, "transform_arrow", spy)
    assert score_chunk(model, chunk, str(tmp_path / "fast.parquet"), (), 256, False, None) == n
    assert sum(used) == n - 256  # every batch but the first
    monkeypatch.setattr(FeatureEncoder, "reads_arrow", lambda self, schema: False)
    assert score_chunk(model, chunk, str(tmp_path / "pandas.parquet"), (), 256, False, None) == n
    assert (tmp_path / "fast.parquet").read_bytes() == (tmp_path / "pandas.parquet").read_bytes()


def test_arrow_path_is_not_taken_where_it_would_change_the_output(tmp_path, monkeypatch):
    """Kept columns, a categorical feature or extra outputs go through pandas for every batch."""
    from calengine.plan.features import FeatureEncoder
    from calengine.scores.table import plan_chunks, score_chunk

    rng = np.random.default_rng(2)
    n = 1200
    df = pd.DataFrame({"a": rng.normal(size=n), "id": np.arange(n), "y": rng.integers(0, 2, n)})
    df["colour"] = rng.choice(["red", "blue"], size=n)
    src = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), src)
    numeric = calengine.fit_table(src, "y", learner="gaussian_nb", method="isotonic", cv=3, exclude=["colour", "id"])
    mixed = calengine.fit_table(src, "y", learner="gaussian_nb", method="isotonic", cv=3, exclude=["id"])
    calls = []
    monkeypatch.setattr(FeatureEncoder, "transform_arrow", lambda self, b, order="C": calls.append(1))
    for model, keep in ((numeric, ("id",)), (mixed, ())):
        cols = list(dict.fromkeys(list(model.encoder.input_columns) + list(keep)))
        (chunk,) = plan_chunks([str(src)], cols, 10**6)
        assert score_chunk(model, chunk, str(tmp_path / "o.parquet"), keep, 100, False, None) == n
    assert calls == []
