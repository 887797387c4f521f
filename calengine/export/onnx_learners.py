"""A model of a fitted learner as an ONNX graph: the table's columns encoded as calengine encodes
them, the learner, each member's calibrators, the members' mean -- the same computation as
:func:`calengine.export.sql._learner_model_sql`, node for node in double precision.

What :func:`calengine.export.onnx.model_onnx` builds with :func:`learner_model_graph` for a model
whose learner calengine fitted (``calengine fit --learner ...``):

* **inputs**: one 1-D tensor per column the model reads (``[N]``, in the encoder's order): ``double``
  for a numeric column (NaN and infinities are missing: they get the training median and, where the
  model has one, the 0/1 missing indicator), ``string`` for a categorical one (the value as ``str()``
  writes it; a missing value is the string ``<missing>``, which calengine's encoder makes of a None,
  and any value outside the kept categories is ``<other>``).  Categories are looked up with the
  ``ai.onnx.ml`` domain's ``LabelEncoder`` (the only non-default operator, and only when the model
  has a categorical column).  Hashed text columns are refused.
* **the learner**, from the parameters :func:`.sql_learners.learner_params` reads (shared with SQL):
  the standardised features' dot product with ``coef_`` for ``logistic_regression`` (two-class
  ``expit``, multinomial softmax) and ``linear_svm`` (margins); the joint log-likelihoods of the
  Gaussian, Bernoulli and multinomial naive Bayes, normalised by the max-shifted log-sum-exp.  Every
  sum over features is an ``Add`` chain in index order over ``[N, k]`` tensors (one feature column
  times one column of ``coef``), the order of :func:`calengine_builtins.learners._rowwise.row_matmul`,
  and the sums over classes are ``Add`` chains in class order (``row_sum``) -- never ``MatMul`` or
  ``ReduceSum``, whose order is the runtime's -- so a score is the learner's to the last bit where
  the runtime's ``Exp``/``Log`` are the C library's, and isotonic maps give ``calengine score``'s
  probabilities bit for bit.
* **members**: each member's calibrators (:func:`calengine.export.onnx.calibrator_onnx`) on its
  learner's columns, combined per member (two classes: ``[1 - r, r]``; several: ``normalize``), then
  the mean over members in member order (a cross-validated model averages its fold members).
* **outputs**: ``probabilities`` ``[N, k]`` in the model's class order; a two-class Venn–ABERS model
  (one member) also ``p_low``/``p_high``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ParameterError
from .sql import OTHER_FORMATS
from .sql_learners import learner_params

#: the ``ai.onnx.ml`` opset a graph with categorical columns imports (``LabelEncoder`` version 2)
ML_OPSET = 3
ML_DOMAIN = "ai.onnx.ml"
#: the relative width within which a learner's score counts as equal to a piecewise map's boundary.
#: Why: onnxruntime's double ``Exp`` and ``Log`` are vectorised approximations that differ from the C
#: library's (numpy's) in the last bit for 14% and 30% of arguments, so a learner's score in the graph can
#: be a few ulps from calengine's.  A score equal to a block's boundary -- common where scores are
#: discrete, as a Bernoulli naive Bayes' on binarised features, or where a row repeats a calibration
#: row -- would then fall into the neighbouring block (seen without it: 69 of 12,000 Pendigits
#: probabilities off by up to 0.097).  Within this width (about nine ulps) the graph takes the side
#: calengine takes for the boundary itself.  The cost: a score calengine computes within the width of a
#: boundary without equalling it can be misplaced; a wider width did that to a Gaussian naive Bayes'
#: scores crowded just below 1 on Adult (1e-13: 6 of 3,000 probabilities), 2e-15 misplaced none on the
#: tables tested.
SNAP = 2e-15
#: ``onnx.TensorProto.DOUBLE`` (a Cast's ``to``), written out so this module imports no onnx at load
DOUBLE = 11


def _column(g, x: str) -> str:
    """``[N]`` as ``[N, 1]``, to broadcast against one row of constants per class."""
    return g.op("Unsqueeze", x, g.const([1], np.int64))


def _pick(g, m: str, j: int) -> str:
    """Column ``j`` of an ``[N, k]`` tensor as ``[N]``."""
    return g.op("Gather", m, g.const(j, np.int64), axis=1)


def _sum(g, terms: list[str]) -> str:
    out = terms[0]
    for t in terms[1:]:
        out = g.add(out, t)
    return out


def features_onnx(g, encoder) -> tuple[list[tuple[str, str]], list[str]]:
    """``(inputs, features)``: the graph inputs ``(name, "double"|"string")`` and one ``[N]`` double
    tensor per encoded feature, as :meth:`calengine.plan.features.FeatureEncoder.transform` makes them."""
    inputs, out = [], []
    for c in encoder.columns_:
        if c.kind == "numeric":
            inputs.append((c.name, "double"))
            finite = g.op("Equal", g.sub(c.name, c.name), g.num(0.0))  # false for NaN and infinities
            out.append(g.where(finite, c.name, g.num(c.fill)))
            if c.missing_indicator:
                out.append(g.where(finite, g.num(0.0), g.num(1.0)))
        elif c.kind == "categorical":
            inputs.append((c.name, "string"))
            cats = [str(v) for v in c.categories]
            # a category's index, -1 for any other value (no categories: every value is -1)
            idx = g.op("LabelEncoder", c.name, domain=ML_DOMAIN, keys_strings=cats or [""],
                       values_int64s=list(range(len(cats))) or [-1], default_int64=-1)
            out += [g.op("Cast", g.op("Equal", idx, g.const(j, np.int64)), to=DOUBLE) for j in range(len(cats))]
            if c.other:
                out.append(g.op("Cast", g.op("Less", idx, g.const(0, np.int64)), to=DOUBLE))
        else:
            raise ParameterError(f"column '{c.name}' is encoded as hashed text, which has no ONNX form; score this"
                                 f" model with {OTHER_FORMATS}")
    if not out:
        raise ParameterError("the model encodes no features; the model is damaged, fit it again")
    return inputs, out


def _products(g, xs: list[str], W: np.ndarray) -> str:
    """``X @ W.T`` as ``[N, k]``, each entry summed over features in index order (``row_matmul``)."""
    return _sum(g, [g.mul(_column(g, x), g.const(np.ascontiguousarray(W[:, j]))) for j, x in enumerate(xs)])


def _normalised(g, jll: str, k: int) -> list[str]:
    """``exp(jll_i - logsumexp(jll))`` per class (``normalise_log``): max first, exponentials summed in
    class order; the second class's column alone on two classes."""
    top = g.op("ReduceMax", jll, axes=[1], keepdims=0)
    cols = [_pick(g, jll, i) for i in range(k)]
    lse = g.add(g.op("Log", _sum(g, [g.op("Exp", g.sub(c, top)) for c in cols])), top)
    out = [g.op("Exp", g.sub(c, lse)) for c in cols]
    return out[1:] if k == 2 else out


def learner_onnx(g, learner, features: list[str]) -> list[str]:
    """The learner's score columns (``[N]`` each) as the calibrators read them (see
    :func:`.sql_learners.learner_expr`: the same forms and the same order of operations)."""
    form, params = learner_params(learner, len(features), OTHER_FORMATS, "ONNX")
    if form == "gaussian_nb":
        theta, var, const = params
        terms = []
        for j, x in enumerate(features):
            a = g.sub(_column(g, x), g.const(np.ascontiguousarray(theta[:, j])))
            terms.append(g.div(g.mul(a, a), g.const(np.ascontiguousarray(var[:, j]))))
        jll = g.sub(g.const(const), g.mul(g.num(0.5), _sum(g, terms)))
        return _normalised(g, jll, theta.shape[0])
    if form == "discrete_nb":
        scalers, binarize, W, c = params
        xs = list(features)
        for kind, a, b in scalers:
            if kind == "standard":
                xs = [g.div(g.sub(x, g.num(a[j])), g.num(b[j])) for j, x in enumerate(xs)]
            else:
                xs = [g.clip(g.add(g.mul(x, g.num(a[j])), g.num(b[j])), 0.0, 1.0) for j, x in enumerate(xs)]
        if binarize is not None:
            xs = [g.where(g.op("Greater", x, g.num(binarize)), g.num(1.0), g.num(0.0)) for x in xs]
        return _normalised(g, g.add(_products(g, xs, W), g.const(c)), W.shape[0])
    mean, scale, coef, intercept = params
    xs = [g.div(g.sub(x, g.num(mean[j])), g.num(scale[j])) for j, x in enumerate(features)]
    z = g.add(_products(g, xs, coef), g.const(intercept))
    cols = [_pick(g, z, i) for i in range(coef.shape[0])]
    if form == "margins":
        return cols
    if form == "expit":
        return [g.expit(cols[0])]
    top = g.op("ReduceMax", z, axes=[1], keepdims=0)  # softmax: max-shifted, divided by the sum in class order
    e = [g.op("Exp", g.sub(c, top)) for c in cols]
    total = _sum(g, e)
    return [g.div(x, total) for x in e]


def learner_model_graph(g, model, calibrator_onnx, combined, step_pair) -> tuple[list, list]:
    """``(inputs, outputs)`` of a fitted learner's model (module docstring): ``inputs`` as
    :func:`features_onnx` names them, ``outputs`` ``(name, tensor, shape)``.  ``calibrator_onnx``,
    ``combined`` and ``step_pair`` are :mod:`.onnx`'s (passed in, so this module does not import it)."""
    inputs, features = features_onnx(g, model.encoder)
    k = model.n_classes
    g.snap = SNAP
    scored = [learner_onnx(g, member.learners[0], features) for member in model.members]
    rs = [[g.clip(calibrator_onnx(g, cal, s), 0.0, 1.0) for cal, s in zip(member.calibrators, cols)]
          for member, cols in zip(model.members, scored)]
    per_member = [combined(g, k, r) for r in rs]
    if len(per_member) == 1:
        probs = per_member[0]
    else:  # numpy's mean over members: their sum in member order, divided by their number
        n = g.num(float(len(per_member)))
        probs = [g.div(_sum(g, [p[c] for p in per_member]), n) for c in range(k)]
    outputs = [("probs", probs)]
    if model.is_venn_abers and k == 2:
        cal = model.members[0].calibrators[0]
        outputs += [(f"p_{w}", step_pair(g, cal, scored[0][0], i)) for i, w in enumerate(("low", "high"))]
    return inputs, outputs
