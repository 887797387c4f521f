"""The gallery: each ``docs/gallery/*.py`` is run when the site is built and becomes a page showing its
code, what it printed and the figures it drew, cell by cell (as sphinx-gallery and mkdocs-gallery do).

A script is a module docstring (the page's title and introduction, in Markdown) followed by cells that
start at ``# %%`` lines; the comment lines right after a ``# %%`` are the cell's Markdown text.  The
script runs in a fresh process (this file, run as a program) in a scratch directory holding the
repository's ``data/``, so the figures on the page are what the code on the page made on the shipped
data.  A script that fails fails the build, with its traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GALLERY = REPO / "docs" / "gallery"
#: seconds one script may take (all four take about a minute together on a 2-core machine)
TIMEOUT = 600


def split_cells(source: str) -> tuple[str, list[tuple[str, str]]]:
    """(docstring, [(markdown text, code)]) of a gallery script."""
    m = re.match(r'\s*"""(.*?)"""\s*\n', source, re.S)
    if not m:
        raise ValueError("a gallery script starts with a docstring: its title and introduction")
    doc, rest = m[1].strip(), source[m.end():]
    cells = []
    for chunk in re.split(r"^# %%.*\n", rest, flags=re.M):
        if not chunk.strip():
            continue
        lines = chunk.splitlines()
        text = []
        while lines and lines[0].startswith("#"):
            line = lines.pop(0)
            text.append(line[2:] if line.startswith("# ") else line[1:])
        cells.append(("\n".join(text).strip(), "\n".join(lines).strip("\n")))
    return doc, cells


def run_script(path: Path, out: Path) -> None:
    """Run the cells of ``path`` in one namespace in this process (cwd: a scratch directory), saving
    each cell's printed text and new figures into ``out`` and ``out/cells.json``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, cells = split_cells(path.read_text(encoding="utf-8"))
    namespace = {"__name__": "__main__", "__file__": str(path)}
    record = []
    for i, (text, code) in enumerate(cells):
        printed = io.StringIO()
        started = time.perf_counter()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, f"{path.name} (cell {i + 1})", "exec"), namespace)
        figures = []
        for j, num in enumerate(plt.get_fignums()):
            name = f"{path.stem}_{i + 1}_{j + 1}.png"
            plt.figure(num).savefig(out / name, dpi=110, bbox_inches="tight")
            figures.append(name)
        plt.close("all")
        record.append({"text": text, "code": code, "printed": printed.getvalue(), "figures": figures,
                       "seconds": round(time.perf_counter() - started, 1)})
    (out / "cells.json").write_text(json.dumps(record), encoding="utf-8")


def page_markdown(path: Path, cells: list[dict]) -> str:
    doc, _ = split_cells(path.read_text(encoding="utf-8"))
    lines = [doc, "", f"*This page is `docs/gallery/{path.name}`, run when the site was built; every number and"
             " figure below is its output.*", ""]
    for cell in cells:
        if cell["text"]:
            lines += [cell["text"], ""]
        lines += ["```python", cell["code"], "```", ""]
        if cell["printed"].strip():
            lines += ["```text", cell["printed"].rstrip(), "```", ""]
        for fig in cell["figures"]:
            lines += [f"![{path.stem} figure]({fig}){{ .gallery-figure }}", ""]
    return "\n".join(lines)


def build(path: Path, out: Path) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="calengine-gallery-") as cwd:
        os.symlink(REPO / "data", Path(cwd) / "data")
        env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
        proc = subprocess.run([sys.executable, __file__, str(path), str(out)], cwd=cwd, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"gallery script docs/gallery/{path.name} failed:\n{proc.stdout[-6000:]}")
    return json.loads((out / "cells.json").read_text(encoding="utf-8"))


def on_files(files, config):  # mkdocs hook
    from mkdocs.structure.files import File

    with tempfile.TemporaryDirectory(prefix="calengine-gallery-out-") as tmp:
        for script in sorted(GALLERY.glob("*.py")):
            out = Path(tmp) / script.stem
            out.mkdir()
            cells = build(script, out)
            files.append(File.generated(config, f"gallery/{script.stem}.md", content=page_markdown(script, cells)))
            for cell in cells:
                for fig in cell["figures"]:
                    files.append(File.generated(config, f"gallery/{fig}", content=(out / fig).read_bytes()))
    return files


if __name__ == "__main__":
    run_script(Path(sys.argv[1]), Path(sys.argv[2]))
