"""Conformance checks for plugin authors: run them in your own test suite.

::

    from calengine.testing import check_learner, check_plugin_module
    import my_plugin

    def test_my_learner_conforms():
        check_learner(my_plugin.MyLearner)

    def test_my_plugin_registers():
        check_plugin_module(my_plugin)

Each check raises ``AssertionError`` with a sentence saying which part of the contract (documented on
:class:`calengine.base.Learner`, :class:`~calengine.base.Calibrator` and
:class:`~calengine.base.Combiner`) is broken.  The checks fit on small synthetic data and finish in
seconds.  They check behaviour, not only shapes: a learner declaring ``accepts_sample_weight`` must
act on the weights (integer weights against duplicated rows), one declaring ``accepts_sparse`` must
fit and score scipy CSR as it scores the dense rows, a calibrator must be non-decreasing unless it
declares ``monotone = False``, and a combiner must give back the class probabilities that consistent
column estimates came from.  calengine runs the kit on every built-in plugin (``tests/testing/test_checks.py``).
"""

from __future__ import annotations

import pickle
import tempfile
from pathlib import Path
from types import ModuleType

import numpy as np

from ..base import BoosterLearner, Calibrator, Combiner, Learner
from ..plugins.calls import importable_class_problem
from ..plugins.loading import NAME_RE, load_plugins
from ..reductions.agreement import REDUCTION_ATOL, probe_rows, reduction_disagreement

__all__ = [
    "check_learner",
    "check_learner_stats",
    "check_calibrator",
    "check_combiner",
    "check_plugin_module",
    "make_data",
]


def make_data(n: int = 240, n_features: int = 5, n_classes: int = 2, seed: int = 0):
    """Small, learnable, non-negative float64 data with class indices 0..k-1 (all classes present)."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % n_classes
    rng.shuffle(y)
    centres = rng.normal(0, 1.5, size=(n_classes, n_features))
    X = centres[y] + rng.normal(0, 1.0, size=(n, n_features))
    X = X - X.min() + 0.1  # non-negative, for learners such as multinomial naive Bayes
    return X.astype(np.float64), y.astype(np.int64)


def _fail(cls, what: str) -> None:
    raise AssertionError(f"{cls.__module__}.{cls.__qualname__}: {what}")


def _check_common(cls, base: type) -> None:
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise AssertionError(f"{cls!r} must subclass calengine.base.{base.__name__}")
    if not isinstance(cls.name, str) or not NAME_RE.match(cls.name):
        _fail(cls, f"class attribute name must match [a-z][a-z0-9_]*, got {cls.name!r}")
    problem = importable_class_problem(cls)
    if problem:
        _fail(cls, problem)
    from sklearn.base import clone

    obj = cls()
    params = set(obj._get_param_names())
    extra = sorted(a for a in vars(obj) if a not in params and not a.startswith("_"))
    if extra:
        _fail(
            cls,
            f"__init__ sets {', '.join(extra)}, which are not parameters; __init__ must only store its"
            " parameters (scikit-learn's convention: clone and set_params rebuild objects from them, so"
            " anything else set there is lost or stale); compute it in fit",
        )
    try:
        copy = clone(obj)
    except Exception as exc:  # noqa: BLE001
        _fail(cls, f"sklearn.base.clone failed ({exc}); __init__ must store its parameters unchanged")
    if copy.get_params(deep=False).keys() != obj.get_params(deep=False).keys():
        _fail(cls, "get_params differs after clone; __init__ must store each parameter as an attribute")


def _roundtrip_state(obj, trusted: frozenset[str]):
    """Save ``obj.to_state()`` as the artifact does and load it back into a fresh instance."""
    from ..model.artifact import load_state, MemberReader, save_state
    from ..model.files import FileWriter

    with tempfile.TemporaryDirectory() as tmp:
        writer = FileWriter(Path(tmp))
        desc = save_state(obj.to_state(), writer, "state", "state")
        state = load_state(desc, MemberReader(Path(tmp), writer.files), "state", trusted)
    fresh = type(obj)(**obj.get_params(deep=False))
    return fresh.from_state(state)


def check_learner(cls: type, n_classes_list: tuple[int, ...] = (2, 3)) -> None:
    """Check a :class:`~calengine.base.Learner` subclass against the contract."""
    from ..model.allowlist import CORE_TRUSTED_TYPES
    from ..tasks.arrays import seeded

    if isinstance(cls, type) and issubclass(cls, BoosterLearner) and "validate_booster" in getattr(
            cls, "__abstractmethods__", ()):
        _fail(cls, "a BoosterLearner must declare validate_booster(data, n_features, n_classes), which checks"
                   " the booster file in Python before the library reads it (see calengine.boosters.checks)")
    _check_common(cls, Learner)
    proto = cls()
    if proto.score_kind not in ("proba", "decision"):
        _fail(cls, f"score_kind must be 'proba' or 'decision', got {proto.score_kind!r}")
    if not isinstance(proto.accepts_sample_weight, (bool, np.bool_)):
        _fail(cls, "accepts_sample_weight must be a bool")
    trusted = frozenset(CORE_TRUSTED_TYPES) | frozenset(cls.trusted_types)
    for k in n_classes_list:
        X, y = make_data(n_classes=k)
        learner = seeded(cls(), 0)
        if learner.fit(X, y) is not learner:
            _fail(cls, "fit must return self")
        S = np.asarray(learner.score(X))
        want = (len(y),) if k == 2 else (len(y), k)
        if S.shape != want:
            _fail(cls, f"score must have shape {want} for {k} classes, got {S.shape}")
        if not np.all(np.isfinite(S)):
            _fail(cls, "score returned non-finite values")
        if learner.score_kind == "proba" and (S.min() < -1e-12 or S.max() > 1 + 1e-12):
            _fail(cls, "score_kind is 'proba' but scores fall outside [0, 1]")
        again = seeded(cls(), 0).fit(X, y)
        if not np.array_equal(np.asarray(again.score(X)), S):
            _fail(cls, "two fits with the same random_state give different scores; seed all randomness")
        _check_state_types(cls, learner.to_state(), learner=True)
        if isinstance(learner, BoosterLearner):
            _check_booster_validator(cls, learner, X.shape[1], k)
        restored = _roundtrip_state(learner, trusted)
        if not np.array_equal(np.asarray(restored.score(X)), S):
            _fail(cls, "to_state/from_state does not reproduce the scores exactly")
        unpickled = pickle.loads(pickle.dumps(learner))
        if not np.array_equal(np.asarray(unpickled.score(X)), S):
            _fail(cls, "a pickled copy (as sent to Dask workers) scores differently")
        if learner.accepts_sample_weight:
            _check_weights_act_as_duplicates(cls, X, y, k)
        if learner.accepts_sparse:
            _check_sparse_input(cls, X, y, k)
    supports = proto.supports_stats
    if not isinstance(supports, (bool, np.bool_)):
        _fail(cls, "supports_stats must be a bool (a class attribute or a property of the instance)")
    if supports:
        check_learner_stats(cls, n_classes_list)


def _check_booster_validator(cls, learner, n_features: int, k: int) -> None:
    """validate_booster accepts the learner's own file with its counts and refuses a truncated one; a
    declared ``native_probe`` accepts the sound file."""
    from ..errors import ModelFormatError

    blob = learner.to_state()[cls.booster_key]
    summary = learner.validate_booster(blob, n_features, k)
    if getattr(summary, "n_features", None) != n_features or getattr(summary, "n_classes", None) != k:
        _fail(cls, f"validate_booster must return a BoosterSummary with n_features={n_features} and n_classes={k}"
                   f" for the booster it just fitted, got {summary!r}")
    for bad, what in ((blob[: len(blob) // 2], "a booster file cut in half"),
                      (blob, f"a booster fitted on {n_features} features given {n_features + 1}")):
        try:
            learner.validate_booster(bad, n_features + (bad is blob), k)
        except ModelFormatError:
            continue
        _fail(cls, f"validate_booster accepted {what}; it must raise one ModelFormatError line")
    if cls.native_probe:  # the probing child's loader must accept the plugin's own sound file
        import importlib

        module, _, name = cls.native_probe.partition(":")
        verdict = getattr(importlib.import_module(module), name)(blob, n_features, k)
        if verdict is not None:
            _fail(cls, f"native_probe {cls.native_probe} refused the booster just fitted ({verdict})")


def _check_weights_act_as_duplicates(cls, X, y, k: int) -> None:
    """Integer weights must act like duplicated rows, or at the very least change the fit.

    Deterministic learners whose fit is a function of weighted sums (linear models, naive Bayes, nearest
    means) give the duplicated-rows model to rounding.  Learners whose fit also counts rows (a tree's
    ``min_samples_leaf``, a leave-one-out bandwidth, stochastic gradient batches) cannot; for them the
    kit asks only that the weights change the scores, which a learner that declares
    ``accepts_sample_weight`` and then ignores the weights never does (Probing would silently lose its
    importance weighting).  Scores are compared on fresh points, since a tree fits its own rows exactly
    whatever the weights.
    """
    from ..tasks.arrays import seeded

    w = np.tile([1.0, 3.0, 1.0, 2.0], len(y) // 4 + 1)[: len(y)]
    reps = w.astype(np.int64)
    X_new, _ = make_data(n_classes=k, seed=1)
    weighted = np.asarray(seeded(cls(), 0).fit(X, y, sample_weight=w).score(X_new))
    duplicated = np.asarray(seeded(cls(), 0).fit(np.repeat(X, reps, axis=0), np.repeat(y, reps)).score(X_new))
    if weighted.shape == duplicated.shape and np.allclose(weighted, duplicated, rtol=1e-6, atol=1e-6):
        return
    plain = np.asarray(seeded(cls(), 0).fit(X, y).score(X_new))
    if np.array_equal(weighted, plain):
        _fail(
            cls,
            f"accepts_sample_weight is True but fit ignores sample_weight ({k} classes: weights 1-3 give the"
            " same scores as no weights, and not those of the rows duplicated); use the weights or declare"
            " accepts_sample_weight = False (Probing then uses costing)",
        )


def _check_sparse_input(cls, X, y, k: int) -> None:
    """A learner that declares ``accepts_sparse`` must fit and score scipy CSR (what the engine builds
    for text columns) and score a CSR matrix as it scores the same rows dense."""
    from scipy import sparse

    from ..tasks.arrays import seeded

    Xs = sparse.csr_matrix(X)
    try:
        learner = seeded(cls(), 0).fit(Xs, y)
        S = np.asarray(learner.score(Xs))
    except Exception as exc:  # noqa: BLE001 - any failure on CSR breaks the declared contract
        _fail(cls, f"accepts_sparse is True but fit/score on a scipy CSR matrix failed ({type(exc).__name__}: {exc})")
    want = (len(y),) if k == 2 else (len(y), k)
    if S.shape != want or not np.all(np.isfinite(S)):
        _fail(cls, f"accepts_sparse is True but scores of CSR input have shape {S.shape} or non-finite values")
    if not np.allclose(np.asarray(learner.score(X)), S, rtol=1e-8, atol=1e-10):
        _fail(cls, "scores of a CSR matrix differ from scores of the same rows as a dense array")


def _close(a, b, rtol: float) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=rtol, equal_nan=True))


def check_learner_stats(
    cls: type, n_classes_list: tuple[int, ...] = (2, 3), params: dict | None = None, rtol: float = 1e-9
) -> None:
    """Check the optional "fitting by statistics" contract of a :class:`~calengine.base.Learner`.

    For a learner whose instance (built with ``params``) says ``supports_stats``: the rows are cut
    into three random pieces, plus an empty one (as a partition can be), and ``fit_from_stats`` of the
    merged ``partial_stats`` must score like ``fit`` on all the rows, to ``rtol`` (relative and
    absolute), with and without sample weights; the statistics must be numpy arrays that survive
    pickling; the merge must not depend on the order beyond rounding; ``partial_stats_groups`` (with
    three non-empty groups and two empty ones) must agree with ``partial_stats``; and the model fitted from
    statistics must survive ``to_state``/``from_state`` with identical scores.  ``check_learner``
    runs this with the default parameters when the class declares ``supports_stats``.
    """
    from ..model.allowlist import CORE_TRUSTED_TYPES
    from ..tasks.arrays import seeded

    params = dict(params or {})
    if not (isinstance(cls, type) and issubclass(cls, Learner)):
        raise AssertionError(f"{cls!r} must subclass calengine.base.Learner")
    if not cls(**params).supports_stats:
        _fail(cls, f"supports_stats is False with parameters {params}; nothing to check")
    trusted = frozenset(CORE_TRUSTED_TYPES) | frozenset(cls.trusted_types)
    rng = np.random.default_rng(0)
    for k in n_classes_list:
        X, y = make_data(n_classes=k)
        n = len(y)
        weightings = [None]
        if cls(**params).accepts_sample_weight:
            weightings.append(rng.uniform(0.2, 3.0, size=n))
        for w in weightings:
            learner = seeded(cls(**params), 0)
            ref = seeded(cls(**params), 0).fit(X, y, sample_weight=w)
            S = np.asarray(ref.score(X))
            perm = rng.permutation(n)
            cut = np.sort(rng.integers(1, n, size=2))
            pieces = [perm[: cut[0]], perm[cut[0] : cut[1]], perm[cut[1] :], perm[:0]]
            parts = []
            for idx in pieces:
                st = learner.partial_stats(X[idx], y[idx], None if w is None else w[idx], k)
                if not isinstance(st, dict) or not all(isinstance(v, np.ndarray) for v in st.values()):
                    _fail(cls, "partial_stats must return a dict of numpy arrays")
                if any(v.dtype == object for v in st.values()):
                    _fail(cls, "partial_stats must not return object arrays")
                parts.append(pickle.loads(pickle.dumps(st)))
            merged = learner.merge_stats(
                learner.merge_stats(parts[0], parts[1]), learner.merge_stats(parts[2], parts[3])
            )
            if learner.fit_from_stats(merged, k) is not learner:
                _fail(cls, "fit_from_stats must return self")
            got = np.asarray(learner.score(X))
            if got.shape != S.shape or not _close(got, S, rtol):
                diff = np.max(np.abs(got - S)) if got.shape == S.shape else f"shape {got.shape} vs {S.shape}"
                kind = "weighted" if w is not None else "unweighted"
                _fail(
                    cls,
                    f"fit_from_stats on merged partial_stats does not reproduce fit ({k} classes, {kind}; "
                    f"max score difference {diff})",
                )
            reverse = parts[3]
            for st in parts[2::-1]:
                reverse = learner.merge_stats(reverse, st)
            other = seeded(cls(**params), 0).fit_from_stats(reverse, k)
            if not _close(other.score(X), got, rtol):
                _fail(cls, "merge_stats depends on the order of the pieces beyond rounding")
            restored = _roundtrip_state(learner, trusted)
            if not np.array_equal(np.asarray(restored.score(X)), got):
                _fail(cls, "a model fitted from statistics does not survive to_state/from_state exactly")
            # partial_stats_groups (the engine's one-pass-per-partition call): the pieces as groups,
            # including an empty group, must give the same model as the pieces one by one
            groups = np.full(n, 3, dtype=np.int64)
            for g, idx in enumerate(pieces[:3]):
                groups[idx] = g
            by_group = learner.partial_stats_groups(X, y, groups, 5, w, k)
            if not isinstance(by_group, list) or len(by_group) != 5:
                _fail(cls, "partial_stats_groups must return a list with one statistics dict per group")
            merged = by_group[0]
            for st in by_group[1:]:
                merged = learner.merge_stats(merged, pickle.loads(pickle.dumps(st)))
            grouped = seeded(cls(**params), 0).fit_from_stats(merged, k)
            if not _close(grouped.score(X), got, rtol):
                _fail(cls, "partial_stats_groups does not give the statistics partial_stats gives per group")


def check_calibrator(cls: type, monotone: bool | None = None) -> None:
    """Check a :class:`~calengine.base.Calibrator` subclass against the contract.

    ``monotone``: whether ``predict`` must be non-decreasing in the score; ``None`` (the default) takes
    the class's own declaration, ``Calibrator.monotone``.
    """
    _check_common(cls, Calibrator)
    if monotone is None:
        monotone = bool(getattr(cls, "monotone", True))
    rng = np.random.default_rng(0)
    s = rng.normal(size=400)
    y = (rng.random(400) < 1 / (1 + np.exp(-2 * s))).astype(np.int64)
    for kind, scores in (("decision", s), ("proba", 1 / (1 + np.exp(-s)))):
        cal = cls()
        if cal.fit(scores, y, sample_weight=None, score_kind=kind) is not cal:
            _fail(cls, "fit must return self")
        grid = np.linspace(scores.min() - 1, scores.max() + 1, 101) if kind == "decision" else np.linspace(0, 1, 101)
        p = np.asarray(cal.predict(grid), dtype=float)
        if p.shape != grid.shape or not np.all(np.isfinite(p)):
            _fail(cls, "predict must return one finite probability per score")
        if p.min() < 0 or p.max() > 1:
            _fail(cls, "predict returned values outside [0, 1]")
        if monotone and np.any(np.diff(p) < -1e-12):
            _fail(
                cls,
                "predict is not non-decreasing in the score; if that is by design, declare monotone = False"
                " on the class (or pass monotone=False to the check)",
            )
        _check_state_types(cls, cal.to_state(), learner=False)
        restored = _roundtrip_state(cal, frozenset())
        if not np.array_equal(np.asarray(restored.predict(grid)), p):
            _fail(cls, "to_state/from_state does not reproduce predictions exactly")
        _check_calibrator_weights(cls, scores, y, kind, grid)
    _check_calibrator_reduction(cls)


def _check_state_types(cls, state: dict, learner: bool) -> None:
    """Only the documented types: numpy arrays (not object), ints, floats, bools and strings; for
    learners also bytes (a library's model file) and scikit-learn estimators (stored with skops).  A
    ``dict`` or ``list`` would be written as JSON and come back changed (integer keys become strings,
    tuples lists), so it is refused here rather than misread in a later process."""
    for key, value in state.items():
        ok = isinstance(value, (int, float, bool, str, np.integer, np.floating, np.bool_)) or (
            isinstance(value, np.ndarray) and value.dtype != object
        )
        if learner and not ok:
            from ..model.artifact import is_estimator

            ok = isinstance(value, bytes) or is_estimator(value)
        if not ok:
            allowed = "arrays, scalars, strings" + (", bytes and scikit-learn estimators" if learner else "")
            _fail(
                cls,
                f"to_state()['{key}'] is a {type(value).__name__}; only {allowed} are stored (a dict or list"
                " would come back changed from the model file): store its parts under keys of their own",
            )
        # a calibrator's map is finite numbers; a learner may store infinite thresholds (a tree's edges)
        finite = np.ndarray if not learner else ()
        if isinstance(value, finite) and value.dtype.kind in "fc" and not np.all(np.isfinite(value)):
            _fail(cls, f"to_state()['{key}'] holds NaN or infinity; calibrator arrays must be finite")


def _check_calibrator_weights(cls, scores, y, kind: str, grid) -> None:
    """Integer weights must act as duplicated rows (to 1e-6), as every calibrator reduction sums them;
    at the least they must change the fit: a calibrator that ignores ``sample_weight`` loses
    ``--weight``, Probing's costing and the estimator's sample weights without a word."""
    w = np.tile([1.0, 3.0, 0.0, 2.0], len(y) // 4 + 1)[: len(y)]
    reps = w.astype(np.int64)
    weighted = np.asarray(cls().fit(scores, y, sample_weight=w, score_kind=kind).predict(grid), dtype=float)
    duplicated = np.asarray(
        cls().fit(np.repeat(scores, reps), np.repeat(y, reps), score_kind=kind).predict(grid), dtype=float
    )
    if np.allclose(weighted, duplicated, rtol=0, atol=REDUCTION_ATOL):
        return
    plain = np.asarray(cls().fit(scores, y, score_kind=kind).predict(grid), dtype=float)
    if np.array_equal(weighted, plain):
        _fail(cls, f"fit ignores sample_weight ({kind} scores: weights 0-3 give the map of no weights); use them")
    if not getattr(cls(), "weights_as_duplicates", True):
        return
    _fail(
        cls,
        f"integer sample weights do not act as duplicated rows ({kind} scores: maps differ by up to"
        f" {np.max(np.abs(weighted - duplicated)):.3g}); weigh every sum by them, or declare"
        " weights_as_duplicates = False on the class if the fit also counts rows by design",
    )


def _check_calibrator_reduction(cls, trials: int = 4) -> None:
    """A declared reduction must fit what ``fit`` fits, for any cutting and merge tree.

    For each score kind with a reduction, several random cuttings of 300 weighted rows (an empty piece
    and a one-row piece included for arbitrary pieces; increasing score ranges that never split a tie
    for sorted requests) are merged in random trees that keep the pieces' order, and the fitted map
    must equal ``fit``'s on the same rows to :data:`calengine.reductions.agreement.REDUCTION_ATOL`.
    """
    for kind in ("decision", "proba"):
        s, y, grid = probe_rows(300, kind, seed=1)
        w = np.tile([1.0, 2.0, 1.0, 0.5], len(y) // 4 + 1)[: len(y)]
        for trial in range(trials):
            rng = np.random.default_rng(trial)
            n_pieces = int(rng.integers(2, 9))
            found = reduction_disagreement(cls, s, y, w, kind, grid, n_pieces, rng)
            if found is None:
                break
            if found > REDUCTION_ATOL:
                _fail(
                    cls,
                    f"the reduction protocol over {n_pieces} pieces ({kind} scores, cutting {trial}) fits a map"
                    f" up to {found:.3g} away from fit on the same rows; partial_stats must summarise any"
                    " piece, merge_stats must combine both arguments (associatively) and reduction_step must"
                    " finish what fit does (see calengine.base.Calibrator)",
                )


def check_combiner(cls: type, atol: float = 1e-6) -> None:
    """Check a :class:`~calengine.base.Combiner`: rows on the simplex, and exact on consistent estimates.

    For each of the one-vs-all, all-pairs and k-1 matrices of 4 classes that ``check_matrix`` accepts,
    column estimates are computed from known class probabilities P (``R[:, b] = P(+1 side) / P(either
    side)``, with every probability at least 0.02, away from clipping), and ``combine`` must give P back
    to ``atol``: a combiner that returns uniform or merely normalised rows fails.
    """
    from ..methods.codematrix import all_pairs, k_minus_one, one_vs_all

    _check_common(cls, Combiner)
    from ..errors import CodeMatrixError

    rng = np.random.default_rng(0)
    P = 0.02 + 0.92 * rng.dirichlet(np.full(4, 2.0), size=50)
    accepted = 0
    for M in (one_vs_all(4), all_pairs(4), k_minus_one(4)):
        comb = cls()
        try:
            comb.check_matrix(M)
        except CodeMatrixError:
            continue
        accepted += 1
        pos = (M == 1).astype(float)
        both = (M != 0).astype(float)
        R = (P @ pos) / (P @ both)
        out = np.asarray(comb.combine(R, M, np.ones(M.shape[1])))
        if out.shape != P.shape:
            _fail(cls, f"combine must return shape {P.shape}, got {out.shape}")
        if out.min() < -1e-12 or not np.allclose(out.sum(axis=1), 1.0, atol=1e-9):
            _fail(cls, "combine must return non-negative rows summing to 1")
        err = float(np.max(np.abs(out - P)))
        if err > atol:
            _fail(
                cls,
                f"combine is not exact on consistent estimates for the {_matrix_label(M)} matrix of 4 classes"
                f" (max |p - true p| = {err:.3g} > {atol}); it must return the class probabilities the"
                " column estimates came from",
            )
    if not accepted:
        _fail(cls, "accepts none of the one-vs-all, all-pairs and k-1 matrices")


def _matrix_label(M: np.ndarray) -> str:
    if M.shape[1] == M.shape[0] and np.all(np.diag(M) == 1):
        return "one-vs-all"
    if np.all((M != 0).sum(axis=0) == 2):
        return "all-pairs"
    return "k-1"


def check_plugin_module(module: ModuleType, monotone: bool | None = None) -> None:
    """Load ``module`` alone as a plugin, in strict mode, and check every class it registers.

    Installed entry points are left out, so the check behaves the same before and after
    ``pip install`` of the plugin being checked.  ``monotone`` goes to :func:`check_calibrator` for
    every calibrator (``None``: each class's own ``monotone`` declaration).
    """
    plugins = load_plugins(strict=True, extra_modules=(module,), entry_points=False)
    record = plugins.records[-1]
    if not any(record.registered.values()):
        raise AssertionError(f"plugin module {module.__name__} registered nothing; implement a register_* hook")
    checks = {
        "learners": check_learner,
        "calibrators": lambda cls: check_calibrator(cls, monotone=monotone),
        "combiners": check_combiner,
    }
    for kind, names in record.registered.items():
        for name in names:
            checks[kind](plugins.classes[kind][name])


def rewrite_manifest(model_dir, edit) -> None:
    """Apply ``edit(manifest_dict)`` to a saved model's manifest and record a matching content hash,
    as someone forging a model would: a plugin's tests use it to show that what the plugin's own
    ``from_state`` checks (versions, file names) holds even when the hash matches."""
    import json
    from pathlib import Path

    from ..model.artifact import content_hash

    path = Path(model_dir) / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    manifest["content_hash"] = content_hash(manifest)
    path.write_text(json.dumps(manifest))
