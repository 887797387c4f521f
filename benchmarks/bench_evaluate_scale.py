#!/usr/bin/env python
"""Evaluation in bounded memory (issue 22 §1): ``calengine evaluate`` beside ``calengine score`` of the
same table in one run, and beside the old in-memory accumulator path.

For a gaussian_nb + sigmoid model (``--mode refit``: continuous probabilities, so every row is its own
distinct value) fitted on the generated table, it times at each ``--rows-list`` size, launch to exit:

* **score**: ``calengine score MODEL TABLE --output OUT`` (the reference the issue sets: evaluate
  within 3x of it);
* **evaluate (ranges)**: ``calengine evaluate MODEL TABLE --target y --json`` with tables cut into
  score ranges spilled to the scratch directory (:mod:`calengine.metrics.ranged.engine`; the command does
  that from ``RANGED_MIN_ROWS`` = 1M rows on, the benchmark forces it at every size);
* **evaluate (accumulator)**: the same command with the range cut disabled
  (``range_eval.RANGED_MIN_ROWS`` set past the table), i.e. every chunk's tables merged in this
  process as before issue 22 §1: the named baseline.  Skipped above ``--baseline-max-rows``.
* **evaluate (before)**, with ``--before DIR``: the ranged command run by an earlier build, ``DIR``
  holding its ``calengine`` package (e.g. a copy of an install's ``site-packages/calengine`` made
  before changing the code), put first on ``PYTHONPATH``: a change's speed-up measured in one run.

Every command runs without ``--cluster`` (chunk tasks on a thread per core).  Medians of ``--repeats``
interleaved runs, the peak RSS of the process (``ru_maxrss`` of the tree: one process here), the CPU
seconds (user + system: on a shared machine they move less than the wall time) and the ratios
evaluate / score; it checks that the evaluate paths print the same JSON.  Writes
``results/evaluate_scale.{md,json}``.

    python benchmarks/bench_evaluate_scale.py [--rows-list 1000000,10000000] [--repeats 3] [--report]

``--report``: every evaluate also writes its HTML report (issue 22 §3), so the accumulator baseline is
the report as it was drawn before (whole tables in this process) and "ranges" the report drawn from
score ranges.

``--cluster``: instead, ``evaluate --json --cluster ADDRESS`` on a real cluster started afresh for every
run: a ``dask scheduler`` and ``--workers`` ``dask worker`` processes (one thread each, under a nanny,
``--worker-memory`` each: Dask's spilling and its 95 % termination act at that budget; started with
``MALLOC_MMAP_THRESHOLD_`` set as :data:`calengine.runtime.client.WORKER_MMAP_THRESHOLD` tells remote workers
to, ``--worker-mmap-threshold 0`` to leave it unset) on 127.0.0.1, a free port.  Per process it reports
the peak RSS (the larger of sampled RSS and ``VmHWM``, read before the processes stop), the CPU
seconds (the workers' user and system time apart: system time is where an allocator that maps and
unmaps every temporary shows), the largest size the workers' local directories (Dask's spill) reached, and
whether the JSON equals embedded ``evaluate --json`` of the same table (up to ``--compare-max-rows``;
run once per size, not timed); both cut tables into ranges at any size, as above.  The pages are
written after every size.
The issue's target: client < 1 GiB and every process flat (within 20 %) from 10M to 100M rows.
Writes ``results/evaluate_cluster.{md,json}``.

    python benchmarks/bench_evaluate_scale.py --cluster --rows-list 10000000,30000000 --repeats 1

``--reference``: beside ``score`` and ``evaluate --json`` of each table, one more process computes the
same metrics with scikit-learn, scipy and the reference packages the metric suite is tested against
(relplot, MAPIE, uncertainty-calibration, statsmodels with patsy: the ``test`` extra; and MCGrad's
``metrics`` for ECCE: ``pip install --no-deps mcgrad``), from class 1's probability in the table
that run's ``score`` wrote and the target of the input: wall, CPU and peak RSS of each process, each
metric's own seconds, and every value compared with ``evaluate --json`` within the tolerance
:data:`REFERENCE_TOLERANCE` states.  Writes ``results/evaluate_reference.{md,json}``.

    python benchmarks/bench_evaluate_scale.py --reference --rows-list 10000000 --repeats 1

``--peers``: issue 43 §4.  On a generated score-column table (``gen_scores_table.py``: a float32 score
``s`` and a label ``y``) and a model ``calengine fit --scores s --method sigmoid`` fitted on it (once,
not timed), with the table's calibrated probabilities written once by ``calengine score`` (not timed),
per run, interleaved, launch to exit: (a) **peers**: one process reading those probabilities and the
labels from Parquet and computing exactly :data:`PEER_METRICS` in memory with scikit-learn, relplot and
uncertainty-calibration (:func:`peer_metrics`); (b) ``calengine evaluate --json --metrics`` of the same
keys; (c) the full ``calengine evaluate --json``.  Medians of wall and CPU seconds, peak RSS, the ratios
(b)/(a) (the issue's target: at most 0.5) and (c)/(a); the values of (b) compared with the peers' within
:data:`REFERENCE_TOLERANCE`, and every key of (b) with the same key of (c) (equal bits).  Writes
``results/evaluate_peers.{md,json}``.

    python benchmarks/bench_evaluate_scale.py --peers --rows-list 10000000 --repeats 3

``--commands``: the peak RSS of the process (embedded, the client) of ``score``, ``score --cost-matrix``,
``decide``, ``evaluate --json`` alone and with ``--cost-matrix`` or ``--bootstrap B`` at each size: the
issue wants the decision accumulators and the bootstrap in bounded memory, so their peaks must not grow
with the rows.  Writes ``results/evaluate_commands.{md,json}``.

    python benchmarks/bench_evaluate_scale.py --commands --rows-list 1000000,10000000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402
import gen_table as G  # noqa: E402

REPO_ROOT = HERE.parent

#: the evaluate command with the range cut forced on (``{min_rows}`` = 0: at any size) or off (the
#: accumulator path, the baseline); from 1M rows on the plain command cuts ranges as the first does
EVALUATE = r"""
import sys
from calengine.metrics.ranged import engine as range_eval
range_eval.RANGED_MIN_ROWS = {min_rows}
from calengine.cli import entry
sys.argv = ["calengine", *sys.argv[1:]]
entry()
"""

FIT = ["--learner", "gaussian_nb", "--method", "sigmoid", "--mode", "refit"]


def _cluster_role(proc_info: dict, root_pid: int) -> str:
    """A cluster command's processes: the ``dask worker`` command (the nanny) and its worker children."""
    return "nanny" if proc_info["pid"] == root_pid else C.default_role(proc_info, -1)


def _dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def _tree_cpu(root_pid: int) -> dict:
    """User and system CPU seconds of ``root_pid`` and its live descendants, by pid."""
    import psutil

    out = {}
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return out
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        out[p.pid] = {"user_s": t.user, "sys_s": t.system}
    return out


def _cluster_run(model: Path, table: Path, work: Path, workers: int, memory: str, mmap_threshold: int = 0) -> dict:
    """One ``evaluate --cluster`` on a fresh scheduler and workers: wall, CPU (client, scheduler, each
    worker: user and system), per-process peaks, spill.  ``mmap_threshold``: the workers'
    ``MALLOC_MMAP_THRESHOLD_`` (what :data:`calengine.runtime.client.WORKER_MMAP_THRESHOLD` tells remote
    workers to set; 0: left unset, glibc's 128 KiB frozen by the nanny's trim setting)."""
    import threading

    from calengine.testing.cluster import start_dask_scheduler, start_dask_worker, stop_processes, wait_for_workers

    spill_dir = work / "cluster-spill"
    shutil.rmtree(spill_dir, ignore_errors=True)
    spill_dir.mkdir(parents=True)
    address, scheduler = start_dask_scheduler(work)
    procs = [scheduler]
    samplers, spill_peak, stop = [], [0], threading.Event()
    try:
        env = {"MALLOC_MMAP_THRESHOLD_": str(mmap_threshold)} if mmap_threshold else None
        procs.append(start_dask_worker(address, workers, work, env=env, memory_limit=memory,
                                       args=["--local-directory", str(spill_dir)]))
        wait_for_workers(address, workers)
        samplers = [C.TreeSampler(scheduler.pid).start(), C.TreeSampler(procs[1].pid, role_of=_cluster_role).start()]

        def watch_spill():
            while not stop.is_set():
                spill_peak[0] = max(spill_peak[0], _dir_bytes(spill_dir))
                stop.wait(1.0)

        watcher = threading.Thread(target=watch_spill, daemon=True)
        watcher.start()
        args = ["--quiet", "evaluate", str(model), str(table), "--target", "y", "--json", "--cluster", address]
        r = C.run_measured([sys.executable, "-P", "-c", EVALUATE.format(min_rows=0), *args], timeout=7200)
        for smp in samplers:
            smp.sample()  # the last VmHWM before the processes stop
        cpu = {"scheduler": _tree_cpu(scheduler.pid).get(scheduler.pid, {}),
               "workers": [t for pid, t in sorted(_tree_cpu(procs[1].pid).items())
                           if samplers[1].procs.get(pid, {}).get("role") == "worker"]}
    finally:
        stop.set()
        for smp in samplers:
            smp.stop()
        stop_processes(procs)
    if r.returncode != 0:
        raise SystemExit(f"evaluate --cluster failed: {r.stderr[-2000:]}")
    sched, nanny = (smp.report() for smp in samplers)
    return {"wall_s": r.wall_s, "cpu_client_s": r.rusage["user_s"] + r.rusage["sys_s"], "client": r.rss["client"],
            "scheduler": sched["client"], "workers": nanny["workers"], "spill_peak": spill_peak[0], "cpu": cpu,
            "load_before": r.load_before, "stdout": r.stdout}


def _cluster_main(args, model: Path, table_of) -> int:
    """Each size in turn; the results pages are written after every size (a 100M run takes hours)."""
    results = []
    for rows in [int(s) for s in args.rows_list.split(",") if s.strip()]:
        table = table_of(rows)
        runs = [_cluster_run(model, table, Path(args.work_dir), args.workers, args.worker_memory,
                             args.worker_mmap_threshold) for _ in range(args.repeats)]
        embedded = None
        if rows <= args.compare_max_rows:
            embedded = subprocess.run([sys.executable, "-P", "-c", EVALUATE.format(min_rows=0), "--quiet", "evaluate",
                                       str(model), str(table), "--target", "y", "--json"],
                                      capture_output=True, text=True, check=True).stdout
        results.append({
            "rows": rows, "wall_s": C.median([r["wall_s"] for r in runs]),
            "cpu_client_s": C.median([r["cpu_client_s"] for r in runs]),
            "peak_mib": {"client": max(r["client"] for r in runs) / C.MiB,
                         "scheduler": max(r["scheduler"] for r in runs) / C.MiB,
                         "workers": [max(w) / C.MiB for w in zip(*(r["workers"] for r in runs))]},
            "spill_peak_mib": max(r["spill_peak"] for r in runs) / C.MiB,
            "cpu_s": {"scheduler": C.median([r["cpu"]["scheduler"].get("user_s", 0) + r["cpu"]["scheduler"].get("sys_s", 0)
                                             for r in runs]),
                      "workers_user": C.median([sum(w["user_s"] for w in r["cpu"]["workers"]) for r in runs]),
                      "workers_sys": C.median([sum(w["sys_s"] for w in r["cpu"]["workers"]) for r in runs])},
            "same_json_as_embedded": None if embedded is None else all(r["stdout"] == embedded for r in runs),
            "load_before": runs[0]["load_before"], "runs": [r["wall_s"] for r in runs],
        })
        _publish_cluster(args, results)
    return 0


def _publish_cluster(args, results: list) -> None:
    rows_md = [[f"{d['rows']:,}", f"{d['peak_mib']['client']:.0f}", f"{d['peak_mib']['scheduler']:.0f}",
                " / ".join(f"{w:.0f}" for w in d["peak_mib"]["workers"]), f"{d['spill_peak_mib']:.0f}",
                C.fmt(d["wall_s"]), C.fmt(d["cpu_client_s"]), C.fmt(d["cpu_s"]["scheduler"]),
                f"{C.fmt(d['cpu_s']['workers_user'])} / {C.fmt(d['cpu_s']['workers_sys'])}",
                {True: "yes", False: "**no**", None: "not compared"}[d["same_json_as_embedded"]]]
               for d in results]
    growth = []
    if len(results) > 1:
        a, b = results[0]["peak_mib"], results[-1]["peak_mib"]
        pct = [f"{100 * (y / x - 1):+.0f} %" for x, y in zip(a["workers"], b["workers"])]
        client, sched = (f"{100 * (b[r] / a[r] - 1):+.0f} %" for r in ("client", "scheduler"))
        growth = ["", f"Growth {results[0]['rows']:,} → {results[-1]['rows']:,} rows: client {client}, scheduler"
                      f" {sched}, workers {' / '.join(pct)} (target: within ±20 %)."]
    md = "\n".join([
        "# `calengine evaluate --cluster`: per-process peaks as the table grows",
        "",
        f"Command: `{C.command_line()}`; a fresh `dask scheduler` and {args.workers} `dask worker` processes"
        f" (`--nthreads 1 --memory-limit {args.worker_memory}`, nanny"
        + (f", `MALLOC_MMAP_THRESHOLD_={args.worker_mmap_threshold}`" if args.worker_mmap_threshold else "")
        + f") on 127.0.0.1 per run; tables × {args.cols}"
        f" float32 columns in files of at most 1M rows (`gen_table.py`), gaussian_nb + sigmoid (refit); peaks are the larger of"
        " sampled RSS and VmHWM; spill: the largest total size of the workers' local directories.",
        "",
        C.markdown_table(["rows", "client peak MiB", "scheduler peak MiB", "worker peaks MiB", "spill peak MiB",
                          "client wall s", "client CPU s", "scheduler CPU s", "workers CPU s user / sys",
                          "same JSON as embedded"], rows_md),
        *growth,
        "",
        C.machine_line(REPO_ROOT),
    ])
    C.publish(md, results, args.results_name or "evaluate_cluster", args.results_dir, write=not args.no_write)


# ------------------------------------------------------------------------------ --reference: the same metrics
# computed by scikit-learn, scipy and the reference packages, in one process, on the arrays `score` wrote

#: what each reference value is compared with (key of ``evaluate --json``), the relative tolerance and why
#: it is not 1e-9 where it is not (the oracles of tests/metrics/ranged/test_suite.py agree to the same bounds)
REFERENCE_TOLERANCE = {
    "brier": (1e-9, "sklearn brier_score_loss"),
    "log_loss": (1e-9, "sklearn log_loss (clips at float64 eps, calengine at 1e-15: equal while no p < 1e-15)"),
    "auc": (1e-9, "sklearn roc_auc_score"),
    "ece": (1e-9, "relplot binnedECE of the top-label confidence, 15 equal-width bins"),
    "ece_equal_mass": (1e-9, "uncertainty-calibration lower_bound_scaling_ce(p=1, debias=False, top-label, 15 bins)"),
    "ece_classwise": (1e-9, "mean over classes of relplot binnedECE, 15 bins"),
    "l2_ce_debiased": (1e-9, "uncertainty-calibration lower_bound_scaling_ce(p=2, debias=True, 15 bins)"),
    "smece": (1e-9, "relplot smECE"),
    "ks": (1e-6, "MAPIE kolmogorov_smirnov_statistic (MAPIE jitters scores by 1e-8 before sorting)"),
    "ks_pvalue": (1e-5, "MAPIE kolmogorov_smirnov_p_value (same jitter; MAPIE's truncated series is off by ~1e-12"
                        " absolute below p = 1e-8)"),
    "kuiper": (1e-6, "MAPIE kuiper_statistic (same jitter)"),
    "kuiper_pvalue": (1e-5, "MAPIE kuiper_p_value (same jitter)"),
    "hosmer_lemeshow": (1e-9, "scipy: chi-square of 10 equal-count groups of the sorted rows"),
    "hosmer_lemeshow_pvalue": (1e-8, "scipy chi2.sf of that statistic, 8 degrees of freedom"),
    "calibration_slope": (1e-7, "sklearn LogisticRegression(penalty=None, newton-cholesky) of y on logit(p)"),
    "calibration_intercept": (1e-7, "the same fit's intercept"),
    "ici": (1e-7, "statsmodels GLM (binomial) of y on patsy's natural cubic spline cr() of logit(p), knots at the"
                  " 5/35/65/95 % quantiles (inverted cdf); mean |fit - p|"),
    "ecce_pvalue": (1e-5, "MCGrad ecce_pvalue (Arrieta-Ibarra et al.'s ECCE in sigma units, Brownian-range tail)"),
}

#: absolute floor of the comparison (p-values of 1e-300 and such)
REFERENCE_ABS = 1e-12


def reference_metrics(scored: str, table: str, target: str = "y") -> dict:
    """The metrics of ``evaluate --json`` that scikit-learn, scipy and the reference packages compute,
    on class 1's probability in the Parquet dataset ``scored`` (what ``calengine score`` wrote, files in
    the order of ``table``'s) against ``target`` in ``table``: ``{"values": {key: value}, "seconds":
    {key: seconds}, "rows": n}``.  Each reference is timed apart; all run in this one process.

    MCGrad (the ECCE reference) declares torch, lightgbm and Ax as requirements that its ``metrics``
    module never imports, so it is not in the test extra: install it with ``pip install --no-deps mcgrad``.
    Without it ``ecce_pvalue`` is left out of ``values`` and named in ``missing`` with that fix."""
    import time

    import calibration as kumar
    import patsy
    import pyarrow.parquet as pq
    import relplot
    import statsmodels.api as sm
    from mapie.metrics import calibration as mapie
    from scipy.stats import chi2

    try:
        from mcgrad import metrics as mcgrad
    except ImportError:
        mcgrad = None
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

    probs = pq.read_table(scored, columns=["p_0", "p_1"])
    P2 = np.column_stack([probs.column(c).to_numpy().astype(np.float64) for c in ("p_0", "p_1")])
    del probs
    p = P2[:, 1]
    y = pq.read_table(table, columns=[target]).column(target).to_numpy().astype(np.int64)
    if p.size != y.size:
        raise SystemExit(f"error: {scored} has {p.size} rows, {table} {y.size}")
    values, seconds = {}, {}

    def timed(key, fn):
        t0 = time.perf_counter()
        values[key] = fn()
        seconds[key] = time.perf_counter() - t0

    def hosmer_lemeshow(groups=10):
        order = np.argsort(p, kind="stable")
        f, o = p[order], y[order].astype(np.float64)
        g = np.arange(f.size) * groups // f.size
        n = np.bincount(g, minlength=groups).astype(np.float64)
        E, O = np.bincount(g, weights=f, minlength=groups), np.bincount(g, weights=o, minlength=groups)
        live = (E > 0) & (E < n)
        stat = float(np.sum((O[live] - E[live]) ** 2 / (E[live] * (1 - E[live] / n[live]))))
        return stat, float(chi2.sf(stat, np.count_nonzero(live) - 2))

    def cox():
        q = np.clip(p, 1e-15, 1 - 1e-15)
        x = (np.log(q) - np.log1p(-q))[:, None]
        fit = LogisticRegression(penalty=None, solver="newton-cholesky", tol=1e-12, max_iter=200).fit(x, y)
        return float(fit.coef_[0, 0]), float(fit.intercept_[0])

    timed("brier", lambda: float(brier_score_loss(y, p)))
    timed("log_loss", lambda: float(log_loss(y, p)))
    timed("auc", lambda: float(roc_auc_score(y, p)))
    conf, correct = P2.max(axis=1), (np.argmax(P2, axis=1) == y).astype(np.float64)
    timed("ece", lambda: float(relplot.metrics.binnedECE(conf, correct, nbins=15)))
    timed("ece_equal_mass", lambda: float(kumar.lower_bound_scaling_ce(P2, y, p=1, debias=False, num_bins=15,
                                                                       mode="top-label")))
    timed("ece_classwise", lambda: float(np.mean([relplot.metrics.binnedECE(P2[:, c], (y == c).astype(np.float64),
                                                                            nbins=15) for c in range(2)])))
    timed("l2_ce_debiased", lambda: float(kumar.lower_bound_scaling_ce(p, y, p=2, debias=True, num_bins=15)))
    timed("smece", lambda: float(relplot.smECE(p, y.astype(np.float64))))
    timed("ks", lambda: float(mapie.kolmogorov_smirnov_statistic(y, p)))
    timed("ks_pvalue", lambda: float(mapie.kolmogorov_smirnov_p_value(y, p)))
    timed("kuiper", lambda: float(mapie.kuiper_statistic(y, p)))
    timed("kuiper_pvalue", lambda: float(mapie.kuiper_p_value(y, p)))
    timed("hosmer_lemeshow", hosmer_lemeshow)
    values["hosmer_lemeshow"], values["hosmer_lemeshow_pvalue"] = values["hosmer_lemeshow"]
    def ici():
        # Harrell's restricted cubic spline of logit(p) with 4 knots, in patsy's cr() basis (the same space)
        q = np.clip(p, 1e-15, 1 - 1e-15)
        x = np.log(q) - np.log1p(-q)
        t = [float(np.quantile(x, q, method="inverted_cdf")) for q in (0.05, 0.35, 0.65, 0.95)]
        X = np.asarray(patsy.dmatrix(f"cr(x, knots=({t[1]!r}, {t[2]!r}), lower_bound={t[0]!r}, "
                                     f"upper_bound={t[3]!r}) - 1", {"x": x}))
        fit = sm.GLM(y, X, family=sm.families.Binomial()).fit(tol=1e-13)
        return float(np.mean(np.abs(fit.predict(X) - p)))

    timed("calibration_slope", cox)
    values["calibration_slope"], values["calibration_intercept"] = values["calibration_slope"]
    timed("ici", ici)
    missing = {}
    if mcgrad is None:
        missing["ecce_pvalue"] = "MCGrad is not installed: pip install --no-deps mcgrad"
    else:
        timed("ecce_pvalue", lambda: float(mcgrad.ecce_pvalue(y, p)))
    return {"values": values, "seconds": seconds, "rows": int(p.size), "missing": missing}


def compare_reference(reference: dict, evaluated: dict) -> dict:
    """Per key of :data:`REFERENCE_TOLERANCE`: calengine's value (``evaluate --json``), the reference's,
    their relative difference and whether it is within the tolerance (``ok``: None for a reference the
    process could not compute, named in its ``missing`` with the fix)."""
    out = {}
    missing = reference.get("missing", {})
    for key, (rel, what) in REFERENCE_TOLERANCE.items():
        mine = evaluated.get(key)
        if isinstance(mine, dict):  # l2_ce_debiased: {value, low, high}
            mine = mine["value"]
        ref = reference["values"].get(key)
        if ref is None and key in missing:
            out[key] = {"calengine": mine, "reference": None, "rel_diff": None, "ok": None, "tolerance": rel,
                        "by": f"{what} -- not computed: {missing[key]}"}
            continue
        if mine is None or ref is None:
            out[key] = {"calengine": mine, "reference": ref, "rel_diff": None, "ok": False, "tolerance": rel, "by": what}
            continue
        diff = abs(mine - ref)
        rel_diff = diff / max(abs(ref), 1e-300)
        out[key] = {"calengine": mine, "reference": ref, "rel_diff": rel_diff, "tolerance": rel, "by": what,
                    "ok": bool(diff <= max(rel * abs(ref), REFERENCE_ABS))}
    return out


# ------------------------------------------------------------------------------ --peers (issue 43 §4)

#: the metrics the in-memory peers compute and ``evaluate --metrics`` selects: brier, log loss, AUC,
#: equal-width and equal-mass ECE (top label, 15 bins) and smooth ECE
PEER_METRICS = ("brier", "log_loss", "auc", "ece", "ece_equal_mass", "smece")
#: how the peers compute a key where it is not :data:`REFERENCE_TOLERANCE`'s reference
PEER_BY = {"ece_equal_mass": "numpy: uncertainty-calibration's definition (top label, 15 equal-count bins of the sorted"
                             " confidences, edges at the midpoints) vectorised; its own pure-Python sort is not a fair"
                             " peer at 10M rows"}


def equal_mass_ece(conf: np.ndarray, correct: np.ndarray, bins: int = 15) -> float:
    """uncertainty-calibration's ``lower_bound_scaling_ce(p=1, debias=False, mode="top-label")`` in numpy:
    the sorted confidences cut by ``np.array_split`` into ``bins`` parts, bin edges at the midpoints
    between parts (and 1.0), rows placed by ``searchsorted`` as its ``fast_bin`` places them, and the
    count-weighted mean of ``|mean confidence - accuracy|``."""
    s = np.sort(conf)
    parts = np.array_split(s, min(bins, s.size))
    edges = np.asarray(sorted({*((a[-1] + b[0]) / 2.0 for a, b in zip(parts[:-1], parts[1:])), 1.0}))
    idx = np.searchsorted(edges, conf)
    count = np.bincount(idx, minlength=edges.size + 1).astype(np.float64)
    sp = np.bincount(idx, weights=conf, minlength=edges.size + 1)
    sy = np.bincount(idx, weights=correct, minlength=edges.size + 1)
    live = count > 0
    return float(np.dot(count[live] / conf.size, np.abs(sp[live] / count[live] - sy[live] / count[live])))


def peer_metrics(scored: str, table: str, target: str = "y") -> dict:
    """:data:`PEER_METRICS` computed in memory by the peers -- scikit-learn (Brier, log loss, AUC), relplot
    (equal-width ECE of the top-label confidence, smooth ECE) and numpy (equal-mass ECE of the top label,
    :func:`equal_mass_ece`) -- from the probabilities ``p_0, p_1`` in the Parquet dataset ``scored`` and ``target`` in
    ``table``, as :func:`reference_metrics` computes the same keys: ``{"values", "seconds", "rows"}``; the
    imports and the read are timed too.  Run in its own process, so its launch, imports and peak memory count."""
    import time

    t0 = time.perf_counter()
    import pyarrow.parquet as pq
    import relplot
    from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

    seconds = {"imports": time.perf_counter() - t0}
    t0 = time.perf_counter()
    probs = pq.read_table(scored, columns=["p_0", "p_1"])
    P2 = np.column_stack([probs.column(c).to_numpy().astype(np.float64) for c in ("p_0", "p_1")])
    del probs
    p = P2[:, 1]
    y = pq.read_table(table, columns=[target]).column(target).to_numpy().astype(np.int64)
    seconds["read"] = time.perf_counter() - t0
    if p.size != y.size:
        raise SystemExit(f"error: {scored} has {p.size} rows, {table} {y.size}")
    values = {}

    def timed(key, fn):
        t = time.perf_counter()
        values[key] = fn()
        seconds[key] = time.perf_counter() - t

    timed("brier", lambda: float(brier_score_loss(y, p)))
    timed("log_loss", lambda: float(log_loss(y, p)))
    timed("auc", lambda: float(roc_auc_score(y, p)))
    conf, correct = P2.max(axis=1), (np.argmax(P2, axis=1) == y).astype(np.float64)
    timed("ece", lambda: float(relplot.metrics.binnedECE(conf, correct, nbins=15)))
    timed("ece_equal_mass", lambda: equal_mass_ece(conf, correct))
    timed("smece", lambda: float(relplot.smECE(p, y.astype(np.float64))))
    return {"values": values, "seconds": seconds, "rows": int(p.size)}


def _peers_main(args, calengine) -> int:
    """``--peers``: per size, the peers, ``evaluate --metrics`` and the full ``evaluate``, interleaved."""
    import gen_scores_table as GS

    work = Path(args.work_dir)
    selection = ",".join(PEER_METRICS)
    results = []
    for rows in [int(s) for s in args.rows_list.split(",") if s.strip()]:
        files = max(args.files, -(-rows // 1_000_000))
        table = work / "scores-tables" / f"scores-{rows}-{files}-{args.seed}"
        GS.ensure_scores_table(table, GS.ScoresSpec(rows=rows, seed=args.seed), files=files,
                               row_group_rows=min(1_000_000, rows), quiet=True)
        model = work / "peers-models" / f"sigmoid-{table.name}"
        if not (model / "manifest.json").exists():
            shutil.rmtree(model, ignore_errors=True)
            subprocess.run([*calengine, "fit", str(table), "--target", GS.TARGET, "--scores", GS.SCORE,
                            "--method", "sigmoid", "--output", str(model)], check=True)
        scored = work / "peers-scored" / f"{model.name}"
        if not scored.exists():
            subprocess.run([*calengine, "score", str(model), str(table), "--output", str(scored)], check=True)
        cmds = {"peers": [sys.executable, "-P", str(Path(__file__).resolve()), "--peers-child", str(scored), str(table)],
                "evaluate --metrics": [*calengine, "evaluate", str(model), str(table), "--target", GS.TARGET, "--json",
                                       "--metrics", selection],
                "evaluate": [*calengine, "evaluate", str(model), str(table), "--target", GS.TARGET, "--json"]}
        runs: dict[str, list] = {k: [] for k in cmds}
        for _ in range(args.repeats):
            _run_each(cmds, runs)
        peers = json.loads(runs["peers"][0].stdout)
        subset = json.loads(runs["evaluate --metrics"][0].stdout)
        full = json.loads(runs["evaluate"][0].stdout)
        agreement = {k: {**a, "by": PEER_BY.get(k, a["by"])} for k, a in compare_reference(peers, subset).items()
                     if k in PEER_METRICS}
        summary = _summary(runs)
        wall, cpu = summary["wall_s"], summary["cpu_s"]
        results.append({
            "rows": rows, **summary, "selection": selection,
            "ratio_subset_over_peers": C.ratio(wall["evaluate --metrics"], wall["peers"]),
            "ratio_full_over_peers": C.ratio(wall["evaluate"], wall["peers"]),
            "cpu_ratio_subset_over_peers": C.ratio(cpu["evaluate --metrics"], cpu["peers"]),
            "cpu_ratio_full_over_peers": C.ratio(cpu["evaluate"], cpu["peers"]),
            "peer_seconds": peers["seconds"], "agreement": agreement,
            "all_agree": all(a["ok"] for a in agreement.values()),
            "subset_keys": sorted(subset),
            "subset_equals_full": all(subset[k] == full.get(k) for k in subset),
        })
    rows_md = [[f"{d['rows']:,}", kind, C.fmt(d["wall_s"][kind]), C.fmt(d["cpu_s"][kind]),
                f"{d['peak_rss_mib'][kind]:.0f}", " ".join(C.fmt(x) for x in d["runs"][kind])]
               for d in results for kind in d["wall_s"]]
    ratio_md = [[f"{d['rows']:,}", f"**{C.fmt(d['ratio_subset_over_peers'])}**", C.fmt(d["ratio_full_over_peers"]),
                 C.fmt(d["cpu_ratio_subset_over_peers"]), C.fmt(d["cpu_ratio_full_over_peers"]),
                 {True: "yes", False: "**no**"}[d["all_agree"]], {True: "yes", False: "**no**"}[d["subset_equals_full"]]]
                for d in results]
    last = results[-1]
    agree_md = [[key, f"{a['calengine']!r}", f"{a['reference']!r}", C.fmt(a["rel_diff"]), f"{a['tolerance']:g}",
                 {True: "yes", False: "**no**", None: "not computed"}[a["ok"]], a["by"],
                 C.fmt(last["peer_seconds"].get(key))] for key, a in last["agreement"].items()]
    md = "\n".join([
        "# `calengine evaluate --metrics` beside the in-memory peers (issue 43 §4)",
        "",
        "Tables: `gen_scores_table.py` (a float32 score `s`, a label `y`; files of"
        " at most 1M rows), the model `calengine fit --scores s --method sigmoid` fitted on the table, its"
        " probabilities written once by `calengine score` (neither timed).  Per run, interleaved, launch to exit:"
        " **peers**: one process reading `p_0, p_1` and `y` from Parquet and computing "
        + ", ".join(f"`{k}`" for k in PEER_METRICS) + " in memory (scikit-learn, relplot, numpy);"
        f" **evaluate --metrics**: `calengine evaluate MODEL TABLE --target y --json --metrics {selection}`"
        " (embedded: no `--cluster`); **evaluate**: the same without `--metrics` (every key).  Medians of"
        " runs; peak RSS (`ru_maxrss`) and CPU seconds (user + system) of each process.  The issue's target:"
        " evaluate --metrics / peers at most 0.5 in wall time.",
        "",
        C.markdown_table(["rows", "process", "wall s", "CPU s", "peak RSS MiB", "runs wall s"], rows_md),
        "",
        C.markdown_table(["rows", "wall --metrics / peers", "wall full / peers", "CPU --metrics / peers",
                          "CPU full / peers", "values agree with peers", "--metrics keys = full keys"], ratio_md),
        "",
        f"Agreement at {last['rows']:,} rows (calengine: `evaluate --json --metrics`; tolerance relative, floor"
        f" {REFERENCE_ABS:g} absolute); peer s: that metric's own time in the peers' process (read:"
        f" {C.fmt(last['peer_seconds'].get('read'))} s, imports: {C.fmt(last['peer_seconds'].get('imports'))} s):",
        "",
        C.markdown_table(["key", "calengine", "peers", "rel diff", "tolerance", "agree", "peer", "peer s"], agree_md),
    ])
    C.publish(md, results, args.results_name or "evaluate_peers", args.results_dir, write=not args.no_write)
    return 0


#: the cost matrix of ``--commands`` (rows: decided class, columns: true class): a missed positive costs 5,
#: a false alarm 1 (Bayes threshold 1/6), constant so every row's cost is the matrix's
COST_MATRIX = {"classes": [0, 1], "costs": [[0, 5], [1, 0]]}


def _reference_main(args, calengine, model: Path, table_of) -> int:
    """``--reference``: per size, ``score`` (writing the scored table), ``evaluate --json`` and the
    reference process (:func:`reference_metrics` on what that score wrote), interleaved; wall, CPU and
    peak RSS of each process, and the values compared key by key."""
    work = Path(args.work_dir)
    results = []
    for rows in [int(s) for s in args.rows_list.split(",") if s.strip()]:
        table = table_of(rows)
        scored = work / "scored-reference"
        runs: dict[str, list] = {"score": [], "evaluate": [], "reference": []}
        for _ in range(args.repeats):
            shutil.rmtree(scored, ignore_errors=True)
            cmds = {"score": [*calengine, "score", str(model), str(table), "--output", str(scored)],
                    "evaluate": [*calengine, "evaluate", str(model), str(table), "--target", "y", "--json"],
                    "reference": [sys.executable, "-P", str(Path(__file__).resolve()), "--reference-child",
                                  str(scored), str(table)]}
            _run_each(cmds, runs)
        reference = json.loads(runs["reference"][0].stdout)
        agreement = compare_reference(reference, json.loads(runs["evaluate"][0].stdout))
        results.append({
            "rows": rows, **_summary(runs),
            "ratio_reference_over_evaluate": C.ratio(C.median([r.wall_s for r in runs["reference"]]),
                                                     C.median([r.wall_s for r in runs["evaluate"]])),
            "reference_seconds": reference["seconds"], "agreement": agreement,
            "all_agree": all(a["ok"] is not False for a in agreement.values()),
            "not_computed": sorted(k for k, a in agreement.items() if a["ok"] is None),
        })
    rows_md = [[f"{d['rows']:,}", kind, C.fmt(d["wall_s"][kind]), C.fmt(d["cpu_s"][kind]),
                f"{d['peak_rss_mib'][kind]:.0f}"] for d in results for kind in d["wall_s"]]
    last = results[-1]
    agree_md = [[key, f"{a['calengine']!r}", f"{a['reference']!r}", C.fmt(a["rel_diff"]), f"{a['tolerance']:g}",
                 {True: "yes", False: "**no**", None: "not computed"}[a["ok"]], a["by"], C.fmt(last["reference_seconds"].get(key))]
                for key, a in last["agreement"].items()]
    md = "\n".join([
        "# `calengine evaluate` beside scikit-learn, scipy and the reference packages (issue 22)",
        "",
        f"Command: `{C.command_line()}`; tables × {args.cols} float32 columns in files of at most 1M rows (`gen_table.py`),"
        " gaussian_nb + sigmoid (refit); per run, interleaved: `calengine score` (writing the scored table),"
        " `calengine evaluate --json` (embedded) and one reference process reading class 1's probability from"
        " that scored table and the target from the input, computing the metrics below (scikit-learn, scipy,"
        " relplot, MAPIE, uncertainty-calibration, statsmodels, MCGrad); medians of runs, launch to exit; peak RSS (`ru_maxrss`) and"
        " CPU seconds of each process (one process each: no `--cluster`).",
        "",
        C.markdown_table(["rows", "process", "wall s", "CPU s", "peak RSS MiB"], rows_md),
        "",
        f"Agreement at {last['rows']:,} rows (calengine: `evaluate --json`; tolerance relative, floor"
        f" {REFERENCE_ABS:g} absolute); reference s: that metric's own time in the reference process:",
        "",
        C.markdown_table(["key", "calengine", "reference", "rel diff", "tolerance", "agree", "reference by",
                          "reference s"], agree_md),
        "",
        C.machine_line(REPO_ROOT),
    ])
    C.publish(md, results, args.results_name or "evaluate_reference", args.results_dir, write=not args.no_write)
    return 0


def _run_each(cmds: dict, runs: dict) -> None:
    """Each command of ``cmds`` (kind -> argv) once, in order, its measured run appended to ``runs[kind]``;
    a failure stops the benchmark with the command's stderr."""
    for kind, cmd in cmds.items():
        r = C.run_measured(cmd, timeout=7200)
        if r.returncode != 0:
            raise SystemExit(f"{kind} failed: {r.stderr[-2000:]}")
        runs[kind].append(r)


def _summary(runs: dict) -> dict:
    """Medians of wall and CPU seconds, the largest peak RSS, per kind of run."""
    return {"wall_s": {k: C.median([r.wall_s for r in v]) for k, v in runs.items()},
            "cpu_s": {k: C.median([r.rusage["user_s"] + r.rusage["sys_s"] for r in v]) for k, v in runs.items()},
            "peak_rss_mib": {k: max(r.rusage["maxrss_bytes"] for r in v) / C.MiB for k, v in runs.items()},
            "runs": {k: [r.wall_s for r in v] for k, v in runs.items()}}


def _commands_main(args, calengine, model: Path, table_of) -> int:
    """``--commands``: the peak RSS of the client (embedded: the one process) of ``score``, ``score
    --cost-matrix``, ``decide``, ``evaluate --json``, ``evaluate --json --cost-matrix`` and ``evaluate
    --json --bootstrap B`` at each size, interleaved; a peak that grows with the rows is state per row
    (or per distinct value) in the client.  Checks that the cost matrix and the band only add their keys
    to the JSON."""
    work = Path(args.work_dir)
    costs = work / "costs.json"
    costs.parent.mkdir(parents=True, exist_ok=True)
    costs.write_text(json.dumps(COST_MATRIX))
    out = work / "scored-commands"
    boot = f"evaluate --bootstrap {args.bootstrap}"
    results = []
    for rows in [int(s) for s in args.rows_list.split(",") if s.strip()]:
        table = table_of(rows)
        ev = ["evaluate", str(model), str(table), "--target", "y", "--json"]
        cmds = {"score": ["score", str(model), str(table), "--output", str(out)],
                "score --cost-matrix": ["score", str(model), str(table), "--output", str(out), "--cost-matrix", str(costs)],
                "decide": ["decide", str(model), str(table), "--output", str(out), "--cost-matrix", str(costs)],
                "evaluate": ev, "evaluate --cost-matrix": [*ev, "--cost-matrix", str(costs)],
                boot: [*ev, "--bootstrap", str(args.bootstrap)]}
        runs: dict[str, list] = {k: [] for k in cmds}
        for _ in range(args.repeats):
            for kind, cmd in cmds.items():
                shutil.rmtree(out, ignore_errors=True)
                r = C.run_measured([*calengine, *cmd], timeout=7200)
                if r.returncode != 0:
                    raise SystemExit(f"{kind} failed: {r.stderr[-2000:]}")
                runs[kind].append(r)
        plain = json.loads(runs["evaluate"][0].stdout)
        with_costs = json.loads(runs["evaluate --cost-matrix"][0].stdout)
        with_band = json.loads(runs[boot][0].stdout)
        results.append({
            "rows": rows, **_summary(runs),
            "cost_matrix_adds_only_decisions": with_costs.pop("decisions", None) is not None and with_costs == plain,
            "bootstrap_adds_only_the_band": with_band.pop("calibration_band", None) is not None and with_band == plain,
        })
    kinds = list(results[0]["wall_s"])
    rows_md = [[f"{d['rows']:,}", kind, C.fmt(d["wall_s"][kind]), C.fmt(d["cpu_s"][kind]),
                f"{d['peak_rss_mib'][kind]:.0f}"] for d in results for kind in kinds]
    growth = []
    if len(results) > 1:
        a, b = results[0], results[-1]
        growth = ["", f"Peak RSS growth {a['rows']:,} → {b['rows']:,} rows ({b['rows'] / a['rows']:g}× the rows):", "",
                  C.markdown_table(["command", f"peak MiB at {a['rows']:,}", f"peak MiB at {b['rows']:,}", "growth"],
                                   [[k, f"{a['peak_rss_mib'][k]:.0f}", f"{b['peak_rss_mib'][k]:.0f}",
                                     f"{100 * (b['peak_rss_mib'][k] / a['peak_rss_mib'][k] - 1):+.0f} %"] for k in kinds])]
    checks = [f"- {d['rows']:,} rows: `--cost-matrix` adds only `decisions` to the JSON:"
              f" {'yes' if d['cost_matrix_adds_only_decisions'] else '**no**'}; `--bootstrap` adds only"
              f" `calibration_band`: {'yes' if d['bootstrap_adds_only_the_band'] else '**no**'}" for d in results]
    md = "\n".join([
        "# Peak RSS of `score --cost-matrix`, `decide`, `evaluate --cost-matrix` and `evaluate --bootstrap` (issue 22)",
        "",
        f"Command: `{C.command_line()}`; tables × {args.cols} float32 columns in files of at most 1M rows (`gen_table.py`),"
        f" gaussian_nb + sigmoid (refit); cost matrix `{json.dumps(COST_MATRIX)}`; every command embedded (no"
        " `--cluster`: chunk tasks on a thread per core in the one process, which is the client); medians of"
        " interleaved runs, launch to exit; peak RSS (`ru_maxrss`) and CPU seconds of the process.",
        "",
        C.markdown_table(["rows", "command", "wall s", "CPU s", "peak RSS MiB"], rows_md),
        *growth,
        "",
        *checks,
        "",
        C.machine_line(REPO_ROOT),
    ])
    C.publish(md, results, args.results_name or "evaluate_commands", args.results_dir, write=not args.no_write)
    return 0


def _runs(calengine, model: Path, table: Path, work: Path, repeats: int, baseline: bool,
          before: str | None = None, report: bool = False) -> dict[str, list]:
    kinds = ["score", "ranges"] + (["accumulator"] if baseline else []) + (["before"] if before else [])
    runs: dict[str, list] = {k: [] for k in kinds}
    for _ in range(repeats):
        for kind in kinds:
            if kind == "score":
                out = work / "scored"
                shutil.rmtree(out, ignore_errors=True)
                cmd = [*calengine, "score", str(model), str(table), "--output", str(out)]
            else:
                args = ["--quiet", "evaluate", str(model), str(table), "--target", "y", "--json"]
                if report:  # the HTML report too, into a fresh directory per run
                    out = work / f"report-{kind}"
                    shutil.rmtree(out, ignore_errors=True)
                    args += ["--report", str(out)]
                script = EVALUATE.format(min_rows=1 << 62 if kind == "accumulator" else 0)
                cmd = [sys.executable, "-P", "-c", script, *args]
            env = None
            if kind == "before":
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [before, os.environ.get("PYTHONPATH")]))}
            r = C.run_measured(cmd, env=env, timeout=7200)
            if r.returncode != 0:
                raise SystemExit(f"{kind} failed: {r.stderr[-2000:]}")
            runs[kind].append(r)
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows-list", default="1000000,10000000", help="comma-separated table sizes")
    ap.add_argument("--model-rows", type=int, default=None, help="rows the model is fitted on (default: the smallest size)")
    ap.add_argument("--baseline-max-rows", type=int, default=10_000_000,
                    help="run the accumulator baseline up to this size (it needs ~0.4 GB per million rows)")
    ap.add_argument("--cols", type=int, default=20)
    ap.add_argument("--files", type=int, default=10, help="files per table (at least one per 1M rows)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work-dir", default="/tmp/calengine-bench")
    ap.add_argument("--results-dir", default=str(HERE / "results"))
    ap.add_argument("--before", default=None,
                    help="a directory holding an earlier build's calengine package: its ranged evaluate is timed too")
    ap.add_argument("--no-write", action="store_true", help="print only; write no result files")
    ap.add_argument("--report", action="store_true",
                    help="every evaluate also writes its HTML report (--report DIR): the accumulator baseline is"
                         " then what evaluate --report did before its figures were drawn from ranges; writes"
                         " results/evaluate_report.{md,json}")
    ap.add_argument("--cluster", action="store_true",
                    help="evaluate --cluster on fresh dask scheduler/worker processes; per-process peaks (see above)")
    ap.add_argument("--workers", type=int, default=2, help="--cluster: worker processes (one thread each)")
    ap.add_argument("--worker-memory", default="4GiB", help="--cluster: each worker's --memory-limit")
    ap.add_argument("--worker-mmap-threshold", type=int, default=4 * 2**20,
                    help="--cluster: the workers' MALLOC_MMAP_THRESHOLD_ (calengine.runtime.client.WORKER_MMAP_THRESHOLD, what"
                         " remote workers are told to set); 0 leaves it unset")
    ap.add_argument("--compare-max-rows", type=int, default=10_000_000,
                    help="--cluster: compare the JSON with embedded evaluate up to this size (it runs once more)")
    ap.add_argument("--reference", action="store_true",
                    help="score, evaluate --json and scikit-learn + the reference packages computing the same metrics"
                         " in one process: wall, CPU, peak RSS per process and the values compared; writes"
                         " results/evaluate_reference.{md,json}")
    ap.add_argument("--commands", action="store_true",
                    help="peak RSS of score, score --cost-matrix, decide, evaluate --json and evaluate --json with"
                         " --cost-matrix or --bootstrap; writes results/evaluate_commands.{md,json}")
    ap.add_argument("--bootstrap", type=int, default=200, metavar="B", help="--commands: evaluate --bootstrap B")
    ap.add_argument("--results-name", default=None,
                    help="name of the results page (default: that of the mode, e.g. evaluate_scale)")
    ap.add_argument("--reference-child", nargs=2, metavar=("SCORED", "TABLE"), help=argparse.SUPPRESS)
    ap.add_argument("--peers", action="store_true",
                    help="issue 43 §4: in-memory peers (scikit-learn + relplot) computing brier, log loss, AUC, two"
                         " ECEs and smooth ECE, evaluate --metrics of those and the full evaluate, on a score-column"
                         " table; writes results/evaluate_peers.{md,json}")
    ap.add_argument("--peers-child", nargs=2, metavar=("SCORED", "TABLE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.peers_child:  # the peers' process of --peers: its values and times on stdout
        print(json.dumps(peer_metrics(*args.peers_child)))
        return 0
    if args.reference_child:  # the reference process of --reference: its values and times on stdout
        print(json.dumps(reference_metrics(*args.reference_child)))
        return 0
    if args.before and not (Path(args.before) / "calengine" / "__init__.py").is_file():
        raise SystemExit(f"error: --before {args.before} holds no calengine package; give the directory that"
                         " contains calengine/__init__.py")
    sizes = [int(s) for s in args.rows_list.split(",") if s.strip()]
    if not sizes or any(s < 1 for s in sizes):
        raise SystemExit("error: --rows-list needs positive sizes, e.g. 1000000,10000000")
    work = Path(args.work_dir)
    if args.peers:
        return _peers_main(args, [sys.executable, "-P", "-m", "calengine", "--quiet"])

    def table_of(rows: int) -> Path:
        files = max(args.files, -(-rows // 1_000_000))  # files of at most 1M rows (30M: 30 files)
        table = work / "tables" / G.table_name("train", rows, args.cols, files, args.seed)
        G.ensure_table(table, G.TableSpec(rows, args.cols, args.seed), files, min(1_000_000, rows), G.TRAIN_STREAM)
        return table

    calengine = [sys.executable, "-P", "-m", "calengine", "--quiet"]
    model_table = table_of(args.model_rows or min(sizes))
    model = work / "evaluate-models" / f"single-{model_table.name}"
    if not (model / "manifest.json").exists():
        shutil.rmtree(model, ignore_errors=True)
        subprocess.run([*calengine, "fit", str(model_table), "--target", "y", *FIT, "--output", str(model)], check=True)
    if args.cluster:
        return _cluster_main(args, model, table_of)
    if args.reference:
        return _reference_main(args, calengine, model, table_of)
    if args.commands:
        return _commands_main(args, calengine, model, table_of)
    results = []
    for rows in sizes:
        runs = _runs(calengine, model, table_of(rows), work, args.repeats, rows <= args.baseline_max_rows,
                     args.before, args.report)
        med = {k: C.median([r.wall_s for r in v]) for k, v in runs.items()}
        cpu = {k: C.median([r.rusage["user_s"] + r.rusage["sys_s"] for r in v]) for k, v in runs.items()}
        peak = {k: max(r.rusage["maxrss_bytes"] for r in v) / C.MiB for k, v in runs.items()}
        same = None
        others = [k for k in ("accumulator", "before") if k in runs]
        if others:
            first = json.loads(runs["ranges"][0].stdout)
            same = all(json.loads(runs[k][0].stdout) == first for k in others)
        results.append({
            "rows": rows, "wall_s": med, "cpu_s": cpu, "peak_rss_mib": peak,
            "ratio_ranges_over_score": C.ratio(med["ranges"], med["score"]),
            "ratio_accumulator_over_score": C.ratio(med.get("accumulator"), med["score"]),
            "ratio_before_over_score": C.ratio(med.get("before"), med["score"]),
            "cpu_ratio_ranges_over_score": C.ratio(cpu["ranges"], cpu["score"]),
            "same_json": same, "runs": {k: [r.wall_s for r in v] for k, v in runs.items()},
        })
    kinds = ("score", "ranges", "accumulator", "before")
    table_rows = [[f"{d['rows']:,}", C.fmt(d["wall_s"]["score"]), C.fmt(d["wall_s"]["ranges"]),
                   C.fmt(d["wall_s"].get("accumulator")), C.fmt(d["wall_s"].get("before")),
                   f"**{C.fmt(d['ratio_ranges_over_score'])}**", C.fmt(d["ratio_accumulator_over_score"]),
                   C.fmt(d["ratio_before_over_score"]), C.fmt(d["cpu_ratio_ranges_over_score"]),
                   " / ".join(f"{d['peak_rss_mib'][k]:.0f}" if k in d["peak_rss_mib"] else "—" for k in kinds),
                   {True: "yes", False: "**no**", None: "—"}[d["same_json"]]] for d in results]
    md = "\n".join([
        "# Evaluation in bounded memory: `calengine evaluate` beside `score`, and the old accumulator path"
        + (" (every evaluate with `--report`)" if args.report else ""),
        "",
        f"Command: `{C.command_line()}`; tables: {', '.join(f'{s:,}' for s in sizes)} rows × {args.cols} float32"
        f" columns in {args.files} files or more (at most 1M rows a file; `gen_table.py`), gaussian_nb + sigmoid"
        f" (refit) fitted on {model_table.name};"
        " no `--cluster`; medians of interleaved runs, launch to exit; peak RSS and CPU seconds of the process"
        + (f"; before: the calengine package in `{args.before}`." if args.before else "."),
        "",
        C.markdown_table(["rows", "score s", "evaluate (ranges) s", "evaluate (accumulator) s", "evaluate (before) s",
                          "ranges / score", "accumulator / score", "before / score", "CPU s ranges / score",
                          "peak RSS MiB score / ranges / accumulator / before", "same JSON"],
                         table_rows),
        "",
        C.machine_line(REPO_ROOT),
    ])
    C.publish(md, results, args.results_name or ("evaluate_report" if args.report else "evaluate_scale"), args.results_dir,
              write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
