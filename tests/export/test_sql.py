"""``calengine export --format sql`` (issue 26 §1): the SQL, run in a real DuckDB, gives the probabilities
``calengine score`` gives -- bit-identical for the piecewise maps (isotonic, binning, ROC hull,
Venn–ABERS and its pair), within 1e-12 for the closed-form maps (sigmoid, beta, temperature, the
multiclass scalings) -- on Adult, Pendigits and a generated table with ties, extremes and rows the
reader refuses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import calengine
from calengine.errors import CalengineError
from cli_helpers import REPO, assert_one_line_error

duckdb = pytest.importorskip("duckdb")

ADULT = REPO / "data" / "adult"
PENDIGITS = REPO / "data" / "pendigits_test.parquet"


def _run_sql(sql: str, df: pd.DataFrame, dialect_table: str = "input") -> pd.DataFrame:
    con = duckdb.connect()
    con.register(dialect_table, df)
    return con.execute(sql).df()


def _export(model_dir, out, *args) -> str:
    from calengine.export.write import export_model

    export_model(model_dir, "sql", out, **dict(args))
    return Path(out).read_text()


@pytest.fixture(scope="module")
def adult(tmp_path_factory):
    """Adult's score columns from a logistic regression trained outside calengine on half the training
    table: ``s`` its probability rounded to 4 digits (ties), ``z`` its decision value; (calibration
    table, test table)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    frames = []
    for part in ("train", "test"):
        df = pd.read_parquet(ADULT / f"{part}.parquet")
        frames.append((df.select_dtypes("number").to_numpy(dtype=np.float64),
                       (df["class"].astype(str) == ">50K").to_numpy().astype(np.int64)))
    (X, y), (Xt, yt) = frames
    lr = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(X[::2], y[::2])
    tables = [pd.DataFrame({"s": lr.predict_proba(A)[:, 1].round(4), "z": lr.decision_function(A), "y": b})
              for A, b in ((X[1::2], y[1::2]), (Xt, yt))]
    return tables


@pytest.fixture(scope="module")
def pendigits():
    """Pendigits' test table as score columns of a multinomial logistic regression fitted on a third of
    it: ``s_<d>`` probabilities and ``z_<d>`` logits; (calibration half, scored half)."""
    from sklearn.linear_model import LogisticRegression

    df = pd.read_parquet(PENDIGITS)
    X = df.drop(columns="class").to_numpy(dtype=np.float64) / 100.0
    y = df["class"].to_numpy()
    lr = LogisticRegression(max_iter=300).fit(X[::3], y[::3])
    P, Z = lr.predict_proba(X), lr.decision_function(X)
    out = pd.DataFrame({f"s_{c}": P[:, i].round(3) for i, c in enumerate(lr.classes_)}
                       | {f"z_{c}": Z[:, i] for i, c in enumerate(lr.classes_)} | {"label": y})
    return out.iloc[1::2].reset_index(drop=True), out.iloc[2::3].reset_index(drop=True)


def _expected(model, df: pd.DataFrame) -> pd.DataFrame:
    return model.predict_frame(df)


def _check(model, sql: str, df: pd.DataFrame, exact: bool, tol: float = 1e-12) -> None:
    got = _run_sql(sql, df)
    want = model.predict_frame(df, extra_outputs=True)  # a Venn–ABERS model's p_low, p_high too
    outputs = [f"p_{c}" for c in model.labels.classes] + (["p_low", "p_high"] if model.is_venn_abers else [])
    assert list(got.columns) == list(df.columns) + outputs
    # the input columns come back as they went in (DuckDB returns a missing string as NaN, not None)
    pd.testing.assert_frame_equal(got[list(df.columns)].fillna(-1), df.fillna(-1), check_dtype=False)
    for c in outputs:
        a, b = got[c].to_numpy(dtype=np.float64), want[c].to_numpy()
        if exact:
            assert np.array_equal(a, b), (c, np.abs(a - b).max(), int((a != b).sum()))
        else:
            np.testing.assert_allclose(a, b, rtol=0, atol=tol)


BINARY = [("isotonic", {}, "s", "proba", True), ("isotonic", {"interpolation": "linear"}, "s", "proba", True),
          ("isotonic", {"interpolation": "linear"}, "z", "decision", True),
          ("sigmoid", {}, "z", "decision", False), ("sigmoid", {}, "s", "proba", False),
          ("temperature", {}, "s", "proba", False), ("temperature", {}, "z", "logit", False),
          ("beta", {}, "s", "proba", False), ("beta", {}, "z", "decision", False),
          ("sigmoid_nobias", {}, "z", "decision", False),
          ("binning", {"n_bins": 20}, "s", "proba", True), ("binning", {"n_bins": 30, "boundary": "lower"}, "z", "decision", True),
          ("rocch", {}, "s", "proba", True), ("venn_abers", {}, "s", "proba", True),
          ("vector_scaling", {}, "z", "decision", False), ("matrix_scaling", {}, "s", "proba", False),
          ("dirichlet", {}, "z", "decision", False)]


@pytest.mark.parametrize("method,params,col,kind,exact", BINARY, ids=[f"{m}-{'-'.join(map(str, p.values()))}-{k}" for m, p, _, k, _ in BINARY])
def test_binary_sql_in_duckdb_equals_calengine_on_adult(adult, method, params, col, kind, exact):
    cal, test = adult
    model = calengine.calibrate_scores(cal[[col, "y"]], "y", col, method=method, method_params=params, score_kind=kind)
    from calengine.export.sql import model_sql

    _check(model, model_sql(model), test[[col, "y"]], exact)


@pytest.mark.parametrize("method,cols,kind,exact", [("isotonic", "s", "proba", True), ("sigmoid", "z", "logit", False),
                                                   ("venn_abers", "s", "proba", True), ("binning", "s", "proba", True),
                                                   ("rocch", "s", "proba", True)])
def test_multiclass_normalize_sql_in_duckdb_equals_calengine_on_pendigits(pendigits, method, cols, kind, exact):
    """The piecewise maps on the probability columns, which the query reads as they are: on logits, the
    one-vs-rest log-odds the query computes may differ from numpy's in the last bit, so a test score
    equal to a calibration score can fall on the other side of that boundary (seen: Venn–ABERS)."""
    cal, test = pendigits
    names = [f"{cols}_{d}" for d in range(10)]
    params = {"n_bins": 10} if method == "binning" else {}  # a fixed count: the cross-validated one costs seconds
    model = calengine.calibrate_scores(cal[names + ["label"]], "label", names, method=method, method_params=params,
                                       score_kind=kind)
    assert model.combiner.name == "normalize"
    from calengine.export.sql import model_sql

    _check(model, model_sql(model), test[names + ["label"]], exact)


MULTICLASS_SCALINGS = [("temperature", "z", "logit"), ("temperature", "s", "proba"), ("vector_scaling", "s", "proba"),
                       ("matrix_scaling", "z", "logit"), ("dirichlet", "z", "logit")]


@pytest.mark.parametrize("method,cols,kind", MULTICLASS_SCALINGS, ids=[f"{m}-{k}" for m, _, k in MULTICLASS_SCALINGS])
def test_multiclass_scalings_sql_in_duckdb_equal_calengine_on_pendigits(pendigits, method, cols, kind):
    """One softmax over the whole score vector (logits as one-vs-rest log-odds turned into the log of
    the model's softmax; probabilities as their logs; Dirichlet's log-softmax of decision values),
    within 1e-12 of calengine.  The full forms take the rows and scores of digits 0-3 only: on ten
    classes their 110 parameters run L-BFGS to its 450-round cap (20 s here) whatever the penalty."""
    cal, test = pendigits
    k, params = 10, {}
    if method in ("matrix_scaling", "dirichlet"):
        k, params = 4, {"reg_lambda": 1.0, "reg_mu": 1.0}
        cal, test = cal[cal["label"] < k], test[test["label"] < k]
    names = [f"{cols}_{d}" for d in range(k)]
    model = calengine.calibrate_scores(cal[names + ["label"]], "label", names, method=method, method_params=params,
                                       score_kind=kind)
    assert model.members[0].scales_matrix and model.n_classes == k
    from calengine.export.sql import model_sql

    _check(model, model_sql(model), test[names + ["label"]].reset_index(drop=True), exact=False)


def _generated(rng) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A calibration table of decision values with heavy ties, and a table to score that holds every
    calibration score (block boundaries), scores between and beyond them, and huge magnitudes."""
    s = np.round(rng.normal(size=3000), 1)
    y = (rng.random(3000) < 1 / (1 + np.exp(-2 * s))).astype(np.int64)
    grid = np.concatenate([np.unique(s), np.unique(s) + 0.05, [-1e300, -800.0, -40.0, 40.0, 800.0, 1e300, 0.0]])
    return pd.DataFrame({"s": s, "y": y}), pd.DataFrame({"s": grid, "id": np.arange(grid.size)})


@pytest.mark.parametrize("method,params,exact", [("isotonic", {}, True), ("isotonic", {"interpolation": "linear"}, True),
                                                 ("sigmoid", {}, False), ("beta", {}, False), ("venn_abers", {}, True),
                                                 ("binning", {"n_bins": 20}, True), ("binning", {"n_bins": 20, "boundary": "lower"}, True),
                                                 ("rocch", {}, True), ("matrix_scaling", {}, False)])
def test_generated_table_with_ties_and_extremes(method, params, exact):
    cal, test = _generated(np.random.default_rng(7))
    model = calengine.calibrate_scores(cal, "y", "s", method=method, method_params=params, score_kind="decision")
    from calengine.export.sql import model_sql

    _check(model, model_sql(model), test, exact)


def test_rows_calengine_refuses_get_null_and_other_rows_are_unaffected(adult):
    cal, test = adult
    model = calengine.calibrate_scores(cal[["s", "y"]], "y", "s", method="isotonic")
    from calengine.export.sql import model_sql

    df = pd.DataFrame({"s": [0.2, np.nan, 1.5, -0.1, 1.0 + 1e-10, 0.0, None]}, dtype="float64")
    got = _run_sql(model_sql(model), df)
    assert got["p_1"].isna().tolist() == [False, True, True, True, False, False, True]
    ok = df.loc[[0, 4, 5]]
    assert np.array_equal(got.loc[[0, 4, 5], "p_1"].to_numpy(), model.predict_frame(ok)["p_1"].to_numpy())


def test_cli_export_is_deterministic_names_the_model_hash_and_matches_calengine_score(tmp_path, cli, adult):
    """End to end: fit and score with the CLI, export, run the file in DuckDB over the same Parquet."""
    cal, test = adult
    cal[["s", "y"]].to_parquet(tmp_path / "cal.parquet")
    test[["s", "y"]].to_parquet(tmp_path / "test.parquet")
    assert cli("fit", tmp_path / "cal.parquet", "--target", "y", "--scores", "s", "--method", "isotonic",
               "--output", tmp_path / "m").returncode == 0
    assert cli("score", tmp_path / "m", tmp_path / "test.parquet", "--output", tmp_path / "scored").returncode == 0
    outs = []
    for name in ("a.sql", "b.sql"):
        r = cli("export", tmp_path / "m", "--format", "sql", "--dialect", "duckdb", "--output", tmp_path / name)
        assert r.returncode == 0, r
        outs.append((tmp_path / name).read_bytes())
    assert outs[0] == outs[1]
    manifest = json.loads((tmp_path / "a.sql.manifest.json").read_text())
    model_manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["model_content_hash"] == model_manifest["content_hash"]
    import hashlib

    assert manifest["sha256"] == hashlib.sha256(outs[0]).hexdigest()
    con = duckdb.connect()
    con.execute(f"CREATE VIEW input AS SELECT * FROM read_parquet('{tmp_path / 'test.parquet'}')")
    got = con.execute(outs[0].decode()).df()
    want = pd.read_parquet(tmp_path / "scored")
    assert np.array_equal(got["p_>50K" if "p_>50K" in got else "p_1"].to_numpy(), want["p_1"].to_numpy())
    # refusing to overwrite, and a learner SQL cannot express, are one line each
    assert_one_line_error(cli("export", tmp_path / "m", "--format", "sql", "--output", tmp_path / "a.sql"),
                          "already exists", "--overwrite")


def test_dialects_differ_only_in_quoting_and_postgres_text_runs_in_duckdb(adult):
    cal, test = adult
    model = calengine.calibrate_scores(cal[["z", "y"]], "y", "z", method="sigmoid", score_kind="decision")
    from calengine.export.sql import model_sql

    pg, spark = model_sql(model, "postgres", table="scores"), model_sql(model, "spark", table="scores")
    assert "DOUBLE PRECISION" in pg and "`scores`" in spark and '"' not in spark.split("\n", 1)[1]
    con = duckdb.connect()
    con.register("scores", test[["z", "y"]])
    np.testing.assert_allclose(con.execute(pg).df()["p_1"], model.predict_frame(test)["p_1"], rtol=0, atol=1e-12)


def test_what_sql_cannot_express_is_refused_in_one_line(tmp_path, cli, adult):
    from calengine.export.sql import model_sql

    cal, _ = adult
    model = calengine.calibrate_scores(cal[["s", "y"]], "y", "s", method="none")
    with pytest.raises(CalengineError, match="no SQL form.*calengine score"):
        model_sql(model)
    _fit_saved_loaded(tmp_path, pd.DataFrame({"a": np.arange(200.0), "y": np.arange(200) % 2}), "y", learner="knn",
                      method="sigmoid")
    assert_one_line_error(cli("export", tmp_path / "m", "--format", "sql", "--output", tmp_path / "x.sql"),
                          "no SQL form", "calengine score")
    assert not (tmp_path / "x.sql").exists() and not (tmp_path / "x.sql.manifest.json").exists()
    with pytest.raises(CalengineError, match="rename the score columns"):
        model_sql(calengine.calibrate_scores(pd.DataFrame({"p_1": cal["s"], "y": cal["y"]}), "y", "p_1", method="sigmoid"))
    assert_one_line_error(cli("export", tmp_path / "m", "--format", "sql", "--dialect", "oracle", "--output",
                              tmp_path / "x.sql"), "dialect")


def test_a_logistic_regression_ensemble_on_adults_columns_scores_as_calengine_does(tmp_path):
    """A fitted learner in SQL: Adult's numeric and categorical columns encoded as calengine encodes
    them (a missing number gets the training median, a missing category '<missing>', an unseen one
    '<other>'), five logistic regressions' probabilities, their isotonic maps and the members' mean:
    bit-identical to calengine, since the dot product is summed in the learner's order."""
    train = pd.read_parquet(ADULT / "train.parquet").iloc[:2000]
    model = _fit_saved_loaded(tmp_path, train, "class", learner="logistic_regression", method="isotonic", cv=2)
    assert len(model.members) == 2
    from calengine.export.sql import model_sql

    _check(model, model_sql(model), _adult_test_with_holes(2000), exact=True)



def _fit_saved_loaded(tmp_path, data: pd.DataFrame, target: str, **options):
    """A model fitted in this process as ``calengine fit`` fits it, saved and loaded back (the path
    ``calengine export`` takes)."""
    from calengine.model.artifact import save_model

    data.to_parquet(tmp_path / "train.parquet")
    save_model(calengine.fit_table(str(tmp_path / "train.parquet"), target, workers=1, **options), tmp_path / "m")
    return calengine.load_model(tmp_path / "m")


def _adult_test_with_holes(rows: int) -> pd.DataFrame:
    test = pd.read_parquet(ADULT / "test.parquet").iloc[:rows].drop(columns="class")
    test = test.astype({"age": "float64", "workclass": object})
    test.loc[0:20, "age"] = np.nan
    test.loc[21:40, "workclass"] = None
    test.loc[41:60, "occupation"] = "astronaut"
    return test


@pytest.mark.parametrize("learner,method,exact", [("linear_svm", "isotonic", True), ("gaussian_nb", "isotonic", True),
                                                  ("bernoulli_nb", "sigmoid", False), ("multinomial_nb", "isotonic", True)])
def test_linear_svm_and_naive_bayes_on_adults_columns_score_as_calengine_does(tmp_path, learner, method, exact):
    """The other learners SQL expresses, on Adult's columns with missing and unseen values: the SVM's
    standardised margin, Gaussian NB's log-likelihoods, Bernoulli's standardising and binarising,
    multinomial's clipped min-max scaling, each summed in the learner's order and normalised by the
    max-shifted log-sum-exp, so the isotonic maps give calengine's probabilities bit for bit."""
    model = _fit_saved_loaded(tmp_path, pd.read_parquet(ADULT / "train.parquet").iloc[:1500], "class",
                              learner=learner, method=method, cv=2)
    from calengine.export.sql import model_sql

    _check(model, model_sql(model), _adult_test_with_holes(1500), exact=exact)


MULTICLASS_LEARNERS = [("logistic_regression", "isotonic", True), ("linear_svm", "sigmoid", False),
                       ("gaussian_nb", "isotonic", True), ("bernoulli_nb", "sigmoid", False),
                       ("multinomial_nb", "isotonic", True)]


@pytest.mark.parametrize("learner,method,exact", MULTICLASS_LEARNERS)
def test_multiclass_learners_on_pendigits_score_as_calengine_does(tmp_path, learner, method, exact):
    """Ten classes: a multinomial logistic regression (its logits' max-shifted softmax), a linear SVM
    (ten one-vs-rest margins) and the three naive Bayes (ten joint log-likelihoods, the row's maximum
    subtracted before the log-sum-exp), one calibrator per class, the normalize combiner and two
    members' mean; isotonic bit for bit, sigmoid within 1e-12."""
    df = pd.read_parquet(PENDIGITS)
    model = _fit_saved_loaded(tmp_path, df.iloc[:1200], "class", learner=learner, method=method, cv=2)
    assert model.n_classes == 10 and len(model.members) == 2 and model.combiner.name == "normalize"
    from calengine.export.sql import model_sql

    _check(model, model_sql(model), df.iloc[1200:2400].drop(columns="class").reset_index(drop=True), exact=exact)


def test_segment_and_mcgrad_models_are_refused_in_one_line_naming_what_scores_them(tmp_path):
    """A --by model (per-segment maps blended with the global one) and an MCGrad model both wrap a
    score-column member: SQL and ONNX refuse them saying which kind of model it is (not 'learner
    score_columns'), and the Arrow function the refusal names does score them as calengine does."""
    import pyarrow as pa

    from calengine.runtime.client import dask_client
    from calengine.export.sql import model_sql
    from calengine.fit.table import TableSpec, fit_table
    from calengine.fit.training import FitConfig

    rng = np.random.default_rng(3)
    s = rng.random(1200)
    df = pd.DataFrame({"s": s, "g": rng.choice(["a", "b"], 1200), "y": (rng.random(1200) < s).astype(np.int64)})
    df.to_parquet(tmp_path / "t.parquet")
    spec = TableSpec(str(tmp_path / "t.parquet"), "y", scores=("s",), by="g")
    quick = {"rounds": 1, "early_stopping": False, "trees": 3, "learning_rate": 0.3}
    with dask_client(workers=1) as client:
        models = {"per segment": fit_table(client, spec, FitConfig(method="isotonic")),
                  "MCGrad": fit_table(client, spec, FitConfig(method="mcgrad", method_params=quick))}
    onnx = pytest.importorskip("calengine.export.onnx")
    for what, model in models.items():
        for export, fmt in ((model_sql, "SQL"), (onnx.model_onnx, "ONNX")):
            with pytest.raises(CalengineError, match=f"{what}.*has no {fmt} export; score it with calengine score,"
                                                     " --format mlflow or calengine.arrow_udf") as err:
                export(model)
            assert "\n" not in str(err.value) and "score_columns" not in str(err.value)
        batch = pa.RecordBatch.from_pandas(df[["s", "g"]].iloc[:50], preserve_index=False)
        got = calengine.arrow_udf(model)(batch).column("p_1").to_numpy()
        assert np.array_equal(got, model.predict_frame(df.iloc[:50])["p_1"].to_numpy())


# Names and labels from all of Unicode, control characters and line separators included (not NUL, which
# the export refuses, nor lone surrogates, which no Parquet file or UTF-8 text holds).
_ANY_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=8)


def _one_statement(sql: str, dialect: str) -> None:
    """The text is one statement by the dialect's own parser: DuckDB's, PostgreSQL's (pglast wraps
    libpg_query) and Spark's as sqlglot reads it; and its comment line holds printable ASCII only."""
    first, _ = sql.split("\n", 1)
    assert first.startswith("-- ") and all(" " <= ch <= "~" for ch in first), first
    if dialect == "duckdb":
        assert len(duckdb.extract_statements(sql)) == 1
    elif dialect == "postgres":
        assert len(pytest.importorskip("pglast").parse_sql(sql)) == 1
    else:
        assert len([s for s in pytest.importorskip("sqlglot").parse(sql, read="spark") if s is not None]) == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(score=_ANY_TEXT, labels=st.lists(_ANY_TEXT, min_size=2, max_size=2, unique=True), seed=st.integers(0, 2**16))
def test_names_and_labels_from_any_text_never_change_the_sqls_structure(score, labels, seed):
    """Issue 42 §1: a score column's name and the class labels land in the header comment (escaped to
    printable ASCII) and in quoted identifiers; whatever they hold, every dialect's text stays one
    statement, and DuckDB's run of it returns calengine's probabilities bit for bit."""
    assume(score != "y" and not {f"p_{c}" for c in labels} & {score})
    rng = np.random.default_rng(seed)
    s = rng.random(300).round(2)
    cal = pd.DataFrame({score: s, "y": np.where(rng.random(300) < s, labels[1], labels[0])})
    assume(cal["y"].nunique() == 2)
    model = calengine.calibrate_scores(cal, "y", [score], method="isotonic")
    from calengine.export.sql import model_sql

    for dialect in ("duckdb", "postgres", "spark"):
        _one_statement(model_sql(model, dialect), dialect)
    _check(model, model_sql(model), cal[[score]].iloc[:50], exact=True)


def test_a_newline_in_a_name_cannot_run_a_second_statement(tmp_path, cli, adult):
    """The issue's case end to end: a score column named ``s⏎DROP TABLE victim;⏎--`` (and ``\\r\\n``), fitted
    and exported with the CLI; running the file in DuckDB leaves the victim table in place."""
    cal, _ = adult
    for i, name in enumerate(["s\nDROP TABLE victim;\n--", "s\r\nDROP TABLE victim;\r\n--", "s\rDROP TABLE victim;\r--"]):
        cal[["s", "y"]].rename(columns={"s": name}).to_parquet(tmp_path / f"cal{i}.parquet")
        r = cli("fit", tmp_path / f"cal{i}.parquet", "--target", "y", "--scores", name, "--method", "isotonic",
                "--output", tmp_path / f"m{i}")
        assert r.returncode == 0, r.stderr
        for dialect in ("duckdb", "postgres", "spark"):
            out = tmp_path / f"m{i}.{dialect}.sql"
            assert cli("export", tmp_path / f"m{i}", "--format", "sql", "--dialect", dialect,
                       "--output", out).returncode == 0
            _one_statement(out.read_bytes().decode(), dialect)  # not read_text: it turns \r into \n
        con = duckdb.connect()
        con.execute("CREATE TABLE victim AS SELECT 42 AS x")
        con.register("input", cal[["s"]].rename(columns={"s": name}))
        got = con.execute((tmp_path / f"m{i}.duckdb.sql").read_bytes().decode()).df()
        assert con.execute("SELECT x FROM victim").fetchall() == [(42,)]
        assert got.shape[0] == len(cal)


def test_a_nul_in_a_name_or_category_is_refused_in_one_line(tmp_path):
    """No dialect's quoting holds NUL (PostgreSQL refuses it in a query; DuckDB ends the name there, so
    two names could become one): the export names the string instead of writing it."""
    from calengine.export.sql import model_sql

    rng = np.random.default_rng(0)
    s = rng.random(300)
    model = calengine.calibrate_scores(pd.DataFrame({"s\x00t": s, "y": (rng.random(300) < s).astype(int)}), "y",
                                       ["s\x00t"], method="isotonic")
    with pytest.raises(CalengineError, match="NUL character") as err:
        model_sql(model)
    assert "\n" not in str(err.value)
    df = pd.DataFrame({"c": rng.choice(["a", "b\x00c"], 300), "y": (rng.random(300) < 0.5).astype(int)})
    model = _fit_saved_loaded(tmp_path, df, "y", learner="logistic_regression", method="sigmoid", cv=2)
    with pytest.raises(CalengineError, match="a category holds a NUL"):
        model_sql(model)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(column=_ANY_TEXT, values=st.lists(_ANY_TEXT, min_size=2, max_size=3, unique=True))
def test_a_categorical_features_name_and_values_from_any_text_stay_data(column, values):
    """A fitted learner's categorical column: its name is a quoted identifier and its categories string
    literals (quotes doubled; Spark's backslash escapes); one statement in every dialect, and DuckDB's
    run returns calengine's probabilities."""
    import tempfile

    assume(column != "y" and not column.startswith("p_"))
    rng = np.random.default_rng(1)
    c = rng.choice(values, 400)
    df = pd.DataFrame({column: c, "y": (rng.random(400) < np.where(c == values[0], 0.7, 0.3)).astype(np.int64)})
    from calengine.export.sql import model_sql

    with tempfile.TemporaryDirectory() as tmp:
        model = _fit_saved_loaded(Path(tmp), df, "y", learner="logistic_regression", method="isotonic", cv=2)
    for dialect in ("duckdb", "postgres", "spark"):
        _one_statement(model_sql(model, dialect), dialect)
    _check(model, model_sql(model), df[[column]].iloc[:40], exact=True)
