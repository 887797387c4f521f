"""Array persistence and lazy rebuilding of scikit-learn-backed learners (private).

:class:`_ArrayState` is mixed in by the learners whose fitted estimator is a handful of arrays (naive
Bayes in :mod:`.naive_bayes`, logistic regression in :mod:`.linear`); the scaler attribute lists
here say what a fitted scaler in front of them holds.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import numpy as np


#: serialises building a lazily restored estimator (see _ArrayState.estimator_)
_RESTORE_LOCK = threading.Lock()


class _ArrayState:
    """Persistence of a scikit-learn-backed learner as plain arrays instead of a skops dump.

    Mixed in before :class:`SklearnLearner` by learners whose fitted estimator is a handful of arrays
    (naive Bayes, logistic regression).  ``to_state`` stores each attribute named in
    :attr:`fitted_attributes` (per Pipeline step; ``""`` is an estimator that is not a Pipeline) and
    ``from_state`` sets them on a fresh :meth:`make_estimator` and recomputes what follows from them
    (:meth:`_derive`), so the restored estimator predicts the same bits as the fitted one.

    Why: a skops dump of a 20 Newsgroups multinomial naive Bayes is 88 MB per member, mostly
    ``feature_log_prob_`` (a function of the stored counts) and zero counts of words a class never
    saw; as arrays the same member is a few MB (the model files store mostly-zero arrays sparse), and
    an all-pairs Pendigits model loads 225 small ``.npz`` instead of 225 skops files.  Models saved
    before (state ``{"estimator": ...}``) still load through :meth:`SklearnLearner.from_state`.
    """

    #: step name -> fitted attributes stored; a callable of the estimator when it depends on the build.
    fitted_attributes: ClassVar[Any] = {}

    def _attributes(self, est) -> dict[str, tuple[str, ...]]:
        spec = self.fitted_attributes
        return spec(est) if callable(spec) else spec

    def to_state(self) -> dict[str, Any]:
        d = self.__dict__
        if d.get("_state_is_fitted") and "_pending_state" in d:  # fitted as arrays, never built
            return {k: v.item() if isinstance(v, np.generic) else v for k, v in d["_pending_state"].items()}
        est = self.estimator_
        steps = dict(est.steps) if hasattr(est, "steps") else {"": est}
        state: dict[str, Any] = {"n_classes": self.n_classes_, "sparse_input": _built_for_sparse(est)}
        for step, names in self._attributes(est).items():
            for name in names:
                value = getattr(steps[step], name)
                key = f"{step}__{name}" if step else name
                state[key] = value if value is None or isinstance(value, (int, float)) else np.asarray(value)
                if isinstance(value, np.generic):
                    state[key] = value.item()
        return state

    def from_state(self, state: dict[str, Any]):
        if "estimator" in state:  # saved by calengine before array state
            return super().from_state(state)
        for key, value in state.items():  # a fitted model's arrays are finite; NaN/inf mean tampering
            if isinstance(value, np.ndarray) and value.dtype.kind == "f" and not np.isfinite(value).all():
                raise ValueError(f"state '{key}' holds NaN or infinity")
        if self._defers(state):
            # build the scikit-learn estimator when something first needs it (see estimator_)
            self.__dict__.pop("_estimator", None)
            self.__dict__.pop("_state_is_fitted", None)
            self.__dict__["_pending_state"] = dict(state)
            self.n_classes_ = int(state["n_classes"])
            return self
        self.estimator_ = self._restore(state)
        self.n_classes_ = int(state["n_classes"])
        return self

    def defer_state(self, state: dict[str, Any]) -> None:
        """Hold a fit's result as ``state`` (what :meth:`to_state` of the built estimator returns, but
        NumPy scalars as the estimator holds them), building the scikit-learn estimator only when something first needs it (see
        :attr:`estimator_`): a learner fitted from statistics and scored from its arrays never does."""
        d = self.__dict__
        d.pop("_estimator", None)
        d["_pending_state"] = state
        d["_state_is_fitted"] = True

    def _defers(self, state: dict[str, Any]) -> bool:
        """Whether ``state`` can wait unbuilt (checked now, raising ``ValueError`` as ``_restore``
        would).  By default: one estimator whose stored attributes do not depend on how it is built."""
        if not (isinstance(self.fitted_attributes, dict) and set(self.fitted_attributes) == {""}):
            return False
        missing = [n for n in self.fitted_attributes[""] if n not in state]
        if missing:
            raise ValueError(f"state '{missing[0]}' is missing")
        n_classes = int(state["n_classes"])
        classes = np.asarray(state["classes_"])
        if classes.shape != (n_classes,):
            raise ValueError(f"{classes.shape[0] if classes.ndim else 0} classes stored for n_classes={n_classes}")
        return True

    @property
    def estimator_(self):
        """The fitted scikit-learn estimator; after :meth:`from_state` it is built on first use.

        Why lazily: building it imports scikit-learn (0.9 s, for ``scipy.stats``), and a model whose
        learner scores from its stored arrays (:class:`GaussianNBLearner`) never needs it, so ``score``
        of such a model starts that much sooner in the client and in every worker process."""
        d = self.__dict__
        if "_estimator" not in d:
            with _RESTORE_LOCK:  # the embedded scheduler's threads share one model object
                if "_estimator" not in d:
                    if "_pending_state" not in d:
                        raise AttributeError(f"'{type(self).__name__}' object has no attribute 'estimator_'")
                    d["_estimator"] = self._restore(d["_pending_state"])
                    d.pop("_pending_state", None)
        return d["_estimator"]

    @estimator_.setter
    def estimator_(self, est) -> None:
        self.__dict__.pop("_pending_state", None)
        self.__dict__["_estimator"] = est

    def _stored(self, name: str):
        """A stored attribute of the fitted estimator (``step__name`` for a Pipeline's step, as in the
        state), without building it if not yet built; None when there is none."""
        pending = self.__dict__.get("_pending_state")
        if pending is not None:
            return pending.get(name)
        est = self.__dict__.get("_estimator")
        step, _, attr = name.rpartition("__")
        if step:
            est = dict(getattr(est, "steps", ())).get(step)
        return getattr(est, attr, None)

    def _restore(self, state: dict[str, Any]):
        """A scikit-learn estimator holding ``state``'s attributes (and what follows from them)."""
        est = self._build_estimator(sparse_input=bool(state["sparse_input"]))
        steps = dict(est.steps) if hasattr(est, "steps") else {"": est}
        for step, names in self._attributes(est).items():
            for name in names:
                key = f"{step}__{name}" if step else name
                if key not in state:
                    raise ValueError(f"state '{key}' is missing")
                setattr(steps[step], name, state[key])
        self._derive(steps)
        n_classes = int(state["n_classes"])
        classes = np.asarray(getattr(steps[list(steps)[-1]], "classes_"))
        if classes.shape != (n_classes,):
            raise ValueError(f"{classes.shape[0] if classes.ndim else 0} classes stored for n_classes={n_classes}")
        return est

    def _derive(self, steps: dict[str, Any]) -> None:
        """Recompute attributes that follow from the stored ones (none by default)."""


def _built_for_sparse(est) -> bool:
    """Whether ``est`` was built by ``make_estimator(sparse_input=True)``: its scaler does not centre."""
    scaler = dict(est.steps).get("scale") if hasattr(est, "steps") else None
    if scaler is None:
        return False
    if type(scaler).__name__ == "MaxAbsScaler":
        return True
    return type(scaler).__name__ == "StandardScaler" and not scaler.with_mean


#: what a fitted StandardScaler / MinMaxScaler / MaxAbsScaler holds (MaxAbsScaler's scale_ is derived).
_STANDARD_SCALER = ("mean_", "var_", "scale_", "n_samples_seen_", "n_features_in_")
_MINMAX_SCALER = ("min_", "scale_", "data_min_", "data_max_", "data_range_", "n_samples_seen_", "n_features_in_")
_MAXABS_SCALER = ("max_abs_", "n_samples_seen_", "n_features_in_")
#: a discrete naive Bayes' counts; feature_log_prob_ and class_log_prior_ are derived by its own methods.
_DISCRETE_NB = ("classes_", "class_count_", "feature_count_", "n_features_in_")


def _scaler_attributes(scaler) -> tuple[str, ...]:
    return {"StandardScaler": _STANDARD_SCALER, "MinMaxScaler": _MINMAX_SCALER,
            "MaxAbsScaler": _MAXABS_SCALER}[type(scaler).__name__]
