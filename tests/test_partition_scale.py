"""Fitting a table larger than the whole cluster's memory, and a worker killed mid-fit.

The test-sized version of the issue's 100M-row run: two worker processes limited to 512 MiB each
(1 GiB in all; an idle worker with pandas, pyarrow and scikit-learn loaded already holds ~250 MiB)
fit a table whose encoded features alone take 1.1 GB.  The old design -- read the table in the client,
encode it there and broadcast it to every worker -- cannot do this: each worker would have to hold the
whole table.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from calengine.testing_cluster import kill_one_worker, start_cli, start_dask_processes, stop_processes
from cli_helpers import REPO


def write_big_table(folder, rows: int, cols: int, files: int, row_group: int, seed: int = 0):
    """A table written one row group at a time (bounded memory), y depending on two columns."""
    folder.mkdir(parents=True, exist_ok=True)
    per = rows // files
    for f in range(files):
        writer = None
        for g in range(0, per, row_group):
            rng = np.random.default_rng([seed, f, g])
            n = min(row_group, per - g)
            X = rng.standard_normal(size=(n, cols), dtype=np.float32)
            y = (X[:, 0] + 0.5 * X[:, 1] + rng.standard_normal(size=n, dtype=np.float32) > 0.5).astype(np.int8)
            table = pa.table({**{f"x{j}": X[:, j] for j in range(cols)}, "y": y})
            writer = writer or pq.ParquetWriter(folder / f"part-{f}.parquet", table.schema, compression="none")
            writer.write_table(table)
        writer.close()
    return folder


@pytest.mark.slow
@pytest.mark.cluster
def test_memory_limited_cluster_fits_a_table_larger_than_its_total_memory(tmp_path, cli):
    rows, cols = 3_500_000, 40
    limit = 512 * 2**20
    encoded_bytes = rows * cols * 8
    assert encoded_bytes > 2 * limit  # the whole table cannot sit in the cluster, let alone one worker
    data = write_big_table(tmp_path / "big", rows, cols, files=7, row_group=50_000)
    out = tmp_path / "model"
    r = cli("fit", data, "--target", "y", "--learner", "gaussian_nb", "--method", "isotonic", "--cluster",
            "--workers", "2", "--worker-memory", "512MiB", "--output", out, timeout=900)
    assert r.returncode == 0, r
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["extra"]["x_training"]["rows"] == rows
    assert manifest["extra"]["x_training"]["route"] == "stats"
    # every row was held out once and reached its fold's calibrator
    from calengine import load_model

    model = load_model(out)
    assert sum(m.calibrators[0].weights_.sum() for m in model.members) == rows


def _model_arrays(out):
    arrays = {}
    for f in sorted(out.rglob("*.npz")):
        with np.load(f, allow_pickle=False) as z:
            arrays.update({f"{f.relative_to(out)}:{k}": z[k] for k in z.files})
    return arrays


@pytest.mark.slow
@pytest.mark.cluster
def test_a_worker_killed_mid_fit_gives_the_same_model_bit_for_bit(tmp_path):
    """Tasks read their rows from Parquet, so a lost worker's tasks re-run elsewhere from storage."""
    data = write_big_table(tmp_path / "t", 600_000, 10, files=6, row_group=25_000)
    elsewhere = tmp_path / "workers"
    elsewhere.mkdir()
    address, procs = start_dask_processes(cwd=elsewhere)
    try:
        def fit(out):
            return start_cli("fit", data, "--target", "y", "--learner", "decision_tree", "--learner-param",
                             "max_depth=8", "--method", "sigmoid", "--cluster", address, "--output", out, cwd=REPO)

        clean = fit(tmp_path / "clean")
        assert clean.wait(timeout=600) == 0, clean.stderr.read()
        faulty = fit(tmp_path / "faulty")
        time.sleep(6)
        assert faulty.poll() is None, "the fit ended before a worker could be killed; make the table larger"
        kill_one_worker(procs)
        assert faulty.wait(timeout=600) == 0, faulty.stderr.read()
    finally:
        stop_processes(procs)
    a, b = _model_arrays(tmp_path / "clean"), _model_arrays(tmp_path / "faulty")
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
