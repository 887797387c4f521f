"""Graph building, run in the client: a plan turned into Dask tasks and then fitted members, for a
Parquet table (table, table_probing, cluster_learners) or in-memory arrays (arrays, probing,
training).  Nothing here runs inside a task; the code those tasks call is the next stage, tasks.

Modules:

* :mod:`.arrays`: Plan -> Dask tasks -> fitted members.
* :mod:`.calibrators`: Calibrators fitted as reductions over the held-out score blocks of a table fit (step 6
  of :mod:`calengine.fit.table`), and of ``calengine recalibrate`` (:mod:`calengine.fit.recalibrate`).
* :mod:`.cluster_learners`: Learners that train on the cluster itself (``Learner.trains_on_cluster``).
* :mod:`.cross_validation`: Cross-validated evaluation of a configuration on one table (``calengine cv``).
* :mod:`.label_shift`: ``calengine adapt``.
* :mod:`.probing`: Probing and bagging as Dask tasks.
* :mod:`.recalibrate`: Recalibration without refitting.
* :mod:`.score_columns`: Fitting on the score columns of a table (``calengine fit --scores``).
* :mod:`.scores_api`: ``calengine.calibrate_scores``.
* :mod:`.segments`: Segment-wise calibration.
* :mod:`.table`: Fitting on a partitioned Parquet table.
* :mod:`.table_probing`: Probing and bagging over a partitioned Parquet table.
* :mod:`.training`: From a table (or arrays) and a configuration to a :class:`CalibratedModel`.
* :mod:`.mcgrad` (package): Graph building for MCGrad multicalibration (``calengine fit --method mcgrad --by
  ...``).
"""
