"""A calibrated model as an ONNX graph, for runtimes that score ONNX (onnxruntime, ONNX-serving
stacks, ML.NET, ...).

:func:`model_onnx` builds, with the ``onnx`` helper API (no pickles, no converters), the same
computation as :func:`calengine.export.sql.model_sql`, step for step and in double precision
throughout.  A model of a fitted learner (the learners SQL expresses: logistic regression, linear
SVM, Gaussian/Bernoulli/multinomial naive Bayes, one member or a cross-validated ensemble) is built
by :mod:`.onnx_learners` (its inputs are the table's columns); a model of score columns
(``calengine fit --scores ...``) as follows:

* **inputs**: one 1-D ``double`` tensor per score column, named after the column (``[N]``; cast
  float32 or integer columns to double first);
* **outputs**: ``probabilities``, an ``[N, k]`` ``double`` tensor with one column per class in the
  model's class order (the manifest's ``classes``), and for a two-class Venn–ABERS model also
  ``p_low`` and ``p_high`` (``[N]``: the pair ``calengine score --intervals`` writes);
* reading the scores as :class:`calengine.plan.columns.ColumnReader` does (probabilities clipped to
  [0, 1]; two columns of a two-class model reduced; ``k`` logit columns turned into one-vs-rest
  log-odds); a row ``calengine score`` refuses (NaN, an infinity, a probability outside [0, 1] by more
  than the reader's tolerance) gets NaN probabilities instead of failing the run;
* the calibrators SQL expresses (:data:`calengine.export.sql.SQL_CALIBRATORS`): sigmoid (both ``on=``),
  sigmoid_nobias, temperature, beta as ``1 / (1 + exp(-x))`` with the exponent capped; the piecewise
  maps (isotonic step and linear, binning, rocch, venn_abers) as a branch-free binary search over their
  boundaries (``log2`` of the number of pieces ``Gather``/compare/``Where`` rounds per row, so memory
  stays ``O(N)`` whatever the number of blocks), ties resolved as ``calengine score`` resolves them,
  linear pieces with slopes computed here exactly as ``numpy.interp`` computes them; the multiclass
  scalings (temperature, vector, matrix, Dirichlet) as ``softmax(W u + b)`` with a max shift;
* the ``normalize`` combiner of several classes; every other combiner (``coupling``), the
  class-sampling corrections and the learners SQL does not express are refused with one line naming
  the other formats.

Precision: onnxruntime runs every operator used here in double, so the probabilities equal
``calengine score``'s within 1e-12 (the piecewise maps bit for bit, the tests pin both).  Opset
:data:`OPSET` (ONNX IR version :data:`IR_VERSION`), default domain only (a learner's categorical
columns add ``ai.onnx.ml``'s ``LabelEncoder``).  The bytes are a pure
function of the model (names are positional, no timestamps): same model, same file.
"""

from __future__ import annotations

import json

import numpy as np

from ..errors import CalengineError, ParameterError
from .sql import (EPS, EXP_CAP, OTHER_FORMATS, PROBA_TOLERANCE, check_exportable, scales_vector,
                  interp_pieces, venn_abers_steps)

OPSET = 17
IR_VERSION = 8
OUTPUT = "probabilities"
FORMATS_HINT = ("export it with --format sql (linear and naive Bayes learners) or --format mlflow, or score it with"
                f" {OTHER_FORMATS}")


#: the graph's outputs besides :data:`OUTPUT` (a two-class Venn-ABERS model's interval)
PAIR_OUTPUTS = ("p_low", "p_high")


def internal_prefix(inputs) -> str:
    """The prefix of the graph's own tensor names: none, unless an input (a column of the data, named as
    it is) has the form of one (``c<i>``, ``n<i>``), then as many underscores as keep every internal
    name apart from every input.  A column named ``c0`` was an initializer's name too (ONNX refused
    the graph), and a column named like a node's output would have rewired the graph."""
    import re

    names = list(inputs)
    prefix = ""
    while any(re.fullmatch(re.escape(prefix) + r"[cn][0-9]+", n) for n in names):
        prefix += "_"
    return prefix


def check_input_names(inputs) -> None:
    """One line for a column the graph cannot name after itself: an empty name (ONNX's "no input") or
    the name of one of the graph's outputs."""
    from ..errors import DataError

    for name in inputs:
        if name == "" or name in (OUTPUT, *PAIR_OUTPUTS):
            raise DataError(
                f"the model reads a column named {json.dumps(name)}, and an ONNX graph names each input after its column"
                f" and its outputs {', '.join((OUTPUT, *PAIR_OUTPUTS))}; rename the column and fit again, or export"
                " with --format sql or --format mlflow"
            )


class _Graph:
    """Nodes and initializers appended in order; every name is positional (``c<i>``, ``n<i>``, after a
    ``prefix`` that keeps them apart from the inputs' names: :func:`internal_prefix`)."""

    def __init__(self, prefix: str = ""):
        self.prefix = prefix
        self.nodes, self.inits = [], []
        self._consts: dict = {}
        self.domains: set[str] = set()
        #: relative width within which a score counts as equal to a piecewise map's boundary (0: exact
        #: comparisons; a fitted learner's graph sets :data:`.onnx_learners.SNAP`, see there)
        self.snap = 0.0

    def const(self, value, dtype=np.float64) -> str:
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self._consts:
            from onnx import numpy_helper

            name = f"{self.prefix}c{len(self._consts)}"
            self.inits.append(numpy_helper.from_array(arr, name))
            self._consts[key] = name
        return self._consts[key]

    def op(self, kind: str, *inputs: str, domain: str = "", **attrs) -> str:
        from onnx import helper

        out = f"{self.prefix}n{len(self.nodes)}"
        self.nodes.append(helper.make_node(kind, list(inputs), [out], domain=domain or None, **attrs))
        if domain:
            self.domains.add(domain)
        return out

    # arithmetic in the forms the SQL export writes (each a mirror of calengine's numpy)
    def add(self, a, b): return self.op("Add", a, b)
    def sub(self, a, b): return self.op("Sub", a, b)
    def mul(self, a, b): return self.op("Mul", a, b)
    def div(self, a, b): return self.op("Div", a, b)

    def num(self, x: float) -> str:
        return self.const(float(x))

    def clip(self, x: str, lo: float, hi: float) -> str:
        return self.op("Min", self.op("Max", x, self.num(lo)), self.num(hi))

    def expit(self, x: str) -> str:
        """calengine's ``expit``: ``1 / (1 + exp(-x))``, the exponent capped as in SQL."""
        e = self.op("Exp", self.op("Min", self.op("Neg", x), self.num(EXP_CAP)))
        return self.div(self.num(1.0), self.add(self.num(1.0), e))

    def logit(self, p: str) -> str:
        c = self.clip(p, EPS, 1.0 - EPS)
        return self.sub(self.op("Log", c), self.op("Log", self.sub(self.num(1.0), c)))

    def where(self, cond: str, a: str, b: str) -> str:
        return self.op("Where", cond, a, b)

    def search(self, s: str, bounds, ops) -> str:
        """The index of ``s``'s piece: the largest ``j`` whose boundary ``s`` has passed (``ops[j]``
        ``"<"``: ``s >= bounds[j]``, ``"<="``: ``s > bounds[j]``; ``bounds[0]`` never compared), by
        binary search over the boundaries padded with ``+inf`` to a power of two (valid because the
        passed boundaries are a prefix)."""
        n = len(bounds)
        size = 1 << max(0, (n - 1).bit_length())
        b = np.full(size, np.inf)
        b[:n] = bounds
        b[0] = -np.inf
        eq = np.zeros(size, dtype=bool)
        eq[:n] = [o == "<" for o in ops]
        if self.snap:  # a score within snap * |b| of b counts as b: "<" passes from below, "<=" only beyond
            fin = np.isfinite(b)
            width = self.snap * np.abs(b[fin])
            b[fin] = np.where(eq[fin], b[fin] - width, b[fin] + width)
        b_name = self.const(b)
        zero = self.const(0, np.int64)
        idx = self.op("Where", self.op("IsNaN", s), zero, zero)  # int64 zeros shaped like s
        step = size >> 1
        while step:
            cand = self.add(idx, self.const(step, np.int64))
            t = self.op("Gather", b_name, cand)
            if all(eq[:n]):
                go = self.op("GreaterOrEqual", s, t)
            elif not any(eq[1:n]):
                go = self.op("Greater", s, t)
            else:
                flag = self.op("Gather", self.const(eq, np.bool_), cand)
                go = self.op("Or", self.op("Greater", s, t), self.op("And", flag, self.op("Equal", s, t)))
            idx = self.where(go, cand, idx)
            step >>= 1
        return idx

    def step(self, s: str, bounds, values, ops=None) -> str:
        values = np.asarray(values, dtype=np.float64)
        if values.size == 1:
            return self.op("Expand", self.num(values[0]), self.op("Shape", s))
        return self.op("Gather", self.const(values), self.search(s, bounds, ops or ["<"] * len(bounds)))


def _isotonic(g: _Graph, cal, s: str) -> str:
    if cal.interpolation_ == "step":
        return g.step(s, cal.lo_, cal.values_)
    x, y, slopes = interp_pieces(cal)
    if x.size == 1:
        return g.step(s, x, y)
    # pieces: below x[0] | [x[0], x[1]) | ... | [x[-2], x[-1]) | at or above x[-1]; the outer two are flat
    j = g.search(s, np.concatenate(([-np.inf], x)), ["<"] * (x.size + 1))
    flat = np.zeros(x.size + 1, dtype=bool)
    flat[[0, -1]] = True
    knot = np.concatenate(([x[0]], x))  # piece p > 0 starts at x[p - 1]
    yk = np.concatenate(([y[0]], y[:-1], [y[-1]]))
    slope = np.concatenate(([0.0], slopes, [0.0]))
    xj, yj = g.op("Gather", g.const(knot), j), g.op("Gather", g.const(yk), j)
    line = g.add(g.mul(g.op("Gather", g.const(slope), j), g.sub(s, xj)), yj)
    near = (g.op("LessOrEqual", g.op("Abs", g.sub(s, xj)), g.op("Gather", g.const(g.snap * np.abs(knot)), j))
            if g.snap else g.op("Equal", s, xj))
    at = g.op("Or", g.op("Gather", g.const(flat, np.bool_), j), near)
    return g.where(at, yj, line)


def _log_odds(g: _Graph, s: str, kind: str) -> str:
    return g.logit(s) if kind == "proba" else s


def calibrator_onnx(g: _Graph, cal, s: str) -> str:
    """The calibrated probability of the score tensor ``s`` (as :func:`.sql.calibrator_sql`)."""
    name, kind = cal.name, getattr(cal, "score_kind_", None)
    if name == "sigmoid":
        f = _log_odds(g, s, kind) if getattr(cal, "on_", "score") == "logit" else s
        return g.expit(g.op("Neg", g.add(g.mul(g.num(cal.a_), f), g.num(cal.b_))))
    if name == "sigmoid_nobias":
        return g.expit(g.mul(g.num(cal.alpha_), _log_odds(g, s, kind)))
    if name == "temperature":
        return g.expit(g.div(_log_odds(g, s, kind), g.num(cal.temperature_)))
    if name == "beta":
        c = g.clip(g.expit(s) if kind == "decision" else s, EPS, 1.0 - EPS)
        lin = g.add(g.mul(g.num(cal.a_), g.op("Log", c)),
                    g.mul(g.num(cal.b_), g.op("Neg", g.op("Log", g.sub(g.num(1.0), c)))))
        return g.expit(g.add(lin, g.num(cal.c_)))
    if name == "isotonic":
        return _isotonic(g, cal, s)
    if name == "rocch":
        return g.step(s, cal.lo_, cal.values_)
    if name == "binning":
        lo, hi = np.asarray(cal.lo_, dtype=np.float64), np.asarray(cal.hi_, dtype=np.float64)
        if cal.boundary_ == "lower":
            return g.step(s, lo, cal.values_)
        return g.step(s, np.concatenate(([-np.inf], 0.5 * (hi[:-1] + lo[1:]))), cal.values_)
    if name == "venn_abers":
        return g.step(s, *venn_abers_steps(cal))
    raise ParameterError(f"calibrator '{name}' has no ONNX form; {FORMATS_HINT}")  # _check_exportable said why


def _reads(g: _Graph, reader, learner) -> tuple[list[str], str]:
    """The score tensors calibrators receive and the boolean tensor of valid rows (as SQL's reads)."""
    cols = list(reader.columns)
    valid = [g.op("Equal", g.sub(c, c), g.num(0.0)) for c in cols]  # false for NaN and infinities
    if reader.score_kind == "proba":
        valid += [g.op("And", g.op("GreaterOrEqual", c, g.num(-PROBA_TOLERANCE)),
                       g.op("LessOrEqual", c, g.num(1.0 + PROBA_TOLERANCE))) for c in cols]
        cols = [g.clip(c, 0.0, 1.0) for c in cols]
    ok = valid[0]
    for v in valid[1:]:
        ok = g.op("And", ok, v)
    k, kind = int(learner.n_classes), learner.kind
    if k == 2 and len(cols) == 2:
        cols = [cols[1] if kind == "proba" else g.sub(cols[1], cols[0])]
    elif k > 2 and kind == "logit":
        cols = [_one_vs_rest(g, cols, j) for j in range(k)]
    return cols, ok


def _sum(g: _Graph, terms: list[str]) -> str:
    out = terms[0]
    for t in terms[1:]:
        out = g.add(out, t)
    return out


def _one_vs_rest(g: _Graph, z: list[str], j: int) -> str:
    others = [c for i, c in enumerate(z) if i != j]
    m = others[0] if len(others) == 1 else g.op("Max", *others)
    lse = g.add(m, g.op("Log", _sum(g, [g.op("Exp", g.sub(c, m)) for c in others])))
    return g.sub(z[j], lse)


def _stack(g: _Graph, cols: list[str]) -> str:
    """``[N]`` tensors side by side as ``[N, len(cols)]``."""
    axis = g.const([1], np.int64)
    return g.op("Concat", *[g.op("Unsqueeze", c, axis) for c in cols], axis=1)


def _softmax_scaling(g: _Graph, member, cal, zs: list[str], ok: str) -> list[str]:
    """``softmax(W u + b)`` (``softmax(u / T)``), the inputs ``u`` made as
    :func:`calengine.export.sql._matrix_layers` makes them; the probability columns."""
    kind = cal.score_kind_
    zs = [g.where(ok, z, g.num(0.0)) for z in zs]
    if len(zs) == 1:
        c = g.clip(zs[0], 0.0, 1.0)
        S = [g.sub(g.num(1.0), c), c] if kind == "proba" else [g.mul(zs[0], g.num(0.0)), zs[0]]
    elif member.raw.score_kind == "logit":  # log sigma(o) = -(max(0, -o) + log(1 + exp(-|o|)))
        S = [g.op("Neg", g.add(g.op("Max", g.num(0.0), g.op("Neg", o)),
                               g.op("Log", g.add(g.num(1.0), g.op("Exp", g.op("Neg", g.op("Abs", o)))))))
             for o in zs]
    else:
        S = zs
    if kind == "proba":
        S = [g.op("Log", g.clip(x, EPS, 1.0)) for x in S]
    u = _stack(g, S)
    axes = g.const([1], np.int64)
    if getattr(cal, "_log_probability", False) and kind != "proba":  # Dirichlet: log-softmax of decision values
        a = g.sub(u, g.op("ReduceMax", u, axes=[1], keepdims=1))
        u = g.sub(a, g.op("Log", g.op("ReduceSum", g.op("Exp", a), axes, keepdims=1)))
    if cal.name == "temperature":
        v = g.div(u, g.num(cal.temperature_))
    else:
        W, b = np.asarray(cal.coef_, dtype=np.float64), np.asarray(cal.intercept_, dtype=np.float64)
        v = g.add(g.mul(u, g.const(W)) if W.ndim == 1 else g.op("MatMul", u, g.const(W.T)), g.const(b))
    e = g.op("Exp", g.sub(v, g.op("ReduceMax", v, axes=[1], keepdims=1)))
    p = g.div(e, g.op("ReduceSum", e, axes, keepdims=1))
    cols = [g.op("Squeeze", g.op("Slice", p, g.const([j], np.int64), g.const([j + 1], np.int64), axes), axes)
            for j in range(len(S))]
    return cols[1:] if len(zs) == 1 else cols


def _combined(g: _Graph, k: int, rs: list[str]) -> list[str]:
    if k == 2:
        return [g.sub(g.num(1.0), rs[0]), rs[0]]
    total = _sum(g, rs)
    even = g.op("Expand", g.num(1.0 / k), g.op("Shape", total))
    return [g.where(g.op("Greater", total, g.num(0.0)), g.div(r, total), even) for r in rs]


def _venn_abers_pair(g: _Graph, cal, s: str, which: int) -> str:
    return g.step(s, *venn_abers_steps(cal, which))


def model_onnx(model, sets: bool = False) -> bytes:
    """The serialized ONNX model of a calibrated model (module docstring; a fitted learner's model:
    :mod:`.onnx_learners`); ``sets``: also the conformal layer's sets (:mod:`.conformal`)."""
    try:
        import onnx
        from onnx import TensorProto, helper
    except ImportError:
        raise CalengineError("exporting to ONNX needs the onnx package; install it with: pip install 'calengine[onnx]'"
                             ) from None

    member, learner, reader = check_exportable(model, "ONNX")
    if sets:
        from .conformal import check_sets_exportable, sets_onnx

        check_sets_exportable(model, "ONNX")
    names = list(reader.columns) if reader is not None else [c.name for c in model.encoder.columns_]
    check_input_names(names)
    g = _Graph(internal_prefix(names))
    from .onnx_learners import ML_OPSET

    if reader is None:
        from .onnx_learners import learner_model_graph

        inputs, outs = learner_model_graph(g, model, calibrator_onnx, _combined, _venn_abers_pair)
        probs = outs[0][1]
        outputs = [(OUTPUT, _stack(g, outs[0][1]), ["N", model.n_classes])] + [(n, t, ["N"]) for n, t in outs[1:]]
        what = f"{', '.join(sorted({lr.name for m in model.members for lr in m.learners}))} ({len(model.members)} member(s))"
        what += " reading columns " + ", ".join(json.dumps(n) for n in names)
    else:
        inputs = [(c, "double") for c in reader.columns]
        scores, ok = _reads(g, reader, learner)
        nan = g.num(np.nan)
        cal = member.calibrators[0]
        if scales_vector(member, cal):
            rs = _softmax_scaling(g, member, cal, scores, ok)
        else:
            rs = [g.clip(calibrator_onnx(g, c, z), 0.0, 1.0) for c, z in zip(member.calibrators, scores)]
        probs = [g.where(ok, p, nan) for p in _combined(g, model.n_classes, rs)]
        outputs = [(OUTPUT, _stack(g, probs), ["N", model.n_classes])]
        if model.is_venn_abers and model.n_classes == 2:
            outputs += [(f"p_{w}", g.where(ok, _venn_abers_pair(g, cal, scores[0], i), nan), ["N"])
                        for i, w in enumerate(("low", "high"))]
        what = "score columns " + ", ".join(json.dumps(c) for c in reader.columns)
    if sets:
        outputs += sets_onnx(g, model, probs)
    for name, src, *_ in outputs:
        g.nodes.append(helper.make_node("Identity", [src], [name]))
    classes = [str(c) for c in model.labels.classes]
    types = {"double": TensorProto.DOUBLE, "string": TensorProto.STRING}
    graph = helper.make_graph(
        g.nodes, "calengine",
        [helper.make_tensor_value_info(c, types[t], ["N"]) for c, t in inputs],
        [helper.make_tensor_value_info(n, (rest or [TensorProto.DOUBLE])[0], shape) for n, _, shape, *rest in outputs],
        initializer=g.inits,
        # names from the data are JSON strings here (quotes, control characters escaped): the doc string
        # is one line that says unambiguously which columns and classes these are
        doc_string=f"calengine {json.dumps(str(model.info.get('method') or 'calibration'))} of {what}"
                   f" -> probabilities of classes {', '.join(json.dumps(c) for c in classes)}",
    )
    opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid("ai.onnx.ml", ML_OPSET)] if g.domains else [])
    onnx_model = helper.make_model(graph, opset_imports=opsets, producer_name="calengine", ir_version=IR_VERSION)
    helper.set_model_props(onnx_model, {"classes": json.dumps(classes), "columns": json.dumps([c for c, _ in inputs])})
    onnx.checker.check_model(onnx_model, full_check=True)
    return onnx_model.SerializeToString()
