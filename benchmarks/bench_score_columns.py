#!/usr/bin/env python
"""``calengine fit --scores s`` on a generated table of 10^6 .. 10^8 rows (issue 21, "Benchmark and
evidence"), side by side in one run with scikit-learn's and Spark MLlib's ``IsotonicRegression``.

What is measured (each configuration in its own subprocess, launch to exit; medians over ``--repeats``,
configurations interleaved within a repeat so that other jobs on the machine fall on all of them):

* **calengine** -- ``calengine --quiet fit DATA --target y --scores s --method M --output MODEL`` for M
  in isotonic (``--method-param interpolation=linear``, scikit-learn's rule), sigmoid and temperature;
  embedded (the default: tasks as threads of one process) and on a cluster of W worker processes:
  by default (``--cluster-kind processes``) a ``dask scheduler`` and a ``dask worker --nworkers W
  --nthreads 1 --memory-limit M`` started afresh for every run on 127.0.0.1 and joined with ``--cluster
  ADDRESS``, as a user with a cluster runs it (the cluster's start is timed apart, not in the wall);
  ``--cluster-kind local``: ``--cluster --workers W``, the LocalCluster the client spawns itself.
* **before** (``--before-python PY``) -- the same fits (embedded, and on a cluster started from its own
  environment's ``dask``) with another interpreter's installed calengine (a venv holding the commit to
  compare against), in the same repeats; the page says whether each pair's model files are the same
  bytes (and each cluster fit's against its embedded fit).
* **scikit-learn** (rows <= ``--sklearn-max-rows``; at 10^8 only if ``--sklearn-min-available-gib``
  GiB are free) -- one process reads ``s`` (as float64) and ``y`` from the same Parquet files (row group
  by row group) and fits ``IsotonicRegression(out_of_bounds="clip")``: interpreter, imports, read and fit, the work
  calengine does end to end except saving a model.
* **Spark MLlib** (rows <= ``--spark-max-rows``; needs ``pip install pyspark``, an optional benchmark
  dependency, and Java) -- ``IsotonicRegression`` on ``s`` (cast to double) in ``local[W]``, reading the
  same Parquet directory; JVM start included.

Peak RSS of every process (``_common.TreeSampler``: psutil samples plus each process's VmHWM): the
launched process (``client``; for Spark the Python driver), the ``dask scheduler``, each Dask worker, and
Spark's JVM.  CPU seconds: the client's tree (``os.wait4``) plus, on a started cluster, what the
scheduler's and the workers' processes used between the run's launch and its exit.  Correctness, from the first repeat: every calibrated map evaluated on a grid of scores
(``calengine score`` on a grid table; ``predict`` of the baselines), isotonic compared with
scikit-learn's and Spark's (max |dp|), and every method compared with the table's known calibrated
probability (``gen_scores_table.true_probability``).

    python benchmarks/bench_score_columns.py --rows-list 1000000,10000000 --repeats 3
    python benchmarks/bench_score_columns.py --rows-list 100000000 --repeats 1 --name score_columns_100m
    python benchmarks/bench_score_columns.py --rows-list 10000000,100000000 --repeats 3 --big-repeats 1 \
        --spark-max-rows 10000000 --name score_columns_scale
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402
import gen_scores_table as GS  # noqa: E402
from bench_evaluate_scale import _cluster_role, _tree_cpu  # noqa: E402
from bench_partition_fit import calengine_cmd, parse_marked, read_p1, read_xy  # noqa: E402

NAME = "score_columns"
MARK = "BASELINE_JSON:"
METHODS = ("isotonic", "sigmoid", "temperature")
VERSIONS = ("calengine", "calengine-builtins", "scikit-learn", "pyspark", "numpy", "pyarrow", "dask",
            "distributed", "psutil")
TARGETS = {"vs_sklearn": 0.5, "vs_spark": 0.1, "client_gib": 1.0, "flat": 0.20}
#: sizes of at least this many rows: the 10^8 sizes, run ``--big-repeats`` times, scikit-learn only with
#: ``--sklearn-min-available-gib`` free
BIG_ROWS = 50_000_000


# ---------------------------------------------------------------------------------------------- children


def child_sklearn(spec: dict) -> dict:
    t_start = time.time()
    import numpy as np
    from sklearn.isotonic import IsotonicRegression

    t_imports = time.time()
    X, y = read_xy(spec["data"], GS.TARGET)  # float64 (n, 1) score column, int64 labels
    t_read = time.time()
    iso = IsotonicRegression(out_of_bounds="clip").fit(X[:, 0], y)
    t_fit = time.time()
    np.save(spec["grid_out"], iso.predict(np.load(spec["grid"])))
    return {"interpreter_s": t_start - spec["launched_at"], "imports_s": t_imports - t_start,
            "read_s": t_read - t_imports, "fit_s": t_fit - t_read, "e2e_s": t_fit - spec["launched_at"],
            "thresholds": int(len(iso.X_thresholds_))}


def child_spark(spec: dict) -> dict:
    t_start = time.time()
    import numpy as np
    from pyspark.ml.regression import IsotonicRegression
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this venv, not the PATH's
    spark = (SparkSession.builder.master(f"local[{spec['workers']}]").appName("bench_score_columns")
             .config("spark.driver.memory", spec["driver_memory"]).config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    t_session = time.time()
    df = spark.read.parquet(spec["data"]).select(F.col(GS.SCORE).cast("double").alias("s"),
                                                 F.col(GS.TARGET).cast("double").alias("y"))
    model = IsotonicRegression(featuresCol="s", labelCol="y", isotonic=True).fit(df)
    t_fit = time.time()
    grid = np.load(spec["grid"])
    gdf = spark.createDataFrame([(float(g),) for g in grid], ["s"])
    pred = {r["s"]: r["prediction"] for r in model.transform(gdf).collect()}
    np.save(spec["grid_out"], np.array([pred[float(g)] for g in grid]))
    n_boundaries = len(model.boundaries)
    spark.stop()
    return {"interpreter_s": t_start - spec["launched_at"], "session_s": t_session - t_start,
            "fit_s": t_fit - t_session, "e2e_s": t_fit - spec["launched_at"], "thresholds": n_boundaries}


def child(kind: str, spec_json: str) -> int:
    spec = json.loads(spec_json)
    out = {"sklearn": child_sklearn, "spark": child_spark}[kind](spec)
    print(MARK + json.dumps(out), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------- runs


def fit_argv(data: str, out: str, method: str, workers: int | None, address: str | None = None) -> list[str]:
    """``workers`` None: embedded (the default ``calengine fit``); else ``--cluster ADDRESS`` (a cluster
    started apart) or, without ``address``, ``--cluster --workers W``."""
    argv = ["--quiet", "fit", data, "--target", GS.TARGET, "--scores", GS.SCORE, "--method", method]
    if method == "isotonic":
        argv += ["--method-param", "interpolation=linear"]
    if workers:
        argv += ["--cluster", address] if address else ["--cluster", "--workers", str(workers)]
    return argv + ["--output", out]


def write_grid(path: Path):
    """Scores at which every fitted map is compared: 4,001 float32 values (as the table's) spread evenly
    in logit(s) from -9 to 7 (the table's logit(s) is Normal(-1, 2.5)), as a one-column Parquet table
    (for ``calengine score``) and a float64 ``.npy`` array (for the baselines)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    z = np.linspace(-9.0, 7.0, 4001)
    g = np.unique((1.0 / (1.0 + np.exp(-z))).astype(np.float32))
    pq.write_table(pa.table({GS.SCORE: g}), path)
    np.save(path.with_suffix(".npy"), g.astype(np.float64))
    return g.astype(np.float64)


def peaks(run: C.RunResult, spark: bool) -> dict:
    """Peak RSS (bytes) of the run's client, each Dask worker and, for Spark, its JVM: the largest
    process under the Python driver (spark-submit starts as a shell script that execs java, so the
    JVM's command line is the script's when first sampled)."""
    r = run.rss
    jvm = max((o["peak"] for o in r["others"]), default=None) if spark else None
    return {"client": r["client"], "scheduler": None, "workers": r["workers"], "worker_max": r["worker_max"],
            "jvm": jvm, "tree_peak_sum": r["tree_peak_sum"], "others": r["others"]}


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds so far of a live process and its live descendants (a started cluster's
    processes, which the client does not reap)."""
    return sum(t["user_s"] + t["sys_s"] for t in _tree_cpu(pid).values())


def measure(cmd: list[str], args, label: str) -> dict:
    """One run; CPU seconds are the tree's from ``os.wait4`` (not Spark's: its JVM is not reaped by the
    driver, so they are left out there)."""
    run = C.run_measured(cmd, timeout=args.timeout, interval=args.sample_interval)
    spark = label == "spark"
    rec = {"label": label, "wall_s": run.wall_s, "returncode": run.returncode, "timed_out": run.timed_out,
           "peak": peaks(run, spark), "cpu_s": None if spark else run.rusage["user_s"] + run.rusage["sys_s"],
           "load_before": run.load_before}
    if run.returncode != 0:
        rec["stderr_tail"] = run.stderr[-1500:]
        print(f"  {label}: FAILED rc={run.returncode}: {run.stderr[-600:]}", file=sys.stderr)
    else:
        rec["baseline"] = parse_marked(run.stdout, MARK)
        print(f"  {label}: {run.wall_s:.2f} s, client {C.fmt((run.rss['client'] or 0) / C.MiB, 0)} MiB",
              file=sys.stderr)
    return rec


def measure_on_cluster(argv_of, args, label: str, work: Path, python: str | None = None) -> dict:
    """One run on a fresh ``dask scheduler`` and ``dask worker --nworkers W`` (their own processes, as on
    a real cluster; ``argv_of(address)`` is the command): the client measured as :func:`measure` does,
    the scheduler and each worker sampled by their own :class:`~_common.TreeSampler` from before the
    launch to after the exit (a last sample then: each process's final VmHWM), and their CPU seconds
    over the same span added to the client's.  The cluster's start (until every worker has joined) is
    timed apart: a user's cluster is up before the job.  ``python``: the interpreter whose environment's
    ``dask`` runs the scheduler and workers (the *before* build's; default: this one's)."""
    from calengine.testing.cluster import start_dask_scheduler, start_dask_worker, stop_processes, wait_for_workers

    local_dir = work / "cluster-local"
    shutil.rmtree(local_dir, ignore_errors=True)
    local_dir.mkdir(parents=True)
    t0 = time.perf_counter()
    dask = None if python is None else str(Path(python).with_name("dask"))
    address, scheduler = start_dask_scheduler(work, dask=dask)
    procs, samplers = [scheduler], []
    try:
        procs.append(start_dask_worker(address, args.workers, work, memory_limit=args.worker_memory,
                                       args=["--local-directory", str(local_dir)], dask=dask))
        wait_for_workers(address, args.workers)
        start_s = time.perf_counter() - t0
        samplers = [C.TreeSampler(scheduler.pid, interval=args.sample_interval).start(),
                    C.TreeSampler(procs[1].pid, interval=args.sample_interval, role_of=_cluster_role).start()]
        cpu_before = sum(tree_cpu_s(p.pid) for p in procs)
        rec = measure(argv_of(address), args, label)
        cpu_cluster = sum(tree_cpu_s(p.pid) for p in procs) - cpu_before
        for smp in samplers:
            smp.sample()
    finally:
        for smp in samplers:
            smp.stop()
        stop_processes(procs)
    sched, nanny = (smp.report() for smp in samplers)
    # the dask worker command itself (its nannies) is reported by role, not as the sampler's client
    nanny_peak = max((max(i["peak_rss"], i["peak_hwm"]) for i in samplers[1].procs.values() if i["role"] == "nanny"),
                     default=None)
    rec["peak"].update(scheduler=sched["client"], workers=nanny["workers"], worker_max=nanny["worker_max"],
                       nanny=nanny_peak, workers_stillborn=nanny["workers_stillborn"])
    rec["cluster_start_s"], rec["cpu_cluster_s"] = start_s, cpu_cluster
    if rec["cpu_s"] is not None:
        rec["cpu_s"] += cpu_cluster
    return rec


def grid_probabilities(model: Path, grid_table: Path, out: Path, exe: list[str] | None = None):
    r = subprocess.run([*(exe or calengine_cmd()), "--quiet", "score", str(model), str(grid_table), "--output", str(out)],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"calengine score failed: {r.stderr[-800:]}")
    p = read_p1(str(out))
    shutil.rmtree(out, ignore_errors=True)
    return p


def available_gib() -> float:
    import psutil

    return psutil.virtual_memory().available / C.GiB


def run_size(rows: int, args, grid, work: Path, publish) -> dict:
    """Every configuration at ``rows`` rows, ``publish(result so far)`` after each run (a 10^8 run takes
    an hour or more: one cut short keeps the runs it finished).  Within a repeat the baselines run
    first (scikit-learn at 10^8 needs the most free memory), then calengine method by method, embedded
    beside cluster, so that a cut-short run has the first methods complete."""
    import numpy as np

    spec = GS.ScoresSpec(rows, args.seed)
    files = max(2, math.ceil(rows / args.rows_per_file))
    data = work / "tables" / f"scores-r{rows}-f{files}-s{args.seed}"
    table = GS.ensure_scores_table(data, spec, files, args.row_group_rows, quiet=True)
    print(f"{rows:,} rows: {table['files']} files, {table['bytes'] / C.MiB:,.0f} MiB"
          f" ({'reused' if table['reused'] else 'written'})", file=sys.stderr)
    cmd = calengine_cmd()
    before = [args.before_python, "-P", "-m", "calengine"] if args.before_python else None
    configs = []
    for m in args.methods:
        if "embedded" in args.modes:
            configs.append((f"calengine {m} embedded", m, None, cmd))
            configs += [(f"before {m} embedded", m, None, before)] if before else []
        if args.workers and "cluster" in args.modes:
            configs.append((f"calengine {m} cluster", m, args.workers, cmd))
            configs += [(f"before {m} cluster", m, args.workers, before)] if before else []
    skipped = {}
    do_sklearn = rows <= args.sklearn_max_rows
    if do_sklearn and rows >= BIG_ROWS and available_gib() < args.sklearn_min_available_gib:
        do_sklearn = False
        skipped["sklearn"] = f"{available_gib():.1f} GiB available < {args.sklearn_min_available_gib}"
    elif not do_sklearn:
        skipped["sklearn"] = f"rows > --sklearn-max-rows {args.sklearn_max_rows:,}"
    do_spark = rows <= args.spark_max_rows and not args.no_spark
    if do_spark:
        try:
            import pyspark  # noqa: F401
        except ImportError:
            do_spark, skipped["spark"] = False, "pyspark not installed (pip install pyspark)"
    else:
        skipped["spark"] = "--no-spark" if args.no_spark else f"rows > --spark-max-rows {args.spark_max_rows:,}"
    runs: dict[str, list[dict]] = {label: [] for label, *_ in configs}
    if do_sklearn:
        runs["sklearn"] = []
    if do_spark:
        runs["spark"] = []
    grids: dict[str, np.ndarray] = {}
    kept: dict[str, dict[str, bytes]] = {}  # the first repeat's model files, by configuration
    run_dir = work / "runs"
    repeats = args.big_repeats if rows >= BIG_ROWS and args.big_repeats else args.repeats
    for rep in range(repeats):
        for kind, on in (("sklearn", do_sklearn), ("spark", do_spark and rep < args.spark_repeats)):
            if not on:
                continue
            out = run_dir / f"grid-{kind}.npy"
            cspec = {"data": str(data), "grid": str(work / "grid.npy"), "grid_out": str(out),
                     "launched_at": time.time(), "workers": args.workers or 1, "driver_memory": args.spark_memory}
            rec = measure([sys.executable, "-P", str(Path(__file__).resolve()), "_child", kind, json.dumps(cspec)],
                          args, kind)
            runs[kind].append(rec)
            if rep == 0 and rec["returncode"] == 0:
                grids[kind] = np.load(out)
            publish(summarise(rows, table, spec, grid, runs, grids, skipped, kept))
        for label, method, workers, exe in configs:
            model = run_dir / f"model-{len(grids)}"
            shutil.rmtree(model, ignore_errors=True)
            argv = partial(fit_argv, str(data), str(model), method, workers)
            if workers and args.cluster_kind == "processes":
                rec = measure_on_cluster(lambda address: [*exe, *argv(address)], args, label, work,
                                         python=exe[0] if exe is before else None)
            else:
                rec = measure([*exe, *argv()], args, label)
            runs[label].append(rec)
            if rep == 0 and rec["returncode"] == 0:
                grids[label] = grid_probabilities(model, work / "grid.parquet", run_dir / "grid-scored", exe)
                kept[label] = model_files(model)
            shutil.rmtree(model, ignore_errors=True)
            publish(summarise(rows, table, spec, grid, runs, grids, skipped, kept))
    return summarise(rows, table, spec, grid, runs, grids, skipped, kept)


def model_files(model: Path) -> dict[str, bytes]:
    """Every file of a model directory, by relative path: what ``cmp`` compares."""
    return {str(p.relative_to(model)): p.read_bytes() for p in sorted(model.rglob("*")) if p.is_file()}


def same_models(kept: dict) -> dict[str, bool]:
    """``"A vs B": files byte-identical`` for each calengine configuration and its *before* twin, and for
    each method's cluster fit against its embedded fit (the first repeat's models)."""
    out = {}
    for label in kept:
        if not label.startswith("calengine "):
            continue
        twins = ["before " + label[len("calengine "):]]
        if label.endswith(" cluster"):
            twins.append(label[: -len(" cluster")] + " embedded")
        for twin in twins:
            if twin in kept:
                out[f"{label} vs {twin}"] = kept[label] == kept[twin]
    return out


def summarise(rows: int, table: dict, spec, grid, runs: dict, grids: dict, skipped: dict, kept: dict) -> dict:
    """One size's page entry from the runs so far: medians per configuration, distances on the grid,
    whether the models' files are the same bytes (:func:`same_models`)."""
    import numpy as np

    truth = GS.true_probability(spec, grid)
    summary = {}
    for label, recs in runs.items():
        ok = [r for r in recs if r["returncode"] == 0]
        summary[label] = {
            "ok": len(ok), "runs": len(recs),
            "wall_s": C.median([r["wall_s"] for r in ok]),
            "client": C.median([r["peak"]["client"] for r in ok]),
            "scheduler": C.median([r["peak"]["scheduler"] for r in ok]),
            "worker_max": C.median([r["peak"]["worker_max"] for r in ok]),
            "workers": [r["peak"]["workers"] for r in ok],
            "jvm": C.median([r["peak"]["jvm"] for r in ok]),
            "cpu_s": C.median([r["cpu_s"] for r in ok]),
            "cluster_start_s": C.median([r.get("cluster_start_s") for r in ok]),
            "fit_s": C.median([(r.get("baseline") or {}).get("fit_s") for r in ok]),
            "max_abs_dp_truth": float(np.max(np.abs(grids[label] - truth))) if label in grids else None,
        }
    agree = {}
    for label in [lb for lb in grids if "isotonic" in lb]:
        for ref in ("sklearn", "spark"):
            if ref in grids:
                agree[f"{label} vs {ref}"] = float(np.max(np.abs(grids[label] - grids[ref])))
    if "sklearn" in grids and "spark" in grids:
        agree["spark vs sklearn"] = float(np.max(np.abs(grids["spark"] - grids["sklearn"])))
    return {"rows": rows, "files": table["files"], "table_bytes": table["bytes"],
            "positive_fraction": table["positive_fraction"], "summary": summary, "agreement": agree,
            "same_model_files": same_models(kept), "skipped": skipped, "runs": runs}


# ---------------------------------------------------------------------------------------------- checks


def checks(results: list[dict]) -> list[dict]:
    """The issue's targets, each with the figures it was judged on (None where a figure is missing)."""
    out = []
    for res in results:
        sm, n = res["summary"], res["rows"]
        sk, sp = (sm.get("sklearn") or {}).get("wall_s"), (sm.get("spark") or {}).get("wall_s")
        for label, s in sm.items():
            if not label.startswith("calengine"):
                continue
            for ref, wall, limit in (("sklearn", sk, TARGETS["vs_sklearn"]), ("spark", sp, TARGETS["vs_spark"])):
                r = C.ratio(s["wall_s"], wall)
                out.append({"rows": n, "what": f"{label} / {ref} wall", "value": r, "target": f"<= {limit}",
                            "met": None if r is None else r <= limit})
            gib = None if s["client"] is None else s["client"] / C.GiB
            out.append({"rows": n, "what": f"{label} client peak GiB", "value": gib,
                        "target": f"< {TARGETS['client_gib']}", "met": None if gib is None else gib < 1.0})
        for label, d in res["agreement"].items():
            if "isotonic" in label and label.endswith(("sklearn", "spark")):
                out.append({"rows": n, "what": f"{label} max |dp| on grid", "value": d, "target": "<= 1e-9",
                            "met": d <= 1e-9})
    by_rows = {r["rows"]: r for r in results}
    sizes = sorted(by_rows)
    if len(sizes) >= 2 and sizes[-1] >= 10 * sizes[-2]:
        lo, hi = by_rows[sizes[-2]]["summary"], by_rows[sizes[-1]]["summary"]
        for label in [lb for lb in hi if lb.startswith("calengine") and lb in lo]:
            for role in ("client", "scheduler", "worker_max"):
                a, b = lo[label][role], hi[label][role]
                if a and b:
                    out.append({"rows": f"{sizes[-2]:,} -> {sizes[-1]:,}", "what": f"{label} {role} peak growth",
                                "value": b / a - 1, "target": f"within +-{TARGETS['flat']:.0%}",
                                "met": abs(b / a - 1) <= TARGETS["flat"]})
    return out


# ---------------------------------------------------------------------------------------------- output


def render(d: dict) -> str:
    mib = lambda b: None if b is None else b / C.MiB  # noqa: E731
    lines = [f"# calengine fit --scores s against scikit-learn and Spark MLlib IsotonicRegression", "",
             *C.environment_markdown(d["environment"]), "",
             "Wall = launch to exit of each process (medians over the repeats, configurations interleaved);"
             " peak RSS per process (psutil samples + VmHWM). `client` is the launched process (for Spark the"
             " Python driver); `scheduler` the `dask scheduler` process of a cluster started for the run (its start,"
             " until every worker has joined, is not in the wall: see the `cluster start s` column); `JVM` Spark's Java process. max |dp| vs truth: largest difference on the grid"
             " from the table's known calibrated probability. CPU s: user + system seconds of the whole process tree (what"
             " other jobs on a shared machine disturb least; not measured for Spark, whose JVM the driver does not"
             " reap).", ""]
    for res in d["results"]:
        sm = res["summary"]
        sk = (sm.get("sklearn") or {}).get("wall_s")
        sp = (sm.get("spark") or {}).get("wall_s")
        sk_cpu = (sm.get("sklearn") or {}).get("cpu_s")
        lines += [f"## {res['rows']:,} rows ({res['files']} files, {res['table_bytes'] / C.MiB:,.0f} MiB,"
                  f" positives {res['positive_fraction']:.3f})", ""]
        rows = []
        for label, s in sm.items():
            workers = ", ".join(C.fmt(mib(w), 0) for w in (s["workers"][0] if s["workers"] else []))
            rows.append([label, f"{s['ok']}/{s['runs']}", C.fmt(s["wall_s"]), C.fmt(C.ratio(s["wall_s"], sk)),
                         C.fmt(C.ratio(s["wall_s"], sp)), C.fmt(mib(s["client"]), 0),
                         C.fmt(mib(s["scheduler"]), 0) if s["scheduler"] else "-", workers or "-",
                         C.fmt(mib(s["jvm"]), 0) if s["jvm"] else "-", C.fmt(s["cpu_s"], 1),
                         C.fmt(C.ratio(s["cpu_s"], sk_cpu)), C.fmt(s["cluster_start_s"], 1) if s["cluster_start_s"] else "-",
                         C.fmt(s["max_abs_dp_truth"], 4)])
        lines.append(C.markdown_table(
            ["system", "ok", "wall s", "/ sklearn", "/ Spark", "client MiB", "scheduler MiB", "workers MiB (1st run)",
             "JVM MiB", "CPU s", "CPU / sklearn", "cluster start s", "max abs dp vs truth"], rows, ["<", "<"] + [">"] * 11))
        if res["agreement"]:
            lines += ["", "Isotonic maps on the grid: " + "; ".join(
                f"{k}: max abs dp {C.fmt(v, 3)}" for k, v in res["agreement"].items()) + "."]
        if res.get("same_model_files"):
            lines += ["", "Model files byte for byte (first repeat): " + "; ".join(
                f"{k}: {'identical' if v else 'DIFFERENT'}" for k, v in res["same_model_files"].items()) + "."]
        if res["skipped"]:
            lines += ["", "Skipped: " + "; ".join(f"{k} ({v})" for k, v in res["skipped"].items()) + "."]
        lines.append("")
    lines += ["## Targets (issue 21)", "", C.markdown_table(
        ["rows", "check", "value", "target", "met"],
        [[str(c["rows"]), c["what"], C.fmt(c["value"], 3), c["target"], C.fmt(c["met"])] for c in d["checks"]])]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_generated_table_options(ap, name=NAME, results_dir=str(HERE / "results"), rows_list=[1_000_000, 10_000_000], methods=METHODS)
    ap.add_argument("--workers", type=int, default=2, help="cluster workers and Spark's local[W] (0: no cluster)")
    ap.add_argument("--modes", type=lambda s: [m for m in s.split(",") if m], default=["embedded", "cluster"],
                    help="calengine's configurations: embedded, cluster or both (comma-separated)")
    ap.add_argument("--cluster-kind", choices=("processes", "local"), default="processes",
                    help="processes: a dask scheduler and dask worker started for each run, joined with --cluster"
                    " ADDRESS; local: --cluster --workers W (the client spawns a LocalCluster)")
    ap.add_argument("--worker-memory", default="4GiB", help="--cluster-kind processes: each worker's --memory-limit")
    ap.add_argument("--big-repeats", type=int, default=None,
                    help=f"repeats at sizes of at least {BIG_ROWS:,} rows (default: --repeats)")
    ap.add_argument("--sklearn-max-rows", type=int, default=100_000_000)
    ap.add_argument("--sklearn-min-available-gib", type=float, default=14.0)
    ap.add_argument("--spark-max-rows", type=int, default=10_000_000)
    ap.add_argument("--spark-memory", default="12g", help="spark.driver.memory (local mode: the JVM's heap)")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--spark-repeats", type=int, default=3, help="at most this many Spark runs per size")
    ap.add_argument("--before-python", metavar="PY", default=None,
                    help="also run the fits with this interpreter's installed calengine (e.g. a venv holding"
                    " main), labelled 'before', interleaved with the others: a baseline side by side (on a started"
                    " cluster, its scheduler and workers are that environment's dask)")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_child"]:
        return child(argv[1], argv[2])
    args = build_parser().parse_args(argv)
    if (args.repeats < 1 or any(n < 1 for n in args.rows_list) or args.rows_per_file < 1 or args.workers < 0
            or (args.big_repeats is not None and args.big_repeats < 1)
            or not args.modes or not set(args.modes) <= {"embedded", "cluster"}):
        raise SystemExit("error: --repeats, --big-repeats, --rows-list, --rows-per-file must be at least 1,"
                         " --workers at least 0, --modes a list of embedded and cluster")
    env = C.environment(REPO_ROOT, VERSIONS)
    work = Path(args.work_dir)
    (work / "runs").mkdir(parents=True, exist_ok=True)
    grid = write_grid(work / "grid.parquet")
    results: list[dict] = []

    def publish(current: dict) -> str:
        """The page of the sizes done and the one under way (rewritten after every run)."""
        done = [*results, current]
        data = {"benchmark": args.name, "environment": env, "config": vars(args), "grid_points": len(grid),
                "results": done, "checks": checks(done), "load_after": C.load_snapshot()}
        md = render(data)
        C.write_results(args.results_dir, args.name, data, md)
        return md

    for n in args.rows_list:
        current = run_size(n, args, grid, work, publish)
        md = publish(current)
        results.append(current)
    shutil.rmtree(work / "runs", ignore_errors=True)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
