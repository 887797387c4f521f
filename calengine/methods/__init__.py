"""The papers' algorithms on plain arrays: Probing's schedule and weights, code matrices and the
combining of posteriors.  Pure functions without Dask, shared by fitting, the tasks and the model.
"""
