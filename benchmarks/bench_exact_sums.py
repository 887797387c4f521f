#!/usr/bin/env python
"""What the scale-free exact sums cost (issue 43 §1): ``calengine.reductions.exact.ExactSums`` beside
the float sums they replaced in the scaling calibrators' per-piece statistics, on one piece of
``--n`` rows, in one run (median of ``--repeats``; other jobs on a shared machine only add time).

Rows, each a float sum and its exact replacement on the same terms:

* ``sum``: ``np.sum`` of one array of ``--n`` standard-normal terms, and :func:`exact_sum`;
* ``bins``: ``np.bincount`` into the 40,960 cells of sigmoid's start histogram, and :func:`exact_sum_bins`;
* ``platt round``: one Newton round's piece statistics of Platt's sigmoid (six sums over the rows),
  ``_platt_eval`` as before and with ``exact=True``;
* ``sigmoid summary``: the first round's piece statistics (``partial_stats``: validation, class weights,
  both histograms), the current code, whose sums are all exact; its float baseline is the same call
  with the histograms' sums taken by ``np.bincount`` (``--float-summary`` is the before of this row).

    python benchmarks/bench_exact_sums.py [--n 1000000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402


def rows(n: int):
    """``(workload, float baseline, exact)`` pairs of callables on one seeded piece of ``n`` rows."""
    from calengine.reductions.exact import exact_sum, exact_sum_bins
    from calengine_builtins.calibrators import scaling
    from calengine_builtins.calibrators._solvers import _platt_eval

    rng = np.random.default_rng(0)
    x = rng.standard_normal(n)
    cells = 2 * scaling._START_BINS
    idx = np.clip(((np.arcsinh(x) + 40.0) * (scaling._START_BINS / 80.0)).astype(np.int64), 0, cells - 1)
    p = 1.0 / (1.0 + np.exp(-x))
    y = (rng.random(n) < p).astype(np.int64)
    f = x / float(np.max(np.abs(x)))
    t = np.where(y == 1, (y.sum() + 1.0) / (y.sum() + 2.0), 1.0 / (n - y.sum() + 2.0))
    request = {"op": "summary", "kind": "decision", "sorted": False, "on": "logit"}
    return [
        (f"sum, {n:,} terms", lambda: np.sum(x), lambda: exact_sum(x)),
        (f"bins, {n:,} terms into {cells:,} cells", lambda: np.bincount(idx, weights=x, minlength=cells),
         lambda: exact_sum_bins(idx, x, cells)),
        (f"platt round, {n:,} rows", lambda: _platt_eval(f, t, None, -3.0, 0.1),
         lambda: _platt_eval(f, t, None, -3.0, 0.1, exact=True)),
        (f"sigmoid summary, {n:,} rows", lambda: _float_summary(x, y, request),
         lambda: scaling.SigmoidCalibrator().partial_stats(x, y, None, request)),
    ]


def _float_summary(x, y, request):
    """The first round's statistics with the histograms summed by ``np.bincount`` (the float sums before
    issue 43 §1), everything else as now."""
    from calengine_builtins.calibrators import scaling

    saved = scaling.exact_sum_bins
    scaling.exact_sum_bins = lambda index, t, n: np.bincount(index, weights=t, minlength=n)
    try:
        return scaling.SigmoidCalibrator().partial_stats(x, y, None, request)
    finally:
        scaling.exact_sum_bins = saved


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--n", type=int, default=1_000_000, help="rows of the piece")
    args = parser.parse_args(argv)
    print(f"{'workload':<45} {'float s':>10} {'exact s':>10} {'ratio':>8}")
    for name, before, after in rows(args.n):
        a = _common.median_seconds(before, args.repeats)
        b = _common.median_seconds(after, args.repeats)
        print(f"{name:<45} {a:>10.4f} {b:>10.4f} {b / a if a > 0 else float('nan'):>8.1f}")


if __name__ == "__main__":
    main()
