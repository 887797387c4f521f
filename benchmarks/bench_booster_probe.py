#!/usr/bin/env python
"""What checking booster files costs (issue 24 §1): ``calengine score`` on an XGBoost and a LightGBM
model as shipped (*validated*: the Python checks of every booster file, then one probing child that
loads and scores them with the native library) against two named baselines in the same run:
*unvalidated* (``calengine.boosters.checks.validate_xgboost``/``validate_lightgbm`` replaced by a no-op
and ``calengine.boosters.guard.probe_in_child`` too: what ``score`` cost before issue 24) and *checked*
(the Python checks, no child).  Each ``score`` is a fresh process; the modes take turns within each
repeat, so the machine's load drifts over all three alike.

Reported per learner: median wall time of the whole ``score`` command in each mode, the ratio
validated / unvalidated (the target is <= 1.15), the same for CPU time (user + system of the score
process and its children: far steadier than wall on a shared machine), the number of booster files,
the median time of the Python checks alone (on all booster files, in this process), and the peak RSS
of the scoring process and of its largest child (the probing child).

    python benchmarks/bench_booster_probe.py [--repeats 5] [--cv 5] [--n-estimators 100] [--no-write]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PIMA = ROOT / "data" / "pima.parquet"

MODES = ("unvalidated", "checked", "validated")

_SCORE = """
import sys, resource
if sys.argv[1] in ("unvalidated", "checked"):
    import calengine.boosters.guard as g
    g.probe_in_child = lambda *a, **k: None
if sys.argv[1] == "unvalidated":
    import calengine.boosters.checks as c
    c.validate_xgboost = c.validate_lightgbm = lambda *a, **k: c.BoosterSummary(0, 2, 0)
from calengine.cli import main
rc = main(["score", *sys.argv[2:]])
import calengine.boosters.guard as g
g._server.stop()  # reap the probing child, so that RUSAGE_CHILDREN holds its peak
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(me.ru_maxrss, kids.ru_maxrss, me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime)
sys.exit(rc)
"""


def score_once(mode: str, model: Path, out: Path) -> tuple[float, int, int, float]:
    """Wall seconds, peak RSS (KiB) of the score process and of its largest child, and the CPU seconds
    (user + system) of both: on a shared machine CPU time moves far less with the load than wall."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-P", "-c", _SCORE, mode, str(model), str(PIMA), "--output", str(out)],
                          capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    self_kb, child_kb, cpu = proc.stdout.split()[-3:]
    return wall, int(self_kb), int(child_kb), float(cpu)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cv", type=int, default=5)
    ap.add_argument("--n-estimators", type=int, default=100)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)

    from calengine.boosters.checks import validate_lightgbm, validate_xgboost
    from calengine.cli import main as cli

    rows, results = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for learner, check in (("xgboost", validate_xgboost), ("lightgbm", validate_lightgbm)):
            model = Path(tmp) / learner
            assert cli(["fit", str(PIMA), "--target", "class", "--learner", learner, "--learner-param",
                        f"n_estimators={args.n_estimators}", "--cv", str(args.cv), "--seed", "0", "--output", str(model)]) == 0
            files = sorted(model.glob("members/*/learner_*.booster.*"))
            blobs = [f.read_bytes() for f in files]
            validate = _common.median_seconds(lambda: [check(b) for b in blobs], args.repeats)
            walls, rss, child, cpu = ({m: [] for m in MODES} for _ in range(4))
            for r in range(args.repeats):
                for mode in MODES:
                    w, peak, child_peak, c = score_once(mode, model, Path(tmp) / f"out-{learner}-{mode}-{r}")
                    walls[mode].append(w), rss[mode].append(peak), child[mode].append(child_peak), cpu[mode].append(c)
            runs = {m: {"wall_s": _common.median(walls[m]), "walls_s": walls[m], "cpu_s": _common.median(cpu[m]),
                        "cpus_s": cpu[m], "peak_rss_kib": max(rss[m]), "child_peak_rss_kib": max(child[m])} for m in MODES}
            ratio = _common.ratio(runs["validated"]["wall_s"], runs["unvalidated"]["wall_s"])
            cpu_ratio = _common.ratio(runs["validated"]["cpu_s"], runs["unvalidated"]["cpu_s"])
            results[learner] = {"booster_files": len(files), "validate_s": validate, **runs, "ratio": ratio,
                                "cpu_ratio": cpu_ratio}
            rows.append([learner, len(files), _common.fmt(validate * 1e3, 1),
                         *(_common.fmt(runs[m]["wall_s"]) for m in MODES), _common.fmt(ratio),
                         *(_common.fmt(runs[m]["cpu_s"]) for m in MODES), _common.fmt(cpu_ratio),
                         runs["validated"]["peak_rss_kib"] // 1024, runs["validated"]["child_peak_rss_kib"] // 1024])
    table = _common.markdown_table(
        ["learner", "booster files", "Python checks (ms, all files)", "score, unvalidated (s)", "score, checked (s)",
         "score, validated (s)", "validated / unvalidated", "CPU, unvalidated (s)", "CPU, checked (s)",
         "CPU, validated (s)", "CPU validated / unvalidated", "score peak RSS (MiB)", "largest child peak RSS (MiB)"], rows)
    print(table)
    if not args.no_write:
        env = _common.environment(ROOT, ["xgboost", "lightgbm", "numpy"])
        _common.write_results(ROOT / "benchmarks" / "results", "booster_probe",
                              {"environment": env, "args": vars(args), "results": results},
                              f"# Booster checks and probe\n\n`{_common.command_line()}`\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
