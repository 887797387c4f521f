"""Memory the system refuses: a model still loads under an address-space limit, and running out is one line.

A process's address space can be capped (``ulimit -v``).  Two defects
showed there: every model file was read into a buffer of the 2 GiB a model file may hold (Python
reserves a read's whole size up front), so any model failed to load under a cap below that and was
reported as damaged; and running out of memory elsewhere was numpy's or the system's traceback.
"""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli_helpers import REPO

PIMA = REPO / "data" / "pima.parquet"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("memlimit") / "model"
    r = subprocess.run([sys.executable, "-P", "-m", "calengine", "--quiet", "fit", str(PIMA), "--target", "class",
                        "--method", "sigmoid", "--output", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def test_a_model_loads_under_an_address_space_limit(model):
    """After one load (every module it needs imported), the process's address space is capped at what it
    uses plus 1 GiB, and the model loads again with the same probabilities; reading its files no longer
    reserves 2 GiB each (before: MemoryError, reported as "needs more memory than it can justify; it is
    damaged")."""
    script = textwrap.dedent(f"""
        import resource
        import numpy as np
        import pandas as pd
        import calengine
        first = calengine.load_model({str(model)!r})
        frame = pd.read_parquet({str(PIMA)!r}).drop(columns=["class"]).head(50)
        expected = first.predict_frame(frame).to_numpy()
        with open("/proc/self/statm") as fh:
            size = int(fh.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (size + 2**30, resource.getrlimit(resource.RLIMIT_AS)[1]))
        again = calengine.load_model({str(model)!r})
        assert np.array_equal(again.predict_frame(frame).to_numpy(), expected)
        print("loaded")
    """)
    r = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "loaded", r.stderr[-2000:]


def test_out_of_memory_is_one_line_naming_the_limit():
    """The CLI's message for memory the system refused, found anywhere in the exception's chain:
    MemoryError (numpy's allocations) or ENOMEM (a map, a thread); it names the address-space limit
    when one is set.  Other failures are left alone (a traceback is a bug report)."""
    from calengine.cli import _out_of_memory

    try:
        try:
            raise OSError(errno.ENOMEM, "Cannot allocate memory")
        except OSError as exc:
            raise RuntimeError("a task failed") from exc
    except RuntimeError as outer:
        line = _out_of_memory(outer)
    assert line.startswith("out of memory ([Errno 12] Cannot allocate memory)") and "--workers" in line
    assert _out_of_memory(MemoryError("Unable to allocate 1.91 MiB")).startswith("out of memory (Unable to allocate")
    assert _out_of_memory(OSError(errno.ENOENT, "No such file")) is None
    assert _out_of_memory(ValueError("not memory")) is None
    # with a cap set (far above what this process uses, so nothing else fails)
    script = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (64 * 2**30, resource.RLIM_INFINITY));"
              "from calengine.cli import _out_of_memory; print(_out_of_memory(MemoryError()))")
    r = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "may use 64.0 GiB of address space (ulimit -v)" in r.stdout

