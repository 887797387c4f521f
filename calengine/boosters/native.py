"""Probing a booster file with the native library alone: what the probing child of
:mod:`calengine.boosters.guard` runs for XGBoost and LightGBM files.

The probe exists to meet, in a throw-away process, whatever crash or hang the Python checks of
:mod:`calengine.boosters.checks` did not foresee: it must run the library's own native loader and
predictor on the file, and nothing else.  Importing the ``xgboost`` or ``lightgbm`` Python packages for
that cost seconds per process (they import scikit-learn, scipy, pandas), four times the ``score`` of a
small table; the shared library itself opens in milliseconds.  So these functions find the shared
library where the package installed it (without importing the package), open it with :mod:`ctypes`,
and call the same C entry points the Python packages call to load and predict:

* XGBoost: ``XGBoosterLoadModelFromBuffer`` (``Booster.load_model``) and ``XGBoosterPredictFromDense``
  (``Booster.inplace_predict``, what calengine-xgboost scores with);
* LightGBM: ``LGBM_BoosterLoadModelFromString`` (``Booster(model_str=...)``) and
  ``LGBM_BoosterPredictForMat`` (``Booster.predict`` on a dense array).

Each ``probe_*`` takes ``(blob, n_features, n_classes)`` and returns ``None`` (loaded, and the probe rows' outputs
are finite probabilities) or a one-line refusal; :class:`NativeLibraryMissing` means the shared library
is not where the package puts it (a conda build, a source install): the child then probes through the
plugin's Python class instead.  Standard library only, so the child starts in a fraction of a second.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import math
import random
import sys
from pathlib import Path

#: the shared library's file name per platform, as each package ships it
_XGB_NAMES = {"linux": "libxgboost.so", "darwin": "libxgboost.dylib", "win32": "xgboost.dll"}
_LGB_NAMES = {"linux": "lib_lightgbm.so", "darwin": "lib_lightgbm.dylib", "win32": "lib_lightgbm.dll"}


class NativeLibraryMissing(LookupError):
    """The package's shared library is not where a wheel installs it."""


def _platform() -> str:
    return "linux" if sys.platform.startswith("linux") else sys.platform


def find_library(package: str, names: dict[str, str]) -> Path:
    """The shared library of ``package`` (``<package dir>/lib/<name>`` as its wheels install it, else
    ``<prefix>/lib/<name>``), found without importing the package."""
    name = names.get(_platform())
    spec = importlib.util.find_spec(package)
    if name is None or spec is None:
        raise NativeLibraryMissing(package)
    places = [Path(d) / "lib" for d in (spec.submodule_search_locations or [])]
    places += [Path(d) for d in (spec.submodule_search_locations or [])]
    places += [Path(sys.prefix) / "lib", Path(sys.base_prefix) / "lib"]
    for place in places:
        if (place / name).is_file():
            return place / name
    raise NativeLibraryMissing(package)


def probe_rows(n_features: int) -> list[list[float]]:
    """The rows a probe scores: all zeros, all ones, all missing (NaN: the default branches), and six
    rows of large values of both signs (deterministic)."""
    rng = random.Random(0)
    rows = [[0.0] * n_features, [1.0] * n_features, [math.nan] * n_features]
    rows += [[rng.gauss(0.0, 1e3) for _ in range(n_features)] for _ in range(6)]
    return rows


def _dense(rows: list[list[float]]):
    flat = [v for row in rows for v in row]
    return (ctypes.c_double * len(flat))(*flat)


class NativeRefusal(Exception):
    """The native library refused a booster or its scoring; the message is the one line to show."""


def _check_outputs(values: list[float], expected: int, title: str) -> str | None:
    if len(values) != expected:
        return (f"the {title} booster gives {len(values)} outputs for {expected} expected; the model is damaged:"
                " fit it again")
    if not all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in values):
        return (f"the {title} booster gives probabilities that are not finite values in [0, 1]; the model is"
                " damaged: fit it again")
    return None


def _refusal(title: str, what: str, message: bytes | None) -> NativeRefusal:
    said = " ".join((message or b"").decode("utf-8", "replace").split())[:200]
    return NativeRefusal(f"the {title} booster cannot be {what} ({said or 'no reason given'}); the model is damaged:"
                         " fit it again")


def predict_xgboost(blob: bytes, rows: list[list[float]], n_features: int) -> list[float]:
    """libxgboost's predictions for ``rows`` (``n_features`` values each, NaN missing) by the booster in
    ``blob``, flattened: ``Booster.load_model`` then ``Booster.inplace_predict`` without the package.
    :class:`NativeRefusal` when the library refuses."""
    lib = ctypes.CDLL(str(find_library("xgboost", _XGB_NAMES)))
    lib.XGBGetLastError.restype = ctypes.c_char_p
    handle = ctypes.c_void_p()
    if lib.XGBoosterCreate(None, ctypes.c_uint64(0), ctypes.byref(handle)) != 0:
        raise _refusal("XGBoost", "created", lib.XGBGetLastError())
    try:
        buf = ctypes.create_string_buffer(bytes(blob), len(blob))
        if lib.XGBoosterLoadModelFromBuffer(handle, buf, ctypes.c_uint64(len(blob))) != 0:
            raise _refusal("XGBoost", "read", lib.XGBGetLastError())
        lib.XGBoosterSetParam(handle, b"nthread", b"1")
        data = _dense(rows)
        interface = json.dumps({"data": [ctypes.addressof(data), True], "shape": [len(rows), n_features],
                                "strides": None, "typestr": "<f8", "version": 3}).encode()
        config = json.dumps({"type": 0, "training": False, "iteration_begin": 0, "iteration_end": 0,
                             "strict_shape": False, "cache_id": 0, "missing": math.nan}).encode()
        shape, dim, result = ctypes.POINTER(ctypes.c_uint64)(), ctypes.c_uint64(), ctypes.POINTER(ctypes.c_float)()
        if lib.XGBoosterPredictFromDense(handle, interface, config, None, ctypes.byref(shape), ctypes.byref(dim),
                                         ctypes.byref(result)) != 0:
            raise _refusal("XGBoost", "scored", lib.XGBGetLastError())
        size = math.prod(shape[i] for i in range(dim.value))
        if size > len(rows) * (1 << 16):
            raise NativeRefusal(f"the XGBoost booster gives {size} outputs for {len(rows)} rows; the model is damaged:"
                                " fit it again")
        return [float(result[i]) for i in range(size)]
    finally:
        lib.XGBoosterFree(handle)


def _probe(predict, title: str, blob: bytes, n_features: int, n_classes: int) -> str | None:
    rows = probe_rows(n_features)
    try:
        out = predict(blob, rows, n_features)
    except NativeRefusal as exc:
        return str(exc)
    return _check_outputs(out, len(rows) * (n_classes if n_classes > 2 else 1), title)


def probe_xgboost(blob: bytes, n_features: int, n_classes: int) -> str | None:
    """Load ``blob`` with libxgboost and predict the probe rows, as calengine-xgboost does."""
    return _probe(predict_xgboost, "XGBoost", blob, n_features, n_classes)


def predict_lightgbm(blob: bytes, rows: list[list[float]], n_features: int) -> list[float]:
    """lib_lightgbm's predictions for ``rows`` by the text model in ``blob``, flattened:
    ``Booster(model_str=...)`` then ``Booster.predict`` without the package.  :class:`NativeRefusal`
    when the library refuses."""
    lib = ctypes.CDLL(str(find_library("lightgbm", _LGB_NAMES)))
    lib.LGBM_GetLastError.restype = ctypes.c_char_p
    handle, iterations = ctypes.c_void_p(), ctypes.c_int()
    if b"\0" in blob:
        raise _refusal("LightGBM", "read", b"it holds a NUL byte")
    if lib.LGBM_BoosterLoadModelFromString(ctypes.c_char_p(bytes(blob)), ctypes.byref(iterations),
                                           ctypes.byref(handle)) != 0:
        raise _refusal("LightGBM", "read", lib.LGBM_GetLastError())
    try:
        classes = ctypes.c_int()
        if lib.LGBM_BoosterGetNumClasses(handle, ctypes.byref(classes)) != 0:
            raise _refusal("LightGBM", "read", lib.LGBM_GetLastError())
        if not 1 <= classes.value <= 1 << 16:
            raise NativeRefusal(f"the LightGBM booster declares {classes.value} classes; the model is damaged: fit it again")
        out_len = ctypes.c_int64()
        result = (ctypes.c_double * (len(rows) * classes.value))()
        dtype_float64, row_major, predict_normal, all_iterations = 1, 1, 0, -1
        if lib.LGBM_BoosterPredictForMat(handle, _dense(rows), ctypes.c_int(dtype_float64), ctypes.c_int32(len(rows)),
                                         ctypes.c_int32(n_features), ctypes.c_int(row_major), ctypes.c_int(predict_normal),
                                         ctypes.c_int(0), ctypes.c_int(all_iterations), b"num_threads=1",
                                         ctypes.byref(out_len), result) != 0:
            raise _refusal("LightGBM", "scored", lib.LGBM_GetLastError())
        return list(result)[: out_len.value]
    finally:
        lib.LGBM_BoosterFree(handle)


def probe_lightgbm(blob: bytes, n_features: int, n_classes: int) -> str | None:
    """Load ``blob`` with lib_lightgbm and predict the probe rows, as calengine-lightgbm does."""
    return _probe(predict_lightgbm, "LightGBM", blob, n_features, n_classes)
