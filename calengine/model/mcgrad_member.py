"""Scoring a model multicalibrated by MCGrad (``calengine fit --method mcgrad --by COL[,COL...]``,
issue 25 §3; the algorithm is :mod:`calengine.methods.mcgrad`).

An MCGrad member is a base member (the fold's learner, or the score column, with the ``none``
calibrator: its own probability) plus the rounds fitted on that member's held-out probabilities:
per round one booster (XGBoost, or LightGBM with ``booster=lightgbm``) and its unshrink factor.  A row's probability is

    f ← logit(p_base);  for each round r:  f ← α_r · (f + Δ_r([x, f]));  p = sigmoid(f)

with ``x`` the row's segment codes (one categorical feature per ``--by`` column,
:func:`calengine.methods.mcgrad.segment_codes`).  How the segment reaches the member: the model's encoder
is a :class:`calengine.model.segmented.SegmentEncoder` whose keys are *every* segment seen at fit
time, so the appended column is the row's segment index; the member maps it to that segment's codes
over ``levels`` (a row with a missing ``--by`` value, or a combination of values not seen together at
fit time, has every code missing: each split's default branch, which is also where the fit sent rows
with a missing value).  Each row's probability depends on that row alone.

Storage, no pickles: each round's booster is a native XGBoost **JSON** file (``mcgrad_round_<r>.json``)
or LightGBM text model (``mcgrad_round_<r>.txt``) in the member's folder, listed and hashed in the
manifest like every model file, and checked by :func:`calengine.boosters.checks.validate_xgboost` /
``validate_lightgbm`` (tree structure, one feature per ``--by`` column plus the logit, two classes,
categorical splits only on the ``--by`` features and only over the codes of their ``levels``) before
the library parses it; the unshrink factors, ``levels`` and ``keys`` are
the member's JSON metadata (``booster``: the library; absent means XGBoost).  The member applies the boosters loaded from those JSON bytes, in memory
as after loading, so a saved model scores exactly as the fitted one (tests/fit/mcgrad/test_table.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .segmented import WrappedMember

__all__ = ["MCGradMember", "MEMBER_KIND", "categories_of"]

#: the manifest's member kind of an MCGrad model
MEMBER_KIND = "mcgrad"


def categories_of(levels: list[list[str]]) -> list[int | None]:
    """:func:`calengine.boosters.checks.validate_xgboost`'s ``categories`` of a round: each ``--by``
    column's number of values, then the numeric logit."""
    return [len(lv) for lv in levels] + [None]


def _round_name(r: int, suffix: str = "json") -> str:
    return f"mcgrad_round_{r}.{suffix}"


@dataclass
class MCGradMember(WrappedMember):
    """A base member (``base``) plus MCGrad's rounds: ``boosters`` (native JSON bytes), ``alphas`` (the
    unshrink factors), ``levels`` (the values of each ``--by`` column, in code order) and ``keys`` (the
    segments of the model's :class:`~calengine.model.segmented.SegmentEncoder`, in its order) and
    ``library`` (``xgboost`` or ``lightgbm``: :mod:`calengine.methods.mcgrad_boosters`)."""

    base: Any
    boosters: list[bytes]
    alphas: list[float]
    levels: list[list[str]]
    keys: list[tuple[str, ...]]
    library: str = "xgboost"
    _loaded: list = field(default=None, init=False, repr=False, compare=False)

    kind = MEMBER_KIND

    def __post_init__(self) -> None:
        from ..methods.mcgrad import segment_codes

        self.alphas = [float(a) for a in self.alphas]
        self.levels = [[str(v) for v in lv] for lv in self.levels]
        self.keys = [tuple(str(v) for v in k) for k in self.keys]
        if len(self.boosters) != len(self.alphas) or not all(math.isfinite(a) and a > 0 for a in self.alphas):
            raise ValueError(f"{len(self.boosters)} MCGrad boosters with {len(self.alphas)} positive finite factors")
        if any(len(k) != len(self.levels) for k in self.keys):
            raise ValueError("MCGrad segment keys do not match its --by columns")
        cols = [np.array([k[j] for k in self.keys], dtype=object) for j in range(len(self.levels))]
        # row j: the codes of key j; the last row (index -1): every code missing
        self._codes = np.full((len(self.keys) + 1, len(self.levels)), np.nan, dtype=np.float32)
        if self.keys:
            self._codes[:-1] = segment_codes(cols, self.levels)[0]

    def __getstate__(self):
        return {k: getattr(self, k) for k in ("base", "boosters", "alphas", "levels", "keys", "library")}

    def __setstate__(self, state):
        self.__init__(**state)

    @property
    def width(self) -> int:
        """The round boosters' segment features: one per ``--by`` column."""
        return self._codes.shape[1]

    # ------------------------------------------------------------------ storage
    def parts(self) -> dict[str, Any]:
        base = self.base.parts()
        from ..methods.mcgrad_boosters import library

        meta = {**base["meta"], "mcgrad": {"alphas": list(self.alphas), "levels": self.levels,
                                           "keys": [list(k) for k in self.keys], "rounds": len(self.boosters),
                                           "booster": self.library}}
        suffix = library(self.library).suffix
        files = {_round_name(r, suffix): bytes(b) for r, b in enumerate(self.boosters)}
        return {**base, "meta": meta, "files": files}

    @classmethod
    def from_parts(cls, learners, calibrators, arrays, meta, files=None) -> "MCGradMember":
        from ..methods.mcgrad_boosters import LIBRARIES
        from .calibrated import Member

        m = meta["mcgrad"]
        name = m.get("booster", "xgboost")
        if name not in LIBRARIES:
            raise ValueError(f"an MCGrad member's booster library is {str(name)[:40]!r}, not one of {', '.join(LIBRARIES)}")
        lib = LIBRARIES[name]
        rounds = int(m["rounds"])
        files = files or {}
        if rounds < 0 or sorted(files) != sorted(_round_name(r, lib.suffix) for r in range(rounds)):
            raise ValueError(f"an MCGrad member of {rounds} rounds needs the files {_round_name(0, lib.suffix)}, ...;"
                             f" the manifest lists {sorted(files)}")
        levels = [[str(v) for v in lv] for lv in m["levels"]]
        categories = categories_of(levels)
        boosters = []
        for r in range(rounds):
            blob = bytes(files[_round_name(r, lib.suffix)])
            lib.validate(blob, categories)  # before the library parses it
            boosters.append(blob)
        _probe_in_child(boosters, len(categories), name)
        base = Member.from_parts(learners, calibrators, arrays, {k: v for k, v in meta.items() if k != "mcgrad"})
        return cls(base, boosters, m["alphas"], levels, [tuple(k) for k in m["keys"]], name)

    # ------------------------------------------------------------------ the member interface
    def _boosters(self) -> list:
        if self._loaded is None:
            from ..methods.mcgrad_boosters import library

            lib = library(self.library)
            self._loaded = [lib.load(blob) for blob in self.boosters]
        return self._loaded

    def column_probabilities(self, X, S: np.ndarray | None = None) -> np.ndarray:
        from ..methods.mcgrad import sigmoid, logit
        from ..methods.mcgrad_boosters import library
        from .segmented import split_features

        Xf, seg = split_features(X)
        S = self.base.scores(Xf) if S is None else S
        p = self.base.column_probabilities(None, S)[:, 0]
        seg = np.where((seg >= 0) & (seg < len(self.keys)), seg, -1)
        codes = self._codes[seg]
        f = logit(p)
        if f.size:
            for booster, alpha in zip(self._boosters(), self.alphas):
                f = alpha * (f + library(self.library).delta(booster, codes, f))
        return sigmoid(f)[:, None]


def _probe_in_child(boosters: list[bytes], n_features: int, name: str) -> None:
    """The process that loads a model file loads and scores each round's booster in a child first, as
    every booster learner's file is (:func:`calengine.boosters.guard.probe_in_child`, once per content
    hash): what the Python checks cannot foresee ends in one ModelFormatError line, not in this process's
    death.  The probe runs with the learner class of the rounds' library ``name`` (the xgboost or
    lightgbm plugin's)."""
    if not boosters:
        return
    from ..boosters.guard import probe_in_child
    from ..errors import ModelFormatError, UnknownPluginError
    from ..plugins.registry import lookup

    try:
        cls = lookup("learners", name)
    except UnknownPluginError as exc:
        raise ModelFormatError(f"this model's MCGrad rounds are {name} boosters: {exc}") from None
    for blob in boosters:
        probe_in_child(cls, blob, n_features, 2)
