"""For learners whose fitted state is a library's own model file (XGBoost UBJSON, LightGBM text).

Such a learner stores the model bytes under a key such as ``"booster.ubj"`` (the artifact writes them
as the file ``learner_<j>.booster.ubj``) beside the library's name and version.  The bytes are only as
good as the library reading them: a release older than the writer, or another major version, may
misread them or crash.  These helpers hold the part every such plugin would otherwise copy: the state
layout and the one-line refusal naming the version to install.  The library itself is never imported
here (the plugins pass their installed version in), so the checks are testable without it.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import ModelFormatError


def version_tuple(text: str) -> tuple[int, ...]:
    """``"2.1.4"`` -> (2, 1, 4); ``"4.6.0.99"`` -> (4, 6, 0); no digits -> ()."""
    return tuple(int(p) for p in re.findall(r"\d+", str(text))[:3])


def check_library_version(recorded: str, installed: str, library: str, package: str | None = None) -> None:
    """Refuse a model file written by a newer release or another major version of ``library``.

    ``package`` is the distribution to pin in the fix (``xgboost-cpu`` for the ``xgboost`` library).
    """
    want, have = version_tuple(recorded), version_tuple(installed)
    if not want or want[0] != have[0] or have < want:
        raise ModelFormatError(
            f"this model's booster was written by {library} {recorded} and {library} {installed} is installed;"
            f" install the same release (pip install '{package or library}=={recorded}') to load it"
        )


def library_state(key: str, blob: bytes, n_classes: int, library: str, version: str) -> dict[str, Any]:
    """The learner state: the model bytes under ``key``, the class count, the library and its version."""
    return {key: bytes(blob), "n_classes": int(n_classes), "library": library, "library_version": str(version)}


def read_library_state(
    state: dict[str, Any], learner: str, key: str, library: str, installed: str, package: str | None = None
) -> tuple[bytes, int]:
    """(model bytes, class count) from a state :func:`library_state` wrote, after checking that it holds
    a ``library`` model the ``installed`` release can read; else one :class:`ModelFormatError`."""
    if state.get("library") != library or key not in state:
        raise ModelFormatError(f"learner '{learner}' state holds no {library} booster; fit the model again")
    check_library_version(str(state.get("library_version", "")), installed, library, package)
    try:
        n_classes = int(state["n_classes"])
    except (KeyError, TypeError, ValueError):
        raise ModelFormatError(f"learner '{learner}' state has no valid class count; fit the model again") from None
    return bytes(state[key]), n_classes
