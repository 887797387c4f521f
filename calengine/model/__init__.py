"""The fitted model and its life on disk: the calibrated model, save and load without pickle, hashed
deterministic files, the checks made before use and the types skops may load.  Fitting ends here
and scoring starts from here.
"""
