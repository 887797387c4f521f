"""Does a plugin's score (or calibrated probability) of a row depend on the other rows it is given with?
The engine's first-use probe.

The contract (:class:`calengine.base.Learner`, :class:`~calengine.base.Calibrator`): a row's score and
its calibrated probability are functions of that row alone.  The engine relies on it everywhere: a table
is scored in batches it chooses (``score --batch-rows``, the partitions of a fit, a worker's memory),
held-out rows are scored per partition, and ``predict_proba`` of one row must be that row's probability
in any frame.  A learner that centres each batch on its own mean passed every check before issue 41:
``score --batch-rows 50`` against the default differed by up to 0.098 on Pima, a row scored alone
against the same row in the full frame by 0.55, with exit 0.

:func:`check_rows_independent_once` runs, at the first ``score``/``predict`` of a plugin class (with
its parameters) in a process, the plugin on the first :data:`PROBE_ROWS` rows of the batch it was
about to process: once together, each row alone, and in reverse order.  Results further apart than
:data:`PROBE_RTOL` are refused in one :class:`~calengine.errors.PluginError` line naming the contract,
the plugin and its distribution.  The tolerance is not zero because arbitrary scikit-learn estimators
(``--learner sklearn``, ``CalibratedClassifier(learner=clf)``, ``--prefit`` models) reach BLAS, whose
kernels round a lone row and a batch differently in the last bits; ``calengine.testing`` asks plugins
for the same bits.  Built-in plugins that the test suite proves bit-for-bit independent
(``tests/scores/test_batch_independence.py``, ``calengine.testing`` on every built-in) are not probed.

Cost: ``PROBE_ROWS + 2`` calls on at most 8 rows, once per class and parameters per process (measured
in ``benchmarks/bench_batch_probe.py``).
"""

from __future__ import annotations

import threading

import numpy as np

from ..errors import PluginError

__all__ = ["check_rows_independent_once", "scores_of", "take_rows", "PROBE_ROWS", "PROBE_RTOL", "probed"]

#: rows the probe takes from the batch (each is also scored alone)
PROBE_ROWS = 8
#: relative (and absolute, for scores near 0) difference accepted: BLAS rounding of scikit-learn models
PROBE_RTOL = 1e-9

_CHECKED: dict[tuple, None] = {}
_LOCK = threading.Lock()


def probed(obj) -> bool:
    """Whether the probe runs for ``obj``: every plugin but the built-ins the test suite proves
    independent (``calengine_builtins`` classes other than the by-path ``sklearn`` learner, whose code
    is scikit-learn's, and calengine's own score columns, which hand each row's column on)."""
    cls = type(obj)
    module = cls.__module__ or ""
    if module.startswith("calengine_builtins."):
        return cls.__name__ == "SklearnClassifier"
    return not (module == "calengine.adapters.score_columns" and cls.__name__ == "ScoreColumns")


def take_rows(X, idx):
    """Rows ``idx`` of a matrix, a sparse matrix or a pandas DataFrame (positionally: the raw rows a
    ``FrozenEstimator`` or a ``--prefit`` scikit-learn pipeline reads are a DataFrame)."""
    if hasattr(X, "iloc"):
        return X.iloc[idx]
    return X[idx]


def check_rows_independent_once(obj, apply, X, action: str) -> None:
    """Probe ``apply`` (``obj.score`` or ``obj.predict``) on the first rows of ``X`` (module docstring);
    one :class:`PluginError` line when a row's result depends on the rows beside it."""
    if not probed(obj):
        return
    n = X.shape[0]
    if n < 2:
        return
    cls = type(obj)
    try:
        params = repr(sorted(obj.get_params(deep=False).items(), key=str))
    except Exception:  # noqa: BLE001 - a plugin without get_params is probed each time
        params = str(id(obj))
    key = (cls.__module__, cls.__qualname__, params, action)
    with _LOCK:
        if key in _CHECKED:
            return
    m = min(PROBE_ROWS, n)
    rows = take_rows(X, np.arange(m))
    whole = np.asarray(apply(rows), dtype=np.float64)
    alone = np.concatenate([np.asarray(apply(take_rows(rows, np.arange(i, i + 1))), dtype=np.float64) for i in range(m)])
    reverse = np.asarray(apply(take_rows(rows, np.arange(m)[::-1])), dtype=np.float64)[::-1]
    for how, got in (("each row alone", alone), ("in reverse order", reverse)):
        if got.shape != whole.shape:
            gap, shape = float("inf"), f" (shape {got.shape} against {whole.shape})"
        else:
            with np.errstate(invalid="ignore"):
                diff = np.abs(got - whole)
            gap, shape = float(np.nanmax(diff, initial=0.0)), ""
            bad = diff > PROBE_RTOL * (1.0 + np.abs(whole))
            if not (bad.any() or (np.isnan(got) != np.isnan(whole)).any()):
                continue
        from .calls import describe, distribution_of

        raise PluginError(
            f"{describe(obj)} (plugin code from {distribution_of(cls)}) breaks the batch-independence contract"
            f" (calengine.base: a row's {'score' if action == 'score' else 'probability'} is a function of that row"
            f" alone, whatever rows it is {'scored' if action == 'score' else 'predicted'} with): {action} of {m}"
            f" rows {how} differs from {action} of them together by up to {gap:.3g}{shape}, so its results would"
            " change with the batch size; report it to the plugin's authors (calengine.testing shows it), or"
            f" choose another {'learner' if action == 'score' else 'method'}"
        )
    with _LOCK:
        _CHECKED[key] = None


def scores_of(learner, X):
    """``learner.score(X)``, after the probe at the learner class's first use in this process."""
    check_rows_independent_once(learner, learner.score, X, "score")
    return learner.score(X)
