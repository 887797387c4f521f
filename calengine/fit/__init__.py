"""Graph building, run in the client: a plan turned into Dask tasks and then fitted members, for a
Parquet table (table, table_probing, cluster_learners) or in-memory arrays (arrays, probing,
training).  Nothing here runs inside a task; the code those tasks call is the next stage, tasks.
"""
