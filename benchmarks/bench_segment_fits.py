#!/usr/bin/env python
"""Calibration by segment (``calengine fit --by``, issue 25 §1): global isotonic against segment-wise
isotonic without shrinkage (K = 0) and with shrinkage towards the global map (K in 20, 50, 200, 1000;
K = inf is the global map again, fitted through the segment path), and which default K to take.

What runs, in one process through the public API (``calengine.fit_table``, embedded cluster):

* **Adult** (``data/adult``; positive class ``>50K``): ``gaussian_nb`` + isotonic, 5-fold ``ensemble``,
  trained on ``train.parquet`` with an ``age_band`` column added (<25, 25-34, ..., 65+) and fitted
  ``--by sex,race,age_band`` (the value tuples: about 100 segments, many small); measured on
  ``test.parquet``.
* **A generated table with planted miscalibration** (:func:`generate`): three numeric features the
  learner sees and a ``region`` column (30 values, sizes from a Zipf law) it does not; the true log-odds
  are ``x1 - 0.5 x2 + 0.3 x3 + delta[region]`` with ``delta ~ N(0, 0.8)``, so no global map can be right in
  every region.  ``--rows`` training rows, as many test rows, fitted ``--by region``.

* **Scale** (``--scale-rows``, ``--scale-segments``): a score column of that many rows with a segment
  column of that many values (small per-segment offsets), ``--scores s`` isotonic fitted globally and
  ``--by seg``, each fit in a fresh process (``--one``): wall and CPU seconds of the fit and the peak
  RSS of the process sampled by ``_common.run_measured`` (embedded cluster: the workers are threads of
  that process), medians of ``--repeats``.

Metrics on the test table: overall log loss, and per segment (each ``--by`` column on its own, as
``calengine evaluate --by`` reports them, with :class:`calengine.metrics.segments.SegmentAccumulator`,
the accumulator ``evaluate --by`` runs) the worst ECE (16 equal-width bins) and the worst ECCE on the
sigma scale among segments of at least ``--min-report-rows`` test rows, plus MCGrad's
multicalibration error (the largest segment ECCE, every segment).

    python benchmarks/bench_segment_fits.py      # writes benchmarks/results/segment_fits.{md,json}
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

SETTINGS = [("global isotonic", None), ("segment isotonic, K = 0", 0.0), ("K = 20", 20.0), ("K = 50", 50.0), ("K = 200", 200.0),
            ("K = 1000", 1000.0), ("K = inf", math.inf)]


def age_band(age) -> np.ndarray:
    edges = [25, 35, 45, 55, 65]
    names = np.array(["<25", "25-34", "35-44", "45-54", "55-64", "65+"], dtype=object)
    return names[np.searchsorted(edges, np.asarray(age, dtype=np.float64), side="right")]


def generate(n: int, seed: int, regions: int = 30):
    import pandas as pd

    rng = np.random.default_rng(seed)
    delta = np.random.default_rng(1000 + regions).normal(0.0, 0.8, regions)  # the same regions in both halves
    sizes = 1.0 / np.arange(1, regions + 1) ** 1.1
    region = rng.choice(regions, size=n, p=sizes / sizes.sum())
    X = rng.normal(size=(n, 3))
    logit = X[:, 0] - 0.5 * X[:, 1] + 0.3 * X[:, 2] + delta[region] - 0.8
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)
    return pd.DataFrame({"x1": X[:, 0], "x2": X[:, 1], "x3": X[:, 2], "region": [f"r{r:02d}" for r in region],
                         "y": y})


def measure(model, test, target: str, by: list[str], min_rows: int) -> dict:
    from calengine.metrics.segments import SegmentAccumulator

    P = model.predict_proba(test)
    y = model.labels.encode(test[target])
    acc = SegmentAccumulator(tuple(by), 2, 20_000)
    acc.add({c: test[c].to_numpy() for c in by}, y, P)
    res = acc.result()
    parts = [r for r in res["segments"][1:] if r["rows"] >= min_rows]
    return {
        "log_loss": float(-np.mean(np.log(np.clip(P[np.arange(len(y)), y], 1e-15, 1.0)))),
        "worst_ece": max(r["ece"] for r in parts),
        "worst_ecce_sigma": max(r["ecce_sigma"] for r in parts),
        "mce_sigma": res["mce_sigma"],
        "segments_reported": len(parts),
    }


def run_case(name: str, train_path: str, test, target: str, positive, by: list[str], exclude: list[str],
             min_rows: int) -> list[dict]:
    import calengine

    rows = []
    for label, k in SETTINGS:
        t0 = time.process_time()
        opts = {"by": ",".join(by), "shrinkage": k} if k is not None else {}
        model = calengine.fit_table(train_path, target, positive=positive, exclude=exclude, method="isotonic",
                                      seed=0, **opts)
        cpu = time.process_time() - t0
        m = measure(model, test, target, by, min_rows)
        seg = model.info.get("x_segments") or {}
        rows.append({"case": name, "setting": label, "shrinkage": k, "fit_cpu_s": cpu,
                     "segments_fitted": seg.get("segments_fitted"), "segments_seen": seg.get("segments_seen"), **m})
        print(f"{name:8s} {label:26s} log loss {m['log_loss']:.5f}  worst ECE {m['worst_ece']:.4f}"
              f"  worst ECCE {m['worst_ecce_sigma']:.2f}  MCE {m['mce_sigma']:.2f}", flush=True)
    return rows


def scale_table(path: Path, n: int, segments: int) -> None:
    import pandas as pd

    rng = np.random.default_rng(0)
    seg = rng.integers(0, segments, n)
    s = rng.random(n).round(3)
    y = (rng.random(n) < np.clip(s + rng.normal(0.0, 0.1, segments)[seg], 0.0, 1.0)).astype(np.int8)
    pd.DataFrame({"s": s, "seg": seg.astype(str), "y": y}).to_parquet(path, row_group_size=100_000)


def one_fit(path: str, by: bool) -> dict:
    """One scale fit in this process: wall, CPU, peak RSS."""
    import calengine

    t0, c0 = time.perf_counter(), time.process_time()
    model = calengine.fit_table(path, "y", scores=("s",), method="isotonic", **({"by": "seg"} if by else {}))
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
            "segments_fitted": (model.info.get("x_segments") or {}).get("segments_fitted")}


def run_scale(n: int, segments: int, repeats: int, tmp: str) -> list[dict]:
    from _common import run_measured

    path = Path(tmp) / "scale.parquet"
    scale_table(path, n, segments)
    rows = []
    for by in (False, True):
        runs = []
        for _ in range(repeats):
            r = run_measured([sys.executable, "-P", __file__, "--one", str(path)] + (["--by"] if by else []))
            if r.returncode:
                raise RuntimeError(r.stderr[-2000:])
            # the sampled peak of the process (ru_maxrss of a child starts at its parent's peak)
            runs.append({**json.loads(r.stdout.strip().splitlines()[-1]), "peak_rss_mib": r.rss["client"] / 2**20})
        med = {k: float(np.median([r[k] for r in runs])) for k in ("wall_s", "cpu_s", "peak_rss_mib")}
        rows.append({"setting": f"--by seg ({segments} segments)" if by else "global", "rows": n, **med,
                     "segments_fitted": runs[0]["segments_fitted"]})
        print(f"scale {rows[-1]}", flush=True)
    return rows


def main(argv=None) -> int:
    import pandas as pd

    from _common import environment, environment_markdown

    if argv is None and len(sys.argv) > 2 and sys.argv[1] == "--one":
        print(json.dumps(one_fit(sys.argv[2], "--by" in sys.argv[3:])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale-rows", type=int, default=1_000_000)
    ap.add_argument("--scale-segments", type=int, default=1_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rows", type=int, default=40_000, help="training rows (and test rows) of the generated table")
    ap.add_argument("--min-report-rows", type=int, default=100, help="smallest test segment whose ECE/ECCE counts")
    ap.add_argument("--out", default=str(HERE / "results" / "segment_fits"))
    args = ap.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        train = pd.read_parquet(REPO / "data" / "adult" / "train.parquet")
        test = pd.read_parquet(REPO / "data" / "adult" / "test.parquet")
        train["age_band"], test["age_band"] = age_band(train["age"]), age_band(test["age"])
        test["class"] = test["class"].str.rstrip(".")
        train.to_parquet(Path(tmp) / "adult.parquet")
        results += run_case("adult", str(Path(tmp) / "adult.parquet"), test, "class", ">50K",
                            ["sex", "race", "age_band"], [], args.min_report_rows)
        gtrain, gtest = generate(args.rows, 1), generate(args.rows, 2)
        gtrain.to_parquet(Path(tmp) / "gen.parquet", row_group_size=5000)
        results += run_case("planted", str(Path(tmp) / "gen.parquet"), gtest, "y", None, ["region"], ["region"],
                            args.min_report_rows)
        scale = run_scale(args.scale_rows, args.scale_segments, args.repeats, tmp) if args.scale_rows else []
    env = environment(REPO, ["calengine", "numpy", "dask", "scikit-learn"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps({"environment": env, "results": results, "scale": scale}, indent=2,
                                                   default=str))
    lines = ["# Calibration by segment: global isotonic vs segment-wise isotonic, with and without shrinkage", "",
             "Written by `python benchmarks/bench_segment_fits.py` (see its docstring for the tables and metrics).",
             "Test-table figures; worst ECE / ECCE over segments of at least"
             f" {args.min_report_rows} test rows, each `--by` column on its own; MCE: MCGrad's multicalibration error"
             " (largest segment ECCE, sigma scale, every segment).", "",
             "| table | setting | segments with own map | log loss | worst ECE | worst ECCE (σ) | MCE (σ) | fit CPU s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        own = "-" if r["segments_fitted"] is None else f"{r['segments_fitted']} of {r['segments_seen']}"
        lines.append(f"| {r['case']} | {r['setting']} | {own} | {r['log_loss']:.5f} | {r['worst_ece']:.4f} |"
                     f" {r['worst_ecce_sigma']:.2f} | {r['mce_sigma']:.2f} | {r['fit_cpu_s']:.1f} |")
    if scale:
        g = scale[0]
        lines += ["", f"Scale: a score column of {args.scale_rows:,} rows, isotonic, embedded cluster, each fit in its own"
                  f" process, medians of {args.repeats} (the machine was shared: compare the ratios).", "",
                  "| fit | wall s | CPU s | peak RSS MiB | wall / global |", "|---|---|---|---|---|"]
        for r in scale:
            lines.append(f"| {r['setting']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['peak_rss_mib']:.0f} |"
                         f" {r['wall_s'] / g['wall_s']:.1f} |")
    lines += ["", *environment_markdown(env)]
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
