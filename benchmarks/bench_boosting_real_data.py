#!/usr/bin/env python
"""Raw vs calibrated boosted trees on real data: Adult and the KDD Cup 2004 protein homology set.

For each data set and learner (``xgboost_dask``, ``lightgbm_dask``; default parameters, 100 trees),
runs the real command lines on a LocalCluster of ``--workers`` processes::

    calengine fit TRAIN --target class --positive P --learner L --method isotonic --cv 5 --seed 0 \\
        --cluster --workers 2 --output MODEL
    calengine evaluate MODEL TEST --target class --json

and tabulates Brier, log loss, AUC and ECE of the raw boosters (``raw``: the members' own probabilities
averaged) and of the calibrated model.  Adult uses its standard train/test split (``data/adult``).  The
protein set (``../shared/data/kddcup04_bio``, or ``--kdd``) has no labelled test set, so its blocks
(one per native sequence) are split by ``block_id % 5 == 0`` into a held-out fifth: no block is in both.

    python benchmarks/bench_boosting_real_data.py       # writes results/boosting_real_data.{md,json}
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402

NAME = "boosting_real_data"
METRICS = ("brier", "log_loss", "auc", "ece")


def kdd_split(source: Path, out: Path) -> tuple[Path, Path]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    held = np.asarray(table.column("block_id").to_numpy(), dtype=np.int64) % 5 == 0
    train, test = out / "train", out / "test"
    for d in (train, test):
        d.mkdir(parents=True, exist_ok=True)
    tr = table.filter(pa.array(~held)).drop_columns(["block_id", "example_id"])
    te = table.filter(pa.array(held)).drop_columns(["block_id", "example_id"])
    step = -(-tr.num_rows // 4)
    for i in range(4):
        pq.write_table(tr.slice(i * step, step), train / f"part-{i}.parquet")
    pq.write_table(te, test / "part-0.parquet")
    return train, test


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--learners", default="xgboost_dask,lightgbm_dask")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cv", type=int, default=5)
    ap.add_argument("--kdd", default=str(REPO_ROOT.parent / "shared" / "data" / "kddcup04_bio" / "bio_train.parquet"))
    ap.add_argument("--work-dir", default="/tmp/calengine-bench")
    ap.add_argument("--results-dir", default=str(HERE / "results"))
    args = ap.parse_args(argv)

    work = Path(args.work_dir)
    sets = [("Adult", REPO_ROOT / "data" / "adult" / "train.parquet", REPO_ROOT / "data" / "adult" / "test.parquet",
             ">50K")]
    if Path(args.kdd).is_file():
        train, test = kdd_split(Path(args.kdd), work / "kdd04-bio-split")
        sets.append(("KDD Cup 2004 protein", train, test, "1"))
    else:
        print(f"skipping KDD Cup 2004 protein: {args.kdd} not found", file=sys.stderr)
    py = sys.executable
    rows, results = [], {}
    for name, train, test, positive in sets:
        for learner in args.learners.split(","):
            model = work / f"model-{NAME}-{name.split()[0].lower()}-{learner}"
            t0 = time.perf_counter()
            subprocess.run([py, "-P", "-m", "calengine", "fit", str(train), "--target", "class", "--positive", positive,
                            "--learner", learner, "--method", "isotonic", "--cv", str(args.cv), "--seed", "0",
                            "--cluster", "--workers", str(args.workers), "--output", str(model), "--overwrite"],
                           check=True, capture_output=True, text=True)
            fit_s = time.perf_counter() - t0
            ev = subprocess.run([py, "-P", "-m", "calengine", "evaluate", str(model), str(test), "--target", "class",
                                 "--json"], check=True, capture_output=True, text=True)
            m = json.loads(ev.stdout)
            m = m[0] if isinstance(m, list) else m
            results[f"{name}:{learner}"] = {"fit_s": fit_s, "n": m["n"], "calibrated": {k: m[k] for k in METRICS},
                                            "raw": {k: m["raw"][k] for k in METRICS}}
            rows.append([name, f"{learner} + isotonic", m["n"]]
                        + [f"{C.fmt(m['raw'][k], 4)} → {C.fmt(m[k], 4)}" for k in METRICS])
    table = C.markdown_table(["data", "model", "test rows", "Brier raw → cal", "log loss raw → cal",
                              "AUC raw → cal", "ECE raw → cal"], rows)
    md = (f"# Boosted trees on real data, raw vs calibrated\n\n`{C.command_line()}`: default parameters (100 trees),"
          f" cv {args.cv} + isotonic, seed 0, {args.workers} workers.\n\n{table}\n")
    C.write_results(args.results_dir, NAME, {"args": vars(args), "machine": C.machine_info(),
                                             "versions": C.package_versions(("calengine", "xgboost", "xgboost-cpu",
                                                                             "lightgbm", "dask")),
                                             "results": results}, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
