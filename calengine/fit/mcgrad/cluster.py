"""MCGrad's rounds across a Dask cluster: the algorithm of :mod:`calengine.methods.mcgrad`, each round's
booster trained on every worker by the ``xgboost_dask`` learner (``XGBoostDask.fit_margin_on_cluster``:
``xgboost.dask.train`` with each row's current logit as its base margin) or, with ``booster=lightgbm``,
the ``lightgbm_dask`` learner (``LightGBMDask.fit_margin_on_cluster``: LightGBM's data-parallel
learner with the logit as init score).

The rows stay on the workers as one state frame per partition (the segment codes, one float column per
``--by`` column, categorical for XGBoost; the current logit ``__f``, the label, the weight, the holdout flag); the client holds only boosters and a few sums:

* a round's booster is one distributed training over the partitions' training rows;
* every row's new logit ``f + Δ`` is computed where the row is (a map over partitions);
* the unshrink factor is Newton's method whose gradient and curvature are sums over partitions
  (:func:`calengine.methods.mcgrad.unshrink_sums`, one reduction per step);
* early stopping's held-out log loss is one more sum per round.

On one worker the boosters are those of the in-process core bit for bit (XGBoost sketches the same
rows alike), so the fitted model equals :func:`calengine.methods.mcgrad.fit_mcgrad`'s up to the order of
the unshrink sums (tests/methods/test_mcgrad.py).  On several workers XGBoost's distributed quantile sketch
picks other split candidates, as for every ``xgboost_dask`` fit.  The holdout of early stopping is
drawn per partition (seeded by the seed and the partition's number), so it depends on the
partitioning, unlike the rest.

``calengine fit --method mcgrad`` (:mod:`calengine.fit.mcgrad.table`) builds the frame from a Parquet
table, one member's calibration rows at a time, and stores the boosters
(:mod:`calengine.model.mcgrad_member`).
"""

from __future__ import annotations

import numpy as np

from ...errors import ParameterError
from ...methods.mcgrad import (
    EarlyStopping,
    MCGradFit,
    MCGradParams,
    logit,
    segment_codes,
    unshrink_factor,
    unshrink_sums,
)
from ...methods.mcgrad_boosters import library

__all__ = ["fit_mcgrad_on_cluster"]

_F, _G, _Y, _W, _HELD = "__f", "__g", "__y", "__w", "__held"


def _columns(width: int) -> list[str]:
    return [f"x{i}" for i in range(width)]


def _state(df, by, levels, score, target, weight, holdout, seed, partition_info=None):
    """A partition's state frame (runs in tasks)."""
    import pandas as pd

    X, _ = segment_codes([df[c].to_numpy() for c in by], levels)
    out = pd.DataFrame(X, columns=_columns(X.shape[1]), index=df.index)
    out[_F] = logit(df[score].to_numpy(dtype=np.float64))
    out[_Y] = df[target].to_numpy(dtype=np.float64)
    out[_W] = 1.0 if weight is None else df[weight].to_numpy(dtype=np.float64)
    number = 0 if partition_info is None else int(partition_info["number"])
    rng = np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 0x4D434744, number]))
    out[_HELD] = rng.random(len(df)) < holdout if holdout else np.zeros(len(df), dtype=bool)
    out[_G] = out[_F]
    return out


def _advance(part, blob: bytes, name: str, width: int):
    """``__g = __f + Δ``: the round's booster (``name``'s bytes) applied where the rows are (runs in tasks)."""
    lib = library(name)
    part = part.copy()
    X = part[_columns(width)].to_numpy(dtype=np.float32)
    f = part[_F].to_numpy(dtype=np.float64)
    part[_G] = f + lib.delta(lib.load(blob), X, f) if len(part) else f
    return part


def _scale(part, alpha: float):
    part = part.copy()
    part[_F] = alpha * part[_G].to_numpy(dtype=np.float64)
    return part


def _newton_part(part, alpha: float, held: bool):
    rows = part[part[_HELD] == held]
    g, c = unshrink_sums(rows[_G].to_numpy(), rows[_Y].to_numpy(), rows[_W].to_numpy(), alpha)
    return np.array([g, c])


def _loss_part(part):
    rows = part[part[_HELD]]
    f, y, w = rows[_F].to_numpy(), rows[_Y].to_numpy(), rows[_W].to_numpy()
    return np.array([float(np.sum(w * np.where(y > 0, np.logaddexp(0.0, -f), np.logaddexp(0.0, f)))), float(w.sum())])


def _sum_parts(client, state, fn, *args) -> np.ndarray:
    """``fn`` of every partition, summed in partition order on the client."""
    import dask

    parts = state.to_delayed()
    return np.sum(client.compute([dask.delayed(fn)(p, *args) for p in parts], sync=True), axis=0)


def fit_mcgrad_on_cluster(client, ddf, by: list[str], score: str, target: str, learner,
                          params: MCGradParams | None = None, *, weight: str | None = None, seed: int = 0) -> MCGradFit:
    """MCGrad over a dask DataFrame ``ddf`` (columns ``by``, ``score`` probabilities, ``target`` 0/1,
    optional ``weight``), each round trained across the cluster by ``learner`` (``params.booster``'s cluster
    learner, ``xgboost_dask`` or ``lightgbm_dask``: anything with ``fit_margin_on_cluster``).  Returns the
    same :class:`MCGradFit` as the in-process :func:`calengine.methods.mcgrad.fit_mcgrad` (module docstring)."""
    from ...runtime.versions import plain_client

    params = MCGradParams() if params is None else params
    lib = library(params.booster)
    if not hasattr(learner, "fit_margin_on_cluster"):
        raise ParameterError(f"mcgrad trains its rounds on the cluster with a booster that starts from each row's"
                             f" logit; learner '{learner.name}' cannot: install the plugin of {lib.learner} and use it")
    plain = plain_client(client)
    levels = [sorted(str(v) for v in ddf[c].dropna().astype("string").unique().compute()) for c in by]
    width = len(levels)
    holdout = params.holdout if params.early_stopping else 0.0
    meta = _state(ddf._meta, by, levels, score, target, weight, holdout, seed)
    state = ddf.map_partitions(_state, by, levels, score, target, weight, holdout, seed, meta=meta).persist()
    start = state

    def held_loss(state) -> float:
        loss, total = _sum_parts(plain, state, _loss_part)
        return float(loss / total)

    def run(state, rounds: int, held_out: bool):
        boosters, alphas = [], []
        stop = EarlyStopping(held_loss(state), params.patience) if held_out else None
        for r in range(rounds):
            train = state[~state[_HELD]] if held_out else state
            features = train[_columns(width) + [_F]]
            with plain.as_current():
                booster = learner.fit_margin_on_cluster(
                    plain, features, train[_Y], train[_F], weight=train[_W], params=lib.cluster_params(params, seed + r),
                    feature_types=lib.feature_types(width))
            blob = lib.to_bytes(booster)
            state = state.map_partitions(_advance, blob, lib.name, width, meta=meta).persist()
            alpha = unshrink_factor(None, None, sums=lambda a: _sum_parts(plain, state, _newton_part, a, False))
            state = state.map_partitions(_scale, alpha, meta=meta).persist()
            boosters.append(blob)
            alphas.append(alpha)
            if stop is not None and stop.add(held_loss(state)):
                break
        return boosters, alphas, stop

    history: list[float] = []
    rounds = int(params.rounds)
    if params.early_stopping:
        _, _, stop = run(start, rounds, True)
        rounds, history = stop.best, stop.losses
        start = start.assign(**{_HELD: False})
    boosters, alphas, _ = run(start, rounds, False)
    return MCGradFit(boosters, alphas, levels, history, lib.name)
