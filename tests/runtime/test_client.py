"""The engine on real schedulers: same seed, same bits; agreement with scikit-learn; calibration helps."""

from __future__ import annotations


import warnings
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from sklearn.exceptions import ConvergenceWarning

import calengine
import calengine.base
from calengine.runtime.client import dask_client
from cli_helpers import PIMA as _PIMA

PIMA = str(_PIMA)


def _fit_and_score(cli, tmp_path, tag, *extra, learner=("decision_tree", "--learner-param", "max_depth=4"),
                   method="isotonic"):
    out = tmp_path / f"model-{tag}"
    r = cli("fit", PIMA, "--target", "class", "--learner", *learner,
            "--method", method, "--seed", "11", "--output", out, *extra)
    assert r.returncode == 0, r
    scored = tmp_path / f"scored-{tag}"
    r = cli("score", out, PIMA, "--output", scored, *extra)
    assert r.returncode == 0, r
    files = {str(f.relative_to(out)): f.read_bytes() for f in sorted(out.rglob("*")) if f.is_file()}
    return pq.read_table(scored).to_pandas(), files


@pytest.mark.cluster
@pytest.mark.parametrize(
    "learner, method",
    [(("decision_tree", "--learner-param", "max_depth=4"), "isotonic"),  # rows assembled on a worker
     (("gaussian_nb",), "sigmoid")],  # fitted from merged statistics; Newton rounds over partitions
)
def test_same_seed_same_bits_on_every_scheduler(cli, tmp_path, dask_cluster, learner, method):
    kw = {"learner": learner, "method": method}
    runs = {
        "embedded-1": _fit_and_score(cli, tmp_path, "e1", "--workers", "1", **kw),
        "embedded-2": _fit_and_score(cli, tmp_path, "e2", "--workers", "2", **kw),
        "localcluster-2": _fit_and_score(cli, tmp_path, "lc", "--cluster", "--workers", "2", **kw),
        "dask-worker": _fit_and_score(cli, tmp_path, "dw", "--cluster", dask_cluster, **kw),
    }
    ref_scores, ref_files = runs["embedded-1"]
    for name, (scores, files) in runs.items():
        pd.testing.assert_frame_equal(scores, ref_scores, check_exact=True, obj=name)
        assert files.keys() == ref_files.keys()
        assert [k for k in files if files[k] != ref_files[k]] == [], name  # every file, byte for byte


def test_matches_sklearn_calibrated_classifier_cv_when_configured_the_same():
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.datasets import make_classification
    from sklearn.model_selection import StratifiedKFold
    from sklearn.naive_bayes import GaussianNB

    X, y = make_classification(3000, 8, n_informative=5, random_state=1)
    Xt, yt = make_classification(1000, 8, n_informative=5, random_state=2)
    ours = calengine.CalibratedClassifier(
        "gaussian_nb", "isotonic", cv=5, seed=7, method_params={"interpolation": "linear"}
    ).fit(X, y)
    theirs = CalibratedClassifierCV(
        GaussianNB(), method="isotonic", cv=StratifiedKFold(5, shuffle=True, random_state=7), ensemble=True
    ).fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(Xt), theirs.predict_proba(Xt), atol=1e-9)


def test_calibration_improves_brier_of_naive_bayes_on_held_out_data():
    """scikit-learn's test_calibration asserts this for its own calibrators; we assert it for ours."""
    from sklearn.datasets import make_classification
    from sklearn.metrics import brier_score_loss

    X, y = make_classification(4000, 10, n_informative=4, n_redundant=4, random_state=42)
    Xtr, ytr, Xte, yte = X[:3000], y[:3000], X[3000:], y[3000:]
    raw = calengine.CalibratedClassifier("gaussian_nb", "none").fit(Xtr, ytr)
    raw_brier = brier_score_loss(yte, raw.predict_proba(Xte)[:, 1])
    for method in ("isotonic", "sigmoid", "binning", "rocch", "beta"):
        cal = calengine.CalibratedClassifier("gaussian_nb", method, cv=3).fit(Xtr, ytr)
        P = cal.predict_proba(Xte)
        np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
        assert brier_score_loss(yte, P[:, 1]) < raw_brier, method


def test_refit_mode_uses_one_learner_and_out_of_fold_scores():
    """Refit mode: one learner fitted on every row, calibrated on out-of-fold scores -- rebuilt here by
    hand from the same stratified folds and compared with the model's learner and calibrator."""
    from sklearn.datasets import make_classification

    from calengine.plugins import registry
    from calengine.parquet.data import stratified_folds

    X, y = make_classification(1500, 6, random_state=3)
    clf = calengine.CalibratedClassifier("logistic_regression", "sigmoid", mode="refit", cv=4, seed=8).fit(X, y)
    assert len(clf.model_.members) == 1
    member = clf.model_.members[0]
    Z = clf._encode(X)

    def learner():
        return registry.make("learners", "logistic_regression", {})

    np.testing.assert_allclose(member.learners[0].score(Z), learner().fit(Z, y).score(Z), rtol=1e-10)
    oof = np.empty(len(y))
    for train, held in stratified_folds(y, 4, 8):
        oof[held] = learner().fit(Z[train], y[train]).score(Z[held])
    by_hand = registry.make("calibrators", "sigmoid", {}).fit(oof, y, sample_weight=None, score_kind=member.learners[0].score_kind)
    grid = np.linspace(oof.min(), oof.max(), 101)
    np.testing.assert_allclose(member.calibrators[0].predict(grid), by_hand.predict(grid), rtol=1e-9)
    # in-sample scores would give another calibrator: the comparison above can tell them apart
    in_sample = registry.make("calibrators", "sigmoid", {}).fit(
        member.learners[0].score(Z), y, sample_weight=None, score_kind=member.learners[0].score_kind)
    assert np.max(np.abs(in_sample.predict(grid) - by_hand.predict(grid))) > 1e-6
    P = clf.predict_proba(X)
    assert P.shape == (1500, 2) and np.all((P >= 0) & (P <= 1))


@pytest.mark.parametrize("learner", ["decision_tree", "logistic_regression", "mlp"])
def test_result_does_not_depend_on_thread_count(learner):
    """Tree fits use no BLAS; logistic regression and the MLP do, and concurrent tasks must not
    change each other's BLAS thread count mid-fit (the limit is process-wide)."""
    from sklearn.datasets import make_classification

    X, y = make_classification(3000, 30, n_classes=3, n_informative=10, random_state=5)
    # 60 epochs (not the default 500) keep the MLP's fits at seconds; its BLAS calls run in every epoch all the same
    params = {"max_iter": 60} if learner == "mlp" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        P = [
            calengine.CalibratedClassifier(learner, "sigmoid", seed=4, workers=w, learner_params=params)
            .fit(X, y).predict_proba(X)
            for w in (1, 2, 3, 2)
        ]
    for other in P[1:]:
        np.testing.assert_array_equal(P[0], other)
    np.testing.assert_allclose(P[0].sum(axis=1), 1.0, atol=1e-12)


def test_every_task_thread_runs_openmp_on_one_thread():
    """OpenMP's thread count is per thread: the process-wide pin did not reach the Dask threads, where
    HistGradientBoosting then started a joblib pool per fit (two starting and ending at once deadlocked).
    A thread that pins after another thread did must still get one OpenMP thread."""
    import os
    import threading

    from threadpoolctl import threadpool_info

    from calengine.runtime.threads import pin_native_threads

    if os.cpu_count() < 2 or not any(i["user_api"] == "openmp" for i in threadpool_info()):
        pytest.skip("needs OpenMP and 2 cores to tell one thread from many")
    pin_native_threads()  # this thread first, as the client's does
    seen = []

    def task():
        pin_native_threads()
        seen.extend(i["num_threads"] for i in threadpool_info() if i["user_api"] == "openmp")

    t = threading.Thread(target=task)
    t.start()
    t.join()
    assert seen and set(seen) == {1}, seen


@pytest.mark.cluster
def test_worker_version_mismatch_is_refused_with_one_line(cli, tmp_path):
    """A real ``dask worker`` whose environment reports scikit-learn 0.0.1 (a dist-info directory first
    on its PYTHONPATH, as a stale install would leave) is refused before any task runs."""
    import os

    from calengine.testing.cluster import start_dask_processes, stop_processes
    from cli_helpers import assert_one_line_error

    fake = tmp_path / "stale-site"
    info = fake / "scikit_learn-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: scikit-learn\nVersion: 0.0.1\n")
    # no empty entry: it would put the worker's working directory (the checkout) on sys.path
    env = {"PYTHONPATH": os.pathsep.join(p for p in [str(fake), os.environ.get("PYTHONPATH")] if p)}
    address, procs = start_dask_processes(workers=1, memory_limit=None, worker_env=env)
    try:
        out = tmp_path / "m"
        r = cli("fit", PIMA, "--target", "class", "--cluster", address, "--output", out)
        assert_one_line_error(r, "scikit-learn", "0.0.1")
        assert not out.exists()
    finally:
        stop_processes(procs)


@pytest.mark.cluster
def test_worker_that_cannot_import_a_plugin_is_refused(dask_cluster):
    from calengine.runtime.versions import check_workers
    from calengine.errors import ClusterError
    from distributed import Client

    with Client(dask_cluster, timeout="10s") as client:
        check_workers(client, ("calengine-builtins",), ("calengine_builtins.learners",))
        with pytest.raises(ClusterError, match="no_such_plugin_module"):
            check_workers(client, (), ("no_such_plugin_module",))


def test_every_task_submitted_through_the_checked_client_checks_its_worker():
    """The per-task check is what catches a worker that joined after :func:`check_workers` ran: a
    client whose recorded versions differ from the workers' must see ``submit`` and ``map`` tasks fail
    with a :class:`ClusterError` naming the package (a merge once left ``CheckedClient`` without its own
    ``submit``, so tasks ran unchecked and only the slow real-cluster test noticed)."""
    from distributed import Client, LocalCluster

    from calengine.runtime.versions import CheckedClient, plain_client
    from calengine.errors import ClusterError

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as lc, \
            Client(lc) as c:
        checked = CheckedClient(c)
        assert plain_client(checked) is c
        assert checked.submit(abs, -3).result() == 3  # same environment: the check passes
        assert checked.map(abs, [-1, -2]) and c.gather(checked.map(abs, [-1, -2])) == [1, 2]
        checked._versions = {**checked._versions, "scikit-learn": "0.0.1"}
        with pytest.raises(ClusterError, match="scikit-learn differs: client has 0.0.1"):
            checked.submit(abs, -4).result()
        with pytest.raises(ClusterError, match="scikit-learn differs"):
            c.gather(checked.map(abs, [-5, -6]))


def test_the_checked_client_resolves_futures_and_checks_before_unpickling_the_task():
    """Arguments other than futures travel pickled inside the task and are unpickled after the check:
    futures (alone or in a list) still reach the function resolved, keywords too, and a task this
    worker cannot unpickle is a ClusterError naming the cause, not a worker stuck for ever."""
    from distributed import Client, LocalCluster

    from calengine.runtime.versions import CheckedClient
    from calengine.errors import ClusterError

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as lc, \
            Client(lc) as c:
        checked = CheckedClient(c)
        a = checked.submit(sum, [1, 2, 3], pure=False)
        b = checked.submit(np.add, a, 10)
        both = checked.submit(lambda xs, scale=1: [x * scale for x in xs], [a, b], scale=2)
        assert both.result() == [12, 32]
        assert checked.submit(max, a, b, key="the-max").key == "the-max"
        assert [f.key for f in checked.map(abs, [-1, -2], key="abs")] == ["abs-0", "abs-1"]
        # arrays travel as out-of-band buffers, and distinct arrays are distinct tasks
        ones, twos = np.ones(100_000), np.full(100_000, 2.0)
        assert c.gather([checked.submit(np.sum, ones), checked.submit(np.sum, twos)]) == [100_000.0, 200_000.0]
        with pytest.raises(ClusterError, match="cannot load a task of this job.*no_such_plugin_module.*every worker"):
            checked.submit(len, _Unloadable()).result()


class _Unloadable:
    """Unpickles into an import of a module this worker lacks (what a missing plugin looks like)."""

    def __reduce__(self):
        import importlib

        return importlib.import_module, ("no_such_plugin_module",)


class _DataCopiesProbe(calengine.base.Learner):
    """Counts, while it is being fitted, the TrainingData objects held by the worker it runs on."""

    name = "data_copies_probe"
    score_kind = "decision"

    def fit(self, X, y, sample_weight=None):
        from distributed import get_worker

        from calengine.tasks import arrays as tasks

        self.copies_ = sum(isinstance(v, tasks.TrainingData) for v in get_worker().data.values())
        return self

    def score(self, X):
        return X[:, 0]

    def to_state(self):
        return {"copies": self.copies_}

    def from_state(self, state):
        self.copies_ = int(state["copies"])
        return self


def test_training_data_reach_each_worker_once():
    """Folds carry only a fold number: the scattered data is the one large object on a worker while it
    fits (counted inside the fit; after fit_members returns, the scattered data are being released)."""
    from calengine.tasks import arrays as tasks
    from calengine.fit.arrays import CalibrationPlan, fit_members
    from calengine.plugins.registry import make
    from calengine.fit.training import fold_assignment

    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 5))
    y = (X[:, 0] > 0).astype(int)
    data = tasks.TrainingData(X=X, y=y, folds=fold_assignment(y, 5, 0))
    plan = CalibrationPlan(_DataCopiesProbe(), make("calibrators", "sigmoid"), cv=5)
    with dask_client("local", workers=2) as client:
        members = fit_members(client, data, plan)
    assert len(members) == 5
    assert [m.learners[0].copies_ for m in members] == [1] * 5


class _ThreadProbe(calengine.base.Learner):
    """Records how many BLAS threads it sees mid-fit; the fold with an odd row count waits first, so the
    other task has finished (and, with a scoped limit, would have restored the default) by then."""

    name = "thread_probe"
    score_kind = "decision"

    def fit(self, X, y, sample_weight=None):
        import time

        from threadpoolctl import threadpool_info

        if len(y) % 2:
            time.sleep(1.0)
        self.threads_ = max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"), default=1)
        return self

    def score(self, X):
        return X[:, 0]

    def to_state(self):
        return {"threads": self.threads_}

    def from_state(self, state):
        self.threads_ = int(state["threads"])
        return self


def test_concurrent_tasks_keep_one_blas_thread_throughout():
    from threadpoolctl import threadpool_info

    if max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"), default=1) < 2:
        pytest.skip("BLAS runs one thread here anyway; nothing to observe")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(101, 3))
    y = (X[:, 0] > 0).astype(int)
    clf = calengine.CalibratedClassifier(_ThreadProbe(), "sigmoid", cv=2, workers=2).fit(X, y)
    seen = [m.learners[0].threads_ for m in clf.model_.members]
    assert seen == [1, 1], seen


def test_a_plugins_own_dependencies_are_version_checked_on_workers():
    """Workers are compared on the plugin distribution and on what it requires (here scikit-learn and
    scipy through calengine-builtins), so a worker with another copy of a plugin's library is caught."""
    from calengine.plugins import registry
    from calengine.cli import _installed_requirements, _plugin_requirements
    from calengine.plugins import get_plugins

    plugins = get_plugins()
    dists, _ = _plugin_requirements([registry.make("learners", "gaussian_nb", {}, plugins)])
    assert {"calengine-builtins", "scikit-learn", "scipy", "numpy"} <= set(dists)
    assert "calengine" not in dists
    assert _installed_requirements("no-such-distribution") == set()


@pytest.mark.cluster
def test_workers_of_cluster_local_spill_held_results_early_and_keep_small_arrays_on_the_heap():
    """What keeps --cluster local workers flat, fast and never stuck (see calengine.runtime.client): the spill
    target, the glibc mmap threshold and the disabled pause must reach the spawned worker processes,
    not only the client."""
    import os

    from calengine.runtime.client import HELD_DATA_FRACTION, WORKER_MMAP_THRESHOLD, dask_client

    def seen(dask_worker):
        mm = dask_worker.memory_manager
        return mm.memory_target_fraction, mm.memory_pause_fraction, os.environ.get("MALLOC_MMAP_THRESHOLD_")

    with dask_client("local", workers=1, memory_limit="1GiB") as client:
        (got,) = client.run(seen).values()
    assert got == (HELD_DATA_FRACTION, False, str(WORKER_MMAP_THRESHOLD))
