#!/usr/bin/env python
"""Timings of three hot paths that used to be asserted inside unit tests (where a loaded shared
machine made them flaky and a fast one made them meaningless): PAV on 1,000,000 scores, the metrics of
1,000,000 binary predictions, and the least-squares combiner on 10,000 rows of a 10-class all-pairs
matrix.  Prints the median of ``--repeats`` runs of each; the correctness of the same calls is
asserted by tests/reductions/test_pav.py, tests/metrics/test_measures.py and plugins/builtins/tests/test_combiners.py on smaller inputs.

    python benchmarks/bench_hot_paths.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=1_000_000, help="rows for PAV and metrics")
    args = parser.parse_args(argv)

    from calengine.methods import codematrix as cm
    from calengine.metrics.measures import evaluate_predictions
    from calengine.reductions.pav import pav
    from calengine_builtins.combiners import LeastSquares

    rng = np.random.default_rng(0)
    s = rng.normal(size=args.n)
    y = (rng.random(args.n) < 1 / (1 + np.exp(-s))).astype(np.int8)
    p = rng.random(args.n)
    yp = (rng.random(args.n) < p).astype(np.int64)
    M = cm.all_pairs(10)
    R = rng.random((10_000, M.shape[1]))
    rows = [
        (f"pav, {args.n:,} scores", lambda: pav(s, y)),
        (f"evaluate_predictions, {args.n:,} binary rows", lambda: evaluate_predictions(yp, np.column_stack((1 - p, p)))),
        ("least_squares combiner, 10,000 x all_pairs(10)", lambda: LeastSquares().combine(R, M)),
    ]
    print(f"{'workload':<50} {'median s':>10}")
    for name, fn in rows:
        print(f"{name:<50} {_common.median_seconds(fn, args.repeats):>10.3f}")


if __name__ == "__main__":
    main()
