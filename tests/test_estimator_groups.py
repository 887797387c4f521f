"""``CalibratedClassifier.fit(..., groups=)``: groups reach the cv splitter, with scikit-learn's
metadata routing off and on, as ``CalibratedClassifierCV`` routes them.

The oracle is scikit-learn itself: the splitter's own ``split(X, y, groups)`` (what each member was
trained on), the same splits passed as an explicit list, and a hand-written loop over the outer folds
of ``cross_val_score``.
"""

from __future__ import annotations

import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.model_selection import (GroupKFold, GroupShuffleSplit, KFold, LeaveOneGroupOut, StratifiedGroupKFold,
                                     cross_val_score)
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.exceptions import UnsetMetadataPassedError

import calengine
from calengine.base import Learner
from calengine.errors import CalengineError, DataError, ParameterError


@pytest.fixture(scope="module")
def grouped():
    """300 rows in 9 groups of uneven size (12 to 60 rows), rows of a group scattered through X."""
    X, y = make_classification(300, 5, n_informative=3, random_state=3)
    rng = np.random.default_rng(7)
    sizes = np.array([12, 20, 25, 28, 30, 35, 40, 50, 60])
    g = rng.permutation(np.repeat(np.arange(9), sizes))
    return X, y, g


class _RowSpy(Learner):
    """Records which rows it was fitted on (their ids are feature 0); scores by feature 1."""

    name = "row_spy"
    score_kind = "decision"

    def fit(self, X, y, sample_weight=None):
        self.rows_ = np.sort(X[:, 0].astype(np.int64))
        return self

    def score(self, X):
        return X[:, 1]

    def to_state(self):
        return {"rows": self.rows_}

    def from_state(self, state):
        self.rows_ = state["rows"]
        return self


@pytest.mark.parametrize("splitter", [GroupKFold(4), LeaveOneGroupOut(), StratifiedGroupKFold(3),
                                      GroupShuffleSplit(3, test_size=0.3, random_state=0)],
                         ids=lambda s: type(s).__name__)
def test_each_member_trains_on_exactly_the_splitters_rows_so_no_group_is_split(grouped, splitter):
    X, y, g = grouped
    Xid = np.column_stack([np.arange(len(y)), X])
    clf = calengine.CalibratedClassifier(_RowSpy(), "sigmoid", cv=splitter).fit(Xid, y, groups=g)
    trained = [m.learners[0].rows_ for m in clf.model_.members]
    splits = list(splitter.split(Xid, y, g))
    assert len(trained) == len(splits) >= 3
    for rows, (train, test) in zip(trained, splits):
        np.testing.assert_array_equal(rows, np.sort(train))
        assert not set(g[rows]) & set(g[test])  # no group on both sides of a fold


@pytest.mark.parametrize("mode", ["ensemble", "refit"])
@pytest.mark.parametrize("splitter", [GroupKFold(4), LeaveOneGroupOut()], ids=lambda s: type(s).__name__)
def test_groups_give_the_model_of_the_splitters_own_splits_passed_as_a_list(grouped, splitter, mode):
    X, y, g = grouped
    listed = list(splitter.split(X, y, g))
    P = calengine.CalibratedClassifier(method="isotonic", mode=mode, cv=splitter).fit(X, y, groups=g).predict_proba(X)
    Q = calengine.CalibratedClassifier(method="isotonic", mode=mode, cv=listed).fit(X, y).predict_proba(X)
    np.testing.assert_array_equal(P, Q)
    # and the groups matter: calengine's own stratified folds give another model
    R = calengine.CalibratedClassifier(method="isotonic", mode=mode, cv=len(listed)).fit(X, y).predict_proba(X)
    assert not np.array_equal(P, R)


def test_routing_on_gives_the_same_model_and_the_same_cross_val_score_as_routing_off(grouped):
    X, y, g = grouped
    clf = calengine.CalibratedClassifier(method="sigmoid", cv=GroupKFold(3))
    outer = GroupKFold(3)
    off_fit = clone(clf).fit(X, y, groups=g).predict_proba(X)
    # routing off: cross_val_score's groups= split the outer folds, params= reach fit, sliced per fold
    off = cross_val_score(clf, X, y, groups=g, params={"groups": g}, cv=outer)
    by_hand = [clone(clf).fit(X[tr], y[tr], groups=g[tr]).score(X[te], y[te]) for tr, te in outer.split(X, y, g)]
    np.testing.assert_array_equal(off, by_hand)
    with sklearn.config_context(enable_metadata_routing=True):
        assert clf.get_metadata_routing().consumes("fit", ["groups", "sample_weight"]) == {"groups"}
        on_fit = clone(clf).fit(X, y, groups=g).predict_proba(X)
        on = cross_val_score(clf, X, y, params={"groups": g}, cv=outer)  # one groups for both splitters
        with pytest.raises(DataError, match="splits by groups but fit got none"):
            clone(clf).fit(X, y)
    np.testing.assert_array_equal(on_fit, off_fit)
    np.testing.assert_array_equal(on, off)


def test_a_pipeline_hands_groups_over_with_routing_on_and_off(grouped):
    X, y, g = grouped
    clf = calengine.CalibratedClassifier(method="isotonic", cv=GroupKFold(3))
    expected = clone(clf).fit(StandardScaler().fit_transform(X), y, groups=g).predict_proba(StandardScaler().fit_transform(X))
    off = make_pipeline(StandardScaler(), clf).fit(X, y, calibratedclassifier__groups=g).predict_proba(X)
    with sklearn.config_context(enable_metadata_routing=True):
        on = make_pipeline(StandardScaler(), clf).fit(X, y, groups=g).predict_proba(X)
    np.testing.assert_array_equal(off, expected)
    np.testing.assert_array_equal(on, expected)


def test_routed_sample_weight_is_requested_like_any_consumers(grouped):
    """With routing on, ``sample_weight`` is this estimator's own request (scikit-learn's rule: unset
    means refused), while groups still go to the splitter; the result equals routing off."""
    X, y, g = grouped
    w = np.random.default_rng(0).uniform(0.5, 2.0, len(y))
    clf = calengine.CalibratedClassifier(method="sigmoid", cv=GroupKFold(3))
    off = cross_val_score(clf, X, y, groups=g, params={"groups": g, "sample_weight": w}, cv=GroupKFold(3))
    with sklearn.config_context(enable_metadata_routing=True):
        clf = clone(clf).set_score_request(sample_weight=False)  # routing off, the scorer was unweighted
        with pytest.raises(UnsetMetadataPassedError, match=r"sample_weight\] are passed .* CalibratedClassifier.fit"):
            cross_val_score(clf, X, y, params={"groups": g, "sample_weight": w}, cv=GroupKFold(3))
        weighted = clone(clf).set_fit_request(sample_weight=True)
        on = cross_val_score(weighted, X, y, params={"groups": g, "sample_weight": w}, cv=GroupKFold(3))
        unweighted = cross_val_score(clf, X, y, params={"groups": g}, cv=GroupKFold(3))
    np.testing.assert_array_equal(on, off)
    assert not np.array_equal(on, unweighted)  # the weights did reach the fit


@pytest.mark.parametrize("routing", [False, True], ids=["routing-off", "routing-on"])
def test_groups_that_cannot_be_used_are_one_typed_line(grouped, routing):
    X, y, g = grouped
    C = calengine.CalibratedClassifier
    with sklearn.config_context(enable_metadata_routing=routing):
        cases = [
            (lambda: C(cv=GroupKFold(3)).fit(X, y), DataError, "splits by groups but fit got none"),
            (lambda: C(cv=LeaveOneGroupOut()).fit(X, y), DataError, "pass one group label per row"),
            (lambda: C(cv=5).fit(X, y, groups=g), ParameterError, "calengine's own stratified folds"),
            (lambda: C(cv=list(GroupKFold(3).split(X, y, g))).fit(X, y, groups=g), ParameterError,
             "a list of splits"),
            (lambda: C(method="bagging", cv=GroupKFold(3)).fit(X, y, groups=g), ParameterError, "uses no cv folds"),
            (lambda: C(cv=GroupKFold(3)).fit(X, y, groups=g[:-1]), DataError, "groups has 299 labels but X has 300"),
            (lambda: C(cv=GroupKFold(12)).fit(X, y, groups=g), ParameterError, "greater than the number of groups"),
            (lambda: C(cv=GroupKFold(3)).fit(X[:200], y[:200], groups=g[:200], X_cal=X[200:], y_cal=y[200:]),
             ParameterError, "X_cal/y_cal calibrate on a separate table"),
            (lambda: C(cv=GroupKFold(3)).fit(X, y, groups=g, strata=g), ParameterError, "strata"),
        ]
        if routing:  # KFold requests no groups: routing refuses them rather than dropping them
            cases.append((lambda: C(cv=KFold(3)).fit(X, y, groups=g), ParameterError, "requests no metadata"))
        for call, kind, fragment in cases:
            with pytest.raises(kind, match=fragment) as info:
                call()
            assert isinstance(info.value, CalengineError) and "\n" not in str(info.value)


def test_without_routing_a_splitter_that_ignores_groups_gets_them_as_scikit_learn_passes_them(grouped):
    """GridSearchCV and cross_validate hand ``groups`` to any splitter; KFold ignores them."""
    X, y, g = grouped
    with pytest.warns(UserWarning, match="groups parameter is ignored by KFold"):  # scikit-learn says so
        with_groups = calengine.CalibratedClassifier(cv=KFold(3)).fit(X, y, groups=g).predict_proba(X)
    without = calengine.CalibratedClassifier(cv=KFold(3)).fit(X, y).predict_proba(X)
    np.testing.assert_array_equal(with_groups, without)
