"""Smoke tests for the partitioned-table benchmark scripts (benchmarks/gen_table.py and
benchmarks/bench_partition_fit.py) on tiny tables: they run end to end and stay deterministic."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _load(name: str):
    """Import a benchmark script by path (``benchmarks`` is not a package)."""
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def gen():
    return _load("gen_table")


def _read(d: Path) -> pa.Table:
    files = sorted(p for p in d.iterdir() if p.suffix == ".parquet")
    return pa.concat_tables(pq.read_table(f) for f in files)


def test_gen_table_rows_schema_and_determinism(tmp_path, gen):
    spec = gen.TableSpec(rows=20_000, cols=6, seed=3)
    a, b, c, other = tmp_path / "a", tmp_path / "b", tmp_path / "c", tmp_path / "other"
    summary = gen.write_table(a, spec, files=3, row_group_rows=3_000, quiet=True)
    gen.write_table(b, spec, files=3, row_group_rows=3_000, quiet=True)
    gen.write_table(c, spec, files=2, row_group_rows=7_000, quiet=True)
    gen.write_table(other, gen.TableSpec(rows=20_000, cols=6, seed=4), files=3, row_group_rows=3_000, quiet=True)

    files = sorted(p.name for p in a.iterdir())
    assert files == ["_table.json", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    t = _read(a)
    assert t.num_rows == 20_000 == summary["spec"]["rows"]
    assert t.schema.names == [f"x{j}" for j in range(6)] + ["y"]
    assert all(t.schema.field(f"x{j}").type == pa.float32() for j in range(6))
    assert t.schema.field("y").type in (pa.int8(), pa.int64())
    y = t.column("y").to_numpy()
    assert set(np.unique(y)) == {0, 1}
    assert 0.2 < y.mean() < 0.4  # roughly 30/70
    md = pq.ParquetFile(a / "part-00000.parquet").metadata
    assert md.num_row_groups >= 2 and all(md.row_group(i).num_rows <= 3_000 for i in range(md.num_row_groups))

    # same seed -> identical files; other files / row groups -> the same rows; other seed -> other rows
    for name in files[1:]:
        assert pq.read_table(a / name).equals(pq.read_table(b / name))
    assert _read(c).equals(t)
    assert not _read(other).equals(t)

    # any global row range is the matching slice; the test stream differs from the train stream
    X, yy = gen.generate_rows(spec, 12_345, 19_000)
    assert np.array_equal(X[:, 2], t.column("x2").to_numpy()[12_345:19_000])
    assert np.array_equal(yy, y[12_345:19_000])
    Xt, _ = gen.generate_rows(spec, 0, 1_000, stream=gen.TEST_STREAM)
    assert not np.array_equal(Xt, gen.generate_rows(spec, 0, 1_000)[0])

    # a complete table is recognised for reuse
    assert gen.ensure_table(a, spec, files=3, row_group_rows=3_000, quiet=True)["reused"] is True
    assert gen.existing_table(a, gen.TableSpec(rows=20_001, cols=6, seed=3), 3, gen.TRAIN_STREAM) is None
    assert gen.existing_table(a, spec, 3, gen.TRAIN_STREAM, row_group_rows=4_000) is None  # other layout


def test_gen_table_cli(tmp_path):
    out = subprocess.run(
        [sys.executable, str(BENCH / "gen_table.py"), str(tmp_path / "t"), "--rows", "5000", "--cols", "3",
         "--files", "2", "--row-group-rows", "1000", "--test-rows", "1000", "--test-out", str(tmp_path / "test")],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "rows/s" in out.stdout
    assert _read(tmp_path / "t").num_rows == 5000
    test = _read(tmp_path / "test")
    assert test.num_rows == 1000 and test.schema.names == ["x0", "x1", "x2", "y"]


@pytest.mark.cluster
def test_bench_partition_fit_tiny(tmp_path):
    results = tmp_path / "results"
    work = tmp_path / "work"
    cmd = [
        sys.executable, str(BENCH / "bench_partition_fit.py"),
        "--rows-list", "20000", "--cols", "5", "--files", "3", "--row-group-rows", "5000", "--test-rows", "4000",
        "--repeats", "1", "--methods", "sigmoid", "--skip-overhead",
        "--work-dir", str(work), "--results-dir", str(results), "--sample-interval", "0.1",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads((results / "partition_fit.json").read_text())
    assert (results / "partition_fit.md").read_text().startswith("# calengine fit")
    for key in ("benchmark", "command", "commit", "versions", "machine", "config", "results", "overhead",
                "imports", "checks", "runs", "load_range", "worker_memory_supported", "folds_sources"):
        assert key in data, key
    (r,) = data["results"]
    assert r["rows"] == 20000 and r["method"] == "sigmoid" and r["fit_ok"] == 1
    assert r["fit_wall_s"] > 0 and r["fit_wall_per_10M_s"] > r["fit_wall_s"]
    assert r["peak_rss"]["client"] > 0 and len(r["peak_rss"]["workers"]) == 2
    assert r["sklearn_e2e_s"] > 0 and r["ratio_vs_sklearn_e2e"] > 0
    assert r["max_abs_dp"] is not None and r["max_abs_dp"] < 1e-3
    assert r["embedded_wall_s"] > 0 and r["embedded_ratio_vs_sklearn_e2e"] > 0 and r["embedded_peak_rss"] > 0
    assert "## Embedded scheduler" in (results / "partition_fit.md").read_text()
    assert all(run["load_before"]["load1"] >= 0 for run in data["runs"])
    assert (work / "tables" / "train-r20000-c5-f3-s0" / "_table.json").exists()
    # nothing left behind but the reusable tables
    assert not any((work / "runs").iterdir())


def test_engine_overhead_driver(tmp_path):
    """The in-process phase timer (the overhead measurement), on the embedded scheduler to stay quick."""
    gen = _load("gen_table")
    bench = _load("bench_partition_fit")
    data = tmp_path / "t"
    gen.write_table(data, gen.TableSpec(rows=5_000, cols=4, seed=0), files=2, row_group_rows=1_000, quiet=True)
    spec = {"argv": ["--quiet", "fit", str(data), "--target", "y", "--method", "sigmoid", "--workers", "1",
                     "--output", str(tmp_path / "model")], "launched_at": 0.0}
    out = subprocess.run([sys.executable, str(BENCH / "bench_partition_fit.py"), "_child", "phases", json.dumps(spec)],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    phases = bench.parse_marked(out.stdout, bench.PHASES_MARK)
    assert phases["returncode"] == 0 and phases["main_s"] > 0
    assert (tmp_path / "model" / "manifest.json").exists()
    imp = bench.importtime("calengine.cli")
    assert imp["n_modules"] > 0 and imp["cumulative_s"] > 0


def test_bench_pav_tiny(tmp_path):
    """bench_pav.py runs end to end on small inputs, finds the old and new pav bit-identical, and
    writes its tables.  It loads the old pav from git history, so it needs that commit."""
    bench = _load("bench_pav")
    try:
        bench.load_old_pav_module(bench.OLD_REV)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"git history with {bench.OLD_REV} not available")
    assert bench.main(["--n", "3000", "--repeats", "1", "--no-sklearn", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "pav.json").read_text())
    assert len(data["results"]) == 6 and all(r["identical_blocks"] for r in data["results"])
    assert "new / argsort" in (tmp_path / "pav.md").read_text()


def test_bench_scoring_tiny(tmp_path):
    """bench_scoring.py fits a model, scores two sizes and a start table with the engine and the plain
    loop, and both write every row (the figures are the script's business; here only that it runs and compares like with like)."""
    bench = _load("bench_scoring")
    assert bench.main(["--rows-list", "20000,30000", "--models", "single", "--files", "2", "--repeats", "1",
                       "--start-rows", "500",
                       "--work-dir", str(tmp_path / "w"), "--results-dir", str(tmp_path / "r")]) == 0
    data = json.loads((tmp_path / "r" / "scoring.json").read_text())
    assert [d["rows"] for d in data["results"]] == [20000, 30000]
    assert all(d["engine_s"] > 0 and d["loop_s"] > 0 and d["start_engine_s"] > 0 for d in data["results"])
    assert {d["model_fitted_on_rows"] for d in data["results"]} == {20000}
    import pyarrow.parquet as pq

    for kind in ("engine", "loop"):  # the last size scored
        assert pq.read_table(tmp_path / "w" / f"scored-{kind}").num_rows == 30000


def test_bench_model_size_tiny(tmp_path):
    """bench_model_size.py fits a small text model, re-saves it in the old skops format, and finds the
    two directories predict the same while the array-state one is far smaller."""
    bench = _load("bench_model_size")
    sample = str(ROOT / "data" / "newsgroups_sample.parquet")
    assert bench.main(["--cases", "20ng", "--ng-train", sample, "--ng-test", sample, "--repeats", "1",
                       "--results-dir", str(tmp_path / "r")]) == 0
    (row,) = json.loads((tmp_path / "r" / "model_size.json").read_text())["rows"]
    assert row["same_predictions"] is True
    assert row["arrays"]["bytes"] * 20 < row["skops"]["bytes"]


def test_bench_decisions_tiny(tmp_path, capsys):
    """bench_decisions.py on the shipped COIL 2000 copy with a 1,500-row training subset: every method
    gets a profit under both cost structures, and the printed table says which structure it used."""
    bench = _load("bench_decisions")
    out = tmp_path / "decisions.json"
    assert bench.main(["--max-train-rows", "1500", "--cv", "3", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [r["method"] for r in data["rows"]] == ["raw NB", "sigmoid", "isotonic (PAV)", "binning"]
    assert data["n_train"] == 1500 and data["n_test"] == 4000
    for r in data["rows"]:
        for name in ("constant", "per customer"):
            assert 0 <= r[name]["mailed"] <= 4000
            assert r[name]["profit"] <= r[name]["oracle"]
    assert data["rows"][0]["constant"]["bayes_threshold"] == 0.1
    assert "10*MKOOPKLA - 5" in capsys.readouterr().out
# ---------------------------------------------------------------------------------------------- _common


def _common_public_helpers() -> set[str]:
    """The functions and classes ``benchmarks/_common.py`` defines at module level for the scripts."""
    import ast

    tree = ast.parse((BENCH / "_common.py").read_text())
    return {node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_")}


def test_every_benchmark_script_imports_common_and_keeps_no_copy_of_its_helpers():
    """Issue 12 target 7: the scripts share one set of helpers.  Fails when a script stops importing
    ``_common`` or defines (at module level) a function named like one of its public helpers again."""
    import ast

    public = _common_public_helpers()
    assert {"median", "fmt", "environment", "jsonable", "write_results", "markdown_table"} <= public
    scripts = sorted(BENCH.glob("bench_*.py"))
    assert len(scripts) >= 14
    problems = []
    for path in scripts:
        tree = ast.parse(path.read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        if "_common" not in imported:
            problems.append(f"{path.name} does not import _common")
        copies = sorted(node.name for node in tree.body
                        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in public)
        if copies:
            problems.append(f"{path.name} defines its own {', '.join(copies)}")
    assert problems == []


def test_common_json_round_trip_keeps_nan_and_infinity():
    """NaN is stored as null and infinity as "inf" (strict JSON has neither); both come back."""
    import math

    C = _load("_common")
    data = {1: np.float32(0.5), "a": [math.inf, -math.inf, np.int64(3)], "b": np.array([1.5, np.nan]),
            "p": Path("x/y")}
    text = C.dumps(data, indent=None)
    assert text == '{"1": 0.5, "a": ["inf", "-inf", 3], "b": [1.5, null], "p": "x/y"}'
    back = C.from_jsonable(json.loads(text), null=math.nan)
    assert back["a"] == [math.inf, -math.inf, 3] and back["b"][0] == 1.5 and math.isnan(back["b"][1])
    assert C.fmt(math.nan) == "n/a" and C.fmt(None, missing="–") == "–" and C.fmt(math.inf, 3, fixed=True) == "inf"
    assert C.fmt(0.0004, 3) == "4.00e-04" and C.fmt(0.0004, 3, fixed=True) == "0.000" and C.fmt(np.int64(7), 2, fixed=True) == "7.00"
    table = C.markdown_table(["a", "b"], [["x", 1.25]], align="<>")
    assert table == "| a | b |\n|---|---:|\n| x | 1.25 |"


def test_bench_hot_paths_tiny(capsys):
    """bench_hot_paths.py at 2,000 rows and one repeat prints one positive median per hot path."""
    bench = _load("bench_hot_paths")
    bench.main(["--repeats", "1", "--n", "2000"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split() == ["workload", "median", "s"]
    names = [line.rsplit(None, 1)[0].strip() for line in lines[1:]]
    assert names == ["pav, 2,000 scores", "evaluate_predictions, 2,000 binary rows",
                     "least_squares combiner, 10,000 x all_pairs(10)"]
    assert all(float(line.rsplit(None, 1)[1]) >= 0 for line in lines[1:])


def test_bench_evaluate_scale_tiny(tmp_path):
    """bench_evaluate_scale.py times score, evaluate cut into ranges, the accumulator baseline and an
    earlier build (--before: here the installed package itself) on one generated table, and the evaluate
    paths print the same JSON; with --cluster, the per-process peaks of evaluate --cluster."""
    import calengine

    bench = _load("bench_evaluate_scale")
    before = str(Path(calengine.__file__).resolve().parent.parent)
    assert bench.main(["--rows-list", "20000", "--files", "2", "--repeats", "1", "--before", before,
                       "--work-dir", str(tmp_path / "w"), "--results-dir", str(tmp_path / "r")]) == 0
    data = json.loads((tmp_path / "r" / "evaluate_scale.json").read_text())
    (d,) = data["results"]
    assert d["rows"] == 20000 and set(d["wall_s"]) == set(d["cpu_s"]) == {"score", "ranges", "accumulator", "before"}
    assert d["same_json"] is True and d["cpu_s"]["ranges"] > 0
    # --cluster (same work directory: the model and table are reused) runs evaluate --cluster on a scheduler
    # and a worker it starts and stops, reports a peak for each of them and the client, and finds the JSON
    # equal to the embedded evaluation's
    assert bench.main(["--cluster", "--rows-list", "20000", "--files", "2", "--repeats", "1", "--workers", "1",
                       "--worker-memory", "1GiB", "--work-dir", str(tmp_path / "w"),
                       "--results-dir", str(tmp_path / "r")]) == 0
    (c,) = json.loads((tmp_path / "r" / "evaluate_cluster.json").read_text())["results"]
    peaks = c["peak_mib"]
    assert c["rows"] == 20000 and c["same_json_as_embedded"] is True and len(peaks["workers"]) == 1
    assert min(peaks["client"], peaks["scheduler"], peaks["workers"][0]) > 50
    # and the CPU seconds of the workers the run started (not of this process)
    assert c["cpu_s"]["workers_user"] > 0 and c["cpu_s"]["scheduler"] > 0



@pytest.mark.slow
def test_bench_evaluate_scale_reference_and_commands_tiny(tmp_path):
    """bench_evaluate_scale.py --reference: scikit-learn, scipy, relplot, MAPIE and uncertainty-calibration
    compute the metrics of evaluate --json in one process from the table score wrote, and agree with it
    within the tolerances it states (a value off by 1e-6 would not); --commands: score, score
    --cost-matrix, decide and evaluate alone, with --cost-matrix and with --bootstrap each report a peak,
    and the cost matrix and the band only add their own keys to evaluate's JSON."""
    for name in ("relplot", "mapie", "calibration"):  # the reference packages (the test extra)
        pytest.importorskip(name)
    bench = _load("bench_evaluate_scale")
    common = ["--rows-list", "20000", "--files", "2", "--repeats", "1", "--work-dir", str(tmp_path / "w"),
              "--results-dir", str(tmp_path / "r")]
    assert bench.main(["--reference", *common]) == 0
    (d,) = json.loads((tmp_path / "r" / "evaluate_reference.json").read_text())["results"]
    assert set(d["wall_s"]) == {"score", "evaluate", "reference"} and min(d["peak_rss_mib"].values()) > 50
    assert set(d["agreement"]) == set(bench.REFERENCE_TOLERANCE)
    assert d["all_agree"] is True, {k: a for k, a in d["agreement"].items() if not a["ok"]}
    # MCGrad (ecce_pvalue's reference) is installed apart (--no-deps), so it may be absent here
    assert set(d["not_computed"]) <= {"ecce_pvalue"}
    assert (d["agreement"]["ecce_pvalue"]["ok"] is None) == (importlib.util.find_spec("mcgrad") is None)
    reference = {"values": {k: a["reference"] for k, a in d["agreement"].items() if a["ok"] is not None}}
    evaluated = {k: a["calengine"] for k, a in d["agreement"].items()}
    assert all(a["ok"] for a in bench.compare_reference(reference, evaluated).values()
               if a["reference"] is not None)
    assert not any(a["ok"] is None for a in bench.compare_reference(reference, evaluated).values())
    evaluated["auc"] *= 1 + 1e-6
    assert not bench.compare_reference(reference, evaluated)["auc"]["ok"]

    assert bench.main(["--commands", "--bootstrap", "20", *common]) == 0
    (c,) = json.loads((tmp_path / "r" / "evaluate_commands.json").read_text())["results"]
    assert set(c["peak_rss_mib"]) == {"score", "score --cost-matrix", "decide", "evaluate", "evaluate --cost-matrix",
                                      "evaluate --bootstrap 20"}
    assert min(c["peak_rss_mib"].values()) > 50
    assert c["cost_matrix_adds_only_decisions"] is True and c["bootstrap_adds_only_the_band"] is True

def test_bench_evaluate_peers_tiny(tmp_path):
    """bench_evaluate_scale.py --peers (issue 43 §4): the in-memory peers, evaluate --metrics of the same six
    keys and the full evaluate, in one run on one generated score-column table: the values agree with the
    peers' within the reference tolerances, every selected key is the full run's, and the page gives the
    ratios; the peers' vectorised equal-mass ECE is uncertainty-calibration's to the last bits."""
    pytest.importorskip("relplot")
    kumar = pytest.importorskip("calibration")
    bench = _load("bench_evaluate_scale")
    assert bench.main(["--peers", "--rows-list", "20000", "--files", "2", "--repeats", "1",
                       "--work-dir", str(tmp_path / "w"), "--results-dir", str(tmp_path / "r")]) == 0
    (d,) = json.loads((tmp_path / "r" / "evaluate_peers.json").read_text())["results"]
    assert set(d["wall_s"]) == {"peers", "evaluate --metrics", "evaluate"} and min(d["peak_rss_mib"].values()) > 50
    assert set(d["agreement"]) == set(bench.PEER_METRICS) and d["all_agree"] is True, d["agreement"]
    assert d["subset_equals_full"] is True and set(d["subset_keys"]) == {*bench.PEER_METRICS, "n", "n_classes", "model"}
    assert d["ratio_subset_over_peers"] > 0 and d["cpu_ratio_full_over_peers"] > 0
    assert "evaluate --metrics / peers" in (tmp_path / "r" / "evaluate_peers.md").read_text()
    rng = np.random.default_rng(3)
    for p in (rng.uniform(size=997), np.round(rng.uniform(size=5000), 2)):
        y = (rng.random(p.size) < p).astype(np.int64)
        P2 = np.column_stack([1 - p, p])
        conf, correct = P2.max(axis=1), (P2.argmax(axis=1) == y).astype(np.float64)
        want = kumar.lower_bound_scaling_ce(P2, y, p=1, debias=False, num_bins=15, mode="top-label")
        assert bench.equal_mass_ece(conf, correct) == pytest.approx(want, rel=1e-12)


def test_bench_score_columns_tiny(tmp_path):
    """gen_scores_table.py writes the same rows whatever the file layout, with the known link between
    score and label; bench_score_columns.py runs calengine fit --scores (embedded) beside scikit-learn's
    IsotonicRegression and finds the two isotonic maps equal on the grid (same tie pooling, same
    linear interpolation) and near the table's true calibrated probability (isotonic only: each
    calengine run is two processes, a fit and a score of the grid)."""
    gs = _load("gen_scores_table")
    spec = gs.ScoresSpec(rows=30_000, seed=1)
    gs.write_scores_table(tmp_path / "a", spec, files=3, row_group_rows=4_000, quiet=True)
    gs.write_scores_table(tmp_path / "b", spec, files=2, row_group_rows=10_000, quiet=True)
    t = _read(tmp_path / "a")
    assert t.schema.names == ["s", "y"] and t.schema.field("s").type == pa.float32()
    assert _read(tmp_path / "b").equals(t)
    s, y = t.column("s").to_numpy().astype(np.float64), t.column("y").to_numpy()
    assert 0 < s.min() and s.max() < 1 and len(np.unique(s)) < len(s)  # float32 scores: ties
    p = gs.true_probability(spec, s)
    assert abs(y.mean() - p.mean()) < 4 * np.sqrt(p.mean() / len(y))
    assert np.mean(s) > p.mean() + 0.01  # the score is miscalibrated: overconfident where most rows are

    bench = _load("bench_score_columns")
    assert bench.main(["--rows-list", "20000", "--methods", "isotonic", "--workers", "0",
                       "--no-spark", "--repeats", "1", "--rows-per-file", "8000", "--row-group-rows", "5000",
                       "--before-python", sys.executable,  # the baseline side by side: here the same package
                       "--work-dir", str(tmp_path / "w"), "--results-dir", str(tmp_path / "r")]) == 0
    data = json.loads((tmp_path / "r" / "score_columns.json").read_text())
    (res,) = data["results"]
    assert res["rows"] == 20000 and res["files"] == 3
    sm = res["summary"]
    assert set(sm) == {"calengine isotonic embedded", "before isotonic embedded", "sklearn"}
    assert all(v["ok"] == 1 and v["wall_s"] > 0 and v["client"] > 0 for v in sm.values())
    assert res["agreement"]["calengine isotonic embedded vs sklearn"] <= 1e-9
    assert res["agreement"]["before isotonic embedded vs sklearn"] <= 1e-9
    assert res["same_model_files"] == {"calengine isotonic embedded vs before isotonic embedded": True}
    # the speed and peak targets judge this build only (the baseline's isotonic map is still compared)
    assert not any(c["what"].startswith("before") and ("wall" in c["what"] or "peak" in c["what"]) for c in data["checks"])
    assert any(c["what"].startswith("calengine isotonic embedded / sklearn wall") for c in data["checks"])
    assert sm["calengine isotonic embedded"]["max_abs_dp_truth"] < 0.15
    assert res["skipped"]["spark"] == "--no-spark"
    assert "## Targets (issue 21)" in (tmp_path / "r" / "score_columns.md").read_text()


@pytest.mark.cluster
def test_bench_score_columns_cluster_processes_tiny(tmp_path):
    """The cluster configurations of bench_score_columns.py (``--cluster-kind processes``, the default)
    run ``calengine fit --cluster ADDRESS`` on a dask scheduler and dask worker started for each run:
    a peak for the client, the scheduler and each worker, the cluster's CPU seconds added to the
    client's, and the isotonic map fitted there equal to scikit-learn's on the grid; two sizes give the
    per-process growth checks, the larger one run ``--big-repeats`` times (here: with the threshold
    lowered to the larger size)."""
    bench = _load("bench_score_columns")
    bench.BIG_ROWS = 200_000
    assert bench.main(["--rows-list", "20000,200000", "--methods", "isotonic", "--workers", "2", "--no-spark",
                       "--repeats", "2", "--big-repeats", "1", "--sklearn-min-available-gib", "0",
                       "--rows-per-file", "100000", "--row-group-rows", "50000", "--worker-memory", "1GiB",
                       "--work-dir", str(tmp_path / "w"), "--results-dir", str(tmp_path / "r")]) == 0
    data = json.loads((tmp_path / "r" / "score_columns.json").read_text())
    small, big = data["results"]
    assert [len(small["runs"]["calengine isotonic cluster"]), len(big["runs"]["calengine isotonic cluster"])] == [2, 1]
    for res in (small, big):
        (rec, *_) = res["runs"]["calengine isotonic cluster"]
        peak = rec["peak"]
        assert rec["returncode"] == 0 and len(peak["workers"]) == 2 and peak["nanny"] > 0
        assert min(peak["client"], peak["scheduler"], *peak["workers"]) > 50 * 2**20  # imported Python processes
        assert rec["cpu_cluster_s"] > 0 and rec["cpu_s"] > rec["cpu_cluster_s"] and rec["cluster_start_s"] > 0
        assert res["agreement"]["calengine isotonic cluster vs sklearn"] <= 1e-9
    assert res["summary"]["calengine isotonic cluster"]["scheduler"] == peak["scheduler"]
    grown = {c["what"] for c in data["checks"] if c["rows"] == "20,000 -> 200,000"}
    assert grown == {f"calengine isotonic {kind} {role} peak growth" for kind, role in
                     [("embedded", "client"), ("cluster", "client"), ("cluster", "scheduler"), ("cluster", "worker_max")]}
    assert "| scheduler MiB |" in (tmp_path / "r" / "score_columns.md").read_text()
    assert small["same_model_files"] == {"calengine isotonic cluster vs calengine isotonic embedded": True}


@pytest.mark.cluster
def test_bench_score_columns_before_on_a_started_cluster_tiny(tmp_path):
    """``--before-python`` with ``--modes cluster``: the baseline's fit runs on a scheduler and workers
    started with that environment's ``dask`` (here the same one), measured like this build's, and the
    page says whether the two models' files are the same bytes."""
    bench = _load("bench_score_columns")
    assert bench.main(["--rows-list", "20000", "--methods", "temperature", "--workers", "1", "--no-spark",
                       "--modes", "cluster", "--repeats", "1", "--sklearn-max-rows", "0", "--rows-per-file", "10000",
                       "--row-group-rows", "5000", "--worker-memory", "1GiB", "--before-python", sys.executable,
                       "--work-dir", str(tmp_path / "w"), "--results-dir", str(tmp_path / "r")]) == 0
    data = json.loads((tmp_path / "r" / "score_columns.json").read_text())
    (res,) = data["results"]
    assert set(res["summary"]) == {"calengine temperature cluster", "before temperature cluster"}
    for label in res["summary"]:
        (rec,) = res["runs"][label]
        assert rec["returncode"] == 0 and len(rec["peak"]["workers"]) == 1 and rec["cpu_cluster_s"] > 0, label
    assert res["same_model_files"] == {"calengine temperature cluster vs before temperature cluster": True}
    assert "before temperature cluster: identical" in (tmp_path / "r" / "score_columns.md").read_text()


@pytest.mark.slow
def test_bench_score_columns_spark_tiny(tmp_path):
    """With PySpark installed (an optional benchmark dependency, never a test one), Spark MLlib's
    IsotonicRegression in local[1] on the same table gives the same map on the grid as calengine's
    and scikit-learn's, and the JVM's peak is recorded apart from the Python driver's."""
    pytest.importorskip("pyspark")
    bench = _load("bench_score_columns")
    assert bench.main(["--rows-list", "5000", "--methods", "isotonic", "--workers", "0", "--repeats", "1",
                       "--spark-memory", "1g", "--rows-per-file", "5000", "--row-group-rows", "5000",
                       "--work-dir", str(tmp_path / "w"), "--results-dir", str(tmp_path / "r")]) == 0
    (res,) = json.loads((tmp_path / "r" / "score_columns.json").read_text())["results"]
    assert res["summary"]["spark"]["ok"] == 1 and res["summary"]["spark"]["jvm"] > res["summary"]["spark"]["client"]
    assert res["agreement"]["calengine isotonic embedded vs spark"] <= 1e-9
    assert res["agreement"]["spark vs sklearn"] <= 1e-9


@pytest.mark.slow
def test_bench_multiclass_scaling_tiny(tmp_path):
    """bench_multiclass_scaling.py on 400 rows of each shipped Pendigits split, temperature only: the
    logits of a model trained outside calengine calibrated by ``calengine fit --scores ... --score-kind
    logit`` and by scikit-learn's ``CalibratedClassifierCV(FrozenEstimator(clf), method="temperature")``
    give the same T and test probabilities, and every figure comes from ``calengine evaluate --json``.
    Slow (~20 s on an idle machine): the script's least run is five processes (two fits, the two
    identity models the baselines are evaluated through, one evaluate), as a user's run is."""
    bench = _load("bench_multiclass_scaling")
    assert bench.main(["--datasets", "pendigits", "--methods", "temperature", "--repeats", "1", "--max-rows", "400",
                       "--results-dir", str(tmp_path / "r")]) == 0
    (res,) = json.loads((tmp_path / "r" / "multiclass_scaling.json").read_text())["results"]
    assert res["failed"] == {}
    assert res["temperature"]["calengine"] == pytest.approx(res["temperature"]["sklearn"], rel=1e-6)
    assert res["max_abs_dp_temperature"] < 1e-6
    figures = res["figures"]
    assert set(figures) == {"uncalibrated", "sklearn temperature", "calengine temperature"}
    for fig in figures.values():
        assert all(isinstance(fig[k], float) and np.isfinite(fig[k]) for k in ("log_loss", "brier", "ece_classwise"))
    assert figures["calengine temperature"]["log_loss"] == pytest.approx(figures["sklearn temperature"]["log_loss"], rel=1e-6)
    assert (tmp_path / "r" / "multiclass_scaling.md").read_text().startswith("# Multiclass scalings")


def test_bench_sql_export_tiny(tmp_path):
    """bench_sql_export.py fits an isotonic model of a score column, exports it as SQL, and times DuckDB
    running it over a generated table beside calengine score on the same files: both runs succeed and
    their outputs agree row for row, bit for bit."""
    bench = _load("bench_sql_export")
    assert bench.main(["--rows-list", "6000", "--methods", "isotonic", "--cal-rows", "3000", "--repeats", "1",
                       "--rows-per-file", "3000", "--row-group-rows", "2000", "--threads", "1",
                       "--work-dir", str(tmp_path / "w"), "--results-dir", str(tmp_path / "r")]) == 0
    (res,) = json.loads((tmp_path / "r" / "sql_export.json").read_text())["results"]
    assert set(res["summary"]) == {"calengine score (isotonic)", "DuckDB SQL (isotonic)"}
    assert all(s["ok"] == 1 and s["wall_s"] > 0 and s["peak"] > 0 for s in res["summary"].values())
    assert res["agreement"]["isotonic"] == {"rows": 6000, "rows_differ": 0, "max_abs_dp": 0.0, "same_length": True}
    assert "Agreement with calengine score" in (tmp_path / "r" / "sql_export.md").read_text()


def test_bench_mcgrad_tiny(tmp_path):
    """bench_mcgrad.py on a 1,500-row planted table with two MCGrad rounds at most (Adult only in the full
    run): three settings, each with finite figures, and MCGrad's time beside one booster's."""
    bench = _load("bench_mcgrad")
    out = tmp_path / "mcgrad"
    assert bench.main(["--cases", "planted", "--rows", "1500", "--rounds", "2", "--min-report-rows", "20",
                       "--via", "core", "--out", str(out)]) == 0
    rows = json.loads(out.with_suffix(".json").read_text())["results"]
    assert [(r["case"], r["setting"]) for r in rows] == [
        ("planted", setting) for setting in ("global isotonic", "segment isotonic (K=20)", "MCGrad on global isotonic")]
    assert all(np.isfinite(r["log_loss"]) and np.isfinite(r["mce_sigma"]) for r in rows)
    mc = [r for r in rows if "rounds" in r]
    assert all(r["rounds"] <= 2 and r["one_booster_cpu_s"] > 0 and r["time_ratio"] > 0 for r in mc)
    assert "| planted | MCGrad on global isotonic |" in out.with_suffix(".md").read_text()


def test_bench_segments_scale_tiny(tmp_path):
    """bench_segments_scale.py: one of its commands (the --by fit) run and measured on a 3,000-row table
    of 20 segments, and its page from those figures; the full run (every fit and evaluate, MCGrad
    against one booster) is too slow for CI."""
    bench = _load("bench_segments_scale")
    seg_fits = _load("bench_segment_fits")
    table = tmp_path / "t.parquet"
    seg_fits.scale_table(table, 3000, 20)
    cmds = bench.commands(table, tmp_path, 20)
    assert [c[1] for c in cmds] == ["global isotonic", "--by seg (20 segments)", "global model",
                                    "global model, --by seg", "--by model, --by seg"]
    by = bench.run(*cmds[1], 3000, 1, 600)
    assert by["wall_s"] > 0 and by["cpu_s"] > 0 and 50 < by["peak_rss_mib"] < 4096
    assert (tmp_path / "by" / "manifest.json").exists()
    fake = [{**by, "group": g, "setting": s, "wall_s": w} for g, s, w in
            [("fit", "global isotonic", 2.0), ("evaluate", "global model", 1.0)]] + [by]
    mc = [{**by, "group": "mcgrad", "setting": "m", "rows": 500, "cpu_s": 6.0}, {**by, "group": "mcgrad", "setting": "one",
                                                                               "rows": 500, "cpu_s": 1.5}]
    from types import SimpleNamespace

    args = SimpleNamespace(segments=20, repeats=1, mcgrad_rounds=2, trees=94)
    page = bench.page(fake + mc, args, bench.environment(bench.REPO, []))
    assert f"| 3,000 | fit | --by seg (20 segments) | {by['wall_s']:.2f} |" in page
    row = next(line for line in page.splitlines() if line.startswith("| 500 | m |"))
    assert "CPU / (rounds × booster) |" in page and row.endswith("| 2.00 |")  # 6 / (2 × 1.5)
    # --baseline-python: the same commands of another build, and the before/after table
    old = [{**r, "build": "main", "cpu_s": 2 * r["cpu_s"]} for r in fake]
    page = bench.page(old + fake + mc, SimpleNamespace(**vars(args), baseline_name="main"), bench.environment(bench.REPO, []))
    assert f"| 3,000 | fit | --by seg (20 segments) | {by['wall_s']:.2f} |" in page and "CPU this / main" in page
    assert f"| 3,000 | fit | --by seg (20 segments) | {2 * by['cpu_s']:.2f} | {by['cpu_s']:.2f} |" in page


@pytest.mark.slow
def test_bench_conformal_runs_small_and_matches_mapies_threshold(tmp_path):
    """benchmarks/bench_conformal.py at a test size (20,000 rows, embedded, MAPIE beside it): every
    command runs, and MAPIE's quantile on the model's own probabilities is the layer's threshold."""
    r = subprocess.run([sys.executable, str(BENCH / "bench_conformal.py"), "--rows-list", "20000", "--repeats", "1",
                        "--no-cluster", "--work-dir", str(tmp_path / "work"), "--results-dir", str(tmp_path / "res")],
                       capture_output=True, text=True, timeout=900, cwd=str(ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads((tmp_path / "res" / "conformal.json").read_text())
    row = data["results"][0]
    assert row["rows"] == 20000 and row["threshold"]["same"] is True
    for key in ("conformal", "score", "sets", "mapie"):
        assert row[key]["wall_s"] > 0 and row[key]["client_mib"] > 0
    page = (tmp_path / "res" / "conformal.md").read_text()
    assert "is the layer's threshold, bit for bit: yes" in page and "**Machine**: a shared " in page
    assert "**Command**: `python benchmarks/bench_conformal.py --rows-list 20000" in page and "**Commit**: " in page
    assert "<!-- --8<-- [start:headline] -->" in page and "conformal / MAPIE's read + conformalize" in page
    assert "/tmp" not in page and str(ROOT) not in page and "{'" not in page  # no paths, no raw dicts


def test_bench_prior_shift_tiny(tmp_path):
    """bench_prior_shift.py on a tiny table: the old replicates (loaded from git) and the vectorised ones
    give the same estimates from the same start, the end-to-end intervals of both agree to EM's
    tolerance, and ``calengine evaluate --prior-shift`` gives the in-process interval."""
    bench = _load("bench_prior_shift")
    try:
        bench.load_old_module(bench.OLD_REV)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"git history with {bench.OLD_REV} not available")
    assert bench.main(["--rows", "6000", "--sample-rows", "1500", "--replicates", "30", "--kernel-replicates", "30",
                       "--old-replicates", "4", "--old-replicates-e2e", "8", "--repeats", "1", "--out", str(tmp_path),
                       "--work-dir", str(tmp_path / "work")]) == 0
    data = json.loads((tmp_path / "prior_shift.json").read_text())
    assert [k["shape"] for k in data["kernel"]] == ["continuous", "steps"]
    assert all(k["max_diff_cold"] < 1e-12 and k["max_diff_warm"] < 1e-5 for k in data["kernel"])
    old, same = data["end_to_end"][0], data["end_to_end"][1]
    assert old["code"] == "old" and same["code"] == "new" and old["replicates"] == same["replicates"] == 8
    np.testing.assert_allclose(old["low"] + old["high"], same["low"] + same["high"], rtol=0, atol=1e-5)
    cli = data["end_to_end"][-1]
    assert cli["returncode"] == 0 and cli["same_as_in_process"] is True
    assert "old / new" in (tmp_path / "prior_shift.md").read_text()


def test_bench_small_tables_tiny(tmp_path):
    """bench_small_tables.py on Pima, one round of fit: calengine's quick-start fit and the scikit-learn
    script both run from launch to exit, and the page carries the ratio, CPU seconds and peak RSS."""
    bench = _load("bench_small_tables")
    assert bench.main(["--train", str(ROOT / "data" / "pima.parquet"), "--test", str(ROOT / "data" / "pima.parquet"),
                       "--positive", "1", "--commands", "fit", "--repeats", "1", "--work-dir", str(tmp_path / "w"),
                       "--results-dir", str(tmp_path / "res")]) == 0
    data = json.loads((tmp_path / "res" / "small_tables.json").read_text())
    (row,) = data["results"]
    assert row["command"] == "fit" and row["ratio"] > 0
    for side in ("calengine", "scikit-learn"):
        assert row[side]["wall_s"] > 0 and row[side]["cpu_s"] > 0 and row[side]["peak_rss_mib"] > 50
    assert (tmp_path / "w" / "calengine-model" / "manifest.json").exists()
    assert (tmp_path / "w" / "sklearn-model.pkl").stat().st_size > 0
    page = (tmp_path / "res" / "small_tables.md").read_text()
    assert "| fit |" in page and "**Command**" in page


def test_bench_read_floor_tiny(tmp_path):
    """bench_read_floor.py on a 20,000-row table, one round of the hold-out fit: the fit and its floor
    (one pass of reading) both run, the fit's data are the first 8 files and its calibration data the
    last 2."""
    bench = _load("bench_read_floor")
    assert bench.main(["--rows", "20000", "--cols", "4", "--row-group-rows", "5000", "--fits", "hold-out",
                       "--repeats", "1", "--work-dir", str(tmp_path / "w"), "--results-dir", str(tmp_path / "res")]) == 0
    data = json.loads((tmp_path / "res" / "read_floor.json").read_text())
    (row,) = data["results"]
    assert row["name"] == "hold-out" and row["passes"] == 1 and row["ratio"] > 0
    assert row["fit"]["wall_s"] > 0 and row["floor"]["cpu_s"] > 0 and row["floor"]["peak_rss_mib"] > 0
    cmd = data["commands"]["hold-out"]
    assert cmd[cmd.index("fit") + 1].endswith("part-0000[01234567].parquet")
    assert cmd[cmd.index("--calibration-data") + 1].endswith("part-0000[89].parquet")
    assert "| hold-out | 1 |" in (tmp_path / "res" / "read_floor.md").read_text()


def test_bench_exact_sums_tiny(capsys):
    """bench_exact_sums.py at 2,000 rows and one repeat prints a float and an exact time per workload."""
    bench = _load("bench_exact_sums")
    bench.main(["--repeats", "1", "--n", "2000"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split() == ["workload", "float", "s", "exact", "s", "ratio"]
    assert [line.split(",")[0] for line in lines[1:]] == ["sum", "bins", "platt round", "sigmoid summary"]
    assert all(float(v) >= 0 for line in lines[1:] for v in line.split()[-3:-1])


def test_bench_read_floor_runs_a_named_baseline_in_the_same_rounds(tmp_path):
    """``--baseline PYTHON``: each fit also runs as ``PYTHON -m calengine`` with the same arguments, and
    the page names the baseline beside its ratios (here the same installation, so both fits run)."""
    bench = _load("bench_read_floor")
    assert bench.main(["--rows", "20000", "--cols", "4", "--row-group-rows", "5000", "--fits", "hold-out",
                       "--repeats", "1", "--work-dir", str(tmp_path / "w"), "--results-dir", str(tmp_path / "res"),
                       "--baseline", sys.executable, "--baseline-name", "before"]) == 0
    data = json.loads((tmp_path / "res" / "read_floor.json").read_text())
    (row,) = data["results"]
    assert row["baseline"]["wall_s"] > 0 and row["baseline"]["cpu_s"] > 0 and row["baseline"]["ratio"] > 0
    assert len(data["runs"]["hold-out"]["baseline"]) == 1
    page = (tmp_path / "res" / "read_floor.md").read_text()
    assert "### The same fits with before" in page and "| fit / before (CPU) |" in page
