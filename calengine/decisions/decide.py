"""Minimum-expected-cost decisions from class probabilities.

Given calibrated probabilities ``P`` (n x k) and a :class:`~calengine.decisions.costs.CostMatrix`,
the Bayes-optimal decision for a row is the class ``d`` minimising ``sum_t P[t] C[d, t]`` (Elkan 2001).
This is why calibration matters for decisions: the rule is only optimal when ``P`` are true
probabilities.  For two classes with constant costs it is the threshold rule "decide class 1 when
P(class 1) > p*", p* = (C10 - C00) / (C10 - C00 + C01 - C11); with a per-row benefit it is the KDD'98
rule "mail when p(x) * amount(x) > cost".

Ties: the first class in the model's class order wins, so a row exactly at the threshold p* gets
class 0, matching the strict ``>`` of the rules above.  "Exactly" allows for float rounding: expected
costs within ``TIE_TOLERANCE`` times the size of the terms summed (sum_t P[t] max_d |C[d, t]|) of the
minimum count as tied.  Without it, rows at p = p* split at random by rounding: isotonic calibration
on COIL 2000 puts 49 test rows at exactly p = 0.1 = p*, and 4.5 - 4.5 came out as -4e-16 for them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .costs import CostMatrix, load_cost_matrix

#: relative size under which two expected costs count as tied (see the module docstring)
TIE_TOLERANCE = 1e-12


@dataclass
class Decisions:
    """``index``: the decided class index per row; ``decision``: its label; ``expected_cost``: the
    minimum expected cost (minus the expected benefit when the matrix holds benefits)."""

    index: np.ndarray
    decision: np.ndarray
    expected_cost: np.ndarray


def decide_indices(P: np.ndarray, cost_matrix: CostMatrix, frame=None) -> tuple[np.ndarray, np.ndarray]:
    """(decided class index (n,), expected cost of that decision (n,)); vectorised, ties to the lowest index."""
    E, scale = cost_matrix.expected_costs(P, frame, with_scale=True)
    if E.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    low = E.min(axis=1, keepdims=True)
    index = np.argmax(E <= low + TIE_TOLERANCE * scale[:, None], axis=1)  # the first (near-)minimum
    return index, E[np.arange(E.shape[0]), index]


def decide(P, cost_matrix, frame=None, classes=None) -> Decisions:
    """Minimum-expected-cost decisions for probabilities ``P`` (n x k, columns in ``classes`` order).

    ``cost_matrix``: a :class:`CostMatrix`, a dict, a JSON/YAML file path or inline JSON.  ``frame``: a
    pandas DataFrame (or dict of arrays) holding the columns the matrix reads, row-aligned with ``P``.
    ``classes``: the class labels of ``P``'s columns (e.g. ``model.classes_``); the matrix is reordered
    to them.  Default: the matrix's own class order.
    """
    cm = load_cost_matrix(cost_matrix)
    if classes is not None:
        cm = cm.for_classes(list(classes))
    index, cost = decide_indices(np.asarray(P, dtype=np.float64), cm, frame)
    labels = np.asarray(cm.classes, dtype=object)[index]
    try:
        labels = labels.astype(np.asarray(cm.classes).dtype)
    except (TypeError, ValueError):
        pass
    return Decisions(index=index, decision=labels, expected_cost=cost)
