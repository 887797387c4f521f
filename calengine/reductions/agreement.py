"""Does a calibrator's reduction protocol fit what its ``fit`` fits?  The plugin kit's check and the
engine's first-use probe.

A calibrator that implements the reduction protocol (:class:`calengine.base.Calibrator`) is fitted on a
partitioned table from per-piece statistics; in memory it is fitted by ``fit``.  Nothing forces the two
to agree: a ``merge_stats`` that drops its second argument gives a calibrator that passes every
in-memory test and, through the CLI on an 8-file table, probabilities 0.3 away from the in-memory fit,
silently.  This module runs the protocol the way the engine does -- pieces that are arbitrary row
partitions for unsorted requests, disjoint increasing score ranges that never split a tie for sorted
ones, statistics merged in any tree that keeps the pieces' order -- and measures the largest difference
of the fitted maps on a grid of scores.

* :func:`fit_over_pieces` drives the protocol over one cutting and one merge tree;
* :func:`reduction_disagreement` compares it with ``fit`` on the same rows;
* :func:`check_reduction_once` is the engine's probe: at the first reduction fit of a calibrator class
  (with given parameters and score kind) in a process, two small fixed cuttings are compared with
  ``fit``; a disagreement is one :class:`~calengine.errors.PluginError` line naming the plugin.

The matrix form of a multiclass calibrator (``Calibrator.multiclass``: ``reduction_start(kind,
n_classes=k)``, pieces of ``(n, k)`` scores and class indices, always unsorted) has the same three:
:func:`matrix_probe_rows`, :func:`fit_matrix_over_pieces`, :func:`matrix_disagreement`, and the
engine's probe takes ``n_classes``.  A matrix ``merge_stats`` that dropped a piece used to pass both
the kit and the probe (only the one-column form was run): on a 4-file table of 10-class logits its
probabilities were 0.018 away from the right ones, silently.  The probe also checks what the engine
used to repair silently: rows of a matrix ``predict`` that are not probability vectors
(:func:`probability_rows_problem`).

What the probe refuses names the rule broken (:data:`REDUCTION_RULE`), with the plugin's own error as
context when the protocol raised: "the calibration data hold only one class" from a merge that lost
a piece is a symptom, not the fault.

Nothing here needs Dask.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from ..errors import CalengineError, PluginError

__all__ = ["fit_over_pieces", "reduction_disagreement", "check_reduction_once", "probe_rows", "REDUCTION_ATOL",
           "matrix_probe_rows", "fit_matrix_over_pieces", "matrix_disagreement", "probability_rows_problem",
           "ROW_SUM_ATOL", "REDUCTION_RULE", "ReductionRaised"]

#: largest difference, in probability, between the reduction's map and ``fit``'s that the probe and
#: the kit accept: closed forms agree to rounding, iterative fits to their solver's tolerance
REDUCTION_ATOL = 1e-6
#: how far a row of a multiclass calibrator's ``(n, k)`` ``predict`` may sum from 1: a softmax sums
#: to 1 within a few ulps (k * 1e-16); anything past 1e-9 is a map that does not normalise
ROW_SUM_ATOL = 1e-9
#: the rule a disagreeing reduction breaks, as the kit and the probe state it
REDUCTION_RULE = (
    "the reduction contract (calengine.base.Calibrator): fitting from the merged statistics of any cutting of"
    " the rows must give the map fit gives on all of them; partial_stats must summarise any piece, merge_stats"
    " must combine both of its arguments (associatively) and reduction_step must finish what fit does"
)


class ReductionRaised(Exception):
    """The reduction protocol raised where ``fit`` on the same rows did not: ``cause`` is the plugin's
    own exception (kept as context; it describes a symptom, such as one class seen)."""

    def __init__(self, cause: BaseException, n_pieces: int):
        super().__init__(f"{type(cause).__name__}: {' '.join(str(cause).split())[:300]}")
        self.cause = cause
        self.n_pieces = n_pieces


def probe_rows(n: int, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(scores, y, grid)``: ``n`` rows of a logistic relation with ties, and a grid covering them."""
    rng = np.random.default_rng(seed)
    s = np.round(rng.normal(size=n), 2)  # rounded: ties, which sorted pieces must keep together
    y = (rng.random(n) < 1 / (1 + np.exp(-2 * s))).astype(np.int64)
    y[:2] = (0, 1)
    if kind == "proba":
        s = 1 / (1 + np.exp(-s))
        grid = np.linspace(0.0, 1.0, 101)
    else:
        grid = np.linspace(s.min() - 1, s.max() + 1, 101)
    return s, y, grid


def _row_pieces(n: int, n_pieces: int, rng: np.random.Generator | None) -> list[np.ndarray]:
    """Row indices of ``n_pieces`` arbitrary pieces: shuffled rows, random cuts, an empty piece and a
    one-row piece included when there are enough pieces (``rng`` None: contiguous, near-equal)."""
    if rng is None:
        return [a for a in np.array_split(np.arange(n), n_pieces)]
    order = rng.permutation(n)
    inner = np.sort(rng.integers(1, n, size=max(0, n_pieces - 3)))
    cuts = np.concatenate(([0, 0, 1], inner, [n]))  # piece 0 empty, piece 1 one row
    cuts = np.maximum.accumulate(cuts)
    return [order[a:b] for a, b in zip(cuts[:-1], cuts[1:])]


def _range_pieces(s: np.ndarray, n_pieces: int, rng: np.random.Generator | None) -> list[np.ndarray]:
    """Row indices of increasing score ranges (ties never split), a one-row range first if possible."""
    order = np.argsort(s, kind="stable")
    ss = s[order]
    starts = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1]])  # where each tie group begins
    if rng is None:
        chosen = starts[np.linspace(0, len(starts), n_pieces, endpoint=False).astype(int)[1:]]
    else:
        k = min(len(starts) - 1, max(0, n_pieces - 1))
        chosen = np.sort(rng.choice(starts[1:], size=k, replace=False)) if k else np.empty(0, int)
    cuts = np.unique(np.concatenate(([0], chosen, [len(s)])))
    return [order[a:b] for a, b in zip(cuts[:-1], cuts[1:])]


def _merge(cal, parts: list[dict[str, Any]], rng: np.random.Generator | None):
    """Merge ``parts`` in a tree that keeps their order: left to right, or random adjacent pairs."""
    parts = list(parts)
    while len(parts) > 1:
        i = 0 if rng is None else int(rng.integers(0, len(parts) - 1))
        parts[i : i + 2] = [cal.merge_stats(parts[i], parts[i + 1])]
    return parts[0]


def fit_over_pieces(cal, s, y, w, kind: str, n_pieces: int, rng: np.random.Generator | None = None,
                    max_rounds: int = 500):
    """Fit ``cal`` by its reduction protocol over ``n_pieces`` pieces of ``(s, y, w)``; ``None`` when it
    declares no reduction for ``kind``.  ``rng`` picks the cutting and the merge tree (None: a fixed,
    near-equal cutting merged left to right)."""
    request = cal.reduction_start(kind)
    if request is None:
        return None
    rows = _row_pieces(len(s), n_pieces, rng)
    ranges = None
    rounds = 0
    while request is not None:
        rounds += 1
        if rounds > max_rounds:
            raise PluginError(f"calibrator '{cal.name}' did not finish its reduction in {max_rounds} rounds")
        if request.get("sorted"):
            ranges = ranges if ranges is not None else _range_pieces(s, n_pieces, rng)
            use = ranges
        else:
            use = rows
        parts = [cal.partial_stats(s[i], y[i], w[i], request) for i in use if len(i)]
        request = cal.reduction_step(_merge(cal, parts, rng), request)
    return cal


def reduction_disagreement(make: Callable[[], Any], s, y, w, kind: str, grid, n_pieces: int,
                           rng: np.random.Generator | None = None) -> float | None:
    """Largest ``|p_reduction - p_fit|`` on ``grid``; ``None`` if the calibrator has no reduction.

    ``fit`` runs first: what it raises propagates (the rows do not suit the calibrator).  What the
    protocol then raises on the same rows is :class:`ReductionRaised`, the plugin's error as its cause."""
    in_memory = make().fit(s, y, sample_weight=w, score_kind=kind)
    try:
        by_reduction = fit_over_pieces(make(), s, y, w, kind, n_pieces, rng)
    except Exception as exc:  # noqa: BLE001 - fit succeeded on these rows: the protocol is at fault
        raise ReductionRaised(exc, n_pieces) from exc
    if by_reduction is None:
        return None
    return _largest_gap(by_reduction.predict(grid), in_memory.predict(grid))


def _largest_gap(a, b) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        return float("inf")
    diff = np.abs(a - b)
    return float("inf") if not np.all(np.isfinite(diff)) else float(diff.max(initial=0.0))


# ---------------------------------------------------------------------------------------------- matrix form


def matrix_probe_rows(n: int, k: int, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(S, y, grid)`` for the matrix form: ``n`` rows of ``k`` logits (probabilities for ``"proba"``)
    whose classes follow a softmax of twice the logits, every class present, and 60 rows of scores
    spread wider than the data for ``predict``."""
    rng = np.random.default_rng(seed)
    Z = np.round(rng.normal(size=(n, k)) * 1.5, 2)
    P = np.exp(2 * Z - (2 * Z).max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = (P.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1).clip(0, k - 1).astype(np.int64)
    y[:k] = np.arange(k)
    G = rng.normal(size=(60, k)) * 2.5
    if kind == "proba":
        def soft(A):
            E = np.exp(A - A.max(axis=1, keepdims=True))
            return E / E.sum(axis=1, keepdims=True)
        return soft(Z), y, soft(G)
    return Z, y, G


def _start_matrix(cal, kind: str, k: int):
    request = cal.reduction_start(kind, n_classes=k)
    if not isinstance(request, dict) or request.get("sorted"):
        got = "None" if request is None else ("a sorted request" if isinstance(request, dict) else type(request).__name__)
        raise PluginError(
            f"calibrator '{cal.name}' declares multiclass = True but reduction_start(score_kind, n_classes={k})"
            f" returned {got}; the matrix form must start an unsorted reduction (a dict request)"
        )
    return request


def fit_matrix_over_pieces(cal, S, y, w, kind: str, n_pieces: int, rng: np.random.Generator | None = None,
                           max_rounds: int = 500):
    """Fit ``cal`` by the matrix form of its reduction over ``n_pieces`` row pieces of ``(S, y, w)``
    (an empty and a one-row piece among them when ``rng`` is given), merged in a tree that keeps their
    order (``rng`` None: near-equal contiguous pieces merged left to right)."""
    k = int(S.shape[1])
    request = _start_matrix(cal, kind, k)
    rows = _row_pieces(len(y), n_pieces, rng)
    rounds = 0
    while request is not None:
        rounds += 1
        if rounds > max_rounds:
            raise PluginError(f"calibrator '{cal.name}' did not finish its reduction in {max_rounds} rounds")
        parts = [cal.partial_stats(S[i], y[i], w[i], request) for i in rows if len(i)]
        request = cal.reduction_step(_merge(cal, parts, rng), request)
    return cal


def matrix_disagreement(make: Callable[[], Any], S, y, w, kind: str, grid, n_pieces: int,
                        rng: np.random.Generator | None = None) -> float:
    """Largest ``|P_reduction - P_fit|`` over the ``(m, k)`` predictions on ``grid``; ``fit``'s own
    failure propagates, the protocol's is :class:`ReductionRaised` (as :func:`reduction_disagreement`)."""
    in_memory = make().fit(S, y, sample_weight=w, score_kind=kind)
    try:
        by_reduction = fit_matrix_over_pieces(make(), S, y, w, kind, n_pieces, rng)
    except Exception as exc:  # noqa: BLE001 - fit succeeded on these rows: the protocol is at fault
        raise ReductionRaised(exc, n_pieces) from exc
    return _largest_gap(by_reduction.predict(grid), in_memory.predict(grid))


def probability_rows_problem(P, n_rows: int, k: int) -> str | None:
    """Why ``P`` (a multiclass calibrator's ``predict`` of ``n_rows`` rows of ``k`` scores) is not a
    matrix of probability vectors -- shape ``(n_rows, k)``, finite, in [0, 1], each row summing to 1
    within :data:`ROW_SUM_ATOL` -- or None."""
    P = np.asarray(P, dtype=float)
    if P.shape != (n_rows, k):
        return f"predict returned shape {P.shape} for {n_rows} rows of {k} scores; it must return ({n_rows}, {k})"
    if not np.all(np.isfinite(P)):
        return "predict returned NaN or infinite probabilities"
    if P.size and (P.min() < -1e-12 or P.max() > 1 + 1e-12):
        return f"predict returned probabilities in [{P.min():.6g}, {P.max():.6g}], outside [0, 1]"
    gap = np.abs(P.sum(axis=1) - 1.0)
    if gap.size and gap.max() > ROW_SUM_ATOL:
        i = int(np.argmax(gap))
        return f"a row of predict sums to {P[i].sum():.9g}, not 1 (tolerance {ROW_SUM_ATOL:g})"
    return None


_CHECKED: dict[tuple, None] = {}
_LOCK = threading.Lock()


def check_reduction_once(calibrator, kind: str, n_classes: int | None = None) -> None:
    """The engine's probe, before a calibrator is fitted as a reduction on a table.

    Users install plugins whose tests they never ran.  Once per process for each calibrator class,
    parameters and score kind, the protocol is run over two fixed cuttings of 120 probe rows (five
    row pieces merged left to right, and four score ranges), and compared with ``fit`` on the same
    rows; a difference over :data:`REDUCTION_ATOL` is refused in one line naming the plugin, before
    any table is read into the fit.  It costs two small fits.

    ``n_classes``: the matrix form of a multiclass calibrator (``Calibrator.multiclass``), probed on
    120 rows of ``min(n_classes, 4)`` scores with the same two cuttings; its ``predict`` rows must
    also be probability vectors (:func:`probability_rows_problem`).  When ``fit`` itself refuses the
    probe rows (its own one-line error) the probe steps aside: the real fit will say so.  When ``fit``
    succeeds and the protocol raises on the same rows, that is the protocol's fault, refused with the
    plugin's message as context.
    """
    from ..plugins.calls import describe, distribution_of, plugin_errors

    cls = type(calibrator)
    key = (cls.__module__, cls.__qualname__, repr(sorted(calibrator.get_params(deep=False).items(), key=str)), kind,
           n_classes)
    with _LOCK:
        if key in _CHECKED:
            return
    from ..base import fresh_copy as clone

    def make():
        return clone(calibrator)

    def who() -> str:  # only for a refusal: distribution_of scans every installed file (0.3-4 s)
        return f"{describe(calibrator)} (plugin code from {distribution_of(cls)})"

    if n_classes is None:
        s, y, grid = probe_rows(120, kind, seed=0)
        form = "its reduction protocol (partial_stats/merge_stats/reduction_step)"
    else:
        k = min(int(n_classes), 4)
        s, y, grid = matrix_probe_rows(120, k, kind, seed=0)
        form = f"the matrix form of its reduction protocol (reduction_start(score_kind, n_classes={k}), {k}-class scores)"
    w = np.ones(len(y))
    worst = 0.0
    raised = problem = None
    try:
        with plugin_errors(calibrator, "fit"):
            try:
                for pieces in (5, 4):
                    if n_classes is None:
                        found = reduction_disagreement(make, s, y, w, kind, grid, pieces)
                    else:
                        found = matrix_disagreement(make, s, y, w, kind, grid, pieces)
                    if found is None:
                        break
                    worst = max(worst, found)
            except ReductionRaised as exc:  # fit accepted the rows, the protocol did not
                raised = exc
            if raised is None and n_classes is not None:
                fitted = make().fit(s, y, sample_weight=w, score_kind=kind)
                problem = probability_rows_problem(fitted.predict(grid), len(grid), k)
    except CalengineError:
        return  # the probe rows do not suit it (its own one-line refusal): the real fit will say so
    if raised is not None:
        raise PluginError(
            f"{who()} is unusable on a partitioned table: {form} raised {raised} on 120 probe rows that its own fit"
            f" accepts, so it breaks {REDUCTION_RULE}; report it to the plugin's authors"
            " (calengine.testing.check_calibrator shows it), or choose another method", parameter="method"
        ) from raised.cause
    if worst > REDUCTION_ATOL:
        raise PluginError(
            f"{who()} is unusable on a partitioned table: {form} fits a map up to {worst:.3g} away from its own fit"
            f" on the same 120 rows, so it breaks {REDUCTION_RULE}; report it to the plugin's authors"
            " (calengine.testing.check_calibrator shows it), or choose another method", parameter="method"
        )
    if problem is not None:
        raise PluginError(
            f"{who()} breaks the multiclass calibrator contract (calengine.base.Calibrator.multiclass: predict of (n, k)"
            f" scores returns probability vectors, finite, in [0, 1], each row summing to 1): {problem}; report it"
            " to the plugin's authors (calengine.testing.check_calibrator shows it), or choose another method",
            parameter="method",
        )
    with _LOCK:
        _CHECKED[key] = None
