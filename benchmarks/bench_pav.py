"""Isotonic (PAV) fit against its floor, one stable argsort of the same scores (issue 12, target 3).

Times, side by side in one process and interleaved round by round (the machine may be shared, so
every figure is a median and the ratios compare medians of the same rounds):

* ``np.argsort(scores, kind="stable")``: the floor the issue measures against;
* ``pav`` before issue 12, loaded from git (``--old-rev``) so the comparison is with the code that
  was really there, not a copy;
* ``pav`` of this checkout;
* scikit-learn ``IsotonicRegression().fit``.

for 0/1 labels on three columns of normal scores (continuous: no ties; rounded to 3 decimals: a few
thousand distinct scores; rounded to 6 decimals: ties between neighbours only), without and with
float sample weights.  Every
case also checks that the two ``pav`` return bit-identical blocks, and splits each ``pav`` into
stages (input validation, tie pooling, the compiled PAV pass over the tie groups, and the rest:
recomputing block sums and building the blocks) to show where the time above the sort goes.

    python benchmarks/bench_pav.py [--n 10000000] [--repeats 3] [--old-rev b2c32cd]

Writes ``benchmarks/results/pav.md`` and ``pav.json`` (``--out`` for another directory).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    command_line,
    fmt,
    git_commit,
    load_snapshot,
    machine_info,
    markdown_table,
    median,
    package_versions,
    ratio,
    write_results,
)

ROOT = Path(__file__).resolve().parents[1]
OLD_REV = "b2c32cd"  # the last commit before pav stopped using the stable argsort


def load_old_pav_module(rev: str) -> types.ModuleType:
    """``calengine/reductions/pav.py`` as of ``rev``, imported as a sibling of the current module."""
    src = subprocess.run(["git", "show", f"{rev}:calengine/reductions/pav.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    mod = types.ModuleType("calengine.reductions._pav_old")
    mod.__package__ = "calengine.reductions"
    mod.__file__ = f"<git {rev}:calengine/reductions/pav.py>"
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    return mod


def same_bits(a, b) -> bool:
    return len(a) == len(b) and all(
        np.asarray(x).dtype == np.asarray(z).dtype and np.asarray(x).shape == np.asarray(z).shape
        and np.asarray(x).tobytes() == np.asarray(z).tobytes() for x, z in zip(a, b))


def cases(n: int, seed: int):
    rng = np.random.default_rng(seed)
    base = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-base))).astype(np.int8)
    w = rng.uniform(0.0, 2.0, size=n)
    for name, s in (("continuous (no ties)", base),
                    ("rounded to 3 decimals", np.round(base, 3)),
                    ("rounded to 6 decimals", np.round(base, 6))):
        yield name, s, y, None
        yield name, s, y, w


def time_round(fns: dict, rounds: int) -> dict[str, list[float]]:
    """Run every function once per round, in turn, ``rounds`` times; seconds per call."""
    out = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            out[k].append(time.perf_counter() - t0)
    return out


def stages(mod, s, y, w, rounds: int) -> dict[str, float]:
    """Median seconds of the stages of ``mod.pav`` (validation, tie pooling, PAV pass, the rest)."""
    from scipy.optimize import isotonic_regression

    sv, yi, wv = mod.check_binary_data(s, y, w, require_both_classes=False)
    xs, wy, ws = mod.pool_ties(sv, yi, wv)
    t = time_round({
        "argsort_stable": lambda: np.argsort(s, kind="stable"),
        "validation": lambda: mod.check_binary_data(s, y, w, require_both_classes=False),
        "tie pooling": lambda: mod.pool_ties(sv, yi, wv),
        "PAV pass": lambda: isotonic_regression(wy / ws, weights=ws, increasing=True),
        "pav": lambda: mod.pav(s, y, w),
    }, rounds)
    med = {k: median(v) for k, v in t.items()}
    med["blocks (rest)"] = max(0.0, med["pav"] - med["validation"] - med["tie pooling"] - med["PAV pass"])
    med["groups"] = int(xs.size)
    return med


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="scores per fit (default 10,000,000)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds per case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--old-rev", default=OLD_REV, help="git revision holding the previous pav")
    parser.add_argument("--no-sklearn", action="store_true", help="skip scikit-learn (slowest column)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)

    from sklearn.isotonic import IsotonicRegression

    from calengine.reductions import pav as new

    old = load_old_pav_module(args.old_rev)
    load = load_snapshot()
    rows, results = [], []
    for name, s, y, w in cases(args.n, args.seed):
        label = f"{name}, {'float weights' if w is not None else 'unit weights'}"
        identical = same_bits(new.pav(s, y, w), old.pav(s, y, w))
        fns = {
            "argsort_stable": lambda: np.argsort(s, kind="stable"),
            "pav_old": lambda: old.pav(s, y, w),
            "pav_new": lambda: new.pav(s, y, w),
        }
        if not args.no_sklearn:
            fns["sklearn_fit"] = lambda: IsotonicRegression(out_of_bounds="clip").fit(s, y, sample_weight=w)
        med = {k: median(v) for k, v in time_round(fns, args.repeats).items()}
        rec = {"case": label, "n": args.n, "identical_blocks": identical, "median_s": med,
               "new_over_argsort": ratio(med["pav_new"], med["argsort_stable"]),
               "old_over_argsort": ratio(med["pav_old"], med["argsort_stable"]),
               "sklearn_over_argsort": ratio(med.get("sklearn_fit"), med["argsort_stable"]),
               "stages_old": stages(old, s, y, w, args.repeats),
               "stages_new": stages(new, s, y, w, args.repeats)}
        results.append(rec)
        rows.append([label, med["argsort_stable"], med["pav_old"], med["pav_new"], med.get("sklearn_fit"),
                     rec["old_over_argsort"], rec["new_over_argsort"], rec["sklearn_over_argsort"],
                     identical])
        print(f"{label}: argsort {fmt(med['argsort_stable'], 3)} s, "
              f"old {fmt(med['pav_old'], 3)} s ({fmt(rec['old_over_argsort'])}x), "
              f"new {fmt(med['pav_new'], 3)} s ({fmt(rec['new_over_argsort'])}x), "
              f"sklearn {fmt(med.get('sklearn_fit'), 3)} s, identical blocks: {identical}", flush=True)

    stage_names = ["validation", "tie pooling", "PAV pass", "blocks (rest)", "pav"]
    stage_rows = []
    for rec in results:
        for which in ("old", "new"):
            st = rec[f"stages_{which}"]
            a = st["argsort_stable"]
            stage_rows.append([rec["case"], which, st["groups"]]
                              + [f"{fmt(st[k], 3)} ({fmt(ratio(st[k], a))}x)" for k in stage_names])
    md = "\n\n".join([
        f"# PAV fit against one stable argsort, {args.n:,} scores",
        f"`{command_line()}`, {args.repeats} interleaved rounds per case; medians in seconds; ratios are "
        f"median / median of the stable argsort in the same rounds.  Old = `pav` at git `{args.old_rev}`, "
        "new = this checkout.  Labels 0/1 (logistic in the score); float weights uniform on [0, 2).",
        markdown_table(["case", "argsort stable", "pav old", "pav new", "sklearn fit", "old / argsort",
                        "new / argsort", "sklearn / argsort", "identical blocks"], rows),
        "## Stages (median s, and as a multiple of a stable argsort timed in the same rounds)\n\n"
        "validation = `check_binary_data`; tie pooling = `pool_ties` (holds the sort); PAV pass = "
        "`scipy.optimize.isotonic_regression` over the tie groups; blocks = the rest of `pav` "
        "(exact block sums, merging, building `PAVBlocks`), by difference.  The stages are timed in "
        "rounds of their own, so on a loaded machine their sum need not match the first table, and the "
        "by-difference column absorbs the noise (it can even show a spike that is not in `pav`).",
        markdown_table(["case", "implementation", "tie groups", *stage_names], stage_rows),
        f"Load before the run: {load}.  Machine: {machine_info()['platform']}, "
        f"{machine_info()['cpus_logical']} logical CPUs.  Versions: "
        f"{package_versions(['numpy', 'scipy', 'scikit-learn'])}.  Commit: {git_commit(ROOT)}.",
    ])
    data = {"command": command_line(), "n": args.n, "repeats": args.repeats, "old_rev": args.old_rev,
            "load_before": load, "machine": machine_info(), "commit": git_commit(ROOT),
            "versions": package_versions(["numpy", "scipy", "scikit-learn"]), "results": results}
    paths = write_results(args.out, "pav", data, md)
    print(f"wrote {paths[1]}")
    return 0 if all(r["identical_blocks"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
