"""Calling plugin code: whatever a learner, calibrator or combiner raises becomes one typed line.

A plugin is someone else's code.  When its ``fit``, ``score``, ``predict``, ``combine`` or
``from_state`` raises, the person at the shell needs to know *whose* code failed and where to report
it, not 30 lines of traceback through calengine (exit 1, "a bug in calengine").  So every call into a
plugin on the engine's paths runs inside :class:`plugin_errors`, which turns any exception that is not
already a :class:`~calengine.errors.CalengineError` into the kind's error type (``LearnerError``,
``CalibratorError``, ``CombinerError``) naming the plugin, its distribution and version, and the
original message on one line.  A ``CalengineError`` the plugin raises on purpose (``ParameterError``,
``DataError``, ...) passes through unchanged: it already names the problem and the fix.

The distribution is found from the class's top-level module (``importlib.metadata``), which works in
Dask tasks too, where no plugin manager exists.
"""

from __future__ import annotations

import functools

from ..errors import CalengineError, CalibratorError, CombinerError, LearnerError

_ERROR_TYPES = {"learner": LearnerError, "calibrator": CalibratorError, "combiner": CombinerError}

#: what a user can do about a failure of each action
_HINTS = {
    "fit": "try other {flag} values or another {kind}",
    "score": "report it to the plugin's authors",
    "predict": "report it to the plugin's authors",
    "combine": "try another combiner, or report it to the plugin's authors",
    "load its state": "the model may come from another version of the plugin; refit it, or report it",
}


@functools.lru_cache(maxsize=None)
def _distributions() -> dict[str, list[str]]:
    from importlib.metadata import packages_distributions

    return packages_distributions()


def distribution_of(cls: type) -> str:
    """``"calengine-builtins 0.1.0"`` for the distribution that ships ``cls``, or where it came from."""
    from importlib.metadata import PackageNotFoundError, version

    top = (cls.__module__ or "").split(".")[0]
    dists = _distributions().get(top) or []
    if not dists:
        return f"module {cls.__module__}, not an installed distribution"
    try:
        return f"{dists[0]} {version(dists[0])}"
    except PackageNotFoundError:
        return dists[0]


def importable_class_problem(cls: type) -> str | None:
    """Why ``cls`` cannot be a plugin class, or None: it must be importable by its module and name.

    The engine pickles plugin objects by reference to send them to Dask worker processes, and model
    manifests name their classes; a class defined inside a function has neither (pickle's "Can't
    pickle local object").
    """
    qualname = getattr(cls, "__qualname__", "")
    if "<locals>" in qualname:
        return (
            f"{cls.__module__}.{qualname} is defined inside a function; a plugin class must be defined at"
            " the top level of an importable module, because the engine sends it to Dask worker processes"
            " by reference (pickle) and model manifests name it"
        )
    return None


def kind_of(obj) -> str:
    from ..base import Calibrator, Combiner

    if isinstance(obj, Calibrator):
        return "calibrator"
    if isinstance(obj, Combiner):
        return "combiner"
    return "learner"


_FLAGS = {"learner": "--learner-param", "calibrator": "--method-param", "combiner": "--combiner-param"}


def describe(obj) -> str:
    """``learner 'mean_difference'``: what users typed."""
    name = getattr(obj, "name", "") or type(obj).__name__
    return f"{kind_of(obj)} '{name}'"


class plugin_errors:
    """Context: an exception from plugin code becomes one line naming the plugin and its distribution.

    ``action`` is what was being done (``"fit"``, ``"score"``, ``"predict"``, ``"combine"``,
    ``"load its state"``).  ``KeyboardInterrupt``, ``MemoryError``, ``RecursionError`` and Dask's
    own failures (a lost worker or scheduler) pass through: they are about the machine, not the plugin.
    """

    def __init__(self, obj, action: str) -> None:
        self.obj = obj
        self.action = action

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or isinstance(exc, (CalengineError, MemoryError, RecursionError)):
            return False
        if not isinstance(exc, Exception) or _about_the_cluster(exc):
            return False
        raise plugin_failure(self.obj, self.action, exc) from exc


def _about_the_cluster(exc: BaseException) -> bool:
    """A lost scheduler or worker, a cancelled future, a timeout: the cluster failed under the plugin
    (a learner that trains on the cluster), which the CLI reports as such
    (:func:`calengine.runtime.client.cluster_failure`), not as the plugin's fault."""
    import asyncio
    import concurrent.futures

    if isinstance(exc, (asyncio.CancelledError, concurrent.futures.CancelledError, TimeoutError)):
        return True
    return any((t.__module__ or "").split(".")[0] == "distributed" for t in type(exc).__mro__)


def plugin_failure(obj, action: str, exc: BaseException) -> CalengineError:
    """The one-line error for ``exc`` raised by ``obj`` while doing ``action``."""
    what = kind_of(obj)
    message = " ".join(str(exc).split())[:400] or "(no message)"
    hint = _HINTS.get(action, "report it to the plugin's authors").format(kind=what, flag=_FLAGS[what])
    return _ERROR_TYPES[what](
        f"{describe(obj)} failed to {action} (plugin code from {distribution_of(type(obj))}):"
        f" {type(exc).__name__}: {message}; {hint}"
    )
