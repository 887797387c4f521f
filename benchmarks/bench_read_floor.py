#!/usr/bin/env python
"""Fits of a learner near the read floor (issue 43 §2): ``calengine fit`` against reading the columns it
uses, once per pass the fit needs, in the same run.

What is measured
----------------
A generated table (``gen_table.py``: ``--rows`` rows, default 10M, of ``--cols`` float32 features and an
int8 target ``y``, in ``--files`` files, default 10) and two fits, each a fresh process from launch to
exit:

* ``hold-out``: ``calengine fit FILES_0..7 --calibration-data FILES_8..9 --target y --learner
  gaussian_nb --method isotonic`` (the learner on the first 80 % of the files, isotonic on the
  learner's scores of the rest).  It needs one pass over the table: the learner's statistics of the
  training files and the scores of the calibration files.  Target: at most 3x its floor.
* ``5-fold``: ``calengine fit TABLE --target y --learner gaussian_nb --method isotonic`` (5 seeded
  folds, 5 members).  It needs two passes: the learners' statistics, then every row's held-out score.
  Target: at most 4x its floor.

The floor of a fit is a process that imports pyarrow and reads every file of the table with
``pyarrow.parquet.read_table(file, columns=[x0.., y])`` once per pass the fit needs (one for the
hold-out fit, two for the 5-fold fit), from launch to exit.  The runs are interleaved (floor, fit,
floor, fit, ... each round), ``--repeats`` rounds, medians reported; peak RSS per process and CPU
seconds (user + system of the process tree, from ``wait4``) beside the wall.

``--baseline PYTHON`` runs each fit a third time in every round with another installation
(``PYTHON -m calengine``, e.g. a venv holding the commit before a change), so a change is measured
against a named baseline in the same rounds on the same (shared) machine.

A test-sized version runs in ``tests/contract/test_benchmarks_smoke.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

ROOT = _common.REPO
#: fit -> (passes over the table it needs, target ratio)
FITS = {"hold-out": (1, 3.0), "5-fold": (2, 4.0)}

READ = r'''
import sys
import pyarrow.parquet as pq

passes, columns, files = int(sys.argv[1]), sys.argv[2].split(","), sys.argv[3:]
rows = 0
for _ in range(passes):
    for f in files:
        rows += pq.read_table(f, columns=columns).num_rows
print(f"read {rows} rows in {passes} pass(es) of {len(files)} files", file=sys.stderr)
'''


def _gen():
    spec = importlib.util.spec_from_file_location("_bench_gen_table", Path(__file__).with_name("gen_table.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod



def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=lambda s: int(float(s)), default=10_000_000)
    ap.add_argument("--cols", type=int, default=20)
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--row-group-rows", type=int, default=1_000_000)
    ap.add_argument("--fits", type=lambda s: [f for f in s.split(",") if f], default=list(FITS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--sample-interval", type=float, default=0.1)
    ap.add_argument("--work-dir", default="/tmp/calengine-bench/read_floor")
    ap.add_argument("--results-dir", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--name", default="read_floor")
    ap.add_argument("--baseline", metavar="PYTHON",
                    help="also run each fit with this interpreter's installed calengine (PYTHON -m calengine),"
                         " e.g. a venv of the commit before a change: a named baseline in the same rounds")
    ap.add_argument("--baseline-name", default="baseline", help="how the page names --baseline")
    args = ap.parse_args(argv)
    if sorted(set(args.fits) - set(FITS)) or args.repeats < 1 or args.files < 2:
        ap.error(f"--fits takes {','.join(FITS)}; --repeats at least 1; --files at least 2")
    env = _common.environment(ROOT)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    gen = _gen()
    spec = gen.TableSpec(rows=args.rows, cols=args.cols, seed=0)
    table = work / f"train-r{args.rows}-c{args.cols}-f{args.files}"
    gen.ensure_table(table, spec, files=args.files, row_group_rows=args.row_group_rows, quiet=True)
    files = sorted(str(p) for p in table.glob("part-*.parquet"))
    n_train = max(1, round(0.8 * len(files)))
    columns = [f"x{j}" for j in range(args.cols)] + ["y"]
    read_script = work / "read_floor.py"
    read_script.write_text(READ)
    cal = _common.calengine_command()
    model = work / "model"
    commands = {
        "hold-out": [*cal, "fit", *_glob_args(table, files[:n_train]), "--calibration-data",
                     *_glob_args(table, files[n_train:]), "--target", "y", "--learner", "gaussian_nb",
                     "--method", "isotonic", "--output", str(model), "--overwrite", "--quiet"],
        "5-fold": [*cal, "fit", str(table), "--target", "y", "--learner", "gaussian_nb", "--method", "isotonic",
                   "--output", str(model), "--overwrite", "--quiet"],
    }
    sides = ["floor", "fit"] + (["baseline"] if args.baseline else [])
    runs: dict[str, dict[str, list[dict]]] = {f: {side: [] for side in sides} for f in args.fits}
    for rnd in range(args.repeats):
        for fit in args.fits:
            passes = FITS[fit][0]
            order = sides if rnd % 2 == 0 else sides[::-1]
            for side in order:
                if side == "floor":
                    cmd = [sys.executable, str(read_script), str(passes), ",".join(columns), *files]
                elif side == "fit":
                    cmd = commands[fit]
                else:  # the same command line, another installation
                    cmd = [args.baseline, "-m", "calengine", *commands[fit][len(cal):]]
                r = _common.run_measured(cmd, cwd=str(work), timeout=args.timeout, interval=args.sample_interval)
                if r.returncode != 0:
                    sys.stderr.write(f"{fit} {side} failed with exit {r.returncode}:\n{r.stderr[-3000:]}\n")
                    return 1
                runs[fit][side].append({"round": rnd, "wall_s": r.wall_s, "cpu_s": r.rusage["user_s"] + r.rusage["sys_s"],
                                        "peak_rss": max(r.rss.get("client") or 0, r.rusage["maxrss_bytes"]),
                                        "load1": r.load_before["load1"]})
                print(f"round {rnd + 1}/{args.repeats} {fit:<9} {side:<6} {r.wall_s:7.2f} s"
                      f" cpu {runs[fit][side][-1]['cpu_s']:6.2f} s", flush=True)
    results = []
    for fit in args.fits:
        row = {"name": fit, "passes": FITS[fit][0], "target": FITS[fit][1]}
        for side in sides:
            rs = runs[fit][side]
            row[side] = {"wall_s": _common.median([r["wall_s"] for r in rs]),
                         "wall_range_s": [min(r["wall_s"] for r in rs), max(r["wall_s"] for r in rs)],
                         "cpu_s": _common.median([r["cpu_s"] for r in rs]),
                         "peak_rss_mib": max(r["peak_rss"] for r in rs) / _common.MiB}
        row["ratio"] = _common.ratio(row["fit"]["wall_s"], row["floor"]["wall_s"])
        row["cpu_ratio"] = _common.ratio(row["fit"]["cpu_s"], row["floor"]["cpu_s"])
        row["met"] = row["ratio"] is not None and row["ratio"] <= row["target"]
        if args.baseline:
            row["baseline"]["ratio"] = _common.ratio(row["baseline"]["wall_s"], row["floor"]["wall_s"])
            row["baseline"]["cpu_ratio"] = _common.ratio(row["baseline"]["cpu_s"], row["floor"]["cpu_s"])
        results.append(row)
    loads = [r["load1"] for f in runs.values() for rs in f.values() for r in rs]
    md = ["# Learner fits against the read floor", "",
          f"Table: {args.rows:,} rows x {args.cols} float32 features + `y`, {len(files)} files"
          f" (`gen_table.py`, seed 0); hold-out: gaussian_nb on {n_train} files, isotonic on"
          f" {len(files) - n_train} (`--calibration-data`); 5-fold: the whole table. Floor: `pyarrow.parquet.read_table`"
          f" of the {len(columns)} columns of every file, once per pass the fit needs, in its own process."
          f" {args.repeats} interleaved rounds, medians, launch to exit. Target (issue 43 §2): hold-out ≤ 3x,"
          " 5-fold ≤ 4x.", "",
          _common.markdown_table(
              ["fit", "passes", "fit s", "floor s", "ratio", "target", "fit CPU s", "floor CPU s", "CPU ratio",
               "fit peak MiB", "floor peak MiB", "met"],
              [[r["name"], str(r["passes"]), r["fit"]["wall_s"], r["floor"]["wall_s"], r["ratio"], f"≤ {r['target']:g}",
                r["fit"]["cpu_s"], r["floor"]["cpu_s"], r["cpu_ratio"], f"{r['fit']['peak_rss_mib']:.0f}",
                f"{r['floor']['peak_rss_mib']:.0f}", r["met"]] for r in results],
              ["<", ">", ">", ">", ">", "<", ">", ">", ">", ">", ">", "<"]), "",
          "Wall ranges (min-max over rounds): " + "; ".join(
              f"{r['name']} fit {r['fit']['wall_range_s'][0]:.2f}-{r['fit']['wall_range_s'][1]:.2f} s,"
              f" floor {r['floor']['wall_range_s'][0]:.2f}-{r['floor']['wall_range_s'][1]:.2f} s" for r in results)
          + f". 1-minute load before the runs: {min(loads):.1f}-{max(loads):.1f}."]
    if args.baseline:
        md += ["", f"### The same fits with {args.baseline_name} (`--baseline`'s `python -m calengine`), in the same rounds", "",
               _common.markdown_table(
                   ["fit", f"{args.baseline_name} s", "ratio", f"{args.baseline_name} CPU s", "CPU ratio",
                    f"{args.baseline_name} peak MiB", f"fit / {args.baseline_name} (wall)",
                    f"fit / {args.baseline_name} (CPU)"],
                   [[r["name"], r["baseline"]["wall_s"], r["baseline"]["ratio"], r["baseline"]["cpu_s"],
                     r["baseline"]["cpu_ratio"], f"{r['baseline']['peak_rss_mib']:.0f}",
                     _common.ratio(r["fit"]["wall_s"], r["baseline"]["wall_s"]),
                     _common.ratio(r["fit"]["cpu_s"], r["baseline"]["cpu_s"])] for r in results],
                   ["<", ">", ">", ">", ">", ">", ">", ">"])]
    data = {"environment": env, "config": vars(args), "commands": commands, "results": results, "runs": runs}
    for path in _common.write_results(args.results_dir, args.name, data, "\n".join(md)):
        print(f"wrote {path}")
    print("\n".join(md))
    return 0


def _glob_args(table: Path, files: list[str]) -> list[str]:
    """Some files of ``table`` as the one DATA argument ``calengine fit`` takes: a glob with a character
    class over the files' last digit (``part-0000[0-7]``-style)."""
    names = [Path(f).name for f in files]
    stems = [n[len("part-"):-len(".parquet")] for n in names]
    if len(stems) == 1:
        return [files[0]]
    prefix = os.path.commonprefix(stems)
    tails = [s[len(prefix):] for s in stems]
    if all(len(t) == 1 for t in tails):
        return [str(table / f"part-{prefix}[{''.join(tails)}].parquet")]
    raise SystemExit(f"cannot name {len(files)} files of {table} with one glob; use --files 10 or fewer per digit")


if __name__ == "__main__":
    sys.exit(main())
