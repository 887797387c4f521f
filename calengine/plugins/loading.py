"""Plugin discovery: entry points of group ``calengine``, loaded one at a time.

Each entry point is imported and registered inside its own ``try``: a plugin that fails to import (any
exception, ``SystemExit`` included: only Ctrl-C passes through), has
a misspelt hook, or raises while registering is *recorded* (entry point, distribution, version, error)
and shown by ``calengine plugins``; the others keep working.  ``strict=True`` (``--strict-plugins`` or
``CALENGINE_STRICT_PLUGINS=1``) turns any such failure into a :class:`PluginError`.  Two plugins
registering the same name is an error naming both -- except for ``calengine plugins``, which loads with
``allow_clashes=True`` so the user can still see everything installed, the clash marked, and decide
which distribution to uninstall.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType

import pluggy

from .. import hookspecs
from ..errors import PluginError

STRICT_ENV = "CALENGINE_STRICT_PLUGINS"
KINDS = ("learners", "calibrators", "combiners")
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass
class PluginRecord:
    """What one entry point (or in-process module) contributed, or why it failed."""

    name: str
    distribution: str
    version: str
    module: str
    registered: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})
    error: str | None = None
    #: names this plugin registered that an earlier plugin had already taken (not usable): one message each
    clashes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "module": self.module,
            "registered": self.registered,
            "error": self.error,
            "clashes": self.clashes,
        }


@dataclass
class Origin:
    """Where a registered class came from: recorded in model manifests and checked on workers."""

    plugin: str
    distribution: str
    version: str


class PluginSet:
    """The classes registered by all loaded plugins, by kind and name, with their origins."""

    def __init__(self) -> None:
        self.classes: dict[str, dict[str, type]] = {k: {} for k in KINDS}
        self.origins: dict[tuple[str, str], Origin] = {}
        self.records: list[PluginRecord] = []
        #: one message per name registered by two plugins (the first keeps it)
        self.clashes: list[str] = []

    @property
    def failures(self) -> list[PluginRecord]:
        return [r for r in self.records if r.error]

    def origin(self, kind: str, name: str) -> Origin:
        return self.origins[(kind, name)]


def _base_for(kind: str) -> type:
    from ..base import Calibrator, Combiner, Learner

    return {"learners": Learner, "calibrators": Calibrator, "combiners": Combiner}[kind]


def is_strict(strict: bool | None) -> bool:
    if strict is not None:
        return strict
    return os.environ.get(STRICT_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def _new_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def _record_failure(record: PluginRecord, exc: BaseException, what: str, strict: bool) -> None:
    """Keep the error on the record; in strict mode, raise it as one line instead."""
    record.error = f"{type(exc).__name__}: {exc}"
    if strict:
        raise PluginError(
            f"plugin '{record.name}' ({record.distribution} {record.version}) {what}: {record.error};"
            f" fix or uninstall it, or unset --strict-plugins/{STRICT_ENV}"
        ) from exc


def _register_one(plugins: PluginSet, record: PluginRecord, module: ModuleType, strict: bool) -> None:
    """Register ``module``'s hook implementations and collect its classes into ``plugins``.

    Classes are staged first and committed only if the whole plugin succeeded, so a plugin that fails
    halfway contributes nothing (a half-registered plugin is harder to reason about than a missing one).
    """
    pm = _new_manager()
    staged: list[tuple[str, str, type]] = []
    try:
        pm.register(module, name=record.name)
        pm.check_pending()  # a misspelt hook name fails here instead of being silently ignored
        for kind in KINDS:
            base = _base_for(kind)

            def register(cls, _kind=kind, _base=base):
                if not (isinstance(cls, type) and issubclass(cls, _base)):
                    raise PluginError(
                        f"register_{_kind} got {cls!r}, which is not a subclass of "
                        f"calengine.base.{_base.__name__}"
                    )
                from .calls import importable_class_problem

                problem = importable_class_problem(cls)
                if problem:
                    raise PluginError(problem)
                name = getattr(cls, "name", "")
                if not isinstance(name, str) or not NAME_RE.match(name):
                    raise PluginError(
                        f"{cls.__module__}.{cls.__qualname__}.name must match [a-z][a-z0-9_]*, "
                        f"got {name!r}"
                    )
                staged.append((_kind, name, cls))

            getattr(pm.hook, f"register_{kind}")(register=register)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - any plugin failure (even SystemExit) is recorded, not fatal
        _record_failure(record, exc, "failed to register", strict)
        return
    for kind, name, cls in staged:
        if name in plugins.classes[kind]:
            other = plugins.origins[(kind, name)]
            message = (
                f"{kind[:-1]} name '{name}' is registered by both plugin '{other.plugin}' "
                f"({other.distribution}) and plugin '{record.name}' ({record.distribution}); "
                "uninstall one of them"
            )
            plugins.clashes.append(message)
            record.clashes.append(message)
            continue
        plugins.classes[kind][name] = cls
        plugins.origins[(kind, name)] = Origin(record.name, record.distribution, record.version)
        record.registered[kind].append(name)


def load_plugins(
    strict: bool | None = None,
    extra_modules: tuple[ModuleType, ...] = (),
    entry_points: bool = True,
    allow_clashes: bool = False,
) -> PluginSet:
    """Load every ``calengine`` entry point, plus ``extra_modules`` registered in-process.

    ``extra_modules`` is how Python users and tests add a plugin without installing a distribution;
    ``entry_points=False`` loads only those (a plugin's own conformance test checks it in isolation).
    Every plugin is loaded before a name clash is raised (as :class:`PluginError` naming both), so
    ``allow_clashes=True`` returns the whole picture with ``PluginSet.clashes`` filled in instead.
    """
    strict = is_strict(strict)
    plugins = PluginSet()
    eps = sorted(metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP), key=_ep_sort_key) if entry_points else []
    for ep in eps:
        dist = getattr(ep, "dist", None)
        dist_name = dist.metadata["Name"] if dist is not None else "unknown"
        version = dist.version if dist is not None else "unknown"
        record = PluginRecord(
            name=f"{dist_name}:{ep.name}", distribution=dist_name, version=version, module=ep.value
        )
        plugins.records.append(record)
        try:
            module = ep.load()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - a broken plugin (even one calling sys.exit) is reported, not fatal
            _record_failure(record, exc, "failed to import", strict)
            continue
        _register_one(plugins, record, module, strict)
    for module in extra_modules:
        record = PluginRecord(
            name=module.__name__, distribution="(in-process)", version="", module=module.__name__
        )
        plugins.records.append(record)
        _register_one(plugins, record, module, strict)
    if plugins.clashes and not allow_clashes:
        raise PluginError(plugins.clashes[0] + " (run 'calengine plugins' to see every plugin installed)")
    return plugins


def _ep_sort_key(ep) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    return (dist.metadata["Name"] if dist is not None else "", ep.name)


_cache: dict[tuple[bool, bool], PluginSet] = {}


def get_plugins(strict: bool | None = None, allow_clashes: bool = False) -> PluginSet:
    """The process-wide plugin set (loaded once per strictness)."""
    key = (is_strict(strict), allow_clashes)
    if key not in _cache:
        _cache[key] = load_plugins(strict=key[0], allow_clashes=allow_clashes)
    return _cache[key]


def reset_plugin_cache() -> None:
    """Forget loaded plugins (tests install and remove plugins at run time)."""
    _cache.clear()


# ---------------------------------------------------------------------------------------------- workers


def plugin_requirements(objects, plugins: PluginSet | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(distributions, modules)`` workers need for these plugin objects (None entries are skipped):
    each object's module, and the distribution that registered its name with what that distribution
    requires and is installed here (:func:`installed_requirements`); calengine itself is always checked."""
    plugins = plugins or get_plugins()
    dists, modules = set(), set()
    for obj in objects:
        if obj is None:
            continue
        modules.add(type(obj).__module__)
        for kind in KINDS:
            try:
                origin = plugins.origin(kind, obj.name)
            except KeyError:
                continue
            if origin.distribution not in ("(in-process)", "unknown"):
                dists.add(origin.distribution)
    for dist in list(dists):
        dists.update(installed_requirements(dist))
    return tuple(sorted(dists - {"calengine"})), tuple(sorted(modules))


def installed_requirements(dist: str) -> set[str]:
    """The distributions a plugin distribution requires that are installed here (its library, e.g.
    ``xgboost-cpu``): workers must have the same versions of those too, not only of the plugin."""
    from packaging.requirements import InvalidRequirement, Requirement

    out = set()
    try:
        requires = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return out
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an optional extra, or not for this platform
        try:
            metadata.version(req.name)
        except metadata.PackageNotFoundError:
            continue
        out.add(req.name)
    return out


def model_requirements(models) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """:func:`plugin_requirements` of everything fitted ``models`` run on the workers (scoring,
    evaluating, recalibrating them)."""
    return plugin_requirements([o for m in models for o in m.plugin_objects()])
