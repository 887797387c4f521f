"""Compact model storage (issue 12, target 6): sparse and deflated ``.npz`` members, and learners
stored as arrays instead of skops dumps, restored to the same bits; old skops-state models still load.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from calengine.base import SklearnLearner
from calengine.errors import ModelFormatError
from calengine.model.files import DEFLATE_MIN_BYTES, SPARSE_SUFFIXES, load_npz, npz_bytes
from calengine_builtins import learners as L

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------- npz files


@st.composite
def _arrays(draw):
    dtype = draw(st.sampled_from([np.float64, np.float32, np.int64, np.int32, np.uint8, np.bool_]))
    shape = tuple(draw(st.lists(st.integers(0, 40), min_size=0, max_size=3)))
    size = int(np.prod(shape)) if shape else 1
    density = draw(st.sampled_from([0.0, 0.01, 0.2, 0.5, 1.0]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    values = rng.normal(scale=50, size=size) * (rng.random(size) < density)
    return values.astype(dtype).reshape(shape)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), _arrays(), max_size=4))
def test_npz_round_trip_is_exact_whatever_the_density(arrays):
    out = load_npz(npz_bytes(arrays), "test.npz")
    assert sorted(out) == sorted(arrays)
    for key, arr in arrays.items():
        assert out[key].dtype == arr.dtype and out[key].shape == arr.shape
        assert np.array_equal(out[key], arr)
    assert npz_bytes(arrays) == npz_bytes({k: arrays[k].copy() for k in reversed(list(arrays))})


def _members(blob: bytes) -> dict[str, zipfile.ZipInfo]:
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        return {i.filename: i for i in zf.infolist()}


def test_mostly_zero_arrays_are_stored_sparse_and_large_members_deflated():
    counts = np.zeros((20, 2**16))
    counts[:, ::50] = np.arange(1, 20 * 1311 + 1).reshape(20, 1311) % 7 + 1
    dense = np.random.default_rng(0).normal(size=(100, 100))
    blob = npz_bytes({"counts": counts, "dense": dense, "small": np.zeros(10)})
    members = _members(blob)
    assert "counts.npy" not in members and {f"counts{s}.npy" for s in SPARSE_SUFFIXES} <= set(members)
    assert members["dense.npy"].compress_type == zipfile.ZIP_DEFLATED  # 80 kB >= DEFLATE_MIN_BYTES
    assert members["small.npy"].compress_type == zipfile.ZIP_STORED
    assert 100 * 100 * 8 >= DEFLATE_MIN_BYTES
    assert len(blob) < counts.nbytes / 20
    out = load_npz(blob, "x.npz")
    assert np.array_equal(out["counts"], counts) and np.array_equal(out["dense"], dense)


def _tampered(parts: dict[str, np.ndarray]) -> bytes:
    """An npz with the given members written verbatim (bypassing npz_bytes' sparse encoding)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for key, arr in parts.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asarray(arr), allow_pickle=False)
            zf.writestr(f"{key}.npy", member.getvalue())
    return buf.getvalue()


def _sparse(index, value, shape) -> dict[str, np.ndarray]:
    return {f"a{SPARSE_SUFFIXES[0]}": np.asarray(index), f"a{SPARSE_SUFFIXES[1]}": np.asarray(value),
            f"a{SPARSE_SUFFIXES[2]}": np.asarray(shape, dtype=np.int64)}


@pytest.mark.parametrize(
    "parts, fragment",
    [
        (_sparse([0, 5, 10], [1.0, 2.0, 3.0], [10]), "out of range"),
        (_sparse([-1, 5], [1.0, 2.0], [10]), "out of range"),
        (_sparse([5, 3], [1.0, 2.0], [10]), "out of order"),
        (_sparse([3, 3], [1.0, 2.0], [10]), "out of order"),
        (_sparse([1, 2], [1.0], [10]), "do not match"),
        (_sparse([1, 2], [1.0, 2.0], [2**40, 2**20]), "would expand"),
        (_sparse([1], [1.0], [-3]), "no valid shape"),
        (_sparse([1], ["x"], [4]), "dtype"),
        ({f"a{SPARSE_SUFFIXES[0]}": np.array([1]), f"a{SPARSE_SUFFIXES[2]}": np.array([4])}, "misses"),
        ({f"a{SPARSE_SUFFIXES[1]}": np.array([1.0])}, "other parts are missing"),
    ],
)
def test_a_tampered_sparse_array_is_one_model_format_error(parts, fragment):
    with pytest.raises(ModelFormatError, match=fragment) as info:
        load_npz(_tampered(parts), "m/learner_0.npz")
    assert "\n" not in str(info.value) and "m/learner_0.npz" in str(info.value)


def test_a_state_key_with_a_reserved_suffix_is_refused():
    with pytest.raises(ModelFormatError, match="reserves"):
        npz_bytes({f"x{SPARSE_SUFFIXES[1]}": np.zeros(3)})


# ------------------------------------------------------------------------------------ learners as arrays

_rng = np.random.default_rng(0)
_X = _rng.normal(size=(400, 6))
_y2 = (_X[:, 0] + _rng.normal(size=400) > 0).astype(int)
_y3 = _rng.integers(0, 3, 400)
_Xs = sp.random(400, 3000, density=0.01, format="csr", random_state=0)

CASES = [
    ("gaussian_nb", L.GaussianNBLearner(), _X, _y2),
    ("gaussian_nb 3 classes", L.GaussianNBLearner(), _X, _y3),
    ("bayes_diagonal", L.BayesDiagonalLearner(), _X, _y3),
    ("multinomial_nb dense", L.MultinomialNBLearner(), _X, _y3),
    ("multinomial_nb sparse", L.MultinomialNBLearner(alpha=0.5), _Xs, _y2),
    ("bernoulli_nb", L.BernoulliNBLearner(), _X, _y2),
    ("bernoulli_nb raw", L.BernoulliNBLearner(standardize=False), _X, _y3),
    ("bernoulli_nb sparse", L.BernoulliNBLearner(), _Xs, _y2),
    ("logistic_regression", L.LogisticRegressionLearner(), _X, _y3),
    ("logistic_regression sparse", L.LogisticRegressionLearner(C=0.3), _Xs, _y2),
]


def _fitted_attributes(est) -> dict[str, object]:
    steps = dict(est.steps) if hasattr(est, "steps") else {"": est}
    return {f"{s}.{k}": v for s, step in steps.items() for k, v in vars(step).items()
            if k.endswith("_") and not k.startswith("_")}


@pytest.mark.parametrize("name, learner, X, y", CASES, ids=[c[0] for c in CASES])
def test_array_state_restores_every_fitted_attribute_bit_for_bit(name, learner, X, y):
    """Every attribute scikit-learn's fit set (stored or derived on load) comes back with the same
    dtype and bits, so the restored learner scores exactly as the fitted one."""
    learner.fit(X, y)
    state = learner.to_state()
    assert not any(hasattr(v, "get_params") for v in state.values()), "no estimator left for skops"
    restored = type(learner)(**learner.get_params()).from_state(state)
    want, got = _fitted_attributes(learner.estimator_), _fitted_attributes(restored.estimator_)
    assert sorted(want) == sorted(got)
    for key, value in want.items():
        if isinstance(value, np.ndarray):
            assert got[key].dtype == value.dtype and np.array_equal(got[key], value), key
        else:
            assert got[key] == value or (value is None and got[key] is None), key
    assert np.array_equal(restored.score(X), learner.score(X))


def test_array_state_refuses_a_state_that_does_not_fit_together():
    learner = L.MultinomialNBLearner().fit(_X, _y3)
    state = learner.to_state()
    bad = dict(state, nb__feature_count_=state["nb__feature_count_"][:, :3])
    with pytest.raises(ValueError, match="feature counts"):
        L.MultinomialNBLearner().from_state(bad)
    with pytest.raises(ValueError, match="missing"):
        L.GaussianNBLearner().from_state({k: v for k, v in L.GaussianNBLearner().fit(_X, _y2).to_state().items()
                                          if k != "theta_"})
    with pytest.raises(ValueError, match="classes"):
        L.GaussianNBLearner().from_state(dict(L.GaussianNBLearner().fit(_X, _y2).to_state(), n_classes=3))


# ------------------------------------------------------------------------------------ whole models


def _fit(tmp_path, data: str, *extra: str) -> Path:
    from calengine.cli import main

    out = tmp_path / "model"
    assert main(["fit", str(ROOT / "data" / data), "--target", "class", *extra, "--output", str(out), "--quiet"]) == 0
    return out


def _legacy_copy(model_dir: Path, out: Path) -> None:
    """The same model saved the way calengine saved it before array state (a skops file per learner)."""
    from calengine.model.artifact import load_model, save_model

    from calengine_builtins.learners._array_state import _ArrayState

    model = load_model(model_dir)
    saved = _ArrayState.to_state
    _ArrayState.to_state = SklearnLearner.to_state
    try:
        save_model(model, out)
    finally:
        _ArrayState.to_state = saved


def test_text_model_is_small_and_old_skops_models_still_load_to_the_same_predictions(tmp_path):
    import pandas as pd

    from calengine.model.artifact import load_model

    model_dir = _fit(tmp_path, "newsgroups_sample.parquet", "--text-column", "text", "--learner", "multinomial_nb")
    legacy = tmp_path / "legacy"
    _legacy_copy(model_dir, legacy)
    files = [p.name for p in model_dir.rglob("*") if p.is_file()]
    assert not any(f.endswith(".skops") for f in files)
    assert sum(1 for p in legacy.rglob("*.skops")) == 5
    size = sum(p.stat().st_size for p in model_dir.rglob("*") if p.is_file())
    legacy_size = sum(p.stat().st_size for p in legacy.rglob("*") if p.is_file())
    # 5 members x 3 classes x 2^18 hashed words: the skops dumps hold two dense (3, 2^18) float arrays each
    assert legacy_size > 50e6 and size < legacy_size / 50
    frame = pd.read_parquet(ROOT / "data" / "newsgroups_sample.parquet").drop(columns=["class"])
    assert np.array_equal(load_model(model_dir).predict_proba(frame), load_model(legacy).predict_proba(frame))


def test_gaussian_nb_all_pairs_model_holds_no_skops_file_and_predicts_as_before(tmp_path):
    import pandas as pd

    from calengine.model.artifact import load_model

    model_dir = _fit(tmp_path, "pendigits_train.parquet", "--learner", "gaussian_nb", "--multiclass",
                     "all_pairs:coupling", "--cv", "2")
    legacy = tmp_path / "legacy"
    _legacy_copy(model_dir, legacy)
    assert not list(model_dir.rglob("*.skops")) and len(list(legacy.rglob("*.skops"))) == 90
    frame = pd.read_parquet(ROOT / "data" / "pendigits_test.parquet").drop(columns=["class"]).head(300)
    assert np.array_equal(load_model(model_dir).predict_proba(frame), load_model(legacy).predict_proba(frame))


@pytest.mark.parametrize(
    "edit",
    [
        lambda a: a.update(theta_=a["theta_"][:, :2]),  # fewer features than the encoder gives
        lambda a: a.update(var_=-np.abs(a["var_"])),  # negative variances: NaN log densities
        lambda a: a.update(classes_=np.arange(5)),  # more classes than the model has
        lambda a: a.update(class_prior_=np.array([np.inf, 0.0])),
    ],
    ids=["theta_width", "negative_var", "classes", "inf_prior"],
)
def test_tampered_learner_arrays_are_refused_on_load(tmp_path, edit):
    """An attacker rewriting a gaussian_nb learner's arrays (and resealing the hashes) gets one
    ModelFormatError at load time, not a crash or wrong probabilities later."""
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from model_tamper import reseal

    from calengine.model.artifact import load_model

    model_dir = _fit(tmp_path, "pima.parquet", "--learner", "gaussian_nb", "--cv", "2")
    path = model_dir / "members" / "0" / "learner_0.npz"
    arrays = load_npz(path.read_bytes(), str(path))
    edit(arrays)
    path.write_bytes(npz_bytes(arrays))
    reseal(model_dir)
    with pytest.raises(ModelFormatError) as info:
        load_model(model_dir)
    assert "\n" not in str(info.value)
