#!/usr/bin/env python
"""Issue 25's benchmark: ``calengine fit --by`` and ``calengine evaluate --by`` at scale, through the
commands, against the global fit and the plain ``evaluate``; and ``fit --method mcgrad --by`` against one
booster of the same settings on the same rows.

The table (:func:`bench_segment_fits.scale_table`): a probability column ``s`` (3 decimals), a segment
column ``seg`` of ``--segments`` string values drawn uniformly, and a 0/1 label whose rate is ``s`` plus
a per-segment offset (N(0, 0.1), clipped); one Parquet file, row groups of 100,000 rows.

For each size in ``--rows-list``, each command in its own process (``_common.run_measured``: wall,
user + system CPU of the process tree, peak RSS of the process sampled with its VmHWM, which holds
the embedded cluster's workers as threads), medians of ``--repeats``:

* ``fit T --target y --scores s --method isotonic`` (global) and the same ``--by seg``;
* ``evaluate GLOBAL T --target y``, ``evaluate GLOBAL T --target y --by seg`` (the segment report's
  own cost) and ``evaluate BY T --target y --by seg`` (the segment-wise model, reported by segment).

MCGrad (at each size of ``--mcgrad-rows``, the same generator): ``fit T --target y --scores s --by seg
--method mcgrad`` with ``--mcgrad-rounds`` rounds and early stopping off (so the round count is fixed and
the time is not the early-stopping pass's), against ``fit T --target y --learner xgboost_dask`` with
MCGrad's booster settings (94 trees, learning rate 0.0287, depth 2, min child weight 30, L2 0.0091;
XGBoost's learner has no ``gamma``) on the features ``--booster-features`` (default ``s,seg``: ``seg``
one-hot through ``--max-categories`` covering every segment, the learner's encoding, dense; ``s``: the
score alone, the baseline that fits in memory at 10^6 rows and more), trained once on every row
(``--calibration-data`` the same table, ``--method none``).  MCGrad's rounds see ``seg`` as one
categorical feature (``calengine.methods.mcgrad``).  Both train through ``xgboost_dask`` across the embedded cluster's
workers.  The ratio to quote is MCGrad's CPU over (rounds x the one booster's).

    python benchmarks/bench_segments_scale.py --rows-list 1e6,3e6,1e7   # results/segments_scale.{md,json}

``--baseline-python PY`` (e.g. the interpreter of a venv holding main's package): every fit and
evaluate also runs with ``PY``, just before this build's run of the same command (models in a
``baseline/`` subdirectory), and the page adds a before/after table: each build's ratios against its
own global fit / plain evaluate, and this build's CPU over the baseline's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from _common import (  # noqa: E402
    environment, environment_markdown, markdown_table, median, ratio, run_measured, write_results,
)

BOOSTER = {"n_estimators": 94, "learning_rate": 0.0287, "max_depth": 2, "min_child_weight": 30, "reg_lambda": 0.0091}


def _cli(*args, python: str | None = None) -> list[str]:
    return [python or sys.executable, "-P", "-m", "calengine", *map(str, args)]


def commands(table: Path, work: Path, segments: int, python: str | None = None) -> list[tuple[str, str, list[str]]]:
    """``(group, setting, argv)`` of the fits and evaluations of one table, in run order (``python``:
    the interpreter, this one by default)."""
    g, b = work / "global", work / "by"
    fit = ["fit", table, "--target", "y", "--scores", "s", "--method", "isotonic", "--quiet", "--overwrite"]
    ev = ["evaluate", "--target", "y", "--quiet"]
    return [
        ("fit", "global isotonic", _cli(*fit, "--output", g, python=python)),
        ("fit", f"--by seg ({segments} segments)", _cli(*fit, "--by", "seg", "--output", b, python=python)),
        ("evaluate", "global model", _cli(ev[0], g, table, *ev[1:], python=python)),
        ("evaluate", "global model, --by seg", _cli(ev[0], g, table, *ev[1:], "--by", "seg", python=python)),
        ("evaluate", "--by model, --by seg", _cli(ev[0], b, table, *ev[1:], "--by", "seg", python=python)),
    ]


def mcgrad_commands(table: Path, work: Path, segments: int, rounds: int, trees: int,
                    features: str = "s,seg") -> list[tuple[str, str, list]]:
    mc = ["--method-param", f"rounds={rounds}", "--method-param", "early_stopping=false",
          "--method-param", f"trees={trees}"]
    booster = [a for k, v in {**BOOSTER, "n_estimators": trees}.items() for a in ("--learner-param", f"{k}={v}")]
    return [
        ("mcgrad", f"fit --method mcgrad --by seg ({rounds} rounds)",
         _cli("fit", table, "--target", "y", "--scores", "s", "--by", "seg", "--method", "mcgrad", *mc,
              "--output", work / "mcgrad", "--quiet", "--overwrite")),
        ("mcgrad", f"one booster (xgboost_dask, same settings, features {features})",
         _cli("fit", table, "--target", "y", "--learner", "xgboost_dask", *booster, "--features", features,
              "--max-categories", segments + 1, "--calibration-data", table, "--method", "none",
              "--output", work / "booster", "--quiet", "--overwrite")),
    ]


def run(group, setting, argv, rows, repeats, timeout) -> dict:
    runs = []
    for _ in range(repeats):
        r = run_measured(argv, timeout=timeout)
        if r.returncode:
            raise RuntimeError(f"{' '.join(map(str, argv))} failed:\n{r.stderr[-2000:]}")
        runs.append({"wall_s": r.wall_s, "cpu_s": r.rusage["user_s"] + r.rusage["sys_s"],
                     # the sampled peak (VmHWM) of the process: its ru_maxrss starts at this driver's own peak
                     "peak_rss_mib": r.rss["client"] / 2**20, "tree_peak_sum_mib": r.rss["tree_peak_sum"] / 2**20,
                     "load_1min": r.load_before["load1"]})
    out = {"group": group, "setting": setting, "rows": rows, "command": " ".join(map(str, argv[4:])),
           **{k: median([x[k] for x in runs]) for k in ("wall_s", "cpu_s", "peak_rss_mib")},
           "runs": runs}
    print(f"{rows:>10,} {setting:42s} wall {out['wall_s']:7.1f}s  CPU {out['cpu_s']:7.1f}s"
          f"  peak {out['peak_rss_mib']:6.0f} MiB", flush=True)
    return out


def main(argv=None) -> int:
    from bench_segment_fits import scale_table

    ints = lambda s: [int(float(x)) for x in s.split(",") if x.strip()]  # noqa: E731 - 1e7 is accepted
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows-list", type=ints, default=[1_000_000, 3_000_000, 10_000_000])
    ap.add_argument("--segments", type=int, default=1_000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--mcgrad-rows", type=ints, default=[100_000], help="sizes of the MCGrad runs; 0 or '': none")
    ap.add_argument("--booster-features", default="s,seg", help="the one booster's --features (s,seg or s)")
    ap.add_argument("--mcgrad-rounds", type=int, default=2)
    ap.add_argument("--trees", type=int, default=94, help="trees per MCGrad round and of the one booster")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--work-dir", default="/tmp/calengine-bench/segments_scale")
    ap.add_argument("--results-dir", default=str(HERE / "results"))
    ap.add_argument("--name", default="segments_scale")
    ap.add_argument("--baseline-python", default=None, help="also run every fit and evaluate with this interpreter")
    ap.add_argument("--baseline-name", default="baseline", help="what the page calls the baseline build")
    args = ap.parse_args(argv)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for rows in args.rows_list:
        table = work / f"t{rows}.parquet"
        scale_table(table, rows, args.segments)
        base = commands(table, work / "baseline", args.segments, args.baseline_python) if args.baseline_python else None
        for i, (group, setting, cmd) in enumerate(commands(table, work, args.segments)):
            if base:  # back to back with this build's run of the same command
                (work / "baseline").mkdir(exist_ok=True)
                results.append({**run(group, setting, base[i][2], rows, args.repeats, args.timeout),
                                "build": args.baseline_name})
            results.append(run(group, setting, cmd, rows, args.repeats, args.timeout))
    for rows in [r for r in args.mcgrad_rows if r]:
        table = work / f"t{rows}.parquet"
        scale_table(table, rows, args.segments)
        for group, setting, cmd in mcgrad_commands(table, work, args.segments, args.mcgrad_rounds, args.trees,
                                                   args.booster_features):
            results.append(run(group, setting, cmd, rows, args.repeats, args.timeout))
    env = environment(REPO, ["calengine", "numpy", "dask", "distributed", "xgboost-cpu"])
    write_results(args.results_dir, args.name, {"environment": env, "args": vars(args), "results": results},
                  page(results, args, env))
    return 0


def page(results: list[dict], args, env: dict) -> str:
    before = [r for r in results if r.get("build")]
    results = [r for r in results if not r.get("build")]
    base = {(r["rows"], r["group"]): r for r in results if r["setting"] in ("global isotonic", "global model")}
    rows = []
    for r in results:
        if r["group"] == "mcgrad":
            continue
        b = base[(r["rows"], r["group"])]
        rows.append([f"{r['rows']:,}", r["group"], r["setting"], r["wall_s"], r["cpu_s"], f"{r['peak_rss_mib']:.0f}",
                     ratio(r["wall_s"], b["wall_s"]), ratio(r["cpu_s"], b["cpu_s"]),
                     ratio(r["peak_rss_mib"], b["peak_rss_mib"])])
    lines = ["# Segment-wise fits and reports at scale (issue 25's benchmark)", "",
             "Written by `python benchmarks/bench_segments_scale.py` (its docstring says what runs). Each command"
             f" in its own process, embedded cluster; {args.segments} segments; medians of {args.repeats}; ratios"
             " against the global fit / the plain evaluate of the same rows in the same run.", "",
             markdown_table(["rows", "step", "setting", "wall s", "CPU s", "peak RSS MiB", "wall ×", "CPU ×",
                             "RSS ×"], rows, ["<", "<", "<", ">", ">", ">", ">", ">", ">"])]
    if before:
        lines += ["", *before_after(before, results, base, getattr(args, "baseline_name", "baseline"))]
    mc = [r for r in results if r["group"] == "mcgrad"]
    if mc:
        lines += ["", f"MCGrad, {args.mcgrad_rounds} rounds of {args.trees} trees (early stopping off), against one"
                  " booster of the same settings on the same rows:", "",
                  markdown_table(["rows", "fit", "wall s", "CPU s", "peak RSS MiB", "CPU / (rounds × booster)"],
                                 [[f"{r['rows']:,}", r["setting"], r["wall_s"], r["cpu_s"], f"{r['peak_rss_mib']:.0f}",
                                   f"{ratio(m['cpu_s'], args.mcgrad_rounds * one['cpu_s']):.2f}" if r is m else ""]
                                  for m, one in zip(mc[::2], mc[1::2]) for r in (m, one)],
                                 ["<", "<", ">", ">", ">", ">"])]
    lines += ["", "Commands (paths in this run's work directory; the first size's, then MCGrad's):", ""]
    lines += [f"* `{r['setting']}`: `calengine {r['command']}`" for r in results if r["rows"] == results[0]["rows"]
              or (r["group"] == "mcgrad" and r["rows"] == mc[0]["rows"])]
    return "\n".join(lines + ["", *environment_markdown(env)])


def before_after(before: list[dict], after: list[dict], base: dict, name: str) -> list[str]:
    """The before/after table: per command, each build's figures and ratio over its own baseline
    command (global fit, plain evaluate), and this build's CPU over the other build's."""
    old_base = {(r["rows"], r["group"]): r for r in before if r["setting"] in ("global isotonic", "global model")}
    now = {(r["rows"], r["group"], r["setting"]): r for r in after}
    rows = []
    for b in before:
        a = now.get((b["rows"], b["group"], b["setting"]))
        if a is None:
            continue
        ob, nb = old_base[(b["rows"], b["group"])], base[(a["rows"], a["group"])]
        rows.append([f"{b['rows']:,}", b["group"], b["setting"], b["cpu_s"], a["cpu_s"],
                     ratio(b["cpu_s"], ob["cpu_s"]), ratio(a["cpu_s"], nb["cpu_s"]), ratio(a["cpu_s"], b["cpu_s"]),
                     b["wall_s"], a["wall_s"], f"{b['peak_rss_mib']:.0f}", f"{a['peak_rss_mib']:.0f}"])
    return [f"Before ({name}) and after (this build), each command run back to back with both, the same table:",
            "", markdown_table(["rows", "step", "setting", f"CPU s {name}", "CPU s this", f"CPU × global {name}",
                                "CPU × global this", "CPU this / " + name, f"wall s {name}", "wall s this",
                                f"peak MiB {name}", "peak MiB this"], rows, ["<", "<", "<"] + [">"] * 9)]


if __name__ == "__main__":
    sys.exit(main())
