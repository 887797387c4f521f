"""Calibrated models outside calengine: as SQL (:mod:`.sql`), as an MLflow model (:mod:`.mlflow`), as a
function of Arrow batches (:mod:`.arrow`), with a JSON manifest beside every written export naming the
source model's content hash (:mod:`.write`).

Modules:

* :mod:`.arrow`: ``calengine.arrow_udf(MODEL)``.
* :mod:`.mlflow`: A calibrated model as an MLflow model.
* :mod:`.onnx`: A calibrated model as an ONNX graph, for runtimes that score ONNX (onnxruntime, ONNX-serving
  stacks, ML.NET, ...).
* :mod:`.onnx_learners`: A model of a fitted learner as an ONNX graph.
* :mod:`.sql`: A calibrated model as one SQL ``SELECT``.
* :mod:`.sql_learners`: Learners in SQL.
* :mod:`.write`: Writing an export.
"""
