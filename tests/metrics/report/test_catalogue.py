"""The report's metric table is the JSON of the same evaluation (issue 38 §6): every key of
``evaluate --json`` (with every option on) is a row of the report, in a group, with an explanation;
class and segment names from the data stay data in the HTML."""

from __future__ import annotations

import html.parser
import json

import pandas as pd
import pytest

from cli_helpers import PIMA
from calengine.metrics.report.catalogue import CATALOGUE, GROUPS, explain, flat_keys

HOSTILE = ['<script>alert(1)</script>', 'a"b\'c</td></tr>']  # class labels that try to end the page's structure


class _Rows(html.parser.HTMLParser):
    """The ``data-key`` of every table row and header cell, as a browser's parser reads them."""

    def __init__(self):
        super().__init__()
        self.keys: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self.scripts += 1
        for name, value in attrs:
            if name == "data-key":
                self.keys.append(value)


@pytest.fixture(scope="module")
def hostile_evaluation(tmp_path_factory):
    import calengine
    from cli_helpers import run_cli

    tmp = tmp_path_factory.mktemp("catalogue")
    df = pd.read_parquet(PIMA)
    df["class"] = df["class"].map({0: HOSTILE[0], 1: HOSTILE[1]})
    df["seg"] = (df["age"] > 35).map({True: "<b>old</b>", False: 'young"'})
    data = tmp / "t.parquet"
    df.to_parquet(data, index=False)
    model = tmp / "m"
    r = run_cli("--quiet", "fit", data, "--target", "class", "--cv", "3", "--method", "sigmoid", "--workers", "1",
                "--exclude", "seg", "--output", model)
    assert r.returncode == 0, r
    report = tmp / "report"
    ev = calengine.evaluate_models([str(model)], str(data), "class", by="seg", bootstrap=20, prior_shift=20,
                                   cost_matrix={"classes": sorted(HOSTILE), "costs": [[0, 5], [1, 0]]},
                                   report=str(report), workers=1)
    return ev.to_json(), (report / "index.html").read_text(encoding="utf-8")


def test_every_json_key_is_a_row_of_the_report(hostile_evaluation):
    payload, page = hostile_evaluation
    assert {"decisions", "segments", "prior_shift", "calibration_band", "raw", "drift", "smece"} <= set(payload)
    rows = _Rows()
    rows.feed(page)
    expected = set(flat_keys(payload))
    assert set(rows.keys) == expected, (sorted(expected - set(rows.keys)), sorted(set(rows.keys) - expected))
    assert rows.keys.count("raw") == 1  # the raw learner's column header
    assert len(rows.keys) == len(expected)  # one row per key: the data did not add or split any


def test_every_key_is_grouped_and_explained(hostile_evaluation):
    payload, _ = hostile_evaluation
    groups = {g for g, _, _ in GROUPS}
    for key in flat_keys(payload):
        group, text = explain(key)
        assert group in groups and group != "other" and text, key
    for key in flat_keys(payload["raw"]):
        assert explain(key)[0] != "other", key
    assert all(group in groups for group, _ in CATALOGUE.values())


def test_names_from_the_data_stay_data(hostile_evaluation):
    payload, page = hostile_evaluation
    rows = _Rows()
    rows.feed(page)
    assert rows.scripts == 0 and "<script>alert(1)" not in page and "<b>old</b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # a decision count keyed by a hostile class name is one row, its key intact after the browser's unescaping
    decided = [k for k in rows.keys if k.startswith("decisions.") and k.endswith(HOSTILE[1])]
    assert decided, [k for k in rows.keys if k.startswith("decisions.")]
    assert json.dumps(payload)  # the JSON itself stays valid
