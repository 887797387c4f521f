"""What runs inside Dask tasks: reading and encoding fragments, statistics, learners, held-out scores,
and the per-threshold fits of Probing and bagging.  Kept apart from the graph builders in fit so
that what ships to the workers is small, and seeded from the identity of the task.

Modules:

* :mod:`.arrays`: Functions that run inside Dask tasks.
* :mod:`.numeric_read`: Reading a fragment's numeric columns from Arrow into NumPy, without pandas (runs in
  tasks).
* :mod:`.partitions`: What runs inside the tasks of a partition-native fit.
* :mod:`.probing`: In-task code for Probing and bagging.
* :mod:`.spill`: Held-out scores kept in ``.npy`` files of the job's scratch directory instead of in memory.
"""
