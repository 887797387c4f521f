"""Scoring: a saved model mapped over chunks of row groups, writing scores or feeding evaluation.
It follows the model because it only reads one, and precedes the metrics it feeds.
"""
