"""Plugins: entry points of group ``calengine`` discovered and loaded one at a time, the name -> class
registry over them, and every call into plugin code made safe.

Modules:

* :mod:`.calls`: Calling plugin code.
* :mod:`.loading`: Plugin discovery.
* :mod:`.registry`: Name -> class lookups over the loaded plugins.
"""

from __future__ import annotations

#: the names of :mod:`.loading` that ``calengine.plugins`` keeps answering to (it was one module before
#: the package): imported on first use, so importing a submodule (``calls``) does not load pluggy
_LOADING = ("STRICT_ENV", "KINDS", "PluginRecord", "Origin", "PluginSet", "is_strict", "load_plugins", "get_plugins",
            "reset_plugin_cache", "plugin_requirements", "installed_requirements", "model_requirements")
__all__ = list(_LOADING)


def __getattr__(name: str):
    if name in _LOADING:
        from . import loading

        return getattr(loading, name)
    raise AttributeError(f"module 'calengine.plugins' has no attribute {name!r}")
