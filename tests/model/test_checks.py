"""A catalogue of bad model directories: one case per way a model handed to calengine can be damaged
or malicious (issue 10, items 1, 2, 13 and 17).

Every case runs the real CLI in a fresh process and asserts: exit code 2, exactly one ``error:`` line
naming the problem, no output published and nothing left staged.  The malicious artifacts are built
here, from a real fitted model; most are *resealed* (hashes recomputed, as an attacker would) so that
the check behind the hash is what must catch them.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cli_helpers import PIMA, assert_one_line_error
from model_tamper import copy_model, load_manifest, reseal, tamper_tree, write_manifest

HERE = Path(__file__).resolve().parents[1]  # tests/


@pytest.fixture(scope="module")
def tree_model(tmp_path_factory, cli):
    out = tmp_path_factory.mktemp("hostile") / "tree"
    r = cli("fit", PIMA, "--target", "class", "--learner", "decision_tree", "--learner-param", "max_depth=4",
            "--method", "isotonic", "--cv", "2", "--seed", "0", "--output", out)
    assert r.returncode == 0, r
    return out


@pytest.fixture(scope="module")
def small_table(tmp_path_factory):
    path = tmp_path_factory.mktemp("hostile-data") / "pima100.parquet"
    pd.read_parquet(PIMA).iloc[:100].to_parquet(path)
    return path


def _member0(model: Path) -> Path:
    return model / "members" / "0"


def _edit(fn, seal: bool = True):
    """A case that edits the manifest dict with ``fn(manifest, outside)``."""

    def mutate(model: Path, outside: Path):
        manifest = load_manifest(model)
        fn(manifest, outside)
        write_manifest(model, manifest, seal=seal)

    return mutate


def _learner_state(m):
    return m["members"][0]["learners"][0]["state"]


def _set_arrays_name(name_of):
    def fn(m, outside):
        (outside / "x.npz").write_bytes(b"")
        _learner_state(m)["arrays"] = name_of(outside)

    return _edit(fn)


def _write_file(model: Path, name: str, blob: bytes) -> None:
    (_member0(model) / name).write_bytes(blob)
    reseal(model)


def _fake_entry(model: Path, rel: str) -> None:
    manifest = load_manifest(model)
    manifest["files"][rel] = {"sha256": "0" * 64, "bytes": 0}
    write_manifest(model, manifest)


# ------------------------------------------------------------------------------------------ paths (item 2)


def _symlink_to_dev_zero(model, outside):
    os.symlink("/dev/zero", _member0(model) / "zero.npz")
    manifest = load_manifest(model)
    _learner_state(manifest)["arrays"] = "zero.npz"
    manifest["files"]["members/0/zero.npz"] = {"sha256": "0" * 64, "bytes": 0}
    write_manifest(model, manifest)


def _symlink_file_out(model, outside):
    target = outside / "learner_0.npz"
    (_member0(model) / "learner_0.npz").rename(target)
    os.symlink(target, _member0(model) / "learner_0.npz")


def _symlink_member_dir_out(model, outside):
    target = outside / "member0"
    _member0(model).rename(target)
    os.symlink(target, _member0(model))


def _fifo(model, outside):
    path = _member0(model) / "learner_0.npz"
    path.unlink()
    os.mkfifo(path)


def _directory(model, outside):
    path = _member0(model) / "learner_0.npz"
    path.unlink()
    path.mkdir()


def _oversize(model, outside):
    os.truncate(_member0(model) / "learner_0.npz", 3 * 1024**3)  # sparse: no disk is used


def _manifest_symlink(model, outside):
    (model / "manifest.json").rename(outside / "manifest.json")
    os.symlink(outside / "manifest.json", model / "manifest.json")


def _manifest_oversize(model, outside):
    os.truncate(model / "manifest.json", 100 * 1024**2)


# ------------------------------------------------------------------------------------------ integrity (17)


def _truncate_npz(model, outside):
    path = _member0(model) / "learner_0.npz"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_skops_byte(model, outside):
    path = _member0(model) / "learner_0.estimator.skops"
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    path.write_bytes(bytes(blob))


def _unlist(m, outside):
    del m["files"]["members/0/learner_0.npz"]


def _missing_file(model, outside):
    (_member0(model) / "learner_0.npz").unlink()


# ------------------------------------------------------------------------------------------ damaged contents


def _npz_bytes(**arrays) -> bytes:
    import io

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _structured_raw(model, outside):
    arr = np.zeros(1, dtype=[("a", "<f8"), ("b", "<i8")])
    _write_file(model, "arrays.npz", _npz_bytes(raw_lo=arr, raw_hi=arr))


def _nan_raw(model, outside):
    _write_file(model, "arrays.npz", _npz_bytes(raw_lo=np.array([np.nan]), raw_hi=np.array([1.0])))


def _nan_calibrator(model, outside):
    import io

    with np.load(_member0(model) / "calibrator_0.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["values_"] = arrays["values_"].copy()
    arrays["values_"][0] = np.nan  # one entry: a probe on two rows need not reach it
    _write_file(model, "calibrator_0.npz", _npz_bytes(**arrays))


def _untrusted_skops(model, outside):
    import skops.io as sio
    from sklearn.neighbors import KNeighborsClassifier

    X = np.random.default_rng(0).random((20, 8))
    knn = KNeighborsClassifier(algorithm="kd_tree").fit(X, np.arange(20) % 2)
    _write_file(model, "learner_0.estimator.skops", sio.dumps(knn))


# ------------------------------------------------------------------------------------------ trees (item 1)


def _tree(edit):
    def mutate(model, outside):
        tamper_tree(_member0(model) / "learner_0.estimator.skops", edit)
        reseal(model)

    return mutate


def _first_internal_with_internal_child(nodes) -> int:
    left = nodes["left_child"]
    for i in range(len(nodes)):
        if left[i] != -1 and left[left[i]] != -1:
            return int(left[i])
    raise AssertionError("the fixture tree is too shallow")


def _child_out_of_range(state):
    state["nodes"]["left_child"][0] = 10**9
    state["nodes"]["right_child"][0] = 10**9


def _feature_out_of_range(state):
    state["nodes"]["feature"][0] = 10**6


def _negative_feature(state):
    state["nodes"]["feature"][0] = -5


def _cycle(state):
    i = _first_internal_with_internal_child(state["nodes"])
    state["nodes"]["left_child"][i] = 0  # back to the root


def _shared_node(state):
    state["nodes"]["right_child"][0] = state["nodes"]["left_child"][0]


def _one_child(state):
    state["nodes"]["right_child"][0] = -1


def _nan_threshold(state):
    state["nodes"]["threshold"][0] = np.nan


def _nan_values(state):
    state["values"] = state["values"].copy()
    state["values"][-1] = np.nan


# ------------------------------------------------------------------------------------------ manifests (13)


def _delete(*path):
    def fn(m, outside):
        node = m
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return fn


def _assign(value, *path):
    def fn(m, outside):
        node = m
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return fn


def _raw_manifest(text: str):
    def mutate(model, outside):
        (model / "manifest.json").write_text(text)

    return mutate


CASES = [
    # item 2: file names in the manifest
    ("path_dotdot", _set_arrays_name(lambda o: "../../outside/x.npz"), ["not a plain file name"]),
    ("path_absolute", _set_arrays_name(lambda o: str(o / "x.npz")), ["not a plain file name"]),
    ("path_dev_zero", _set_arrays_name(lambda o: "/dev/zero"), ["not a plain file name"]),
    ("path_hidden", _set_arrays_name(lambda o: ".x.npz"), ["not a plain file name"]),
    ("path_not_a_string", _set_arrays_name(lambda o: ["learner_0.npz"]), ["not a plain file name"]),
    ("symlink_to_dev_zero", _symlink_to_dev_zero, ["symbolic link"]),
    ("symlink_file_out", _symlink_file_out, ["symbolic link"]),
    ("symlink_member_dir_out", _symlink_member_dir_out, ["symbolic link"]),
    ("fifo", _fifo, ["not a regular file"]),
    ("directory", _directory, ["not a regular file"]),
    ("oversize_file", _oversize, ["more than"]),
    ("manifest_symlink", _manifest_symlink, ["symbolic link"]),
    ("manifest_oversize", _manifest_oversize, ["more than"]),
    # item 17: the hashes name truncated and modified files
    ("truncated_npz", _truncate_npz, ["learner_0.npz", "truncated or modified"]),
    ("modified_skops", _flip_skops_byte, ["learner_0.estimator.skops", "truncated or modified"]),
    ("manifest_edited_unsealed", _edit(_assign(7, "seed"), seal=False), ["modified after it was saved"]),
    ("file_not_listed", _edit(_unlist), ["not listed"]),
    ("file_missing", _missing_file, ["learner_0.npz", "missing"]),
    # damaged file contents, hashes resealed
    ("garbage_npz", lambda m, o: _write_file(m, "learner_0.npz", b"not a zip at all"), ["cannot read", "learner_0.npz"]),
    ("garbage_skops", lambda m, o: _write_file(m, "learner_0.estimator.skops", b"PK\x03\x04garbage"), ["cannot read"]),
    ("empty_skops", lambda m, o: _write_file(m, "learner_0.estimator.skops", b""), ["cannot read"]),
    ("structured_array", _structured_raw, ["dtype"]),
    ("nan_raw_range", _nan_raw, ["raw score ranges"]),
    ("nan_calibrator_value", _nan_calibrator, ["values_", "NaN or infinity"]),
    ("untrusted_type", _untrusted_skops, ["allowlist", "KDTree", "--trust-type"]),
    # item 1: tree node arrays that would crash scikit-learn's compiled code
    ("tree_child_out_of_range", _tree(_child_out_of_range), ["child indices out of range"]),
    ("tree_feature_out_of_range", _tree(_feature_out_of_range), ["feature index outside"]),
    ("tree_negative_feature", _tree(_negative_feature), ["feature index outside"]),
    ("tree_cycle", _tree(_cycle), ["decision tree"]),
    ("tree_shared_node", _tree(_shared_node), ["not a tree"]),
    ("tree_one_child", _tree(_one_child), ["one child"]),
    ("tree_nan_threshold", _tree(_nan_threshold), ["non-finite split threshold"]),
    ("tree_nan_values", _tree(_nan_values), ["non-finite node values"]),
    # item 13: malformed manifests (resealed)
    ("manifest_json_list", _raw_manifest("[]"), ["not a calengine model manifest"]),
    ("manifest_not_json", _raw_manifest("{"), ["not valid JSON"]),
    ("manifest_deeply_nested", _raw_manifest("[" * 200_000), ["not valid JSON"]),
    ("members_empty", _edit(_assign([], "members")), ["no members"]),
    ("members_not_a_list", _edit(_assign({"0": {}}, "members")), ["'members'", "not a list"]),
    ("wrong_class_count", _edit(_assign([0, 1, 2], "labels", "classes")), ["code matrix"]),
    ("one_class", _edit(_assign([0], "labels", "classes")), ["at least two"]),
    ("unknown_feature_kind", _edit(_assign("image", "features", "columns", 0, "kind")), ["unknown kind", "image"]),
    ("huge_hash_bits", _edit(_assign(60, "features", "text_hash_bits")), ["text_hash_bits"]),
    ("missing_labels", _edit(_delete("labels")), ["'labels' is missing"]),
    ("missing_learners", _edit(_delete("members", 0, "learners")), ["'learners' is missing"]),
    ("missing_files_table", _edit(_delete("files")), ["'files' is missing"]),
    ("missing_meta_key", _edit(_delete("members", 0, "meta", "columns")), ["does not describe a loadable model"]),
    ("unknown_member_kind", _edit(_assign("mystery", "members", 0, "kind")), ["unknown member kind"]),
    ("unknown_learner", _edit(_assign("nosuch", "members", 0, "learners", 0, "name")), ["nosuch", "not installed"]),
    ("calibrators_missing", _edit(_assign([], "members", 0, "calibrators")), ["calibrators"]),
    ("params_not_an_object", _edit(_assign([1], "members", 0, "learners", 0, "params")), ["'params'"]),
    ("member_groups_mismatch", _edit(_assign([0], "member_groups")), ["member_groups"]),
    ("incompatible_version", _edit(_assign("99.0", "format_version")), ["incompatible", "refit"]),
]


def _assert_nothing_published(tmp_path: Path, out: Path) -> None:
    assert not out.exists()
    assert not [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")], list(out.parent.iterdir())


#: cases that crash (tree contents) or hang (a FIFO) the process if their check regresses: these run in a
#: fresh process; the others run ``calengine.cli.main`` in this one, which is the same code path faster.
ISOLATED = {name for name, _, _ in CASES if name.startswith("tree_") or name == "fifo"}


class _InProcess:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    def __repr__(self) -> str:
        return f"_InProcess(rc={self.returncode}, stderr={self.stderr[-1500:]!r})"


def _score(isolated: bool, cli, capsys, *args):
    if isolated:
        return cli("score", *args)
    from calengine.cli import main

    capsys.readouterr()
    rc = main(["score", *map(str, args)])
    captured = capsys.readouterr()
    return _InProcess(rc, captured.out, captured.err)


@pytest.mark.parametrize("name, mutate, fragments", CASES, ids=[c[0] for c in CASES])
def test_bad_model_is_one_line_exit_2_and_nothing_published(
    name, mutate, fragments, tree_model, small_table, tmp_path, cli, capsys
):
    outside = tmp_path / "outside"
    outside.mkdir()
    model = copy_model(tree_model, tmp_path / "model")
    mutate(model, outside)
    out = tmp_path / "scored"
    assert_one_line_error(_score(name in ISOLATED, cli, capsys, model, small_table, "--output", out), *fragments)
    _assert_nothing_published(tmp_path, out)


def test_catalogue_has_one_case_per_name():
    names = [c[0] for c in CASES]
    assert len(names) == len(set(names)) >= 50


@pytest.mark.parametrize("mutate", [_tree(_child_out_of_range), _tree(_feature_out_of_range)])
def test_evaluate_refuses_a_malicious_tree_too(mutate, tree_model, small_table, tmp_path, cli):
    model = copy_model(tree_model, tmp_path / "model")
    mutate(model, tmp_path)
    report = tmp_path / "report"
    r = cli("evaluate", model, small_table, "--target", "class", "--report", report)
    assert_one_line_error(r, "decision tree")
    _assert_nothing_published(tmp_path, report)


def test_the_malicious_tree_really_crashes_scikit_learn(tree_model, tmp_path):
    """Without calengine's checks the tampered tree is a segfault: the catalogue case is not vacuous."""
    model = copy_model(tree_model, tmp_path / "model")
    path = _member0(model) / "learner_0.estimator.skops"
    tamper_tree(path, _child_out_of_range)
    code = (
        "import sys, numpy as np, skops.io as sio\n"
        "blob = open(sys.argv[1], 'rb').read()\n"
        "est = sio.loads(blob, trusted=sio.get_untrusted_types(data=blob))\n"
        "est.predict_proba(np.zeros((2, est.n_features_in_)))\n"
    )
    proc = subprocess.run([sys.executable, "-P", "-c", code, str(path)], capture_output=True, timeout=120)
    assert proc.returncode < 0 or proc.returncode == 139, proc


def test_trust_type_loads_what_the_allowlist_refuses(small_table, tmp_path, cli):
    """A kNN by import path keeps a KDTree, outside the allowlist: refused in one line naming the
    types, and scored once the user trusts each type explicitly."""
    model = tmp_path / "knn"
    r = cli("fit", PIMA, "--target", "class", "--learner", "sklearn.neighbors.KNeighborsClassifier",
            "--learner-param", "algorithm=kd_tree", "--method", "sigmoid", "--cv", "2", "--output", model)
    assert r.returncode == 0, r
    refused = cli("score", model, small_table, "--output", tmp_path / "s1")
    assert_one_line_error(refused, "allowlist", "sklearn.neighbors._kd_tree.KDTree", "--trust-type")
    _assert_nothing_published(tmp_path, tmp_path / "s1")
    r = cli("score", model, small_table, "--output", tmp_path / "s2",
            "--trust-type", "sklearn.neighbors._kd_tree.KDTree",
            "--trust-type", "sklearn.metrics._dist_metrics.EuclideanDistance64")
    assert r.returncode == 0, r
    assert len(pd.read_parquet(tmp_path / "s2")) == 100


def test_pickled_object_array_is_refused_and_never_unpickled(tree_model, small_table, tmp_path, cli):
    """Fails if the loader's allow_pickle=False is ever turned on: the array's unpickling would create
    a file, and loading must refuse it without creating that file."""
    marker = tmp_path / "pwned"
    payload = np.array([_Touch(str(marker))], dtype=object)
    model = copy_model(tree_model, tmp_path / "model")
    _write_file(model, "learner_0.npz", _npz_bytes(leaf_counts=payload))
    assert_one_line_error(cli("score", model, small_table, "--output", tmp_path / "s"), "cannot read", "Object arrays")
    assert not marker.exists()
    # and the payload is live: unpickling it does create the file
    with np.load(_member0(model) / "learner_0.npz", allow_pickle=True) as npz:
        npz["leaf_counts"]
    assert marker.exists()


class _Touch:
    """Unpickles into a call of ``open(path, 'w')``: the stand-in for ``os.system``."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_hashes_cover_every_file_and_the_manifest(tree_model):
    from calengine.model.artifact import content_hash

    manifest = load_manifest(tree_model)
    on_disk = {str(p.relative_to(tree_model)) for p in tree_model.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    for rel, entry in manifest["files"].items():
        blob = (tree_model / rel).read_bytes()
        assert entry == {"sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob)}
    assert manifest["content_hash"] == content_hash(manifest)
    assert "created" not in manifest
    assert set(manifest["dependencies"]) == {"scikit-learn", "numpy", "scipy", "skops"}


# ------------------------------------------------------------------------------------------ the tree walker


def _tampered_copy(est, edit):
    """A deep copy of ``est`` with ``edit`` applied to it (scikit-learn objects copy their arrays)."""
    import copy

    twin = copy.deepcopy(est)
    edit(twin)
    return twin


def _forest_tree_child(forest):
    tree = forest.estimators_[1].tree_
    state = tree.__getstate__()
    state["nodes"] = state["nodes"].copy()
    state["nodes"]["right_child"][0] = 10**9
    tree.__setstate__(state)


def _hist_left(model):
    model._predictors[2][0].nodes["left"][0] = 10**6


def _hist_feature(model):
    model._predictors[0][0].nodes["feature_idx"][0] = 99


def _hist_categorical(model):
    model._predictors[0][0].nodes["is_categorical"][0] = 1


@pytest.mark.parametrize(
    "build, edit, fragment",
    [
        ("forest", _forest_tree_child, "child indices out of range"),
        ("hist", _hist_left, "child indices out of range"),
        ("hist", _hist_feature, "feature index out of range"),
        ("hist", _hist_categorical, "categorical"),
    ],
)
def test_trees_nested_in_ensembles_are_validated(build, edit, fragment):
    """Trees inside a random forest's estimators_ list and histogram boosting's predictors are found
    and checked; the untampered estimators pass."""
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from calengine.model.checks import check_estimator
    from calengine.errors import ModelFormatError

    X = np.random.default_rng(0).random((300, 4))
    y = (X[:, 0] + X[:, 1] > 1).astype(int)
    est = (RandomForestClassifier(n_estimators=3, random_state=0) if build == "forest"
           else HistGradientBoostingClassifier(max_iter=5, random_state=0)).fit(X, y)
    check_estimator(make_pipeline(StandardScaler(), est), "the clean model")
    with pytest.raises(ModelFormatError, match=fragment):
        check_estimator(make_pipeline(StandardScaler(), _tampered_copy(est, edit)), "the tampered model")
