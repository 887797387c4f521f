#!/usr/bin/env python
"""DuckDB running ``calengine export --format sql`` over a generated score table, beside ``calengine
score`` on the same Parquet files (issue 26, "Benchmark").

What is measured (each run its own process, launch to exit; medians over ``--repeats``, the two systems
interleaved within a repeat so other jobs on the machine fall on both):

* **calengine score** -- ``calengine --quiet score MODEL DATA --output OUT`` (embedded: tasks as threads
  of one process), writing the ``p_0``/``p_1`` columns as Parquet.
* **DuckDB SQL** -- one process that starts Python, imports DuckDB, reads the exported ``.sql`` and runs
  ``COPY (SELECT p_0, p_1 FROM (<the export>)) TO OUT (FORMAT PARQUET)`` over ``read_parquet(DATA/*.parquet)``
  with ``--threads`` threads (``preserve_insertion_order`` on, DuckDB's default, so rows keep the input's
  order).

The model: ``calengine fit --scores s --method M`` on a separate table (``--cal-rows``, default 10^6) of the same generator
(:mod:`gen_scores_table`; float32 scores, so ties), for M in ``--methods`` (isotonic: a CASE tree over
its blocks; sigmoid: ``on=logit``, closed form).  Peak RSS per process (``_common.run_measured``), CPU
seconds of each process tree.  Correctness, from the first repeat: the two outputs compared row by row
(streamed, so it fits in memory at 10^8 rows): the number of rows that differ and the largest ``|dp|``.

    python benchmarks/bench_sql_export.py --rows-list 10000000,30000000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402
import gen_scores_table as GS  # noqa: E402
from bench_partition_fit import calengine_cmd, parse_marked, parquet_files  # noqa: E402

NAME = "sql_export"
MARK = "DUCKDB_JSON:"
METHODS = ("isotonic", "sigmoid")
VERSIONS = ("calengine", "calengine-builtins", "duckdb", "numpy", "pyarrow", "dask", "psutil")


def child_duckdb(spec: dict) -> dict:
    t_start = time.time()
    import duckdb

    t_imports = time.time()
    con = duckdb.connect()
    con.execute(f"SET threads = {int(spec['threads'])}")
    glob = str(Path(spec["data"]) / "*.parquet").replace("'", "''")
    con.execute(f"CREATE VIEW input AS SELECT * FROM read_parquet('{glob}')")
    sql = Path(spec["sql"]).read_text()
    out = spec["out"].replace("'", "''")
    con.execute(f'COPY (SELECT "p_0", "p_1" FROM (\n{sql}\n)) TO \'{out}\' (FORMAT PARQUET)')
    t_done = time.time()
    return {"interpreter_s": t_start - spec["launched_at"], "imports_s": t_imports - t_start,
            "query_s": t_done - t_imports, "e2e_s": t_done - spec["launched_at"]}


def _p1_chunks(files):
    import pyarrow.parquet as pq

    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=1 << 20, columns=["p_1"]):
            yield batch.column(0).to_numpy(zero_copy_only=False)


def compare_outputs(a_files, b_files) -> dict:
    """Row-by-row comparison of two ``p_1`` columns in row order, streamed chunk against chunk."""
    import numpy as np

    rows = differ = 0
    worst = 0.0
    a_it, b_it = _p1_chunks(a_files), _p1_chunks(b_files)
    a = b = np.empty(0)
    while True:
        if a.size == 0:
            a = next(a_it, None)
        if b.size == 0:
            b = next(b_it, None)
        if a is None or b is None:
            break
        n = min(a.size, b.size)
        d = np.abs(a[:n] - b[:n])
        rows, differ = rows + n, differ + int((a[:n] != b[:n]).sum())
        worst = max(worst, float(d.max()) if n else 0.0)
        a, b = a[n:], b[n:]
    leftover = (a is not None and a.size > 0) or (b is not None and b.size > 0) or (a is None) != (b is None)
    return {"rows": rows, "rows_differ": differ, "max_abs_dp": worst, "same_length": not leftover}


def measure(cmd: list[str], args, label: str) -> dict:
    run = C.run_measured(cmd, timeout=args.timeout, interval=args.sample_interval)
    rec = {"label": label, "wall_s": run.wall_s, "returncode": run.returncode, "timed_out": run.timed_out,
           "client": run.rss["client"], "tree_peak_sum": run.rss["tree_peak_sum"],
           "cpu_s": run.rusage["user_s"] + run.rusage["sys_s"], "load_before": run.load_before}
    if run.returncode != 0:
        rec["stderr_tail"] = run.stderr[-1500:]
        print(f"  {label}: FAILED rc={run.returncode}: {run.stderr[-600:]}", file=sys.stderr)
    else:
        if MARK in run.stdout:
            rec["child"] = parse_marked(run.stdout, MARK)
        print(f"  {label}: {run.wall_s:.2f} s, peak {C.fmt((run.rss['client'] or 0) / C.MiB, 0)} MiB", file=sys.stderr)
    return rec


def prepare_models(args, work: Path) -> dict[str, Path]:
    """One model per method, fitted on a separate calibration table, and its exported SQL."""
    cal = work / "tables" / f"cal-r{args.cal_rows}-s{args.seed + 1}"
    GS.ensure_scores_table(cal, GS.ScoresSpec(args.cal_rows, args.seed + 1), 2, args.row_group_rows, quiet=True)
    import calengine
    from calengine.export.write import export_model

    out = {}
    for m in args.methods:  # in this process: preparing is not what is measured
        model = work / f"model-{m}"
        calengine.calibrate_scores(str(cal), GS.TARGET, GS.SCORE, method=m, output=model, overwrite=True, workers=1)
        export_model(model, "sql", work / f"model-{m}.sql", overwrite=True)
        out[m] = model
    return out


def run_size(rows: int, args, models: dict, work: Path) -> dict:
    spec = GS.ScoresSpec(rows, args.seed)
    files = max(2, -(-rows // args.rows_per_file))
    data = work / "tables" / f"scores-r{rows}-f{files}-s{args.seed}"
    table = GS.ensure_scores_table(data, spec, files, args.row_group_rows, quiet=True)
    print(f"{rows:,} rows: {table['files']} files, {table['bytes'] / C.MiB:,.0f} MiB"
          f" ({'reused' if table['reused'] else 'written'})", file=sys.stderr)
    runs: dict[str, list[dict]] = {}
    agreement = {}
    run_dir = work / "runs"
    for rep in range(args.repeats):
        for m, model in models.items():
            score_out, sql_out = run_dir / f"score-{m}", run_dir / f"duckdb-{m}.parquet"
            shutil.rmtree(score_out, ignore_errors=True)
            sql_out.unlink(missing_ok=True)
            label = f"calengine score ({m})"
            cmd = [*calengine_cmd(), "--quiet", "score", str(model), str(data), "--output", str(score_out)]
            runs.setdefault(label, []).append(measure(cmd, args, label))
            label = f"DuckDB SQL ({m})"
            cspec = {"data": str(data), "sql": str(model) + ".sql", "out": str(sql_out), "threads": args.threads,
                     "launched_at": time.time()}
            cmd = [sys.executable, "-P", str(Path(__file__).resolve()), "_child", "duckdb", json.dumps(cspec)]
            runs.setdefault(label, []).append(measure(cmd, args, label))
            if rep == 0 and score_out.exists() and sql_out.exists():
                agreement[m] = compare_outputs(parquet_files(str(score_out)), [sql_out])
            shutil.rmtree(score_out, ignore_errors=True)
            sql_out.unlink(missing_ok=True)
    summary = {}
    for label, recs in runs.items():
        ok = [r for r in recs if r["returncode"] == 0]
        summary[label] = {"ok": len(ok), "runs": len(recs), "wall_s": C.median([r["wall_s"] for r in ok]),
                          "peak": C.median([r["client"] for r in ok]), "cpu_s": C.median([r["cpu_s"] for r in ok]),
                          "query_s": C.median([(r.get("child") or {}).get("query_s") for r in ok])}
    return {"rows": rows, "files": table["files"], "table_bytes": table["bytes"], "summary": summary,
            "agreement": agreement, "runs": runs}


def render(d: dict) -> str:
    mib = lambda b: None if b is None else b / C.MiB  # noqa: E731
    lines = ["# DuckDB running the exported SQL against calengine score", "",
             *C.environment_markdown(d["environment"]), "",
             "Wall = launch to exit of each process (medians over the repeats, the systems interleaved); peak RSS"
             " of the process (psutil samples + VmHWM); CPU s = user + system seconds of the process tree. DuckDB"
             f" runs with {d['config']['threads']} threads and writes the two probability columns as one Parquet"
             " file; calengine score writes them as a Parquet directory. Agreement: the two outputs compared row"
             " by row.", ""]
    for res in d["results"]:
        sm = res["summary"]
        lines += [f"## {res['rows']:,} rows ({res['files']} files, {res['table_bytes'] / C.MiB:,.0f} MiB)", ""]
        rows = []
        for label, s in sm.items():
            base = sm.get(f"calengine score ({label.split('(')[1]}") or {}
            rows.append([label, f"{s['ok']}/{s['runs']}", C.fmt(s["wall_s"]), C.fmt(C.ratio(s["wall_s"], base.get("wall_s"))),
                         C.fmt(mib(s["peak"]), 0), C.fmt(C.ratio(s["peak"], base.get("peak"))), C.fmt(s["cpu_s"], 1),
                         C.fmt(C.ratio(s["cpu_s"], base.get("cpu_s"))), C.fmt(s["query_s"])])
        lines.append(C.markdown_table(["system", "ok", "wall s", "wall / score", "peak MiB", "peak / score", "CPU s",
                                       "CPU / score", "DuckDB query s"], rows, ["<", "<"] + [">"] * 7))
        if res["agreement"]:
            lines += ["", "Agreement with calengine score: " + "; ".join(
                f"{m}: {a['rows']:,} rows, {a['rows_differ']:,} differ, max abs dp {C.fmt(a['max_abs_dp'], 3)}"
                + ("" if a["same_length"] else " (LENGTHS DIFFER)") for m, a in res["agreement"].items()) + "."]
        lines.append("")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_generated_table_options(ap, name=NAME, results_dir=str(HERE / "results"), rows_list=[10_000_000, 30_000_000], methods=METHODS)
    ap.add_argument("--cal-rows", type=int, default=1_000_000, help="rows of the table the models are fitted on")
    ap.add_argument("--threads", type=int, default=2, help="DuckDB's threads (calengine score: its default)")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_child"]:
        print(MARK + json.dumps(child_duckdb(json.loads(argv[2]))), flush=True)
        return 0
    args = build_parser().parse_args(argv)
    if args.repeats < 1 or args.cal_rows < 2 or any(n < 1 for n in args.rows_list) or args.rows_per_file < 1 or args.threads < 1:
        raise SystemExit("error: --repeats, --rows-list, --rows-per-file and --threads must be at least 1, --cal-rows 2")
    env = C.environment(REPO_ROOT, VERSIONS)
    work = Path(args.work_dir)
    (work / "runs").mkdir(parents=True, exist_ok=True)
    models = prepare_models(args, work)
    results = []
    for n in args.rows_list:  # the page is rewritten after every size: a run cut short keeps its sizes
        results.append(run_size(n, args, models, work))
        data = {"benchmark": args.name, "environment": env, "config": vars(args), "results": results,
                "load_after": C.load_snapshot()}
        md = render(data)
        C.write_results(args.results_dir, args.name, data, md)
    shutil.rmtree(work / "runs", ignore_errors=True)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
