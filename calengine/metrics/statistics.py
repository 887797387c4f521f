"""The calibration metrics' statistics on small merged summaries: p-value series, the smooth ECE's
kernel smoother and bandwidth search, Hosmer-Lemeshow, Kumar et al.'s debiased L2 error and its
bootstrap, and the Newton step of the logistic calibration fits.

Everything here runs in the client on arrays of a few thousand numbers at most (bins, grid points,
parameters): the per-range work that produced them is in :mod:`calengine.metrics.ranged.kernels`.  Each
definition is the one of its reference implementation, which the tests compare against on the same
arrays: MAPIE (``mapie.metrics.calibration``) for KS/Kuiper and their p-values, MCGrad's ``ecce_pvalue``,
relplot's ``smECE``, the ``uncertainty-calibration`` package's ``get_calibration_error``, statsmodels'
logistic GLM for the calibration slope and intercept.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ks_sf", "kuiper_sf", "ecce_p_value", "smooth_ece", "smece_search", "smece_grid_size",
           "hosmer_lemeshow", "debiased_l2", "l2_bootstrap", "newton_step"]

_EPS = np.finfo(np.float64).eps

#: MCGrad's clamps of the ECCE p-value: below 1e-20 it is 1, from 8.267 on the CDF is 1 - eps.
ECCE_SIGMA_MIN, ECCE_SIGMA_MAX = 1e-20, 8.26732673


#: beyond this statistic both tails are below float64's smallest number (``P(max |B| > 40) < 4 Φ̄(40)``,
#: about 1e-349; Kuiper's tail about ``8 x² e^{-2 x²}``), and the series' term count grows with ``x``
TAIL_ZERO = 40.0


def ks_sf(x: float) -> float:
    """P(max |B_t| > x), B a standard Brownian motion on [0, 1] (Darling & Siegert 1953): the p-value
    of the KS statistic of cumulative calibration differences (Tygert 2022), summed to machine
    precision.  Beyond :data:`TAIL_ZERO` the tail is 0 in float64 (and the series would need a
    number of terms growing with ``x``: an evaluation weighted by huge weights hung here)."""
    if not x > 0:
        return 1.0
    if x > TAIL_ZERO:
        return 0.0
    kmax = int(math.ceil(0.5 + x * math.sqrt(2.0) / math.pi * math.sqrt(math.log(4.0 / (math.pi * _EPS)))))
    cdf = 0.0
    for k in range(kmax):
        kp = k + 0.5
        cdf += (-1) ** k / kp * math.exp(-(kp**2) * math.pi**2 / (2.0 * x * x))
    return float(min(1.0, max(0.0, 1.0 - 2.0 / math.pi * cdf)))


def _kuiper_cdf(x: float) -> float:
    kmax = int(math.ceil(0.5 + x / (math.pi * math.sqrt(2.0))
                         * math.sqrt(math.log(4.0 / (math.sqrt(2.0 * math.pi) * _EPS) * (1.0 / x + x / math.pi**2)))))
    c = 0.0
    for k in range(kmax):
        kp = k + 0.5
        c += (8.0 / x**2 + 2.0 / kp**2 / math.pi**2) * math.exp(-2.0 * kp**2 * math.pi**2 / x**2)
    return c


def kuiper_sf(x: float) -> float:
    """P(range of B on [0, 1] > x) (Feller 1951): the p-value of Kuiper's statistic (ECCE-R); 0 beyond
    :data:`TAIL_ZERO` (see :func:`ks_sf`)."""
    if not x > 0:
        return 1.0
    if x > TAIL_ZERO:
        return 0.0
    return float(min(1.0, max(0.0, 1.0 - _kuiper_cdf(x))))


def ecce_p_value(sigma_units: float) -> float:
    """MCGrad's ``ecce_pvalue_from_sigma``: Kuiper's tail with its clamps at both ends."""
    if sigma_units < ECCE_SIGMA_MIN:
        return 1.0
    if sigma_units >= ECCE_SIGMA_MAX:
        return float(_EPS)
    return float(1.0 - _kuiper_cdf(sigma_units))


# ------------------------------------------------------------------------------------------ smooth ECE

#: relplot's mesh of the smooth ECE's evaluation (``config.smECE_mesh_pts``).
SMECE_MESH = 200


def smece_grid_size(sigma: float) -> int:
    """relplot's grid for a bandwidth: ``max(2000, round(20 / sigma)) // 2 + 1`` points."""
    return max(2000, round(20.0 / sigma)) // 2 + 1


def _reflected_smooth(values: np.ndarray, sigma: float) -> np.ndarray:
    """relplot's ``ReflectedGaussianKernel.convolve`` of grid values."""
    n = values.size
    t = np.linspace(0.0, 1.0, n)
    ker = np.exp(-(t - 0.5) * (t - 0.5) / (2.0 * sigma * sigma)) / (math.sqrt(2.0 * math.pi) * sigma)
    ext = np.concatenate([np.flip(values)[:-1], values, np.flip(values)[1:]])
    return np.convolve(ext, ker, "valid")[n // 2: n // 2 + n]


def _interpolate(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    n = y.size
    size = 1 / (n - 1)
    inds = (t * (n - 1)).astype(int).clip(0, n - 2)
    r = (t - inds * size) / size
    return y[inds] * (1 - r) + y[inds + 1] * r


def smooth_ece(hist: dict, sigma: float) -> float:
    """relplot's ``smooth_ece(f, y, sigma)`` from the grid histograms of its grid size: ``hist`` has
    the weight, forecast and event sums per grid point (``"one"``, ``"f"``, ``"y"``)."""
    ev = max(round(10.0 / sigma), SMECE_MESH)
    t = np.linspace(0.0, 1.0, ev)
    resid = _interpolate(t, _reflected_smooth(hist["f"] - hist["y"], sigma))
    dens = _interpolate(t, _reflected_smooth(hist["one"], sigma)) + 0.0001
    rs = resid / dens
    return float(np.sum(np.abs(rs) * dens) / np.sum(dens))


def smece_search(ece_at, eps: float = 0.001, refine: int = 10):
    """relplot's ``search_param``: the smallest bandwidth sigma (to 2**-refine) with
    ``smooth_ece(sigma) <= sigma``; ``ece_at(sigma)`` evaluates it.  Returns ``(smece, sigma)``."""
    def ok(alpha):
        return alpha < eps or alpha < ece_at(alpha)

    if ok(1.0):
        start = 1.0
    else:
        start, end = 1.0, 0.0
        for _ in range(refine):
            mid = (start + end) / 2.0
            if ok(mid):
                end = mid
            else:
                start = mid
    return ece_at(start), start


#: relplot's mesh of its reliability diagram (``config.plot_mesh_pts``).
SMOOTH_DIAGRAM_MESH = 200

#: the two-sided normal quantile of the smooth curve's 95 % pointwise band (relplot's ``qwidth``)
_Z95 = 1.959963984540054


def smooth_reliability(hist: dict, sigma: float, mesh: int = SMOOTH_DIAGRAM_MESH) -> dict:
    """relplot's smooth reliability curve (``prepare_rel_diagram``'s kernel regression, the
    ``KernelSmoother(ReflectedGaussianKernel(sigma))`` fitted to ``(f, y)``) and a 95 % pointwise band,
    from the grid histograms of :func:`smece_grid_size` ``(sigma)`` points (``hist``: ``"one"``, ``"f"``,
    ``"y"`` sums per grid point, as :func:`smooth_ece` reads them), so it works on merged score ranges.

    ``mu(t) = K*y (t) / (K*1 (t) + 1e-4)`` on ``mesh`` points of [0, 1]: relplot's estimator to the
    last float (tests/metrics/test_statistics.py compares it with relplot itself).  ``sigma``
    is the smooth ECE's bandwidth (``smece_sigma``), relplot's default.

    The band: relplot draws the 2.5 and 97.5 % quantiles of 200 bootstrap refits (unseeded, of every
    row); a reduction cannot resample rows, so this is the same estimator's delta-method band,
    ``mu ± 1.96 sqrt(Σ K²(t - f_i) (y_i - mu(t))²) / Σ K(t - f_i)``.  For the Gaussian kernel
    ``K_σ² = K_{σ/√2} / (2 √π σ)``, so the sums are two more reflected convolutions of the same grids
    (a weight counts as that many rows, as everywhere in ``evaluate --weight``).  Deterministic; it
    agrees with relplot's bootstrap band to within sampling noise where the forecasts are dense (the
    test measures the ratio of their widths).  Returns ``mesh``, ``mu``, ``low``, ``high``,
    ``density`` (the forecasts' kernel density on the mesh, integrating to 1) and ``sigma``.
    """
    t = np.linspace(0.0, 1.0, mesh)
    one, ys = np.asarray(hist["one"], dtype=np.float64), np.asarray(hist["y"], dtype=np.float64)
    dens = _interpolate(t, _reflected_smooth(one, sigma))
    mu = _interpolate(t, _reflected_smooth(ys, sigma)) / (dens + 0.0001)
    narrow = sigma / math.sqrt(2.0)
    factor = 1.0 / (2.0 * math.sqrt(math.pi) * sigma)
    k2_one = _interpolate(t, _reflected_smooth(one, narrow)) * factor
    k2_y = _interpolate(t, _reflected_smooth(ys, narrow)) * factor
    # Σ K² (y - mu)² with y in {0, 1}: Σ K² y (1 - 2 mu) + mu² Σ K²
    num = np.maximum(k2_y * (1.0 - 2.0 * mu) + mu * mu * k2_one, 0.0)
    half = _Z95 * np.sqrt(num) / np.maximum(dens, 1e-300)
    total = float(one.sum())
    # K*1 is Σ_i w_i K(t - f_i): over the total weight, the forecasts' density (relplot's kde)
    density = dens / total if total > 0 else np.zeros_like(t)
    return {"mesh": t, "mu": mu, "low": np.clip(mu - half, 0.0, 1.0), "high": np.clip(mu + half, 0.0, 1.0),
            "density": density, "sigma": float(sigma)}


# ------------------------------------------------------------------------------------------ binned tests


def hosmer_lemeshow(count, events, expected) -> dict:
    """Hosmer & Lemeshow's statistic on groups of risk: ``Σ (O - E)² / (E (1 - E / n))`` over groups
    with ``0 < E < n``, ``df = groups - 2`` (the classic test), chi-square p-value."""
    n = np.asarray(count, dtype=np.float64)
    O = np.asarray(events, dtype=np.float64)
    E = np.asarray(expected, dtype=np.float64)
    live = (n > 0) & (E > 0) & (E < n)
    df = int(np.count_nonzero(live)) - 2
    if df < 1:
        return {"chi2": math.nan, "df": max(df, 0), "p_value": math.nan}
    stat = float(np.sum((O[live] - E[live]) ** 2 / (E[live] * (1.0 - E[live] / n[live]))))
    from scipy.special import chdtrc  # the chi-square tail without importing scipy.stats (seconds)

    return {"chi2": stat, "df": df, "p_value": float(chdtrc(df, stat))}


def debiased_l2(count, mean_p, mean_y) -> float:
    """Kumar, Liang & Ma's debiased squared L2 calibration error over bins (``unbiased_square_ce``):
    ``Σ (n_b / n) [(p̄_b - ȳ_b)² - ȳ_b (1 - ȳ_b) / (n_b - 1)]`` over bins of at least 2 rows."""
    n = np.asarray(count, dtype=np.float64)
    total = n.sum()
    live = n >= 2
    if total <= 0:
        return math.nan
    mp, my = np.asarray(mean_p)[live], np.asarray(mean_y)[live]
    err = (mp - my) ** 2 - my * (1.0 - my) / (n[live] - 1.0)
    return float(np.sum(n[live] / total * err))


def l2_bootstrap(stats: list[dict], value: float, replicates: int = 200, seed: int = 0, level: float = 0.9):
    """A ``level`` interval of the debiased L2 error (square root of :func:`debiased_l2`, averaged
    over ``stats``' columns as Kumar et al.'s marginal error is) by a bootstrap of the bins'
    sufficient statistics.

    Resampling rows with Poisson(1) multiplicities makes each bin's (weight, Σp, Σy) a sum of
    independent terms with known mean and covariance (from Σ1, Σp, Σy, Σp², Σpy); each replicate draws
    them from that normal law, bins fixed, and recomputes the estimate.  The interval is the basic
    (pivotal) bootstrap interval ``2 value - q_{1-a/2}``, ``2 value - q_{a/2}``, clipped at 0.
    """
    rng = np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 0x4C32]))
    reps = np.zeros(replicates)
    for s in stats:
        m, sp, sy, spp, spy = (np.asarray(s[k], dtype=np.float64) for k in ("count", "sp", "sy", "spp", "spy"))
        mean = np.stack([m, sp, sy], axis=1)
        cov = np.empty((m.size, 3, 3))
        cov[:, 0, 0], cov[:, 0, 1], cov[:, 0, 2] = m, sp, sy
        cov[:, 1, 1], cov[:, 1, 2], cov[:, 2, 2] = spp, spy, sy
        cov[:, 1, 0], cov[:, 2, 0], cov[:, 2, 1] = sp, sy, spy
        z = rng.standard_normal((replicates, m.size, 3))
        chol = np.linalg.cholesky(cov + np.eye(3) * 1e-12 * np.maximum(m, 1.0)[:, None, None])
        draw = mean[None] + np.einsum("bij,rbj->rbi", chol, z)
        for r in range(replicates):
            mm = np.maximum(draw[r, :, 0], 0.0)
            with np.errstate(invalid="ignore", divide="ignore"):
                p = np.where(mm > 0, draw[r, :, 1] / mm, 0.0)
                y = np.clip(np.where(mm > 0, draw[r, :, 2] / mm, 0.0), 0.0, 1.0)
            reps[r] += debiased_l2(mm, p, y)
    reps = np.sqrt(np.maximum(reps / len(stats), 0.0))
    a = (1.0 - level) / 2.0
    lo_q, hi_q = np.quantile(reps, [a, 1.0 - a])
    return max(0.0, 2.0 * value - hi_q), max(0.0, 2.0 * value - lo_q)


def newton_step(grad: np.ndarray, hess: np.ndarray) -> np.ndarray | None:
    """The Newton step of a concave log-likelihood (``hess`` is minus its Hessian), or None when the
    Hessian is singular (a forecast column without spread)."""
    try:
        step = np.linalg.solve(hess, grad)
    except np.linalg.LinAlgError:
        return None
    return step if np.all(np.isfinite(step)) else None
