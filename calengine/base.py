"""Base classes for the three plugin kinds: learners, calibrators and combiners, and two bases a learner
can start from: :class:`SklearnLearner` (one scikit-learn estimator, stored with skops) and
:class:`BoosterLearner` (a boosting library's own model file, such as XGBoost's or LightGBM's).

All three follow scikit-learn's conventions (``__init__`` stores parameters only, ``fit`` returns
``self``, fitted state ends in ``_``), which gives ``get_params``/``clone``, reproducible configs in the
model manifest, and pickling onto Dask workers for free.  The protocol comes from
:class:`calengine.params.Params` rather than ``sklearn.base.BaseEstimator``, so loading a plugin or a
model does not import scikit-learn (see that module for why).

Fitted state is exported with :meth:`to_state` as a flat ``dict`` of numpy arrays, plain scalars or
strings (and, for learners only, scikit-learn estimators).  The model artifact stores arrays in ``.npz``
files read with ``allow_pickle=False`` and estimators with ``skops`` under an allowlist, so loading a
model never executes code from the file.
"""

from __future__ import annotations

import sys
from abc import ABCMeta, abstractmethod
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np
from .errors import CalengineError, DataError, LearnerError, ModelFormatError, ParameterError
from .params import Params

SCORE_KINDS = ("proba", "decision")


class Learner(Params, metaclass=ABCMeta):
    """A classifier whose scores calengine turns into calibrated probabilities.

    Contract (what ``calengine.testing.check_learner`` verifies):

    * ``name``: the registry name users type (``--learner NAME``); lowercase, ``[a-z0-9_]``.
    * ``accepts_sample_weight``: whether ``fit`` honours ``sample_weight``.  When it is ``False`` the
      engine never passes weights: methods that need them (Probing) switch to costing (rejection
      sampling) instead.
    * ``score_kind``: ``"proba"`` if :meth:`score` returns probabilities in [0, 1], ``"decision"`` if it
      returns an unbounded decision value (larger = more likely the class).
    * ``accepts_sparse``: whether ``fit`` and ``score`` take a scipy CSR matrix.  The engine builds one
      when the table has a free-text column (hashed bag of words, ``--text-column``); for a learner that
      leaves this ``False`` (the default) it refuses such a fit in one line naming the fix, instead of
      letting ``X[y == c]`` or a broadcast fail deep inside the learner.  ``check_learner`` fits and
      scores CSR input when it is ``True``.
    * ``fit(X, y, sample_weight=None)``: ``X`` is a 2-D float64 array (a scipy CSR matrix only if
      ``accepts_sparse``), ``y`` holds class indices ``0..k-1`` (every class present),
      ``sample_weight`` is ``None`` or a non-negative float array.  Returns ``self``.  A weight of 2
      must act like the row given twice (``check_learner`` compares with duplicated rows, to 1e-6),
      unless the class declares ``weights_as_duplicates = False``: a fit that also counts rows by
      design (a tree's minimum leaf size, minibatches, a leave-one-out bandwidth), whose weights the
      kit then asks only to change the fit.
    * ``score(X)``: for two classes, shape ``(n,)``, the score of class index 1; for ``k > 2``, shape
      ``(n, k)``.
    * ``to_state()`` / ``from_state(state)``: see the module docstring.
    * A constructor parameter called ``random_state`` left at ``None`` is set by the engine from the
      user's seed and the task identity, so results are reproducible on any scheduler.
    """

    name: ClassVar[str] = ""
    accepts_sample_weight: ClassVar[bool] = True
    #: whether integer weights give exactly the model of the rows repeated (see the class docstring)
    weights_as_duplicates: ClassVar[bool] = True
    score_kind: ClassVar[str] = "proba"
    accepts_sparse: ClassVar[bool] = False
    #: a learner that arrives fitted -- the score columns of a model computed elsewhere
    #: (:class:`calengine.adapters.score_columns.ScoreColumns`), or a model loaded from a file: the engine never
    #: clones or fits it, reads its input through the model's reader of named columns
    #: (:class:`calengine.plan.columns.ColumnReader`) and calibrates it on every row of the table (or of
    #: ``--calibration-data``), without folds.  Methods that fit learners (Probing, bagging) refuse it.
    prefit: ClassVar[bool] = False
    #: what the "raw learner" baseline of ``evaluate`` makes of the scores when it is not ``score_kind``:
    #: ``"logit"`` reads them as log-odds (the logistic function of each column).  None:
    #: ``score_kind`` (probabilities as they are; decision values by Zadrozny & Elkan's rescaling).
    raw_score_kind: ClassVar[str | None] = None
    #: extra fully qualified type names skops must trust to load this learner's state, beyond
    #: calengine's core allowlist (see ``calengine.model.artifact``).
    trusted_types: ClassVar[tuple[str, ...]] = ()
    #: whether ``score`` gives the same bits for a column-major (Fortran-ordered) matrix as for its
    #: row-major copy.  The engine encodes a fragment column-major; when every row of it is to be
    #: scored, a learner that says ``True`` gets that matrix as it is instead of a row-major copy
    #: (a copy of the fragment per calibration set).  Leave ``False`` unless a test proves it.
    score_reads_any_order: ClassVar[bool] = False

    @abstractmethod
    def fit(self, X, y, sample_weight=None):
        """See the class docstring."""

    @abstractmethod
    def score(self, X) -> np.ndarray:
        """See the class docstring."""

    @abstractmethod
    def to_state(self) -> dict[str, Any]:
        """See the class docstring."""

    @abstractmethod
    def from_state(self, state: dict[str, Any]) -> "Learner":
        """See the class docstring."""

    # ------------------------------------------------------------------ optional: fitting by statistics
    #
    # A learner whose fit depends on the data only through additive (mergeable) statistics -- naive
    # Bayes is the classic case -- can be fitted over a partitioned table without ever holding its
    # rows: each partition task computes ``partial_stats``, the engine merges them with
    # ``merge_stats`` (in a fixed order, so results are deterministic) and calls ``fit_from_stats``.
    # With k cross-validation folds the engine computes one set of statistics per fold in a single
    # pass and gives fold f the merge of the other folds' statistics: CV costs one pass, not k.
    #
    # Contract (all three or none; ``supports_stats`` says which):
    #
    # * ``partial_stats(X, y, sample_weight, n_classes)`` -> ``dict[str, numpy array]``: statistics of
    #   the rows given (``X`` as for ``fit``, possibly with zero rows; ``y`` class indices
    #   ``0..n_classes-1``, not every class need be present; ``sample_weight`` ``None`` or a float
    #   array).  Runs inside Dask tasks: pure, no randomness.
    # * ``merge_stats(a, b)`` -> the statistics of the union; associative, and exact up to rounding.
    # * ``fit_from_stats(stats, n_classes)`` -> ``self``, fitted: the same model as ``fit`` on the
    #   union of the rows, up to floating-point rounding (calengine.testing checks 1e-9 relative).
    #   Raise :class:`calengine.errors.DataError` when the statistics cannot give a model (a class
    #   without rows).
    # * optional, for speed: ``partial_stats_groups(X, y, groups, n_groups, sample_weight, n_classes)``
    #   -> a list of ``n_groups`` statistics, entry g those of the rows with ``groups == g``.  The
    #   engine calls it once per partition with the rows' cross-validation folds as groups; the default
    #   sorts the rows by group and calls ``partial_stats`` on each slice.  Override it when the
    #   learner can compute every group's statistics in one pass (naive Bayes: a few sparse products).

    supports_stats: ClassVar[bool] = False

    def partial_stats(self, X, y, sample_weight, n_classes: int) -> dict[str, Any]:
        raise NotImplementedError(f"learner '{self.name}' cannot be fitted from statistics")

    def partial_stats_groups(self, X, y, groups, n_groups: int, sample_weight, n_classes: int) -> list:
        groups = np.asarray(groups)
        order = np.argsort(groups, kind="stable")
        bounds = np.searchsorted(groups[order], np.arange(n_groups + 1))
        y = np.asarray(y)
        # one copy of the rows in group order; each group is then a contiguous slice (a view)
        X, y = X[order], y[order]
        w = None if sample_weight is None else np.asarray(sample_weight)[order]
        return [
            self.partial_stats(
                X[bounds[g] : bounds[g + 1]], y[bounds[g] : bounds[g + 1]],
                None if w is None else w[bounds[g] : bounds[g + 1]], n_classes,
            )
            for g in range(n_groups)
        ]

    def merge_stats(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(f"learner '{self.name}' cannot be fitted from statistics")

    def fit_from_stats(self, stats: dict[str, Any], n_classes: int) -> "Learner":
        raise NotImplementedError(f"learner '{self.name}' cannot be fitted from statistics")

    # ------------------------------------------------------------------ optional: training on the cluster
    #
    # A learner that is a distributed engine itself (``xgboost.dask``, ``lightgbm.dask``) declares
    # ``trains_on_cluster = True`` and implements ``fit_on_cluster``.  In a partitioned fit
    # (``calengine fit DATA``, ``calengine.fit_table``) the engine then hands it, for each fold (and
    # each code-matrix column), the Dask client and a :class:`calengine.fit.cluster_learners.ClusterTraining`
    # describing the fold's training partitions, instead of assembling arrays on one worker.  It runs
    # these fits one after another in the client process (each already uses every worker) instead of as
    # parallel tasks.  Held-out rows are still scored per partition with ``score`` and the calibrators
    # fitted by the engine's reductions, so the learner must stay an ordinary learner too: ``fit`` on
    # in-memory arrays (used by the Python estimator API and by the in-memory engine) must work.
    #
    # * ``fit_on_cluster(client, training)`` -> ``self``, fitted exactly as ``fit`` would leave it (same
    #   fitted attributes, so ``score``/``to_state`` work).  Runs in the client: it may submit work to
    #   ``client`` (which is the current client meanwhile: ``distributed.get_client()`` returns it) but
    #   must not gather the training rows into the client.  ``training.frames(client)`` gives a
    #   dask DataFrame of features and the target series, read by the workers from Parquet.  The learner's
    #   ``random_state`` has already been set from the user's seed and the fold's identity.  Raise
    #   :class:`calengine.errors.LearnerError` (one line) when the distributed fit fails.

    trains_on_cluster: ClassVar[bool] = False

    def fit_on_cluster(self, client, training) -> "Learner":
        raise NotImplementedError(f"learner '{self.name}' does not train on the cluster")


class SklearnLearner(Learner):
    """A learner backed by one scikit-learn estimator (or Pipeline) built by :meth:`make_estimator`.

    Subclasses set the class attributes and implement ``make_estimator``; fitting, scoring and
    persistence (through skops) come from here.  This is the class calengine's own built-in learners
    use, so a plugin gets what they get:

    * **Weights reach every step** of a Pipeline whose ``fit`` takes ``sample_weight`` (a scaler as
      well as the classifier).  Giving them to the last step only would let a scaler see each row once
      while the classifier sees it twice, and "weight 2 = this row twice" would stop holding.
    * **Sparse input**: set ``accepts_sparse = True`` when the estimator takes CSR.  ``make_estimator``
      may declare a ``sparse_input`` parameter to build another pipeline for CSR input (e.g. a scaler
      that does not centre, which would densify the matrix); ``make_estimator()`` without it is
      called as before.  CSR given to a learner without sparse support is a :class:`DataError`.
    * **Batch independence** (the contract: a row's score is the same bits in any batch).  An
      estimator that multiplies matrices (a linear model, a network) goes through BLAS, whose kernels
      round a lone row (gemv) and a batch (gemm) differently in the last bits, which an isotonic step
      can turn into a whole step of probability.  Set ``score_block_rows`` (e.g. 1024) and ``score``
      calls the estimator on blocks of exactly that many rows, the last one padded with copies of its
      last row, so every row goes through the same kernel whatever batch it came in.  It costs the
      padding of a lone row to a block and one call per block (2.5x for a LogisticRegression pipeline
      at 1024 rows, 11x for HistGradientBoosting, whose OpenMP start-up is per call and which is
      independent without it): leave it ``None`` for estimators ``calengine.testing.check_learner``
      already passes.
    """

    #: score in fixed-shape blocks of this many rows (see the class docstring); None: one call
    score_block_rows: ClassVar[int | None] = None

    @abstractmethod
    def make_estimator(self):
        """See the class docstring."""

    def _build_estimator(self, sparse_input: bool):
        import inspect

        if "sparse_input" in inspect.signature(self.make_estimator).parameters:
            return self.make_estimator(sparse_input=sparse_input)
        return self.make_estimator()

    def fit(self, X, y, sample_weight=None):
        reject_sparse(self, X)
        y = np.asarray(y)
        est = self._build_estimator(sparse_input=is_sparse(X))
        fit_params = {}
        if sample_weight is not None:
            if not self.accepts_sample_weight:
                raise ParameterError(
                    f"learner '{self.name}' does not accept sample weights; use costing "
                    "(method_params weighting=costing) instead", parameter="method_params")
            fit_params = weight_routing(est, check_weights(sample_weight, X.shape[0]))
        est.fit(X, y, **fit_params)
        self.estimator_ = est
        self.n_classes_ = int(len(est.classes_))
        return self

    def score(self, X) -> np.ndarray:
        reject_sparse(self, X)
        if self.score_block_rows:
            return fixed_shape_blocks(self._score_once, X, int(self.score_block_rows))
        return self._score_once(X)

    def _score_once(self, X) -> np.ndarray:
        est = self.estimator_
        if self.score_kind == "proba":
            s = est.predict_proba(X)
            return s[:, 1] if s.shape[1] == 2 else s
        s = est.decision_function(X)
        return np.asarray(s, dtype=float)

    def to_state(self) -> dict[str, Any]:
        return {"estimator": self.estimator_, "n_classes": self.n_classes_}

    def from_state(self, state: dict[str, Any]) -> "SklearnLearner":
        self.estimator_ = state["estimator"]
        self.n_classes_ = int(state["n_classes"])
        return self


class BoosterLearner(Learner):
    """A learner whose fitted state is a boosting library's own model file (XGBoost's UBJSON, LightGBM's
    text format): what calengine-xgboost and calengine-lightgbm share, public so that a third-party
    booster plugin (another library, another build of one) behaves the same without copying it.

    What it gives a subclass:

    * :meth:`fit` on in-memory arrays: the class count (largest class index + 1, at least 2), the
      weights as float64, then :meth:`train_booster`; :meth:`score` gives :meth:`predict_booster`'s
      probabilities the contract's shape, ``(n,)`` for two classes and ``(n, k)`` for more.
    * :meth:`to_state` / :meth:`from_state`: the booster's bytes under :attr:`booster_key` (the model
      directory holds them as the file ``learner_<j>.<booster_key>``, never pickled) beside the class
      count and the version of the library that wrote them (:mod:`calengine.boosters.model_files`).  Loading
      refuses, in one :class:`~calengine.errors.ModelFormatError` line, a state without such a booster,
      a booster written by a newer release or another major version of the library (naming the release
      to install), and bytes the library cannot read (one of :meth:`read_errors`).
    * :meth:`check_library_version`, :meth:`check_ranges` (one :class:`~calengine.errors.ParameterError`
      line for a parameter out of range) and :meth:`training_on_cluster`, which turns any failure of a
      distributed training in ``fit_on_cluster`` into one :class:`~calengine.errors.LearnerError` line
      saying that no model was written.

    A subclass sets :attr:`library`, :attr:`library_title` and :attr:`booster_key` (and :attr:`package`
    when pip installs the library under another name), keeps its own ``name`` and parameters, and
    implements :meth:`booster_params`, :meth:`train_booster`, :meth:`predict_booster`,
    :meth:`booster_bytes` and :meth:`booster_from_bytes`.  Nothing here imports the library, so the
    plugin module imports, and ``calengine plugins`` lists it, where the library is missing.

    Loading goes through one path, :meth:`from_state` -> :meth:`load_booster` ->
    :meth:`booster_from_bytes`, and no byte of a booster file reaches the library unchecked (a model
    directory's hashes can be recomputed by whoever edits it; issue 24):

    1. :meth:`validate_booster` (each plugin implements it, the plugin kit checks that it does) parses
       the file in Python and refuses, in one ModelFormatError line, anything the library's predictor
       would trust blindly -- indices out of range, trees that are not trees, non-finite values, counts
       that disagree (:mod:`calengine.boosters.checks` holds the XGBoost and LightGBM parsers);
    2. the first load of those bytes in this process happens in a short-lived child process that loads
       and probe-scores them (:func:`calengine.boosters.guard.probe_in_child`; through
       :attr:`native_probe` when the plugin declares one), so a crash or hang the checks did not foresee
       is one line too; the verdict is cached per content hash;
    3. the library then reads them here with its own output kept off the user's terminal
       (:func:`calengine.boosters.guard.quiet_native`).
    """

    accepts_sample_weight: ClassVar[bool] = True
    score_kind: ClassVar[str] = "proba"
    #: the libraries train on and predict scipy CSR as they do dense arrays (text columns)
    accepts_sparse: ClassVar[bool] = True

    #: the library's import name, e.g. ``"xgboost"``
    library: ClassVar[str] = ""
    #: the distribution pip installs the library from, when it is not :attr:`library` (``"xgboost-cpu"``)
    package: ClassVar[str | None] = None
    #: the library's name in messages, e.g. ``"XGBoost"``
    library_title: ClassVar[str] = ""
    #: the state key of the booster's bytes, and so the suffix of its file, e.g. ``"booster.ubj"``
    booster_key: ClassVar[str] = ""
    #: the library runs native code on the file: its first load per process happens in a child process
    #: (set False only for a pure-Python library, which cannot crash the interpreter)
    native_library: ClassVar[bool] = True
    #: ``"module:function"`` the probing child calls as ``function(blob, n_features, n_classes)`` to load
    #: and probe-score a booster with the native library alone (returns ``None`` or a one-line refusal),
    #: e.g. ``"calengine.boosters.native:probe_xgboost"``; it must import nothing heavy (that is its
    #: point: the child then starts in a fraction of a second instead of seconds).  ``None``: the child
    #: probes with this class (:meth:`booster_from_bytes` and :meth:`score`, importing the library).
    native_probe: ClassVar[str | None] = None

    # ------------------------------------------------------------------ what a subclass implements

    @abstractmethod
    def booster_params(self, n_classes: int) -> dict[str, Any]:
        """The library's training parameters for ``n_classes`` classes, what :meth:`train_booster` and
        ``fit_on_cluster`` hand the library: check the user's parameters here (:meth:`check_ranges`), so
        both refuse them in the same line before any training starts."""

    @abstractmethod
    def train_booster(self, X, y: np.ndarray, sample_weight: np.ndarray | None, n_classes: int):
        """Train in this process and return the booster (``y``: class indices, ``sample_weight``:
        ``None`` or float64)."""

    @abstractmethod
    def predict_booster(self, X) -> np.ndarray:
        """``self.booster_``'s class probabilities for ``X``: one per row for two classes, ``n * k``
        values (any shape) for ``k`` classes."""

    @abstractmethod
    def booster_bytes(self) -> bytes:
        """``self.booster_`` in the library's own model format."""

    @abstractmethod
    def booster_from_bytes(self, blob: bytes):
        """The booster :meth:`booster_bytes` wrote (raise one of :meth:`read_errors` if unreadable)."""

    @abstractmethod
    def validate_booster(self, data: bytes, n_features: int | None, n_classes: int | None):
        """Check ``data`` (this library's model file) in Python, before the library sees it: return a
        :class:`calengine.boosters.checks.BoosterSummary` of a sound file, raise one
        :class:`~calengine.errors.ModelFormatError` line otherwise.  ``n_features``/``n_classes``: the
        counts the caller will use, ``None`` when unknown (then the file's own are used, and must be
        consistent).  Never import or call the library here: this is what stands between a hostile
        file and native code."""

    def read_errors(self) -> tuple[type[BaseException], ...]:
        """The exceptions by which :meth:`booster_from_bytes` says the bytes are not a booster it can
        read; they become one ModelFormatError line (anything else is reported as a plugin failure)."""
        return ()

    # ------------------------------------------------------------------ what it provides

    @classmethod
    def library_module(cls):
        """The library, imported on first use (importing it costs seconds; listing plugins must not)."""
        import importlib

        return importlib.import_module(cls.library)

    @classmethod
    def library_version(cls) -> str:
        return str(cls.library_module().__version__)

    @classmethod
    def check_library_version(cls, recorded: str, installed: str) -> None:
        """Refuse a booster written by a newer release or another major version of the library."""
        from .boosters.model_files import check_library_version

        check_library_version(recorded, installed, cls.library, cls.package)

    def check_ranges(self, integers: dict[str, int] | None = None, fractions: tuple[str, ...] = (),
                     positive: tuple[str, ...] = ()) -> None:
        """One :class:`ParameterError` line for the first parameter out of range: each of ``integers``
        (name -> smallest value) must be an integer at least that, each of ``fractions`` a number in
        (0, 1], each of ``positive`` a number above 0."""
        def integer(v) -> bool:
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

        def number(v) -> bool:
            return integer(v) or isinstance(v, (float, np.floating))

        for key, low in (integers or {}).items():
            v = getattr(self, key)
            if not (integer(v) and v >= low):
                raise ParameterError(f"learner '{self.name}': {key} must be an integer >= {low}, got {v!r}")
        for key in fractions:
            v = getattr(self, key)
            if not (number(v) and 0 < v <= 1):
                raise ParameterError(f"learner '{self.name}': {key} must be in (0, 1], got {v!r}")
        for key in positive:
            v = getattr(self, key)
            if not (number(v) and v > 0):
                raise ParameterError(f"learner '{self.name}': {key} must be positive, got {v!r}")

    def fit(self, X, y, sample_weight=None):
        y = np.asarray(y)
        n_classes = max(2, int(y.max()) + 1) if y.size else 2
        weight = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        self.booster_ = self.train_booster(X, y, weight, n_classes)
        self.n_classes_ = n_classes
        return self

    def score(self, X) -> np.ndarray:
        out = np.asarray(self.predict_booster(X), dtype=np.float64)
        return out.reshape(-1, self.n_classes_) if self.n_classes_ > 2 else out.reshape(-1)

    def to_state(self) -> dict[str, Any]:
        from .boosters.model_files import library_state

        return library_state(self.booster_key, self.booster_bytes(), self.n_classes_, self.library,
                             self.library_version())

    def from_state(self, state: dict[str, Any]) -> "BoosterLearner":
        from .boosters.model_files import read_library_state

        blob, n_classes = read_library_state(state, self.name, self.booster_key, self.library,
                                             self.library_version(), self.package)
        self.booster_ = self.load_booster(blob, n_classes)
        self.n_classes_ = n_classes
        return self

    def load_booster(self, blob: bytes, n_classes: int | None = None, n_features: int | None = None):
        """The booster in ``blob``, after :meth:`validate_booster` and (once per content hash per
        process) a load and probe in a child process; the library's own output is kept off the
        terminal and :meth:`read_errors` become one ModelFormatError line."""
        from .boosters.guard import native_reason, probe_in_child, quiet_native

        summary = self.validate_booster(blob, n_features, n_classes)
        if self.native_library:
            probe_in_child(type(self), blob, summary.n_features, summary.n_classes)
        with quiet_native() as said:
            try:
                return self.booster_from_bytes(blob)
            except self.read_errors() as exc:
                failure = exc
        first = native_reason(said()) or (str(failure).strip().splitlines() or [type(failure).__name__])[0]
        raise ModelFormatError(
            f"the {self.library_title} booster of learner '{self.name}' cannot be read ({first}); fit the"
            " model again"
        ) from failure

    @contextmanager
    def training_on_cluster(self):
        """Around ``fit_on_cluster``'s distributed training: calengine's typed errors pass as they are,
        anything else (a worker lost, the library's own failure) becomes one LearnerError line.  The
        libraries' collectives cannot lose a member, so no model is written: the user runs the fit
        again.  From the CLI, the libraries' chatter is dropped from stderr meanwhile
        (:func:`calengine.boosters.guard.library_chatter_dropped`)."""
        from .boosters.guard import library_chatter_dropped

        try:
            with library_chatter_dropped():
                yield
        except CalengineError:
            raise
        except Exception as exc:  # noqa: BLE001 - the cluster's failure, told in one line
            raise LearnerError(self._cluster_failure(exc)) from exc

    def _cluster_failure(self, exc: BaseException) -> str:
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        lost = type(exc).__name__ in ("KilledWorker", "CommClosedError", "FutureCancelledError", "CancelledError") or (
            isinstance(exc, AssertionError) and text == "lost"
        )
        if lost:
            return (
                f"learner '{self.name}' lost a Dask worker while training on the cluster ({type(exc).__name__}:"
                f" {text}); {self.library_title} cannot resume a distributed training, so no model was written:"
                " run the fit again"
            )
        return (
            f"learner '{self.name}' failed while training on the cluster ({type(exc).__name__}: {text}); no model"
            " was written: check the workers and run the fit again"
        )


def fixed_shape_blocks(apply, X, rows: int) -> np.ndarray:
    """``apply(X)`` computed on blocks of exactly ``rows`` rows, the last block padded with copies of
    its last row (dense, CSR or a pandas DataFrame), concatenated: every call has one shape, so a row's
    result does not depend on how many rows came with it (see :class:`SklearnLearner`)."""
    n = X.shape[0]
    if rows < 1:
        raise ParameterError(f"score_block_rows must be a positive number of rows, got {rows}")
    out = []
    for start in range(0, max(n, 1), rows):
        idx = np.arange(start, min(start + rows, n))
        if idx.size == 0:
            return np.asarray(apply(X))
        take = np.concatenate([idx, np.full(rows - idx.size, idx[-1])])
        block = X.iloc[take] if hasattr(X, "iloc") else X[take]
        out.append(np.asarray(apply(block))[: idx.size])
    return np.concatenate(out)


def is_sparse(X) -> bool:
    """``scipy.sparse.issparse(X)`` without importing scipy.sparse (0.2 s) for dense input: a sparse
    matrix can only exist once scipy.sparse has been imported."""
    sp = sys.modules.get("scipy.sparse")
    return sp is not None and sp.issparse(X)


def sparse_input_error(learner) -> DataError:
    """The one line for sparse features given to a learner that does not declare ``accepts_sparse``."""
    name = getattr(learner, "name", type(learner).__name__)
    return DataError(
        f"learner '{name}' needs dense features but the table's text columns give a sparse matrix; drop the"
        " text columns (--exclude COL), or choose a learner with sparse support (e.g. logistic_regression,"
        " linear_svm, decision_tree; its author can declare accepts_sparse = True once fit and score take"
        " scipy CSR)"
    )


def reject_sparse(learner, X) -> None:
    """Raise :func:`sparse_input_error` when ``X`` is sparse and ``learner`` does not accept it."""
    if is_sparse(X) and not learner.accepts_sparse:
        raise sparse_input_error(learner)


def check_weights(sample_weight, n: int) -> np.ndarray | None:
    """``None`` or a finite, non-negative float64 vector of length ``n`` with a positive sum."""
    if sample_weight is None:
        return None
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.shape != (n,):
        raise DataError(f"sample_weight has shape {w.shape} but X has {n} rows; give one weight per row")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise DataError("sample_weight must be finite and non-negative")
    if not w.sum() > 0:
        raise DataError("sample_weight sums to zero; at least one row needs a positive weight")
    return w


def weight_routing(est, w: np.ndarray) -> dict[str, np.ndarray]:
    """Fit parameters that give ``w`` to every step of ``est`` (a Pipeline or not) that accepts it."""
    from sklearn.utils.validation import has_fit_parameter

    steps = getattr(est, "steps", None)
    if not steps:
        return {"sample_weight": w}
    params = {}
    for step_name, step in steps:
        if step not in (None, "passthrough") and has_fit_parameter(step, "sample_weight"):
            params[f"{step_name}__sample_weight"] = w
    return params


class Calibrator(Params, metaclass=ABCMeta):
    """Maps one column of learner scores to probabilities of the positive class.

    Contract (what ``calengine.testing.check_calibrator`` verifies):

    * ``name``: the registry name (``--method NAME``).
    * ``fit(scores, y, sample_weight=None, score_kind="decision")``: ``scores`` 1-D float, ``y`` in
      {0, 1}, ``score_kind`` tells whether the scores are probabilities (``"proba"``) or decision
      values, for calibrators that transform them first.  Returns ``self``.
    * ``predict(scores)``: 1-D probabilities in [0, 1], non-decreasing in the score unless the class
      sets ``monotone = False`` (a calibrator that can map a higher score to a lower probability by
      design, e.g. one fitting a bump): the conformance kit then skips the monotonicity check.
    * ``to_state()`` returns only numpy arrays, ints, floats, bools and strings; ``from_state`` restores
      them.  No estimators, no pickle.  Float arrays hold finite values: the model loader refuses a
      calibrator array with NaN or infinity as damage (a tampered file).
    """

    name: ClassVar[str] = ""
    monotone: ClassVar[bool] = True
    #: a *multiclass scaling*: for a k-class model (k score columns) the engine hands this calibrator
    #: the whole ``(n, k)`` score matrix instead of fitting one clone per one-vs-rest column, and the
    #: member keeps this one calibrator for all k columns.  It is a flag on the calibrator kind, not a
    #: fourth plugin kind, because such a calibrator is still chosen with ``--method``, still fitted by
    #: the same four reduction methods, and still calibrates one column for a two-class model (k = 2 is
    #: its one-column case, so one registry name covers both, as ``temperature`` does).  Contract when
    #: ``True`` (besides the one-column contract above):
    #:
    #: * ``fit(S, y, sample_weight, score_kind)`` with ``S`` of shape ``(n, k)``, ``k >= 2``, and ``y``
    #:   class indices ``0..k-1``; ``predict(S)`` then returns ``(n, k)`` probabilities whose rows sum
    #:   to 1 (the scaling is the combiner: ``--multiclass`` is refused with it).
    #: * ``reduction_start(score_kind, n_classes=k)`` starts the matrix form of the protocol: pieces
    #:   are ``(S (n, k), y class indices, sample_weight)``, always unsorted (table partitions merged
    #:   in a fixed order); it must return a request (a multiclass scaling is always a reduction).
    #:   Without ``n_classes`` it is the one-column protocol.
    multiclass: ClassVar[bool] = False

    @abstractmethod
    def fit(self, scores, y, sample_weight=None, score_kind="decision"):
        """See the class docstring."""

    @abstractmethod
    def predict(self, scores) -> np.ndarray:
        """See the class docstring."""

    # ------------------------------------------------------------------ optional: fitting as a reduction
    #
    # ``fit`` needs every score in one process.  A calibrator that also implements the four methods
    # below is fitted over a partitioned table with only small statistics travelling: the scores stay
    # on the workers that computed them.  The engine drives a small protocol; the calibrator decides
    # what each round computes::
    #
    #     request = cal.reduction_start(score_kind)
    #     while request is not None:
    #         pieces = the calibration data cut into pieces (see "sorted" below)
    #         stats = merge_stats(...merge_stats(partial_stats(piece_1), partial_stats(piece_2))...)
    #         request = cal.reduction_step(stats, request)
    #     # cal is now fitted, exactly as fit() would have left it
    #
    # * ``reduction_start(score_kind)`` -> the first request: a small picklable ``dict``, or ``None``
    #   when this configuration cannot be fitted as a reduction (the engine then gathers the scores
    #   on one worker and calls ``fit``, if they fit its memory).  It resets any earlier fit.  If
    #   ``request.get("sorted")`` is true the engine hands ``partial_stats`` *score ranges*: pieces
    #   that are disjoint, in increasing score order, and never split a group of tied scores; then
    #   ``merge_stats(a, b)`` is always called with ``a`` wholly below ``b``.  Otherwise pieces are
    #   arbitrary (table partitions) merged in a fixed order.
    # * ``partial_stats(scores, y, sample_weight, request)`` -> statistics of one non-empty piece
    #   (``scores`` float64 1-D, ``y`` 0/1 int, ``sample_weight`` float64, ones when unweighted).
    #   Runs inside Dask tasks: it must be a pure function of its arguments and the calibrator's
    #   parameters (it may read state set by earlier rounds, which travels with the calibrator).
    #   Validate the piece as ``fit`` would (same errors).
    # * ``merge_stats(a, b)`` -> statistics of the union; associative.
    # * ``reduction_step(stats, request)`` -> the next request, or ``None`` once the calibrator is
    #   fitted.  Runs in the client; raise what ``fit`` raises for unusable data (one class...).
    #
    # ``fit`` must equal the protocol run on a single piece, and the result must not depend on how
    # the data are cut (to 1e-12 for closed forms, to the solver's tolerance for iterative fits).
    # ``calengine.reductions.calibrators.fit_by_reduction`` runs the protocol in one process.

    def reduction_start(self, score_kind: str = "decision") -> dict[str, Any] | None:
        """The first request of the reduction protocol, or ``None``: not a reduction (the default)."""
        return None

    def partial_stats(self, scores, y, sample_weight, request: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(f"calibrator '{self.name}' cannot be fitted as a reduction")

    def merge_stats(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(f"calibrator '{self.name}' cannot be fitted as a reduction")

    def reduction_step(self, stats: dict[str, Any], request: dict[str, Any]) -> dict[str, Any] | None:
        raise NotImplementedError(f"calibrator '{self.name}' cannot be fitted as a reduction")

    # ------------------------------------------------------------------ optional: many fits, one pass
    @classmethod
    def predict_grouped(cls, calibrators: list, scores: np.ndarray, bounds: np.ndarray) -> np.ndarray:
        """``calibrators[j].predict(scores[bounds[j]:bounds[j + 1]])`` for every ``j``, concatenated.

        A segment-wise model (``fit --by``) applies one fitted calibrator per segment to a batch's
        rows grouped by segment: with thousands of segments, a call per segment is most of the cost.
        A class that can apply many of its fitted calibrators in one vectorised pass overrides this;
        the result must be bit for bit the per-calibrator ``predict`` (the default loops).  The engine
        calls it with calibrators of this very class only, fitted, and non-empty groups
        (``bounds`` increasing from 0 to ``len(scores)``)."""
        out = np.empty(len(scores), dtype=np.float64)
        for j, cal in enumerate(calibrators):
            out[bounds[j]:bounds[j + 1]] = cal.predict(scores[bounds[j]:bounds[j + 1]])
        return out

    def to_state(self) -> dict[str, Any]:
        """Default: every public fitted attribute (name ending in ``_``)."""
        return {k: v for k, v in vars(self).items() if k.endswith("_") and not k.startswith("_")}

    def from_state(self, state: dict[str, Any]) -> "Calibrator":
        for k, v in state.items():
            setattr(self, k, v)
        return self


class Combiner(Params, metaclass=ABCMeta):
    """Turns binary estimates for the columns of a code matrix into class probabilities.

    * ``M``: the code matrix, shape ``(k, l)``, entries in {-1, 0, +1}; column ``b`` is the binary
      problem "classes with +1 against classes with -1" (0: not used).
    * ``combine(R, M, counts=None)``: ``R`` shape ``(n, l)``, ``R[i, b]`` estimates P(+1 side | x, x in
      either side); ``counts`` shape ``(l,)``, training examples per column (weights for coupling).
      Returns ``(n, k)``, non-negative rows summing to 1.
    * ``check_matrix(M)`` raises :class:`calengine.errors.CodeMatrixError` for a matrix the combiner
      cannot use.
    """

    name: ClassVar[str] = ""

    def check_matrix(self, M: np.ndarray) -> None:
        return None

    @abstractmethod
    def combine(self, R, M, counts=None) -> np.ndarray:
        """See the class docstring."""


def fresh_copy(estimator):
    """An unfitted copy with the same parameters, as ``sklearn.base.clone`` makes it.

    calengine's plugin classes (:class:`calengine.params.Params`) are rebuilt from deep copies of their
    ``get_params(deep=False)`` without importing scikit-learn: a score-column fit never needs it, and
    importing it (with scipy.stats) cost 13 % of a 10M-row ``fit --scores`` (py-spy).  Anything else
    goes through ``clone``."""
    if isinstance(estimator, Params):
        import copy

        params = estimator.get_params(deep=False)
        return type(estimator)(**{key: copy.deepcopy(value) for key, value in params.items()})
    from sklearn.base import clone

    return clone(estimator)
