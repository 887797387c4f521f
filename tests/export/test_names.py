"""Names and labels from the data in the ONNX and MLflow exports (issue 42): whatever a score column or a
class label holds -- any Unicode, control characters and line breaks included -- it lands in the exported
artifact as data, never as structure.

ONNX names every input after its column (protobuf strings: no syntax to break), but the graph's own
tensors had positional names (``c0``, ``n5``) that a column could share, and a column named like the
output collided with it: the export now keeps its names apart from the columns' (a prefix only when a
column looks like one of them) and refuses, in one line, a column it cannot name after itself.  The
doc string quotes names as JSON.  MLflow writes ``MLmodel`` with PyYAML's safe dumper, which quotes
and escapes a label holding a newline or ``: ``; the test reads the file back with ``yaml.safe_load``
and compares the flavor's classes and columns to the model's.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import calengine
from calengine.errors import CalengineError, DataError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
mlflow = pytest.importorskip("mlflow")
import mlflow.pyfunc  # noqa: E402
import yaml  # noqa: E402

# Names and labels from all of Unicode, control characters and line separators included (not lone
# surrogates, which no Parquet file or UTF-8 text holds).
_ANY_TEXT = st.text(st.characters(exclude_categories=("Cs",)), min_size=0, max_size=8)
#: what MLmodel holds at its top level (MLflow's own keys; nothing a label could add)
_MLMODEL_KEYS = {"artifact_path", "flavors", "mlflow_version", "model_size_bytes", "model_uuid", "prompts",
                 "run_id", "utc_time_created", "saved_input_example_info", "signature", "metadata", "model_id"}


@pytest.fixture(autouse=True)
def _quiet_mlflow(monkeypatch):
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")


def _table(scores: list[str], labels: list[str], seed: int, n: int = 240) -> pd.DataFrame:
    """``n`` rows: one probability column per name in ``scores`` (one: the second label's probability;
    several: one per label, normalised), and the label ``y`` drawn from them."""
    rng = np.random.default_rng(seed)
    if len(scores) == 1:
        p = rng.random(n).round(2)
        y = np.where(rng.random(n) < p, labels[1], labels[0])
        return pd.DataFrame({scores[0]: p, "y": y})
    raw = rng.random((n, len(labels))) + 0.05
    P = (raw / raw.sum(axis=1, keepdims=True)).round(3)
    y = np.array([labels[rng.choice(len(labels), p=row / row.sum())] for row in P], dtype=object)
    return pd.DataFrame({**{c: P[:, j] for j, c in enumerate(scores)}, "y": y})


def _fit(tmp_path, df: pd.DataFrame, scores: list[str], labels: list[str], method: str):
    """The model ``calengine fit`` makes of the table written as Parquet, saved (and so loaded back)."""
    df.to_parquet(tmp_path / "t.parquet")
    return calengine.calibrate_scores(tmp_path / "t.parquet", "y", scores, method=method,
                                      classes=labels if len(scores) > 1 else None, output=tmp_path / "m")


def _onnx_probabilities(path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == list(inputs)  # every column is an input, named as it is
    outs = [o.name for o in session.get_outputs()]
    return dict(zip(outs, session.run(None, inputs)))


def _check_onnx(tmp_path, model, df: pd.DataFrame, scores: list[str]) -> None:
    from calengine.export.write import export_model

    want = model.predict_frame(df)
    columns = [f"p_{c}" for c in model.labels.classes]
    if "" in scores or {"probabilities", "p_low", "p_high"} & set(scores):
        with pytest.raises(DataError, match="ONNX graph names each input after its column") as err:
            export_model(tmp_path / "m", "onnx", tmp_path / "m.onnx")
        assert "\n" not in str(err.value) and not (tmp_path / "m.onnx").exists()
        return
    export_model(tmp_path / "m", "onnx", tmp_path / "m.onnx")
    order = list(model.encoder.input_columns)  # the columns in the model's class order
    assert sorted(order) == sorted(scores)
    got = _onnx_probabilities(tmp_path / "m.onnx", {c: df[c].to_numpy(np.float64) for c in order})
    assert list(got) == ["probabilities"]
    np.testing.assert_allclose(got["probabilities"], want[columns].to_numpy(), rtol=0, atol=1e-12)
    doc = onnx.load(str(tmp_path / "m.onnx")).graph.doc_string
    assert "\n" not in doc and "\r" not in doc
    for name in [*scores, *map(str, model.labels.classes)]:
        assert json.dumps(name) in doc


def _check_mlflow(tmp_path, model, df: pd.DataFrame) -> None:
    from calengine.export.write import export_model

    export_model(tmp_path / "m", "mlflow", tmp_path / "mlf")
    doc = yaml.safe_load((tmp_path / "mlf" / "MLmodel").read_text(encoding="utf-8"))
    assert set(doc) <= _MLMODEL_KEYS and set(doc["flavors"]) == {"calengine", "python_function"}
    flavor = doc["flavors"]["calengine"]
    assert flavor["classes"] == [str(c) for c in model.labels.classes]
    assert flavor["columns"] == [f"p_{c}" for c in model.labels.classes]
    assert doc["flavors"]["python_function"]["loader_module"] == "calengine.mlflow"
    got = mlflow.pyfunc.load_model(str(tmp_path / "mlf")).predict(df.drop(columns=["y"]))
    want = model.predict_frame(df)
    assert list(got.columns) == flavor["columns"]
    for c in got.columns:
        np.testing.assert_array_equal(got[c].to_numpy(), want[c].to_numpy())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(names=st.lists(_ANY_TEXT, min_size=1, max_size=3, unique=True),
       labels=st.lists(_ANY_TEXT.filter(bool), min_size=2, max_size=3, unique=True),
       method=st.sampled_from(["isotonic", "sigmoid"]), seed=st.integers(0, 2**16))
def test_names_and_labels_from_any_text_never_change_the_onnx_or_mlflow_structure(tmp_path_factory, names, labels,
                                                                                    method, seed):
    """One score column (two classes) or one per class, named by hypothesis, classes labelled by it:
    the ONNX graph loads and checks, its inputs are the columns and its output the probabilities,
    equal to ``calengine score``'s within 1e-12 (or the export refuses a column it cannot name in
    one line); the MLflow model's ``MLmodel`` reads back with only MLflow's keys and the labels as
    they are, and its pyfunc gives ``calengine score``'s probabilities bit for bit."""
    scores = names[:1] if len(labels) == 2 or len(names) == 1 else names
    assume(len(scores) in (1, len(labels)))
    assume("" not in scores and "y" not in scores)  # the fit itself refuses an empty name and the target
    tmp_path = tmp_path_factory.mktemp("names")
    df = _table(scores, labels, seed)
    assume(df["y"].nunique() == len(labels))
    try:
        model = _fit(tmp_path, df, scores, labels, method)
    except CalengineError as exc:  # a name the fit refuses: one line, nothing written
        assert "\n" not in str(exc) and not (tmp_path / "m").exists()
        return
    _check_onnx(tmp_path, model, df, scores)
    _check_mlflow(tmp_path, model, df)


@pytest.mark.parametrize("name", ["c0", "c1", "n0", "n5", "_c0", "__n12"])
def test_a_column_named_like_a_graph_tensor_is_an_input_not_a_constant(tmp_path, name):
    """A score column named ``c0`` (an initializer's name) or ``n5`` (a node's output) made the export a
    traceback (ONNX refused the graph); the graph's own names now keep clear of every column."""
    df = _table([name], ["a", "b"], 3)
    model = _fit(tmp_path, df, [name], ["a", "b"], "isotonic")
    _check_onnx(tmp_path, model, df, [name])
    graph = onnx.load(str(tmp_path / "m.onnx")).graph
    own = [i.name for i in graph.initializer] + [o for node in graph.node for o in node.output]
    assert name not in own and [i.name for i in graph.input] == [name]


@pytest.mark.parametrize("name", ["probabilities", "p_low", "p_high"])
def test_a_column_named_like_an_output_is_one_line_through_the_cli(tmp_path, cli, name):
    """A column with the name of an output of the graph: one line, exit 2, nothing written."""
    from cli_helpers import assert_one_line_error

    _table([name], ["a", "b"], 4).to_parquet(tmp_path / "t.parquet")
    r = cli("fit", tmp_path / "t.parquet", "--target", "y", "--scores", name, "--method", "venn_abers",
            "--output", tmp_path / "m")
    assert r.returncode == 0, r.stderr
    assert_one_line_error(cli("export", tmp_path / "m", "--format", "onnx", "--output", tmp_path / "m.onnx"),
                          json.dumps(name), "rename the column")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "t.parquet"]


def test_a_label_that_looks_like_yaml_stays_a_label_in_mlmodel(tmp_path):
    """The issue's YAML case: class labels holding ``: ``, a newline, ``- `` and an anchor; MLmodel keeps
    them as the flavor's classes, and no key of theirs appears in the file's structure."""
    labels = ["a: b\nflavors: {}", "- x\n&anchor !!python/object:os.system"]
    df = _table(["s"], labels, 5)
    model = _fit(tmp_path, df, ["s"], labels, "sigmoid")
    _check_mlflow(tmp_path, model, df)
    _check_onnx(tmp_path, model, df, ["s"])
