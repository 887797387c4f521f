#!/usr/bin/env python
"""calengine against scikit-learn's ``CalibratedClassifierCV``, side by side in one run.

What is measured
----------------
A binary table from ``make_classification(n_features=20, n_informative=10, random_state=0)`` is
generated once and written to Parquet: ``--rows`` training rows (default 1,000,000) plus ``--holdout``
held-out rows (default 100,000) drawn in the same call, so both tables come from one distribution.

For every learner (``gaussian_nb``, ``logistic_regression``) and method (``isotonic``, ``sigmoid``)
these configurations run, each in a fresh Python process:

* ``calengine 2 threads``  calengine's embedded scheduler (``cluster=None``), ``workers=2``
* ``calengine 1 thread``   the same with ``workers=1``
* ``sklearn n_jobs=1``     ``CalibratedClassifierCV(..., n_jobs=1)``
* ``sklearn n_jobs=2``     ``CalibratedClassifierCV(..., n_jobs=2)`` (joblib's loky processes)
* ``sklearn n_jobs=1 stock`` (logistic regression only) the pipeline handed to scikit-learn as is,
  so it calibrates the decision function instead of the probability (see below)

Both sides get the same configuration: 5 stratified folds from ``StratifiedKFold(5, shuffle=True,
random_state=0)``, ensemble averaging of the 5 (learner, calibrator) pairs, the same learner
(``GaussianNB(var_smoothing=1e-9)``, or ``StandardScaler`` + ``LogisticRegression(C=1.0,
max_iter=1000)`` with calengine's step names), and for isotonic calengine's
``interpolation="linear"``, which is scikit-learn's ``IsotonicRegression(out_of_bounds="clip")``.
calengine calibrates the learner's probability of the positive class; scikit-learn prefers
``decision_function`` when the estimator has one, which a logistic-regression pipeline does.  To
calibrate the same score, the scikit-learn side wraps that pipeline in :class:`ProbabilityScored`,
which exposes ``predict_proba`` only.  Before timing, the script checks that calengine's registered
learners build exactly the estimators used on the scikit-learn side.

Timing: each run is timed inside its process from the start of reading the training Parquet file to
the end of ``predict_proba`` on the held-out rows, in three parts: ``read`` (Parquet -> C-ordered
float64 array, the same code for both sides), ``fit`` (for calengine this includes starting its
embedded Dask scheduler and loading plugins), and ``predict`` (reading the held-out file and
predicting).  Interpreter start-up and imports are outside the timed span.  Every configuration runs
``--repeats`` times, the repeats interleaved (round-robin over configurations) so that load from other
processes on a shared machine spreads over all of them, and medians are reported.  ``cpu s`` is the
CPU time (user + system) of the run's process and its children over the same span, which other jobs
on the machine disturb less than wall time.  A run that fails is started again up to ``--retries``
times; failed attempts are listed in the results.

Memory: ``peak RSS`` is ``ru_maxrss`` of the run's process from ``os.wait4`` (the largest of the
process and any children it reaped).  ``tree PSS`` is the largest sum of proportional set sizes over
the process and all its descendants, sampled every 0.1 s, which counts joblib's worker processes
(shared pages split between the processes that map them).

Agreement: ``max |dp|`` is the largest absolute difference of held-out class probabilities between a
configuration and the identically configured ``sklearn n_jobs=1`` run (first repeat of each).

Results are printed as one table and written to ``benchmarks/results/cv_calibration.json`` and
``.md`` (see ``--results-dir``), with machine information and the exact command.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

LEARNERS = ("gaussian_nb", "logistic_regression")
METHODS = ("isotonic", "sigmoid")
CV = 5
SEED = 0
N_INFORMATIVE = 10

#: variant key -> (label in the tables, side, parallelism)
VARIANTS = {
    "calengine-2": ("calengine 2 threads", "calengine", 2),
    "calengine-1": ("calengine 1 thread", "calengine", 1),
    "sklearn-1": ("sklearn n_jobs=1", "sklearn", 1),
    "sklearn-2": ("sklearn n_jobs=2", "sklearn", 2),
    "sklearn-1-stock": ("sklearn n_jobs=1 stock", "sklearn", 1),
}
#: variants that only make sense for learners with a decision function
STOCK_ONLY_FOR = ("logistic_regression",)
REFERENCE = "sklearn-1"

#: versions recorded beside _common.BASE_PACKAGES (scikit-learn's side runs on joblib and threadpoolctl)
PACKAGES = ("joblib", "threadpoolctl", "psutil")


# ---------------------------------------------------------------------------------------- estimators


def _probability_scored_class():
    """Defined lazily so that ``--help`` does not import scikit-learn."""
    from sklearn.base import BaseEstimator, ClassifierMixin, clone

    class ProbabilityScored(ClassifierMixin, BaseEstimator):
        """A classifier that offers ``predict_proba`` and no ``decision_function``.

        ``CalibratedClassifierCV`` calibrates ``decision_function`` whenever the estimator has one;
        calengine calibrates the positive-class probability.  Hiding the decision function makes
        scikit-learn calibrate the same score as calengine.
        """

        def __init__(self, estimator=None):
            self.estimator = estimator

        def fit(self, X, y):
            self.estimator_ = clone(self.estimator).fit(X, y)
            self.classes_ = self.estimator_.classes_
            return self

        def predict_proba(self, X):
            return self.estimator_.predict_proba(X)

        def predict(self, X):
            return self.estimator_.predict(X)

    return ProbabilityScored


def sklearn_learner(learner: str):
    """The scikit-learn estimator that calengine's registered ``learner`` builds with default params."""
    if learner == "gaussian_nb":
        from sklearn.naive_bayes import GaussianNB

        return GaussianNB(var_smoothing=1e-9)
    if learner == "logistic_regression":
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import Pipeline
        from sklearn.preprocessing import StandardScaler

        return Pipeline([("scale", StandardScaler()), ("logreg", LogisticRegression(C=1.0, max_iter=1000))])
    raise ValueError(f"unknown learner {learner!r}")


def check_same_learners(learners) -> dict[str, str]:
    """Compare calengine's registered learners with :func:`sklearn_learner`, parameter by parameter."""
    from sklearn import config_context

    from calengine.plugins import registry

    out = {}
    for name in learners:
        theirs = registry.make_learner(name, {}).make_estimator()
        with config_context(print_changed_only=False):
            a, b = repr(theirs), repr(sklearn_learner(name))
        out[name] = "identical" if a == b else f"DIFFERENT: calengine builds {a}, the benchmark uses {b}"
    return out


def build_model(learner: str, method: str, variant: str):
    side, n = VARIANTS[variant][1], VARIANTS[variant][2]
    if side == "calengine":
        from calengine import CalibratedClassifier

        return CalibratedClassifier(
            learner=learner,
            method=method,
            cv=CV,
            mode="ensemble",
            seed=SEED,
            # scikit-learn's interpolation, and its Platt fit on the probability itself
            method_params={"interpolation": "linear"} if method == "isotonic" else {"on": "score"},
            cluster=None,
            workers=n,
        )
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.model_selection import StratifiedKFold

    est = sklearn_learner(learner)
    if variant != "sklearn-1-stock" and hasattr(est, "decision_function"):
        est = _probability_scored_class()(est)
    return CalibratedClassifierCV(
        est,
        method=method,
        cv=StratifiedKFold(n_splits=CV, shuffle=True, random_state=SEED),
        ensemble=True,
        n_jobs=n,
    )


# ---------------------------------------------------------------------------------------- data


def read_parquet(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Features as a C-ordered float64 matrix and the target, identically for both sides."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    features = [c for c in table.column_names if c != "y"]
    df = table.to_pandas()
    X = np.ascontiguousarray(df[features].to_numpy(dtype=np.float64))
    y = df["y"].to_numpy()
    return X, y


def generate(workdir: Path, rows: int, holdout: int, n_features: int) -> dict:
    """Write train.parquet and holdout.parquet into ``workdir`` unless the same table is already there."""
    meta = {
        "rows": rows,
        "holdout": holdout,
        "n_features": n_features,
        "n_informative": N_INFORMATIVE,
        "random_state": 0,
    }
    meta_path = workdir / "data.json"
    train, held = workdir / "train.parquet", workdir / "holdout.parquet"
    if (
        meta_path.exists()
        and train.exists()
        and held.exists()
        and json.loads(meta_path.read_text()).get("table") == meta
    ):
        return {"table": meta, "reused": True, "seconds": 0.0}
    import pyarrow as pa
    import pyarrow.parquet as pq
    from sklearn.datasets import make_classification

    t0 = time.perf_counter()
    X, y = make_classification(
        n_samples=rows + holdout, n_features=n_features, n_informative=N_INFORMATIVE, random_state=0
    )
    names = [f"x{i:02d}" for i in range(n_features)]
    for path, sl in ((train, slice(0, rows)), (held, slice(rows, rows + holdout))):
        cols = {name: X[sl, i] for i, name in enumerate(names)}
        cols["y"] = y[sl].astype(np.int64)
        pq.write_table(pa.table(cols), path)
    seconds = time.perf_counter() - t0
    meta_path.write_text(json.dumps({"table": meta}))
    return {"table": meta, "reused": False, "seconds": round(seconds, 2)}


# ---------------------------------------------------------------------------------------- child


class TreeMemorySampler:
    """Largest sum of PSS (RSS where PSS is unavailable) over this process and its descendants."""

    def __init__(self, interval: float = 0.1):
        import psutil

        self._psutil = psutil
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        psutil = self._psutil
        me = psutil.Process()
        total = 0
        for proc in [me, *me.children(recursive=True)]:
            try:
                info = proc.memory_full_info()
                total += getattr(info, "pss", info.rss)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return total

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._sample())


def run_child(spec: dict) -> None:
    """One timed fit + predict; writes the probabilities and a JSON record to the given paths."""
    import importlib
    import resource

    # Import everything before the clock starts: start-up cost is not what is compared.
    modules = ["pyarrow.parquet", "sklearn.calibration", "sklearn.linear_model", "sklearn.naive_bayes"]
    if VARIANTS[spec["variant"]][1] == "calengine":
        modules += ["distributed", "calengine"]
    for module in modules:
        importlib.import_module(module)

    model = build_model(spec["learner"], spec["method"], spec["variant"])
    with TreeMemorySampler() as sampler:
        cpu0 = _common.tree_cpu_seconds()
        t0 = time.perf_counter()
        X, y = read_parquet(spec["train"])
        t1 = time.perf_counter()
        model.fit(X, y)
        t2 = time.perf_counter()
        del X, y
        Xh, yh = read_parquet(spec["holdout"])
        P = model.predict_proba(Xh)
        t3 = time.perf_counter()
        cpu = _common.tree_cpu_seconds() - cpu0
    p1 = P[:, 1]
    eps = 1e-15
    record = {
        "read_s": t1 - t0,
        "fit_s": t2 - t1,
        "predict_s": t3 - t2,
        "total_s": t3 - t0,
        "cpu_s": cpu,
        "self_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "tree_pss_peak_mb": sampler.peak / 2**20,
        "holdout_brier": float(np.mean((p1 - yh) ** 2)),
        "holdout_log_loss": float(-np.mean(yh * np.log(np.clip(p1, eps, 1)) + (1 - yh) * np.log(np.clip(1 - p1, eps, 1)))),
    }
    np.save(spec["proba"], P)
    Path(spec["result"]).write_text(json.dumps(record))


# ---------------------------------------------------------------------------------------- parent


def spawn(spec: dict, log_path: Path, timeout: float, env: dict) -> dict:
    """Run one child process; return its record plus rusage (from ``os.wait4``) and process wall time."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)]
    started = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
                raise RuntimeError(f"{spec['label']} exceeded --timeout {timeout:.0f}s; log: {log_path}")
            time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{spec['label']} failed with exit code {proc.returncode}:\n{tail}")
    record = json.loads(Path(spec["result"]).read_text())
    record["maxrss_mb"] = usage.ru_maxrss / 1024.0  # kilobytes on Linux
    record["process_wall_s"] = wall
    return record


def plan(learners, methods, variants) -> list[tuple[str, str, str]]:
    out = []
    for learner in learners:
        for method in methods:
            for variant in variants:
                if variant == "sklearn-1-stock" and learner not in STOCK_ONLY_FOR:
                    continue
                out.append((learner, method, variant))
    return out


def summarise(runs: dict, probas: dict, combos) -> list[dict]:
    rows = []
    for learner, method, variant in combos:
        recs = runs[(learner, method, variant)]
        med = {k: _common.median([r[k] for r in recs]) for k in ("total_s", "read_s", "fit_s", "predict_s", "cpu_s")}
        rows.append(
            {
                "learner": learner,
                "method": method,
                "variant": variant,
                "config": VARIANTS[variant][0],
                "repeats": len(recs),
                "median_s": med,
                "all_total_s": [r["total_s"] for r in recs],
                "peak_rss_mb": max(r["maxrss_mb"] for r in recs),
                "tree_pss_peak_mb": max(r["tree_pss_peak_mb"] for r in recs),
                "holdout_brier": recs[0]["holdout_brier"],
                "holdout_log_loss": recs[0]["holdout_log_loss"],
                "process_wall_s_median": _common.median([r["process_wall_s"] for r in recs]),
            }
        )
    by_key = {(r["learner"], r["method"], r["variant"]): r for r in rows}
    for r in rows:
        key = (r["learner"], r["method"])
        for ref, field in (("sklearn-1", "ratio_vs_sklearn_1"), ("sklearn-2", "ratio_vs_sklearn_2")):
            other = by_key.get(key + (ref,))
            r[field] = r["median_s"]["total_s"] / other["median_s"]["total_s"] if other else None
            r[field.replace("ratio", "fit_ratio")] = (
                r["median_s"]["fit_s"] / other["median_s"]["fit_s"] if other else None
            )
        mine = probas[(r["learner"], r["method"], r["variant"])]
        ref = probas.get(key + (REFERENCE,))
        r["max_abs_dp_vs_sklearn_1"] = float(np.max(np.abs(mine[0] - ref[0]))) if ref else None
        r["max_abs_dp_between_repeats"] = max((float(np.max(np.abs(p - mine[0]))) for p in mine[1:]), default=None)
    return rows


#: a table cell: fixed point with the given decimals, "-" where there is no figure
_cell = functools.partial(_common.fmt, fixed=True, missing="-")


def _dp(x):
    if x is None:
        return "-"
    return "0" if x == 0 else f"{x:.1e}"


TABLE_COLUMNS = (
    ("learner", "<19"),
    ("method", "<8"),
    ("config", "<23"),
    ("wall s", ">7"),
    ("fit s", ">7"),
    ("cpu s", ">7"),
    ("/sk1", ">5"),
    ("/sk2", ">5"),
    ("RSS MB", ">7"),
    ("tree MB", ">7"),
    ("max|dp|", ">8"),
)


def table_cells(r: dict) -> list[str]:
    return [
        r["learner"],
        r["method"],
        r["config"],
        _cell(r["median_s"]["total_s"], 2),
        _cell(r["median_s"]["fit_s"], 2),
        _cell(r["median_s"]["cpu_s"], 1),
        _cell(r["ratio_vs_sklearn_1"], 2),
        _cell(r["ratio_vs_sklearn_2"], 2),
        _cell(r["peak_rss_mb"], 0),
        _cell(r["tree_pss_peak_mb"], 0),
        _dp(r["max_abs_dp_vs_sklearn_1"]),
    ]


def text_table(rows: list[dict]) -> str:
    lines = ["  ".join(format(name, spec) for name, spec in TABLE_COLUMNS)]
    lines.append("  ".join("-" * len(format(name, spec)) for name, spec in TABLE_COLUMNS))
    prev = None
    for r in rows:
        if prev is not None and (r["learner"], r["method"]) != prev:
            lines.append("")
        prev = (r["learner"], r["method"])
        lines.append("  ".join(format(c, spec) for c, (_, spec) in zip(table_cells(r), TABLE_COLUMNS)))
    return "\n".join(lines)


def markdown(report: dict) -> str:
    rows = report["results"]
    s = report["settings"]
    env = report["environment"]
    out = [
        "# calengine vs scikit-learn `CalibratedClassifierCV`: 5-fold ensemble calibration",
        "",
        f"Generated by `benchmarks/bench_cv_calibration.py` on {report['finished_utc']} UTC.",
        "",
        "Command:",
        "",
        "```",
        report["command"],
        "```",
        "",
        (f"Table: `make_classification(n_samples={s['rows'] + s['holdout']:,}, n_features={s['n_features']},"
        f" n_informative={N_INFORMATIVE}, random_state=0)`; the first {s['rows']:,} rows are the training"
        f" Parquet file, the last {s['holdout']:,} the held-out one.  {s['repeats']} repeat(s) per"
        " configuration, interleaved; medians shown."),
        "",
        ("* **wall s**: median of read training Parquet + fit + read held-out Parquet + predict_proba,"
        " timed inside each run's own process (imports excluded; calengine's fit includes starting its"
        " embedded Dask scheduler).  **fit s**: the fit alone.  **cpu s**: median CPU seconds (user +"
        " system) of the process and its children over the same span; less sensitive than wall time to"
        " other jobs on the machine."),
        ("* **/sk1**, **/sk2**: wall time divided by that of `sklearn n_jobs=1` / `n_jobs=2` for the same"
        " learner and method (above 1 = slower than scikit-learn)."),
        ("* **RSS MB**: `ru_maxrss` of the run's process (largest over repeats).  **tree MB**: peak sum of"
        " PSS over the process and its children (joblib workers), sampled every 0.1 s."),
        ("* **max|dp|**: largest absolute difference of held-out class probabilities from `sklearn n_jobs=1`"
        " configured identically (same folds, learner, parameters and calibrated score; isotonic with"
        " linear interpolation on the calengine side)."),
        ("* **sklearn n_jobs=1 stock**: logistic regression handed to scikit-learn without the wrapper that"
        " hides `decision_function`, i.e. what a user gets by default: scikit-learn then calibrates the"
        " logit, calengine the probability."),
        "",
        _common.markdown_table(
            [name.replace("|", "\\|") for name, _ in TABLE_COLUMNS] + ["Brier"],
            [table_cells(r) + [f"{r['holdout_brier']:.5f}"] for r in rows],
            align=[spec[0] for _, spec in TABLE_COLUMNS] + [">"],
        ),
        "",
        "Per-phase medians (seconds) and run-to-run agreement:",
        "",
        _common.markdown_table(
            ["learner", "method", "config", "read", "fit", "predict", "all totals", "max\\|dp\\| between repeats"],
            [
                [r["learner"], r["method"], r["config"], _cell(r["median_s"]["read_s"], 2), _cell(r["median_s"]["fit_s"], 2),
                 _cell(r["median_s"]["predict_s"], 2), ", ".join(f"{t:.2f}" for t in r["all_total_s"]),
                 _dp(r["max_abs_dp_between_repeats"])]
                for r in rows
            ],
            align="<<<>>><>",
        ),
    ]
    out += [
        "",
        "Learner check (calengine's registered learner vs the scikit-learn side): "
        + "; ".join(f"{k}: {v}" for k, v in report["learner_check"].items()),
        "",
        "## Machine",
        "",
        *_common.environment_markdown(env),
        (f"* load at the end: {report['load_after']['load1']:.2f} / {report['load_after']['load5']:.2f} /"
         f" {report['load_after']['load15']:.2f} (the machine was shared with other jobs; expect noise)"),
        f"* total benchmark time: {report['benchmark_seconds'] / 60:.1f} min",
        "",
    ]
    if report["failed_attempts"]:
        out += ["## Failed attempts (each run again; the successful attempt is the one measured)", ""]
        out += [f"* {f['run']}, attempt {f['attempt']}: `{f['error']}`" for f in report["failed_attempts"]]
        out.append("")
    return "\n".join(out)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="bench_cv_calibration.py",
        description=(
            "Benchmark calengine's 5-fold ensemble calibration (isotonic, sigmoid; gaussian_nb,"
            " logistic_regression) against scikit-learn's CalibratedClassifierCV with n_jobs=1 and 2 on"
            " a generated Parquet table.  Each configuration runs in its own process; prints median"
            " wall time, ratios to scikit-learn, peak memory and the largest probability difference,"
            " and writes cv_calibration.json/.md under --results-dir."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--rows", type=int, default=1_000_000, help="training rows to generate")
    p.add_argument("--holdout", type=int, default=100_000, help="held-out rows to generate and predict")
    p.add_argument("--features", type=int, default=20, help="number of feature columns")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per configuration (medians reported)")
    p.add_argument(
        "--workdir",
        default=None,
        help="directory for the Parquet files, probabilities and logs (default: a new temporary"
        " directory, deleted at the end); a table already generated there with the same sizes is reused",
    )
    p.add_argument("--keep-workdir", action="store_true", help="keep the temporary work directory")
    p.add_argument(
        "--results-dir",
        default=str(Path(__file__).resolve().parent / "results"),
        help="where cv_calibration.json and cv_calibration.md are written",
    )
    p.add_argument("--learners", nargs="+", choices=LEARNERS, default=list(LEARNERS))
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    p.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        default=list(VARIANTS),
        help="configurations to run; sklearn-1 is the reference for max |dp| and must be included",
    )
    p.add_argument(
        "--blas-threads",
        type=int,
        default=None,
        help="set OMP/OPENBLAS/MKL_NUM_THREADS in every run (default: leave the environment alone)",
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds before one run is killed")
    p.add_argument(
        "--retries",
        type=int,
        default=1,
        help="times a failed run is started again before the benchmark stops (failures are recorded)",
    )
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is None:
        if args.rows < 1000 or args.holdout < 1 or args.features < N_INFORMATIVE or args.repeats < 1:
            p.error(f"need --rows >= 1000, --holdout >= 1, --features >= {N_INFORMATIVE}, --repeats >= 1")
        if REFERENCE not in args.variants:
            p.error(f"--variants must include {REFERENCE} (the reference for max |dp|)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        run_child(json.loads(args.child))
        return 0

    bench_start = time.perf_counter()
    repo = Path(__file__).resolve().parent.parent
    environment = _common.environment(repo, PACKAGES)
    own_tmp = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="calengine-bench-")) if own_tmp else Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if args.blas_threads is not None:
        env.update({k: str(args.blas_threads) for k in _common.THREAD_ENV})
    try:
        print(f"work directory: {workdir}", flush=True)
        data = generate(workdir, args.rows, args.holdout, args.features)
        print(
            f"table: {args.rows:,} training + {args.holdout:,} held-out rows x {args.features} features"
            + (" (reused)" if data["reused"] else f" (generated in {data['seconds']:.1f}s)"),
            flush=True,
        )
        learner_check = check_same_learners(args.learners)
        for name, verdict in learner_check.items():
            print(f"learner {name}: {verdict}", flush=True)

        combos = plan(args.learners, args.methods, args.variants)
        runs = {c: [] for c in combos}
        probas = {c: [] for c in combos}
        total_runs = len(combos) * args.repeats
        done = 0
        failures = []
        for rep in range(args.repeats):
            for learner, method, variant in combos:
                tag = f"{learner}-{method}-{variant}-r{rep}"
                spec = {
                    "learner": learner,
                    "method": method,
                    "variant": variant,
                    "label": f"{learner} {method} {VARIANTS[variant][0]} (repeat {rep + 1})",
                    "train": str(workdir / "train.parquet"),
                    "holdout": str(workdir / "holdout.parquet"),
                    "proba": str(workdir / f"proba-{tag}.npy"),
                    "result": str(workdir / f"result-{tag}.json"),
                }
                for attempt in range(args.retries + 1):
                    log_path = workdir / f"log-{tag}-a{attempt}.txt"
                    try:
                        rec = spawn(spec, log_path, args.timeout, env)
                        break
                    except RuntimeError as exc:
                        first_line = str(exc).splitlines()[0]
                        last_line = str(exc).strip().splitlines()[-1]
                        failures.append(
                            {"run": spec["label"], "attempt": attempt + 1, "error": f"{first_line} ... {last_line}"}
                        )
                        print(f"FAILED ({first_line} ... {last_line})", flush=True)
                        if attempt == args.retries:
                            raise
                        print("retrying", flush=True)
                rec["attempts"] = attempt + 1
                runs[(learner, method, variant)].append(rec)
                probas[(learner, method, variant)].append(np.load(spec["proba"]))
                done += 1
                print(
                    f"[{done:>3}/{total_runs}] {spec['label']:<62} total {rec['total_s']:7.2f}s"
                    f"  (read {rec['read_s']:.2f}, fit {rec['fit_s']:.2f}, predict {rec['predict_s']:.2f})"
                    f"  RSS {rec['maxrss_mb']:.0f} MB",
                    flush=True,
                )

        rows = summarise(runs, probas, combos)
        load_after = _common.load_snapshot()
        report = {
            "benchmark": "cv_calibration",
            "finished_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "command": environment["command"],
            "cwd": os.getcwd(),
            "settings": {
                "rows": args.rows,
                "holdout": args.holdout,
                "n_features": args.features,
                "repeats": args.repeats,
                "cv": CV,
                "seed": SEED,
                "blas_threads": args.blas_threads,
                "timed_span": "read training Parquet + fit + read held-out Parquet + predict_proba (imports excluded)",
            },
            "data": data,
            "learner_check": learner_check,
            "environment": environment,
            "load_before": environment["load"],
            "load_after": load_after,
            "benchmark_seconds": time.perf_counter() - bench_start,
            "failed_attempts": failures,
            "results": rows,
            "runs": [
                {"learner": k[0], "method": k[1], "variant": k[2], "repeat": i, **rec}
                for k, recs in runs.items()
                for i, rec in enumerate(recs)
            ],
        }
        print()
        print(text_table(rows))
        print()
        print("wall s = median of read + fit + predict (seconds); cpu s = CPU seconds of the run's process tree;")
        print("/sk1, /sk2 = wall time relative to sklearn")
        print("n_jobs=1 / n_jobs=2; RSS = ru_maxrss of the run's process; tree = peak PSS incl. joblib workers;")
        print("max|dp| = largest |p difference| on the held-out rows vs the identically configured sklearn n_jobs=1.")
        paths = _common.write_results(args.results_dir, "cv_calibration", report, markdown(report))
        print(f"\nwrote {paths[0]} and {paths[1]}")
    finally:
        if own_tmp and not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
