"""Code matrices: how a k-class problem is split into binary problems, and back.

A code matrix ``M`` has one row per class (in class-index order) and one column per binary problem,
with entries in {-1, 0, +1} (Allwein, Schapire & Singer 2000; Zadrozny & Elkan 2002, section 4).
Column ``b`` trains a classifier on "classes with +1" (target 1) against "classes with -1" (target 0);
classes with 0 are left out of that problem.  A combiner (``calengine.base.Combiner``) later turns the
calibrated column estimates back into class probabilities.

Everything here is cheap, deterministic numpy: generation is seeded, so the same ``(spec, k, seed)``
gives the same matrix on every machine and the plan that fits one classifier per column is stable.

Matrix names understood by :func:`make_matrix` (case-insensitive, ``-`` read as ``_``)::

    one_vs_all | ova | ovr     k columns, class c against the rest
    all_pairs  | ovo           k(k-1)/2 columns (0v1),(0v2),...,(1v2),...; +1 for the first class
    dense_ecoc                 random +-1 columns, ceil(10 log2 k) by default
    sparse_ecoc                random -1/0/+1 columns (P(0) = 1/2), ceil(15 log2 k) by default
    k_minus_one                k-1 columns, class l against the rest for l = 0..k-2 (Probing)
    file:PATH                  a CSV (k rows, no header) or JSON file, see :func:`load_matrix`
"""

from __future__ import annotations

import csv
import io
import json
import math
from itertools import combinations
from pathlib import Path

import numpy as np

from ..errors import CodeMatrixError, DataError, did_you_mean

__all__ = [
    "MATRIX_NAMES",
    "one_vs_all",
    "all_pairs",
    "dense_random",
    "sparse_random",
    "k_minus_one",
    "load_matrix",
    "validate_matrix",
    "make_matrix",
    "binary_targets",
    "is_one_vs_all",
    "is_all_pairs",
    "is_k_minus_one",
    "matrix_kind",
]

#: candidate matrices drawn by the random generators; the one with the best row separation wins.
DEFAULT_CANDIDATES = 1000
#: enumerate every admissible column (instead of drawing columns at random) up to this many.
_ENUMERATE_LIMIT = 4096


# --------------------------------------------------------------------------------------------------
# fixed designs


def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise CodeMatrixError(f"the number of classes must be an integer, got {k!r}")
    if k < 2:
        raise CodeMatrixError(f"a code matrix needs at least 2 classes, got k={k}")
    return int(k)


def one_vs_all(k: int) -> np.ndarray:
    """The ``(k, k)`` one-against-all matrix: column ``c`` is class ``c`` (+1) against all others (-1)."""
    k = _check_k(k)
    return 2 * np.eye(k, dtype=np.int64) - 1


def all_pairs(k: int) -> np.ndarray:
    """The ``(k, k(k-1)/2)`` all-pairs matrix, columns in the order (0v1),(0v2),...,(1v2),...

    Column ``(i, j)`` with ``i < j`` has +1 for class ``i``, -1 for class ``j`` and 0 elsewhere, so
    its estimate is ``r_ij = P(i | x, x in {i, j})`` -- the order libsvm and scikit-learn's ``ovo``
    decision values use.
    """
    k = _check_k(k)
    pairs = list(combinations(range(k), 2))
    M = np.zeros((k, len(pairs)), dtype=np.int64)
    for b, (i, j) in enumerate(pairs):
        M[i, b] = 1
        M[j, b] = -1
    return M


def k_minus_one(k: int) -> np.ndarray:
    """The ``(k, k-1)`` matrix of Probing's multiclass scheme: column ``l`` is class ``l`` vs the rest.

    The last class has no column of its own; the ``k_minus_one`` combiner gives it the remaining mass.
    """
    k = _check_k(k)
    return one_vs_all(k)[:, : k - 1].copy()


# --------------------------------------------------------------------------------------------------
# random ECOC designs


def _max_columns(k: int, sparse: bool) -> int:
    """How many admissible columns exist, counting a column and its negation once.

    Admissible: at least one +1 and one -1.  Dense: 2^k - 2 sign patterns, halved.  Sparse: 3^k
    patterns minus those lacking a +1 or a -1 (2 * 2^k - 1 of them), halved.
    """
    if sparse:
        return (3**k - 2 ** (k + 1) + 1) // 2
    return 2 ** (k - 1) - 1


def _canonical(cols: np.ndarray) -> np.ndarray:
    """Negate each column (axis 0 = classes) so that its first non-zero entry is +1."""
    first = np.argmax(cols != 0, axis=0)
    sign = cols[first, np.arange(cols.shape[1])]
    sign = np.where(sign == 0, 1, sign)
    return cols * sign


def _admissible(cols: np.ndarray) -> np.ndarray:
    return (cols == 1).any(axis=0) & (cols == -1).any(axis=0)


def _all_columns(k: int, sparse: bool) -> tuple[np.ndarray, np.ndarray]:
    """Every admissible column in canonical form, shape ``(k, N)``, and its probability weight.

    The weight is the probability of drawing that column (or its negation) entry by entry:
    dense entries are +-1 with probability 1/2, sparse entries 0 with 1/2 and +-1 with 1/4 each.
    Sampling columns without replacement with these weights is the same as drawing columns i.i.d.
    and rejecting repeats, only without the wait when nearly every column is needed.
    """
    values = np.array([-1, 0, 1] if sparse else [-1, 1], dtype=np.int64)
    base = len(values)
    codes = np.arange(base**k)
    digits = (codes[None, :] // base ** np.arange(k)[:, None]) % base
    cols = values[digits]
    first = np.argmax(cols != 0, axis=0)
    keep = _admissible(cols) & (cols[first, np.arange(cols.shape[1])] == 1)
    cols = cols[:, keep]
    if sparse:
        weights = 0.5 ** (cols == 0).sum(axis=0) * 0.25 ** (cols != 0).sum(axis=0)
    else:
        weights = np.ones(cols.shape[1])
    return cols, weights / weights.sum()


def _draw_columns(rng: np.random.Generator, k: int, n_columns: int, sparse: bool) -> np.ndarray:
    """``n_columns`` distinct admissible canonical columns drawn entry by entry (rejecting repeats)."""
    chosen = np.empty((k, 0), dtype=np.int64)
    while chosen.shape[1] < n_columns:
        batch = 2 * n_columns + 8
        if sparse:
            cols = rng.choice(np.array([-1, 0, 0, 1]), size=(k, batch))
        else:
            cols = rng.choice(np.array([-1, 1]), size=(k, batch))
        cols = _canonical(cols[:, _admissible(cols)])
        pool = np.concatenate([chosen, cols], axis=1)
        _, first = np.unique(pool, axis=1, return_index=True)
        chosen = pool[:, np.sort(first)][:, :n_columns]
    return chosen


def _row_distances(cands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For stacked candidates ``(C, k, l)``: minimum Allwein distance and minimum Hamming distance.

    Allwein et al.'s distance ``sum_s (1 - u_s v_s) / 2`` counts a sign disagreement as 1 and any
    position with a zero as 1/2; on dense matrices it is the Hamming distance.  The plain Hamming
    distance is what tells whether two rows are identical (two equal rows with zeros have a positive
    Allwein distance).
    """
    C, k, l = cands.shape
    f = cands.astype(np.float64)
    allwein = (l - f @ f.transpose(0, 2, 1)) / 2
    equal = np.zeros((C, k, k))
    for v in (-1, 0, 1):
        ind = (cands == v).astype(np.float64)
        equal += ind @ ind.transpose(0, 2, 1)
    hamming = l - equal
    off = ~np.eye(k, dtype=bool)
    return allwein[:, off].min(axis=1), hamming[:, off].min(axis=1)


def _random_matrix(k, n_columns, seed, sparse: bool, n_candidates: int) -> np.ndarray:
    kind = "sparse_ecoc" if sparse else "dense_ecoc"
    k = _check_k(k)
    limit = _max_columns(k, sparse)
    if n_columns is None:
        factor = 15 if sparse else 10
        n_columns = min(math.ceil(factor * math.log2(k)), limit)
    elif isinstance(n_columns, bool) or not isinstance(n_columns, (int, np.integer)) or n_columns < 1:
        raise CodeMatrixError(f"{kind}: n_columns must be a positive integer, got {n_columns!r}")
    elif n_columns > limit:
        raise CodeMatrixError(
            f"{kind}: only {limit} distinct columns (up to sign) exist for k={k} classes, "
            f"but n_columns={n_columns} was asked for; ask for at most {limit}"
        )
    n_columns = int(n_columns)
    if n_candidates < 1:
        raise CodeMatrixError(f"{kind}: n_candidates must be at least 1, got {n_candidates}")
    rng = np.random.default_rng(seed)

    enumerate_all = limit <= _ENUMERATE_LIMIT
    if enumerate_all:
        pool, weights = _all_columns(k, sparse)
    cands = np.empty((n_candidates, k, n_columns), dtype=np.int64)
    for c in range(n_candidates):
        if enumerate_all:
            idx = rng.choice(pool.shape[1], size=n_columns, replace=False, p=weights)
            cols = pool[:, np.sort(idx)]
        else:
            cols = _draw_columns(rng, k, n_columns, sparse)
        # a column and its negation are the same binary problem; pick the sign at random so no
        # row is favoured by the canonical form
        cands[c] = cols * rng.choice(np.array([-1, 1]), size=n_columns)

    allwein, hamming = _row_distances(cands)
    covered = (cands != 0).any(axis=2).all(axis=1)
    ok = covered & (hamming > 0)
    # best separation first; ties keep the earlier (seed-determined) candidate
    order = np.lexsort((np.arange(n_candidates), -allwein))
    for c in order[ok[order]]:
        try:
            return validate_matrix(cands[c], k)
        except CodeMatrixError:
            continue
    raise CodeMatrixError(
        f"{kind}: none of {n_candidates} random {k}x{n_columns} matrices was usable (every class "
        "in some column, rows distinct, all classes linked); ask for more columns"
    )


def dense_random(k: int, n_columns: int | None = None, seed=0, *,
                 n_candidates: int = DEFAULT_CANDIDATES) -> np.ndarray:
    """A dense random ECOC matrix (entries +-1), the best of ``n_candidates`` seeded draws.

    Following Allwein et al. (2000): draw candidates with i.i.d. +-1 entries, no constant columns and
    no column repeating or negating another (it would be the same binary problem), and keep the one
    whose rows have the largest minimum Hamming distance -- more columns must err before one class
    is mistaken for another.  ``n_columns`` defaults to ``ceil(10 log2 k)``, capped at the
    ``2^(k-1) - 1`` distinct columns that exist (so small ``k`` gets the exhaustive code).
    The same ``(k, n_columns, seed, n_candidates)`` always gives the same matrix.
    """
    return _random_matrix(k, n_columns, seed, False, n_candidates)


def sparse_random(k: int, n_columns: int | None = None, seed=0, *,
                  n_candidates: int = DEFAULT_CANDIDATES) -> np.ndarray:
    """A sparse random ECOC matrix: entries 0 with probability 1/2, +1 and -1 with 1/4 each.

    Same search as :func:`dense_random` (columns need a +1 and a -1 and must be distinct up to sign;
    every class must appear in some column; rows must be distinct), ranking candidates by the
    minimum of Allwein et al.'s row distance, in which a zero against anything counts 1/2.
    ``n_columns`` defaults to ``ceil(15 log2 k)``, capped at the number of distinct columns.
    """
    return _random_matrix(k, n_columns, seed, True, n_candidates)


# --------------------------------------------------------------------------------------------------
# validation and loading


def validate_matrix(M, k: int) -> np.ndarray:
    """Check that ``M`` is a usable code matrix for ``k`` classes; return it as an int64 array.

    Checks, each failing with a :class:`CodeMatrixError` that names the offending row/column:

    * a 2-D table of numbers, every entry exactly -1, 0 or +1;
    * one row per class (``k`` rows) and at least one column;
    * every column has at least one +1 and one -1 (otherwise its binary problem has one class);
    * every class is non-zero in at least one column (otherwise nothing estimates it);
    * no two rows are identical (those two classes could never be told apart);
    * the classes are linked: no split of the classes into two groups such that no column has
      non-zeros in both, since the mass shared between such groups would be undetermined.

    Repeated or negated columns are allowed here (a user may want them, and the 2-class
    one-against-all matrix has them); only the random generators avoid them.
    """
    k = _check_k(k)
    try:
        A = np.asarray(M, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise CodeMatrixError(
            f"the code matrix is not a rectangular table of numbers ({exc}); give k={k} rows of equal "
            "length with entries -1, 0 or 1"
        ) from None
    if A.ndim != 2:
        raise CodeMatrixError(
            f"the code matrix must be 2-D (classes x binary problems), got {A.ndim}-D; give k={k} rows"
        )
    if A.shape[0] != k:
        raise CodeMatrixError(
            f"the code matrix has {A.shape[0]} rows but there are {k} classes; give exactly one row "
            "per class, in class-index order"
        )
    if A.shape[1] == 0:
        raise CodeMatrixError("the code matrix has no columns; give at least one binary problem")
    bad = ~np.isin(A, (-1.0, 0.0, 1.0))
    if bad.any():
        r, c = map(int, np.argwhere(bad)[0])
        raise CodeMatrixError(
            f"code matrix entry at row {r}, column {c} is {float(A[r, c]):g}, not -1, 0 or +1; write every "
            "entry as -1, 0 or 1"
        )
    M = A.astype(np.int64)
    for sign, word in ((1, "+1"), (-1, "-1")):
        lacking = np.flatnonzero(~(M == sign).any(axis=0))
        if lacking.size:
            b = int(lacking[0])
            raise CodeMatrixError(
                f"column {b} of the code matrix has no {word} entry, so its binary problem has "
                f"only one side; put {word} in at least one row of column {b}, or drop the column"
            )
    unused = np.flatnonzero(~(M != 0).any(axis=1))
    if unused.size:
        c = int(unused[0])
        raise CodeMatrixError(
            f"class {c} (row {c}) is 0 in every column of the code matrix, so no binary problem sees "
            f"it; put +1 or -1 for it in at least one column"
        )
    _, first, inverse = np.unique(M, axis=0, return_index=True, return_inverse=True)
    twins = np.flatnonzero(first[inverse.ravel()] != np.arange(k))
    if twins.size:
        j = int(twins[0])
        i = int(first[inverse.ravel()[j]])
        raise CodeMatrixError(
            f"rows {i} and {j} of the code matrix are identical, so classes {i} and {j} can never "
            "be told apart; change one of them in at least one column"
        )
    group = _linked_group(M)
    if len(group) < k:
        rest = sorted(set(range(k)) - group)
        raise CodeMatrixError(
            f"classes {sorted(group)} and {rest} never appear together in a column of the code "
            "matrix, so how the probability splits between the two groups is undetermined; add a "
            "column with non-zeros in both groups"
        )
    return M


def _linked_group(M: np.ndarray) -> set[int]:
    """Classes reachable from class 0 by sharing a column (both non-zero in it)."""
    nz = M != 0
    linked = (nz.astype(np.int64) @ nz.T.astype(np.int64)) > 0
    seen, frontier = {0}, [0]
    while frontier:
        c = frontier.pop()
        for d in np.flatnonzero(linked[c]):
            if int(d) not in seen:
                seen.add(int(d))
                frontier.append(int(d))
    return seen


#: the largest code matrix file read (a dense matrix of 1,000 classes by 10,000 columns fits in 16 MiB of CSV)
MAX_MATRIX_FILE_BYTES = 32 << 20


def load_matrix(path, k: int) -> np.ndarray:
    """Read a code matrix from a file and validate it for ``k`` classes.

    The format is recognised from the content, not the extension: text starting with ``[`` or ``{``
    is JSON -- a list of rows, or an object whose ``"matrix"`` key holds one -- anything else is CSV
    with ``k`` rows, no header, commas between entries (blank lines are ignored).
    """
    p = Path(path)
    try:
        if p.stat().st_size > MAX_MATRIX_FILE_BYTES:
            raise CodeMatrixError(
                f"code matrix file '{path}' is larger than {MAX_MATRIX_FILE_BYTES} bytes; a code matrix is small:"
                " check the path after 'file:'"
            )
        text = p.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise CodeMatrixError(
            f"cannot read code matrix file '{path}': {exc.strerror or exc}; check the path after 'file:'"
        ) from None
    except UnicodeDecodeError:
        raise CodeMatrixError(
            f"code matrix file '{path}' is not UTF-8 text; save it as CSV or JSON"
        ) from None
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CodeMatrixError(
                f"code matrix file '{path}' is not valid JSON (line {exc.lineno}: {exc.msg}); write a "
                'list of rows such as [[1, -1], [-1, 1]] or {"matrix": [[1, -1], [-1, 1]]}'
            ) from None
        except (RecursionError, ValueError):  # nested 50,000 deep; an integer of over 4,300 digits
            raise CodeMatrixError(
                f"code matrix file '{path}' nests too deep or holds a number too long; write a list of rows of"
                " -1/0/1 such as [[1, -1], [-1, 1]]"
            ) from None
        if isinstance(data, dict):
            if "matrix" not in data:
                raise CodeMatrixError(
                    f"code matrix file '{path}' is a JSON object without a \"matrix\" key; put the "
                    'rows under "matrix"'
                )
            data = data["matrix"]
        if not isinstance(data, list) or not all(isinstance(row, list) for row in data):
            raise CodeMatrixError(
                f"code matrix file '{path}': expected a JSON list of rows (lists of -1/0/1)"
            )
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for row in data for v in row):
            raise CodeMatrixError(
                f"code matrix file '{path}': JSON entries must be the numbers -1, 0 or 1"
            )
        rows = data
    else:
        rows = []
        for line_no, row in enumerate(csv.reader(io.StringIO(text)), start=1):
            cells = [cell.strip() for cell in row]
            if not any(cells):
                continue
            try:
                rows.append([float(cell) for cell in cells])
            except ValueError:
                raise CodeMatrixError(
                    f"code matrix file '{path}', line {line_no}: {row!r} is not a row of numbers; "
                    "write k rows of -1/0/1 separated by commas, without a header"
                ) from None
    if len({len(row) for row in rows}) > 1:
        raise CodeMatrixError(
            f"code matrix file '{path}': rows have different lengths "
            f"({sorted({len(row) for row in rows})}); every row needs one entry per binary problem"
        )
    try:
        return validate_matrix(np.array(rows, dtype=np.float64).reshape(len(rows), -1), k)
    except CodeMatrixError as exc:
        raise CodeMatrixError(f"{path}: {exc}") from None


# --------------------------------------------------------------------------------------------------
# names


MATRIX_NAMES = {
    "one_vs_all": "one_vs_all",
    "ova": "one_vs_all",
    "ovr": "one_vs_all",
    "all_pairs": "all_pairs",
    "ovo": "all_pairs",
    "dense_ecoc": "dense_ecoc",
    "sparse_ecoc": "sparse_ecoc",
    "k_minus_one": "k_minus_one",
}


def make_matrix(spec: str, k: int, seed=0) -> np.ndarray:
    """Build the code matrix named by ``spec`` for ``k`` classes (grammar in the module docstring).

    ``seed`` only matters for ``dense_ecoc`` and ``sparse_ecoc``.  Names are case-insensitive and
    ``-`` is read as ``_``; a ``file:`` path is taken verbatim.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise CodeMatrixError(f"code matrix spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    if spec[:5].lower() == "file:":
        path = spec[5:]
        if not path:
            raise CodeMatrixError("'file:' needs a path after it, e.g. file:matrix.csv")
        return load_matrix(path, k)
    name = MATRIX_NAMES.get(spec.lower().replace("-", "_"))
    if name is None:
        known = ", ".join(sorted(MATRIX_NAMES)) + ", file:PATH"
        raise CodeMatrixError(f"unknown code matrix '{spec}';{did_you_mean(spec, MATRIX_NAMES)} choose one of: {known}")
    if name == "one_vs_all":
        return one_vs_all(k)
    if name == "all_pairs":
        return all_pairs(k)
    if name == "k_minus_one":
        return k_minus_one(k)
    if name == "dense_ecoc":
        return dense_random(k, seed=seed)
    return sparse_random(k, seed=seed)


# --------------------------------------------------------------------------------------------------
# using a matrix


def binary_targets(y, M, b: int) -> tuple[np.ndarray, np.ndarray]:
    """The training set of column ``b``: which rows take part, and their 0/1 targets.

    ``y`` holds class indices ``0..k-1``.  Returns ``(mask, t)``: ``mask`` (same length as ``y``) is
    True for rows whose class is non-zero in column ``b``; ``t`` has one entry per selected row
    (``t = 1`` for the +1 side), aligned with ``y[mask]``, so a learner is fitted on
    ``(X[mask], t)``.
    """
    M = np.asarray(M)
    if M.ndim != 2:
        raise CodeMatrixError(f"the code matrix must be 2-D, got shape {M.shape}")
    if not 0 <= b < M.shape[1]:
        raise CodeMatrixError(f"column {b} does not exist; the code matrix has {M.shape[1]} columns")
    y = np.asarray(y)
    if y.ndim != 1 or (y.size and not np.issubdtype(y.dtype, np.integer)):
        raise DataError("class labels for a code matrix must be a 1-D array of class indices 0..k-1")
    if y.size and (y.min() < 0 or y.max() >= M.shape[0]):
        raise DataError(
            f"class index {int(y.max()) if y.max() >= M.shape[0] else int(y.min())} is outside "
            f"0..{M.shape[0] - 1}, the rows of the code matrix"
        )
    code = M[y, b]
    mask = code != 0
    return mask, (code[mask] == 1).astype(np.int64)


def _one_sided_columns(M: np.ndarray) -> np.ndarray | None:
    """For matrices whose columns are one class (+1) against all others (-1): that class per column."""
    if not ((M == 1).sum(axis=0) == 1).all() or not ((M == -1).sum(axis=0) == M.shape[0] - 1).all():
        return None
    return np.argmax(M == 1, axis=0)


def is_one_vs_all(M) -> bool:
    """True for a one-against-all matrix, columns in any order: each class is +1 in exactly one
    column, and every column is one class against all the others."""
    M = np.asarray(M)
    pos = _one_sided_columns(M)
    return pos is not None and M.shape[1] == M.shape[0] and len(set(pos.tolist())) == M.shape[0]


def is_k_minus_one(M) -> bool:
    """True for a k-1 matrix, columns in any order: ``k-1`` columns, each one distinct class against
    all others; the class without a column gets the remaining probability."""
    M = np.asarray(M)
    pos = _one_sided_columns(M)
    k = M.shape[0]
    return pos is not None and M.shape[1] == k - 1 and len(set(pos.tolist())) == k - 1


def is_all_pairs(M) -> bool:
    """True for an all-pairs matrix, columns in any order and either sign: every column is one class
    (+1) against one other (-1), and every unordered pair of classes has exactly one column."""
    M = np.asarray(M)
    k = M.shape[0]
    if M.shape[1] != k * (k - 1) // 2:
        return False
    if not (((M == 1).sum(axis=0) == 1).all() and ((M == -1).sum(axis=0) == 1).all()):
        return False
    i, j = np.argmax(M == 1, axis=0), np.argmax(M == -1, axis=0)
    pairs = {(min(a, c), max(a, c)) for a, c in zip(i.tolist(), j.tolist())}
    return len(pairs) == M.shape[1]


def matrix_kind(M) -> str:
    """A short description for manifests and messages: ``one_vs_all``, ``all_pairs``,
    ``k_minus_one`` (checked in that order, so the 2-class matrix ``[[1], [-1]]`` is ``all_pairs``),
    else ``dense`` (no zeros) or ``sparse``."""
    M = np.asarray(M)
    if is_one_vs_all(M):
        return "one_vs_all"
    if is_all_pairs(M):
        return "all_pairs"
    if is_k_minus_one(M):
        return "k_minus_one"
    return "dense" if (M != 0).all() else "sparse"
