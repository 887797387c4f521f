"""Mergeable statistics: per-fragment column statistics, pooled adjacent violators and the calibrator
protocol that fits calibrators from per-partition pieces merged in a fixed order.  Tasks produce
these pieces and the client merges them, so the stage follows tasks and precedes the model.
"""
