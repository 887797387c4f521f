"""The package version and the model artifact's format version (no imports: anything may import this)."""

__version__ = "0.1.0"

#: artifact format; a model whose major format differs from this one is refused on load.
MODEL_FORMAT_VERSION = "2.0"
