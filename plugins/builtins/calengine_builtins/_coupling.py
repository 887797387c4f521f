"""The coupling fixed point for every row at once: the solvers behind the ``coupling`` and
``pairwise_coupling`` combiners (private to :mod:`calengine_builtins.combiners`).

:func:`_couple` picks the solver: Newton's method on ``log p`` (:func:`_couple_newton`) where every
weighted column sets one class against one other and those columns link all classes (all-pairs), the
Gauss-Seidel multiplicative sweeps (:func:`_couple_sweeps`) on any other matrix.  Both work on all rows
of a partition in numpy, in place where they can, because scoring runs them on every partition.
"""

from __future__ import annotations

import numpy as np

from calengine_builtins.deferred import expit

#: stands in for 0 in denominators; far below any probability that matters.
_TINY = 1e-300


def _couple_sweeps(R: np.ndarray, M: np.ndarray, w: np.ndarray, tol: float, max_iter: int) -> np.ndarray:
    """The plain coupling sweeps, on all rows at once.  The only solver before issue 12; still the
    solver for matrices that are not one-against-one (one-vs-all, ECOC, k-1), and the reference that
    :func:`_couple_newton` is tested and benchmarked against (same fixed point, reached thousands of
    sweeps later on all-pairs rows with tiny ``p``, or not within ``max_iter`` at all).

    ``rhat`` and every update ratio are invariant to rescaling ``p``, so renormalising after each
    class (the textbook order) and once per sweep give the same iterates; we renormalise per sweep.
    Work per class update is kept to what it changes: the running sums ``s_in[b] = sum_{I_b} p`` and
    ``s_all[b] = sum_{I_b u J_b} p`` (class/column-major, so each is a contiguous row) are corrected
    only in the columns where the class is non-zero, and on a matrix without zeros ``s_all`` is just
    ``sum p``.  A column whose classes all have zero mass gets ``rhat = 0`` (``_TINY`` in the
    denominator) and a zero update denominator is raised to ``_TINY``; both only happen to classes
    whose probability has underflowed to 0, whose update is then 0.

    Every sweep works in place, in arrays (:class:`_SweepArrays`) allocated only when a quarter of the
    rows have finished and are dropped: computed as expressions, the class updates made about six temporaries of the rows'
    width per class, and a worker started with ``MALLOC_TRIM_THRESHOLD_=65536`` (glibc's mmap
    threshold then stays at 128 KiB) mapped and faulted in every one -- one-vs-all on 20,000 rows took
    3.4 times as long there as in the client, sparse ECOC 5.4 times.  The iterates are those of the
    expression form to round-off (1e-16).
    """
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
    coef_of = [coef[i, cols[i]] for i in range(k)]
    width = max(c.size for c in cols)
    pos_t, used_t = np.ascontiguousarray(pos.T), np.ascontiguousarray((pos + neg).T)
    p = np.full((k, R.shape[0]), 1.0 / k)
    todo = np.arange(R.shape[0])
    x, nm = p.copy(), num  # the unfinished rows' p and numerators, compacted when rows finish
    live = np.ones(x.shape[1], dtype=bool)  # rows of x not yet finished (finished ones are in p)
    work = _SweepArrays(k, x.shape[1], l, width)
    for _ in range(max_iter):
        if not live.any():
            break
        np.copyto(work.start, x)
        s_in, s_all, total = work.s_in, work.s_all, work.total
        np.matmul(pos_t, x, out=s_in)  # (l, m), recomputed each sweep so round-off cannot build up
        if dense:
            np.sum(x, axis=0, out=total)
        else:
            np.matmul(used_t, x, out=s_all)
        den, delta, part_in, part_all = work.den, work.delta, work.part_in, work.part_all
        for i in range(k):
            if dense:
                np.matmul(coef[i], s_in, out=den)
                np.add(total, _TINY, out=delta)
                den /= delta
            else:
                c = cols[i]
                q_in, q_all = part_in[: c.size], part_all[: c.size]
                np.take(s_in, c, axis=0, out=q_in, mode="clip")
                np.take(s_all, c, axis=0, out=q_all, mode="clip")
                q_all += _TINY
                q_in /= q_all
                np.matmul(coef_of[i], q_in, out=den)
            den += base[i]
            np.maximum(den, _TINY, out=den)
            np.divide(nm[i], den, out=den)
            den -= 1.0
            np.multiply(x[i], den, out=delta)
            x[i] += delta
            for b in plus[i]:
                s_in[b] += delta
            if dense:
                total += delta
            else:
                for b in cols[i]:
                    s_all[b] += delta
        np.sum(x, axis=0, out=den)
        x /= den
        change = work.start
        np.subtract(x, change, out=change)
        np.abs(change, out=change)
        np.max(change, axis=0, out=delta)
        finished = live & (delta < tol)
        if finished.any():
            p[:, todo[finished]] = x[:, finished]
            live &= ~finished
            # finished rows ride along (their result is saved) until a quarter of the block has
            # finished: compacting at every finish would reallocate everything nearly every sweep
            if 4 * (live.size - np.count_nonzero(live)) >= live.size and live.any():
                todo, x, nm = todo[live], x[:, live], nm[:, live]
                live = np.ones(x.shape[1], dtype=bool)
                work = _SweepArrays(k, x.shape[1], l, width)
    p[:, todo[live]] = x[:, live]
    return p.T


class _SweepArrays:
    """The work arrays of one sweep over ``m`` unfinished rows (see :func:`_couple_sweeps`)."""

    def __init__(self, k: int, m: int, l: int, width: int):
        self.start = np.empty((k, m))  # p at the sweep's start, then how far it moved
        self.s_in, self.s_all = np.empty((l, m)), np.empty((l, m))
        self.total, self.den, self.delta = np.empty(m), np.empty(m), np.empty(m)
        self.part_in, self.part_all = np.empty((width, m)), np.empty((width, m))


def _couple(R: np.ndarray, M: np.ndarray, w: np.ndarray, tol: float, max_iter: int) -> np.ndarray:
    """The coupling fixed point for all rows at once, by the fastest solver that keeps it unchanged.

    Where every weighted column sets one class against one other and those columns link all classes
    (all-pairs, possibly with some columns weighted 0), the fixed point is the minimum of a convex
    function of ``log p`` and Newton's method finds it in about ten steps (:func:`_couple_newton`).
    Any other matrix runs the Gauss-Seidel sweeps themselves (:func:`_couple_sweeps`): there the
    columns' implied numerators and denominators need not balance (``sum_i num_i != sum_i den_i``), so
    the sweep's fixed point depends on the update order (one-vs-all r = (0.7, 0.4, 0.1) gives
    (0.6507, 0.3272, 0.0221) in Gauss-Seidel order, (0.6458, 0.3333, 0.0208) in Jacobi order) and
    minimises nothing we could hand to Newton.
    """
    if R.shape[0] == 0:
        return np.zeros((0, M.shape[0]))
    if _pairwise_linked(M, w):
        return _couple_newton(R, M, w, tol, max_iter)
    return _couple_sweeps(R, M, w, tol, max_iter)


def _pairwise_linked(M: np.ndarray, w: np.ndarray) -> bool:
    """Whether the columns with weight > 0 are all one-against-one and link every class."""
    used = M[:, w > 0]
    if not (((used == 1).sum(axis=0) == 1).all() and ((used == -1).sum(axis=0) == 1).all()):
        return False
    k = M.shape[0]
    group = list(range(k))  # union-find over classes, one union per column

    def root(c: int) -> int:
        while group[c] != c:
            group[c] = group[group[c]]
            c = group[c]
        return c

    for a, c in zip(np.argmax(used == 1, axis=0).tolist(), np.argmax(used == -1, axis=0).tolist()):
        group[root(a)] = root(c)
    return len({root(c) for c in range(k)}) == 1


def _couple_newton(R: np.ndarray, M: np.ndarray, w: np.ndarray, tol: float, max_iter: int) -> np.ndarray:
    """Hastie & Tibshirani's coupling by Newton's method on ``theta = log p``, every row at once.

    With one class ``a`` against one ``c`` per column, ``rhat_b = sigmoid(theta_a - theta_c)`` and the
    weighted log loss ``f(theta) = sum_b n_b [r_b softplus(-z_b) + (1 - r_b) softplus(z_b)]``,
    ``z_b = theta_a - theta_c``, is convex (a Bradley-Terry likelihood).  Its gradient is exactly
    ``den - num`` of the multiplicative update, so its minimum is the update's fixed point; its
    Hessian is the graph Laplacian with edge weights ``n_b rhat_b (1 - rhat_b)``, positive definite
    once ``1 1^T`` is added for the one direction (a constant shift of ``theta``) that changes
    nothing.  Steps are halved until ``f`` falls enough (Armijo), so the first steps from the uniform
    start, where a row's estimates may be 1e-7 and the quadratic model poor, cannot overshoot.

    The block stops when one multiplicative update would move no ``p_i`` of any row by ``tol`` or
    more -- the plain iteration's own stopping rule -- but only after the Newton step taken from that
    point, which near the optimum squares the error for almost nothing (on Pendigits the result
    matches 100,000 plain sweeps to 1e-15).  ``max_iter`` caps the Newton steps (~10 suffice on
    Pendigits).  Rows that are done keep taking (vanishing) steps with the rest of their block:
    dropping them would copy every array at every step.
    """
    used = w > 0
    Mu, wu, Ru = M[:, used], w[used], R[:, used]
    k = Mu.shape[0]
    newton = _Newton(Mu, wu, min(R.shape[0], _BLOCK_ROWS))
    out = np.empty((R.shape[0], k))
    for start in range(0, R.shape[0], _BLOCK_ROWS):
        rows = slice(start, start + _BLOCK_ROWS)
        out[rows] = newton.solve(Ru[rows], tol, max_iter)
    return out


#: rows per block of :func:`_couple_newton`; bounds its work arrays (~100 doubles a row for k = 10)
_BLOCK_ROWS = 4096


class _Newton:
    """Work arrays and steps of :func:`_couple_newton`, allocated once per call and reused.

    Every array of a step is written in place (``out=``): a worker started with
    ``MALLOC_TRIM_THRESHOLD_`` has glibc's mmap threshold pinned at 128 KiB, so each temporary of a
    few thousand rows x 45 columns would be mapped, faulted in and unmapped again (measured: twice the
    time of the same code in the client).  Only the batched solve still allocates.
    """

    def __init__(self, M: np.ndarray, w: np.ndarray, rows: int):
        k, l = M.shape
        self.w = w
        self.D = (M == 1).astype(np.float64) - (M == -1).astype(np.float64)  # (k, l): z = theta @ D
        self.A = (M == 1).astype(np.float64).T  # (l, k)
        self.C = (M == -1).astype(np.float64).T
        # (l, k*k): the outer product d_b d_b^T of each column, so the Hessians are one matrix product
        self.outer = np.einsum("ib,jb->bij", self.D, self.D).reshape(l, k * k)
        self.pos, self.neg = (M == 1).astype(np.float64).T, (M == -1).astype(np.float64).T
        self.bufs = {
            "z": (rows, l), "mu": (rows, l), "nu": (rows, l), "tmp": (rows, l), "tmp2": (rows, l),
            "num": (rows, k), "den": (rows, k), "den2": (rows, k), "grad": (rows, k),
            "trial": (rows, k), "best": (rows, k), "theta": (rows, k), "H": (rows, k * k),
            "f0": (rows,), "f1": (rows,), "t": (rows,), "slope": (rows,),
        }
        self.bufs = {name: np.empty(shape) for name, shape in self.bufs.items()}

    def solve(self, R: np.ndarray, tol: float, max_iter: int) -> np.ndarray:
        n, k = R.shape[0], self.D.shape[0]
        b = {name: a[:n] for name, a in self.bufs.items()}
        z, mu, nu, tmp, den, den2, grad, theta, H = (
            b["z"], b["mu"], b["nu"], b["tmp"], b["den"], b["den2"], b["grad"], b["theta"], b["H"])
        num = b["num"]
        np.matmul(R * self.w, self.pos, out=num)
        np.matmul((1.0 - R) * self.w, self.neg, out=den)
        num += den
        theta.fill(-np.log(k))
        diag = np.arange(k)
        first = True
        for _ in range(max_iter):
            np.matmul(theta, self.D, out=z)
            expit(z, out=mu)  # rhat, and below 1 - rhat: both accurate in their tails
            np.negative(z, out=nu)
            expit(nu, out=nu)
            np.multiply(mu, self.w, out=tmp)
            np.matmul(tmp, self.A, out=den)
            np.multiply(nu, self.w, out=tmp)
            np.matmul(tmp, self.C, out=den2)
            den += den2
            np.subtract(den, num, out=grad)
            # how far one multiplicative update would move each p_i (the stopping rule)
            np.maximum(den, _TINY, out=den2)
            np.divide(num, den2, out=den2)
            den2 -= 1.0
            np.exp(theta, out=b["trial"])
            den2 *= b["trial"]
            np.abs(den2, out=den2)
            done = den2.max() < tol
            np.multiply(mu, nu, out=tmp)
            tmp *= self.w
            np.matmul(tmp, self.outer, out=H)
            H += 1.0
            H3 = H.reshape(n, k, k)
            # a class outweighed ~1e60 to 1 has a numerically zero Hessian row; the ridge keeps the
            # solve defined and only slows classes far below any tolerance on p
            H3[:, diag, diag] += 1e-14 * H3[:, diag, diag].max(axis=1, keepdims=True)
            np.negative(grad, out=den2)
            step = np.linalg.solve(H3, den2[:, :, None])[:, :, 0]
            if first:  # later, the line search leaves the loss at the point it accepted in f0
                self._loss(z, R, b["f0"], b)
                first = False
            self._armijo(step, R, b)
            _log_normalise_into(b["best"], theta, b["trial"])
            if done:
                break
        return np.exp(theta)

    def _loss(self, z: np.ndarray, R: np.ndarray, out: np.ndarray, b: dict) -> None:
        """Per-row weighted log loss of column probabilities ``sigmoid(z)`` against ``R``:
        ``r softplus(-z) + (1 - r) softplus(z) = softplus(z) - r z``."""
        tmp, tmp2 = b["tmp"], b["tmp2"]
        np.logaddexp(0.0, z, out=tmp)
        np.multiply(R, z, out=tmp2)
        tmp -= tmp2
        np.matmul(tmp, self.w, out=out)

    def _armijo(self, step: np.ndarray, R: np.ndarray, b: dict, tries: int = 40) -> None:
        """``best = theta + t step`` with, per row, the largest ``t`` in 1, 1/2, 1/4, ... that lowers
        the loss by at least ``1e-4 t |grad . step|``; a row that never does keeps ``theta``.
        Round-off in ``f`` is allowed for, so a row already at its optimum still takes its (tiny)
        full step instead of halving for ever.  ``f0`` is left holding the loss at ``best`` (the
        loss does not change when ``theta`` is shifted to sum to 1), saving one evaluation a step."""
        theta, trial, best, z = b["theta"], b["trial"], b["best"], b["z"]
        f0, f1, t, slope = b["f0"], b["f1"], b["t"], b["slope"]
        np.einsum("ij,ij->i", b["grad"], step, out=slope)  # < 0: H is positive definite
        slack = 1e-13 * (1.0 + np.abs(f0))
        np.copyto(best, theta)
        t.fill(1.0)
        pending = np.ones(theta.shape[0], dtype=bool)
        for _ in range(tries):
            np.multiply(step, t[:, None], out=trial)
            trial += theta
            np.matmul(trial, self.D, out=z)
            self._loss(z, R, f1, b)
            ok = pending & (f1 <= f0 + 1e-4 * t * slope + slack)
            np.copyto(best, trial, where=ok[:, None])
            np.copyto(f0, f1, where=ok)  # only rows that are no longer pending
            pending &= ~ok
            if not pending.any():
                break
            t[pending] *= 0.5


def _log_normalise_into(theta: np.ndarray, out: np.ndarray, work: np.ndarray) -> None:
    """``out = theta - log(sum(exp(theta)))`` per row, through ``work``: ``exp(out)`` sums to 1."""
    top = theta.max(axis=1, keepdims=True)
    np.subtract(theta, top, out=work)
    np.exp(work, out=work)
    top += np.log(work.sum(axis=1, keepdims=True))
    np.subtract(theta, top, out=out)
