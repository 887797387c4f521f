"""Calibrating a model trained elsewhere: ``calengine fit DATA --target y --prefit PATH``.

A team's production model -- an XGBoost booster saved as JSON or UBJSON, a LightGBM text model, a
scikit-learn estimator saved with skops -- is calibrated without being refitted.  The file is checked
before any native code sees it, copied byte for byte into the model directory as the state of the
:class:`Prefit` learner (so it is hashed like every other file), loaded by its own library, and applied
per partition on the workers; every row of DATA (or of ``--calibration-data``) calibrates its scores
through the engine's partition reductions, exactly as for ``--scores`` (:mod:`calengine.adapters.score_columns`:
the engine's ``prefit`` route, no folds, no cloning).

Which file is which library: ``.json`` and ``.ubj`` are XGBoost boosters, ``.txt`` a LightGBM model,
``.skops`` a scikit-learn estimator.  The checks, each one line before any data is read:

* boosters go through the booster plugins' own loading path (:meth:`calengine.base.BoosterLearner.load_booster`:
  :mod:`calengine.boosters.checks` in Python, then a first load in a probing child), so a tampered
  file is refused as it is when ``calengine score`` loads a model; the objective must give class
  probabilities (XGBoost ``binary:logistic``/``multi:softprob``, LightGBM ``binary``/``multiclass``);
* a skops file's types must be in calengine's allowlist (:mod:`calengine.model.allowlist`) or named by
  ``--trust-type``, and the estimator must have ``predict_proba`` and ``classes_``;
* the feature columns are the model's own feature names when it has them (XGBoost ``feature_names``,
  LightGBM names other than its ``Column_<i>`` defaults, scikit-learn ``feature_names_in_``), else
  ``--features`` (then required), in that order; a count other than the model's is refused, and so is
  a ``--features`` list other than the names the model carries.

A ``CalibratedClassifier`` fitted on a ``sklearn.frozen.FrozenEstimator`` is saved as the same learner
(:func:`frozen_prefit`): a scikit-learn estimator as its skops state (allowlist checked when saving,
as when loading), an ``XGBClassifier`` or ``LGBMClassifier`` as its booster's own bytes, read back
through the booster plugins' checked loading path; ``response`` records whether the calibrators saw
``decision_function`` or ``predict_proba`` (scikit-learn's order for a frozen estimator; an
``LGBMClassifier`` has a ``decision_function`` since LightGBM 4.7: its booster's raw margin), and
``sha256`` is that of the booster's bytes or of the estimator's skops dump.  An ``XGBClassifier`` that
stopped early is refused (its ``predict_proba`` uses fewer trees than its booster holds).

Classes: the model's class i is the target's class i in calengine's order (sorted; with two classes
class 1 is ``--positive``), which is what a booster trained on ``LabelEncoder`` codes or on a 0/1
column means.  A scikit-learn estimator names its classes (``classes_``): they must be the target's.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, ClassVar

import numpy as np

from ..base import Learner
from ..errors import DataError, ModelFormatError, ParameterError
from ..hookspecs import hookimpl

#: file suffix -> library of the model in it
SUFFIXES = {".json": "xgboost", ".ubj": "xgboost", ".txt": "lightgbm", ".skops": "sklearn"}
#: the largest model file read (bytes), as for boosters in :mod:`calengine.boosters.checks`
MAX_PREFIT_BYTES = 2 * 1024**3
#: objectives whose predictions are class probabilities
XGBOOST_OBJECTIVES = ("binary:logistic", "multi:softprob")
LIGHTGBM_OBJECTIVES = ("binary", "multiclass", "multiclassova")


def library_of(path: str) -> str:
    """The library of the model file ``path``, from its suffix (one line for any other)."""
    suffix = os.path.splitext(str(path))[1].lower()
    if suffix not in SUFFIXES:
        raise ParameterError(
            f"prefit {path}: cannot tell the model's library from the suffix {suffix or '(none)'!r}; give an"
            " XGBoost booster (.json or .ubj), a LightGBM text model (.txt) or a scikit-learn estimator saved"
            " with skops (.skops)", parameter="prefit")
    return SUFFIXES[suffix]


class Prefit(Learner):
    """A model trained outside calengine, applied as it is and never refitted (module docstring).

    Parameters (recorded in the manifest): ``library`` (``xgboost``, ``lightgbm`` or ``sklearn``),
    ``columns`` (the feature columns in the model's order), ``n_classes``, ``source`` (the file's name
    when it was calibrated) and ``sha256`` (of its bytes, which the model directory holds unchanged),
    ``class_order`` (for a scikit-learn estimator: the column of ``predict_proba`` of each of the
    target's classes), ``response`` (a scikit-learn estimator's scores: ``predict_proba``, or
    ``decision_function`` for a saved ``FrozenEstimator`` that has one).  ``score(X)`` takes those
    columns (NaN passes to boosters, whose missing-value handling is their own) and returns the
    positive class's probability (or decision value), or ``(n, k)`` of them.
    """

    name: ClassVar[str] = "prefit"
    prefit: ClassVar[bool] = True
    accepts_sample_weight: ClassVar[bool] = True

    def __init__(self, library="xgboost", columns=(), n_classes=2, source="", sha256="", class_order=(),
                 response="predict_proba"):
        self.library = library
        self.columns = columns
        self.n_classes = n_classes
        self.source = source
        self.sha256 = sha256
        self.class_order = class_order
        self.response = response

    @property
    def score_kind(self) -> str:  # type: ignore[override]
        return "decision" if self.response == "decision_function" else "proba"

    # ------------------------------------------------------------------ the learner contract

    def fit(self, X, y, sample_weight=None):
        """Never called by the engine (``prefit``): the model was trained elsewhere."""
        return self

    def score(self, X) -> np.ndarray:
        if self.library == "sklearn" and hasattr(X, "iloc"):
            # the table's own values (ColumnReader as_frame): strings, categories and NaN reach the
            # estimator as they are; only its scores are checked, by the calibrators
            missing = [c for c in self.columns if c not in X.columns]
            if missing:
                raise DataError(f"feature column '{missing[0]}' read by the prefit model (the saved model it calibrates)"
                                f" is missing; give the columns {', '.join(self.columns)}")
            frame = X[list(self.columns)]
            return self._sklearn_scores(frame if hasattr(self.model_, "feature_names_in_") else frame.to_numpy())
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(self.columns):
            raise DataError(f"expected {len(self.columns)} feature columns ({', '.join(self.columns)}), got {X.shape}")
        if self.library == "sklearn":
            import pandas as pd

            est = self.model_
            frame = pd.DataFrame(X, columns=list(self.columns)) if hasattr(est, "feature_names_in_") else X
            return self._sklearn_scores(frame)
        if self.response == "decision_function":  # a saved FrozenEstimator(LGBMClassifier): its raw margin
            return np.asarray(self.model_.booster_.predict(X, raw_score=True), dtype=np.float64)
        return self.model_.score(X)

    def _sklearn_scores(self, frame) -> np.ndarray:
        """The scikit-learn estimator's scores of ``frame`` in the contract's shape and class order."""
        est = self.model_
        if self.response == "decision_function":
            d = np.asarray(est.decision_function(frame), dtype=np.float64)
            return d if d.ndim == 1 else d[:, list(self.class_order)]
        P = np.asarray(est.predict_proba(frame), dtype=np.float64)[:, list(self.class_order)]
        return P[:, 1].copy() if int(self.n_classes) == 2 else P

    def to_state(self) -> dict[str, Any]:
        if self.library == "sklearn":
            return {"estimator": self.model_}
        from ..boosters.model_files import library_state

        return library_state(self.state_key, self.blob_, int(self.n_classes), self.library,
                             self.model_.library_version())

    def from_state(self, state: dict[str, Any]) -> "Prefit":
        if self.library == "sklearn":
            est = state.get("estimator")
            if est is None or not hasattr(est, "predict_proba"):
                raise ModelFormatError("learner 'prefit' state holds no scikit-learn estimator; calibrate the model again")
            self.model_ = est
            return self
        from ..boosters.model_files import read_library_state

        inner = _booster_learner(self.library)
        keys = [k for k in state if isinstance(k, str) and k.startswith("booster.")]
        key = keys[0] if len(keys) == 1 else f"booster.{self.library}"
        blob, n_classes = read_library_state(state, self.name, key, inner.library, inner.library_version(), inner.package)
        self._load_booster(inner, blob, n_classes, key)
        return self

    # ------------------------------------------------------------------ helpers

    @property
    def state_key(self) -> str:
        return getattr(self, "state_key_", "booster.ubj" if self.library == "xgboost" else "booster.txt")

    def _load_booster(self, inner, blob: bytes, n_classes: int | None, key: str) -> None:
        """``blob`` through the plugin's checked loading path (validation, probing child, library)."""
        inner.booster_ = inner.load_booster(blob, n_classes, len(self.columns) or None)
        inner.n_classes_ = int(n_classes) if n_classes else 2
        self.model_, self.blob_, self.state_key_ = inner, bytes(blob), key

    def check_classes(self, labels) -> None:
        """The model's classes are the target's (one line otherwise); sets ``class_order`` for skops."""
        k = labels.n_classes
        names = [str(c) for c in labels.classes]
        if self.library == "sklearn":
            have = [str(c) for c in self.model_.classes_]
            if sorted(have) != sorted(names):
                raise DataError(
                    f"the prefit estimator predicts the classes {', '.join(have)} but the target '{labels.target}'"
                    f" holds {', '.join(names)}; calibrate it on a table of the classes it was trained on", parameter="prefit")
            self.class_order = [have.index(c) for c in names]
        elif int(self.n_classes) != k:
            raise DataError(
                f"the prefit {self.library} model predicts {self.n_classes} classes but the target"
                f" '{labels.target}' holds {k} ({', '.join(names)}); calibrate it on a table of its own classes", parameter="prefit")
        self.n_classes = k


def _booster_learner(library: str):
    """An instance of the booster plugin's learner (``xgboost`` / ``lightgbm``), one line if not installed."""
    from ..plugins import registry
    from ..errors import UnknownPluginError

    try:
        return registry.make("learners", library, {})
    except UnknownPluginError:
        raise ParameterError(
            f"prefit needs the calengine-{library} plugin to read a {library} model; install it"
            f" (pip install calengine-{library})", parameter="prefit") from None


def requirement_learners(path: str) -> list:
    """The learners whose modules the workers need for ``--prefit path`` (no file is read)."""
    library = library_of(path)
    return [Prefit(library=library)] + ([] if library == "sklearn" else [_booster_learner(library)])


# ---------------------------------------------------------------------------------------------- frozen


def frozen_model(model, frozen, names, trust=()):
    """A copy of ``model`` -- fitted by ``CalibratedClassifier`` on the ``FrozenEstimator`` ``frozen`` --
    whose learner is the stored :class:`Prefit` learner and whose encoder reads the estimator's named
    columns (its ``feature_names_in_``, else ``names``: those ``CalibratedClassifier.fit`` was given),
    for ``CalibratedClassifier.save``; one typed line when it cannot be stored."""
    import copy
    import dataclasses

    from ..plan.columns import ColumnReader

    est = frozen.estimator
    own = getattr(est, "feature_names_in_", None)
    names = names if own is None else own
    if names is None:
        raise DataError(
            "the FrozenEstimator's columns have no names, so a saved model could not tell which columns of a"
            " table to read; fit the estimator (or the CalibratedClassifier) on a pandas DataFrame"
        )
    columns = [str(c) for c in names]
    learner = None
    members = []
    for m in model.members:
        lrs = list(m.learners)
        for j, lr in enumerate(lrs):
            if isinstance(getattr(lr, "estimator", None), type(frozen)):  # the FrozenLearner (a copy of it)
                if learner is None:
                    response = "decision_function" if lr.score_kind == "decision" else "predict_proba"
                    learner = frozen_prefit(est, columns, response, trust)
                lrs[j] = learner
        members.append(dataclasses.replace(m, learners=lrs))
    if learner is None:
        raise ModelFormatError("this model holds no FrozenEstimator learner; fit it again")
    out = copy.copy(model)
    out.members = members
    out.encoder = ColumnReader(columns, role="feature", allow_missing=True, as_frame=learner.library == "sklearn")
    out.info = {**model.info, "learner": "prefit", "learner_params": learner.get_params(deep=False)}
    return out


def frozen_prefit(estimator, columns, response: str, trust=()) -> Prefit:
    """The :class:`Prefit` learner storing the fitted ``estimator`` of a ``FrozenEstimator`` (module
    docstring), reading ``columns`` and scored by ``response``; one typed line, before anything is
    written, for an estimator that cannot be stored safely (what to do instead in it)."""
    module = type(estimator).__module__.split(".")[0]
    k = len(estimator.classes_)
    source = f"FrozenEstimator({type(estimator).__module__}.{type(estimator).__name__})"
    if module in ("xgboost", "lightgbm"):
        blob, key = _sklearn_booster_bytes(estimator, module)
        if response == "decision_function" and module != "lightgbm":
            raise ModelFormatError(f"the FrozenEstimator's {type(estimator).__name__} was calibrated on its"
                                   " decision_function, which its stored booster cannot give; calibrate its predict_proba")
        learner = Prefit(library=module, columns=list(columns), n_classes=k, source=source,
                         sha256=hashlib.sha256(blob).hexdigest(), response=response)
        inner = _booster_learner(module)
        what = "the FrozenEstimator's booster has the objective"
        # the objective the file declares, before any native call: the probe would call margins damage
        _check_objective(_declared_objective(inner.validate_booster(blob, None, None)), module, what,
                         ModelFormatError, "save a classifier")
        learner._load_booster(inner, blob, k, key)  # checked as score will check it
        _check_objective(_booster_names_and_objective(module, learner.model_.booster_, blob)[1], module, what,
                         ModelFormatError, "save a classifier")
        return learner
    import skops.io as sio

    from ..model.allowlist import untrusted_types

    what = f"the FrozenEstimator's {type(estimator).__name__}"
    try:
        blob = sio.dumps(estimator)
        refused = untrusted_types(blob, trust)
    except Exception as exc:  # noqa: BLE001 - skops cannot represent it
        raise ModelFormatError(f"{what} cannot be stored with skops ({_first_line(exc)}); calibrate its scores instead"
                               " (calengine.calibrate_scores(..., scores=...)) or wrap it in a learner plugin") from None
    if refused:
        raise ModelFormatError(
            f"{what} contains types outside calengine's allowlist: {', '.join(refused)}; if you trust them, pass"
            " save(path, trust=[...]) with each (calengine score then needs --trust-type for each), else rebuild it"
            " from allowlisted scikit-learn classes"
        )
    learner = Prefit(library="sklearn", columns=list(columns), n_classes=k, source=source,
                     sha256=hashlib.sha256(blob).hexdigest(), class_order=list(range(k)), response=response)
    learner.model_ = estimator
    return learner


def _sklearn_booster_bytes(estimator, library: str) -> tuple[bytes, str]:
    """(the booster's own bytes, state key) of a fitted XGBClassifier / LGBMClassifier, refusing in one
    line what the booster alone would score otherwise than ``predict_proba`` does."""
    name = type(estimator).__name__
    if library == "xgboost":
        if getattr(estimator, "best_iteration", None) is not None and _stopped_early(estimator):
            raise ModelFormatError(
                f"the FrozenEstimator's {name} stopped early, so its predict_proba uses its first"
                f" {estimator.best_iteration + 1} trees and the booster all of them; save"
                f" clf.get_booster()[: clf.best_iteration + 1] with save_model and calibrate it with calengine fit --prefit"
            )
        return bytes(estimator.get_booster().save_raw("ubj")), "booster.ubj"
    # LightGBM writes its best iteration, as predict_proba uses it (num_iteration=None)
    return estimator.booster_.model_to_string().encode("utf-8"), "booster.txt"


def _stopped_early(estimator) -> bool:
    try:
        return int(estimator.best_iteration) + 1 < int(estimator.get_booster().num_boosted_rounds())
    except Exception:  # noqa: BLE001 - no early stopping recorded
        return False


# ---------------------------------------------------------------------------------------------- opening


def open_prefit(path: str, features=None, trust=()) -> Prefit:
    """The checked :class:`Prefit` learner of the model file ``path`` (see the module docstring);
    ``features``: the ``--features`` list, ``trust``: the ``--trust-type`` names.  Every problem is
    one :class:`~calengine.errors.CalengineError` line, raised before any data is read."""
    library = library_of(path)
    blob = _read(path)
    features = [str(f).strip() for f in features] if features else None
    learner = Prefit(library=library, source=os.path.basename(str(path)), sha256=hashlib.sha256(blob).hexdigest())
    if library == "sklearn":
        est = _open_skops(blob, path, trust)
        learner.model_ = est
        names = [str(c) for c in getattr(est, "feature_names_in_", ())] or None
        n_features = getattr(est, "n_features_in_", None)
        learner.n_classes = len(est.classes_)
    else:
        inner = _booster_learner(library)
        suffix = os.path.splitext(str(path))[1].lower()
        key = "booster" + (".txt" if library == "lightgbm" else suffix)
        summary = inner.validate_booster(blob, None, None)  # one line for a damaged file, before any native call
        _check_objective(_declared_objective(summary), library, f"prefit {path}: the {library} model's objective is",
                         parameter="prefit")
        inner.booster_ = inner.load_booster(blob, summary.n_classes, summary.n_features)  # probed in a child first
        inner.n_classes_ = summary.n_classes
        learner.model_, learner.blob_, learner.state_key_ = inner, blob, key
        learner.n_classes = summary.n_classes
        n_features = summary.n_features
        names, objective = _booster_names_and_objective(library, inner.booster_, blob)
        _check_objective(objective, library, f"prefit {path}: the {library} model's objective is",
                         parameter="prefit")
    learner.columns = _feature_columns(path, names, features, n_features)
    return learner


def _read(path: str) -> bytes:
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise DataError(f"prefit {path}: cannot read the model file ({exc.strerror or exc}); give an existing file", parameter="prefit") from None
    if not os.path.isfile(path):
        raise DataError(f"prefit {path} is not a file; give the saved model file", parameter="prefit")
    if size > MAX_PREFIT_BYTES:
        raise DataError(f"prefit {path} has {size} bytes, more than the {MAX_PREFIT_BYTES} a model file may have", parameter="prefit")
    with open(path, "rb") as fh:
        return fh.read()


def _open_skops(blob: bytes, path: str, trust) -> Any:
    from ..model.allowlist import untrusted_types
    from ..model.checks import check_estimator

    import skops.io as sio

    try:
        refused = untrusted_types(blob, trust)
    except Exception as exc:  # noqa: BLE001 - not a skops file
        raise ModelFormatError(f"prefit {path} is not a skops file ({_first_line(exc)}); save the estimator with skops.io.dump", parameter="prefit") from None
    if refused:
        raise ModelFormatError(
            f"prefit {path} contains types outside calengine's allowlist: {', '.join(refused)}; to load it anyway,"
            " pass each of those types in trust", parameter=("prefit", "trust"))
    try:
        est = sio.loads(blob, trusted=sorted(set(sio.get_untrusted_types(data=blob))))
    except Exception as exc:  # noqa: BLE001 - a type-correct but inconsistent dump
        raise ModelFormatError(f"prefit {path} cannot be loaded ({_first_line(exc)}); save the estimator again", parameter="prefit") from None
    check_estimator(est, f"prefit {path}")
    if not hasattr(est, "predict_proba") or not hasattr(est, "classes_"):
        raise ParameterError(
            f"prefit {path} holds a {type(est).__name__}, not a fitted classifier with predict_proba; save a fitted"
            " classifier (or calibrate score columns it wrote with scores)", parameter=("prefit", "scores"))
    return est


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _check_objective(objective: str | None, library: str, what: str, error: type = ParameterError,
                     fix: str = "calibrate a model", parameter: str | None = None) -> None:
    """One ``error`` line when a booster's ``objective`` does not give class probabilities (``what``
    says whose; None: the file names none, nothing to check yet).  Called first on the objective the
    file declares, before the booster is loaded and probed: a ``binary:logitraw`` booster's margins
    are not probabilities, and the probe would call the file damaged instead of naming its objective."""
    allowed = XGBOOST_OBJECTIVES if library == "xgboost" else LIGHTGBM_OBJECTIVES
    if objective is not None and objective not in allowed:
        raise error(f"{what} {objective!r}, whose predictions are not class probabilities; {fix} trained with"
                    f" {' or '.join(allowed)}", parameter=parameter)


def _declared_objective(summary) -> str | None:
    """The objective a validated booster file declares (:class:`~calengine.boosters.checks.BoosterSummary`),
    None when it names none (or a plugin's summary does not say)."""
    return getattr(summary, "objective", "") or None


def _booster_names_and_objective(library: str, booster, blob: bytes) -> tuple[list[str] | None, str]:
    """The feature names a (validated, loaded) booster carries, None without; and its objective."""
    if library == "xgboost":
        import json

        names = booster.feature_names
        objective = json.loads(booster.save_config())["learner"]["objective"]["name"]
        return ([str(n) for n in names] if names else None), str(objective)
    names = [str(n) for n in booster.feature_name()]
    if names == [f"Column_{i}" for i in range(len(names))]:
        names = None  # LightGBM's defaults for a model trained on a bare array
    objective = ""
    for line in blob.decode("utf-8", "replace").splitlines():
        if line.startswith("objective="):
            objective = line[len("objective="):].split()[0] if line[len("objective="):].split() else ""
            break
    return names, objective


def _feature_columns(path: str, names, features, n_features) -> list[str]:
    """The columns the model reads, in its order (module docstring); one line for any mismatch."""
    if names:
        if features and features != names:
            raise DataError(
                f"features {','.join(features)} differs from the feature names the prefit model carries"
                f" ({','.join(names)}); drop features (the model's own names are used) or give them in that order", parameter=("features", "prefit"))
        return names
    if not features:
        raise ParameterError(
            f"prefit {path} carries no feature names; name its {n_features} feature columns in the model's order"
            " with features A,B,...", parameter=("prefit", "features"))
    if n_features is not None and len(features) != int(n_features):
        raise DataError(
            f"features names {len(features)} columns but the prefit model reads {n_features}; name its"
            f" {n_features} feature columns in the model's order", parameter=("features", "prefit"))
    if len(set(features)) != len(features):
        raise ParameterError("features names a column twice; name each feature column once", parameter="features")
    return features


@hookimpl
def register_learners(register):
    register(Prefit)
