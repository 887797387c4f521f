"""The record of the outputs this process has published.

It is its own stdlib-only module because the CLI asks it after every command (to tell an interrupt
that came after the output landed from one that came before) and ``calengine --help`` must not import
numpy or pyarrow to do so; :mod:`calengine.parquet.data`, which publishes, writes to it.
"""

from __future__ import annotations

import os

#: the real paths of the outputs this process has published (a staging directory renamed onto its
#: target by :func:`calengine.parquet.data.staged_directory`); the CLI reads it through
#: :func:`calengine.runtime.run_log.output_published`
PUBLISHED: list[str] = []


def note_published(path: str) -> None:
    """Record that ``path`` is now complete and in place: a Ctrl-C from here on cannot undo it."""
    PUBLISHED.append(os.path.realpath(path))
