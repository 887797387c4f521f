"""The options of a job, checked once at the door (calengine.plan.options, issue 39 §4).

Every field of FitConfig and TableSpec is checked and normalised when the record is made, the rules
between records by check_job; the records are frozen; a refusal is one ParameterError naming the Python
parameter, which the CLI reports under its flag.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calengine.errors import ParameterError
from calengine.plan.options import (
    FitConfig, TableSpec, check_job, check_option, check_segment_options, describe_options,
)

REPO = Path(__file__).resolve().parents[2]


def table(**kw) -> TableSpec:
    return TableSpec("t.parquet", "y", **kw)


@pytest.mark.parametrize("kw, parameter, words", [
    (dict(cv=1), "cv", "cv must be an integer >= 2 (the number of folds), got 1"),
    (dict(cv=101), "cv", "cv=101 is more than 100, the most cv may be (each fold fits the learner once more)"),
    (dict(cv=2.0), "cv", "cv must be an integer"),
    (dict(cv=True), "cv", "cv must be an integer"),
    (dict(seed=-1), "seed", "seed must be from 0 to 4294967295"),
    (dict(seed="7"), "seed", "seed must be an integer"),
    (dict(mode="refitt"), "mode", "mode must be one of ensemble, refit, got 'refitt'"),
    (dict(method=""), "method", "method must be a calibrator name"),
    (dict(method=3), "method", "method must be a calibrator name"),
    (dict(combine="avg", learner="a,b"), "combine", "combine must be one of min, max, median, mean, product"),
    (dict(learner_params=[("k", 1)]), "learner_params", "learner_params must be a dict"),
    (dict(method_params={1: 2}), "method_params", "method_params must be a dict"),
    (dict(negative_sampling=0), "negative_sampling", "negative_sampling must be a positive, finite sampling rate"),
    (dict(negative_sampling=1.5), "negative_sampling", "negative_sampling is the share of negative rows kept, in (0, 1]"),
    (dict(negative_sampling="x"), "negative_sampling", "negative_sampling must be a number"),
    (dict(class_sampling={"a": math.inf}), "class_sampling", "class_sampling a must be a positive, finite"),
    (dict(class_sampling={"1": 0.5, 1: 0.3}), "class_sampling", "names class '1' twice"),
    (dict(class_sampling=[("a", 0.5)]), "class_sampling", "class_sampling must be a dict"),
    (dict(combiner_params={"tol": 1e-6}), "combiner_params", "combiner_params needs multiclass"),
    (dict(multiclass="all_pairs", method="probing"), "multiclass", "multiclass does not apply to method='probing'"),
    (dict(negative_sampling=0.5, class_sampling={"a": 0.5}), "negative_sampling", "not both"),
    (dict(learner=""), "learner", "learner must name a learner"),
    (dict(learner=None), "learner", "learner must name a learner"),
])
def test_a_bad_fit_option_is_one_line_naming_its_parameter(kw, parameter, words):
    with pytest.raises(ParameterError) as err:
        FitConfig(**kw)
    assert words in str(err.value) and "\n" not in str(err.value)
    assert err.value.parameter == parameter


@pytest.mark.parametrize("kw, parameter, words", [
    (dict(max_categories=0), "max_categories", "max_categories must be at least 1, got 0"),
    (dict(max_categories=10_001), "max_categories", "max_categories=10001 is more than 10000"),
    (dict(max_categories="5"), "max_categories", "max_categories must be at least 1, got '5'"),
    (dict(max_train_rows=1), "max_train_rows", "max_train_rows must be at least 2, got 1"),
    (dict(max_train_rows=2**41), "max_train_rows", "max_train_rows=2199023255552 is more than 1099511627776"),
    (dict(route="fast"), "route", "unknown route 'fast'; choose one of auto, stats, in-memory, sample"),
    (dict(fragment_rows=0), "fragment_rows", "fragment_rows must be an integer from 1 to"),
    (dict(max_segments=0), "max_segments", "max_segments must be at least 1, got 0"),
    (dict(max_segments=20_001), "max_segments", "max_segments=20001 is more than 20000"),
    (dict(by="a,,b"), "by", "by takes column names"),
    (dict(by=["a", "a"]), "by", "by names a column twice"),
    (dict(by=[1]), "by", "by takes column names"),
    (dict(features=""), "features", "features takes column names"),
    (dict(scores=("s", "s")), "scores", "scores names a column twice"),
    (dict(shrinkage=-1), "shrinkage", "shrinkage must be a number >= 0"),
    (dict(shrinkage="nan"), "shrinkage", "shrinkage must be a number >= 0"),
    (dict(score_kind="logits", scores=("s",)), "score_kind", "score_kind must be one of proba, decision, logit"),
    (dict(weight=""), "weight", "weight must be the name of a column of weights"),
    (dict(scores=("s",), prefit="m.json"), "scores", "scores and prefit both say where the scores come from"),
    (dict(classes=("a", "b")), "classes", "classes and score_kind describe score columns; they need scores"),
])
def test_a_bad_table_option_is_one_line_naming_its_parameter(kw, parameter, words):
    with pytest.raises(ParameterError) as err:
        table(**kw)
    assert words in str(err.value) and "\n" not in str(err.value)
    assert err.value.parameter == parameter


def test_the_records_hold_the_normalised_values_and_cannot_be_changed(tmp_path):
    spec = TableSpec(tmp_path / "t.parquet", "y", by="country, device", features=["a", "b"], exclude="c",
                     shrinkage="inf", classes=["x", "y"], scores=["p_x", "p_y"])
    assert spec.data == str(tmp_path / "t.parquet")
    assert spec.by == ("country", "device") and spec.features == ("a", "b") and spec.exclude == ("c",)
    assert spec.shrinkage == math.inf and spec.classes == ("x", "y") and spec.scores == ("p_x", "p_y")
    assert TableSpec("t", "y", text_columns=None, trust=None).text_columns == ()
    config = FitConfig(negative_sampling="0.25", class_sampling={}, method_params=None, seed=7)
    assert config.negative_sampling == 0.25 and config.class_sampling is None and config.method_params == {}
    given_params = {"k": 1}
    assert FitConfig(learner_params=given_params).learner_params is not given_params  # the caller's stays theirs
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.by = ("other",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.cv = 1
    with pytest.raises(ParameterError, match="cv must be an integer >= 2"):  # deriving one checks it again
        dataclasses.replace(config, cv=1)


@pytest.mark.parametrize("config, spec, parameters, words", [
    (dict(method="probing"), dict(scores=("s",)), ("method", "scores"), "fits many classifiers on the features"),
    (dict(combine="mean", learner="a,b"), dict(prefit="m.json"), ("combine", "prefit"), "does not apply to prefit"),
    (dict(), dict(prefit="m.json", route="stats"), ("route", "prefit"), "does not apply to prefit"),
    (dict(), dict(scores=("s",), features=("f",)), ("features", "scores"), "scores fits no learner"),
    (dict(method="none"), dict(scores=("s",), score_kind="logit"), ("method", "score_kind"), "rescale the scores linearly"),
    (dict(method="bagging"), dict(weight="w"), ("weight", "method"), "weight is not supported with method='bagging'"),
    (dict(method="none"), dict(by="a"), ("by", "method"), "needs a calibration method"),
    (dict(learner="a,b", combine="mean"), dict(by="a"), ("by", "combine"), "takes one learner"),
    (dict(mode="refit"), dict(by="a"), ("by", "mode", "calibration_data"), "keeps no fold learners"),
    (dict(), dict(by="y"), ("by",), "by column 'y' is the target"),
    (dict(method="mcgrad"), dict(scores=("s",)), ("method", "by"), "name them with by"),
    (dict(method="mcgrad"), dict(scores=("s",), by="a", shrinkage=3), ("shrinkage", "method"), "drop shrinkage"),
    (dict(method="mcgrad", class_sampling={"1": 0.5}), dict(by="a"), ("method", "negative_sampling", "class_sampling"),
     "does not correct class-sampled data"),
    (dict(combine="mean"), dict(), ("combine", "learner"), "combine needs at least two learners"),
])
def test_the_rules_between_the_records_are_checked_by_check_job(config, spec, parameters, words):
    with pytest.raises(ParameterError) as err:
        check_job(FitConfig(**config), table(**spec))
    assert words in str(err.value) and "\n" not in str(err.value)
    assert err.value.parameters == parameters


def test_good_jobs_pass_check_job():
    for config, spec in [(dict(), dict()), (dict(learner="a,b", combine="mean"), dict()),
                         (dict(method="sigmoid"), dict(scores=("s",), by="a", shrinkage=0)),
                         (dict(method="mcgrad"), dict(scores=("s",), by="a")),
                         (dict(mode="refit"), dict(by="a", calibration_data="cal.parquet"))]:
        check_job(FitConfig(**config), table(**spec))


_values = st.one_of(st.none(), st.booleans(), st.integers(-3, 2**41), st.floats(allow_nan=True),
                    st.text(max_size=8), st.lists(st.text(max_size=4), max_size=3),
                    st.dictionaries(st.text(max_size=3), st.floats(-1, 2), max_size=2))
_fit_fields = [f.name for f in dataclasses.fields(FitConfig)]
_spec_fields = [f.name for f in dataclasses.fields(TableSpec) if f.name not in ("data", "target")]


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(_fit_fields), _values, max_size=3),
       st.dictionaries(st.sampled_from(_spec_fields), _values, max_size=3))
def test_any_values_make_a_record_or_one_line_naming_a_field_and_normalising_is_idempotent(fit_kw, spec_kw):
    """Whatever a caller passes, making a record either succeeds or raises one ParameterError naming
    parameters of the records (never a TypeError from deep inside a stage); a made record made again
    from its own values is equal to itself (the normalised form is a fixed point)."""
    names = set(_fit_fields) | set(_spec_fields) | {"data", "target"}
    for make, kw in ((FitConfig, fit_kw), (lambda **k: table(**k), spec_kw)):
        try:
            record = make(**kw)
        except ParameterError as exc:
            assert "\n" not in str(exc) and exc.parameters and set(exc.parameters) <= names, exc
            continue
        assert dataclasses.replace(record) == record
        for f in dataclasses.fields(record):  # every value held is one its constraint accepts, unchanged
            value = getattr(record, f.name)
            constraint = type(record)._parameter_constraints.get(f.name)
            if constraint is not None and not (value is None and constraint.optional):
                assert check_option(f.name, value) == value or value != value, (f.name, value)


def test_single_options_are_checked_by_the_records_constraints():
    assert check_option("max_segments", 5) == 5
    assert check_segment_options("a,b", 10) == ("a", "b")
    with pytest.raises(ParameterError, match="max_segments=1000000 is more than 20000"):
        check_segment_options("a", 10**6)
    with pytest.raises(ParameterError, match="by names a column twice"):
        check_segment_options(["a", "a"], 10)


def test_the_cli_names_the_flag_of_each_refused_parameter():
    """A record's refusal, reported by the CLI, names the flag (the mapping of calengine.cli.parameters)."""
    from calengine.cli import build_parser
    from calengine.cli.parameters import cli_message

    parser = build_parser()
    for make, flag in [(lambda: table(max_categories=0), "--max-categories must be at least 1"),
                       (lambda: table(max_train_rows=1), "--max-train-rows must be at least 2"),
                       (lambda: FitConfig(combiner_params={"tol": 1}), "--combiner-param needs --multiclass"),
                       (lambda: FitConfig(mode="x"), "--mode must be one of")]:
        with pytest.raises(ParameterError) as err:
            make()
        assert flag in cli_message(err.value, parser, "fit"), cli_message(err.value, parser, "fit")


def test_the_reference_page_lists_every_option_from_the_constraints():
    """docs/reference/options.md holds the marker its build hook (docs/hooks/options_table.py) replaces by
    the table describe_options() gives: every field of both records, with its default and its words."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("options_table", REPO / "docs" / "hooks" / "options_table.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    rows = describe_options()
    assert [r[1] for r in rows] == _fit_fields + ["data", "target"] + _spec_fields
    page = (REPO / "docs" / "reference" / "options.md").read_text()
    assert hook.MARKER in page
    table_text = hook.options_table()
    for record, name, default, accepts in rows:
        assert f"| `{name}` | {record} | `{default}` | {accepts} |" in table_text, name
    assert "at most 100" in table_text and "an integer from 1 to 20000" in table_text
