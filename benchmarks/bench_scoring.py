#!/usr/bin/env python
"""Batch scoring throughput (issue 12, target 1): ``calengine score`` against the plain loop a user
could write with the same libraries, side by side in one run.

For a single-member model (gaussian_nb + sigmoid, ``--mode refit``) and the default 5-member ensemble
(gaussian_nb + isotonic, cv 5), both fitted on the generated table, it times:

* **engine**: ``calengine score MODEL TABLE --output OUT`` (no ``--cluster``: its chunk tasks on a
  thread per core), launch to exit, peak RSS;
* **plain loop** (the baseline): one process that loads the same model and, file by file, runs
  ``ParquetFile.iter_batches`` -> ``model.predict_frame`` -> ``ParquetWriter`` (zstd, dictionary
  encoding only for the prediction column, as the engine writes), launch to exit.

Both include interpreter start, imports and model loading, so the ratio is what a user sees.  Prints
medians of ``--repeats`` runs (interleaved), rows/s and the ratio engine / loop, and writes
``results/scoring.{md,json}``.

A fixed start (interpreter, imports, model: about 1 s here, 2 s while it started an embedded Dask
scheduler and imported scipy.special for the sigmoid) weighs on a 10M-row
table but not on a 100M-row one, so ``--rows-list`` scores several sizes with the same models (fitted
on ``--model-rows``), the peak RSS per size shows whether memory stays flat, and a ``--start-rows``
file times the start alone: *steady* rows/s = (rows − start rows) / (time − start time).

    python benchmarks/bench_scoring.py [--rows-list 10000000,100000000] [--models single] [--repeats 3]
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


def _fit_model(calengine, table: Path, model: Path, fit_args: list[str]) -> None:
    if not (model / "manifest.json").exists():
        shutil.rmtree(model, ignore_errors=True)
        subprocess.run([*calengine, "fit", str(table), "--target", "y", *fit_args, "--output", str(model)],
                       check=True)


def _time_both(calengine, model: Path, table: Path, work: Path, repeats: int) -> dict[str, list]:
    """``repeats`` interleaved engine / plain-loop runs scoring ``table``."""
    runs: dict[str, list] = {"engine": [], "loop": []}
    for _ in range(repeats):
        for kind in ("engine", "loop"):
            out = work / f"scored-{kind}"
            shutil.rmtree(out, ignore_errors=True)
            cmd = ([*calengine, "score", str(model), str(table), "--output", str(out)] if kind == "engine"
                   else [sys.executable, "-P", "-c", PLAIN_LOOP, str(model), str(table), str(out)])
            r = C.run_measured(cmd, timeout=3600)
            if r.returncode != 0:
                raise SystemExit(f"{kind} failed: {r.stderr[-2000:]}")
            runs[kind].append(r)
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=None, help="one table size (same as --rows-list N)")
    ap.add_argument("--rows-list", default="10000000",
                    help="comma-separated table sizes scored with the same model, e.g. 10000000,100000000")
    ap.add_argument("--model-rows", type=int, default=None,
                    help="rows of the table the models are fitted on (default: the smallest size)")
    ap.add_argument("--models", default="single,ensemble", help="which models: single, ensemble or both")
    ap.add_argument("--start-rows", type=int, default=10_000,
                    help="a one-file table this small times the fixed cost of start-up (imports, model, "
                         "cluster), from which the steady rows/s of each size follow; 0 skips it")
    ap.add_argument("--cols", type=int, default=20)
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work-dir", default="/tmp/calengine-bench")
    ap.add_argument("--results-dir", default=str(HERE / "results"))
    ap.add_argument("--no-write", action="store_true", help="print only; write no result files")
    args = ap.parse_args(argv)

    sizes = [args.rows] if args.rows is not None else [int(s) for s in args.rows_list.split(",") if s.strip()]
    chosen = [m.strip() for m in args.models.split(",") if m.strip()]
    if not sizes or any(s < 1 for s in sizes) or not set(chosen) <= {"single", "ensemble"} or not chosen:
        raise SystemExit("error: --rows-list needs positive sizes and --models single and/or ensemble")
    work = Path(args.work_dir)

    def table_of(rows: int, files: int) -> Path:
        table = work / "tables" / G.table_name("train", rows, args.cols, files, args.seed)
        G.ensure_table(table, G.TableSpec(rows, args.cols, args.seed), files, min(1_000_000, rows), G.TRAIN_STREAM)
        return table

    model_rows = args.model_rows or min(sizes)
    model_table = table_of(model_rows, args.files)
    calengine = [sys.executable, "-P", "-m", "calengine", "--quiet"]
    results = []
    for label, fit_args in MODELS.items():
        kind = "single" if "refit" in fit_args else "ensemble"
        if kind not in chosen:
            continue
        model = work / "scoring-models" / f"{kind}-{model_table.name}"
        _fit_model(calengine, model_table, model, fit_args)
        start = None
        if args.start_rows:
            runs = _time_both(calengine, model, table_of(args.start_rows, 1), work, args.repeats)
            start = {k: C.median([r.wall_s for r in v]) for k, v in runs.items()}
        for rows in sizes:
            runs = _time_both(calengine, model, table_of(rows, args.files), work, args.repeats)
            engine, loop = runs["engine"], runs["loop"]
            e = C.median([r.wall_s for r in engine])
            p = C.median([r.wall_s for r in loop])

            def steady(t: float, k: str) -> float | None:
                # rows per second once started: the start table's rows and time taken off
                if start is None or t <= start[k]:
                    return None
                return (rows - args.start_rows) / (t - start[k])

            results.append({
                "model": label, "rows": rows, "model_fitted_on_rows": model_rows,
                "engine_s": e, "loop_s": p, "ratio_engine_over_loop": C.ratio(e, p),
                "engine_rows_per_s": rows / e, "loop_rows_per_s": rows / p,
                "start_engine_s": start and start["engine"], "start_loop_s": start and start["loop"],
                "engine_steady_rows_per_s": steady(e, "engine"), "loop_steady_rows_per_s": steady(p, "loop"),
                "engine_cpu_s": C.median([r.rusage["user_s"] + r.rusage["sys_s"] for r in engine]),
                "loop_cpu_s": C.median([r.rusage["user_s"] + r.rusage["sys_s"] for r in loop]),
                "engine_peak_rss_mib": max(r.rusage["maxrss_bytes"] for r in engine) / C.MiB,
                "loop_peak_rss_mib": max(r.rusage["maxrss_bytes"] for r in loop) / C.MiB,
                "engine_runs": [r.wall_s for r in engine], "loop_runs": [r.wall_s for r in loop],
            })

    def mrate(v):
        return "—" if v is None else f"{v / 1e6:.2f}M"

    rows = [[d["model"], f"{d['rows']:,}", C.fmt(d["engine_s"]), f"{d['engine_rows_per_s'] / 1e6:.2f}M",
             mrate(d["engine_steady_rows_per_s"]), C.fmt(d["engine_cpu_s"], 1), C.fmt(d["loop_s"]),
             f"{d['loop_rows_per_s'] / 1e6:.2f}M", mrate(d["loop_steady_rows_per_s"]), C.fmt(d["loop_cpu_s"], 1),
             f"**{C.fmt(d['ratio_engine_over_loop'])}**", f"{d['engine_peak_rss_mib']:.0f} / {d['loop_peak_rss_mib']:.0f}"]
            for d in results]
    starts = sorted({(d["model"], d["start_engine_s"], d["start_loop_s"]) for d in results if d["start_engine_s"]})
    md = "\n".join([
        "# Batch scoring: `calengine score` against a plain loop",
        "",
        f"Command: `{C.command_line()}`; tables: {', '.join(f'{s:,}' for s in sizes)} rows × {args.cols} float32"
        f" columns in {args.files} files (`gen_table.py`), models fitted on the {model_table.name} table;"
        " medians of interleaved runs, launch to exit (imports and model loading included on both sides)."
        "  Plain loop: one process, `iter_batches` → `predict_frame` → zstd `ParquetWriter`, file by file."
        + (f"  *Steady* rows/s leave out the fixed start: (rows − {args.start_rows:,}) / (time − time to score a"
           f" {args.start_rows:,}-row file)." if args.start_rows else ""),
        "",
        C.markdown_table(["model", "rows", "engine s", "engine rows/s", "engine steady", "engine CPU s", "loop s",
                          "loop rows/s", "loop steady", "loop CPU s", "engine / loop", "peak RSS MiB engine / loop"],
                         rows),
        "",
        *([f"Start (a {args.start_rows:,}-row file, launch to exit): "
           + "; ".join(f"{m}: engine {C.fmt(e)} s, loop {C.fmt(lp)} s" for m, e, lp in starts) + ".", ""]
          if starts else []),
        C.machine_line(REPO_ROOT),
    ])
    C.publish(md, results, "scoring", args.results_dir, write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
