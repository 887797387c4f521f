"""``calengine export --sets`` (calengine/export/conformal.py): a conformal model's set rule in SQL (run
by DuckDB) and ONNX (run by onnxruntime) gives the sets ``calengine score --sets`` gives; the rules
neither expresses are refused in one line; names from the data never change the SQL's structure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import calengine
from calengine.errors import ParameterError
from calengine.model.artifact import save_model
from cli_helpers import assert_one_line_error

duckdb = pytest.importorskip("duckdb")
DATA = __import__("pathlib").Path(__file__).resolve().parents[2] / "data"


def _logit_table(n: int, k: int, seed: int):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, k)) * 1.5
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    df = pd.DataFrame({f"z_{j}": z[:, j] for j in range(k)})
    df["y"] = np.minimum(y, k - 1)
    return df


def _sets(model, df):
    X = model.encoder.transform(df)
    return model.conformal.sets(model.predict_proba_features(X), X, df)


def _sql_sets(model, df, dialect="duckdb"):
    from calengine.export.conformal import sets_sql
    from calengine.export.sql import Dialect, model_sql

    sql = sets_sql(Dialect(dialect), model, model_sql(model, dialect))
    con = duckdb.connect()
    con.register("input", df)
    got = con.execute(sql).df()
    classes = [str(c) for c in model.labels.classes]
    inside = got[[f"in_{c}" for c in classes]]
    return inside.to_numpy(dtype=bool, na_value=False), got["set_size"].to_numpy(dtype=np.float64, na_value=np.nan), sql


def _onnx_sets(model, df):
    ort = pytest.importorskip("onnxruntime")
    from calengine.export.onnx import model_onnx

    sess = ort.InferenceSession(model_onnx(model, sets=True))
    feeds = {i.name: df[i.name].to_numpy(dtype=np.float64) for i in sess.get_inputs()}
    names = [o.name for o in sess.get_outputs()]
    out = dict(zip(names, sess.run(None, feeds)))
    return out["in_set"], out["set_size"]


@pytest.fixture(scope="module")
def score_models():
    cal, test = _logit_table(3000, 5, 0), _logit_table(2000, 5, 1)
    base = calengine.calibrate_scores(cal.iloc[:1500], "y", [f"z_{j}" for j in range(5)], score_kind="logit",
                                      method="isotonic")
    out = {}
    for name, kw in {"lac": {}, "topk": dict(score="topk"), "lac_class": dict(mondrian="class"),
                     "topk_class": dict(score="topk", mondrian="class")}.items():
        out[name] = calengine.conformalize(base, cal.iloc[1500:], target="y", alpha=0.1, **kw)
    # the calibration rows themselves hold the scores at the thresholds (1 - p == t exactly): the
    # comparison must be the one calengine makes, not an algebraic rewriting of it
    return out, pd.concat([test, cal.iloc[1500:]], ignore_index=True)


@pytest.mark.parametrize("name", ["lac", "topk", "lac_class", "topk_class"])
def test_sql_and_onnx_sets_equal_calengine_scores(score_models, name):
    models, test = score_models
    model = models[name]
    want = _sets(model, test)
    got, size, _ = _sql_sets(model, test)
    assert np.array_equal(got, want) and np.array_equal(size, want.sum(axis=1))
    got, size = _onnx_sets(model, test)
    assert np.array_equal(got, want) and np.array_equal(size, want.sum(axis=1))


def test_a_learner_models_sets_in_sql_and_onnx(tmp_path):
    """A fitted logistic regression on Pendigits (the learners SQL expresses), LAC by class."""
    model = calengine.fit_table(str(DATA / "pendigits_train.parquet"), "class", learner="logistic_regression",
                                method="isotonic", cv=3)
    test = pd.read_parquet(DATA / "pendigits_test.parquet")
    model = calengine.conformalize(model, test.iloc[:1500], target="class", alpha=0.05, mondrian="class")
    held = test.iloc[1500:].reset_index(drop=True)
    want = _sets(model, held)
    got, size, _ = _sql_sets(model, held)
    assert np.array_equal(got, want) and np.array_equal(size, want.sum(axis=1))
    got, size = _onnx_sets(model, held.astype({c: np.float64 for c in held.columns if c != "class"}))
    assert np.array_equal(got, want)


def test_refused_rows_have_no_set(score_models):
    models, test = score_models
    bad = test.iloc[:4].copy()
    bad.loc[bad.index[1], "z_2"] = np.nan
    got, size, _ = _sql_sets(models["lac"], bad)
    assert pd.isna(size[1]) and not pd.isna(size[0])
    _, size = _onnx_sets(models["lac"], bad)
    assert size[1] == -1 and size[0] >= 0


def test_rules_without_an_sql_form_are_one_line(score_models, tmp_path, cli):
    models, test = score_models
    cal = _logit_table(1000, 5, 3)
    cal["w"] = 1.0
    cal["g"] = np.where(cal["z_0"] > 0, "a", "b")
    base = models["lac"]
    cases = {
        "aps": (dict(score="aps"), "the set rule of score 'aps'"),
        "raps": (dict(score="raps", randomized=False), "the set rule of score 'raps'"),
        "seg": (dict(mondrian="g"), "Mondrian by segment (g) has no SQL form"),
        "w": (dict(weight="w"), "a weighted conformal layer"),
    }
    for name, (kw, text) in cases.items():
        m = calengine.conformalize(base, cal, target="y", alpha=0.1, **kw)
        save_model(m, tmp_path / name)
        r = cli("export", tmp_path / name, "--format", "sql", "--sets", "--output", tmp_path / f"{name}.sql")
        assert_one_line_error(r, text, "calengine score --sets")
        assert not (tmp_path / f"{name}.sql").exists()
    save_model(calengine.calibrate_scores(cal, "y", [f"z_{j}" for j in range(5)], score_kind="logit"), tmp_path / "plain")
    r = cli("export", tmp_path / "plain", "--format", "onnx", "--sets", "--output", tmp_path / "p.onnx")
    assert_one_line_error(r, "--sets needs a model with a conformal layer")
    # and through the CLI the exported sets are calengine score's
    save_model(models["topk_class"], tmp_path / "ok")
    r = cli("export", tmp_path / "ok", "--format", "sql", "--sets", "--output", tmp_path / "ok.sql")
    assert r.returncode == 0, r.stderr
    con = duckdb.connect()
    con.register("input", test)
    got = con.execute((tmp_path / "ok.sql").read_text()).df()
    assert np.array_equal(got[[f"in_{c}" for c in range(5)]].to_numpy(dtype=bool), _sets(models["topk_class"], test))


_ANY_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(labels=st.lists(_ANY_TEXT, min_size=2, max_size=3, unique=True), seed=st.integers(0, 2**16))
def test_class_labels_from_any_text_never_change_the_sqls_structure(labels, seed):
    """Class labels name the ``in_<class>`` columns and appear in the header comments: whatever they
    hold, every dialect's text stays one statement, and DuckDB's sets are calengine's."""
    rng = np.random.default_rng(seed)
    s = rng.random(400).round(3)
    df = pd.DataFrame({"s": s, "y": np.where(rng.random(400) < s, labels[1], labels[0])})
    assume(df["y"].nunique() == 2 and not {f"in_{c}" for c in labels} & {"s"})
    model = calengine.calibrate_scores(df.iloc[:200], "y", ["s"], method="isotonic")
    model = calengine.conformalize(model, df.iloc[200:], target="y", alpha=0.2, mondrian="class")
    from calengine.export.conformal import sets_sql
    from calengine.export.sql import Dialect, model_sql

    for dialect in ("duckdb", "postgres", "spark"):
        sql = sets_sql(Dialect(dialect), model, model_sql(model, dialect))
        head = sql.split("\n")[:2]
        assert all(line.startswith("-- ") and all(" " <= ch <= "~" for ch in line) for line in head)
        if dialect == "duckdb":
            assert len(duckdb.extract_statements(sql)) == 1
        elif dialect == "postgres":
            assert len(pytest.importorskip("pglast").parse_sql(sql)) == 1
        else:
            assert len([x for x in pytest.importorskip("sqlglot").parse(sql, read="spark") if x is not None]) == 1
    got, _, _ = _sql_sets(model, df[["s"]])
    assert np.array_equal(got, _sets(model, df))


def test_mlflow_takes_no_sets(score_models, tmp_path):
    from calengine.export.write import export_model

    models, _ = score_models
    save_model(models["lac"], tmp_path / "m")
    with pytest.raises(ParameterError, match="--sets applies to --format sql and onnx"):
        export_model(tmp_path / "m", "mlflow", tmp_path / "ml", sets=True)
