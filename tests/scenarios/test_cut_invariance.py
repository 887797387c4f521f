"""Issue 43 §1: a scaling calibrator's model file is the same bytes however the table is cut.

Sigmoid and temperature sum floats (class weights, histograms of the scores, Newton's objective,
gradient and Hessian); those sums are exact (:class:`calengine.reductions.exact.ExactSums`), so 2 files
of large row groups and 7 files of small ones give the same model, byte for byte.  The isotonic case
is ``tests/fit/test_table.py::test_a_score_column_model_is_the_same_bytes_however_the_table_is_cut``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest


def _write(df: pd.DataFrame, folder, files: int, row_group_sizes) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(len(df)), files)):
        table = pa.Table.from_pandas(df.iloc[part].reset_index(drop=True), preserve_index=False)
        pq.write_table(table, folder / f"part-{i}.parquet", row_group_size=row_group_sizes[i % len(row_group_sizes)])
    return folder


def _model_files(cli, df, tmp_path, args) -> dict:
    files = {}
    for n_files, groups in ((2, (1000, 700)), (7, (90, 333, 51))):
        out = tmp_path / f"m{n_files}"
        r = cli("fit", _write(df, tmp_path / f"t{n_files}", n_files, groups), "--target", "class", *args,
                "--output", out)
        assert r.returncode == 0, r
        files[n_files] = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    return files


def _assert_same(files) -> None:
    assert files[2].keys() == files[7].keys()
    for name in files[2]:
        assert files[2][name] == files[7][name], name


def _binary(kind: str, weighted: bool, n: int = 6000) -> pd.DataFrame:
    rng = np.random.default_rng(431)
    u = rng.normal(size=n) * 2.0
    p = 1.0 / (1.0 + np.exp(-u))
    df = pd.DataFrame({"s": u * 1.7 if kind == "decision" else 1.0 / (1.0 + np.exp(-1.7 * u)),
                       "class": (rng.random(n) < p).astype(np.int64)})
    if weighted:  # weights of many magnitudes: float sums of them depend on their order
        df["w"] = rng.random(n) * 10.0 ** rng.integers(-3, 4, n)
    return df


@pytest.mark.parametrize("method", ["sigmoid", "temperature"])
@pytest.mark.parametrize("kind", ["proba", "decision"])
@pytest.mark.parametrize("weighted", [False, True])
def test_a_scaling_model_is_the_same_bytes_however_the_table_is_cut(tmp_path, cli, method, kind, weighted):
    args = ["--scores", "s", "--score-kind", kind, "--method", method] + (["--weight", "w"] if weighted else [])
    _assert_same(_model_files(cli, _binary(kind, weighted), tmp_path, args))


@pytest.mark.parametrize("weighted", [False, True])
def test_a_temperature_model_on_logit_columns_is_the_same_bytes_however_the_table_is_cut(tmp_path, cli, weighted):
    rng = np.random.default_rng(432)
    n, k = 6000, 10
    u = rng.normal(size=(n, k)) * 1.5
    p = np.exp(u - u.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    y = (p.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1)
    df = pd.DataFrame({f"z{j}": 1.6 * u[:, j] for j in range(k)})
    df["class"] = np.minimum(y, k - 1).astype(np.int64)
    if weighted:
        df["w"] = rng.random(n) * 10.0 ** rng.integers(-3, 4, n)
    args = ["--scores", ",".join(f"z{j}" for j in range(k)), "--score-kind", "logit", "--method", "temperature",
            "--classes", ",".join(map(str, range(k)))] + (["--weight", "w"] if weighted else [])
    _assert_same(_model_files(cli, df, tmp_path, args))
