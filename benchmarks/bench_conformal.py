#!/usr/bin/env python
"""Conformal prediction sets at scale (issue 40): ``calengine conformal`` and ``calengine score --sets``
on a generated 10-class logit table, embedded and on a Dask cluster, beside MAPIE in one process.

For each ``--rows-list`` size N, on a table of N rows (``gen_logits_table.py``: float32 logits ``z_0..z_9``
of an overconfident model and a label ``y``, in files of ``--rows-per-file`` rows) and a model of those
score columns (``calengine fit --scores z_0,...,z_9 --score-kind logit --method temperature`` on 100,000
other rows of the same generator), it measures, launch to exit, medians of ``--repeats`` interleaved runs:

* **conformal**: ``calengine conformal MODEL TABLE --target y --alpha 0.1 --score S --output OUT``;
* **score**: ``calengine score MODEL TABLE --output OUT`` -- plain scoring, the named baseline of the
  issue's throughput target (``score --sets`` within 1.3x of it), up to ``--score-max-rows``;
* **score --sets**: ``calengine score CONFORMAL_MODEL TABLE --sets --output OUT``;
* the same three with ``--cluster``: a fresh ``dask scheduler`` and ``--workers`` ``dask worker``
  processes (one thread each, ``--worker-memory`` each) on 127.0.0.1 for every run (``--no-cluster``
  skips them);
* **MAPIE** (sizes up to ``--mapie-max-rows``): one process reads the same Parquet files into NumPy
  (pyarrow), and runs MAPIE 1.6's ``SplitConformalClassifier`` (prefit, its classifier the softmax of the
  logits, the same score and alpha): ``conformalize`` on the N rows and ``predict_set`` of the same N
  rows; the read, conformalize and predict seconds are reported apart, the wall includes them all.

Per process: wall, CPU seconds and peak RSS (the client; on a cluster also the scheduler and each
worker).  Thresholds compared: in a separate, untimed process, MAPIE conformalizes on the probabilities
of the calengine model itself (read back from ``score``'s output) and its quantile must equal the
threshold in the conformal model's layer, bit for bit (``same threshold``).

    python benchmarks/bench_conformal.py --rows-list 1000000,10000000 --repeats 3
    python benchmarks/bench_conformal.py --rows-list 1000000,10000000,100000000 --repeats 2 --max-repeat-rows 10000000

Targets (issue 40): at 10M, conformal at most 0.5x MAPIE's wall (its read included: the MAPIE process's
wall without its predict_set), score --sets within 1.3x of score; the client under 1 GiB; every process's
peak flat (within 20 %) from 10M to 100M rows.  Writes ``results/conformal.{md,json}`` (the page in the
shape of every result page: command, commit, machine, baselines of the same run) after every size.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402
import gen_logits_table as L  # noqa: E402

REPO_ROOT = HERE.parent
K = 10

MAPIE = r"""
import json, sys, time
import numpy as np
import pyarrow.dataset as ds
from sklearn.base import BaseEstimator, ClassifierMixin
from mapie.classification import SplitConformalClassifier
t0 = time.perf_counter()  # the wall is the process's, imports included; read_s the read alone

table, alpha, score, k = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
t = ds.dataset(table, format="parquet").to_table(columns=[f"z_{j}" for j in range(k)] + ["y"])
Z = np.empty((t.num_rows, k))
for j in range(k):
    Z[:, j] = t.column(f"z_{j}").to_numpy()
y = t.column("y").to_numpy().astype(np.int64)
del t
t_read = time.perf_counter() - t0


class Softmax(ClassifierMixin, BaseEstimator):
    def fit(self, X, y):
        return self

    def predict_proba(self, X):
        e = np.exp(X - X.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def predict(self, X):
        return np.argmax(X, axis=1)


clf = Softmax()
clf.classes_ = np.arange(k)
clf.n_features_in_ = k
clf.fitted_ = True
m = SplitConformalClassifier(clf, confidence_level=1 - alpha, conformity_score=score, prefit=True, random_state=0)
t1 = time.perf_counter()
m.conformalize(Z, y)
t2 = time.perf_counter()
_, sets = m.predict_set(Z)
t3 = time.perf_counter()
print(json.dumps({"read_s": t_read, "conformalize_s": t2 - t1, "predict_set_s": t3 - t2,
                  "quantile": float(np.ravel(m._mapie_classifier.quantiles_)[0]),
                  "mean_set_size": float(sets[:, :, 0].sum(axis=1).mean())}))
"""

#: MAPIE on the calengine model's own probabilities (read back from ``score``'s output): its quantile
#: against the threshold of the conformal model's layer (untimed)
SAME = r"""
import json, sys, warnings
import numpy as np
import pyarrow.dataset as ds
from sklearn.base import BaseEstimator, ClassifierMixin
from mapie.classification import SplitConformalClassifier
from calengine.model.artifact import load_model

scored, table, conformal, alpha, score, k = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5], int(sys.argv[6])
P = np.empty((0, k))
t = ds.dataset(scored, format="parquet").to_table(columns=[f"p_{j}" for j in range(k)])
P = np.column_stack([t.column(f"p_{j}").to_numpy() for j in range(k)])
y = ds.dataset(table, format="parquet").to_table(columns=["y"]).column("y").to_numpy().astype(np.int64)
del t


class Lookup(ClassifierMixin, BaseEstimator):
    def fit(self, X, y):
        return self

    def predict_proba(self, X):
        return P[np.asarray(X)[:, 0].astype(np.int64)]

    def predict(self, X):
        return np.argmax(self.predict_proba(X), axis=1)


clf = Lookup()
clf.classes_ = np.arange(k)
clf.n_features_in_ = 1
clf.fitted_ = True
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    m = SplitConformalClassifier(clf, confidence_level=1 - alpha, conformity_score=score, prefit=True)
    X = np.arange(len(y))[:, None]
    m.conformalize(X, y)
    m.predict_set(X[:2])
q = float(np.ravel(m._mapie_classifier.quantiles_)[0])
t = float(load_model(conformal).conformal.thresholds[0, 0])
print(json.dumps({"mapie": q, "calengine": t, "same": q == t}))
"""


def _calengine() -> list[str]:
    return [sys.executable, "-P", "-m", "calengine", "--quiet"]


def _cluster_run(cmd: list[str], work: Path, workers: int, memory: str) -> dict:
    """``cmd`` with ``--cluster`` on a fresh scheduler and ``workers`` workers: wall, per-process peaks."""
    from calengine.testing.cluster import start_dask_scheduler, start_dask_worker, stop_processes, wait_for_workers

    local = work / "cluster-local"
    shutil.rmtree(local, ignore_errors=True)
    local.mkdir(parents=True)
    address, scheduler = start_dask_scheduler(work)
    procs, samplers = [scheduler], []
    try:
        procs.append(start_dask_worker(address, workers, work, memory_limit=memory,
                                       args=["--local-directory", str(local)]))
        wait_for_workers(address, workers)
        role = lambda info, root: "nanny" if info["pid"] == root else C.default_role(info, -1)  # noqa: E731
        samplers = [C.TreeSampler(scheduler.pid).start(), C.TreeSampler(procs[1].pid, role_of=role).start()]
        r = C.run_measured([*cmd, "--cluster", address], timeout=14400)
        for s in samplers:
            s.sample()
    finally:
        for s in samplers:
            s.stop()
        stop_processes(procs)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[4:6])} --cluster failed: {r.stderr[-2000:]}")
    sched, nanny = (s.report() for s in samplers)
    return {"wall_s": r.wall_s, "cpu_s": r.rusage["user_s"] + r.rusage["sys_s"], "client": r.rss["client"],
            "scheduler": sched["client"], "workers": nanny["workers"], "load_before": r.load_before}


def _embedded(cmd: list[str]) -> dict:
    r = C.run_measured(cmd, timeout=14400)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr[-2000:]}")
    return {"wall_s": r.wall_s, "cpu_s": r.rusage["user_s"] + r.rusage["sys_s"], "client": r.rss["client"],
            "load_before": r.load_before}


def _median_run(runs: list[dict]) -> dict:
    out = {"wall_s": C.median([r["wall_s"] for r in runs]), "cpu_s": C.median([r["cpu_s"] for r in runs]),
           "client_mib": max(r["client"] for r in runs) / C.MiB, "runs": [r["wall_s"] for r in runs]}
    if "scheduler" in runs[0]:
        out["scheduler_mib"] = max(r["scheduler"] for r in runs) / C.MiB
        out["workers_mib"] = [max(w) / C.MiB for w in zip(*(r["workers"] for r in runs))]
    return out


def measure(args, rows: int, model: Path, table: Path, work: Path) -> dict:
    out_dir = work / f"out-{rows}"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    cal = out_dir / "conformal"
    conformal = [*_calengine(), "conformal", str(model), str(table), "--target", "y", "--alpha", str(args.alpha),
                 "--score", args.score, "--output", str(cal), "--overwrite"]
    score = [*_calengine(), "score", str(model), str(table), "--output", str(out_dir / "scored")]
    sets = [*_calengine(), "score", str(cal), str(table), "--sets", "--output", str(out_dir / "sets")]
    runs: dict[str, list] = {}
    commands = [("conformal", conformal), ("score", score), ("sets", sets)]
    if rows > args.score_max_rows:  # the plain score is the baseline of score --sets' ratio, taken up to there
        commands = [c for c in commands if c[0] != "score"]
    repeats = args.repeats if rows <= args.max_repeat_rows else 1
    for _ in range(repeats):  # interleaved: the machine's load drifts alike over all of them
        for name, cmd in commands:
            shutil.rmtree(out_dir / "scored", ignore_errors=True)
            shutil.rmtree(out_dir / "sets", ignore_errors=True)
            runs.setdefault(name, []).append(_embedded(cmd))
            if args.cluster:
                shutil.rmtree(out_dir / "scored", ignore_errors=True)
                shutil.rmtree(out_dir / "sets", ignore_errors=True)
                runs.setdefault(f"{name} --cluster", []).append(_cluster_run(cmd, work, args.workers, args.worker_memory))
    result = {"rows": rows, **{k: _median_run(v) for k, v in runs.items()}}
    if rows <= args.mapie_max_rows:
        mapie = []
        for _ in range(repeats):
            r = C.run_measured([sys.executable, "-P", "-c", MAPIE, str(table), str(args.alpha), args.score, str(K)],
                               timeout=14400)
            if r.returncode != 0:
                raise SystemExit(f"MAPIE failed: {r.stderr[-2000:]}")
            mapie.append({**json.loads(r.stdout.strip().splitlines()[-1]), "wall_s": r.wall_s,
                          "cpu_s": r.rusage["user_s"] + r.rusage["sys_s"], "client": r.rss["client"]})
        result["mapie"] = {**_median_run(mapie), **{k: C.median([m[k] for m in mapie])
                                                    for k in ("read_s", "conformalize_s", "predict_set_s")}}
        shutil.rmtree(out_dir / "scored", ignore_errors=True)
        r = C.run_measured(score, timeout=14400)  # the model's probabilities, for the threshold check
        same = C.run_measured([sys.executable, "-P", "-c", SAME, str(out_dir / "scored"), str(table), str(cal),
                               str(args.alpha), args.score, str(K)], timeout=14400)
        if same.returncode != 0:
            raise SystemExit(f"the threshold check failed: {same.stderr[-2000:]}")
        result["threshold"] = json.loads(same.stdout.strip().splitlines()[-1])
    from calengine.model.artifact import load_model

    result["calengine_threshold"] = float(load_model(cal).conformal.thresholds[0, 0])
    shutil.rmtree(out_dir, ignore_errors=True)
    return result


def _ratio(a, b) -> str:
    return C.fmt(C.ratio(a, b))


def markdown(args, results: list, env: dict) -> str:
    """The page in the one-page-per-benchmark shape (:func:`_common.as_result_page` adds the command,
    commit and machine lines): the headline table, the ratios against the baselines of the same run,
    the thresholds compared, the peaks' growth with the size."""
    heads = ["rows", "what", "runs", "wall s (median)", "CPU s (median)", "client MiB", "scheduler MiB", "workers MiB"]
    rows = []
    for d in results:
        for key in ("conformal", "conformal --cluster", "score", "score --cluster", "sets", "sets --cluster", "mapie"):
            if key not in d:
                continue
            m = d[key]
            label = {"sets": "score --sets", "sets --cluster": "score --sets --cluster",
                     "mapie": "MAPIE (read + conformalize + predict_set)"}.get(key, key)
            rows.append([f"{d['rows']:,}", label, str(len(m["runs"])), C.fmt(m["wall_s"]), C.fmt(m["cpu_s"]),
                         f"{m['client_mib']:.0f}", f"{m['scheduler_mib']:.0f}" if "scheduler_mib" in m else "-",
                         " / ".join(f"{w:.0f}" for w in m.get("workers_mib", [])) or "-"])
    ratios = []
    for d in results:
        line = []
        if "score" in d:
            line.append(f"score --sets / score {_ratio(d['sets']['wall_s'], d['score']['wall_s'])} (CPU"
                        f" {_ratio(d['sets']['cpu_s'], d['score']['cpu_s'])})")
            if "sets --cluster" in d and "score --cluster" in d:
                line.append(f"with --cluster {_ratio(d['sets --cluster']['wall_s'], d['score --cluster']['wall_s'])}")
        if "mapie" in d:
            mp = d["mapie"]
            # MAPIE's process without its predict_set: imports, the read and conformalize, as calengine
            # conformal's process is imports, the read and the thresholds (and the other way for score --sets)
            conf_wall = mp["wall_s"] - mp["predict_set_s"]
            pred_wall = mp["wall_s"] - mp["conformalize_s"]
            line.append(f"conformal / MAPIE's read + conformalize {_ratio(d['conformal']['wall_s'], conf_wall)}"
                        f" ({C.fmt(d['conformal']['wall_s'])} s against {C.fmt(conf_wall)} s)")
            line.append(f"score --sets / MAPIE's read + predict_set {_ratio(d['sets']['wall_s'], pred_wall)}")
            line.append(f"MAPIE's read {C.fmt(mp['read_s'])} s, conformalize {C.fmt(mp['conformalize_s'])} s,"
                        f" predict_set {C.fmt(mp['predict_set_s'])} s")
            th = d["threshold"]
            line.append("MAPIE's quantile on the calengine model's probabilities is the layer's threshold, bit for"
                        f" bit: {'yes' if th['same'] else '**no**'} ({th['calengine']!r})")
        if line:
            ratios.append(f"- {d['rows']:,} rows: " + "; ".join(line))
    growth = []
    for a, b in zip(results, results[1:]):
        for key in [k for k in ("conformal", "sets", "conformal --cluster", "sets --cluster") if k in a and k in b]:
            parts = [f"client {100 * (b[key]['client_mib'] / a[key]['client_mib'] - 1):+.0f} %"]
            if "scheduler_mib" in a[key]:
                parts.append(f"scheduler {100 * (b[key]['scheduler_mib'] / a[key]['scheduler_mib'] - 1):+.0f} %")
                parts.append("workers " + " / ".join(f"{100 * (y / x - 1):+.0f} %" for x, y in
                                                     zip(a[key]["workers_mib"], b[key]["workers_mib"])))
            label = {"sets": "score --sets", "sets --cluster": "score --sets --cluster"}.get(key, key)
            growth.append(f"- {label}, {a['rows']:,} → {b['rows']:,} rows: " + ", ".join(parts))
    return "\n".join([
        "# Conformal prediction sets at scale: `calengine conformal` and `score --sets` beside MAPIE",
        "",
        "The data: generated tables of a 10-class logit model (`gen_logits_table.py`: float32 logits, files of"
        f" {args.rows_per_file:,} rows); the model: `calengine fit --scores z_0,...,z_9 --score-kind logit --method"
        f" temperature` on 100,000 other rows; `conformal --score {args.score} --alpha {args.alpha}` on every row of"
        " the table, then `score --sets` of the same rows.  Embedded: one process (a thread per core).  `--cluster`:"
        f" a fresh `dask scheduler` and {args.workers} `dask worker` processes (1 thread, `--memory-limit"
        f" {args.worker_memory}`) on 127.0.0.1 per run.  Wall and CPU seconds of the launched process, launch to"
        " exit (imports included); medians of the runs counted in the table, interleaved; peak RSS per process,"
        " the largest over the runs (sampled, and VmHWM).",
        "",
        "Baselines, in the same run: plain `calengine score` of the model without the layer (the throughput"
        f" `score --sets` is held to; up to {args.score_max_rows:,} rows), and MAPIE"
        f" {env['packages'].get('mapie', '')} in one process (up to {args.mapie_max_rows:,} rows, what this machine"
        " holds): it reads the same Parquet files with pyarrow into float64, then runs `SplitConformalClassifier`"
        " (prefit, its classifier the softmax of the logits, the same score and alpha) `conformalize` and"
        " `predict_set` on the same rows; its wall includes the read, and each step's seconds are reported apart.",
        "",
        C.markdown_table(heads, rows, ["r", "l", "r", "r", "r", "r", "r", "r"]),
        "",
        "<!-- --8<-- [start:ratios] -->",  # the section docs/guide/conformal.md includes
        *(["Ratios (wall, medians of this run):", "", *ratios, ""] if ratios else []),
        *(["Peak growth with the size:", "", *growth, ""] if growth else []),
        "<!-- --8<-- [end:ratios] -->",
        "",
        f"The load when the run started was {env['load']['load1']:.1f} on {env['machine'].get('cpu_affinity')}"
        " cores (other jobs shared the machine): compare the ratios of one run, not its seconds with another"
        " run's.",
        "",
        *C.environment_markdown(env),
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ints = lambda s: [int(float(x)) for x in s.split(",") if x.strip()]  # noqa: E731
    ap.add_argument("--rows-list", type=ints, default=[1_000_000, 10_000_000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--score", default="lac", choices=("lac", "aps"))
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--rows-per-file", type=int, default=1_000_000)
    ap.add_argument("--mapie-max-rows", type=int, default=10_000_000)
    ap.add_argument("--score-max-rows", type=int, default=10_000_000,
                    help="plain score (the baseline of score --sets) only up to this many rows")
    ap.add_argument("--no-cluster", dest="cluster", action="store_false")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--worker-memory", default="3GiB")
    ap.add_argument("--work-dir", default="/tmp/calengine-bench/conformal")
    ap.add_argument("--results-dir", default=str(HERE / "results"))
    ap.add_argument("--name", default="conformal")
    ap.add_argument("--max-repeat-rows", type=int, default=10_000_000,
                    help="sizes above this many rows run once (a 100M-row run takes minutes per command)")
    ap.add_argument("--no-write", dest="write", action="store_false")
    args = ap.parse_args(argv)
    env = C.environment(REPO_ROOT, ["mapie", "pyarrow", "dask", "distributed"])
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    fit_table = work / "fit-100000"
    L.ensure_logits_table(fit_table, L.LogitsSpec(100_000, K, seed=1), files=1, quiet=True)
    model = work / "model"
    if not (model / "manifest.json").exists():
        r = C.run_measured([*_calengine(), "fit", str(fit_table), "--target", "y", "--scores",
                            ",".join(L.columns(L.LogitsSpec(1, K))), "--score-kind", "logit", "--method", "temperature",
                            "--output", str(model)])
        if r.returncode != 0:
            raise SystemExit(f"fit failed: {r.stderr[-2000:]}")
    results = []
    for rows in args.rows_list:
        table = work / f"logits-{rows}"
        L.ensure_logits_table(table, L.LogitsSpec(rows, K, seed=0), files=max(1, -(-rows // args.rows_per_file)),
                              quiet=True)
        results.append(measure(args, rows, model, table, work))
        page = markdown(args, results, env)
        print(page)
        if args.write:  # after every size: a long run's first sizes survive its end
            for path in C.write_results(args.results_dir, args.name, {"environment": env, "results": results}, page):
                print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
