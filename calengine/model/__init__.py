"""The fitted model and its life on disk: the calibrated model, save and load without pickle, hashed
deterministic files, the checks made before use and the types skops may load.  Fitting ends here
and scoring starts from here.

Modules:

* :mod:`.allowlist`: The fixed list of types calengine lets skops load from a model directory.
* :mod:`.artifact`: Saving and loading models.
* :mod:`.calibrated`: The fitted model.
* :mod:`.checks`: What a loaded model must satisfy before calengine scores with it.
* :mod:`.files`: The bytes of a model directory.
* :mod:`.mcgrad_member`: Scoring a model multicalibrated by MCGrad (``calengine fit --method mcgrad --by
  COL[,COL...]``, issue 25 §3.
* :mod:`.segmented`: Scoring a model calibrated per segment (``calengine fit --by COL[,COL...]``, issue 25
  §1).
* :mod:`.vote`: The fitted members of Probing and bagging.
"""
