"""The whole contract between calengine and its plugins: three registration hooks.

Hooks only register.  Each is called once, in the client process, and hands over *classes*; all work
happens in methods of those classes, which are plain picklable objects that Dask tasks can carry.  A
task never calls ``pm.hook.*``.  Whatever those methods raise reaches the user as one line naming
the plugin and its distribution (:mod:`calengine.plugins.calls`); a class registered under a name
another plugin already took is a clash that ``calengine plugins`` shows and every other command refuses.

A plugin module implements any of the hooks::

    import calengine

    @calengine.hookimpl
    def register_learners(register):
        register(MyLearner)
"""

from __future__ import annotations

import pluggy

PROJECT = "calengine"
ENTRY_POINT_GROUP = "calengine"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_learners(register):
    """Call ``register(cls)`` for each :class:`calengine.base.Learner` subclass the plugin provides."""


@hookspec
def register_calibrators(register):
    """Call ``register(cls)`` for each :class:`calengine.base.Calibrator` subclass the plugin provides."""


@hookspec
def register_combiners(register):
    """Call ``register(cls)`` for each :class:`calengine.base.Combiner` subclass the plugin provides."""
