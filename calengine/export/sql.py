"""A calibrated model as one SQL ``SELECT``: score the rows where they live.

:func:`model_sql` turns a model of score columns (``calengine fit --scores ...``: the learner is the
table's own column, so nothing but the calibration map has to be expressed) into a query over a
relation (``input`` unless named) that returns every input column plus ``p_<class>`` per class.
A model of a fitted learner is expressed too (one member or an ensemble, averaged), its features and
learner by :mod:`.sql_learners`: on two classes ``logistic_regression``, ``linear_svm`` and the
Gaussian, Bernoulli and multinomial naive Bayes; on several, ``logistic_regression`` (multinomial),
``linear_svm`` (one-vs-rest margins) and the three naive Bayes, with per-class calibrators and the
``normalize`` combiner.

What is expressed, and how exactly:

* reading the score columns as :class:`calengine.plan.columns.ColumnReader` does: probability scores
  clipped to [0, 1]; a row that ``calengine score`` refuses (NULL, NaN, infinite, a probability outside
  [0, 1] by more than the reader's tolerance) gets NULL probabilities instead of failing the query;
* two score columns of a two-class model reduced as :class:`calengine.adapters.score_columns.ScoreColumns`
  reduces them; ``k`` logit columns turned into each class's one-vs-rest log-odds (max-shifted
  log-sum-exp);
* the calibrators ``sigmoid`` (on the score or, ``on="logit"``, on its logit), ``sigmoid_nobias``, ``temperature``, ``beta`` (the logistic function
  written as ``1 / (1 + exp(-x))``, as calengine computes it) and ``isotonic`` with ``step`` or
  ``linear`` interpolation: a balanced ``CASE`` tree over the blocks' lowest scores (depth log2 of the
  number of blocks, so no join and no threshold table), with the slopes of the linear pieces computed
  here in Python exactly as ``numpy.interp`` does, so isotonic probabilities are bit-identical to
  ``calengine score``;
* ``binning`` (lower-boundary or midpoint bins) and ``rocch`` (the ROC convex hull's step map) as
  the same ``CASE`` trees over their fitted boundaries, bit-identical;
* ``venn_abers``: a tree over the distinct calibration scores whose leaves are the merged
  probability ``p1 / (1 - p0 + p1)`` of the score's region (a tie with a calibration score or the gap
  between two), computed here as calengine computes it, so bit-identical; a two-class model also
  returns the pair as ``p_low`` and ``p_high``, as ``calengine score --intervals`` writes it;
* the multiclass scalings ``temperature`` (``softmax(u / T)``), ``vector_scaling``, ``matrix_scaling``
  and ``dirichlet`` (``softmax(W u + b)``), on k classes or fitted on one column as the k = 2 case,
  as a chain of lateral subqueries (inputs, linear logits, max-shifted exponentials, probabilities)
  so the text grows with k² and not faster; within 1e-12 (the engines' ``exp``/``ln`` and the order
  of a matrix product's sums may differ in the last bit);
* multiclass models with the ``normalize`` combiner, summing in the order numpy sums (left to right
  for the combiner; pairwise from eight terms on in the log-sum-exp of logits), so the division is
  the one numpy makes and isotonic stays bit-identical.

Everything else is refused with one :class:`~calengine.errors.ParameterError` line that names what
is supported: other learners (and text features), other calibrators (``none``, ``top_label``) and
combiners, several members of a score-column model, class-sampling corrections.

Numbers are written as ``CAST('<repr>' AS DOUBLE)``: every dialect parses the shortest round-trip
decimal string to the same double, where a bare ``0.1`` would be a DECIMAL in DuckDB and Postgres.
The text is a pure function of the model (same model, same bytes).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ParameterError
from .sql_learners import EXP_CAP, expit as _expit, no_nul  # noqa: F401  (EXP_CAP: the ONNX export's too)

DIALECTS = ("duckdb", "spark", "postgres")
#: what the SQL export expresses (module docstring)
SQL_CALIBRATORS = ("sigmoid", "sigmoid_nobias", "temperature", "beta", "isotonic", "binning", "rocch", "venn_abers",
                   "vector_scaling", "matrix_scaling", "dirichlet")
#: the multiclass scalings ``softmax(W z + b)`` (:mod:`calengine_builtins.calibrators.multiclass_scaling`)
LINEAR_SCALINGS = ("vector_scaling", "matrix_scaling", "dirichlet")
#: the calibrators of a whole score vector SQL expresses: the linear scalings, and temperature on k classes
MATRIX_SCALINGS = ("temperature",) + LINEAR_SCALINGS
OTHER_FORMATS = "calengine score, --format mlflow or calengine.arrow_udf(MODEL) in the engine's Python UDF"
#: calengine's clip of probabilities away from 0 and 1 before a logit (calibrators' ``EPS``)
EPS = 1e-12
#: the reader's tolerance for probability scores outside [0, 1] (``calengine.plan.columns``)
PROBA_TOLERANCE = 1e-9


class _Dialect:
    def __init__(self, name: str):
        if name not in DIALECTS:
            raise ParameterError(f"--dialect must be one of {', '.join(DIALECTS)}, got {name!r}")
        self.name = name
        self.double = "DOUBLE PRECISION" if name == "postgres" else "DOUBLE"
        self.text = {"duckdb": "VARCHAR", "spark": "STRING", "postgres": "TEXT"}[name]

    def num(self, x: float) -> str:
        x = float(x)
        if not math.isfinite(x):
            raise ParameterError(f"the model holds the non-finite number {x!r}; it cannot be written as SQL")
        return f"CAST('{x!r}' AS {self.double})"

    def ident(self, name: str) -> str:
        name = no_nul(name, "a column name or class label")
        if self.name == "spark":
            return "`" + name.replace("`", "``") + "`"
        return '"' + name.replace('"', '""') + '"'


def _clip(d: _Dialect, x: str, lo: float, hi: float) -> str:
    return f"LEAST(GREATEST({x}, {d.num(lo)}), {d.num(hi)})"


def _logit(d: _Dialect, p: str) -> str:
    """The calibrators' ``_logit``: ``log(p) - log1p(-p)`` with ``p`` clipped to [EPS, 1 - EPS]."""
    c = _clip(d, p, EPS, 1.0 - EPS)
    return f"(LN({c}) - LN(1.0 - {c}))"


def _log_odds(d: _Dialect, s: str, kind: str) -> str:
    return _logit(d, s) if kind == "proba" else s


def _tree(d: _Dialect, s: str, lo: np.ndarray, leaf, a: int, b: int, op: str = "<") -> str:
    """A balanced ``CASE`` over blocks ``a..b-1``: block ``j`` holds where ``lo[j] <= s < lo[j+1]``
    (``op="<="``: where ``lo[j] < s <= lo[j+1]``; a list gives each boundary its own).  ``lo[a]`` itself
    is never compared."""
    if b - a == 1:
        return leaf(a)
    m = (a + b) // 2
    return (f"CASE WHEN {s} {op if isinstance(op, str) else op[m]} {d.num(lo[m])} THEN {_tree(d, s, lo, leaf, a, m, op)}"
            f" ELSE {_tree(d, s, lo, leaf, m, b, op)} END")


def _step(d: _Dialect, s: str, lo, values) -> str:
    """:func:`calengine.reductions.pav.predict_step`: the value of the last block with ``lo <= s``."""
    values = np.asarray(values, dtype=np.float64)
    return _tree(d, s, np.asarray(lo, dtype=np.float64), lambda j: d.num(values[j]), 0, values.size)


def _binning(d: _Dialect, cal, s: str) -> str:
    lo, hi, values = (np.asarray(getattr(cal, k), dtype=np.float64) for k in ("lo_", "hi_", "values_"))
    if cal.boundary_ == "lower":
        return _step(d, s, lo, values)
    # values[searchsorted(mids, s, side="right")]: block j where mids[j-1] <= s < mids[j]
    mids = 0.5 * (hi[:-1] + lo[1:])
    return _tree(d, s, np.concatenate(([-np.inf], mids)), lambda j: d.num(values[j]), 0, values.size)


def venn_abers_leaves(cal) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(p0, p1, p)`` of every region of a Venn–ABERS calibrator's scores, in the order
    ``[gap 0, tie 0, gap 1, tie 1, ..., gap k]`` (:func:`calengine.methods.venn_abers.venn_abers_pairs`
    finds a score's region; the pair clipped and merged as :class:`CalibratedModel` merges it)."""
    from ..methods.venn_abers import merge_pair

    k = np.asarray(cal.xs_).size
    p0, p1 = np.empty(2 * k + 1), np.empty(2 * k + 1)
    p0[0::2], p0[1::2] = cal.gap_p0_, cal.tie_p0_
    p1[0::2], p1[1::2] = cal.gap_p1_, cal.tie_p1_
    p0, p1 = np.clip(p0, 0.0, 1.0), np.clip(p1, 0.0, 1.0)
    return p0, p1, merge_pair(p0, p1)


def venn_abers_steps(cal, which: int = 2) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(bounds, values, ops)`` of a Venn–ABERS map (``which``: 0 p0, 1 p1, 2 merged) as steps: piece
    ``j`` holds ``values[j]`` right of ``bounds[j]`` (``ops[j]`` ``"<"``: from ``bounds[j]`` on,
    ``"<="``: beyond it; ``bounds[0]`` is never compared).  The pieces are, in score order, gap 0
    (``s < xs[0]``), tie 0 (``s == xs[0]``), gap 1, tie 1, ..., gap k (``s > xs[-1]``), as
    :func:`calengine.methods.venn_abers.venn_abers_pairs` reads them.  Neighbouring pieces of one value
    are merged first: the map then has as many pieces as steps, not twice the number of distinct
    calibration scores (a CASE of 10⁴ leaves took DuckDB a minute to plan)."""
    xs = np.asarray(cal.xs_, dtype=np.float64)
    v = venn_abers_leaves(cal)[which]
    # boundary i separates piece i from i + 1: at xs[i // 2]; s < x stays left of a gap -> tie boundary,
    # s <= x of a tie -> gap one
    keep = np.nonzero(v[:-1] != v[1:])[0]
    starts = np.concatenate(([0], keep + 1))
    bounds = np.concatenate(([-np.inf], xs[keep // 2]))
    return bounds, v[starts], ["<"] + ["<" if i % 2 == 0 else "<=" for i in keep]


def _venn_abers(d: _Dialect, cal, s: str, which: int = 2) -> str:
    """The value of ``s``'s piece of the Venn–ABERS map (:func:`venn_abers_steps`)."""
    bounds, v, ops = venn_abers_steps(cal, which)
    return _tree(d, s, bounds, lambda j: d.num(v[j]), 0, v.size, op=ops)


def interp_pieces(cal) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, y, slopes)`` of a linear isotonic map as ``numpy.interp`` evaluates it: ``y[0]`` below
    ``x[0]``; ``y[-1]`` at or above ``x[-1]``; else, with ``j`` such that ``x[j] <= s < x[j+1]``,
    ``y[j]`` where ``s == x[j]`` and otherwise ``slopes[j] * (s - x[j]) + y[j]``."""
    from ..reductions.pav import linear_knots

    x, y = linear_knots(*(np.asarray(getattr(cal, k), dtype=np.float64) for k in ("lo_", "hi_", "values_")))
    return x, y, (y[1:] - y[:-1]) / (x[1:] - x[:-1])


def _isotonic(d: _Dialect, cal, s: str) -> str:
    lo, hi, values = (np.asarray(getattr(cal, k), dtype=np.float64) for k in ("lo_", "hi_", "values_"))
    if cal.interpolation_ == "step":
        return _tree(d, s, lo, lambda j: d.num(values[j]), 0, lo.size)
    x, y, slopes = interp_pieces(cal)
    if x.size == 1:
        return d.num(y[0])

    def piece(j: int) -> str:
        if j == 0:
            return d.num(y[0])
        if j == x.size:
            return d.num(y[-1])
        j -= 1
        return (f"CASE WHEN {s} = {d.num(x[j])} THEN {d.num(y[j])}"
                f" ELSE {d.num(slopes[j])} * ({s} - {d.num(x[j])}) + {d.num(y[j])} END")

    # blocks: below x[0] | [x[0], x[1]) | ... | [x[-2], x[-1]) | at or above x[-1]
    bounds = np.concatenate(([-np.inf], x))
    return _tree(d, s, bounds, piece, 0, bounds.size)


def calibrator_sql(d: _Dialect, cal, s: str) -> str:
    """The calibrated probability of score expression ``s`` (``s`` read as the calibrator reads it)."""
    name = getattr(cal, "name", type(cal).__name__)
    kind = getattr(cal, "score_kind_", None)
    if name == "sigmoid":
        # on="logit" fits Platt's sigmoid on logit(p) of probability scores (older models: on the score)
        f = _log_odds(d, s, kind) if getattr(cal, "on_", "score") == "logit" else s
        return _expit(d, f"-({d.num(cal.a_)} * {f} + {d.num(cal.b_)})")
    if name == "sigmoid_nobias":
        return _expit(d, f"{d.num(cal.alpha_)} * {_log_odds(d, s, kind)}")
    if name == "temperature":
        return _expit(d, f"{_log_odds(d, s, kind)} / {d.num(cal.temperature_)}")
    if name == "beta":
        p = _expit(d, s) if kind == "decision" else s
        c = _clip(d, p, EPS, 1.0 - EPS)
        return _expit(d, f"{d.num(cal.a_)} * LN({c}) + {d.num(cal.b_)} * (-LN(1.0 - {c})) + {d.num(cal.c_)}")
    if name == "isotonic":
        return _isotonic(d, cal, s)
    if name == "rocch":
        return _step(d, s, cal.lo_, cal.values_)
    if name == "binning":
        return _binning(d, cal, s)
    if name == "venn_abers":
        return _venn_abers(d, cal, s)
    raise ParameterError(unsupported_calibrator(cal, "SQL"))


def unsupported_calibrator(cal, fmt: str) -> str:
    """The one line refusing a calibrator that neither SQL nor ONNX expresses (the same list)."""
    name = getattr(cal, "name", type(cal).__name__)
    return f"calibrator '{name}' has no {fmt} form ({fmt} expresses {', '.join(SQL_CALIBRATORS)}); score with {OTHER_FORMATS}"


def _numpy_sum(terms: list[str]) -> str:
    """The sum of ``terms`` in numpy's order: sequential below 8, else eight pairwise partial sums."""
    if len(terms) < 8:
        return "(" + " + ".join(terms) + ")"
    r = list(terms[:8])
    n8 = len(terms) - len(terms) % 8
    for i in range(8, n8, 8):
        r = [f"({r[j]} + {terms[i + j]})" for j in range(8)]
    out = f"((({r[0]} + {r[1]}) + ({r[2]} + {r[3]})) + (({r[4]} + {r[5]}) + ({r[6]} + {r[7]})))"
    for t in terms[n8:]:
        out = f"({out} + {t})"
    return out


def check_exportable(model, fmt: str = "SQL") -> tuple:
    """``(member, learner, reader)`` of a model the SQL export (``fmt="ONNX"``: the ONNX one, which
    checks for a learner first) expresses, or one ParameterError line (``reader`` is None for a
    learner calengine fitted: see :mod:`.sql_learners`)."""
    from ..plan.columns import ColumnReader
    from ..adapters.score_columns import ScoreColumns

    _check_not_wrapped(model, fmt)
    member = model.members[0]
    learner = (getattr(member, "learners", None) or [None])[0]
    reader = model.encoder
    if not isinstance(learner, ScoreColumns) or not isinstance(model.encoder, ColumnReader):
        _check_learner_model(model, fmt)
        reader = None
    elif len(model.members) != 1 or getattr(model.members[0], "kind", None) != "calibrated":
        raise ParameterError(f"the {fmt} export needs a model with one calibrated member (this one has {len(model.members)}"
                             f" members or another member kind); score it with {OTHER_FORMATS}")
    if model.class_rates is not None:
        raise ParameterError(f"the {fmt} export does not apply --class-sampling/--negative-sampling corrections;"
                             f" score this model with {OTHER_FORMATS}")
    if model.n_classes > 2:
        cname = getattr(model.combiner, "name", None)
        if cname != "normalize":
            raise ParameterError(f"combiner '{cname}' has no {fmt} form ({fmt} combines one-vs-all columns with"
                                 f" 'normalize'); score this model with {OTHER_FORMATS}")
    for m in model.members:
        for cal in m.calibrators:
            if scales_vector(m, cal) and cal.name not in MATRIX_SCALINGS:
                raise ParameterError(
                    f"calibrator '{cal.name}' scales the whole {model.n_classes}-class score vector, which has no {fmt}"
                    f" form ({fmt} expresses {', '.join(MATRIX_SCALINGS)}); score this model with {OTHER_FORMATS}"
                )
            if getattr(cal, "name", None) not in SQL_CALIBRATORS:
                raise ParameterError(unsupported_calibrator(cal, fmt))
    return member, learner, reader


#: member kinds that wrap a calibrated member (:mod:`calengine.model.segmented`, ``mcgrad_member``) and
#: what the refusal calls them
WRAPPED_KINDS = {"mcgrad": "an MCGrad model (calengine fit --method mcgrad: boosted corrections over the segments)",
                 "segmented": "a model calibrated per segment (calengine fit --by ...: per-segment maps blended"
                              " with the global map)"}


def _check_not_wrapped(model, fmt: str) -> None:
    """Refuse, in one line, the members that wrap a calibrated member (segments, MCGrad): neither SQL
    nor ONNX expresses them; calengine score, MLflow and the Arrow function score them as they are."""
    kinds = [getattr(m, "kind", None) for m in model.members]
    if type(model.encoder).__name__ == "SegmentEncoder":  # reads the --by columns (segments or MCGrad)
        kinds.append("segmented")
    for kind, what in WRAPPED_KINDS.items():  # MCGrad first: it reads segments too
        if kind in kinds:
            raise ParameterError(f"{what} has no {fmt} export; score it with {OTHER_FORMATS}")


def _check_learner_model(model, fmt: str = "SQL") -> None:
    """A model of a fitted learner SQL (and ONNX) expresses: every member one learner of
    :data:`.sql_learners.SQL_LEARNERS` and one calibrator per class column (one for two classes),
    members averaged (an ensemble) or one."""
    from ..plan.features import FeatureEncoder
    from .sql_learners import SQL_LEARNERS

    names = sorted({getattr(lr, "name", type(lr).__name__) for m in model.members for lr in getattr(m, "learners", [None])})
    other = [n for n in names if n not in SQL_LEARNERS]
    if other or not isinstance(model.encoder, FeatureEncoder):
        raise ParameterError(
            f"learner '{(other or names)[0]}' has no {fmt} form ({fmt} expresses {', '.join(SQL_LEARNERS)} and models of"
            f" score columns: calengine fit --scores ...); score it with {OTHER_FORMATS}"
        )
    shapes = {(getattr(m, "kind", None), len(m.learners), len(m.calibrators)) for m in model.members}
    per_class = 1 if model.n_classes == 2 else model.n_classes
    if shapes != {("calibrated", 1, per_class)} or len(set(model.member_groups)) > 1:
        raise ParameterError(f"{fmt} expresses a fitted learner's model with one learner per member and one calibrator per"
                             f" class column (two classes, or several with the normalize combiner); score this model"
                             f" with {OTHER_FORMATS}")
    scalings = sorted({c.name for m in model.members for c in m.calibrators if c.name in LINEAR_SCALINGS})
    if scalings:
        raise ParameterError(f"calibrator '{scalings[0]}' on a fitted learner's score has no {fmt} form yet (it has on"
                             f" score columns); score this model with {OTHER_FORMATS}")
    if model.is_venn_abers and len(model.members) > 1:
        raise ParameterError(f"the cross Venn-ABERS combination of {len(model.members)} members has no {fmt} form; score"
                             f" this model with {OTHER_FORMATS}")


def _reads(d: _Dialect, reader, learner) -> tuple[list[str], str]:
    """The score expressions calibrators receive (one per column) and the condition of a valid row."""
    cols = [f"t.{d.ident(c)}" for c in reader.columns]
    valid = [f"({c} - {c}) = 0" for c in cols]  # false for NULL, NaN and infinities in every dialect
    if reader.score_kind == "proba":
        valid += [f"{c} >= {d.num(-PROBA_TOLERANCE)} AND {c} <= {d.num(1.0 + PROBA_TOLERANCE)}" for c in cols]
        cols = [_clip(d, c, 0.0, 1.0) for c in cols]
    cols = [f"CAST({c} AS {d.double})" for c in cols]
    k, kind = int(learner.n_classes), learner.kind
    if k == 2:
        if len(cols) == 2:
            cols = [cols[1] if kind == "proba" else f"({cols[1]} - {cols[0]})"]
    elif kind == "logit":
        cols = _one_vs_rest_log_odds(d, cols)
    return cols, " AND ".join(f"({v})" for v in valid)


def _one_vs_rest_log_odds(d: _Dialect, z: list[str]) -> list[str]:
    out = []
    for j, zj in enumerate(z):
        others = [c for i, c in enumerate(z) if i != j]
        m = others[0] if len(others) == 1 else f"GREATEST({', '.join(others)})"
        out.append(f"({zj} - ({m} + LN({_numpy_sum([f'EXP({c} - {m})' for c in others])})))")
    return out


def _combined(d: _Dialect, k: int, rs: list[str]) -> list[str]:
    """Class probabilities from calibrated columns: ``[1 - r, r]`` for two classes, else ``normalize``."""
    if k == 2:
        return [f"1.0 - {rs[0]}", rs[0]]
    # left to right: the combiner's class-ordered copy of the columns is Fortran-ordered (numpy's fancy
    # indexing), and numpy reduces its rows column by column; the equality test pins this
    total = "(" + " + ".join(rs) + ")"
    # the sum is NULL for a refused row, which stays NULL; a row with no mass becomes uniform
    return [f"CASE WHEN {total} > 0 THEN {r} / {total} WHEN {total} = 0 THEN {d.num(1.0 / k)} END" for r in rs]


def scales_vector(member, cal) -> bool:
    """Whether ``cal`` maps the whole score vector (a multiclass scaling on k > 2 classes, or a linear
    scaling fitted on one column as the k = 2 case)."""
    return bool(getattr(cal, "multiclass", False)) and (
        member.scales_matrix or (cal.name in LINEAR_SCALINGS and bool(getattr(cal, "binary_", False))))


def _matrix_layers(d: _Dialect, member, cal, zs: list[str]) -> list[tuple[str, list[tuple[str, str]]]]:
    """``softmax(W u + b)`` (``softmax(u / T)`` for temperature) as lateral layers ending in ``s.r<j>``,
    following :mod:`calengine_builtins.calibrators.multiclass_scaling` step by step: the inputs ``u``
    (:func:`calengine.model.calibrated.matrix_scores`, then ``log_scores``, then Dirichlet's
    log-softmax of decision values), the linear logits, and a max-shifted softmax.  A refused row's
    scores are replaced by 0 before any ``LN``/``EXP`` (no engine error) and its outputs are NULL."""
    ok = f"z.{d.ident('ok')}"
    kind = cal.score_kind_
    zs = [f"CASE WHEN {ok} THEN {z} ELSE {d.num(0.0)} END" for z in zs]
    if len(zs) == 1:  # one column, the k = 2 case: [1 - p, p] clipped to [0, 1], or [0, s]
        S = [f"1.0 - {_clip(d, zs[0], 0.0, 1.0)}", _clip(d, zs[0], 0.0, 1.0)] if kind == "proba" else [d.num(0.0), zs[0]]
    elif member.raw.score_kind == "logit":  # one-vs-rest log-odds o -> log sigma(o) = -logaddexp(0, -o)
        S = [f"(-(GREATEST({d.num(0.0)}, -({o})) + LN(1.0 + EXP(-ABS({o})))))" for o in zs]
    else:
        S = zs
    if kind == "proba":
        S = [f"LN({_clip(d, x, EPS, 1.0)})" for x in S]
    k = len(S)

    def ref(alias: str, n: str) -> list[str]:
        return [f"{alias}.{d.ident(f'{n}{j}')}" for j in range(k)]

    layers = [("u", [(f"u{j}", x) for j, x in enumerate(S)])]
    u = ref("u", "u")
    if getattr(cal, "_log_probability", False) and kind != "proba":  # Dirichlet: log-softmax of decision values
        layers.append(("um", [(f"a{j}", f"{x} - GREATEST({', '.join(u)})") for j, x in enumerate(u)]))
        a = ref("um", "a")
        layers.append(("ul", [(f"u{j}", f"{x} - LN({_numpy_sum([f'EXP({y})' for y in a])})") for j, x in enumerate(a)]))
        u = ref("ul", "u")
    if cal.name == "temperature":
        v = [f"{x} / {d.num(cal.temperature_)}" for x in u]
    else:
        W, b = np.asarray(cal.coef_, dtype=np.float64), np.asarray(cal.intercept_, dtype=np.float64)
        if W.ndim == 1:
            v = [f"{x} * {d.num(W[j])} + {d.num(b[j])}" for j, x in enumerate(u)]
        else:
            v = ["(" + " + ".join(f"{x} * {d.num(W[j, i])}" for i, x in enumerate(u)) + f") + {d.num(b[j])}"
                 for j in range(k)]
    layers.append(("v", [(f"v{j}", x) for j, x in enumerate(v)]))
    v = ref("v", "v")
    layers.append(("e", [(f"e{j}", f"EXP({x} - GREATEST({', '.join(v)}))") for j, x in enumerate(v)]))
    e = ref("e", "e")
    total = _numpy_sum(e)
    P = [f"{x} / {total}" for x in e]
    if len(zs) == 1:
        P = P[1:]  # the second class's probability is the calibrated column
    return [*layers, ("s", [(f"r{j}", f"CASE WHEN {ok} THEN {_clip(d, p, 0.0, 1.0)} END") for j, p in enumerate(P)])]


def model_sql(model, dialect: str = "duckdb", table: str = "input") -> str:
    """One ``SELECT`` over ``table`` returning its columns plus ``p_<class>`` (module docstring)."""
    d = _Dialect(dialect)
    member, learner, reader = check_exportable(model)
    if reader is None:
        return _learner_model_sql(d, model, table)
    scores, valid = _reads(d, reader, learner)
    classes = [str(c) for c in model.labels.classes]
    names = {f"p_{c}" for c in classes} | ({"p_low", "p_high"} if model.is_venn_abers else set())
    clash = sorted(set(reader.columns) & names)
    if clash:
        raise ParameterError(
            f"the model reads column '{clash[0]}', which the query would return a second time as a probability;"
            f" rename the score columns in a view (e.g. SELECT {clash[0]} AS s_{clash[0][2:]}) and fit on those names"
        )
    zs = [f"z.{d.ident(f'c{b}')}" for b in range(len(scores))]
    rs = [f"s.{d.ident(f'r{b}')}" for b in range(len(scores))]
    k = model.n_classes
    probs = _combined(d, k, rs)
    read = ",\n    ".join([f"{valid} AS {d.ident('ok')}"] + [f"{s} AS {d.ident(f'c{b}')}" for b, s in enumerate(scores)])
    if scales_vector(member, member.calibrators[0]):
        layers = _matrix_layers(d, member, member.calibrators[0], zs)
    else:
        layers = [("s", [(f"r{b}", f"CASE WHEN z.{d.ident('ok')} THEN {_clip(d, calibrator_sql(d, cal, z), 0.0, 1.0)} END")
                         for b, (cal, z) in enumerate(zip(member.calibrators, zs))])]
    extra = []
    if model.is_venn_abers:  # calengine score --intervals: the pair of the positive class
        cal = member.calibrators[0]
        layers[-1][1].extend((f"r_{w}", f"CASE WHEN z.{d.ident('ok')} THEN {_venn_abers(d, cal, zs[0], i)} END")
                             for i, w in enumerate(("low", "high")))
        extra = [(f"s.{d.ident(f'r_{w}')}", f"p_{w}") for w in ("low", "high")]
    header = (f"calengine {_plain(model.info.get('method') or 'calibration')} of score columns {_names(reader.columns)}"
              f" -> p_<class> for classes {_names(classes)} ({d.name})")
    return _select(d, header, table, read, layers, [(p, f"p_{c}") for p, c in zip(probs, classes)] + extra)


def _plain(text) -> str:
    """``text`` from a model file for the header comment, escaped as :func:`_names` escapes names."""
    return ascii(str(text))[1:-1]


def _names(names) -> str:
    """Names from the data (columns, class labels) as the header comment shows them: each as Python's
    ``ascii`` writes it, so only printable ASCII remains (line breaks, every other control character
    and everything outside ASCII become ``\\n``, ``\\x..``, ``\\u....`` escapes)."""
    return ", ".join(ascii(str(n)) for n in names)


def _comment(text: str) -> str:
    """``text`` as one ``--`` comment line.  A comment runs to the end of its line, and SQL engines end
    lines at more characters than ``\\n`` (``\\r``; some lexers Unicode's separators too): a name from the
    data that held one would end the comment, and what followed would run as SQL (a second statement
    before the ``SELECT``).  So the line must be printable ASCII, which :func:`_names` guarantees for
    what comes from the data; anything else here is a defect of this module, refused before it is
    written."""
    if not all(" " <= ch <= "~" for ch in text):
        raise AssertionError(f"an SQL comment line holds a character outside printable ASCII: {text!r}")
    return f"-- {text}\n"


def _select(d: _Dialect, header: str, table: str, read: str, layers, outputs) -> str:
    """The query: the comment line ``header``, then ``t.*`` and ``outputs`` over ``table``, the read layer
    ``z`` and the lateral ``layers``."""
    out = ",\n  ".join(f"{p} AS {d.ident(name)}" for p, name in outputs)
    chain = "".join(f"CROSS JOIN LATERAL (SELECT\n    " + ",\n    ".join(f"{e} AS {d.ident(n)}" for n, e in cols)
                    + f"\n) AS {alias}\n" for alias, cols in layers)
    return (f"{_comment(header)}SELECT\n  t.*,\n  {out}\nFROM {d.ident(table)} AS t\n"
            f"CROSS JOIN LATERAL (SELECT\n    {read}\n) AS z\n{chain}")


def _learner_model_sql(d: _Dialect, model, table: str) -> str:
    """A model of a fitted learner (:mod:`.sql_learners`): encoded features (layer ``z``), what a
    learner's score reads more than once (``j``: naive Bayes' log-likelihoods, a softmax's logits),
    each member's learner score columns (``l``), their calibrated probabilities (``s``), on several
    classes each member's normalized probabilities (``p``), the members' mean."""
    from .sql_learners import feature_exprs, learner_expr

    classes = [str(c) for c in model.labels.classes]
    features = feature_exprs(d, model.encoder, OTHER_FORMATS)
    clash = sorted(set(model.encoder.input_columns) & ({f"p_{c}" for c in classes} | {"p_low", "p_high"}))
    if clash:
        raise ParameterError(f"the model reads column '{clash[0]}', which the query would return a second time as a"
                             " probability; rename it in a view and fit on that name")
    read = ",\n    ".join([f"TRUE AS {d.ident('ok')}"] + [f"{x} AS {d.ident(f'f{i}')}" for i, x in enumerate(features)])
    fz = [f"z.{d.ident(f'f{i}')}" for i in range(len(features))]
    scored = [learner_expr(d, member.learners[0], fz, OTHER_FORMATS, tag=f"m{m}_") for m, member in enumerate(model.members)]
    pre = [col for p, _ in scored for col in p]  # values a learner's score reads several times
    layers = ([("j", pre)] if pre else []) + [("l", [(f"c{m}_{b}", e) for m, (_, cols) in enumerate(scored)
                                                     for b, e in enumerate(cols)])]
    ls = [[f"l.{d.ident(f'c{m}_{b}')}" for b in range(len(cols))] for m, (_, cols) in enumerate(scored)]
    layers.append(("s", [(f"r{m}_{b}", _clip(d, calibrator_sql(d, cal, ls[m][b]), 0.0, 1.0))
                         for m, member in enumerate(model.members) for b, cal in enumerate(member.calibrators)]))
    rs = [[f"s.{d.ident(f'r{m}_{b}')}" for b in range(len(member.calibrators))] for m, member in enumerate(model.members)]
    n = d.num(float(len(rs)))
    if len(rs) == 1:
        probs = _combined(d, model.n_classes, rs[0])
    elif model.n_classes == 2:  # numpy's mean over members: their sum in member order, divided by their number
        probs = [f"({' + '.join(f'(1.0 - {r[0]})' for r in rs)}) / {n}", f"({' + '.join(r[0] for r in rs)}) / {n}"]
    else:  # each member's normalized probabilities, then their mean
        layers.append(("p", [(f"p{m}_{c}", e) for m, r in enumerate(rs) for c, e in enumerate(_combined(d, model.n_classes, r))]))
        ps = [[f"p.{d.ident(f'p{m}_{c}')}" for m in range(len(rs))] for c in range(model.n_classes)]
        probs = [f"({' + '.join(p)}) / {n}" for p in ps]
    outputs = [(p, f"p_{c}") for p, c in zip(probs, classes)]
    if model.is_venn_abers:
        cal = model.members[0].calibrators[0]
        layers[-1][1].extend((f"r_{w}", _venn_abers(d, cal, ls[0][0], i)) for i, w in enumerate(("low", "high")))
        outputs += [(f"s.{d.ident(f'r_{w}')}", f"p_{w}") for w in ("low", "high")]
    names = ", ".join(sorted({lr.name for m in model.members for lr in m.learners}))
    header = (f"calengine {_plain(model.info.get('method') or 'calibration')} of {_plain(names)} ({len(rs)} member(s)) over"
              f" {_names(model.encoder.input_columns)} -> p_<class> for classes {_names(classes)} ({d.name})")
    return _select(d, header, table, read, layers, outputs)
