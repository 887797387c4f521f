"""XGBoost as calengine learners: ``xgboost`` (one process) and ``xgboost_dask`` (the whole cluster).

=============  ==============  ==========  =====================================================
name           sample weights  score_kind  trains
=============  ==============  ==========  =====================================================
xgboost        yes             proba       in one task on one worker (``xgboost.train``), or in
                                           the client for the Python estimator API
xgboost_dask   yes             proba       on the cluster (``xgboost.dask.train``) in a
                                           partitioned fit; in one process on in-memory arrays
=============  ==============  ==========  =====================================================

Both train gradient-boosted trees with the ``hist`` tree method, objective ``binary:logistic`` for two
classes and ``multi:softprob`` for more (``score`` then returns the ``(n, k)`` class probabilities, which
calengine calibrates one-vs-rest and normalises like any multiclass learner).

``xgboost_dask`` declares ``trains_on_cluster``: in ``calengine fit DATA`` (the partition-native fit) the
engine hands it the Dask client and a description of each fold's training partitions; it builds a
``DaskDMatrix`` from them (the workers read their own Parquet row groups through calengine's reader) and
calls ``xgboost.dask.train``, which uses every worker.  The engine runs its folds one after another.

Persistence never pickles: the booster is written in XGBoost's own UBJSON model format
(``learner_<j>.booster.ubj`` inside the model directory) and read back with ``Booster.load_model``.  The
XGBoost version that wrote it is recorded; loading refuses a model written by a newer XGBoost, or by
another major version, naming the version to install.  That part (state layout, version check, one-line
errors, the shape of ``score``) is :class:`calengine.base.BoosterLearner`'s, shared with
calengine-lightgbm; this module holds only what is XGBoost's own.

Determinism: ``random_state`` (set by calengine from ``--seed``) is XGBoost's ``seed``; with the default
parameters (no row or column subsampling) nothing is random at all.  On one cluster layout the same seed
gives the same booster bit for bit.  Across different numbers of workers XGBoost promises nothing: each
worker sketches quantiles of its own rows and histograms are summed across workers, so the split
candidates and the floating-point sums change with the layout (see the README's measurements).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import calengine
from calengine.base import BoosterLearner
from calengine.params import with_parent_params

__all__ = ["XGBoost", "XGBoostDask", "check_library_version", "register_learners"]
__version__ = "0.1.0"

#: file name suffix of the booster inside the model directory (XGBoost picks the format from it)
BOOSTER_KEY = "booster.ubj"


class XGBoost(BoosterLearner):
    """Gradient-boosted trees (XGBoost ``hist``), trained in one process."""

    name = "xgboost"
    library = "xgboost"
    package = "xgboost-cpu"
    library_title = "XGBoost"
    booster_key = BOOSTER_KEY
    #: the probing child loads and scores a booster with the shared library alone (no Python package)
    native_probe = "calengine.boosters.native:probe_xgboost"

    def __init__(
        self,
        n_estimators: int = 100,
        max_depth: int = 6,
        learning_rate: float = 0.3,
        min_child_weight: float = 1.0,
        subsample: float = 1.0,
        colsample_bytree: float = 1.0,
        reg_lambda: float = 1.0,
        max_bin: int = 256,
        n_jobs: int = 1,
        random_state: int | None = None,
    ):
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.min_child_weight = min_child_weight
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.reg_lambda = reg_lambda
        self.max_bin = max_bin
        self.n_jobs = n_jobs
        self.random_state = random_state

    def booster_params(self, n_classes: int) -> dict[str, Any]:
        """XGBoost training parameters (without the thread count) for ``n_classes`` classes."""
        self.check_ranges(integers={"n_estimators": 1, "max_depth": 0, "max_bin": 2},
                          fractions=("subsample", "colsample_bytree"), positive=("learning_rate",))
        params: dict[str, Any] = {
            "tree_method": "hist",
            "max_depth": int(self.max_depth),
            "eta": float(self.learning_rate),
            "min_child_weight": float(self.min_child_weight),
            "subsample": float(self.subsample),
            "colsample_bytree": float(self.colsample_bytree),
            "lambda": float(self.reg_lambda),
            "max_bin": int(self.max_bin),
            "seed": int(self.random_state or 0),
            "verbosity": 0,
        }
        if n_classes > 2:
            params.update(objective="multi:softprob", num_class=int(n_classes), eval_metric="mlogloss")
        else:
            params.update(objective="binary:logistic", eval_metric="logloss")
        return params

    # ------------------------------------------------------------------ the library's side of BoosterLearner

    def train_booster(self, X, y, sample_weight, n_classes):
        xgb = self.library_module()
        params = {**self.booster_params(n_classes), "nthread": int(self.n_jobs)}
        dtrain = xgb.DMatrix(X, label=y.astype(np.float32), weight=sample_weight, nthread=int(self.n_jobs))
        return xgb.train(params, dtrain, num_boost_round=int(self.n_estimators), verbose_eval=False)

    def predict_booster(self, X) -> np.ndarray:
        return self.booster_.inplace_predict(X)

    def booster_bytes(self) -> bytes:
        return bytes(self.booster_.save_raw(raw_format="ubj"))

    def booster_from_bytes(self, blob: bytes):
        booster = self.library_module().Booster()
        booster.load_model(bytearray(blob))
        booster.set_param({"nthread": int(self.n_jobs)})
        return booster

    def validate_booster(self, data, n_features, n_classes):
        """:func:`calengine.boosters.checks.validate_xgboost`: the file checked in Python before the library reads it."""
        from calengine.boosters.checks import validate_xgboost

        return validate_xgboost(data, n_features, n_classes)

    def read_errors(self):
        return (self.library_module().core.XGBoostError,)


class XGBoostDask(XGBoost):
    """XGBoost trained across every Dask worker (``xgboost.dask.train``) in a partitioned fit.

    On in-memory arrays (``calengine.CalibratedClassifier``, the in-memory engine) it trains in one
    process exactly like ``xgboost``.  ``collective_timeout`` (seconds) bounds how long the surviving
    workers wait for a lost one before the fit fails (with one line, and no model written).
    """

    name = "xgboost_dask"
    trains_on_cluster = True

    @with_parent_params(XGBoost)
    def __init__(self, *, collective_timeout: int = 300, **params):
        super().__init__(**params)
        self.collective_timeout = collective_timeout

    def fit_on_cluster(self, client, training):
        import xgboost.dask as dxgb
        from xgboost.collective import Config

        params = self.booster_params(training.n_classes)
        self.check_ranges(integers={"collective_timeout": 1})  # seconds
        X, y = training.frames(client)
        # the global configuration travels to the workers' training tasks: keep them quiet
        with self.training_on_cluster(), self.library_module().config_context(verbosity=0):
            dtrain = dxgb.DaskDMatrix(client, X, y, feature_names=training.feature_names)
            out = dxgb.train(
                client, params, dtrain, num_boost_round=int(self.n_estimators), verbose_eval=False,
                coll_cfg=Config(timeout=int(self.collective_timeout)),
            )
        self.booster_ = out["booster"]
        self.booster_.set_param({"nthread": int(self.n_jobs)})
        self.n_classes_ = int(training.n_classes)
        return self

    def fit_margin_on_cluster(self, client, X, y, base_margin, weight=None, params=None, feature_types=None):
        """A two-class booster trained across every worker on dask collections with a per-row base
        margin (MCGrad's rounds, :mod:`calengine.methods.mcgrad`): ``X`` a dask DataFrame of features,
        ``y`` 0/1 labels, ``base_margin`` each row's starting logit, ``weight`` row weights (None: 1);
        ``params`` overrides of :meth:`booster_params` (e.g. ``base_score``, ``gamma``);
        ``feature_types`` XGBoost's per-column types (``"c"``: categorical, codes 0, 1, ... and NaN for
        missing; ``"q"``: numeric; None: all numeric).  Returns the booster (its feature names cleared:
        it scores plain arrays in the columns' order), not a fitted learner; a failure of the cluster is
        one line, as in :meth:`fit_on_cluster`."""
        import xgboost.dask as dxgb
        from xgboost.collective import Config

        self.check_ranges(integers={"collective_timeout": 1})
        merged = {**self.booster_params(2), **(params or {})}
        with self.training_on_cluster(), self.library_module().config_context(verbosity=0):
            categorical = {} if feature_types is None else {"feature_types": list(feature_types),
                                                            "enable_categorical": "c" in feature_types}
            dtrain = dxgb.DaskDMatrix(client, X, y, weight=weight, base_margin=base_margin, **categorical)
            out = dxgb.train(client, merged, dtrain, num_boost_round=int(self.n_estimators), verbose_eval=False,
                             coll_cfg=Config(timeout=int(self.collective_timeout)))
        booster = out["booster"]
        booster.feature_names = None
        booster.set_param({"nthread": int(self.n_jobs)})
        return booster


#: kept for code written against the plugin before BoosterLearner: ``check_library_version(recorded,
#: installed)`` refuses a booster of a newer release or another major version
check_library_version = XGBoost.check_library_version


@calengine.hookimpl
def register_learners(register):
    register(XGBoost)
    register(XGBoostDask)
