"""LexRank and LexProb (Flach & Matsubara, ECML 2007) as a calengine learner plugin.

LexRank ranks instances *lexicographically*: the attributes are put in a preference order and each has
a preferred value; two instances are compared on the first attribute (in that order) where they differ,
and the one holding the preferred value ranks higher.  Instances that agree on every kept attribute tie.
LexProb turns that ranking into probabilities by pooling the training ROC curve into its convex hull and
giving every hull edge its Laplace-corrected positive fraction (the paper's Definition 3).

The plugin registers two learners:

=========  ==============  ===========  ==================================================
name       sample weights  score_kind   score
=========  ==============  ===========  ==================================================
lexrank    yes             decision     exact lexicographic rank mapped into (0, 1)
lexprob    yes             proba        ROC-convex-hull probability with Laplace correction
=========  ==============  ===========  ==================================================

Attributes
----------
The paper covers boolean attributes (and nominal ones through one binary attribute per value).  The
matrix calengine hands a learner already has string columns one-hot encoded, so each input column is
turned into binary attributes as follows, using the training rows with positive weight:

* one distinct value: the column cannot separate any two training rows and is dropped;
* two distinct values ``a < b`` (0/1 indicators, one-hot columns, missing-value flags): one binary
  attribute ``x > t`` with ``t`` the midpoint of ``a`` and ``b``, which is the column itself for 0/1
  columns;
* more than two distinct values (numeric columns; **not covered by the paper**, a documented choice of
  this plugin): ``n_bins`` equal-frequency bins whose edges are training quantiles (taken at data
  values, so tied values always share a bin; coinciding edges merge, so a column may get fewer bins;
  at least two).  Bin ``b`` holds ``edge[b-1] < x <= edge[b]``; values outside the training range fall
  into the first or last bin.  Every bin becomes its own binary attribute (one-hot), as the paper does
  for nominal attributes.  The edges depend only on which rows have positive weight, not on the weights'
  sizes.

Preference order
----------------
For a binary attribute with (weighted) counts ``n_v+`` / ``n_v-`` of value ``v`` among the positives /
negatives, the likelihood ratio is ``LR(v) = ((n_v+ + s) / (N+ + 2s)) / ((n_v- + s) / (N- + 2s))`` with
``s = 1`` (Laplace smoothing, the default, which keeps ratios finite when a value never occurs in one
class) or ``s = 0`` (the paper's raw ratio).  The preferred value has ``LR > 1``; an attribute whose
ratio is exactly 1 expresses no preference and is dropped (the comparison is made by cross-multiplying
the counts, so it is exact for integer counts).  Kept attributes are sorted by decreasing odds ratio
``OR = LR(v+) / LR(v-)``, ties going to the lower attribute index (input column order, then bin order).
Zero-weight rows are ignored entirely.

Exact scores
------------
Packing the preferred-value indicators into the bits of one float breaks beyond ~52 attributes, so the
score is instead the position of the instance's pattern among the distinct training patterns, sorted
lexicographically: with ``U`` distinct training patterns, the ``j``-th lowest (``j = 1..U``) scores
``j / (U + 1)``.  Every training pattern therefore gets an exact, distinct score, whatever the number of
attributes.  A pattern not seen in training scores strictly between its two lexicographic neighbours
among the training patterns (so its order relative to every training pattern is exact too); among
unseen patterns falling into the same gap the order is exact on the attributes that follow the
neighbours' common prefix, up to about ``52 - log2(U)`` of them (about 38 for ten thousand distinct
training patterns), and patterns that agree on all of those tie.  No single float can do better for
every possible pattern once there are more than 64 attributes.  Scores depend only on the
fitted model, never on the other rows of the batch, so scoring partitions separately on Dask gives the
same numbers.

More than two classes
---------------------
Both learners go one-vs-rest: class ``c`` gets its own LexRank ("class c" against the rest, with its own
preferred values and order) and ``score`` returns an ``(n, k)`` matrix.  LexRank's columns are the
per-class ranks; LexProb's are the per-class hull probabilities divided by their row sum (rows whose
probabilities are all zero, possible only with ``laplace=False``, become uniform).  The binning of
numeric columns is shared by all classes.

Input is a dense float64 matrix; scipy sparse input (hashed text columns) is refused with
:class:`calengine.errors.DataError` rather than densified behind the user's back, and so are NaN and
infinite values (calengine's feature encoder fills missing values before a learner sees them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import calengine
from calengine.base import Learner
from calengine.errors import DataError, ParameterError
from calengine.metrics.roc import hull_segment_probabilities, roc_segments

__all__ = ["LexRank", "LexProb", "register_learners"]
__version__ = "0.1.0"

#: column kinds recorded in ``column_kind_``
KIND_DROPPED, KIND_BINARY, KIND_BINNED = 0, 1, 2

#: attribute bits after the gap's common prefix that order unseen patterns within one gap
_GAP_BITS = 52


# ---------------------------------------------------------------------------------------------------
# input checks


def _check_X(X, n_features: int | None = None) -> np.ndarray:
    if hasattr(X, "toarray") or type(X).__module__.startswith("scipy.sparse"):
        raise DataError(
            "LexRank/LexProb need a dense feature matrix but got a scipy sparse one (hashed text "
            "columns); leave the text columns out (--exclude) or pick a learner that accepts sparse input"
        )
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise DataError(f"X must be a 2-D array, got {X.ndim} dimensions; pass one row per instance")
    if n_features is not None and X.shape[1] != n_features:
        raise DataError(
            f"X has {X.shape[1]} columns but the model was fitted on {n_features}; score data encoded "
            "with the model's own feature encoder"
        )
    if not np.all(np.isfinite(X)):
        raise DataError("X contains NaN or infinite values; fill missing values before LexRank sees them")
    return X


def _check_y_w(y, sample_weight, n: int) -> tuple[np.ndarray, np.ndarray, int]:
    y = np.asarray(y)
    if y.shape != (n,):
        raise DataError(f"y must have shape ({n},) to match X, got {y.shape}")
    if y.size == 0:
        raise DataError("cannot fit on zero rows; pass training data")
    if not np.all(np.equal(np.mod(y, 1), 0)):
        raise DataError("y must hold class indices 0..k-1")
    y = y.astype(np.int64)
    classes = np.unique(y)
    k = int(classes.size)
    if k < 2 or not np.array_equal(classes, np.arange(k)):
        raise DataError(
            f"y must hold class indices 0..k-1 with every class present and k >= 2, got {classes.tolist()}"
        )
    if sample_weight is None:
        w = np.ones(n, dtype=np.float64)
    else:
        w = np.asarray(sample_weight, dtype=np.float64)
        if w.shape != (n,):
            raise DataError(f"sample_weight must have shape ({n},), got {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise DataError("sample_weight must be finite and non-negative")
    return y, w, k


# ---------------------------------------------------------------------------------------------------
# columns -> binary attributes


def _equal_frequency_edges(x: np.ndarray, n_bins: int) -> np.ndarray:
    """Interior bin edges (ascending) for a column with more than two distinct values.

    Edges are training quantiles taken at data values (``inverted_cdf``), so a tied value is never split
    across two bins; duplicates merge and an edge at the maximum (which would leave the last bin empty)
    is dropped.  If that leaves no edge at all (one value dominates), the single edge that splits the
    rows most evenly is used, so the column still yields two bins.
    """
    values, counts = np.unique(x, return_counts=True)
    q = np.arange(1, n_bins, dtype=np.float64) / n_bins
    edges = np.unique(np.quantile(x, q, method="inverted_cdf"))
    edges = edges[edges < values[-1]]
    if edges.size == 0:
        below = np.cumsum(counts)[:-1]
        edges = values[[int(np.argmin(np.abs(below - x.size / 2.0)))]]
    return edges.astype(np.float64)


def _midpoint(a: float, b: float) -> float:
    mid = a + (b - a) / 2.0
    return mid if a <= mid < b else a


# ---------------------------------------------------------------------------------------------------
# lexicographic ranks


def _as_keys(packed: np.ndarray) -> np.ndarray:
    """Rows of packed bits as fixed-width byte strings, whose ordering is the rows' lexicographic order.

    numpy ignores trailing zero bytes when comparing ``S`` strings; for strings of equal width this
    preserves lexicographic order and equality, so ``np.unique`` and ``np.searchsorted`` work directly.
    """
    packed = np.ascontiguousarray(packed, dtype=np.uint8)
    return packed.view(f"S{packed.shape[1]}").ravel()


def _first_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Index of the first differing bit between rows of two bit matrices (rows known to differ)."""
    return np.argmax(a != b, axis=1)


def _lex_positions(bits: np.ndarray, patterns: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    """Positions in ``[0, U + 1]`` of bit rows among the ``U`` sorted distinct training patterns.

    ``bits``: ``(n, m)`` bool, attributes already in preference order (1 = preferred value).
    ``patterns``: ``(U, ceil(m / 8))`` packed training patterns, ascending.  ``prefix[g]``: common prefix
    length of training patterns ``g - 1`` and ``g`` (``prefix[0]`` unused).  The ``j``-th pattern
    (0-based) sits at ``j + 1``; an unseen row in the gap before pattern ``g`` sits at
    ``g + 1/4 + frac / 2``, ``frac`` in [0, 1) being the binary fraction of its next ``_GAP_BITS`` bits
    after the gap's common prefix, which orders rows inside the gap lexicographically on those bits.
    """
    n, m = bits.shape
    U = patterns.shape[0]
    if m == 0:
        return np.ones(n, dtype=np.float64)
    keys = _as_keys(np.packbits(bits, axis=1))
    train_keys = _as_keys(patterns)
    idx = np.searchsorted(train_keys, keys, side="left")
    hit = idx < U
    hit[hit] = train_keys[idx[hit]] == keys[hit]
    pos = idx.astype(np.float64) + 1.0
    miss = np.flatnonzero(~hit)
    if miss.size:
        gap = idx[miss]
        inner = (gap > 0) & (gap < U)
        start = np.where(inner, prefix[np.clip(gap, 0, U - 1)], 0)
        cols = start[:, None] + np.arange(_GAP_BITS)
        valid = cols < m
        taken = bits[miss[:, None], np.minimum(cols, m - 1)] & valid
        frac = taken.astype(np.float64) @ np.ldexp(1.0, -np.arange(1, _GAP_BITS + 1))
        pos[miss] = gap.astype(np.float64) + 0.25 + 0.5 * frac
    return pos


# ---------------------------------------------------------------------------------------------------
# learners


class LexRank(Learner):
    """Flach & Matsubara's lexicographic ranker (see the module docstring for every rule).

    Parameters
    ----------
    n_bins : int, default 5
        Equal-frequency bins for columns with more than two distinct values (at least 2).
    smoothing : bool, default True
        Laplace-smoothed likelihood ratios (``+1`` per value and class); ``False`` uses the paper's raw
        counts, whose zero counts give ratios of 0 or infinity (still ordered consistently).

    Fitted attributes
    -----------------
    All are numpy arrays or ints; ``r`` is 1 for two classes and ``k`` otherwise (one model per
    one-vs-rest problem), ``m`` is the number of binary attributes.

    n_classes_, n_features_in_ : int
    column_kind_ : (n_features_in_,) int8 -- ``KIND_DROPPED`` / ``KIND_BINARY`` / ``KIND_BINNED``
    threshold_ : (n_features_in_,) float -- the binary attribute is ``x > threshold`` (NaN otherwise)
    bin_edges_, bin_ptr_ : interior edges of binned column ``j`` are
        ``bin_edges_[bin_ptr_[j]:bin_ptr_[j + 1]]``
    attribute_column_, attribute_bin_ : (m,) int -- source column and bin (-1 if binary) per attribute
    likelihood_ratio_ : (r, m, 2) float -- ``LR`` of attribute value 0 and of value 1
    odds_ratio_ : (r, m) float -- ``OR`` of the preferred value (1.0 for dropped attributes)
    preferred_ : (r, m) int8 -- preferred value 0 or 1, -1 if dropped
    order_ : (r, m) int64 -- kept attributes by decreasing ``OR``, padded with -1
    n_kept_ : (r,) int64
    patterns_, pattern_ptr_ : the packed, sorted distinct training patterns of model ``c`` are rows
        ``pattern_ptr_[c]:pattern_ptr_[c + 1]`` of ``patterns_`` (zero-padded to a common width)
    pattern_prefix_ : common prefix length of each pattern with the one before it (0 for the first)
    """

    name = "lexrank"
    accepts_sample_weight = True
    #: bin edges and the distinct training patterns depend on which rows have positive weight, not on
    #: the weights' sizes (module docstring), so duplicated rows can give other bins
    weights_as_duplicates = False
    accepts_sparse = False
    score_kind = "decision"

    _STATE_ARRAYS = (
        "column_kind_", "threshold_", "bin_edges_", "bin_ptr_", "attribute_column_", "attribute_bin_",
        "likelihood_ratio_", "odds_ratio_", "preferred_", "order_", "n_kept_", "patterns_",
        "pattern_ptr_", "pattern_prefix_",
    )
    _STATE_INTS = ("n_classes_", "n_features_in_")

    def __init__(self, n_bins: int = 5, smoothing: bool = True):
        self.n_bins = n_bins
        self.smoothing = smoothing

    # ---- fitting ---------------------------------------------------------------------------------

    def fit(self, X, y, sample_weight=None):
        """Learn the binarisation, the preferred values, the attribute order and the training patterns."""
        self._fit_ranker(X, y, sample_weight)
        return self

    def check_params(self) -> None:
        """Bad parameter values fail when the learner is made (``calengine.params.Params.check_params``)."""
        self._check_params()

    def _check_params(self) -> None:
        if isinstance(self.n_bins, bool) or not isinstance(self.n_bins, (int, np.integer)) or self.n_bins < 2:
            raise ParameterError(f"n_bins must be an integer >= 2, got {self.n_bins!r}")
        if not isinstance(self.smoothing, (bool, np.bool_)):
            raise ParameterError(f"smoothing must be true or false, got {self.smoothing!r}")

    def _fit_ranker(self, X, y, sample_weight):
        """Fit the ranker; returns the positive-weight training rows ``(bits per model, y, w)``."""
        self._check_params()
        X = _check_X(X)
        y, w, k = _check_y_w(y, sample_weight, X.shape[0])
        keep = w > 0
        X, y, w = X[keep], y[keep], w[keep]
        if not np.array_equal(np.unique(y), np.arange(k)):
            raise DataError("every class needs some positive sample_weight; a class has only zero weights")
        self.n_classes_ = k
        self.n_features_in_ = int(X.shape[1])
        self._fit_columns(X)
        A = self.binarize(X)
        targets = [y == 1] if k == 2 else [y == c for c in range(k)]
        m = A.shape[1]
        r = len(targets)
        self.likelihood_ratio_ = np.empty((r, m, 2), dtype=np.float64)
        self.odds_ratio_ = np.ones((r, m), dtype=np.float64)
        self.preferred_ = np.full((r, m), -1, dtype=np.int8)
        self.order_ = np.full((r, m), -1, dtype=np.int64)
        self.n_kept_ = np.zeros(r, dtype=np.int64)
        patterns, prefixes, ptr, model_bits = [], [], [0], []
        for c, t in enumerate(targets):
            self._fit_preferences(c, A, t, w)
            bits = self._model_bits(A, c)
            model_bits.append(bits)
            pat, pre = self._training_patterns(bits)
            patterns.append(pat)
            prefixes.append(pre)
            ptr.append(ptr[-1] + pat.shape[0])
        width = max(p.shape[1] for p in patterns)
        self.patterns_ = np.zeros((ptr[-1], width), dtype=np.uint8)
        for c, pat in enumerate(patterns):
            self.patterns_[ptr[c]:ptr[c + 1], : pat.shape[1]] = pat
        self.pattern_ptr_ = np.asarray(ptr, dtype=np.int64)
        self.pattern_prefix_ = np.concatenate(prefixes).astype(np.int64)
        return model_bits, targets, w

    def _fit_columns(self, X: np.ndarray) -> None:
        p = X.shape[1]
        kind = np.zeros(p, dtype=np.int8)
        threshold = np.full(p, np.nan)
        edges, bin_ptr = [], [0]
        attr_col, attr_bin = [], []
        for j in range(p):
            values = np.unique(X[:, j])
            if values.size == 2:
                kind[j] = KIND_BINARY
                threshold[j] = _midpoint(float(values[0]), float(values[1]))
                attr_col.append(j)
                attr_bin.append(-1)
            elif values.size > 2:
                kind[j] = KIND_BINNED
                e = _equal_frequency_edges(X[:, j], int(self.n_bins))
                edges.append(e)
                attr_col.extend([j] * (e.size + 1))
                attr_bin.extend(range(e.size + 1))
            bin_ptr.append(bin_ptr[-1] + (edges[-1].size if kind[j] == KIND_BINNED else 0))
        self.column_kind_ = kind
        self.threshold_ = threshold
        self.bin_edges_ = np.concatenate(edges) if edges else np.empty(0, dtype=np.float64)
        self.bin_ptr_ = np.asarray(bin_ptr, dtype=np.int64)
        self.attribute_column_ = np.asarray(attr_col, dtype=np.int64)
        self.attribute_bin_ = np.asarray(attr_bin, dtype=np.int64)

    def _fit_preferences(self, c: int, A: np.ndarray, t: np.ndarray, w: np.ndarray) -> None:
        """Likelihood ratios, preferred values, odds ratios and the order of model ``c``."""
        s = 1.0 if self.smoothing else 0.0
        wp, wn = w[t], w[~t]
        Ap, An = A[t], A[~t]
        c1p = wp @ Ap + s
        c0p = wp @ ~Ap + s
        c1n = wn @ An + s
        c0n = wn @ ~An + s
        dp = float(wp.sum()) + 2.0 * s
        dn = float(wn.sum()) + 2.0 * s
        with np.errstate(divide="ignore", invalid="ignore"):
            self.likelihood_ratio_[c, :, 0] = (c0p / dp) / (c0n / dn)
            self.likelihood_ratio_[c, :, 1] = (c1p / dp) / (c1n / dn)
            # LR(1) > 1  <=>  c1p/dp > c1n/dn  <=>  c1p*c0n > c1n*c0p (the normalisers cancel)
            favour1 = c1p * c0n
            favour0 = c1n * c0p
            pref = np.where(favour1 > favour0, 1, np.where(favour1 < favour0, 0, -1)).astype(np.int8)
            odds = np.where(pref == 1, favour1 / favour0, favour0 / favour1)
        odds[pref < 0] = 1.0
        self.preferred_[c] = pref
        self.odds_ratio_[c] = odds
        kept = np.flatnonzero(pref >= 0)
        order = kept[np.argsort(-odds[kept], kind="stable")]
        self.order_[c, : order.size] = order
        self.n_kept_[c] = order.size

    def _training_patterns(self, bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if bits.shape[1] == 0:
            return np.zeros((1, 0), dtype=np.uint8), np.zeros(1, dtype=np.int64)
        keys = np.unique(_as_keys(np.packbits(bits, axis=1)))
        nbytes = (bits.shape[1] + 7) // 8
        packed = np.frombuffer(keys.tobytes(), dtype=np.uint8).reshape(keys.size, nbytes).copy()
        unpacked = np.unpackbits(packed, axis=1, count=bits.shape[1]).astype(bool)
        prefix = np.zeros(keys.size, dtype=np.int64)
        if keys.size > 1:
            prefix[1:] = _first_difference(unpacked[1:], unpacked[:-1])
        return packed, prefix

    # ---- scoring ---------------------------------------------------------------------------------

    @property
    def n_attributes_(self) -> int:
        """Number of binary attributes the columns were turned into."""
        return int(self.attribute_column_.size)

    def binarize(self, X) -> np.ndarray:
        """``(n, n_attributes_)`` bool: each row's value of every binary attribute (before preference)."""
        X = _check_X(X, self.n_features_in_)
        A = np.zeros((X.shape[0], self.n_attributes_), dtype=bool)
        a = 0
        for j in range(self.n_features_in_):
            kind = self.column_kind_[j]
            if kind == KIND_BINARY:
                A[:, a] = X[:, j] > self.threshold_[j]
                a += 1
            elif kind == KIND_BINNED:
                e = self.bin_edges_[self.bin_ptr_[j]:self.bin_ptr_[j + 1]]
                b = np.searchsorted(e, X[:, j], side="left")
                A[:, a:a + e.size + 1] = b[:, None] == np.arange(e.size + 1)
                a += e.size + 1
        return A

    def _model_bits(self, A: np.ndarray, c: int) -> np.ndarray:
        order = self.order_[c, : self.n_kept_[c]]
        return A[:, order] == (self.preferred_[c, order] == 1)

    def _model_positions(self, A: np.ndarray, c: int) -> tuple[np.ndarray, int]:
        lo, hi = self.pattern_ptr_[c], self.pattern_ptr_[c + 1]
        m = int(self.n_kept_[c])
        patterns = self.patterns_[lo:hi, : (m + 7) // 8]
        pos = _lex_positions(self._model_bits(A, c), patterns, self.pattern_prefix_[lo:hi])
        return pos, int(hi - lo)

    def rank(self, X) -> np.ndarray:
        """``(n, r)`` lexicographic ranks in (0, 1), one column per model (see "Exact scores")."""
        A = self.binarize(X)
        out = np.empty((A.shape[0], self.n_kept_.size), dtype=np.float64)
        for c in range(self.n_kept_.size):
            pos, U = self._model_positions(A, c)
            out[:, c] = pos / (U + 1.0)
        return out

    def score(self, X) -> np.ndarray:
        """Lexicographic rank of class 1 (``(n,)``) or of every class one-vs-rest (``(n, k)``)."""
        R = self.rank(X)
        return R[:, 0] if self.n_classes_ == 2 else R

    # ---- persistence -----------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """Every fitted array plus the integer sizes; nothing that needs pickle."""
        state: dict[str, Any] = {k: np.asarray(getattr(self, k)) for k in self._STATE_ARRAYS}
        state.update({k: int(getattr(self, k)) for k in self._STATE_INTS})
        return state

    def from_state(self, state: dict[str, Any]) -> "LexRank":
        """Restore what :meth:`to_state` produced (arrays come back with their dtypes from ``.npz``)."""
        for k in self._STATE_ARRAYS:
            setattr(self, k, np.asarray(state[k]))
        for k in self._STATE_INTS:
            setattr(self, k, int(state[k]))
        return self


class LexProb(LexRank):
    """LexRank calibrated by its training ROC convex hull (Flach & Matsubara, Definition 3).

    Every training ROC segment (group of tied training patterns) gets the probability of the hull edge
    it lies under: ``(Δn⁺ + 1) / (Δn⁺ + Δn⁻ + 2)`` with ``laplace=True`` (the paper's choice, against
    overfitting), the plain positive fraction otherwise (which equals isotonic regression on the
    ranking).  A pattern seen in training gets its segment's probability; an unseen pattern gets the
    mean of its two neighbouring segments' probabilities (the edge's own when both lie under the same
    edge, the end segment's beyond either end).  Counts are weighted.  For ``k > 2`` the one-vs-rest
    probabilities are divided by their row sum (see the module docstring).

    Extra fitted attributes: ``segment_score_``, ``segment_prob_`` (ascending rank and its probability,
    all models concatenated) and ``segment_ptr_`` (``(r + 1,)``).
    """

    name = "lexprob"
    score_kind = "proba"

    _STATE_ARRAYS = LexRank._STATE_ARRAYS + ("segment_score_", "segment_prob_", "segment_ptr_")

    def __init__(self, n_bins: int = 5, smoothing: bool = True, laplace: bool = True):
        self.n_bins = n_bins
        self.smoothing = smoothing
        self.laplace = laplace

    def fit(self, X, y, sample_weight=None):
        """Fit LexRank, then the hull probabilities of its ranking of the same training rows."""
        if not isinstance(self.laplace, (bool, np.bool_)):
            raise ParameterError(f"laplace must be true or false, got {self.laplace!r}")
        model_bits, targets, w = self._fit_ranker(X, y, sample_weight)
        scores, probs, ptr = [], [], [0]
        for c, (bits, t) in enumerate(zip(model_bits, targets)):
            lo, hi = self.pattern_ptr_[c], self.pattern_ptr_[c + 1]
            m = int(self.n_kept_[c])
            pos = _lex_positions(bits, self.patterns_[lo:hi, : (m + 7) // 8], self.pattern_prefix_[lo:hi])
            rank = pos / (float(hi - lo) + 1.0)
            seg = roc_segments(rank, t.astype(np.int64), w)
            scores.append(seg.scores[::-1])
            probs.append(hull_segment_probabilities(seg, laplace=bool(self.laplace))[::-1])
            ptr.append(ptr[-1] + seg.scores.size)
        self.segment_score_ = np.concatenate(scores).astype(np.float64)
        self.segment_prob_ = np.concatenate(probs).astype(np.float64)
        self.segment_ptr_ = np.asarray(ptr, dtype=np.int64)
        return self

    def predict_proba(self, X) -> np.ndarray:
        """``(n, k)`` class probabilities (rows sum to 1)."""
        R = self.rank(X)
        P = np.empty_like(R)
        for c in range(R.shape[1]):
            s = self.segment_score_[self.segment_ptr_[c]:self.segment_ptr_[c + 1]]
            p = self.segment_prob_[self.segment_ptr_[c]:self.segment_ptr_[c + 1]]
            j = np.searchsorted(s, R[:, c], side="left")
            at = np.clip(j, 0, s.size - 1)
            below = np.clip(j - 1, 0, s.size - 1)
            hit = s[at] == R[:, c]
            P[:, c] = np.where(hit, p[at], 0.5 * (p[below] + p[at]))
        if self.n_classes_ == 2:
            return np.column_stack([1.0 - P[:, 0], P[:, 0]])
        total = P.sum(axis=1, keepdims=True)
        uniform = np.full_like(P, 1.0 / P.shape[1])
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, P / np.where(total > 0, total, 1.0), uniform)

    def score(self, X) -> np.ndarray:
        """Probability of class 1 (``(n,)``) or of every class (``(n, k)``)."""
        P = self.predict_proba(X)
        return P[:, 1] if self.n_classes_ == 2 else P


@calengine.hookimpl
def register_learners(register):
    """Hand calengine the two learner classes."""
    register(LexRank)
    register(LexProb)
