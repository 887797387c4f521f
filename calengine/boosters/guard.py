"""Containing native boosting libraries while they read a model file: what the Python checks of
:mod:`calengine.boosters.checks` cannot foresee must still end in one line, never in the death of the
command.

* :func:`quiet_native` -- while a library parses a booster, its own output (``[LightGBM] [Fatal] ...``
  written by C++ to file descriptor 2, XGBoost's log lines printed through Python, its warnings) goes to
  a buffer instead of the user's terminal; the library's exception, if any, still says what went wrong.
* :func:`probe_in_child` -- the first load of a booster file (by content hash) in a process happens in a
  short-lived child process (``python -P -m calengine.boosters.guard``) that loads it and scores probe
  rows: through the plugin's declared ``native_probe`` (the shared library alone, via ctypes:
  :mod:`calengine.boosters.native`), else with the plugin's own class.  The child serves the boosters of
  one model load in turn (a model with five folds pays for one interpreter start, not five) and exits
  after ``PROBE_IDLE`` seconds without work or when the parent exits; a thread of the parent waits for
  it, so a child that left idle is reaped at once (not a zombie until the next probe).  A crash there (SIGSEGV, an
  abort), a hang (``PROBE_TIMEOUT`` seconds), or non-finite or out-of-range probabilities become one
  :class:`~calengine.errors.ModelFormatError` line; the verdict is cached per content hash for the life
  of the process, so a model is probed once however many times it is loaded.  Only the process that
  loads a model probes: Dask workers receive the loaded model, never a file.  Its cost with a native
  probe is one interpreter start without numpy plus opening the shared library
  (``benchmarks/bench_booster_probe.py`` measures it against ``score`` without checks).
* :func:`library_chatter_dropped` -- while a booster trains on the cluster from the CLI, the lines the
  libraries print that tell the user nothing (XGBoost's ``... got rank 0`` from each in-process worker,
  written by C++ where no verbosity setting reaches) are dropped from file descriptor 2 by a small
  filter process; every other byte passes through as it comes, and the filter outlives a crash of this
  process, so nothing else written to stderr is lost.  LightGBM's Python-side info messages
  (``lightgbm.dask`` prints "Finding random open ports for workers" to stdout on every training) are
  dropped through its public ``register_logger``; its warnings stay warnings.
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

from ..errors import ModelFormatError

#: seconds the child may take to load and probe a booster before it counts as hung
PROBE_TIMEOUT = 120.0

#: seconds the probing child waits for the next booster before it exits
PROBE_IDLE = 20.0
_IDLE_EXIT = "\0idle"

#: set by the CLI (whose stderr is the user's report): drop :data:`CHATTER` lines while boosters train
FILTER_CHATTER = False

#: a line of library chatter: XGBoost's collective prints "[hh:mm:ss] Task [xgboost.dask-<worker>]:<address>
#: got rank <r>" when a worker thread joins a training.  It is written from the Dask worker's thread
#: through XGBoost's C++ console logger, whose log callback is per thread (the Python package registers
#: one in the importing thread only) and which ignores ``verbosity``.
CHATTER = rb"\[\d\d:\d\d:\d\d\] Task \[xgboost\.dask-[^\]\n]*\]:\S* got rank \d+\r?"
#: how a chatter line starts: a line is held back (not yet passed on) only while it can still be one
_CHATTER_HEAD = rb"\[\d\d:\d\d:\d\d\] Task \[xgboost\.dask-"
_CHATTER_HEAD_LEN = len(b"[00:00:00] Task [xgboost.dask-")
#: the filter process: stdin (the pipe on fd 2) to stdout (the real stderr), line by line, dropping
#: chatter lines; a line that cannot be chatter is passed on as its bytes arrive (progress bars)
_FILTER_CODE = r"""
import os, re, sys
full, head = re.compile(sys.argv[1].encode('latin-1')), re.compile(sys.argv[2].encode('latin-1'))
head_len, pending, passing = int(sys.argv[3]), b'', False
def write(b):
    while b:
        b = b[os.write(1, b):]
def suspect(line):
    n = min(len(line), head_len)
    probe = line[:n] + b'[00:00:00] Task [xgboost.dask-'[n:]
    return head.match(probe) is not None and len(line) < 4096
while True:
    try:
        chunk = os.read(0, 65536)
    except InterruptedError:
        continue
    except OSError:
        break
    if not chunk:
        break
    data, pending = pending + chunk, b''
    while data:
        cut = data.find(b'\n')
        line, data = (data, b'') if cut < 0 else (data[:cut + 1], data[cut + 1:])
        if passing:
            write(line)
            passing = cut < 0
        elif cut < 0:
            if suspect(line):
                pending = line
            else:
                write(line)
                passing = True
        elif not full.fullmatch(line[:-1]):
            write(line)
write(pending)
"""

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


@contextlib.contextmanager
def library_chatter_dropped():
    """While the block runs, pass file descriptor 2 through a filter process that drops :data:`CHATTER`
    lines and nothing else (module docstring); only where :data:`FILTER_CHATTER` is set (the CLI: the
    Python API leaves stderr alone).  If the filter cannot start, stderr stays as it is."""
    if not FILTER_CHATTER:
        yield
        return
    if "lightgbm" in sys.modules:  # the CLI's own process: set once, never restored
        sys.modules["lightgbm"].register_logger(_LightGBMWarningsOnly())
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2: nothing to filter
        yield
        return
    read_end, write_end = os.pipe()
    try:
        child = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _FILTER_CODE, CHATTER.decode("latin-1"), _CHATTER_HEAD.decode("latin-1"),
             str(_CHATTER_HEAD_LEN)], stdin=read_end, stdout=saved, stderr=subprocess.DEVNULL)
    except OSError:
        os.close(read_end)
        os.close(write_end)
        os.close(saved)
        yield
        return
    os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved, 2)  # the pipe's last write end closes: the filter passes what is left and exits
        os.close(saved)
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a process started meanwhile holds the pipe: leave the filter to it
            pass


class _LightGBMWarningsOnly:
    """A logger for ``lightgbm.register_logger``: info messages dropped, warnings as LightGBM's own
    default logger gives them (``warnings.warn``)."""

    def info(self, msg: str) -> None:
        pass

    def warning(self, msg: str) -> None:
        warnings.warn(msg, stacklevel=3)


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


class _ProbeServer:
    """One child process per parent process, probing boosters one after another (so the interpreter
    start and the library import are paid once, not per booster file).  A probe that kills or hangs
    the child gives its verdict and the next probe starts a fresh child."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.log = None

    def _start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self.log = tempfile.TemporaryFile()
            self.proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "calengine.boosters.guard", repr(float(PROBE_IDLE))], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=self.log, env={**os.environ, "PYTHONFAULTHANDLER": ""},
            )
            # reap the child whenever it exits (idle, or killed): ``wait`` here and in ``probe`` share
            # Popen's lock, and a ``poll`` while this waits reports it running, which ``probe`` handles
            # as a child that left as the request arrived (it starts another)
            threading.Thread(target=self.proc.wait, name="calengine-probe-reaper", daemon=True).start()
        return self.proc

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def probe(self, cls: type, blob: bytes, n_features: int, n_classes: int) -> str | None:
        import select

        title = getattr(cls, "library_title", "") or cls.__name__
        header = json.dumps({"module": cls.__module__, "qualname": cls.__qualname__, "n_features": int(n_features),
                             "n_classes": int(n_classes), "bytes": len(blob),
                             "probe": getattr(cls, "native_probe", None)})
        try:
            proc = self._start()
            self.log.seek(0, 2)
            mark = self.log.tell()
            proc.stdin.write(header.encode() + b"\n" + bytes(blob))
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], PROBE_TIMEOUT)
            line = proc.stdout.readline() if ready else None
        except OSError as exc:  # the child died while reading what we sent: reported below
            line = b""
            if self.proc is None:
                return f"could not start a process to check the {title} booster ({exc}); check the Python installation"
        if line is None:
            self.stop()
            return (f"loading the {title} booster did not finish within {PROBE_TIMEOUT:.0f} s (a hang in the"
                    " library); the model is damaged: fit it again")
        said = line.decode("utf-8", "replace").strip()
        if said == "ok":
            return None
        if said.startswith("refused "):
            return said[len("refused "):][:400]
        rc = self.proc.wait()
        if rc == 0:
            self.proc = None
            return _IDLE_EXIT
        self.log.seek(mark)
        reason = native_reason(self.log.read().decode("utf-8", "replace"))
        self.proc = None
        if rc < 0:
            try:
                how = f"crashed {title} ({signal.Signals(-rc).name})"
            except ValueError:
                how = f"crashed {title} (signal {-rc})"
        else:
            how = f"made {title} exit with code {rc}"
        return f"loading the {title} booster {how}{f': {reason}' if reason else ''}; the model is damaged: fit it again"


_server = _ProbeServer()


def _run_child(cls: type, blob: bytes, n_features: int, n_classes: int) -> str | None:
    verdict = _server.probe(cls, blob, n_features, n_classes)
    if verdict == _IDLE_EXIT:  # the child left on its idle timeout as this request arrived: once more
        verdict = _server.probe(cls, blob, n_features, n_classes)
    return verdict


def _probe_rows(n_features: int):
    import numpy as np

    from .native import probe_rows

    return np.asarray(probe_rows(n_features), dtype=np.float64)


def _child_main() -> int:
    """The child: for each request on stdin (a JSON header line, then the booster's bytes), load,
    score, check, and answer one line (``ok`` or ``refused <message>``); exit at end of input."""
    import select

    stdin = sys.stdin.buffer
    idle = float(sys.argv[1]) if len(sys.argv) > 1 else PROBE_IDLE
    while True:
        if not select.select([stdin], [], [], idle)[0]:
            return 0  # idle: the parent starts another child when it next needs one
        head = stdin.readline()
        if not head:
            return 0
        spec: dict[str, Any] = json.loads(head)
        blob = stdin.read(int(spec["bytes"]))
        verdict = _probe_one(spec, blob)
        sys.stdout.write(("ok" if verdict is None else "refused " + " ".join(verdict.split())) + "\n")
        sys.stdout.flush()


def _probe_one(spec: dict[str, Any], blob: bytes) -> str | None:
    """The verdict on one booster: through the plugin's declared ``native_probe`` (the native library
    alone, :mod:`calengine.boosters.native`) when it has one and the library is where its package puts
    it, else through the plugin's class (its own loader and ``score``, importing the Python package)."""
    import importlib

    if spec.get("probe"):
        from .native import NativeLibraryMissing

        module, _, name = str(spec["probe"]).partition(":")
        try:
            return getattr(importlib.import_module(module), name)(blob, int(spec["n_features"]), int(spec["n_classes"]))
        except NativeLibraryMissing:
            pass
        except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
            return f"checking the booster failed ({type(exc).__name__}: {str(exc)[:200]}); the model is damaged: fit it again"
    return _probe_with_class(spec, blob)


def _probe_with_class(spec: dict[str, Any], blob: bytes) -> str | None:
    import importlib

    import numpy as np

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
        return (f"checking the {cls.library_title} booster failed ({type(exc).__name__}: {str(exc)[:200]})"
                f"{f' [{reason}]' if reason else ''}; the model is damaged: fit it again")
    P = np.asarray(P, dtype=np.float64)
    if not np.all(np.isfinite(P)) or np.any(P < 0) or np.any(P > 1):
        return (f"the {cls.library_title} booster gives probabilities that are not finite values in [0, 1];"
                " the model is damaged: fit it again")
    return None


if __name__ == "__main__":
    sys.exit(_child_main())
