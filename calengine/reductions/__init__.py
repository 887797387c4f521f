"""Mergeable statistics: per-fragment column statistics, pooled adjacent violators and the calibrator
protocol that fits calibrators from per-partition pieces merged in a fixed order.  Tasks produce
these pieces and the client merges them, so the stage follows tasks and precedes the model.

Modules:

* :mod:`.agreement`: Does a calibrator's reduction protocol fit what its ``fit`` fits? The plugin kit's check
  and the engine's first-use probe.
* :mod:`.calibrators`: Fitting a calibrator as a reduction.
* :mod:`.column_stats`: Column statistics of a table as a reduction.
* :mod:`.exact`: Sums that do not depend on how a table was cut.
* :mod:`.pav`: Weighted pool-adjacent-violators (PAV) with tied scores pooled first, and its two prediction
  rules.
* :mod:`.tables`: Grouped tables.
"""
