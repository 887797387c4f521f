"""Reading named numeric columns as they are: the "encoding" of a model whose learner is not ours.

A model fitted by calengine encodes its feature columns (:class:`calengine.plan.features.FeatureEncoder`).
A model that calibrates scores computed elsewhere -- a table's score columns (``calengine fit
--scores``), or later a fitted model loaded from a file -- has nothing to encode: it reads a fixed list
of numeric columns, in a fixed order, and hands them to a learner that was never fitted by calengine
(:attr:`calengine.base.Learner.prefit`).  :class:`ColumnReader` is that reading.  It plays the
encoder's part everywhere a model is applied (``fit``'s passes, ``score``, ``decide``, ``evaluate``,
``recalibrate``, ``cv``), so the model records exactly the columns it reads (the manifest's
``features``), and a table that has them can be scored whatever else it holds.

What it checks, each as one :class:`~calengine.errors.DataError` naming the column and the fix: the
column exists and is numeric; for score columns every value is finite (a missing, NaN or infinite
score has no calibrated probability), and with ``score_kind="proba"`` within [0, 1] (up to rounding,
:data:`PROBA_TOLERANCE`, then clipped).  ``allow_missing=True`` passes NaN through instead (features
of a fitted booster, whose missing-value handling is its own).

``as_frame=True`` (the feature columns of a scikit-learn model trained elsewhere: a ``--prefit`` skops
file, a saved ``FrozenEstimator``) reads the columns as they are, as a pandas DataFrame in the model's
column order -- strings, categories and missing values included -- and checks nothing but that they
exist: the model was trained on its own representation (a ``ColumnTransformer`` with a
``OneHotEncoder``, a ``HistGradientBoostingClassifier`` that handles NaN), and calengine validates only
what its calibrators read, the model's scores.  Such a reader never takes the Arrow-only path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DataError

#: probability scores may leave [0, 1] by this much (rounding in whatever wrote them); they are clipped
PROBA_TOLERANCE = 1e-9

#: the largest magnitude of a decision or logit score a fit calibrates (``fit --scores``,
#: ``recalibrate``).  Calibrators sum weighted scores and their squares (Platt's start histogram and
#: the summaries ``recalibrate --update`` merges, temperature scaling's Newton steps); within this bound
#: and :data:`calengine.reductions.column_stats.MAX_WEIGHT` those sums stay finite.  Scores around 1e305
#: made a sigmoid fit publish a model whose sums were infinite, which ``calengine score`` then refused;
#: no model's log-odds or margins come near 1e50 (scoring is not bounded: only fitting sums scores).
MAX_FIT_SCORE = 1e50

READER_KIND = "columns"
ROLES = ("score", "feature")
READ_KINDS = ("proba", "decision", "logit")


@dataclass(frozen=True)
class EncodedColumn:
    """What :mod:`calengine.plan.memory` and the model probe read of an encoded column."""

    name: str
    kind: str = "numeric"

    def width(self, hash_bits: int = 0) -> int:
        return 1


@dataclass
class ColumnReader:
    """Named numeric columns, read in order into a float64 ``(n, len(columns))`` matrix (see module doc).

    ``role``: ``"score"`` (scores of a model computed elsewhere) or ``"feature"`` (a fitted model's
    inputs), used in messages.  ``score_kind``: ``"proba"`` checks [0, 1]; ``"decision"`` and
    ``"logit"`` any finite value; None (features) checks nothing but numbers.
    """

    columns: list[str]
    role: str = "score"
    score_kind: str | None = None
    allow_missing: bool = False
    #: hand the columns on as a pandas DataFrame, unconverted (module docstring)
    as_frame: bool = False
    #: the encoder interface: hashed text has no bits here (no text columns)
    text_hash_bits: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        self.columns = [str(c) for c in self.columns]
        if not self.columns:
            raise DataError(f"a {self.role} reader needs at least one column")
        if len(set(self.columns)) != len(self.columns):
            dup = next(c for c in self.columns if self.columns.count(c) > 1)
            raise DataError(f"{self.role} column '{dup}' is named twice; name each column once")
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")
        if self.score_kind is not None and self.score_kind not in READ_KINDS:
            raise ValueError(f"score_kind must be one of {READ_KINDS}, got {self.score_kind!r}")

    # ------------------------------------------------------------------ the encoder interface

    @property
    def input_columns(self) -> list[str]:
        return list(self.columns)

    @property
    def feature_names(self) -> list[str]:
        return list(self.columns)

    @property
    def is_sparse(self) -> bool:
        return False

    @property
    def columns_(self) -> list[EncodedColumn]:
        """One numeric column each (what the memory estimates and the model probe count)."""
        return [EncodedColumn(c) for c in self.columns]

    def transform(self, df, order: str = "C") -> np.ndarray:
        """The columns of the pandas DataFrame ``df`` as float64 ``(n, m)``, checked (module doc)."""
        import pandas as pd

        missing = [c for c in self.columns if c not in df.columns]
        if missing:
            raise DataError(
                f"{self.role} column '{missing[0]}' read by the model is not in the table; give a table with"
                f" the columns {', '.join(self.columns)}"
            )
        if self.as_frame:
            return df[list(self.columns)]
        buf = np.empty((len(self.columns), len(df)), dtype=np.float64)
        for j, name in enumerate(self.columns):
            series = df[name]
            dtype = series.dtype
            if isinstance(dtype, np.dtype) and dtype.kind in "biuf":
                np.copyto(buf[j], series.to_numpy(), casting="unsafe")
            elif pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype):
                buf[j] = series.to_numpy(dtype=np.float64, na_value=np.nan)
            else:
                raise DataError(self._not_numeric(name, str(dtype)))
        return self._checked(buf, order)

    def reads_arrow(self, schema) -> bool:
        """Whether :meth:`transform_arrow` reads batches of this Arrow schema (integer or float columns)."""
        import pyarrow.types as pat

        if self.as_frame:
            return False
        names = schema.names
        for c in self.columns:
            if c not in names:
                return False
            kind = schema.field(c).type
            if not (pat.is_integer(kind) or pat.is_floating(kind)):
                return False
        return True

    def transform_arrow(self, batch, order: str = "C"):
        """:meth:`transform` of an Arrow ``RecordBatch`` without pandas (None when it does not apply)."""
        if not self.reads_arrow(batch.schema):
            return None
        from ..parquet.dataset import arrow_numpy

        names = batch.schema.names
        buf = np.empty((len(self.columns), batch.num_rows), dtype=np.float64)
        for j, c in enumerate(self.columns):
            np.copyto(buf[j], arrow_numpy(batch.column(names.index(c))), casting="unsafe")
        return self._checked(buf, order)

    def _checked(self, buf: np.ndarray, order: str) -> np.ndarray:
        """``buf`` (columns x rows) checked and clipped, as an (n, m) matrix in ``order``."""
        if not self.allow_missing:
            bad = ~np.isfinite(buf)
            if bad.any():
                j, i = np.argwhere(bad)[0]
                raise DataError(
                    f"{self.role} column '{self.columns[j]}' holds {_shown(buf[j, i])} (row {int(i)} of a batch);"
                    f" every {self.role} must be a finite number: drop or fix those rows"
                )
        if self.score_kind == "proba":
            outside = (buf < -PROBA_TOLERANCE) | (buf > 1.0 + PROBA_TOLERANCE)
            if outside.any():
                j, i = np.argwhere(outside)[0]
                raise DataError(
                    f"{self.role} column '{self.columns[j]}' holds {buf[j, i]:.6g}, outside [0, 1], but score_kind"
                    " is proba; pass score_kind decision (or logit) for scores that are not probabilities", parameter="score_kind")
            np.clip(buf, 0.0, 1.0, out=buf)
        return buf.T if order == "F" else np.ascontiguousarray(buf.T)

    def _not_numeric(self, name: str, type_name: str) -> str:
        return (
            f"{self.role} column '{name}' has type {type_name}, not numbers; {self.role} columns must be"
            " numeric (write them as floats)"
        )

    # ------------------------------------------------------------------ manifest

    def to_json(self) -> dict[str, Any]:
        out = {"kind": READER_KIND, "columns": list(self.columns), "role": self.role,
               "score_kind": self.score_kind, "allow_missing": bool(self.allow_missing)}
        if self.as_frame:  # only then: the manifests of every other model stay as they were
            out["as_frame"] = True
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ColumnReader":
        return cls(columns=list(d["columns"]), role=str(d.get("role", "score")), score_kind=d.get("score_kind"),
                   allow_missing=bool(d.get("allow_missing", False)), as_frame=bool(d.get("as_frame", False)))


def check_fit_scores(encoder, X) -> None:
    """Refuse, in one line naming the column and the bound, a decision or logit score column whose
    magnitude exceeds :data:`MAX_FIT_SCORE` in the rows ``X`` a fit reads through ``encoder`` (nothing
    to check for other encoders: features are encoded, probabilities lie in [0, 1])."""
    if not isinstance(encoder, ColumnReader) or encoder.role != "score" or encoder.score_kind not in ("decision", "logit"):
        return
    X = np.asarray(X)
    if not X.size or (X.max() <= MAX_FIT_SCORE and X.min() >= -MAX_FIT_SCORE):
        return
    i, j = np.argwhere(np.abs(X) > MAX_FIT_SCORE)[0]
    raise DataError(
        f"score column '{encoder.columns[j]}' holds {X[i, j]:g} (row {int(i)} of a batch); a fit calibrates"
        f" scores of magnitude at most {MAX_FIT_SCORE:g}: divide the column by a constant (or drop those rows)"
    )


def _shown(value: float) -> str:
    if np.isnan(value):
        return "a missing value (NaN or null)"
    return f"{value:g}"


def check_numeric_columns(dataset, columns: list[str], role: str) -> None:
    """Each of ``columns`` is numeric in the described table (from its footers), else one line."""
    for c in columns:
        kind = dataset.kinds.get(c)
        if kind is not None and kind != "numeric":
            raise DataError(
                f"{role} column '{c}' has type {dataset.types.get(c, kind)}, not numbers; {role} columns must be"
                " numeric (write them as floats)"
            )


def encoder_from_json(d: dict[str, Any] | None):
    """The encoder a manifest's ``features`` describes: a :class:`ColumnReader` (``"kind": "columns"``)
    or a :class:`calengine.plan.features.FeatureEncoder`; None when there is none."""
    if not d:
        return None
    if d.get("kind") == READER_KIND:
        return ColumnReader.from_json(d)
    from .features import FeatureEncoder

    return FeatureEncoder.from_json(d)
