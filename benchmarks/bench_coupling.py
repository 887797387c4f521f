#!/usr/bin/env python
"""Coupling on all-pairs Pendigits (issue 12, targets 2 and 6): the plain multiplicative sweeps
against Newton's method, side by side in one run.

Fits ``CalibratedClassifier(LEARNER, METHOD, cv=CV, multiclass="all_pairs:coupling")`` on Pendigits'
training file, computes each cross-validation member's 45 calibrated column estimates for the test
rows once, then times the coupling of those estimates (every member, as ``predict_proba`` does):

* old -- ``couple_before_issue12``, the solver before issue 12, copied here verbatim (Gauss-Seidel
  multiplicative updates until ``max |delta p| < tol`` or ``max_iter`` sweeps; the plugin's
  ``_couple_sweeps`` runs the same iterates in place, for other matrices);
* new -- ``Coupling().combine``, which on all-pairs runs ``_couple_newton``.

Reported: median seconds of each and their ratio, the whole ``predict_proba`` with the new solver,
max |delta p| between them (all rows, and rows the old solver finished within ``max_iter``), how far
one more multiplicative update would move any ``p_i`` from each answer (the quantity ``tol``
bounds), and the new solver's time in fresh subprocesses set up like workers (BLAS pinned to one
thread) with and without ``MALLOC_TRIM_THRESHOLD_=65536`` (the worker allocator setting: it pins
glibc's mmap threshold at 128 KiB, so a solver that allocates many large temporaries slows down
there).  Timings on a shared machine are noisy: compare the ratios.

    python benchmarks/bench_coupling.py [--rows 3498] [--repeats 3] [--old-repeats 1] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]

#: run in a fresh interpreter: time the new solver on the saved estimates, print JSON
_CHILD = """
import json, sys, time
import numpy as np
from calengine.runtime.threads import pin_native_threads
from calengine_builtins.combiners import Coupling
pin_native_threads()  # as a worker process does: one BLAS thread
d = np.load(sys.argv[1])
R, M, w, repeats = d["R"], d["M"], d["w"], int(sys.argv[2])
times = []
for _ in range(repeats):
    t = time.perf_counter()
    for Rm in R:
        Coupling().combine(Rm, M, w)
    times.append(time.perf_counter() - t)
print(json.dumps(times))
"""


#: the old solver's guard for zero denominators
_TINY = 1e-300


def couple_before_issue12(R: np.ndarray, M: np.ndarray, w: np.ndarray, tol: float, max_iter: int) -> np.ndarray:
    """``calengine_builtins.combiners._couple`` as of commit b2c32cd (before issue 12), verbatim but
    for this docstring and ``_TINY``: the plain Gauss-Seidel sweeps, written as expressions."""
    k, l = M.shape
    pos = (M == 1).astype(np.float64)  # (k, l)
    neg = (M == -1).astype(np.float64)
    Rt = R.T  # (l, n)
    # numerators never change: sum over +1 columns of n_b r_b plus -1 columns of n_b (1 - r_b)
    num = pos @ (w[:, None] * Rt) + neg @ (w[:, None] * (1.0 - Rt))
    # den_i = sum_{b: M_ib=+1} n_b rhat_b + sum_{b: M_ib=-1} n_b (1 - rhat_b) = coef_i . rhat + base_i
    coef = w * (pos - neg)
    base = neg @ w
    dense = bool((M != 0).all())
    cols = [np.flatnonzero(M[i]) for i in range(k)]
    plus = [np.flatnonzero(M[i] == 1) for i in range(k)]
    pos_t, used_t = np.ascontiguousarray(pos.T), np.ascontiguousarray((pos + neg).T)
    p = np.full((k, R.shape[0]), 1.0 / k)
    todo = np.arange(R.shape[0])
    for _ in range(max_iter):
        if todo.size == 0:
            break
        x, nm = p[:, todo], num[:, todo]
        start = x.copy()
        s_in = pos_t @ x  # (l, m)
        if dense:
            total = x.sum(axis=0)
        else:
            s_all = used_t @ x
        for i in range(k):
            if dense:
                den = (coef[i] @ s_in) / (total + _TINY) + base[i]
            elif cols[i].size == l:
                den = coef[i] @ (s_in / (s_all + _TINY)) + base[i]
            else:
                c = cols[i]
                den = coef[i, c] @ (s_in[c] / (s_all[c] + _TINY)) + base[i]
            delta = x[i] * (nm[i] / np.maximum(den, _TINY) - 1.0)
            x[i] += delta
            for b in plus[i]:
                s_in[b] += delta
            if dense:
                total += delta
            else:
                for b in cols[i]:
                    s_all[b] += delta
        x /= x.sum(axis=0)
        p[:, todo] = x
        todo = todo[np.abs(x - start).max(axis=0) >= tol]
    return p.T


def _seconds(fn, repeats: int) -> tuple[list[float], object]:
    """Wall seconds of each of ``repeats`` calls, and the last call's result."""
    out, result = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        result = fn()
        out.append(time.perf_counter() - t)
    return out, result


def _moves(P: np.ndarray, R: np.ndarray, M: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per row, how far one multiplicative update (all classes at once) would move any ``p_i``."""
    from calengine_builtins.combiners import R_CLIP

    Rc = np.clip(R, R_CLIP, 1 - R_CLIP)
    pos, neg = (M == 1).astype(float), (M == -1).astype(float)
    rhat = (P @ pos) / (P @ (pos + neg))
    num = (Rc * w) @ pos.T + ((1 - Rc) * w) @ neg.T
    den = (rhat * w) @ pos.T + ((1 - rhat) * w) @ neg.T
    return np.abs(P * (num / den - 1)).max(axis=1)


def _child_seconds(npz: str, repeats: int, trim: bool) -> list[float]:
    env = dict(os.environ)
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    if trim:
        env["MALLOC_TRIM_THRESHOLD_"] = "65536"
    out = subprocess.run([sys.executable, "-P", "-c", _CHILD, npz, str(repeats)], env=env, capture_output=True,
                         text=True, check=True, timeout=3600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(args) -> dict:
    import pandas as pd

    from calengine.estimator import CalibratedClassifier
    from calengine_builtins.combiners import R_CLIP, Coupling, _to_simplex

    data = Path(args.data_dir) / "pendigits"
    train, test = pd.read_parquet(data / "train.parquet"), pd.read_parquet(data / "test.parquet")
    if args.rows:
        test = test.iloc[: args.rows]
    X, y = train.drop(columns="class").to_numpy(float), train["class"].to_numpy()
    Xt = test.drop(columns="class").to_numpy(float)

    t = time.perf_counter()
    clf = CalibratedClassifier(args.learner, args.method, cv=args.cv, seed=0,
                               multiclass="all_pairs:coupling").fit(X, y)
    fit_s = time.perf_counter() - t
    model = clf.model_
    M, w = model.code_matrix, np.asarray(model.column_counts, dtype=float)
    comb = model.combiner
    tol, max_iter = float(comb.tol), int(comb.max_iter)
    Rs = [m.column_probabilities(Xt) for m in model.members]

    def old(Rm, iters=max_iter):
        return _to_simplex(couple_before_issue12(np.clip(Rm, R_CLIP, 1 - R_CLIP), M, w, tol, iters))

    new_s, P_new = _seconds(lambda: [Coupling(tol=tol, max_iter=max_iter).combine(Rm, M, w) for Rm in Rs],
                            args.repeats)
    proba_s, _ = _seconds(lambda: clf.predict_proba(Xt), args.repeats)
    old_s, P_old = _seconds(lambda: [old(Rm) for Rm in Rs], args.old_repeats)
    # a row the old solver finished within max_iter is unchanged when it may sweep once more
    finished = [np.all(old(Rm, max_iter + 1) == Po, axis=1) for Rm, Po in zip(Rs, P_old)]
    diff = np.concatenate([np.abs(a - b).max(axis=1) for a, b in zip(P_new, P_old)])
    fin = np.concatenate(finished)
    moves_new = np.concatenate([_moves(P, Rm, M, w) for P, Rm in zip(P_new, Rs)])
    moves_old = np.concatenate([_moves(P, Rm, M, w) for P, Rm in zip(P_old, Rs)])
    agg_new, agg_old = np.mean(P_new, axis=0), np.mean(P_old, axis=0)

    with tempfile.TemporaryDirectory() as tmp:
        npz = os.path.join(tmp, "estimates.npz")
        np.savez(npz, R=np.stack(Rs), M=M, w=w)
        child_plain = _child_seconds(npz, args.repeats, trim=False)
        child_trim = _child_seconds(npz, args.repeats, trim=True)

    return {
        "command": _common.command_line(),
        "setup": {"learner": args.learner, "method": args.method, "cv": args.cv, "members": len(Rs),
                  "train_rows": len(train), "test_rows": len(test), "classes": M.shape[0],
                  "columns": M.shape[1], "tol": tol, "max_iter": max_iter, "fit_s": fit_s},
        "seconds": {"old": old_s, "new": new_s, "new_predict_proba": proba_s,
                    "new_subprocess": child_plain, "new_subprocess_trim65536": child_trim},
        "medians": {"old": _common.median(old_s), "new": _common.median(new_s),
                    "new_predict_proba": _common.median(proba_s),
                    "new_subprocess": _common.median(child_plain),
                    "new_subprocess_trim65536": _common.median(child_trim)},
        "ratio_old_over_new": _common.ratio(_common.median(old_s), _common.median(new_s)),
        "ratio_trim_over_plain": _common.ratio(_common.median(child_trim), _common.median(child_plain)),
        "agreement": {
            "member_rows": int(diff.size),
            "max_abs_dp_all_rows": float(diff.max()),
            "old_finished_rows": int(fin.sum()),
            "max_abs_dp_old_finished_rows": float(diff[fin].max()) if fin.any() else None,
            "max_abs_dp_predict_proba": float(np.abs(agg_new - agg_old).max()),
            "predictions_differ": int((agg_new.argmax(axis=1) != agg_old.argmax(axis=1)).sum()),
            "max_update_move_new": float(moves_new.max()),
            "rows_new_within_tol": int((moves_new < tol).sum()),
            "max_update_move_old": float(moves_old.max()),
            "rows_old_within_tol": int((moves_old < tol).sum()),
        },
        "machine": _common.machine_info(),
        "load_at_end": _common.load_snapshot(),
        "packages": _common.package_versions(["calengine", "calengine-builtins", "numpy", "scipy", "scikit-learn"]),
        "git": _common.git_commit(REPO_ROOT),
    }


def markdown(res: dict) -> str:
    s, m, a = res["setup"], res["medians"], res["agreement"]
    rows = [
        ("old: plain sweeps (`couple_before_issue12`)", m["old"], len(res["seconds"]["old"])),
        ("new: `Coupling().combine` (Newton on all-pairs)", m["new"], len(res["seconds"]["new"])),
        ("new: whole `predict_proba` (scores + calibration + coupling)", m["new_predict_proba"],
         len(res["seconds"]["new_predict_proba"])),
        ("new, fresh subprocess, one BLAS thread", m["new_subprocess"], len(res["seconds"]["new_subprocess"])),
        ("new, same, `MALLOC_TRIM_THRESHOLD_=65536` (as a worker)", m["new_subprocess_trim65536"],
         len(res["seconds"]["new_subprocess_trim65536"])),
    ]
    mach, load = res["machine"], res["load_at_end"]
    return "\n".join([
        "# Coupling on all-pairs Pendigits: plain sweeps vs Newton (issue 12)",
        "",
        f"Command: `{res['command']}`  ",
        f"Model: `CalibratedClassifier({s['learner']!r}, {s['method']!r}, cv={s['cv']}, "
        f"multiclass='all_pairs:coupling')` on {s['train_rows']:,} training rows ({s['members']} members, "
        f"{s['classes']} classes, {s['columns']} columns); {s['test_rows']:,} test rows; coupling tol "
        f"{s['tol']:g}, max_iter {s['max_iter']}.  ",
        f"Machine: {mach['cpus_logical']} CPUs, shared (load at the end {load['load1']:.2f} / "
        f"{load['load5']:.2f} / {load['load15']:.2f}); git {str(res['git']['commit'])[:12]}"
        f"{' (dirty)' if res['git']['dirty'] else ''}.",
        "",
        "Seconds to couple every member's estimates for all test rows (median of the runs):",
        "",
        _common.markdown_table(["solver", "median s", "runs"], rows),
        "",
        f"Old / new: **{_common.fmt(res['ratio_old_over_new'], 1)}x**.  Worker allocator setting / plain "
        f"subprocess: {_common.fmt(res['ratio_trim_over_plain'], 2)}x.",
        "",
        "This process runs BLAS with its default thread count, the subprocesses with one thread as",
        "calengine's workers do; on a loaded 2-CPU machine the second BLAS thread mostly waits, which is",
        "the gap between the in-process and subprocess rows (same code, same estimates).",
        "",
        "Agreement and convergence (one value per member and row):",
        "",
        _common.markdown_table(["measure", "value"], [
            ("max abs(p_new - p_old), all member rows", f"{a['max_abs_dp_all_rows']:.3g}"),
            (f"member rows the old solver finished within max_iter", f"{a['old_finished_rows']} of {a['member_rows']}"),
            ("max abs(p_new - p_old) on those rows", "-" if a["max_abs_dp_old_finished_rows"] is None
             else f"{a['max_abs_dp_old_finished_rows']:.3g}"),
            ("max abs difference of `predict_proba` (members averaged)", f"{a['max_abs_dp_predict_proba']:.3g}"),
            ("test rows whose predicted class differs", str(a["predictions_differ"])),
            ("new: max move of one more multiplicative update (all classes at once)", f"{a['max_update_move_new']:.3g}"),
            ("new: member rows where that move is below tol", f"{a['rows_new_within_tol']} of {a['member_rows']}"),
            ("old: max move of one more multiplicative update (all classes at once)", f"{a['max_update_move_old']:.3g}"),
            ("old: member rows where that move is below tol", f"{a['rows_old_within_tol']} of {a['member_rows']}"),
        ]),
        "",
        "Most rows stop the old solver at max_iter, still moving, which is where the two differ; on the rows",
        "it finishes (its last Gauss-Seidel sweep moved no p by tol) they agree to what that rule leaves.",
        "The move of one more update is measured Jacobi-style, all classes from the same p, unnormalised;",
        "it is the quantity the new solver's `tol` bounds, and a row the old rule accepted may sit just above it.",
    ])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=str(REPO_ROOT.parent / "shared" / "data"))
    p.add_argument("--rows", type=int, default=0, help="use only the first ROWS test rows (0: all 3,498)")
    p.add_argument("--learner", default="logistic_regression")
    p.add_argument("--method", default="sigmoid")
    p.add_argument("--cv", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3, help="runs of the new solver (and of predict_proba)")
    p.add_argument("--old-repeats", type=int, default=1, help="runs of the old solver (slow)")
    p.add_argument("--out", default=str(REPO_ROOT / "benchmarks" / "results"))
    p.add_argument("--no-write", action="store_true", help="print only; do not write results/coupling.*")
    args = p.parse_args(argv)
    res = run(args)
    md = markdown(res)
    print(md)
    if not args.no_write:
        for path in _common.write_results(args.out, "coupling", res, md):
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
