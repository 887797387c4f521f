"""Code matrices: fixed designs, seeded random ECOC, validation, loading, names, column targets."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calengine.methods import codematrix as cm
from calengine.errors import CodeMatrixError, DataError, ParameterError


def canonical_columns(M):
    """Columns as tuples, each negated so its first non-zero entry is +1 (a column and its negation
    are the same binary problem)."""
    out = []
    for col in M.T:
        first = col[np.flatnonzero(col)[0]]
        out.append(tuple((col * first).tolist()))
    return out


# ------------------------------------------------------------------------------------------------
# fixed designs


def test_all_pairs_k3_is_the_papers_matrix():
    # Zadrozny & Elkan (2002) section 4: columns (1v2), (1v3), (2v3)
    assert cm.all_pairs(3).tolist() == [[1, 1, 0], [-1, 0, 1], [0, -1, -1]]


def test_all_pairs_column_order_and_signs():
    M = cm.all_pairs(5)
    assert M.shape == (5, 10)
    pairs = [(int(np.flatnonzero(c == 1)[0]), int(np.flatnonzero(c == -1)[0])) for c in M.T]
    assert pairs == [(0, 1), (0, 2), (0, 3), (0, 4), (1, 2), (1, 3), (1, 4), (2, 3), (2, 4), (3, 4)]


def test_one_vs_all_and_k_minus_one():
    assert cm.one_vs_all(3).tolist() == [[1, -1, -1], [-1, 1, -1], [-1, -1, 1]]
    assert cm.k_minus_one(4).tolist() == [[1, -1, -1], [-1, 1, -1], [-1, -1, 1], [-1, -1, -1]]
    assert cm.k_minus_one(2).tolist() == [[1], [-1]]


@pytest.mark.parametrize("k", [2, 3, 7])
@pytest.mark.parametrize("build", [cm.one_vs_all, cm.all_pairs, cm.k_minus_one])
def test_fixed_designs_validate(build, k):
    M = build(k)
    assert np.array_equal(cm.validate_matrix(M, k), M)


@pytest.mark.parametrize("bad", [1, 0, -3, 2.5, "3", True])
def test_bad_class_count_rejected(bad):
    with pytest.raises(CodeMatrixError):
        cm.one_vs_all(bad)


def test_matrix_kinds():
    assert cm.matrix_kind(cm.one_vs_all(4)) == "one_vs_all"
    assert cm.matrix_kind(cm.all_pairs(4)) == "all_pairs"
    assert cm.matrix_kind(cm.k_minus_one(4)) == "k_minus_one"
    assert cm.matrix_kind(cm.dense_random(8)) == "dense"
    assert cm.matrix_kind(cm.sparse_random(8)) == "sparse"
    # column order and (for pairs) sign do not matter
    perm = np.random.default_rng(0).permutation(6)
    assert cm.is_all_pairs(cm.all_pairs(4)[:, perm] * np.array([1, -1, 1, -1, 1, -1]))
    assert cm.is_one_vs_all(cm.one_vs_all(4)[:, [2, 0, 3, 1]])
    assert cm.is_k_minus_one(cm.one_vs_all(4)[:, [3, 0, 2]])
    assert not cm.is_one_vs_all(cm.k_minus_one(4))
    assert not cm.is_all_pairs(np.hstack([cm.all_pairs(3)[:, :2], cm.all_pairs(3)[:, :1]]))


# ------------------------------------------------------------------------------------------------
# random ECOC


@pytest.mark.parametrize("gen,factor", [(cm.dense_random, 10), (cm.sparse_random, 15)])
def test_default_column_counts(gen, factor):
    for k in (6, 10, 16):
        assert gen(k, n_candidates=20).shape == (k, math.ceil(factor * math.log2(k)))


def test_small_k_is_capped_at_the_distinct_columns():
    # dense: 2^(k-1) - 1 distinct columns up to sign; sparse: (3^k - 2^(k+1) + 1) / 2
    assert cm.dense_random(2).shape == (2, 1)
    assert cm.dense_random(3).shape == (3, 3)
    assert cm.dense_random(4).shape == (4, 7)
    assert cm.sparse_random(3).shape == (3, 6)
    assert cm.sparse_random(4).shape == (4, 25)
    with pytest.raises(CodeMatrixError, match="at most 3"):
        cm.dense_random(3, n_columns=4)


@pytest.mark.parametrize("gen", [cm.dense_random, cm.sparse_random])
def test_random_matrices_are_seeded(gen):
    a = gen(9, seed=5, n_candidates=50)
    assert np.array_equal(a, gen(9, seed=5, n_candidates=50))
    assert not np.array_equal(a, gen(9, seed=6, n_candidates=50))


@settings(max_examples=50, deadline=None)
@given(
    k=st.integers(2, 14),
    seed=st.integers(0, 2**32 - 1),
    sparse=st.booleans(),
    n_columns=st.one_of(st.none(), st.integers(6, 30)),
)
def test_random_matrices_are_valid(k, seed, sparse, n_columns):
    gen = cm.sparse_random if sparse else cm.dense_random
    limit = (3**k - 2 ** (k + 1) + 1) // 2 if sparse else 2 ** (k - 1) - 1
    if n_columns is not None and n_columns > limit:
        with pytest.raises(CodeMatrixError):
            gen(k, n_columns=n_columns, seed=seed, n_candidates=20)
        return
    M = gen(k, n_columns=n_columns, seed=seed, n_candidates=20)
    assert np.array_equal(cm.validate_matrix(M, k), M)
    assert len({tuple(r) for r in M.tolist()}) == k  # rows distinct
    cols = canonical_columns(M)
    assert len(set(cols)) == len(cols)  # no column repeats or negates another
    assert set(np.unique(M).tolist()) <= ({-1, 0, 1} if sparse else {-1, 1})


def test_more_candidates_never_separate_rows_worse():
    def min_hamming(M):
        return min(int((M[i] != M[j]).sum()) for i in range(len(M)) for j in range(i))

    # the first candidates are the same draws whatever n_candidates is, so the best can only improve
    few = cm.dense_random(10, seed=3, n_candidates=5)
    many = cm.dense_random(10, seed=3, n_candidates=300)
    assert min_hamming(many) >= min_hamming(few)
    assert min_hamming(many) >= 12


def test_sparse_entries_are_about_half_zero():
    M = cm.sparse_random(30, seed=1, n_candidates=20)
    assert 0.4 < (M == 0).mean() < 0.6
    assert abs((M == 1).mean() - (M == -1).mean()) < 0.06


def test_random_generation_rejects_bad_column_count():
    with pytest.raises(CodeMatrixError, match="positive integer"):
        cm.dense_random(5, n_columns=0)


# ------------------------------------------------------------------------------------------------
# validation


@pytest.mark.parametrize(
    "M,k,match",
    [
        ([[1, 0.5], [-1, 1], [0, -1]], 3, "row 0, column 1"),
        ([[1, 2], [-1, 1], [0, -1]], 3, "not -1, 0 or \\+1"),
        ([[1, np.nan], [-1, 1], [0, -1]], 3, "not -1, 0 or \\+1"),
        ([[1, -1], [-1, 1]], 3, "2 rows but there are 3 classes"),
        ([[1, 1], [1, -1], [0, -1]], 3, "column 0 .* no -1"),
        ([[1, -1], [-1, -1], [0, -1]], 3, "column 1 .* no \\+1"),
        ([[1, 1], [-1, -1], [0, 0]], 3, "class 2 \\(row 2\\) is 0 in every column"),
        ([[1, 1], [-1, -1], [-1, -1]], 3, "rows 1 and 2 .* identical"),
        ([[1, 0], [-1, 0], [0, 1], [0, -1]], 4, "never appear together"),
        ([1, -1], 2, "must be 2-D"),
        ([[1, -1], [-1]], 2, "rectangular"),
        (np.zeros((2, 0)), 2, "no columns"),
        ([["a", "b"], ["c", "d"]], 2, "rectangular table of numbers"),
    ],
)
def test_bad_matrices_rejected(M, k, match):
    with pytest.raises(CodeMatrixError, match=match):
        cm.validate_matrix(M, k)


def test_code_matrix_error_is_a_parameter_error():
    with pytest.raises(ParameterError):
        cm.validate_matrix([[1, 1], [1, 1]], 2)


def test_validation_accepts_float_entries_and_negated_columns():
    M = cm.validate_matrix(np.array([[1.0, -1.0], [-1.0, 1.0]]), 2)
    assert M.dtype == np.int64 and M.tolist() == [[1, -1], [-1, 1]]
    # rows that differ only where one of them is 0 are distinct and identifiable
    assert cm.validate_matrix([[1, 0], [1, 1], [-1, -1]], 3).tolist() == [[1, 0], [1, 1], [-1, -1]]
    # ... but two equal rows are not
    with pytest.raises(CodeMatrixError):
        cm.validate_matrix([[1, 0], [1, 0], [-1, -1]], 3)


# ------------------------------------------------------------------------------------------------
# loading and names


def test_load_csv(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("1, -1, 0\n-1, +1, 1\n\n0,0,-1\n")
    assert cm.load_matrix(path, 3).tolist() == [[1, -1, 0], [-1, 1, 1], [0, 0, -1]]


def test_load_single_column_csv(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("1\n-1\n")
    assert cm.load_matrix(str(path), 2).tolist() == [[1], [-1]]


def test_load_json_list_and_object(tmp_path):
    rows = cm.all_pairs(3).tolist()
    a, b = tmp_path / "a.json", tmp_path / "b.txt"
    a.write_text(json.dumps(rows))
    b.write_text(json.dumps({"matrix": rows, "note": "sniffed from content, not the extension"}))
    assert cm.load_matrix(a, 3).tolist() == rows
    assert cm.load_matrix(b, 3).tolist() == rows


@pytest.mark.parametrize(
    "text,match",
    [
        ("a,b\n1,-1\n", "line 1"),
        ("1,-1\n-1\n", "different lengths"),
        ('{"rows": [[1, -1], [-1, 1]]}', '"matrix"'),
        ("[[1, -1], [-1, 1]", "not valid JSON"),
        ('[["1", -1], [-1, 1]]', "numbers"),
        ("1,-1\n-1,1\n1,1\n", "3 rows but there are 2"),
    ],
)
def test_load_rejects_bad_files(tmp_path, text, match):
    path = tmp_path / "m.csv"
    path.write_text(text)
    with pytest.raises(CodeMatrixError, match=match):
        cm.load_matrix(path, 2)


def test_load_missing_file(tmp_path):
    with pytest.raises(CodeMatrixError, match="cannot read"):
        cm.load_matrix(tmp_path / "nope.csv", 3)


@pytest.mark.parametrize(
    "spec,expected",
    [
        ("one_vs_all", cm.one_vs_all(4)),
        ("OVA", cm.one_vs_all(4)),
        ("ovr", cm.one_vs_all(4)),
        ("all-pairs", cm.all_pairs(4)),
        ("ovo", cm.all_pairs(4)),
        ("k_minus_one", cm.k_minus_one(4)),
        ("dense_ecoc", cm.dense_random(4, seed=7)),
        ("sparse_ecoc", cm.sparse_random(4, seed=7)),
    ],
)
def test_make_matrix_names(spec, expected):
    assert np.array_equal(cm.make_matrix(spec, 4, seed=7), expected)


def test_make_matrix_file(tmp_path):
    path = tmp_path / "My Matrix.CSV"
    path.write_text("1,1\n-1,0\n0,-1\n")
    assert cm.make_matrix(f"file:{path}", 3).tolist() == [[1, 1], [-1, 0], [0, -1]]
    with pytest.raises(CodeMatrixError, match="needs a path"):
        cm.make_matrix("file:", 3)


def test_make_matrix_unknown_name_lists_choices():
    with pytest.raises(CodeMatrixError, match="one_vs_all.*file:PATH"):
        cm.make_matrix("one_vs_one", 3)


# ------------------------------------------------------------------------------------------------
# column targets


def test_binary_targets():
    y = np.array([0, 1, 2, 2, 1, 0])
    M = cm.all_pairs(3)
    mask, t = cm.binary_targets(y, M, 1)  # class 0 (+1) vs class 2 (-1)
    assert mask.tolist() == [True, False, True, True, False, True]
    assert t.tolist() == [1, 0, 0, 1]
    mask, t = cm.binary_targets(y, cm.one_vs_all(3), 2)
    assert mask.all() and t.tolist() == [0, 0, 1, 1, 0, 0]


def test_binary_targets_rejects_bad_input():
    with pytest.raises(DataError):
        cm.binary_targets(np.array([0, 3]), cm.all_pairs(3), 0)
    with pytest.raises(DataError):
        cm.binary_targets(np.array([0.0, 1.0]), cm.all_pairs(3), 0)
    with pytest.raises(CodeMatrixError):
        cm.binary_targets(np.array([0, 1]), cm.all_pairs(3), 3)
