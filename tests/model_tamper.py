"""Building damaged and malicious model directories, as an attacker with a text editor would.

``reseal`` recomputes every hash the manifest records (files table and content hash): an attacker can
do that too, so the checks behind the hashes must hold on their own.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from calengine.model.artifact import content_hash


def copy_model(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def load_manifest(model: Path) -> dict:
    return json.loads((model / "manifest.json").read_text())


def write_manifest(model: Path, manifest, seal: bool = True) -> None:
    """Write ``manifest`` (any JSON value), with a matching content hash when it is an object and ``seal``."""
    if seal and isinstance(manifest, dict):
        manifest["content_hash"] = content_hash(manifest)
    (model / "manifest.json").write_text(json.dumps(manifest))


def reseal(model: Path) -> None:
    """Record the current bytes of every regular file already listed or lying under members/."""
    manifest = load_manifest(model)
    files = manifest.get("files", {})
    for path in sorted((model / "members").rglob("*")):
        if path.is_file() and not path.is_symlink():
            blob = path.read_bytes()
            files[str(path.relative_to(model))] = {"sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob)}
    manifest["files"] = files
    write_manifest(model, manifest)


def tamper_tree(skops_file: Path, edit) -> None:
    """Load a skops-dumped estimator holding a decision tree, let ``edit(state)`` change the tree's
    ``__getstate__`` dict in place, and dump it back (skops accepts any contents of the right dtype)."""
    import skops.io as sio

    blob = skops_file.read_bytes()
    est = sio.loads(blob, trusted=sio.get_untrusted_types(data=blob))
    tree = est.tree_
    state = tree.__getstate__()
    state["nodes"] = state["nodes"].copy()
    edit(state)
    tree.__setstate__(state)
    skops_file.write_bytes(sio.dumps(est))
