"""Newton fits of the linear multiclass scalings (issue 21 §3): matrix scaling and full Dirichlet
calibration on real logits used to stop at L-BFGS's round budget far from their optimum.

Oracles: the Hessian sums against central differences of the gradient; the fitted parameters against
``scipy.optimize.minimize(method="trust-exact")`` on an objective written here from the formula (mean
weighted log loss plus ODIR), on the logits of a multinomial ``LogisticRegression`` trained on the
shipped Pendigits rows -- a case on which the former L-BFGS fit stopped after 450 rounds with a
warning (checked before the change: largest gradient entries 3.5e-4 and 1.5e-3).  Hypothesis: the
per-piece sums, Hessian included, add up to the whole table's on any partitioning.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calengine.reductions.calibrators import fit_by_reduction
from calengine_builtins.calibrators import (DirichletCalibrator, MatrixScalingCalibrator,
                                            VectorScalingCalibrator)
from calengine_builtins.calibrators import multiclass_solvers as solvers

DATA = Path(__file__).resolve().parents[3] / "data"


def _logits(seed, n, k, scale=2.0):
    r = np.random.default_rng(seed)
    y = r.integers(0, k, n)
    Z = r.normal(size=(n, k))
    Z[np.arange(n), y] += 1.5
    return Z * scale, y


@pytest.mark.parametrize("full", [True, False])
def test_hessian_sums_equal_differences_of_the_gradient(full):
    Z, y = _logits(0, 60, 4, scale=3.0)
    w = np.random.default_rng(1).uniform(0.3, 2.0, y.size)
    theta = np.random.default_rng(2).normal(size=20 if full else 8)
    H = solvers.linear_sums(Z, y, w, theta, full, hessian=True)["hess"]
    fd = np.empty_like(H)
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = 1e-6
        fd[:, j] = (solvers.linear_loss_grad(Z, y, w, theta + e, full)[1]
                    - solvers.linear_loss_grad(Z, y, w, theta - e, full)[1]) / 2e-6
    np.testing.assert_allclose(H, fd, atol=1e-6 * np.abs(H).max())
    assert np.array_equal(H, H.T)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 90), cuts=st.lists(st.integers(0, 90), max_size=6),
       full=st.booleans())
def test_sums_of_the_pieces_are_the_sums_of_the_table(seed, n, cuts, full):
    """Loss, gradient and Hessian are sums over rows: merged over any partitioning (empty pieces too)
    they equal the whole table's."""
    Z, y = _logits(seed, n, 3)
    w = np.random.default_rng(seed).integers(0, 3, n).astype(float)
    theta = np.random.default_rng(seed + 1).normal(size=12 if full else 6)
    edges = [0, *sorted(min(c, n) for c in cuts), n]
    whole = solvers.linear_sums(Z, y, w, theta, full, hessian=True)
    parts = [solvers.linear_sums(Z[a:b], y[a:b], w[a:b], theta, full, hessian=True)
             for a, b in zip(edges[:-1], edges[1:])]
    for key in ("loss", "grad", "hess"):
        np.testing.assert_allclose(sum(p[key] for p in parts), whole[key], rtol=1e-12, atol=1e-12)


@functools.cache
def _pendigits_logits():
    """Logits of a multinomial logistic model trained on 2000 shipped Pendigits rows, for the next 800
    (the benchmark's model on a subset; the former L-BFGS fit did not converge on these)."""
    import pandas as pd
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    df = pd.read_parquet(DATA / "pendigits_train.parquet")
    X, y = df.drop(columns="class").to_numpy(float), df["class"].to_numpy()
    model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000)).fit(X[:2000], y[:2000])
    return model.decision_function(X[2000:2800]), np.searchsorted(model.classes_, y[2000:2800])


def _oracle(cal, Z, y):
    """``scipy.optimize.minimize(trust-exact)`` from the identity map on the mean log loss + ODIR,
    written here from the formula with its exact Hessian ``mean(kron(diag p − p pᵀ, x xᵀ))``."""
    from scipy.optimize import minimize
    from scipy.special import logsumexp, softmax

    n, k = Z.shape
    X = np.hstack((Z, np.ones((n, 1))))  # class i's parameters in this order: W[i, :], b[i]
    Y = np.eye(k)[y]
    off = 1.0 - np.eye(k)
    lam, mu = cal.reg_lambda / (k * (k - 1)), cal.reg_mu / k
    pen = np.hstack((2 * lam * off, np.full((k, 1), 2 * mu))).reshape(-1)

    def unpack(v):  # per-class layout [W[i, :], b[i]] for every i
        V = v.reshape(k, k + 1)
        return V[:, :k], V[:, k]

    def fg(v):
        W, b = unpack(v)
        L = Z @ W.T + b
        f = np.mean(logsumexp(L, axis=1) - L[np.arange(n), y]) + lam * np.sum((W * off) ** 2) + mu * b @ b
        G = (softmax(L, axis=1) - Y).T @ X / n  # (k, k + 1)
        return f, G.reshape(-1) + pen * v

    def hess(v):
        W, b = unpack(v)
        P = softmax(Z @ W.T + b, axis=1)
        S = np.einsum("ni,ij->nij", P, np.eye(k)) - np.einsum("ni,nj->nij", P, P)
        H = np.einsum("nij,na,nc->iajc", S, X, X, optimize=True).reshape(k * (k + 1), k * (k + 1)) / n
        return H + np.diag(pen)

    v0 = np.hstack((np.eye(k), np.zeros((k, 1)))).reshape(-1)
    res = minimize(fg, v0, jac=True, hess=hess, method="trust-exact", options={"gtol": 1e-12, "maxiter": 200})
    assert np.max(np.abs(res.jac)) < 1e-10, res.message
    W, b = unpack(res.x)
    return np.concatenate((W.reshape(-1), b))


@pytest.mark.parametrize("cal", [MatrixScalingCalibrator(), DirichletCalibrator()], ids=["matrix", "dirichlet"])
def test_full_maps_converge_on_real_logits_to_scipys_optimum(cal):
    Z, y = _pendigits_logits()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the former fit warned here after 450 rounds
        fitted = fit_by_reduction(cal, [(Z[:300], y[:300], None), (Z[300:], y[300:], None)], "decision",
                                  n_classes=10)
    assert fitted.n_rounds_ <= 30
    Zin = fitted._inputs(Z, "decision")  # Dirichlet: the logits' log-softmax
    expected = _oracle(fitted, Zin, y)
    np.testing.assert_allclose(np.concatenate((fitted.coef_.reshape(-1), fitted.intercept_)), expected, atol=1e-6)


def test_round_budget_ends_with_the_best_point_and_one_warning(monkeypatch):
    Z, y = _logits(3, 400, 3)
    monkeypatch.setattr(solvers, "NEWTON_ROUNDS", 2)
    with pytest.warns(RuntimeWarning, match=r"stopped after 2 of at most 2 rounds before its Newton decrement") as rec:
        cut = VectorScalingCalibrator().fit(Z, y)
    assert len(rec) == 1 and "\n" not in str(rec[0].message)
    monkeypatch.undo()
    full = VectorScalingCalibrator().fit(Z, y)
    assert 2 < full.n_rounds_ <= 20
    assert not np.allclose(cut.coef_, full.coef_, atol=1e-6)


def test_unpenalised_fit_stays_orthogonal_to_the_shift():
    """Without ODIR the map is fixed only up to adding one vector to every logit: the Newton steps
    never move along that shift, so the intercepts keep summing to zero (the start's) and the fit is
    the minimiser closest to the identity map."""
    Z, y = _logits(4, 500, 4)
    cal = MatrixScalingCalibrator(reg_lambda=0.0, reg_mu=0.0).fit(Z, y)
    assert abs(cal.intercept_.sum()) < 1e-9
    np.testing.assert_allclose(cal.coef_.sum(axis=0), np.ones(4), atol=1e-8)


def test_maps_beyond_the_newton_limit_fall_back_to_lbfgs(monkeypatch):
    """Above NEWTON_MAX_PARAMETERS the fit takes L-BFGS rounds (loss and gradient only): on a
    well-conditioned problem it finds Newton's optimum, in more rounds."""
    from calengine_builtins.calibrators import multiclass_scaling

    Z, y = _logits(5, 600, 4)
    newton = MatrixScalingCalibrator(reg_lambda=0.1, reg_mu=0.1).fit(Z, y)
    monkeypatch.setattr(multiclass_scaling, "NEWTON_MAX_PARAMETERS", 19)  # 4 classes: 20 parameters
    seen = []
    cal = MatrixScalingCalibrator(reg_lambda=0.1, reg_mu=0.1)
    step = cal.reduction_step
    cal.reduction_step = lambda stats, request: seen.append(request.get("newton")) or step(stats, request)
    lbfgs = cal.fit(Z, y)
    assert set(seen[1:]) == {False} and len(seen) > newton.n_rounds_ + 1
    np.testing.assert_allclose(lbfgs.coef_, newton.coef_, atol=1e-6)
    np.testing.assert_allclose(lbfgs.intercept_, newton.intercept_, atol=1e-6)
