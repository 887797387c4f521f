"""Learners calengine brings itself, registered like any plugin: the score columns of a model computed
elsewhere, a model trained elsewhere (``--prefit``), and a scikit-learn classifier instance.

Modules:

* :mod:`.prefit`: Calibrating a model trained elsewhere.
* :mod:`.score_columns`: Calibrating what teams already have.
* :mod:`.wrapped_estimator`: A scikit-learn classifier *instance* as a calengine learner (what the Python API
  wraps).
"""
