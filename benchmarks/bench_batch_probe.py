#!/usr/bin/env python
"""Cost of the engine's first-use batch-independence probe (issue 41, ``calengine.plugins.batch_probe``)
on a small fit, side by side with the same fit without the probe, in one process.

The probe runs a plugin's ``score``/``predict`` on at most 8 rows together, each alone and reversed,
once per class and parameters per process.  Built-ins the suite proves independent are never probed,
so the case measured is one that is: a scikit-learn ``LogisticRegression`` instance given to
``CalibratedClassifier`` (the ``EstimatorLearner``), on Pima (768 rows, 8 columns, 5 folds,
isotonic), plus the probe alone on that learner.  Each repeat clears the probe's per-process cache.

    python benchmarks/bench_batch_probe.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

ROOT = _common.REPO


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()

    from sklearn.linear_model import LogisticRegression

    import calengine
    from calengine.adapters.wrapped_estimator import EstimatorLearner
    from calengine.plugins import batch_probe

    df = pd.read_parquet(ROOT / "data" / "pima.parquet")
    X, y = df.drop(columns="class").to_numpy(np.float64), df["class"].to_numpy()

    def fit():
        return calengine.CalibratedClassifier(learner=LogisticRegression(max_iter=2000), method="isotonic").fit(X, y)

    fit()  # warm-up: imports, the embedded scheduler
    times = {"with probe": [], "without probe": []}
    for _ in range(args.repeats):
        for label in times:
            batch_probe._CHECKED.clear()
            with mock.patch.object(batch_probe, "probed", (lambda obj: False) if label == "without probe" else batch_probe.probed):
                t = time.perf_counter()
                fit()
                times[label].append(time.perf_counter() - t)
    learner = EstimatorLearner(LogisticRegression(max_iter=2000)).fit(X, y)
    alone = []
    for _ in range(args.repeats):
        batch_probe._CHECKED.clear()
        t = time.perf_counter()
        batch_probe.check_rows_independent_once(learner, learner.score, X, "score")
        alone.append(time.perf_counter() - t)
    base = _common.median(times["without probe"])
    for label, ts in times.items():
        print(f"{label:14s} median {_common.median(ts):.4f} s over {len(ts)} fits ({_common.median(ts) / base:.3f}x)")
    print(f"probe alone    median {_common.median(alone) * 1e3:.2f} ms (LogisticRegression, 8 rows)")


if __name__ == "__main__":
    main()
