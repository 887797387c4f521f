"""Calibrated models outside calengine: as SQL (:mod:`.sql`), as an MLflow model (:mod:`.mlflow`), as a
function of Arrow batches (:mod:`.arrow`), with a JSON manifest beside every written export naming the
source model's content hash (:mod:`.write`)."""
