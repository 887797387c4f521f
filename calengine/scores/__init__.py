"""Scoring: a saved model mapped over chunks of row groups, writing scores or feeding evaluation.
It follows the model because it only reads one, and precedes the metrics it feeds.

Modules:

* :mod:`.posteriors`: A model's posteriors on the chunks of a table, kept on the workers, and the reductions
  over them.
* :mod:`.table`: Mapping a fitted model over the partitions of any size of table.
"""
