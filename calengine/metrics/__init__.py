"""The end of the story: measuring calibrated probabilities on a labelled table.

Two engines compute the same metrics to the same bits: the exact in-memory one
(:class:`~calengine.metrics.measures.MetricAccumulator`, per-chunk accumulators merged in a fixed
order) and the bounded-memory one (:mod:`.ranged`, the same grouped tables cut into score ranges that
no process holds whole), which ``evaluate`` takes from a million rows on.  Each metric's docstring
says where its two forms live; the in-memory form is the oracle of the ranged one in the tests.
:mod:`.table` reads a table's chunks into either, :mod:`.evaluation` is the ``evaluate`` command's
Python face, and :mod:`.report` draws and prints the results.

Modules:

* :mod:`.bootstrap`: Bootstrap bands for a calibration map (``evaluate --bootstrap``).
* :mod:`.corp`: CORP decomposition of the Brier score and log loss (Dimitriadis, Gneiting & Jordan 2021,
  PNAS).
* :mod:`.drift`: Drift check: are these probabilities still calibrated on these (new, labelled) rows?
* :mod:`.evaluation`: Evaluating fitted models on a labelled table: ``calengine evaluate`` from Python.
* :mod:`.measures`: Evaluation of probability estimates as an exact, mergeable reduction over partitions.
* :mod:`.prior_shift`: ``evaluate --prior-shift``: the class priors of a table estimated from a model's
  probabilities alone.
* :mod:`.roc`: ROC analysis shared by the ROC-hull calibrator, the metrics and the LexProb plugin.
* :mod:`.segments`: Calibration per segment (``evaluate --by``).
* :mod:`.statistics`: The calibration metrics' statistics on small merged summaries.
* :mod:`.table`: Evaluating a fitted model on a labelled table, chunk by chunk.
* :mod:`.ranged` (package): The bounded-memory evaluation engine.
* :mod:`.report` (package): the evaluation report (``--report``: figures and one HTML page) and the text
  table a terminal shows.
"""
