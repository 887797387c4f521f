#!/usr/bin/env python
"""Does calibration change the profit of decisions?  Zadrozny & Elkan's KDD'98 experiment, on COIL 2000.

The paper (KDD 2002, section 5, Table 1) mails a donor when ``p(x) * amount(x) > cost`` and shows that
calibrated naive Bayes earns more than raw naive Bayes.  The KDD'98 data is not available here.  COIL
2000 (the Insurance Company Benchmark, the paper's other two-class set) is the analogue it names itself:
decide whom to offer a caravan insurance policy.  The paper reports only MSE there because "cost/benefit
information is not available"; so this script *states* a cost structure and reports profit under it:

* **constant**: an offer costs 5, a sale brings 50 (a hypothetical margin): benefit matrix
  ``[[0, 0], [-5, 45]]``, Bayes threshold p* = 5 / 50 = 0.1 (about 1.7 times the 6% base rate);
* **per customer**: a sale brings ``10 * MKOOPKLA`` (the customer's purchasing-power class, 1-8, so
  10-80; a hypothetical rule that wealthier customers buy larger policies), an offer costs 5: mail when
  ``p(x) * 10 * MKOOPKLA(x) > 5``, the paper's rule with a column as the amount.

Learner: calengine's ``categorical_nb`` (each attribute discretised into 50 quantile bins; the naive
Bayes of ``bench_zadrozny_elkan.py``: ``gaussian_nb`` is worse than random on COIL's integer codes), fitted
with ``mode="refit"`` (learner on all training rows, calibrator on its 5-fold out-of-fold scores).
Rows: raw naive Bayes (``method="none"``), sigmoid, isotonic (PAV), binning; each policy decides by
minimum expected cost (``calengine.decisions``) on the standard test split (4,000 rows); the best
constant policy (mail nobody / everybody) and the oracle bracket them.  "best t" is the single
threshold on p that would have earned most on the test set itself (hindsight, not a policy).

    python benchmarks/bench_decisions.py                      # the shipped data/coil2000 copy
    python benchmarks/bench_decisions.py --max-train-rows 1500 --json out.json   # smoke
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import command_line, fmt, git_commit, markdown_table, package_versions, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
METHODS = (("raw NB", "none", {}), ("sigmoid", "sigmoid", {}), ("isotonic (PAV)", "isotonic", {}),
           ("binning", "binning", {}))


def cost_structures(mail_cost: float, benefit: float, value_per_class: float) -> dict[str, dict]:
    return {
        "constant": {"classes": [0, 1], "benefits": [[0, 0], [-mail_cost, benefit - mail_cost]]},
        "per customer": {"classes": [0, 1],
                         "benefits": [[0, 0], [-mail_cost, f"{value_per_class:g}*MKOOPKLA - {mail_cost:g}"]]},
    }


def run(train: pd.DataFrame, test: pd.DataFrame, structures: dict, seed: int, cv: int) -> dict:
    from calengine import CalibratedClassifier
    from calengine.decisions import DecisionAccumulator, load_cost_matrix
    from calengine.metrics.measures import evaluate_predictions

    Xtr, ytr = train.drop(columns="class"), train["class"].to_numpy()
    Xte, yte = test.drop(columns="class"), test["class"].to_numpy()
    out = {"n_train": len(train), "n_test": len(test), "positives_test": int(yte.sum()), "rows": []}
    for label, method, params in METHODS:
        t0 = time.perf_counter()
        clf = CalibratedClassifier(learner="categorical_nb", learner_params={"n_bins": 50}, method=method,
                                   method_params=params, mode="refit", cv=cv, seed=seed).fit(Xtr, ytr)
        P = clf.predict_proba(Xte)
        y_idx = np.searchsorted(clf.classes_, yte)
        row = {"method": label, "seconds": time.perf_counter() - t0,
               "brier": float(evaluate_predictions(y_idx, P)["brier"])}
        for name, spec in structures.items():
            cm = load_cost_matrix(spec).for_classes(list(clf.classes_))
            res = DecisionAccumulator(cm).add(y_idx, P, None, Xte).result()
            row[name] = {"profit": res["calibrated"]["total"], "mailed": res["calibrated"]["decided"]["1"],
                         "best_t": res["best_threshold"]["calibrated"]["threshold"],
                         "best_t_profit": res["best_threshold"]["calibrated"]["total"],
                         "best_constant": res["best_constant"], "oracle": res["oracle"]["total"],
                         "bayes_threshold": res["bayes_threshold"]}
        out["rows"].append(row)
    return out


def render(result: dict, structures: dict) -> str:
    lines = [f"COIL 2000: {result['n_train']} training rows, {result['n_test']} test rows"
             f" ({result['positives_test']} caravan buyers)"]
    for name, spec in structures.items():
        first = result["rows"][0][name]
        const = first["best_constant"]
        lines += ["", f"cost structure '{name}': benefits[decided][true] = {json.dumps(spec['benefits'])}"
                  + (f", Bayes threshold p* = {first['bayes_threshold']:.3g}" if first["bayes_threshold"] else "")
                  + f"; best constant: always {const['class']} (profit {fmt(const['total'], 0)});"
                  f" oracle {fmt(first['oracle'], 0)}"]
        rows = [[r["method"], fmt(r["brier"], 4), fmt(r[name]["profit"], 0), str(r[name]["mailed"]),
                 fmt(r[name]["best_t"], 3), fmt(r[name]["best_t_profit"], 0)] for r in result["rows"]]
        lines.append(markdown_table(["naive Bayes +", "Brier", "test profit", "mailed", "best t (hindsight)",
                                     "profit at best t"], rows))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=ROOT / "data" / "coil2000",
                    help="folder with train.parquet and test.parquet (class column 'class'; default: data/coil2000)")
    ap.add_argument("--mail-cost", type=float, default=5.0)
    ap.add_argument("--benefit", type=float, default=50.0, help="what a sale brings in the constant structure")
    ap.add_argument("--value-per-class", type=float, default=10.0,
                    help="per-customer structure: a sale brings this times MKOOPKLA")
    ap.add_argument("--max-train-rows", type=int, default=None, help="a seeded subset of the training rows (smoke)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cv", type=int, default=5)
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--results-dir", type=Path, help="also write decisions.md / decisions.json here (e.g. benchmarks/results)")
    args = ap.parse_args(argv)

    train = pd.read_parquet(args.data_dir / "train.parquet")
    test = pd.read_parquet(args.data_dir / "test.parquet")
    if args.max_train_rows is not None and len(train) > args.max_train_rows:
        keep = np.sort(np.random.default_rng(args.seed).choice(len(train), args.max_train_rows, replace=False))
        train = train.iloc[keep].reset_index(drop=True)
    structures = cost_structures(args.mail_cost, args.benefit, args.value_per_class)
    result = run(train, test, structures, args.seed, args.cv)
    result["cost_structures"] = structures
    print(render(result, structures))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=float))
    if args.results_dir:
        result.update(command=command_line(), git=git_commit(ROOT),
                      versions=package_versions(["calengine", "numpy", "scikit-learn"]))
        md = (f"# Decisions on COIL 2000: profit of raw vs calibrated naive Bayes\n\n`{result['command']}`"
              f" (commit {result['git']['commit']}, seed {args.seed}, {args.cv} folds)\n\n```\n"
              + render(result, structures) + "\n```\n\nSee the script's docstring for the protocol.\n")
        write_results(args.results_dir, "decisions", result, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
