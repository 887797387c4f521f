"""Scoring a model calibrated per segment (``calengine fit --by COL[,COL...]``, issue 25 §1).

A segment is the tuple of values of the ``--by`` columns.  A segment-fitted model keeps the global
model as it is and adds, per member, one calibrator (or one per score column) for each segment that
had enough calibration rows; a row's column probability is the blend

    p = w · f_seg(s) + (1 − w) · f_global(s),   w = n_eff / (n_eff + K)

of the segment's map and the global map of the same learner score ``s`` (``n_eff``: the segment's
calibration weight in that member's calibration set, ``K``: ``--shrinkage``; why this shrinkage is in
:mod:`calengine.fit.segments`).  A row whose segment was not fitted (unseen at fit time, a missing
value in a ``--by`` column, too few rows or one class only) gets the global map exactly.

How the segment reaches the member: :class:`SegmentEncoder` wraps the model's encoder, reads the
``--by`` columns with the features and appends one column, the row's segment index (``-1``: use the
global map).  Every scoring path (``score``, ``evaluate``, ``decide``, the Python API) encodes rows
with ``model.encoder`` and hands the matrix to the members, so none of them needs to know about
segments; :class:`SegmentedMember` strips the column before its learners see the features.  A table
without a ``--by`` column is one line (:class:`DataError`).

Storage: the segment keys and ``--by`` columns are the encoder's JSON (the manifest's ``features``),
the weights ``w`` and ``K`` the member's metadata, the segment calibrators ordinary calibrator states
in the member's folder: hashed, pickle-free, loaded like every other calibrator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataError

__all__ = ["SegmentEncoder", "SegmentedMember", "WrappedMember", "SEGMENT_KIND", "segment_codes", "MAX_SEGMENTS"]

#: the most segments a model may hold: ``calengine.metrics.segments.MAX_SEGMENTS_LIMIT`` (a test
#: checks they agree; not imported, since the metrics import the scoring path, which loads models)
MAX_SEGMENTS = 20_000

#: the manifest's ``features.kind`` and the member kind of a segment-fitted model
SEGMENT_KIND = "segments"
MEMBER_KIND = "segmented"


def segment_codes(df, by: tuple[str, ...]) -> tuple[list[tuple[str, ...]], np.ndarray]:
    """The distinct segments of a frame's rows and each row's index into them (``-1``: a missing value
    in some ``--by`` column).  Values are read as :mod:`calengine.metrics.segments` reads them (as
    strings), so a segment is named alike in ``fit --by`` and ``evaluate --by`` whatever file it came from."""
    import pandas as pd

    n = len(df)
    if not by:
        return [()], np.zeros(n, dtype=np.intp)
    null = np.zeros(n, dtype=bool)
    codes, uniques = [], []
    for col in by:
        values = df[col]
        null |= pd.isna(values).to_numpy()
        c, u = _factorize(values)  # the Series: an Arrow string column stays Arrow (6x cheaper than objects)
        codes.append(c)
        uniques.append(u)
    if len(by) == 1:
        combined, keys = codes[0], [(u,) for u in uniques[0]]
    else:
        shape = tuple(max(1, len(u)) for u in uniques)
        uniq, combined = np.unique(np.ravel_multi_index(tuple(codes), shape), return_inverse=True)
        idx = np.unravel_index(uniq, shape)
        keys = [tuple(uniques[j][idx[j][i]] for j in range(len(by))) for i in range(uniq.size)]
    combined = np.asarray(combined, dtype=np.intp).reshape(-1)
    combined[null] = -1
    return keys, combined


def _factorize(values) -> tuple[np.ndarray, list]:
    """Codes and names of a column's cells as strings, missing values named ``null``: exactly how
    ``calengine.metrics.segments`` names the segments of ``evaluate --by`` (a test checks they agree).
    ``values``: an array or a pandas Series; a Series of strings is cast as it is, without going
    through Python objects (0.04 against 0.23 CPU s for a million Arrow strings of 1,000 values, the
    same codes), any other Series as its NumPy values."""
    import pandas as pd

    if isinstance(values, pd.Series) and not isinstance(values.dtype, pd.StringDtype):
        values = values.to_numpy()  # as the values always were (an Int64 column with nulls reads 3.0)
    codes, uniques = pd.factorize(pd.Series(values, copy=False).astype("string").fillna("null"), sort=False)
    return codes.astype(np.intp), [str(u) for u in uniques]


@dataclass
class SegmentEncoder:
    """The model's encoder plus one appended column: the row's segment index (module docstring)."""

    base: Any
    by: tuple[str, ...]
    keys: list[tuple[str, ...]]

    def __post_init__(self) -> None:
        self.by = tuple(str(c) for c in self.by)
        self.keys = [tuple(str(v) for v in k) for k in self.keys]
        self._index = {k: i for i, k in enumerate(self.keys)}

    def __getstate__(self):
        return {"base": self.base, "by": self.by, "keys": self.keys}

    def __setstate__(self, state):
        self.__init__(**state)

    # ------------------------------------------------------------------ the encoder interface
    @property
    def input_columns(self) -> list[str]:
        return list(dict.fromkeys(list(self.base.input_columns) + list(self.by)))

    @property
    def feature_names(self) -> list[str]:
        return list(self.base.feature_names) + ["(segment)"]

    @property
    def is_sparse(self) -> bool:
        return bool(self.base.is_sparse)

    @property
    def text_hash_bits(self) -> int:
        return getattr(self.base, "text_hash_bits", 0)

    @property
    def columns_(self) -> list:
        from ..plan.columns import EncodedColumn

        return list(self.base.columns_) + [EncodedColumn("(segment)")]

    def reads_arrow(self, schema) -> bool:
        """Arrow batches go through pandas (the ``--by`` columns are read as strings there)."""
        return False

    def segment_index(self, df) -> np.ndarray:
        """Each row's index into :attr:`keys`, ``-1`` for a segment without its own map."""
        missing = [c for c in self.by if c not in df.columns]
        if missing:
            raise DataError(
                f"segment column '{missing[0]}' is not in the table; this model was fitted by"
                f" {','.join(self.by)}: score a table holding those columns", parameter="by")
        keys, codes = segment_codes(df, self.by)
        lookup = np.array([self._index.get(k, -1) for k in keys] + [-1], dtype=np.intp)
        return lookup[codes]  # codes of -1 (missing values) read the trailing -1

    def transform(self, df, order: str = "C"):
        seg = self.segment_index(df).astype(np.float64)
        X = self.base.transform(df, order=order)
        if self.is_sparse:
            import scipy.sparse as sp

            return sp.hstack([X, sp.csr_matrix(seg[:, None])], format="csr")
        out = np.empty((X.shape[0], X.shape[1] + 1), dtype=np.float64, order="F" if order == "F" else "C")
        out[:, :-1] = X
        out[:, -1] = seg
        return out

    def to_json(self) -> dict[str, Any]:
        return {"kind": SEGMENT_KIND, "by": list(self.by), "keys": [list(k) for k in self.keys],
                "base": self.base.to_json()}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SegmentEncoder":
        from ..plan.columns import encoder_from_json

        by = [str(c) for c in d["by"]]
        keys = [tuple(str(v) for v in k) for k in d["keys"]]
        if not by or any(len(k) != len(by) for k in keys) or len(set(keys)) != len(keys):
            raise ValueError("segment keys do not match the --by columns")
        return cls(encoder_from_json(d["base"]), tuple(by), keys)


def split_features(X):
    """(the features the learners read, each row's segment index) of a :class:`SegmentEncoder` matrix."""
    last = X[:, -1]
    seg = np.asarray(last.toarray() if hasattr(last, "toarray") else last, dtype=np.float64).reshape(-1)
    seg = np.where(np.isfinite(seg), seg, -1.0).astype(np.int64)
    return X[:, :-1], seg


class WrappedMember:
    """What a member wrapping a base member (``self.base``) behind a :class:`SegmentEncoder` passes
    through: its columns, learners, raw map and scores (the segment column stripped).  Shared by
    :class:`SegmentedMember` and :class:`calengine.model.mcgrad_member.MCGradMember`."""

    @property
    def n_columns(self) -> int:
        return self.base.n_columns

    @property
    def learners(self) -> list:
        return self.base.learners

    @property
    def raw(self):
        return self.base.raw

    def scores(self, X) -> np.ndarray:
        return self.base.scores(split_features(X)[0])

    def raw_column_probabilities(self, X, S: np.ndarray | None = None) -> np.ndarray:
        S = self.scores(X) if S is None else S
        return self.base.raw.apply(S)


@dataclass
class SegmentedMember(WrappedMember):
    """A fitted member (``base``) plus, per segment ``j``, the calibrators ``segment_cals[j]`` (as many as
    the base member has) and their blend weight ``weights[j]`` (module docstring)."""

    base: Any
    segment_cals: list[list[Any]]
    weights: np.ndarray
    shrinkage: float

    kind = MEMBER_KIND

    def __post_init__(self) -> None:
        self.weights = np.asarray(self.weights, dtype=np.float64)
        if len(self.segment_cals) != self.weights.shape[0]:
            raise ValueError(f"{len(self.segment_cals)} segment calibrator sets for {self.weights.shape[0]} weights")
        if not np.all((self.weights >= 0) & (self.weights <= 1)):
            raise ValueError("segment weights must be in [0, 1]")

    # ------------------------------------------------------------------ storage
    def parts(self) -> dict[str, Any]:
        base = self.base.parts()
        flat = list(base["calibrators"]) + [c for cals in self.segment_cals for c in cals]
        meta = {**base["meta"], "segments": len(self.segment_cals), "weights": [float(w) for w in self.weights],
                "shrinkage": "inf" if math.isinf(self.shrinkage) else float(self.shrinkage)}
        return {"learners": base["learners"], "calibrators": flat, "arrays": base["arrays"], "meta": meta}

    @classmethod
    def from_parts(cls, learners, calibrators, arrays, meta) -> "SegmentedMember":
        from .calibrated import Member

        n_seg = int(meta["segments"])
        if n_seg < 0 or len(calibrators) % (n_seg + 1):
            raise ValueError(f"{len(calibrators)} calibrators cannot be {n_seg} segments' and the global ones")
        per = len(calibrators) // (n_seg + 1)
        base = Member.from_parts(learners, calibrators[:per], arrays, meta)
        cals = [list(calibrators[per * (j + 1): per * (j + 2)]) for j in range(n_seg)]
        shrinkage = math.inf if meta["shrinkage"] == "inf" else float(meta["shrinkage"])
        return cls(base, cals, np.asarray(meta["weights"], dtype=np.float64), shrinkage)

    # ------------------------------------------------------------------ the member interface
    def _segment_member(self, j: int):
        """Segment ``j``'s map as a :class:`~calengine.model.calibrated.Member` (built once per segment)."""
        from .calibrated import Member

        cache = self.__dict__.setdefault("_members", {})
        if j not in cache:
            cache[j] = Member(self.base.learners, self.base.columns, self.segment_cals[j], self.base.raw)
        return cache[j]

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_members", None)  # rebuilt where it is used
        return state

    def column_probabilities(self, X, S: np.ndarray | None = None) -> np.ndarray:
        """The blend of the module docstring, one row at a time in effect (each value depends on its
        row alone) but one pass per batch: the rows are grouped by segment once (a stable counting
        sort of the small segment codes), each segment's map is applied to its run of rows, and the
        blend is one vectorised expression over all of them.  A segment of weight 0 keeps the global
        map exactly (its map is not applied)."""
        Xf, seg = split_features(X)
        S = self.base.scores(Xf) if S is None else S
        G = self.base.column_probabilities(None, S)
        n_seg = len(self.segment_cals)
        own = (seg >= 0) & (seg < n_seg)
        own[own] = self.weights[seg[own]] > 0.0
        rows = np.flatnonzero(own)
        if rows.size == 0:
            return G
        # int16 codes sort by radix (numpy's stable sort of 16-bit integers): O(rows), not O(rows log rows)
        codes = seg[rows].astype(np.int16 if n_seg <= np.iinfo(np.int16).max else np.int32)
        order = rows[np.argsort(codes, kind="stable")]
        sorted_seg = seg[order]
        bounds = np.searchsorted(sorted_seg, np.arange(n_seg + 1))
        So = S[order]
        present = np.flatnonzero(bounds[1:] > bounds[:-1])
        R = self._grouped(So, present, np.append(bounds[present], order.size))
        if R is None:
            R = np.empty_like(So)
            for j in present:
                lo, hi = bounds[j], bounds[j + 1]
                R[lo:hi] = self._segment_member(j).column_probabilities(None, So[lo:hi])
        w = self.weights[sorted_seg][:, None]
        out = G.copy()
        out[order] = w * R + (1.0 - w) * G[order]
        return out

    def _grouped(self, So: np.ndarray, present: np.ndarray, group_bounds: np.ndarray) -> np.ndarray | None:
        """The segments' maps of rows grouped by segment (``present[i]``'s rows from ``group_bounds[i]``),
        one :meth:`~calengine.base.Calibrator.predict_grouped` call per score column: what
        :meth:`Member.column_probabilities` of each segment gives, bit for bit.  None where that hook
        does not apply (a multiclass scaling, calibrators of different classes): the caller loops."""
        from ..plugins.calls import plugin_errors

        if self.base.scales_matrix:
            return None
        R = np.empty_like(So)
        for b in range(So.shape[1]):
            cals = [self.segment_cals[j][b] for j in present]
            kind = type(cals[0])
            if any(type(c) is not kind for c in cals) or not hasattr(kind, "predict_grouped"):
                return None
            with plugin_errors(cals[0], "predict"):
                R[:, b] = kind.predict_grouped(cals, So[:, b], group_bounds)
        return np.clip(R, 0.0, 1.0)
