"""LightGBM as calengine learners: ``lightgbm`` (one process) and ``lightgbm_dask`` (the whole cluster).

=============  ==============  ==========  =====================================================
name           sample weights  score_kind  trains
=============  ==============  ==========  =====================================================
lightgbm       yes             proba       in one task on one worker (``lightgbm.train``)
lightgbm_dask  yes             proba       on the cluster (``lightgbm.dask.DaskLGBMClassifier``)
                                           in a partitioned fit; in one process on arrays
=============  ==============  ==========  =====================================================

Objective ``binary`` for two classes, ``multiclass`` (softmax) for more: ``score`` then returns the
``(n, k)`` class probabilities, which calengine calibrates one-vs-rest and normalises.

``lightgbm_dask`` declares ``trains_on_cluster``: in a partition-native fit the engine hands it the Dask
client and a description of each fold's training partitions (read on the workers by calengine's reader);
LightGBM's data-parallel learner then trains on every worker, talking over its own sockets on the
workers' addresses (``network_timeout`` minutes bound the wait for a lost peer).

Persistence never pickles: the booster is written in LightGBM's own text model format
(``learner_<j>.booster.txt`` inside the model directory; LightGBM's JSON dump cannot be loaded back, so
the text format is the library's native loadable one) and read with ``lightgbm.Booster(model_str=...)``.
The LightGBM version that wrote it is recorded and checked on load.  That part (state layout, version
check, one-line errors, the shape of ``score``) is :class:`calengine.base.BoosterLearner`'s, shared with
calengine-xgboost; this module holds only what is LightGBM's own.

Determinism: ``random_state`` (from ``--seed``) is LightGBM's ``seed``; ``deterministic=true`` and
``force_row_wise=true`` are always set, so one layout gives the same booster bit for bit.  Across
different numbers of workers the data-parallel learner bins each worker's rows and sums histograms
across workers, so models differ with the layout (see the README's measurements).
"""

from __future__ import annotations

import re
import time
import warnings
from typing import Any

import calengine
from calengine.base import BoosterLearner
from calengine.errors import LearnerError
from calengine.params import with_parent_params

__all__ = ["LightGBM", "LightGBMDask", "check_library_version", "register_learners", "run_watching_workers"]
__version__ = "0.1.0"

BOOSTER_KEY = "booster.txt"


class LightGBM(BoosterLearner):
    """Gradient-boosted trees (LightGBM), trained in one process."""

    name = "lightgbm"
    library = "lightgbm"
    library_title = "LightGBM"
    booster_key = BOOSTER_KEY
    #: the probing child loads and scores a booster with the shared library alone (no Python package)
    native_probe = "calengine.boosters.native:probe_lightgbm"

    def __init__(
        self,
        n_estimators: int = 100,
        num_leaves: int = 31,
        learning_rate: float = 0.1,
        min_child_samples: int = 20,
        subsample: float = 1.0,
        colsample_bytree: float = 1.0,
        reg_lambda: float = 0.0,
        max_bin: int = 255,
        n_jobs: int = 1,
        random_state: int | None = None,
    ):
        self.n_estimators = n_estimators
        self.num_leaves = num_leaves
        self.learning_rate = learning_rate
        self.min_child_samples = min_child_samples
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.reg_lambda = reg_lambda
        self.max_bin = max_bin
        self.n_jobs = n_jobs
        self.random_state = random_state

    def booster_params(self, n_classes: int) -> dict[str, Any]:
        """LightGBM parameters (without the thread count) for ``n_classes`` classes."""
        self.check_ranges(integers={"n_estimators": 1, "num_leaves": 2, "min_child_samples": 1, "max_bin": 2},
                          fractions=("subsample", "colsample_bytree"), positive=("learning_rate",))
        params: dict[str, Any] = {
            "num_leaves": int(self.num_leaves),
            "learning_rate": float(self.learning_rate),
            "min_child_samples": int(self.min_child_samples),
            "bagging_fraction": float(self.subsample),
            "bagging_freq": 1 if self.subsample < 1 else 0,
            "feature_fraction": float(self.colsample_bytree),
            "lambda_l2": float(self.reg_lambda),
            "max_bin": int(self.max_bin),
            "seed": int(self.random_state or 0),
            "deterministic": True,
            "force_row_wise": True,
            "verbosity": -1,
        }
        if n_classes > 2:
            params.update(objective="multiclass", num_class=int(n_classes))
        else:
            params.update(objective="binary")
        return params

    # ------------------------------------------------------------------ the library's side of BoosterLearner

    def train_booster(self, X, y, sample_weight, n_classes):
        lgb = self.library_module()
        params = {**self.booster_params(n_classes), "num_threads": int(self.n_jobs)}
        data = lgb.Dataset(X, label=y, weight=sample_weight, params={"max_bin": int(self.max_bin), "verbosity": -1})
        return lgb.train(params, data, num_boost_round=int(self.n_estimators))

    def predict_booster(self, X):
        return self.booster_.predict(X, num_threads=int(self.n_jobs))

    def booster_bytes(self) -> bytes:
        return self.booster_.model_to_string().encode("utf-8")

    def booster_from_bytes(self, blob: bytes):
        return self.library_module().Booster(model_str=blob.decode("utf-8"))

    def validate_booster(self, data, n_features, n_classes):
        """:func:`calengine.boosters.checks.validate_lightgbm`: the file checked in Python before the library reads it."""
        from calengine.boosters.checks import validate_lightgbm

        return validate_lightgbm(data, n_features, n_classes)

    def read_errors(self):
        return (self.library_module().basic.LightGBMError, UnicodeDecodeError)


class LightGBMDask(LightGBM):
    """LightGBM's data-parallel learner across every Dask worker in a partitioned fit; on in-memory
    arrays it trains in one process exactly like ``lightgbm``."""

    name = "lightgbm_dask"
    trains_on_cluster = True

    @with_parent_params(LightGBM)
    def __init__(self, *, network_timeout: int = 5, **params):
        super().__init__(**params)
        self.network_timeout = network_timeout

    def fit_on_cluster(self, client, training):
        import lightgbm.dask as dlgb

        params = self.booster_params(training.n_classes)
        self.check_ranges(integers={"network_timeout": 1})  # minutes
        objective = params.pop("objective")
        params.pop("num_class", None)
        X, y = training.frames(client)
        with self.training_on_cluster():
            model = dlgb.DaskLGBMClassifier(
                client=client, objective=objective, n_estimators=int(self.n_estimators), tree_learner="data",
                time_out=int(self.network_timeout), **params,
            )

            def train():
                with client.as_current(), warnings.catch_warnings():
                    # lightgbm.dask sets each worker's threads itself and warns that n_jobs is ignored
                    warnings.filterwarnings("ignore", message="Parameter .* will be ignored", category=UserWarning)
                    model.fit(X, y)

            run_watching_workers(client, train, self.name)
            booster = model.booster_
        # the classifier's booster, re-read from its own text format so it carries no client state
        self.booster_ = self.library_module().Booster(model_str=booster.model_to_string())
        self.n_classes_ = int(training.n_classes)
        return self


    #: LightGBM's parameter names that the scikit-learn classifier takes under its own names
    _SKLEARN_NAMES = {"min_sum_hessian_in_leaf": "min_child_weight", "lambda_l2": "reg_lambda",
                      "min_gain_to_split": "min_split_gain", "seed": "random_state"}

    def fit_margin_on_cluster(self, client, X, y, base_margin, weight=None, params=None, feature_types=None):
        """A two-class booster trained by the data-parallel learner across every worker, each row starting
        from its ``base_margin`` (LightGBM's init score; MCGrad's rounds, :mod:`calengine.fit.mcgrad.cluster`):
        ``X`` a dask DataFrame of features, ``y`` 0/1 labels, ``weight`` row weights (None: 1), ``params``
        LightGBM parameters overriding :meth:`booster_params`, ``feature_types`` per column (``"c"``:
        categorical codes, passed as ``categorical_feature``; ``"q"``: numeric).  Returns the
        ``lightgbm.Booster`` (re-read from its text model), not a fitted learner; a lost worker is one
        line, as in :meth:`fit_on_cluster`."""
        import lightgbm.dask as dlgb

        self.check_ranges(integers={"network_timeout": 1})
        merged = {**self.booster_params(2), **(params or {})}
        merged.pop("num_threads", None)
        objective = merged.pop("objective")
        merged = {self._SKLEARN_NAMES.get(k, k): v for k, v in merged.items()}
        categorical = [j for j, t in enumerate(feature_types or []) if t == "c"] or "auto"
        with self.training_on_cluster():
            model = dlgb.DaskLGBMClassifier(client=client, objective=objective, n_estimators=int(self.n_estimators),
                                            tree_learner="data", time_out=int(self.network_timeout), **merged)

            def train():
                with client.as_current(), warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message="Parameter .* will be ignored", category=UserWarning)
                    model.fit(X, y, sample_weight=weight, init_score=base_margin, categorical_feature=categorical)

            run_watching_workers(client, train, self.name)
            text = model.booster_.model_to_string()
        # the text's parameter section records this run's random ports: drop them, so that one seed and
        # one layout give the same file byte for byte (LightGBM reads that section as information only)
        return self.library_module().Booster(model_str=_NETWORK_PARAMS.sub("", text))


#: kept for code written against the plugin before BoosterLearner: ``check_library_version(recorded,
#: installed)`` refuses a booster of a newer release or another major version
check_library_version = LightGBM.check_library_version


def _scheduler_workers(dask_scheduler=None):
    return sorted(dask_scheduler.workers)


def _workers(client) -> set:
    """The workers the scheduler knows now (asked, not the client's periodically refreshed copy)."""
    return set(client.run_on_scheduler(_scheduler_workers))


def run_watching_workers(client, fn, name: str, poll: float = 0.5) -> None:
    """Run ``fn()`` in a thread and fail as soon as a worker present at the start leaves.

    LightGBM's data-parallel training cannot survive a lost peer: the lost worker's part stays pinned
    to its old address and the survivors block in LightGBM's network layer until ``time_out``.  Rather
    than hang, the fit fails in one line (no model is written); the survivors are released when their
    network timeout expires.
    """
    import threading

    start = _workers(client)
    box: dict[str, BaseException] = {}

    def target():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    def lost_worker(lost):
        return LearnerError(
            f"learner '{name}' lost worker {sorted(lost)[0]} while training on the cluster; LightGBM cannot"
            " resume a distributed training, so no model was written: run the fit again"
        )

    thread = threading.Thread(target=target, name=f"{name}-train", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(poll)
        if not thread.is_alive():
            break
        lost = start - _workers(client)
        if lost:
            raise lost_worker(lost)
    if "error" in box:
        # A survivor's socket to the dead peer usually breaks before the scheduler has noticed the
        # death (its heartbeat timeout): give the scheduler time to say which worker it was.
        if _NETWORK_FAILURE.search(str(box["error"])):
            deadline = time.monotonic() + LOST_WORKER_GRACE
            while time.monotonic() < deadline:
                lost = start - _workers(client)
                if lost:
                    raise lost_worker(lost) from box["error"]
                time.sleep(poll)
        raise box["error"]


#: the lines of a model's parameter section that name the training run's sockets
_NETWORK_PARAMS = re.compile(r"^\[(?:machines|local_listen_port): [^\]\n]*\]\n", re.MULTILINE)
#: LightGBM's messages when a peer's connection breaks (its network layer, e.g. "Socket recv error")
_NETWORK_FAILURE = re.compile(r"socket|connection|network|timed? ?out", re.IGNORECASE)
#: seconds to wait, after such a failure, for the scheduler to report the worker that died
LOST_WORKER_GRACE = 15.0


@calengine.hookimpl
def register_learners(register):
    register(LightGBM)
    register(LightGBMDask)
