#!/usr/bin/env python
"""Multiclass scalings on the logits of a model trained outside calengine (issue 21, evidence).

What is measured
----------------
For each dataset a multinomial model is trained OUTSIDE calengine on part of the shipped train split:

* ``pendigits`` (the repository's ``data/pendigits_{train,test}.parquet``): scikit-learn's ``StandardScaler`` + ``LogisticRegression`` (multinomial, lbfgs) on the
  16 pen coordinates, 10 classes;
* ``20ng``: 20 Newsgroups (bydate, the parquet as shipped in the shared data folder,
  ``$CALENGINE_SHARED_DATA``, default ``/work/shared/data``: headers and quotes kept), a
  ``TfidfVectorizer(sublinear_tf=True, min_df=2, max_features=--max-features)`` + ``LogisticRegression``
  on its sparse features, 20 classes.  ``--max-features`` (default 50,000) bounds the vocabulary so the
  fit stays within two shared cores; it is recorded with the results.

The shipped train split is cut (stratified, ``--seed``) into the model's training rows and a
calibration split (``--cal-fraction``, default 0.3); the shipped test split is the test split.  The
model's logits (``decision_function``, the multinomial linear predictor) are written as score
columns ``logit_<class>`` with the label to ``cal.parquet`` and ``test.parquet``.

Then, each in a fresh process: ``calengine fit cal.parquet --target class --scores logit_... --classes
... --score-kind logit --method M`` for M in ``temperature``, ``vector_scaling``, ``matrix_scaling``,
``dirichlet`` (``form=full`` and ``form=diagonal``), and beside them scikit-learn's
``CalibratedClassifierCV(FrozenEstimator(clf), method="temperature")`` fitted on the calibration
split's features (a child process that loads the pickled model and the features, fits and predicts
the test split).  Every configuration runs ``--repeats`` times, interleaved; wall time and peak RSS
(the launched process's, ``_common.run_measured``; calengine runs embedded, one process) are medians.
Both sides' walls are whole processes: interpreter start and imports, reading the inputs (calengine:
the calibration Parquet; scikit-learn: unpickling the model and the features), the fit, and for
scikit-learn also predicting the test split.  On tables of a few thousand rows that is mostly start-up,
so the ratio says the two cost the same order of time here, not which fit is faster.

A multiclass scaling that does not finish is recorded with its one-line error and the others run on.

Quality, on the test split, all from ``calengine evaluate --json`` (one call over every model): the
uncalibrated model's and scikit-learn's probabilities are written as probability columns of the test
table and evaluated through ``fit --scores ... --score-kind proba --method none`` models (the identity
map), so every figure comes from the same metric code: log loss, Brier, and classwise ECE (the
``ece_classwise`` key).  The fitted temperatures are set side by side (calengine's from the saved
model, scikit-learn's ``1 / beta_``), and ``max |dp|`` compares calengine's temperature-scaled test
probabilities with scikit-learn's.

Solvers (issue 21 §3): in the benchmark's own process, each linear scaling is fitted on the
calibration logits (their log-softmax, what ``--score-kind logit`` hands it; one piece) by its Newton
solver and, side by side, by the former L-BFGS one (the same calibrator with Newton switched off):
passes over the rows (reduction rounds), CPU seconds (``time.process_time``), the end (converged or
the warning) and the test log loss of the fitted map (clipped at 1e-15, as ``evaluate``'s); then
``matrix_scaling`` at each ODIR strength of ``--reg-grid`` (test log loss and Brier).

Results: ``benchmarks/results/multiclass_scaling.md`` and ``.json`` (``--results-dir``).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("CALENGINE_SHARED_DATA", "/work/shared/data"))
METHODS = [
    ("temperature", []),
    ("vector_scaling", []),
    ("matrix_scaling", []),
    ("dirichlet full", ["--method-param", "form=full"]),
    ("dirichlet diagonal", ["--method-param", "form=diagonal"]),
]


# ---------------------------------------------------------------------------------------------- data


def load_dataset(name: str, max_features: int, max_rows: int | None, seed: int):
    """(X_train, y_train, X_test, y_test, description) of the shipped splits; ``max_rows`` subsamples
    each split (stratified by position after a seeded shuffle) for smoke runs."""
    import pandas as pd

    if name == "pendigits":  # the repository's copy (identical to the shared data's pendigits/)
        train, test = (pd.read_parquet(ROOT / "data" / f"pendigits_{s}.parquet") for s in ("train", "test"))
    else:
        folder = DATA / "20newsgroups"
        train, test = pd.read_parquet(folder / "train.parquet"), pd.read_parquet(folder / "test.parquet")
    if max_rows:
        train = train.sample(n=min(max_rows, len(train)), random_state=seed).reset_index(drop=True)
        test = test.sample(n=min(max_rows, len(test)), random_state=seed).reset_index(drop=True)
    if name == "pendigits":
        cols = [c for c in train.columns if c != "class"]
        return (train[cols].to_numpy(np.float64), train["class"].to_numpy(), test[cols].to_numpy(np.float64),
                test["class"].to_numpy(), f"{len(cols)} numeric features")
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(sublinear_tf=True, min_df=2, max_features=max_features, dtype=np.float64)
    Xtr = vec.fit_transform(train["text"])
    return (Xtr, train["class"].astype(str).to_numpy(), vec.transform(test["text"]),
            test["class"].astype(str).to_numpy(), f"tf-idf, {Xtr.shape[1]} sparse features (max {max_features})")


def train_model(name: str, X, y):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if name == "pendigits":
        return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000)).fit(X, y)
    return LogisticRegression(C=10.0, max_iter=300).fit(X, y)


def write_tables(out: Path, name: str, max_features: int, max_rows: int | None, seed: int, cal_fraction: float) -> dict:
    """Train outside calengine, write cal/test Parquet with logit columns, pickle what the scikit-learn
    child needs; returns the setup facts."""
    import pandas as pd
    import scipy.sparse as sp
    from sklearn.model_selection import train_test_split

    Xtr, ytr, Xte, yte, features = load_dataset(name, max_features, max_rows, seed)
    Xfit, Xcal, yfit, ycal = train_test_split(Xtr, ytr, test_size=cal_fraction, stratify=ytr, random_state=seed)
    t0 = time.perf_counter()
    clf = train_model(name, Xfit, yfit)
    train_s = time.perf_counter() - t0
    classes = [str(c) for c in clf.classes_]
    out.mkdir(parents=True, exist_ok=True)

    def table(X, y, extra=None):
        Z = np.asarray(clf.decision_function(X), dtype=np.float64)
        df = pd.DataFrame(Z, columns=[f"logit_{c}" for c in classes])
        df["class"] = np.asarray(y).astype(str)
        if extra is not None:
            for prefix, P in extra.items():
                for j, c in enumerate(classes):
                    df[f"{prefix}_{c}"] = P[:, j]
        return df

    table(Xcal, ycal).to_parquet(out / "cal.parquet", index=False)
    table(Xte, yte, {"raw": clf.predict_proba(Xte)}).to_parquet(out / "test.parquet", index=False)
    with open(out / "sk.pkl", "wb") as fh:
        pickle.dump({"clf": clf, "X_cal": Xcal, "y_cal": ycal, "X_test": Xte}, fh)
    return {"dataset": name, "features": features, "classes": classes, "fit_rows": int(len(yfit)),
            "cal_rows": int(len(ycal)), "test_rows": int(len(yte)), "train_s": train_s,
            "sparse": bool(sp.issparse(Xtr))}


# ---------------------------------------------------------------------------------------------- runs


def sklearn_child(folder: str) -> None:
    """Fit scikit-learn's temperature scaling on the frozen model and predict the test split."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    with open(Path(folder) / "sk.pkl", "rb") as fh:
        d = pickle.load(fh)
    cal = CalibratedClassifierCV(FrozenEstimator(d["clf"]), method="temperature").fit(d["X_cal"], d["y_cal"])
    P = cal.predict_proba(d["X_test"])
    beta = float(cal.calibrated_classifiers_[0].calibrators[0].beta_)
    np.save(Path(folder) / "sk_proba.npy", P)
    (Path(folder) / "sk.json").write_text(json.dumps({"temperature": 1.0 / beta}))


def calengine_cmd(*args) -> list[str]:
    return [sys.executable, "-P", "-m", "calengine", *map(str, args)]


def run_all(folder: Path, setup: dict, repeats: int, timeout: float, methods=None) -> dict:
    import pandas as pd

    classes = setup["classes"]
    scores = ",".join(f"logit_{c}" for c in classes)
    configs = {}
    chosen = [(lb, e) for lb, e in METHODS if methods is None or lb in methods]
    for label, extra in chosen:
        method = label.split()[0]
        configs[f"calengine {label}"] = lambda r, m=method, e=extra, lb=label: calengine_cmd(
            "fit", folder / "cal.parquet", "--target", "class", "--scores", scores, "--classes", ",".join(classes),
            "--score-kind", "logit", "--method", m, *e, "--output", folder / f"m-{lb.replace(' ', '-')}-{r}", "--quiet")
    configs["sklearn temperature"] = lambda r: [sys.executable, "-P", str(Path(__file__).resolve()), "_sklearn", str(folder)]
    runs: dict[str, list] = {k: [] for k in configs}
    failed: dict[str, str] = {}
    for r in range(repeats):  # interleaved, so load spreads over every configuration
        for name, make in configs.items():
            if failed.get(name):
                continue
            res = C.run_measured(make(r), timeout=timeout)
            if res.returncode != 0:  # recorded (its one-line error), not fatal: the others still run
                failed[name] = (res.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
                continue
            runs[name].append(res)
    # the scikit-learn and uncalibrated probabilities as probability columns: evaluated by the same code
    test = pd.read_parquet(folder / "test.parquet")
    P = np.load(folder / "sk_proba.npy")
    for j, c in enumerate(classes):
        test[f"sk_{c}"] = P[:, j]
    test.to_parquet(folder / "test.parquet", index=False)
    for prefix in ("raw", "sk"):
        out = folder / f"m-{prefix}"
        shutil.rmtree(out, ignore_errors=True)
        res = subprocess.run(calengine_cmd(
            "fit", folder / "test.parquet", "--target", "class", "--scores", ",".join(f"{prefix}_{c}" for c in classes),
            "--classes", ",".join(classes), "--score-kind", "proba", "--method", "none", "--output", out, "--quiet"),
            capture_output=True, text=True)
        if res.returncode != 0:
            raise SystemExit(f"identity model {prefix} failed: {res.stderr[-2000:]}")
    models = {"uncalibrated": folder / "m-raw", "sklearn temperature": folder / "m-sk"}
    models.update({f"calengine {lb}": folder / f"m-{lb.replace(' ', '-')}-0" for lb, _ in chosen
                   if f"calengine {lb}" not in failed})
    ev = subprocess.run(calengine_cmd("evaluate", *models.values(), folder / "test.parquet", "--target", "class",
                                      "--json", "--quiet"), capture_output=True, text=True)
    if ev.returncode != 0:
        raise SystemExit(f"evaluate failed: {ev.stderr[-2000:]}")
    figures = evaluate_figures(json.loads(ev.stdout), list(models))
    import calengine

    ours = calengine.load_model(models["calengine temperature"])
    t_ours = float(ours.members[0].calibrators[0].temperature_)
    p_ours = ours.predict_frame(test[[f"logit_{c}" for c in classes]])[[f"p_{c}" for c in classes]].to_numpy()
    return {
        "setup": setup,
        "runs": {k: [x.to_json(keep_output=400) for x in v] for k, v in runs.items()},
        "failed": failed,
        "median_wall_s": {k: C.median([x.wall_s for x in v]) for k, v in runs.items() if v},
        "median_peak_rss_mib": {k: C.median([peak_rss(x) for x in v]) / C.MiB for k, v in runs.items() if v},
        "figures": figures,
        "temperature": {"calengine": t_ours, "sklearn": json.loads((folder / "sk.json").read_text())["temperature"]},
        "max_abs_dp_temperature": float(np.abs(p_ours - P).max()),
    }


def solver_passes(folder: Path, setup: dict, methods=None, reg_grid=()) -> dict:
    """Passes over the rows (reduction rounds) and CPU seconds of each linear scaling's fit, in this
    process on the calibration logits (one piece), by the Newton solver and, side by side, by the
    former L-BFGS one (the same calibrator with Newton switched off): whether it converged, its
    largest gradient entry at the end, and the test log loss of its probabilities."""
    import warnings

    import pandas as pd
    from scipy.special import log_softmax

    from calengine.reductions.calibrators import fit_by_reduction
    from calengine_builtins.calibrators import DirichletCalibrator, MatrixScalingCalibrator, VectorScalingCalibrator
    from calengine_builtins.calibrators import multiclass_scaling as mcs

    cols = [f"logit_{c}" for c in setup["classes"]]
    index = {c: j for j, c in enumerate(setup["classes"])}

    def table(name):
        df = pd.read_parquet(folder / name)
        # what a multiclass scaling reads of k logit columns (--score-kind logit): their log-softmax
        return log_softmax(df[cols].to_numpy(np.float64), axis=1), np.array([index[str(v)] for v in df["class"]])

    (Z, y), (Zt, yt) = table("cal.parquet"), table("test.parquet")
    makers = {"vector_scaling": VectorScalingCalibrator, "matrix_scaling": MatrixScalingCalibrator,
              "dirichlet full": DirichletCalibrator, "dirichlet diagonal": lambda: DirichletCalibrator(form="diagonal")}
    out: dict[str, dict] = {}
    limit = mcs.NEWTON_MAX_PARAMETERS
    for label, make in makers.items():
        if methods is not None and label not in methods:
            continue
        for solver, newton_limit in (("newton", limit), ("lbfgs", 0)):
            mcs.NEWTON_MAX_PARAMETERS = newton_limit
            rounds = [0]
            cal = make()
            step = cal.reduction_step

            def counted(stats, request, step=step):
                rounds[0] += 1
                return step(stats, request)

            cal.reduction_step = counted
            t0 = time.process_time()
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    fit_by_reduction(cal, [(Z, y, None)], "decision", n_classes=len(cols))
            finally:
                mcs.NEWTON_MAX_PARAMETERS = limit
            cpu = time.process_time() - t0
            P = cal.predict(Zt)
            out.setdefault(label, {})[solver] = {
                "passes": rounds[0], "cpu_s": cpu, "warning": "; ".join(str(w.message) for w in caught)[:300],
                "test_log_loss": float(-np.mean(np.log(np.clip(P[np.arange(len(yt)), yt], 1e-15, 1.0))))}
    sweep = []
    for reg in reg_grid if methods is None or "matrix_scaling" in methods else ():  # ODIR's strength
        t0 = time.process_time()
        cal = fit_by_reduction(MatrixScalingCalibrator(reg_lambda=reg, reg_mu=reg), [(Z, y, None)], "decision",
                               n_classes=len(cols))
        P = cal.predict(Zt)
        sweep.append({"reg": reg, "passes": cal.n_rounds_ + 1, "cpu_s": time.process_time() - t0,
                      "test_log_loss": float(-np.mean(np.log(np.clip(P[np.arange(len(yt)), yt], 1e-15, 1.0)))),
                      "test_brier": float(np.mean(np.sum((P - np.eye(len(cols))[yt]) ** 2, axis=1)))})
    return {"solvers": out, "reg_sweep": sweep}


def peak_rss(res) -> float:
    """The launched process's peak RSS (bytes; the sampler's VmHWM reading): calengine runs embedded,
    so the client is every process of the fit, as the scikit-learn child is of its own."""
    return float(max(res.rss.get("client") or 0, res.rss.get("worker_max") or 0))


def evaluate_figures(doc, names: list[str]) -> dict:
    """{model label: {log_loss, brier, ece_classwise}} from ``evaluate --json`` (models in order)."""
    models = doc["models"] if isinstance(doc, dict) and "models" in doc else doc
    out = {}
    for name, m in zip(names, models):
        cal = m.get("calibrated", m)
        out[name] = {k: _find(cal, k) for k in ("log_loss", "brier", "ece_classwise")}
    return out


def _find(doc, key):
    """The first value under ``key`` anywhere in ``doc`` (evaluate's JSON nests the calibration suite)."""
    if isinstance(doc, dict):
        if key in doc and not isinstance(doc[key], (dict, list)):
            return doc[key]
        for v in doc.values():
            got = _find(v, key)
            if got is not None:
                return got
    elif isinstance(doc, list):
        for v in doc:
            got = _find(v, key)
            if got is not None:
                return got
    return None


# ---------------------------------------------------------------------------------------------- report


def markdown(results: list[dict], args) -> str:
    lines = ["# Multiclass scalings on a multinomial model's logits (issue 21)", "",
             f"Command: `{C.command_line()}`", "",
             "Test-split figures from `calengine evaluate --json`; wall and peak RSS are medians over"
             f" {args.repeats} interleaved runs of whole processes (see the script's docstring).", ""]
    for res in results:
        s = res["setup"]
        lines += [f"## {s['dataset']}: {len(s['classes'])} classes, {s['features']}", "",
                  f"Model trained outside calengine on {s['fit_rows']} rows ({s['train_s']:.1f} s); calibration split"
                  f" {s['cal_rows']} rows, test split {s['test_rows']} rows.", ""]
        rows = []
        base = res["median_wall_s"]["sklearn temperature"]
        for name, fig in res["figures"].items():
            wall = res["median_wall_s"].get(name)
            rows.append([name, C.fmt(fig["log_loss"], 4), C.fmt(fig["brier"], 4), C.fmt(fig["ece_classwise"], 4),
                         C.fmt(wall, 2), C.fmt(C.ratio(wall, base), 2) if wall else "",
                         C.fmt(res["median_peak_rss_mib"].get(name), 0) if wall else ""])
        lines.append(C.markdown_table(["model", "log loss", "Brier", "classwise ECE", "fit wall s", "x sklearn",
                                       "peak RSS MiB"], rows, ["<", ">", ">", ">", ">", ">", ">"]))
        for name, error in res["failed"].items():
            lines.append(f"| {name} | failed: {error} | | | | | |")
        t = res["temperature"]
        lines += ["", f"Fitted temperature: calengine {t['calengine']:.9f}, scikit-learn {t['sklearn']:.9f}"
                  f" (|dT| = {abs(t['calengine'] - t['sklearn']):.2e}); max |dp| of the test probabilities"
                  f" {res['max_abs_dp_temperature']:.2e}.", ""]
        if res.get("solvers"):
            lines += ["Solvers side by side (in one process, the calibration logits as one piece): passes over the"
                      " rows (reduction rounds, the first one validating), CPU seconds, and the test log loss of"
                      " the fitted map (clipped at 1e-15 as `evaluate`'s); `lbfgs` is the former solver (Newton switched off).", ""]
            srows = []
            for label, by in res["solvers"].items():
                for solver, r in by.items():
                    srows.append([label, solver, str(r["passes"]), C.fmt(r["cpu_s"], 2), C.fmt(r["test_log_loss"], 4),
                                  "converged" if not r["warning"] else r["warning"].split(";")[0][:90]])
            lines.append(C.markdown_table(["map", "solver", "passes", "CPU s", "test log loss", "end"], srows,
                                          ["<", "<", ">", ">", ">", "<"]))
            lines.append("")
        if res.get("reg_sweep"):
            lines += ["ODIR strength of `matrix_scaling` (`reg_lambda = reg_mu`; on logits `dirichlet` full is the"
                      " same fit), Newton in one process: an illustration of how the penalty matters on this"
                      " calibration split, measured on the test split -- not a way to choose it (use `calengine"
                      " cv`).", ""]
            lines.append(C.markdown_table(
                ["reg", "passes", "CPU s", "test log loss", "test Brier"],
                [[f"{r['reg']:g}", str(r["passes"]), C.fmt(r["cpu_s"], 2), C.fmt(r["test_log_loss"], 4),
                  C.fmt(r["test_brier"], 4)] for r in res["reg_sweep"]], ["<", ">", ">", ">", ">"]))
            lines.append("")
    lines += ["", C.machine_line(ROOT)]
    return "\n".join(lines)


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 2 and sys.argv[1] == "_sklearn":
        sklearn_child(sys.argv[2])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="pendigits,20ng", help="comma-separated: pendigits, 20ng")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--methods", default=",".join(lb for lb, _ in METHODS),
                   help="comma-separated, from: " + ", ".join(lb for lb, _ in METHODS) + " (temperature always runs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cal-fraction", type=float, default=0.3)
    p.add_argument("--max-features", type=int, default=50_000, help="20ng vocabulary bound (tf-idf columns)")
    p.add_argument("--max-rows", type=int, default=None, help="subsample each shipped split (smoke runs)")
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--workdir", default=None, help="scratch folder (default: a temporary one, removed)")
    p.add_argument("--results-dir", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--reg-grid", default="0.001,0.01,0.1,1,10",
                   help="ODIR strengths (reg_lambda = reg_mu) of the matrix-scaling sweep; empty: none")
    args = p.parse_args(argv)
    reg_grid = [float(v) for v in args.reg_grid.split(",") if v.strip()]
    import tempfile

    scratch = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-mcs-"))
    methods = {m.strip() for m in args.methods.split(",") if m.strip()} | {"temperature"}
    unknown = methods - {lb for lb, _ in METHODS}
    if unknown:
        raise SystemExit(f"unknown method(s) {', '.join(sorted(unknown))}; choose from {args.methods}")
    results = []
    try:
        for name in [d.strip() for d in args.datasets.split(",") if d.strip()]:
            if name not in ("pendigits", "20ng"):
                raise SystemExit(f"unknown dataset {name!r}; choose pendigits or 20ng")
            folder = scratch / name
            setup = write_tables(folder, name, args.max_features, args.max_rows, args.seed, args.cal_fraction)
            results.append(run_all(folder, setup, args.repeats, args.timeout, methods))
            results[-1].update(solver_passes(folder, setup, methods, reg_grid))
    finally:
        if not args.workdir:
            shutil.rmtree(scratch, ignore_errors=True)
    C.publish(markdown(results, args), C.jsonable(results), "multiclass_scaling", args.results_dir, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
