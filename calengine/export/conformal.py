"""The set rule of a conformal model in an export (``calengine export --sets``): SQL and ONNX.

A model's conformal layer (:mod:`calengine.model.conformal`) turns its class probabilities ``p`` into
the set ``{c : V(x, c) <= t_c}``.  Exported here, on top of the probabilities the export already
computes (:mod:`.sql`, :mod:`.onnx`), for the rules that depend on the probabilities alone:

* ``lac``: ``V(x, c) = 1 - p_c``, written as ``(1.0 - p_c) <= t`` -- the same double subtraction and
  comparison as ``calengine score --sets``, so the sets are identical wherever the probabilities are;
* ``topk``: ``V(x, c) = #{j : p_j > p_c}``, a sum of comparisons per class (k² of them);
* either of them marginal (one ``t``) or Mondrian by class (``t_c`` per class).

Outputs: SQL adds one boolean column ``in_<class>`` per class and ``set_size`` (the number of classes in
the set; NULL, like the probabilities, for a row the query refuses); ONNX adds ``in_set`` (``[N, k]``
bool, classes in the model's order) and ``set_size`` (``[N]`` int64, ``-1`` for a refused row whose
probabilities are NaN).

Refused in one line, naming what does score them (``calengine score --sets``, the MLflow export or
``calengine.arrow_udf``): the randomised and cumulative scores (``aps``, ``raps``: a sort of each row's
probabilities and, randomised, a hash of its encoded features), Mondrian by segment (the segment
columns' values) and weighted layers (each row's weight picks its threshold).
"""

from __future__ import annotations

from ..errors import ParameterError

__all__ = ["check_sets_exportable", "sets_sql", "sets_onnx", "EXPORTED_SCORES"]

#: the scores whose set rule SQL and ONNX express
EXPORTED_SCORES = ("lac", "topk")
_WHERE = "score it with calengine score --sets, --format mlflow or calengine.arrow_udf(MODEL)"


def check_sets_exportable(model, fmt: str):
    """The model's conformal layer, or one :class:`ParameterError` line: none, or a rule ``fmt`` cannot express."""
    layer = getattr(model, "conformal", None)
    if layer is None:
        raise ParameterError("--sets needs a model with a conformal layer; attach one with 'calengine conformal"
                             " MODEL_DIR DATA --target COL --alpha A --output NEW_DIR' and export that")
    if layer.score not in EXPORTED_SCORES:
        raise ParameterError(f"the set rule of score '{layer.score}' (a sort of each row's probabilities"
                             f"{', randomised by a hash of the row' if layer.randomized else ''}) has no {fmt} form"
                             f" ({fmt} expresses {', '.join(EXPORTED_SCORES)}); {_WHERE}")
    if layer.mondrian == "segments":
        raise ParameterError(f"a conformal layer Mondrian by segment ({','.join(layer.by)}) has no {fmt} form ({fmt}"
                             f" expresses marginal and per-class thresholds); {_WHERE}")
    if layer.weight is not None:
        raise ParameterError(f"a weighted conformal layer (its thresholds depend on each row's '{layer.weight}') has"
                             f" no {fmt} form; {_WHERE}")
    return layer


def _thresholds(layer, k: int) -> list[float]:
    t = layer.thresholds[:, 0]
    return [float(t[c]) for c in range(k)] if layer.mondrian == "class" else [float(t[0])] * k


def sets_sql(d, model, query: str) -> str:
    """``query`` (a :func:`calengine.export.sql.model_sql` text: one header comment line, then the
    ``SELECT`` returning ``p_<class>``) wrapped in a ``SELECT`` that adds ``in_<class>`` and ``set_size``."""
    from .sql import comment_line, data_names

    layer = check_sets_exportable(model, "SQL")
    classes = [str(c) for c in model.labels.classes]
    k = len(classes)
    header, body = query.split("\n", 1)
    p = [f"q.{d.ident(f'p_{c}')}" for c in classes]
    ts = _thresholds(layer, k)
    if layer.score == "lac":
        inside = [f"((1.0 - {p[c]}) <= {d.num(ts[c])})" for c in range(k)]
    else:
        inside = []
        for c in range(k):
            above = " + ".join(f"CAST({p[j]} > {p[c]} AS INTEGER)" for j in range(k) if j != c)
            inside.append(f"(({above}) <= {d.num(ts[c])})")
    cols = [f"{e} AS {d.ident(f'in_{c}')}" for e, c in zip(inside, classes)]
    size = " + ".join(f"CAST({e} AS INTEGER)" for e in inside)
    cols.append(f"({size}) AS {d.ident('set_size')}")
    outer = (f"calengine conformal set ({layer.score}, alpha {layer.alpha!r}"
             f"{', Mondrian by class' if layer.mondrian == 'class' else ''}) -> in_<class> and set_size for classes"
             f" {data_names(classes)}")
    # the inner text is kept byte for byte (no re-indenting): a quoted name may hold a line break
    return (f"{comment_line(outer)}{header}\nSELECT\n  q.*,\n  " + ",\n  ".join(cols)
            + f"\nFROM (\n{body.rstrip(chr(10))}\n) AS q\n")


def sets_onnx(g, model, probs: list[str]) -> list[tuple[str, str, list]]:
    """The outputs ``in_set`` ([N, k] bool) and ``set_size`` ([N] int64) from the class probability
    tensors ``probs`` (one [N] double tensor per class) of the graph ``g``."""
    from onnx import TensorProto

    layer = check_sets_exportable(model, "ONNX")
    k = len(probs)
    ts = _thresholds(layer, k)
    inside = []
    for c in range(k):
        if layer.score == "lac":
            v = g.sub(g.num(1.0), probs[c])
        else:
            v = _sum_of(g, [g.op("Cast", g.op("Greater", probs[j], probs[c]), to=TensorProto.DOUBLE)
                            for j in range(k) if j != c])
        inside.append(g.op("LessOrEqual", v, g.num(ts[c])))
    axis = g.const([1], dtype="int64")
    in_set = g.op("Concat", *[g.op("Unsqueeze", x, axis) for x in inside], axis=1)
    counts = [g.op("Cast", x, to=TensorProto.INT64) for x in inside]
    size = _sum_of(g, counts)
    size = g.where(g.op("IsNaN", probs[0]), g.const(-1, dtype="int64"), size)
    return [("in_set", in_set, ["N", k], TensorProto.BOOL), ("set_size", size, ["N"], TensorProto.INT64)]


def _sum_of(g, terms: list[str]) -> str:
    out = terms[0]
    for t in terms[1:]:
        out = g.op("Add", out, t)
    return out
