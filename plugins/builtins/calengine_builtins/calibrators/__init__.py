"""calengine's built-in calibrators: one score column in, probabilities of the positive class out.

Registry names and sources:

* ``none`` — the learner's own probability, or Zadrozny & Elkan's rescaling of a decision value;
  the baseline every other method is compared with.
* ``sigmoid`` — Platt (1999) with his target smoothing, fitted by Lin, Lin & Weng's (2007) Newton.
* ``isotonic`` — pool-adjacent-violators (Zadrozny & Elkan 2002), ties pooled first.
* ``binning`` — equal-frequency histogram binning (Zadrozny & Elkan 2001), bins chosen by CV.
* ``rocch`` — ROC convex hull calibration (Fawcett & Niculescu-Mizil 2007; Flach & Matsubara 2007).
* ``beta`` — beta calibration (Kull, Silva Filho & Flach 2017).
* ``temperature`` — temperature scaling (Guo et al. 2017) of one logit, or of a k-class model's whole
  logit vector (``softmax(z / T)``, :mod:`.multiclass_scaling`).
* ``sigmoid_nobias`` — Duin & Tax's sigmoid without bias, so a zero score keeps probability 1/2.
* ``vector_scaling``, ``matrix_scaling`` (ODIR), ``dirichlet`` (full or diagonal) — linear maps of a
  k-class model's logit (or log-probability) vector, Kull et al. 2019 (:mod:`.multiclass_scaling`).
* ``top_label`` — top-label calibration (Gupta & Ramdas 2022): a binary calibrator (binning, isotonic or
  sigmoid) of the top probability per predicted class of a k-class model (:mod:`.top_label`).
* ``venn_abers`` — inductive Venn–ABERS (Vovk & Petej 2014): a (p0, p1) interval per score and its merge.

Shared behaviour: every ``fit`` validates its input with :func:`calengine.reductions.pav.check_binary_data`
(finite 1-D scores, labels in {0, 1}, matching lengths, non-negative weights, both classes present,
else :class:`calengine.errors.DataError`); ``sample_weight`` acts as a frequency weight, so a weight
of 2 gives the same fit as the row twice (for ``binning`` with ``n_bins="auto"`` only up to the
random CV split, which depends on the rows); every calibrator except ``binning`` with
``n_bins="auto"`` can be fitted as a reduction over a partitioned table (the protocol on
:class:`calengine.base.Calibrator`; ``fit`` runs the same protocol on one piece, so both agree, see
each class for its rounds); ``to_state`` holds only numpy arrays and plain
scalars/strings and ``from_state`` restores predictions exactly.  Predictions are non-decreasing in
the score except for ``binning`` (bin fractions follow the data) and ``rocch`` with ``laplace=True``
(the correction can reorder hull edges), as documented on those classes.

Layout, one module per family: :mod:`.baseline` (``none``), :mod:`.scaling` (``sigmoid``, ``beta``,
``temperature``, ``sigmoid_nobias``), :mod:`.multiclass_scaling` (calibrators of the whole k-column
score matrix: ``temperature``'s k-class form), :mod:`.top_label`, :mod:`.isotonic`, :mod:`.binning`, :mod:`.hull` (``rocch``) and
:mod:`.venn_abers`; the private :mod:`._base` (validation, state round-trip, reduction plumbing) and
:mod:`._solvers` (the Newton solvers of the scaling methods) serve them.  This package is the
plugin's ``calibrators`` entry point: it holds the ``register_calibrators`` hook and re-exports every
calibrator class, so ``from calengine_builtins.calibrators import IsotonicCalibrator`` works as it did
when the calibrators were one module.  Models name calibrators by registry name, never by module, so
models saved before the split load unchanged.
"""

from __future__ import annotations

from calengine import hookimpl

from ._base import EPS  # noqa: F401 - a public constant of the one-module calibrators, kept importable
from .baseline import NoCalibration
from .binning import BinningCalibrator
from .hull import ROCHullCalibrator
from .isotonic import IsotonicCalibrator
from .multiclass_scaling import (
    DirichletCalibrator,
    MatrixScalingCalibrator,
    TemperatureCalibrator,
    VectorScalingCalibrator,
)
from .scaling import BetaCalibrator, SigmoidCalibrator, SigmoidNoBiasCalibrator
from .top_label import TopLabelCalibrator
from .venn_abers import VennAbersCalibrator

__all__ = [
    "NoCalibration",
    "SigmoidCalibrator",
    "IsotonicCalibrator",
    "BinningCalibrator",
    "ROCHullCalibrator",
    "BetaCalibrator",
    "TemperatureCalibrator",
    "SigmoidNoBiasCalibrator",
    "VennAbersCalibrator",
    "VectorScalingCalibrator",
    "MatrixScalingCalibrator",
    "DirichletCalibrator",
    "TopLabelCalibrator",
    "register_calibrators",
]


CALIBRATORS = (
    NoCalibration,
    SigmoidCalibrator,
    IsotonicCalibrator,
    BinningCalibrator,
    ROCHullCalibrator,
    BetaCalibrator,
    TemperatureCalibrator,
    SigmoidNoBiasCalibrator,
    VennAbersCalibrator,
    VectorScalingCalibrator,
    MatrixScalingCalibrator,
    DirichletCalibrator,
    TopLabelCalibrator,
)


@hookimpl
def register_calibrators(register):
    """Register every built-in calibrator class under its ``name``."""
    for cls in CALIBRATORS:
        register(cls)
