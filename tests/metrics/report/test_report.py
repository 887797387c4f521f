"""The evaluation report: files, figures, the metrics table, escaping, atomic output, and a real
headless-browser check that the page renders every image without console errors and without script."""

from __future__ import annotations

import base64
import math
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from calengine.errors import CalengineError, DataError, ParameterError
from calengine.metrics.measures import MetricAccumulator
from calengine.metrics.report import MAP_MAX_POINTS, MAX_CLASSES, ReportEntry, write_report
from calengine.metrics.report.figures import _roc_figure
from calengine.metrics.report.prepare import prepare_entries

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
BINARY_LABEL = "gaussian_nb + isotonic <script>alert(1)</script> (model_a)"
MULTI_LABEL = r"logistic + sigmoid $\bogus$ & co (model_b)"  # mathtext would choke on an unescaped $...$


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _binary_entry(n: int = 3000) -> ReportEntry:
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, n)
    score = rng.normal(1.5 * y, 1.0)
    raw = _sigmoid(3.0 * score)  # over-confident learner
    cal = np.round(_sigmoid(1.5 * (score - 0.75)), 2)  # a binned calibrator: many tied values
    return ReportEntry(
        label=BINARY_LABEL,
        calibrated=MetricAccumulator(2).add(y, cal),
        raw=MetricAccumulator(2).add(y, raw),
        class_names=["no", "yes"],
        calibration_map={"scores": score[:, None], "probabilities": cal[:, None], "column_names": ["yes"]},
    )


def _multiclass_entry(n: int = 3000) -> ReportEntry:
    rng = np.random.default_rng(2)
    y = rng.integers(0, 3, n)
    logits = rng.normal(0.0, 1.0, (n, 3))
    logits[np.arange(n), y] += 1.5
    return ReportEntry(
        label=MULTI_LABEL,
        calibrated=MetricAccumulator(3).add(y, _softmax(logits)),
        raw=MetricAccumulator(3).add(y, _softmax(3.0 * logits)),
        class_names=["setosa", "versi<color>", "virginica"],
        calibration_map={
            "scores": logits,
            "probabilities": _sigmoid(logits - 0.7),
            "column_names": ["setosa vs rest", "versi<color> vs rest", "virginica vs rest"],
        },
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One two-model report shared by the checks below (rendering is the slow part)."""
    entries = [_binary_entry(), _multiclass_entry()]
    out = tmp_path_factory.mktemp("report") / "out"
    index = write_report(out, entries, title="Report <b>title</b>")
    return index, entries


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE
    return struct.unpack(">II", data[16:24])


def _check_png(data: bytes) -> tuple[int, int]:
    width, height = _png_size(data)
    assert len(data) > 5000 and width >= 300 and height >= 300
    try:
        from PIL import Image
    except ImportError:
        return width, height
    import io

    with Image.open(io.BytesIO(data)) as im:
        im.verify()
    with Image.open(io.BytesIO(data)) as im:
        assert im.size == (width, height)
        colours = im.convert("RGB").getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 20, "figure is (nearly) blank"
    return width, height


# -------------------------------------------------------------------------------------------------- files


def test_writes_index_and_valid_pngs(report):
    index, _ = report
    assert index.name == "index.html" and index.is_file() and index.is_absolute()
    pngs = sorted(index.parent.glob("*.png"))
    names = {p.name for p in pngs}
    # both models: per-class and top-label reliability, ROC, error-reject, calibration map; plus overview
    assert {"overview.png", "model01-roc.png", "model02-roc.png", "model01-error-reject.png",
            "model02-error-reject.png", "model01-calibration-map.png", "model02-calibration-map.png",
            "model01-reliability-top-label.png", "model01-reliability-class001.png",
            "model02-reliability-top-label.png"} <= names
    assert {f"model02-reliability-class{c:03d}.png" for c in range(3)} <= names
    assert {"model01-reliability-smooth.png", "model02-reliability-smooth.png"} <= names
    assert len(pngs) == 15
    for p in pngs:
        _check_png(p.read_bytes())
    assert not [p for p in index.parent.parent.iterdir() if p.name.startswith(".out.tmp-")], "staging left behind"


def test_images_are_embedded_copies_of_the_files(report):
    index, _ = report
    page = index.read_text(encoding="utf-8")
    imgs = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" width="(\d+)" height="(\d+)"', page)
    files = {p.read_bytes() for p in index.parent.glob("*.png")}
    assert len(imgs) == page.count("<img") == len(files) == 15
    for data, width, height in imgs:
        png = base64.b64decode(data, validate=True)
        assert png in files
        assert _png_size(png) == (int(width), int(height))


def test_page_is_self_contained(report):
    index, _ = report
    page = index.read_text(encoding="utf-8")
    lowered = page.lower()
    assert "http://" not in lowered and "https://" not in lowered
    assert "<script" not in lowered and "src=\"file" not in lowered
    assert "<link" not in lowered and "@import" not in lowered and "url(" not in lowered
    assert re.findall(r'\ssrc="([^"]*)"', page) and all(
        s.startswith("data:image/png;base64,") for s in re.findall(r'\ssrc="([^"]*)"', page)
    )
    assert "Content-Security-Policy" in page


def test_labels_are_escaped(report):
    index, _ = report
    page = index.read_text(encoding="utf-8")
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>title</b>" not in page and "Report &lt;b&gt;title&lt;/b&gt;" in page
    assert "versi<color>" not in page and "versi&lt;color&gt;" in page
    assert r"$\bogus$ &amp; co" in page


def _metrics_rows(page: str) -> dict[str, list[str]]:
    table = re.search(r'<table id="metrics-table">.*?<tbody>(.*?)</tbody></table>', page, re.S).group(1)
    rows = {}
    for key, cells in re.findall(r'<tr data-key="([^"]+)"><th><code>[^<]*</code></th>(.*?)<td class="help">', table, re.S):
        rows[key] = re.findall(r'<td class="num">([^<]*)</td>', cells)
    return rows


def _expected(value) -> str:
    if isinstance(value, int):
        return str(value)
    return "n/a" if math.isnan(value) else f"{value:.6g}"


def test_metrics_table_has_every_value_of_both_models_and_raw_learners(report):
    """Every key of each model's metrics and calibration suite (what ``evaluate --json`` holds without
    options), grouped, with the value of both models and both raw learners."""
    from calengine.metrics.report.catalogue import flat_keys

    index, entries = report
    rows = _metrics_rows(index.read_text(encoding="utf-8"))
    results = []
    for e in entries:
        results += [{**e.calibrated.result(), **e.calibrated.calibration_suite()},
                    {**e.raw.result(), **e.raw.calibration_suite()}]
    flat = [flat_keys(r) for r in results]
    assert set(rows) == set(flat[0]) | set(flat[2])  # the multiclass model adds corp_*.per_class
    for key in ("brier", "auc", "ece", "smece", "smece_sigma", "ks_pvalue", "kuiper_pvalue", "ecce_pvalue",
                "hosmer_lemeshow_pvalue", "calibration_slope", "calibration_intercept", "ici", "ece_equal_mass",
                "ece_classwise", "l2_ce_debiased.value", "l2_ce_debiased.low", "l2_ce_debiased.high"):
        assert rows[key] == [_expected(f[key]) for f in flat], key
    for key in [f"corp_{s}.{t}" for s in ("brier", "log_loss") for t in ("score", "mcb", "dsc", "unc")]:
        assert rows[key] == [_expected(f[key]) for f in flat], key
    assert rows["n_classes"] == ["2", "2", "3", "3"]


def test_metrics_table_is_grouped_and_explained(report):
    from calengine.metrics.report.catalogue import DOCS_PAGE, GROUPS, explain

    index, _ = report
    page = index.read_text(encoding="utf-8")
    groups = re.findall(r'<tr class="group" id="group-([a-z_]+)">', page)
    order = [g for g, _, _ in GROUPS]
    assert groups == sorted(groups, key=order.index) and {"scores", "binned", "smooth", "tests", "slope"} <= set(groups)
    assert "other" not in groups  # every key is explained
    for key in _metrics_rows(page):
        assert explain(key)[1], key
    assert "measuring-calibration.md" in page and DOCS_PAGE.split(" (")[0].replace("'", "&#x27;") in page


def test_nan_shows_as_na_without_raw_and_output_is_deterministic(tmp_path):
    """A perfect classifier has no errors, so confidence_rho is NaN; two runs give identical bytes.

    The second run writes into an existing empty directory, which is allowed.
    """
    y = np.repeat([0, 1], 200)
    p = np.where(y == 1, 0.9, 0.2)
    entry = ReportEntry("perfect", MetricAccumulator(2).add(y, p), None, ["a", "b"], None)
    first = write_report(tmp_path / "one", [entry])
    (tmp_path / "two").mkdir()
    second = write_report(tmp_path / "two", [entry])
    page = first.read_text(encoding="utf-8")
    assert _metrics_rows(page)["confidence_rho"] == ["n/a"]
    assert "No calibration map was provided" in page
    assert "not available" in page  # says the raw learner is missing
    assert page == second.read_text(encoding="utf-8")
    names = sorted(p.name for p in first.parent.iterdir())
    assert names == sorted(p.name for p in second.parent.iterdir())
    assert "overview.png" not in names  # one model: nothing to compare
    for name in names:
        assert (first.parent / name).read_bytes() == (second.parent / name).read_bytes(), name


# -------------------------------------------------------------------------------------------------- errors


def test_refuses_non_empty_or_file_target(tmp_path):
    entry = ReportEntry("m", MetricAccumulator(2).add([0, 1], [0.3, 0.6]), None, ["a", "b"], None)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(DataError, match="not empty") as info:
        write_report(busy, [entry])
    assert "\n" not in str(info.value) and "remove it" in str(info.value)
    assert [p.name for p in busy.iterdir()] == ["keep.txt"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(DataError, match="is a file"):
        write_report(afile, [entry])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "busy"]  # no staging left


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda acc: [], "non-empty list"),
        (lambda acc: [object()], "not a ReportEntry"),
        (lambda acc: [ReportEntry("m", acc, None, ["only one"], None)], "class names"),
        (lambda acc: [ReportEntry("m", acc, MetricAccumulator(3).add([0], [[1, 0, 0]]), ["a", "b"], None)],
         "raw has 3 classes"),
        (lambda acc: [ReportEntry("m", acc, None, ["a", "b"], {"scores": [1.0]})], "calibration_map"),
        (lambda acc: [ReportEntry("m", acc, None, ["a", "b"],
                                  {"scores": np.zeros((4, 2)), "probabilities": np.zeros((4, 1)),
                                   "column_names": ["c"]})], "same"),
    ],
)
def test_invalid_entries_raise_parameter_error(tmp_path, make, match):
    acc = MetricAccumulator(2).add([0, 1], [0.3, 0.6])
    with pytest.raises(ParameterError, match=match):
        write_report(tmp_path / "out", make(acc))
    assert not (tmp_path / "out").exists()


def test_empty_accumulator_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="no evaluated rows"):
        write_report(tmp_path / "out", [ReportEntry("m", MetricAccumulator(2), None, ["a", "b"], None)])


def test_missing_matplotlib_names_the_extra(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    entry = ReportEntry("m", MetricAccumulator(2).add([0, 1], [0.3, 0.6]), None, ["a", "b"], None)
    with pytest.raises(CalengineError, match=r"calengine\[report\]"):
        write_report(tmp_path / "out", [entry])
    assert not (tmp_path / "out").exists()


# -------------------------------------------------------------------------------------------------- caps


def test_many_classes_are_capped_to_the_most_frequent_and_said_so():
    k = MAX_CLASSES + 2
    rng = np.random.default_rng(3)
    y = np.concatenate([np.full(c + 1, c) for c in range(k)])  # class c has c + 1 examples
    P = _softmax(rng.normal(size=(y.size, k)))
    names = [f"c{c}" for c in range(k)]
    (prep,) = prepare_entries([ReportEntry("m", MetricAccumulator(k).add(y, P), None, names, None)])
    assert prep.classes == list(range(2, k))  # the two rarest classes are left out
    assert f"{k} classes" in prep.class_note and f"capped at {MAX_CLASSES}" in prep.class_note
    assert "c11" in prep.class_note


def test_calibration_map_is_subsampled_and_columns_capped():
    m, l = MAP_MAX_POINTS + 1000, MAX_CLASSES + 1
    rng = np.random.default_rng(4)
    scores = rng.normal(size=(m, l))
    cmap = {"scores": scores, "probabilities": _sigmoid(scores), "column_names": [f"col{j}" for j in range(l)]}
    acc = MetricAccumulator(2).add([0, 1], [0.3, 0.6])
    (a,) = prepare_entries([ReportEntry("m", acc, None, ["a", "b"], cmap)])
    (b,) = prepare_entries([ReportEntry("m", acc, None, ["a", "b"], cmap)])
    assert a.map_scores.shape == (MAP_MAX_POINTS, MAX_CLASSES) == a.map_probs.shape
    assert np.array_equal(a.map_scores, b.map_scores)  # deterministic subsample
    assert np.allclose(a.map_probs, _sigmoid(a.map_scores))  # rows stay paired
    assert a.map_names == [f"col{j}" for j in range(MAX_CLASSES)]
    assert str(MAP_MAX_POINTS) in a.map_note and f"{l} columns" in a.map_note


def test_roc_panel_of_an_absent_class_is_marked_undefined():
    y = np.array([0, 1, 0, 1, 0, 1])
    P = np.array([[0.6, 0.3, 0.1]] * 3 + [[0.2, 0.7, 0.1]] * 3)
    entry = ReportEntry("m", MetricAccumulator(3).add(y, P), None, ["a", "b", "never"], None)
    (prep,) = prepare_entries([entry])
    fig = _roc_figure(prep)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("undefined" in t for t in texts)
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 3


# -------------------------------------------------------------------------------------------------- browser


def _find_chromium() -> str | None:
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _chromium(binary: str, tmp: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    """Run headless chromium once, kept off the network and out of the user's profile."""
    env = dict(os.environ, HOME=str(tmp), XDG_CONFIG_HOME=str(tmp / "config"), XDG_CACHE_HOME=str(tmp / "cache"))
    args = [
        binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp / 'profile'}", "--enable-logging=stderr", "--v=0", *extra, url,
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env=env, cwd=tmp)


def _console_lines(stderr: str) -> list[str]:
    """Messages the page itself produced: chromium logs them as CONSOLE lines (uncaught errors, CSP
    violations, failed loads, console.* calls).  Its own startup noise (dbus, GPU, sandbox) never
    carries these markers, so it is ignored."""
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]


_PROBE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>probe</title></head><body>
<pre id="probe">pending</pre>
<iframe id="report" src="{url}" width="1280" height="2000"></iframe>
<script>
window.addEventListener("load", function () {{
  var probe = document.getElementById("probe");
  try {{
    var imgs = document.getElementById("report").contentDocument.images, out = [];
    for (var i = 0; i < imgs.length; i++) {{
      out.push(imgs[i].complete + ":" + imgs[i].naturalWidth + "x" + imgs[i].naturalHeight);
    }}
    probe.textContent = "images=" + imgs.length + " " + out.join(" ");
  }} catch (e) {{
    probe.textContent = "probe-failed " + e;
  }}
}});
</script></body></html>
"""


def test_renders_in_headless_chromium_without_console_errors(report, tmp_path):
    binary = _find_chromium()
    if binary is None:
        pytest.skip("chromium not found (looked for /usr/bin/chromium, chromium, chromium-browser on PATH)")
    index, _ = report
    page = index.read_text(encoding="utf-8")
    expected_sizes = [
        f"true:{w}x{h}"
        for w, h in re.findall(r'<img src="data:image/png;base64,[^"]+" width="(\d+)" height="(\d+)"', page)
    ]
    assert len(expected_sizes) == 15

    # 1. the report itself, as a user opens it: the DOM holds every image and nothing complains
    run = _chromium(binary, tmp_path, index.as_uri(), "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("<img") == len(expected_sizes)
    assert 'id="metrics-table"' in run.stdout
    # the grouped table and the smooth reliability figures, as the browser parsed them
    assert re.findall(r'<tr class="group" id="group-([a-z_]+)">', run.stdout)[:2] == ["size", "scores"]
    assert '<tr data-key="smece">' in run.stdout and '<tr data-key="calibration_slope">' in run.stdout
    assert len(re.findall(r'<img [^>]*alt="Smooth reliability diagram of ', run.stdout)) == 2
    assert _console_lines(run.stderr) == []

    # 2. a test-only wrapper (the report stays script-free) reads every image's decoded size
    probe = tmp_path / "probe.html"
    probe.write_text(_PROBE.format(url=index.as_uri()), encoding="utf-8")
    run = _chromium(
        binary, tmp_path, probe.as_uri(), "--allow-file-access-from-files",
        "--run-all-compositor-stages-before-draw", "--virtual-time-budget=5000", "--dump-dom",
    )
    assert run.returncode == 0, run.stderr[-2000:]
    found = re.search(r'<pre id="probe">([^<]*)</pre>', run.stdout)
    assert found, run.stdout[:2000]
    assert found.group(1).split() == [f"images={len(expected_sizes)}", *expected_sizes]
    assert _console_lines(run.stderr) == []

    # 3. a screenshot: the page paints (not blank) and still logs nothing
    shot = tmp_path / "shot.png"
    run = _chromium(binary, tmp_path, index.as_uri(), f"--screenshot={shot}", "--window-size=1280,2000",
                    "--hide-scrollbars")
    assert run.returncode == 0, run.stderr[-2000:]
    assert _png_size(shot.read_bytes()) == (1280, 2000)
    _check_png(shot.read_bytes())
    assert _console_lines(run.stderr) == []
