"""The fitted model: features -> per-column scores -> calibrated column probabilities -> classes.

A model is an average over *members* (the k learner/calibrator pairs of cross-validated ``ensemble``
mode, or a single member otherwise).  Each member produces one probability per **column** of the
code matrix: for a two-class problem one column (the positive class), for ``k`` classes with a native
multiclass learner the ``k`` one-vs-rest columns.  The combiner turns columns into class
probabilities, and members are averaged, as scikit-learn's ``CalibratedClassifierCV`` does.

Everything here is plain data plus numpy, so a model pickles onto Dask workers for scoring (it is
never pickled to disk: see ``calengine.model.artifact``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..parquet.data import LabelSpace
from ..plan.features import FeatureEncoder
from ..plugins.calls import plugin_errors


def one_vs_all_matrix(k: int) -> np.ndarray:
    M = -np.ones((k, k), dtype=np.int8)
    np.fill_diagonal(M, 1)
    return M


#: what a raw map reads scores as (see :class:`RawMap`)
RAW_KINDS = ("proba", "decision", "logit")


def raw_kind_of(learner) -> str:
    """How the raw map of ``learner``'s scores reads them: its ``raw_score_kind`` if it sets one
    (``"logit"``), else its ``score_kind``."""
    return getattr(learner, "raw_score_kind", None) or learner.score_kind


def calibrator_kind(raw_kind: str) -> str:
    """The ``score_kind`` calibrators receive for scores a raw map reads as ``raw_kind``: log-odds are
    decision values to them (unbounded, larger = more likely)."""
    return "decision" if raw_kind == "logit" else raw_kind


@dataclass
class RawMap:
    """The learner's own probability per column: identity for probability scores; for decision
    scores Zadrozny & Elkan's (f + a) / 2a with a = max |f| over the calibration scores, clipped;
    for log-odds (``"logit"``, score columns of a model computed elsewhere) the logistic function of
    each column (one-vs-rest log-odds: for k logits, those of their softmax).

    Unlike a min-max rescaling this keeps f = 0 at probability 1/2, so the "raw learner" that
    evaluation compares against makes exactly the learner's own decisions.
    """

    score_kind: str
    lo: np.ndarray
    hi: np.ndarray

    @classmethod
    def fit(cls, S: np.ndarray, score_kind: str) -> "RawMap":
        if score_kind in ("proba", "logit"):
            return cls(score_kind, np.zeros(S.shape[1]), np.ones(S.shape[1]))
        a = np.abs(S).max(axis=0)
        return cls(score_kind, -a, a)

    def apply(self, S: np.ndarray) -> np.ndarray:
        if self.score_kind == "logit":
            # log-odds per column (a score-column model hands k logits on as each class's one-vs-rest
            # log-odds, see calengine.adapters.score_columns): the logistic function of each, which for the
            # log-odds of a softmax is that softmax exactly
            return 0.5 + 0.5 * np.tanh(0.5 * S)
        span = np.where(self.hi > self.lo, self.hi - self.lo, 1.0)
        return np.clip((S - self.lo) / span, 0.0, 1.0)


def checked_raw_map(score_kind: str, arrays: dict[str, np.ndarray], n_cols: int) -> RawMap:
    """The stored :class:`RawMap` of a member with ``n_cols`` score columns; ValueError if malformed."""
    if score_kind not in RAW_KINDS:
        raise ValueError(f"unknown score kind {score_kind!r}")
    lo, hi = (np.asarray(arrays[k], dtype=np.float64) for k in ("raw_lo", "raw_hi"))
    if lo.shape != (n_cols,) or hi.shape != (n_cols,) or not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise ValueError(f"raw score ranges must be {n_cols} finite values")
    return RawMap(score_kind, lo, hi)


def matrix_scores(S: np.ndarray, raw_kind: str) -> np.ndarray:
    """The score matrix a multiclass scaling (``Calibrator.multiclass``) reads.  Log-odds columns
    (``raw_kind="logit"``: a score-column model's k logits arrive as each class's one-vs-rest log-odds
    ``o_j``, see :func:`calengine.adapters.score_columns.one_vs_rest_log_odds`) become ``log σ(o_j)``, the log
    of the model's softmax, which differs from its logits by a per-row constant only -- softmax-based
    scalings see the logits themselves.  Other kinds pass unchanged."""
    if raw_kind != "logit":
        return S
    return -np.logaddexp(0.0, -np.asarray(S, dtype=np.float64))


def as_columns(score: np.ndarray) -> np.ndarray:
    """A learner score, (n,) or (n, k), as a 2-D (n, l) column block."""
    score = np.asarray(score, dtype=np.float64)
    return score[:, None] if score.ndim == 1 else score


@dataclass
class Member:
    """One set of fitted learners and one calibrator per column.

    ``learners[j]`` provides the score columns ``columns[j]`` (a list of column indices); a native
    multiclass learner provides all of them, a binary learner per code-matrix column provides one.
    """

    learners: list[Any]
    columns: list[list[int]]
    calibrators: list[Any]
    raw: RawMap

    kind = "calibrated"

    def parts(self) -> dict[str, Any]:
        """What the artifact stores: fitted plugin objects, arrays, and JSON metadata."""
        return {
            "learners": self.learners,
            "calibrators": self.calibrators,
            "arrays": {"raw_lo": self.raw.lo, "raw_hi": self.raw.hi},
            "meta": {"columns": self.columns, "score_kind": self.raw.score_kind},
        }

    @classmethod
    def from_parts(cls, learners, calibrators, arrays, meta) -> "Member":
        """Rebuild a member from the artifact; ValueError when the parts do not fit together (one score
        column per calibrator, each column provided by exactly one learner)."""
        columns = [[int(c) for c in cols] for cols in meta["columns"]]
        n_cols = sum(len(c) for c in columns)
        if len(columns) != len(learners) or sorted(c for cols in columns for c in cols) != list(range(n_cols)):
            raise ValueError(f"member columns {columns} do not match its {len(learners)} learners")
        whole = len(calibrators) == 1 and n_cols > 1 and getattr(calibrators[0], "multiclass", False)
        if len(calibrators) != n_cols and not whole:
            raise ValueError(f"a member with {n_cols} score columns has {len(calibrators)} calibrators")
        raw = checked_raw_map(meta["score_kind"], arrays, n_cols)
        return cls(list(learners), columns, list(calibrators), raw)

    @property
    def n_columns(self) -> int:
        return sum(len(c) for c in self.columns)

    @property
    def scales_matrix(self) -> bool:
        """Whether one multiclass scaling (``Calibrator.multiclass``) calibrates all the member's k > 1
        score columns at once; its probabilities are then the class probabilities themselves."""
        return len(self.calibrators) == 1 and self.n_columns > 1

    def calibrator_columns(self) -> list[list[int] | None]:
        """The score columns each calibrator reads: ``[b]`` for the b-th, or ``None`` (the whole matrix)
        for a multiclass scaling."""
        return [None] if self.scales_matrix else [[b] for b in range(len(self.calibrators))]

    def scores(self, X) -> np.ndarray:
        from ..plugins.batch_probe import scores_of

        n_cols = sum(len(c) for c in self.columns)
        S = np.empty((X.shape[0], n_cols), dtype=np.float64)
        for learner, cols in zip(self.learners, self.columns):
            with plugin_errors(learner, "score"):
                S[:, cols] = as_columns(scores_of(learner, X))
        return S

    def _direct_matrix_scores(self, X) -> np.ndarray | None:
        """:func:`matrix_scores` of the member's scores straight from ``X`` when its one learner can give
        them (a score-column model's logits: ``matrix_log_probabilities``), else None."""
        if len(self.learners) != 1 or self.raw.score_kind != "logit":
            return None
        direct = getattr(self.learners[0], "matrix_log_probabilities", None)
        return None if direct is None else direct(X)

    def column_probabilities(self, X, S: np.ndarray | None = None) -> np.ndarray:
        from ..plugins.batch_probe import check_rows_independent_once

        Z = self._direct_matrix_scores(X) if S is None and self.scales_matrix else None
        if Z is not None:
            S = Z
        else:
            S = self.scores(X) if S is None else S
        if self.scales_matrix:
            cal = self.calibrators[0]
            Z = matrix_scores(S, self.raw.score_kind) if Z is None else Z
            with plugin_errors(cal, "predict"):
                check_rows_independent_once(cal, cal.predict, Z, "predict")
                R = np.asarray(cal.predict(Z), dtype=np.float64)
            from ..reductions.agreement import probability_rows_problem

            problem = probability_rows_problem(R, S.shape[0], S.shape[1])
            if problem is not None:  # never repaired silently: the normalising combiner would hide it
                from ..errors import PluginError
                from ..plugins.calls import describe, distribution_of

                raise PluginError(
                    f"{describe(cal)} (plugin code from {distribution_of(type(cal))}) breaks the multiclass calibrator"
                    " contract (calengine.base.Calibrator.multiclass: predict of (n, k) scores returns probability"
                    f" vectors, finite, in [0, 1], each row summing to 1): {problem}; report it to the plugin's"
                    " authors (calengine.testing.check_calibrator shows it), or choose another method",
                    parameter="method",
                )
            return np.clip(R, 0.0, 1.0)
        R = np.empty_like(S)
        for b, cal in enumerate(self.calibrators):
            with plugin_errors(cal, "predict"):
                check_rows_independent_once(cal, cal.predict, S[:, b], "predict")
                R[:, b] = cal.predict(S[:, b])
        return np.clip(R, 0.0, 1.0)

    def raw_column_probabilities(self, X, S: np.ndarray | None = None) -> np.ndarray:
        S = self.scores(X) if S is None else S
        return self.raw.apply(S)


@dataclass
class CalibratedModel:
    """Everything needed to score a table; see the module docstring.

    Members are averaged; when several base learners are combined, members are first averaged per
    learner (``member_groups``) and the learners' posteriors then combined by ``combine_rule``.
    """

    encoder: FeatureEncoder
    labels: LabelSpace
    members: list[Any]
    code_matrix: np.ndarray
    combiner: Any | None
    column_counts: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)
    #: base learner of each member, when several learners are combined (Duin & Tax); else empty
    member_groups: list[int] = field(default_factory=list)
    #: the rule combining the base learners' posteriors: min, max, median, mean or product
    combine_rule: str | None = None
    #: the rate at which each class was kept in the data the model was calibrated on (class order), or
    #: None: probabilities are corrected to the population by :mod:`calengine.methods.sampling`
    class_rates: np.ndarray | None = None
    #: the conformal layer attached by ``calengine conformal`` (:class:`calengine.model.conformal.ConformalLayer`),
    #: turning these probabilities into prediction sets; None: the model has none
    conformal: Any | None = None

    @property
    def n_classes(self) -> int:
        return self.labels.n_classes

    def _combine(self, R: np.ndarray) -> np.ndarray:
        if self.n_classes == 2 and R.shape[1] == 1:
            r = R[:, 0]
            return np.column_stack([1.0 - r, r])
        with plugin_errors(self.combiner, "combine"):
            return self.combiner.combine(R, self.code_matrix, self.column_counts)

    def _aggregate(self, per_member: list[np.ndarray]) -> np.ndarray:
        """Average members within each base learner, then combine learners by ``combine_rule``."""
        groups = self.member_groups or [0] * len(per_member)
        by_group: dict[int, list[np.ndarray]] = {}
        for g, P in zip(groups, per_member):
            by_group.setdefault(g, []).append(P)
        # the mean of one array is that array, bit for bit: not a stacked copy and a pass over it
        averaged = [by_group[g][0] if len(by_group[g]) == 1 else np.mean(by_group[g], axis=0) for g in sorted(by_group)]
        if len(averaged) == 1:
            return self._population(averaged[0])
        from ..methods.combining import combine_posteriors

        return self._population(combine_posteriors(averaged, self.combine_rule or "mean"))

    def _population(self, P: np.ndarray) -> np.ndarray:
        """Class probabilities corrected for class-sampled calibration data (``class_rates``)."""
        if self.class_rates is None:
            return P
        from ..methods.sampling import correct

        return correct(P, self.class_rates)

    def _population_positive(self, p: np.ndarray) -> np.ndarray:
        """:meth:`_population` of a two-class model's positive-class probabilities (interval ends)."""
        if self.class_rates is None:
            return p
        from ..methods.sampling import correct_positive

        return correct_positive(p, self.class_rates)

    @property
    def classes_(self) -> np.ndarray:
        """The class labels, in the order of :meth:`predict_proba`'s columns (as scikit-learn)."""
        return np.asarray(self.labels.classes)

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities, shape (n, k), columns in the order of ``classes_``.

        The one obvious path for a model from :func:`calengine.load_model`: ``X`` is a pandas
        DataFrame with the training table's columns, encoded exactly as at fit time (a saved model
        records its encoding).  A model fitted in memory on a plain array takes that array's columns.
        """
        import pandas as pd

        from ..errors import DataError

        if self.encoder is not None:
            if not isinstance(X, pd.DataFrame):
                raise DataError(
                    "this model was fitted on a table; pass a pandas DataFrame with the training columns"
                    f" ({', '.join(self.encoder.input_columns[:5])}{', ...' if len(self.encoder.input_columns) > 5 else ''})"
                )
            X = self.encoder.transform(X, order="F")
        return self.predict_proba_features(X)

    def predict(self, X) -> np.ndarray:
        """The most probable class of each row (see :meth:`predict_proba`)."""
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def predict_proba_features(self, X) -> np.ndarray:
        """Class probabilities, shape (n, k), rows summing to 1."""
        if self.is_venn_abers:
            p = self.venn_abers_features(X)[2]
            return np.column_stack([1.0 - p, p])
        return self._aggregate([self._combine(m.column_probabilities(X)) for m in self.members])

    @property
    def is_venn_abers(self) -> bool:
        """A two-class model whose every member calibrates its one column with Venn–ABERS (one learner).

        Such a model is an inductive Venn–ABERS predictor (IVAP) with one member (``refit`` mode,
        ``--calibration-data``) and a cross Venn–ABERS predictor (CVAP) with the k members of
        ``ensemble`` mode: each member's calibrator was fitted on its own held-out fold, which is the
        paper's construction, so the members' pairs are combined by CVAP's formula
        (:func:`calengine.methods.venn_abers.cvap_pairs`) instead of averaging merged probabilities.
        """
        if self.n_classes != 2 or len(set(self.member_groups)) > 1 or not self.members:
            return False
        return all(
            getattr(m, "kind", None) == "calibrated" and len(m.calibrators) == 1
            and callable(getattr(m.calibrators[0], "predict_interval", None))
            for m in self.members
        )

    def venn_abers_features(self, X, S_list: list | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(p_low, p_high, p)`` of the positive class for a Venn–ABERS model (see :attr:`is_venn_abers`).

        One member: its pair ``(p0, p1)`` and ``p1 / (1 - p0 + p1)``.  Several: the CVAP combination.
        ``S_list`` optionally gives each member's already computed score block.
        """
        from ..methods.venn_abers import cvap_pairs, merge_pair

        p0s, p1s = [], []
        for i, m in enumerate(self.members):
            S = m.scores(X) if S_list is None else S_list[i]
            cal = m.calibrators[0]
            with plugin_errors(cal, "predict"):
                p0, p1 = cal.predict_interval(S[:, 0])
            p0s.append(np.clip(p0, 0.0, 1.0))
            p1s.append(np.clip(p1, 0.0, 1.0))
        if len(p0s) == 1:
            out = p0s[0], p1s[0], merge_pair(p0s[0], p1s[0])
        else:
            out = cvap_pairs(p0s, p1s)
        return tuple(self._population_positive(v) for v in out)

    def raw_proba_features(self, X) -> np.ndarray:
        """The uncalibrated learners' probabilities (see :class:`RawMap`), aggregated the same way."""
        return self._aggregate([self._combine(m.raw_column_probabilities(X)) for m in self.members])

    def both_proba_features(self, X) -> tuple[np.ndarray, np.ndarray]:
        """(calibrated, raw) probabilities computing each member's scores once."""
        venn_abers = self.is_venn_abers
        P, Q, scores = [], [], []
        for m in self.members:
            S = m.scores(X)
            scores.append(S)
            if not venn_abers:  # its probabilities come from the members' pairs, below
                P.append(self._combine(m.column_probabilities(X, S)))
            Q.append(self._combine(m.raw_column_probabilities(X, S)))
        if venn_abers:
            p = self.venn_abers_features(X, scores)[2]
            return np.column_stack([1.0 - p, p]), self._aggregate(Q)
        return self._aggregate(P), self._aggregate(Q)

    def plugin_objects(self) -> list:
        """The plugin objects whose classes this model's tasks run (the combiner, and each member's
        first learner and calibrator): what :func:`calengine.plugins.loading.model_requirements` turns into
        the distributions and modules every worker must have."""
        objs = [self.combiner]
        for m in self.members:
            parts = m.parts()
            objs += list(parts["learners"])[:1] + list(parts["calibrators"])[:1]
        return objs

    @property
    def has_intervals(self) -> bool:
        """Whether ``predict_frame(extra_outputs=True)`` writes ``p_low``/``p_high`` (two-class Probing
        or Venn–ABERS)."""
        return self.is_venn_abers or any(getattr(m, "method", None) == "probing" and len(getattr(m, "voters", ())) == 1 for m in self.members)

    def scored_features(self, X) -> tuple[np.ndarray, np.ndarray, tuple | None]:
        """``(P, prediction, interval)`` for an encoded matrix: class probabilities (n, k), the most
        probable class of each row in the class column's own type, and a Venn–ABERS model's
        ``(p_low, p_high, p)`` (else None).  What :meth:`predict_frame` writes, shared with the
        scoring path that skips pandas (:func:`calengine.scores.table.score_chunk`)."""
        interval = self.venn_abers_features(X) if self.is_venn_abers else None
        if interval is not None:
            P = np.column_stack([1.0 - interval[2], interval[2]])
        else:
            P = self.predict_proba_features(X)
        # index the k typed labels, rather than building an object array of n labels and converting it
        typed = typed_labels(np.asarray(self.labels.classes, dtype=object), self.labels.classes)
        return P, typed[np.argmax(P, axis=1)], interval

    def predict_frame(
        self, df, keep: list[str] = (), extra_outputs: bool = False, reject_below: float | None = None, X=None
    ):
        """A scored pandas DataFrame: kept columns, ``p_<class>`` per class, ``prediction``.

        With ``reject_below``, rows whose chosen class has a probability below it get a missing
        prediction (the reject option of Duin & Tax); their probabilities are still written.
        ``X``: ``df`` already encoded (``self.encoder.transform(df, order="F")``), when the caller needs it too.
        """
        import pandas as pd

        # Fortran order: the encoder's own buffer, without a transposing copy (a third of the encoding
        # time), and the order in which the fit scored held-out rows (see tasks.partitions.load_part)
        X = self.encoder.transform(df, order="F") if X is None else X
        P, prediction, interval = self.scored_features(X)
        out = {col: df[col].to_numpy() for col in keep}
        for i, c in enumerate(self.labels.classes):
            out[f"p_{c}"] = P[:, i]
        out["prediction"] = prediction
        if reject_below is not None:
            rejected = P.max(axis=1) < reject_below
            out["prediction"] = pd.array(out["prediction"]).astype(_nullable(out["prediction"]))
            out["prediction"][rejected] = pd.NA
            out["rejected"] = rejected
        if extra_outputs and interval is not None:
            out["p_low"], out["p_high"] = interval[0], interval[1]
        elif extra_outputs:
            for m in self.members:
                extra = getattr(m, "extra_outputs", None)
                if extra is not None:
                    out.update({k: self._population_positive(v) if k in ("p_low", "p_high") else v
                                for k, v in extra(X).items()})
                    break
        return pd.DataFrame(out, index=df.index)


def _nullable(values: np.ndarray) -> str:
    """The pandas nullable dtype matching a prediction array, so rejected rows can be missing."""
    return {"i": "Int64", "b": "boolean", "f": "Float64"}.get(values.dtype.kind, "string")


def typed_labels(values: np.ndarray, classes: list[Any]) -> np.ndarray:
    """Predicted labels in the class column's own type (ints stay ints, strings stay strings)."""
    if all(isinstance(c, bool) for c in classes):
        return values.astype(bool)
    if all(isinstance(c, int) and not isinstance(c, bool) for c in classes):
        return values.astype(np.int64)
    if all(isinstance(c, float) for c in classes):
        return values.astype(np.float64)
    return values.astype(str)
