"""Containing native boosting libraries while they read a model file: what the Python checks of
:mod:`calengine.booster_checks` cannot foresee must still end in one line, never in the death of the
command.

* :func:`quiet_native` -- while a library parses a booster, its own output (``[LightGBM] [Fatal] ...``
  written by C++ to file descriptor 2, XGBoost's log lines printed through Python, its warnings) goes to
  a buffer instead of the user's terminal; the library's exception, if any, still says what went wrong.
* :func:`probe_in_child` -- the first load of a booster file (by content hash) in a process happens in a
  short-lived child process (``python -P -m calengine.booster_guard``) that loads it with the plugin's own
  class and scores probe rows.  A crash there (SIGSEGV, an abort), a hang (``PROBE_TIMEOUT`` seconds),
  or non-finite or out-of-range probabilities become one :class:`~calengine.errors.ModelFormatError`
  line; the verdict is cached per content hash for the life of the process, so a model is probed once
  however many times it is loaded.  Its cost is one interpreter start plus importing the library
  (``benchmarks/bench_booster_probe.py`` measures it).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from typing import Any

import numpy as np

from .errors import ModelFormatError

#: seconds the child may take to load and probe a booster before it counts as hung
PROBE_TIMEOUT = 120.0
#: exit code of the child when the library refused the file with an exception (its line on stdout)
_REFUSED = 3

_verdicts: dict[str, str | None] = {}
_lock = threading.Lock()
_fd_lock = threading.Lock()


@contextlib.contextmanager
def quiet_native():
    """Send what a native library writes during the block (fd 2, Python's stdout/stderr, warnings) to
    a buffer.  Yields a callable giving the captured text (for messages)."""
    captured: list[str] = []
    with _fd_lock, tempfile.TemporaryFile() as sink, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        buf = io.StringIO()
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        saved = None
        try:
            saved = os.dup(2)
            os.dup2(sink.fileno(), 2)
        except OSError:  # no fd 2 (embedded interpreters): nothing to redirect
            saved = None
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                yield lambda: "".join(captured)
        finally:
            if saved is not None:
                os.dup2(saved, 2)
                os.close(saved)
            sink.seek(0)
            captured.append(buf.getvalue() + sink.read().decode("utf-8", "replace"))


def native_reason(text: str) -> str:
    """The library's own first meaningful line in ``text`` (e.g. LightGBM's ``[Fatal]`` line), or ''."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "fatal" in ln.lower() or "error" in ln.lower():
            return ln[:200]
    return lines[0][:200] if lines else ""


def probe_in_child(cls: type, blob: bytes, n_features: int, n_classes: int) -> None:
    """Load ``blob`` with ``cls`` (a :class:`~calengine.base.BoosterLearner` subclass importable by
    module and name) and score probe rows in a child process, once per content hash per process; one
    ModelFormatError line if that fails in any way."""
    key = hashlib.sha256(bytes(blob)).hexdigest()
    with _lock:
        if key not in _verdicts:
            _verdicts[key] = _run_child(cls, blob, n_features, n_classes)
        verdict = _verdicts[key]
    if verdict is not None:
        raise ModelFormatError(verdict)


def _run_child(cls: type, blob: bytes, n_features: int, n_classes: int) -> str | None:
    title = getattr(cls, "library_title", "") or cls.__name__
    header = json.dumps({"module": cls.__module__, "qualname": cls.__qualname__,
                         "n_features": int(n_features), "n_classes": int(n_classes)})
    try:
        proc = subprocess.run(
            [sys.executable, "-P", "-m", "calengine.booster_guard"], input=header.encode() + b"\n" + bytes(blob),
            capture_output=True, timeout=PROBE_TIMEOUT, env={**os.environ, "PYTHONFAULTHANDLER": ""},
        )
    except subprocess.TimeoutExpired:
        return (f"loading the {title} booster did not finish within {PROBE_TIMEOUT:.0f} s (a hang in the library);"
                " the model is damaged: fit it again")
    except OSError as exc:
        return f"could not start a process to check the {title} booster ({exc}); check the Python installation"
    if proc.returncode == 0:
        return None
    said = proc.stdout.decode("utf-8", "replace").strip().splitlines()
    if proc.returncode == _REFUSED and said:
        return said[-1][:400]
    reason = native_reason(proc.stderr.decode("utf-8", "replace"))
    if proc.returncode < 0:
        try:
            how = signal.Signals(-proc.returncode).name
        except ValueError:
            how = f"signal {-proc.returncode}"
        how = f"crashed {title} ({how})"
    else:
        how = f"made {title} exit with code {proc.returncode}"
    return (f"loading the {title} booster {how}{f': {reason}' if reason else ''}; the model is damaged: fit it"
            " again")


def _probe_rows(n_features: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.vstack([np.zeros(n_features), np.ones(n_features), rng.standard_normal((6, n_features)) * 1e3])


def _child_main() -> int:
    """The child: read the header line and the booster from stdin, load, score, check."""
    import importlib

    data = sys.stdin.buffer.read()
    head, _, blob = data.partition(b"\n")
    spec: dict[str, Any] = json.loads(head)
    cls = importlib.import_module(spec["module"])
    for part in spec["qualname"].split("."):
        cls = getattr(cls, part)
    k = int(spec["n_classes"])
    learner = cls()
    said = str
    try:
        with quiet_native() as said:
            try:
                learner.booster_ = learner.booster_from_bytes(blob)
                learner.n_classes_ = k
                P = learner.score(_probe_rows(int(spec["n_features"])))
            except learner.read_errors() as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise ModelFormatError(f"the {cls.library_title} booster cannot be read ({first}); fit the model again") from None
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        reason = native_reason(said() if said is not str else "")
        print(f"checking the {cls.library_title} booster failed ({type(exc).__name__}: {str(exc)[:200]})"
              f"{f' [{reason}]' if reason else ''}; the model is damaged: fit it again", flush=True)
        return _REFUSED
    P = np.asarray(P, dtype=np.float64)
    if not np.all(np.isfinite(P)) or np.any(P < 0) or np.any(P > 1):
        print(f"the {cls.library_title} booster gives probabilities that are not finite values in [0, 1];"
              " the model is damaged: fit it again", flush=True)
        return _REFUSED
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
