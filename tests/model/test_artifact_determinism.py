"""Same inputs and seed, same model bytes: every file of the model directory, on every scheduler
(issue 10, item 17).  Predictions being equal is not enough -- the artifact itself must be."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "data"


def _fit(cli, out: Path, args: tuple, *extra) -> dict[str, bytes]:
    r = cli("fit", *args, "--seed", "5", "--output", out, *extra)
    assert r.returncode == 0, r
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _assert_same_bytes(runs: dict[str, dict[str, bytes]]) -> None:
    (ref_name, ref), *others = runs.items()
    assert "manifest.json" in ref and any(k.endswith(".npz") for k in ref)
    for name, files in others:
        assert files.keys() == ref.keys(), (name, sorted(files.keys() ^ ref.keys()))
        differing = [k for k in ref if files[k] != ref[k]]
        assert not differing, f"{name} differs from {ref_name} in {differing}"


MODELS = {
    "code_matrix": (DATA / "pendigits_test.parquet", "--target", "class", "--learner", "logistic_regression",
                    "--method", "sigmoid", "--multiclass", "sparse_ecoc:least_squares", "--cv", "2"),
    "bagging": (DATA / "pima.parquet", "--target", "class", "--learner", "decision_tree", "--learner-param",
                "max_depth=3", "--method", "bagging", "--method-param", "t=6", "--cv", "2"),
    "refit": (DATA / "pima.parquet", "--target", "class", "--learner", "decision_tree", "--learner-param",
              "max_depth=4", "--method", "sigmoid", "--mode", "refit", "--cv", "3"),
    # a learner fitted from per-fragment statistics (gaussian_nb's blocked moments, issue 43 §2)
    "statistics": (DATA / "pendigits_test.parquet", "--target", "class", "--learner", "gaussian_nb",
                   "--method", "isotonic", "--cv", "3"),
}


@pytest.mark.cluster
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_identical_files_on_every_scheduler(kind, cli, tmp_path, dask_cluster):
    """Three fits in three processes (other object addresses, other seconds on the clock), on an
    embedded scheduler, a LocalCluster and separate dask workers."""
    _assert_same_bytes({
        "embedded-1": _fit(cli, tmp_path / "e1", MODELS[kind], "--workers", "1"),
        "localcluster-2": _fit(cli, tmp_path / "lc", MODELS[kind], "--cluster", "--workers", "2"),
        "dask-worker": _fit(cli, tmp_path / "dw", MODELS[kind], "--cluster", dask_cluster),
    })
