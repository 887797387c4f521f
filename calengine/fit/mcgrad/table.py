"""``calengine fit DATA --method mcgrad --by COL[,COL...]``: MCGrad multicalibration of a learner's
held-out probabilities, or of a score column, over a Parquet table (issue 25 §3).

The flow:

1. **Segments**: one pass counts the segments of the ``--by`` columns (``fit --by``'s counting task,
   :func:`calengine.fit.segments.segment_counts`; more than ``--max-segments`` is one line).  Every
   segment seen becomes a key of the model's :class:`~calengine.model.segmented.SegmentEncoder`.
2. **Base model**: the global fit with the ``none`` calibrator *on held-out rows*
   (``FitConfig.held_out``): with a learner, ``--cv`` fold members, each scoring the rows it was not
   trained on (or ``--calibration-data``'s rows); with ``--scores``, the score column itself.  A
   learner's probability is its own (decision values: the ``none`` calibrator's min-max rescaling,
   which MCGrad's first round then bends, its feature set holding the current logit).
3. **Rounds, shared by the members**: a dask DataFrame of every member's calibration rows pooled
   (each row's held-out probability from the fold member that did not train on it, 0/1 label,
   weight, ``--by`` values; one task per fragment, where the rows are), then
   :func:`calengine.fit.mcgrad.cluster.fit_mcgrad_on_cluster`: each round's booster trained across
   the workers by the ``xgboost_dask`` learner (``lightgbm_dask`` with ``booster=lightgbm``), the
   unshrink factor and early stopping as sums over partitions.  Round ``r``'s booster is seeded
   ``seed + r``.  Every member applies the same rounds to its own probability.  Why pooled, not one
   MCGrad per member on that member's fold: with ``--cv k`` each member's rounds would see 1/k of the
   rows and stop early on a fifth of those; on the planted table of ``benchmarks/bench_mcgrad.py``
   (40,000 rows, 30 regions of Zipf sizes) the per-member rounds kept 1 and 7 rounds (2 folds) and
   left the worst region at 5.7 sigma (9.3 with 5 folds), where MCGrad on the same held-out
   probabilities pooled reaches 2.6 (``benchmarks/results/mcgrad.md``, "The planted-table gap").
4. **Model**: :class:`~calengine.model.mcgrad_member.MCGradMember` per member (the boosters as native
   XGBoost JSON or LightGBM text files, validated on load), which ``score`` applies per partition like
   any member.

A ``--by`` value the rounds never saw, a missing one, or a combination of values not seen together,
has missing segment codes (:mod:`calengine.model.mcgrad_member`).  Two classes only.
"""

from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np

from ...errors import DataError
from ...plugins.batch_probe import take_rows
from .checks import booster_learner, check_mcgrad

__all__ = ["fit_mcgrad_table", "member_rows"]

_S, _Y, _W = "__mcgrad_p", "__mcgrad_y", "__mcgrad_w"


# ---------------------------------------------------------------------------------------------- in tasks


def member_rows(fragment, enc, plan, members, by: tuple[str, ...], key_index: dict, keys: list):
    """In-task: the calibration rows of this fragment as a frame, pooled over the members: each row's
    held-out probability (fold ``m``'s rows from member ``m``; without folds every row from the one
    member), the 0/1 label, the weight and the ``--by`` values (all None for a row whose segment is not
    a key)."""
    import pandas as pd

    from ...model.segmented import segment_codes
    from ...tasks import partitions as pt
    from ...runtime.threads import pin_native_threads
    from ..segments import fragment_frame

    pin_native_threads()
    part = pt.load_part(fragment, enc, plan, order="F")
    df, present = fragment_frame(fragment, enc, by)
    fkeys, codes = segment_codes(df.loc[present] if not present.all() else df, by)
    seg = np.array([key_index.get(k, -1) for k in fkeys] + [-1], dtype=np.intp)[codes]
    keep = np.ones(part.y.size, dtype=bool) if part.w is None else part.w > 0
    idx = np.flatnonzero(keep if not plan.cv else keep & (part.folds < len(members)))
    p = np.empty(idx.size)
    for m, member in enumerate(members if plan.cv else members[:1]):
        rows = np.arange(idx.size) if not plan.cv else np.flatnonzero(part.folds[idx] == m)
        if rows.size:
            p[rows] = member.column_probabilities(take_rows(part.X, idx[rows]))[:, 0]
    out = {}
    for j, col in enumerate(by):
        values = np.array([k[j] for k in keys] + [None], dtype=object)
        out[col] = pd.array(values[seg[idx]], dtype="string")
    out[_S] = p.astype(np.float64)
    out[_Y] = (part.y[idx] == 1).astype(np.float64)
    out[_W] = np.ones(idx.size) if part.w is None else part.w[idx].astype(np.float64)
    return pd.DataFrame(out)


# ---------------------------------------------------------------------------------------------- the fit


def fit_mcgrad_table(client, spec, config, progress, plugins, plan_table, fit_table):
    """The global model of ``spec`` with the ``none`` calibrator on held-out rows, then MCGrad's rounds
    per member (module docstring).  ``plan_table`` / ``fit_table``: those of :mod:`calengine.fit.table`."""
    import dask
    import dask.dataframe as dd
    import pandas as pd

    from ...plugins import registry
    from ...runtime.versions import plain_client
    from ...model.mcgrad_member import MCGradMember, categories_of
    from ...methods.mcgrad_boosters import library
    from ...model.segmented import SegmentEncoder
    from .cluster import fit_mcgrad_on_cluster
    from ..segments import check_segment_columns, too_many, count_segments

    by, params = check_mcgrad(spec, config, plugins)
    check_segment_columns(spec, by)
    base_spec = replace(spec, by=None)
    ctx = plan_table(client, base_spec, progress)
    if ctx.enc.labels.n_classes != 2:
        raise DataError(f"method='mcgrad' calibrates two classes; '{spec.target}' has {ctx.enc.labels.n_classes}:"
                        " calibrate one class against the rest (positive) or choose another calibrator",
                        parameter=("method", "positive"))
    plan, fragments, _, parts = count_segments(client, spec, config, ctx, by, progress)
    keys = sorted({key for p in parts for key in p["keys"]})
    if len(keys) > spec.max_segments:
        raise too_many(by, spec.max_segments)
    key_index = {key: j for j, key in enumerate(keys)}

    base_config = replace(config, method="none", method_params={}, held_out=True)
    model = fit_table(client, base_spec, base_config, progress, plugins, ctx=ctx)
    plain = plain_client(client)
    learner_name = booster_learner(params)
    learner = registry.make("learners", learner_name, {"n_estimators": int(params.trees)}, plugins)
    lib = library(params.booster)
    meta = pd.DataFrame({**{c: pd.array([], dtype="string") for c in by},
                         _S: np.empty(0), _Y: np.empty(0), _W: np.empty(0)})
    ddf = dd.from_delayed([dask.delayed(member_rows)(fr, ctx.enc, plan, model.members, by, key_index, keys)
                           for fr in fragments], meta=meta, verify_meta=False)
    with plain.as_current():  # the frame's own computations (levels, persists) run on the cluster too
        fit = fit_mcgrad_on_cluster(client, ddf, list(by), _S, _Y, learner, params, weight=_W, seed=config.seed)
    boosters = [lib.stored(b, categories_of(fit.levels)) for b in fit.boosters]
    kept = {"rounds": len(fit.boosters), "holdout_loss": [float(v) for v in fit.holdout_loss]}
    rounds = [kept] * len(model.members)  # one entry per member, as each member's model lists them
    model.members = [MCGradMember(member, boosters, fit.alphas, fit.levels, keys, lib.name) for member in model.members]
    model.encoder = SegmentEncoder(model.encoder, by, keys)
    model.info.update(method="mcgrad", method_params=dict(config.method_params))
    model.info["x_mcgrad"] = {"by": list(by), "segments_seen": len(keys), "params": asdict(params),
                              "members": rounds, "booster_learner": learner_name, "pooled": True}
    return model
