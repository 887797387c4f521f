"""Learners in SQL: a table's columns encoded as calengine encodes them, and linear learners on them.

What :func:`calengine.export.sql.model_sql` needs for a model whose learner calengine fitted (rather
than a score column):

* :func:`feature_exprs`: the :class:`calengine.plan.features.FeatureEncoder`'s columns, step by step
  as :meth:`~calengine.plan.features.FeatureEncoder.transform` makes them: a numeric column as DOUBLE
  with NULL, NaN and infinities replaced by its training median (and, where the model has one, the
  0/1 missing indicator); a categorical column one-hot over its kept categories, a missing value being
  the category ``<missing>`` and any other value the ``<other>`` column when the model has one (zeros
  otherwise).  Text columns (hashed bag of words) have no SQL form and are refused.
* :func:`learner_expr`: ``logistic_regression`` on two classes, stored dense: the standardised
  features' dot product with ``coef_`` plus ``intercept_`` (its probability is ``expit`` of that), summed in index order as
  :func:`calengine_builtins.learners._rowwise.row_matmul` sums, so the score is the learner's to the
  last bit where the engine's ``exp`` is the C library's.  Other learners are refused.

Why not more learners today: ``linear_svm`` and a logistic regression on several classes or sparse
input score through the stored scikit-learn Pipeline (their arrays are not exposed as
``logistic_regression``'s dense two-class ones are), and the naive Bayes learners' log-likelihood
sums would need their own order-faithful forms; each is one function here when added.
"""

from __future__ import annotations

import numpy as np

from ..errors import ParameterError

#: the learners whose scores SQL expresses (see :func:`learner_expr`)
SQL_LEARNERS = ("logistic_regression",)


def _text(d, value: str) -> str:
    """A string literal: quotes doubled (DuckDB, Postgres); Spark reads backslash escapes instead."""
    if d.name == "spark":
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return "'" + value.replace("'", "''") + "'"


def feature_exprs(d, encoder, other_formats: str) -> list[str]:
    """One DOUBLE expression per encoded feature, in the encoder's order, over the relation ``t``."""
    from ..plan.features import MISSING

    out: list[str] = []
    for c in encoder.columns_:
        col = f"t.{d.ident(c.name)}"
        if c.kind == "numeric":
            x = f"CAST({col} AS {d.double})"
            finite = f"({x} - {x}) = 0"  # false for NULL, NaN and infinities in every dialect
            out.append(f"CASE WHEN {finite} THEN {x} ELSE {d.num(c.fill)} END")
            if c.missing_indicator:
                out.append(f"CASE WHEN {finite} THEN {d.num(0.0)} ELSE {d.num(1.0)} END")
        elif c.kind == "categorical":
            text = f"COALESCE(CAST({col} AS {d.text}), {_text(d, MISSING)})"
            out += [f"CASE WHEN {text} = {_text(d, str(v))} THEN {d.num(1.0)} ELSE {d.num(0.0)} END" for v in c.categories]
            if c.other:
                kept = ", ".join(_text(d, str(v)) for v in c.categories) or _text(d, MISSING + MISSING)
                out.append(f"CASE WHEN {text} IN ({kept}) THEN {d.num(0.0)} ELSE {d.num(1.0)} END")
        else:
            raise ParameterError(f"column '{c.name}' is encoded as hashed text, which has no SQL form; score this"
                                 f" model with {other_formats}")
    return out


def learner_expr(d, learner, features: list[str], other_formats: str) -> str:
    """The learner's decision value on the encoded ``features`` (:func:`feature_exprs`, by reference);
    the caller applies calengine's ``expit`` to it (the learner's score is a probability)."""
    name = getattr(learner, "name", type(learner).__name__)
    arrays = learner._dense_arrays() if name == "logistic_regression" else None
    if arrays is None:
        why = ("a logistic regression on several classes or sparse features" if name == "logistic_regression"
               else f"learner '{name}'")
        raise ParameterError(f"{why} has no SQL form (SQL expresses {', '.join(SQL_LEARNERS)} on two classes and"
                             f" dense features, and models of score columns); score it with {other_formats}")
    mean, scale, coef, intercept = arrays
    if mean.shape[0] != len(features):
        raise ParameterError(f"learner '{name}' reads {mean.shape[0]} features but the encoder makes {len(features)};"
                             " the model is damaged, fit it again")
    terms = [f"(({x} - {d.num(mean[i])}) / {d.num(scale[i])}) * {d.num(coef[0, i])}" for i, x in enumerate(features)]
    return f"({' + '.join(terms) or d.num(0.0)}) + {d.num(intercept[0])}"
