#!/usr/bin/env python
"""``xgboost_dask`` + isotonic on a partitioned table, beside the plain workflow a user would write:
XGBoost in one process wrapped in scikit-learn's ``CalibratedClassifierCV``.

What is measured (each side in its own subprocess, on the generated table of ``gen_table.py``):

* **calengine** -- ``calengine fit DATA --target y --learner xgboost_dask --learner-param
  n_estimators=N --learner-param max_depth=D --method isotonic --cv K --seed S --cluster --workers W
  --output MODEL``: the LocalCluster's W worker processes (one thread each) read their own row groups
  and train every fold's booster together (``xgboost.dask``); held-out scores and the isotonic
  calibrators are reductions over the partitions.  Wall time launch to exit; peak RSS of the client
  and of each worker process (psutil samples + the kernel's VmHWM, see ``_common.py``).
* **scikit-learn** -- a subprocess reading the same Parquet files into float32, then
  ``CalibratedClassifierCV(XGBClassifier(n_estimators=N, max_depth=D, tree_method="hist", n_jobs=W),
  method="isotonic", cv=StratifiedKFold(K, shuffle=True, random_state=S)).fit``: wall time launch to
  end of fit (interpreter, imports, Parquet read, fit), peak RSS of that one process.
* **quality** on a held-out table from gen_table's test stream: Brier, log loss, AUC and ECE of the
  calibrated probabilities and of the raw boosters (calengine: ``evaluate --json``'s ``raw``, the
  members' own probabilities averaged; scikit-learn: the K fold estimators' ``predict_proba``
  averaged, which is what ``CalibratedClassifierCV`` calibrates).

Both sides use the same K folds count, trees, depth and cores (W), not the same fold assignment.

    python benchmarks/bench_xgboost_dask.py --rows 1000000           # writes results/xgboost_dask.{md,json}
    python benchmarks/bench_xgboost_dask.py --rows 10000000 --n-estimators 100
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402
import gen_table as G  # noqa: E402

NAME = "xgboost_dask"
MARK = "SKLEARN_JSON:"
VERSIONS = ("calengine", "calengine-xgboost", "xgboost", "xgboost-cpu", "scikit-learn", "numpy", "pandas", "pyarrow",
            "dask", "distributed")
METRICS = ("brier", "log_loss", "auc", "ece")


def read_xy(data: str):
    import numpy as np
    import pyarrow.parquet as pq

    files = sorted(p for p in Path(data).iterdir() if p.suffix == ".parquet")
    tables = [pq.read_table(f) for f in files]
    names = [n for n in tables[0].schema.names if n != "y"]
    X = np.concatenate([np.column_stack([t.column(n).to_numpy() for n in names]).astype(np.float32) for t in tables])
    y = np.concatenate([t.column("y").to_numpy().astype(np.int64) for t in tables])
    return X, y


def child_sklearn(spec: dict) -> int:
    t0 = time.time()
    import numpy as np
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.model_selection import StratifiedKFold
    from xgboost import XGBClassifier

    from calengine.metrics.measures import evaluate_predictions

    X, y = read_xy(spec["data"])
    base = XGBClassifier(n_estimators=spec["n_estimators"], max_depth=spec["max_depth"], tree_method="hist",
                         n_jobs=spec["workers"], random_state=spec["seed"])
    clf = CalibratedClassifierCV(base, method="isotonic",
                                 cv=StratifiedKFold(spec["cv"], shuffle=True, random_state=spec["seed"]))
    clf.fit(X, y)
    fit_s = time.time() - t0
    del X, y
    Xt, yt = read_xy(spec["test"])
    p = clf.predict_proba(Xt)[:, 1]
    raw = np.mean([c.estimator.predict_proba(Xt)[:, 1] for c in clf.calibrated_classifiers_], axis=0)
    two = lambda q: np.column_stack([1 - q, q])  # noqa: E731
    out = {"fit_s": fit_s, "calibrated": evaluate_predictions(yt, two(p)), "raw": evaluate_predictions(yt, two(raw))}
    print(MARK + json.dumps({k: {m: v[m] for m in METRICS} if isinstance(v, dict) else v for k, v in out.items()}))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--test-rows", type=int, default=200_000)
    ap.add_argument("--cols", type=int, default=20)
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--row-group-rows", type=int, default=250_000)
    ap.add_argument("--n-estimators", type=int, default=100)
    ap.add_argument("--max-depth", type=int, default=6)
    ap.add_argument("--cv", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work-dir", default="/tmp/calengine-bench")
    ap.add_argument("--results-dir", default=str(HERE / "results"))
    ap.add_argument("--timeout", type=float, default=7200)
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child:
        return child_sklearn(json.loads(args._child))

    work = Path(args.work_dir)
    spec = G.TableSpec(rows=args.rows, cols=args.cols, seed=args.seed)
    data = work / G.table_name("train", args.rows, args.cols, args.files, args.seed)
    test = work / G.table_name("test", args.test_rows, args.cols, 2, args.seed)
    G.ensure_table(data, spec, files=args.files, row_group_rows=args.row_group_rows, quiet=True)
    G.ensure_table(test, G.TableSpec(rows=args.test_rows, cols=args.cols, seed=args.seed), files=2,
                   row_group_rows=args.row_group_rows, stream=G.TEST_STREAM, quiet=True)

    model = work / f"model-{NAME}-{args.rows}"
    shutil.rmtree(model, ignore_errors=True)
    py = sys.executable
    fit = C.run_measured(
        [py, "-P", "-m", "calengine", "fit", str(data), "--target", "y", "--learner", "xgboost_dask",
         "--learner-param", f"n_estimators={args.n_estimators}", "--learner-param", f"max_depth={args.max_depth}",
         "--method", "isotonic", "--cv", str(args.cv), "--seed", str(args.seed), "--cluster", "--workers",
         str(args.workers), "--output", str(model)], timeout=args.timeout)
    if fit.returncode != 0:
        print(fit.stderr[-3000:], file=sys.stderr)
        return 1
    ev = subprocess.run([py, "-P", "-m", "calengine", "evaluate", str(model), str(test), "--target", "y", "--json"],
                        capture_output=True, text=True, check=True)
    metrics = json.loads(ev.stdout)
    metrics = metrics[0] if isinstance(metrics, list) else metrics
    ours = {"calibrated": {m: metrics[m] for m in METRICS}, "raw": {m: metrics["raw"][m] for m in METRICS}}

    child = {"data": str(data), "test": str(test), "n_estimators": args.n_estimators, "max_depth": args.max_depth,
             "cv": args.cv, "workers": args.workers, "seed": args.seed}
    base = C.run_measured([py, str(Path(__file__).resolve()), "--_child", json.dumps(child)], timeout=args.timeout)
    if base.returncode != 0:
        print(base.stderr[-3000:], file=sys.stderr)
        return 1
    theirs = json.loads(next(line for line in base.stdout.splitlines() if line.startswith(MARK))[len(MARK):])

    mib = lambda b: None if b is None else b / C.MiB  # noqa: E731
    rows = []
    for label, run, q, peak in (
        (f"calengine xgboost_dask + isotonic ({args.workers} workers)", fit, ours,
         f"client {C.fmt(mib(fit.rss['client']), 0)} / worker max {C.fmt(mib(fit.rss['worker_max']), 0)}"),
        ("XGBClassifier + CalibratedClassifierCV (1 process)", base, theirs, f"{C.fmt(mib(base.rss['client']), 0)}"),
    ):
        rows.append([label, C.fmt(run.wall_s, 1), peak]
                    + [f"{C.fmt(q['raw'][m], 4)} → {C.fmt(q['calibrated'][m], 4)}" for m in METRICS])
    table = C.markdown_table(
        ["fit", "wall s", "peak RSS MiB", "Brier raw → cal", "log loss raw → cal", "AUC raw → cal", "ECE raw → cal"],
        rows)
    ratio = C.ratio(fit.wall_s, base.wall_s)
    md = (f"# xgboost_dask + isotonic vs XGBoost + CalibratedClassifierCV\n\n"
          f"`{C.command_line()}`: {args.rows:,} rows × {args.cols} float32 columns in {args.files} files; "
          f"{args.n_estimators} trees of depth {args.max_depth}, {args.cv} folds, {args.workers} cores each side; "
          f"quality on {args.test_rows:,} held-out rows.\n\n{table}\n\n"
          f"Wall-time ratio calengine / scikit-learn: {C.fmt(ratio, 2)}.\n")
    data_out = {"args": vars(args), "machine": C.machine_info(), "git": C.git_commit(REPO_ROOT),
                "versions": C.package_versions(VERSIONS), "calengine": {"run": fit.to_json(), "quality": ours},
                "sklearn": {"run": base.to_json(), "quality": theirs}, "wall_ratio": ratio}
    C.write_results(args.results_dir, NAME, data_out, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
