"""The options of a job, checked once, at the door.

``calengine fit`` and ``cv`` (and :func:`calengine.fit_table`, :func:`calengine.cross_validate_table`,
:func:`calengine.calibrate_scores`, :class:`calengine.CalibratedClassifier`) describe a job with two
records: :class:`FitConfig` (what to fit: learner, calibrator, folds, seed, code matrix, sampling) and
:class:`TableSpec` (which table, and which of its columns play which part).  Each record declares, in
``_parameter_constraints`` -- as scikit-learn's estimators do -- what every field accepts; making one
checks and normalises every field (a comma-separated ``by`` becomes a tuple of names, a sampling rate a
float, an empty ``class_sampling`` None) and then the rules between the fields of that record.
:func:`check_job` adds the rules that span both records (what ``scores``, ``prefit``, ``weight``,
``by`` and ``method='mcgrad'`` refuse).  Past the door the stages only read: the records are frozen, and
:func:`dataclasses.replace` -- the one way to derive another -- checks the new record again.

Every refusal is a one-line :class:`~calengine.errors.ParameterError` that names the Python parameter
and carries it as ``parameter``; the CLI reports it under its flag (:mod:`calengine.cli.parameters`).
What needs more than the options is checked once where it becomes known: learner, calibrator and
combiner names and their parameters when the plugins resolve them
(:func:`calengine.fit.training.prepare_fit`, before any data is read or a cluster starts), column names,
class names of ``class_sampling`` and the labels once the table's footers and label counts are read
(:func:`calengine.fit.table.plan_table`).
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
import os
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from ..errors import ParameterError

__all__ = [
    "ENGINE_METHODS", "MAX_SEED", "ROUTES", "SCORE_KINDS", "MAX_SEGMENTS_LIMIT", "DEFAULT_MAX_SEGMENTS",
    "FitConfig", "TableSpec", "check_job", "check_option", "describe_options", "check_cv", "check_seed", "check_segment_options", "split_learners",
    "Constraint", "Integer", "Number", "OneOf", "Text", "Names", "Params", "Labels", "Rate", "ClassRates", "Anything",
]

#: seeds are 32-bit (numpy's and scikit-learn's ``random_state`` limit); larger values would alias
MAX_SEED = 2**32 - 1
#: methods implemented by the engine itself rather than by a calibrator plugin
ENGINE_METHODS = ("probing", "bagging")
#: how a learner meets its rows on a table (:mod:`calengine.fit.table`)
ROUTES = ("auto", "stats", "in-memory", "sample")
#: what score columns hold (:mod:`calengine.adapters.score_columns`)
SCORE_KINDS = ("proba", "decision", "logit")
#: ``by`` segments: the default cap, and the most a user may ask for (each is a calibrator and a row of
#: every report)
DEFAULT_MAX_SEGMENTS = 1_000
MAX_SEGMENTS_LIMIT = 20_000
#: rows per fragment: at most this many (a fragment is read whole by one task)
MAX_FRAGMENT_ROWS = 100_000_000
#: the rules of Duin & Tax that combine several learners' posteriors
COMBINE_RULES = ("min", "max", "median", "mean", "product")


# ---------------------------------------------------------------------------------------------- constraints


class Constraint(ABC):
    """What one parameter accepts.  :meth:`check` returns the value normalised (the form every stage
    reads) or raises a one-line :class:`ParameterError` naming the parameter."""

    optional = False

    @abstractmethod
    def check(self, value: Any, name: str) -> Any:
        """``value`` normalised, or a one-line :class:`ParameterError` naming ``name``."""

    def refuse(self, name: str, value: Any, accepts: str):
        raise ParameterError(f"{name} must be {accepts}, got {value!r}", parameter=name)

    def describe(self) -> str:
        """What the parameter accepts, in words (the reference page's table)."""
        return self.words() + (", or None" if self.optional else "")

    @abstractmethod
    def words(self) -> str:
        """What the parameter accepts, without "or None"."""


@dataclass(frozen=True)
class Anything(Constraint):
    """Any value, checked later by what reads it (a learner instance: by its resolution)."""

    accepts: str = "checked where it is read"
    optional: bool = True

    def check(self, value, name):
        return value

    def words(self):
        return self.accepts


@dataclass(frozen=True)
class Integer(Constraint):
    """An integer in [low, high] (``high`` None: no upper bound); ``accepts`` words it for the message."""

    low: int
    high: int | None = None
    accepts: str = ""
    #: what a value beyond ``high`` would cost (said when one is refused, and in the CLI's table of limits)
    why: str = ""
    optional: bool = False

    def check(self, value, name):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < self.low:
            self.refuse(name, value, self.accepts or (f"at least {self.low}" if self.why else self.words()))
        if self.high is not None and value > self.high:
            if self.why:
                raise ParameterError(f"{name}={value} is more than {self.high}, the most {name} may be ({self.why})",
                                     parameter=name)
            self.refuse(name, value, self.words())
        return int(value)

    def words(self):
        if self.accepts:
            return self.accepts + (f", at most {self.high}" if self.high is not None else "")
        return f"an integer from {self.low} to {self.high}" if self.high is not None else f"at least {self.low}"


@dataclass(frozen=True)
class Number(Constraint):
    """A real number >= low (``inf`` allowed when ``infinite``), as a float."""

    low: float
    accepts: str = ""
    infinite: bool = False
    optional: bool = False

    def check(self, value, name):
        try:
            x = math.nan if isinstance(value, bool) else float(value)
        except (TypeError, ValueError):
            x = math.nan
        if math.isnan(x) or x < self.low or (math.isinf(x) and not self.infinite):
            self.refuse(name, value, self.words())
        return x

    def words(self):
        return self.accepts or f"a number >= {self.low:g}"


@dataclass(frozen=True)
class OneOf(Constraint):
    """One of ``choices`` (compared as given)."""

    choices: tuple
    optional: bool = False

    def check(self, value, name):
        if not isinstance(value, str) or value not in self.choices:
            self.refuse(name, value, self.words())
        return value

    def words(self):
        return f"one of {', '.join(map(str, self.choices))}"


@dataclass(frozen=True)
class Text(Constraint):
    """A non-empty string (a path-like object becomes its string)."""

    accepts: str = "a non-empty string"
    path: bool = False
    optional: bool = False

    def check(self, value, name):
        if self.path and isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str) or not value.strip():
            self.refuse(name, value, self.accepts)
        return value

    def words(self):
        return self.accepts


@dataclass(frozen=True)
class Names(Constraint):
    """Column names: a list, or one string of names separated by commas; a tuple of distinct, non-empty
    names (``empty``: the empty tuple is accepted)."""

    empty: bool = False
    #: what the names are (the message's words); ``distinct``: a name given twice is refused
    what: str = "column names"
    distinct: bool = True
    optional: bool = False

    def check(self, value, name):
        if isinstance(value, str):
            names = [c.strip() for c in value.split(",")]
        elif isinstance(value, (list, tuple)) and all(isinstance(c, str) for c in value):
            names = list(value)  # a list's names are taken as they are (a column may be " x")
        else:
            names = None
        if names is None or (not names and not self.empty) or any(not c.strip() for c in names):
            raise ParameterError(f"{name} takes {self.what} (a list, or separated by commas), got {value!r}",
                                 parameter=name)
        if self.distinct and len(set(names)) != len(names):
            raise ParameterError(f"{name} names a column twice ({value!r})", parameter=name)
        return tuple(names)

    def words(self):
        return f"{'distinct ' if self.distinct else ''}{self.what} (a list, or one string separated by commas)" + (
            "; may be empty" if self.empty else "")


@dataclass(frozen=True)
class Labels(Constraint):
    """Class labels in order: a list or tuple of distinct labels (compared by their text), as a tuple."""

    optional: bool = False

    def check(self, value, name):
        if not isinstance(value, (list, tuple)) or not value:
            self.refuse(name, value, self.words())
        texts = [str(v) for v in value]
        if len(set(texts)) != len(texts):
            raise ParameterError(f"{name} names a class twice ({list(value)!r}); give each class once", parameter=name)
        return tuple(value)

    def words(self):
        return "the classes in order: a list of distinct labels"


@dataclass(frozen=True)
class Params(Constraint):
    """A dict of parameters by name, copied (the caller's dict stays theirs); names are checked against
    the plugin that takes them when it is resolved."""

    optional: bool = False

    def check(self, value, name):
        if value is None:
            return {}
        if not isinstance(value, dict) or not all(isinstance(k, str) and k for k in value):
            self.refuse(name, value, self.words())
        return dict(value)

    def words(self):
        return "a dict of parameter values by name (names checked by the plugin that takes them)"


@dataclass(frozen=True)
class Rate(Constraint):
    """A sampling rate (:func:`calengine.methods.sampling.rate`), at most ``high``."""

    high: float = math.inf
    optional: bool = False

    def check(self, value, name):
        from ..methods.sampling import rate

        r = rate(value, name)
        if not r <= self.high:
            raise ParameterError(f"{name} is the share of negative rows kept, in (0, {self.high:g}]; got {value!r}"
                                 " (for one negative in ten, write 0.1)", parameter=name)
        return r

    def words(self):
        from ..methods.sampling import MAX_RATE, MIN_RATE

        return f"a sampling rate from {MIN_RATE:g} to {min(self.high, MAX_RATE):g}"


@dataclass(frozen=True)
class ClassRates(Constraint):
    """``{class: rate}``, each class once (matched by its text), each rate a sampling rate; the empty
    dict is None (no correction)."""

    optional: bool = True

    def check(self, value, name):
        from ..methods.sampling import rate

        if value is None or (isinstance(value, dict) and not value):
            return None
        if not isinstance(value, dict):
            self.refuse(name, value, "a dict {class: rate}")
        out, seen = {}, set()
        for key, r in value.items():
            if str(key) in seen:  # {"1": 0.5, 1: 0.3}: two rates for one class
                raise ParameterError(f"{name} names class {str(key)!r} twice; give each class one rate", parameter=name)
            seen.add(str(key))
            out[key] = rate(r, name, key)
        return out

    def words(self):
        return "a dict {class: sampling rate}, each class once (empty: None)"


def check_fields(record, constraints: dict[str, Constraint]) -> None:
    """Check and normalise every field of a frozen ``record`` by its constraint (None passes an
    optional one), in field order: the first problem is the one reported."""
    for f in fields(record):
        constraint = constraints.get(f.name)
        if constraint is None:
            continue
        value = getattr(record, f.name)
        if value is None and constraint.optional:
            continue
        object.__setattr__(record, f.name, constraint.check(value, f.name))


# ---------------------------------------------------------------------------------------------- the records


@dataclass(frozen=True)
class FitConfig:
    """What to fit, besides the data; recorded in the model manifest.  Frozen and checked when made
    (module docstring): the stages only read it."""

    learner: Any = "gaussian_nb"  # registry name, sklearn import path, or a Learner instance
    learner_params: dict[str, Any] = field(default_factory=dict)
    method: str = "isotonic"
    method_params: dict[str, Any] = field(default_factory=dict)
    mode: str = "ensemble"
    cv: int = 5
    seed: int = 0
    #: "CODE:COMBINER" (e.g. "all_pairs:coupling") for one binary learner per code-matrix column;
    #: None: a native multiclass learner's one-vs-rest scores, combined by normalisation
    multiclass: str | None = None
    #: parameters of the combiner named in ``multiclass`` (e.g. coupling's ``tol``, ``max_iter``)
    combiner_params: dict[str, Any] = field(default_factory=dict)
    #: with several learners (a list, or names separated by commas): the rule combining their
    #: calibrated posteriors (min, max, median, mean, product; Duin & Tax)
    combine: str | None = None
    #: the data were class-sampled: two classes, the share of negatives kept (``--negative-sampling``),
    #: or ``{class: rate}`` (``--class-sampling``); probabilities are corrected to the population
    #: after calibration (:mod:`calengine.methods.sampling`) and the manifest records the rates
    negative_sampling: float | None = None
    class_sampling: dict[str, float] | None = None
    #: ``method="none"`` fitted on held-out rows (folds) like any calibrator, not on every row: the
    #: base of ``--method mcgrad``, whose rounds then read each fold's held-out probabilities
    held_out: bool = False

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "learner": Anything(optional=False, accepts=(
            "a registered learner name, names separated by commas (or a list), a scikit-learn import path, a"
            " calengine Learner or a scikit-learn classifier (resolved by the plugins)")),
        "learner_params": Params(),
        "method": Text(accepts="a calibrator name (isotonic, sigmoid, ...), probing or bagging"),
        "method_params": Params(),
        "mode": OneOf(("ensemble", "refit")),
        "cv": Integer(2, 100, accepts="an integer >= 2 (the number of folds)", why="each fold fits the learner once more"),
        "seed": Anything(optional=False, accepts=f"an integer from 0 to {MAX_SEED}"),  # check_seed words it
        "multiclass": Text(accepts="'CODE[:COMBINER]', e.g. 'all_pairs:coupling'", optional=True),
        "combiner_params": Params(),
        "combine": OneOf(COMBINE_RULES, optional=True),
        "negative_sampling": Rate(high=1.0, optional=True),
        "class_sampling": ClassRates(),
        "held_out": Anything(optional=False, accepts="True or False"),
    }

    def __post_init__(self):
        if self.learner is None or (isinstance(self.learner, str) and not self.learner.strip()):
            raise ParameterError(f"learner must name a learner (e.g. 'gaussian_nb'), got {self.learner!r}",
                                 parameter="learner")
        check_fields(self, self._parameter_constraints)
        object.__setattr__(self, "seed", check_seed(self.seed))
        object.__setattr__(self, "held_out", bool(self.held_out))
        if self.combiner_params and not self.multiclass:
            raise ParameterError("combiner_params needs multiclass='CODE:COMBINER' to name the combiner",
                                 parameter=("combiner_params", "multiclass"))
        if self.multiclass and self.method in ENGINE_METHODS:
            raise ParameterError(
                f"multiclass does not apply to method={self.method!r}; use method_params multiclass=k_minus_one|one_vs_rest",
                parameter=("multiclass", "method", "method_params"),
            )
        if self.negative_sampling is not None and self.class_sampling:
            raise ParameterError("give negative_sampling (two classes) or class_sampling, not both",
                                 parameter=("negative_sampling", "class_sampling"))


@dataclass(frozen=True)
class TableSpec:
    """Which table, which columns, and how to read them: everything ``fit`` needs besides
    :class:`FitConfig`.  Frozen and checked when made (module docstring)."""

    data: str
    target: str
    positive: Any = None
    features: tuple[str, ...] | None = None
    exclude: tuple[str, ...] | None = None
    text_columns: tuple[str, ...] = ()
    max_categories: int = 100
    calibration_data: str | None = None
    #: fit each learner on a seeded stratified sample of at most this many rows (calibration and the
    #: statistics still use every row)
    max_train_rows: int | None = None
    #: "auto" (stats when the learner supports it, else in-memory), or force one route
    route: str = "auto"
    #: rows per fragment (whole row groups); None: sized from the workers' memory limit, at most 1M
    fragment_rows: int | None = None
    #: ``--weight``: a column of frequency weights (learners' ``sample_weight``, or a costing sample for
    #: learners without weights; every calibrator's sums); never a feature
    weight: str | None = None
    #: ``--scores``: score columns of a model computed elsewhere; no learner is fitted (see
    #: :mod:`calengine.adapters.score_columns`), ``score_kind`` says what they hold, ``classes`` their classes
    scores: tuple[str, ...] | None = None
    score_kind: str = "proba"
    classes: tuple | None = None
    #: ``--prefit``: a model file trained elsewhere (:mod:`calengine.adapters.prefit`), applied as it is to its
    #: feature columns (``features``, once opened); ``trust``: ``--trust-type`` names for a skops file
    prefit: str | None = None
    trust: tuple[str, ...] = ()
    #: ``--by``: fit one calibrator per segment of these columns too, shrunk towards the global map by
    #: ``shrinkage`` (None: the default K), at most ``max_segments`` segments (:mod:`calengine.fit.segments`)
    by: tuple[str, ...] | None = None
    max_segments: int = DEFAULT_MAX_SEGMENTS
    shrinkage: float | None = None

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "data": Text(accepts="a Parquet file, directory, glob or URL", path=True),
        "target": Text(accepts="the name of the class column"),
        "features": Names(optional=True),
        "exclude": Names(optional=True),
        "text_columns": Names(empty=True),
        "max_categories": Integer(1, 10_000, why="each category becomes a float64 feature column"),
        "calibration_data": Text(accepts="a Parquet file, directory, glob or URL", path=True, optional=True),
        "max_train_rows": Integer(2, 2**40, why="a sample larger than the table is the whole table", optional=True),
        "route": Anything(optional=False, accepts=f"one of {', '.join(ROUTES)}"),  # worded in __post_init__
        "fragment_rows": Integer(1, MAX_FRAGMENT_ROWS, optional=True),
        "weight": Text(accepts="the name of a column of weights", optional=True),
        "scores": Names(optional=True),
        "score_kind": OneOf(SCORE_KINDS),
        "classes": Labels(optional=True),
        "prefit": Text(accepts="the path of a model file", path=True, optional=True),
        "trust": Names(empty=True, what="type names skops may load", distinct=False),
        "by": Names(optional=True),
        "max_segments": Integer(1, MAX_SEGMENTS_LIMIT, why=(
            "each segment keeps three 1,024-cell grids (24 KiB) in every chunk's accumulator; fit by fits a"
            " calibrator per segment and member")),
        "shrinkage": Number(0.0, infinite=True, optional=True, accepts=(
            "a number >= 0 (rows of calibration weight at which a segment's own map gets half the say; 0: none,"
            " inf: the global map only)")),
    }

    def __post_init__(self):
        for name in ("text_columns", "trust"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, ())
        if self.route not in ROUTES:
            raise ParameterError(f"unknown route {self.route!r}; choose one of {', '.join(ROUTES)}", parameter="route")
        if isinstance(self.scores, (list, tuple)) and not self.scores:
            object.__setattr__(self, "scores", None)
        check_fields(self, self._parameter_constraints)
        if self.scores and self.prefit:
            raise ParameterError("scores and prefit both say where the scores come from; give one of them",
                                 parameter=("scores", "prefit"))
        if not (self.scores or self.prefit) and (self.classes or self.score_kind != "proba"):
            raise ParameterError("classes and score_kind describe score columns; they need scores",
                                 parameter=("classes", "score_kind", "scores"))


# ---------------------------------------------------------------------------------------------- both records


def check_job(config: FitConfig, spec: TableSpec) -> None:
    """The rules between :class:`FitConfig` and :class:`TableSpec`: what a job without a learner
    (``scores``, ``prefit``) refuses, ``weight`` with Probing and bagging, what a segment-wise fit
    (``by``) and ``method='mcgrad'`` serve.  One line for the first problem, before any data is read."""
    _check_source(config, spec)
    if spec.weight and config.method in ENGINE_METHODS:
        raise ParameterError(
            f"weight is not supported with method={config.method!r} (its classifiers weigh rows by their own"
            " importance weights); use a calibrator such as isotonic or sigmoid, or drop weight",
            parameter=("weight", "method"),
        )
    if config.method == "mcgrad":
        _check_mcgrad(config, spec)
    elif spec.by:
        _check_by(config, spec)
    if config.combine and not (spec.scores or spec.prefit) and len(split_learners(config.learner)) < 2:
        raise ParameterError("combine needs at least two learners, e.g. learner='nearest_mean,fisher_lda,knn'",
                             parameter=("combine", "learner"))


def _check_source(config: FitConfig, spec: TableSpec) -> None:
    """Options that need a learner to fit, refused for ``scores`` and ``prefit``."""
    if not (spec.scores or spec.prefit):
        return
    source = "scores" if spec.scores else "prefit"
    if config.method in ENGINE_METHODS:
        raise ParameterError(
            f"method={config.method!r} fits many classifiers on the features, and {source} fits none; choose a"
            " calibrator (isotonic, sigmoid, beta, temperature, binning, rocch, venn_abers, ...)",
            parameter=("method", source),
        )
    if spec.prefit:
        refused = [("combine", config.combine), ("multiclass", config.multiclass),
                   ("max_train_rows", spec.max_train_rows), ("route", spec.route != "auto"),
                   ("exclude", spec.exclude), ("text_columns", spec.text_columns),
                   ("classes", spec.classes), ("score_kind", spec.score_kind != "proba")]
        for option, given in refused:
            if given:
                raise ParameterError(f"{option} does not apply to prefit, which applies the saved model as it is:"
                                     " drop it", parameter=(option, "prefit"))
        return
    if config.method == "none" and spec.score_kind != "proba":
        raise ParameterError(
            f"method='none' with score_kind={spec.score_kind!r} would rescale the scores linearly; the logistic"
            " map of logits is what evaluate shows as the raw scores: choose a calibrator (temperature, sigmoid, ...)",
            parameter=("method", "score_kind"),
        )
    refused = [
        ("combine", config.combine), ("multiclass", config.multiclass),
        ("max_train_rows", spec.max_train_rows), ("route", spec.route != "auto"),
        ("features", spec.features), ("exclude", spec.exclude), ("text_columns", spec.text_columns),
    ]
    for option, given in refused:
        if given:
            raise ParameterError(
                f"{option} applies to learners fitted on feature columns; scores fits no learner and reads only"
                " the score columns: drop it", parameter=(option, "scores")
            )


def _check_by(config: FitConfig, spec: TableSpec) -> None:
    """The fits a segment-wise fit (``by``) does not serve."""
    where = "a segment-wise fit (by)"
    if config.method == "none":
        raise ParameterError(f"{where} needs a calibration method; drop method='none' or drop by",
                             parameter=("by", "method"))
    if config.method in ENGINE_METHODS:
        raise ParameterError(f"{where} refits calibrators of held-out scores; method={config.method!r} has none:"
                             " use method isotonic, sigmoid, beta, binning, ... or drop by", parameter=("by", "method"))
    if config.multiclass:
        raise ParameterError(f"{where} calibrates a learner's own class scores; drop multiclass or drop by",
                             parameter=("by", "multiclass"))
    if not (spec.scores or spec.prefit) and (len(split_learners(config.learner)) > 1 or config.combine):
        raise ParameterError(f"{where} takes one learner; drop combine or drop by", parameter=("by", "combine"))
    if config.mode == "refit" and not (spec.scores or spec.prefit or spec.calibration_data):
        raise ParameterError(
            f"{where} refits each fold's calibrator per segment, and mode='refit' keeps no fold learners;"
            " use mode='ensemble' (the default) or calibration_data, or drop by",
            parameter=("by", "mode", "calibration_data"),
        )
    _check_by_columns(spec)


def _check_by_columns(spec: TableSpec) -> None:
    clash = [c for c in spec.by if c in {spec.target, spec.weight} - {None} or c in (spec.scores or ())]
    if clash:
        raise ParameterError(f"by column '{clash[0]}' is the target, the weight or a score column; segment over"
                             " another column", parameter="by")


def _check_mcgrad(config: FitConfig, spec: TableSpec) -> None:
    """What ``method='mcgrad'`` does not serve (its ``method_params`` are read by
    :func:`calengine.fit.mcgrad.checks.mcgrad_params`)."""
    if not spec.by:
        raise ParameterError("method='mcgrad' multicalibrates over segments; name them with by (a column or a list of columns)"
                             " (for one global map choose method isotonic, sigmoid, ...)", parameter=("method", "by"))
    if spec.shrinkage is not None:
        raise ParameterError("shrinkage blends segment-wise calibrators; method='mcgrad' has none: drop shrinkage",
                             parameter=("shrinkage", "method"))
    if config.mode == "refit":
        raise ParameterError("method='mcgrad' fits its rounds on each fold member's held-out probabilities, and"
                             " mode='refit' keeps no fold members: use mode='ensemble' (the default)",
                             parameter=("method", "mode"))
    if config.multiclass or config.combine or (not (spec.scores or spec.prefit) and len(split_learners(config.learner)) > 1):
        raise ParameterError("method='mcgrad' calibrates one learner's two-class probability; drop multiclass /"
                             " combine / the extra learners", parameter=("method", "multiclass", "combine"))
    if config.negative_sampling is not None or config.class_sampling:
        raise ParameterError("method='mcgrad' does not correct class-sampled data; drop negative_sampling /"
                             " class_sampling", parameter=("method", "negative_sampling", "class_sampling"))
    if spec.scores and spec.score_kind != "proba":
        raise ParameterError(f"method='mcgrad' reads probability scores; score_kind={spec.score_kind!r} columns"
                             " are not: give probabilities (score_kind='proba')", parameter=("method", "score_kind"))
    _check_by_columns(spec)


# ---------------------------------------------------------------------------------------------- single values


def describe_options() -> list[tuple[str, str, str, str]]:
    """``(record, parameter, default, what it accepts)`` of every option of :class:`FitConfig` and
    :class:`TableSpec`, in field order: the table of the reference page, from the constraints themselves."""
    from dataclasses import MISSING

    rows = []
    for record in (FitConfig, TableSpec):
        for f in fields(record):
            default = ("required" if f.default is MISSING and f.default_factory is MISSING
                       else repr(f.default_factory()) if f.default is MISSING else repr(f.default))
            rows.append((record.__name__, f.name, default, record._parameter_constraints.get(f.name, Anything()).describe()))
    return rows


def split_learners(learner) -> list:
    """``"a,b"`` or ``["a", b_instance]`` -> the list of base learners; a single learner -> [it]."""
    if isinstance(learner, str):
        return [part.strip() for part in learner.split(",") if part.strip()] or [learner]
    if isinstance(learner, (list, tuple)):
        return list(learner)
    return [learner]


def check_option(name: str, value: Any) -> Any:
    """``value`` checked and normalised as the field ``name`` of :class:`FitConfig` or
    :class:`TableSpec` is: for the functions that take one of those options alone."""
    constraint = FitConfig._parameter_constraints.get(name) or TableSpec._parameter_constraints[name]
    return constraint.check(value, name)


def check_cv(cv) -> int:
    """``cv`` as an int >= 2 (a number of folds), or a one-line :class:`ParameterError`."""
    return check_option("cv", cv)


def check_seed(seed) -> int:
    """``seed`` as an int in [0, 2**32 - 1], or a one-line :class:`ParameterError`."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ParameterError(f"seed must be an integer from 0 to {MAX_SEED}, got {seed!r}", parameter="seed")
    if not 0 <= seed <= MAX_SEED:
        raise ParameterError(
            f"seed must be from 0 to {MAX_SEED} (32 bits), got {seed}; larger values would silently repeat smaller"
            " ones", parameter="seed"
        )
    return int(seed)


def check_segment_options(by, max_segments: int) -> tuple[str, ...]:
    """``by`` (a column name, names separated by commas, or a list) as a tuple of names, and
    ``max_segments`` in [1, MAX_SEGMENTS_LIMIT]: the checks of :class:`TableSpec`, for the commands
    that take ``by`` without a fit (``evaluate``, ``conformal``)."""
    check_option("max_segments", max_segments)
    return check_option("by", by)
