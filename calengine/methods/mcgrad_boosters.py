"""The libraries that train MCGrad's rounds (``--method-param booster=xgboost|lightgbm``): how a round's
booster is trained in one process, applied, serialised, checked and loaded, one small class per library.

Both see the same features, one categorical code column per ``--by`` column then the current logit
(:func:`calengine.methods.mcgrad.segment_codes`), and start every row from its logit (XGBoost's base margin,
LightGBM's init score); ``delta`` is the booster's own margin without it.  The reference implementation
trains LightGBM; XGBoost stays the default because MCGrad's figures in ``benchmarks/results`` and its
defaults' translation were made with it; LightGBM's data-parallel learner (``lightgbm_dask``) is the
alternative for a LightGBM shop.  Both are deterministic for one seed and one cluster layout.

MCGrad's booster settings map onto LightGBM as: ``max_depth`` d → ``max_depth`` d and ``num_leaves``
2^d (the depth-2 tree of four leaves XGBoost grows), ``min_child_weight`` → ``min_sum_hessian_in_leaf``
(both bound a leaf's summed hessian), ``reg_lambda`` → ``lambda_l2``, ``gamma`` → ``min_gain_to_split``,
``boost_from_average`` off (the init score is the start); LightGBM's categorical regularisation
(``cat_smooth``, ``max_cat_threshold``, ``min_data_per_group``) keeps its defaults.  Determinism:
``deterministic`` and ``force_row_wise``, one thread, seeded as the XGBoost rounds are.
"""

from __future__ import annotations

import numpy as np

__all__ = ["LIBRARIES", "library"]


def _features(X: np.ndarray, f: np.ndarray, dtype=np.float32) -> np.ndarray:
    """The round's feature matrix: the segment codes, then the logit.  XGBoost reads float32 whatever it
    is given; LightGBM keeps float64, so its rounds are handed float64 here as on the cluster (where the
    logit column is float64), or the split thresholds of the two paths would differ."""
    return np.column_stack([X, np.asarray(f, dtype=dtype)]).astype(dtype)


class XGBoostRounds:
    """XGBoost ``hist`` with categorical codes (``feature_types`` ``c``); files are native JSON."""

    name, learner, suffix = "xgboost", "xgboost_dask", "json"

    @staticmethod
    def feature_types(k: int) -> list[str]:
        return ["c"] * int(k) + ["q"]

    @staticmethod
    def cluster_params(params, seed: int) -> dict:
        """``fit_margin_on_cluster``'s ``params``: XGBoost's own names, one thread per worker task."""
        return {**params.booster_params(seed), "nthread": 1}

    def matrix(self, X, f, **kw):
        import xgboost as xgb

        return xgb.DMatrix(_features(X, f), feature_types=self.feature_types(X.shape[1]), enable_categorical=True, **kw)

    def train(self, params, X, f, y, w, seed: int):
        import xgboost as xgb

        data = self.matrix(X, f, label=y.astype(np.float32), weight=w, base_margin=f)
        return xgb.train(self.cluster_params(params, seed), data, num_boost_round=int(params.trees))

    def delta(self, booster, X, f) -> np.ndarray:
        return booster.predict(self.matrix(X, f), output_margin=True).astype(np.float64)

    def to_bytes(self, booster) -> bytes:
        return bytes(booster.save_raw(raw_format="ubj"))

    def load(self, blob: bytes):
        import xgboost as xgb

        booster = xgb.Booster()
        booster.load_model(bytearray(blob))
        booster.set_param({"nthread": 1})
        return booster

    def validate(self, blob: bytes, categories: list) -> None:
        from ..boosters.checks import validate_xgboost

        validate_xgboost(bytes(blob), n_features=len(categories), n_classes=2, categories=categories)

    def stored(self, blob: bytes, categories: list) -> bytes:
        """The file a model keeps: XGBoost's native JSON, from UBJSON or JSON bytes (validated first)."""
        self.validate(blob, categories)
        return bytes(self.load(blob).save_raw(raw_format="json"))


class LightGBMRounds:
    """LightGBM with ``categorical_feature`` the code columns; files are LightGBM's text model."""

    name, learner, suffix = "lightgbm", "lightgbm_dask", "txt"

    @staticmethod
    def params(params, seed: int) -> dict:
        d = int(params.max_depth)
        return {
            "objective": "binary", "learning_rate": float(params.learning_rate), "max_depth": d,
            "num_leaves": max(2, 2**d), "min_sum_hessian_in_leaf": float(params.min_child_weight),
            "lambda_l2": float(params.reg_lambda), "min_gain_to_split": float(params.gamma),
            "max_bin": int(params.max_bin), "boost_from_average": False, "seed": int(seed), "deterministic": True,
            "force_row_wise": True, "verbosity": -1,
        }

    feature_types = staticmethod(XGBoostRounds.feature_types)

    def cluster_params(self, params, seed: int) -> dict:
        """``fit_margin_on_cluster``'s ``params``: LightGBM's own names (lightgbm.dask sets the threads)."""
        return self.params(params, seed)

    def train(self, params, X, f, y, w, seed: int):
        import lightgbm as lgb

        k = X.shape[1]
        data = lgb.Dataset(_features(X, f, np.float64), label=y, weight=w, init_score=f, categorical_feature=list(range(k)),
                           params={"max_bin": int(params.max_bin), "verbosity": -1})
        return lgb.train({**self.params(params, seed), "num_threads": 1}, data, num_boost_round=int(params.trees))

    def delta(self, booster, X, f) -> np.ndarray:
        return np.asarray(booster.predict(_features(X, f, np.float64), raw_score=True, num_threads=1), dtype=np.float64)

    def to_bytes(self, booster) -> bytes:
        return booster.model_to_string().encode("utf-8")

    def load(self, blob: bytes):
        import lightgbm as lgb

        return lgb.Booster(model_str=bytes(blob).decode("utf-8"))

    def validate(self, blob: bytes, categories: list) -> None:
        from ..boosters.checks import validate_lightgbm

        validate_lightgbm(bytes(blob), n_features=len(categories), n_classes=2, categories=categories)

    def stored(self, blob: bytes, categories: list) -> bytes:
        """The file a model keeps: LightGBM's text model (validated)."""
        self.validate(blob, categories)
        return bytes(blob)


LIBRARIES = {"xgboost": XGBoostRounds(), "lightgbm": LightGBMRounds()}


def library(name: str):
    """The rounds' library by its ``booster`` name (checked by :class:`~calengine.methods.mcgrad.MCGradParams`)."""
    return LIBRARIES[name]
