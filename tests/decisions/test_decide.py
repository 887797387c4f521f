"""Cost-sensitive decisions (issue 14, part 1): the rule against Elkan's threshold and the KDD'98 mailing
rule, a hand-computed 3-class case, column costs, one-line errors, the CLI on real Parquet, and the
mergeable evaluation totals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calengine.decisions import CostMatrix, DecisionAccumulator, decide, decide_indices, load_cost_matrix
from calengine.decisions.accumulate import GRID
from calengine.errors import DataError, ParameterError
from cli_helpers import assert_one_line_error

DATA = Path(__file__).resolve().parents[2] / "data"
PIMA = DATA / "pima.parquet"


def _two(p1) -> np.ndarray:
    p1 = np.asarray(p1, dtype=np.float64)
    return np.column_stack([1.0 - p1, p1])


# ------------------------------------------------------------------------------------------- the rule


@settings(max_examples=60, deadline=None)
@given(
    c00=st.floats(0, 10), c11=st.floats(0, 10), d10=st.floats(0.01, 50), d01=st.floats(0.01, 50),
    p=st.lists(st.floats(0, 1), min_size=1, max_size=40),
)
def test_two_classes_equal_elkans_threshold(c00, c11, d10, d01, p):
    """Elkan (2001): with C10 > C00 and C01 > C11, decide 1 iff p > p* = (C10-C00)/(C10-C00+C01-C11)."""
    C = [[c00, c11 + d01], [c00 + d10, c11]]  # C[decided][true]
    cm = CostMatrix.from_entries([0, 1], C)
    p_star = cm.bayes_threshold()
    assert p_star == pytest.approx(d10 / (d10 + d01))
    p = np.asarray(p)
    out = decide(_two(p), cm)
    clear = np.abs(p - p_star) > 1e-9  # rounding decides the rows at p* itself (tested exactly below)
    np.testing.assert_array_equal(out.decision[clear], (p > p_star)[clear].astype(int))
    E = _two(p) @ np.asarray(C, dtype=float).T
    np.testing.assert_allclose(out.expected_cost, E.min(axis=1), atol=1e-9)


def test_a_row_exactly_at_the_threshold_gets_the_first_class_despite_rounding():
    # 0.9 * 5 - 0.1 * 45 rounds to about -4e-16 in floats; the tie-break must still see a tie
    cm = load_cost_matrix({"classes": [0, 1], "benefits": [[0, 0], [-5, 45]]})
    assert cm.bayes_threshold() == pytest.approx(0.1)
    assert (_two([0.1]) @ cm.constant.T)[0, 1] != 0.0  # the rounding is real
    out = decide(_two([0.1, 0.1000001, 0.0999999]), cm)
    assert out.decision.tolist() == [0, 1, 0]
    assert decide(_two([0.5]), {"classes": ["a", "b"], "costs": [[0, 1], [1, 0]]}).decision.tolist() == ["a"]


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 500)), min_size=1, max_size=40))
def test_kdd98_mail_when_p_times_amount_exceeds_the_cost(rows):
    """Zadrozny & Elkan: mail when p(x) * amount(x) > 0.68; the expected benefit is then p*amount - 0.68."""
    p = np.array([r[0] for r in rows])
    amount = np.array([r[1] for r in rows])
    frame = pd.DataFrame({"amount": amount})
    cm = load_cost_matrix({"classes": [0, 1], "benefits": [[0, 0], [-0.68, "amount - 0.68"]]})
    assert cm.columns == ["amount"] and cm.bayes_threshold() is None
    out = decide(_two(p), cm, frame=frame)
    gain = p * amount - 0.68
    clear = np.abs(gain) > 1e-9
    np.testing.assert_array_equal(out.decision[clear], (gain > 0)[clear].astype(int))
    np.testing.assert_allclose(out.expected_cost, -np.maximum(gain, 0.0), atol=1e-9)


def test_three_classes_by_hand():
    # C[decided][true]; row 1: E = [0.2*4 + 0.3*8, 0.5*1 + 0.3*2, 0.5*6 + 0.2*3] = [3.2, 1.1, 3.6] -> b
    # row 2 (1/3 each): E = [4, 1, 3] -> b; row 3 (0.9, 0.1, 0): E = [0.4, 0.9, 5.7] -> a
    C = [[0, 4, 8], [1, 0, 2], [6, 3, 0]]
    P = np.array([[0.5, 0.2, 0.3], [1 / 3, 1 / 3, 1 / 3], [0.9, 0.1, 0.0]])
    out = decide(P, {"classes": ["a", "b", "c"], "costs": C})
    assert out.decision.tolist() == ["b", "b", "a"]
    assert out.index.tolist() == [1, 1, 0]
    np.testing.assert_allclose(out.expected_cost, [1.1, 1.0, 0.4])
    # the same matrix written in another class order, reordered to the model's
    shuffled = {"classes": ["c", "a", "b"], "costs": [[0, 6, 3], [8, 0, 4], [2, 1, 0]]}
    again = decide(P, shuffled, classes=["a", "b", "c"])
    assert again.decision.tolist() == ["b", "b", "a"]
    np.testing.assert_allclose(again.expected_cost, [1.1, 1.0, 0.4])


def test_column_expressions_parse_and_print_back():
    cm = load_cost_matrix({"classes": [0, 1], "costs": [["2*amount + 1 - cost", 0.5], ["-amount", ".5e1"]]})
    assert cm.columns == ["amount", "cost"]
    frame = pd.DataFrame({"amount": [3.0, 10.0], "cost": [1.0, 4.0]})
    y = np.array([0, 0])
    # cost of deciding 0 when true 0: 2*amount + 1 - cost -> [6, 17]; deciding 1 when true 0: -amount
    np.testing.assert_allclose(cm.cost_table(y, frame), [[6.0, -3.0], [17.0, -10.0]])
    assert cm.to_dict() == {"classes": [0, 1], "costs": [["2*amount - cost + 1", 0.5], ["-amount", 5.0]]}
    assert load_cost_matrix(cm.to_dict()).to_dict() == cm.to_dict()


def test_file_and_inline_json_and_yaml(tmp_path):
    spec = {"classes": [0, 1], "costs": [[0, 1], [5, 0]]}
    f = tmp_path / "c.json"
    f.write_text(json.dumps(spec))
    y = tmp_path / "c.yaml"
    y.write_text("classes: [0, 1]\ncosts:\n  - [0, 1]\n  - [5, 0]\n")
    for source in (f, str(f), json.dumps(spec), y):
        cm = load_cost_matrix(source)
        np.testing.assert_array_equal(cm.constant, [[0, 1], [5, 0]])


@pytest.mark.parametrize("spec, fragment", [
    ({"classes": [0, 1], "costs": [[0, 1], [5]]}, "must be a 2x2 list"),
    ({"classes": [0, 1], "costs": [[0, 1], [5, 0]], "benefits": [[0, 0], [0, 0]]}, "exactly one of"),
    ({"classes": [0, 1]}, "exactly one of"),
    ({"costs": [[0, 1], [5, 0]]}, '"classes"'),
    ({"classes": [0, 1], "cost": [[0, 1], [5, 0]]}, "unknown cost matrix key 'cost'"),
    ({"classes": [0, 1], "costs": [[0, 1], [5, "amount **2"]]}, "is not a number or a sum of terms"),
    ({"classes": [0, 1], "costs": [[0, 1], [5, True]]}, "use a number"),
    ({"classes": [0, 0], "costs": [[0, 1], [5, 0]]}, "repeat a class"),
    ({"classes": [0, 1], "costs": [[0, 1], [5, float("nan")]]}, "finite"),
])
def test_bad_matrices_are_one_line_parameter_errors(spec, fragment):
    with pytest.raises(ParameterError) as info:
        load_cost_matrix(spec)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_bad_sources(tmp_path):
    with pytest.raises(ParameterError, match="inline JSON is invalid"):
        load_cost_matrix('{"classes": [0, 1], "costs": [[0, 1], [5, 0]]')
    with pytest.raises(ParameterError, match="does not exist"):
        load_cost_matrix(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{classes: [0, 1]}")
    with pytest.raises(ParameterError, match="is not valid JSON"):
        load_cost_matrix(tmp_path / "bad.json")


def test_bad_classes_and_columns():
    cm = load_cost_matrix({"classes": [0, 1], "benefits": [[0, 0], [-1, "amount"]]})
    with pytest.raises(ParameterError, match=r"lacks \['2'\]"):
        cm.for_classes([0, 1, 2])
    with pytest.raises(DataError, match="lacks; add it"):
        decide(_two([0.5]), cm, frame=pd.DataFrame({"other": [1.0]}))
    with pytest.raises(DataError, match="1 missing or infinite"):
        decide(_two([0.5, 0.5]), cm, frame=pd.DataFrame({"amount": [1.0, np.nan]}))
    with pytest.raises(DataError, match="not numeric"):
        decide(_two([0.5]), cm, frame=pd.DataFrame({"amount": ["lots"]}))


# ------------------------------------------------------------------------------------------- accumulator


def test_accumulator_by_hand():
    cm = load_cost_matrix({"classes": [0, 1], "benefits": [[0, 0], [-5, 45]]})
    y = np.array([1, 0, 0, 1])
    P = _two([0.3, 0.2, 0.05, 0.01])  # calibrated: mails rows 0, 1 -> 45 - 5 = 40
    Q = _two([0.9, 0.01, 0.01, 0.5])  # raw: mails rows 0, 3 -> 90
    r = DecisionAccumulator(cm).add(y, P, Q).result()
    assert r["objective"] == "profit" and r["n"] == 4
    assert r["calibrated"] == {"total": 40.0, "mean": 10.0, "decided": {"0": 2, "1": 2}}
    assert r["raw"]["total"] == 90.0
    assert r["constant"] == {"0": {"total": 0.0, "mean": 0.0}, "1": {"total": 80.0, "mean": 20.0}}
    assert r["best_constant"]["class"] == 1 and r["oracle"]["total"] == 90.0
    assert r["bayes_threshold"] == pytest.approx(0.1)
    curve = dict(zip(r["threshold_curve"]["threshold"], r["threshold_curve"]["calibrated"]))
    assert curve[0.0] == 80.0 and curve[0.1] == 40.0 and curve[0.25] == 45.0 and curve[0.3] == 0.0
    assert r["best_threshold"]["raw"] == {"threshold": 0.01, "total": 90.0}


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 60), k=st.sampled_from([2, 3]), seed=st.integers(0, 10_000), cuts=st.integers(0, 5))
def test_merged_chunks_equal_the_whole(n, k, seed, cuts):
    rng = np.random.default_rng(seed)
    classes = list(range(k))
    costs = rng.uniform(-5, 5, (k, k)).round(2).tolist()
    costs[k - 1][0] = "2*w - 1"
    cm = CostMatrix.from_entries(classes, costs)
    y = rng.integers(0, k, n)
    P = rng.dirichlet(np.ones(k), n)
    Q = rng.dirichlet(np.ones(k), n)
    frame = pd.DataFrame({"w": rng.uniform(0, 10, n)})
    whole = DecisionAccumulator(cm).add(y, P, Q, frame).result(curve_points=None)
    bounds = np.unique(np.concatenate([[0, n], rng.integers(0, n + 1, cuts)]))
    parts = [DecisionAccumulator(cm).add(y[a:b], P[a:b], Q[a:b], frame.iloc[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    merged = parts[0]
    for p in parts[1:]:
        merged.merge(p)
    got = merged.result(curve_points=None)
    assert sorted(got) == sorted(whole)
    for key in ("calibrated", "raw", "best_constant", "oracle"):
        assert got[key]["total"] == pytest.approx(whole[key]["total"], abs=1e-9)
        assert got[key].get("decided") == whole[key].get("decided")
    if k == 2:
        np.testing.assert_allclose(got["threshold_curve"]["calibrated"], whole["threshold_curve"]["calibrated"], atol=1e-9)
        # and the curve is the direct computation at every grid threshold
        Cy = cm.cost_table(y, frame)
        direct = [np.where(P[:, 1] > t, Cy[:, 1], Cy[:, 0]).sum() for t in GRID]
        np.testing.assert_allclose(whole["threshold_curve"]["calibrated"], direct, atol=1e-9)
    # realised decisions are those of decide_indices
    d, _ = decide_indices(P, cm, frame)
    assert whole["calibrated"]["total"] == pytest.approx(cm.realised_costs(d, y, frame).sum(), abs=1e-9)


# ------------------------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """Pima with a seeded ``amount`` column (the per-row benefit a cost matrix may read)."""
    d = tmp_path_factory.mktemp("decisions")
    df = pd.read_parquet(PIMA)
    df["amount"] = np.random.default_rng(0).uniform(1, 20, len(df)).round(2)
    path = d / "pima_amount.parquet"
    df.to_parquet(path, index=False)
    return path


@pytest.fixture(scope="module")
def model(table, cli):
    out = table.parent / "model"
    r = cli("fit", table, "--target", "class", "--positive", "1", "--exclude", "amount", "--learner", "gaussian_nb",
            "--method", "isotonic", "--cv", "3", "--seed", "1", "--output", out, "--quiet")
    assert r.returncode == 0, r
    return out


COLUMN_MATRIX = json.dumps({"classes": [0, 1], "benefits": [[0, 0], [-3, "amount - 3"]]})


def _read(d: Path) -> pd.DataFrame:
    return pq.read_table(d).to_pandas()


@pytest.fixture(scope="module")
def decided(model, table, cli):
    """``calengine decide`` with the column cost matrix from a file, keeping the class and the amount."""
    spec = table.parent / "costs.json"
    spec.write_text(COLUMN_MATRIX)
    out = table.parent / "decided"
    r = cli("decide", model, table, "--cost-matrix", spec, "--keep", "class", "--output", out, "--quiet")
    assert r.returncode == 0, r
    return _read(out)


def test_cli_decide_and_score_with_cost_matrix(model, table, decided, cli, tmp_path):
    out = decided
    assert {"class", "p_0", "p_1", "prediction", "decision", "expected_cost"} <= set(out.columns)
    assert "amount" not in out.columns  # read for the costs, not written unless kept
    amount = pd.read_parquet(table)["amount"].to_numpy()
    gain = out["p_1"].to_numpy() * amount - 3.0
    clear = np.abs(gain) > 1e-9
    assert 0 < (gain > 0).sum() < len(gain)
    np.testing.assert_array_equal(out["decision"].to_numpy()[clear], (gain > 0)[clear].astype(int))
    np.testing.assert_allclose(out["expected_cost"], -np.maximum(gain, 0), atol=1e-9)
    assert out["decision"].dtype == out["prediction"].dtype

    r = cli("score", model, table, "--cost-matrix", COLUMN_MATRIX, "--keep", "class", "--keep", "amount",
            "--output", tmp_path / "sc", "--quiet")
    assert r.returncode == 0, r
    scored = _read(tmp_path / "sc")
    np.testing.assert_array_equal(scored["amount"], amount)
    pd.testing.assert_frame_equal(scored.drop(columns="amount"), out)
    r = cli("score", model, table, "--output", tmp_path / "plain", "--quiet")
    assert r.returncode == 0, r
    plain = _read(tmp_path / "plain")
    assert not {"decision", "expected_cost"} & set(plain.columns)
    np.testing.assert_array_equal(plain["p_1"], out["p_1"])


def test_cli_evaluate_with_cost_matrix(model, table, decided, cli, tmp_path):
    r = cli("evaluate", model, table, "--target", "class", "--cost-matrix", COLUMN_MATRIX, "--json",
            "--report", tmp_path / "rep", "--quiet")
    assert r.returncode == 0, r
    d = r.json()["decisions"]
    # the calibrated policy's profit, recomputed from the decisions the same model writes
    out = decided
    amount = pd.read_parquet(table)["amount"].to_numpy()
    positive = out["class"].to_numpy() == 1
    profit = np.where(out["decision"] == 1, np.where(positive, amount - 3, -3.0), 0.0)
    assert d["objective"] == "profit" and d["n"] == len(out)
    assert d["calibrated"]["total"] == pytest.approx(profit.sum())
    assert d["calibrated"]["decided"]["1"] == int((out["decision"] == 1).sum())
    assert d["oracle"]["total"] == pytest.approx(np.where(positive, np.maximum(amount - 3, 0), 0).sum())
    assert d["best_constant"]["total"] == pytest.approx(max(0.0, np.where(positive, amount - 3, -3).sum()))
    assert d["raw"] is not None and len(d["threshold_curve"]["threshold"]) == 101
    assert (tmp_path / "rep" / "model01-decisions-threshold.png").is_file()
    assert "<h3>Decisions</h3>" in (tmp_path / "rep" / "index.html").read_text()
    text = cli("evaluate", model, table, "--target", "class", "--cost-matrix", '{"classes":[0,1],"costs":[[0,5],[1,0]]}',
               "--quiet")
    assert text.returncode == 0, text
    assert "best constant (always" in text.stdout and "Bayes threshold p* = 0.1667" in text.stdout


@pytest.mark.parametrize("matrix, fragment", [
    ('{"classes": [0, 1], "costs": [[0, 1]]}', "must be a 2x2 list"),  # fails before the model loads
    ('{"classes": [0, 1], "costs": [[0, 1], [5, "income"]]}', "column 'income' is not in"),
    ('{"classes": ["yes", "no"], "costs": [[0, 1], [5, 0]]}', "do not match the model's classes"),
])
def test_cli_bad_cost_matrix_is_one_line(model, table, cli, tmp_path, matrix, fragment):
    r = cli("decide", model, table, "--cost-matrix", matrix, "--output", tmp_path / "out", "--quiet")
    assert_one_line_error(r, fragment)
    assert not (tmp_path / "out").exists()


def test_cli_decide_needs_a_cost_matrix_and_refuses_colliding_keep(model, table, cli, tmp_path):
    assert_one_line_error(cli("decide", model, table, "--output", tmp_path / "o"), "--cost-matrix")
    r = cli("score", model, table, "--cost-matrix", COLUMN_MATRIX, "--keep", "amount", "--keep", "decision",
            "--output", tmp_path / "o")
    assert_one_line_error(r, "--keep decision would collide")
