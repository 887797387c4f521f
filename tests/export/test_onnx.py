"""``calengine export --format onnx`` (issue 26 §2): the graph, run by onnxruntime in double precision,
gives ``calengine score``'s probabilities -- bit-identical for the piecewise maps (isotonic step and
linear with ties, binning, ROC hull, Venn–ABERS and its pair), within 1e-12 for the closed-form maps
(sigmoid, beta, temperature, the multiclass scalings) -- on Adult, Pendigits and a generated table
with ties, extremes and rows the reader refuses; what ONNX cannot express is refused in one line."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import calengine
from calengine.errors import CalengineError
from cli_helpers import assert_one_line_error

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("duckdb")  # the fixtures below live beside the SQL export's tests
from export.test_sql import (ADULT, PENDIGITS, _adult_test_with_holes, _fit_saved_loaded, _generated,  # noqa: E402
                             adult, pendigits)  # noqa: F401  (fixtures)


def _feed(sess, df: pd.DataFrame) -> dict:
    """The graph's inputs from ``df``: double columns as float64, string columns as ``str()`` of each
    value with a missing one as ``<missing>`` (the export's documented input contract)."""
    feed = {}
    for i in sess.get_inputs():
        if i.type == "tensor(string)":
            feed[i.name] = np.array(["<missing>" if pd.isna(v) else str(v) for v in df[i.name]], dtype=object)
        else:
            feed[i.name] = df[i.name].to_numpy(dtype=np.float64)
    return feed


def _run(model_bytes: bytes, df: pd.DataFrame, columns) -> dict:
    sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == list(columns)
    out = sess.run(None, _feed(sess, df))
    return dict(zip([o.name for o in sess.get_outputs()], out))


def _check(model, df: pd.DataFrame, columns, exact: bool, tol: float = 1e-12) -> None:
    from calengine.export.onnx import model_onnx

    got = _run(model_onnx(model), df, columns)
    want = model.predict_frame(df, extra_outputs=True)
    classes = list(model.labels.classes)
    P = got.pop("probabilities")
    assert P.shape == (len(df), len(classes)) and P.dtype == np.float64
    pairs = [(P[:, i], want[f"p_{c}"].to_numpy()) for i, c in enumerate(classes)]
    assert sorted(got) == (["p_high", "p_low"] if model.is_venn_abers and len(classes) == 2 else [])
    pairs += [(got[n], want[n].to_numpy()) for n in got]
    for a, b in pairs:
        if exact:
            assert np.array_equal(a, b), (np.abs(a - b).max(), int((a != b).sum()))
        else:
            np.testing.assert_allclose(a, b, rtol=0, atol=tol)


BINARY = [("isotonic", {}, "s", "proba", True), ("isotonic", {"interpolation": "linear"}, "z", "decision", True),
          ("sigmoid", {}, "z", "decision", False), ("sigmoid", {"on": "logit"}, "s", "proba", False),
          ("temperature", {}, "s", "proba", False), ("beta", {}, "z", "decision", False),
          ("beta", {}, "s", "proba", False), ("sigmoid_nobias", {}, "z", "decision", False),
          ("venn_abers", {}, "s", "proba", True), ("vector_scaling", {}, "z", "decision", False)]


@pytest.mark.parametrize("method,params,col,kind,exact", BINARY,
                         ids=[f"{m}-{'-'.join(map(str, p.values()))}-{k}" for m, p, _, k, _ in BINARY])
def test_binary_onnx_equals_calengine_on_adult(adult, method, params, col, kind, exact):
    cal, test = adult
    model = calengine.calibrate_scores(cal[[col, "y"]], "y", col, method=method, method_params=params, score_kind=kind)
    _check(model, test, [col], exact)


@pytest.mark.parametrize("method,params,exact", [("isotonic", {}, True), ("isotonic", {"interpolation": "linear"}, True),
                                                 ("venn_abers", {}, True), ("binning", {"n_bins": 20}, True),
                                                 ("binning", {"n_bins": 20, "boundary": "lower"}, True),
                                                 ("rocch", {}, True), ("matrix_scaling", {}, False)])
def test_generated_table_with_ties_and_extremes(method, params, exact):
    """Every calibration score (block boundaries and ties), scores between and beyond them, ±1e300."""
    cal, test = _generated(np.random.default_rng(7))
    model = calengine.calibrate_scores(cal, "y", "s", method=method, method_params=params, score_kind="decision")
    _check(model, test, ["s"], exact)


@pytest.mark.parametrize("method,cols,kind,exact", [("isotonic", "s", "proba", True), ("sigmoid", "z", "logit", False),
                                                   ("venn_abers", "s", "proba", True), ("temperature", "z", "logit", False),
                                                   ("vector_scaling", "s", "proba", False), ("dirichlet", "z", "logit", False)])
def test_multiclass_onnx_equals_calengine_on_pendigits(pendigits, method, cols, kind, exact):
    """The normalize combiner over one-vs-rest maps (logits as one-vs-rest log-odds), and the scalings
    over the whole score vector (Dirichlet on digits 0-3 only: on ten classes it runs L-BFGS to its cap)."""
    cal, test = pendigits
    k, params = 10, {}
    if method == "dirichlet":
        k, params = 4, {"reg_lambda": 1.0, "reg_mu": 1.0}
        cal, test = cal[cal["label"] < k], test[test["label"] < k].reset_index(drop=True)
    names = [f"{cols}_{d}" for d in range(k)]
    model = calengine.calibrate_scores(cal[names + ["label"]], "label", names, method=method, method_params=params,
                                       score_kind=kind)
    _check(model, test, names, exact)


def test_rows_calengine_refuses_get_nan_and_other_rows_are_unaffected(adult):
    from calengine.export.onnx import model_onnx

    cal, _ = adult
    model = calengine.calibrate_scores(cal[["s", "y"]], "y", "s", method="isotonic")
    df = pd.DataFrame({"s": [0.2, np.nan, 1.5, -0.1, 1.0 + 1e-10, 0.0, np.inf]})
    P = _run(model_onnx(model), df, ["s"])["probabilities"]
    assert np.isnan(P[:, 1]).tolist() == [False, True, True, True, False, False, True]
    assert np.array_equal(P[[0, 4, 5]], model.predict_frame(df.loc[[0, 4, 5]])[["p_0", "p_1"]].to_numpy())


def test_cli_export_is_deterministic_names_the_model_hash_and_matches_calengine_score(tmp_path, cli, adult):
    """End to end: fit and score with the CLI, export twice (same bytes), run the file in onnxruntime
    over the same Parquet."""
    cal, test = adult
    from calengine.export.write import export_model

    test[["z", "y"]].to_parquet(tmp_path / "test.parquet")
    calengine.calibrate_scores(cal[["z", "y"]], "y", "z", method="beta", score_kind="decision", output=tmp_path / "m")
    assert cli("score", tmp_path / "m", tmp_path / "test.parquet", "--output", tmp_path / "scored").returncode == 0
    r = cli("export", tmp_path / "m", "--format", "onnx", "--output", tmp_path / "a.onnx")
    assert r.returncode == 0, r
    export_model(tmp_path / "m", "onnx", tmp_path / "b.onnx")
    outs = [(tmp_path / name).read_bytes() for name in ("a.onnx", "b.onnx")]
    assert outs[0] == outs[1]
    manifest = json.loads((tmp_path / "a.onnx.manifest.json").read_text())
    assert manifest["model_content_hash"] == json.loads((tmp_path / "m" / "manifest.json").read_text())["content_hash"]
    assert manifest["sha256"] == hashlib.sha256(outs[0]).hexdigest()
    assert (manifest["format"], manifest["inputs"], manifest["outputs"], manifest["classes"]) == (
        "onnx", ["z"], ["probabilities"], ["0", "1"])
    got = _run(outs[0], pd.read_parquet(tmp_path / "test.parquet"), ["z"])["probabilities"]
    want = pd.read_parquet(tmp_path / "scored")
    np.testing.assert_allclose(got, want[["p_0", "p_1"]].to_numpy(), rtol=0, atol=1e-12)


def test_what_onnx_cannot_express_is_refused_in_one_line(tmp_path, cli, adult, pendigits):
    from calengine.export.onnx import model_onnx

    cal, _ = adult
    with pytest.raises(CalengineError, match="calibrator 'none' has no ONNX form.*calengine score"):
        model_onnx(calengine.calibrate_scores(cal[["s", "y"]], "y", "s", method="none"))
    pcal, _ = pendigits
    names = [f"s_{d}" for d in range(10)]
    model = calengine.calibrate_scores(pcal[names + ["label"]], "label", names, method="isotonic")
    model.combiner = SimpleNamespace(name="coupling")
    with pytest.raises(CalengineError, match="combiner 'coupling' has no ONNX form"):
        model_onnx(model)
    X = pd.DataFrame({"a": np.arange(200.0)})
    learned = calengine.CalibratedClassifier(learner="knn", method="sigmoid").fit(X, np.arange(200) % 2)
    with pytest.raises(CalengineError, match="learner 'knn' has no ONNX form.*calengine score, --format mlflow or"
                                             " calengine.arrow_udf"):
        model_onnx(learned.model_)
    calengine.calibrate_scores(cal[["s", "y"]], "y", "s", method="none", output=tmp_path / "m")
    assert_one_line_error(cli("export", tmp_path / "m", "--format", "onnx", "--output", tmp_path / "x.onnx"),
                          "calibrator 'none' has no ONNX form", "calengine score")
    assert not (tmp_path / "x.onnx").exists() and not (tmp_path / "x.onnx.manifest.json").exists()


ADULT_LEARNERS = [("logistic_regression", "isotonic", {"cv": 2}, True), ("linear_svm", "isotonic", {"cv": 2}, True),
                  ("gaussian_nb", "venn_abers", {"cv": 2, "mode": "refit"}, True),
                  ("bernoulli_nb", "sigmoid", {"cv": 2}, False), ("multinomial_nb", "isotonic", {"cv": 2}, True)]


@pytest.mark.parametrize("learner,method,options,exact", ADULT_LEARNERS, ids=[f"{a}-{b}" for a, b, _, _ in ADULT_LEARNERS])
def test_learners_in_onnx_on_adults_columns_score_as_calengine_does(tmp_path, learner, method, options, exact):
    """The learner inside the graph (issue 26 §2): Adult's numeric columns (a missing number gets the
    training median) and string columns (one-hot through LabelEncoder; a missing category is
    '<missing>', an unseen one '<other>'), the learner's sums in its own order, each fold member's
    calibrator and the members' mean: isotonic and Venn–ABERS (with its pair) bit for bit, sigmoid
    within 1e-12 of calengine."""
    model = _fit_saved_loaded(tmp_path, pd.read_parquet(ADULT / "train.parquet").iloc[:600], "class",
                              learner=learner, method=method, **options)
    assert len(model.members) == (1 if "mode" in options else 2)
    _check(model, _adult_test_with_holes(1000), model.encoder.input_columns, exact)


@pytest.mark.parametrize("learner,method,exact", [("logistic_regression", "sigmoid", False),
                                                  ("gaussian_nb", "isotonic", True), ("bernoulli_nb", "isotonic", True)])
def test_multiclass_learners_in_onnx_on_pendigits_score_as_calengine_does(tmp_path, learner, method, exact):
    """Ten classes: the multinomial softmax and naive Bayes' max-shifted log-sum-exp, one calibrator
    per class, normalize, two members averaged.  Bernoulli's scores on binarised digits are discrete,
    so many test scores equal a block's boundary exactly; onnxruntime's Exp/Log differ from numpy's in
    the last bit, and without the graph's boundary snap (onnx_learners.SNAP) 69 of these 12,000
    probabilities fell into the neighbouring block."""
    df = pd.read_parquet(PENDIGITS)
    model = _fit_saved_loaded(tmp_path, df.iloc[:900], "class", learner=learner, method=method, cv=2)
    assert model.n_classes == 10 and len(model.members) == 2
    _check(model, df.iloc[900:1800].drop(columns="class").reset_index(drop=True), model.encoder.input_columns, exact)


def test_cli_exports_a_learners_model_to_onnx_with_its_inputs_in_the_manifest(tmp_path, cli):
    """End to end on Parquet: a logistic regression's model saved as ``calengine fit`` saves it, scored
    and exported with the CLI (the same bytes as the Python export), and the graph on the same rows
    gives calengine score's probabilities bit for bit."""
    from calengine.export.write import export_model

    model = _fit_saved_loaded(tmp_path, pd.read_parquet(ADULT / "train.parquet").iloc[:800], "class",
                              learner="logistic_regression", method="isotonic", cv=2)
    test = _adult_test_with_holes(800)
    test.to_parquet(tmp_path / "test.parquet")
    assert cli("score", tmp_path / "m", tmp_path / "test.parquet", "--output", tmp_path / "scored").returncode == 0
    r = cli("export", tmp_path / "m", "--format", "onnx", "--output", tmp_path / "a.onnx")
    assert r.returncode == 0, r
    export_model(tmp_path / "m", "onnx", tmp_path / "b.onnx")
    body = (tmp_path / "a.onnx").read_bytes()
    assert body == (tmp_path / "b.onnx").read_bytes()
    manifest = json.loads((tmp_path / "a.onnx.manifest.json").read_text())
    assert manifest["inputs"] == list(model.encoder.input_columns) and manifest["outputs"] == ["probabilities"]
    got = _run(body, test, manifest["inputs"])["probabilities"]
    want = pd.read_parquet(tmp_path / "scored")
    assert np.array_equal(got, want[[f"p_{c}" for c in manifest["classes"]]].to_numpy())
