"""Tampered XGBoost and LightGBM booster files (issue 24 §1): before calengine checked them in Python,
each of these made ``score`` die by SIGSEGV, abort, hang, or publish garbage with exit 0.

The CLI cases run ``calengine score`` in a fresh process on a model directory whose booster file was
edited and *resealed* (files table and content hash recomputed, as an attacker would): exit 2, one
``error:`` line, nothing published.  The validators themselves are exercised in this process on many
more edits (fast), and the valid models of both plugins must still load and score identically.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cli_helpers import assert_one_line_error
from model_tamper import copy_model, reseal

pytest.importorskip("calengine_xgboost")
pytest.importorskip("calengine_lightgbm")
xgboost = pytest.importorskip("xgboost")
lightgbm = pytest.importorskip("lightgbm")

from calengine.boosters.checks import parse_ubjson, validate_lightgbm, validate_xgboost  # noqa: E402
from calengine.errors import ModelFormatError  # noqa: E402

HERE = Path(__file__).resolve().parents[1]  # tests/
PIMA = HERE.parent / "data" / "pima.parquet"
N_FEATURES = 8  # pima's feature columns


@pytest.fixture(scope="module")
def small_table(tmp_path_factory):
    path = tmp_path_factory.mktemp("boost-data") / "pima60.parquet"
    pd.read_parquet(PIMA).iloc[:60].to_parquet(path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory, small_table):
    """A fitted xgboost and lightgbm model each (few small trees), and their scores of the small table."""
    out = {}
    for learner, params in (("xgboost", ["n_estimators=5", "max_depth=3"]), ("lightgbm", ["n_estimators=5", "num_leaves=6"])):
        path = tmp_path_factory.mktemp("boost") / learner
        args = ["fit", PIMA, "--target", "class", "--learner", learner, "--method", "sigmoid", "--cv", "2", "--seed", "0",
                "--output", path]
        for p in params:
            args += ["--learner-param", p]
        from calengine.cli import main

        assert main([str(a) for a in args]) == 0
        out[learner] = path
    return out


def _booster_file(model: Path) -> Path:
    (path,) = sorted((model / "members" / "0").glob("learner_0.booster.*"))
    return path


# ------------------------------------------------------------------------------------- XGBoost edits
# XGBoost files are UBJSON: edit through its JSON form and write JSON bytes back under the same name
# (XGBoost and the validator tell the two formats apart by their bytes).


def _xgb_doc(blob: bytes) -> dict:
    b = xgboost.Booster()
    b.load_model(bytearray(blob))
    return json.loads(bytes(b.save_raw("json")))


def _xgb_edit(edit):
    def run(blob: bytes) -> bytes:
        doc = _xgb_doc(blob)
        edit(doc["learner"]["gradient_booster"]["model"]["trees"][0])
        return json.dumps(doc).encode()

    return run


def _xgb_set(key, index, value):
    def edit(tree):
        tree[key][index] = value

    return _xgb_edit(edit)


def _xgb_cycle(tree):
    tree["left_children"][1] = 0  # node 1 (internal at depth 1) points back at the root


XGB_CASES = [
    ("feature_1e6", _xgb_set("split_indices", 0, 10**6), "feature index outside"),
    ("child_1e7", _xgb_set("left_children", 0, 10**7), "child index out of range"),
    ("child_cycle", _xgb_edit(_xgb_cycle), "not a tree"),
    ("negative_feature", _xgb_set("split_indices", 0, -3), "feature index outside"),
    ("nan_leaf", _xgb_edit(lambda t: t["split_conditions"].__setitem__(-1, float("nan"))), "non-finite"),
]


# ------------------------------------------------------------------------------------ LightGBM edits


def _lgb_set(key, index, value, tree=0):
    def run(blob: bytes) -> bytes:
        text = blob.decode()
        start = text.index(f"Tree={tree}\n")
        line = re.compile(rf"^{key}=(.*)$", re.M).search(text, start)
        parts = line.group(1).split(" ")
        parts[index] = str(value)
        return (text[:line.start(1)] + " ".join(parts) + text[line.end(1):]).encode()

    return run


LGB_CASES = [
    ("feature_1e6", _lgb_set("split_feature", 0, 10**6), "feature index outside"),
    ("child_cycle", _lgb_set("left_child", 1, 0), "not a tree"),
    ("negative_feature", _lgb_set("split_feature", 0, -1), "feature index outside"),
    ("leaf_out_of_range", _lgb_set("left_child", 0, -1000), "child index outside"),
    ("truncated", lambda b: b[: b.index(b"end of trees") * 2 // 3], "truncated"),
    ("nan_leaf", _lgb_set("leaf_value", 0, "nan"), "non-finite 'leaf_value'"),
]

CLI_CASES = [("xgboost", *c) for c in XGB_CASES] + [("lightgbm", *c) for c in LGB_CASES]


@pytest.mark.parametrize("learner, name, edit, fragment", CLI_CASES, ids=[f"{c[0]}-{c[1]}" for c in CLI_CASES])
def test_a_tampered_booster_is_one_line_exit_2_and_nothing_published(learner, name, edit, fragment, models,
                                                                      small_table, tmp_path, cli):
    model = copy_model(models[learner], tmp_path / "model")
    path = _booster_file(model)
    path.write_bytes(edit(path.read_bytes()))
    reseal(model)
    out = tmp_path / "scored"
    r = cli("score", model, small_table, "--output", out)
    assert_one_line_error(r, fragment)
    assert "[LightGBM]" not in r.stderr and "[Fatal]" not in r.stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".scored")]


# ------------------------------------------------------------------------------- in-process validators


def _blob(models, learner) -> bytes:
    return _booster_file(models[learner]).read_bytes()


@pytest.mark.parametrize("name, edit, fragment", XGB_CASES + [
    ("child_shared", _xgb_edit(lambda t: t["right_children"].__setitem__(0, t["left_children"][0])), "reached twice"),
    ("one_child", _xgb_set("right_children", 1, -1), "one child"),
    ("short_array", _xgb_edit(lambda t: t["split_indices"].pop()), "is not"),
    ("inf_condition", _xgb_set("split_conditions", 0, 1e400), "non-finite"),
    ("tree_info_class", _xgb_edit(lambda t: None), None),
], ids=[c[0] for c in XGB_CASES] + ["child_shared", "one_child", "short_array", "inf_condition", "untouched_json"])
def test_the_xgboost_validator_refuses_each_edit(name, edit, fragment, models):
    blob = edit(_blob(models, "xgboost"))
    if fragment is None:  # the JSON form of a sound model is as acceptable as its UBJSON
        assert validate_xgboost(blob, N_FEATURES, 2).n_features == N_FEATURES
        return
    with pytest.raises(ModelFormatError, match=re.escape(fragment)) as info:
        validate_xgboost(blob)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name, edit, fragment", LGB_CASES + [
    ("shared_leaf", _lgb_set("right_child", 0, -1), "reached twice"),
    ("short_threshold", _lgb_set("threshold", 0, ""), "values"),
    ("bad_number", _lgb_set("threshold", 0, "1e"), "is not"),
    ("categorical", _lgb_set("decision_type", 0, 1), "categorical"),
    ("cut_mid_tree", lambda b: b[: b.index(b"Tree=1")] + b"\nend of trees\n", "tree sizes"),
], ids=[c[0] for c in LGB_CASES] + ["shared_leaf", "short_threshold", "bad_number", "categorical", "cut_mid_tree"])
def test_the_lightgbm_validator_refuses_each_edit(name, edit, fragment, models):
    with pytest.raises(ModelFormatError, match=re.escape(fragment)) as info:
        validate_lightgbm(edit(_blob(models, "lightgbm")))
    assert "\n" not in str(info.value)


def test_validators_take_paths_and_check_the_callers_counts(models, tmp_path):
    xgb_path, lgb_path = _booster_file(models["xgboost"]), _booster_file(models["lightgbm"])
    assert validate_xgboost(xgb_path, N_FEATURES, 2).n_features == N_FEATURES
    assert validate_lightgbm(lgb_path, N_FEATURES, 2).n_classes == 2
    for fn, path in ((validate_xgboost, xgb_path), (validate_lightgbm, lgb_path)):
        with pytest.raises(ModelFormatError, match=f"fitted on {N_FEATURES} features and this model gives it 3"):
            fn(path, 3, 2)
        with pytest.raises(ModelFormatError, match="gives 2 classes and this model has 4"):
            fn(path, None, 4)
        with pytest.raises(ModelFormatError, match="not a regular file"):
            fn(tmp_path, None, None)


def test_the_ubjson_reader_agrees_with_xgboost_json(models):
    """The Python UBJSON reader is checked against XGBoost's own JSON rendering of the same model."""
    blob = _blob(models, "xgboost")
    mine = parse_ubjson(blob)
    theirs = _xgb_doc(blob)

    def same(a, b):
        if isinstance(b, dict):
            return isinstance(a, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in b)
        if isinstance(b, list) and b and isinstance(b[0], (dict, list, str)):
            return isinstance(a, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, np.ndarray) or isinstance(b, list):
            return np.allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=1e-6)
        return a == b or (isinstance(a, float) and np.isclose(a, b))

    assert same(mine, theirs)
    for cut in (1, len(blob) // 2, len(blob) - 1):
        with pytest.raises(ValueError):
            parse_ubjson(blob[:cut])


def test_sound_models_of_both_plugins_load_and_score_as_before(models, small_table, tmp_path, cli):
    """Validation and the child probe change nothing for a sound model: the scores of a fresh process
    equal the in-memory model's."""
    from calengine.model.artifact import load_model

    X = pd.read_parquet(small_table)
    for learner, path in models.items():
        r = cli("score", path, small_table, "--output", tmp_path / learner)
        assert r.returncode == 0, r
        scored = pd.read_parquet(tmp_path / learner)
        model = load_model(path)
        direct = model.predict_proba(X.drop(columns=["class"]))
        got = scored[[c for c in scored.columns if c.startswith("p_")]].to_numpy()
        np.testing.assert_array_equal(got, np.asarray(direct).reshape(got.shape))


# ------------------------------------------------------------------ the batched tree walk, against a plain one


def _reference_is_forest(left, right, sizes, live):
    """Each tree walked node by node from its root, the obvious way: the oracle of _check_forest."""
    start = 0
    for n, alive in zip(sizes, live):
        lt, rt = left[start:start + n], right[start:start + n]
        start += n
        if any((a == -1) != (b == -1) for a, b in zip(lt, rt)):
            return False
        if any(not 0 <= k < n for a, b in zip(lt, rt) if a != -1 for k in (a, b)):
            return False
        seen, stack = {0}, [0]
        while stack:
            node = stack.pop()
            if lt[node] == -1:
                continue
            for k in (lt[node], rt[node]):
                if k in seen:
                    return False
                seen.add(k)
                stack.append(k)
        if len(seen) != alive:
            return False
    return True


def _random_tree(rng, n_internal):
    """A random binary tree of 2*n_internal+1 nodes, numbered in a random order with the root at 0."""
    n = 2 * n_internal + 1
    order = np.concatenate([[0], rng.permutation(np.arange(1, n))])
    left, right = np.full(n, -1), np.full(n, -1)
    leaves, used = [0], 1
    for _ in range(n_internal):
        node = leaves.pop(rng.integers(len(leaves)))
        left[order[node]], right[order[node]] = order[used], order[used + 1]
        leaves += [used, used + 1]
        used += 2
    return left, right


def test_the_batched_tree_walk_agrees_with_a_plain_walk_on_random_forests():
    from calengine.boosters.checks import _check_forest

    rng = np.random.default_rng(24)
    verdicts = []
    for _ in range(400):
        trees = [_random_tree(rng, int(rng.integers(0, 6))) for _ in range(int(rng.integers(1, 5)))]
        left, right = np.concatenate([t[0] for t in trees]), np.concatenate([t[1] for t in trees])
        sizes = [t[0].size for t in trees]
        live = list(sizes)
        for _ in range(int(rng.integers(0, 3))):  # zero to two random edits
            what = rng.integers(4)
            i = int(rng.integers(left.size))
            if what == 0:
                (left if rng.random() < 0.5 else right)[i] = int(rng.integers(-2, max(sizes) + 2))
            elif what == 1:
                left[i], right[i] = right[i], left[i]
            elif what == 2:
                j = int(rng.integers(left.size))
                left[i], left[j] = left[j], left[i]
            else:
                live[int(rng.integers(len(live)))] -= 1
        expected = _reference_is_forest(left.tolist(), right.tolist(), sizes, live)
        try:
            _check_forest(left.astype(np.int64), right.astype(np.int64), sizes, live, "XGBoost")
            got = True
        except ModelFormatError as exc:
            assert "\n" not in str(exc) and "has tree " in str(exc)
            got = False
        assert got == expected, (left, right, sizes, live)
        verdicts.append(got)
    assert 50 < sum(verdicts) < 350  # both verdicts well represented


# ------------------------------------------------------------------ the native probes


def _probe_matrix():
    from calengine.boosters.native import probe_rows

    return probe_rows(N_FEATURES)


def test_the_native_probes_predict_what_the_python_packages_predict(models):
    """The probing child calls the libraries' C entry points itself (no Python package): on the probe
    rows (NaN row included) it must get exactly what Booster.inplace_predict / Booster.predict give."""
    from calengine.boosters.native import predict_lightgbm, predict_xgboost

    rows = _probe_matrix()
    X = np.asarray(rows, dtype=np.float64)
    booster = xgboost.Booster()
    booster.load_model(bytearray(_blob(models, "xgboost")))
    np.testing.assert_array_equal(np.asarray(predict_xgboost(_blob(models, "xgboost"), rows, N_FEATURES), dtype=np.float32),
                                  booster.inplace_predict(X).reshape(-1))
    text = _blob(models, "lightgbm")
    np.testing.assert_array_equal(predict_lightgbm(text, rows, N_FEATURES),
                                  lightgbm.Booster(model_str=text.decode()).predict(X).reshape(-1))


def test_the_probing_child_loads_only_the_native_library(models, tmp_path):
    """The probe imports neither the libraries' Python packages nor numpy (seconds per process), and
    refuses a booster whose outputs disagree with the class count in one line."""
    import subprocess
    import sys

    for learner in ("xgboost", "lightgbm"):
        (tmp_path / learner).write_bytes(_blob(models, learner))
    code = (
        "import sys\n"
        "from calengine.boosters.native import probe_lightgbm, probe_xgboost\n"
        f"x, l = open({str(tmp_path / 'xgboost')!r}, 'rb').read(), open({str(tmp_path / 'lightgbm')!r}, 'rb').read()\n"
        f"print(repr([probe_xgboost(x, {N_FEATURES}, 2), probe_lightgbm(l, {N_FEATURES}, 2)]))\n"
        f"print(repr([probe_xgboost(x, {N_FEATURES}, 3), probe_lightgbm(l, {N_FEATURES}, 3)]))\n"
        "print(sorted(m for m in ('numpy', 'xgboost', 'lightgbm', 'sklearn', 'scipy') if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    sound, wrong, imported = r.stdout.strip().splitlines()
    assert sound == "[None, None]"
    assert "XGBoost booster gives 9 outputs for 27 expected" in wrong
    assert "LightGBM booster gives 9 outputs for 27 expected" in wrong
    assert imported == "[]"


def test_a_plugin_whose_shared_library_is_elsewhere_is_probed_through_its_class(models, monkeypatch):
    """NativeLibraryMissing (a conda or source build keeps the library elsewhere): the child falls back
    to the plugin's own loader and score, with the same verdicts."""
    from calengine.boosters import guard as booster_guard, native as booster_native

    def missing(*a):
        raise booster_native.NativeLibraryMissing("xgboost")

    monkeypatch.setattr(booster_native, "find_library", missing)
    spec = {"module": "calengine_xgboost", "qualname": "XGBoost", "n_features": N_FEATURES, "n_classes": 2,
            "probe": "calengine.boosters.native:probe_xgboost"}
    assert booster_guard._probe_one(spec, _blob(models, "xgboost")) is None
    assert "cannot be read" in booster_guard._probe_one(spec, b'{"learner": {}}')


def test_an_idle_probing_child_is_reaped_when_it_leaves(models, monkeypatch):
    """Issue 42: the probing child exits after PROBE_IDLE seconds without work, and stayed a zombie
    until the next probe waited for it.  A thread of the parent waits for it now: once it has left,
    its process entry is gone.  (The child takes the idle time from its parent, so the test sets it short.)"""
    import calengine_xgboost

    from calengine.boosters import guard as booster_guard

    def state(pid: int) -> str | None:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return None

    monkeypatch.setattr(booster_guard, "PROBE_IDLE", 0.5)
    monkeypatch.setattr(booster_guard, "_server", booster_guard._ProbeServer())
    monkeypatch.setattr(booster_guard, "_verdicts", {})
    blob = _blob(models, "xgboost")
    assert booster_guard._run_child(calengine_xgboost.XGBoost, blob, N_FEATURES, 2) is None
    pid = booster_guard._server.proc.pid
    deadline = time.monotonic() + 45  # beyond the 20 s a child ignoring its parent's idle time would wait
    zombie_since = None
    while state(pid) is not None and time.monotonic() < deadline:
        if state(pid) == "Z":
            zombie_since = zombie_since or time.monotonic()
            assert time.monotonic() - zombie_since < 3, "the idle probing child is a zombie"
        time.sleep(0.1)
    assert state(pid) is None
    # the next probe starts a fresh child and gets the same verdict
    assert booster_guard._run_child(calengine_xgboost.XGBoost, blob, N_FEATURES, 2) is None
    assert booster_guard._server.proc.pid != pid
    booster_guard._server.stop()


def test_library_chatter_is_dropped_from_stderr_and_nothing_else_even_in_a_crash():
    """The CLI's filter of fd 2 while boosters train (XGBoost's "got rank" lines, printed by C++ from
    the in-process workers' threads, where no verbosity reaches): those lines go, every other byte
    comes through -- a progress line without its newline as it is written, and what a process writes
    just before it dies by SIGABRT (the filter is a process of its own)."""
    import subprocess
    import sys

    code = (
        "import os, sys, time\n"
        "from calengine.boosters import guard as booster_guard\n"
        "booster_guard.FILTER_CHATTER = True\n"
        "with booster_guard.library_chatter_dropped():\n"
        "    os.write(2, b'[13:46:14] Task [xgboost.dask-0]:inproc://192.0.2.2/1/4 got rank 0\\n')\n"
        "    os.write(2, b'\\rprogress 10%')\n"
        "    time.sleep(0.5)\n"
        "    os.write(2, b'\\rprogress 20%\\n[13:46:15] Task [xgboost.dask-1]:tcp://127.0.0.1:5 got rank 12\\n')\n"
        "    sys.stderr.write('a real warning [xgboost.dask-0] got rank 0\\n')\n"
        "os.write(2, b'after\\n')\n"
        "with booster_guard.library_chatter_dropped():\n"
        "    os.write(2, b'[13:46:16] Task [xgboost.dask-0]:a got rank 3\\nlast words\\n')\n"
        "    os.abort()\n"
    )
    r = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, timeout=120)
    assert r.returncode != 0
    assert r.stderr == (b"\rprogress 10%\rprogress 20%\na real warning [xgboost.dask-0] got rank 0\nafter\nlast words\n")
    off = subprocess.run([sys.executable, "-P", "-c", code.replace("= True", "= False").replace("os.abort()", "pass")],
                         capture_output=True, timeout=120)
    assert off.stderr.count(b"got rank") == 4  # the Python API leaves stderr alone
