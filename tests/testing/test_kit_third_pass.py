"""The plugin kit's third pass (issue 41): the matrix form of multiclass calibrators, batch independence
of learners' scores and calibrators' predictions, and failures that name the rule broken rather than the
plugin's own symptom.  Each defect is a small plugin (tests/fixtures/contract_plugins) breaking exactly
one rule; the honest plugin it is made from passes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from calengine import testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "contract_plugins"))
import ce_contract_plugins as cp  # noqa: E402


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
