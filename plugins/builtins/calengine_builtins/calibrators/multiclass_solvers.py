"""Solvers of the linear multiclass scalings (``vector_scaling``, ``matrix_scaling``, ``dirichlet``):
the per-row sums each reduction round returns, and the client-side steps that turn them into the
next trial point (split from :mod:`.multiclass_scaling`, which holds the calibrators).

Newton (the default, :func:`newton_update`).  Each round every piece returns the weighted log loss of
``softmax(W z + b)`` on its rows, its gradient and its Hessian in the parameters (:func:`linear_sums`):
``k(k+1)`` parameters for a full ``W`` (110 for 10 classes, 420 for 20), ``2k`` for a diagonal one, so
the Hessian sums are small next to the rows.  The client adds the ODIR penalty and takes a Newton step
with a backtracking (Armijo) line search.  Logits make the Hessian badly scaled (a slope's curvature
grows with ``z²``, an intercept's does not; log-probabilities near ``ln 1e-12`` couple every slope
with its intercept) and, without a penalty, singular (softmax ignores one constant added to every
logit; logits of a multinomial model that sum to zero per row add more such directions).  The client
therefore solves in Jacobi-scaled coordinates (``D^{-1/2} H D^{-1/2}``, ``D = diag H``) by a symmetric
eigendecomposition, treats eigenvalues below :data:`NULL_EIGENVALUE` of the largest as a null space
of the objective, and projects every step orthogonally off that null space: the iterates stay on
``θ0 + null(H)^⊥``, as gradient methods' do, so an unpenalised fit still ends at the minimiser
closest to the identity map (what ``scipy.optimize`` started at the same point finds).

Convergence: the Newton decrement ``δ² = g·H⁺g`` of the objective (the weighted *mean* log loss plus
penalty, so it is per unit of row weight and does not grow with the rows) at most
:data:`NEWTON_DECREMENT`; the fit then returns that point plus its last Newton step (a change of the
objective far below its rounding).  Near the optimum, where rounding hides the objective's decrease,
a full step is also accepted when it lowers ``δ²``.  A step is at most :data:`MAX_STEP` in every
parameter (far from the optimum a nearly flat direction can ask for a huge one).  Where the infimum
is approached, not attained (separable classes without a penalty on the slopes), the fit ends as
converged at the first point whose largest gradient entry is at most :data:`FLAT_GRADIENT` (with its
Newton step when ``δ² ≤ 1e-14``, the quadratic phase), or where no step longer than 1e-12 of the
parameters lowers the objective and the gradient is that flat.  Budget: :data:`NEWTON_ROUNDS` rounds; a fit that
hits it keeps its best point and warns in one line (real logits converge in tens of rounds:
``benchmarks/results/multiclass_scaling.md``).

L-BFGS (:func:`lbfgs_update`) is kept for parameter vectors longer than :data:`NEWTON_MAX_PARAMETERS`
(full maps of more than 32 classes, diagonal ones of more than 550), whose Hessians would cost more
per row than the rows themselves; it is slow on badly conditioned logits and ends at
:data:`MAX_EVALUATIONS` rounds with a warning.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: parameters up to which the fit is Newton's (the Hessian is p² floats per piece and O(n p²) flops)
NEWTON_MAX_PARAMETERS = 1100
#: Newton decrement ``g·H⁺g`` (objective per unit weight) at which the fit has converged
NEWTON_DECREMENT = 1e-20
#: largest gradient entry at which a point no step can improve (at rounding) counts as converged
FLAT_GRADIENT = 1e-10
#: the largest change of one parameter in one Newton step
MAX_STEP = 10.0
#: reduction rounds a Newton fit may take (each is one pass over the rows), below the engine's 500
NEWTON_ROUNDS = 200
#: Jacobi-scaled Hessian eigenvalues below this fraction of the largest span the objective's null space
NULL_EIGENVALUE = 1e-12
#: rows per block when a piece's Hessian sums are formed (bounds the block's (rows, k·m) array)
_BLOCK_FLOATS = 1 << 21


def linear_map(theta: np.ndarray, k: int, full: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(W, b)`` of a parameter vector: ``W`` the k×k matrix (full) or its diagonal (vector form)."""
    if full:
        return theta[: k * k].reshape(k, k), theta[k * k:]
    return theta[:k], theta[k:]


def linear_logits(Z: np.ndarray, W: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``z W^T + b`` (full ``W``) or ``z * w + b`` (a diagonal given as a vector).

    The full product is summed over ``z``'s entries in index order, one column at a time, not by
    ``Z @ W.T``: BLAS picks kernels by shape (a lone row goes through gemv, a batch through gemm), so
    the same row got other last bits in another batch, and a calibrated probability must be the same
    bits whatever rows are predicted with it (the plugin kit checks it)."""
    Z = np.asarray(Z, dtype=np.float64)
    if W.ndim != 2:
        return Z * W + b
    out = np.multiply(Z[:, :1], W[:, 0])
    for j in range(1, Z.shape[1]):
        out += Z[:, j:j + 1] * W[:, j]
    return out + b


def _softmax_residual(Z, yi, w, theta, full):
    k = Z.shape[1]
    W, b = linear_map(theta, k, full)
    L = linear_logits(Z, W, b)
    m = L.max(axis=1, keepdims=True)
    E = np.exp(L - m)
    tot = E.sum(axis=1, keepdims=True)
    rows = np.arange(Z.shape[0])
    loss = float(np.sum(w * (np.log(tot[:, 0]) + m[:, 0] - L[rows, yi])))
    P = E / tot
    R = P.copy()
    R[rows, yi] -= 1.0
    R *= w[:, None]
    return loss, P, R


def linear_loss_grad(Z: np.ndarray, yi: np.ndarray, w: np.ndarray, theta: np.ndarray, full: bool):
    """Weighted multinomial log loss ``Σ w (logsumexp(l) − l_y)`` of ``l = linear_logits`` and its gradient
    in the parameters (same layout as ``theta``)."""
    loss, _, R = _softmax_residual(Z, yi, w, theta, full)
    gW = (R.T @ Z).reshape(-1) if full else np.sum(R * Z, axis=0)
    return loss, np.concatenate((gW, R.sum(axis=0)))


def _hessian_order(k: int, full: bool) -> np.ndarray:
    """Position in ``theta`` of each (class i, feature a) parameter of the per-class layout below."""
    i = np.arange(k)[:, None]
    if full:  # features z_0..z_{k-1}, 1: W[i, a] at i*k + a, b[i] at k*k + i
        a = np.arange(k + 1)[None, :]
        return np.where(a < k, i * k + a, k * k + i).reshape(-1)
    return np.column_stack((np.arange(k), k + np.arange(k))).reshape(-1)  # features z_i, 1


def linear_hessian(Z: np.ndarray, w: np.ndarray, P: np.ndarray, full: bool) -> np.ndarray:
    """Hessian of the weighted log loss in the parameters (``theta``'s layout), given ``P = softmax(l)``.

    Class ``i``'s logit is ``V_i · F_i`` with per-class features ``F_i = (z, 1)`` (full) or ``(z_i, 1)``
    (diagonal), and the per-row Hessian in the logits is ``diag(p) − p pᵀ``, so
    ``H[(i,a),(j,c)] = Σ w (δ_ij p_i − p_i p_j) F_ia F_jc``: a block diagonal ``Σ w p_i F_i F_iᵀ`` minus
    ``Uᵀ diag(w) U`` with ``U[n, (i,a)] = p_ni F_nia``, summed over blocks of rows."""
    n, k = Z.shape
    m = k + 1 if full else 2
    H = np.zeros((k * m, k * m))
    block = max(1, _BLOCK_FLOATS // (k * m))
    for lo in range(0, n, block):
        z, p, ww = Z[lo: lo + block], P[lo: lo + block], w[lo: lo + block]
        ones = np.ones((z.shape[0], 1))
        if full:
            X = np.hstack((z, ones))
            F = np.broadcast_to(X[:, None, :], (z.shape[0], k, m))
            D = np.einsum("ni,na,nc->iac", ww[:, None] * p, X, X, optimize=True)
        else:
            F = np.stack((z, np.broadcast_to(ones, z.shape)), axis=2)
            D = np.einsum("ni,nia,nic->iac", ww[:, None] * p, F, F, optimize=True)
        U = (p[:, :, None] * F).reshape(z.shape[0], k * m)
        H -= U.T @ (U * ww[:, None])
        for i in range(k):
            H[i * m:(i + 1) * m, i * m:(i + 1) * m] += D[i]
    order = _hessian_order(k, full)
    out = np.empty_like(H)
    out[np.ix_(order, order)] = H
    return (out + out.T) / 2.0  # symmetric to the bit (the block sums are only to rounding)


def linear_sums(Z, yi, w, theta, full: bool, hessian: bool) -> dict[str, Any]:
    """One piece's sums for a round: ``loss`` and ``grad`` (always), ``hess`` (Newton rounds)."""
    loss, P, R = _softmax_residual(Z, yi, w, theta, full)
    gW = (R.T @ Z).reshape(-1) if full else np.sum(R * Z, axis=0)
    out = {"op": "eval", "loss": loss, "grad": np.concatenate((gW, R.sum(axis=0)))}
    if hessian:
        out["hess"] = linear_hessian(Z, w, P, full)
    return out


# ------------------------------------------------------------------------------------------ Newton


def newton_direction(H: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, float]:
    """The Newton step ``−H⁺g`` off the null space of ``H`` (see the module docstring) and the
    decrement ``g·H⁺g``."""
    diag = np.diag(H).copy()
    top = float(np.max(np.abs(diag))) if diag.size else 0.0
    if not top > 0:
        return np.zeros_like(g), 0.0
    s = 1.0 / np.sqrt(np.maximum(diag, top * NULL_EIGENVALUE))  # a flatter entry is null space anyway
    vals, vecs = np.linalg.eigh(H * s[:, None] * s[None, :])
    live = vals > NULL_EIGENVALUE * max(float(vals[-1]), 0.0)
    V = vecs[:, live]
    d = -s * (V @ ((V.T @ (s * g)) / vals[live]))
    null = vecs[:, ~live]
    if null.shape[1]:
        Q, _ = np.linalg.qr(s[:, None] * null)  # null(H) = D^{-1/2} null(D^{-1/2} H D^{-1/2})
        d -= Q @ (Q.T @ d)
    return d, max(-float(g @ d), 0.0)


def newton_start(theta0: np.ndarray) -> dict[str, Any]:
    """Newton with a backtracking line search, driven one evaluation (reduction round) at a time."""
    return {"x": np.asarray(theta0, dtype=np.float64), "trial": np.asarray(theta0, dtype=np.float64),
            "f": None, "evals": 0, "step": 1.0, "budget": NEWTON_ROUNDS}


def newton_update(st: dict[str, Any], f: float, g: np.ndarray, H: np.ndarray):
    """The next trial point, or None when the fit is over: ``st["x"]`` is then the answer and
    ``st["converged"]`` says whether a convergence rule ended it (not the round budget or a line
    search that found no decrease where the gradient is not flat)."""
    st["evals"] += 1
    first = st["f"] is None
    finite = bool(np.isfinite(f) and np.all(np.isfinite(g)) and np.all(np.isfinite(H)))
    if not finite and first:  # logits beyond float range: the identity map is all there is
        st.update(g=g, converged=False)
        return None
    d, dec = newton_direction(H, g) if finite else (None, np.inf)
    armijo = finite and not first and f <= st["f"] + 1e-4 * st["step"] * st["slope"]
    rounding = not first and st["step"] == 1.0 and st["dec"] <= 1e-10 and dec < st["dec"]
    if first or armijo or rounding:
        st.update(x=st["trial"], f=f, g=g, dec=dec, step=1.0)
        if dec <= NEWTON_DECREMENT or (dec <= 1e-14 and float(np.max(np.abs(g))) <= FLAT_GRADIENT):
            st["x"], st["converged"] = st["x"] + d, True  # its last Newton step: quadratic convergence
            return None
        if float(np.max(np.abs(g))) <= FLAT_GRADIENT:  # an infimum approached along a ray, not attained
            st["converged"] = True
            return None
        st["d"] = d * min(1.0, MAX_STEP / max(float(np.max(np.abs(d))), 1e-300))
        st["slope"] = float(g @ st["d"])
    else:  # backtrack: the minimiser of the quadratic through f(x), its slope and f(trial), kept in [t/10, t/2]
        t, slope = st["step"], st["slope"]
        curv = f - st["f"] - t * slope if finite else np.inf
        t_new = -slope * t * t / (2.0 * curv) if curv > 0 else t / 2.0
        st["step"] = min(max(t_new, t / 10.0), t / 2.0)
        if st["step"] * float(np.max(np.abs(st["d"]))) < 1e-12 * (1.0 + float(np.max(np.abs(st["x"])))):
            st["converged"] = float(np.max(np.abs(st["g"]))) <= FLAT_GRADIENT  # no decrease left at rounding
            return None
    if st["evals"] >= st["budget"]:
        st["converged"] = False
        return None
    st["trial"] = st["x"] + st["step"] * st["d"]
    return st["trial"]


# ------------------------------------------------------------------------------------------ L-BFGS

def lbfgs_start(theta0: np.ndarray) -> dict[str, Any]:
    """L-BFGS (memory 10, backtracking Armijo line search) driven one evaluation at a time: each trial
    point costs one reduction round returning the objective and its gradient (sums over the rows)."""
    return {"x": np.asarray(theta0, dtype=np.float64), "trial": np.asarray(theta0, dtype=np.float64),
            "f": None, "s": [], "y": [], "it": 0, "step": 1.0}


def _lbfgs_direction(st: dict[str, Any]) -> np.ndarray:
    q = -st["g"].copy()
    alphas = []
    for s, y in zip(reversed(st["s"]), reversed(st["y"])):
        a = float(s @ q) / float(y @ s)
        alphas.append(a)
        q -= a * y
    if st["s"]:
        s, y = st["s"][-1], st["y"][-1]
        q *= float(s @ y) / float(y @ y)
    else:
        q /= max(1.0, float(np.max(np.abs(q))))
    for (s, y), a in zip(zip(st["s"], st["y"]), reversed(alphas)):
        b = float(y @ q) / float(y @ s)
        q += (a - b) * s
    return q


#: evaluations (reduction rounds) an L-BFGS fit may take: below the engine's 500-round bound on any
#: reduction, so a slow fit ends with its best point instead of an error
MAX_EVALUATIONS = 450


def lbfgs_update(st: dict[str, Any], f: float, g: np.ndarray, gtol: float = 1e-10, max_it: int = 2000):
    """The next trial point, or None once converged (``st["x"]`` is the answer, the best point
    accepted): the largest gradient entry below ``gtol`` (or below ``100 gtol`` after three steps that
    decreased the objective by no more than rounding), no decrease left at machine precision, ``max_it``
    steps or :data:`MAX_EVALUATIONS` evaluations.
    ``st["converged"]`` says whether a gradient rule ended it."""
    st["evals"] = st.get("evals", 0) + 1
    if st["f"] is not None:
        d = st["d"]
        if f <= st["f"] + 1e-4 * st["step"] * float(st["g"] @ d):
            flat = st["f"] - f <= 1e-15 * max(1.0, abs(f))
            st["flat"] = st.get("flat", 0) + 1 if flat else 0
            s, y = st["trial"] - st["x"], g - st["g"]
            if float(s @ y) > 1e-16 * float(y @ y):
                st["s"].append(s)
                st["y"].append(y)
                st["s"], st["y"] = st["s"][-10:], st["y"][-10:]
            st["x"], st["f"], st["g"] = st["trial"], f, g
        else:
            st["step"] /= 2.0
            if st["step"] < 1e-12 or st["evals"] >= MAX_EVALUATIONS:
                st["converged"] = st["step"] < 1e-12
                return None  # no decrease left at this precision, or out of rounds: the best point so far
            st["trial"] = st["x"] + st["step"] * d
            return st["trial"]
    else:
        st["f"], st["g"] = f, g
    st["it"] += 1
    gmax = float(np.max(np.abs(st["g"])))
    if gmax <= gtol or (st.get("flat", 0) >= 3 and gmax <= 1e2 * gtol):
        st["converged"] = True
        return None  # converged, or steps without a decrease that matters near the optimum
    if st["it"] > max_it or st["evals"] >= MAX_EVALUATIONS:
        st["converged"] = False
        return None
    d = _lbfgs_direction(st)
    if float(st["g"] @ d) >= 0.0:
        st["s"], st["y"] = [], []
        d = -st["g"] / max(1.0, float(np.max(np.abs(st["g"]))))
    st["d"], st["step"] = d, 1.0
    st["trial"] = st["x"] + d
    return st["trial"]
