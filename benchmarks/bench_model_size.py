#!/usr/bin/env python
"""Model size and load time (issue 12, targets 2 and 6): array state against the skops state it
replaced, side by side in one run.

For each case the model is fitted once with ``calengine fit`` (the new format: learners stored as
arrays, mostly-zero arrays sparse, large members deflated); the *baseline* is the same fitted model
saved again with every learner's state as the skops dump calengine wrote before (``{"estimator":
...}``, which this version still loads).  Both directories hold the same model: their predictions
are compared.  Reported per case and format: bytes on disk, number of files, ``load_model`` time
(median, in this process) and the wall time of a whole ``calengine evaluate`` on the test file
(median of fresh processes), with the ratios new / baseline.

Cases (data under ``--data-dir``, default ``../shared/data``):

* ``20ng`` -- 20 Newsgroups, ``multinomial_nb`` + isotonic, cv=5, the text hashed into 2^18 columns;
* ``pendigits`` -- Pendigits, ``gaussian_nb`` + isotonic, ``all_pairs:coupling`` (45 columns x 5
  members = 225 learners), the model issue 12's target 2 evaluates.

    python benchmarks/bench_model_size.py [--cases 20ng,pendigits] [--repeats 3] [--no-write]
    python benchmarks/bench_model_size.py --ng-train data/newsgroups_sample.parquet \
        --ng-test data/newsgroups_sample.parquet --pendigits-train data/pendigits_train.parquet \
        --pendigits-test data/pendigits_test.parquet --repeats 1 --no-write     # test-sized
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _dir_size(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def save_with_skops_state(model_dir: Path, out_dir: Path) -> None:
    """Re-save ``model_dir`` with every array-state learner stored as its skops dump (the old format)."""
    from calengine.base import SklearnLearner
    from calengine.model.artifact import load_model, save_model
    from calengine_builtins.learners._array_state import _ArrayState

    model = load_model(model_dir)
    mixin = _ArrayState
    saved = mixin.to_state
    mixin.to_state = SklearnLearner.to_state
    try:
        save_model(model, out_dir, overwrite=True)
    finally:
        mixin.to_state = saved


def _load_seconds(model_dir: Path, repeats: int) -> float:
    from calengine.model.artifact import load_model

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        load_model(model_dir)
        times.append(time.perf_counter() - t0)
    return _common.median(times)


def _same_predictions(a: Path, b: Path, test: str, target: str) -> bool:
    import pyarrow.parquet as pq

    from calengine.model.artifact import load_model

    frame = pq.read_table(test).to_pandas().head(2000)
    pa_, pb = load_model(a).predict_proba(frame.drop(columns=[target])), load_model(b).predict_proba(frame.drop(columns=[target]))
    return bool(np.array_equal(pa_, pb))


def run_case(name: str, train: str, test: str, fit_args: list[str], target: str, repeats: int, work: Path) -> dict:
    cli = [sys.executable, "-P", "-m", "calengine"]
    new_dir, old_dir = work / f"{name}-arrays", work / f"{name}-skops"
    fit = _common.run_measured([*cli, "fit", train, "--target", target, *fit_args, "--output", str(new_dir),
                                "--overwrite", "--quiet"])
    if fit.returncode != 0:
        raise SystemExit(f"error: fitting {name} failed: {fit.stderr.strip().splitlines()[-1:]}")
    save_with_skops_state(new_dir, old_dir)
    row: dict = {"case": name, "fit_seconds": fit.wall_s, "same_predictions": _same_predictions(new_dir, old_dir, test, target)}
    for label, d in (("arrays", new_dir), ("skops", old_dir)):
        size, nfiles = _dir_size(d)
        evals = []
        for _ in range(repeats):
            r = _common.run_measured([*cli, "evaluate", str(d), test, "--target", target, "--quiet"])
            if r.returncode != 0:
                raise SystemExit(f"error: evaluating {name} ({label}) failed: {r.stderr.strip().splitlines()[-1:]}")
            evals.append(r.wall_s)
        row[label] = {"bytes": size, "files": nfiles, "load_seconds": _load_seconds(d, repeats),
                      "evaluate_seconds": _common.median(evals)}
    row["size_ratio"] = _common.ratio(row["arrays"]["bytes"], row["skops"]["bytes"])
    row["load_ratio"] = _common.ratio(row["arrays"]["load_seconds"], row["skops"]["load_seconds"])
    row["evaluate_ratio"] = _common.ratio(row["arrays"]["evaluate_seconds"], row["skops"]["evaluate_seconds"])
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--cases", default="20ng,pendigits")
    ap.add_argument("--ng-train"), ap.add_argument("--ng-test")
    ap.add_argument("--pendigits-train"), ap.add_argument("--pendigits-test")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--results-dir", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    data = Path(args.data_dir)
    cases = {
        "20ng": (args.ng_train or str(data / "20newsgroups" / "train.parquet"),
                 args.ng_test or str(data / "20newsgroups" / "test.parquet"),
                 ["--text-column", "text", "--exclude", "file_id", "--learner", "multinomial_nb", "--method", "isotonic"]),
        "pendigits": (args.pendigits_train or str(data / "pendigits" / "train.parquet"),
                      args.pendigits_test or str(data / "pendigits" / "test.parquet"),
                      ["--learner", "gaussian_nb", "--method", "isotonic", "--multiclass", "all_pairs:coupling"]),
    }
    rows = []
    work = Path(tempfile.mkdtemp(prefix="calengine-model-size-"))
    try:
        for name in [c.strip() for c in args.cases.split(",") if c.strip()]:
            if name not in cases:
                raise SystemExit(f"error: unknown case '{name}'; choose from {', '.join(cases)}")
            train, test, fit_args = cases[name]
            if name == "20ng" and args.ng_train and "file_id" not in _columns(train):
                fit_args = [a for a in fit_args if a not in ("--exclude", "file_id")]
            rows.append(run_case(name, train, test, fit_args, "class", args.repeats, work))
            r = rows[-1]
            print(f"{name}: arrays {r['arrays']['bytes'] / 1e6:.1f} MB in {r['arrays']['files']} files, "
                  f"skops {r['skops']['bytes'] / 1e6:.1f} MB in {r['skops']['files']} files (ratio {_common.fmt(r['size_ratio'], 4)}); "
                  f"load {_common.fmt(r['arrays']['load_seconds'])} s vs {_common.fmt(r['skops']['load_seconds'])} s "
                  f"(ratio {_common.fmt(r['load_ratio'])}); evaluate {_common.fmt(r['arrays']['evaluate_seconds'])} s vs "
                  f"{_common.fmt(r['skops']['evaluate_seconds'])} s (ratio {_common.fmt(r['evaluate_ratio'])}); "
                  f"same predictions: {r['same_predictions']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table = _common.markdown_table(
        ["case", "format", "MB", "files", "load_model s", "calengine evaluate s"],
        [(r["case"], fmt_name, f"{r[fmt_name]['bytes'] / 1e6:.2f}", r[fmt_name]["files"],
          _common.fmt(r[fmt_name]["load_seconds"]), _common.fmt(r[fmt_name]["evaluate_seconds"]))
         for r in rows for fmt_name in ("arrays", "skops")],
    )
    ratios = _common.markdown_table(
        ["case", "size arrays/skops", "load", "evaluate", "same predictions"],
        [(r["case"], _common.fmt(r["size_ratio"], 4), _common.fmt(r["load_ratio"]), _common.fmt(r["evaluate_ratio"]),
          r["same_predictions"]) for r in rows],
    )
    md = (f"# Model size and load time\n\n`{_common.command_line()}`\n\n{table}\n\nRatios (array state / skops state,"
          f" same fitted model):\n\n{ratios}\n")
    if not args.no_write:
        facts = {"command": _common.command_line(), "machine": _common.machine_info(), "git": _common.git_commit(ROOT),
                 "rows": rows}
        _common.write_results(args.results_dir, "model_size", facts, md)
    print(md)
    return 0


def _columns(path: str) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_schema(path).names


if __name__ == "__main__":
    raise SystemExit(main())
