"""The table as stored: Parquet files (local paths or fsspec URLs) listed, opened and cut into
fragments of row groups, with label spaces and atomic output.  It comes first because every later
stage works from the fragment descriptions made here, never from the table itself.

Modules:

* :mod:`.data`: Parquet in and out, class labels, and deterministic folds.
* :mod:`.dataset`: A Parquet table as the client sees it.
* :mod:`.published`: The record of the outputs this process has published.
* :mod:`.storage`: Where Parquet files live.
"""
