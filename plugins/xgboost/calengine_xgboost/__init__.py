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
another major version, naming the version to install.

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
from calengine import library_models
from calengine.base import Learner
from calengine.errors import CalengineError, LearnerError, ModelFormatError, ParameterError

__all__ = ["XGBoost", "XGBoostDask", "register_learners"]
__version__ = "0.1.0"

#: file name suffix of the booster inside the model directory (XGBoost picks the format from it)
BOOSTER_KEY = "booster.ubj"


def _library():
    import xgboost

    return xgboost


def check_library_version(recorded: str, installed: str, library: str = "xgboost", package: str = "xgboost-cpu") -> None:
    """Refuse a booster written by a newer release or another major version of the library."""
    library_models.check_library_version(recorded, installed, library, package)


class XGBoost(Learner):
    """Gradient-boosted trees (XGBoost ``hist``), trained in one process."""

    name = "xgboost"
    accepts_sample_weight = True
    score_kind = "proba"
    #: DMatrix/Dataset and prediction take scipy CSR as they take dense arrays (text columns)
    accepts_sparse = True

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

    # ------------------------------------------------------------------ parameters

    def _check_params(self) -> None:
        if not isinstance(self.n_estimators, (int, np.integer)) or self.n_estimators < 1:
            raise ParameterError(f"learner '{self.name}': n_estimators must be a positive integer, got {self.n_estimators!r}")
        if not isinstance(self.max_depth, (int, np.integer)) or self.max_depth < 0:
            raise ParameterError(f"learner '{self.name}': max_depth must be an integer >= 0, got {self.max_depth!r}")
        for key in ("subsample", "colsample_bytree"):
            v = getattr(self, key)
            if not isinstance(v, (int, float)) or not 0 < v <= 1:
                raise ParameterError(f"learner '{self.name}': {key} must be in (0, 1], got {v!r}")
        if not isinstance(self.learning_rate, (int, float)) or self.learning_rate <= 0:
            raise ParameterError(f"learner '{self.name}': learning_rate must be positive, got {self.learning_rate!r}")
        if not isinstance(self.max_bin, (int, np.integer)) or self.max_bin < 2:
            raise ParameterError(f"learner '{self.name}': max_bin must be an integer >= 2, got {self.max_bin!r}")

    def booster_params(self, n_classes: int) -> dict[str, Any]:
        """XGBoost training parameters (without the thread count) for ``n_classes`` classes."""
        self._check_params()
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

    # ------------------------------------------------------------------ the contract

    def fit(self, X, y, sample_weight=None):
        xgb = _library()
        y = np.asarray(y)
        n_classes = max(2, int(y.max()) + 1) if y.size else 2
        params = {**self.booster_params(n_classes), "nthread": int(self.n_jobs)}
        weight = None if sample_weight is None else np.asarray(sample_weight, dtype=float)
        dtrain = xgb.DMatrix(X, label=y.astype(np.float32), weight=weight, nthread=int(self.n_jobs))
        self.booster_ = xgb.train(params, dtrain, num_boost_round=int(self.n_estimators), verbose_eval=False)
        self.n_classes_ = n_classes
        return self

    def score(self, X) -> np.ndarray:
        out = np.asarray(self.booster_.inplace_predict(X), dtype=np.float64)
        if self.n_classes_ > 2:
            return out.reshape(-1, self.n_classes_)
        return out.reshape(-1)

    def to_state(self) -> dict[str, Any]:
        raw = self.booster_.save_raw(raw_format="ubj")
        return library_models.library_state(BOOSTER_KEY, raw, self.n_classes_, "xgboost", _library().__version__)

    def from_state(self, state: dict[str, Any]) -> "XGBoost":
        xgb = _library()
        blob, n_classes = library_models.read_library_state(
            state, self.name, BOOSTER_KEY, "xgboost", xgb.__version__, package="xgboost-cpu"
        )
        booster = xgb.Booster()
        try:
            booster.load_model(bytearray(blob))
        except xgb.core.XGBoostError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelFormatError(f"the XGBoost booster of learner '{self.name}' cannot be read ({first}); fit the model again") from exc
        booster.set_param({"nthread": int(self.n_jobs)})
        self.booster_ = booster
        self.n_classes_ = n_classes
        return self


class XGBoostDask(XGBoost):
    """XGBoost trained across every Dask worker (``xgboost.dask.train``) in a partitioned fit.

    On in-memory arrays (``calengine.CalibratedClassifier``, the in-memory engine) it trains in one
    process exactly like ``xgboost``.  ``collective_timeout`` (seconds) bounds how long the surviving
    workers wait for a lost one before the fit fails (with one line, and no model written).
    """

    name = "xgboost_dask"
    trains_on_cluster = True

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
        collective_timeout: int = 300,
    ):
        super().__init__(
            n_estimators=n_estimators, max_depth=max_depth, learning_rate=learning_rate,
            min_child_weight=min_child_weight, subsample=subsample, colsample_bytree=colsample_bytree,
            reg_lambda=reg_lambda, max_bin=max_bin, n_jobs=n_jobs, random_state=random_state,
        )
        self.collective_timeout = collective_timeout

    def fit_on_cluster(self, client, training):
        import xgboost.dask as dxgb
        from xgboost.collective import Config

        params = self.booster_params(training.n_classes)
        if not isinstance(self.collective_timeout, (int, np.integer)) or self.collective_timeout < 1:
            raise ParameterError(f"learner '{self.name}': collective_timeout must be a positive integer (seconds)")
        X, y = training.frames(client)
        try:
            # the global configuration travels to the workers' training tasks: keep them quiet
            with _library().config_context(verbosity=0):
                dtrain = dxgb.DaskDMatrix(client, X, y, feature_names=training.feature_names)
                out = dxgb.train(
                    client, params, dtrain, num_boost_round=int(self.n_estimators), verbose_eval=False,
                    coll_cfg=Config(timeout=int(self.collective_timeout)),
                )
        except CalengineError:
            raise
        except Exception as exc:  # noqa: BLE001 - the cluster's failure, told in one line
            raise LearnerError(_one_line(self.name, exc)) from exc
        self.booster_ = out["booster"]
        self.booster_.set_param({"nthread": int(self.n_jobs)})
        self.n_classes_ = int(training.n_classes)
        return self


def _one_line(name: str, exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    if type(exc).__name__ in ("KilledWorker", "CommClosedError", "FutureCancelledError", "CancelledError") or (
        isinstance(exc, AssertionError) and text == "lost"
    ):
        return (
            f"learner '{name}' lost a Dask worker while training on the cluster ({type(exc).__name__}: {text});"
            " XGBoost cannot resume a distributed training, so no model was written: run the fit again"
        )
    return (
        f"learner '{name}' failed while training on the cluster ({type(exc).__name__}: {text}); no model was"
        " written: check the workers and run the fit again"
    )


@calengine.hookimpl
def register_learners(register):
    register(XGBoost)
    register(XGBoostDask)
