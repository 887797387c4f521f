"""What the stages of one run share besides its data and options: the run context.

A fit, a recalibration or an evaluation hands the same few things from stage to stage: the Dask client
its tasks run on, the progress display the user sees, the scratch directory where held-out scores spill,
the seed, and the plugins resolved for the run.  Passing each of them to every internal function made
signatures of ten and more parameters in which the run's plumbing hid what a function is about;
:class:`RunContext` carries them as one value.  It is made once by the function that picks the client
(:func:`calengine.runtime.client.dask_client` and its callers) and never changed: a stage that needs a
different part (a spill directory opened for one fit) derives a new one with :meth:`RunContext.with_`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class RunContext:
    """The client tasks run on; the progress display (None: none); the directory held-out scores spill
    to (None: they stay in worker memory); the run's seed; its plugins (None: the installed ones)."""

    client: Any
    progress: Any = None
    spill_dir: str | None = None
    seed: int = 0
    plugins: Any = None

    def with_(self, **changes) -> "RunContext":
        """A copy with ``changes`` (``run.with_(spill_dir=path)``)."""
        return replace(self, **changes)
