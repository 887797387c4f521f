"""``evaluate --prior-shift``: the class priors of an evaluated table estimated from a model's probabilities
alone, with a bootstrap interval, beside the priors the model was calibrated to and the table's own
label rates (the EM of ``calengine adapt``, over the posteriors of :mod:`calengine.scores.posteriors`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import DataError
from ..methods import label_shift as ls
from ..scores.posteriors import bottom_rows, block_sample, em_reduction, score_posteriors, training_priors


#: ``evaluate --prior-shift`` without a number: bootstrap replicates of the EM estimate
DEFAULT_PRIOR_SHIFT_REPLICATES = 200


#: the two-sided level of its percentile interval
PRIOR_SHIFT_LEVEL = 0.9


#: replicates computed by one task: one block of :func:`_em_distinct` on a 200,000-row sample (its EM
#: steps take a few milliseconds per replicate)
PRIOR_SHIFT_REPLICATES_PER_TASK = 25


def check_prior_shift(model) -> np.ndarray:
    """The training priors ``evaluate --prior-shift`` compares with, or one line: a model that does not
    record them."""
    train, reason = training_priors(model)
    if train is None:
        raise DataError(f"prior_shift compares with the priors the model was calibrated to, and {reason}; fit the"
                        " model again, or drop prior_shift", parameter="prior_shift")
    return train


def _em_replicates(P: np.ndarray, train: np.ndarray, seeds, tol: float, max_iter: int,
                   weights: np.ndarray | None = None, start: np.ndarray | None = None) -> np.ndarray:
    """EM estimates on one bootstrap resample of the rows of ``P`` per seed (a plain row bootstrap: the
    resample's multiplicities weigh the rows, so each step is a weighted mean of re-weighted posteriors).
    With ``weights`` the resample draws rows in proportion to them, as many draws as the total weight
    (at most :data:`calengine.metrics.bootstrap.BOOTSTRAP_MAX_ROWS`), as ``evaluate --bootstrap`` does.
    ``start``: where every replicate's EM starts (default ``train``): see :func:`_em_distinct`."""
    U, inv = distinct_rows(P)
    return _em_distinct(U, inv, train, seeds, tol, max_iter, weights, start)


def distinct_rows(P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(U, inv)``: the distinct rows of ``P`` (in lexicographic order) and each row's index among them,
    ``P == U[inv]``; a row of zeros is left out (``inv`` -1: re-weighted, it stays zeros)."""
    P = np.asarray(P, dtype=np.float64)
    n = P.shape[0]
    if n == 0:
        return P.copy(), np.empty(0, dtype=np.int64)
    order = np.lexsort(P.T[::-1])
    S = P[order]
    first = np.concatenate(([True], np.any(S[1:] != S[:-1], axis=1)))
    ids = np.cumsum(first) - 1
    U = S[first]
    live = U.sum(axis=1) > 0
    if not live.all():
        remap = np.where(live, np.cumsum(live) - 1, -1)
        U, ids = U[live], remap[ids]
    inv = np.empty(n, dtype=np.int64)
    inv[order] = ids
    return U, inv


#: bytes of the two float64 arrays (replicates x distinct rows) of a block of :func:`_em_distinct`: 25
#: replicates of a 200,000-row sample
_EM_BLOCK_BYTES = 80 * 2**20


def _em_distinct(U: np.ndarray, inv: np.ndarray, train: np.ndarray, seeds, tol: float, max_iter: int,
                 weights: np.ndarray | None = None, start: np.ndarray | None = None) -> np.ndarray:
    """:func:`_em_replicates` of the rows ``U[inv]`` (:func:`distinct_rows`), vectorised: a resample's
    multiplicities are counted per distinct row (a step map's probabilities take few values), and the
    replicates of a block -- :data:`_EM_BLOCK_BYTES` bounds its arrays -- take their EM steps together,
    each step two matrix products over (replicates x distinct rows): the sums of one replicate at a
    time (up to rounding) without a pass of Python per replicate and step.  A replicate leaves the
    block at its own last step.  ``start``: where every replicate's EM starts (default ``train``); the
    estimate on the whole table starts each replicate near its own and takes fewer steps to the same
    maximum (the log-likelihood is concave in the priors, so EM reaches it from any start, to ``tol``)."""
    from ..metrics.bootstrap import Resampler

    k = U.shape[1]
    sampler = Resampler(inv.shape[0], weights)
    train = np.asarray(train, dtype=np.float64)
    start = train if start is None else np.asarray(start, dtype=np.float64)
    m = U.shape[0]
    seeds = list(seeds)
    out = np.empty((len(seeds), k))
    block = int(max(1, min(len(seeds), _EM_BLOCK_BYTES // (16 * max(m, 1)))))
    for lo in range(0, len(seeds), block):
        group = seeds[lo:lo + block]
        W = np.empty((len(group), m))
        for j, ss in enumerate(group):
            rows = inv[sampler.draw(np.random.default_rng(ss))]
            W[j] = np.bincount(rows[rows >= 0], minlength=m)
        out[lo:lo + len(group)] = _em_block(U, W, train, start, tol, max_iter, sampler.size)
    return out


def _em_block(U: np.ndarray, W: np.ndarray, train: np.ndarray, start: np.ndarray, tol: float, max_iter: int,
              size: int) -> np.ndarray:
    """The EM of each row of counts ``W`` (replicates x distinct rows) over the posteriors ``U``
    (distinct rows x classes), all replicates at once: row ``i`` re-weighted to priors ``new`` is
    ``U_i * a / (U_i . a)`` with ``a = new / train`` (:func:`calengine.methods.label_shift.shifted_posteriors`),
    so a step's per-class sums over the rows are ``a * ((W / (a U.T)) U)``."""
    B = W.shape[0]
    Ut = np.ascontiguousarray(U.T)
    out = np.empty((B, U.shape[1]))
    idx = np.arange(B)
    new = np.tile(start, (B, 1))
    buf = np.empty_like(W)
    for _ in range(int(max_iter)):
        a = new / train
        M = buf[: idx.size]
        np.matmul(a, Ut, out=M)  # each row's normaliser under each replicate's priors
        np.divide(W, M, out=M)
        updated = np.maximum(a * (M @ U) / size, ls.PRIOR_FLOOR)
        updated /= updated.sum(axis=1, keepdims=True)
        done = np.max(np.abs(updated - new), axis=1) < tol
        new = updated
        if done.any():
            out[idx[done]] = new[done]
            idx, new, W = idx[~done], new[~done], W[~done]
            if not idx.size:
                return out
    out[idx] = new
    return out


def prior_shift_table(client, model, files: list[str], target: str, *, replicates: int = DEFAULT_PRIOR_SHIFT_REPLICATES,
                      seed: int = 0, level: float = PRIOR_SHIFT_LEVEL, tol: float = ls.DEFAULT_TOL,
                      max_iter: int = ls.DEFAULT_MAX_ITER, max_rows: int | None = None, batch_rows: int = 65536,
                      chunk_rows: int = 1_000_000, progress=None, weight: str | None = None) -> dict[str, Any]:
    """``evaluate --prior-shift``: the class priors of an evaluated table estimated from ``model``'s
    probabilities alone, beside the priors it was calibrated to and the table's own label rates.

    The estimate is ``adapt``'s EM (:func:`em_reduction`: the same reduction, the same bits), over
    every row with the model's input columns (a missing label does not matter to it).  Its interval is
    the percentile interval of ``replicates`` EM estimates on plain bootstrap resamples of rows,
    replicate ``r`` drawing from ``SeedSequence(seed).spawn(replicates)[r]`` in whichever task runs it
    (the scheme of :mod:`calengine.metrics.bootstrap`): the same interval on any number of workers.
    Every replicate's EM starts at the whole table's estimate (its maximum is the same as from the
    training priors, to ``tol``, in about half the steps), and the replicates run vectorised
    (:func:`_em_distinct`), with progress per task of :data:`PRIOR_SHIFT_REPLICATES_PER_TASK`.
    The resampled rows are a seeded uniform sample of at most ``max_rows`` (default
    :data:`calengine.metrics.bootstrap.BOOTSTRAP_MAX_ROWS`) rows' probabilities, drawn in the scoring
    pass (:func:`posterior_chunk`); on a larger table the interval is that of a table of ``max_rows``
    rows, wider than the full table's (``sample_rows`` says so).  The interval covers the sampling
    error of the rows, not a miscalibration of the model: EM is the maximum-likelihood estimate only
    when the model's probabilities are calibrated on the training population.

    ``weight``: a column of row weights (counts).  The EM then weighs each row (integer weights: the
    same bits as the rows repeated; :func:`calengine.methods.label_shift.em_sums`), the label rates
    are weighted, the sample holds rows of positive weight and each resample draws from it in
    proportion to the weights, as many draws as the sample's total weight (at most
    :data:`calengine.metrics.bootstrap.BOOTSTRAP_MAX_ROWS`).

    Returns ``{"classes", "training", "training_from", "estimated", "low", "high", "observed", "rows",
    "labelled_rows", "sample_rows", "replicates", "level", "seed", "em", "weighted"}`` (lists over
    classes; ``observed``: the label rates of the labelled rows; with ``weight``, ``weighted`` is True
    and ``rows`` and ``labelled_rows`` are totals of weight, ints when every weight is an integer).
    """
    from ..metrics.bootstrap import BOOTSTRAP_MAX_ROWS, check_bootstrap_options
    from ..parquet.data import check_columns
    from ..runtime.progress import gather_in_order
    from ..scores.table import plan_chunks, share_model

    check_bootstrap_options(replicates, level)
    ls.check_em_options(tol, max_iter)
    max_rows = BOOTSTRAP_MAX_ROWS if max_rows is None else int(max_rows)
    train = check_prior_shift(model)
    columns = list(dict.fromkeys(list(model.encoder.input_columns) + [target] + ([weight] if weight else [])))
    check_columns(files, columns)
    chunks = [c for c in plan_chunks(files, columns, chunk_rows) if c.n_rows > 0]
    if not chunks:
        raise DataError("the evaluated table has no rows; prior_shift needs rows to estimate the priors of",
                        parameter="prior_shift")
    model_f = share_model(client, model)
    blocks, n_rows, _, observed, weights = score_posteriors(client, model_f, chunks, batch_rows, target, progress,
                                                            sample=(max_rows, seed), weight=weight)
    if weights is not None and not weights.total > 0:
        raise DataError(f"every row of the evaluated table is 0 in weight column '{weight}'; prior_shift"
                        " needs rows of positive weight", parameter=("weight", "prior_shift"))
    em = em_reduction(client, blocks, n_rows, train, tol, max_iter, weights)
    keys, S, W = np.empty(0), np.empty((0, model.n_classes)), (np.empty(0) if weight else None)
    for part in client.gather([client.submit(block_sample, b, pure=False) for b in blocks]):
        keys, S, W = bottom_rows(np.concatenate([keys, part[0]]), np.concatenate([S, part[1]]), max_rows,
                                  None if W is None else np.concatenate([W, part[2]]))
    del blocks
    children = np.random.SeedSequence(int(seed)).spawn(int(replicates))
    groups = [children[i:i + PRIOR_SHIFT_REPLICATES_PER_TASK]
              for i in range(0, int(replicates), PRIOR_SHIFT_REPLICATES_PER_TASK)]
    U, inv = distinct_rows(S)
    U_f, inv_f = client.scatter(U, broadcast=False), client.scatter(inv, broadcast=False)
    W_f = None if W is None else client.scatter(W, broadcast=False)
    futures = [client.submit(_em_distinct, U_f, inv_f, train, g, tol, max_iter, W_f, em.priors, pure=False)
               for g in groups]
    draws = np.concatenate(gather_in_order(client, futures, progress, "prior-shift resamples"), axis=0)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(draws, [alpha, 1.0 - alpha], axis=0)
    labelled = observed.sum()
    labelled = int(labelled) if weights is None or weights.scale is None else float(labelled)
    rows = n_rows if weights is None else weights.total
    return {
        "classes": [str(c) for c in model.labels.classes], "training": train.tolist(),
        "training_from": training_priors(model)[1], "estimated": em.priors.tolist(), "low": low.tolist(),
        "high": high.tolist(), "observed": (observed / labelled).tolist() if labelled else None, "rows": rows,
        "labelled_rows": labelled, "sample_rows": int(S.shape[0]), "replicates": int(replicates),
        "level": float(level), "seed": int(seed), "em": em.to_json(), "weighted": weights is not None,
    }


def shift_amount(shift: dict[str, Any], key: str, noun: str = "rows") -> str:
    """``rows`` or ``labelled_rows`` of a :func:`prior_shift_table` result for display: ``"10,010
    rows"``, or with weights ``"rows of total weight 12,345"``."""
    v = shift[key]
    if not shift.get("weighted"):
        return f"{v:,} {noun}"
    return f"{noun} of total weight " + (f"{v:,}" if isinstance(v, int) else f"{v:,.6g}")


def prior_shift_text(label: str, shift: dict[str, Any]) -> str:
    """``evaluate``'s text of :func:`prior_shift_table`: one row per class."""
    pct = f"{shift['level']:.0%}"
    drawn = "weighted resamples" if shift.get("weighted") else "resamples"
    head = [f"prior shift of {label}: EM estimate from the model's probabilities of {shift_amount(shift, 'rows')},",
            f"  {pct} bootstrap interval from {shift['replicates']} {drawn} of {shift['sample_rows']:,} rows"
            + ("" if shift["em"]["converged"] else f" (EM stopped after {shift['em']['iterations']} steps)")]
    width = max(5, *(len(c) for c in shift["classes"]))
    rows = [*head, f"{'class':<{width}}  training  estimated  {pct + ' interval':<17}  observed"]
    for i, c in enumerate(shift["classes"]):
        obs = "-" if shift["observed"] is None else f"{shift['observed'][i]:.4f}"
        interval = f"[{shift['low'][i]:.4f}, {shift['high'][i]:.4f}]"
        rows.append(f"{c:<{width}}  {shift['training'][i]:8.4f}  {shift['estimated'][i]:9.4f}  {interval:<17}  {obs:>8}")
    rows.append(f"(training: {shift['training_from']}; observed: label rates of"
                f" {shift_amount(shift, 'labelled_rows', 'labelled rows')})")
    return "\n".join(rows)
