#!/usr/bin/env python
"""How reproducible are ``xgboost_dask`` and ``lightgbm_dask``?  Same seed, 1 vs 2 workers, repeated.

For each learner and each LocalCluster size (``--workers-list``, one thread per worker), fits Adult
(split into ``--files`` Parquet files) ``--repeats`` times with the same ``--seed`` through
:func:`calengine.fit.table.fit_table` (cv 3, isotonic), on a fresh cluster each time, and reports:
whether the boosters of two runs are identical (the native model bytes; LightGBM's parameter echo,
which lists the run's network ports, left out), and the largest difference of the calibrated and the
raw probabilities on Adult's test set between runs of one layout and between layouts.

    python benchmarks/bench_dask_determinism.py                 # writes results/dask_determinism.{md,json}
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402

NAME = "dask_determinism"


def booster_bytes(model) -> bytes:
    out = b""
    for m in model.members:
        b = m.learners[0].booster_
        if hasattr(b, "save_raw"):
            out += bytes(b.save_raw("ubj"))
        else:
            out += b.model_to_string().split("\nparameters:")[0].encode()
    return out


def fit_once(data, learner, workers, seed, n_estimators, test_df):
    import numpy as np
    from distributed import Client, LocalCluster

    from calengine.fit.table import TableSpec, fit_table
    from calengine.fit.training import FitConfig

    spec = TableSpec(data=str(data), target="class", positive=">50K")
    config = FitConfig(learner=learner, learner_params={"n_estimators": n_estimators}, method="isotonic", cv=3,
                       seed=seed)
    with LocalCluster(n_workers=workers, threads_per_worker=1, host="127.0.0.1", dashboard_address=None) as lc, \
            Client(lc, set_as_default=False) as client:
        model = fit_table(client, spec, config)
    X = model.encoder.transform(test_df)
    P, R = model.both_proba_features(X)
    return booster_bytes(model), np.asarray(P[:, 1]), np.asarray(R[:, 1])


def main(argv=None) -> int:
    import numpy as np
    import pandas as pd
    import pyarrow.parquet as pq

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--learners", default="xgboost_dask,lightgbm_dask")
    ap.add_argument("--workers-list", default="1,2")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--n-estimators", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work-dir", default="/tmp/calengine-bench")
    ap.add_argument("--results-dir", default=str(HERE / "results"))
    args = ap.parse_args(argv)

    table = pq.read_table(REPO_ROOT / "data" / "adult" / "train.parquet")
    data = Path(args.work_dir) / f"adult-{args.files}-files"
    data.mkdir(parents=True, exist_ok=True)
    step = -(-table.num_rows // args.files)
    for i in range(args.files):
        pq.write_table(table.slice(i * step, step), data / f"part-{i}.parquet")
    test_df = pd.read_parquet(REPO_ROOT / "data" / "adult" / "test.parquet")

    rows, results = [], {}
    for learner in args.learners.split(","):
        runs = {}
        for w in [int(v) for v in args.workers_list.split(",")]:
            runs[w] = [fit_once(data, learner, w, args.seed, args.n_estimators, test_df) for _ in range(args.repeats)]
            same = all(r[0] == runs[w][0][0] for r in runs[w])
            pairs = list(itertools.combinations(runs[w], 2))
            d = {k: (max((float(np.abs(a[i] - b[i]).max()) for a, b in pairs), default=0.0),
                     max((float(np.abs(a[i] - b[i]).mean()) for a, b in pairs), default=0.0))
                 for k, i in (("raw", 2), ("calibrated", 1))}
            rows.append([learner, f"{w} vs {w} (same layout, {args.repeats} runs)", C.fmt(same)]
                        + [f"{C.fmt(d[k][0], 4)} / {C.fmt(d[k][1], 5)}" for k in ("raw", "calibrated")])
            results[f"{learner}:{w}"] = {"identical": same, **{f"dp_{k}_max_mean": d[k] for k in d}}
        ws = sorted(runs)
        for a, b in itertools.combinations(ws, 2):
            ra, rb = runs[a][0], runs[b][0]
            d = {k: (float(np.abs(ra[i] - rb[i]).max()), float(np.abs(ra[i] - rb[i]).mean()))
                 for k, i in (("raw", 2), ("calibrated", 1))}
            rows.append([learner, f"{a} vs {b} workers", C.fmt(ra[0] == rb[0])]
                        + [f"{C.fmt(d[k][0], 4)} / {C.fmt(d[k][1], 5)}" for k in ("raw", "calibrated")])
            results[f"{learner}:{a}v{b}"] = {"identical": ra[0] == rb[0], **{f"dp_{k}_max_mean": d[k] for k in d}}
    md_table = C.markdown_table(["learner", "compared", "boosters identical", "|Δp| raw: max / mean",
                                 "|Δp| calibrated: max / mean"], rows)
    md = (f"# Reproducibility of the Dask learners\n\n`{C.command_line()}`: Adult train in {args.files} files, "
          f"{args.n_estimators} trees, cv 3 + isotonic, seed {args.seed}; probabilities on Adult test "
          f"(16,281 rows).\n\n{md_table}\n")
    C.write_results(args.results_dir, NAME, {"args": vars(args), "machine": C.machine_info(),
                                             "versions": C.package_versions(("xgboost", "xgboost-cpu", "lightgbm",
                                                                             "dask", "distributed")),
                                             "results": results}, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
