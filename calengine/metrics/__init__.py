"""The end of the story: exact, mergeable metrics computed from per-chunk accumulators, ROC convex
hulls, and the figures and HTML page of the report.
"""
