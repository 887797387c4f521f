"""``evaluate_models(metrics=...)`` (issue 43 §4): a selection computes only its keys, each the full
evaluation's bits, on Adult's test set in memory and cut into score ranges at random sizes."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import calengine
from calengine.errors import ParameterError
from calengine.metrics.selection import ALWAYS, MAX_METRIC_NAMES, METRIC_NAMES, SECTIONS, check_metrics, needs
from cli_helpers import REPO, run_cli

ADULT_TRAIN = REPO / "data" / "adult" / "train.parquet"
ADULT_TEST = REPO / "data" / "adult" / "test.parquet"


@pytest.fixture(scope="module")
def adult_model(tmp_path_factory):
    """``calengine fit`` of Adult's training set (gaussian_nb + isotonic, five members)."""
    out = tmp_path_factory.mktemp("adult") / "model"
    r = run_cli("--quiet", "fit", ADULT_TRAIN, "--target", "class", "--workers", "1", "--output", out)
    assert r.returncode == 0, r
    return calengine.load_model(out)


@pytest.fixture(scope="module")
def full(adult_model):
    return calengine.evaluate_models(adult_model, str(ADULT_TEST), "class", workers=1).to_json()


def _expected(full: dict, names) -> dict:
    """The keys a selection of ``names`` prints, with the full run's values (``raw``: the same selection)."""
    out = {k: v for k, v in full.items() if k in names or k in ALWAYS or k == "model"}
    if "raw" in names:
        out["raw"] = {k: v for k, v in full["raw"].items() if k in names or k in ALWAYS}
    return out


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_each_name_alone_prints_its_key_as_the_full_run_does(adult_model, full, name):
    got = calengine.evaluate_models(adult_model, str(ADULT_TEST), "class", workers=1, metrics=[name]).to_json()
    assert got == _expected(full, {name})
    assert list(got) == [k for k in full if k in got]  # in the full run's order


def test_the_peers_selection_and_its_text(adult_model, full):
    names = "brier,log_loss,auc,ece,ece_equal_mass,smece,brier"  # a name twice counts once
    ev = calengine.evaluate_models(adult_model, str(ADULT_TEST), "class", workers=1, metrics=names)
    assert ev.to_json() == _expected(full, set(names.split(",")))
    text = ev.to_text(width=200)
    assert "smece" in text and "ece_equal_mass" in text and "ici" not in text and "hosmer" not in text
    # no drift check, no error-reject table, no raw learner's column
    assert "recalibrate" not in text and "reject" not in text and "raw learner" not in text


def test_a_cost_matrix_decides_as_in_the_full_run_without_raw_metrics(adult_model):
    costs = {"classes": ["<=50K", ">50K"], "costs": [[0, 5], [1, 0]]}
    whole = calengine.evaluate_models(adult_model, str(ADULT_TEST), "class", workers=1, cost_matrix=costs).to_json()
    got = calengine.evaluate_models(adult_model, str(ADULT_TEST), "class", workers=1, cost_matrix=costs,
                                    metrics="auc").to_json()
    assert got["decisions"] == whole["decisions"] and "raw" not in got and got["auc"] == whole["auc"]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.sampled_from(METRIC_NAMES), min_size=1, max_size=6), values=st.integers(300, 20_000))
def test_cut_into_random_ranges_a_selection_is_the_full_runs_bits(adult_model, full, names, values):
    """Cut into score ranges of about ``values`` distinct forecasts (the bounded-memory engine of tables
    from 1M rows), a selection is the in-memory full run's keys to the bit."""
    from calengine.metrics.ranged import engine as range_eval

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(range_eval, "RANGED_MIN_ROWS", 0)
        mp.setattr(range_eval, "RANGE_VALUES", values)
        got = calengine.evaluate_models(adult_model, str(ADULT_TEST), "class", workers=1, metrics=names).to_json()
    assert got == _expected(full, set(names))


def test_names_are_checked_and_bounded():
    assert check_metrics(None) is None
    assert check_metrics(" brier , auc,brier") == check_metrics(["auc", "brier"]) == frozenset({"auc", "brier"})
    with pytest.raises(ParameterError, match=r"metrics names unknown metric 'brie'; known: n, n_classes, brier,") as e:
        check_metrics("brier,brie")
    assert e.value.parameter == "metrics"
    for bad in ("", "brier,,auc", ["brier", 3], 7):
        with pytest.raises(ParameterError, match="metrics takes metric names") as e:
            check_metrics(bad)
        assert e.value.parameter == "metrics"
    check_metrics(["brier"] * MAX_METRIC_NAMES)
    with pytest.raises(ParameterError, match=f"more than {MAX_METRIC_NAMES}"):
        check_metrics(["brier"] * (MAX_METRIC_NAMES + 1))
    assert needs(frozenset(SECTIONS)) == frozenset() and needs(frozenset({"ici"})) == {"cox", "ici"}


def test_a_bad_selection_or_one_with_report_is_refused_before_any_work(adult_model, tmp_path):
    with pytest.raises(ParameterError, match="unknown metric 'bogus'") as e:
        calengine.evaluate_models(adult_model, str(tmp_path / "missing.parquet"), "class", metrics="bogus")
    assert e.value.parameter == "metrics"
    with pytest.raises(ParameterError, match="report draws every metric") as e:
        calengine.evaluate_models(adult_model, str(ADULT_TEST), "class", metrics="auc", report=tmp_path / "r")
    assert e.value.parameters == ("metrics", "report") and not (tmp_path / "r").exists()
