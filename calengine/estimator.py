"""``CalibratedClassifier``: calengine as a scikit-learn estimator.

It fits exactly what ``calengine fit`` fits (same engine, same seeds), so a model built in a notebook
and one built from the shell agree bit for bit on the same data.  ``X`` may be a numeric array, a
scipy sparse matrix, or a pandas DataFrame (encoded with the same rules as the CLI).  The learner is a
registered name, a scikit-learn import path, a :class:`calengine.base.Learner`, or any scikit-learn
classifier instance (wrapped by :class:`EstimatorLearner`).
"""

from __future__ import annotations


import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from .wrapped_estimator import EstimatorLearner
from .errors import DataError


class CalibratedClassifier(ClassifierMixin, BaseEstimator):
    """A classifier whose ``predict_proba`` is calibrated by cross-validation (or Probing/bagging).

    Parameters mirror ``calengine fit``: ``learner``/``learner_params``, ``method``/``method_params``
    (a calibrator name such as ``"isotonic"``, ``"sigmoid"``, ``"binning"``, ``"rocch"``, or
    ``"probing"``/``"bagging"``), ``mode`` (``"ensemble"`` or ``"refit"``), ``cv``, ``seed``, and
    ``cluster`` (``None`` for the embedded scheduler, ``"local"``, or a scheduler address), and
    ``multiclass`` (``"CODE:COMBINER"`` such as ``"all_pairs:coupling"``: one binary learner per
    code-matrix column; default: the learner's own multiclass scores, normalised).  ``learner`` may
    be a list: each base learner is calibrated on its own and their posteriors are combined by
    ``combine`` (``"min"``, ``"max"``, ``"median"``, ``"mean"`` or ``"product"``; Duin & Tax).
    """

    def __init__(
        self,
        learner="gaussian_nb",
        method="isotonic",
        cv=5,
        mode="ensemble",
        seed=0,
        learner_params=None,
        method_params=None,
        cluster=None,
        workers=None,
        multiclass=None,
        combine=None,
        combiner_params=None,
    ):
        self.learner = learner
        self.method = method
        self.cv = cv
        self.mode = mode
        self.seed = seed
        self.learner_params = learner_params
        self.method_params = method_params
        self.cluster = cluster
        self.workers = workers
        self.multiclass = multiclass
        self.combine = combine
        self.combiner_params = combiner_params

    def _encode_fit(self, X):
        import pandas as pd

        if isinstance(X, pd.DataFrame):
            from .features import FeatureEncoder

            _check_unique_columns(X)

            encoder = FeatureEncoder().fit(X)
            return encoder, encoder.transform(X)
        return None, _as_matrix(X)

    def _encode(self, X):
        import pandas as pd

        if self.encoder_ is not None:
            if not isinstance(X, pd.DataFrame):
                raise DataError("this model was fitted on a DataFrame; pass a DataFrame with the same columns")
            _check_unique_columns(X)
            return self.encoder_.transform(X)
        Xm = _as_matrix(X)
        if Xm.shape[1] != self.n_features_in_:
            raise DataError(
                f"X has {Xm.shape[1]} features, but CalibratedClassifier was fitted with {self.n_features_in_};"
                " pass the same columns as in fit"
            )
        return Xm

    def fit(self, X, y, sample_weight=None, X_cal=None, y_cal=None):
        """Fit on ``X, y``; with ``X_cal, y_cal`` the learner sees all of ``X`` and the calibrators
        see only the scores of the calibration table (``calengine fit --calibration-data``)."""
        import pandas as pd

        from .cluster import dask_client
        from .data import LabelSpace
        from .tasks import TrainingData
        from .training import ENGINE_METHODS, FitConfig, check_cv, check_seed, fit_model

        check_seed(self.seed)
        if X_cal is None and self.method not in ENGINE_METHODS:
            check_cv(self.cv)
        y_series = pd.Series(np.asarray(y))
        labels = LabelSpace.from_series(y_series, target="y")
        encoder, Xm = self._encode_fit(X)
        if Xm.shape[0] != len(y_series):
            raise DataError(f"X has {Xm.shape[0]} rows but y has {len(y_series)}; pass one label per row")
        w = None if sample_weight is None else _check_weights(sample_weight, Xm.shape[0])
        data = TrainingData(X=Xm, y=labels.encode(y_series), w=w)
        several = isinstance(self.learner, (list, tuple))
        config = FitConfig(
            learner=list(self.learner) if several else self.learner,
            learner_params=dict(self.learner_params or {}) if (several or isinstance(self.learner, str)) else {},
            method=self.method,
            method_params=dict(self.method_params or {}),
            mode=self.mode,
            cv=self.cv,
            seed=self.seed,
            multiclass=self.multiclass,
            combiner_params=dict(self.combiner_params or {}),
            combine=self.combine,
        )
        cal_data = None
        if (X_cal is None) != (y_cal is None):
            raise DataError("pass both X_cal and y_cal to calibrate on a separate table, or neither")
        if X_cal is not None:
            Xc = encoder.transform(X_cal) if encoder is not None else _as_matrix(X_cal)
            cal_data = TrainingData(X=Xc, y=labels.encode(pd.Series(np.asarray(y_cal))))
        with dask_client(self.cluster, workers=self.workers) as client:
            model = fit_model(client, data, labels, encoder, config, cal_data=cal_data)
        self.model_ = model
        self.encoder_ = encoder
        self.classes_ = np.asarray(labels.classes)
        self.n_features_in_ = Xm.shape[1]
        return self

    def predict_proba(self, X) -> np.ndarray:
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "model_")
        return self.model_.predict_proba_features(self._encode(X))

    def predict(self, X) -> np.ndarray:
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def save(self, path) -> None:
        """Save the fitted model as a calengine model directory (``calengine score`` can use it)."""
        from .artifact import save_model

        model = self.model_
        if model.encoder is None:
            raise DataError(
                "only models fitted on a pandas DataFrame can be saved (the artifact records column names);"
                " fit on a DataFrame"
            )
        save_model(_storable(model), path)


def _storable(model):
    """The model with wrapped scikit-learn instances turned into the ``sklearn`` import-path learner."""
    from . import registry
    from .errors import ModelFormatError

    for m in model.members:
        for j, lr in enumerate(getattr(m, "learners", [])):
            if isinstance(lr, EstimatorLearner):
                cls = type(lr.estimator)
                if not cls.__module__.startswith("sklearn."):
                    raise ModelFormatError(
                        f"cannot save a model of {cls.__module__}.{cls.__name__}: only scikit-learn classes"
                        " or registered learners can be stored without pickle; wrap it in a learner plugin"
                    )
                path = f"{cls.__module__}.{cls.__name__}"
                new = registry.make_learner(path, lr.estimator.get_params(deep=False))
                new.from_state({"estimator": lr.estimator_, "n_classes": lr.n_classes_})
                m.learners[j] = new
    return model


def _check_unique_columns(X) -> None:
    duplicated = X.columns[X.columns.duplicated()]
    if len(duplicated):
        raise DataError(f"X has two columns named {duplicated[0]!r}; rename one of them")


def _check_weights(sample_weight, n_rows: int) -> np.ndarray:
    try:
        w = np.asarray(sample_weight, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"sample_weight must be numbers ({exc}); pass one non-negative weight per row") from exc
    if w.ndim != 1 or w.shape[0] != n_rows:
        raise DataError(f"sample_weight has shape {w.shape} but X has {n_rows} rows; pass one weight per row")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise DataError("sample_weight holds negative, NaN or infinite values; pass finite weights >= 0")
    return w


def _as_matrix(X):
    import scipy.sparse as sp

    if sp.issparse(X):
        return sp.csr_matrix(X, dtype=np.float64)
    try:
        arr = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"X must be numeric ({exc}); encode text columns first, or pass a pandas DataFrame") from exc
    if arr.ndim != 2:
        raise DataError(f"X must be 2-D (rows x features), got shape {arr.shape}")
    return arr
