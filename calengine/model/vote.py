"""The fitted members of Probing and bagging: per-column vote-based estimates.

A :class:`VoteMember` holds, per binary column, the fitted classifiers' votes (:class:`Voter`)
and turns their counts on new rows into column estimates: Probing's sorted votes
(:mod:`calengine.methods.probing`) or bagging's vote fraction.  The graph that fits them is
:mod:`calengine.fit.probing`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..methods import probing
from .calibrated import RawMap, as_columns, checked_raw_map


@dataclass
class VoteMember:
    """Vote-based column estimates: Probing's sorted votes or bagging's vote fraction.

    ``voters[c][i]`` is the list of costing rounds (usually one) of classifier ``i`` of column ``c``;
    the classifier votes 1 when the majority of its rounds do.
    """

    method: str
    voters: list[list[list[Voter]]]
    boundaries: list[np.ndarray]
    loss: str
    clip: tuple[float, float] | None
    raw: RawMap

    @property
    def kind(self) -> str:
        return self.method

    def vote_counts(self, X) -> np.ndarray:
        counts = np.zeros((X.shape[0], len(self.voters)), dtype=np.int64)
        for c, column in enumerate(self.voters):
            for rounds in column:
                v = sum(r.votes(X).astype(np.int64) for r in rounds)
                counts[:, c] += probing.majority_vote(v, len(rounds)) if len(rounds) > 1 else v
        return counts

    def _column_estimates(self, X) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        counts = self.vote_counts(X)
        R = np.empty(counts.shape)
        low = np.empty(counts.shape)
        high = np.empty(counts.shape)
        for c in range(counts.shape[1]):
            if self.method == "probing":
                R[:, c], low[:, c], high[:, c] = probing.probing_predict(
                    counts[:, c], self.boundaries[c], self.loss, clip=self.clip
                )
            else:
                R[:, c] = probing.bagging_predict(counts[:, c], len(self.voters[c]), clip=self.clip)
                low[:, c] = high[:, c] = R[:, c]
        return R, low, high

    def column_probabilities(self, X, S=None) -> np.ndarray:
        return self._column_estimates(X)[0]

    def scores(self, X) -> np.ndarray:
        """The first classifier's scores per column (threshold 0.5 for Probing): the raw baseline."""
        cols = []
        for c, column in enumerate(self.voters):
            first = column[0][0]
            if first.learner is None:
                cols.append(np.full(X.shape[0], float(first.constant)))
            else:
                s = np.asarray(first.learner.score(X), dtype=float)
                cols.append(s if s.ndim == 1 else s[:, 0])
        return np.column_stack(cols)

    def raw_column_probabilities(self, X, S=None) -> np.ndarray:
        return self.raw.apply(self.scores(X) if S is None else S)

    def extra_outputs(self, X) -> dict[str, np.ndarray]:
        """``p_low``/``p_high``: the interval the votes select (two-class Probing models only)."""
        if self.method != "probing" or len(self.voters) != 1:
            return {}
        _, low, high = self._column_estimates(X)
        return {"p_low": low[:, 0], "p_high": high[:, 0]}

    def parts(self) -> dict[str, Any]:
        learners: list[Any] = []
        layout = []
        for column in self.voters:
            col_layout = []
            for rounds in column:
                entries = []
                for r in rounds:
                    if r.learner is None:
                        entries.append({"constant": int(r.constant)})
                    else:
                        entries.append({"learner": len(learners)})
                        learners.append(r.learner)
                col_layout.append(entries)
            layout.append(col_layout)
        arrays = {f"boundaries_{c}": b for c, b in enumerate(self.boundaries)}
        arrays.update({"raw_lo": self.raw.lo, "raw_hi": self.raw.hi})
        meta = {
            "method": self.method,
            "layout": layout,
            "loss": self.loss,
            "clip": list(self.clip) if self.clip is not None else None,
            "score_kind": self.raw.score_kind,
        }
        return {"learners": learners, "calibrators": [], "arrays": arrays, "meta": meta}

    @classmethod
    def from_parts(cls, learners, calibrators, arrays, meta) -> "VoteMember":
        voters = [
            [
                [Voter(learner=learners[e["learner"]]) if "learner" in e else Voter(constant=e["constant"]) for e in rounds]
                for rounds in column
            ]
            for column in meta["layout"]
        ]
        if not voters or any(not column or any(not rounds for rounds in column) for column in voters):
            raise ValueError("a vote member has a column or classifier without voters")
        if any(v.learner is None and v.constant not in (0, 1) for column in voters for rounds in column for v in rounds):
            raise ValueError("a constant voter must vote 0 or 1")
        boundaries = [np.asarray(arrays[f"boundaries_{c}"], dtype=np.float64) for c in range(len(voters))]
        if any(b.ndim != 1 or not np.all(np.isfinite(b)) for b in boundaries):
            raise ValueError("Probing boundaries must be 1-D and finite")
        clip = tuple(float(v) for v in meta["clip"]) if meta["clip"] is not None else None
        if clip is not None and (len(clip) != 2 or not 0.0 <= clip[0] <= clip[1] <= 1.0):
            raise ValueError(f"clip {meta['clip']} is not two probabilities lo <= hi")
        if meta["method"] not in REDUCTION_MEMBERS:
            raise ValueError(f"unknown vote method {meta['method']!r}")
        raw = checked_raw_map(meta["score_kind"], arrays, len(voters))
        return cls(meta["method"], voters, boundaries, meta["loss"], clip, raw)

    @property
    def n_columns(self) -> int:
        return len(self.voters)


REDUCTION_MEMBERS = {"probing": VoteMember, "bagging": VoteMember}


@dataclass
class Voter:
    """A fitted binary classifier, or a constant one when its sample held a single class."""

    learner: Any | None = None
    constant: int | None = None

    def votes(self, X) -> np.ndarray:
        if self.learner is None:
            return np.full(X.shape[0], self.constant, dtype=np.int8)
        return classifier_votes(self.learner, X)


def classifier_votes(learner, X) -> np.ndarray:
    """1 where the binary learner predicts the positive class (ties go to the negative class)."""
    s = as_columns(learner.score(X))[:, 0]
    threshold = 0.5 if learner.score_kind == "proba" else 0.0
    return (s > threshold).astype(np.int8)
