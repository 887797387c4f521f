"""deploy/ checked statically: no container engine runs here, so the Dockerfile, the build context,
the lock file and the compose file are checked against the repository and the test environment
(deploy/build-and-smoke.sh builds and runs the image where Docker is)."""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from cli_helpers import REPO

yaml = pytest.importorskip("yaml")

DEPLOY = REPO / "deploy"
OUR_DISTRIBUTIONS = {"calengine", "calengine-builtins", "calengine-lexrank"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dockerfile() -> list[tuple[str, list[str]]]:
    """(instruction, words) of deploy/Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), shlex.split(rest)))
    return out


def _dockerignore() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _ignored(rel: str, patterns: list[str]) -> bool:
    """Docker's rule, for the patterns we use: a path is excluded when it or one of its parents matches
    (``**/`` matching any depth); the last matching pattern wins, ``!`` re-includes."""
    parts = rel.split("/")
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if pat.startswith("**/"):
            hit = any(fnmatch.fnmatchcase(c.split("/")[-1], pat[3:]) for c in candidates)
        else:
            hit = any(fnmatch.fnmatchcase(c, pat) for c in candidates)
        if hit:
            result = not negate
    return result


def _requirements_closure(roots: list[tuple[str, set[str]]]) -> dict[str, str]:
    """Every distribution the roots need at run time (with their extras), transitively: name -> version
    installed in this environment."""
    from packaging.requirements import Requirement

    env = {"python_version": f"{sys.version_info[0]}.{sys.version_info[1]}"}
    seen: dict[str, str] = {}
    stack = list(roots)
    while stack:
        name, extras = stack.pop()
        dist = metadata.distribution(name)
        key = _norm(dist.metadata["Name"])
        if key in seen and not extras:
            continue
        seen[key] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None:
                wanted = extras or {""}
                if not any(req.marker.evaluate({**env, "extra": e}) for e in wanted):
                    continue
            stack.append((req.name, set(req.extras)))
    return seen


def _lock() -> dict[str, str]:
    pins = {}
    for line in (DEPLOY / "requirements.lock").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"requirements.lock: '{line}' is not pinned with =="
            pins[_norm(name)] = version
    return pins


def test_every_path_the_dockerfile_copies_exists_and_reaches_the_build_context():
    patterns = _dockerignore()
    copies = [words for instr, words in _dockerfile() if instr in ("COPY", "ADD")]
    assert copies
    for words in copies:
        sources = [w for w in words[:-1] if not w.startswith("--")]
        assert sources, words
        for src in sources:
            assert (REPO / src).exists(), f"COPY {src}: no such path in the repository"
            assert not _ignored(src, patterns), f"COPY {src}: excluded by .dockerignore"
            if (REPO / src).is_dir():  # the package sources inside it reach the context too
                for f in (REPO / src).rglob("*.py"):
                    rel = f.relative_to(REPO).as_posix()
                    if "/build/" not in rel and "__pycache__" not in rel:
                        assert not _ignored(rel, patterns), f"{rel} is excluded by .dockerignore"


def test_dockerignore_keeps_virtualenvs_and_data_out_of_the_build_context():
    patterns = _dockerignore()
    for rel in (".venv/bin/python", "plugins/lexrank/.venv/lib/x.py", ".git/HEAD", "data/adult/train.parquet",
                "tests/scenarios/test_cli.py", "calengine/__pycache__/cli.cpython-311.pyc", "plugins/builtins/build/lib/x.py",
                "benchmarks/results/partition_fit.md"):
        assert _ignored(rel, patterns), rel
    for rel in ("calengine/cli.py", "deploy/requirements.lock", "deploy/dask-entry.sh", "pyproject.toml"):
        assert not _ignored(rel, patterns), rel


def test_dockerfile_installs_from_the_lock_without_resolving_anything_else():
    steps = _dockerfile()
    runs = [" ".join(words) for instr, words in steps if instr == "RUN"]
    assert any("pip install" in r and "-r requirements.lock" in r and "--no-deps" in r for r in runs), runs
    ours = [r for r in runs if "pip install" in r and "./plugins/builtins" in r]
    assert ours and "--no-deps" in ours[0] and "pip check" in ours[0]
    base = next(words[0] for instr, words in steps if instr == "FROM")
    # the image's Python is the one the tests run under (environment_versions compares it)
    assert base.startswith(f"python:{sys.version_info[0]}.{sys.version_info[1]}"), base


def test_lock_pins_exactly_what_the_test_environment_resolved():
    lock = _lock()
    needed = _requirements_closure([("calengine", {"report"}), ("calengine-builtins", set()),
                                    ("calengine-lexrank", set())])
    needed = {k: v for k, v in needed.items() if k not in OUR_DISTRIBUTIONS}
    missing = sorted(set(needed) - set(lock))
    assert not missing, f"needed at run time but not pinned (pip would pick any version): {missing}"
    unneeded = sorted(set(lock) - set(needed))
    assert not unneeded, f"pinned but needed by nothing the image installs: {unneeded}"
    differ = {k: (lock[k], needed[k]) for k in needed if lock[k] != needed[k]}
    assert not differ, (f"lock version != version the tests ran with: {differ}; install under the lock "
                        "(pip install -c deploy/requirements.lock ...) or refresh it with deploy/update-lock.sh")


def test_readme_test_command_installs_under_the_lock_so_a_pypi_release_cannot_change_the_suite():
    """Without the constraint, every upstream release (cloudpickle 3.1.3, PyYAML 6.0.4 did) would make
    the check above fail on a clean clone although nothing in the repository changed."""
    readme = (REPO / "README.md").read_text()
    command = next(line for line in readme.splitlines() if line.endswith("pytest -q"))
    assert "pip install -q -c deploy/requirements.lock " in command, command
    # the venv's pytest script, not ``python -m pytest`` (which puts the checkout first on sys.path)
    assert command.endswith("&& .venv/bin/pytest -q"), command
    assert command in (REPO / ".ci" / "run").read_text(), "CI must run the README's test command verbatim"
    script = DEPLOY / "update-lock.sh"
    assert script.stat().st_mode & 0o111, "deploy/update-lock.sh must be executable"
    for root in ("'./[report]'", "./plugins/builtins", "./plugins/lexrank"):
        assert root in script.read_text(), f"update-lock.sh does not resolve {root}"


def _compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def _dask_command_options(sub: str) -> set[str]:
    """The options the installed ``dask scheduler|worker`` accepts (their click definitions)."""
    if sub == "scheduler":
        from distributed.cli.dask_scheduler import main
    else:
        from distributed.cli.dask_worker import main
    return {opt for p in main.params for opt in (*p.opts, *p.secondary_opts)}


def check_dask_command(argv: list[str]) -> None:
    """``argv`` is a two-word ``dask scheduler|worker`` command whose every option exists."""
    assert argv[0] == "dask" and argv[1] in ("scheduler", "worker"), argv
    options = _dask_command_options(argv[1])
    for word in argv[2:]:
        if word.startswith("--"):
            assert word.split("=")[0] in options, f"'dask {argv[1]}' has no option {word}"


def test_compose_commands_are_the_documented_two_word_commands():
    services = _compose()["services"]
    sched, worker = services["scheduler"]["command"], services["worker"]["command"]
    check_dask_command(sched)
    check_dask_command(worker)
    assert worker[2] == "tcp://scheduler:8786"
    assert "--nthreads" in worker and worker[worker.index("--nthreads") + 1] == "1"
    # the README and deploy/local-cluster.sh document exactly these forms
    script = (DEPLOY / "local-cluster.sh").read_text()
    assert "dask scheduler " in script and "dask worker " in script
    assert "dask-scheduler " not in script.replace("dask-scheduler /", "")
    # the scheduler port is published on the host's loopback only
    assert services["scheduler"]["ports"] == ["127.0.0.1:8786:8786"]
    # the image the smoke script builds (calengine:<version of pyproject.toml>) is the one run here
    import tomllib

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert {services[n]["image"] for n in ("scheduler", "worker", "client")} == {f"calengine:{version}"}


def test_compose_workers_see_the_clients_absolute_paths():
    """The client (on the host or in the client service) resolves DATA to an absolute path; every
    container that reads or writes tables mounts the shared directory at that same path."""
    services = _compose()["services"]
    for name in ("worker", "client"):
        vols = services[name]["volumes"]
        assert any(re.fullmatch(r"\$\{CALENGINE_DIR(:\?[^}]*)?\}:\$\{CALENGINE_DIR\}", v) for v in vols), (name, vols)
    client = services["client"]
    assert client["working_dir"] == "${CALENGINE_DIR}"


def test_smoke_script_runs_what_the_docs_promise():
    script = (DEPLOY / "build-and-smoke.sh").read_text()
    for needed in ("docker build -f deploy/Dockerfile", "calengine --version", "calengine plugins",
                   "calengine fit", "--cluster tcp://scheduler:8786", "calengine score", "docker compose"):
        assert needed in script, needed
    r = subprocess.run(["bash", "-n", str(DEPLOY / "build-and-smoke.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_chart_entry_shim_runs_the_two_word_commands(tmp_path):
    """deploy/dask-entry.sh, installed as dask-scheduler/dask-worker, with a fake ``dask`` on PATH."""
    import os

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "dask").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    (fake / "dask").chmod(0o755)
    for name in ("dask-scheduler", "dask-worker"):
        (fake / name).symlink_to(DEPLOY / "dask-entry.sh")
    env = {"PATH": f"{fake}:{os.environ['PATH']}"}
    r = subprocess.run([str(fake / "dask-worker"), "tls://s:8786", "--nthreads", "1"], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0 and r.stdout.split() == ["worker", "tls://s:8786", "--nthreads", "1"], r
    r = subprocess.run([str(fake / "dask-scheduler"), "--port=8786"], capture_output=True, text=True,
                       env={**env, "CALENGINE_TLS_CA": "CA PEM", "CALENGINE_TLS_CERT": "CERT", "CALENGINE_TLS_KEY": "K"})
    words = r.stdout.split("\n")
    assert r.returncode == 0 and words[:2] == ["scheduler", "--port=8786"], r
    ca = Path(words[words.index("--tls-ca-file") + 1])
    assert ca.read_text() == "CA PEM\n" and (ca.stat().st_mode & 0o077) == 0
    r = subprocess.run([str(fake / "dask-scheduler")], capture_output=True, text=True,
                       env={**env, "CALENGINE_TLS_CA": "CA PEM"})
    assert r.returncode == 2 and r.stderr.startswith("error: TLS needs all of"), r


def _venv_path_env():
    import os

    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def test_local_cluster_fails_when_its_scheduler_cannot_take_the_port():
    """A taken port is one error line and exit 1 — not workers attached to whoever holds the port."""
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        r = subprocess.run(["bash", str(DEPLOY / "local-cluster.sh"), str(port), "1"], capture_output=True,
                           text=True, env=_venv_path_env(), timeout=120)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 1, r
    assert len(lines) == 1 and lines[0].startswith("error: the scheduler did not start"), r
    assert "Address already in use" in lines[0] and str(port) in lines[0]
    assert "worker processes" not in r.stderr


def test_local_cluster_starts_workers_on_its_own_scheduler():
    import os
    import signal
    import socket

    from distributed import Client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["bash", str(DEPLOY / "local-cluster.sh"), str(port), "1"], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, env=_venv_path_env(), start_new_session=True)
    try:
        assert "scheduler at tcp://127.0.0.1:%d; 1 worker processes" % port in proc.stderr.readline()
        with Client(f"tcp://127.0.0.1:{port}", timeout=60) as client:
            client.wait_for_workers(1, timeout=60)
            assert len(client.scheduler_info()["workers"]) == 1
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
