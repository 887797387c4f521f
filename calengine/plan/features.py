"""Turning table columns into a feature matrix, identically at fit and at scoring time.

Encoding rules (documented in the README, stored in the model manifest as JSON):

* **numeric** (integers, floats, nullable integers) and **boolean** columns become one float column.
  Missing values (null, NaN, +/-inf) are replaced by the training median; if the column had missing
  values at fit time an extra 0/1 column ``<name>=<missing>`` says which rows were filled, so the
  learner can still use missingness.  A column missing everything is filled with 0.
* **categorical** (string / categorical / object) columns are one-hot encoded over the
  ``max_categories`` most frequent training values (ties broken by value); missing is its own
  category ``<missing>``; rarer values share an ``<other>`` column.  Values never seen at fit time go to
  ``<other>`` when the model has one, otherwise the row gets zeros for that column.
* **text** columns (named with ``text_columns``, or string columns whose values average more than
  ``text_min_length`` characters with mostly distinct values) become hashed bag-of-words counts
  (``2**text_hash_bits`` columns, sparse); hashing needs no vocabulary, so nothing but the settings is
  stored and the transform is identical on any worker.

The result is dense float64, or scipy CSR as soon as a text column is present.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..reductions.column_stats import as_float as _as_float, as_text as _as_text
from ..errors import DataError

MISSING = "<missing>"
OTHER = "<other>"


@dataclass
class ColumnEncoding:
    name: str
    kind: str  # "numeric" | "categorical" | "text"
    fill: float = 0.0
    missing_indicator: bool = False
    categories: list[str] = field(default_factory=list)
    other: bool = False

    def width(self, hash_bits: int) -> int:
        if self.kind == "numeric":
            return 1 + int(self.missing_indicator)
        if self.kind == "categorical":
            return len(self.categories) + int(self.other)
        return 2**hash_bits


@dataclass
class FeatureEncoder:
    """Column encodings fitted on a training table; ``transform`` applies them to any other table."""

    max_categories: int = 100
    text_columns: tuple[str, ...] = ()
    text_hash_bits: int = 18
    text_min_length: int = 40
    columns_: list[ColumnEncoding] = field(default_factory=list)

    def fit(self, df) -> "FeatureEncoder":
        """Fit on an in-memory DataFrame: the statistics of one partition (see ``fit_stats``)."""
        from ..reductions.column_stats import partition_stats

        if df.shape[1] == 0:
            raise DataError("no feature columns left; check features/exclude", parameter=("features", "exclude"))
        self._check_text_columns(list(df.columns))
        return self.fit_stats(partition_stats(df, list(df.columns), text_columns=tuple(self.text_columns)))

    def _check_text_columns(self, columns: list[str]) -> None:
        unknown_text = [c for c in self.text_columns if c not in columns]
        if unknown_text:
            raise DataError(f"text_columns names '{unknown_text[0]}', which is not a feature column of the table", parameter="text_columns")

    def fit_stats(self, stats) -> "FeatureEncoder":
        """Fit from merged :class:`calengine.reductions.column_stats.TableStats` of the training rows.

        This is the whole fit: a partitioned table's statistics are merged over its fragments and
        arrive here, so the encoding never needs the rows in one place.
        """
        if not stats.columns:
            raise DataError("no feature columns left; check features/exclude", parameter=("features", "exclude"))
        if stats.n_rows == 0:
            raise DataError("the training table has no rows")
        self._check_text_columns(list(stats.columns))
        encodings = []
        for name, col in stats.columns.items():
            if col.kind == "numeric":
                num = col.numeric
                encodings.append(
                    ColumnEncoding(name, "numeric", fill=num.median(), missing_indicator=bool(num.missing))
                )
            elif name in self.text_columns or self._looks_like_text(col.strings):
                encodings.append(ColumnEncoding(name, "text"))
            else:
                counts = col.strings.counts
                order = sorted(counts, key=lambda v: (-counts[v], v))
                kept = sorted(order[: self.max_categories])
                encodings.append(
                    ColumnEncoding(name, "categorical", categories=kept, other=len(counts) > len(kept) or col.strings.truncated)
                )
        self.columns_ = encodings
        return self

    def _looks_like_text(self, strings) -> bool:
        """Long, mostly distinct strings: free text to hash rather than categories to one-hot."""
        if strings.nonnull < 20:
            return False
        mean_len = strings.total_length / strings.nonnull
        return mean_len >= self.text_min_length and strings.distinct_ratio() > 0.5

    @property
    def input_columns(self) -> list[str]:
        return [c.name for c in self.columns_]

    @property
    def is_sparse(self) -> bool:
        return any(c.kind == "text" for c in self.columns_)

    @property
    def feature_names(self) -> list[str]:
        names: list[str] = []
        for c in self.columns_:
            if c.kind == "numeric":
                names.append(c.name)
                if c.missing_indicator:
                    names.append(f"{c.name}={MISSING}")
            elif c.kind == "categorical":
                names += [f"{c.name}={v}" for v in c.categories]
                if c.other:
                    names.append(f"{c.name}={OTHER}")
            else:
                names += [f"{c.name}#hash{i}" for i in range(2**self.text_hash_bits)]
        return names

    def transform(self, df, order: str = "C"):
        """Feature matrix for ``df`` (dense float64, or CSR when a text column is present).

        ``order="F"`` returns a dense matrix in Fortran order (the encoding buffer itself, no
        transposing copy): for in-task code that reads it column by column (naive Bayes statistics)
        or a block of rows at a time.
        """
        missing = [c.name for c in self.columns_ if c.name not in df.columns]
        if missing:
            raise DataError(
                f"column '{missing[0]}' used by the model is not in the table; score data with the"
                " same columns as the training data"
            )
        n = len(df)
        if not self.is_sparse:
            # dense: each column written into a row of a (width, n) buffer -- contiguous writes -- and the
            # buffer transposed once into the C-ordered (n, width) matrix the learners expect; writing
            # columns of a C-ordered matrix directly is strided and about 3x slower on wide frames
            width = sum(c.width(self.text_hash_bits) for c in self.columns_)
            buf = np.empty((width, n), dtype=np.float64)
            j = 0
            for c in self.columns_:
                if c.kind == "numeric":
                    self._numeric_into(c, df[c.name], buf[j])
                    self._fill_missing(c, buf, j)
                else:
                    buf[j : j + c.width(self.text_hash_bits)] = self._one_hot(c, df[c.name], n).T
                j += c.width(self.text_hash_bits)
            return buf.T if order == "F" else np.ascontiguousarray(buf.T)
        blocks = []
        for c in self.columns_:
            series = df[c.name]
            if c.kind == "numeric":
                values = self._numeric(c, series)
                isnan = np.isnan(values)
                values[isnan] = c.fill
                cols = [values]
                if c.missing_indicator:
                    cols.append(isnan.astype(np.float64))
                blocks.append(np.column_stack(cols))
            elif c.kind == "categorical":
                blocks.append(self._one_hot(c, series, n))
            else:
                blocks.append(self._hash_text(series))
        import scipy.sparse as sp

        return sp.hstack([sp.csr_matrix(b) for b in blocks], format="csr", dtype=np.float64)

    def reads_arrow(self, schema) -> bool:
        """Whether :meth:`transform_arrow` encodes batches of this Arrow schema (see there)."""
        import pyarrow.types as pat

        if self.is_sparse:
            return False
        names = schema.names
        for c in self.columns_:
            if c.kind != "numeric" or c.name not in names:
                return False
            kind = schema.field(c.name).type
            if not (pat.is_integer(kind) or pat.is_floating(kind)):
                return False
        return True

    def transform_arrow(self, batch, order: str = "C"):
        """:meth:`transform` of an Arrow ``RecordBatch`` without pandas, or None when this fast path
        does not apply (then convert the batch to pandas and call :meth:`transform`).

        It applies when every encoded column is numeric and arrives as an Arrow integer or floating
        column: each is copied straight from its Arrow buffer into the float64 matrix (nulls become
        NaN and then the column's fill, as through pandas), so the matrix is the same bits as
        :meth:`transform` of ``batch.to_pandas()``.  Why: on two threads, building and indexing the
        pandas frame held the GIL for a third of a batch's scoring (py-spy ``--gil``).
        """
        if not self.reads_arrow(batch.schema):
            return None
        names = batch.schema.names
        arrays = [batch.column(names.index(c.name)) for c in self.columns_]
        width = sum(c.width(self.text_hash_bits) for c in self.columns_)
        buf = np.empty((width, batch.num_rows), dtype=np.float64)
        j = 0
        for c, arr in zip(self.columns_, arrays):
            np.copyto(buf[j], arr.to_numpy(zero_copy_only=False), casting="unsafe")
            self._fill_missing(c, buf, j)
            j += c.width(self.text_hash_bits)
        return buf.T if order == "F" else np.ascontiguousarray(buf.T)

    @staticmethod
    def _fill_missing(c: ColumnEncoding, buf: np.ndarray, j: int) -> None:
        """Replace the non-finite values of numeric column ``c`` (row ``j`` of the features-by-rows
        ``buf``) by its fill, and write its missing indicator into row ``j + 1`` if it has one."""
        row = buf[j]
        if not c.missing_indicator and np.isfinite(np.add.reduce(row)):
            return  # no NaN or infinity in the row (either would make its sum non-finite): nothing to fill
        bad = ~np.isfinite(row)
        if bad.any():
            row[bad] = c.fill
        if c.missing_indicator:
            buf[j + 1] = bad

    @staticmethod
    def _numeric(c: ColumnEncoding, series) -> np.ndarray:
        """A fresh float64 copy of a numeric column, NaN where missing."""
        try:
            return _as_float(series)
        except (TypeError, ValueError) as exc:
            raise DataError(
                f"column '{c.name}' was numeric at fit time but holds non-numbers now; fix its type"
            ) from exc

    @classmethod
    def _numeric_into(cls, c: ColumnEncoding, series, out: np.ndarray) -> None:
        """Write a numeric column into ``out`` as float64 (NaN or +-inf where missing or non-finite)."""
        dtype = series.dtype
        if isinstance(dtype, np.dtype) and dtype.kind in "biuf":
            np.copyto(out, series.to_numpy(), casting="unsafe")  # plain NumPy column: no temporary copy
        else:
            out[:] = cls._numeric(c, series)

    @staticmethod
    def _one_hot(c: ColumnEncoding, series, n: int) -> np.ndarray:
        text = _as_text(series)
        text = np.where(text == None, MISSING, text).astype(str)  # noqa: E711
        index = {v: i for i, v in enumerate(c.categories)}
        width = len(c.categories) + int(c.other)
        out = np.zeros((n, width), dtype=np.float64)
        pos = np.array([index.get(v, -1) for v in text], dtype=np.int64)
        known = pos >= 0
        out[np.nonzero(known)[0], pos[known]] = 1.0
        if c.other:
            out[np.nonzero(~known)[0], width - 1] = 1.0
        return out

    def _hash_text(self, series):
        from sklearn.feature_extraction.text import HashingVectorizer

        vec = HashingVectorizer(
            n_features=2**self.text_hash_bits, alternate_sign=False, norm=None, lowercase=True
        )
        text = [t if t is not None else "" for t in _as_text(series)]
        return vec.transform(text)

    def to_json(self) -> dict[str, Any]:
        return {
            "max_categories": self.max_categories,
            "text_columns": list(self.text_columns),
            "text_hash_bits": self.text_hash_bits,
            "text_min_length": self.text_min_length,
            "columns": [asdict(c) for c in self.columns_],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "FeatureEncoder":
        enc = cls(
            max_categories=int(d["max_categories"]),
            text_columns=tuple(d.get("text_columns", ())),
            text_hash_bits=int(d.get("text_hash_bits", 18)),
            text_min_length=int(d.get("text_min_length", 40)),
        )
        enc.columns_ = [ColumnEncoding(**c) for c in d["columns"]]
        return enc


def select_feature_columns(
    all_columns: list[str], target: str, features: list[str] | None, exclude: list[str] | None
) -> list[str]:
    """The feature columns: ``features`` if given, else every column but the target and ``exclude``."""
    exclude = list(exclude or [])
    for col in exclude + list(features or []):
        if col not in all_columns:
            raise DataError(f"column '{col}' is not in the table; available columns: {', '.join(all_columns)}")
    if features:
        if target in features:
            raise DataError(f"the target '{target}' cannot also be a feature; remove it from features", parameter="features")
        chosen = [c for c in features if c not in exclude]
    else:
        chosen = [c for c in all_columns if c != target and c not in exclude]
    if not chosen:
        raise DataError("no feature columns left; check features/exclude", parameter=("features", "exclude"))
    return chosen
