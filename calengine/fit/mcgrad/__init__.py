"""Graph building for MCGrad multicalibration (``calengine fit --method mcgrad --by ...``); the algorithm
is :mod:`calengine.methods.mcgrad`.

Modules:

* :mod:`.checks`: What ``calengine fit --method mcgrad`` refuses, and its ``--method-param``s, checked before
  any data is read (:func:`calengine.fit.training.prepare_fit` and :mod:`calengine.fit.mcgrad.table` call
  :func:`check_mcgrad`).
* :mod:`.cluster`: MCGrad's rounds across a Dask cluster.
* :mod:`.table`: ``calengine fit DATA --method mcgrad --by COL[,COL...]``.
"""
