"""``evaluate --prior-shift B``: the bootstrap of the EM prior estimate, before and after vectorising
it (issue 42 §7: at the documented maximum of 10,000 replicates, 1M rows took about an hour; 200
replicates took 77 s).

Side by side in one process, the baseline loaded from git (``--old-rev``, the last commit before the
change: the code that was really there, not a copy):

* **kernel** -- the replicates' function on a sample of ``--sample-rows`` posteriors (200,000, what
  ``evaluate`` resamples from on any table of more rows), two shapes of model: continuous
  probabilities (a sigmoid's) and a step map's (probabilities rounded to 0.01: every row one of ~100
  values).  The old per-replicate loop on ``--old-replicates`` seeds, the new vectorised blocks on the
  same seeds started as before (from the training priors: the same estimates up to rounding, the
  largest difference is reported) and started at the whole sample's estimate (what ``evaluate`` does
  now: fewer EM steps to the same maximum, within ``tol``), then on ``--kernel-replicates`` seeds.  Medians of
  ``--repeats`` rounds, interleaved.
* **end to end** -- ``prior_shift_table`` (what ``evaluate --prior-shift`` runs after the metrics) on a
  generated table of ``--rows`` rows: a score column whose model was calibrated at priors 0.5/0.5,
  scored on rows drawn at 0.2/0.8, with two threads (evaluate's default without ``--cluster``); the
  old function with ``--old-replicates-e2e`` replicates, the new one with the same and with
  ``--replicates``.  Then, unless ``--no-cli``, the command a user runs, ``calengine evaluate
  --prior-shift B --progress`` of the same table and model, with its wall time and the peak RSS of the
  process.

    python benchmarks/bench_prior_shift.py [--rows 1000000] [--replicates 10000] [--repeats 3]

Writes ``benchmarks/results/prior_shift.md`` and ``prior_shift.json`` (``--out`` for another directory).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    environment,
    environment_markdown,
    fmt,
    markdown_table,
    median,
    ratio,
    run_measured,
    write_results,
)

ROOT = Path(__file__).resolve().parents[1]
#: the last commit before the replicates were vectorised: main's house step (issue 39), where the
#: per-replicate loop of issue 42's report had moved to calengine/metrics/prior_shift.py (the results
#: page of 6bddbd3 loaded the same loop from calengine/fit/label_shift.py at c0fc87e)
OLD_REV = "64ce422"
OLD_PATH = "calengine/metrics/prior_shift.py"


def load_old_module(rev: str) -> types.ModuleType:
    """``calengine/metrics/prior_shift.py`` as of ``rev``, imported beside the installed package (its
    relative imports resolve to the installed modules, which that change did not touch)."""
    src = subprocess.run(["git", "show", f"{rev}:{OLD_PATH}"], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout
    name = "calengine.metrics._prior_shift_old"
    mod = types.ModuleType(name)
    mod.__package__ = "calengine.metrics"
    mod.__file__ = f"<git {rev}:{OLD_PATH}>"
    sys.modules[name] = mod  # dataclasses look their module up
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    return mod


def posteriors(n: int, seed: int, steps: bool) -> np.ndarray:
    """``n`` two-class posteriors of a model calibrated at priors 0.5/0.5 on rows drawn at 0.2/0.8."""
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.8
    s = rng.normal(size=n) + np.where(y, 1.0, -1.0)
    p = 1.0 / (1.0 + np.exp(-2.0 * s))
    if steps:
        p = np.round(p, 2)
    return np.column_stack([1.0 - p, p])


def kernel(old, args) -> list[dict]:
    from calengine.metrics import prior_shift as new
    from calengine.methods import label_shift as ls

    train = np.array([0.5, 0.5])
    out = []
    for shape in ("continuous", "steps"):
        P = posteriors(args.sample_rows, args.seed, shape == "steps")
        start = ls.em_priors(P, train).priors
        few = np.random.SeedSequence(args.seed).spawn(args.old_replicates)
        many = np.random.SeedSequence(args.seed).spawn(args.kernel_replicates)
        times = {"old": [], "new (cold start)": [], "new": [], "new, all replicates": []}
        cpu = {"old": [], "new": []}
        for _ in range(args.repeats):
            t, c = time.perf_counter(), time.process_time()
            a = old._em_replicates(P, train, few, ls.DEFAULT_TOL, ls.DEFAULT_MAX_ITER)
            times["old"].append((time.perf_counter() - t) / len(few))
            cpu["old"].append((time.process_time() - c) / len(few))
            t = time.perf_counter()
            b = new._em_replicates(P, train, few, ls.DEFAULT_TOL, ls.DEFAULT_MAX_ITER)
            times["new (cold start)"].append((time.perf_counter() - t) / len(few))
            t, cc = time.perf_counter(), time.process_time()
            c = new._em_replicates(P, train, few, ls.DEFAULT_TOL, ls.DEFAULT_MAX_ITER, start=start)
            times["new"].append((time.perf_counter() - t) / len(few))
            cpu["new"].append((time.process_time() - cc) / len(few))
            t = time.perf_counter()
            new._em_replicates(P, train, many, ls.DEFAULT_TOL, ls.DEFAULT_MAX_ITER, start=start)
            times["new, all replicates"].append((time.perf_counter() - t) / len(many))
        med = {k: median(v) for k, v in times.items()}
        rec = {"shape": shape, "sample_rows": args.sample_rows, "distinct_rows": int(new.distinct_rows(P)[0].shape[0]),
               "old_replicates": args.old_replicates, "replicates": args.kernel_replicates, "seconds_per_replicate": med,
               "cpu_seconds_per_replicate": {k: median(v) for k, v in cpu.items()},
               "max_diff_cold": float(np.max(np.abs(a - b))), "max_diff_warm": float(np.max(np.abs(a - c))),
               "speedup": ratio(med["old"], med["new"]), "speedup_cold": ratio(med["old"], med["new (cold start)"])}
        out.append(rec)
        print(f"kernel {shape}: old {fmt(1000 * med['old'], 1)} ms/replicate, new {fmt(1000 * med['new'], 1)}"
              f" ({fmt(rec['speedup'], 1)}x; cold start {fmt(rec['speedup_cold'], 1)}x), max |diff| cold"
              f" {rec['max_diff_cold']:.1e}, warm {rec['max_diff_warm']:.1e}", flush=True)
    return out


def make_table(folder: Path, rows: int, seed: int) -> tuple[Path, Path]:
    """A calibration table (priors 0.5/0.5, 50,000 rows), the evaluated table (``rows`` rows at 0.2/0.8,
    in row groups of 100,000) and a sigmoid model of the calibration table's score column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import calengine

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)

    def table(n, positive):
        y = (rng.random(n) < positive).astype(np.int64)
        return pa.table({"s": rng.normal(size=n) + np.where(y == 1, 1.0, -1.0), "y": y})

    data = folder / f"shifted_{rows}.parquet"
    if not data.exists():
        pq.write_table(table(rows, 0.8), data, row_group_size=100_000)
    model = folder / "model"
    if not (model / "manifest.json").exists():
        calengine.calibrate_scores(table(50_000, 0.5).to_pandas(), "y", "s", score_kind="decision", method="sigmoid",
                                   output=model, overwrite=True)
    return data, model


def end_to_end(old, args) -> list[dict]:
    import calengine
    from calengine.metrics import prior_shift as new
    from calengine.runtime.thread_client import ThreadClient

    data, model_dir = make_table(Path(args.work_dir), args.rows, args.seed)
    model = calengine.load_model(model_dir)
    runs = [("old", old.prior_shift_table, args.old_replicates_e2e),
            ("new", new.prior_shift_table, args.old_replicates_e2e),
            ("new", new.prior_shift_table, args.replicates)]
    out = []
    for name, fn, B in runs:
        walls, cpus, result = [], [], None
        for _ in range(args.repeats if B <= args.old_replicates_e2e else 1):
            with ThreadClient(2) as client:
                t, c = time.perf_counter(), time.process_time()
                result = fn(client, model, [str(data)], "y", replicates=B, seed=args.seed)
                walls.append(time.perf_counter() - t)
                cpus.append(time.process_time() - c)  # every thread of this process: the machine is shared
        rec = {"code": name, "replicates": B, "rows": args.rows, "wall_s": median(walls), "walls_s": walls,
               "cpu_s": median(cpus), "estimated": result["estimated"], "low": result["low"], "high": result["high"]}
        out.append(rec)
        print(f"end to end {name}, {B} replicates on {args.rows:,} rows: {fmt(rec['wall_s'], 1)} s ({fmt(rec['cpu_s'], 1)}"
              f" CPU s), interval {[round(v, 5) for v in rec['low']]} .. {[round(v, 5) for v in rec['high']]}", flush=True)
    if not args.no_cli:
        cmd = [sys.executable, "-P", "-m", "calengine", "evaluate", str(model_dir), str(data), "--target", "y",
               "--prior-shift", str(args.replicates), "--seed", str(args.seed), "--progress", "--json"]
        run = run_measured(cmd, timeout=args.timeout)
        rec = {"code": "new, calengine evaluate", "replicates": args.replicates, "rows": args.rows,
               "wall_s": run.wall_s, "returncode": run.returncode, "timed_out": run.timed_out,
               "peak_rss_mib": {"client": round((run.rss.get("client") or 0) / 2**20, 1)},
               "cpu_s": round(run.rusage["user_s"] + run.rusage["sys_s"], 1)}
        if run.returncode == 0:
            import json

            shift = json.loads(run.stdout)["models"][0]["prior_shift"] if "models" in json.loads(run.stdout) \
                else json.loads(run.stdout)["prior_shift"]
            rec.update(estimated=shift["estimated"], low=shift["low"], high=shift["high"],
                       same_as_in_process=(shift["low"], shift["high"]) == (out[-1]["low"], out[-1]["high"]))
        out.append(rec)
        print(f"calengine evaluate --prior-shift {args.replicates} on {args.rows:,} rows: {fmt(rec['wall_s'], 1)} s,"
              f" {rec['cpu_s']} CPU s, exit {rec['returncode']}, client peak RSS {rec['peak_rss_mib']['client']} MiB,"
              f" interval as in process: {rec.get('same_as_in_process')}", flush=True)
    return out


def report(env: dict, kern: list[dict], e2e: list[dict], args) -> str:
    lines = ["# `evaluate --prior-shift`: the EM bootstrap replicates, per-replicate loop vs vectorised blocks", "",
             *environment_markdown(env), f"* baseline: `{OLD_PATH}` at {args.old_rev}, loaded from git", "",
             "## Kernel: seconds per replicate (median of rounds)", ""]
    rows = []
    for r in kern:
        s = r["seconds_per_replicate"]
        c = r["cpu_seconds_per_replicate"]
        rows.append([r["shape"], f"{r['sample_rows']:,} ({r['distinct_rows']:,} distinct)", fmt(1000 * s["old"], 1),
                     fmt(1000 * s["new (cold start)"], 1), fmt(1000 * s["new"], 1), fmt(1000 * s["new, all replicates"], 1),
                     fmt(r["speedup"], 1), f"{fmt(1000 * c['old'], 1)} / {fmt(1000 * c['new'], 1)}",
                     f"{r['max_diff_cold']:.1e} / {r['max_diff_warm']:.1e}"])
    lines.append(markdown_table(
        ["posteriors", "sample rows", f"old ms ({args.old_replicates} seeds)", "new, cold start ms", "new ms",
         f"new ms ({args.kernel_replicates} seeds)", "old / new", "CPU ms old / new", "max diff cold / warm"], rows))
    lines += ["", "Cold start: from the training priors, as the old code (same estimates up to rounding). New:"
              " from the whole sample's estimate, as `evaluate` runs now (the same maxima to within `tol` = 1e-6).",
              "", "## End to end: `prior_shift_table` on the generated table (two threads)", ""]
    rows = [[r["code"], f"{r['rows']:,}", r["replicates"], fmt(r["wall_s"], 1), fmt(r.get("cpu_s"), 1),
             ", ".join(f"{k} {v}" for k, v in r["peak_rss_mib"].items()) if isinstance(r.get("peak_rss_mib"), dict) else "-"]
            for r in e2e]
    lines.append(markdown_table(["code", "rows", "replicates", "wall s (median)", "CPU s", "peak RSS MiB"], rows))
    lines += ["", "CPU s: of every thread of the process (the machine is shared: with other jobs running, the wall"
              " time is what the CPU time got of two cores)."]
    old = next((r for r in e2e if r["code"] == "old"), None)
    same = next((r for r in e2e if r["code"] == "new" and old and r["replicates"] == old["replicates"]), None)
    if old and same:
        lines += ["", f"Same {old['replicates']} replicates: old {fmt(old['wall_s'], 1)} s, new {fmt(same['wall_s'], 1)} s"
                  f" ({fmt(ratio(old['wall_s'], same['wall_s']), 1)}x; CPU {fmt(ratio(old['cpu_s'], same['cpu_s']), 1)}x);"
                  f" intervals old {old['low']} .. {old['high']}, new {same['low']} .. {same['high']}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample-rows", type=int, default=200_000, help="posteriors the kernel resamples (default 200,000)")
    ap.add_argument("--replicates", type=int, default=10_000, help="replicates of the new code (default 10,000)")
    ap.add_argument("--old-replicates", type=int, default=20, help="replicates of the old kernel per round")
    ap.add_argument("--kernel-replicates", type=int, default=1000, help="replicates of the new kernel's long round")
    ap.add_argument("--old-replicates-e2e", type=int, default=200, help="replicates of the old end-to-end run")
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the evaluated table")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--old-rev", default=OLD_REV)
    ap.add_argument("--no-cli", action="store_true", help="skip the calengine evaluate run")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--work-dir", default="/tmp/calengine-bench/prior_shift")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--name", default="prior_shift")
    args = ap.parse_args(argv)

    env = environment(ROOT)
    old = load_old_module(args.old_rev)
    kern = kernel(old, args)
    e2e = end_to_end(old, args)
    markdown = report(env, kern, e2e, args)
    print(markdown)
    for path in write_results(args.out, args.name, {"environment": env, "kernel": kern, "end_to_end": e2e}, markdown):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
