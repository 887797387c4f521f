"""``python -m calengine.cli``, as before the CLI became a package (``python -m calengine`` is the same)."""

from . import entry

entry()
