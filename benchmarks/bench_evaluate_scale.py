#!/usr/bin/env python
"""Evaluation in bounded memory (issue 22 §1): ``calengine evaluate`` beside ``calengine score`` of the
same table in one run, and beside the old in-memory accumulator path.

For a gaussian_nb + sigmoid model (``--mode refit``: continuous probabilities, so every row is its own
distinct value) fitted on the generated table, it times at each ``--rows-list`` size, launch to exit:

* **score**: ``calengine score MODEL TABLE --output OUT`` (the reference the issue sets: evaluate
  within 3x of it);
* **evaluate (ranges)**: ``calengine evaluate MODEL TABLE --target y --json`` with tables cut into
  score ranges spilled to the scratch directory (:mod:`calengine.metrics.range_eval`; the command does
  that from ``RANGED_MIN_ROWS`` = 1M rows on, the benchmark forces it at every size);
* **evaluate (accumulator)**: the same command with the range cut disabled
  (``range_eval.RANGED_MIN_ROWS`` set past the table), i.e. every chunk's tables merged in this
  process as before issue 22 §1: the named baseline.  Skipped above ``--baseline-max-rows``.
* **evaluate (before)**, with ``--before DIR``: the ranged command run by an earlier build, ``DIR``
  holding its ``calengine`` package (e.g. a copy of an install's ``site-packages/calengine`` made
  before changing the code), put first on ``PYTHONPATH``: a change's speed-up measured in one run.

Every command runs without ``--cluster`` (chunk tasks on a thread per core).  Medians of ``--repeats``
interleaved runs, the peak RSS of the process (``ru_maxrss`` of the tree: one process here), the CPU
seconds (user + system: on a shared machine they move less than the wall time) and the ratios
evaluate / score; it checks that the evaluate paths print the same JSON.  Writes
``results/evaluate_scale.{md,json}``.

    python benchmarks/bench_evaluate_scale.py [--rows-list 1000000,10000000] [--repeats 3] [--report]

``--report``: every evaluate also writes its HTML report (issue 22 §3), so the accumulator baseline is
the report as it was drawn before (whole tables in this process) and "ranges" the report drawn from
score ranges.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402
import gen_table as G  # noqa: E402

REPO_ROOT = HERE.parent

#: the evaluate command with the range cut forced on (``{min_rows}`` = 0: at any size) or off (the
#: accumulator path, the baseline); from 1M rows on the plain command cuts ranges as the first does
EVALUATE = r"""
import sys
from calengine.metrics import range_eval
range_eval.RANGED_MIN_ROWS = {min_rows}
from calengine.cli import entry
sys.argv = ["calengine", *sys.argv[1:]]
entry()
"""

FIT = ["--learner", "gaussian_nb", "--method", "sigmoid", "--mode", "refit"]


def _runs(calengine, model: Path, table: Path, work: Path, repeats: int, baseline: bool,
          before: str | None = None, report: bool = False) -> dict[str, list]:
    kinds = ["score", "ranges"] + (["accumulator"] if baseline else []) + (["before"] if before else [])
    runs: dict[str, list] = {k: [] for k in kinds}
    for _ in range(repeats):
        for kind in kinds:
            if kind == "score":
                out = work / "scored"
                shutil.rmtree(out, ignore_errors=True)
                cmd = [*calengine, "score", str(model), str(table), "--output", str(out)]
            else:
                args = ["--quiet", "evaluate", str(model), str(table), "--target", "y", "--json"]
                if report:  # the HTML report too, into a fresh directory per run
                    out = work / f"report-{kind}"
                    shutil.rmtree(out, ignore_errors=True)
                    args += ["--report", str(out)]
                script = EVALUATE.format(min_rows=1 << 62 if kind == "accumulator" else 0)
                cmd = [sys.executable, "-P", "-c", script, *args]
            env = None
            if kind == "before":
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [before, os.environ.get("PYTHONPATH")]))}
            r = C.run_measured(cmd, env=env, timeout=7200)
            if r.returncode != 0:
                raise SystemExit(f"{kind} failed: {r.stderr[-2000:]}")
            runs[kind].append(r)
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows-list", default="1000000,10000000", help="comma-separated table sizes")
    ap.add_argument("--model-rows", type=int, default=None, help="rows the model is fitted on (default: the smallest size)")
    ap.add_argument("--baseline-max-rows", type=int, default=10_000_000,
                    help="run the accumulator baseline up to this size (it needs ~0.4 GB per million rows)")
    ap.add_argument("--cols", type=int, default=20)
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work-dir", default="/tmp/calengine-bench")
    ap.add_argument("--results-dir", default=str(HERE / "results"))
    ap.add_argument("--before", default=None,
                    help="a directory holding an earlier build's calengine package: its ranged evaluate is timed too")
    ap.add_argument("--no-write", action="store_true", help="print only; write no result files")
    ap.add_argument("--report", action="store_true",
                    help="every evaluate also writes its HTML report (--report DIR): the accumulator baseline is"
                         " then what evaluate --report did before its figures were drawn from ranges; writes"
                         " results/evaluate_report.{md,json}")
    args = ap.parse_args(argv)
    if args.before and not (Path(args.before) / "calengine" / "__init__.py").is_file():
        raise SystemExit(f"error: --before {args.before} holds no calengine package; give the directory that"
                         " contains calengine/__init__.py")
    sizes = [int(s) for s in args.rows_list.split(",") if s.strip()]
    if not sizes or any(s < 1 for s in sizes):
        raise SystemExit("error: --rows-list needs positive sizes, e.g. 1000000,10000000")
    work = Path(args.work_dir)

    def table_of(rows: int) -> Path:
        table = work / "tables" / G.table_name("train", rows, args.cols, args.files, args.seed)
        G.ensure_table(table, G.TableSpec(rows, args.cols, args.seed), args.files, min(1_000_000, rows), G.TRAIN_STREAM)
        return table

    calengine = [sys.executable, "-P", "-m", "calengine", "--quiet"]
    model_table = table_of(args.model_rows or min(sizes))
    model = work / "evaluate-models" / f"single-{model_table.name}"
    if not (model / "manifest.json").exists():
        shutil.rmtree(model, ignore_errors=True)
        subprocess.run([*calengine, "fit", str(model_table), "--target", "y", *FIT, "--output", str(model)], check=True)
    results = []
    for rows in sizes:
        runs = _runs(calengine, model, table_of(rows), work, args.repeats, rows <= args.baseline_max_rows,
                     args.before, args.report)
        med = {k: C.median([r.wall_s for r in v]) for k, v in runs.items()}
        cpu = {k: C.median([r.rusage["user_s"] + r.rusage["sys_s"] for r in v]) for k, v in runs.items()}
        peak = {k: max(r.rusage["maxrss_bytes"] for r in v) / C.MiB for k, v in runs.items()}
        same = None
        others = [k for k in ("accumulator", "before") if k in runs]
        if others:
            first = json.loads(runs["ranges"][0].stdout)
            same = all(json.loads(runs[k][0].stdout) == first for k in others)
        results.append({
            "rows": rows, "wall_s": med, "cpu_s": cpu, "peak_rss_mib": peak,
            "ratio_ranges_over_score": C.ratio(med["ranges"], med["score"]),
            "ratio_accumulator_over_score": C.ratio(med.get("accumulator"), med["score"]),
            "ratio_before_over_score": C.ratio(med.get("before"), med["score"]),
            "cpu_ratio_ranges_over_score": C.ratio(cpu["ranges"], cpu["score"]),
            "same_json": same, "runs": {k: [r.wall_s for r in v] for k, v in runs.items()},
        })
    kinds = ("score", "ranges", "accumulator", "before")
    table_rows = [[f"{d['rows']:,}", C.fmt(d["wall_s"]["score"]), C.fmt(d["wall_s"]["ranges"]),
                   C.fmt(d["wall_s"].get("accumulator")), C.fmt(d["wall_s"].get("before")),
                   f"**{C.fmt(d['ratio_ranges_over_score'])}**", C.fmt(d["ratio_accumulator_over_score"]),
                   C.fmt(d["ratio_before_over_score"]), C.fmt(d["cpu_ratio_ranges_over_score"]),
                   " / ".join(f"{d['peak_rss_mib'][k]:.0f}" if k in d["peak_rss_mib"] else "—" for k in kinds),
                   {True: "yes", False: "**no**", None: "—"}[d["same_json"]]] for d in results]
    md = "\n".join([
        "# Evaluation in bounded memory: `calengine evaluate` beside `score`, and the old accumulator path"
        + (" (every evaluate with `--report`)" if args.report else ""),
        "",
        f"Command: `{C.command_line()}`; tables: {', '.join(f'{s:,}' for s in sizes)} rows × {args.cols} float32"
        f" columns in {args.files} files (`gen_table.py`), gaussian_nb + sigmoid (refit) fitted on {model_table.name};"
        " no `--cluster`; medians of interleaved runs, launch to exit; peak RSS and CPU seconds of the process"
        + (f"; before: the calengine package in `{args.before}`." if args.before else "."),
        "",
        C.markdown_table(["rows", "score s", "evaluate (ranges) s", "evaluate (accumulator) s", "evaluate (before) s",
                          "ranges / score", "accumulator / score", "before / score", "CPU s ranges / score",
                          "peak RSS MiB score / ranges / accumulator / before", "same JSON"],
                         table_rows),
        "",
        C.machine_line(REPO_ROOT),
    ])
    C.publish(md, results, "evaluate_report" if args.report else "evaluate_scale", args.results_dir,
              write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
