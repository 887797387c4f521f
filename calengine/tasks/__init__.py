"""What runs inside Dask tasks: reading and encoding fragments, statistics, learners, held-out scores,
and the per-threshold fits of Probing and bagging.  Kept apart from the graph builders in fit so
that what ships to the workers is small, and seeded from the identity of the task.
"""
