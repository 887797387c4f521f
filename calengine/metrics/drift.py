"""Drift check: are these probabilities still calibrated on these (new, labelled) rows?

Why: a calibration map fitted last month can go stale while the learner's ranking stays fine; the
cheap remedy is refitting only the calibrator (``calengine recalibrate``), and this module says when
that is warranted.  Two tests of the null hypothesis "every row's event has probability ``p``", both
computed from the per-class grouped tables of :class:`~calengine.metrics.measures.MetricAccumulator`
(distinct values with positive/negative counts), so they are exact mergeable reductions that cost
nothing beyond the evaluation itself:

* **Spiegelhalter's z** (Spiegelhalter 1986, Statistics in Medicine 5:421):
  ``z = Σ (y - p)(1 - 2p) / sqrt(Σ (1 - 2p)² p (1 - p))``, standard normal under the null; two-sided
  p-value.  It tests the Brier score against its expectation under calibration, so it reacts to
  over- and under-confidence but can miss errors that cancel in that sum.
* **Reliability chi-square** (Hosmer–Lemeshow type on ``HL_BINS = 10`` equal-count bins of ``p``, tied
  values never split, bins chosen from ``p`` alone): ``chi2 = Σ_g (O_g - E_g)² / V_g`` with ``O_g`` the
  events, ``E_g = Σ p`` and ``V_g = Σ p(1 - p)`` in bin ``g`` -- the exact null variance of ``O_g``
  rather than Hosmer–Lemeshow's ``n_g p̄_g (1 - p̄_g)`` approximation.  Given the ``p``'s the ``O_g``
  are independent sums of Bernoulli variables, so ``chi2 ~ χ²`` with one degree of freedom per bin
  (``df = G``, not Hosmer–Lemeshow's ``G - 2``: no parameter was fitted on these rows; this is
  external validation).  It sees the reliability diagram's shape, which z can miss.

Forecasts of exactly 0 or 1 (isotonic maps produce them) would make a single contrary row reject
with certainty; the tests therefore read ``p`` as ``clip(p, DRIFT_CLIP, 1 - DRIFT_CLIP)``, a change
of at most 1e-4 in any probability.

Columns and multiple testing: a binary task tests column 1 (column 0 carries the same
information); a ``k``-class task tests every one-vs-rest column ``P[:, c]`` against ``y == c``.  All
finite p-values (2 per column) are combined by Bonferroni: ``p_value = min(1, m · min p)``, valid
whatever their dependence, so the false-alarm rate of the verdict is at most ``alpha``.  The verdict
is ``"recalibrate"`` when ``p_value < alpha``, else ``"ok"``.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ParameterError

__all__ = ["DRIFT_ALPHA", "DRIFT_CLIP", "HL_BINS", "spiegelhalter", "reliability_chi2", "calibration_drift",
           "check_alpha", "drift_line", "drift_verdict", "spiegelhalter_from_sums", "chi2_from_bins"]

#: default significance level of the verdict (``calengine evaluate --alpha``).
DRIFT_ALPHA = 0.01

#: forecasts are read as ``clip(p, DRIFT_CLIP, 1 - DRIFT_CLIP)`` by the tests (see the module docstring).
DRIFT_CLIP = 1e-4

#: equal-count bins of the reliability chi-square.
HL_BINS = 10


def check_alpha(alpha) -> float:
    """``alpha`` as a float in (0, 1), or :class:`ParameterError`."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not 0.0 < alpha < 1.0:
        raise ParameterError(f"alpha must be a number strictly between 0 and 1, got {alpha!r}; e.g. 0.01")
    return float(alpha)


def _counts(v, pos, neg):
    p = np.clip(np.asarray(v, dtype=np.float64), DRIFT_CLIP, 1.0 - DRIFT_CLIP)
    a = np.asarray(pos, dtype=np.float64)
    m = a + np.asarray(neg, dtype=np.float64)
    return p, a, m


def spiegelhalter(v, pos, neg) -> dict:
    """``{"z", "p_value"}`` of one grouped table (NaN when every ``p`` is 1/2: the test is undefined)."""
    p, a, m = _counts(v, pos, neg)
    num = float(np.sum((a - m * p) * (1.0 - 2.0 * p)))
    var = float(np.sum(m * (1.0 - 2.0 * p) ** 2 * p * (1.0 - p)))
    return spiegelhalter_from_sums(num, var)


def spiegelhalter_from_sums(num: float, var: float) -> dict:
    """``{"z", "p_value"}`` from ``Σ (y - p)(1 - 2p)`` and ``Σ (1 - 2p)² p (1 - p)``."""
    if var <= 0.0:
        return {"z": math.nan, "p_value": math.nan}
    # scipy.stats.norm.sf(x) is ndtr(-x); scipy.special is the lighter import (scipy.stats costs ~0.5 s,
    # a tenth of evaluating a million rows)
    from scipy.special import ndtr

    z = num / math.sqrt(var)
    return {"z": z, "p_value": float(2.0 * ndtr(-abs(z)))}


def reliability_chi2(v, pos, neg, bins: int = HL_BINS) -> dict:
    """``{"chi2", "df", "p_value"}`` of one grouped table (sorted by value) on equal-count bins.

    A value group goes to bin ``floor(first_row_index · bins / n)``, so ties stay together and bins
    hold about ``n / bins`` rows.
    """
    p, a, m = _counts(v, pos, neg)
    n = float(m.sum())
    first_row = np.cumsum(m) - m
    idx = np.minimum((first_row * bins // n).astype(np.int64), bins - 1)
    obs = np.bincount(idx, weights=a, minlength=bins)
    exp = np.bincount(idx, weights=m * p, minlength=bins)
    var = np.bincount(idx, weights=m * p * (1.0 - p), minlength=bins)
    return chi2_from_bins(obs, exp, var)


def chi2_from_bins(obs, exp, var) -> dict:
    """``{"chi2", "df", "p_value"}`` from per-bin events, expected events and null variances."""
    live = var > 0
    df = int(np.count_nonzero(live))
    if df == 0:
        return {"chi2": math.nan, "df": 0, "p_value": math.nan}
    from scipy.special import chdtrc  # scipy.stats.chi2.sf, without importing scipy.stats

    stat = float(np.sum((obs[live] - exp[live]) ** 2 / var[live]))
    return {"chi2": stat, "df": df, "p_value": float(chdtrc(df, stat))}


def calibration_drift(tables, alpha: float = DRIFT_ALPHA) -> dict:
    """Both tests on every tested column of ``tables`` (``[(v, pos, neg)]`` per class), and a verdict.

    Returns ``{"alpha", "columns": [{"class", "spiegelhalter", "reliability_chi2"}], "n_tests",
    "p_value" (Bonferroni-adjusted minimum, NaN if no test was defined), "verdict"}``.
    """
    alpha = check_alpha(alpha)
    cols = [1] if len(tables) == 2 else list(range(len(tables)))
    columns = []
    for c in cols:
        sz = spiegelhalter(*tables[c])
        hl = reliability_chi2(*tables[c])
        columns.append({"class": c, "spiegelhalter": sz, "reliability_chi2": hl})
    return drift_verdict(columns, alpha)


def drift_verdict(columns: list[dict], alpha: float) -> dict:
    """The drift check's dict from its tested columns: Bonferroni over every finite p-value."""
    pvals = [x for col in columns for x in (col["spiegelhalter"]["p_value"], col["reliability_chi2"]["p_value"])
             if not math.isnan(x)]
    p_adj = min(1.0, len(pvals) * min(pvals)) if pvals else math.nan
    return {
        "alpha": alpha,
        "columns": columns,
        "n_tests": len(pvals),
        "p_value": p_adj,
        "verdict": "recalibrate" if p_adj < alpha else "ok",
    }


def drift_line(drift: dict, class_names: list[str] | None = None) -> str:
    """One line for the terminal: the column with the smallest p-value, the adjusted p and the verdict."""
    def worst_p(col):
        ps = [x for x in (col["spiegelhalter"]["p_value"], col["reliability_chi2"]["p_value"]) if x == x]
        return min(ps) if ps else math.inf

    col = min(drift["columns"], key=worst_p)
    sz, hl = col["spiegelhalter"], col["reliability_chi2"]
    where = ""
    if len(drift["columns"]) > 1:
        name = class_names[col["class"]] if class_names else str(col["class"])
        where = f" [class {name} vs rest, worst of {len(drift['columns'])}]"
    adj = drift["p_value"]
    verdict = "recalibrate" if drift["verdict"] == "recalibrate" else "no significant drift"
    return (
        f"calibration drift{where}: z = {_num(sz['z'], '.2f')}, p = {_num(sz['p_value'], '.2g')} (Spiegelhalter); "
        f"chi2 = {_num(hl['chi2'], '.1f')}, df = {hl['df']}, p = {_num(hl['p_value'], '.2g')} (reliability, "
        f"{HL_BINS} bins); Bonferroni p = {_num(adj, '.2g')} over {drift['n_tests']} tests, "
        f"alpha = {drift['alpha']:g} -> {verdict}"
    )


def _num(x: float, fmt: str) -> str:
    return "n/a" if x != x else format(x, fmt)
