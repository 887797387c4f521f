"""CORP decomposition of the Brier score and log loss (Dimitriadis, Gneiting & Jordan 2021, PNAS).

Why: the Flach–Matsubara ``calibration_loss`` groups rows by *equal* predicted value, so for a model
with continuous outputs every row is its own segment and ``calibration_loss == brier``: the split says
nothing exactly where it matters.  CORP ("consistent, optimally binned, reproducible") instead
recalibrates the forecasts by isotonic regression of the outcome on the forecast (PAV, the project's
:func:`calengine.reductions.pav.pav`) and measures, for a proper score ``S`` averaged over the rows,

* ``mcb = S(x) - S(x_recal)``: miscalibration, what isotonic recalibration would gain (>= 0);
* ``dsc = S(climatology) - S(x_recal)``: discrimination, what the recalibrated forecast gains over
  always forecasting the base rate (>= 0);
* ``unc = S(climatology)``: uncertainty of the outcomes alone;

so that ``S(x) = mcb - dsc + unc`` (up to float rounding).  Both terms are >= 0 because PAV minimises
every Bregman score (Brier and log loss among them) over all non-decreasing maps of the forecast, and
both the forecast itself and a constant are such maps.

Exact and mergeable: PAV only needs the distinct forecast values with their positive and negative
counts, which is exactly the grouped table :class:`~calengine.metrics.measures.MetricAccumulator`
keeps per class column and merges exactly; the decomposition is computed from the merged table, so it
does not depend on the partitioning.  Block values are recomputed here from the integer counts
(``A_j / M_j``), so an already isotonic-calibrated forecast has ``mcb == 0`` exactly.

Log loss at 0 and 1: a PAV block with no positives has value 0 (no negatives: 1).  Its loss terms
are ``0 * log 0``, taken as the limit 0 (as ``scipy.special.xlogy``), so ``S(x_recal)`` and
``S(climatology)`` are always finite.  ``S(x)`` clips ``p`` and ``1 - p`` to ``[clip, 1]`` inside
the logarithm (``clip`` = the evaluator's ``LOG_LOSS_CLIP`` = 1e-15), as the reported ``log_loss``
clips ``P[:, 1]`` and ``P[:, 0]``, so for a binary task ``corp_log_loss["score"]`` equals ``log_loss``
up to the rounding of ``1 - P[:, 1]`` against ``P[:, 0]``; clipping is a non-decreasing map of the
forecast, so ``mcb >= 0`` still holds.

Binary and multiclass: the decomposition is of one binary column, the event ``y == c`` against the
probability ``P[:, c]`` (one-vs-rest).  A binary task uses column 1 only.  For ``k > 2`` classes every
column is decomposed and the reported terms are the **sums** over the columns; for Brier that sum is
the project's multiclass Brier score (``mean Σ_c (1[y=c] - P[:, c])²``), so ``score`` equals ``brier``;
for log loss it is the sum of the one-vs-rest binary log losses, which is *not* the multiclass
``log_loss`` (that scores only the true class's probability).  The per-column terms are kept under
``per_class``.
"""

from __future__ import annotations

import numpy as np

from ..reductions.pav import pav_sums

__all__ = ["combine_columns", "corp_column", "corp_sum", "isotonic_recalibration", "with_brier_rows"]


def _counts(x) -> np.ndarray:
    """Counts as given: int64, or float64 when rows carry fractional weights."""
    x = np.asarray(x)
    return x.astype(np.float64) if x.dtype.kind == "f" else x.astype(np.int64)


def isotonic_recalibration(v: np.ndarray, pos: np.ndarray, neg: np.ndarray):
    """PAV of the outcome on a grouped table: ``(starts, block_pos, block_neg)``.

    ``v`` sorted distinct forecast values, ``pos``/``neg`` the counts of rows at each value with the
    event and without it.  ``starts`` indexes the first value of each block into ``v`` (so value ``i``
    belongs to block ``searchsorted(starts, i, 'right') - 1``); the block counts are integer sums.
    """
    v = np.asarray(v, dtype=np.float64)
    a, b = _counts(pos), _counts(neg)
    if v.size == 1:
        return np.zeros(1, np.intp), a.copy(), b.copy()
    # the isotonic regression of the table's rows: the project's PAV (calengine.reductions.pav.pav) of
    # one "row" per (value, outcome) weighted by its count pools each value's two rows back into the
    # group (value, pos, pos + neg), dropping values of no weight; the table is that pooled input
    # already (distinct sorted values, sums of two numbers: exact in any order), so PAV runs on it
    # directly (the pooling's sorts were half of CORP's time per score range)
    m = a + b
    live = m > 0
    xs = v[live]
    if xs.size == 0:
        from ..errors import DataError

        raise DataError("every sample_weight is zero; give at least one example a positive weight")
    lo = pav_sums(xs, xs, a[live].astype(np.float64), m[live].astype(np.float64))[0]
    starts = np.searchsorted(v, lo, side="left").astype(np.intp)
    return starts, np.add.reduceat(a, starts), np.add.reduceat(b, starts)


def brier_sum(pos, neg, p) -> float:
    return float(np.sum(pos * (1.0 - p) ** 2 + neg * p**2))


def _xlogy(x, p):
    """``x · log p`` with ``0 · log 0 = 0`` (scipy.special.xlogy, without importing scipy.special into
    every evaluation task: it costs most of a second)."""
    return np.where(x == 0, 0.0, x * np.log(np.where(x == 0, 1.0, p)))


def log_sum(pos, neg, p) -> float:
    """Σ -[pos log p + neg log(1-p)], with 0 log 0 = 0."""
    return float(-np.sum(_xlogy(pos, p) + _xlogy(neg, 1.0 - p)))


def corp_column(v, pos, neg, clip: float = 1e-15) -> dict:
    """CORP terms of one binary column from its grouped table; see the module docstring.

    Returns ``{"brier": {...}, "log_loss": {...}}``, each ``{"score", "mcb", "dsc", "unc"}`` (means
    over the rows).  Needs at least one row.
    """
    v = np.asarray(v, dtype=np.float64)
    a = _counts(pos).astype(np.float64)
    b = _counts(neg).astype(np.float64)
    n = float(a.sum() + b.sum())
    starts, ba, bb = isotonic_recalibration(v, pos, neg)
    ba, bb = ba.astype(np.float64), bb.astype(np.float64)
    r = ba / (ba + bb)
    base = np.array([a.sum() / n])
    tot_a, tot_b = np.array([a.sum()]), np.array([b.sum()])
    # clip p and 1 - p separately, as the reported log_loss clips P[:, 1] and P[:, 0]
    log_p, log_q = np.log(np.clip(v, clip, 1.0)), np.log(np.clip(1.0 - v, clip, 1.0))
    out = {}
    for name, s_x, s_sum in (
        ("brier", brier_sum(a, b, v), brier_sum),
        ("log_loss", float(-np.sum(a * log_p + b * log_q)), log_sum),
    ):
        s_r = s_sum(ba, bb, r)
        s_c = s_sum(tot_a, tot_b, base)
        out[name] = {"score": s_x / n, "mcb": (s_x - s_r) / n, "dsc": (s_c - s_r) / n, "unc": s_c / n}
    return out


def corp_sum(tables, clip: float = 1e-15) -> dict:
    """CORP of a task from its per-class grouped tables ``[(v, pos, neg), ...]``.

    Two classes: column 1 alone.  More: the sum over all columns, with ``per_class`` holding each
    column's own terms.  Returns ``{"corp_brier": {...}, "corp_log_loss": {...}}``.
    """
    cols = [1] if len(tables) == 2 else list(range(len(tables)))
    return combine_columns([corp_column(*tables[c], clip=clip) for c in cols])


def combine_columns(parts: list[dict]) -> dict:
    """The task's CORP terms from its tested columns' :func:`corp_column` dicts: one column as is,
    several summed with ``per_class`` kept."""
    out = {}
    for score in ("brier", "log_loss"):
        total = {key: float(sum(p[score][key] for p in parts)) for key in ("score", "mcb", "dsc", "unc")}
        if len(parts) > 1:
            total["per_class"] = [p[score] for p in parts]
        out[f"corp_{score}"] = total
    return out


def with_brier_rows(metrics: dict | None) -> dict | None:
    """``metrics`` (a :meth:`MetricAccumulator.result`) with the CORP Brier terms also as flat entries
    ``brier_mcb``, ``brier_dsc`` and ``brier_unc``, the rows of the text tables of ``evaluate`` and
    ``cv``; the JSON keeps them nested under ``corp_brier`` with the log-loss terms."""
    if metrics is None or "corp_brier" not in metrics:
        return metrics
    corp = metrics["corp_brier"]
    return {**metrics, "brier_mcb": corp["mcb"], "brier_dsc": corp["dsc"], "brier_unc": corp["unc"]}
