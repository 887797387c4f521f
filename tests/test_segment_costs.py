"""Issue 25's two ``--by`` costs: the fit reads and factorises the segment columns once per fragment,
``evaluate --by`` scores each row once, and a segment-wise model applies its segments' maps in one
pass per batch (``Calibrator.predict_grouped``) with the same bits as segment by segment."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calengine import registry


@pytest.fixture(scope="module")
def by_model(tmp_path_factory):
    """A small ``--by`` table (three row groups, a label missing here and there) and its model."""
    import calengine

    rng = np.random.default_rng(3)
    n = 3000
    g = rng.choice(["a", "b", "c", "d"], size=n).astype(object)
    g[rng.random(n) < 0.03] = None
    s = rng.random(n).round(3)
    y = (rng.random(n) < np.clip(s + np.select([g == "b", g == "c"], [-0.2, 0.2], 0.0), 0, 1)).astype(float)
    y[rng.random(n) < 0.02] = np.nan
    df = pd.DataFrame({"s": s, "g": g, "y": y})
    path = tmp_path_factory.mktemp("costs") / "t.parquet"
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path, row_group_size=1000)
    model = calengine.fit_table(str(path), "y", scores=("s",), method="isotonic", by="g", fragment_rows=1000)
    return path, df, model


def test_evaluate_by_scores_each_row_once_and_reports_the_rows_segments(by_model, monkeypatch):
    """One scoring pass feeds the metrics and the segment report (each labelled row scored once), and
    the report's sums are those of the model's probabilities of every row."""
    from calengine.metrics.evaluation import evaluate_models
    from calengine.metrics.segments import SegmentAccumulator
    from calengine.model.calibrated import CalibratedModel

    path, df, model = by_model
    scored = []
    both, proba = CalibratedModel.both_proba_features, CalibratedModel.predict_proba_features

    def count_both(self, X):
        scored.append(X.shape[0])
        return both(self, X)

    def count_proba(self, X):
        scored.append(X.shape[0])
        return proba(self, X)

    labelled = df[df["y"].notna()].reset_index(drop=True)
    lpath = path.parent / "labelled.parquet"
    labelled.to_parquet(lpath, row_group_size=1000)
    monkeypatch.setattr(CalibratedModel, "both_proba_features", count_both)
    monkeypatch.setattr(CalibratedModel, "predict_proba_features", count_proba)
    ev = evaluate_models(model, str(lpath), "y", by="g")
    monkeypatch.undo()
    assert sum(scored) == len(labelled)
    acc = SegmentAccumulator(("g",), 2)
    acc.add({"g": labelled["g"].to_numpy()}, labelled["y"].to_numpy().astype(np.int64),
            model.predict_proba(labelled[["s", "g"]]))
    want = {(r["column"], r["value"]): r for r in acc.result()["segments"]}
    got = {(r["column"], r["value"]): r for r in ev.segments[0]["segments"]}
    assert got.keys() == want.keys() and len(got) == 6  # all rows, a..d, null
    for key, r in want.items():
        assert got[key]["rows"] == r["rows"]
        for name in ("mean_p", "mean_y", "log_loss", "ece", "ecce_sigma", "spiegelhalter_z"):
            assert got[key][name] == pytest.approx(r[name], rel=1e-9, abs=1e-12), (key, name)
