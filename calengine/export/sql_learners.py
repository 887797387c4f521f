"""Learners in SQL: a table's columns encoded as calengine encodes them, and linear and Gaussian naive
Bayes learners on them.

What :func:`calengine.export.sql.model_sql` needs for a model whose learner calengine fitted (rather
than a score column):

* :func:`feature_exprs`: the :class:`calengine.plan.features.FeatureEncoder`'s columns, step by step
  as :meth:`~calengine.plan.features.FeatureEncoder.transform` makes them: a numeric column as DOUBLE
  with NULL, NaN and infinities replaced by its training median (and, where the model has one, the
  0/1 missing indicator); a categorical column one-hot over its kept categories, a missing value being
  the category ``<missing>`` and any other value the ``<other>`` column when the model has one (zeros
  otherwise).  Text columns (hashed bag of words) have no SQL form and are refused.
* :func:`learner_expr`, on two classes and dense features: ``logistic_regression`` and ``linear_svm``
  (the standardised features' dot product with ``coef_`` plus ``intercept_``; the logistic regression's
  probability is ``expit`` of it, the SVM's margin is its score), summed in index order as
  :func:`calengine_builtins.learners._rowwise.row_matmul` sums; ``gaussian_nb`` (each class's joint
  log-likelihood summed over features in order, then the max-shifted log-sum-exp of
  :func:`~calengine_builtins.learners._rowwise.normalise_log`); ``bernoulli_nb`` and ``multinomial_nb``
  (their Pipeline's scaler, Bernoulli's binarising, the log-likelihoods as a dot product in order,
  then the same log-sum-exp).  So the score is the learner's to the
  last bit where the engine's ``exp`` and ``ln`` are the C library's.  Other learners are refused.

On k > 2 classes: ``logistic_regression`` (multinomial: the k logits' max-shifted softmax, as
:func:`~calengine_builtins.learners._rowwise.softmax`), ``linear_svm`` (its k one-vs-rest
margins) and the three naive Bayes (k joint log-likelihoods, then every class's
``exp(jll_i - logsumexp(jll))`` with the row's maximum subtracted first and the shifted
exponentials summed in class order, as ``normalise_log``).  Not expressed: sparse input (text columns).
"""

from __future__ import annotations

import numpy as np

from ..errors import ParameterError

#: exp() arguments are kept below this: exp(700) is finite in every engine (DuckDB raises on overflow),
#: and 1 / (1 + exp(700)) differs from calengine's 0 by 1e-304
EXP_CAP = 700.0


def expit(d, x: str) -> str:
    """calengine's ``expit`` in SQL: ``1 / (1 + exp(-x))`` (the exponent capped, see :data:`EXP_CAP`)."""
    return f"(1.0 / (1.0 + EXP(LEAST(-({x}), {d.num(EXP_CAP)}))))"


#: the learners whose scores SQL expresses (see :func:`learner_expr`)
SQL_LEARNERS = ("logistic_regression", "linear_svm", "gaussian_nb", "bernoulli_nb", "multinomial_nb")


def no_nul(text, what: str) -> str:
    """``text`` as a string for an identifier or literal: refused in one line if it holds a NUL character,
    which no dialect's quoting can hold (PostgreSQL refuses it anywhere in a query; DuckDB and Spark
    silently end the name there, so two names could become one)."""
    text = str(text)
    if "\x00" in text:
        raise ParameterError(f"{what} holds a NUL character, which SQL cannot hold: {text!r}; rename it in the data"
                             " before fitting, or score this model with calengine score, --format mlflow or"
                             " calengine.arrow_udf(MODEL)")
    return text


def _text(d, value: str) -> str:
    """A string literal: quotes doubled (DuckDB, Postgres); Spark reads backslash escapes instead.  A
    value with a NUL character is refused (:func:`no_nul`)."""
    value = no_nul(value, "a category")
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


def learner_params(learner, width: int, other_formats: str, fmt: str = "SQL") -> tuple[str, tuple]:
    """What a learner's score is made of, apart from any format: ``(form, params)`` with ``form``

    * ``"expit"``: a two-class ``logistic_regression``, ``expit`` of ``((x - mean) / scale) @ coef.T
      + intercept`` (``params = (mean, scale, coef, intercept)``, ``coef`` one row);
    * ``"margins"``: a ``linear_svm``'s margins, the same product (one row of ``coef`` per margin);
    * ``"softmax"``: a multinomial ``logistic_regression``, the product's max-shifted softmax;
    * ``"gaussian_nb"``: ``(theta, var, const)``, class ``i``'s joint log-likelihood
      ``const[i] - 0.5 * sum_j ((x_j - theta[i, j]) * (x_j - theta[i, j])) / var[i, j]``;
    * ``"discrete_nb"``: ``(scalers, binarize, W, c)``: the features through ``scalers`` (``("standard",
      mean, scale)``: ``(x - mean) / scale``; ``("minmax", scale, min)``: ``x * scale + min`` clipped to
      [0, 1]), binarised (``x > binarize``: 1, else 0) unless ``binarize`` is None, then ``x @ W.T + c``;

    the naive Bayes' log-likelihoods normalised by the max-shifted log-sum-exp.  The constants are
    computed here with the learner's own numpy expressions, so SQL and ONNX (which both render these
    forms) start from the learner's bits.  ``width`` is the number of encoded features; anything else
    is refused in one line naming ``fmt``."""
    name = getattr(learner, "name", type(learner).__name__)
    if name == "gaussian_nb":
        return "gaussian_nb", _gaussian_params(learner, width, other_formats)
    if name in ("bernoulli_nb", "multinomial_nb"):
        return "discrete_nb", _discrete_params(learner, name, width, other_formats, fmt)
    if name == "logistic_regression" and learner._dense_arrays() is None:
        arrays = _multinomial_arrays(learner)
        if arrays is not None:
            _check_width("the logistic_regression", arrays[0].shape[0], width)
            return "softmax", arrays
    arrays = _linear_arrays(learner, name)
    if arrays is None:
        why = f"a {name} on sparse features" if name in ("logistic_regression", "linear_svm") else f"learner '{name}'"
        raise ParameterError(f"{why} has no {fmt} form ({fmt} expresses {', '.join(SQL_LEARNERS)} on dense"
                             f" features, and models of score columns); score it with {other_formats}")
    _check_width(f"the {name}", arrays[0].shape[0], width)
    return ("margins" if name == "linear_svm" else "expit"), arrays


def learner_expr(d, learner, features: list[str], other_formats: str, tag: str = "") -> tuple[list, list[str]]:
    """The learner's score columns on the encoded ``features`` (:func:`feature_exprs`, by reference) as
    the calibrators read them: on two classes one column (``logistic_regression``'s and the naive
    Bayes' probability of the second class, ``linear_svm``'s margin), on k classes the k probabilities
    (multinomial logistic regression, naive Bayes) or ``linear_svm``'s k one-vs-rest margins.  Returns
    ``(pre, columns)``: ``pre`` are ``(name, expression)`` columns of an intermediate layer ``j`` (names
    prefixed with ``tag``) that the columns read as ``j.<name>``, so a value used several times is
    written once."""
    form, params = learner_params(learner, len(features), other_formats)
    if form == "gaussian_nb":
        return _gaussian_nb(d, params, features, tag)
    if form == "discrete_nb":
        return _discrete_nb(d, params, features, tag)
    if form == "softmax":
        return _softmax(d, features, params, tag)
    if form == "margins":  # one margin per class column (one-vs-rest on k > 2 classes)
        return [], [_dot(d, features, *params, i) for i in range(params[2].shape[0])]
    return [], [expit(d, _dot(d, features, *params, 0))]


def _dot(d, features: list[str], mean, scale, coef, intercept, i: int) -> str:
    """Row ``i`` of ``((x - mean) / scale) @ coef.T + intercept``, summed over features in order."""
    terms = [f"(({x} - {d.num(mean[j])}) / {d.num(scale[j])}) * {d.num(coef[i, j])}" for j, x in enumerate(features)]
    return f"({' + '.join(terms) or d.num(0.0)}) + {d.num(intercept[i])}"


def _multinomial_arrays(learner):
    """``(mean, scale, coef, intercept)`` of a dense logistic regression on k > 2 classes (``coef``
    ``(k, d)``), from its stored state; None for anything else."""
    arrays = [learner._stored(k) for k in ("scale__mean_", "scale__scale_", "logreg__coef_", "logreg__intercept_")]
    if not all(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in arrays):
        return None
    mean, scale, coef, intercept = arrays
    k, dims = coef.shape if coef.ndim == 2 else (0, -1)
    if k < 3 or mean.shape != (dims,) or scale.shape != (dims,) or intercept.shape != (k,):
        return None
    return mean, scale, coef, intercept


def _softmax(d, features: list[str], arrays, tag: str) -> tuple[list, list[str]]:
    """Class probabilities of a multinomial logistic regression as
    :func:`calengine_builtins.learners._rowwise.softmax` computes them: the logits (layer ``j``), their
    exponentials shifted by the row's maximum, divided by their sum in class order."""
    k = arrays[2].shape[0]
    pre = [(f"{tag}z{i}", _dot(d, features, *arrays, i)) for i in range(k)]
    z = [f"j.{d.ident(n)}" for n, _ in pre]
    e = [f"EXP({x} - GREATEST({', '.join(z)}))" for x in z]
    total = "(" + " + ".join(e) + ")"
    return pre, [f"{x} / {total}" for x in e]


def _check_width(name: str, width: int, features: int) -> None:
    if width != features:
        raise ParameterError(f"{name} reads {width} features but the encoder makes {features};"
                             " the model is damaged, fit it again")


def _linear_arrays(learner, name: str):
    """``(mean, scale, coef, intercept)`` of a dense linear learner, or None: a two-class
    ``logistic_regression``'s (``_dense_arrays``), a ``linear_svm``'s from its rebuilt Pipeline (a
    centring ``StandardScaler`` then ``LinearSVC``, ``coef`` one row per margin)."""
    if name == "logistic_regression":
        return learner._dense_arrays()
    if name != "linear_svm":
        return None
    steps = getattr(learner.estimator_, "steps", None)
    if not steps or len(steps) != 2:
        return None
    scaler, svm = steps[0][1], steps[1][1]
    mean, scale = getattr(scaler, "mean_", None), getattr(scaler, "scale_", None)
    if not (getattr(scaler, "with_mean", False) and getattr(scaler, "with_std", False)) or mean is None or scale is None:
        return None
    coef, intercept = np.asarray(svm.coef_, dtype=np.float64), np.asarray(svm.intercept_, dtype=np.float64)
    rows = coef.shape[0] if coef.ndim == 2 else 0
    if rows < 1 or coef.shape != (rows, mean.shape[0]) or intercept.shape != (rows,):
        return None
    return np.asarray(mean, dtype=np.float64), np.asarray(scale, dtype=np.float64), coef, intercept


def _gaussian_params(learner, width: int, other_formats: str) -> tuple:
    """``(theta, var, const)`` of a Gaussian naive Bayes, ``const = log prior - 0.5 * sum log(2 pi var)``
    with :meth:`GaussianNBLearner.score`'s numpy expression."""
    theta, var, prior = (learner._stored(k) for k in ("theta_", "var_", "class_prior_"))
    if theta is None or var is None or prior is None or np.asarray(theta).ndim != 2 or np.asarray(theta).shape[0] < 2:
        raise ParameterError(f"the gaussian_nb holds no fitted class means; the model is damaged, fit it again or score"
                             f" it with {other_formats}")
    theta, var = np.asarray(theta, dtype=np.float64), np.asarray(var, dtype=np.float64)
    _check_width("learner 'gaussian_nb'", theta.shape[1], width)
    const = np.log(np.asarray(prior, dtype=np.float64)) - 0.5 * np.log(2.0 * np.pi * var).sum(axis=1)
    return theta, var, const


def _discrete_params(learner, name: str, width: int, other_formats: str, fmt: str) -> tuple:
    """``(scalers, binarize, W, c)`` of a Bernoulli or multinomial naive Bayes as
    :func:`calengine_builtins.learners.naive_bayes._discrete_nb_score` scores: the Pipeline's scaler
    (Bernoulli: ``StandardScaler`` when standardised; multinomial: ``MinMaxScaler(clip=True)``),
    Bernoulli's binarising, ``W``/``c`` with the learner's numpy expressions."""
    est = learner.estimator_
    steps = getattr(est, "steps", None) or [("nb", est)]
    nb = steps[-1][1]
    flp, clp = np.asarray(nb.feature_log_prob_, dtype=np.float64), np.asarray(nb.class_log_prior_, dtype=np.float64)
    if flp.ndim != 2 or flp.shape[0] < 2 or clp.shape != (flp.shape[0],):
        raise ParameterError(f"the {name} holds no fitted class log-probabilities; the model is damaged, fit it again"
                             f" or score it with {other_formats}")
    _check_width(f"learner '{name}'", flp.shape[1], width)
    scalers = []
    for _, step in steps[:-1]:
        kind = type(step).__name__
        if kind == "StandardScaler" and step.with_mean and step.with_std:
            scalers.append(("standard", np.asarray(step.mean_, dtype=np.float64), np.asarray(step.scale_, dtype=np.float64)))
        elif kind == "MinMaxScaler" and step.clip and tuple(step.feature_range) == (0, 1):
            scalers.append(("minmax", np.asarray(step.scale_, dtype=np.float64), np.asarray(step.min_, dtype=np.float64)))
        else:
            raise ParameterError(f"a {name} scaled by {kind} (sparse features) has no {fmt} form; score it with {other_formats}")
    binarize = None
    if name == "bernoulli_nb":
        neg = np.log(1.0 - np.exp(flp))
        W, c = flp - neg, clp + neg.sum(axis=1)
        binarize = None if nb.binarize is None else float(nb.binarize)
    else:
        W, c = flp, clp
    return scalers, binarize, W, c


def _gaussian_nb(d, params, features: list[str], tag: str) -> tuple[list, list[str]]:
    """Gaussian naive Bayes (:func:`learner_params`): each class's log-likelihood summed over features
    in index order, as :meth:`GaussianNBLearner.score` sums them, then :func:`_normalised`."""
    theta, var, const = params
    jll = []
    for i in range(theta.shape[0]):
        terms = [f"((({x} - {d.num(theta[i, j])}) * ({x} - {d.num(theta[i, j])})) / {d.num(var[i, j])})"
                 for j, x in enumerate(features)]
        jll.append(f"{d.num(const[i])} - 0.5 * ({' + '.join(terms)})")
    return _normalised(d, jll, tag)


def _discrete_nb(d, params, features: list[str], tag: str) -> tuple[list, list[str]]:
    """Bernoulli or multinomial naive Bayes (:func:`learner_params`): scaled, binarised, ``x . W_i +
    c_i`` summed in index order, then :func:`_normalised`."""
    scalers, binarize, W, c = params
    xs = list(features)
    for kind, a, b in scalers:
        if kind == "standard":
            xs = [f"(({x} - {d.num(a[j])}) / {d.num(b[j])})" for j, x in enumerate(xs)]
        else:
            xs = [f"LEAST(GREATEST({x} * {d.num(a[j])} + {d.num(b[j])}, {d.num(0.0)}), {d.num(1.0)})" for j, x in enumerate(xs)]
    if binarize is not None:
        xs = [f"CASE WHEN {x} > {d.num(binarize)} THEN {d.num(1.0)} ELSE {d.num(0.0)} END" for x in xs]
    jll = [f"({' + '.join(f'{x} * {d.num(W[i, j])}' for j, x in enumerate(xs))}) + {d.num(c[i])}" for i in range(W.shape[0])]
    return _normalised(d, jll, tag)


def _normalised(d, jll: list[str], tag: str) -> tuple[list, list[str]]:
    """``exp(jll_i - logsumexp(jll))`` as :func:`~calengine_builtins.learners._rowwise.normalise_log`
    computes it: the row's maximum subtracted first, the shifted exponentials summed in class order
    (``row_sum``: left to right), ``ln`` of the sum plus the maximum.  The joint log-likelihoods are
    written once each in the layer ``j``; on two classes only the second class's probability is
    returned (the calibrators' one column), on k classes all k."""
    pre = [(f"{tag}jll{i}", e) for i, e in enumerate(jll)]
    js = [f"j.{d.ident(n)}" for n, _ in pre]
    top = f"GREATEST({', '.join(js)})"
    lse = f"(LN({' + '.join(f'EXP({x} - {top})' for x in js)}) + {top})"
    return pre, [f"EXP({x} - {lse})" for x in (js[1:] if len(js) == 2 else js)]
