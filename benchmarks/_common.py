"""Helpers shared by benchmark scripts: machine facts, medians, per-process peak RSS of a process tree,
and writing results as Markdown + JSON.

Peak RSS is sampled with psutil every ``interval`` seconds over the launched process and all of its
descendants.  On Linux each process's ``VmHWM`` (the kernel's own peak-RSS high-water mark) is read at
every sample too, so a spike between two samples is still caught; the reported peak of a process is the
larger of the two.  The launched process is reaped with ``os.wait4``, whose rusage adds exact CPU times
and the largest RSS of any waited-for process of the tree.
"""

from __future__ import annotations

import json
import numbers
import os
import platform
import re
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

MiB = 2**20
GiB = 2**30
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: the repository (a result page records its commit)
REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------- machine


def git_commit(repo: str | os.PathLike) -> dict:
    """``git rev-parse HEAD`` and whether tracked files differ from it (None outside a checkout)."""
    def run(*args):
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=30)

    try:
        head = run("rev-parse", "HEAD")
        dirty = run("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    if head.returncode != 0:
        return {"commit": None, "dirty": None}
    return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def package_versions(names: Iterable[str]) -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def machine_info() -> dict:
    import psutil

    vm = psutil.virtual_memory()
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus_logical": os.cpu_count(),
        "cpus_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_total_gib": round(vm.total / GiB, 2),
        "memory_available_gib": round(vm.available / GiB, 2),
        "loadavg": list(os.getloadavg()),
        "threads_env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ},
        "cpu_model": _cpu_model(),
        "thread_pools": _thread_pools(),
    }


def _cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (``platform.processor()`` elsewhere): figures from two
    machines are only comparable when this says they are alike."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _thread_pools() -> list[dict]:
    """The BLAS/OpenMP pools threadpoolctl sees (a BLAS using every core inside every worker skews timings)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [{k: p.get(k) for k in ("user_api", "internal_api", "num_threads", "version")} for p in threadpool_info()]


#: what every result page records of the software, beside the packages a script names itself
BASE_PACKAGES = ("calengine", "calengine-builtins", "numpy", "scipy", "pandas", "pyarrow", "scikit-learn",
                 "dask", "distributed")


def source_revision(repo: str | os.PathLike) -> str:
    """``git_commit`` as one string: the commit, with ``+dirty`` when tracked files differ from it."""
    git = git_commit(repo)
    if git["commit"] is None:
        return "unknown"
    return git["commit"] + ("+dirty" if git["dirty"] else "")


def environment(repo: str | os.PathLike, packages: Iterable[str] = ()) -> dict:
    """What every result page records, in one shape: the command, the commit, the machine, the load
    when the run started and the versions of ``BASE_PACKAGES`` plus ``packages``.

    Call it when the run starts (the load then is what the figures met); a script that wants the load
    at the end as well takes another ``load_snapshot()``.
    """
    names = list(dict.fromkeys([*BASE_PACKAGES, *packages]))
    return {
        "command": command_line(),
        "git": git_commit(repo),
        "source_revision": source_revision(repo),
        "machine": machine_info(),
        "load": load_snapshot(),
        "packages": package_versions(names),
    }


def is_environment(env: Any) -> bool:
    """Whether ``env`` is an ``environment()`` record: a result JSON written before the scripts shared
    it has another shape, and a report rebuilt from such a file keeps its old environment lines."""
    return isinstance(env, dict) and isinstance(env.get("machine"), dict) and "load" in env and "git" in env


def environment_markdown(env: dict) -> list[str]:
    """Markdown bullet lines of an ``environment()`` record, the same on every result page."""
    m, load = env["machine"], env["load"]
    pools = ", ".join(f"{p['internal_api']} ({p['num_threads']} threads)" for p in m.get("thread_pools", []))
    return [
        f"* command: `{env['command']}`",
        f"* commit: {env['source_revision']}",
        (f"* machine: {m['cpus_logical']} logical CPUs ({m['cpu_affinity']} usable), {m.get('cpu_model', 'unknown')},"
         f" {m['memory_total_gib']} GiB; {m['platform']}"),
        (f"* load when the run started: {load['load1']:.2f} / {load['load5']:.2f} / {load['load15']:.2f}"
         f" (1/5/15 min), {load['available_gib']} GiB available; thread pools: {pools or 'none seen'};"
         f" thread env: {', '.join(f'{k}={v}' for k, v in (m['threads_env'] or {}).items()) or 'unset'}"),
        "* " + ", ".join(f"{k} {v}" for k, v in env["packages"].items()),
    ]


def load_snapshot() -> dict:
    """The 1/5/15-minute load averages and available memory right now."""
    import psutil

    one, five, fifteen = os.getloadavg()
    return {"load1": one, "load5": five, "load15": fifteen,
            "available_gib": round(psutil.virtual_memory().available / GiB, 2)}


def wait_for_quiet(max_load: float | None, max_wait: float, poll: float = 5.0) -> dict:
    """Wait (up to ``max_wait`` s) until the 1-minute load is at most ``max_load``; return the load
    seen when starting (with ``waited_s``).  ``max_load=None`` only records."""
    t0 = time.perf_counter()
    snap = load_snapshot()
    while max_load is not None and snap["load1"] > max_load and time.perf_counter() - t0 < max_wait:
        time.sleep(poll)
        snap = load_snapshot()
    snap["waited_s"] = round(time.perf_counter() - t0, 1)
    return snap


# ---------------------------------------------------------------------------------------------- stats


def median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall seconds of ``repeats`` calls of ``fn`` (the median, because other jobs on a shared
    machine only ever add time, and the middle run is the least disturbed one that is still typical)."""
    times = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def timed(fn: Callable[..., Any], *args, **kwargs) -> tuple[Any, float]:
    """``fn(*args, **kwargs)`` and the wall seconds it took."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt(v: Any, digits: int = 2, *, fixed: bool = False, missing: str = "n/a") -> str:
    """One figure as table text: ``missing`` for None and NaN (a figure that does not exist), yes/no
    for booleans, ``inf``/``-inf`` as such, floats with ``digits`` decimals.  By default very small or
    very large floats switch to scientific notation; ``fixed=True`` keeps fixed point (and formats ints
    alike), for tables set beside a paper's printed figures."""
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        v = int(v)  # numpy integers print as Python's
    elif isinstance(v, numbers.Real) and not isinstance(v, bool):
        v = float(v)  # numpy floats (float32 included) print as Python's
    if v is None or (isinstance(v, float) and v != v):
        return missing
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float) or (fixed and isinstance(v, int)):
        v = float(v)
        if v in (float("inf"), float("-inf")):
            return "inf" if v > 0 else "-inf"
        if not fixed and v != 0 and (abs(v) < 10 ** -digits or abs(v) >= 1e6):
            return f"{v:.2e}"
        return f"{v:.{digits}f}"
    return str(v)


# ---------------------------------------------------------------------------------------------- RSS


def default_role(proc_info: dict, root_pid: int) -> str:
    """client (the launched process), worker (Dask worker processes: multiprocessing spawn children or
    anything naming a distributed worker/nanny), scheduler (a separate dask scheduler), or other."""
    if proc_info["pid"] == root_pid:
        return "client"
    cmd = " ".join(proc_info.get("cmdline") or [])
    if "resource_tracker" in cmd or "forkserver" in cmd or "semaphore_tracker" in cmd:
        return "other"
    if "scheduler" in cmd and ("dask" in cmd or "distributed" in cmd):
        return "scheduler"
    if "spawn_main" in cmd or ("distributed" in cmd and ("worker" in cmd or "nanny" in cmd)):
        return "worker"
    return "other"


def _vmhwm(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


#: a Dask worker process has imported numpy, pandas and distributed (well over 150 MiB here); a spawned
#: child seen below this never ran as one (see :meth:`TreeSampler.report`).
STILLBORN_WORKER_BYTES = 96 * 1024**2


@dataclass
class TreeSampler:
    """Sample RSS of ``root_pid`` and its descendants every ``interval`` s in a background thread."""

    root_pid: int
    interval: float = 0.15
    role_of: Callable[[dict, int], str] = default_role
    procs: dict[int, dict] = field(default_factory=dict)
    tree_peak: int = 0
    samples: int = 0

    def __post_init__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._cache: dict[int, Any] = {}

    def start(self) -> "TreeSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _processes(self):
        import psutil

        try:
            root = self._cache.get(self.root_pid) or psutil.Process(self.root_pid)
            self._cache[self.root_pid] = root
            kids = root.children(recursive=True)
        except psutil.Error:
            return []
        out = [root]
        for k in kids:  # reuse Process objects so create_time checks stay cheap
            out.append(self._cache.setdefault(k.pid, k))
        return out

    def sample(self) -> None:
        import psutil

        total = 0
        for p in self._processes():
            try:
                rss = p.memory_info().rss
            except psutil.Error:
                continue
            hwm = _vmhwm(p.pid)
            info = self.procs.get(p.pid)
            if info is None:
                try:
                    cmdline = p.cmdline()
                    created = p.create_time()
                    ppid = p.ppid()
                except psutil.Error:
                    cmdline, created, ppid = [], time.time(), None
                if p.pid != self.root_pid and ppid == self.root_pid and cmdline == self._root_cmdline():
                    continue  # forked but not yet exec'd: its role shows once it runs its own command
                info = {"pid": p.pid, "ppid": ppid, "cmdline": cmdline, "created": created,
                        "peak_rss": 0, "peak_hwm": 0}
                info["role"] = self.role_of(info, self.root_pid)
                self.procs[p.pid] = info
            info["peak_rss"] = max(info["peak_rss"], rss)
            if hwm is not None:
                info["peak_hwm"] = max(info["peak_hwm"], hwm)
            total += rss
        self.tree_peak = max(self.tree_peak, total)
        self.samples += 1

    def _root_cmdline(self) -> list:
        """The launched process's command line (a child showing it has not exec'd yet)."""
        if not hasattr(self, "_root_cmd"):
            import psutil

            try:
                self._root_cmd = psutil.Process(self.root_pid).cmdline()
            except psutil.Error:
                self._root_cmd = None
        return self._root_cmd

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def report(self) -> dict:
        """Peak RSS (bytes) per role: client, scheduler, each worker (by start order), others; plus the
        tree's peak sum of simultaneous RSS."""
        by_role: dict[str, list[dict]] = {}
        for info in sorted(self.procs.values(), key=lambda d: (d["created"], d["pid"])):
            by_role.setdefault(info["role"], []).append(info)

        def peak(info):
            return max(info["peak_rss"], info["peak_hwm"])

        out: dict[str, Any] = {"samples": self.samples, "interval_s": self.interval, "tree_peak_sum": self.tree_peak}
        client = by_role.get("client", [])
        out["client"] = peak(client[0]) if client else None
        out["scheduler"] = max((peak(i) for i in by_role.get("scheduler", [])), default=None)
        # a spawned process that never got past interpreter start-up (a worker the nanny restarted while
        # the cluster was closing, caught by one sample) is not a worker of the run: CI once counted a
        # third "worker" of 63 MiB beside two of ~230 MiB; it is listed apart, not dropped
        workers = by_role.get("worker", [])
        out["workers"] = [peak(i) for i in workers if peak(i) >= STILLBORN_WORKER_BYTES]
        out["workers_stillborn"] = [peak(i) for i in workers if peak(i) < STILLBORN_WORKER_BYTES]
        out["worker_max"] = max(out["workers"], default=None)
        out["others"] = [{"peak": peak(i), "cmd": " ".join(i["cmdline"])[:120]} for i in by_role.get("other", [])]
        out["n_processes"] = len(self.procs)
        return out


@dataclass
class RunResult:
    cmd: list[str]
    returncode: int
    wall_s: float
    launched_at: float  # time.time() just before launch (for timestamps reported by the child)
    stdout: str
    stderr: str
    rss: dict
    rusage: dict
    load_before: dict
    timed_out: bool = False

    def to_json(self, keep_output: int = 2000) -> dict:
        return {
            "cmd": self.cmd, "returncode": self.returncode, "wall_s": self.wall_s, "timed_out": self.timed_out,
            "rss": self.rss, "rusage": self.rusage, "load_before": self.load_before,
            "stderr_tail": self.stderr[-keep_output:],
        }


def run_measured(cmd: list[str], *, env: dict | None = None, cwd: str | None = None, timeout: float | None = None,
                 interval: float = 0.15, max_load: float | None = None, max_wait: float = 0.0) -> RunResult:
    """Run ``cmd`` in its own process group; wall time, per-role peak RSS, and rusage of the tree.

    The process is reaped with ``os.wait4`` (rusage of it and every descendant it waited for: CPU
    seconds, and ``ru_maxrss``, the peak RSS of the largest single process among them).  On timeout
    the whole process group is killed.
    """
    load = wait_for_quiet(max_load, max_wait)
    launched_at = time.time()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                            start_new_session=True, text=True)
    sampler = TreeSampler(proc.pid, interval=interval).start()
    out_chunks: dict[str, list[str]] = {"out": [], "err": []}

    def drain(stream, key):
        for line in iter(stream.readline, ""):
            out_chunks[key].append(line)
        stream.close()

    readers = [threading.Thread(target=drain, args=(proc.stdout, "out"), daemon=True),
               threading.Thread(target=drain, args=(proc.stderr, "err"), daemon=True)]
    for r in readers:
        r.start()
    timed_out = False
    deadline = None if timeout is None else t0 + timeout
    status = ru = None
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            break
        if deadline is not None and time.perf_counter() > deadline:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, status, ru = os.wait4(proc.pid, 0)
            break
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    sampler.stop()
    # stragglers (e.g. worker processes outliving the client) would keep the pipes open
    try:
        os.killpg(proc.pid, 0)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for r in readers:
        r.join(timeout=10)
    rusage = {"user_s": ru.ru_utime, "sys_s": ru.ru_stime, "maxrss_bytes": ru.ru_maxrss * 1024}
    return RunResult(cmd=list(cmd), returncode=proc.returncode, wall_s=wall, launched_at=launched_at,
                     stdout="".join(out_chunks["out"]), stderr="".join(out_chunks["err"]),
                     rss=sampler.report(), rusage=rusage, load_before=load, timed_out=timed_out)


def tree_cpu_seconds() -> float:
    """User + system CPU seconds of this process (all threads), its live descendants and the children it
    reaped: what a run cost the machine, which other jobs disturb less than its wall time."""
    import psutil

    me = psutil.Process()
    t = me.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in me.children(recursive=True):
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return total


def children_maxrss() -> int:
    """``getrusage(RUSAGE_CHILDREN).ru_maxrss`` in bytes: the largest RSS of any reaped descendant so far."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


# ---------------------------------------------------------------------------------------------- output


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: Sequence[str] | None = None) -> str:
    """A Markdown table; cells that are not strings go through ``fmt``.  ``align`` gives each column
    ``"<"`` (left, the default) or ``">"`` (right: figures line up by their last digit)."""
    align = align or ["<"] * len(headers)
    lines = ["| " + " | ".join(headers) + " |", "|" + "".join("---:|" if a == ">" else "---|" for a in align)]
    for row in rows:
        lines.append("| " + " | ".join(fmt(c) if not isinstance(c, str) else c for c in row) + " |")
    return "\n".join(lines)


def jsonable(obj):
    """``obj`` with only strict-JSON types: numpy scalars and arrays as Python numbers and lists, paths
    as strings, keys as strings, NaN as null and +-infinity as the strings ``"inf"``/``"-inf"`` (strict
    JSON has neither; a log loss of a probability 0 is a real infinity worth keeping).  ``from_jsonable``
    reads such a file back."""
    import numpy as np

    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float):
        if obj != obj:
            return None
        if obj in (float("inf"), float("-inf")):
            return "inf" if obj > 0 else "-inf"
    return obj


def from_jsonable(obj, null: Any = None):
    """Inverse of ``jsonable`` for numbers: ``"inf"``/``"-inf"`` back to floats and null to ``null``
    (``math.nan`` where a table of figures stored NaN as null)."""
    if obj is None:
        return null
    if isinstance(obj, dict):
        return {k: from_jsonable(v, null) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_jsonable(v, null) for v in obj]
    if obj == "inf":
        return float("inf")
    if obj == "-inf":
        return float("-inf")
    return obj


def dumps(data: Any, indent: int | None = 2) -> str:
    """Strict JSON text of ``data`` through ``jsonable`` (no NaN or Infinity tokens)."""
    return json.dumps(jsonable(data), indent=indent, allow_nan=False)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``path`` whole, then rename it into place, so a crash never leaves half a result page."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


#: absolute paths of the machine a run happened on (a venv's python, scratch and work directories):
#: result pages name none of them (``tests/contract/test_docs.py`` checks)
_MACHINE_PYTHON = re.compile(r"(?:/[\w.+-]+)+/bin/python[\d.]*")
_MACHINE_PATH = re.compile(r"(?<![\w.])/(?:tmp|work|root|home)(?:/[^\s'\"`,;)\]}|]*)?")


def without_machine_paths(text: str) -> str:
    """``text`` with the run machine's absolute paths replaced: a venv's python by ``python``, any other
    path under /tmp, /work, /root or /home by ``$SCRATCH/<its last component>``."""
    text = _MACHINE_PYTHON.sub("python", text)

    def scratch(m: re.Match) -> str:
        parts = [p for p in m.group(0).split("/") if p]
        return "$SCRATCH/" + parts[-1] if len(parts) > 1 else "$SCRATCH"

    return _MACHINE_PATH.sub(scratch, text)


def machine_words(machine: dict, load: dict | None = None) -> str:
    """The machine of a run in words, as the result pages say it."""
    cores = machine.get("cpu_affinity") or machine.get("cpus_logical")
    cpu = (machine.get("cpu_model") or "").strip()
    words = f"a shared {cores}-core {cpu + ' ' if cpu else ''}machine with {machine.get('memory_total_gib', 0):.1f} GiB of memory"
    if load:
        words += f", load {load['load1']:.1f} when the run started"
    return words


def page_header(env: dict) -> list[str]:
    """The three lines every result page starts with: its command, commit and machine (in words)."""
    git = env.get("git") or {}
    commit = str(git.get("commit") or "unknown")[:10] + (" (with uncommitted changes)" if git.get("dirty") else "")
    return [f"**Command**: `python benchmarks/{env['command']}`", "", f"**Commit**: {commit}", "",
            f"**Machine**: {machine_words(env['machine'], env.get('load'))}", ""]


def as_result_page(markdown: str, env: dict | None = None) -> str:
    """A results page in the shape the Benchmarks page includes: the command, commit and machine under
    the title (from ``env``, else recorded now), the first table marked as the page's headline (the
    section ``docs/benchmarks.md`` includes) unless the page marks one itself, and no machine paths.
    One page per benchmark: a new run replaces the page; earlier runs stay in git's history."""
    if env is None:
        env = {"command": command_line(), "git": git_commit(REPO), "machine": machine_info(), "load": load_snapshot()}
    lines = markdown.rstrip().splitlines()
    if "**Command**" not in markdown:
        at = 1 if lines and lines[0].startswith("# ") else 0
        lines = lines[:at] + [""] + page_header(env) + lines[at:]
    if "--8<-- [start:headline]" not in markdown:
        for i, line in enumerate(lines):
            if line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|?\s*$", lines[i + 1]):
                j = i
                while j < len(lines) and lines[j].startswith("|"):
                    j += 1
                lines = (lines[:i] + ["<!-- --8<-- [start:headline] -->"] + lines[i:j]
                         + ["<!-- --8<-- [end:headline] -->"] + lines[j:])
                break
    return without_machine_paths("\n".join(lines)) + "\n"


def write_results(results_dir: str | os.PathLike, name: str, data: dict, markdown: str) -> tuple[Path, Path]:
    """Write ``name.json`` and ``name.md`` under ``results_dir`` (written whole, then renamed); the page
    as :func:`as_result_page` shapes it, both without the machine's absolute paths."""
    d = Path(results_dir)
    paths = (d / f"{name}.json", d / f"{name}.md")
    env = data.get("environment") if isinstance(data, dict) and is_environment(data.get("environment")) else None
    texts = (without_machine_paths(dumps(data)) + "\n", as_result_page(markdown, env))
    for path, text in zip(paths, texts):
        write_text(path, text)
    return paths


def machine_line(repo: str | os.PathLike) -> str:
    """The results page's last line: the machine, its load before the run and the commit measured."""
    return f"Machine: {machine_info()}.  Load before: {load_snapshot()}.  Git: {git_commit(repo)}."


def publish(markdown: str, results: list, name: str, results_dir: str | os.PathLike, write: bool = True) -> None:
    """Print the results page and, unless ``write`` is false, write ``name.json`` (results and the
    command) and ``name.md`` under ``results_dir``, printing their paths."""
    print(markdown)
    if write:
        for path in write_results(results_dir, name, {"results": results, "command": command_line()}, markdown):
            print(f"wrote {path}")


def calengine_command() -> list[str]:
    """How a benchmark launches calengine as a user does: the installed ``calengine`` console script next
    to this interpreter, else ``python -m calengine``."""
    script = Path(sys.executable).with_name("calengine")
    return [str(script)] if script.exists() else [sys.executable, "-m", "calengine"]


def command_line() -> str:
    """The command as typed, script name without its folder, arguments quoted for a shell."""
    import shlex

    return shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])


def add_generated_table_options(ap, *, name: str, results_dir: str, rows_list: Sequence[int],
                                methods: Sequence[str]) -> None:
    """The options every benchmark of a generated score table shares (bench_score_columns, bench_sql_export):
    which sizes and methods, how many repeats, how the generated Parquet is cut, its seed, the per-run
    timeout and RSS sampling, and where tables and results go."""
    ints = lambda s: [int(float(x)) for x in s.split(",") if x.strip()]  # noqa: E731 - 1e7 is accepted
    ap.add_argument("--rows-list", type=ints, default=list(rows_list))
    ap.add_argument("--methods", type=lambda s: [m for m in s.split(",") if m], default=list(methods))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rows-per-file", type=int, default=5_000_000)
    ap.add_argument("--row-group-rows", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--sample-interval", type=float, default=0.15)
    ap.add_argument("--work-dir", default=f"/tmp/calengine-bench/{name}")
    ap.add_argument("--results-dir", default=results_dir)
    ap.add_argument("--name", default=name, help="result page name (results/NAME.{md,json})")
