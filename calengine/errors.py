"""The small typed hierarchy of errors calengine raises on bad input.

The CLI turns any :class:`CalengineError` into one ``error: ...`` line and exit code 2; Python users
catch them by type.  Every message names the problem *and* the fix, because the person reading it is
usually looking at a shell prompt, not at our source.
"""

from __future__ import annotations


class CalengineError(Exception):
    """Base class: a problem with the user's input or environment, never a bug in calengine.

    ``parameter``: the Python parameter the message is about (``max_categories``), or None; a tuple
    when the message names several (``("method", "mode")``): ``parameter`` is then the first and
    ``parameters`` all of them.  Messages raised below :mod:`calengine.cli` name Python parameters,
    never command-line flags, and write a value given to one as ``name='value'``; the CLI reads
    ``parameters`` (never guesses from the text) to write the same message under its flags
    (:mod:`calengine.cli.parameters`).  It is keyword-only so every ``raise X(message)`` keeps working,
    and it survives pickling (an error raised in a Dask task reaches the client whole).
    """

    def __init__(self, *args, parameter: str | tuple[str, ...] | None = None) -> None:
        super().__init__(*args)
        names = (parameter,) if isinstance(parameter, str) else tuple(parameter or ())
        self.parameters: tuple[str, ...] = names
        self.parameter: str | None = names[0] if names else None

    def __reduce__(self):
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls, args, state):
    """Unpickle a :class:`CalengineError` with its attributes (``parameter``, ``worker``, ...)."""
    exc = cls.__new__(cls)
    Exception.__init__(exc, *args)
    exc.__dict__.update(state)
    return exc


class DataError(CalengineError, ValueError):
    """The table is unreadable, a column is missing or misspelt, the target is unusable, ..."""


class ParameterError(CalengineError, ValueError):
    """A learner, calibrator, combiner or method parameter is invalid."""


class UnknownPluginError(CalengineError, KeyError):
    """A learner/calibrator/combiner name that no loaded plugin registered."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class PluginError(CalengineError, RuntimeError):
    """A plugin failed to load or register (raised only in strict mode, or on duplicate names)."""


class ModelFormatError(CalengineError, ValueError):
    """A model directory is missing, damaged, from an incompatible version, or holds untrusted types."""


class ClusterError(CalengineError, RuntimeError):
    """The Dask cluster cannot be reached, or its workers differ from the client."""


class WorkerLostError(ClusterError):
    """A worker left the cluster while it held a job's data on its own disk (``evaluate --cluster``'s score
    ranges), so the job cannot finish as planned; ``worker`` is its address."""

    def __init__(self, message: str, worker: str | None = None, *, parameter: str | None = None) -> None:
        super().__init__(message, parameter=parameter)
        self.worker = worker


class LearnerError(CalengineError, RuntimeError):
    """A learner failed to fit or score on the data it was given (e.g. a degenerate fold)."""


class CalibratorError(CalengineError, RuntimeError):
    """A calibrator's own code failed to fit, predict or load its state (named with its distribution)."""


class CombinerError(CalengineError, RuntimeError):
    """A combiner's own code failed to combine column estimates (named with its distribution)."""


class CodeMatrixError(ParameterError):
    """A multiclass code matrix is malformed or unusable by the chosen combiner."""


def did_you_mean(name, names) -> str:
    """``" did you mean 'x'?"`` for the registered name closest to a misspelt ``name`` (difflib's
    close matches, case-insensitive), or ``""`` when none is close: error messages append it, so a
    mistyped ``gausian_nb`` points at ``gaussian_nb`` instead of leaving the reader to scan a list."""
    import difflib

    if not isinstance(name, str) or not name:
        return ""
    by_lower = {}
    for n in names:
        if isinstance(n, str):
            by_lower.setdefault(n.lower(), n)
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
    return f" did you mean '{by_lower[close[0]]}'?" if close and by_lower[close[0]] != name else ""
