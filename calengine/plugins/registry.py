"""Name -> class lookups over the loaded plugins.  Unknown names fail listing what is available."""

from __future__ import annotations

from typing import Any

from ..errors import ParameterError, UnknownPluginError, did_you_mean
from .loading import PluginSet, get_plugins

#: the built-in learner that wraps any scikit-learn classifier given by import path
SKLEARN_PATH_LEARNER = "sklearn"

#: kind -> the Python parameter that names a plugin of that kind, and the one that gives its parameters
#: (the CLI reports them under their flags: :mod:`calengine.cli.parameters`)
KIND_PARAMETER = {"learners": "learner", "calibrators": "method", "combiners": "multiclass"}
KIND_PARAMS = {"learners": "learner_params", "calibrators": "method_params", "combiners": "combiner_params"}

#: ``--method`` values the engine implements itself, with no calibrator plugin behind them: where
#: each lives, for ``calengine plugins NAME`` and for the "did you mean" of a misspelt ``--method``
#: (calengine.fit.training.ENGINE_METHODS and ``mcgrad`` must stay listed here; a test checks it)
ENGINE_METHOD_HOMES = {
    "probing": "a method of 'calengine fit' (--method probing; parameters with --method-param, e.g."
               " multiclass=k_minus_one|one_vs_rest), built into calengine itself, not a plugin",
    "bagging": "a method of 'calengine fit' (--method bagging; parameters with --method-param), built into"
               " calengine itself, not a plugin",
    "mcgrad": "a method of 'calengine fit' (--method mcgrad --by COL[,COL...]; multicalibration by boosted"
              " rounds), built into calengine itself, not a plugin",
}


def lookup(kind: str, name: str, plugins: PluginSet | None = None) -> type:
    plugins = plugins or get_plugins()
    table = plugins.classes[kind]
    if name in table:
        return table[name]
    available = ", ".join(sorted(table)) or "none (is calengine-builtins installed?)"
    hint = ""
    failed = [r.name for r in plugins.failures]
    if failed:
        hint = f"; plugins that failed to load: {', '.join(failed)} (see 'calengine plugins')"
    known = list(table) + (list(ENGINE_METHOD_HOMES) if kind == "calibrators" else [])
    parameter = KIND_PARAMETER[kind]
    raise UnknownPluginError(
        f"unknown {kind[:-1]} '{name}' for {parameter};{did_you_mean(name, known)} available: {available}{hint}",
        parameter=parameter,
    )


def make(kind: str, name: str, params: dict[str, Any] | None = None, plugins: PluginSet | None = None):
    """Instantiate a registered class with ``params``, turning bad parameter names into one line."""
    cls = lookup(kind, name, plugins)
    params = dict(params or {})
    valid = set(cls._get_param_names())
    unknown = sorted(set(params) - valid)
    if unknown:
        raise ParameterError(
            f"{kind[:-1]} '{name}' has no parameter {', '.join(repr(u) for u in unknown)} (in {KIND_PARAMS[kind]}); "
            f"valid parameters: {', '.join(sorted(valid)) or 'none'}", parameter=KIND_PARAMS[kind]
        )
    _check_value_types(cls, kind, name, params)
    try:
        obj = cls(**params)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"bad {KIND_PARAMS[kind]} for {kind[:-1]} '{name}': {exc}", parameter=KIND_PARAMS[kind]) from exc
    check = getattr(obj, "check_params", None)
    if callable(check):
        try:
            check()
        except (TypeError, ValueError) as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise ParameterError(
                f"bad {KIND_PARAMS[kind]} for {kind[:-1]} '{name}': {reason} (see 'calengine plugins {name}')",
                parameter=KIND_PARAMS[kind],
            ) from None
    return obj


def _check_value_types(cls, kind: str, name: str, params: dict[str, Any]) -> None:
    """Refuse, before any data is read, a value whose type cannot be what the parameter's default says.

    Every plugin gets this without code of its own: a parameter whose default is a number takes a
    number (``--combiner-param tol=abc`` used to be accepted by ``fit`` and to fail only when the model
    was scored), one whose default is a boolean takes true/false.  ``None`` is always accepted (many
    parameters mean "automatic" by it), and parameters whose default is a string or ``None`` may take
    anything: the plugin's own ``check_params`` (see :class:`calengine.params.Params`) or its fit says.
    """
    import inspect
    import numbers

    defaults = {
        p.name: p.default
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.default is not p.empty
    }
    for key, value in params.items():
        default = defaults.get(key, None)
        if value is None or default is None:
            continue
        if isinstance(default, bool):
            wrong, want = type(value).__name__ not in ("bool", "bool_"), "true or false"
        elif isinstance(default, numbers.Real):
            wrong = isinstance(value, (str, bytes, bool)) or not isinstance(value, (numbers.Real, tuple, list))
            want = "a number"
        else:
            continue
        if wrong:
            raise ParameterError(
                f"{kind[:-1]} '{name}' parameter '{key}' (in {KIND_PARAMS[kind]}) takes {want} (default {default!r}),"
                f" got {value!r};"
                f" see 'calengine plugins {name}'", parameter=KIND_PARAMS[kind]
            )


def make_learner(spec: str, params: dict[str, Any] | None = None, plugins: PluginSet | None = None):
    """A learner from a registry name, or from a scikit-learn import path such as
    ``sklearn.ensemble.HistGradientBoostingClassifier`` (its parameters pass through)."""
    if "." in spec:
        return make("learners", SKLEARN_PATH_LEARNER, {"path": spec, "params": dict(params or {})}, plugins)
    return make("learners", spec, params, plugins)


def learner_label(learner) -> str:
    """The name a user would type for this learner instance (import path for by-path learners)."""
    path = getattr(learner, "path", None)
    if learner.name == SKLEARN_PATH_LEARNER and path:
        return path
    return learner.name


def describe(kind: str, name: str, plugins: PluginSet | None = None) -> dict[str, Any]:
    """What ``calengine plugins NAME`` shows: where the class comes from and its parameters with their
    defaults (as ``--learner-param``/``--method-param``/``--combiner-param`` K=V would set them)."""
    import inspect

    plugins = plugins or get_plugins()
    cls = lookup(kind, name, plugins)
    origin = plugins.origin(kind, name)
    params = []
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        params.append({"name": p.name, "default": None if p.default is p.empty else p.default})
    doc = inspect.getdoc(cls) or ""
    return {
        "kind": kind[:-1],
        "name": name,
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "distribution": origin.distribution,
        "version": origin.version,
        "summary": doc.split("\n\n")[0].replace("\n", " "),
        "parameters": params,
    }


def describe_name(name: str, plugins: PluginSet | None = None) -> list[dict[str, Any]]:
    """:func:`describe` of every kind that registers ``name`` (a learner and a calibrator may share
    one), or :class:`UnknownPluginError` listing every installed name."""
    plugins = plugins or get_plugins()
    found = [describe(kind, name, plugins) for kind in plugins.classes if name in plugins.classes[kind]]
    if not found and name in ENGINE_METHOD_HOMES:
        return [{"kind": "method", "name": name, "distribution": "calengine", "version": None, "class": None,
                 "summary": f"'{name}' is {ENGINE_METHOD_HOMES[name]}", "parameters": [], "plugin": False}]
    if not found:
        known = sorted({n for table in plugins.classes.values() for n in table})
        raise UnknownPluginError(
            f"no learner, calibrator or combiner is named '{name}';{did_you_mean(name, known + list(ENGINE_METHOD_HOMES))}"
            f" installed: {', '.join(known) or 'none'}"
        )
    return found
