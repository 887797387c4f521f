#!/usr/bin/env python
"""Small tables (issue 43 §3): the README quick start against the same pipeline in scikit-learn, each
from process start to exit.

What is measured
----------------
Three commands of calengine on Adult (``data/adult/train.parquet``, 32,561 rows; ``test.parquet``,
16,281 rows), each beside a scikit-learn script doing the same work, every run a fresh process timed
from its launch to its exit (interpreter start, imports, reading, fitting, writing):

* ``fit``: ``calengine fit TRAIN --target class --positive '>50K' --learner gaussian_nb --method
  isotonic --output MODEL --overwrite`` (the README's quick start; 5 seeded folds, 5 members) against
  a script that reads the same Parquet file with pandas, fits ``CalibratedClassifierCV(method=
  'isotonic', cv=5)`` over ``ColumnTransformer(OneHotEncoder on the string columns, the numbers as
  they are) + GaussianNB`` and pickles it.
* ``score``: ``calengine score MODEL TEST --output DIR --overwrite`` against a script that unpickles
  the model, reads the test file, runs ``predict_proba`` and writes the probabilities and the
  predicted class to Parquet.
* ``evaluate``: ``calengine evaluate MODEL TEST --target class`` against a script that unpickles the
  model, reads the test file and computes for the raw learner (the average of the fold learners, as
  calengine's raw column) and the calibrated model: Brier score and its Murphy decomposition, log
  loss (nats and bits), AUC, error rate, equal-width and equal-mass ECE, MCE, Hosmer-Lemeshow, the
  calibration slope and intercept, Spiegelhalter's z and the 10-bin reliability chi-square, and the
  error rate after rejecting the least confident rows; and prints them.  calengine's evaluate prints
  more (about thirty metrics, smooth ECE, KS/Kuiper tests), so the comparison favours scikit-learn.

The runs are interleaved (every configuration once per round, ``--repeats`` rounds, the order of the
pair alternating) so that load from other jobs on the shared machine falls on both sides; medians are
reported.  Peak RSS is per process (``_common.run_measured``: the launched process and any children),
CPU seconds are user + system of the process tree from ``wait4``.  ``ratio`` is calengine's median wall
over scikit-learn's; the target is at most 1.0 for every command.

A test-sized version (``--train data/pima.parquet``, one round) runs in
``tests/contract/test_benchmarks_smoke.py``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

ROOT = _common.REPO
COMMANDS = ("fit", "score", "evaluate")

SKLEARN_FIT = r'''
import pickle, sys
import pandas as pd
from sklearn.calibration import CalibratedClassifierCV
from sklearn.compose import ColumnTransformer, make_column_selector
from sklearn.naive_bayes import GaussianNB
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder

train, target, positive, out = sys.argv[1:5]
X = pd.read_parquet(train)
y = (X.pop(target).astype(str) == positive).astype(int).to_numpy()
encode = ColumnTransformer(
    [("strings", OneHotEncoder(handle_unknown="ignore", sparse_output=False), make_column_selector(dtype_exclude="number"))],
    remainder="passthrough")
model = CalibratedClassifierCV(make_pipeline(encode, GaussianNB()), method="isotonic", cv=5).fit(X, y)
with open(out, "wb") as fh:
    pickle.dump(model, fh)
print(f"fitted GaussianNB + isotonic on {len(y)} rows, {len(model.calibrated_classifiers_)} members -> {out}",
      file=sys.stderr)
'''

SKLEARN_SCORE = r'''
import os, pickle, sys
import pandas as pd

model_path, data, target, out = sys.argv[1:5]
with open(model_path, "rb") as fh:
    model = pickle.load(fh)
X = pd.read_parquet(data)
X = X.drop(columns=[target]) if target in X.columns else X
p = model.predict_proba(X)
os.makedirs(out, exist_ok=True)
frame = pd.DataFrame({f"p_{c}": p[:, i] for i, c in enumerate(model.classes_)})
frame["prediction"] = model.classes_[p.argmax(axis=1)]
frame.to_parquet(os.path.join(out, "part-00000.parquet"), compression="zstd")
print(f"scored {len(frame)} rows -> {out}", file=sys.stderr)
'''

SKLEARN_EVALUATE = r'''
import pickle, sys
import numpy as np
import pandas as pd
from scipy import stats
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

model_path, data, target, positive = sys.argv[1:5]
with open(model_path, "rb") as fh:
    model = pickle.load(fh)
X = pd.read_parquet(data)
y = (X.pop(target).astype(str) == positive).astype(int).to_numpy()
columns = {
    "raw learner": np.mean([c.estimator.predict_proba(X)[:, 1] for c in model.calibrated_classifiers_], axis=0),
    "GaussianNB + isotonic": model.predict_proba(X)[:, 1],
}

def binned(p, edges):
    b = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, len(edges) - 2)
    n = np.bincount(b, minlength=len(edges) - 1)
    sp = np.bincount(b, p, minlength=len(edges) - 1)
    sy = np.bincount(b, y, minlength=len(edges) - 1)
    return n, sp, sy

def metrics(p):
    out = {"n": len(y), "brier": brier_score_loss(y, p), "log_loss": log_loss(y, p)}
    out["log_loss_bits"] = out["log_loss"] / np.log(2)
    out["auc"] = roc_auc_score(y, p)
    out["error_rate"] = float(np.mean((p >= 0.5) != y))
    n, sp, sy = binned(p, np.linspace(0, 1, 11))
    used = n > 0
    gap = np.abs(sp[used] - sy[used]) / n[used]
    out["ece"] = float(np.sum(n[used] * gap) / len(y))
    out["mce"] = float(gap.max())
    out["brier_mcb"] = float(np.sum(n[used] * (sp[used] / n[used] - sy[used] / n[used]) ** 2) / len(y))
    base = y.mean()
    out["brier_dsc"] = float(np.sum(n[used] * (sy[used] / n[used] - base) ** 2) / len(y))
    out["brier_unc"] = float(base * (1 - base))
    order = np.argsort(p, kind="stable")
    mass = np.array_split(order, 10)
    out["ece_equal_mass"] = float(sum(abs(p[i].sum() - y[i].sum()) for i in mass) / len(y))
    hl = sum((y[i].sum() - p[i].sum()) ** 2 / max(p[i].sum() * (1 - p[i].mean()), 1e-12) for i in mass)
    out["hosmer_lemeshow_pvalue"] = float(stats.chi2.sf(hl, 8))
    logit = np.log(np.clip(p, 1e-15, 1 - 1e-15) / np.clip(1 - p, 1e-15, 1))
    fit = LogisticRegression(C=np.inf).fit(logit[:, None], y)
    out["calibration_slope"], out["calibration_intercept"] = float(fit.coef_[0, 0]), float(fit.intercept_[0])
    return out

table = {name: metrics(p) for name, p in columns.items()}
names = list(table)
print(f"{'metric':<24}" + "".join(f"{n:>24}" for n in names))
for key in table[names[0]]:
    print(f"{key:<24}" + "".join(f"{table[n][key]:>24.6f}" for n in names))
p = columns[names[-1]]
z = np.sum((y - p) * (1 - 2 * p)) / np.sqrt(np.sum((1 - 2 * p) ** 2 * p * (1 - p)))
n, sp, sy = binned(p, np.linspace(0, 1, 11))
used = n > 0
chi2 = float(np.sum((sy[used] - sp[used]) ** 2 / np.maximum(sp[used] * (1 - sp[used] / n[used]), 1e-12)))
print(f"calibration drift: z = {z:.2f}, p = {2 * stats.norm.sf(abs(z)):.2g} (Spiegelhalter); chi2 = {chi2:.1f},"
      f" df = {int(used.sum())}, p = {stats.chi2.sf(chi2, int(used.sum())):.2g}")
confidence = np.maximum(p, 1 - p)
order = np.argsort(-confidence, kind="stable")
wrong = ((p >= 0.5) != y)[order]
for rate in (0.0, 0.05, 0.1, 0.2, 0.3, 0.5):
    kept = len(y) - int(rate * len(y))
    print(f"reject {rate:.2f}: error rate {wrong[:kept].mean():.4f}")
'''



def configurations(args, work: Path) -> dict[tuple[str, str], list[str]]:
    """(command, side) -> the command line of one run."""
    cal, py = _common.calengine_command(), sys.executable
    scripts = {}
    for name, text in (("fit", SKLEARN_FIT), ("score", SKLEARN_SCORE), ("evaluate", SKLEARN_EVALUATE)):
        scripts[name] = work / f"sklearn_{name}.py"
        scripts[name].write_text(text)
    cal_model, sk_model = work / "calengine-model", work / "sklearn-model.pkl"
    out = {
        ("fit", "calengine"): [*cal, "fit", args.train, "--target", args.target, "--positive", args.positive,
                               "--learner", "gaussian_nb", "--method", "isotonic", "--output", str(cal_model),
                               "--overwrite"],
        ("fit", "scikit-learn"): [py, str(scripts["fit"]), args.train, args.target, args.positive, str(sk_model)],
        ("score", "calengine"): [*cal, "score", str(cal_model), args.test, "--output", str(work / "cal-scored"),
                                 "--overwrite"],
        ("score", "scikit-learn"): [py, str(scripts["score"]), str(sk_model), args.test, args.target,
                                    str(work / "sk-scored")],
        ("evaluate", "calengine"): [*cal, "evaluate", str(cal_model), args.test, "--target", args.target],
        ("evaluate", "scikit-learn"): [py, str(scripts["evaluate"]), str(sk_model), args.test, args.target,
                                       args.positive],
    }
    return {k: v for k, v in out.items() if k[0] in args.commands}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", default=str(ROOT / "data" / "adult" / "train.parquet"))
    ap.add_argument("--test", default=str(ROOT / "data" / "adult" / "test.parquet"))
    ap.add_argument("--target", default="class")
    ap.add_argument("--positive", default=">50K")
    ap.add_argument("--commands", type=lambda s: [c for c in s.split(",") if c], default=list(COMMANDS))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--sample-interval", type=float, default=0.05)
    ap.add_argument("--work-dir", default="/tmp/calengine-bench/small_tables")
    ap.add_argument("--results-dir", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--name", default="small_tables")
    args = ap.parse_args(argv)
    args.train, args.test = os.path.abspath(args.train), os.path.abspath(args.test)
    bad = sorted(set(args.commands) - set(COMMANDS))
    if bad or args.repeats < 1:
        ap.error(f"--commands takes {','.join(COMMANDS)}; --repeats at least 1")
    env = _common.environment(ROOT)
    work = Path(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    configs = configurations(args, work)
    child_env = dict(os.environ, PYTHONWARNINGS="ignore")
    runs: dict[tuple[str, str], list[dict]] = {k: [] for k in configs}
    for rnd in range(args.repeats):
        for command in args.commands:  # fit first: score and evaluate read the models it wrote
            sides = ["calengine", "scikit-learn"] if rnd % 2 == 0 else ["scikit-learn", "calengine"]
            for side in sides:
                r = _common.run_measured(configs[(command, side)], env=child_env, cwd=str(work),
                                         timeout=args.timeout, interval=args.sample_interval)
                if r.returncode != 0:
                    sys.stderr.write(f"{command} ({side}) failed with exit {r.returncode}:\n{r.stderr[-3000:]}\n")
                    return 1
                runs[(command, side)].append({
                    "round": rnd, "wall_s": r.wall_s, "cpu_s": r.rusage["user_s"] + r.rusage["sys_s"],
                    "peak_rss": r.rss.get("client"), "maxrss": r.rusage["maxrss_bytes"],
                    "load1": r.load_before["load1"], "stdout_tail": r.stdout[-600:], "stderr_tail": r.stderr[-600:]})
                print(f"round {rnd + 1}/{args.repeats} {command:<8} {side:<12} {r.wall_s:6.2f} s"
                      f" cpu {runs[(command, side)][-1]['cpu_s']:5.2f} s", flush=True)
    results = []
    for command in args.commands:
        row = {"command": command}
        for side in ("calengine", "scikit-learn"):
            rs = runs[(command, side)]
            row[side] = {"wall_s": _common.median([r["wall_s"] for r in rs]),
                         "wall_range_s": [min(r["wall_s"] for r in rs), max(r["wall_s"] for r in rs)],
                         "cpu_s": _common.median([r["cpu_s"] for r in rs]),
                         "peak_rss_mib": max(max(r["peak_rss"] or 0, r["maxrss"]) for r in rs) / _common.MiB}
        row["ratio"] = _common.ratio(row["calengine"]["wall_s"], row["scikit-learn"]["wall_s"])
        row["cpu_ratio"] = _common.ratio(row["calengine"]["cpu_s"], row["scikit-learn"]["cpu_s"])
        row["met"] = row["ratio"] is not None and row["ratio"] <= 1.0
        results.append(row)
    loads = [r["load1"] for rs in runs.values() for r in rs]
    md = [f"# Small tables: calengine against the same scikit-learn pipeline, process start to exit", "",
          f"Train `{Path(args.train).name}`, test `{Path(args.test).name}` (`{args.target}`, positive"
          f" `{args.positive}`); {args.repeats} interleaved rounds, medians; wall and CPU seconds from launch to"
          f" exit of each process; peak RSS of the process. Target (issue 43 §3): ratio ≤ 1.0.", "",
          _common.markdown_table(
              ["command", "calengine s", "scikit-learn s", "ratio", "calengine CPU s", "scikit-learn CPU s",
               "calengine peak MiB", "scikit-learn peak MiB", "≤ 1.0"],
              [[r["command"], r["calengine"]["wall_s"], r["scikit-learn"]["wall_s"], r["ratio"],
                r["calengine"]["cpu_s"], r["scikit-learn"]["cpu_s"], f"{r['calengine']['peak_rss_mib']:.0f}",
                f"{r['scikit-learn']['peak_rss_mib']:.0f}", r["met"]] for r in results],
              ["<", ">", ">", ">", ">", ">", ">", ">", "<"]), "",
          "Wall ranges (min-max over rounds): " + "; ".join(
              f"{r['command']} calengine {r['calengine']['wall_range_s'][0]:.2f}-{r['calengine']['wall_range_s'][1]:.2f} s,"
              f" scikit-learn {r['scikit-learn']['wall_range_s'][0]:.2f}-{r['scikit-learn']['wall_range_s'][1]:.2f} s"
              for r in results) + f". 1-minute load before the runs: {min(loads):.1f}-{max(loads):.1f}.", "",
          "The commands: calengine's are the README quick start's (`calengine fit ... --learner gaussian_nb"
          " --method isotonic`, `calengine score`, `calengine evaluate`); scikit-learn's scripts are in"
          " `bench_small_tables.py` (`SKLEARN_FIT`, `SKLEARN_SCORE`, `SKLEARN_EVALUATE`)."]
    data = {"environment": env, "config": vars(args), "results": results,
            "runs": {f"{c}/{s}": rs for (c, s), rs in runs.items()}}
    for path in _common.write_results(args.results_dir, args.name, data, "\n".join(md)):
        print(f"wrote {path}")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
