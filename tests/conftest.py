"""Shared fixtures: the datasets the repo ships, and a runner for the real ``calengine`` CLI.

The suite tests what users install.  Before anything imports calengine, this sets
``CALENGINE_REQUIRE_INSTALLED`` to this interpreter's site-packages: from then on an import of calengine
from anywhere else -- the checkout put first on sys.path by ``python -m pytest`` or ``python -c`` run in
the repository, in this process or in any CLI or worker process a test starts -- fails at once
(``calengine/__init__.py``).  ``CALENGINE_TEST_CHECKOUT=1`` lifts it for an editable development install.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

if os.environ.get("CALENGINE_TEST_CHECKOUT") != "1":
    os.environ["CALENGINE_REQUIRE_INSTALLED"] = sysconfig.get_paths()["purelib"]
    try:
        import calengine  # noqa: F401
    except ImportError as exc:
        pytest.exit(f"error: {exc}", returncode=2)

from cli_helpers import PIMA, REPO, free_port, run_cli, stop_process_groups  # noqa: E402

DATA = REPO / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def cli():
    return run_cli


@pytest.fixture(scope="session")
def pima_xy():
    """Pima's feature columns as a DataFrame and its ``class`` labels as an array (read once per process)."""
    import pandas as pd

    df = pd.read_parquet(PIMA)
    y = df.pop("class").to_numpy()
    return df, y


@pytest.fixture(scope="session")
def pima_sigmoid_model(tmp_path_factory):
    """A model of Pima fitted once per process as ``calengine fit PIMA --target class --cv 3 --method
    sigmoid --workers 1`` (gaussian_nb, three sigmoid members): the evaluation tests' model."""
    out = tmp_path_factory.mktemp("pima") / "sigmoid-cv3"
    r = run_cli("--quiet", "fit", PIMA, "--target", "class", "--cv", "3", "--workers", "1", "--method", "sigmoid",
                "--output", out)
    assert r.returncode == 0, r
    return out


@pytest.fixture(scope="session")
def dask_cluster():
    """A real ``dask scheduler`` and ``dask worker`` (2 processes) on 127.0.0.1, started with the same
    command lines as deploy/local-cluster.sh; yields the scheduler address."""
    import time

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask_bin = str(Path(sys.executable).with_name("dask"))
    procs = [
        subprocess.Popen(
            [dask_bin, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    ]
    try:
        from distributed import Client

        deadline = time.monotonic() + 60
        while True:
            try:
                with Client(address, timeout="2s") as c:
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        procs.append(
            subprocess.Popen(
                [dask_bin, "worker", address, "--nworkers", "2", "--nthreads", "1", "--host", "127.0.0.1",
                 "--no-dashboard", "--memory-limit", "2GiB"],
                start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        )
        with Client(address, timeout="10s") as c:
            c.wait_for_workers(2, timeout=120)
        yield address
    finally:
        stop_process_groups(procs)
