"""scikit-learn's parameter protocol for calengine's plugin classes, without importing scikit-learn.

Learners, calibrators and combiners follow scikit-learn's conventions (``__init__`` stores its
arguments as attributes of the same names and does nothing else), so ``get_params``, ``set_params``
and ``sklearn.base.clone`` work on them, model manifests record their parameters, and a
:class:`calengine.CalibratedClassifier` holding one clones, grid-searches and prints like any
scikit-learn estimator.

They used to get that by subclassing ``sklearn.base.BaseEstimator``.  Importing anything from
scikit-learn imports ``sklearn.utils``, which imports ``scipy.stats``: 0.9 s of every command's start
on this machine, paid by ``calengine score`` of a naive Bayes + sigmoid model that never calls
scikit-learn, and again by every worker process.  :class:`Params` implements the same protocol
(``clone`` relies only on ``get_params(deep=False)`` and the constructor, by duck typing), so plugin
modules import without scikit-learn and only the code paths that use it pay for it.
"""

from __future__ import annotations

import inspect
from typing import Any


class Params:
    """``get_params`` / ``set_params`` / ``repr`` from the ``__init__`` signature, as scikit-learn's
    ``BaseEstimator`` defines them (parameters in name order; ``deep`` adds ``name__sub`` entries of
    parameters that have parameters themselves; ``repr`` shows only parameters that differ from
    their defaults)."""

    @classmethod
    def _get_param_names(cls) -> list[str]:
        init = cls.__init__
        if init is object.__init__:
            return []
        names = []
        for p in inspect.signature(init).parameters.values():
            if p.name == "self" or p.kind == p.VAR_KEYWORD:
                continue
            if p.kind == p.VAR_POSITIONAL:
                raise RuntimeError(
                    f"{cls.__name__}.__init__ takes *args; parameters must be named in its signature "
                    "(scikit-learn's convention, which get_params and clone rely on)"
                )
            names.append(p.name)
        return sorted(names)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in self._get_param_names():
            value = getattr(self, key)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                out.update((f"{key}__{k}", v) for k, v in value.get_params().items())
            out[key] = value
        return out

    def set_params(self, **params):
        if not params:
            return self
        valid = self.get_params(deep=True)
        nested: dict[str, dict[str, Any]] = {}
        for key, value in params.items():
            name, delim, sub = key.partition("__")
            if name not in valid:
                raise ValueError(
                    f"Invalid parameter {name!r} for estimator {self}. "
                    f"Valid parameters are: {self._get_param_names()!r}."
                )
            if delim:
                nested.setdefault(name, {})[sub] = value
            else:
                setattr(self, name, value)
                valid[name] = value
        for name, sub_params in nested.items():
            valid[name].set_params(**sub_params)
        return self

    def check_params(self) -> None:
        """Optional: raise ``ValueError`` (or ``TypeError``) naming a parameter value this class cannot
        use and the fix.  The engine calls it when it makes a plugin from user parameters
        (``--learner-param``/``--method-param``/``--combiner-param``, the estimator's ``fit``), before
        any data is read, so a bad value is one line at fit time rather than a failure when the model
        is scored.  Parameter types (a number where the default is a number) are checked for every
        plugin without it.  The default accepts everything."""

    def __repr__(self) -> str:
        defaults = {
            p.name: p.default
            for p in inspect.signature(type(self).__init__).parameters.values()
            if p.default is not p.empty
        }
        shown = []
        for key in self._get_param_names():
            value = getattr(self, key, None)
            if key in defaults and _same_default(value, defaults[key]):
                continue
            shown.append(f"{key}={value!r}")
        return f"{type(self).__name__}({', '.join(shown)})"


def _same_default(value: Any, default: Any) -> bool:
    """Whether ``value`` is its parameter's default (as scikit-learn's repr decides: equal, or both NaN)."""
    if value is default:
        return True
    try:
        if value != value and default != default:  # NaN
            return True
        return type(value) is type(default) and bool(value == default)
    except Exception:  # noqa: BLE001 - arrays and odd types: show them
        return False


def with_parent_params(parent: type):
    """Decorate a subclass's ``__init__(self, *, <its own parameters>, **params)`` that adds parameters
    to those of ``parent``: the decorated ``__init__`` declares every parameter of the parent's
    ``__init__`` and its own, all keyword-only, so ``get_params``, ``clone``, ``repr``, ``calengine
    plugins NAME`` and ``--learner-param`` see them all, as if the subclass had listed them again.

    The body passes ``**params`` on to ``parent.__init__``, which stores them (and refuses a name it
    does not know).  For a family of learners that differ by a parameter or two, such as a booster
    trained in one process and its variant that trains on the cluster::

        class XGBoostDask(XGBoost):
            @with_parent_params(XGBoost)
            def __init__(self, *, collective_timeout: int = 300, **params):
                super().__init__(**params)
                self.collective_timeout = collective_timeout
    """

    def decorate(init):
        own = inspect.signature(init)
        kinds = [p.kind for p in own.parameters.values()]
        declared = [p for p in own.parameters.values() if p.kind != p.VAR_KEYWORD]
        if (len(kinds) < 2 or kinds[-1] != inspect.Parameter.VAR_KEYWORD
                or any(p.kind != p.KEYWORD_ONLY for p in declared[1:])):
            raise TypeError(f"{init.__qualname__} must be __init__(self, *, own parameters..., **params)")
        names = {p.name for p in declared}
        inherited = [
            p.replace(kind=p.KEYWORD_ONLY)
            for p in list(inspect.signature(parent.__init__).parameters.values())[1:]
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in names
        ]
        init.__signature__ = own.replace(parameters=[declared[0], *inherited, *declared[1:]])
        return init

    return decorate
