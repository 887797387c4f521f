"""The table as stored: Parquet files (local paths or fsspec URLs) listed, opened and cut into
fragments of row groups, with label spaces and atomic output.  It comes first because every later
stage works from the fragment descriptions made here, never from the table itself.
"""
