"""Every code block of docs/guide/conformal.md runs, in document order, in one directory holding a copy of the
repository's data, with the installed ``calengine`` first on ``PATH`` (as a reader following the page
would run them); and the page names every flag of ``calengine conformal``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "guide" / "conformal.md"


def _blocks() -> list[tuple[str, str]]:
    out, lang, lines = [], None, []
    for line in PAGE.read_text().splitlines():
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence and lang is None:
            lang, lines = fence.group(1), []
        elif fence:
            out.append((lang, "\n".join(lines)))
            lang = None
        elif lang is not None:
            lines.append(line)
    return out


@pytest.mark.slow
def test_the_pages_blocks_run(tmp_path):
    shutil.copytree(REPO / "data", tmp_path / "data")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    blocks = [(lang, code) for lang, code in _blocks() if lang in ("bash", "python")]
    assert len(blocks) >= 3
    for lang, code in blocks:
        cmd = ["bash", "-e", "-c", code] if lang == "bash" else [sys.executable, "-P", "-c", code]
        r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, (code, r.stdout[-2000:], r.stderr[-2000:])
        if lang == "python" and "coverage" in code:
            assert re.search(r"coverage 0\.(8[5-9]|9\d)", r.stdout), r.stdout
    assert (tmp_path / "digits_sets" / "conformal.npz").is_file()


def test_the_page_names_every_flag():
    from calengine.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    flags = {o for a in sub.choices["conformal"]._actions for o in a.option_strings if o.startswith("--")}
    text = PAGE.read_text()
    common = {"--help", "--version", "--strict-plugins", "--io-timeout", "--progress", "--quiet", "--json-log",
              "--tls-ca-file", "--tls-cert", "--tls-key"}
    missing = sorted(f for f in flags - common if f not in text)
    assert not missing, missing
