#!/usr/bin/env python
"""Generate a large Parquet table holding a model's score column and a label, in bounded memory.

    python benchmarks/gen_scores_table.py OUT_DIR --rows 100000000 --files 20 --row-group-rows 1000000 --seed 0

Writes ``OUT_DIR/part-00000.parquet`` ... with a float32 score column ``s`` (a probability in (0, 1))
and an int8 0/1 label ``y``, one row group at a time (memory stays near one row group whatever
``--rows`` is), staged beside ``OUT_DIR`` and renamed when complete; ``_table.json`` records the spec so
a complete table is reused (:func:`ensure_scores_table`).

The data: what ``calengine fit --scores s`` must undo
-----------------------------------------------------
The score is an overconfident, shifted probability, as a boosted model's or a network's often is:
``logit(s) ~ Normal(mu, sigma)`` and the label follows a **known** link of the score,

    P(y = 1 | s) = sigmoid(slope * logit(s) + intercept)        (:func:`true_probability`)

with ``slope`` 0.5 and ``intercept`` -0.4 by default: s says 0.95 where the truth is 0.75.  So the
calibrated answer is known exactly: isotonic regression converges to it, a sigmoid on ``logit(s)``
recovers it, and temperature scaling (one slope, no intercept) recovers it only up to the intercept.
The score is stored as float32, as production scores usually are, so it has ties (about 10^7 distinct
values among 10^8 rows), and the calibrators' tie handling matters.

Determinism: as :mod:`gen_table`, rows are drawn in fixed blocks of ``gen_table.BLOCK_ROWS`` rows of the
global row sequence, block ``i`` from ``SeedSequence(seed, spawn_key=(3, i))``, so the rows depend on
``(seed, rows, the link)`` alone, not on ``--files`` or ``--row-group-rows``.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_table as G  # noqa: E402

SCORES_STREAM = 3
SCORE, TARGET = "s", "y"


@dataclass(frozen=True)
class ScoresSpec:
    rows: int
    seed: int = 0
    mu: float = -1.0  # mean of logit(s)
    sigma: float = 2.5  # spread of logit(s)
    slope: float = 0.5  # the true link: P(y=1 | s) = sigmoid(slope * logit(s) + intercept)
    intercept: float = -0.4


def true_probability(spec: ScoresSpec, s) -> np.ndarray:
    """P(y = 1 | s) of the generated table: the calibrated probability every method aims at."""
    s = np.asarray(s, dtype=np.float64)
    z = np.log(s) - np.log1p(-s)
    return 1.0 / (1.0 + np.exp(-(spec.slope * z + spec.intercept)))


def _block(spec: ScoresSpec, index: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(SCORES_STREAM, index)))
    z = rng.normal(spec.mu, spec.sigma, G.BLOCK_ROWS)
    s = (1.0 / (1.0 + np.exp(-z))).astype(np.float32)
    # float32 rounds the extremes to exactly 0 or 1, which a probability column may hold but a logit may not
    s = np.clip(s, np.float32(1e-7), np.float32(1 - 6e-8))
    y = (rng.random(G.BLOCK_ROWS) < true_probability(spec, s)).astype(np.int8)
    return s, y


def generate_scores(spec: ScoresSpec, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Global rows ``[start, stop)``: (s float32, y int8)."""
    s = np.empty(stop - start, dtype=np.float32)
    y = np.empty(stop - start, dtype=np.int8)
    pos = start
    while pos < stop:
        b, lo = divmod(pos, G.BLOCK_ROWS)
        hi = min(G.BLOCK_ROWS, stop - b * G.BLOCK_ROWS)
        bs, by = _block(spec, b)
        s[pos - start : pos - start + hi - lo] = bs[lo:hi]
        y[pos - start : pos - start + hi - lo] = by[lo:hi]
        pos += hi - lo
    return s, y


def write_scores_table(out_dir, spec: ScoresSpec, files: int = 10, row_group_rows: int = 1_000_000,
                       quiet: bool = False) -> dict:
    """Write the table (staged, renamed when complete); return its summary (``_table.json``)."""
    import pyarrow as pa

    sch = pa.schema([pa.field(SCORE, pa.float32()), pa.field(TARGET, pa.int8())])

    def row_group(start, stop):
        s, y = generate_scores(spec, start, stop)
        return pa.Table.from_arrays([pa.array(s), pa.array(y)], schema=sch), int(y.sum())

    return G.write_parts(out_dir, {"spec": asdict(spec), "kind": "scores"}, spec.rows, files, row_group_rows,
                         sch, row_group, quiet=quiet)


def ensure_scores_table(out_dir, spec: ScoresSpec, files: int = 10, row_group_rows: int = 1_000_000,
                        quiet: bool = False) -> dict:
    """Reuse a complete table of the same spec and layout at ``out_dir``, or (re)write it."""
    found = G.read_summary(out_dir)
    if (found and found.get("spec") == asdict(spec) and found.get("files") == min(files, spec.rows)
            and found.get("row_group_rows") == row_group_rows):
        return {**found, "reused": True}
    return {**write_scores_table(out_dir, spec, files, row_group_rows, quiet=quiet), "reused": False}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", metavar="OUT_DIR")
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--row-group-rows", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--slope", type=float, default=0.5)
    ap.add_argument("--intercept", type=float, default=-0.4)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.rows < 1 or args.files < 1 or args.row_group_rows < 1 or not math.isfinite(args.slope):
        ap.error("--rows, --files and --row-group-rows must be at least 1 and --slope finite")
    spec = ScoresSpec(args.rows, args.seed, slope=args.slope, intercept=args.intercept)
    s = ensure_scores_table(args.out_dir, spec, args.files, args.row_group_rows, quiet=args.quiet)
    print(f"{args.out_dir}: {spec.rows:,} rows in {s['files']} files, {s['bytes'] / 2**20:,.1f} MiB,"
          f" positives {s['positive_fraction']:.3f}" + (" (reused)" if s["reused"] else f", {s['seconds']:.1f} s"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
