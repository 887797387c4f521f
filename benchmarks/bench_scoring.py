#!/usr/bin/env python
"""Batch scoring throughput (issue 12, target 1): ``calengine score`` against the plain loop a user
could write with the same libraries, side by side in one run.

For a single-member model (gaussian_nb + sigmoid, ``--mode refit``) and the default 5-member ensemble
(gaussian_nb + isotonic, cv 5), both fitted on the generated table, it times:

* **engine**: ``calengine score MODEL TABLE --output OUT`` (embedded Dask, both cores), launch to
  exit, peak RSS;
* **plain loop** (the baseline): one process that loads the same model and, file by file, runs
  ``ParquetFile.iter_batches`` -> ``model.predict_frame`` -> ``ParquetWriter`` (zstd, dictionary
  encoding only for the prediction column, as the engine writes), launch to exit.

Both include interpreter start, imports and model loading, so the ratio is what a user sees.  Prints
medians of ``--repeats`` runs (interleaved), rows/s and the ratio engine / loop, and writes
``results/scoring.{md,json}``.

    python benchmarks/bench_scoring.py [--rows 10000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402
import gen_table as G  # noqa: E402

REPO_ROOT = HERE.parent

PLAIN_LOOP = r"""
import glob, os, sys
import pyarrow as pa, pyarrow.parquet as pq
from calengine.model.artifact import load_model
model_dir, table, out = sys.argv[1:4]
model = load_model(model_dir)
cols = list(model.encoder.input_columns)
os.makedirs(out, exist_ok=True)
for i, f in enumerate(sorted(glob.glob(os.path.join(table, "*.parquet")))):
    writer = None
    for batch in pq.ParquetFile(f).iter_batches(batch_size=65536, columns=cols):
        scored = pa.Table.from_pandas(model.predict_frame(batch.to_pandas()), preserve_index=False)
        writer = writer or pq.ParquetWriter(os.path.join(out, f"part-{i:05d}.parquet"), scored.schema,
                                            compression="zstd", use_dictionary=["prediction"])
        writer.write_table(scored)
    writer.close()
"""

MODELS = {
    "1 member (gaussian_nb + sigmoid, refit)": ["--learner", "gaussian_nb", "--method", "sigmoid", "--mode", "refit"],
    "5 members (gaussian_nb + isotonic, cv 5)": ["--learner", "gaussian_nb", "--method", "isotonic"],
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--cols", type=int, default=20)
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work-dir", default="/tmp/calengine-bench")
    ap.add_argument("--results-dir", default=str(HERE / "results"))
    ap.add_argument("--no-write", action="store_true", help="print only; write no result files")
    args = ap.parse_args(argv)

    work = Path(args.work_dir)
    table = work / "tables" / G.table_name("train", args.rows, args.cols, args.files, args.seed)
    G.ensure_table(table, G.TableSpec(args.rows, args.cols, args.seed), args.files, min(1_000_000, args.rows),
                   G.TRAIN_STREAM)
    calengine = [sys.executable, "-m", "calengine", "--quiet"]
    results = []
    for label, fit_args in MODELS.items():
        model = work / "scoring-models" / f"{'single' if 'refit' in fit_args else 'ensemble'}-{table.name}"
        if not (model / "manifest.json").exists():
            shutil.rmtree(model, ignore_errors=True)
            subprocess.run([*calengine, "fit", str(table), "--target", "y", *fit_args, "--output", str(model)],
                           check=True)
        engine, loop = [], []
        for _ in range(args.repeats):
            for kind, runs in (("engine", engine), ("loop", loop)):
                out = work / f"scored-{kind}"
                shutil.rmtree(out, ignore_errors=True)
                cmd = ([*calengine, "score", str(model), str(table), "--output", str(out)] if kind == "engine"
                       else [sys.executable, "-c", PLAIN_LOOP, str(model), str(table), str(out)])
                r = C.run_measured(cmd, timeout=3600)
                if r.returncode != 0:
                    raise SystemExit(f"{kind} failed: {r.stderr[-2000:]}")
                runs.append(r)
        e = C.median([r.wall_s for r in engine])
        p = C.median([r.wall_s for r in loop])
        results.append({
            "model": label, "rows": args.rows,
            "engine_s": e, "loop_s": p, "ratio_engine_over_loop": C.ratio(e, p),
            "engine_rows_per_s": args.rows / e, "loop_rows_per_s": args.rows / p,
            "engine_cpu_s": C.median([r.rusage["user_s"] + r.rusage["sys_s"] for r in engine]),
            "loop_cpu_s": C.median([r.rusage["user_s"] + r.rusage["sys_s"] for r in loop]),
            "engine_peak_rss_mib": max(r.rusage["maxrss_bytes"] for r in engine) / C.MiB,
            "loop_peak_rss_mib": max(r.rusage["maxrss_bytes"] for r in loop) / C.MiB,
            "engine_runs": [r.wall_s for r in engine], "loop_runs": [r.wall_s for r in loop],
        })
    rows = [[d["model"], C.fmt(d["engine_s"]), f"{d['engine_rows_per_s'] / 1e6:.2f}M", C.fmt(d["engine_cpu_s"], 1),
             C.fmt(d["loop_s"]), f"{d['loop_rows_per_s'] / 1e6:.2f}M", C.fmt(d["loop_cpu_s"], 1),
             f"**{C.fmt(d['ratio_engine_over_loop'])}**", f"{d['engine_peak_rss_mib']:.0f} / {d['loop_peak_rss_mib']:.0f}"]
            for d in results]
    md = "\n".join([
        "# Batch scoring: `calengine score` against a plain loop",
        "",
        f"Command: `{C.command_line()}`; table: {args.rows:,} rows × {args.cols} float32 columns in {args.files}"
        " files (`gen_table.py`); medians of interleaved runs, launch to exit (imports and model loading"
        " included on both sides).  Plain loop: one process, `iter_batches` → `predict_frame` → zstd"
        " `ParquetWriter`, file by file.",
        "",
        C.markdown_table(["model", "engine s", "engine rows/s", "engine CPU s", "loop s", "loop rows/s",
                          "loop CPU s", "engine / loop", "peak RSS MiB engine / loop"], rows),
        "",
        f"Machine: {C.machine_info()}.  Load before: {C.load_snapshot()}.  Git: {C.git_commit(REPO_ROOT)}.",
    ])
    print(md)
    if not args.no_write:
        for path in C.write_results(args.results_dir, "scoring", {"results": results, "command": C.command_line()}, md):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
