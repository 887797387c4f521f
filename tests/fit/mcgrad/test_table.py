"""``calengine fit --method mcgrad --by ...`` (calengine.fit.mcgrad.table, calengine.model.mcgrad_member):
the stored boosters score exactly as the fitted model, are hashed and checked before XGBoost reads
them, and the command removes planted segment miscalibration that global isotonic leaves.

The rounds themselves are tested against an independent xgboost + scipy loop in tests/methods/test_mcgrad.py;
here the oracle of the CLI test is ``evaluate --by``'s worst-segment ECCE on fresh rows, beside a global
isotonic fit of the same score column.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from calengine.errors import ModelFormatError, ParameterError
from cli_helpers import assert_one_line_error, run_cli

pytest.importorskip("xgboost.dask")

QUICK = {"rounds": 2, "early_stopping": False, "trees": 5, "learning_rate": 0.3}


def _planted(n: int, seed: int) -> pd.DataFrame:
    """A score ``s`` (and a feature ``x1`` near its logit) whose true logit is off by a planted amount
    per value of ``A`` and of ``B``; a few rows miss ``A``."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 4, n), rng.integers(0, 3, n)
    base = rng.normal(-1.0, 1.5, n)
    true = base + np.array([0.0, 0.8, -0.7, 0.4])[a] + np.array([0.0, -0.5, 0.6])[b]
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-true))).astype(np.int64)
    A = np.array([f"a{v}" for v in a], dtype=object)
    A[rng.random(n) < 0.02] = None
    return pd.DataFrame({"s": 1.0 / (1.0 + np.exp(-base)), "x1": base + rng.normal(0, 0.3, n), "A": A,
                         "B": [f"b{v}" for v in b], "y": y})


def _write(df, path, row_group=1000):
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path, row_group_size=row_group)
    return path


def test_saved_model_scores_bit_for_bit_and_its_boosters_are_checked(tmp_path):
    """A learner's held-out probabilities (gaussian_nb, two folds, fragments of 1,000 rows on one
    worker): the fold members share one set of rounds fitted on their held-out rows pooled; the saved model's predict_frame equals the fitted
    one's bit for bit; the boosters are native XGBoost JSON files in the files table; a booster whose
    feature count does not match the segments is refused before XGBoost parses it; a changed file is
    refused by its hash; a row's probability does not depend on the rows scored with it."""
    from calengine.runtime.client import dask_client
    from calengine.fit.table import TableSpec, fit_table
    from calengine.fit.training import FitConfig
    from calengine.model.artifact import load_model, save_model
    from calengine.model.mcgrad_member import MCGradMember

    df = _planted(2000, 0)
    path = _write(df, tmp_path / "t.parquet")
    spec = TableSpec(str(path), "y", features=["x1"], fragment_rows=1000, by="A,B")
    with dask_client(workers=1) as client:
        model = fit_table(client, spec, FitConfig(learner="gaussian_nb", method="mcgrad", cv=2, method_params=QUICK))
    assert [type(m).__name__ for m in model.members] == ["MCGradMember"] * 2
    assert [len(m.boosters) for m in model.members] == [2, 2]
    # one set of rounds, fitted on both members' held-out rows pooled, shared by the members
    assert model.members[0].boosters == model.members[1].boosters and model.members[0].alphas == model.members[1].alphas
    assert model.info["x_mcgrad"]["pooled"] is True
    save_model(model, tmp_path / "m")
    from calengine.boosters import guard as booster_guard

    loaded = load_model(tmp_path / "m")
    # the loading process probed every round's booster in a child first, as every booster file is
    rounds = [hashlib.sha256(b).hexdigest() for m in loaded.members for b in m.boosters]
    assert len(rounds) == 4 and all(booster_guard._verdicts.get(h, "unprobed") is None for h in rounds)
    got, want = loaded.predict_frame(df), model.predict_frame(df)
    assert np.array_equal(got.to_numpy(), want.to_numpy())
    sub = df.iloc[::7].reset_index(drop=True)
    assert np.array_equal(loaded.predict_frame(sub)["p_1"].to_numpy(), got["p_1"].to_numpy()[::7])
    # rounds moved the probabilities away from the uncalibrated base
    base = np.mean([m.base.column_probabilities(m.base.scores(df[["x1"]].to_numpy()))[:, 0] for m in model.members], axis=0)
    assert np.abs(got["p_1"].to_numpy() - base).max() > 0.05
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["members"][0]["kind"] == "mcgrad" and manifest["method"]["name"] == "mcgrad"
    name = "members/0/mcgrad_round_0.json"
    assert name in manifest["files"]
    doc = json.loads((tmp_path / "m" / name).read_text())
    assert doc["learner"]["learner_model_param"]["num_feature"] == str(model.members[0].width + 1)
    # the segment features are one categorical column per --by column (A, B), not one per value
    assert model.members[0].width == 2 and doc["learner"]["feature_types"] == ["c", "c", "q"]
    parts = model.members[0].parts()

    def from_parts(doc):
        files = {**parts["files"], "mcgrad_round_0.json": json.dumps(doc).encode()}
        return MCGradMember.from_parts(parts["learners"], parts["calibrators"], parts["arrays"], parts["meta"],
                                       files=files)

    # a categorical split on a category past the column's values (XGBoost would size a bitset by it),
    # or on the numeric logit: refused by booster_checks before XGBoost parses the file
    trees = doc["learner"]["gradient_booster"]["model"]["trees"]
    t = next(i for i, tree in enumerate(trees) if tree["categories_nodes"])
    for change, words in (({"categories": [2**30] * len(trees[t]["categories"])}, "outside its feature's categories"),
                          ({"categories_sizes": [0] * len(trees[t]["categories_sizes"])}, "outside its category table")):
        bad = json.loads(json.dumps(doc))
        bad["learner"]["gradient_booster"]["model"]["trees"][t].update(change)
        with pytest.raises(ModelFormatError, match=words):
            from_parts(bad)
    bad = json.loads(json.dumps(doc))
    node = trees[t]["categories_nodes"][0]
    bad["learner"]["gradient_booster"]["model"]["trees"][t]["split_indices"][node] = 2
    with pytest.raises(ModelFormatError, match="categorical split on a numeric feature"):
        from_parts(bad)
    # a booster of another width, handed to the member: refused by booster_checks before XGBoost
    doc["learner"]["learner_model_param"]["num_feature"] = "7"
    with pytest.raises(ModelFormatError, match="XGBoost"):
        from_parts(doc)
    (tmp_path / "m" / name).write_text(json.dumps(doc))
    with pytest.raises(ModelFormatError):
        load_model(tmp_path / "m")


def test_lightgbm_rounds_are_deterministic_saved_bit_for_bit_and_checked(tmp_path):
    """``--method-param booster=lightgbm``: the rounds train through ``lightgbm_dask``; two fits with the
    same seed write the same booster files byte for byte; the saved model (LightGBM text files
    ``mcgrad_round_<r>.txt``) scores as the fitted one bit for bit; a categorical split whose bitset is
    wider than its feature's categories, whose cat_boundaries do not cut cat_threshold, or that splits
    the numeric logit is refused by booster_checks before LightGBM parses the file."""
    pytest.importorskip("lightgbm.dask")
    from calengine.runtime.client import dask_client
    from calengine.fit.table import TableSpec, fit_table
    from calengine.fit.training import FitConfig
    from calengine.model.artifact import load_model, save_model
    from calengine.model.mcgrad_member import MCGradMember

    df = _planted(2000, 0)
    path = _write(df, tmp_path / "t.parquet")
    spec = TableSpec(str(path), "y", scores=("s",), fragment_rows=1000, by="A,B")
    config = FitConfig(method="mcgrad", method_params={**QUICK, "booster": "lightgbm"}, seed=3)
    with dask_client(workers=1) as client:
        model, again = (fit_table(client, spec, config) for _ in range(2))
    member = model.members[0]
    assert member.library == "lightgbm" and len(member.boosters) == 2
    assert member.boosters == again.members[0].boosters and member.alphas == again.members[0].alphas
    assert model.info["x_mcgrad"]["booster_learner"] == "lightgbm_dask"
    save_model(model, tmp_path / "m")
    assert (tmp_path / "m" / "members" / "0" / "mcgrad_round_1.txt").exists()
    loaded = load_model(tmp_path / "m")
    assert np.array_equal(loaded.predict_frame(df).to_numpy(), model.predict_frame(df).to_numpy())
    parts = member.parts()
    text = parts["files"]["mcgrad_round_0.txt"].decode()
    assert "num_cat=" in text and "cat_threshold=" in text

    def refused(old, new, words):
        assert old in text, old
        files = {**parts["files"], "mcgrad_round_0.txt": text.replace(old, new, 1).encode()}
        with pytest.raises(ModelFormatError, match=words):
            MCGradMember.from_parts(parts["learners"], parts["calibrators"], parts["arrays"], parts["meta"], files=files)

    block = text[text.index("Tree=") : text.index("\n\n", text.index("cat_threshold="))]
    bounds = next(line for line in block.splitlines() if line.startswith("cat_boundaries="))
    refused(bounds, "cat_boundaries=0 " + " ".join(["2"] * (len(bounds.split()) - 1)), "cat_boundaries|categories")
    thresholds = next(line for line in block.splitlines() if line.startswith("cat_threshold="))
    refused(thresholds, thresholds + " 1 1", "cat_boundaries do not cut")
    features = next(line for line in block.splitlines() if line.startswith("split_feature="))
    refused(features, "split_feature=" + " ".join(["2"] * (len(features.split()) - 0)), "numeric feature|feature index")


def test_cli_fit_score_evaluate_by_beats_global_isotonic(tmp_path):
    """fit --scores s --by A,B --method mcgrad on 4,000 planted rows (one round of 40 trees), then score
    and evaluate --by on 4,000 fresh rows: the worst segment's ECCE falls from ~11 sigma under global
    isotonic (scikit-learn's, fitted on the same rows, measured by the same segment metric) to below 4
    (measured 10.8 -> 3.1), and the log loss falls with it (0.549 -> 0.508)."""
    from sklearn.isotonic import IsotonicRegression

    from calengine.metrics.segments import SegmentAccumulator

    tr, te = _planted(4000, 1), _planted(4000, 2)
    train, test = _write(tr, tmp_path / "train.parquet"), _write(te, tmp_path / "test.parquet")
    params = [a for k, v in {"rounds": 1, "early_stopping": "false", "trees": 40, "learning_rate": 0.3}.items()
              for a in ("--method-param", f"{k}={v}")]
    r = run_cli("--quiet", "fit", train, "--target", "y", "--scores", "s", "--by", "A,B", "--method", "mcgrad", *params,
                "--workers", "1", "--output", tmp_path / "mc")
    assert r.returncode == 0, r
    assert "with mcgrad" in r.stderr and "MCGrad rounds kept 1" in r.stderr
    r = run_cli("--quiet", "score", tmp_path / "mc", test, "--output", tmp_path / "s.parquet", "--keep", "A")
    assert r.returncode == 0, r
    scored = pd.read_parquet(tmp_path / "s.parquet")
    assert len(scored) == 4000 and scored["p_1"].between(0, 1).all()
    r = run_cli("--quiet", "evaluate", tmp_path / "mc", test, "--target", "y", "--by", "A,B", "--json")
    assert r.returncode == 0, r
    mc = r.json()
    np.testing.assert_allclose(mc["segments"]["segments"][0]["log_loss"], mc["log_loss"], rtol=1e-9)
    iso = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(tr["s"], tr["y"]).predict(te["s"])
    iso = np.clip(iso, 1e-6, 1 - 1e-6)
    acc = SegmentAccumulator(("A", "B"), 2)
    acc.add({"A": te["A"].to_numpy(), "B": te["B"].to_numpy()}, te["y"].to_numpy(), np.column_stack([1 - iso, iso]))
    iso_worst = acc.result()["mce_sigma"]
    iso_loss = -np.mean(te["y"] * np.log(iso) + (1 - te["y"]) * np.log(1 - iso))
    assert iso_worst > 8, iso_worst
    assert mc["segments"]["mce_sigma"] < 4, mc["segments"]["mce_sigma"]
    assert mc["log_loss"] < iso_loss - 0.01, (mc["log_loss"], iso_loss)
    assert_one_line_error(run_cli("fit", train, "--target", "y", "--scores", "s", "--method", "mcgrad",
                                  "--output", tmp_path / "bad"), "--method mcgrad", "--by")
    assert_one_line_error(run_cli("cv", train, "--target", "y", "--scores", "s", "--method", "mcgrad"),
                          "calengine cv does not run --method mcgrad")


@pytest.mark.parametrize("change, words", [
    ({"by": None}, "name them with by"),
    ({"mode": "refit", "scores": None}, "mode='refit' keeps no fold members"),
    ({"method_params": {"nope": 1}}, "mcgrad has no parameter 'nope'"),
    ({"method_params": {"rounds": 0}}, "rounds must be an integer from 1 to 1000"),
    ({"combine": "mean", "scores": None}, "drop multiclass / combine"),
    ({"shrinkage": 5}, "drop shrinkage"),
    ({"score_kind": "logit"}, "reads probability scores"),
    ({"plugins": "without xgboost_dask"}, "pip install calengine-xgboost"),
])
def test_what_mcgrad_does_not_serve_is_one_line(change, words):
    """Checked before any data is read (calengine.fit.training.prepare_fit calls check_mcgrad)."""
    from dataclasses import fields, replace

    from calengine.fit.table import TableSpec
    from calengine.fit.training import FitConfig, prepare_fit
    from calengine.plugins import get_plugins

    change = dict(change)
    plugins = get_plugins()
    if change.pop("plugins", None):
        stripped = type(plugins)()
        stripped.classes = {k: {n: c for n, c in v.items() if n != "xgboost_dask"} for k, v in plugins.classes.items()}
        stripped.origins = plugins.origins
        plugins = stripped
    spec_keys = {f.name for f in fields(TableSpec)}
    spec = replace(TableSpec("unused.parquet", "y", scores=("s",), by="A"), **{k: v for k, v in change.items() if k in spec_keys})
    config = replace(FitConfig(method="mcgrad", method_params={}), **{k: v for k, v in change.items() if k not in spec_keys})
    with pytest.raises(ParameterError) as err:
        prepare_fit(config, spec, plugins)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_rounds_library_whose_plugin_is_missing_is_one_line():
    """``booster=lightgbm`` without calengine-lightgbm (a plugin table holding only xgboost_dask) is
    refused before any data is read, naming the package; so is xgboost's own absence."""
    from types import SimpleNamespace

    from calengine.fit.mcgrad.checks import check_mcgrad
    from calengine.fit.table import TableSpec
    from calengine.fit.training import FitConfig

    spec = TableSpec("t.parquet", "y", scores=("s",), by="A")
    only = SimpleNamespace(classes={"learners": {"xgboost_dask": object}})
    assert check_mcgrad(spec, FitConfig(method="mcgrad"), only)[0] == ("A",)
    with pytest.raises(ParameterError, match="'lightgbm_dask' learner, which is not installed: pip install calengine-lightgbm"):
        check_mcgrad(spec, FitConfig(method="mcgrad", method_params={"booster": "lightgbm"}), only)
    with pytest.raises(ParameterError, match="pip install calengine-xgboost"):
        check_mcgrad(spec, FitConfig(method="mcgrad"), SimpleNamespace(classes={"learners": {}}))


def test_fit_summary_says_the_folds_share_one_set_of_rounds(tmp_path):
    """With --cv, the members apply one set of rounds (fitted on their held-out rows pooled): the summary
    line says so once instead of listing one count per member, which read as if each fold had its own."""
    train = _write(_planted(2000, 3), tmp_path / "train.parquet")
    params = [a for k, v in {"rounds": 1, "early_stopping": "false", "trees": 5}.items() for a in ("--method-param", f"{k}={v}")]
    r = run_cli("--quiet", "fit", train, "--target", "y", "--features", "x1", "--learner", "gaussian_nb", "--cv", "2",
                "--by", "A,B", "--method", "mcgrad", *params, "--workers", "1", "--output", tmp_path / "mc")
    assert r.returncode == 0, r
    assert "MCGrad rounds kept 1 (shared by the 2 members)" in r.stderr, r.stderr


@pytest.mark.parametrize("booster", ["xgboost", "lightgbm"])
def test_mcgrad_fit_prints_its_summary_and_no_library_chatter(tmp_path, booster):
    """Issue 42: an MCGrad fit printed a stray "[hh:mm:ss] Task [xgboost.dask-0]:... got rank 0" line on
    stderr per round (XGBoost's C++ logger in the in-process workers' threads), and LightGBM's rounds
    "Finding random open ports for workers" on stdout.  Now stderr is the summary line alone and stdout
    is empty."""
    train = _write(_planted(2000, 3), tmp_path / "train.parquet")
    r = run_cli("--quiet", "fit", train, "--target", "y", "--scores", "s", "--by", "A,B", "--method", "mcgrad",
                "--method-param", "rounds=2", "--method-param", "early_stopping=false",
                "--method-param", f"booster={booster}", "--output", tmp_path / "mc")
    assert r.returncode == 0, r
    assert r.stdout == ""
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "with mcgrad" in lines[0], r.stderr
