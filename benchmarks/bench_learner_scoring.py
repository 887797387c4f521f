#!/usr/bin/env python
"""What batch-independent learner scores cost (issue 23): each built-in learner's ``score`` (row-wise
products and sums in a fixed order, calengine_builtins.learners._rowwise) against the batched
computation it replaced, side by side in one run on rows of the generated table.

Baselines, per learner (the code ``score`` ran before): scikit-learn's own ``predict_proba`` /
``decision_function`` of the fitted estimator (BLAS products) for the scikit-learn-backed learners;
for ``nearest_mean`` the BLAS product; for ``parzen`` the BLAS distance expansion and scipy's
logsumexp; for ``knn`` scikit-learn's ``algorithm="auto"`` neighbour search.  Learners whose
scoring did not change (trees, boosting) or changed only in one reduction (``gaussian_nb``'s sum
over features, categorical naive Bayes' normalisation) are left out.  Prints the median
seconds of ``--repeats`` runs per learner, rows/s and the ratio new / baseline; one thread (BLAS
pinned to one, as the engine's tasks run).

    python benchmarks/bench_learner_scoring.py [--train-rows 20000] [--score-rows 200000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402
import gen_table as G  # noqa: E402


def _baselines(name, learner):
    """The batched computation ``learner.score`` replaced (a function of X), or None."""
    from scipy.special import logsumexp

    est = getattr(learner, "estimator_", None)
    if name in ("multinomial_nb", "bernoulli_nb", "qda", "bayes_full", "mlp", "logistic_regression"):
        return lambda X: est.predict_proba(X)[:, 1]
    if name in ("linear_svm", "fisher_lda"):
        return lambda X: est.decision_function(X)
    if name == "nearest_mean":
        mu = learner.means_
        mu_sq = np.einsum("ij,ij->i", mu, mu)
        return lambda X: 2.0 * (X @ (mu[1] - mu[0])) + (mu_sq[0] - mu_sq[1])
    if name == "parzen":
        from calengine_builtins.learners.neighbors import _row_blocks, _squared_distances

        def parzen(X):
            Z = (X - learner.mean_) / learner.scale_
            tr = learner.X_
            tr_sq = np.einsum("ij,ij->i", tr, tr)
            bounds = np.searchsorted(learner.y_, np.arange(3))
            out = np.empty((Z.shape[0], 2))
            for sl in _row_blocks(Z.shape[0], tr.shape[0]):
                A = _squared_distances(Z[sl], tr, tr_sq) * (-1.0 / (2.0 * learner.bandwidth_**2)) + np.log(learner.w_)
                for c in range(2):
                    out[sl, c] = logsumexp(A[:, bounds[c]:bounds[c + 1]], axis=1)
            return np.exp(out - logsumexp(out, axis=1, keepdims=True))[:, 1]

        return parzen
    if name == "knn":
        from sklearn.neighbors import NearestNeighbors

        nn = NearestNeighbors().fit(learner.X_)

        def knn(X):
            Z = (X - learner.mean_) / learner.scale_
            ind = nn.kneighbors(Z, n_neighbors=learner.k_, return_distance=False)
            return (learner.y_[ind].sum(axis=1) + 1.0) / (learner.k_ + 2)

        return knn
    return None


LEARNERS = ("multinomial_nb", "bernoulli_nb", "logistic_regression", "linear_svm", "mlp",
            "qda", "fisher_lda", "nearest_mean", "parzen", "knn")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train-rows", type=int, default=20000)
    ap.add_argument("--score-rows", type=int, default=200000)
    ap.add_argument("--parzen-train-rows", type=int, default=2000, help="parzen/knn scoring is O(train x score)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--learners", default=",".join(LEARNERS))
    args = ap.parse_args(argv)

    from threadpoolctl import threadpool_limits

    from calengine.plugins.registry import make_learner

    threadpool_limits(1)
    spec = G.TableSpec(rows=args.train_rows + args.score_rows)
    X, y = G.generate_rows(spec, 0, args.train_rows + args.score_rows)
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = y.astype(np.int64)
    Xt, yt, Xs = X[: args.train_rows], y[: args.train_rows], X[args.train_rows :]
    rows = []
    for name in args.learners.split(","):
        n_train = args.parzen_train_rows if name in ("parzen", "knn") else args.train_rows
        learner = make_learner(name).fit(Xt[:n_train], yt[:n_train])
        base = _baselines(name, learner)
        n_score = args.score_rows // 10 if name in ("parzen", "knn") else args.score_rows
        Xq = Xs[:n_score]
        new = C.median_seconds(lambda: learner.score(Xq), args.repeats)
        old = C.median_seconds(lambda: base(Xq), args.repeats)
        diff = float(np.max(np.abs(learner.score(Xq) - base(Xq))))
        rows.append([name, n_train, n_score, C.fmt(old, 4), C.fmt(new, 4), C.fmt(n_score / new, 0),
                     C.fmt(C.ratio(new, old), 2), f"{diff:.1e}"])
        print(" | ".join(str(v) for v in rows[-1]), flush=True)
    print()
    print(C.markdown_table(["learner", "train rows", "scored rows", "batched s (median)", "row-wise s (median)",
                            "row-wise rows/s", "row-wise / batched", "max |diff|"], rows))


if __name__ == "__main__":
    main()
