"""``calengine.arrow_udf(MODEL)``: a model as a function of Arrow record batches.

For engines that call Python on Arrow batches (DuckDB's Arrow functions, Polars ``map_batches``,
Spark ``mapInArrow``).  The function returns a ``RecordBatch`` of ``p_<class>`` float64 columns, one
row per input row in input order, computed by the model's own scoring path
(:meth:`calengine.model.calibrated.CalibratedModel.scored_features`), so the probabilities are
``calengine score``'s bit for bit.  A row's probabilities never depend on the other rows of its batch.
The model is loaded once, with :func:`calengine.load_model` (model files are untrusted).
"""

from __future__ import annotations


def arrow_udf(model, trust=()):
    """A function ``RecordBatch -> RecordBatch`` of ``p_<class>`` columns for ``model`` (a saved model's
    directory, or a loaded model).  Bad batches raise :class:`calengine.errors.DataError`."""
    import numpy as np
    import pyarrow as pa

    if not hasattr(model, "scored_features"):
        from ..model.artifact import load_model

        model = load_model(model, trust=tuple(trust))
    names = [f"p_{c}" for c in model.labels.classes]

    def score_batch(batch) -> "pa.RecordBatch":
        if not isinstance(batch, pa.RecordBatch):
            from ..errors import DataError

            raise DataError(f"arrow_udf scores a pyarrow.RecordBatch, got {type(batch).__name__}; pass table.to_batches() one by one")
        X = model.encoder.transform_arrow(batch, order="F") if hasattr(model.encoder, "transform_arrow") else None
        if X is None:
            X = model.encoder.transform(batch.to_pandas(), order="F")
        P = model.scored_features(X)[0] if X.shape[0] else np.empty((0, len(names)))
        return pa.record_batch([pa.array(np.ascontiguousarray(P[:, i])) for i in range(len(names))], names=names)

    score_batch.__name__ = "calengine_score_batch"
    return score_batch
