"""Boosting libraries' model files (XGBoost UBJSON/JSON, LightGBM text) treated as untrusted input:
checked in Python, probed by the native library in a child process, then loaded.

Modules:

* :mod:`.checks`: Structure checks of boosting libraries' model files, in Python, before any byte reaches
  native code.
* :mod:`.guard`: Containing native boosting libraries while they read a model file.
* :mod:`.model_files`: For learners whose fitted state is a library's own model file (XGBoost UBJSON, LightGBM
  text).
* :mod:`.native`: Probing a booster file with the native library alone.
"""
