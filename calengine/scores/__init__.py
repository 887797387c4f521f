"""Scoring: a saved model mapped over chunks of row groups, writing scores or feeding evaluation.
It follows the model because it only reads one, and precedes the metrics it feeds.

Modules:

* :mod:`.conformal`: What runs in tasks for ``calengine conformal`` and ``score --sets``: a chunk's calibration
  scores, kept sorted where they were computed.
* :mod:`.posteriors`: A model's posteriors on the chunks of a table, kept on the workers, and the reductions
  over them.
* :mod:`.table`: Mapping a fitted model over the partitions of any size of table.
"""
