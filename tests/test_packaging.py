"""calengine and every plugin in plugins/ build as wheels that pass ``twine check`` and work when
installed, without the source tree, into a fresh environment: what a user installing from an index gets."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
import zipfile

from cli_helpers import REPO

DISTRIBUTIONS = {
    "calengine": REPO,
    "calengine_builtins": REPO / "plugins" / "builtins",
    "calengine_lexrank": REPO / "plugins" / "lexrank",
    "calengine_xgboost": REPO / "plugins" / "xgboost",
    "calengine_lightgbm": REPO / "plugins" / "lightgbm",
}


def _run(cmd, **kw):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_wheels_build_pass_twine_check_and_work_installed_alone(tmp_path):
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "-q", "--no-deps",
          "--no-build-isolation", "-w", wheels, *DISTRIBUTIONS.values()])
    built = {w.name.split("-")[0]: w for w in wheels.glob("*.whl")}
    assert set(built) == set(DISTRIBUTIONS), sorted(built)

    for name, wheel in built.items():
        with zipfile.ZipFile(wheel) as z:
            names = z.namelist()
            assert any(n.startswith(f"{name}/") and n.endswith(".py") for n in names), (name, names[:10])
            assert not any(n.startswith(("tests/", "build/", ".venv/")) for n in names), name
            if name != "calengine":
                entry_points = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
                assert "[calengine]" in entry_points, (name, entry_points)

    if importlib.util.find_spec("twine") is not None:
        out = _run([sys.executable, "-m", "twine", "--no-color", "check", "--strict", *built.values()]).stdout
        assert out.count("PASSED") == len(built), out

    # A fresh venv; the dependencies (numpy, scikit-learn, dask, ...) come from this environment's
    # site-packages through a .pth line, which makes them importable without processing this
    # environment's own .pth files -- so the editable calengine of the checkout stays invisible and
    # the wheels are what gets imported.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", venv])
    py = venv / "bin" / "python"
    site = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    with open(os.path.join(site, "outer-env.pth"), "w") as fh:
        fh.write(sysconfig.get_paths()["purelib"] + "\n")
    # --ignore-installed: the outer environment may hold calengine itself (a non-editable install, as in
    # CI), which pip would otherwise call "already satisfied" and never install the wheels
    _run([py, "-m", "pip", "--disable-pip-version-check", "install", "-q", "--no-deps", "--no-index", "--ignore-installed",
          *built.values()])

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CALENGINE_STRICT_PLUGINS")}
    code = (
        "import calengine, calengine_builtins, calengine_lexrank, calengine_xgboost, calengine_lightgbm\n"
        "for m in (calengine, calengine_builtins, calengine_lexrank, calengine_xgboost, calengine_lightgbm):\n"
        "    assert 'site-packages' in m.__file__ and %r in m.__file__, m.__file__\n" % str(venv)
    )
    _run([py, "-c", code], cwd=tmp_path, env=env)
    listing = _run([venv / "bin" / "calengine", "plugins"], cwd=tmp_path, env=env).stdout
    for dist in ("calengine-builtins", "calengine-lexrank", "calengine-xgboost", "calengine-lightgbm"):
        assert f"({dist} 0.1.0)  ok" in listing, listing
    assert "FAILED" not in listing and "CLASH" not in listing, listing
    assert "gaussian_nb" in listing and "lexrank" in listing and "xgboost_dask" in listing
