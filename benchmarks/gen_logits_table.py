#!/usr/bin/env python
"""Generate a large Parquet table of a k-class model's logits and a label, in bounded memory.

    python benchmarks/gen_logits_table.py OUT_DIR --rows 100000000 --classes 10 --files 100 --seed 0

Writes ``OUT_DIR/part-00000.parquet`` ... with float32 logit columns ``z_0 .. z_{k-1}`` and an int8
label ``y``, one row group at a time (memory stays near one row group whatever ``--rows`` is), staged
beside ``OUT_DIR`` and renamed when complete; ``_table.json`` records the spec so a complete table is
reused (:func:`ensure_logits_table`).

The data: the logits of an overconfident classifier, as a network's often are.  Row ``i`` has latent
class scores ``u ~ Normal(0, 1)^k`` plus ``shift`` on a class drawn uniformly; its label is drawn from
``softmax(u)`` (the truth) and the model reports ``z = temperature * u`` (``temperature`` 1.6 by
default: too sharp, so sets from its raw softmax would under-cover and calibration matters).  So
``calengine fit --scores z_0,...,z_9 --score-kind logit`` has something to correct, and conformal sets
something to cover.

Determinism: as :mod:`gen_table`, rows are drawn in fixed blocks of ``gen_table.BLOCK_ROWS`` rows of the
global row sequence, block ``i`` from ``SeedSequence(seed, spawn_key=(STREAM, i))``, so the rows depend
on ``(seed, rows, classes, the parameters)`` alone, not on ``--files`` or ``--row-group-rows``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_table as G  # noqa: E402

STREAM = 5
TARGET = "y"


@dataclass(frozen=True)
class LogitsSpec:
    rows: int
    classes: int = 10
    seed: int = 0
    shift: float = 2.0  # the row's own class stands out by this much on the latent scale
    temperature: float = 1.6  # the model's logits are the latent scores times this (overconfident)


def columns(spec: LogitsSpec) -> list[str]:
    return [f"z_{j}" for j in range(spec.classes)]


def _block(spec: LogitsSpec, index: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(STREAM, index)))
    n, k = G.BLOCK_ROWS, spec.classes
    u = rng.normal(size=(n, k))
    u[np.arange(n), rng.integers(0, k, n)] += spec.shift
    p = np.exp(u - u.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    y = np.minimum((rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1), k - 1).astype(np.int8)
    return (spec.temperature * u).astype(np.float32), y


def generate_logits(spec: LogitsSpec, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Global rows ``[start, stop)``: (z float32 (n, k), y int8)."""
    z = np.empty((stop - start, spec.classes), dtype=np.float32)
    y = np.empty(stop - start, dtype=np.int8)
    pos = start
    while pos < stop:
        b, lo = divmod(pos, G.BLOCK_ROWS)
        hi = min(G.BLOCK_ROWS, stop - b * G.BLOCK_ROWS)
        bz, by = _block(spec, b)
        z[pos - start: pos - start + hi - lo] = bz[lo:hi]
        y[pos - start: pos - start + hi - lo] = by[lo:hi]
        pos += hi - lo
    return z, y


def write_logits_table(out_dir, spec: LogitsSpec, files: int = 10, row_group_rows: int = 1_000_000,
                       quiet: bool = False) -> dict:
    """Write the table (staged, renamed when complete); return its summary (``_table.json``)."""
    import pyarrow as pa

    names = columns(spec)
    sch = pa.schema([pa.field(c, pa.float32()) for c in names] + [pa.field(TARGET, pa.int8())])

    def row_group(start, stop):
        z, y = generate_logits(spec, start, stop)
        arrays = [pa.array(z[:, j]) for j in range(spec.classes)] + [pa.array(y)]
        return pa.Table.from_arrays(arrays, schema=sch), int((y == 0).sum())

    return G.write_parts(out_dir, {"spec": asdict(spec), "kind": "logits"}, spec.rows, files, row_group_rows,
                         sch, row_group, quiet=quiet)


def ensure_logits_table(out_dir, spec: LogitsSpec, files: int = 10, row_group_rows: int = 1_000_000,
                        quiet: bool = False) -> dict:
    """Reuse a complete table of the same spec and layout at ``out_dir``, or (re)write it."""
    found = G.read_summary(out_dir)
    if (found and found.get("spec") == asdict(spec) and found.get("files") == min(files, spec.rows)
            and found.get("row_group_rows") == row_group_rows):
        return {**found, "reused": True}
    return {**write_logits_table(out_dir, spec, files, row_group_rows, quiet=quiet), "reused": False}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", metavar="OUT_DIR")
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--row-group-rows", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.rows < 1 or args.files < 1 or args.row_group_rows < 1 or args.classes < 2:
        ap.error("--rows, --files and --row-group-rows must be at least 1 and --classes at least 2")
    spec = LogitsSpec(args.rows, args.classes, args.seed)
    s = ensure_logits_table(args.out_dir, spec, args.files, args.row_group_rows, quiet=args.quiet)
    print(f"{args.out_dir}: {spec.rows:,} rows in {s['files']} files, {s['bytes'] / 2**20:,.1f} MiB"
          + (" (reused)" if s["reused"] else f", {s['seconds']:.1f} s"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
