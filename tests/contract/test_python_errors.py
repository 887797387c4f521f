"""The Python API speaks Python (issue 38 §4).

Every public function of ``calengine.__all__`` and :class:`calengine.CalibratedClassifier`, given a bad
value for a parameter it validates, raises a :class:`~calengine.errors.CalengineError` whose message
names that Python parameter, never a command-line flag, and whose ``parameters`` carry it (so the CLI
maps it to its flag without reading the text: :mod:`calengine.cli.parameters`).  The CLI's side (the
same bad input on the command line is one ``error:`` line naming the flag) is in the CLI tests and in
:func:`test_the_cli_reports_the_same_errors_under_its_flags` below.
"""

from __future__ import annotations

import argparse
import re

import numpy as np
import pandas as pd
import pytest

import calengine
from calengine.errors import CalengineError

from cli_helpers import PIMA, assert_one_line_error, run_cli

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A saved two-class model (Pima, sigmoid, 2 folds), fitted once through the Python API."""
    out = tmp_path_factory.mktemp("api") / "model"
    fitted = calengine.fit_table(PIMA, "class", cv=2, method="sigmoid", workers=1)
    from calengine.model.artifact import save_model

    save_model(fitted, out)
    return out


@pytest.fixture(scope="module")
def scores_table(tmp_path_factory):
    """Pima's label and one probability column (what ``calibrate_scores`` reads)."""
    df = pd.read_parquet(PIMA)
    rng = np.random.default_rng(0)
    out = tmp_path_factory.mktemp("api") / "scores.parquet"
    pd.DataFrame({"class": df["class"], "s": rng.uniform(0, 1, len(df))}).to_parquet(out)
    return out


def _cases(model, scores_table, tmp):
    """(public name, parameter, call) for each validated parameter of each public function."""
    fit = lambda **kw: calengine.fit_table(PIMA, "class", workers=1, **kw)  # noqa: E731
    score = lambda **kw: calengine.score_table(model, PIMA, tmp / "scored", **kw)  # noqa: E731
    evaluate = lambda **kw: calengine.evaluate_models([model], PIMA, "class", workers=1, **kw)  # noqa: E731
    cv = lambda **kw: calengine.cross_validate_table(PIMA, "class", workers=1, **kw)  # noqa: E731
    recal = lambda **kw: calengine.recalibrate(model, PIMA, "class", workers=1, **kw)  # noqa: E731
    scores = lambda **kw: calengine.calibrate_scores(scores_table, "class", "s", workers=1, **kw)  # noqa: E731
    adapt = lambda **kw: calengine.adapt_priors(model, PIMA, workers=1, **kw)  # noqa: E731
    conformal = lambda **kw: calengine.conformalize(model, PIMA, **({"target": "class", "alpha": 0.1} | kw))  # noqa: E731
    return [
        ("fit_table", "max_categories", lambda: fit(max_categories=0)),
        ("fit_table", "max_train_rows", lambda: fit(max_train_rows=1)),
        ("fit_table", "seed", lambda: fit(seed=-1)),
        ("fit_table", "cv", lambda: fit(cv=1)),
        ("fit_table", "route", lambda: fit(route="sideways")),
        ("fit_table", "mode", lambda: fit(mode="sideways")),
        ("fit_table", "learner", lambda: fit(learner="no_such_learner")),
        ("fit_table", "method", lambda: fit(method="no_such_method")),
        ("fit_table", "learner_params", lambda: fit(learner_params={"no_such_parameter": 1})),
        ("fit_table", "method_params", lambda: fit(method_params={"no_such_parameter": 1})),
        ("fit_table", "combiner_params", lambda: fit(combiner_params={"tol": 0.1})),
        ("fit_table", "negative_sampling", lambda: fit(negative_sampling=2.0)),
        ("fit_table", "class_sampling", lambda: fit(class_sampling={"no_such_class": 0.5})),
        ("fit_table", "by", lambda: fit(by="age,age")),
        ("fit_table", "max_segments", lambda: fit(by="age", max_segments=0)),
        ("fit_table", "shrinkage", lambda: fit(by="age", shrinkage=-1)),
        ("fit_table", "weight", lambda: fit(weight="class")),
        ("fit_table", "score_kind", lambda: fit(score_kind="logit")),
        ("score_table", "batch_rows", lambda: score(batch_rows=0)),
        ("score_table", "reject_below", lambda: score(reject_below=2.0)),
        ("score_table", "keep", lambda: score(keep=["p_1"])),
        ("score_table", "intervals", lambda: score(intervals=True)),
        ("evaluate_models", "bootstrap", lambda: evaluate(bootstrap=1)),
        ("evaluate_models", "max_segments", lambda: evaluate(by="age", max_segments=0)),
        ("evaluate_models", "by", lambda: evaluate(by="class")),
        ("evaluate_models", "weight", lambda: evaluate(weight=3)),
        ("cross_validate_table", "folds", lambda: cv(folds=1)),
        ("cross_validate_table", "seed", lambda: cv(seed=-1)),
        ("cross_validate_table", "method", lambda: cv(method="no_such_method")),
        ("table_splits", "cv", lambda: calengine.table_splits(PIMA, "class", cv=1)),
        ("recalibrate", "forget", lambda: recal(forget=2.0)),
        ("recalibrate", "update", lambda: recal(forget=0.5)),
        ("recalibrate", "weight", lambda: recal(weight="class")),
        ("calibrate_scores", "score_kind", lambda: scores(score_kind="odds")),
        ("calibrate_scores", "method", lambda: scores(method="no_such_method")),
        ("calibrate_scores", "negative_sampling", lambda: scores(negative_sampling=0)),
        ("calibrate_scores", "seed", lambda: scores(seed=2**40)),
        ("adapt_priors", "method", lambda: adapt(method="guess")),
        ("adapt_priors", "tol", lambda: adapt(tol=2.0)),
        ("adapt_priors", "max_iter", lambda: adapt(max_iter=0)),
        ("adapt_priors", "labelled", lambda: adapt(method="bbse")),
        ("conformalize", "alpha", lambda: conformal(alpha=1.5)),
        ("conformalize", "score", lambda: conformal(score="nope")),
        ("conformalize", "seed", lambda: conformal(seed=-1)),
        ("conformalize", "randomized", lambda: conformal(score="lac", randomized=True)),
        ("conformalize", "max_segments", lambda: conformal(max_segments=0)),
        ("conformalize", "mondrian", lambda: conformal(mondrian="age,age")),
        ("conformalize", "weight", lambda: conformal(weight="class")),
    ]


#: public names that take no parameter a user can get wrong in a way calengine checks (their inputs
#: are a model path and trusted type names, checked as model-file errors), or are not functions
NOT_DRIVEN = {"hookimpl", "__version__", "load_model", "arrow_udf", "CalibratedClassifier"}


def _check(exc: CalengineError, parameter: str) -> None:
    message = str(exc)
    assert "\n" not in message, message
    assert re.search(rf"(?<![\w\-]){re.escape(parameter)}(?![\w])", message), (parameter, message)
    assert not FLAG.search(message), message
    assert parameter in exc.parameters, (parameter, exc.parameters, message)
    assert exc.parameter == exc.parameters[0]


def test_every_public_function_names_the_python_parameter(model, scores_table, tmp_path):
    cases = _cases(model, scores_table, tmp_path)
    assert {name for name, _, _ in cases} == set(calengine.__all__) - NOT_DRIVEN
    failures = []
    for name, parameter, call in cases:
        try:
            call()
        except CalengineError as exc:
            try:
                _check(exc, parameter)
            except AssertionError as failure:
                failures.append(f"calengine.{name}({parameter}=...): {failure}")
        else:
            failures.append(f"calengine.{name}({parameter}=...): no error")
    assert not failures, "\n".join(failures)
    assert not (tmp_path / "scored").exists()


ESTIMATOR_CASES = [
    ("cv", {"cv": 1}),
    ("learner", {"learner": "no_such_learner"}),
    ("method", {"method": "no_such_method"}),
    ("mode", {"mode": "sideways"}),
    ("seed", {"seed": -1}),
    ("learner_params", {"learner_params": {"no_such_parameter": 1}}),
    ("method_params", {"method_params": {"no_such_parameter": 1}}),
    ("combiner_params", {"combiner_params": {"tol": 0.1}}),
    ("multiclass", {"multiclass": "all_pairs:no_such_combiner"}),
]


@pytest.mark.parametrize("parameter, params", ESTIMATOR_CASES, ids=[c[0] for c in ESTIMATOR_CASES])
def test_the_estimator_names_its_parameters(parameter, params, pima_xy):
    X, y = pima_xy
    if parameter == "multiclass":  # a code matrix needs more than two classes
        y = np.arange(len(y)) % 3
    with pytest.raises(CalengineError) as info:
        calengine.CalibratedClassifier(**params).fit(X, y)
    _check(info.value, parameter)


def test_errors_keep_their_parameters_through_pickling():
    import pickle

    from calengine.errors import ParameterError, WorkerLostError

    exc = pickle.loads(pickle.dumps(ParameterError("cv must be at least 2", parameter=("cv", "calibration_data"))))
    assert (str(exc), exc.parameter, exc.parameters) == ("cv must be at least 2", "cv", ("cv", "calibration_data"))
    lost = pickle.loads(pickle.dumps(WorkerLostError("gone", "tcp://w:1")))
    assert (lost.worker, lost.parameter) == ("tcp://w:1", None)


def test_the_mapping_is_the_parsers():
    """Every flag of every subcommand maps its ``dest`` back to itself, and every entry of the
    table of exceptions names a parameter whose flag exists."""
    from calengine.cli import build_parser
    from calengine.cli.parameters import PARAMETER_DEST, cli_message, flag_for
    from calengine.errors import ParameterError

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, sub in subparsers.choices.items():
        flags: dict[str, list[str]] = {}  # dest -> every long flag that sets it (--progress/--quiet)
        for action in sub._actions:
            flags.setdefault(action.dest, []).extend(s for s in action.option_strings if s.startswith("--"))
        for dest, longs in flags.items():
            if longs and dest != "help":
                assert flag_for(dest, parser, command) in longs, (command, dest)
    for parameter, dest in PARAMETER_DEST.items():
        assert flag_for(parameter, parser) is not None, parameter
    assert flag_for("learner_params", parser, "fit") == "--learner-param"
    assert flag_for("text_columns", parser, "fit") == "--text-column"
    assert flag_for("trust", parser, "score") == "--trust-type"
    exc = ParameterError("method='mcgrad' needs by; segment over a column", parameter=("method", "by"))
    assert cli_message(exc, parser, "fit") == "--method mcgrad needs --by; segment over a column"
    plain = ParameterError("max_categories must be at least 1")  # no parameter carried: the text stays
    assert cli_message(plain, parser, "fit") == "max_categories must be at least 1"
    # the parameter as a word only: not inside another name or a path; name=value is --flag value
    exc = ParameterError("seed=3 in seeds/seed.txt: seed must be small", parameter="seed")
    assert cli_message(exc, parser, "fit") == "--seed 3 in seeds/seed.txt: --seed must be small"
    # a name followed by a quoted value is the noun
    exc = ParameterError("unknown learner 'knn2' for learner", parameter="learner")
    assert cli_message(exc, parser, "fit") == "unknown learner 'knn2' for --learner"


@pytest.mark.parametrize("args, flag", [
    (["fit", PIMA, "--target", "class", "--max-categories", "0"], "--max-categories"),
    (["fit", PIMA, "--target", "class", "--max-train-rows", "1"], "--max-train-rows"),
    (["fit", PIMA, "--target", "class", "--negative-sampling", "2"], "--negative-sampling"),
    (["fit", PIMA, "--target", "class", "--learner-param", "no_such_parameter=1"], "--learner-param"),
    (["cv", PIMA, "--target", "class", "--folds", "1"], "--folds"),
])
def test_the_cli_reports_the_same_errors_under_its_flags(args, flag, tmp_path):
    result = run_cli("--quiet", *args, *(["--output", tmp_path / "m"] if args[0] == "fit" else []))
    assert_one_line_error(result, flag)
    python_name = flag[2:].replace("-", "_")
    assert not re.search(rf"(?<![\w-]){python_name}", result.stderr), result.stderr
