"""The cluster route (``Learner.trains_on_cluster``) without any boosting library: a learner that
computes its fit with dask over the fold's partitions, as xgboost.dask and lightgbm.dask do."""

from __future__ import annotations

import numpy as np
import pytest

from calengine.base import Learner
from calengine.errors import ParameterError
from calengine.fit.table import TableSpec, fit_table
from calengine.fit.training import FitConfig

ADULT = "data/adult/train.parquet"


class DaskNearestMean(Learner):
    """Class means computed by dask on the cluster; score: softmax of minus squared distances."""

    name = "dask_nearest_mean"
    score_kind = "proba"
    trains_on_cluster = True

    def __init__(self, random_state=None):
        self.random_state = random_state

    def _from_means(self, means, n_rows):
        self.means_ = np.asarray(means, dtype=np.float64)
        self.n_classes_ = self.means_.shape[0]
        self.seen_rows_ = int(n_rows)
        return self

    def fit(self, X, y, sample_weight=None):
        y = np.asarray(y)
        return self._from_means([np.asarray(X[y == c]).mean(axis=0) for c in range(int(y.max()) + 1)], len(y))

    def fit_on_cluster(self, client, training):
        import dask
        from distributed import get_client

        assert get_client() is client  # the client is current during the fit
        X, y = training.frames(client, dtype=np.float64)
        sums = X.groupby(y).sum()
        counts = y.value_counts()
        sums, counts = dask.compute(sums, counts)
        means = [sums.loc[c].to_numpy() / counts.loc[c] for c in range(training.n_classes)]
        self.frame_rows_ = int(counts.sum())
        self.fold_ = training.unit.fold
        return self._from_means(means, training.n_rows)

    def score(self, X):
        d = -((np.asarray(X)[:, None, :] - self.means_[None, :, :]) ** 2).sum(axis=2)
        d -= d.max(axis=1, keepdims=True)
        # each row's own scale: a row's score is a function of that row alone (the batch-independence contract)
        p = np.exp(d / np.maximum(1.0, np.abs(d).mean(axis=1, keepdims=True)))
        p /= p.sum(axis=1, keepdims=True)
        return p[:, 1] if self.n_classes_ == 2 else p

    def to_state(self):
        return {"means": self.means_, "n_classes": self.n_classes_, "seen_rows": self.seen_rows_}

    def from_state(self, state):
        return self._from_means(state["means"], state["seen_rows"])


@pytest.fixture(scope="module")
def client():
    from calengine.runtime.client import dask_client

    with dask_client(None, workers=2) as c:
        yield c


@pytest.fixture(scope="module")
def adult4(tmp_path_factory):
    """Adult's training set as 4 Parquet files (4 fragments)."""
    from calengine.testing.cluster import split_parquet

    return str(split_parquet(ADULT, tmp_path_factory.mktemp("adult4"), 4))


def _spec(data, **kw):
    return TableSpec(data=data, target="class", positive=">50K", **kw)


def test_every_fold_trains_on_the_cluster_on_exactly_its_training_rows(client, adult4):
    model = fit_table(client, _spec(adult4), FitConfig(learner=DaskNearestMean(), method="sigmoid", cv=3, seed=1))
    assert model.info["x_training"]["route"] == "cluster"
    assert model.info["x_training"]["fragments"] == 4
    learners = [m.learners[0] for m in model.members]
    assert sorted(lr.fold_ for lr in learners) == [0, 1, 2]
    n = model.info["x_training"]["rows"]
    # each fold's learner saw the rows outside its fold, exactly as the planner counted them
    assert all(lr.frame_rows_ == lr.seen_rows_ for lr in learners)
    assert sum(lr.seen_rows_ for lr in learners) == 2 * n
    # and its means are exactly those of the same rows in memory (folds from the row's place)
    import pandas as pd

    from calengine.plan.folds import table_folds

    df = pd.concat([pd.read_parquet(f"{adult4}/part-{i}.parquet") for i in range(4)], ignore_index=True)
    X = model.encoder.transform(df)
    y = (df["class"] == ">50K").to_numpy()
    folds = np.asarray(table_folds(adult4, target="class", cv=3, seed=1))
    for lr in learners:
        train = folds != lr.fold_
        want = [X[train & ~y].mean(axis=0), X[train & y].mean(axis=0)]
        np.testing.assert_allclose(lr.means_, want, rtol=1e-9, atol=1e-9)


def test_routes_that_do_not_fit_a_cluster_learner_are_refused(client, adult4):
    with pytest.raises(ParameterError, match="drop max_train_rows"):
        fit_table(client, _spec(adult4, max_train_rows=100), FitConfig(learner=DaskNearestMean(), method="sigmoid", cv=2))
    with pytest.raises(ParameterError, match="drop route='stats'"):
        fit_table(client, _spec(adult4, route="stats"), FitConfig(learner=DaskNearestMean(), method="sigmoid", cv=2))
    with pytest.raises(ParameterError, match="trains on the whole cluster"):
        fit_table(client, _spec(adult4), FitConfig(learner=DaskNearestMean(), method="probing", cv=2))
