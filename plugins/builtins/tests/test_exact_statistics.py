"""Issue 43 §1: the scaling calibrators' merged statistics are the same bits however the rows are cut.

Sigmoid and temperature (one column and k columns) sum floats in every round: class weights, the
score histograms, Newton's objective, gradient and Hessian.  Each piece now returns those sums as
:class:`calengine.reductions.exact.ExactSums`, so every round's merged statistics -- and therefore every
trial point, the stopping decision and the model -- are the same bits for any cutting of the rows into
pieces (empty and one-row pieces included).  The oracle is the same fit on one piece, round by round.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from calengine.reductions.calibrators import fit_by_reduction
from calengine_builtins.calibrators import TemperatureCalibrator
from calengine.reductions.exact import ExactSums
from calengine_builtins.calibrators.scaling import SigmoidCalibrator, SigmoidNoBiasCalibrator


def _floats(x):
    return x.to_float() if isinstance(x, ExactSums) else x


def _rounds(cal, pieces, kind, n_classes=None):
    """Each round's merged statistics as the fit reads them (floats), and the fitted state."""
    seen = []
    step = cal.reduction_step

    def recording(stats, request):
        seen.append({key: np.asarray(_floats(v)).tobytes() for key, v in stats.items() if key != "op"})
        return step(stats, request)

    cal.reduction_step = recording
    fit_by_reduction(cal, pieces, kind, n_classes=n_classes)
    del cal.reduction_step
    return seen, {k: np.asarray(v).tobytes() for k, v in cal.to_state().items()}


def _cut(arrays, cuts):
    bounds = [0, *cuts, len(arrays[0])]
    return [tuple(a[lo:hi] for a in arrays) for lo, hi in zip(bounds[:-1], bounds[1:])]


def _binary_data(seed, n, kind, weighted):
    rng = np.random.default_rng(seed)
    u = rng.normal(size=n) * 2.0
    s = 1.7 * u if kind == "decision" else 1.0 / (1.0 + np.exp(-1.7 * u))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-u))).astype(np.int64)
    w = rng.random(n) * 10.0 ** rng.integers(-3, 4, n) if weighted else np.ones(n)
    return s, y, w


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["sigmoid", "temperature", "sigmoid_nobias"]),
       st.sampled_from(["proba", "decision"]), st.booleans(), st.lists(st.integers(0, 3000), max_size=6))
def test_binary_scalings_merge_the_same_bits_for_every_cut(seed, method, kind, weighted, cuts):
    make = {"sigmoid": SigmoidCalibrator, "temperature": TemperatureCalibrator,
            "sigmoid_nobias": SigmoidNoBiasCalibrator}[method]
    data = _binary_data(seed, 3000, kind, weighted)
    whole = _rounds(make(), [data], kind)
    cut = _rounds(make(), _cut(data, sorted(cuts)), kind)
    assert cut == whole


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans(), st.lists(st.integers(0, 3000), max_size=6))
def test_temperature_on_k_columns_merges_the_same_bits_for_every_cut(seed, weighted, cuts):
    rng = np.random.default_rng(seed)
    n, k = 3000, 10
    Z = rng.normal(size=(n, k)) * 2.4
    y = rng.integers(0, k, n)
    w = rng.random(n) * 10.0 ** rng.integers(-3, 4, n) if weighted else np.ones(n)
    whole = _rounds(TemperatureCalibrator(), [(Z, y, w)], "decision", n_classes=k)
    cut = _rounds(TemperatureCalibrator(), _cut((Z, y, w), sorted(cuts)), "decision", n_classes=k)
    assert cut == whole
