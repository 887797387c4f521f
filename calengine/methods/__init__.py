"""The papers' algorithms on plain arrays: Probing's schedule and weights, code matrices and the
combining of posteriors.  Pure functions without Dask, shared by fitting, the tasks and the model.

Modules:

* :mod:`.codematrix`: Code matrices.
* :mod:`.combining`: Fixed rules for combining the calibrated posteriors of several classifiers (Duin & Tax,
  §4).
* :mod:`.label_shift`: Label shift.
* :mod:`.mcgrad`: MCGrad multicalibration (Tax et al., "MCGrad.
* :mod:`.mcgrad_boosters`: The libraries that train MCGrad's rounds (``--method-param
  booster=xgboost|lightgbm``).
* :mod:`.probing`: Pure algorithmic core of Langford & Zadrozny's Probing reduction, costing and bagging
  votes.
* :mod:`.sampling`: Probabilities of a model trained on class-downsampled data, put back on the population's
  scale.
* :mod:`.venn_abers`: Venn–ABERS predictors.
"""
