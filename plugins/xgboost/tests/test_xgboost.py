"""Tests of the calengine-xgboost plugin, written as its third-party author would ship them.

Besides calengine's conformance checks they fit ``xgboost_dask`` on a partitioned Adult table across a
real LocalCluster (2 worker processes) and across real ``dask scheduler``/``dask worker`` processes,
score and evaluate with the CLI in new processes, check that models hold the booster in XGBoost's own
format (no pickle) with the library version checked on load, that the same seed gives the same booster,
and that a worker killed mid-training ends the fit with one line and no model directory.
"""

from __future__ import annotations

from pathlib import Path

import json
import types

import numpy as np
import pytest

calengine_xgboost = pytest.importorskip("calengine_xgboost")
xgboost = pytest.importorskip("xgboost")

import calengine.plugins  # noqa: E402
import calengine.plugins.loading  # noqa: E402
from calengine.model.artifact import load_model, save_model  # noqa: E402
from calengine.errors import ModelFormatError, ParameterError  # noqa: E402
from calengine.metrics.measures import evaluate_predictions  # noqa: E402
from calengine.fit.table import TableSpec, fit_table  # noqa: E402
from calengine.testing import check_learner, check_plugin_module, rewrite_manifest  # noqa: E402
from calengine.fit.training import FitConfig  # noqa: E402
from calengine.testing.cluster import (
    assert_one_line_error,
    run_cli,
    run_cli_killing_a_worker,
    split_parquet,
)  # noqa: E402

REPO = Path(__file__).resolve().parents[3]

SMALL = {"n_estimators": 20, "max_depth": 4}


def _fit(client, data, learner="xgboost_dask", **options):
    spec_fields = {"positive", "calibration_data", "max_train_rows", "route"}
    spec = TableSpec(data=str(data), target="class", **{k: v for k, v in options.items() if k in spec_fields})
    config = FitConfig(learner=learner, **{"learner_params": dict(SMALL), "cv": 3, **{
        k: v for k, v in options.items() if k not in spec_fields}})
    return fit_table(client, spec, config)


def _adult_test_frame(path):
    import pandas as pd

    df = pd.read_parquet(path)
    df["class"] = df["class"].str.rstrip(".")
    return df


def _boosters(model_dir):
    return sorted(model_dir.rglob("*.booster.ubj"))


# ---------------------------------------------------------------------------------------------- conformance


def test_learners_conform():
    check_learner(calengine_xgboost.XGBoost)
    check_learner(calengine_xgboost.XGBoostDask)


def test_plugin_module_conforms(monkeypatch):
    # alone, without the installed entry points (the installed copy of this plugin would clash by name)
    monkeypatch.setattr(calengine.plugins.loading, "metadata", types.SimpleNamespace(entry_points=lambda group=None: []))
    check_plugin_module(calengine_xgboost)


def test_entry_point_is_discoverable():
    plugins = calengine.plugins.load_plugins(strict=False)
    learners = plugins.classes["learners"]
    assert learners["xgboost"] is calengine_xgboost.XGBoost
    assert learners["xgboost_dask"] is calengine_xgboost.XGBoostDask
    assert learners["xgboost_dask"].trains_on_cluster and not learners["xgboost"].trains_on_cluster
    assert plugins.origin("learners", "xgboost_dask").distribution == "calengine-xgboost"


def test_bad_parameters_are_parameter_errors():
    from calengine.testing import make_data

    X, y = make_data()
    with pytest.raises(ParameterError, match="n_estimators"):
        calengine_xgboost.XGBoost(n_estimators=0).fit(X, y)
    with pytest.raises(ParameterError, match="subsample"):
        calengine_xgboost.XGBoost(subsample=1.5).fit(X, y)


def test_library_version_is_checked():
    check = calengine_xgboost.check_library_version
    check("3.1.0", "3.2.0")  # older writer, same major: loads
    with pytest.raises(ModelFormatError, match="xgboost 3.9.0"):
        check("3.9.0", "3.2.0")
    with pytest.raises(ModelFormatError, match="pip install"):
        check("2.1.0", "3.2.0")


# ---------------------------------------------------------------------------------------------- LocalCluster


@pytest.fixture(scope="module")
def fitted(local_client, adult_parts, tmp_path_factory):
    model = _fit(local_client, adult_parts, positive=">50K", method="isotonic")
    out = save_model(model, tmp_path_factory.mktemp("xgb") / "model")
    return model, out


def test_cluster_fit_trains_every_fold_on_the_cluster(fitted, adult_test):
    model, out = fitted
    assert model.info["x_training"]["route"] == "cluster"
    assert model.info["x_training"]["fragments"] == 4
    assert len(model.members) == 3  # one (booster, isotonic) pair per fold
    df = _adult_test_frame(adult_test)
    P = model.predict_frame(df)
    y = (df["class"] == ">50K").to_numpy().astype(int)
    calibrated = evaluate_predictions(y, np.column_stack([1 - P["p_>50K"], P["p_>50K"]]))
    assert calibrated["auc"] > 0.90
    assert calibrated["ece"] < 0.03
    # the boosters really differ per fold (each trained without its own fold)
    a, b = (m.learners[0].booster_.save_raw("ubj") for m in model.members[:2])
    assert a != b


def test_model_directory_holds_native_boosters_and_no_pickle(fitted):
    _, out = fitted
    files = [p for p in out.rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix in (".pkl", ".pickle", ".skops", ".joblib")]
    boosters = _boosters(out)
    assert len(boosters) == 3
    # XGBoost's own loader reads the file as it is, and predicts like the fitted booster
    native = xgboost.Booster(model_file=str(boosters[0]))
    assert native.num_boosted_rounds() == SMALL["n_estimators"]
    manifest = json.loads((out / "manifest.json").read_text())
    state = manifest["members"][0]["learners"][0]["state"]
    assert state["scalars"]["library_version"] == xgboost.__version__
    assert state["files"] == {"booster.ubj": "learner_0.booster.ubj"}


def test_reload_in_a_new_process_scores_the_same(fitted, adult_test, tmp_path):
    import pandas as pd

    model, out = fitted
    scored = tmp_path / "scored"
    proc = run_cli("score", out, adult_test, "--output", scored)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = pd.read_parquet(scored)
    want = model.predict_frame(_adult_test_frame(adult_test))
    np.testing.assert_allclose(got["p_>50K"].to_numpy(), want["p_>50K"].to_numpy(), rtol=0, atol=1e-12)
    ev = run_cli("evaluate", out, adult_test, "--target", "class", "--json")
    assert ev.returncode == 0, ev.stderr[-2000:]


def test_a_newer_library_version_in_the_model_is_refused_in_one_line(fitted, adult_test, tmp_path):
    import shutil

    _, out = fitted
    forged = tmp_path / "forged"
    shutil.copytree(out, forged)
    rewrite_manifest(forged, lambda m: m["members"][0]["learners"][0]["state"]["scalars"].update(library_version="99.0.0"))
    with pytest.raises(ModelFormatError, match="xgboost 99.0.0"):
        load_model(forged)
    assert_one_line_error(run_cli("score", forged, adult_test, "--output", tmp_path / "s"), "xgboost 99.0.0")


def test_a_booster_file_name_outside_the_model_directory_is_refused(fitted, tmp_path):
    import shutil

    _, out = fitted
    forged = tmp_path / "forged"
    shutil.copytree(out, forged)
    rewrite_manifest(forged, lambda m: m["members"][0]["learners"][0]["state"]["files"].update({"booster.ubj": "../../../manifest.json"}))
    with pytest.raises(ModelFormatError, match="not a plain file name"):
        load_model(forged)


def test_seeds_reach_the_boosters_and_same_seed_runs_agree(local_client, adult_parts, adult_test):
    """The seed reaches XGBoost (subsampling changes with it).  Two runs with one seed on one layout
    agree closely but need not be bit-identical: xgboost.dask ranks the workers through a Python set,
    and each rank's quantile sketch shapes the split candidates (README: determinism)."""
    params = {**SMALL, "subsample": 0.7, "colsample_bytree": 0.8}
    a, b, c = (_fit(local_client, adult_parts, positive=">50K", method="sigmoid", learner_params=params, seed=seed,
                    cv=2) for seed in (3, 3, 4))
    raw = [[m.learners[0].booster_.save_raw("ubj") for m in model.members] for model in (a, b, c)]
    assert raw[0] != raw[2]
    df = _adult_test_frame(adult_test).head(3000)
    pa, pb = (model.predict_frame(df)["p_>50K"].to_numpy() for model in (a, b))
    # measured (benchmarks/results/dask_determinism.md): a few rows move by up to ~0.2, the mean by ~0.01
    assert np.abs(pa - pb).max() < 0.4
    assert np.abs(pa - pb).mean() < 0.03


def test_refit_and_calibration_data(local_client, adult_parts, adult_test, tmp_path):
    refit = _fit(local_client, adult_parts, positive=">50K", method="isotonic", mode="refit")
    assert len(refit.members) == 1
    assert refit.members[0].learners[0].booster_.num_boosted_rounds() == SMALL["n_estimators"]
    # calibrate on a separate table: Adult's test set with its labels' trailing '.' removed
    cal = tmp_path / "cal"
    df = _adult_test_frame(adult_test)
    cal.mkdir()
    df.to_parquet(cal / "cal.parquet")
    held = _fit(local_client, adult_parts, positive=">50K", method="sigmoid", calibration_data=str(cal))
    assert len(held.members) == 1
    assert held.info["calibration_data"]
    P = held.predict_frame(df)["p_>50K"].to_numpy()
    y = (df["class"] == ">50K").to_numpy()
    # calibrated on these very rows by a sigmoid: the mean probability matches the base rate closely
    assert abs(P.mean() - y.mean()) < 0.01


def test_multiclass_softmax_through_one_vs_rest(local_client, tmp_path):
    parts = split_parquet(REPO / "data" / "pendigits_train.parquet", tmp_path / "pen", 3)
    model = _fit(local_client, parts, method="isotonic", cv=2, learner_params={"n_estimators": 15, "max_depth": 4})
    assert model.labels.n_classes == 10
    assert model.members[0].learners[0].booster_.num_boosted_rounds() == 15  # one softmax booster
    import pandas as pd

    df = pd.read_parquet(REPO / "data" / "pendigits_test.parquet")
    P = model.predict_frame(df)
    probs = P[[c for c in P.columns if c.startswith("p_")]].to_numpy()
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-9)
    assert (P["prediction"].to_numpy() == df["class"].to_numpy()).mean() > 0.9


def test_probing_with_a_cluster_learner_is_refused(local_client, adult_parts):
    with pytest.raises(ParameterError, match="trains on the whole cluster"):
        _fit(local_client, adult_parts, positive=">50K", method="probing")


def test_max_train_rows_with_a_cluster_learner_is_refused(local_client, adult_parts):
    with pytest.raises(ParameterError, match="drop max_train_rows"):
        _fit(local_client, adult_parts, positive=">50K", method="isotonic", max_train_rows=1000)


# ---------------------------------------------------------------------------------------------- dask processes


@pytest.mark.cluster
def test_cli_fit_score_evaluate_on_dask_processes(dask_processes, adult_parts, adult_test, tmp_path):
    import pandas as pd

    address, _ = dask_processes
    out = tmp_path / "model"
    fit = run_cli("fit", adult_parts, "--target", "class", "--positive", ">50K", "--learner", "xgboost_dask",
                  "--learner-param", "n_estimators=20", "--cv", "3", "--method", "isotonic", "--cluster", address,
                  "--output", out)
    assert fit.returncode == 0, fit.stderr[-2000:]
    assert "cluster route" in fit.stdout + fit.stderr
    assert len(_boosters(out)) == 3
    scored = tmp_path / "scored"
    score = run_cli("score", out, adult_test, "--output", scored, "--cluster", address)
    assert score.returncode == 0, score.stderr[-2000:]
    assert len(pd.read_parquet(scored)) == 16281  # Adult's whole test set
    ev = run_cli("evaluate", out, adult_test, "--target", "class", "--json")
    assert ev.returncode == 0, ev.stderr[-2000:]
    metrics = json.loads(ev.stdout)
    metrics = metrics[0] if isinstance(metrics, list) else metrics
    assert metrics["auc"] > 0.9
    assert metrics["brier"] < 0.1


@pytest.mark.cluster
def test_cli_bad_learner_parameter_is_one_line(dask_processes, adult_parts, tmp_path):
    address, _ = dask_processes
    proc = run_cli("fit", adult_parts, "--target", "class", "--positive", ">50K", "--learner", "xgboost_dask",
                   "--learner-param", "n_estimators=0", "--cluster", address, "--output", tmp_path / "m")
    assert_one_line_error(proc, "n_estimators")
    assert not (tmp_path / "m").exists()


@pytest.mark.cluster
@pytest.mark.slow
def test_a_worker_killed_mid_training_fails_in_one_line_without_a_model(adult_parts, tmp_path):
    """XGBoost's collective cannot lose a member: the fit must fail cleanly, never write half a model."""
    out = tmp_path / "model"
    # xgboost.dask submits its per-worker training function under the key "fn-<uuid>"
    r = run_cli_killing_a_worker("fit", adult_parts, "--target", "class", "--positive", ">50K", "--learner",
                                 "xgboost_dask", "--learner-param", "n_estimators=3000", "--cv", "2", "--method",
                                 "isotonic", "--output", out, task="fn-", cwd=REPO, workers_cwd=tmp_path)
    assert_one_line_error(r, "no model was written")
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".model")], list(tmp_path.iterdir())


def test_workers_are_checked_for_the_xgboost_library_as_well_as_the_plugin():
    """The per-worker version check covers the plugin's own dependencies: a worker with another
    xgboost would otherwise train with it unnoticed."""
    from calengine.plugins import registry
    from calengine.cli import _plugin_requirements
    from calengine.plugins import get_plugins

    dists, modules = _plugin_requirements([registry.make("learners", "xgboost", {}, get_plugins())])
    assert "calengine-xgboost" in dists and "xgboost-cpu" in dists
    assert "calengine_xgboost" in modules
