"""``calengine.arrow_udf`` (issue 26 §4): a model as a function of Arrow record batches gives
``calengine score``'s probabilities bit for bit, batch by batch, and runs as a DuckDB Arrow function."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import calengine
from calengine.errors import DataError


@pytest.fixture(scope="module")
def model_and_table(tmp_path_factory):
    rng = np.random.default_rng(3)
    s = np.round(rng.random(4000), 3)
    y = (rng.random(4000) < s).astype(np.int64)
    folder = tmp_path_factory.mktemp("arrow")
    calengine.calibrate_scores(pd.DataFrame({"s": s, "y": y}), "y", "s", method="isotonic", output=folder / "m")
    test = pd.DataFrame({"s": np.round(rng.random(1000), 4), "id": np.arange(1000)})
    return folder / "m", test


def test_batches_score_as_calengine_does_whatever_the_batching(model_and_table):
    path, test = model_and_table
    udf = calengine.arrow_udf(path)
    want = calengine.load_model(path).predict_frame(test)
    table = pa.Table.from_pandas(test, preserve_index=False)
    for size in (1, 7, 1000):
        out = pa.concat_tables([pa.Table.from_batches([udf(b)]) for b in table.to_batches(max_chunksize=size)])
        assert out.column_names == ["p_0", "p_1"]
        for c in ("p_0", "p_1"):
            assert np.array_equal(out[c].to_numpy(), want[c].to_numpy())
    with pytest.raises(DataError, match="RecordBatch"):
        udf(table)


def test_runs_as_a_duckdb_arrow_function(model_and_table):
    duckdb = pytest.importorskip("duckdb")
    path, test = model_and_table
    udf = calengine.arrow_udf(path)

    def p1(s):  # DuckDB hands each argument as an Arrow (chunked) array
        s = s.combine_chunks() if isinstance(s, pa.ChunkedArray) else s
        return udf(pa.record_batch([s], names=["s"])).column("p_1")

    con = duckdb.connect()
    con.create_function("p1", p1, ["DOUBLE"], "DOUBLE", type="arrow")
    con.register("input", test)
    got = con.execute("SELECT id, p1(s) AS p FROM input ORDER BY id").df()
    want = calengine.load_model(path).predict_frame(test)["p_1"].to_numpy()
    assert np.array_equal(got["p"].to_numpy(), want)
