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
from calengine.base import Combiner
from calengine.methods.codematrix import is_all_pairs, is_k_minus_one, is_one_vs_all, validate_matrix
from calengine.errors import CodeMatrixError, ParameterError
from calengine_builtins._coupling import _couple

#: libsvm's clip for pairwise estimates: keeps logs and multiplicative updates away from 0 and 1.
R_CLIP = 1e-7


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
    finite = np.isfinite(P).all()
    P = np.maximum(P, 0.0) if finite else np.where(np.isfinite(P), np.maximum(P, 0.0), 0.0)
    s = P.sum(axis=1, keepdims=True)
    k = P.shape[1]
    if s.size and s.min() > 0:  # every row has mass: the same bits as below, without three temporaries
        P /= s
        return P
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


def _is_int(value) -> bool:
    """An integer parameter value (numpy integers included, booleans not)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


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

    def check_params(self) -> None:
        if isinstance(self.floor, bool) or not isinstance(self.floor, (int, float)) or not 0.0 <= self.floor < 1.0:
            raise ParameterError(f"k_minus_one: floor must be a number in [0, 1), got {self.floor!r}")

    def check_matrix(self, M) -> None:
        M = _matrix(M)
        if not is_k_minus_one(M):
            raise _wrong_matrix(self.name, "a k_minus_one (class l vs rest, l < k-1)", "k_minus_one")

    def combine(self, R, M, counts=None) -> np.ndarray:
        self.check_params()
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

    def check_params(self) -> None:
        if self.max_iter is not None and not (_is_int(self.max_iter) and self.max_iter >= 1):
            raise ParameterError(f"least_squares: max_iter must be an integer >= 1 or None, got {self.max_iter!r}")

    def check_matrix(self, M) -> None:
        _matrix(M)

    def combine(self, R, M, counts=None) -> np.ndarray:
        self.check_params()
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

    def check_params(self) -> None:
        tol_ok = isinstance(self.tol, (int, float)) and not isinstance(self.tol, bool) and 0 < self.tol < 1
        if not tol_ok or not (_is_int(self.max_iter) and self.max_iter >= 1):
            raise ParameterError(
                f"{self.name}: tol must be a number in (0, 1) and max_iter an integer >= 1,"
                f" got tol={self.tol!r}, max_iter={self.max_iter!r}"
            )

    def check_matrix(self, M) -> None:
        _matrix(M)

    def combine(self, R, M, counts=None) -> np.ndarray:
        M = _matrix(M)
        self.check_matrix(M)
        R = np.clip(_estimates(R, M), R_CLIP, 1.0 - R_CLIP)
        w = _counts(counts, M.shape[1])
        self.check_params()
        return _to_simplex(_couple(R, M, w, float(self.tol), int(self.max_iter)))



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

    def check_params(self) -> None:
        if self.solver not in ("exact", "libsvm"):
            raise ParameterError(f"wu_lin_weng: solver must be 'exact' or 'libsvm', got {self.solver!r}")

    def check_matrix(self, M) -> None:
        M = _matrix(M)
        if not is_all_pairs(M):
            raise _wrong_matrix(self.name, "an all-pairs", "all_pairs")

    def combine(self, R, M, counts=None) -> np.ndarray:
        self.check_params()
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
