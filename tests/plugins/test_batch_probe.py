"""The engine's first-use batch-independence probe (:mod:`calengine.plugins.batch_probe`, issue 41): a
plugin whose scores depend on the rows scored with it is refused in one line naming the contract and the
plugin, from the CLI and from the Python API; proven built-ins are not probed, and scikit-learn models'
BLAS rounding passes."""

from __future__ import annotations

import numpy as np
import pytest

from cli_helpers import PIMA, assert_one_line_error, contract_plugins, run_cli

cp = contract_plugins()


def test_a_learner_whose_scores_depend_on_the_batch_is_refused_at_fit(contract_plugins_env, tmp_path):
    """The issue's learner: scores centred on the batch's own mean (0.55 between a row alone and in the
    full frame on Pima).  One line naming the contract and the plugin; nothing written."""
    r = run_cli("fit", PIMA, "--target", "class", "--learner", "batch_mean",
                "--method", "isotonic", "--output", tmp_path / "m", env=contract_plugins_env)
    assert_one_line_error(r, "learner 'batch_mean'", "calengine-contract-plugins 0.1",
                          "breaks the batch-independence contract", "each row alone")
    assert not (tmp_path / "m").exists()


def test_batch_dependence_is_refused_in_the_python_api_too(pima_xy):
    import calengine
    from calengine.errors import PluginError

    X, y = pima_xy[0].to_numpy(np.float64), pima_xy[1]
    with pytest.raises(PluginError, match="learner 'batch_mean' .* batch-independence contract"):
        calengine.CalibratedClassifier(learner=cp.BatchMeanLearner(), method="sigmoid").fit(X, y)


def test_the_probe_skips_proven_builtins_and_tolerates_blas_rounding_of_sklearn_models():
    from sklearn.linear_model import LogisticRegression

    from calengine.adapters.wrapped_estimator import EstimatorLearner
    from calengine.plugins.registry import make_learner
    from calengine.plugins import batch_probe

    assert not batch_probe.probed(make_learner("gaussian_nb"))
    assert batch_probe.probed(make_learner("sklearn"))  # by path: scikit-learn's code, not ours
    assert batch_probe.probed(cp.BatchMeanLearner())
    rng = np.random.default_rng(1)
    X = rng.normal(size=(64, 13)) * rng.uniform(0.3, 3e3, size=13)
    y = (X[:, 0] > 0).astype(int)
    learner = EstimatorLearner(LogisticRegression(max_iter=5000)).fit(X, y)
    batch_probe.check_rows_independent_once(learner, learner.score, X, "score")  # last bits only: accepted
