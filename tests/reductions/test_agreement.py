"""The engine's first-use agreement check at run time (issue 41): the matrix form of a multiclass
calibrator's reduction and the probability rows of its predict -- each defect a plugin installed as a user
would install it (a distribution with an entry point, tests/fixtures/contract_plugins), each refused in one
line naming the contract and the plugin, and the honest plugin fitting as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cli_helpers import assert_one_line_error, contract_plugins, run_cli

cp = contract_plugins()


@pytest.fixture(scope="module")
def logits_table(tmp_path_factory) -> Path:
    """A 4-file table of 10-class logits (the issue's case): score columns s_0..s_9, target cls."""
    root = tmp_path_factory.mktemp("logits")
    rng = np.random.default_rng(5)
    n, k = 4000, 10
    Z = rng.normal(size=(n, k)) * 1.5
    P = np.exp(2 * Z)
    P /= P.sum(axis=1, keepdims=True)
    y = (P.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1).clip(0, k - 1)
    df = pd.DataFrame(Z, columns=[f"s_{c}" for c in range(k)]).assign(cls=y)
    for i, part in enumerate(np.array_split(np.arange(n), 4)):
        df.iloc[part].to_parquet(root / f"part-{i}.parquet")
    return root


def _fit_scores(table, method, out, env):
    return run_cli("fit", table, "--target", "cls", "--scores", ",".join(f"s_{c}" for c in range(10)),
                   "--score-kind", "decision", "--method", method, "--output", out, env=env)


def test_the_honest_multiclass_plugin_fits_the_four_file_table_as_in_memory(logits_table, contract_plugins_env, tmp_path):
    r = _fit_scores(logits_table, "prior_shift", tmp_path / "m", contract_plugins_env)
    assert r.returncode == 0, r
    df = pd.concat(pd.read_parquet(f) for f in sorted(logits_table.glob("*.parquet")))
    S = df[[f"s_{c}" for c in range(10)]].to_numpy()
    want = cp.PriorShift().fit(S, df["cls"].to_numpy(), score_kind="decision").predict(S)
    scored = tmp_path / "scored.parquet"
    r = run_cli("score", tmp_path / "m", logits_table, "--output", scored, env=contract_plugins_env)
    assert r.returncode == 0, r
    got = pd.read_parquet(scored)[[f"p_{c}" for c in range(10)]].to_numpy()
    np.testing.assert_allclose(got, want, atol=1e-12, rtol=0)


def test_a_matrix_merge_that_drops_a_piece_is_refused_on_the_four_file_table(logits_table, contract_plugins_env, tmp_path):
    """It used to fit with exit 0, probabilities 0.018 away from the right ones."""
    r = _fit_scores(logits_table, "matrix_drops_piece", tmp_path / "m", contract_plugins_env)
    assert_one_line_error(r, "calibrator 'matrix_drops_piece'", "calengine-contract-plugins 0.1",
                          "matrix form of its reduction protocol", "breaks the reduction contract")
    assert not (tmp_path / "m").exists()


def test_predict_rows_that_do_not_sum_to_one_are_refused_not_renormalised(logits_table, contract_plugins_env, tmp_path):
    r = _fit_scores(logits_table, "rows_not_normalised", tmp_path / "m", contract_plugins_env)
    assert_one_line_error(r, "calibrator 'rows_not_normalised'", "breaks the multiclass calibrator contract",
                          "each row summing to 1): predict returned")
    assert not (tmp_path / "m").exists()


def test_a_model_whose_matrix_rows_do_not_sum_to_one_is_refused_at_predict():
    """The engine's own guard at every predict (a model saved before the probe, or a calibrator whose
    rows only go wrong on other scores): one PluginError line, never a silent renormalisation."""
    from calengine.errors import PluginError
    from calengine.model.calibrated import Member, RawMap

    rng = np.random.default_rng(0)
    S = rng.normal(size=(50, 3))
    y = np.arange(50) % 3
    cal = cp.RowsNotNormalised().fit(S, y, score_kind="decision")
    member = Member([_Identity()], [[0, 1, 2]], [cal], RawMap.fit(S, "decision"))
    with pytest.raises(PluginError, match="calibrator 'rows_not_normalised' .* breaks the multiclass calibrator contract"):
        member.column_probabilities(S)


class _Identity:
    name = "identity"
    score_kind = "decision"

    def score(self, X):
        return np.asarray(X)


def test_the_matrix_probe_is_run_in_process_and_cached_for_the_honest_plugin():
    from calengine.errors import PluginError
    from calengine.reductions import agreement

    agreement.check_reduction_once(cp.PriorShift(), "decision", n_classes=10)
    assert any(key[1] == "PriorShift" and key[-1] == 10 for key in agreement._CHECKED)
    with pytest.raises(PluginError, match="matrix form .* breaks the reduction contract"):
        agreement.check_reduction_once(cp.MatrixDropsPiece(), "proba", n_classes=5)
    # its one-column form is right: the one-column probe passes it
    agreement.check_reduction_once(cp.MatrixDropsPiece(), "proba")
