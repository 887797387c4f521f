"""Progress lines on a terminal (stderr), silent when output is piped or captured."""

from __future__ import annotations

import sys
import time


class Progress:
    """``done/total`` counter for one phase; prints only when enabled and stderr is a terminal."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._label = ""
        self._total = 0
        self._done = 0
        self._start = time.monotonic()

    def start(self, label: str, total: int) -> None:
        self._label, self._total, self._done = label, total, 0
        self._start = time.monotonic()
        self._draw()

    def advance(self, n: int = 1) -> None:
        self._done += n
        self._draw()

    def finish(self) -> None:
        if self.enabled and self._total:
            sys.stderr.write("\n")
            sys.stderr.flush()
        self._total = 0

    def _draw(self) -> None:
        if not self.enabled or not self._total:
            return
        width = 30
        filled = int(width * self._done / self._total)
        elapsed = time.monotonic() - self._start
        sys.stderr.write(
            f"\r{self._label:<18} [{'#' * filled}{'.' * (width - filled)}] {self._done}/{self._total}"
            f"  {elapsed:6.1f}s"
        )
        sys.stderr.flush()


def as_progress(progress) -> Progress:
    """The :class:`Progress` of a Python API call: ``progress`` itself when it is one, else a new one
    with ``enabled=progress`` (True, False, or None: only on a terminal)."""
    return progress if isinstance(progress, Progress) else Progress(enabled=progress)


def gather_in_order(client, futures: list, progress: Progress | None, label: str) -> list:
    """Results of ``futures`` in submission order (never completion order), with progress."""
    wait_with_progress(client, futures, progress, label)
    return client.gather(futures)


def wait_with_progress(client, futures: list, progress: Progress | None, label: str) -> None:
    """Wait for ``futures`` (results stay on the workers), drawing progress."""
    from .thread_client import as_completed

    if progress is not None:
        progress.start(label, len(futures))
    for _ in as_completed(client, futures):
        if progress is not None:
            progress.advance()
    if progress is not None:
        progress.finish()
