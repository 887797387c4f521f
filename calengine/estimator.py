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
from sklearn.utils import metadata_routing

from .adapters.wrapped_estimator import EstimatorLearner
from .errors import DataError, ParameterError
from .testing.declared import expected_failed_checks  # noqa: F401 - its documented home is here


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

    ``sample_weight`` works with every learner.  A learner without ``sample_weight`` (``knn``,
    ``fisher_lda``, ``qda``, ``bayes_full``, some scikit-learn classes) trains on a seeded costing
    sample of its training rows, each kept with probability ``w / max(w)`` (Zadrozny, Langford & Abe
    2003), exactly as ``calengine fit --weight`` trains it; the calibrators get the weights
    themselves.  Why not refuse the weights, or ignore them as scikit-learn's
    ``CalibratedClassifierCV`` does (with a warning that the result is "likely to be incorrect")?
    Costing trains the learner on the weighted distribution, is exact for 0/1 weights, and gives
    the CLI's model; its price is that weights are not the same as repeated rows (a sample, not a
    count), which is why ``check_sample_weight_equivalence_*`` is declared for these learners in
    :func:`expected_failed_checks`.  A sample keeps about ``sum(w) / max(w)`` rows, so one heavy row
    among light ones leaves a handful and can lose a class (scikit-learn's 16-row
    ``check_sample_weights_not_overwritten`` table loses one for 44% of seeds): a class of positive
    weight that the draw missed then keeps its one row nearest to acceptance, on the CLI too.  A
    learner must see every class to score it, and what that row overstates of the class's frequency
    the calibrators correct, since they are fitted with the true weights (``knn`` on 300 rows of pima
    with class 1, a third of the rows, weighted 1e-6: mean calibrated probability 0.004).  Only a
    class whose rows all weigh 0 is refused, in one line.

    ``conformal``: prediction sets with a coverage guarantee (split conformal, ``calengine conformal``;
    docs/guide/conformal.md): ``alpha`` as a number, or a dict of :func:`calengine.conformalize`'s options
    (``{"alpha": 0.1, "score": "aps", "mondrian": "class"}``; ``mondrian`` may also name columns of a
    DataFrame ``X``).  The thresholds come from rows the model did not train on: pass them to ``fit``
    as ``X_conformal``/``y_conformal``, or later to :meth:`conformalize`; then :meth:`predict_set` gives
    each row's set as a boolean (n, k) array and :meth:`predict_p_values` its conformal p-values.
    ``sample_weight`` of :meth:`conformalize` are covariate-shift weights w(x) (weighted conformal), and
    the test rows' weights go to :meth:`predict_set`.

    ``cv`` defaults to 5 folds and a class with fewer rows than folds is refused (one line naming
    ``cv``), as scikit-learn's ``CalibratedClassifierCV`` refuses it ("Requesting 5-fold
    cross-validation but provided less than 5 examples for at least one class"): a fold without
    held-out rows of a class would calibrate that class on nothing.  scikit-learn's own checks run
    ``CalibratedClassifierCV`` with ``cv=3``; with the default here ``check_fit2d_1feature`` (10 rows,
    the rarer class 3 of them) is therefore a declared expected failure, not a change of the rule.
    """

    # ``groups`` is for the cv splitter, which requests it itself (see ``get_metadata_routing``): it
    # is no request of this estimator, so ``set_fit_request`` offers sample_weight, X_cal and y_cal
    __metadata_request__fit = {"groups": metadata_routing.UNUSED}

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
        conformal=None,
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
        self.conformal = conformal

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = self._accepts_sparse()
        tags.input_tags.allow_nan = False  # numeric arrays must be finite; DataFrames are imputed (see fit)
        if _is_frozen(self.learner):  # X reaches the frozen estimator as it is: its own tags say what it takes
            from sklearn.utils import get_tags

            inner = get_tags(self.learner.estimator).input_tags
            tags.input_tags.allow_nan = inner.allow_nan
            tags.input_tags.string = inner.string
            tags.input_tags.categorical = inner.categorical
        return tags

    def _accepts_sparse(self) -> bool:
        """Whether every base learner takes CSR input (so sparse ``X`` is refused up front otherwise)."""
        return self._dense_only_learner() is None

    def _base_learners(self) -> list | None:
        """The base learners ``learner`` names, resolved; None when they cannot be (an unknown name
        fails in fit with its own message)."""
        from .fit.training import FitConfig, resolve_learner, split_learners

        try:
            from .plugins.loading import get_plugins

            plugins = get_plugins()
            return [resolve_learner(FitConfig(learner=lr), plugins) for lr in split_learners(self.learner)]
        except Exception:  # noqa: BLE001 - an unknown name fails in fit with its own message
            return None

    def _learner_without_weights(self) -> str | None:
        """The name of the first base learner without ``sample_weight`` (trained on a costing sample
        when weights are given), None when all take weights or the learners cannot be resolved."""
        for lr in self._base_learners() or []:
            if not lr.accepts_sample_weight:
                return str(getattr(lr, "name", type(lr).__name__))
        return None

    def _dense_only_learner(self) -> str | None:
        """The name of the first base learner that needs dense input ("" when the learners cannot be
        resolved: an unknown name fails in fit with its own message), None when all take CSR."""
        learners = self._base_learners()
        if learners is None:
            return ""
        for lr in learners:
            accepts = getattr(lr, "accepts_sparse", None)
            if accepts is None and isinstance(lr, EstimatorLearner):
                try:
                    accepts = lr.estimator.__sklearn_tags__().input_tags.sparse
                except AttributeError:
                    accepts = False
            if accepts is False:
                return str(getattr(lr, "name", type(lr).__name__))
        return None

    def _refuse_sparse(self, X) -> None:
        """Sparse ``X`` for a dense-only learner: one line naming it and the fix (a ``ValueError`` with
        "sparse" in it, as scikit-learn's checks expect), before scikit-learn's generic TypeError."""
        import scipy.sparse as sp

        if sp.issparse(X):
            name = self._dense_only_learner()
            if name:
                raise DataError(
                    f"learner '{name}' needs dense features but X is a sparse matrix; pass X.toarray(), or"
                    " choose a learner with sparse support (e.g. logistic_regression, linear_svm,"
                    " decision_tree; a plugin's author can declare accepts_sparse = True once fit and score"
                    " take scipy CSR)"
                )

    def _encode_fit(self, X, y):
        """(encoder or None, feature matrix, 1-D labels), every check scikit-learn's conventions ask for."""
        import pandas as pd
        from sklearn.utils.validation import column_or_1d, validate_data

        if isinstance(X, pd.DataFrame):
            from .plan.features import FeatureEncoder

            _check_unique_columns(X)
            if y is None:
                raise DataError("CalibratedClassifier requires y to be passed, but the target y is None")
            y = column_or_1d(np.asarray(y) if not isinstance(y, pd.Series) else y.to_numpy(), warn=True)
            encoder = FeatureEncoder().fit(X)
            if hasattr(self, "feature_names_in_"):
                delattr(self, "feature_names_in_")
            if all(isinstance(c, str) for c in X.columns):  # scikit-learn's rule: string names only
                self.feature_names_in_ = np.asarray(list(X.columns), dtype=object)
            return encoder, encoder.transform(X), y
        self._refuse_sparse(X)
        sparse = "csr" if self._accepts_sparse() else False
        try:
            Xm, y = validate_data(self, X, y, accept_sparse=sparse, dtype=np.float64, ensure_all_finite=True)
        except ValueError as exc:  # scikit-learn's wording (its checks match it), typed as ours
            raise DataError(" ".join(str(exc).split())) from exc
        return None, Xm, y

    def _encode(self, X):
        import pandas as pd
        from sklearn.utils.validation import validate_data

        if self.encoder_ is not None:
            if not isinstance(X, pd.DataFrame):
                X = self._as_fitted_frame(X)
            _check_unique_columns(X)
            return self.encoder_.transform(X)
        self._refuse_sparse(X)
        sparse = "csr" if self._accepts_sparse() else False
        try:
            return validate_data(self, X, accept_sparse=sparse, dtype=np.float64, ensure_all_finite=True, reset=False)
        except ValueError as exc:  # scikit-learn's wording (its checks match it), typed as ours
            raise DataError(f"{' '.join(str(exc).split()).rstrip('.')}; pass the same columns as in fit, all finite") from exc

    def _as_fitted_frame(self, X):
        """Array input to a model fitted on a DataFrame, scikit-learn's way: a ``UserWarning`` that X
        has no feature names, then the columns taken in the order of fit (encoded by the same rules).
        A sparse matrix or another number of columns is one line naming the fix."""
        import warnings

        import pandas as pd
        import scipy.sparse as sp

        columns = list(getattr(self, "feature_names_in_", self.encoder_.input_columns))
        if sp.issparse(X):
            raise DataError("this model was fitted on a DataFrame; pass a DataFrame (or a dense array) of its columns")
        arr = np.asarray(X)
        if arr.ndim != 2:
            raise DataError(f"X must be 2-D (rows x features), got shape {arr.shape}")
        if arr.shape[1] != len(columns):
            raise DataError(
                f"X has {arr.shape[1]} features, but {type(self).__name__} is expecting {len(columns)} features"
                f" as input (the columns of the DataFrame it was fitted on); pass those columns in that order"
            )
        warnings.warn(
            f"X does not have valid feature names, but {type(self).__name__} was fitted with feature names",
            UserWarning,
        )
        return pd.DataFrame(arr, columns=columns)

    def fit(self, X, y=None, sample_weight=None, groups=None, *, X_cal=None, y_cal=None, X_conformal=None,
            y_conformal=None, **fit_params):
        """Fit on ``X, y``; with ``X_cal, y_cal`` the learner sees all of ``X`` and the calibrators
        see only the scores of the calibration table (``calengine fit --calibration-data``).

        ``groups`` (one label per row) go to the ``cv`` splitter's ``split(X, y, groups)``, so
        ``cv=GroupKFold(5)`` or ``LeaveOneGroupOut()`` never puts rows of one group on both sides of a
        fold.  With scikit-learn's metadata routing enabled (``sklearn.set_config(
        enable_metadata_routing=True)``) ``groups`` and any other ``**fit_params`` are routed as
        ``get_metadata_routing`` says: to the splitter's ``split`` when it requests them (group
        splitters request ``groups``), ``sample_weight`` to this estimator itself; that is how
        ``cross_val_score(..., params={"groups": g})`` and a ``Pipeline`` hand them over.  Without
        routing, ``groups`` go straight to the splitter and other ``fit_params`` are refused.  A group
        splitter without groups, groups beside calengine's own folds (an int ``cv``), a list of splits,
        ``X_cal`` or ``probing``/``bagging`` (which use no folds) are each a one-line typed error.

        Input rules, scikit-learn's where it has one: a numeric array (dense or sparse) must be finite
        (NaN or inf is a ``ValueError`` here, before any learner runs: put an imputer in front, as in
        any scikit-learn pipeline); a pandas DataFrame is encoded by the CLI's rules instead, which fill
        missing numbers with the training median and add a missingness column, so a notebook fit and
        ``calengine fit`` of the same table agree.  ``y`` must hold class labels: a continuous target
        is a ``ValueError`` naming it so; a ``(n, 1)`` column is accepted with scikit-learn's
        ``DataConversionWarning``.

        ``cv``: a number of folds (calengine's seeded, stratified folds of the rows as given; ``calengine
        fit --cv`` ties a row's fold to the file it was read from, so to reproduce a CLI model pass
        ``cv=calengine.table_splits(path, target)``), a scikit-learn splitter, or an iterable of
        (train, test) index pairs.  Splits
        that partition the rows work in both modes; others (``ShuffleSplit``) only in ``"ensemble"``
        mode, one member per split.  ``probing`` and ``bagging`` fit every classifier on all rows
        (they calibrate from votes, not held-out scores), so they ignore ``cv``.

        ``X_conformal, y_conformal``: rows the model does not train on, for the ``conformal`` layer
        (:meth:`conformalize` runs on them once the model is fitted).

        Errors name this estimator's parameters (``cv``, ``learner_params``, ...), not the CLI's flags.
        """
        with _python_names():
            if (X_conformal is None) != (y_conformal is None):
                raise ParameterError("pass both X_conformal and y_conformal, or neither")
            if X_conformal is not None:
                self._conformal_options()  # a bad conformal parameter fails before the fit
            split_params = self._split_params(sample_weight, groups, fit_params)
            if split_params and X_cal is not None:
                raise ParameterError(
                    f"{', '.join(sorted(split_params))} go to the cv splitter, but X_cal/y_cal calibrate on a"
                    " separate table without folds; drop groups, or drop X_cal/y_cal to calibrate on cv folds"
                )
            self._fit(X, y, sample_weight, X_cal, y_cal, split_params)
            if X_conformal is not None:
                self.conformalize(X_conformal, y_conformal)
            return self

    def _conformal_options(self, weighted: bool = False):
        """The checked options of the ``conformal`` parameter (errors name ``conformal[...]``)."""
        from .fit.conformal import check_options

        if self.conformal is None:
            raise ParameterError("conformal is None; set conformal=ALPHA (e.g. 0.1) or a dict of options such as"
                                 " {'alpha': 0.1, 'score': 'aps'} to compute prediction sets")
        given = {"alpha": self.conformal} if not isinstance(self.conformal, dict) else dict(self.conformal)
        known = {"alpha", "score", "mondrian", "randomized", "seed", "raps_lambda", "raps_k_reg", "max_segments"}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ParameterError(f"conformal has unknown option(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
        if "alpha" not in given:
            raise ParameterError("conformal needs 'alpha', the miscoverage rate in (0, 1), e.g. {'alpha': 0.1}")
        names = {k: f"conformal['{k}']" for k in known} | {"alpha": "conformal['alpha']" if isinstance(self.conformal, dict)
                                                          else "conformal", "weight": "sample_weight"}
        return check_options("y", given["alpha"], given.get("score", "lac"), given.get("mondrian"),
                             "sample_weight" if weighted else None, given.get("randomized"), given.get("seed", 0),
                             given.get("raps_lambda"), given.get("raps_k_reg"), given.get("max_segments"), names=names)

    def conformalize(self, X, y, sample_weight=None):
        """Attach the ``conformal`` layer from rows ``X, y`` the model did not train on (split conformal;
        see :func:`calengine.conformalize`).  ``sample_weight``: covariate-shift weights w(x) of these
        rows (weighted conformal; :meth:`predict_set` then needs the test rows' weights).  Returns self."""
        import pandas as pd
        from sklearn.utils.validation import check_is_fitted

        from .fit.conformal import conformalize_arrays

        check_is_fitted(self, "model_")
        with _python_names():
            opts = self._conformal_options(weighted=sample_weight is not None)
            Xm = self._encode(X)
            yv = np.asarray(y.to_numpy() if isinstance(y, pd.Series) else y).ravel()
            if Xm.shape[0] != yv.shape[0]:
                raise DataError(f"X has {Xm.shape[0]} rows but y has {yv.shape[0]}; pass one label per row")
            labels = self.model_.labels.encode(pd.Series(yv))
            w = None if sample_weight is None else _check_weights(sample_weight, Xm.shape[0])
            frame = X if isinstance(X, pd.DataFrame) else None
            self.model_, _ = conformalize_arrays(self.model_, Xm, labels, opts, w, frame)
        return self

    def _layer(self):
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "model_")
        if getattr(self.model_, "conformal", None) is None:
            raise ParameterError("this classifier has no conformal layer; set conformal=ALPHA and call"
                                 " conformalize(X, y) with rows it did not train on (or fit with X_conformal, y_conformal)")
        return self.model_.conformal

    def predict_set(self, X, sample_weight=None) -> np.ndarray:
        """Each row's prediction set as a boolean (n, k) array, columns in the order of ``classes_``
        (``sample_weight``: the rows' covariate-shift weights, for a weighted layer)."""
        import pandas as pd

        layer = self._layer()
        Xm = self._encode(X)
        P = self.model_.predict_proba_features(Xm)
        return layer.sets(P, Xm, X if isinstance(X, pd.DataFrame) else None, self._test_weights(layer, sample_weight))

    def predict_p_values(self, X, sample_weight=None) -> np.ndarray:
        """Conformal p-values (n, k): ``{c : p > alpha}`` is :meth:`predict_set`'s set."""
        import pandas as pd

        layer = self._layer()
        Xm = self._encode(X)
        P = self.model_.predict_proba_features(Xm)
        return layer.p_values(P, Xm, X if isinstance(X, pd.DataFrame) else None,
                              self._test_weights(layer, sample_weight))

    @staticmethod
    def _test_weights(layer, sample_weight):
        if layer.weight is None:
            if sample_weight is not None:
                raise ParameterError("sample_weight applies to a weighted conformal layer (conformalize with"
                                     " sample_weight); drop it")
            return None
        if sample_weight is None:
            raise ParameterError("this conformal layer is weighted: pass the rows' covariate-shift weights as sample_weight")
        return _check_weights(sample_weight, len(np.asarray(sample_weight)))

    def get_metadata_routing(self):
        """scikit-learn's metadata routing: ``fit`` consumes ``sample_weight`` itself (request it with
        ``set_fit_request(sample_weight=True)`` as for any consumer) and routes to the ``cv`` splitter's
        ``split`` what the splitter requests (``groups`` for group splitters), as
        ``CalibratedClassifierCV`` does.  ``probing``/``bagging`` use no folds, so they route nothing."""
        from sklearn.utils.metadata_routing import MetadataRouter, MethodMapping

        from .fit.training import ENGINE_METHODS

        router = MetadataRouter(owner=self).add_self_request(self)
        if self.method not in ENGINE_METHODS:
            router.add(splitter=self.cv, method_mapping=MethodMapping().add(caller="fit", callee="split"))
        return router

    def _split_params(self, sample_weight, groups, fit_params) -> dict:
        """What ``fit`` hands the cv splitter's ``split`` besides X and y: routed by scikit-learn when
        metadata routing is on, else ``groups`` alone (and no other fit parameter is understood)."""
        from sklearn.utils.metadata_routing import _routing_enabled, process_routing

        from .fit.training import cv_name, split_requests

        if groups is not None:
            self._check_cv_takes_groups()
        if not _routing_enabled():
            if fit_params:
                raise ParameterError(
                    f"fit got unexpected argument(s) {sorted(fit_params)}; CalibratedClassifier.fit takes X, y,"
                    " sample_weight, groups, X_cal and y_cal (other metadata reach the cv splitter only"
                    " through scikit-learn's metadata routing: sklearn.set_config(enable_metadata_routing=True))"
                )
            return {} if groups is None else {"groups": groups}
        given = {k: v for k, v in {"sample_weight": sample_weight, "groups": groups, **fit_params}.items()
                 if v is not None}
        if not given:
            return {}
        try:
            routed = process_routing(self, "fit", **given)
        except TypeError as exc:  # scikit-learn's "not routed to any object", typed as ours
            raise ParameterError(
                f"{exc} {cv_name(self.cv)} requests {split_requests(self.cv) or 'no metadata'} for its split; pass what"
                " it requests (groups for GroupKFold), or request more with the splitter's set_split_request"
            ) from exc
        split = routed.get("splitter", {}).get("split", {})  # no splitter for probing/bagging
        return {k: v for k, v in split.items() if v is not None}

    def _check_cv_takes_groups(self) -> None:
        """``groups`` need a splitter: refuse them (one line) where they would silently do nothing."""
        import numbers

        from .fit.training import ENGINE_METHODS

        if self.method in ENGINE_METHODS:
            raise ParameterError(
                f"method '{self.method}' fits every classifier on all rows and uses no cv folds, so groups"
                " would have no effect; drop groups, or choose a calibration method such as isotonic"
            )
        if isinstance(self.cv, numbers.Integral) or not hasattr(self.cv, "split"):
            what = (f"cv={self.cv} is calengine's own stratified folds, which ignore groups"
                    if isinstance(self.cv, numbers.Integral) else "cv is a list of splits, made already")
            raise ParameterError(
                f"groups go to a cv splitter, but {what}; pass a group splitter such as cv=GroupKFold(5) or"
                " LeaveOneGroupOut(), or drop groups"
            )

    def _fit(self, X, y, sample_weight, X_cal, y_cal, split_params):
        import pandas as pd

        from .runtime.client import dask_client
        from .parquet.data import LabelSpace
        from .tasks.arrays import TrainingData
        from .fit.training import ENGINE_METHODS, FitConfig, explicit_splits, fit_model, folds_of_splits
        from .plan.options import check_seed

        check_seed(self.seed)
        if _is_frozen(self.learner):
            return self._fit_frozen(X, y, sample_weight, X_cal, split_params)
        encoder, Xm, y = self._encode_fit(X, y)
        if Xm.shape[0] != len(y):
            raise DataError(f"X has {Xm.shape[0]} rows but y has {len(y)}; pass one label per row")
        _check_class_labels(y)
        y_series = pd.Series(y)
        labels = LabelSpace.from_series(y_series, target="y")
        w = None if sample_weight is None else _check_weights(sample_weight, Xm.shape[0])
        data = TrainingData(X=Xm, y=labels.encode(y_series), w=w)
        n_folds = self.cv
        if X_cal is None and self.method not in ENGINE_METHODS:
            splits = explicit_splits(self.cv, X, y, split_params)
            if splits is not None:
                n_folds = len(splits)
                data.folds = folds_of_splits(splits, len(data.y))
                if data.folds is None:
                    data.splits = tuple(splits)
        several = isinstance(self.learner, (list, tuple))
        config = FitConfig(
            learner=list(self.learner) if several else self.learner,
            learner_params=dict(self.learner_params or {}) if (several or isinstance(self.learner, str)) else {},
            method=self.method,
            method_params=dict(self.method_params or {}),
            mode=self.mode,
            cv=n_folds if isinstance(n_folds, int) else 5,
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
            cal_data = TrainingData(X=Xc, y=labels.encode(pd.Series(np.asarray(y_cal).ravel())))
        with dask_client(self.cluster, workers=self.workers) as client:
            model = fit_model(client, data, labels, encoder, config, cal_data=cal_data)
        self.model_ = model
        self.encoder_ = encoder
        self.classes_ = np.asarray(labels.classes)
        # scikit-learn's meaning: columns of the input (a DataFrame's, before encoding)
        self.n_features_in_ = X.shape[1] if encoder is not None else Xm.shape[1]
        return self

    def _fit_frozen(self, X, y, sample_weight, X_cal, split_params):
        """A fitted scikit-learn classifier in a ``sklearn.frozen.FrozenEstimator``: never refitted, every
        row of ``X`` calibrates its scores -- ``decision_function`` when it has one, else
        ``predict_proba``, as ``CalibratedClassifierCV(FrozenEstimator(...))`` does -- and ``cv`` is
        unused (scikit-learn's convention).  ``X`` reaches the estimator as it is, whatever it holds (a
        DataFrame of strings and categories for a ``ColumnTransformer`` pipeline, NaN for
        ``HistGradientBoostingClassifier``): it was trained on its own representation, and calengine
        checks only what its calibrators read, the estimator's scores (finite, one per row)."""
        import pandas as pd
        from sklearn.utils.validation import _num_samples, column_or_1d

        from .runtime.client import dask_client
        from .fit.training import ENGINE_METHODS, FitConfig, fit_model
        from .parquet.data import LabelSpace
        from .tasks.arrays import TrainingData

        if self.method in ENGINE_METHODS:
            raise ParameterError(f"method '{self.method}' fits many classifiers, and a FrozenEstimator is never refitted;"
                                 " choose a calibrator (isotonic, sigmoid, ...)")
        if X_cal is not None or split_params:
            raise ParameterError("a FrozenEstimator is calibrated on every row of X; drop X_cal/y_cal and groups")
        if y is None:
            raise DataError("CalibratedClassifier requires y to be passed, but the target y is None")
        y = column_or_1d(y.to_numpy() if isinstance(y, pd.Series) else np.asarray(y), warn=True)
        try:
            n_rows = _num_samples(X)
        except TypeError as exc:
            raise DataError(f"X must hold rows the FrozenEstimator can score ({exc}); pass an array or a DataFrame") from exc
        if n_rows != len(y):
            raise DataError(f"X has {n_rows} rows but y has {len(y)}; pass one label per row")
        self._frozen_input_names(X)
        Xm = X
        _check_class_labels(y)
        y_series = pd.Series(y)
        labels = LabelSpace.from_series(y_series, target="y")
        have = [str(c) for c in getattr(self.learner, "classes_", ())]
        if have != [str(c) for c in labels.classes]:
            raise DataError(f"the FrozenEstimator predicts the classes {have} but y holds {list(map(str, labels.classes))};"
                            " calibrate it on rows of the classes it was trained on")
        w = None if sample_weight is None else _check_weights(sample_weight, Xm.shape[0])
        data = TrainingData(X=Xm, y=labels.encode(y_series), w=w)
        config = FitConfig(learner=FrozenLearner(estimator=self.learner), method=self.method,
                           method_params=dict(self.method_params or {}), seed=self.seed)
        with dask_client(self.cluster, workers=self.workers) as client:
            # the calibration table is the whole of X: the learner's fit is FrozenEstimator's no-op
            self.model_ = fit_model(client, data, labels, None, config, cal_data=data)
        self.encoder_ = None
        self.classes_ = np.asarray(labels.classes)
        return self

    def _frozen_input_names(self, X) -> None:
        """``n_features_in_`` and ``feature_names_in_`` as scikit-learn's ``CalibratedClassifierCV`` sets
        them for a frozen estimator: the estimator's own when it has them, else those of ``X``."""
        est = self.learner.estimator
        for attr in ("n_features_in_", "feature_names_in_"):
            if hasattr(self, attr):
                delattr(self, attr)
        names = getattr(est, "feature_names_in_", None)
        if names is None and hasattr(X, "columns") and all(isinstance(c, str) for c in X.columns):
            names = np.asarray(list(X.columns), dtype=object)
        if names is not None:
            self.feature_names_in_ = np.asarray(names, dtype=object)
        n = getattr(est, "n_features_in_", None)
        if n is None and getattr(X, "ndim", 0) == 2:
            n = X.shape[1]
        if n is not None:
            self.n_features_in_ = int(n)

    def predict_proba(self, X) -> np.ndarray:
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "model_")
        if _is_frozen(self.learner) and self.encoder_ is None:
            return self.model_.predict_proba_features(X)  # the frozen estimator reads X as it is
        return self.model_.predict_proba_features(self._encode(X))

    def predict(self, X) -> np.ndarray:
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "model_")
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def save(self, path, trust=()) -> None:
        """Save the fitted model as a calengine model directory (``calengine score`` can use it).

        A model of a ``FrozenEstimator`` is stored as ``calengine fit --prefit`` stores a model trained
        elsewhere (:func:`calengine.adapters.prefit.frozen_prefit`): a scikit-learn estimator with skops, its
        types checked against the allowlist now (``trust``: type names you trust beyond it, which
        ``calengine score`` then needs as ``--trust-type``), an XGBoost/LightGBM classifier as its
        booster's bytes; it reads the columns the estimator (or this classifier's ``fit``) was given
        by name.  What cannot be stored so is refused in one line, and nothing is written."""
        from .model.artifact import save_model

        model = self.model_
        if _is_frozen(self.learner) and model.encoder is None:
            from .adapters.prefit import frozen_model

            model = frozen_model(model, self.learner, getattr(self, "feature_names_in_", None), trust)
        if model.encoder is None:
            raise DataError(
                "only models fitted on a pandas DataFrame can be saved (the artifact records column names);"
                " fit on a DataFrame"
            )
        save_model(_storable(model), path)


def _is_frozen(learner) -> bool:
    try:
        from sklearn.frozen import FrozenEstimator
    except ImportError:  # scikit-learn < 1.6
        return False
    return isinstance(learner, FrozenEstimator)


class FrozenLearner(EstimatorLearner):
    """A ``FrozenEstimator`` as a learner: scored by ``decision_function`` when the estimator has one,
    else ``predict_proba`` (scikit-learn's order for calibration); a fitted estimator that knows its
    columns' names gets them back.  Its ``fit`` is FrozenEstimator's no-op."""

    @property
    def score_kind(self) -> str:  # type: ignore[override]
        return "decision" if hasattr(self.estimator, "decision_function") else "proba"

    @property
    def accepts_sample_weight(self) -> bool:  # type: ignore[override]
        return True  # nothing is trained: the weights are the calibrators'

    def fit(self, X, y, sample_weight=None):
        self.estimator_ = self.estimator
        self.n_classes_ = int(len(self.estimator.classes_))
        return self

    def score(self, X):
        """The frozen estimator's scores of ``X`` as it is (a DataFrame keeps its strings, categories and
        NaN); a plain array given to an estimator fitted with column names gets those names back."""
        names = getattr(self.estimator, "feature_names_in_", None)
        if names is not None and not hasattr(X, "columns"):
            import pandas as pd

            X = pd.DataFrame(np.asarray(X), columns=list(names))
        return super().score(X)


def _storable(model):
    """The model with wrapped scikit-learn instances turned into the ``sklearn`` import-path learner."""
    from .plugins import registry
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


#: the Python parameters of the table API (which the shared checks name, ``exc.parameters``) that this
#: estimator spells otherwise
_ESTIMATOR_NAMES = {"calibration_data": "X_cal/y_cal", "target": "y"}

#: CLI flags a message may still name (a plugin's, or one written before messages named parameters)
#: -> this estimator's parameter names
_FLAG_NAMES = {
    "--cv": "cv", "--learner-param": "learner_params", "--method-param": "method_params",
    "--combiner-param": "combiner_params", "--calibration-data": "X_cal/y_cal", "--learner": "learner",
    "--method": "method", "--mode": "mode", "--seed": "seed", "--multiclass": "multiclass",
    "--combine": "combine", "--target": "y", "--workers": "workers", "--cluster": "cluster",
}


class _python_names:
    """Re-raise a :class:`CalengineError` whose message names a parameter of the table API this
    estimator spells otherwise (``exc.parameters``: ``calibration_data`` is ``X_cal/y_cal`` here), or
    still names a CLI flag (``--cv 5`` becomes ``cv=5``), with this estimator's names.  Same type and
    ``parameter``, original chained."""

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        import re

        from .errors import CalengineError

        if exc is None or not isinstance(exc, CalengineError) or not exc.args or not isinstance(exc.args[0], str):
            return False
        text = exc.args[0]
        new = text
        for name in getattr(exc, "parameters", ()):
            if name in _ESTIMATOR_NAMES:
                new = re.sub(rf"(?<![\w\-./]){name}(?![\w=])", _ESTIMATOR_NAMES[name], new)
        new = re.sub(r"--cv (\d+)", r"cv=\1", new)
        new = re.sub(r"--[a-z][a-z-]*", lambda m: _FLAG_NAMES.get(m.group(0), m.group(0)), new)
        if new == text:
            return False
        try:
            translated = type(exc)(new, *exc.args[1:])
            translated.__dict__.update(exc.__dict__)
        except Exception:  # noqa: BLE001 - an exception type with another signature keeps its message
            return False
        raise translated from exc


def _check_class_labels(y) -> None:
    """y must hold class labels (scikit-learn's binary/multiclass); continuous targets say so."""
    import pandas as pd
    from sklearn.utils.multiclass import type_of_target

    from .parquet.data import check_not_continuous

    missing = int(pd.isna(np.asarray(y, dtype=object)).sum()) if np.asarray(y).dtype.kind in "fcOUS" else 0
    if missing:  # scikit-learn's words first (its estimator checks match them), then the count and the fix
        raise DataError(f"Input y contains NaN: {missing} rows have no label (NaN or None); drop them or fill their labels")
    kind = type_of_target(y, input_name="y")
    if kind == "continuous":
        check_not_continuous(sorted(float(v) for v in pd.unique(np.asarray(y, dtype=np.float64))), "y")
    if kind not in ("binary", "multiclass"):
        raise DataError(f"Unknown label type: y is a {kind} target; y must hold one class label per row: pass a 1-D array of labels")


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
    from .reductions.column_stats import MAX_WEIGHT

    if w.size and w.max() > MAX_WEIGHT:
        raise DataError(f"sample_weight holds {w.max():g}; weights must be at most {MAX_WEIGHT:g}: divide them by a"
                        " constant")
    if n_rows and not np.any(w > 0):  # before any method's own sampling fails on it in its own words
        raise DataError("sample_weight is zero for every row; at least one row needs a positive weight")
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
