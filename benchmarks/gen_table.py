#!/usr/bin/env python
"""Generate a large partitioned Parquet table for calibration benchmarks, in bounded memory.

    python benchmarks/gen_table.py OUT_DIR --rows 100000000 --cols 20 --files 10 \\
        --row-group-rows 1000000 --seed 0 [--test-rows 1000000 --test-out TEST_DIR]

Writes ``OUT_DIR/part-00000.parquet`` ... (``--files`` files, rows split as evenly as possible), each
with float32 features ``x0 .. x{cols-1}`` and an int8 0/1 target ``y``.  One row group at a time is
generated and written with :class:`pyarrow.parquet.ParquetWriter`, so memory stays near one row group
whatever ``--rows`` is.

The data
--------
``n_informative`` (default 5) features share one latent factor (pairwise correlation ``rho``, default
0.6); the rest are independent noise.  Every column gets its own offset and scale.  The target is
``y ~ Bernoulli(sigmoid(w.z + b))`` on the standardised informative features ``z``, with ``b`` chosen
so that about 30 % of rows are positive.  Naive Bayes assumes the informative features independent, so
it counts the shared evidence several times over and its probabilities are overconfident: calibration
visibly helps (see :func:`describe`).

Determinism
-----------
Random numbers are drawn in fixed logical blocks of :data:`BLOCK_ROWS` rows of the *global* row
sequence; block ``i`` of stream ``s`` (0 = train, 1 = test) is drawn from
``numpy.random.SeedSequence(seed, spawn_key=(s, i))``.  Files and row groups are only slices of that
sequence, so the rows depend on ``(seed, rows, cols)`` alone: not on ``--files``, not on
``--row-group-rows``, and not on the order in which row groups are generated.  The model parameters
(weights, offsets, scales) come from ``SeedSequence(seed, spawn_key=(2,))`` and are shared by the train
and test streams, so both follow one distribution.

The functions are importable (``importlib`` with a file path; ``benchmarks`` is not a package):
:func:`write_table` writes a table, :func:`generate_rows` returns any global row range as arrays.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

#: rows per random-number block (the unit of seeding); independent of files and row groups
BLOCK_ROWS = 1 << 16
TRAIN_STREAM, TEST_STREAM, PARAMS_STREAM = 0, 1, 2
TARGET = "y"
POSITIVE_RATE = 0.30


@dataclass(frozen=True)
class TableSpec:
    rows: int
    cols: int = 20
    seed: int = 0
    n_informative: int = 5
    rho: float = 0.6  # pairwise correlation of the informative features
    positive_rate: float = POSITIVE_RATE


@dataclass(frozen=True)
class Params:
    weights: np.ndarray  # (n_informative,) on standardised informative features
    bias: float
    offsets: np.ndarray  # (cols,)
    scales: np.ndarray  # (cols,)


def model_params(spec: TableSpec) -> Params:
    """Weights, bias, offsets and scales: a function of (seed, cols, n_informative, rho) only."""
    k = min(spec.n_informative, spec.cols)
    rng = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(PARAMS_STREAM,)))
    signs = np.where(rng.random(k) < 0.7, 1.0, -1.0)
    weights = signs * np.linspace(1.5, 0.5, k) if k else np.zeros(0)
    # Var(w.z) for z with unit variances and pairwise correlation rho
    s2 = float(weights @ weights * (1 - spec.rho) + spec.rho * weights.sum() ** 2)
    logit = math.log(spec.positive_rate / (1 - spec.positive_rate))
    # E[sigmoid(b + s Z)] ~= sigmoid(b / sqrt(1 + pi s^2 / 8)) (probit approximation)
    bias = logit * math.sqrt(1 + math.pi * s2 / 8)
    offsets = rng.normal(0.0, 2.0, spec.cols)
    scales = np.exp(rng.normal(0.0, 0.7, spec.cols))
    return Params(weights=weights, bias=bias, offsets=offsets, scales=scales)


def _block(spec: TableSpec, params: Params, stream: int, index: int) -> tuple[np.ndarray, np.ndarray]:
    """Block ``index`` of ``stream``: (X float32 (BLOCK_ROWS, cols), y int8)."""
    rng = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(stream, index)))
    n, k = BLOCK_ROWS, min(spec.n_informative, spec.cols)
    Z = rng.standard_normal((n, spec.cols), dtype=np.float32)
    if k:
        latent = rng.standard_normal(n, dtype=np.float32)
        a, c = np.float32(math.sqrt(spec.rho)), np.float32(math.sqrt(1 - spec.rho))
        Z[:, :k] *= c
        Z[:, :k] += a * latent[:, None]
        eta = Z[:, :k].astype(np.float64) @ params.weights + params.bias
    else:
        eta = np.full(n, params.bias)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int8)
    X = Z * params.scales.astype(np.float32) + params.offsets.astype(np.float32)
    return X, y


def generate_rows(spec: TableSpec, start: int, stop: int, stream: int = TRAIN_STREAM,
                  params: Params | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Global rows ``[start, stop)`` of ``stream``: (X float32 (n, cols), y int8)."""
    params = params or model_params(spec)
    n = stop - start
    X = np.empty((n, spec.cols), dtype=np.float32, order="F")  # contiguous columns for Arrow
    y = np.empty(n, dtype=np.int8)
    pos = start
    while pos < stop:
        b = pos // BLOCK_ROWS
        lo = pos - b * BLOCK_ROWS
        hi = min(BLOCK_ROWS, stop - b * BLOCK_ROWS)
        bx, by = _block(spec, params, stream, b)
        X[pos - start : pos - start + hi - lo] = bx[lo:hi]
        y[pos - start : pos - start + hi - lo] = by[lo:hi]
        pos += hi - lo
    return X, y


def file_ranges(rows: int, files: int) -> list[tuple[int, int]]:
    """Global row range of each file (as even as possible)."""
    return [(i * rows // files, (i + 1) * rows // files) for i in range(files)]


def schema(cols: int):
    import pyarrow as pa

    return pa.schema([pa.field(f"x{j}", pa.float32()) for j in range(cols)] + [pa.field(TARGET, pa.int8())])


def write_table(out_dir: str | os.PathLike, spec: TableSpec, files: int = 10, row_group_rows: int = 1_000_000,
                stream: int = TRAIN_STREAM, compression: str = "snappy", quiet: bool = False,
                overwrite: bool = False) -> dict:
    """Write the table to ``out_dir`` (staged beside it, renamed when complete); return a summary.

    A ``_table.json`` file (ignored by Parquet readers: it starts with ``_``) records the spec, so a
    complete table can be recognised and reused.
    """
    import pyarrow as pa

    if spec.rows < 1 or files < 1 or row_group_rows < 1 or spec.cols < 1:
        raise ValueError("rows, files, row_group_rows and cols must all be at least 1")
    params = model_params(spec)
    sch = schema(spec.cols)

    def row_group(g_start, g_stop):
        X, y = generate_rows(spec, g_start, g_stop, stream, params)
        arrays = [pa.array(X[:, j]) for j in range(spec.cols)] + [pa.array(y)]
        return pa.Table.from_arrays(arrays, schema=sch), int(y.sum())

    return write_parts(out_dir, {"spec": asdict(spec), "stream": stream}, spec.rows, files, row_group_rows, sch,
                       row_group, compression=compression, quiet=quiet, overwrite=overwrite)


def write_parts(out_dir: str | os.PathLike, record: dict, rows: int, files: int, row_group_rows: int, sch,
                row_group: Callable, compression: str = "snappy", quiet: bool = False,
                overwrite: bool = True) -> dict:
    """Write ``rows`` rows as ``files`` Parquet files, one row group at a time: ``row_group(start, stop)``
    returns the global rows ``[start, stop)`` as (pyarrow Table, number of positives).  The table is
    staged beside ``out_dir`` and renamed when complete, with ``_table.json`` = ``record`` + the layout
    and counts, so a crash never leaves a table that looks complete.  Shared by every generator here."""
    import pyarrow.parquet as pq

    files = min(files, rows)
    out = Path(out_dir)
    if out.exists():
        if not overwrite:
            raise FileExistsError(f"{out} exists; remove it or pass overwrite=True")
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    t0 = time.perf_counter()
    written = positives = 0
    try:
        for i, (f_start, f_stop) in enumerate(file_ranges(rows, files)):
            path = staging / f"part-{i:05d}.parquet"
            # random floats do not dictionary-encode; trying costs more than the rest of the write
            with pq.ParquetWriter(path, sch, compression=compression, use_dictionary=[TARGET]) as writer:
                for g_start in range(f_start, f_stop, row_group_rows):
                    g_stop = min(g_start + row_group_rows, f_stop)
                    table, pos = row_group(g_start, g_stop)
                    writer.write_table(table, row_group_size=g_stop - g_start)
                    written += g_stop - g_start
                    positives += pos
                    del table
            if not quiet:
                el = time.perf_counter() - t0
                print(f"  {path.name}: {written:,}/{rows:,} rows, {written / el:,.0f} rows/s", file=sys.stderr)
        elapsed = time.perf_counter() - t0
        summary = {
            **record,
            "files": files,
            "row_group_rows": row_group_rows,
            "compression": compression,
            "positive_fraction": positives / written,
            "seconds": elapsed,
            "rows_per_s": written / elapsed if elapsed > 0 else float("inf"),
            "bytes": sum(p.stat().st_size for p in staging.glob("*.parquet")),
        }
        (staging / "_table.json").write_text(json.dumps(summary, indent=2) + "\n")
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return summary


def read_summary(out_dir: str | os.PathLike) -> dict | None:
    """The ``_table.json`` record of a complete table at ``out_dir`` (None if there is none)."""
    try:
        return json.loads((Path(out_dir) / "_table.json").read_text())
    except (OSError, ValueError):
        return None


def table_name(kind: str, rows: int, cols: int, files: int, seed: int) -> str:
    """Directory name encoding what decides a table's contents and layout (used for reuse)."""
    return f"{kind}-r{rows}-c{cols}-f{files}-s{seed}"


def existing_table(out_dir: str | os.PathLike, spec: TableSpec, files: int, stream: int,
                   row_group_rows: int | None = None) -> dict | None:
    """The summary of a complete table at ``out_dir`` with this spec/stream/files (and row-group size,
    if given), else None."""
    summary = read_summary(out_dir)
    if summary is None:
        return None
    if (summary.get("spec") != asdict(spec) or summary.get("stream") != stream
            or summary.get("files") != min(files, spec.rows)):
        return None
    if row_group_rows is not None and summary.get("row_group_rows") != row_group_rows:
        return None  # same rows, but another layout: timings would not be comparable
    return summary


def ensure_table(out_dir: str | os.PathLike, spec: TableSpec, files: int = 10, row_group_rows: int = 1_000_000,
                 stream: int = TRAIN_STREAM, quiet: bool = False) -> dict:
    """Reuse a complete matching table at ``out_dir`` or (re)write it."""
    found = existing_table(out_dir, spec, files, stream, row_group_rows)
    if found is not None:
        return {**found, "reused": True}
    return {**write_table(out_dir, spec, files, row_group_rows, stream, quiet=quiet, overwrite=True), "reused": False}


def describe(spec: TableSpec, n: int = 200_000) -> dict:
    """Quick check that the table suits calibration: class balance, and naive Bayes' calibration
    error with and without isotonic calibration (fitted on half of ``n`` generated rows)."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.naive_bayes import GaussianNB

    X, y = generate_rows(spec, 0, n)
    Xt, yt = generate_rows(spec, 0, n, TEST_STREAM)
    nb = GaussianNB().fit(X, y)
    cal = CalibratedClassifierCV(GaussianNB(), method="isotonic", cv=5).fit(X, y)

    def ece(p, t, bins=20):
        idx = np.minimum((p * bins).astype(int), bins - 1)
        return float(sum(abs(p[idx == b].mean() - t[idx == b].mean()) * (idx == b).mean()
                         for b in range(bins) if (idx == b).any()))

    def brier(p, t):
        return float(np.mean((p - t) ** 2))

    p_nb, p_cal = nb.predict_proba(Xt)[:, 1], cal.predict_proba(Xt)[:, 1]
    return {
        "positive_fraction": float(y.mean()),
        "ece_naive_bayes": ece(p_nb, yt), "ece_isotonic": ece(p_cal, yt),
        "brier_naive_bayes": brier(p_nb, yt), "brier_isotonic": brier(p_cal, yt),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", metavar="OUT_DIR")
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--cols", type=int, default=20)
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--row-group-rows", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--informative", type=int, default=5, help="correlated informative features (default: 5)")
    ap.add_argument("--test-rows", type=int, default=None, help="also write a test table (other seed stream)")
    ap.add_argument("--test-out", default=None, help="directory of the test table (default: OUT_DIR-test)")
    ap.add_argument("--overwrite", action="store_true")
    ap.add_argument("--describe", action="store_true", help="print class balance and NB calibration error")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    jobs = [(args.out_dir, TableSpec(args.rows, args.cols, args.seed, args.informative), TRAIN_STREAM)]
    if args.test_rows:
        test_out = args.test_out or f"{args.out_dir.rstrip('/')}-test"
        jobs.append((test_out, TableSpec(args.test_rows, args.cols, args.seed, args.informative), TEST_STREAM))
    for out, spec, stream in jobs:
        s = write_table(out, spec, args.files, args.row_group_rows, stream, quiet=args.quiet, overwrite=args.overwrite)
        print(
            f"{out}: {spec.rows:,} rows x {spec.cols} features in {s['files']} files,"
            f" {s['bytes'] / 2**20:,.1f} MiB, positives {s['positive_fraction']:.3f},"
            f" {s['seconds']:.1f} s = {s['rows_per_s']:,.0f} rows/s"
        )
    if args.describe:
        print(json.dumps(describe(jobs[0][1]), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
