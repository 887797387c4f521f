"""The options of a job, checked once in the client before any data is read.

Checks here speak the Python API's language (the parameter's name and the value it got); the CLI
reports them under its flag names.
"""

from __future__ import annotations

from ..errors import ParameterError

#: seeds are 32-bit (numpy's and scikit-learn's ``random_state`` limit); larger values would alias
MAX_SEED = 2**32 - 1


def check_cv(cv) -> int:
    """``cv`` as an int >= 2 (a number of folds), or a one-line :class:`ParameterError`."""
    import numbers

    if isinstance(cv, bool) or not isinstance(cv, numbers.Integral) or cv < 2:
        raise ParameterError(f"cv must be an integer >= 2 (the number of folds), got {cv!r}", parameter="cv")
    return int(cv)


def check_seed(seed) -> int:
    """``seed`` as an int in [0, 2**32 - 1], or a one-line :class:`ParameterError`."""
    import numbers

    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ParameterError(f"seed must be an integer from 0 to {MAX_SEED}, got {seed!r}", parameter="seed")
    if not 0 <= seed <= MAX_SEED:
        raise ParameterError(
            f"seed must be from 0 to {MAX_SEED} (32 bits), got {seed}; larger values would silently repeat smaller"
            " ones", parameter="seed"
        )
    return int(seed)
