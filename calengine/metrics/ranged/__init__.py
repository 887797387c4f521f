"""The bounded-memory evaluation engine: every metric computed exactly from grouped tables cut into
score ranges that no process holds whole (the in-memory engine, :mod:`calengine.metrics.measures`,
is its oracle in the tests).

Modules:

* :mod:`.cache`: A per-process cache of the score ranges an evaluation reads from its scratch directory, and
  of the arrays the metric kernels derive from them, bounded by a byte budget.
* :mod:`.core`: The core metrics, the drift check and the error-reject curve from grouped tables cut into
  score ranges.
* :mod:`.core_kernels`: What one score range contributes to the core metrics of
  :meth:`MetricAccumulator.result`, the drift check and the error-reject curve.
* :mod:`.curves`: The report's curves from grouped tables cut into score ranges.
* :mod:`.engine`: Evaluation of a large table in bounded memory.
* :mod:`.kernels`: What one score range of a grouped table contributes to each metric.
* :mod:`.suite`: The calibration metric suite of issue 22, computed exactly from grouped tables cut into score
  ranges.
* :mod:`.workers`: The ranges of an evaluation on a Dask cluster, kept as files in the workers' local
  directories.
"""
