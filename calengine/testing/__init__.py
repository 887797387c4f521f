"""The kit for plugin authors: conformance checks to run in a plugin's own test suite, helpers for
tests on real Dask clusters, and the scikit-learn checks :class:`calengine.CalibratedClassifier`
fails by design.

Modules:

* :mod:`.checks`: Conformance checks for plugin authors.
* :mod:`.cluster`: Test helpers for plugins that run on real Dask clusters.
* :mod:`.declared`: The scikit-learn checks :class:`calengine.CalibratedClassifier` fails by design, per
  configuration, each with the reason (``parametrize_with_checks(...,
  expected_failed_checks=expected_failed_checks)``).
"""

from __future__ import annotations

from .checks import (  # noqa: F401  (the kit's public names: ``from calengine.testing import check_learner``)
    check_calibrator,
    check_combiner,
    check_learner,
    check_learner_stats,
    check_plugin_module,
    make_data,
    rewrite_manifest,
)

__all__ = ["check_learner", "check_learner_stats", "check_calibrator", "check_combiner", "check_plugin_module",
           "make_data", "rewrite_manifest"]
