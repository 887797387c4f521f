"""A model's posteriors on the chunks of a table, kept on the workers, and the reductions over them.

``calengine adapt`` (:mod:`calengine.fit.label_shift`) and ``evaluate --prior-shift``
(:mod:`calengine.metrics.prior_shift`) both score a table once with the parent model and then reduce
over the posteriors many times (every EM step of :mod:`calengine.methods.label_shift` is one reduction:
a task per block returns k fixed-point sums, the client adds them), so the blocks stay where they were
computed, 8 bytes per row and class.  Each block also keeps a seeded sample of its rows, so a bootstrap
can resample the table's rows without another pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DataError
from ..methods import label_shift as ls
from ..reductions.exact import fixed_sum, fixed_to_float
from ..reductions.tables import is_integral
from ..runtime.heap import trims_heap


@dataclass
class PosteriorBlock:
    """One fragment's posteriors under the parent model, how many rows it predicts as each class,
    (when the table carries the model's target column) how many rows hold each label, and (when
    asked for, see :func:`posterior_chunk`) the seeded sample of its rows the bootstrap resamples."""

    P: np.ndarray
    predicted: np.ndarray
    observed: np.ndarray | None = None
    #: ``(keys, P, weights)`` of the rows with the smallest seeded keys, in key order (``weights`` None
    #: without a weight column); None: not asked for
    sample: tuple | None = None
    #: the rows' weights (float64, one per row of ``P``), None without a weight column
    weights: np.ndarray | None = None


#: stream of the prior-shift bootstrap's per-row sampling keys (apart from the calibration band's,
#: :mod:`calengine.metrics.bootstrap`, so the two samples of one evaluation are independent)
_SAMPLE_STREAM = 0x50534854  # "PSHT"


def bottom_rows(keys: np.ndarray, P: np.ndarray, k: int, w: np.ndarray | None = None) -> tuple:
    """``(keys, P, w)`` of the ``k`` rows with the smallest keys, in key order (ties by the
    probabilities, then the weights: any arrival order of the pieces gives the same arrays)."""
    order = np.lexsort(((() if w is None else (w,)) + (*P.T[::-1], keys)))[:k]
    return keys[order], P[order], None if w is None else w[order]


@trims_heap
def posterior_chunk(model, chunk, batch_rows: int, target: str | None = None,
                    sample: tuple[int, int] | None = None, weight: str | None = None) -> PosteriorBlock:
    """The parent model's class probabilities of a fragment's rows (runs in tasks).  ``target``: the
    model's target column, present in this table: its labels are counted (never used by the
    estimates), and a label the model never saw is one line.  ``sample = (k, seed)``: also keep the
    ``k`` rows with the smallest uniform keys, drawn from a stream seeded by ``seed``, the file's
    identity, the chunk's first row group and the batch (the scheme of
    :func:`calengine.metrics.bootstrap.chunk_score_sample`): a seeded uniform sample of the table that
    depends on the table and the seed only, never on workers or task order.  ``weight``: a column of
    row weights (counts): the label and prediction counts become weight totals, the block keeps the
    weights for the EM, and the sample holds rows of positive weight with their weights (a bad
    weight is one line)."""
    from ..scores.table import batches, weight_column

    k = model.n_classes
    parts, wparts = [], []
    observed = np.zeros(k, dtype=np.float64 if weight else np.int64) if target else None
    keys, kept, kept_w = np.empty(0), np.empty((0, k)), (np.empty(0) if weight else None)
    if sample is not None:
        from ..parquet.dataset import file_key_hash

        lo, hi = file_key_hash(chunk.file_key)
        first = int(chunk.row_groups[0]) if chunk.row_groups else 0
    columns = list(dict.fromkeys(list(model.encoder.input_columns) + ([target] if target else [])
                                 + ([weight] if weight else [])))
    for b, df in enumerate(batches(chunk, columns, batch_rows)):
        if not len(df):
            continue
        w = weight_column(df, weight)
        if target:
            present = df[target].notna().to_numpy()
            labels = _known_labels(model, df[target][present])
            observed += (np.bincount(labels, minlength=k) if w is None
                         else np.bincount(labels, weights=w[present], minlength=k))
        P = model.predict_proba_features(model.encoder.transform(df, order="F"))
        parts.append(P)
        if w is not None:
            wparts.append(w)
        if sample is not None:
            ss = np.random.SeedSequence([int(sample[1]) & 0xFFFFFFFF, _SAMPLE_STREAM, lo, hi, first, b])
            u = np.random.default_rng(ss).random(len(df))
            if w is None:
                keys, kept, _ = bottom_rows(np.concatenate([keys, u]), np.concatenate([kept, P]), int(sample[0]))
            else:
                pos = w > 0
                keys, kept, kept_w = bottom_rows(np.concatenate([keys, u[pos]]), np.concatenate([kept, P[pos]]),
                                                  int(sample[0]), np.concatenate([kept_w, w[pos]]))
    P = np.concatenate(parts) if parts else np.empty((0, k))
    W = (np.concatenate(wparts) if wparts else np.empty(0)) if weight else None
    predicted = np.argmax(P, axis=1)
    return PosteriorBlock(P, (np.bincount(predicted, minlength=k).astype(np.int64) if W is None
                              else np.bincount(predicted, weights=W, minlength=k)), observed,
                          None if sample is None else (keys, kept, kept_w), W)


def _known_labels(model, labels):
    """Class indices of ``labels`` (no missing values); a value the model never saw is one line saying
    so for ``adapt`` (matched as :meth:`LabelSpace.encode` matches: numbers as numbers, else text)."""
    try:
        return model.labels.encode(labels)
    except DataError:
        import pandas as pd

        for v in labels.unique():
            try:
                model.labels.encode(pd.Series([v], dtype=labels.dtype))
            except DataError:
                raise DataError(
                    f"column '{model.labels.target}' of the table to adapt to holds {str(v)!r}, a class the model was"
                    f" not trained on (classes: {', '.join(map(str, model.labels.classes))}); adapt estimates the"
                    " priors of the model's own classes: drop those rows, or fit a model that knows the class"
                ) from None
        raise


def block_rows(block: PosteriorBlock) -> tuple:
    """``(rows, predicted, observed, weights)``: ``weights`` None, or ``(total, largest, integral)`` of
    the block's weights (``total`` an int when ``integral``)."""
    w = block.weights
    if w is None:
        stats = None
    elif is_integral(w):
        c = w.astype(np.int64)
        stats = (int(c.sum()) if w.size * float(w.max(initial=0.0)) < 2.0**62 else sum(c.tolist()),
                 float(w.max(initial=0.0)), True)
    else:
        stats = (float(w.sum()), float(w.max(initial=0.0)), False)
    return int(block.P.shape[0]), block.predicted, block.observed, stats


def block_sample(block: PosteriorBlock) -> tuple:
    return block.sample


@dataclass
class Weights:
    """What the EM needs of a weight column over all blocks: the total weight (an int when every
    weight is an integer) and ``scale``: None for integer weights (each row's sums counted ``weight``
    times), else the largest weight, the scale fractional weighted sums are taken against."""

    total: float
    scale: float | None


def score_posteriors(client, model_f, chunks, batch_rows: int, target: str | None, progress,
                     sample: tuple[int, int] | None = None, weight: str | None = None):
    """Graph building: one :func:`posterior_chunk` task per chunk, whose blocks stay on the workers.
    Returns ``(blocks, n_rows, predicted, observed, weights)`` (``observed`` None without ``target``;
    ``weights`` a :class:`Weights`, None without ``weight``).  A fractional total is one more
    reduction, a fixed-point sum against the largest weight, so it is the same bits however the rows
    are cut (and the in-memory :func:`calengine.methods.label_shift.weight_terms`' total)."""
    from ..runtime.progress import gather_in_order

    blocks = [client.submit(posterior_chunk, model_f, c, batch_rows, target, sample, weight, pure=False)
              for c in chunks]
    sized = gather_in_order(client, [client.submit(block_rows, b, pure=False) for b in blocks], progress, "posteriors")
    n_rows = int(sum(s[0] for s in sized))
    predicted = np.sum([s[1] for s in sized], axis=0)
    observed = np.sum([s[2] for s in sized], axis=0) if target else None
    weights = None
    if weight:
        stats = [s[3] for s in sized]
        if all(integral for _, _, integral in stats):
            weights = Weights(sum(t for t, _, _ in stats), None)
        else:
            scale = max(m for _, m, _ in stats)
            sums = client.gather([client.submit(block_weight_sum, b, scale, pure=False) for b in blocks])
            weights = Weights(fixed_to_float(sum(sums), scale), scale)
    return blocks, n_rows, predicted, observed, weights


def block_weight_sum(block: PosteriorBlock, scale: float) -> int:
    """A fragment's total weight in fixed point against ``scale`` (runs in tasks)."""
    return fixed_sum(block.weights, scale)


def em_reduction(client, blocks, n_rows, train: np.ndarray, tol: float, max_iter: int,
                 weights: Weights | None = None) -> ls.EMResult:
    """Saerens et al.'s EM over the posterior ``blocks``: each step one reduction of fixed-point sums
    (weighted by the blocks' weights when ``weights`` is given, over their total weight)."""
    scale = None if weights is None else weights.scale

    def step(new):
        parts = client.gather([client.submit(block_em_sums, b, train, new, scale, pure=False) for b in blocks])
        return [sum(p[c] for p in parts) for c in range(len(new))]

    total = n_rows if weights is None else weights.total
    return ls.run_em(step, total, train, tol=tol, max_iter=max_iter, scale=1.0 if scale is None else scale)


def block_em_sums(block: PosteriorBlock, train: np.ndarray, new: np.ndarray, scale: float | None = None) -> list[int]:
    """A fragment's EM statistic (:func:`calengine.methods.label_shift.em_sums`); runs in tasks.
    A weighted block's weights are counts when ``scale`` is None (every weight of the table an
    integer), else summed against ``scale``."""
    if block.weights is None:
        return ls.em_sums(block.P, train, new)
    w = block.weights.astype(np.int64) if scale is None else block.weights
    return ls.em_sums(block.P, train, new, w, scale)


@trims_heap
def confusion_chunk(model, chunk, target: str, batch_rows: int) -> tuple[np.ndarray, int]:
    """``(joint, missing)``: counts of (predicted class, label) over a labelled fragment's rows, and
    the rows without a label (skipped).  A label the model does not know is one line."""
    from ..scores.table import batches

    k = model.n_classes
    joint = np.zeros((k, k), dtype=np.int64)
    missing = 0
    columns = sorted(set(model.encoder.input_columns) | {target})
    for df in batches(chunk, columns, batch_rows):
        present = df[target].notna().to_numpy()
        missing += int((~present).sum())
        df = df.loc[present]
        if not len(df):
            continue
        y = model.labels.encode(df[target])
        pred = np.argmax(model.predict_proba_features(model.encoder.transform(df, order="F")), axis=1)
        joint += np.bincount(pred * k + y, minlength=k * k).reshape(k, k)
    return joint, missing


def training_priors(model) -> tuple[np.ndarray | None, str]:
    """The priors ``model``'s probabilities are calibrated to, and where they come from; ``(None,
    reason)`` for a model that does not record its calibration class totals (see the module docstring)."""
    record = model.info.get("x_class_totals")
    if not isinstance(record, dict) or not isinstance(record.get("totals"), list):
        return None, "this model does not record its calibration class totals (it was fitted before they were)"
    totals = np.asarray(record["totals"], dtype=np.float64)
    if totals.shape != (model.n_classes,) or not np.all(np.isfinite(totals)) or np.any(totals <= 0):
        return None, "this model's calibration class totals are not one positive number per class"
    if model.class_rates is not None:
        totals = totals / model.class_rates
    return totals / totals.sum(), f"class totals of its {record.get('table', 'training')} table"
