"""Calibrated models outside calengine: as SQL (:mod:`.sql`), with a JSON manifest beside every export
naming the source model's content hash (:mod:`.manifest`)."""
