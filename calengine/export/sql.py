"""A calibrated model as one SQL ``SELECT``: score the rows where they live.

:func:`model_sql` turns a model of score columns (``calengine fit --scores ...``: the learner is the
table's own column, so nothing but the calibration map has to be expressed) into a query over a
relation (``input`` unless named) that returns every input column plus ``p_<class>`` per class.

What is expressed, and how exactly:

* reading the score columns as :class:`calengine.plan.columns.ColumnReader` does: probability scores
  clipped to [0, 1]; a row that ``calengine score`` refuses (NULL, NaN, infinite, a probability outside
  [0, 1] by more than the reader's tolerance) gets NULL probabilities instead of failing the query;
* two score columns of a two-class model reduced as :class:`calengine.score_columns.ScoreColumns`
  reduces them; ``k`` logit columns turned into each class's one-vs-rest log-odds (max-shifted
  log-sum-exp);
* the calibrators ``sigmoid`` (on the score or, ``on="logit"``, on its logit), ``sigmoid_nobias``, ``temperature``, ``beta`` (the logistic function
  written as ``1 / (1 + exp(-x))``, as calengine computes it) and ``isotonic`` with ``step`` or
  ``linear`` interpolation: a balanced ``CASE`` tree over the blocks' lowest scores (depth log2 of the
  number of blocks, so no join and no threshold table), with the slopes of the linear pieces computed
  here in Python exactly as ``numpy.interp`` does, so isotonic probabilities are bit-identical to
  ``calengine score``;
* multiclass models with the ``normalize`` combiner, summing in the order numpy sums (left to right
  for the combiner; pairwise from eight terms on in the log-sum-exp of logits), so the division is
  the one numpy makes and isotonic stays bit-identical.

Everything else is refused with one :class:`~calengine.errors.ParameterError` line that names what
is supported: learners other than score columns, other calibrators and combiners, several members,
class-sampling corrections.

Numbers are written as ``CAST('<repr>' AS DOUBLE)``: every dialect parses the shortest round-trip
decimal string to the same double, where a bare ``0.1`` would be a DECIMAL in DuckDB and Postgres.
The text is a pure function of the model (same model, same bytes).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ParameterError

DIALECTS = ("duckdb", "spark", "postgres")
#: what the SQL export expresses (module docstring)
SQL_CALIBRATORS = ("sigmoid", "sigmoid_nobias", "temperature", "beta", "isotonic")
OTHER_FORMATS = "calengine score (or calengine.load_model(...).predict_frame in the engine's Python UDF)"
#: calengine's clip of probabilities away from 0 and 1 before a logit (calibrators' ``EPS``)
EPS = 1e-12
#: the reader's tolerance for probability scores outside [0, 1] (``calengine.plan.columns``)
PROBA_TOLERANCE = 1e-9
#: exp() arguments are kept below this: exp(700) is finite in every engine (DuckDB raises on overflow),
#: and 1 / (1 + exp(700)) differs from calengine's 0 by 1e-304
EXP_CAP = 700.0


class _Dialect:
    def __init__(self, name: str):
        if name not in DIALECTS:
            raise ParameterError(f"--dialect must be one of {', '.join(DIALECTS)}, got {name!r}")
        self.name = name
        self.double = "DOUBLE PRECISION" if name == "postgres" else "DOUBLE"

    def num(self, x: float) -> str:
        x = float(x)
        if not math.isfinite(x):
            raise ParameterError(f"the model holds the non-finite number {x!r}; it cannot be written as SQL")
        return f"CAST('{x!r}' AS {self.double})"

    def ident(self, name: str) -> str:
        name = str(name)
        if self.name == "spark":
            return "`" + name.replace("`", "``") + "`"
        return '"' + name.replace('"', '""') + '"'


def _expit(d: _Dialect, x: str) -> str:
    """calengine's ``expit``: ``1 / (1 + exp(-x))`` (the exponent capped, see :data:`EXP_CAP`)."""
    return f"(1.0 / (1.0 + EXP(LEAST(-({x}), {d.num(EXP_CAP)}))))"


def _clip(d: _Dialect, x: str, lo: float, hi: float) -> str:
    return f"LEAST(GREATEST({x}, {d.num(lo)}), {d.num(hi)})"


def _logit(d: _Dialect, p: str) -> str:
    """The calibrators' ``_logit``: ``log(p) - log1p(-p)`` with ``p`` clipped to [EPS, 1 - EPS]."""
    c = _clip(d, p, EPS, 1.0 - EPS)
    return f"(LN({c}) - LN(1.0 - {c}))"


def _log_odds(d: _Dialect, s: str, kind: str) -> str:
    return _logit(d, s) if kind == "proba" else s


def _tree(d: _Dialect, s: str, lo: np.ndarray, leaf, a: int, b: int) -> str:
    """A balanced ``CASE`` over blocks ``a..b-1``: block ``j`` holds where ``lo[j] <= s < lo[j+1]``."""
    if b - a == 1:
        return leaf(a)
    m = (a + b) // 2
    return f"CASE WHEN {s} < {d.num(lo[m])} THEN {_tree(d, s, lo, leaf, a, m)} ELSE {_tree(d, s, lo, leaf, m, b)} END"


def _isotonic(d: _Dialect, cal, s: str) -> str:
    lo, hi, values = (np.asarray(getattr(cal, k), dtype=np.float64) for k in ("lo_", "hi_", "values_"))
    if cal.interpolation_ == "step":
        return _tree(d, s, lo, lambda j: d.num(values[j]), 0, lo.size)
    from ..reductions.pav import linear_knots

    x, y = linear_knots(lo, hi, values)
    if x.size == 1:
        return d.num(y[0])
    # numpy.interp: y[0] below x[0]; y[-1] at or above x[-1]; else with j such that x[j] <= s < x[j+1],
    # y[j] where s == x[j], otherwise slope_j * (s - x[j]) + y[j], slope_j = (y[j+1]-y[j]) / (x[j+1]-x[j])
    slopes = (y[1:] - y[:-1]) / (x[1:] - x[:-1])

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
    raise ParameterError(
        f"calibrator '{name}' has no SQL form (SQL expresses {', '.join(SQL_CALIBRATORS)}); score with {OTHER_FORMATS}"
    )


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


def _check_exportable(model) -> tuple:
    """``(member, learner, reader)`` of a model the SQL export expresses, or one ParameterError line."""
    from ..plan.columns import ColumnReader
    from ..score_columns import ScoreColumns

    member = model.members[0]
    learner = (getattr(member, "learners", None) or [None])[0]
    if not isinstance(learner, ScoreColumns) or not isinstance(model.encoder, ColumnReader):
        raise ParameterError(
            f"learner '{getattr(learner, 'name', type(learner).__name__)}' has no SQL form yet (SQL scores models of"
            f" score columns: calengine fit --scores ...); score it with {OTHER_FORMATS}"
        )
    if len(model.members) != 1 or getattr(model.members[0], "kind", None) != "calibrated":
        raise ParameterError(f"the SQL export needs a model with one calibrated member (this one has {len(model.members)}"
                             f" members or another member kind); score it with {OTHER_FORMATS}")
    if model.class_rates is not None:
        raise ParameterError(f"the SQL export does not apply --class-sampling/--negative-sampling corrections;"
                             f" score this model with {OTHER_FORMATS}")
    if model.n_classes > 2:
        cname = getattr(model.combiner, "name", None)
        if cname != "normalize":
            raise ParameterError(f"combiner '{cname}' has no SQL form (SQL combines one-vs-all columns with"
                                 f" 'normalize'); score this model with {OTHER_FORMATS}")
    for cal in member.calibrators:
        if model.n_classes > 2 and getattr(cal, "multiclass", False):
            raise ParameterError(
                f"calibrator '{cal.name}' scales the whole {model.n_classes}-class score vector (a softmax over the"
                f" classes), which has no SQL form yet; score this model with {OTHER_FORMATS}"
            )
        if getattr(cal, "name", None) not in SQL_CALIBRATORS:
            calibrator_sql(_Dialect("duckdb"), cal, "s")  # raises the one line
    return member, learner, model.encoder


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


def model_sql(model, dialect: str = "duckdb", table: str = "input") -> str:
    """One ``SELECT`` over ``table`` returning its columns plus ``p_<class>`` (module docstring)."""
    d = _Dialect(dialect)
    member, learner, reader = _check_exportable(model)
    scores, valid = _reads(d, reader, learner)
    classes = [str(c) for c in model.labels.classes]
    clash = sorted(set(reader.columns) & {f"p_{c}" for c in classes})
    if clash:
        raise ParameterError(
            f"the model reads column '{clash[0]}', which the query would return a second time as a probability;"
            f" rename the score columns in a view (e.g. SELECT {clash[0]} AS s_{clash[0][2:]}) and fit on those names"
        )
    zs = [f"z.{d.ident(f'c{b}')}" for b in range(len(scores))]
    rs = [f"s.{d.ident(f'r{b}')}" for b in range(len(scores))]
    k = model.n_classes
    if k == 2:
        probs = [f"1.0 - {rs[0]}", rs[0]]
    else:
        # left to right: the combiner's class-ordered copy of the columns is Fortran-ordered (numpy's fancy
        # indexing), and numpy reduces its rows column by column; the equality test pins this
        total = "(" + " + ".join(rs) + ")"
        # the sum is NULL for a refused row, which stays NULL; a row with no mass becomes uniform
        probs = [f"CASE WHEN {total} > 0 THEN {r} / {total} WHEN {total} = 0 THEN {d.num(1.0 / k)} END" for r in rs]
    read = ",\n    ".join([f"{valid} AS {d.ident('ok')}"] + [f"{s} AS {d.ident(f'c{b}')}" for b, s in enumerate(scores)])
    calibrated = ",\n    ".join(
        f"CASE WHEN z.{d.ident('ok')} THEN {_clip(d, calibrator_sql(d, cal, z), 0.0, 1.0)} END AS {d.ident(f'r{b}')}"
        for b, (cal, z) in enumerate(zip(member.calibrators, zs))
    )
    outputs = ",\n  ".join(f"{p} AS {d.ident('p_' + c)}" for p, c in zip(probs, classes))
    header = (f"-- calengine {model.info.get('method') or 'calibration'} of score columns"
              f" {', '.join(reader.columns)} -> p_<class> for classes {', '.join(classes)} ({d.name})\n")
    return (f"{header}SELECT\n  t.*,\n  {outputs}\nFROM {d.ident(table)} AS t\n"
            f"CROSS JOIN LATERAL (SELECT\n    {read}\n) AS z\n"
            f"CROSS JOIN LATERAL (SELECT\n    {calibrated}\n) AS s\n")
