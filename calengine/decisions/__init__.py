"""Cost-sensitive decisions from calibrated probabilities (issue 14, part 1).

Python API (the CLI's ``decide``, ``score --cost-matrix`` and ``evaluate --cost-matrix`` call the same)::

    from calengine.decisions import decide, load_cost_matrix
    cm = load_cost_matrix({"classes": [0, 1], "benefits": [[0, 0], [-5, "amount - 5"]]})
    out = decide(model.predict_proba(df), cm, frame=df, classes=model.classes_)
    out.decision, out.expected_cost

See :mod:`calengine.decisions.costs` for the matrix convention (``C[decided, true]``) and file format,
:mod:`calengine.decisions.decide` for the rule and its tie-break, and
:mod:`calengine.decisions.accumulate` for the mergeable evaluation totals.

Modules:

* :mod:`.accumulate`: Mergeable totals that evaluate decision policies on a labelled table, chunk by chunk.
* :mod:`.costs`: The cost (or benefit) matrix of a decision problem, constant or taken from columns of the
  table.
* :mod:`.decide`: Minimum-expected-cost decisions from class probabilities.
"""

from .accumulate import DecisionAccumulator
from .costs import CostMatrix, load_cost_matrix
from .decide import Decisions, decide, decide_indices

__all__ = ["CostMatrix", "DecisionAccumulator", "Decisions", "decide", "decide_indices", "load_cost_matrix"]
