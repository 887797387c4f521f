"""Evaluation from grouped tables cut into score ranges (issue 22 §1).

The oracle is :class:`MetricAccumulator` on the whole table: the range-partitioned functions of
:mod:`calengine.metrics.ranged.core` must reproduce its results *bit for bit* for any partitioning of the
rows into chunks and any cut of the tables into ranges, and the thinned error-reject curve must be the
accumulator's full curve at the same points.
"""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calengine.metrics.measures import MetricAccumulator
from calengine.metrics.ranged.core import core_result, error_reject_at, error_reject_points, ranged_drift
from calengine.reductions.tables import cut_points, slice_range


def same(a, b, path="") -> None:
    """Exact equality of nested results (NaN equals NaN), naming the first difference."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for key in a:
            same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (list, tuple, np.ndarray)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, path
        assert a.dtype.kind == b.dtype.kind, path
        if a.dtype.kind == "f":
            assert np.array_equal(a, b, equal_nan=True), f"{path}: {a} != {b}"
        else:
            assert np.array_equal(a, b), path
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), f"{path}: {a} != {b}"
    else:
        assert a == b and type(a) is type(b), f"{path}: {a!r} != {b!r}"


def cut(table, boundaries):
    idx = cut_points(table, boundaries)
    return [slice_range(table, lo, hi) for lo, hi in zip(idx[:-1], idx[1:])]


@st.composite
def cases(draw):
    k = draw(st.integers(2, 4))
    n = draw(st.integers(1, 60))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    grid = draw(st.sampled_from([None, 3, 11]))  # None: continuous; else values on a coarse grid (ties)
    raw = rng.random((n, k)) if grid is None else rng.integers(0, grid, (n, k)) + 0.5
    if draw(st.booleans()):
        raw[:, 0] = 0.0  # zeros and ones in the table
    P = raw / raw.sum(axis=1, keepdims=True)
    y = rng.integers(0, k, n)
    weights = draw(st.sampled_from([None, "int", "float"]))
    w = None if weights is None else (rng.integers(0, 4, n) if weights == "int" else rng.random(n) * 3)
    if w is not None and not np.any(w > 0):
        w[0] = 1
    chunks = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    # range boundaries: strictly increasing values drawn from [0, 1], some at values of the table
    picks = draw(st.lists(st.one_of(st.floats(0, 1), st.integers(0, n * k - 1)), max_size=6))
    bounds = sorted({float(P.reshape(-1)[p]) if isinstance(p, int) else p for p in picks})
    return k, y, P, w, chunks, bounds


def accumulate(k, y, P, w, chunks):
    acc = MetricAccumulator(k)
    edges = [0, *chunks, len(y)]
    for lo, hi in zip(edges[:-1], edges[1:]):
        acc.merge(MetricAccumulator(k).add(y[lo:hi], P[lo:hi], None if w is None else w[lo:hi]))
    return acc


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_ranges_reproduce_the_accumulator_bit_for_bit(case):
    k, y, P, w, chunks, bounds = case
    acc = accumulate(k, y, P, w, chunks)
    whole = acc
    if w is None or w.dtype.kind != "f":
        # integer counts merge exactly: the partitioning changes nothing either (fractional weights are
        # added in chunk order, so there the oracle is the accumulator of the same chunks)
        whole = MetricAccumulator(k).add(y, P, w)
        same(whole.result(), acc.result())
    unit = acc._unit()
    cls = [cut(t, bounds) for t in acc._cls]
    top = cut(acc._top, bounds)
    same(whole.result(), core_result(cls, top, n=acc.n, unit=unit))
    same(whole.drift_check(0.01), ranged_drift(cls, 0.01, unit=unit))
    same(whole.error_reject_points(), error_reject_points(top, unit=unit))
    rates = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
    same(whole.error_reject_at(rates), error_reject_at(top, rates, unit=unit))


def integer_counted(case):
    """``(k, accumulator, class ranges, top-label ranges)`` of a case, its fractional weights made integers
    (the range builders answer the census for integer counts only)."""
    k, y, P, w, chunks, bounds = case
    if w is not None and w.dtype.kind == "f":
        w = np.rint(w) + 1
    acc = accumulate(k, y, P, w, chunks)
    return k, acc, [cut(t, bounds) for t in acc._cls], cut(acc._top, bounds)


def per_table(requests: dict, cls, top, fn) -> dict:
    """``fn(range, request)`` on every range of each table keyed in ``requests``, by table key."""
    return {key: [fn(r, req) for r in (top if key == ("top",) else cls[key[1]])] for key, req in requests.items()}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_suite_from_the_range_builders_census_reads_no_range_again_and_gives_the_same_bits(case):
    # evaluate runs the suite's first pass in the tasks that build the ranges (integer counts): the
    # suite given those answers must not run that pass again, and must print the same numbers
    from calengine.metrics.ranged import kernels
    from calengine.metrics.ranged.suite import calibration_suite, census_requests

    k, acc, cls, top = integer_counted(case)
    censuses = per_table(census_requests(k, None, float(acc.n)), cls, top, kernels.census)
    calls = []

    def mapper(fn, ranges, reqs):
        calls.extend([fn.__name__] * len(ranges))
        return [fn(r, q) for r, q in zip(ranges, reqs)]

    want = calibration_suite(cls, top, scale=float(acc.n))
    got = calibration_suite(cls, top, scale=float(acc.n), mapper=mapper, censuses=censuses)
    same(want, got)
    assert "census" not in calls and "sweep" in calls


def _histograms(answers) -> tuple:
    """The census answers' grid sums and logit-histogram rows of a table, added up bin by bin."""
    grid, logit = {}, {}
    for a in answers:
        for size, parts in (a.get("grid") or {}).items():
            for i, part in enumerate(parts):
                for b, x in enumerate(part):
                    grid[(size, i, b)] = grid.get((size, i, b), 0) + int(x)
        h = a.get("logit_hist") or {}
        for j in range(len(h.get("m", []))):
            row = [int(h[c][j]) for c in ("m", "a", "mx", "ax")]
            if any(row):
                logit[h["first"] + j] = [p + q for p, q in zip(logit.get(h["first"] + j, [0] * 4), row)]
    return grid, logit


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.data())
def test_census_answers_folded_as_they_arrive_give_the_suite_the_same_bits(case, data):
    # on a cluster the client folds each wave of census answers into the first answer's histograms
    # (range_eval.fold_census) instead of holding every range's: in any number of waves, the suite
    # must print the same numbers as from the answers unfolded, and only the first answer keeps them
    from calengine.metrics.ranged import kernels
    from calengine.metrics.ranged.engine import fold_census
    from calengine.metrics.ranged.suite import calibration_suite, census_requests

    k, acc, cls, top = integer_counted(case)
    censuses = per_table(census_requests(k, None, float(acc.n)), cls, top, kernels.census)
    folded = {}
    for key, answers in censuses.items():
        cuts = sorted(data.draw(st.lists(st.integers(0, len(answers)), max_size=3)))
        got: list = []
        for lo, hi in zip([0, *cuts], [*cuts, len(answers)]):
            got = fold_census(got + answers[lo:hi])
        assert len(got) == len(answers)
        assert not any("grid" in a or "logit_hist" in a for a in got[1:])
        assert _histograms(got) == _histograms(answers)
        folded[key] = got
    want = calibration_suite(cls, top, scale=float(acc.n), censuses=censuses)
    same(want, calibration_suite(cls, top, scale=float(acc.n), censuses=folded))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.data())
def test_grid_answers_folded_in_blocks_give_the_suite_the_same_bits(case, data):
    # on a cluster each kernel task adds its block's grid histograms into the block's first answer
    # (range_eval.fold_grids, in range_workers.run_kernels): the suite must print the same numbers for
    # any cut of the ranges into blocks, and the folded answers hold one histogram a block
    from calengine.metrics.ranged import kernels
    from calengine.metrics.ranged.engine import fold_grids
    from calengine.metrics.ranged.suite import calibration_suite

    k, acc, cls, top = integer_counted(case)
    grid_answers = []

    def folding(kernel, ranges, requests):
        answers = [kernel(r, q) for r, q in zip(ranges, requests)]
        if kernel is not kernels.grids:
            return answers
        cuts = sorted(data.draw(st.lists(st.integers(0, len(answers)), max_size=3)))
        out = [a for lo, hi in zip([0, *cuts], [*cuts, len(answers)]) for a in fold_grids(answers[lo:hi])]
        assert len(out) == len(answers)
        grid_answers.append(sum(1 for a in out if a) <= len(cuts) + 1)
        return out

    want = calibration_suite(cls, top, scale=float(acc.n))
    same(want, calibration_suite(cls, top, scale=float(acc.n), mapper=folding))
    assert all(grid_answers)
    # the sums themselves, for two grid sizes (the suite asks for a second grid only when its bandwidth
    # search needs one)
    answers = [kernels.grids(r, {"unit": None, "scale": float(acc.n), "sizes": [1001, 4001]}) for r in cls[1]]
    folded = folding(kernels.grids, cls[1], [{"unit": None, "scale": float(acc.n), "sizes": [1001, 4001]}] * len(cls[1]))
    for size in (1001, 4001):
        def total(outs):
            return [_sum_lists([o[size][i] for o in outs if size in o]) for i in range(3)]
        assert total(folded) == total(answers)


def _sum_lists(lists):
    return [sum(col) for col in zip(*lists)] if lists else []


class _InlineClient:
    """Runs each submitted task at once in this process, recording which kernel each mapped task ran."""

    def __init__(self):
        self.kernels = []

    def submit(self, fn, *args, pure=True, **kwargs):
        if fn.__name__ == "run_kernel":
            self.kernels.append(args[0].__name__)
        return fn(*args, **kwargs)

    def gather(self, futures):
        return futures


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_core_pieces_from_the_range_builders_read_each_tested_column_once_and_give_the_same_bits(case):
    # evaluate's range builders answer the census and the core metrics' range-local pieces (log loss,
    # Brier, Flach-Matsubara, CORP's PAV blocks, the top-label pieces); the tallies come from the census,
    # and the AUC's prefix pieces and the drift check's share one pass over each tested column
    from calengine.metrics.ranged import engine as range_eval

    k, acc, cls, top = integer_counted(case)
    built = per_table(range_eval.builder_requests(k, acc.n), cls, top, lambda r, req: range_eval._stored(r, None, req))
    client = _InlineClient()
    ranged = range_eval.RangedTables(client, k, acc.n, [[h for h, _ in built[("class", c)]] for c in range(k)],
                                     [h for h, _ in built[("top",)]],
                                     censuses={key: [a for _, a in pairs] for key, pairs in built.items()})
    same(acc.result(), ranged.result())
    same(acc.drift_check(0.01), ranged.drift_check(0.01))
    same(acc.drift_check(0.2), ranged.drift_check(0.2))
    tested = [1] if k == 2 else range(k)
    assert sorted(client.kernels) == ["column_prefix"] * sum(len(built[("class", c)]) for c in tested)
    same(acc.calibration_suite(), ranged.calibration_suite())
    assert "tally" not in client.kernels and "census" not in client.kernels


# class-1 values where 1 - v rounds (neighbours meeting on one class-0 value), 0.5 and its neighbours
_EDGE_VALUES = [0.0, 1.0, 0.5, 0.5 - 2**-54, 0.5 - 2**-55, 0.5 + 2**-53, 1e-17, 2e-17, 3e-17, 0.25, 0.75, 0.1, 0.9]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_EDGE_VALUES) | st.floats(0.0, 1.0), min_size=1, max_size=50), st.data())
def test_class_0_and_top_label_ranges_derived_from_class_1_ranges_are_the_tables_of_the_rows(p1, data):
    # a binary model with P[:, 0] == 1 - P[:, 1] keeps only class-1 ranges; each class-0 / top-label range
    # is read from slices of them: for any cut of the three tables the derived ranges must be the
    # accumulator's tables cut there (no value split across two ranges after mirroring), and the
    # metrics from them the accumulator's, bit for bit.  With the class-1 ranges in files (embedded)
    # nothing is written for a class-0 range: its handle names the class-1 files, and what the kernels
    # read of it (run_kernel, through the range cache) must be those same tables
    import tempfile

    from calengine.metrics.ranged import cache as range_cache

    on_disk = data.draw(st.booleans())
    with tempfile.TemporaryDirectory() as scratch:
        try:
            _derived_ranges_are_the_rows_tables(p1, data, scratch if on_disk else None)
        finally:
            range_cache.forget(scratch)


def _derived_ranges_are_the_rows_tables(p1, data, scratch):
    from calengine.metrics.ranged.engine import (
        forget_locators,
        load_table,
        _save,
        derive_range,
        derived_slices,
        run_kernel,
    )

    p1 = np.asarray(p1)
    n = p1.size
    y = np.asarray(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    acc = MetricAccumulator(2).add(y, np.column_stack((1.0 - p1, p1)))
    picks = st.sampled_from(_EDGE_VALUES) | st.sampled_from(sorted({*p1, *(1.0 - p1)})) | st.floats(0.0, 1.0)
    # cuts at class-1 values and at their mirrors: boundaries where 1 - v rounds onto a neighbour
    b1, b0, bt = (sorted({x for x in data.draw(st.lists(picks, max_size=5)) if x > 0.0}) for _ in range(3))
    edges1 = [None, *b1, None]
    tables1 = cut(acc._cls[1], b1)
    if scratch is None:
        ranges1 = [("mem", t) for t in tables1]
    else:
        ranges1 = [_save(t, os.path.join(scratch, f"c1-r{r}")) for r, t in enumerate(tables1)]
    derived = {}
    for which, bounds in (("class0", b0), ("top", bt)):
        edges = [None, *bounds, None]
        derived[which] = []
        for r, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
            plan = derived_slices(which, lo, hi, edges1)
            path = None if scratch is None else os.path.join(scratch, f"{which}-r{r}")
            handle, answer = derive_range(which, path, None, [ab for _, ab in plan], *[ranges1[r] for r, _ in plan])
            assert answer is None
            if scratch is None or not plan or which == "top":  # top-label ranges are written
                assert handle[0] == ("mem" if scratch is None else "disk")
                derived[which].append(load_table(handle))
                continue
            assert handle[0] == "derived" and not any(name.startswith(f"{which}-r{r}.") for name in os.listdir(scratch))
            table = run_kernel(lambda t, _request: tuple(np.array(x) for x in t), handle, None)
            for x, z in zip(table, load_table(handle)):
                assert x.dtype == z.dtype
                np.testing.assert_array_equal(x, z)
            derived[which].append(table)
    for got, want, bounds in ((derived["class0"], acc._cls[0], b0), (derived["top"], acc._top, bt)):
        for g, w in zip(got, cut(want, bounds)):
            for x, z in zip(g, w):
                assert x.dtype == z.dtype
                np.testing.assert_array_equal(x, z)
    if scratch is not None:
        forget_locators(ranges1)  # as evaluate_ranged does once the derived ranges are built
    cls = [derived["class0"], tables1]
    same(acc.result(), core_result(cls, derived["top"], n=acc.n, unit=None))


@settings(max_examples=40, deadline=None)
@given(cases())
def test_thinned_error_reject_curve_is_the_full_curve_at_its_points(case):
    k, y, P, w, _, _ = case
    if w is not None and w.dtype.kind == "f":
        # fractional weights: the full curve subtracts float totals (a last point may accept 1e-16 of a
        # row), the thinned one integer units; integer weights compare exactly
        w = np.rint(w) + 1
    acc = MetricAccumulator(k).add(y, P, w)
    full = acc.error_reject_curve()
    n = len(full["reject_rate"])
    idx = np.unique(np.linspace(0, n - 1, min(n, 101)).round().astype(int))
    thin = acc.error_reject_points()
    assert np.array_equal(thin["threshold"], full["threshold"][idx])
    np.testing.assert_allclose(thin["reject_rate"], full["reject_rate"][idx], rtol=1e-12, atol=0)
    np.testing.assert_allclose(thin["error_rate"], full["error_rate"][idx], rtol=1e-9, atol=1e-12, equal_nan=True)
    rates = (0.0, 0.1, 0.3, 0.5)
    for rate, got in zip(rates, acc.error_reject_at(rates)):
        ok = np.flatnonzero(full["reject_rate"] <= rate + 1e-12)
        want = float(full["error_rate"][ok[-1]]) if len(ok) else None
        if want is None or got is None:
            assert want is None and got is None
        else:
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12, nan_ok=True)


def test_core_metrics_match_scikit_learn_on_continuous_scores():
    """The fixed-point sums change nothing a user sees: the sums agree with scikit-learn's to 1e-12."""
    from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

    rng = np.random.default_rng(3)
    p = rng.random(5000)
    y = (rng.random(5000) < p).astype(int)
    res = MetricAccumulator(2).add(y, p).result()
    assert res["brier"] == pytest.approx(brier_score_loss(y, p), rel=1e-12)
    assert res["log_loss"] == pytest.approx(log_loss(y, np.column_stack((1 - p, p))), rel=1e-12)
    assert res["auc"] == pytest.approx(roc_auc_score(y, p), rel=1e-14)
    assert res["calibration_loss"] + res["refinement_loss"] == pytest.approx(res["brier"], rel=1e-12)
    corp = res["corp_brier"]
    assert corp["score"] == pytest.approx(corp["mcb"] - corp["dsc"] + corp["unc"], rel=1e-12)


# ---------------------------------------------------------------------------------------------------
# evaluate on a table cut into ranges, spilled to the scratch directory


@pytest.fixture(scope="module")
def pima_model(tmp_path_factory, pima_sigmoid_model):
    from cli_helpers import PIMA as pima

    base = tmp_path_factory.mktemp("ranges")
    import pandas as pd

    df = pd.read_parquet(pima)
    df["w"] = np.random.default_rng(0).integers(0, 4, len(df))
    df["wf"] = np.random.default_rng(1).random(len(df)) * 3  # fractional weights
    parts = base / "parts"
    parts.mkdir()
    for i, lo in enumerate(range(0, len(df), 300)):  # three files: three chunks
        df.iloc[lo:lo + 300].to_parquet(parts / f"part{i}.parquet")
    return pima_sigmoid_model, parts


def _accumulator_then_ranges(model, parts, tmp_path, monkeypatch, weight):
    """The in-memory evaluation of ``model`` (the oracle), and a fresh scratch directory; afterwards every
    evaluation of this test is cut into ranges of about 50 values."""
    import tempfile

    import calengine
    from calengine.metrics.ranged import engine as range_eval

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(range_eval, "RANGED_MIN_ROWS", 10**12)
    old = calengine.evaluate_models(model, str(parts), "class", weight=weight)
    monkeypatch.setattr(range_eval, "RANGED_MIN_ROWS", 0)
    monkeypatch.setattr(range_eval, "RANGE_VALUES", 50)
    return old, scratch


@pytest.mark.parametrize("weight", [None, "w"])
def test_evaluate_cut_into_ranges_prints_what_the_accumulator_prints(pima_model, tmp_path, monkeypatch, weight):
    """The whole command: chunks spilled, about 15 ranges per table, every metric, the drift check and the
    error-reject curve as the in-memory accumulator gives them (the JSON and the text to the byte), and
    the scratch directory gone afterwards."""
    import calengine
    from calengine.metrics.ranged import engine as range_eval

    model, parts = pima_model
    old, scratch = _accumulator_then_ranges(model, parts, tmp_path, monkeypatch, weight)
    written = []
    save = range_eval._save
    monkeypatch.setattr(range_eval, "_save", lambda t, p: written.append(p) or save(t, p))
    new = calengine.evaluate_models(model, str(parts), "class", weight=weight)
    assert isinstance(new.accumulators[0]["calibrated"], range_eval.RangedTables)
    assert sum(re.search(r"-r\d+$", p) is not None for p in written) >= 3 * 2 * 10  # 3 tables x 2 kinds
    assert sum(os.path.basename(p).startswith("c2-") for p in written) == 6  # third chunk: 3 tables x 2
    assert json.dumps(new.to_json()) == json.dumps(old.to_json())
    assert new.to_text(width=120) == old.to_text(width=120)
    assert os.listdir(scratch) == []


@pytest.fixture(scope="module")
def pima_single_model(pima_model):
    """One sigmoid member (refit): its calibrated rows have P[:, 0] == 1 - P[:, 1] exactly."""
    from cli_helpers import REPO, run_cli

    model = pima_model[0].parent / "single"
    r = run_cli("--quiet", "fit", REPO / "data" / "pima.parquet", "--target", "class", "--mode", "refit",
                "--workers", "1", "--method", "sigmoid", "--output", model)
    assert r.returncode == 0, r
    return model, pima_model[1]


@pytest.mark.parametrize("case", ["mirrored", "mixed", "fractional"])
def test_evaluate_derives_a_binary_models_class_0_and_top_label_ranges_from_class_1(pima_single_model, tmp_path,
                                                                                       monkeypatch, case):
    """A model whose calibrated rows are complementary spills only the chunks' class-1 tables of that kind and
    derives the class-0 and top-label ranges from class 1's; when one chunk is not derivable (here: made
    so) its others are built from the derived chunk tables; fractional weights take the plain path.
    Every case prints the accumulator's JSON and text to the byte and leaves no scratch."""
    import threading

    import calengine
    from calengine.metrics.ranged import engine as range_eval

    model, parts = pima_single_model
    weight = "wf" if case == "fractional" else None
    old, scratch = _accumulator_then_ranges(model, parts, tmp_path, monkeypatch, weight)
    written, derived, lock = [], [], threading.Lock()
    save, derive, derivable = range_eval._save, range_eval.derive_range, range_eval.derivable
    monkeypatch.setattr(range_eval, "_save", lambda t, p: written.append(os.path.basename(p)) or save(t, p))
    monkeypatch.setattr(range_eval, "derive_range",
                        lambda *a, **k: derived.append((a[0], os.path.basename(a[1]).split("-")[0])) or derive(*a, **k))
    calls = []

    def first_not(tables):  # the first chunk table checked (a calibrated one) is not derivable
        with lock:
            calls.append(1)
            return derivable(tables) and len(calls) > 1

    if case == "mixed":
        from calengine.metrics.measures import MetricAccumulator

        # a chunk of complementary batches is derivable without a check (it hands out its class-1 table
        # alone): the first one is made to take the checked path, where first_not refuses it
        offered = []
        complementary_table = MetricAccumulator.complementary_table

        def first_checked(acc):
            with lock:
                offered.append(1)
                return None if len(offered) == 1 else complementary_table(acc)

        monkeypatch.setattr(MetricAccumulator, "complementary_table", first_checked)
        monkeypatch.setattr(range_eval, "derivable", first_not)
    new = calengine.evaluate_models(model, str(parts), "class", weight=weight)
    assert json.dumps(new.to_json()) == json.dumps(old.to_json())
    assert new.to_text(width=120) == old.to_text(width=120)
    assert os.listdir(scratch) == []
    chunk_files = sorted(p for p in written if p.startswith("c"))
    if case == "mirrored":
        assert derived.count(("class0", "calibrated")) >= 10 and derived.count(("top", "calibrated")) >= 5
        assert [p for p in chunk_files if p.startswith("c0-calibrated")] == ["c0-calibrated-1"]
    else:
        assert ("class0", "calibrated") not in derived and ("top", "calibrated") not in derived
        assert len([p for p in chunk_files if p.startswith("c0-calibrated")]) == 3
    if case == "mixed":
        assert calls == [1]  # only the chunk made to take the checked path was checked


def test_ranges_of_a_table_are_built_side_by_side_on_the_threads(pima_single_model, tmp_path, monkeypatch):
    """Embedded (a ThreadClient of two threads), two range builds of a table run at once: each of the
    first two builds waits for the other at a barrier, which breaks (and fails the command) when the
    builds run one at a time, as they did while a task picking a build's handle waited for it on the
    other thread.  The answers stay the accumulator's."""
    import threading

    import calengine
    from calengine.metrics.ranged import engine as range_eval

    model, parts = pima_single_model
    old, _ = _accumulator_then_ranges(model, parts, tmp_path, monkeypatch, None)
    barrier, seen, lock = threading.Barrier(2, timeout=20), [], threading.Lock()
    build, derive = range_eval.build_range, range_eval.derive_range

    def met(fn):
        def run(*args, **kwargs):
            with lock:
                seen.append(1)
                first_two = len(seen) <= 2
            if first_two:
                barrier.wait()
            return fn(*args, **kwargs)
        return run

    monkeypatch.setattr(range_eval, "build_range", met(build))
    monkeypatch.setattr(range_eval, "derive_range", met(derive))
    new = calengine.evaluate_models(model, str(parts), "class", workers=2)
    assert len(seen) > 2 and not barrier.broken
    assert json.dumps(new.to_json()) == json.dumps(old.to_json())


def test_evaluate_cut_into_ranges_on_a_cluster_keeps_the_tables_on_the_workers(pima_model, monkeypatch):
    """With a Dask client (two worker processes) nothing is spilled here: the chunks' and the ranges'
    tables are task results on the workers, and the answers are the accumulator's."""
    import calengine
    from calengine.metrics.ranged import engine as range_eval
    from calengine.testing.cluster import local_client

    model, parts = pima_model
    monkeypatch.setattr(range_eval, "RANGED_MIN_ROWS", 10**12)
    old = calengine.evaluate_models(model, str(parts), "class")
    with local_client(2) as client:
        # the workers are other processes: the thresholds travel as arguments, so set them here only
        monkeypatch.setattr(range_eval, "RANGED_MIN_ROWS", 0)
        monkeypatch.setattr(range_eval, "RANGE_VALUES", 100)
        new = calengine.evaluate_models(model, str(parts), "class", client=client)
    assert isinstance(new.accumulators[0]["calibrated"], range_eval.RangedTables)
    assert json.dumps(new.to_json()) == json.dumps(old.to_json())


def test_chunk_files_go_once_their_ranges_are_written_and_a_failure_leaves_no_scratch(pima_model, tmp_path,
                                                                                      monkeypatch):
    """Scratch holds each table once: when the first metric kernel runs only range files are left (the
    chunks' files were removed as their ranges were written); a kernel failing mid-evaluation raises
    its own error, and neither the scratch directory nor this process's cached ranges survive it."""
    import tempfile

    import calengine
    from calengine.metrics.ranged import cache as range_cache, engine as range_eval

    model, parts = pima_model
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(range_eval, "RANGED_MIN_ROWS", 0)
    monkeypatch.setattr(range_eval, "RANGE_VALUES", 50)
    seen = []
    run = range_eval.run_kernel

    def failing(kernel, handle, request):
        if not seen:
            (evaluation,) = os.listdir(scratch)
            seen.append(sorted(os.listdir(scratch / evaluation)))
        if kernel.__name__ == "irls":
            raise RuntimeError("a kernel failed")
        return run(kernel, handle, request)

    monkeypatch.setattr(range_eval, "run_kernel", failing)
    with pytest.raises(RuntimeError, match="a kernel failed"):
        calengine.evaluate_models(model, str(parts), "class")
    assert len(seen[0]) >= 3 * 2 * 10 * 3  # 3 tables x 2 kinds x >= 10 ranges x 3 arrays
    assert all(re.fullmatch(r"(calibrated|raw)-\d-r\d+\.(value|pos|neg)\.npy", name) for name in seen[0]), seen[0]
    assert os.listdir(scratch) == []
    assert not any(path.startswith(str(scratch)) for path in range_cache._CACHE._ranges)


# ---------------------------------------------------------------------------------------------------
# evaluate --report on a table cut into ranges (issue 22 §3)


def _figure_data(acc, classes) -> dict:
    """Every number the report draws from one accumulator (see calengine.metrics.report.figures)."""
    from calengine.metrics.report import figures

    out = {}
    for c in [*classes, None]:
        for strategy in ("uniform", "quantile"):
            out[f"reliability {c} {strategy}"] = acc.reliability_diagram(bins=figures.RELIABILITY_BINS,
                                                                         strategy=strategy, cls=c)
        if c is not None:
            out[f"corp {c}"] = acc.corp_curve(c)
            out[f"roc {c}"] = figures.roc_data(acc, c)
    out["error-reject"] = figures.error_reject_data(acc)
    out["smooth"] = acc.smooth_reliability()  # relplot's kernel curve and band, from the ranges' grids
    return out


def test_evaluate_report_on_ranges_draws_what_the_in_memory_report_draws(pima_model, tmp_path, monkeypatch):
    """``evaluate --report`` of a table cut into about 15 ranges per table: the report is built from the
    ranges (never a whole table), its figures' numbers equal the in-memory report's, and its page
    (metrics, bin tables, legends' AUCs) is the same text."""
    import calengine
    from calengine.metrics import evaluation
    from calengine.metrics.ranged import engine as range_eval

    from metrics.report.test_report_ranged import report_equal

    model, parts = pima_model  # three files: three chunks
    seen = []
    write = evaluation._write_report

    def recording(ev, files):
        for a in ev.accumulators:
            seen.append({kind: (type(acc).__name__, _figure_data(acc, [1])) for kind, acc in a.items()})
        return write(ev, files)

    monkeypatch.setattr(evaluation, "_write_report", recording)
    monkeypatch.setattr(range_eval, "RANGED_MIN_ROWS", 10**12)
    old = calengine.evaluate_models(model, str(parts), "class", report=tmp_path / "old")
    monkeypatch.setattr(range_eval, "RANGED_MIN_ROWS", 0)
    monkeypatch.setattr(range_eval, "RANGE_VALUES", 50)
    new = calengine.evaluate_models(model, str(parts), "class", report=tmp_path / "new")
    assert json.dumps(new.to_json()) == json.dumps(old.to_json())
    (before,), (after,) = seen[:1], seen[1:]
    for kind in ("calibrated", "raw"):
        assert before[kind][0] == "MetricAccumulator" and after[kind][0] == "RangedTables"
        for name, d in before[kind][1].items():
            report_equal(d, after[kind][1][name], close=("mean_predicted", "area", "hull_area", "mu", "low", "high",
                                                          "density"),
                         where=f"{kind} {name}")

    def page(d):
        text = (d / "index.html").read_text(encoding="utf-8")
        return re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", text)

    assert page(tmp_path / "new") == page(tmp_path / "old")
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == sorted(p.name for p in (tmp_path / "old").iterdir())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.5000001, 0.75, 1.0]) | st.floats(0.0, 1.0), max_size=60),
       st.integers(1, 9), st.data())
def test_a_slice_is_located_through_a_sample_of_the_file_as_a_full_search_locates_it(tmp_path, values, stride,
                                                                                      data):
    """``_read_slice`` finds a slice's bounds in every SAMPLE_STRIDE-th value of the file and one window
    read from it, keeping no map of the file: for any sorted values with ties, any stride and any bounds
    (outside the values, on them, between them) the slice is ``np.searchsorted``'s on the whole array, and
    the three arrays are the file's."""
    from calengine.metrics.ranged import engine as range_eval

    v = np.sort(np.asarray(values, dtype=np.float64))
    table = (v, np.arange(v.size, dtype=np.int64), (np.arange(v.size, dtype=np.int64) * 7) % 5)
    path = str(tmp_path / f"t{len(os.listdir(tmp_path))}")
    range_eval._save(table, path)
    # a bound: none, a value of the file (ties, a window's first or last value), one just above a value
    # (between two windows), or anything
    near = [float(x) for x in v] + [float(np.nextafter(x, 2.0)) for x in v]
    bound = st.one_of(st.none(), st.sampled_from(near) if near else st.none(), st.floats(-0.5, 1.5))
    lo_value, hi_value = data.draw(bound), data.draw(bound)
    if lo_value is not None and hi_value is not None and lo_value > hi_value:
        lo_value, hi_value = hi_value, lo_value
    lo = 0 if lo_value is None else int(np.searchsorted(v, lo_value, side="left"))
    hi = v.size if hi_value is None else int(np.searchsorted(v, hi_value, side="left"))
    old = range_eval.SAMPLE_STRIDE
    range_eval.SAMPLE_STRIDE = stride
    try:
        got = range_eval._read_slice(path, lo_value, hi_value, keep=False)
    finally:
        range_eval.SAMPLE_STRIDE = old
    for a, b in zip(got, table):
        assert np.array_equal(a, b[lo:hi]) and a.dtype == b.dtype
    assert path not in range_eval.LOCATORS


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.floats(0.0, 1.0), min_size=0, max_size=40), min_size=1, max_size=4),
       st.lists(st.one_of(st.none(), st.floats(0.0, 1.0)), min_size=2, max_size=2))
def test_piece_tasks_cut_the_slices_of_their_files_and_keep_no_map_of_them(tmp_path, columns, bounds):
    """The tasks that cut pieces of a worker's files for another worker's builds (``slices_of``, a
    group's bounds on every file) and derived ranges (``slices_between``, bounds per file) return the
    values ``[lo, hi)`` of each file -- numpy's boolean selection of the same arrays is the oracle --
    and drop their maps of the files when done: kept, the pages their binary searches touched stayed
    resident in the holder until the files went (160-170 MiB at a worker's kernel-phase peak at 100M)."""
    from calengine.metrics.ranged import engine as range_eval, workers as range_workers

    lo, hi = bounds
    if lo is not None and hi is not None and lo > hi:
        lo, hi = hi, lo
    tables, handles = [], []
    for c, values in enumerate(columns):
        v = np.unique(np.asarray(values, dtype=np.float64))
        table = (v, np.arange(v.size, dtype=np.int64), np.arange(v.size, dtype=np.int64)[::-1].copy())
        path = str(tmp_path / f"t{len(os.listdir(tmp_path))}-c{c}")
        tables.append(table)
        handles.append((*range_eval._save(table, path), "tcp://127.0.0.1:1"))

    def expected(table, a, b):
        keep = np.ones(table[0].size, dtype=bool)
        if a is not None:
            keep &= table[0] >= a
        if b is not None:
            keep &= table[0] < b
        return tuple(x[keep] for x in table)

    def check(pieces, wants):
        assert len(pieces) == len(wants)
        for (kind, got), want in zip(pieces, wants):
            assert kind == "mem"
            for x, z in zip(got, want):
                assert x.dtype == z.dtype
                np.testing.assert_array_equal(x, z)
        assert not [h for h in handles if h[1] in range_eval.LOCATORS]

    check(range_workers.slices_of(handles, lo, hi), [expected(t, lo, hi) for t in tables])
    per_file = [(h, lo, None) if c % 2 else (h, None, hi) for c, h in enumerate(handles)]
    check(range_workers.slices_between(per_file), [expected(t, a, b) for t, (_, a, b) in zip(tables, per_file)])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["disk", "mem"]), st.sampled_from(["/w/a/ev/calibrated", "/w/b/ev", "/w/a"]),
                          st.from_regex(r"[a-z0-9][a-z0-9-]{0,14}", fullmatch=True),
                          st.sampled_from(["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"])), max_size=60))
def test_packed_handles_are_the_handles_and_cost_about_their_file_names(parts):
    """A task's list of file handles goes packed (``range_workers.packed``): unpacked in the task it is
    the same list in the same order, and pickled it costs about its file names plus each run of one
    directory and worker once, not a tuple of full paths a handle: the scheduler keeps every task it
    sends in its log of recent messages, so a task's arguments must not grow with the table beyond
    a name per file."""
    import pickle

    from calengine.metrics.ranged.workers import packed, unpacked

    handles = [(kind, os.path.join(d, name), address) for kind, d, name, address in parts]
    files = packed(handles)
    assert unpacked(files) == handles
    runs = 1 + sum(1 for a, b in zip(parts, parts[1:]) if (a[0], a[1], a[3]) != (b[0], b[1], b[3]))
    assert len(pickle.dumps(files)) <= 40 + 80 * runs + sum(len(name) + 1 for _, _, name, _ in parts)
    if len(parts) > 10 and runs == 1:
        assert len(pickle.dumps(files)) < len(pickle.dumps(handles)) / 2
    pieces = [("mem", (np.zeros(1),))]
    assert unpacked(pieces) is pieces  # another worker's pieces pass as they are


def _files_under(directories: dict) -> list:
    return sorted(os.path.join(root, f) for d in directories.values()
                  for root, _, files in os.walk(os.path.join(d, "calengine-ranges")) for f in files)


def test_on_a_cluster_ranges_are_files_of_their_workers_read_by_pinned_tasks_and_removed_after(pima_single_model,
                                                                                               monkeypatch):
    """On two worker processes every range is a file in the local directory of the worker that built it
    (a worker's memory does not grow with the table) and its handle comes to the client at once, so
    between passes the scheduler holds no task of the evaluation (it held two picking tasks and a
    future per range); the ranges are built in groups, each worker reading pieces of the other's chunk
    files (GROUP_BYTES made small); each kernel pass is at most BLOCKS_PER_WORKER tasks a worker,
    pinned to the holder of their ranges, whatever the number of ranges; kernels read their ranges
    through the holder's range cache; freezing removes the files and empties the caches.  The answers
    are the in-memory accumulator's, and ``evaluate_models`` on the same cluster leaves nothing."""
    import time

    import calengine
    from calengine.metrics.ranged import cache as range_cache, engine as range_eval, workers as range_workers
    from calengine.model.artifact import load_model
    from calengine.parquet.storage import list_parquet_files
    from calengine.metrics.table import evaluate_table
    from calengine.testing.cluster import local_client

    model, parts = pima_single_model
    monkeypatch.setattr(range_eval, "RANGED_MIN_ROWS", 10**12)
    old = calengine.evaluate_models(model, str(parts), "class")

    def cached():
        return sorted(range_cache._CACHE._ranges)

    with local_client(2) as client:
        monkeypatch.setattr(range_eval, "RANGED_MIN_ROWS", 0)
        monkeypatch.setattr(range_eval, "RANGE_VALUES", 60)
        monkeypatch.setattr(range_eval, "GROUP_BYTES", 24 * 150)
        local = client.run(lambda dask_worker: dask_worker.local_directory)
        log = []  # (task name, pinned workers) of every submission, and "gather" at every wait

        class Recording:
            def submit(self, fn, *args, **kwargs):
                log.append((fn.__name__, kwargs.get("workers")))
                return client.submit(fn, *args, **kwargs)

            def gather(self, *args, **kwargs):
                log.append(("gather", None))
                return client.gather(*args, **kwargs)

            def __getattr__(self, name):
                return getattr(client, name)

        accs = evaluate_table(Recording(), load_model(model), list_parquet_files(str(parts)), "class", ranged=True)
        for _ in range(200):  # the client tells the scheduler of released futures asynchronously
            held = [k for k in client.run_on_scheduler(lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks])
                    if any(n in k for n in ("build", "derive", "chunk", "slice", "pick"))]
            if not held:
                break
            time.sleep(0.05)
        assert not held
        for acc in accs.values():
            acc.result()
            acc.calibration_suite()
        handles = [h for acc in accs.values() for rs in [*acc.class_ranges, acc.top_ranges] for h in rs]
        assert all(len(rs) >= 4 for acc in accs.values() for rs in [*acc.class_ranges, acc.top_ranges])
        assert {h[2] for h in handles} == set(local)
        for kind, path, address in handles:
            assert kind == "disk" and path.startswith(os.path.join(local[address], "calengine-ranges", ""))
            assert os.path.exists(f"{path}.value.npy")
        names = [name for name, _ in log]
        assert names.count("slices_of") >= 2 * 3  # two kinds x at least three groups
        # a derived block reads the slices held by the other worker through one piece task, not one a
        # class-1 range it reads: the scheduler's log of recent messages keeps every task it sends
        assert 0 < names.count("slices_between") <= names.count("derive_block")
        pinned = {"slices_between", "slices_of", "build_block", "derive_block", "run_kernels", "remove_files",
                  "pick_on_worker"}
        assert all(w is not None and len(w) == 1 for name, w in log if name in pinned)
        # between two waits, a pass submits at most BLOCKS_PER_WORKER tasks a worker
        passes = " ".join(name for name, _ in log).split("gather")
        assert max(p.split().count("run_kernels") for p in passes) <= range_workers.BLOCKS_PER_WORKER * 2
        assert sum(p.split().count("run_kernels") for p in passes) > 0
        for address, paths in client.run(cached).items():
            assert all(p.startswith(local[address]) for p in paths)
        assert any(client.run(cached).values())
        assert _files_under(local) and not [p for p in _files_under(local) if "/c" in os.path.basename(p)[:2]]
        for acc in accs.values():
            acc.freeze()
        assert all(not ns for ns in client.run(cached).values())
        assert _files_under(local) == []
        new = calengine.evaluate_models(model, str(parts), "class", client=client)
        assert all(not ns for ns in client.run(cached).values())
        assert _files_under(local) == []
    assert isinstance(new.accumulators[0]["calibrated"], range_eval.RangedTables)
    assert json.dumps(new.to_json()) == json.dumps(old.to_json())


def test_on_a_cluster_a_failed_evaluation_leaves_no_range_file_on_the_workers(pima_single_model, monkeypatch):
    """An evaluation failing after its ranges were built (here: the client's metrics) raises its own
    error, and the workers' local directories and range caches hold nothing of it afterwards."""
    import calengine
    from calengine.metrics import evaluation
    from calengine.metrics.ranged import cache as range_cache, engine as range_eval
    from calengine.testing.cluster import local_client

    model, parts = pima_single_model
    built = []

    def failing(acc, seed, metrics=None):
        built.append(_files_under(local))
        raise RuntimeError("the metrics failed")

    with local_client(2) as client:
        monkeypatch.setattr(range_eval, "RANGED_MIN_ROWS", 0)
        monkeypatch.setattr(range_eval, "RANGE_VALUES", 60)
        monkeypatch.setattr(evaluation, "_metrics", failing)
        local = client.run(lambda dask_worker: dask_worker.local_directory)
        with pytest.raises(RuntimeError, match="the metrics failed"):
            calengine.evaluate_models(model, str(parts), "class", client=client)
        assert len(built[0]) >= 2 * 3 * 4 * 3  # 2 kinds x 3 tables x >= 4 ranges x 3 arrays, then none
        assert _files_under(local) == []
        assert all(not ps for ps in client.run(lambda: sorted(range_cache._CACHE._ranges)).values())


@pytest.mark.timeout(180)
def test_on_a_cluster_a_worker_lost_after_writing_files_is_one_error_not_a_hang(pima_single_model, monkeypatch):
    """A worker that leaves once it holds chunk files takes them with it; the tasks pinned to it could
    never run, and Dask would keep them waiting for it.  Here a worker leaves in every attempt: after
    its restarts (``evaluation.MAX_RESTARTS``) the evaluation raises ClusterError naming the worker,
    and the surviving workers' files are removed.  (Without the watch in ``range_workers.gather_pinned``
    this test hangs until its timeout.)"""
    import time

    import calengine
    from calengine.errors import ClusterError
    from calengine.metrics.ranged import engine as range_eval, workers as range_workers
    from calengine.testing.cluster import local_client

    model, parts = pima_single_model
    real = range_workers.ranges_on_workers
    lost = []

    def losing_a_holder(client, evaluation, handles, *args):
        victim = sorted({h[2] for h in handles})[0]
        lost.append(victim)
        async def die():
            os._exit(1)

        client.run(die, workers=[victim], wait=False)  # Dask runs only coroutines without waiting
        deadline = time.monotonic() + 60
        while victim in client.scheduler_info(n_workers=-1)["workers"]:
            assert time.monotonic() < deadline, "the killed worker never left the scheduler"
            time.sleep(0.2)
        return real(client, evaluation, handles, *args)

    with local_client(2) as client:
        monkeypatch.setattr(range_eval, "RANGED_MIN_ROWS", 0)
        monkeypatch.setattr(range_eval, "RANGE_VALUES", 60)
        monkeypatch.setattr(range_workers.OnWorkers, "ranges", staticmethod(losing_a_holder))
        local = client.run(lambda dask_worker: dask_worker.local_directory)
        with pytest.raises(ClusterError, match=re.escape(f"worker {lost[0] if lost else ''}") + ".*left the cluster"):
            calengine.evaluate_models(model, str(parts), "class", client=client)
        assert lost and lost[0] in local
        survivors = {a: d for a, d in local.items() if a != lost[0]}
        assert _files_under(survivors) == []


@pytest.mark.timeout(240)
def test_on_a_cluster_a_worker_lost_once_is_an_evaluation_started_again(pima_single_model, monkeypatch):
    """The same loss once, on a cluster of three workers: the evaluation starts again from the start on
    the workers left (one warning line naming the worker), and its metrics are the same bits as an
    evaluation of the same table that nothing interrupted; every range file is gone at the end.  (With
    the restart removed this raises the ClusterError of the test above.)"""
    import time
    import warnings

    import calengine
    from calengine.metrics.ranged import engine as range_eval, workers as range_workers
    from calengine.testing.cluster import local_client

    model, parts = pima_single_model
    real = range_workers.ranges_on_workers
    lost = []

    def losing_a_holder_once(client, evaluation, handles, *args):
        if not lost:
            victim = sorted({h[2] for h in handles})[0]
            lost.append(victim)

            async def die():
                os._exit(1)

            client.run(die, workers=[victim], wait=False)
            deadline = time.monotonic() + 60
            while victim in client.scheduler_info(n_workers=-1)["workers"]:
                assert time.monotonic() < deadline, "the killed worker never left the scheduler"
                time.sleep(0.2)
        return real(client, evaluation, handles, *args)

    monkeypatch.setattr(range_eval, "RANGED_MIN_ROWS", 0)
    monkeypatch.setattr(range_eval, "RANGE_VALUES", 60)
    plain = calengine.evaluate_models(model, str(parts), "class").results
    with local_client(3) as client:
        monkeypatch.setattr(range_workers.OnWorkers, "ranges", staticmethod(losing_a_holder_once))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            restarted = calengine.evaluate_models(model, str(parts), "class", client=client).results
        said = [str(w.message) for w in caught if "left the cluster during evaluate" in str(w.message)]
        assert len(said) == 1 and f"worker {lost[0]} " in said[0] and "evaluating again" in said[0]
        assert json.dumps(restarted, sort_keys=True, default=str) == json.dumps(plain, sort_keys=True, default=str)
        local = client.run(lambda dask_worker: dask_worker.local_directory)
        assert _files_under(local) == []
