#!/usr/bin/env python
"""MCGrad (issue 25 §3) beside global isotonic and segment-wise isotonic (``fit --by``, K = 20): the
worst-segment calibration error and the overall log loss on test rows, and MCGrad's fit time against
the same booster trained once.

What runs, in one process:

* **Adult** (``data/adult``, positive ``>50K``): ``gaussian_nb`` + isotonic (5-fold ``ensemble``,
  ``calengine.fit_table``) trained on ``train.parquet``; segments ``sex``, ``race``, ``age_band``
  (<25, 25-34, ..., 65+) and ``education``.  Segment-wise isotonic is fitted ``--by`` all four (their
  value tuples); MCGrad gets the four columns as categorical features.
* **Planted** (:func:`bench_segment_fits.generate`): three features the learner sees and a ``region``
  (30 values, Zipf sizes) it does not, whose true log-odds carry an offset per region; the default
  learner + isotonic, fitted ``--by region``; ``--rows`` training and as many test rows.

MCGrad (:func:`calengine.methods.mcgrad.fit_mcgrad`, the in-process core with its default parameters:
up to ``--rounds`` rounds of 94 depth-2 XGBoost trees, early stopping on a 20 % holdout) calibrates the
global isotonic model's probabilities of the training rows.  Those are in-sample for the learner (4
of each 5 fold learners saw the row) but out-of-fold for nothing else; with the low-capacity learners
here (naive Bayes, logistic regression) the in-sample scores are close to held-out ones, which is why
this shortcut is taken until the partitioned fit (held-out scores per fold) exists: say so when quoting.

``--via command`` (and ``both``, the default) also runs the three settings through ``calengine fit``, each
in its own process (:func:`run_cli_case`): ``gaussian_nb`` with ``--command-cv`` folds, global isotonic,
``--by`` isotonic and ``--by ... --method mcgrad`` (at most ``--command-rounds`` rounds, early stopping on):
held-out probabilities per fold and boosters trained across the embedded cluster's workers, the engine's
own path, where the in-process core above is the algorithm's; the models are read back and measured alike.

Metrics on the test rows (``bench_segment_fits.measure``: ``calengine evaluate --by``'s accumulator):
overall log loss; per segment, each column on its own, the worst ECE and ECCE (sigma scale) among
segments of at least ``--min-report-rows`` rows; MCE, the largest segment ECCE over every segment.
Time: CPU seconds of MCGrad's fit (early-stopping pass and refit), beside one booster of the same
parameters trained once on the same rows and features (``xgboost.train``, base margin the input logit),
and their ratio; one thread each.

    python benchmarks/bench_mcgrad.py      # writes benchmarks/results/mcgrad.{md,json}

``--ablation`` adds the planted-table gap's ablation (:func:`run_ablation`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))


class _Probabilities:
    """What ``bench_segment_fits.measure`` asks of a model: ``predict_proba`` and ``labels.encode``."""

    def __init__(self, P, labels):
        self.P, self.labels = P, labels

    def predict_proba(self, _df):
        return self.P


def _one_booster_cpu(params, X, f, y) -> float:
    import xgboost as xgb

    from calengine.methods.mcgrad_boosters import library

    t0 = time.process_time()
    data = library("xgboost").matrix(X, f, label=y.astype(np.float32), base_margin=f)
    xgb.train({**params.booster_params(0), "nthread": 1}, data, num_boost_round=int(params.trees))
    return time.process_time() - t0


def run_case(name, train_path, train, test, target, positive, by, exclude, min_rows, rounds) -> list[dict]:
    import calengine
    from bench_segment_fits import measure
    from calengine.methods.mcgrad import MCGradParams, fit_mcgrad, logit, segment_codes

    rows = []

    def record(setting, P_or_model, cpu, extra=None):
        m = measure(P_or_model, test, target, by, min_rows)
        rows.append({"case": name, "setting": setting, "fit_cpu_s": cpu, **m, **(extra or {})})
        print(f"{name:8s} {setting:24s} log loss {m['log_loss']:.5f}  worst ECE {m['worst_ece']:.4f}"
              f"  worst ECCE {m['worst_ecce_sigma']:.2f}  MCE {m['mce_sigma']:.2f}  CPU {cpu:.1f}s", flush=True)

    t0 = time.process_time()
    glob = calengine.fit_table(train_path, target, positive=positive, exclude=exclude, method="isotonic", seed=0)
    record("global isotonic", glob, time.process_time() - t0)
    t0 = time.process_time()
    seg = calengine.fit_table(train_path, target, positive=positive, exclude=exclude, method="isotonic", seed=0,
                              by=",".join(by), max_segments=20_000)
    record("segment isotonic (K=20)", seg, time.process_time() - t0)

    pos = 1  # the models' positive class is column 1
    y = glob.labels.encode(train[target]) == pos
    s_train, s_test = glob.predict_proba(train)[:, pos], glob.predict_proba(test)[:, pos]
    params = MCGradParams(rounds=rounds)
    t0 = time.process_time()
    fit = fit_mcgrad(s_train, y, [train[c].to_numpy() for c in by], params, seed=0)
    cpu = time.process_time() - t0
    X_test = segment_codes([test[c].to_numpy() for c in by], fit.levels)[0]
    p = fit.predict_proba(s_test, X_test)
    X_train = segment_codes([train[c].to_numpy() for c in by], fit.levels)[0]
    one = _one_booster_cpu(params, X_train, logit(s_train), y)
    record("MCGrad on global isotonic", _Probabilities(np.column_stack([1 - p, p]), glob.labels), cpu,
           {"rounds": len(fit.boosters), "rounds_tried": len(fit.holdout_loss) - 1, "one_booster_cpu_s": one,
            "time_ratio": cpu / one})
    print(f"{name:8s} MCGrad: {len(fit.boosters)} rounds kept of {len(fit.holdout_loss) - 1} tried; one booster"
          f" {one:.2f}s CPU, MCGrad {cpu:.1f}s = {cpu / one:.1f}x", flush=True)
    return rows


def run_cli_case(name, train_path, test, target, positive, by, exclude, min_rows, rounds, cv, work) -> list[dict]:
    """The same three settings through the commands (``calengine fit``, each in its own process), the
    models read back and measured on the test rows as :func:`run_case` measures: ``gaussian_nb`` with
    ``--cv`` folds, then global isotonic, ``--by`` isotonic (K = 20) and ``--by ... --method mcgrad``
    (at most ``rounds`` rounds, early stopping on, the other parameters MCGrad's defaults): held-out
    probabilities per fold, trained across the embedded cluster's workers, as a user runs it."""
    import calengine
    from _common import run_measured
    from bench_segment_fits import measure

    base = [sys.executable, "-P", "-m", "calengine", "fit", train_path, "--target", target, "--learner", "gaussian_nb",
            "--cv", str(cv), "--seed", "0", "--quiet", "--overwrite"]
    base += (["--positive", positive] if positive else []) + [a for c in exclude for a in ("--exclude", c)]
    settings = [("global isotonic", []), ("segment isotonic (K=20)", ["--by", ",".join(by), "--max-segments", "20000"]),
                ("MCGrad", ["--by", ",".join(by), "--method", "mcgrad", "--method-param", f"rounds={rounds}"])]
    rows = []
    for setting, extra in settings:
        out = Path(work) / f"{name}-{len(rows)}"
        r = run_measured(base + extra + ["--output", str(out)])
        if r.returncode:
            raise RuntimeError(f"{setting} failed:\n{r.stderr[-2000:]}")
        model = calengine.load_model(out)
        m = measure(model, test, target, by, min_rows)
        cpu = r.rusage["user_s"] + r.rusage["sys_s"]
        kept = (model.info.get("x_mcgrad") or {}).get("members")
        extra_out = {"rounds_kept": [k["rounds"] for k in kept]} if kept else {}
        rows.append({"case": name, "setting": f"{setting} (command)", "fit_cpu_s": cpu, "fit_wall_s": r.wall_s,
                     "command": " ".join(map(str, (base + extra)[3:])), **m, **extra_out})
        print(f"{name:8s} {setting + ' (command)':34s} log loss {m['log_loss']:.5f}  worst ECE {m['worst_ece']:.4f}"
              f"  worst ECCE {m['worst_ecce_sigma']:.2f}  MCE {m['mce_sigma']:.2f}  CPU {cpu:.1f}s"
              f" wall {r.wall_s:.1f}s {extra_out}", flush=True)
    return rows


def run_ablation(rows: int, rounds: int, min_rows: int) -> list[dict]:
    """The planted-table gap (``--ablation``): MCGrad's in-process core on out-of-fold ``GaussianNB``
    probabilities (2 folds, scikit-learn, as the command's fold members score their held-out rows),
    pooled over the folds, from two start points (the raw probabilities, and isotonic fitted on them)
    and with four early-stopping settings; worst region σ and log loss on fresh rows."""
    from bench_segment_fits import generate
    from sklearn.isotonic import IsotonicRegression
    from sklearn.naive_bayes import GaussianNB

    from calengine.methods.mcgrad import MCGradParams, fit_mcgrad, segment_codes
    from calengine.metrics.segments import SegmentAccumulator

    train, test = generate(rows, 1), generate(rows, 2)
    cols = ["x1", "x2", "x3"]
    X, y, Xt, yt = train[cols].to_numpy(), train["y"].to_numpy(), test[cols].to_numpy(), test["y"].to_numpy()
    fold = np.random.default_rng(0).integers(0, 2, len(train))
    oof = np.empty(len(train))
    for k in (0, 1):
        oof[fold == k] = GaussianNB().fit(X[fold != k], y[fold != k]).predict_proba(X[fold == k])[:, 1]
    p_test = GaussianNB().fit(X, y).predict_proba(Xt)[:, 1]
    iso = IsotonicRegression(out_of_bounds="clip", y_min=1e-6, y_max=1 - 1e-6).fit(oof, y)
    region, region_t = [train["region"].to_numpy()], [test["region"].to_numpy()]
    out = []
    for start, s_fit, s_test in (("raw NB", oof, p_test), ("isotonic", iso.predict(oof), iso.predict(p_test))):
        for label, kw in (("defaults (patience 0)", {}), ("patience 5", {"patience": 5}),
                          ("patience 5, min_child_weight 5", {"patience": 5, "min_child_weight": 5.0}),
                          (f"no early stopping, {rounds} rounds", {"early_stopping": False})):
            fit = fit_mcgrad(s_fit, y, region, MCGradParams(**{"rounds": rounds, **kw}), seed=0)
            p = fit.predict_proba(s_test, segment_codes(region_t, fit.levels)[0])
            acc = SegmentAccumulator(("region",), 2, 20_000)
            acc.add({"region": region_t[0]}, yt, np.column_stack([1 - p, p]))
            worst = max(r["ecce_sigma"] for r in acc.result()["segments"][1:] if r["rows"] >= min_rows)
            loss = float(-np.mean(yt * np.log(p) + (1 - yt) * np.log(1 - p)))
            out.append({"start": start, "setting": label, "rounds": len(fit.boosters), "worst_ecce_sigma": worst,
                        "log_loss": loss, "holdout_loss": fit.holdout_loss[:8]})
            print(f"ablation {start:9s} {label:34s} rounds {len(fit.boosters):3d}  worst σ {worst:.2f}"
                  f"  log loss {loss:.5f}", flush=True)
    return out


def main(argv=None) -> int:
    import pandas as pd

    from _common import environment, environment_markdown
    from bench_segment_fits import age_band, generate

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=40_000, help="training rows (and test rows) of the planted table")
    ap.add_argument("--rounds", type=int, default=100, help="MCGrad's most rounds (early stopping picks)")
    ap.add_argument("--cases", default="adult,planted", help="which tables (comma-separated)")
    ap.add_argument("--via", choices=("core", "command", "both"), default="both",
                    help="core: the in-process algorithm on training rows; command: calengine fit per setting")
    ap.add_argument("--command-rounds", type=int, default=8, help="MCGrad's most rounds through the command")
    ap.add_argument("--command-cv", type=int, default=2, help="folds of the learner through the command")
    ap.add_argument("--min-report-rows", type=int, default=100, help="smallest test segment whose ECE/ECCE counts")
    ap.add_argument("--ablation", action="store_true", help="also the planted-table gap's ablation (run_ablation)")
    ap.add_argument("--out", default=str(HERE / "results" / "mcgrad"))
    args = ap.parse_args(argv)
    results = []
    ablation = run_ablation(args.rows, 30, args.min_report_rows) if args.ablation else []
    with tempfile.TemporaryDirectory() as tmp:
        cases = args.cases.split(",")
        if "adult" in cases:
            train = pd.read_parquet(REPO / "data" / "adult" / "train.parquet")
            test = pd.read_parquet(REPO / "data" / "adult" / "test.parquet")
            train["age_band"], test["age_band"] = age_band(train["age"]), age_band(test["age"])
            test["class"] = test["class"].str.rstrip(".")
            train.to_parquet(Path(tmp) / "adult.parquet")
            adult = (str(Path(tmp) / "adult.parquet"), "class", ">50K", ["sex", "race", "age_band", "education"], [])
            if args.via != "command":
                results += run_case("adult", adult[0], train, test, *adult[1:], args.min_report_rows, args.rounds)
            if args.via != "core":
                results += run_cli_case("adult", adult[0], test, *adult[1:], args.min_report_rows, args.command_rounds,
                                        args.command_cv, tmp)
        if "planted" in cases:
            gtrain, gtest = generate(args.rows, 1), generate(args.rows, 2)
            gtrain.to_parquet(Path(tmp) / "gen.parquet", row_group_size=5000)
            planted = (str(Path(tmp) / "gen.parquet"), "y", None, ["region"], ["region"])
            if args.via != "command":
                results += run_case("planted", planted[0], gtrain, gtest, *planted[1:], args.min_report_rows,
                                    args.rounds)
            if args.via != "core":
                results += run_cli_case("planted", planted[0], gtest, *planted[1:], args.min_report_rows,
                                        args.command_rounds, args.command_cv, tmp)
    env = environment(REPO, ["calengine", "numpy", "xgboost-cpu", "scikit-learn"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps({"environment": env, "results": results, "ablation": ablation},
                                                   indent=2, default=str))
    lines = ["# MCGrad beside global and segment-wise isotonic", "",
             "Written by `python benchmarks/bench_mcgrad.py` (see its docstring for the tables, metrics and the"
             " in-sample caveat). Test-table figures; worst ECE / ECCE over segments of at least"
             f" {args.min_report_rows} test rows, each segment column on its own; MCE: largest segment ECCE"
             " (sigma scale, every segment).", "",
             "| table | setting | log loss | worst ECE | worst ECCE (σ) | MCE (σ) | fit CPU s | MCGrad rounds | × one booster |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [_table_row(r) for r in results]
    if ablation:
        lines += ["", "Ablation (`--ablation`, planted table, in process, out-of-fold GaussianNB probabilities pooled):", "",
                  "| start | early stopping | rounds kept | worst ECCE (σ) | log loss |", "|---|---|---|---|---|"]
        lines += [f"| {a['start']} | {a['setting']} | {a['rounds']} | {a['worst_ecce_sigma']:.2f} | {a['log_loss']:.5f} |"
                  for a in ablation]
    lines += ["", *environment_markdown(env)]
    md = Path(args.out + ".md")
    # the Findings are written by hand under the figures: a new run keeps them for their author to revise
    old = md.read_text() if md.exists() else ""
    findings = old[old.index("\n## Findings"):] if "\n## Findings" in old else ""
    md.write_text("\n".join(lines) + "\n" + findings)
    return 0


def _table_row(r: dict) -> str:
    cells = [r["case"], r["setting"], f"{r['log_loss']:.5f}", f"{r['worst_ece']:.4f}", f"{r['worst_ecce_sigma']:.2f}",
             f"{r['mce_sigma']:.2f}", f"{r['fit_cpu_s']:.1f}",
             f"{r['rounds']} of {r['rounds_tried']} tried" if "rounds" in r
             else ",".join(map(str, r["rounds_kept"])) + " (per fold member)" if "rounds_kept" in r else "-",
             f"{r['time_ratio']:.1f}" if "time_ratio" in r else "-"]
    return "| " + " | ".join(cells) + " |"


if __name__ == "__main__":
    sys.exit(main())
