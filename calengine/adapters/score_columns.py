"""Calibrating what teams already have: the score columns of a model computed elsewhere.

``calengine fit DATA --target y --scores s`` fits no learner.  The table already holds a model's
score next to the label -- a production booster's probability, a network's logits, another team's
decision value -- and every row of DATA (or of ``--calibration-data``) feeds the calibrator through
the engine's partition reductions.  The model that results reads exactly the score columns (its
:class:`calengine.plan.columns.ColumnReader`), so ``score``, ``decide``, ``evaluate``,
``recalibrate`` and ``cv`` work on any table that has them, without feature columns.

The "learner" of such a model is :class:`ScoreColumns`: a :attr:`~calengine.base.Learner.prefit`
learner that hands the columns on as its scores.  It is registered by calengine itself (an entry
point of the ``calengine`` distribution), so a saved model loads like any other.  A fitted model
loaded from a file is the same idea with a real learner in its place: the engine's prefit path (no
folds, no cloning, calibration on every row) does not care which.

Which column is which class.  Two classes take one score column (the positive class's: ``--positive``
names it, as for any fit) or two, one per class.  ``k`` classes take ``k`` columns, matched to the
classes by ``--classes C1,...,Ck`` (column i is class Ci) or else by the columns' names: a column
named after a class, or ending in ``_``, ``-``, ``.``, ``:`` or ``=`` and the class (``p_0``,
``score-cat``), each class matched by exactly one column.  Anything else is one line asking for
``--classes``.

Kinds (``--score-kind``): ``proba`` (probabilities in [0, 1]), ``decision`` (any finite number,
larger = more likely) and ``logit`` (log-odds: calibrators see them as decision values; the raw
baseline of ``evaluate`` is their logistic function, or softmax over k columns, where a decision
value gets Zadrozny & Elkan's rescaling).  Two columns of one two-class model reduce to one score:
the positive class's probability, or the difference of the two decision values or logits (what a
softmax over two logits gives).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ..base import Learner
from ..errors import DataError, ParameterError
from ..hookspecs import hookimpl

#: what ``--score-kind`` accepts
from ..plan.options import SCORE_KINDS as SCORE_COLUMN_KINDS  # one list of what score columns hold
#: characters that may separate a score column's stem from its class (``p_0``, ``logit-cat``)
SEPARATORS = "_-.:="


class ScoreColumns(Learner):
    """The score columns of a model computed elsewhere, as a learner that is never fitted.

    ``columns``: the score columns in class order (one for two classes: the positive class's; or one
    per class).  ``kind``: ``proba``, ``decision`` or ``logit`` (module docstring).  ``n_classes``: of
    the target.  ``score(X)`` takes the matrix the model's reader read (those columns, in that order).
    """

    name: ClassVar[str] = "score_columns"
    prefit: ClassVar[bool] = True

    def __init__(self, columns=(), kind="proba", n_classes=2):
        self.columns = columns
        self.kind = kind
        self.n_classes = n_classes

    @property
    def score_kind(self) -> str:  # noqa: D401 - the Learner contract's attribute
        """``proba`` for probabilities; log-odds and decision values are decision scores to calibrators."""
        return "proba" if self.kind == "proba" else "decision"

    @property
    def raw_score_kind(self) -> str:
        return self.kind

    def _check(self) -> None:
        if self.kind not in SCORE_COLUMN_KINDS:
            raise ParameterError(f"score_kind must be one of {', '.join(SCORE_COLUMN_KINDS)}, got {self.kind!r}", parameter="score_kind")
        k, m = int(self.n_classes), len(self.columns)
        if k < 2 or not (m == k or (k == 2 and m == 1)):
            raise ParameterError(f"{m} score columns do not fit a {k}-class target; give one column per class")

    def fit(self, X, y, sample_weight=None):
        """Nothing to fit: the scores were computed elsewhere (the engine never calls this)."""
        self._check()
        return self

    def score(self, X) -> np.ndarray:
        self._check()
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(self.columns):
            raise DataError(f"expected {len(self.columns)} score columns ({', '.join(self.columns)}), got {X.shape}")
        if int(self.n_classes) == 2:
            if X.shape[1] == 1:
                return X[:, 0].copy()
            return X[:, 1].copy() if self.kind == "proba" else X[:, 1] - X[:, 0]
        if self.kind == "logit":
            return one_vs_rest_log_odds(X)
        return X

    def matrix_log_probabilities(self, X) -> np.ndarray | None:
        """What a multiclass scaling of this model reads (:func:`calengine.model.calibrated.matrix_scores`
        of :meth:`score`) computed straight from the logits, or None when that is not the log-softmax.

        For k > 2 logit columns, ``matrix_scores(one_vs_rest_log_odds(z))`` is ``log σ(z_j -
        logsumexp_{i != j} z_i)``, which is ``z_j - logsumexp(z)``: the log of the softmax.  Computed so
        (the row maximum set apart, one exponential per entry) it costs five passes where the detour
        costs some forty, and rounds no worse (the scaling after it is the same function up to an ulp;
        a test compares the two).  Scoring a logit model's k columns was most of ``score``'s and
        ``conformal``'s time."""
        if self.kind != "logit" or int(self.n_classes) <= 2:
            return None
        self._check()
        Z = np.asarray(X, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[1] != len(self.columns):
            raise DataError(f"expected {len(self.columns)} score columns ({', '.join(self.columns)}), got {Z.shape}")
        top = Z.max(axis=1, keepdims=True)
        out = np.subtract(Z, top)
        E = np.exp(out)
        total = E.sum(axis=1, keepdims=True)
        np.log(total, out=total)
        out -= total
        return out

    def to_state(self) -> dict[str, Any]:
        return {}

    def from_state(self, state: dict[str, Any]) -> "ScoreColumns":
        self._check()
        return self


def one_vs_rest_log_odds(Z: np.ndarray) -> np.ndarray:
    """Each class's log-odds ``log p_j / (1 - p_j)`` under ``p = softmax(Z)``, computed without
    overflow as ``z_j - logsumexp(z_i, i != j)``.

    A single logit of a k-class model is not a log-odds (it means something only beside the others),
    so a per-class calibrator given the raw column fits a distorted problem: temperature scaling per
    column on the logits of a calibrated softmax made the log loss worse by a third.  These columns
    are what the model asserts about each class against the rest; a calibrator that is the identity
    on them leaves the softmax unchanged.  (A calibrator of whole logit vectors reads the logits
    themselves, from the model's column reader.)

    The log-sum-exp is SciPy's (``scipy.special.logsumexp`` as of 1.15: the maxima set apart, ``log1p``
    of the others' shifted sum over their number, plus the log of that number and the maximum), bit for
    bit, at a third of its cost (it was most of a logit model's scoring time; a test compares the two).
    Leaving out class ``j``, the others' maximum is the row's maximum unless ``j`` is its only maximum,
    and then the second largest value: so every shifted exponential is one of two per entry, computed
    once (``EA`` against the maximum, ``EB`` against the second), and per class only the sum is taken --
    over the same k entries in the same order as SciPy's, the left-out and maximal ones as zeros."""
    Z = np.asarray(Z, dtype=np.float64)
    k = Z.shape[1]
    top1 = Z.max(axis=1, keepdims=True)
    is1 = Z == top1
    cnt1 = is1.sum(axis=1, keepdims=True)
    top2 = np.where(is1, -np.inf, Z).max(axis=1, keepdims=True)  # -inf when every value is the maximum
    is2 = Z == top2
    cnt2 = is2.sum(axis=1, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore"):  # EB of a row without a second value is never read
        EA = np.exp(Z - top1)
        EB = np.exp(Z - top2)
    EA[is1] = 0.0
    EB[is2 | is1] = 0.0
    out = np.empty_like(Z)
    e = np.empty_like(Z)
    for j in range(k):
        alone = is1[:, j:j + 1] & (cnt1 == 1)  # class j is the row's only maximum: the others' is top2
        np.copyto(e, EA)
        np.copyto(e, EB, where=alone)
        e[:, j] = 0.0
        total = e.sum(axis=1, keepdims=True)
        m = np.where(alone, cnt2, cnt1 - is1[:, j:j + 1]).astype(np.float64)
        total = np.where(total == 0, total, total / m)
        out[:, j] = Z[:, j] - (np.log1p(total) + np.log(m) + np.where(alone, top2, top1))[:, 0]
    return out


def order_score_columns(scores: list[str], labels, classes: list | None = None) -> list[str]:
    """``scores`` reordered into the model's class order (``labels``: a
    :class:`~calengine.parquet.data.LabelSpace`); see the module docstring for the rules.

    Two classes and one column: the column, the positive class's score (``classes``, if given, must
    name that class).  ``k`` columns: by ``classes`` (one per column, each a class of the target), else
    by the columns' names.
    """
    scores = [str(s) for s in scores]
    k, m = labels.n_classes, len(scores)
    names = [str(c) for c in labels.classes]
    if len(set(scores)) != m:
        dup = next(s for s in scores if scores.count(s) > 1)
        raise ParameterError(f"scores names '{dup}' twice; name each score column once", parameter="scores")
    if m == 1:
        if k != 2:
            raise DataError(
                f"1 score column for a {k}-class target '{labels.target}'; give one column per class"
                f" (scores S1,...,S{k}, with classes {','.join(names)} in the columns' order)",
                parameter=("scores", "classes"),
            )
        if classes and [str(c) for c in classes] != [names[1]]:
            raise DataError(
                f"classes {','.join(map(str, classes))} does not name the class {names[1]!r} that the one score"
                f" column '{scores[0]}' scores; set positive {','.join(map(str, classes))} to make it that class",
                parameter=("classes", "positive"),
            )
        return scores
    if m != k:
        raise DataError(
            f"{m} score columns ({', '.join(scores)}) for a target '{labels.target}' with {k} classes"
            f" ({', '.join(names)}); give one column per class, or one for two classes"
        )
    if classes:
        given = [str(c) for c in classes]
        if len(given) != m:
            raise DataError(f"classes names {len(given)} labels for {m} score columns; name one label per column",
                            parameter="classes")
        unknown = [c for c in given if c not in names]
        if unknown or len(set(given)) != m:
            what = f"{unknown[0]!r} is not a class of '{labels.target}'" if unknown else "it repeats a class"
            raise DataError(f"classes {','.join(given)}: {what}; the target's labels are {', '.join(names)}",
                            parameter="classes")
        column_of = dict(zip(given, scores))
        return [column_of[c] for c in names]
    column_of = {}
    for s in scores:
        owners = [c for c in names if s == c or (s.endswith(c) and s[-len(c) - 1] in SEPARATORS)]
        owners = [c for c in owners if len(c) == max(map(len, owners))]
        if len(owners) != 1 or owners[0] in column_of:
            raise DataError(
                f"cannot tell which class score column '{s}' belongs to from its name (labels of"
                f" '{labels.target}': {', '.join(names)}); name the columns' labels in order with"
                f" classes C1,...,C{k}", parameter="classes"
            )
        column_of[owners[0]] = s
    return [column_of[c] for c in names]


@hookimpl
def register_learners(register):
    register(ScoreColumns)
