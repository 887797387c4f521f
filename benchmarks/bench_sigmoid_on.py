#!/usr/bin/env python
"""Platt's sigmoid on a probability score or on its logit (``--method-param on=score|logit``): which
default should ``sigmoid`` have?  (issue 21 §3; scikit-learn issue #34312.)

What runs, all in one process, through the public API (``calengine.calibrate_scores(..., method="sigmoid",
method_params={"on": ON}, score_kind="proba")``, then ``model.predict_frame``):

* **Adult** (``--data-dir``, default ``/work/shared/data``; the positive class is ``>50K``): three
  models trained outside calengine on the training table (numeric columns plus one-hot categories)
  give a probability column on the test table -- scikit-learn's ``GaussianNB`` (notoriously pushed to
  0 and 1), ``LogisticRegression`` (nearly calibrated already) and an XGBoost ``XGBClassifier``
  (200 trees, depth 6).  The test table is cut in two halves (even / odd rows): each half is
  calibrated on the other, so every test row gets a probability from a map that never saw it, and
  the metrics are over all 16281 test rows.
* **The generated score table** (``gen_scores_table.generate_scores``, the default spec): the label
  follows the known link ``P(y | s) = σ(0.5 logit(s) − 0.4)``, so ``on=logit`` is the well-specified
  model there and the true probability's own metrics are the floor.  Calibration sets of
  ``--gen-cal-rows`` rows (several sizes), one held-out evaluation set of ``--gen-eval-rows`` rows.

Metrics (``calengine.metrics.measures.evaluate_predictions``): log loss (nats), Brier score and ECE
(15 equal-width bins of the top-label confidence, i.e. of ``max(p, 1 − p)`` for two classes), plus the
raw, uncalibrated scores as the baseline.  No timing: both settings cost the same rounds.

    python benchmarks/bench_sigmoid_on.py                # writes benchmarks/results/sigmoid_on.{md,json}
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402
import gen_scores_table as GS  # noqa: E402

ONS = ("score", "logit")
METRICS = ("log_loss", "brier", "ece")


def _metrics(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    from calengine.metrics.measures import evaluate_predictions

    r = evaluate_predictions(np.asarray(y, dtype=np.int64), np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0))
    return {m: float(r[m]) for m in METRICS}


def _calibrated(s_cal, y_cal, s_eval, on: str) -> np.ndarray:
    import calengine

    model = calengine.calibrate_scores(pd.DataFrame({"s": s_cal, "y": y_cal}), "y", "s", method="sigmoid",
                                       method_params={"on": on}, score_kind="proba")
    return model.predict_frame(pd.DataFrame({"s": s_eval}))["p_1"].to_numpy()


def _adult_scores(data_dir: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Test labels and each outside model's probability column on the test table."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import GaussianNB
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from xgboost import XGBClassifier

    train = pd.read_parquet(data_dir / "adult" / "train.parquet")
    test = pd.read_parquet(data_dir / "adult" / "test.parquet")
    y = [(df["class"].astype(str).str.rstrip(".") == ">50K").to_numpy().astype(np.int64) for df in (train, test)]
    both = pd.get_dummies(pd.concat([train.drop(columns="class"), test.drop(columns="class")]), dtype=np.float64)
    X = both.fillna(0.0).to_numpy(dtype=np.float64)
    Xtr, Xte = X[: len(train)], X[len(train):]
    models = {
        "gaussian_nb": GaussianNB(),
        "logistic_regression": make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)),
        "xgboost (prefit)": XGBClassifier(n_estimators=200, max_depth=6, learning_rate=0.1, random_state=0,
                                          n_jobs=1, tree_method="hist"),
    }
    return y[1], {name: m.fit(Xtr, y[0]).predict_proba(Xte)[:, 1] for name, m in models.items()}


def _cross_halves(s: np.ndarray, y: np.ndarray, on: str) -> np.ndarray:
    """Each half of the rows calibrated on the other half."""
    out = np.empty_like(s, dtype=np.float64)
    idx = np.arange(s.size)
    for a, b in ((idx % 2 == 0, idx % 2 == 1), (idx % 2 == 1, idx % 2 == 0)):
        out[b] = _calibrated(s[a], y[a], s[b], on)
    return out


def run(args) -> list[dict]:
    rows: list[dict] = []
    y, scores = _adult_scores(Path(args.data_dir))
    for name, s in scores.items():
        rows.append({"data": "adult", "model": name, "calibration": "raw", **_metrics(y, s)})
        for on in ONS:
            rows.append({"data": "adult", "model": name, "calibration": f"sigmoid on={on}",
                         **_metrics(y, _cross_halves(s, y, on))})
    spec = GS.ScoresSpec(rows=0)
    s_all, y_all = GS.generate_scores(spec, 0, args.gen_eval_rows + max(args.gen_cal_rows))
    s_ev, y_ev = s_all[: args.gen_eval_rows].astype(np.float64), y_all[: args.gen_eval_rows].astype(np.int64)
    rows.append({"data": "generated", "model": "n/a", "calibration": "raw", **_metrics(y_ev, s_ev)})
    rows.append({"data": "generated", "model": "n/a", "calibration": "true P(y|s)",
                 **_metrics(y_ev, GS.true_probability(spec, s_ev))})
    for n in args.gen_cal_rows:
        s_cal = s_all[args.gen_eval_rows: args.gen_eval_rows + n].astype(np.float64)
        y_cal = y_all[args.gen_eval_rows: args.gen_eval_rows + n].astype(np.int64)
        for on in ONS:
            rows.append({"data": "generated", "model": f"{n} calibration rows", "calibration": f"sigmoid on={on}",
                         **_metrics(y_ev, _calibrated(s_cal, y_cal, s_ev, on))})
    return rows


def markdown(rows: list[dict], args) -> str:
    body = C.markdown_table(["data", "model / calibration set", "calibration", "log loss", "Brier", "ECE"],
                            [[r["data"], r["model"], r["calibration"], f"{r['log_loss']:.4f}", f"{r['brier']:.4f}",
                              f"{r['ece']:.4f}"] for r in rows], align=["l", "l", "l", "r", "r", "r"])
    return "\n".join([
        "# Platt's sigmoid on the score or on its logit (`sigmoid --method-param on=score|logit`)",
        "",
        "Adult: three models trained outside calengine on the training table; the test table's halves are each",
        "calibrated on the other (metrics over all test rows).  Generated: the score table of",
        f"`gen_scores_table.py` (known link P(y|s) = sigmoid(0.5 logit s - 0.4)), {args.gen_eval_rows} held-out rows.",
        "ECE: 15 equal-width bins of the top-label confidence (calengine's `ece`).  Lower is better everywhere.",
        "",
        body,
        "",
        f"Command: `python benchmarks/{C.command_line()}`",
        "",
        C.machine_line(HERE.parent),
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default="/work/shared/data")
    ap.add_argument("--gen-cal-rows", type=lambda v: [int(x) for x in v.split(",")], default=[1000, 100000])
    ap.add_argument("--gen-eval-rows", type=int, default=200000)
    ap.add_argument("--results-dir", default=str(HERE / "results"))
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    rows = run(args)
    C.publish(markdown(rows, args), rows, "sigmoid_on", args.results_dir, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
