"""Fitting a table larger than the whole cluster's memory, and a worker killed mid-fit.

The test-sized version of the issue's 100M-row run: two worker processes limited to 512 MiB each
(1 GiB in all; an idle worker with pandas, pyarrow and scikit-learn loaded already holds ~250 MiB)
fit a table whose encoded features alone take 1.1 GB.  The old design -- read the table in the client,
encode it there and broadcast it to every worker -- cannot do this: each worker would have to hold the
whole table.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from calengine.testing.cluster import run_cli, run_cli_killing_a_worker
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
    """Tasks read their rows from Parquet, so a lost worker's tasks re-run elsewhere from storage.

    The worker is killed while a learner is being fitted (a ``fit_unit_learner`` task is running: the
    scheduler is asked, rather than sleeping a guessed time, so the table can stay small); the model
    must equal, bit for bit, the embedded scheduler's fit of the same table with the same seed."""
    data = write_big_table(tmp_path / "t", 240_000, 10, files=6, row_group=20_000)
    elsewhere = tmp_path / "workers"
    elsewhere.mkdir()
    args = ("fit", data, "--target", "y", "--learner", "decision_tree", "--learner-param", "max_depth=8",
            "--method", "sigmoid")
    clean = run_cli(*args, "--workers", "2", "--output", tmp_path / "clean", cwd=REPO, timeout=600)
    assert clean.returncode == 0, clean.stderr
    faulty = run_cli_killing_a_worker(*args, "--output", tmp_path / "faulty", task="fit_unit_learner", cwd=REPO,
                                      workers_cwd=elsewhere, timeout=600, delay=0.5)
    assert faulty.returncode == 0, faulty.stderr
    a, b = _model_arrays(tmp_path / "clean"), _model_arrays(tmp_path / "faulty")
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
