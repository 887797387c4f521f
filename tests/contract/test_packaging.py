"""calengine and every plugin in plugins/ build as wheels that pass ``twine check`` and work when
installed, without the source tree, into a fresh environment: what a user installing from an index gets.

Every package directory of each source tree must be in its wheel (a hand-written package list once left
``calengine.decisions`` out, and ``calengine decide`` failed in every real install), and every subcommand's
real work runs once from the installed wheels, in a directory outside the checkout."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

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


def _source_packages(root, top: str) -> set[str]:
    """Every package directory (one holding ``__init__.py``) below ``root/top``, as a dotted name."""
    out = set()
    for here, _, files in os.walk(root / top):
        if "__init__.py" in files and "__pycache__" not in here:
            out.add(os.path.relpath(here, root).replace(os.sep, "."))
    return out


def test_every_source_package_is_in_its_wheel(built_wheels):
    for name, wheel in built_wheels.items():
        with zipfile.ZipFile(wheel) as z:
            names = set(z.namelist())
        packages = _source_packages(DISTRIBUTIONS[name], name)
        assert len(packages) >= 1, name
        missing = sorted(p for p in packages if f"{p.replace('.', '/')}/__init__.py" not in names)
        assert not missing, f"{wheel.name} lacks {missing}: every install of {name} would lack them"
        modules = {os.path.relpath(os.path.join(here, f), DISTRIBUTIONS[name]).replace(os.sep, "/")
                   for here, _, files in os.walk(DISTRIBUTIONS[name] / name) if "__pycache__" not in here
                   for f in files if f.endswith(".py")}
        assert not sorted(modules - names), (wheel.name, sorted(modules - names))
    # the check itself can fail: calengine.decisions is a package of the source tree
    assert "calengine.decisions" in _source_packages(REPO, "calengine")


def test_wheels_pass_twine_check_and_declare_their_entry_points(built_wheels):
    assert set(built_wheels) == set(DISTRIBUTIONS), sorted(built_wheels)
    for name, wheel in built_wheels.items():
        with zipfile.ZipFile(wheel) as z:
            names = z.namelist()
            assert any(n.startswith(f"{name}/") and n.endswith(".py") for n in names), (name, names[:10])
            assert not any(n.startswith(("tests/", "build/", ".venv/", "benchmarks/")) for n in names), name
            if name != "calengine":
                entry_points = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
                assert "[calengine]" in entry_points, (name, entry_points)
    if importlib.util.find_spec("twine") is not None:
        out = _run([sys.executable, "-m", "twine", "--no-color", "check", "--strict", *built_wheels.values()]).stdout
        assert out.count("PASSED") == len(built_wheels), out


def test_every_subcommand_works_from_the_installed_wheels_outside_the_checkout(fresh_venv, tmp_path):
    """fit, score, decide, evaluate (with --cost-matrix and --report), cv, recalibrate and plugins, each
    doing its real work once on a shipped table, run by the fresh venv's console script from a directory
    that holds no source code."""
    py, calengine, env = fresh_venv
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(REPO / "data" / "pima.parquet", work / "pima.parquet")
    code = (
        "import calengine, calengine_builtins, calengine_lexrank, calengine_xgboost, calengine_lightgbm\n"
        "import calengine.decisions, calengine.metrics.report\n"
        "for m in (calengine, calengine_builtins, calengine_lexrank, calengine_xgboost, calengine_lightgbm):\n"
        "    assert 'site-packages' in m.__file__ and %r in m.__file__, m.__file__\n" % str(py.parents[1])
    )
    _run([py, "-c", code], cwd=work, env=env)

    def cli(*args):
        return _run([calengine, "--quiet", *args], cwd=work, env=env)

    listing = cli("plugins").stdout
    for dist in ("calengine-builtins", "calengine-lexrank", "calengine-xgboost", "calengine-lightgbm"):
        assert f"({dist} 0.1.0)  ok" in listing, listing
    assert "FAILED" not in listing and "CLASH" not in listing, listing
    assert "gaussian_nb" in listing and "lexrank" in listing and "xgboost_dask" in listing

    cli("fit", "pima.parquet", "--target", "class", "--learner", "gaussian_nb", "--method", "sigmoid", "--cv", "3",
        "--output", "model")
    assert (work / "model" / "manifest.json").is_file()
    cli("score", "model", "pima.parquet", "--output", "scores")
    scores = pq.read_table(work / "scores").to_pandas()
    assert len(scores) == pq.ParquetFile(work / "pima.parquet").metadata.num_rows
    assert {"p_0", "p_1", "prediction"} <= set(scores.columns)
    costs = '{"classes": [0, 1], "costs": [[0, 5], [1, 0]]}'
    cli("decide", "model", "pima.parquet", "--cost-matrix", costs, "--output", "decisions")
    decisions = pq.read_table(work / "decisions").to_pandas()
    # cost 5 for missing a 1, 1 for a false alarm: decide 1 exactly where p_1 > 1/6
    assert ((decisions["p_1"] > 1 / 6) == (decisions["decision"] == 1)).all()
    out = cli("evaluate", "model", "pima.parquet", "--target", "class", "--cost-matrix", costs, "--report", "report",
              "--json").stdout
    result = json.loads(out)
    assert 0 < result["brier"] < 0.25 and result["decisions"]["n"] == len(scores)
    html = (work / "report" / "index.html").read_text()
    assert "<img" in html or "data:image/png" in html
    folds = json.loads(cli("cv", "pima.parquet", "--target", "class", "--folds", "2", "--cv", "2", "--json").stdout)
    assert folds["folds"] == 2 and len(folds["per_fold"]) == 2 and folds["rows"] == len(scores)
    cli("recalibrate", "model", "pima.parquet", "--target", "class", "--output", "model2")
    manifest = json.loads((work / "model2" / "manifest.json").read_text())
    assert json.dumps(manifest).count("lineage") >= 1
    # nothing above came from a source tree: the working directory holds only data and outputs
    assert not any(p.suffix == ".py" for p in work.rglob("*"))


@pytest.fixture(scope="module")
def built_wheels(tmp_path_factory) -> dict:
    """The wheels of calengine and every plugin, built from copies of their source trees (a stale
    ``build/`` left in the checkout by an earlier build cannot slip old files into them)."""
    tmp = tmp_path_factory.mktemp("wheels")
    sources = tmp / "src"
    anywhere = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".hypothesis", ".pytest_cache")
    copies = []
    for name, root in DISTRIBUTIONS.items():
        def ignore(folder, names, root=root):
            # the checkout's own folders beside the package, not a package's subpackage of the same name
            # (calengine/plugins is one; the repository's plugins/ is not part of calengine's wheel)
            top = {".venv", ".git", "tests", "benchmarks", "data", "plugins", "deploy"} if Path(folder) == root else set()
            return set(anywhere(folder, names)) | (top & set(names))

        dest = sources / name
        shutil.copytree(root, dest, ignore=ignore)
        copies.append(dest)
    wheels = tmp / "wheels"
    _run([sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "-q", "--no-deps",
          "--no-build-isolation", "-w", wheels, *copies])
    return {w.name.split("-")[0]: w for w in wheels.glob("*.whl")}


@pytest.fixture(scope="module")
def fresh_venv(built_wheels, tmp_path_factory):
    """A fresh venv holding the built wheels.  The dependencies (numpy, scikit-learn, dask, ...) come
    from this environment's site-packages through a .pth line, which makes them importable without
    processing this environment's own .pth files -- so an editable calengine of the checkout stays
    invisible and the wheels are what gets imported.  Yields (python, calengine script, environment)."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", venv])
    py = venv / "bin" / "python"
    site = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    with open(os.path.join(site, "outer-env.pth"), "w") as fh:
        fh.write(sysconfig.get_paths()["purelib"] + "\n")
    # --ignore-installed: the outer environment holds calengine itself (a non-editable install, as in
    # CI), which pip would otherwise call "already satisfied" and never install the wheels
    _run([py, "-m", "pip", "--disable-pip-version-check", "install", "-q", "--no-deps", "--no-index", "--ignore-installed",
          *built_wheels.values()])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CALENGINE_STRICT_PLUGINS")}
    env["CALENGINE_REQUIRE_INSTALLED"] = site
    yield py, venv / "bin" / "calengine", env
