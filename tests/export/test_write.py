"""What ``calengine export`` replaces and what it leaves behind (issue 42 §4, §5).

``--overwrite`` replaced whatever the path was -- a character device became a regular file holding the
SQL -- while ``fit --overwrite`` and the MLflow export replace only their own output.  Now an export
replaces a file only when its manifest proves calengine's export wrote it (a regular file whose bytes
have the manifest's SHA-256), an MLflow directory only when its ``MLmodel`` carries the calengine
flavor; anything else is one line and stays as it was.  A write that fails (read-only or full disk:
tests/test_hostile_inputs.py's catalogue) is one line, and its clean-up never raises in its place.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cli_helpers import assert_one_line_error, run_cli


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("export-write")
    rng = np.random.default_rng(0)
    s = rng.random(400)
    pd.DataFrame({"s": s, "y": (rng.random(400) < s).astype(int)}).to_parquet(d / "t.parquet")
    r = run_cli("--quiet", "fit", d / "t.parquet", "--target", "y", "--scores", "s", "--method", "isotonic",
                "--output", d / "m")
    assert r.returncode == 0, r
    return d / "m"


def _export(model, out, fmt="sql", *extra):
    return run_cli("--quiet", "export", model, "--format", fmt, "--output", out, *extra)


def test_overwrite_replaces_calengines_own_exports(model, tmp_path):
    for fmt, again in (("sql", "sql"), ("onnx", "onnx"), ("sql", "onnx"), ("mlflow", "mlflow")):
        out = tmp_path / f"x-{fmt}-{again}"
        assert _export(model, out, fmt).returncode == 0
        r = _export(model, out, again, "--overwrite")
        assert r.returncode == 0, r
        manifest = json.loads(Path(f"{out}.manifest.json").read_text())
        assert manifest["format"] == again
        if again != "mlflow":
            import hashlib

            assert manifest["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert not [p.name for p in tmp_path.iterdir() if ".tmp" in p.name or ".old" in p.name]


def _char_device(path: Path) -> bool:
    try:
        os.mknod(path, 0o600 | 0o020000, os.makedev(1, 3))  # the null device's numbers
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES):
            return False
        raise
    return True


def test_overwrite_refuses_what_calengine_did_not_write(model, tmp_path):
    """A character device, a FIFO, a foreign file, a directory, a symbolic link, an export edited since,
    a foreign file where the manifest goes: each one line naming the path, and each left as it was."""
    cases = {}
    if _char_device(tmp_path / "device.sql"):
        cases["device.sql"] = "not a regular file"
    os.mkfifo(tmp_path / "fifo.sql")
    cases["fifo.sql"] = "not a regular file"
    (tmp_path / "foreign.sql").write_text("SELECT 'not ours'\n")
    cases["foreign.sql"] = "no export manifest"
    (tmp_path / "folder.sql").mkdir()
    (tmp_path / "folder.sql" / "keep").write_text("keep")
    cases["folder.sql"] = "is a directory"
    (tmp_path / "target.txt").write_text("outside")
    (tmp_path / "link.sql").symlink_to(tmp_path / "target.txt")
    cases["link.sql"] = "not a regular file"
    assert _export(model, tmp_path / "edited.sql").returncode == 0
    with open(tmp_path / "edited.sql", "a") as fh:
        fh.write("-- edited\n")
    cases["edited.sql"] = "changed since"
    (tmp_path / "lone.sql.manifest.json").write_text('{"not": "a manifest"}')
    cases["lone.sql"] = "not the manifest of a calengine export"
    (tmp_path / "folder-mlflow").mkdir()
    (tmp_path / "folder-mlflow" / "MLmodel").write_text("flavors:\n  sklearn: {}\n")
    cases["folder-mlflow"] = "not an MLflow model calengine exported"
    before = {p.name: (p.lstat().st_mode, p.read_bytes() if p.is_file() and not p.is_symlink() and p.name != "fifo.sql"
                       and not p.name.startswith("device") else None) for p in tmp_path.iterdir()}
    for name, says in cases.items():
        fmt = "mlflow" if "mlflow" in name else "sql"
        assert_one_line_error(_export(model, tmp_path / name, fmt, "--overwrite"), name, says)
    after = {p.name: (p.lstat().st_mode, p.read_bytes() if p.is_file() and not p.is_symlink() and p.name != "fifo.sql"
                      and not p.name.startswith("device") else None) for p in tmp_path.iterdir()}
    assert after == before
    assert (tmp_path / "target.txt").read_text() == "outside" and (tmp_path / "folder.sql" / "keep").exists()


def test_the_cleanup_after_a_failed_write_never_raises(model, tmp_path, monkeypatch):
    """In process, a disk that refuses every write and every unlink (what a read-only file system
    does): the export is one DataError naming the errno, not the clean-up's OSError."""
    from calengine.errors import DataError
    from calengine.export import write

    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(Path, "write_bytes", refuse)
    monkeypatch.setattr(Path, "unlink", refuse)
    for fmt in ("sql", "onnx"):
        with pytest.raises(DataError, match="Read-only file system"):
            write.export_model(model, fmt, tmp_path / f"x.{fmt}")
    assert not list(tmp_path.iterdir())
