"""Learners that train on the cluster itself (``Learner.trains_on_cluster``): the ``cluster`` route.

XGBoost and LightGBM ship their own distributed trainers on Dask.  For them the engine does not
assemble a fold's rows on one worker; it hands the learner the client and a :class:`ClusterTraining`,
a description of the fold's training partitions, and the learner trains across every worker.  Because
each such fit already uses the whole cluster, the engine runs them one after another (one per fold and
code-matrix column), in the client process, in a fixed order.  The fitted learners then go back into
the ordinary partition-native fit: held-out rows are scored per fragment by ``score`` and the
calibrators are fitted by the usual reductions (:mod:`calengine.fit.table`).

The training rows are read by the workers from Parquet with the engine's own reader
(:func:`calengine.tasks.partitions.load_part`): same encoding, same seeded folds, same code-matrix
targets as every other route.  The client never reads a row.
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ..tasks import partitions as pt
from ..errors import DataError, ParameterError

#: name of the target column in :meth:`ClusterTraining.frames` (features are ``f0 .. f{n-1}``)
TARGET = "__target__"


@dataclass(frozen=True)
class ClusterTraining:
    """The training rows of one fit, as descriptions the workers read.

    * ``fragments``: the table's fragments (whole row groups of Parquet files, absolute paths);
    * ``enc`` / ``plan`` / ``unit``: how a fragment becomes features and targets, which fold is held out
      (``unit.fold``; None: every row trains) and which code-matrix column is the target (None: classes);
    * ``n_classes``: classes of the target (2 for a code-matrix column); target values are ``0..n-1``;
    * ``n_rows``: training rows (exact, from the planning pass's label counts);
    * ``n_features``: width of the encoded feature matrix;
    * ``seed``: the seed the engine derived for this fit (also set as the learner's ``random_state``);
    * ``costing``: with ``--weight``, the table's largest weight: the rows are a costing sample, each
      kept with probability w / costing (Zadrozny, Langford & Abe 2003), so the learner trains on the
      weighted distribution without taking weights (``n_rows`` then counts the table's rows, an upper
      bound); None: every row.
    """

    fragments: tuple
    enc: pt.Encoding
    plan: pt.FoldPlan
    unit: pt.Unit
    n_classes: int
    n_rows: int
    n_features: int
    seed: int
    costing: float | None = None

    @property
    def feature_names(self) -> list[str]:
        return [f"f{i}" for i in range(self.n_features)]

    def frames(self, client, dtype=np.float32):
        """``(X, y)``: a dask DataFrame of the features (columns ``f0..``, ``dtype``) and the target
        Series (int32, ``0..n_classes-1``), one partition per fragment, read by the workers.

        Fragment ``i`` is read on the ``i % n``-th of the ``n`` workers (in address order): distributed
        learners train each worker on the partitions it holds, so pinning them keeps the rows every
        worker sees -- hence the model -- the same from run to run on one cluster layout.
        """
        import dask.dataframe as dd
        import pandas as pd

        meta = pd.DataFrame({**{c: np.empty(0, dtype=dtype) for c in self.feature_names},
                             TARGET: np.empty(0, dtype=np.int32)})
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        if not workers:
            raise DataError("the cluster has no workers; start workers and run the fit again")
        token = self.token()
        parts = [
            client.submit(unit_frame, fr, self.enc, self.plan, self.unit, np.dtype(dtype).str, self.costing,
                          key=f"calengine-unit-frame-{token}-{i}", workers=[workers[i % len(workers)]],
                          allow_other_workers=True, pure=False)
            for i, fr in enumerate(self.fragments)
        ]
        ddf = dd.from_delayed(parts, meta=meta, verify_meta=False)
        return ddf[self.feature_names], ddf[TARGET]

    def token(self) -> str:
        from dask.base import tokenize

        return tokenize(self.fragments, self.plan.cv, self.plan.seed, self.unit.fold, self.unit.column,
                        None if self.plan.code_matrix is None else self.plan.code_matrix.tolist(), self.costing)


def unit_frame(fragment, enc: pt.Encoding, plan: pt.FoldPlan, unit: pt.Unit, dtype: str, costing: float | None = None):
    """One fragment's training rows of ``unit`` as a pandas DataFrame (runs on a worker); ``costing``:
    only the rows of the costing sample (see :class:`ClusterTraining`)."""
    import pandas as pd
    import scipy.sparse as sp

    part = pt.load_part(fragment, enc, plan, costing=costing is not None)
    mask, target = pt.unit_rows(part, unit, plan)
    if costing is not None:
        mask &= part.costing_mask(costing)
    idx = np.flatnonzero(mask)
    X = part.X[idx]
    if sp.issparse(X):
        X = X.toarray()
    X = np.asarray(X, dtype=np.dtype(dtype))
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])], copy=False)
    frame[TARGET] = target[idx].astype(np.int32)
    return frame


def _identity(obj):
    return obj


def fit_units_on_cluster(run, ctx, plan: pt.FoldPlan, units, seeds, unit_rows, learner,
                         costing: float | None = None) -> list:
    """Fit ``learner`` for every unit, one unit after another, each across the whole cluster.

    ``run``: the :class:`~calengine.runtime.context.RunContext` (its client and progress).

    ``unit_rows``: the training rows of each unit (from the planning pass's label counts).
    ``costing``: weighted rows reach the learner as a costing sample (see :class:`ClusterTraining`).

    Returns one future per unit holding the fitted learner, as the other routes do (the fitted object
    is embedded in its task, so a lost worker's copy is recomputed rather than lost).
    """
    from ..runtime.versions import plain_client
    from ..tasks.arrays import learner_errors, seeded

    client, progress = run.client, run.progress
    plain = plain_client(client)  # the libraries type-check for a distributed.Client
    if ctx.enc.encoder.is_sparse:
        raise DataError(
            f"learner '{learner.name}' trains on dense features and this table has a text column; drop"
            " text_columns (or exclude the text column) or choose another learner", parameter="text_columns")
    k = ctx.enc.labels.n_classes
    n_features = len(ctx.enc.encoder.feature_names)
    if progress is not None:
        progress.start("cluster fits", len(units))
    out = []
    for unit, seed, rows in zip(units, seeds, unit_rows):
        training = ClusterTraining(
            fragments=tuple(ctx.fragments), enc=ctx.enc, plan=plan, unit=unit,
            n_classes=k if unit.column is None else 2, n_rows=int(rows), n_features=n_features, seed=seed,
            costing=costing,
        )
        est = seeded(learner, seed)
        # the client is "current" during the fit: libraries that look it up (distributed.get_client(),
        # as xgboost.dask and lightgbm.dask do) find this one, without making it the process default
        with plain.as_current(), learner_errors(est):
            fitted = est.fit_on_cluster(plain, training)
        if fitted is not est:
            raise ParameterError(f"learner '{learner.name}': fit_on_cluster must return self")
        out.append(client.submit(_identity, est, pure=False))
        if progress is not None:
            progress.advance()
    if progress is not None:
        progress.finish()
    return out


def check_cluster_route(spec, learner) -> str | None:
    """``"cluster"`` for a learner that trains on the cluster (refusing routes it cannot take)."""
    if not getattr(learner, "trains_on_cluster", False):
        return None
    if spec.route != "auto" or spec.max_train_rows:
        parameter = "route" if spec.route != "auto" else "max_train_rows"
        what = f"route={spec.route!r}" if spec.route != "auto" else "max_train_rows"
        raise ParameterError(
            f"learner '{learner.name}' trains on the cluster over every training row; drop {what}", parameter=parameter
        )
    return "cluster"

