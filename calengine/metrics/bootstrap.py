"""Bootstrap bands for a calibration map: how well do the evaluated data pin down score -> probability?

What the band means.  A model's calibrator was fitted on its training folds; that fit's own sampling
error cannot be recovered from the evaluation data.  What the evaluation data *can* tell is the
calibration function of the learner's scores on the population they come from, and how precisely
``n`` rows determine it.  So the band is built by refitting the model's calibrator (same method and
parameters, a fresh instance: :func:`sklearn.base.clone`) on ``B`` bootstrap resamples of the
evaluated ``(score, label)`` pairs and taking pointwise percentiles of the refitted maps on a grid of
scores.  Reading it: where the model's own map leaves the band, the evaluation data disagree with it
(miscalibration on these data, or drift); a wide band says the data are too few to tell.

Resampling is the plain (nonparametric) bootstrap of rows.  It is deliberately *not* stratified by
class: fixing the class counts removes the variability of the base rate, and the band of a map with
an intercept then comes out too narrow (measured: a 90 % band of ``sigmoid`` covered the true map at
p = 1/2 in 45 % of 40 simulated data sets when stratified).  A resample holding a single class
cannot be fitted and is redrawn from the replicate's own random stream.  Known limits, said rather than hidden: the
percentile band is pointwise (not simultaneous), and for isotonic-type maps (``isotonic``,
``rocch``, ``venn_abers``) the bootstrap of the fit at a fixed score is not consistent (cube-root
asymptotics; Abrevaya & Huang 2005), so their bands are a rough guide to variability, narrower than a
correct interval would be near flat stretches.  For smooth parametric maps (``sigmoid``, ``beta``,
``temperature``) the percentile band has its usual asymptotic meaning.

Weights (``evaluate --bootstrap --weight COL``) are read as counts, as every metric reads them: a
resample draws rows with probability proportional to their weight, as many draws as the total weight
(at most :data:`BOOTSTRAP_MAX_ROWS`), so a row of weight 2 behaves as the row given twice.  With integer
weights the draws are positions in the table with each row repeated ``w`` times in place (bit for bit
the band of that repeated table, at the same seed); fractional weights draw uniform positions along
the cumulative weight.

Reproducibility: replicate ``r`` draws from ``SeedSequence(seed).spawn(B)[r]``, whatever task runs
it, so the band is identical for any number of tasks or workers.  With a Dask client the replicates
run as parallel tasks (:data:`REPLICATES_PER_TASK` each); without one, in this process.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import DataError, ParameterError

__all__ = [
    "bootstrap_band", "calibration_map_band", "table_calibration_map_band", "sample_table_scores", "band_json",
    "REPLICATES_PER_TASK", "BOOTSTRAP_MAX_ROWS", "GRID_POINTS",
]

#: replicates computed by one task (a fit takes milliseconds, so single-replicate tasks would be
#: dominated by scheduling overhead).
REPLICATES_PER_TASK = 25

#: at most this many evaluated rows are resampled (a seeded subsample beyond); the band then
#: describes data of this size, which the report says.
BOOTSTRAP_MAX_ROWS = 200_000

#: a resample holding one class cannot be fitted; it is redrawn (from the same stream) at most this often.
_MAX_REDRAWS = 100

#: the band is evaluated at up to this many score quantiles of the evaluated data.
GRID_POINTS = 101


def check_bootstrap_options(B, level) -> None:
    if isinstance(B, bool) or not isinstance(B, (int, np.integer)) or B < 2:
        raise ParameterError(f"the number of bootstrap replicates must be an integer of at least 2, got {B!r}")
    if not (isinstance(level, (int, float)) and 0.0 < level < 1.0):
        raise ParameterError(f"the band level must be a probability in (0, 1), got {level!r}; e.g. 0.9")


class Resampler:
    """Draws one bootstrap resample's row indices: ``n`` uniform rows, or with ``weights``, ``size``
    draws with probability proportional to the weight (positions along the cumulative weight, integer
    positions when every weight is an integer, so the repeated-rows table gives the same indices)."""

    def __init__(self, n: int, weights: np.ndarray | None = None):
        self.n = n
        self.cum = None if weights is None else np.cumsum(weights)
        if self.cum is None:
            self.size = n
            return
        total = float(self.cum[-1])
        self.integer = bool(np.all(weights == np.floor(weights))) and total <= 2.0**53
        self.total = total
        self.size = int(min(round(total), BOOTSTRAP_MAX_ROWS))
        if self.size < 2:
            raise DataError(f"the rows to resample weigh {total:g} in total; a bootstrap needs a total weight of at"
                            " least 2 (weights are counts)")

    def draw(self, rng) -> np.ndarray:
        if self.cum is None:
            return rng.integers(0, self.n, self.n)
        pos = rng.integers(0, int(self.total), self.size) if self.integer else rng.random(self.size) * self.total
        return np.minimum(np.searchsorted(self.cum, pos, side="right"), self.n - 1)


def _replicates(template, scores, y, grid, seeds, score_kind, weights=None) -> np.ndarray:
    """Refit a fresh copy of ``template`` on one bootstrap resample of the rows per seed (drawn in
    proportion to ``weights`` when given); maps on ``grid``."""
    from sklearn.base import clone

    sampler = Resampler(y.size, weights)
    out = np.empty((len(seeds), grid.size))
    for i, ss in enumerate(seeds):
        rng = np.random.default_rng(ss)
        for _ in range(_MAX_REDRAWS):
            idx = sampler.draw(rng)
            n_pos = int(np.count_nonzero(y[idx]))
            if 0 < n_pos < idx.size:
                break
        else:
            raise DataError(
                f"bootstrap resamples of these {y.size} rows keep holding one class only; evaluate on more rows"
            )
        cal = clone(template)
        cal.fit(scores[idx], y[idx], score_kind=score_kind)
        out[i] = cal.predict(grid)
    return out


def bootstrap_band(
    calibrator,
    scores,
    y,
    B: int = 200,
    *,
    seed: int = 0,
    level: float = 0.9,
    grid=None,
    score_kind: str = "decision",
    client=None,
    sample_weight=None,
) -> dict[str, Any]:
    """Pointwise percentile band of ``calibrator`` refitted on ``B`` bootstrap resamples.

    ``calibrator``: any :class:`calengine.base.Calibrator` (fitted or not; only its parameters are
    used).  ``scores``/``y``: the data to resample (``y`` 0/1, both classes present).  ``grid``: the
    scores to evaluate the maps at (default: :data:`GRID_POINTS` quantiles of ``scores``).  Returns
    ``{"grid", "low", "high", "median", "B", "level", "seed", "n"}`` (arrays over the grid; ``n`` the
    rows drawn per resample).  ``sample_weight``: non-negative row weights read as counts (rows drawn
    in proportion to them, as many as the total weight up to :data:`BOOTSTRAP_MAX_ROWS`; the result
    then also has ``"weight"``, the total).  With a Dask ``client`` the replicates run as tasks; the
    result is the same either way.
    """
    from ..reductions.pav import check_binary_data

    check_bootstrap_options(B, level)
    s, yi, w = check_binary_data(scores, y, sample_weight)
    w = None if sample_weight is None else w
    if grid is None:
        grid = np.unique(np.quantile(s, np.linspace(0.0, 1.0, GRID_POINTS)))
    grid = np.asarray(grid, dtype=np.float64)
    children = np.random.SeedSequence(int(seed)).spawn(int(B))
    chunks = [children[i : i + REPLICATES_PER_TASK] for i in range(0, int(B), REPLICATES_PER_TASK)]
    sampler = Resampler(yi.size, w)  # a total weight below 2 is refused here, before any task
    if client is None:
        parts = [_replicates(calibrator, s, yi, grid, c, score_kind, w) for c in chunks]
    else:
        data = client.scatter([s, yi, grid], broadcast=False)
        wf = None if w is None else client.scatter(w, broadcast=False)
        futures = [client.submit(_replicates, calibrator, *data, c, score_kind, wf, pure=False) for c in chunks]
        parts = client.gather(futures)
    maps = np.concatenate(parts, axis=0)
    alpha = (1.0 - level) / 2.0
    low, median, high = np.quantile(maps, [alpha, 0.5, 1.0 - alpha], axis=0)
    out = {"grid": grid, "low": low, "high": high, "median": median, "B": int(B), "level": float(level),
           "seed": int(seed), "n": int(sampler.size)}
    if w is not None:
        out["weight"] = sampler.total
    return out


def _band_calibrator(model):
    """The calibrator whose map the report draws (the first member's); ParameterError for models
    without one two-class calibrator."""
    if model.n_classes != 2:
        raise ParameterError(
            f"bootstrap draws bands for two-class models; this model has {model.n_classes} classes; drop bootstrap",
            parameter="bootstrap",
        )
    member = model.members[0]
    cals = getattr(member, "calibrators", None)
    if not cals or len(cals) != 1:
        raise ParameterError(
            "bootstrap needs a model with one calibrator per member (not Probing or bagging); drop bootstrap",
            parameter="bootstrap",
        )
    return member, cals[0], getattr(cals[0], "score_kind_", member.raw.score_kind)


def _band_of(model, S, y, B, seed, level, client, weights=None) -> dict[str, Any]:
    _, cal, kind = _band_calibrator(model)
    band = bootstrap_band(cal, S, y, B, seed=seed, level=level, score_kind=kind, client=client, sample_weight=weights)
    band["model_map"] = np.clip(np.asarray(cal.predict(band["grid"]), dtype=np.float64), 0.0, 1.0)
    return band


def calibration_map_band(model, df, target: str, B: int, *, seed: int = 0, level: float = 0.9,
                         client=None) -> dict[str, Any]:
    """:func:`bootstrap_band` for the map the report draws: the first member's calibrator on its scores.

    ``df``: the evaluated table (pandas, with the model's input columns and ``target``).  Two-class
    models only (one calibrator column, labelled by the positive class).  Rows with a missing target
    are dropped; beyond :data:`BOOTSTRAP_MAX_ROWS` rows a seeded subsample is used.  For a Parquet
    table of any size use :func:`table_calibration_map_band`, which never holds the table.
    """
    member, _, _ = _band_calibrator(model)
    if target not in df.columns:
        raise DataError(f"target column '{target}' is not in the evaluated table; pass the class column as target",
                        parameter="target")
    df = df[df[target].notna()]
    if len(df) > BOOTSTRAP_MAX_ROWS:
        df = df.sample(BOOTSTRAP_MAX_ROWS, random_state=seed)
    y = (model.labels.encode(df[target]) == 1).astype(np.int64)
    S = member.scores(model.encoder.transform(df))[:, 0]
    return _band_of(model, S, y, B, seed, level, client)


# ------------------------------------------------------------------------------ partition-native sample

#: stream of the per-row sampling keys (apart from the folds' and the replicates' streams).
_SAMPLE_STREAM = 0x42535450  # "BSTP"


def _bottom_k(keys: np.ndarray, S: np.ndarray, y: np.ndarray, k: int, w: np.ndarray | None = None):
    """The ``k`` rows with the smallest keys, in key order (ties by score, then label, then weight: any
    arrival order of the pieces gives the same arrays); ``w`` (row weights) travels with them."""
    order = np.lexsort((y, S, keys) if w is None else (w, y, S, keys))[:k]
    return keys[order], S[order], y[order], (None if w is None else w[order])


def _joined(a, b):
    return None if a is None else np.concatenate([a, b])


def chunk_score_sample(model, chunk, target: str, k: int, seed: int, batch_rows: int = 65536,
                       weight: str | None = None):
    """Task: ``(keys, scores, labels, weights)`` of the chunk's labelled rows with the ``k`` smallest
    seeded keys (``weights`` None without a ``weight`` column; with one, rows of weight 0 are left out
    and a bad weight is one line).

    A row's key is a uniform number from a stream seeded by ``seed``, the file's identity, the
    chunk's first row group and the batch, so the sample depends on the table and the seed only,
    not on workers or the order tasks finish.  Scores are the first member's calibrator inputs.
    """
    from ..parquet.dataset import file_key_hash
    from ..scores.table import batches, weight_column

    member, _, _ = _band_calibrator(model)
    lo, hi = file_key_hash(chunk.file_key)
    first = int(chunk.row_groups[0]) if chunk.row_groups else 0
    keys, S, Y = np.empty(0), np.empty(0), np.empty(0, dtype=np.int8)
    W = None if not weight else np.empty(0)
    columns = list(dict.fromkeys([*model.encoder.input_columns, target] + ([weight] if weight else [])))
    for b, df in enumerate(batches(chunk, columns, batch_rows)):
        ss = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, _SAMPLE_STREAM, lo, hi, first, b])
        u = np.random.default_rng(ss).random(len(df))
        w = weight_column(df, weight)
        present = df[target].notna().to_numpy()
        if w is not None:
            present = present & (w > 0)
        if not present.any():
            continue
        df, u = df[present], u[present]
        y = (model.labels.encode(df[target]) == 1).astype(np.int8)
        s = member.scores(model.encoder.transform(df))[:, 0]
        keys, S, Y, W = _bottom_k(np.concatenate([keys, u]), np.concatenate([S, s]), np.concatenate([Y, y]), k,
                                  None if w is None else np.concatenate([W, w[present]]))
    return keys, S, Y, W


def sample_table_scores(client, model, files: list[str], target: str, k: int = BOOTSTRAP_MAX_ROWS, *,
                        seed: int = 0, chunk_rows: int = 1_000_000, batch_rows: int = 65536,
                        weight: str | None = None):
    """A seeded uniform sample of at most ``k`` labelled rows of a Parquet table of any size, as
    ``(scores, labels)`` of the first member's calibrator: one task per chunk keeps its ``k`` smallest
    keys, and the client merges the pieces as they arrive, holding at most ``2k`` rows.  With a
    ``weight`` column, ``(scores, labels, weights)`` of a uniform sample of the rows of positive weight
    (the bootstrap then draws from it in proportion to the weights)."""
    from ..runtime.thread_client import as_completed
    from ..parquet.data import check_columns
    from ..scores.table import plan_chunks, share_model

    columns = list(dict.fromkeys([*model.encoder.input_columns, target] + ([weight] if weight else [])))
    check_columns(files, columns)
    chunks = [c for c in plan_chunks(files, columns, chunk_rows) if c.n_rows > 0]
    model_f = share_model(client, model)
    futures = [client.submit(chunk_score_sample, model_f, c, target, k, seed, batch_rows, weight, pure=False)
               for c in chunks]
    pending = as_completed(client, futures)
    del futures  # only the pieces not merged yet stay referenced (and held by the workers)
    keys, S, Y = np.empty(0), np.empty(0), np.empty(0, dtype=np.int8)
    W = None if not weight else np.empty(0)
    for future in pending:
        kk, ss, yy, ww = future.result()
        del future
        keys, S, Y, W = _bottom_k(np.concatenate([keys, kk]), np.concatenate([S, ss]), np.concatenate([Y, yy]), k,
                                  _joined(W, ww))
    return (S, Y.astype(np.int64)) if W is None else (S, Y.astype(np.int64), W)


def table_calibration_map_band(client, model, files: list[str], target: str, B: int, *, seed: int = 0,
                               level: float = 0.9, max_rows: int = BOOTSTRAP_MAX_ROWS,
                               weight: str | None = None) -> dict[str, Any]:
    """:func:`calibration_map_band` for a Parquet table of any size (``evaluate --bootstrap``): the
    scores of a seeded sample of at most ``max_rows`` rows (:func:`sample_table_scores`), computed
    where the data are, then ``B`` refits as parallel tasks; with ``weight``, resamples drawn in
    proportion to that column (:func:`bootstrap_band`'s ``sample_weight``)."""
    _band_calibrator(model)
    S, y, *w = sample_table_scores(client, model, files, target, max_rows, seed=seed, weight=weight)
    if S.size == 0:
        raise DataError("the evaluated table has no labelled rows to resample; check target"
                        + (f" (or give rows a positive weight in '{weight}')" if weight else ""),
                        parameter=("target", "weight"))
    return _band_of(model, S, y, B, seed, level, client, w[0] if w else None)


def band_json(band: dict[str, Any]) -> dict[str, Any]:
    """A band as JSON (``evaluate --json``'s ``calibration_band``): the grid of scores and the band's
    low/median/high map values at each as lists, with B, level, seed and the number of rows
    resampled (what a caller needs to redraw or compare it)."""
    return {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in band.items()}
