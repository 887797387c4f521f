"""Feature encoding: numeric, boolean, categorical, missing, unseen categories, text; fit == score."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from calengine.errors import DataError
from calengine.plan.features import FeatureEncoder, select_feature_columns


def _frame():
    return pd.DataFrame(
        {
            "age": [30, 40, None, 50],
            "score": [0.5, np.inf, 1.5, np.nan],
            "member": [True, False, True, False],
            "colour": ["red", "blue", None, "red"],
        }
    ).astype({"age": "Int64", "colour": "string"})  # "string", not "str": pandas 2.2's astype("str") writes None as "None"


def test_numeric_missing_filled_with_median_and_flagged():
    enc = FeatureEncoder().fit(_frame())
    X = enc.transform(_frame())
    names = enc.feature_names
    assert names[:4] == ["age", "age=<missing>", "score", "score=<missing>"]
    np.testing.assert_array_equal(X[:, 0], [30, 40, 40, 50])  # median of 30, 40, 50
    np.testing.assert_array_equal(X[:, 1], [0, 0, 1, 0])
    np.testing.assert_array_equal(X[:, 2], [0.5, 1.0, 1.5, 1.0])  # inf and NaN are missing
    np.testing.assert_array_equal(X[:, 4], [1, 0, 1, 0])  # booleans are 0/1


def test_categories_missing_and_unseen_values():
    enc = FeatureEncoder().fit(_frame())
    cols = [n for n in enc.feature_names if n.startswith("colour=")]
    assert cols == ["colour=<missing>", "colour=blue", "colour=red"]
    new = _frame().assign(colour=["green", "red", None, "blue"])
    X = enc.transform(new)
    block = X[:, [enc.feature_names.index(c) for c in cols]]
    np.testing.assert_array_equal(block, [[0, 0, 0], [0, 0, 1], [1, 0, 0], [0, 1, 0]])


def test_rare_categories_share_other_and_unseen_go_there():
    df = pd.DataFrame({"c": ["a"] * 5 + ["b"] * 3 + ["c", "d"]})
    enc = FeatureEncoder(max_categories=2).fit(df)
    assert enc.feature_names == ["c=a", "c=b", "c=<other>"]
    X = enc.transform(pd.DataFrame({"c": ["a", "d", "zzz"]}))
    np.testing.assert_array_equal(X, [[1, 0, 0], [0, 0, 1], [0, 0, 1]])


def test_schema_round_trips_through_json():
    enc = FeatureEncoder().fit(_frame())
    again = FeatureEncoder.from_json(enc.to_json())
    np.testing.assert_array_equal(again.transform(_frame()), enc.transform(_frame()))


def test_text_columns_become_sparse_hashed_counts():
    df = pd.DataFrame({"text": ["the cat sat on the mat", "dogs bark", ""], "n": [1.0, 2.0, 3.0]})
    enc = FeatureEncoder(text_columns=("text",), text_hash_bits=10).fit(df)
    X = enc.transform(df)
    assert sp.issparse(X) and X.shape == (3, 1 + 1024)
    assert X[0].sum() == 6 + 1 and X[2].sum() == 3


def test_long_free_text_is_detected_as_text():
    rng = np.random.default_rng(0)
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"])
    docs = [" ".join(rng.choice(words, 12)) for _ in range(50)]
    enc = FeatureEncoder(text_hash_bits=8).fit(pd.DataFrame({"body": docs}))
    assert enc.columns_[0].kind == "text" and enc.is_sparse


def test_missing_column_and_unsupported_type_are_clear_errors():
    enc = FeatureEncoder().fit(_frame())
    with pytest.raises(DataError, match="'colour'"):
        enc.transform(_frame().drop(columns=["colour"]))
    with pytest.raises(DataError, match="exclude when"):
        FeatureEncoder().fit(pd.DataFrame({"when": pd.to_datetime(["2020-01-01", "2021-01-01"])}))
    with pytest.raises(DataError, match="not in the table"):
        select_feature_columns(["a", "b"], "b", None, ["c"])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True, width=32)), min_size=1, max_size=30),
    st.lists(st.one_of(st.none(), st.sampled_from(["x", "y", "z"])), min_size=1, max_size=30),
)
def test_any_column_content_encodes_to_finite_numbers(nums, cats):
    n = min(len(nums), len(cats))
    df = pd.DataFrame({"num": pd.array(nums[:n], dtype="Float64"), "cat": pd.array(cats[:n], dtype="str")})
    enc = FeatureEncoder().fit(df)
    X = enc.transform(df)
    assert X.shape[0] == n and np.isfinite(X).all()
    # the same rows in any order encode to the same rows
    perm = np.random.default_rng(0).permutation(n)
    np.testing.assert_array_equal(enc.transform(df.iloc[perm]), X[perm])


@pytest.mark.parametrize("dtype", [object, "string", "str", "category"])
def test_a_null_in_a_string_column_is_missing_whatever_pandas_reads_it_as(dtype, tmp_path):
    """pandas 3 reads a Parquet string column with nulls as ``StringDtype`` holding ``pd.NA``, whose
    truth value raises: fitting and scoring such a table crashed with a traceback.  A null is a missing
    category, encoded exactly as ``None`` in an object column."""
    from calengine.reductions.column_stats import as_text

    values = ["a", None, "b", "a", None]
    series = pd.Series(values, dtype=dtype)
    assert as_text(series).tolist() == ["a", None, "b", "a", None]
    frame = pd.DataFrame({"c": series, "x": [1.0, 2.0, 3.0, 4.0, 5.0]})
    enc = FeatureEncoder().fit(frame)
    reference = FeatureEncoder().fit(pd.DataFrame({"c": pd.Series(values, dtype=object), "x": frame["x"]}))
    np.testing.assert_array_equal(enc.transform(frame), reference.transform(frame.astype({"c": object})))


@pytest.mark.parametrize("order", ["C", "F"])
def test_transform_arrow_fills_non_finite_values_as_transform_does(order):
    """transform_arrow skips the search for non-finite values when a column's sum is finite; a sum that
    overflows, NaN, infinities and nulls still get the fill (and the indicator), as through pandas."""
    import pyarrow as pa

    fit = pd.DataFrame({"a": [1.0, 2.0, np.nan, 4.0], "b": [1.0, 2.0, 3.0, 4.0], "c": [1e308, 1e308, 5.0, 6.0]})
    enc = FeatureEncoder().fit(fit)
    new = pd.DataFrame({"a": [np.inf, 2.0, np.nan, -np.inf], "b": [1.0, np.nan, 3.0, np.inf],
                        "c": [1e308, 1e308, 7.0, -np.inf]})
    batch = pa.RecordBatch.from_pandas(new, preserve_index=False)
    nulls = pa.RecordBatch.from_arrays([pa.array([1.0, None, 3.0, 4.0]), pa.array([1.0, 2.0, None, 4.0]),
                                        pa.array([1e308, 1e308, None, 2.0])], names=["a", "b", "c"])
    for arrow, frame in ((batch, new), (nulls, nulls.to_pandas())):
        got = enc.transform_arrow(arrow, order=order)
        want = enc.transform(frame)
        assert np.array_equal(got, want)
    clean = pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0], "c": [1e308, 1e308]})  # c's sum overflows
    assert np.array_equal(enc.transform_arrow(pa.RecordBatch.from_pandas(clean, preserve_index=False)),
                          enc.transform(clean))
