#!/usr/bin/env python3
"""Print a pip constraints file pinning every runtime dependency of calengine and its plugins to the
lowest version their pyproject.toml files declare (``name>=X`` becomes ``name==X``).

CI's floors job installs with these constraints, so the floors we declare are the versions that are
tested: a floor that is wrong (too low to install, or to pass) fails CI until it is raised.  Test-only
extras are left to the resolver (they are not what users install)."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "pyproject.toml", *sorted((ROOT / "plugins").glob("*/pyproject.toml"))]


def floors() -> dict[str, str]:
    out: dict[str, str] = {}
    for path in FILES:
        for req in tomllib.loads(path.read_text())["project"].get("dependencies", []):
            m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*>=\s*([0-9][0-9A-Za-z.]*)\s*", req)
            if not m or m.group(1).lower() == "calengine":
                continue
            name, version = m.group(1).lower(), m.group(3)
            if name in out and out[name] != version:
                sys.exit(f"{path}: {name} has the floor {version} here and {out[name]} elsewhere; declare one floor")
            out[name] = version
    return out


if __name__ == "__main__":
    for name, version in sorted(floors().items()):
        print(f"{name}=={version}")
