"""The conformance kit (calengine.testing) on every built-in plugin, and on deliberately broken plugins:
each gap the kit used to let through has a plugin here that breaks exactly that part of the contract and
must now be caught, with a sentence naming it."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest
from scipy import sparse

import calengine
from calengine import testing
from calengine.base import Calibrator, Combiner, Learner, SklearnLearner
from calengine.plugins import load_plugins
from cli_helpers import contract_plugins

_PLUGINS = load_plugins(strict=False)
cp = contract_plugins()  # the issue-41 plugins, each breaking one rule (tests/fixtures/contract_plugins)
_SLOW = {"sklearn"}  # HistGradientBoosting's default 100 iterations, many fits: about a minute here


def _cases(kind: str):
    cases = []
    for name in sorted(_PLUGINS.classes[kind]):
        if getattr(_PLUGINS.classes[kind][name], "prefit", False):
            # score_columns (calengine's own): a prefit learner is never fitted, so the kit's fit checks
            # do not apply; tests/adapters/test_score_columns.py tests it end to end
            cases.append(pytest.param(name, marks=pytest.mark.skip(reason="a prefit learner is never fitted")))
        else:
            cases.append(pytest.param(name, marks=pytest.mark.slow) if name in _SLOW else name)
    return cases


@pytest.mark.parametrize("name", _cases("learners"))
def test_every_installed_learner_conforms(name):
    # one OpenMP thread: under pytest-xdist every core already runs a test module, and HistGradientBoosting's
    # default OpenMP team oversubscribed them (the sklearn case took 491 s of its 600 s timeout at load 13-17)
    from threadpoolctl import threadpool_limits

    with warnings.catch_warnings(), threadpool_limits(limits=1, user_api="openmp"):
        warnings.simplefilter("ignore")  # convergence warnings of tiny fits are not the point here
        testing.check_learner(_PLUGINS.classes["learners"][name])


@pytest.mark.parametrize("name", _cases("calibrators"))
def test_every_installed_calibrator_conforms(name):
    testing.check_calibrator(_PLUGINS.classes["calibrators"][name])


@pytest.mark.parametrize("name", _cases("combiners"))
def test_every_installed_combiner_conforms(name):
    testing.check_combiner(_PLUGINS.classes["combiners"][name])


def test_every_builtin_module_passes_check_plugin_module():
    # the learners module is covered class by class above (and includes the slow sklearn learner)
    for module in ("calengine_builtins.calibrators", "calengine_builtins.combiners"):
        testing.check_plugin_module(importlib.import_module(module))


def test_builtin_entry_points_cover_every_registered_class():
    """The parametrisations above come from the entry points: make sure they really found the
    built-ins (an empty list would make those tests pass vacuously)."""
    assert {"decision_tree", "gaussian_nb", "knn", "mlp"} <= set(_PLUGINS.classes["learners"])
    assert {"isotonic", "sigmoid", "beta"} <= set(_PLUGINS.classes["calibrators"])
    assert {"normalize", "coupling", "wu_lin_weng"} <= set(_PLUGINS.classes["combiners"])


# ------------------------------------------------------------------------------------------ broken plugins


class _MeanLearner(Learner):
    """Nearest class mean, weighted: the honest baseline the broken learners below are made from."""

    name = "kit_mean"
    score_kind = "decision"

    def fit(self, X, y, sample_weight=None):
        w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, float)
        X = X.toarray() if sparse.issparse(X) else X
        k = int(y.max()) + 1
        self.means_ = np.array([np.average(X[y == c], axis=0, weights=w[y == c]) for c in range(k)])
        return self

    def score(self, X):
        X = X.toarray() if sparse.issparse(X) else np.asarray(X)
        d = -((X[:, None, :] - self.means_[None]) ** 2).sum(axis=2)
        return d[:, 1] - d[:, 0] if d.shape[1] == 2 else d

    def to_state(self):
        return {"means": self.means_}

    def from_state(self, state):
        self.means_ = state["means"]
        return self


class _Honest(_MeanLearner):
    accepts_sparse = True


def test_the_honest_baseline_passes_with_weights_and_sparse_input():
    testing.check_learner(_Honest)


class _IgnoresWeights(_MeanLearner):
    accepts_sample_weight = True

    def fit(self, X, y, sample_weight=None):
        return super().fit(X, y)  # drops the weights on the floor


def test_learner_that_ignores_declared_weights_is_caught():
    with pytest.raises(AssertionError, match="ignores sample_weight"):
        testing.check_learner(_IgnoresWeights)


class _ReadmeMeanDifference(Learner):
    """The README's example, dense-only, with no ``accepts_sparse`` (False by default)."""

    name = "mean_difference"
    score_kind = "decision"

    def fit(self, X, y, sample_weight=None):
        w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, float)
        k = int(y.max()) + 1
        self.means_ = np.array([np.average(X[y == c], axis=0, weights=w[y == c]) for c in range(k)])
        return self

    def score(self, X):
        d = -((X[:, None, :] - self.means_[None]) ** 2).sum(axis=2)
        return d[:, 1] - d[:, 0] if d.shape[1] == 2 else d

    def to_state(self):
        return {"means": self.means_}

    def from_state(self, state):
        self.means_ = state["means"]
        return self


class _ClaimsSparse(_ReadmeMeanDifference):
    accepts_sparse = True


def test_learner_that_declares_sparse_but_crashes_on_csr_is_caught():
    with pytest.raises(AssertionError, match="accepts_sparse is True but fit/score on a scipy CSR"):
        testing.check_learner(_ClaimsSparse)
    # declaring the truth (the default) passes: the engine refuses text columns for it instead
    testing.check_learner(_ReadmeMeanDifference)


class _SparseDiffers(_MeanLearner):
    accepts_sparse = True

    def score(self, X):
        s = super().score(X)
        return s + 1.0 if sparse.issparse(X) else s


def test_learner_whose_csr_scores_differ_from_dense_is_caught():
    with pytest.raises(AssertionError, match="CSR matrix differ"):
        testing.check_learner(_SparseDiffers)


class _Uniform(Combiner):
    name = "uniform"

    def combine(self, R, M, counts=None):
        return np.full((R.shape[0], M.shape[0]), 1.0 / M.shape[0])


def test_combiner_returning_uniform_rows_is_caught():
    with pytest.raises(AssertionError, match="not exact on consistent estimates for the one-vs-all"):
        testing.check_combiner(_Uniform)


class _NormalizeEverywhere(Combiner):
    """Normalises the columns as if the matrix were one-vs-all: right there, wrong on all-pairs."""

    name = "normalize_everywhere"

    def combine(self, R, M, counts=None):
        k = M.shape[0]
        out = np.ones((R.shape[0], k))
        out[:, : min(k, R.shape[1])] = R[:, :k]
        return out / out.sum(axis=1, keepdims=True)


def test_combiner_exact_on_one_matrix_but_not_another_is_caught():
    with pytest.raises(AssertionError, match="all-pairs"):
        testing.check_combiner(_NormalizeEverywhere)


class _Bump(Calibrator):
    """A documented non-monotone calibrator: probability highest for scores near the training median."""

    name = "bump"
    monotone = False

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        scores = np.asarray(scores, float)
        w = np.ones(len(scores)) if sample_weight is None else np.asarray(sample_weight, float)
        self.centre_ = float(np.average(scores, weights=w))
        self.scale_ = float(np.sqrt(np.average((scores - self.centre_) ** 2, weights=w)) or 1.0)
        return self

    def predict(self, scores):
        z = (np.asarray(scores, float) - self.centre_) / self.scale_
        return np.exp(-0.5 * z * z)


def test_non_monotone_calibrator_declared_as_such_passes_the_kit_and_check_plugin_module():
    testing.check_calibrator(_Bump)
    module = _plugin_module("kit_bump_plugin", calibrators=(_Bump,))
    testing.check_plugin_module(module)


class UndeclaredBump(_Bump):
    name = "undeclared_bump"
    monotone = True


def test_non_monotone_calibrator_that_does_not_say_so_is_caught():
    with pytest.raises(AssertionError, match="declare monotone = False"):
        testing.check_calibrator(UndeclaredBump)
    with pytest.raises(AssertionError, match="declare monotone = False"):
        testing.check_plugin_module(_plugin_module("kit_undeclared", calibrators=(UndeclaredBump,)))
    # the caller may still waive it for a whole module
    testing.check_plugin_module(_plugin_module("kit_undeclared2", calibrators=(UndeclaredBump,)), monotone=False)


def _plugin_module(name: str, learners=(), calibrators=(), combiners=()):
    import types

    mod = types.ModuleType(name)

    @calengine.hookimpl
    def register_learners(register):
        for c in learners:
            register(c)

    @calengine.hookimpl
    def register_calibrators(register):
        for c in calibrators:
            register(c)

    @calengine.hookimpl
    def register_combiners(register):
        for c in combiners:
            register(c)

    mod.register_learners, mod.register_calibrators, mod.register_combiners = (
        register_learners, register_calibrators, register_combiners,
    )
    return mod


# ------------------------------------------------------------------------------------------ public SklearnLearner


class _ScaledLogistic(SklearnLearner):
    """What a plugin author writes: a scaler in front of the classifier, nothing else."""

    name = "scaled_logistic"
    score_kind = "proba"
    # BLAS rounds a lone row and a batch differently in the last bits: scored in fixed-shape blocks, a
    # row gets the same bits in any batch (the kit checks it; the third pass below)
    score_block_rows = 1024

    def __init__(self, C: float = 1.0):
        self.C = C

    def make_estimator(self):
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(StandardScaler(), LogisticRegression(C=self.C, tol=1e-10, max_iter=10_000))


def test_public_sklearn_learner_weights_every_pipeline_step():
    """Weight 2 = this row twice, with a scaler in front: only true if the scaler gets the weights too
    (the public class used to give them to the last step only)."""
    X, y = testing.make_data(n=120, n_features=4)
    X[:, 0] *= 50  # a scale the weighted and the unweighted scaler disagree on
    w = np.tile([1, 3, 1, 2], 30)
    weighted = _ScaledLogistic().fit(X, y, sample_weight=w.astype(float)).score(X)
    duplicated = _ScaledLogistic().fit(np.repeat(X, w, axis=0), np.repeat(y, w)).score(X)
    np.testing.assert_allclose(weighted, duplicated, atol=1e-6)
    testing.check_learner(_ScaledLogistic)


class _SparseScaled(_ScaledLogistic):
    name = "sparse_scaled"
    accepts_sparse = True

    def make_estimator(self, sparse_input=False):
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(StandardScaler(with_mean=not sparse_input), LogisticRegression())


def test_public_sklearn_learner_refuses_csr_unless_declared_and_builds_a_sparse_pipeline_when_asked():
    from calengine.errors import DataError

    X, y = testing.make_data(n=80, n_features=3)
    with pytest.raises(DataError, match="scaled_logistic.*accepts_sparse = True"):
        _ScaledLogistic().fit(sparse.csr_matrix(X), y)
    SparseScaled = _SparseScaled
    fitted = SparseScaled().fit(sparse.csr_matrix(X), y)
    assert fitted.estimator_.steps[0][1].with_mean is False
    assert SparseScaled().fit(X, y).estimator_.steps[0][1].with_mean is True
    testing.check_learner(SparseScaled)


# ------------------------------------------------------------------------------ reduction, weights, state, init


class _SignRate(Calibrator):
    """Weighted positive rate below and above the score midpoint, fitted as a one-round reduction: an
    honest reduction calibrator the broken ones below are made from."""

    name = "sign_rate"
    monotone = False

    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        request = self.reduction_start(score_kind)
        self.reduction_step(self.partial_stats(scores, y, sample_weight, request), request)
        return self

    def reduction_start(self, score_kind="decision"):
        return {"threshold": 0.5 if score_kind == "proba" else 0.0}

    def partial_stats(self, scores, y, sample_weight, request):
        s = np.asarray(scores, float)
        w = np.ones(len(s)) if sample_weight is None else np.asarray(sample_weight, float)
        side = (s > request["threshold"]).astype(int)
        return {"pos": np.bincount(side, weights=w * np.asarray(y), minlength=2),
                "tot": np.bincount(side, weights=w, minlength=2)}

    def merge_stats(self, a, b):
        return {"pos": a["pos"] + b["pos"], "tot": a["tot"] + b["tot"]}

    def reduction_step(self, stats, request):
        self.threshold_ = float(request["threshold"])
        self.rates_ = (stats["pos"] + 1.0) / (stats["tot"] + 2.0)
        return None

    def predict(self, scores):
        return self.rates_[(np.asarray(scores, float) > self.threshold_).astype(int)]


class _DropsSecondPiece(_SignRate):
    name = "drops_second_piece"

    def merge_stats(self, a, b):
        return a


class _CalIgnoresWeights(_SignRate):
    name = "cal_ignores_weights"

    def partial_stats(self, scores, y, sample_weight, request):
        return super().partial_stats(scores, y, None, request)


class _DictState(_SignRate):
    name = "dict_state"

    def to_state(self):
        return {"threshold_": self.threshold_, "rates_": {0: float(self.rates_[0]), 1: float(self.rates_[1])}}


class _WorkInInit(_SignRate):
    name = "work_in_init"

    def __init__(self, smoothing=1.0):
        self.smoothing = smoothing
        self.table = np.zeros(2)  # not a parameter: clone and set_params would lose it


def test_the_honest_reduction_calibrator_passes():
    testing.check_calibrator(_SignRate)


def test_a_reduction_whose_merge_drops_a_piece_is_caught():
    with pytest.raises(AssertionError, match="reduction protocol over .* pieces .* away from fit"):
        testing.check_calibrator(_DropsSecondPiece)


def test_a_calibrator_ignoring_sample_weight_is_caught():
    with pytest.raises(AssertionError, match="ignores sample_weight"):
        testing.check_calibrator(_CalIgnoresWeights)


def test_a_dict_in_state_is_caught_for_calibrators_and_learners():
    with pytest.raises(AssertionError, match=r"to_state\(\)\['rates_'\] is a dict"):
        testing.check_calibrator(_DictState)

    class_dict = type("_DictLearner", (_MeanLearner,), {
        "name": "dict_learner", "__module__": __name__, "__qualname__": "_DictLearner",
        "to_state": lambda self: {"means": {i: m for i, m in enumerate(self.means_)}},
    })
    with pytest.raises(AssertionError, match=r"to_state\(\)\['means'\] is a dict"):
        testing.check_learner(class_dict)


def test_init_that_sets_other_attributes_is_caught():
    with pytest.raises(AssertionError, match="__init__ sets table, which are not parameters"):
        testing.check_calibrator(_WorkInInit)


def test_a_plugin_class_defined_in_a_function_gets_one_sentence_not_a_pickle_error():
    class Local(_SignRate):
        name = "local_rate"

    with pytest.raises(AssertionError, match="defined inside a function.*importable module"):
        testing.check_calibrator(Local)
    ps = load_plugins(strict=False, extra_modules=(_plugin_module("kit_local", calibrators=(Local,)),),
                      entry_points=False)
    assert "local_rate" not in ps.classes["calibrators"]
    assert "defined inside a function" in ps.records[-1].error


def test_the_engine_refuses_a_reduction_that_disagrees_with_its_fit_once_per_process():
    """Users install plugins whose tests they never ran: the first reduction fit of the class in a
    process runs the probe, and the honest calibrator passes it (and is then cached)."""
    from calengine.errors import PluginError
    from calengine.reductions import agreement

    with pytest.raises(PluginError, match="calibrator 'drops_second_piece' .* reduction protocol .* away from its own fit"):
        agreement.check_reduction_once(_DropsSecondPiece(), "decision")
    agreement.check_reduction_once(_SignRate(), "decision")
    assert any(key[1] == "_SignRate" for key in agreement._CHECKED)
    assert not any(key[1] == "_DropsSecondPiece" for key in agreement._CHECKED)


def test_bad_parameter_values_are_refused_when_a_plugin_is_made():
    """Types from the defaults for every plugin, ranges from the plugin's own check_params."""
    from calengine.plugins import registry
    from calengine.errors import ParameterError

    with pytest.raises(ParameterError, match=r"combiner 'coupling' parameter 'tol' \(in combiner_params\) takes a number"):
        registry.make("combiners", "coupling", {"tol": "abc"}, _PLUGINS)
    with pytest.raises(ParameterError, match="coupling: tol must be a number in"):
        registry.make("combiners", "coupling", {"tol": -1.0}, _PLUGINS)
    with pytest.raises(ParameterError, match=r"learner 'gaussian_nb' parameter 'var_smoothing' \(in learner_params\) takes a number"):
        registry.make("learners", "gaussian_nb", {"var_smoothing": "abc"}, _PLUGINS)
    with pytest.raises(ParameterError, match=r"'standardize' \(in learner_params\) takes true or false"):
        registry.make("learners", "knn", {"standardize": 1}, _PLUGINS)
    with pytest.raises(ParameterError, match="n_bins must be"):
        registry.make("calibrators", "binning", {"n_bins": 0}, _PLUGINS)
    # values of the right kind pass; None passes everywhere; tuples where a number is the default
    registry.make("learners", "mlp", {"hidden_layer_sizes": (5, 5), "random_state": None}, _PLUGINS)
    registry.make("combiners", "k_minus_one", {"floor": 0}, _PLUGINS)


# ------------------------------------------------------------------------------------------ the third pass
# (issue 41) The matrix form of multiclass calibrators, batch independence of learners' scores and
# calibrators' predictions, and failures that name the rule broken rather than the plugin's own symptom.
# Each defect is a small plugin (tests/fixtures/contract_plugins) breaking exactly one rule; the honest
# plugin it is made from passes.


def test_the_honest_multiclass_calibrator_passes_the_whole_kit():
    testing.check_calibrator(cp.PriorShift)


def test_a_matrix_merge_that_drops_a_piece_is_caught_naming_the_reduction_contract():
    # its one-column form is right: only the matrix form can catch it
    with pytest.raises(AssertionError) as info:
        testing.check_calibrator(cp.MatrixDropsPiece)
    msg = str(info.value)
    assert "matrix form of the reduction protocol" in msg
    assert "breaks the reduction contract" in msg and "merge_stats must combine both of its arguments" in msg


def test_a_dropped_piece_that_leaves_one_class_names_the_contract_with_the_symptom_as_context():
    """Item 5 of the issue: the kit used to fail with the plugin's own "the calibration data hold only one
    class".  The rule comes first; the plugin's message is kept (and chained) as context."""
    with pytest.raises(AssertionError) as info:
        testing.check_matrix_calibrator(cp.MatrixDropsPiece, class_counts=(4,))
    msg = str(info.value)
    assert "breaks the reduction contract" in msg and "merge_stats must combine both of its arguments" in msg
    # the merged statistics lost every class but one: the plugin's symptom, kept as context and chained
    assert "raised DataError: the calibration data hold only one class" in msg
    assert "only one class" in str(info.value.__cause__)


class _OneColumnDropsToOneClass(cp.PriorShift):
    """Its merge keeps the first piece only, in both forms: the kit's first cutting puts a one-row piece
    first, so the merged statistics hold one class and the plugin's own step raises DataError."""

    name = "one_column_drops"
    multiclass = False

    def merge_stats(self, a, b):
        return a


def test_one_column_reduction_raising_its_symptom_is_reported_as_the_rule_broken():
    with pytest.raises(AssertionError) as info:
        testing.check_calibrator(_OneColumnDropsToOneClass)
    msg = str(info.value)
    assert "breaks the reduction contract" in msg
    assert "raised DataError: the calibration data hold only one class" in msg
    assert isinstance(info.value.__cause__, Exception) and "only one class" in str(info.value.__cause__)
    assert not msg.startswith("the calibration data")


def test_predict_rows_that_do_not_sum_to_one_are_caught_naming_the_multiclass_contract():
    with pytest.raises(AssertionError) as info:
        testing.check_calibrator(cp.RowsNotNormalised)
    msg = str(info.value)
    assert "a row of predict sums to" in msg and "not 1" in msg
    assert "multiclass calibrator contract" in msg and "probability vectors" in msg


class _MatrixIgnoresWeights(cp.PriorShift):
    name = "matrix_ignores_weights"

    def partial_stats(self, scores, y, sample_weight, request):
        if np.ndim(scores) == 2 and np.shape(scores)[1] > 2 and not request["binary"]:
            sample_weight = None
        return super().partial_stats(scores, y, sample_weight, request)


class _MatrixZeroWeightCounts(cp.PriorShift):
    """Counts a row of weight 0 in its class frequencies: weight 0 is not "row absent"."""

    name = "matrix_zero_weight_counts"

    def partial_stats(self, scores, y, sample_weight, request):
        st = super().partial_stats(scores, y, sample_weight, request)
        if not request["binary"] and sample_weight is not None:
            y = np.asarray(y).astype(np.int64)
            st["w_class"] = st["w_class"] + np.bincount(y[np.asarray(sample_weight) == 0], minlength=request["k"])
        return st


def test_matrix_weights_are_checked_as_for_one_column_calibrators():
    with pytest.raises(AssertionError, match="ignores sample_weight in the matrix form"):
        testing.check_matrix_calibrator(_MatrixIgnoresWeights)
    with pytest.raises(AssertionError, match="do not act as duplicated rows in the matrix form.*weight of 0"):
        testing.check_matrix_calibrator(_MatrixZeroWeightCounts)


def test_builtin_multiclass_scalings_pass_the_matrix_checks():
    from calengine.plugins import get_plugins

    classes = get_plugins().classes["calibrators"]
    scalings = sorted(n for n, c in classes.items() if getattr(c, "multiclass", False))
    assert {"temperature", "vector_scaling", "matrix_scaling", "dirichlet"} <= set(scalings)
    for name in scalings:
        testing.check_matrix_calibrator(classes[name])


# ------------------------------------------------------------------------------------------ batch independence


def test_a_learner_whose_scores_depend_on_the_batch_is_caught_naming_the_contract():
    with pytest.raises(AssertionError) as info:
        testing.check_learner(cp.BatchMeanLearner)
    msg = str(info.value)
    assert "score (2 classes) of a row depends on the other rows" in msg
    assert "batch-independence contract" in msg


class _BatchRankCalibrator(cp.PriorShift):
    """Its one-column predict ranks the scores within the call: a row alone always gets the same value."""

    name = "batch_rank"
    multiclass = False
    monotone = False

    def predict(self, scores):
        s = np.asarray(scores, dtype=float)
        ranks = np.argsort(np.argsort(s, kind="stable"), kind="stable")
        return (ranks + 0.5) / len(s)


def test_a_calibrator_whose_predict_depends_on_the_batch_is_caught():
    with pytest.raises(AssertionError, match=r"predict \(decision scores\) of a row depends on the other rows"):
        testing.check_calibrator(_BatchRankCalibrator)


class _BatchNormalisedMatrix(cp.PriorShift):
    """Matrix predict scaled by the batch's column means: only the matrix form shows it."""

    name = "batch_normalised_matrix"

    def predict(self, scores):
        P = super().predict(scores)
        if np.ndim(scores) == 1:
            return P
        Q = P / P.mean(axis=0)
        return Q / Q.sum(axis=1, keepdims=True)


def test_a_matrix_predict_that_depends_on_the_batch_is_caught():
    with pytest.raises(AssertionError, match=r"predict \(3 classes, decision scores\) of a row depends"):
        testing.check_matrix_calibrator(_BatchNormalisedMatrix)
