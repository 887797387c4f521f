"""Built-in combiners: class probabilities from calibrated binary estimates on a code matrix.

Notation (``calengine.base.Combiner``): ``M`` is ``(k, l)`` in {-1, 0, +1}; for column ``b``,
``I_b`` = classes with +1 and ``J_b`` = classes with -1; ``R[i, b] = r_b`` estimates
``sum_{I_b} p / sum_{I_b u J_b} p``; ``counts[b] = n_b`` is the number of training examples of
column ``b``.  Every combiner returns ``(n, k)`` non-negative rows summing to 1 and works on all
``n`` rows at once in numpy, because it runs on every partition of the data being scored.

Which combiner for which matrix:

==================  =====================================================================
normalize           one-vs-all only; ``p_c = r_c / sum r`` (Zadrozny & Elkan's advice for OVA)
least_squares       any matrix; squared error of the linearised constraints on the simplex
coupling            any matrix; Zadrozny's (2001) log-loss coupling, weighted by ``n_b``
pairwise_coupling   all-pairs only; Hastie & Tibshirani (1998), i.e. ``coupling`` on all-pairs
wu_lin_weng         all-pairs only; Wu, Lin & Weng (2004) method 2, as libsvm / scikit-learn SVC
k_minus_one         Probing's k-1 matrix only; the last class takes what the others leave
==================  =====================================================================
"""

from __future__ import annotations

import numpy as np

from calengine import hookimpl
from calengine_builtins.deferred import expit
from calengine.base import Combiner
from calengine.methods.codematrix import is_all_pairs, is_k_minus_one, is_one_vs_all, validate_matrix
from calengine.errors import CodeMatrixError, ParameterError

#: libsvm's clip for pairwise estimates: keeps logs and multiplicative updates away from 0 and 1.
R_CLIP = 1e-7
#: stands in for 0 in denominators; far below any probability that matters.
_TINY = 1e-300


# --------------------------------------------------------------------------------------------------
# shared plumbing


def _matrix(M) -> np.ndarray:
    M = np.asarray(M)
    if M.ndim != 2:
        raise CodeMatrixError(f"the code matrix must be 2-D (classes x columns), got shape {M.shape}")
    return validate_matrix(M, M.shape[0])


def _estimates(R, M: np.ndarray) -> np.ndarray:
    """``R`` as a float ``(n, l)`` array matching ``M``'s columns, without NaN."""
    R = np.asarray(R, dtype=np.float64)
    if R.ndim != 2 or R.shape[1] != M.shape[1]:
        raise ParameterError(
            f"binary estimates must have shape (n, {M.shape[1]}) -- one column per code-matrix "
            f"column -- but have shape {R.shape}"
        )
    if not np.isfinite(R).all():
        raise ParameterError(
            "binary estimates contain NaN or infinity; every calibrated column estimate must be a "
            "number in [0, 1]"
        )
    return R


def _counts(counts, l: int) -> np.ndarray:
    if counts is None:
        return np.ones(l)
    n = np.asarray(counts, dtype=np.float64)
    if n.shape != (l,) or not np.isfinite(n).all() or (n < 0).any():
        raise ParameterError(
            f"counts must be {l} non-negative numbers (training examples per code-matrix column), "
            f"got shape {n.shape}"
        )
    if not (n > 0).any():
        raise ParameterError("counts are all zero; give the number of training examples per column")
    return n


def _to_simplex(P: np.ndarray) -> np.ndarray:
    """Clear round-off (tiny negatives), renormalise rows; a row with no mass becomes uniform."""
    P = np.where(np.isfinite(P), np.maximum(P, 0.0), 0.0)
    s = P.sum(axis=1, keepdims=True)
    k = P.shape[1]
    return np.where(s > 0, P / np.where(s > 0, s, 1.0), 1.0 / k)


def _wrong_matrix(name: str, needs: str, hint: str) -> CodeMatrixError:
    return CodeMatrixError(
        f"combiner '{name}' needs {needs} matrix; use --multiclass {hint}:{name} or choose "
        "least_squares/coupling, which accept any code matrix"
    )


def _pair_matrix(R: np.ndarray, M: np.ndarray, clip: float) -> np.ndarray:
    """``(n, k, k)`` array of ``r_ij = P(i | x, x in {i, j})`` from an all-pairs matrix (any column
    order or sign), clipped to ``[clip, 1 - clip]``; the diagonal is 0."""
    n, k = R.shape[0], M.shape[0]
    Rc = np.clip(R, clip, 1.0 - clip)
    i, j = np.argmax(M == 1, axis=0), np.argmax(M == -1, axis=0)
    r = np.zeros((n, k, k))
    r[:, i, j] = Rc
    r[:, j, i] = 1.0 - Rc
    return r


# --------------------------------------------------------------------------------------------------
# normalisation and k-1


class Normalize(Combiner):
    """One-vs-all normalisation: ``p_c = r_c / sum_d r_d``.

    Column ``c`` of a one-vs-all matrix estimates ``P(c | x)`` directly, so the only repair needed is
    making the row sum to 1; Zadrozny & Elkan (2002) found it as good as the iterative methods once the
    columns are calibrated, and it is what scikit-learn's ``CalibratedClassifierCV`` does.  Estimates
    are clipped to [0, 1] first; a row whose estimates are all 0 becomes uniform ``1/k``.
    """

    name = "normalize"

    def check_matrix(self, M) -> None:
        M = _matrix(M)
        if not is_one_vs_all(M):
            raise _wrong_matrix(self.name, "a one-vs-all", "one_vs_all")

    def combine(self, R, M, counts=None) -> np.ndarray:
        M = _matrix(M)
        self.check_matrix(M)
        R = np.clip(_estimates(R, M), 0.0, 1.0)
        column_of_class = np.argsort(np.argmax(M == 1, axis=0))
        return _to_simplex(R[:, column_of_class])


class KMinusOne(Combiner):
    """Probing's multiclass rule: ``p_l = r_l`` for the k-1 classes with a column, the last class
    gets ``1 - sum``.

    Each column is "class l against everything", so ``r_l`` already estimates ``P(l | x)``.  The
    remainder can go negative when the estimates over-commit.  **Deviation from the paper** (which
    leaves it at that): estimates are clipped to [0, 1], and if the remainder is below ``floor``
    (default 0.001) it is set to ``floor`` and the other classes are rescaled to sum ``1 - floor``,
    so every class keeps a usable, non-zero probability (log loss stays finite).
    The class without a column need not be the last row; any column order is accepted.
    """

    name = "k_minus_one"

    def __init__(self, floor: float = 0.001):
        self.floor = floor

    def check_matrix(self, M) -> None:
        M = _matrix(M)
        if not is_k_minus_one(M):
            raise _wrong_matrix(self.name, "a k_minus_one (class l vs rest, l < k-1)", "k_minus_one")

    def combine(self, R, M, counts=None) -> np.ndarray:
        if not 0.0 <= self.floor < 1.0:
            raise ParameterError(f"k_minus_one: floor must be in [0, 1), got {self.floor!r}")
        M = _matrix(M)
        self.check_matrix(M)
        R = np.clip(_estimates(R, M), 0.0, 1.0)
        k = M.shape[0]
        pos = np.argmax(M == 1, axis=0)
        rest = int(np.setdiff1d(np.arange(k), pos)[0])
        P = np.zeros((R.shape[0], k))
        P[:, pos] = R
        last = 1.0 - R.sum(axis=1)
        low = last < self.floor
        # others sum to 1 - last > 1 - floor > 0 on low rows, so the rescale is well defined
        scale = np.where(low, (1.0 - self.floor) / np.where(low, 1.0 - last, 1.0), 1.0)
        P *= scale[:, None]
        P[:, rest] = np.where(low, self.floor, last)
        return _to_simplex(P)


# --------------------------------------------------------------------------------------------------
# least squares


class LeastSquares(Combiner):
    """Least squares on the probability simplex, for any code matrix.

    Each column says ``r_b sum_{I_b u J_b} p = sum_{I_b} p``.  Written as a linear residual
    ``a_b . p`` with ``a_bc = r_b - 1`` (c in I_b), ``r_b`` (c in J_b), 0 otherwise, we solve

        minimise ||A p||^2  subject to  p >= 0, sum p = 1          (one small QP per row)

    -- Kong & Dietterich's non-negative least squares extended to matrices with zeros, as Zadrozny &
    Elkan (2002, section 4) suggest.  Two consequences fix which numbers it must reproduce:

    * On a matrix without zeros (dense ECOC, and one-vs-all) ``sum_{I u J} p = sum p = 1`` on the
      simplex, so the residual is exactly ``(A_KD p - r)_b`` with ``A_KD[b, c] = 1[c in I_b]``:
      Kong & Dietterich's dense form.  For one-vs-all ``A_KD`` is the identity and the answer is the
      Euclidean projection of ``r`` onto the simplex (r = (0.7, 0.4, 0.1) gives
      (0.6333, 0.3333, 0.0333)), not normalisation.
    * On all-pairs the residual of column (i, j) is ``r_ij p_j - r_ji p_i``, so the objective is
      half of Wu, Lin & Weng's method 2 and the solutions coincide.

    ``counts`` are ignored: weighting columns would break both equivalences above.  The QP is solved
    by a primal active-set method run on all rows at once: an equality-constrained solve of the
    bordered KKT system for every row, then a few active-set steps only for rows that leave the
    simplex (10,000 rows x 10 classes take well under a second).  Estimates are clipped to [0, 1].
    ``max_iter`` caps the active-set steps (default ``4k + 20``; each step fixes or frees one class,
    so rows need at most a few ``k``); a row still unfinished keeps its last feasible iterate.
    """

    name = "least_squares"

    def __init__(self, max_iter: int | None = None):
        self.max_iter = max_iter

    def check_matrix(self, M) -> None:
        _matrix(M)

    def combine(self, R, M, counts=None) -> np.ndarray:
        if self.max_iter is not None and int(self.max_iter) < 1:
            raise ParameterError(f"least_squares: max_iter must be >= 1 or None, got {self.max_iter!r}")
        M = _matrix(M)
        R = np.clip(_estimates(R, M), 0.0, 1.0)
        k = M.shape[0]
        Z = (M != 0).astype(np.float64)  # (k, l): c in I_b u J_b
        Pm = (M == 1).astype(np.float64)  # (k, l): c in I_b
        # G = sum_b a_b a_b^T with a_b = r_b z_b - q_b, expanded so it is three matrix products
        zz = np.einsum("ib,jb->bij", Z, Z).reshape(M.shape[1], k * k)
        zq = np.einsum("ib,jb->bij", Z, Pm)
        zq = (zq + zq.transpose(0, 2, 1)).reshape(M.shape[1], k * k)
        qq = np.einsum("ib,jb->ij", Pm, Pm)
        G = ((R * R) @ zz - R @ zq).reshape(-1, k, k) + qq
        max_iter = self.max_iter if self.max_iter is not None else 4 * k + 20
        return _to_simplex(_simplex_qp(G, max_iter))


def _simplex_qp(G: np.ndarray, max_iter: int) -> np.ndarray:
    """Minimise ``p^T G_i p`` over the simplex for each of the ``n`` PSD matrices ``G`` ``(n, k, k)``.

    Primal active set (Nocedal & Wright, ch. 16.5), vectorised: every unfinished row solves its
    equality-constrained problem on its current free set at the same time (fixed variables get an
    identity row, so all systems have the same shape).  A row whose solution stays non-negative either
    stops (all multipliers of fixed variables >= 0) or frees the variable with the most negative
    multiplier; a row whose solution leaves the simplex steps to the boundary and fixes the blocking
    variable at 0.  A ridge of ``1e-13 * trace(G) / k`` keeps the systems non-singular when ``G`` does
    not identify ``p`` (it then picks the minimiser closest to uniform); on identified problems its
    effect is far below the 1e-6 the tests demand.
    """
    n, k, _ = G.shape
    scale = np.trace(G, axis1=1, axis2=2) / k + 1e-300
    G = G + (1e-13 * scale)[:, None, None] * np.eye(k)
    p = np.full((n, k), 1.0 / k)
    free = np.ones((n, k), dtype=bool)
    todo = np.arange(n)
    tol = 1e-12
    for _ in range(max_iter):
        if todo.size == 0:
            break
        g, f, x = G[todo], free[todo], p[todo]
        m = todo.size
        K = np.zeros((m, k + 1, k + 1))
        both = f[:, :, None] & f[:, None, :]
        K[:, :k, :k] = np.where(both, g, 0.0)
        K[:, :k, :k] += np.where(f, 0.0, 1.0)[:, :, None] * np.eye(k)
        K[:, :k, k] = f
        K[:, k, :k] = f
        rhs = np.zeros((m, k + 1, 1))
        rhs[:, k, 0] = 1.0
        sol = np.linalg.solve(K, rhs)[:, :, 0]
        target, lam = sol[:, :k], sol[:, k]
        step = target - x
        # largest feasible step along target - x, and which free variable blocks it
        shrinking = f & (step < -tol * (np.abs(x) + 1.0))
        ratios = np.where(shrinking, x / np.where(shrinking, -step, 1.0), np.inf)
        block = np.argmin(ratios, axis=1)
        alpha = np.minimum(ratios[np.arange(m), block], 1.0)
        blocked = alpha < 1.0
        x = x + alpha[:, None] * step
        x[blocked, block[blocked]] = 0.0
        f[blocked, block[blocked]] = False
        # rows that reached their free-set optimum: check the multipliers of fixed variables
        mult = np.einsum("mij,mj->mi", g, x) + lam[:, None]
        mult = np.where(f, np.inf, mult)
        worst = np.argmin(mult, axis=1)
        release = ~blocked & (mult[np.arange(m), worst] < -tol * (scale[todo] + 1.0))
        f[release, worst[release]] = True
        p[todo], free[todo] = np.where(f, np.maximum(x, 0.0), 0.0), f
        todo = todo[blocked | release]
    return p


# --------------------------------------------------------------------------------------------------
# coupling


class Coupling(Combiner):
    """Zadrozny's (2001) coupling for any code matrix: the ``p`` whose implied column probabilities
    ``rhat_b = sum_{I_b} p / sum_{I_b u J_b} p`` are closest to ``r`` in count-weighted log loss.

    Minimises ``sum_b n_b [r_b ln(r_b / rhat_b) + (1 - r_b) ln((1 - r_b) / (1 - rhat_b))]`` by the
    multiplicative update, in Gauss-Seidel order (``rhat`` refreshed after each class):

        p_i <- p_i * [sum_{b: M_ib=+1} n_b r_b + sum_{b: M_ib=-1} n_b (1 - r_b)]
                   / [sum_{b: M_ib=+1} n_b rhat_b + sum_{b: M_ib=-1} n_b (1 - rhat_b)],  renormalise

    from the uniform start, until ``max |delta p| < tol`` within a sweep or ``max_iter`` sweeps
    (rows stop independently).  Log loss weights columns by how much data backs them, which is why
    it may beat least squares when columns have very different sizes (``counts``; 1 each if unknown).
    ``r`` is clipped to ``[1e-7, 1 - 1e-7]`` (a multiplicative update cannot leave 0) and zero
    denominators are guarded.  On an all-pairs matrix this is Hastie & Tibshirani's pairwise coupling.

    Cost.  On all-pairs matrices (more exactly: whenever the columns with ``n_b > 0`` are each one
    class against one other and link all classes) the same fixed point is found by Newton's method
    instead, every row at once: ``tol`` then means "one more multiplicative update would move no
    ``p_i`` by ``tol``", ``max_iter`` caps Newton steps, and ~10 steps reach it even where the sweeps
    need tens of thousands (Pendigits' 3,498 test rows: 0.13 s per model, was 1.7 s, on a quiet 2-CPU
    machine; 97 % of the rows never met ``tol`` within the 1000 sweeps and stopped up to 4e-3 short;
    ``benchmarks/bench_coupling.py``).  Other matrices run the sweeps, whose
    convergence is linear, and slow for a class whose probability is small -- its update moves it by
    a fraction proportional to itself -- especially on one-vs-all and k-1 matrices, where most
    columns see a class only on the crowded -1 side: one-vs-all, dense ECOC and k-1 rows with
    probabilities below ~0.01 can use all 1000 sweeps and stop 1e-3 to 1e-2 short of the optimum
    (k = 8).  A sweep costs O(n l k); 10,000 rows x 10 classes run ~10 ms per sweep.  For one-vs-all
    prefer ``normalize``, for k-1 ``k_minus_one``, when speed or tiny probabilities matter
    ``least_squares``.
    """

    name = "coupling"

    def __init__(self, tol: float = 1e-10, max_iter: int = 1000):
        self.tol = tol
        self.max_iter = max_iter

    def check_matrix(self, M) -> None:
        _matrix(M)

    def combine(self, R, M, counts=None) -> np.ndarray:
        M = _matrix(M)
        self.check_matrix(M)
        R = np.clip(_estimates(R, M), R_CLIP, 1.0 - R_CLIP)
        w = _counts(counts, M.shape[1])
        if not self.tol > 0 or int(self.max_iter) < 1:
            raise ParameterError(f"{self.name}: tol must be > 0 and max_iter >= 1")
        return _to_simplex(_couple(R, M, w, float(self.tol), int(self.max_iter)))


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


class PairwiseCoupling(Coupling):
    """Hastie & Tibshirani's (1998) pairwise coupling; all-pairs matrices only.

    Finds ``p`` with ``mu_ij = p_i / (p_i + p_j)`` closest to ``r_ij`` in ``n_ij``-weighted
    Kullback-Leibler divergence by cycling ``p_i <- p_i sum_j n_ij r_ij / sum_j n_ij mu_ij``.  That
    is exactly :class:`Coupling`'s update on an all-pairs matrix (for class ``j`` of column (i, j)
    the update uses ``1 - r_ij = r_ji``), so it shares the implementation and parameters; it exists
    as its own name so a configuration states the method it means and is refused on other matrices.
    """

    name = "pairwise_coupling"

    def check_matrix(self, M) -> None:
        M = _matrix(M)
        if not is_all_pairs(M):
            raise _wrong_matrix(self.name, "an all-pairs", "all_pairs")


# --------------------------------------------------------------------------------------------------
# Wu, Lin & Weng


class WuLinWeng(Combiner):
    """Wu, Lin & Weng (2004) method 2, the multiclass rule of libsvm and scikit-learn's SVC;
    all-pairs matrices only.

    Solves ``min_p sum_i sum_{j != i} (r_ji p_i - r_ij p_j)^2`` subject to ``sum p = 1``, i.e.
    ``min p^T Q p`` with ``Q_tt = sum_{j != t} r_jt^2`` and ``Q_tj = -r_jt r_tj``; the solution is
    non-negative without imposing it.  ``r`` is clipped to ``[1e-7, 1 - 1e-7]`` like libsvm.

    ``solver="exact"`` solves the bordered system ``[[Q, 1], [1^T, 0]] [p; b] = [0; 1]`` for all
    rows at once -- the true optimum, best for theory.  ``solver="libsvm"`` runs libsvm's
    coordinate iteration with its stopping rule (start uniform; at most ``max(100, k)`` sweeps; stop
    when ``max_t |(Qp)_t - p^T Q p| < 0.005 / k``), which stops ~1e-3 short of the optimum but matches
    ``SVC(probability=True).predict_proba`` to rounding -- also for two classes, where scikit-learn's
    libsvm runs the same iteration rather than returning ``(r_01, r_10)``.
    """

    name = "wu_lin_weng"

    def __init__(self, solver: str = "exact"):
        self.solver = solver

    def check_matrix(self, M) -> None:
        M = _matrix(M)
        if not is_all_pairs(M):
            raise _wrong_matrix(self.name, "an all-pairs", "all_pairs")

    def combine(self, R, M, counts=None) -> np.ndarray:
        if self.solver not in ("exact", "libsvm"):
            raise ParameterError(
                f"wu_lin_weng: solver must be 'exact' or 'libsvm', got {self.solver!r}"
            )
        M = _matrix(M)
        self.check_matrix(M)
        R = _estimates(R, M)
        k = M.shape[0]
        r = _pair_matrix(R, M, R_CLIP)
        if R.shape[0] == 0:
            return np.zeros((0, k))
        Q = -r.transpose(0, 2, 1) * r  # Q_tj = -r_jt r_tj off the diagonal
        Q[:, np.arange(k), np.arange(k)] = (r**2).sum(axis=1)  # Q_tt = sum_j r_jt^2
        if self.solver == "exact":
            return _to_simplex(_bordered_solve(Q))
        return _to_simplex(_libsvm_iteration(Q))


def _bordered_solve(Q: np.ndarray) -> np.ndarray:
    n, k, _ = Q.shape
    K = np.ones((n, k + 1, k + 1))
    K[:, :k, :k] = Q
    K[:, k, k] = 0.0
    rhs = np.zeros((n, k + 1, 1))
    rhs[:, k, 0] = 1.0
    return np.linalg.solve(K, rhs)[:, :k, 0]


def _libsvm_iteration(Q: np.ndarray) -> np.ndarray:
    """libsvm's ``multiclass_probability`` loop, run on every row at once (rows stop independently)."""
    n, k, _ = Q.shape
    eps = 0.005 / k
    p = np.full((n, k), 1.0 / k)
    todo = np.arange(n)
    for _ in range(max(100, k)):
        q, x = Q[todo], p[todo]
        # recomputed from scratch each sweep, as libsvm does, so round-off does not accumulate
        Qp = np.einsum("mij,mj->mi", q, x)
        pQp = (x * Qp).sum(axis=1)
        go = np.abs(Qp - pQp[:, None]).max(axis=1) >= eps
        todo, q, x, Qp, pQp = todo[go], q[go], x[go], Qp[go], pQp[go]
        if todo.size == 0:
            break
        for t in range(k):
            qtt = q[:, t, t]
            diff = (pQp - Qp[:, t]) / qtt
            x[:, t] += diff
            pQp = (pQp + diff * (diff * qtt + 2.0 * Qp[:, t])) / (1.0 + diff) ** 2
            Qp = (Qp + diff[:, None] * q[:, t, :]) / (1.0 + diff)[:, None]
            x /= (1.0 + diff)[:, None]
        p[todo] = x
    return p


BUILTIN_COMBINERS = (Normalize, LeastSquares, Coupling, PairwiseCoupling, WuLinWeng, KMinusOne)


@hookimpl
def register_combiners(register):
    """Hand the built-in combiner classes to calengine's registry."""
    for cls in BUILTIN_COMBINERS:
        register(cls)
