"""Probing and bagging as Dask tasks: graph building and the fitted vote-based members.

Probing (Langford & Zadrozny) is adaptive: each threshold depends on the training votes of the
classifiers learned so far.  We keep that and still run in parallel: every *round* asks each column's
:class:`~calengine.methods.probing.ProbingSchedule` for up to ``batch`` thresholds (``batch=1`` is the paper
exactly), submits one task per (column, threshold, costing round), longest expected fit first (a
whole round in one task on a one-thread cluster), gathers the votes, adds them up in the schedule's
order, and lets the schedules choose the next round.  Bagging classifiers are independent, so they all
go at once.  The training data are scattered to workers once; tasks carry seeds derived from
(user seed, column, classifier, costing round), so the model is the same on any scheduler.

Method parameters (``--method-param K=V``):

* ``t`` (100): classifiers per binary column.
* ``loss`` ("cross_entropy" | "squared"), ``interval_rule`` (squared only: "width" | "width_squared").
* ``batch`` (8): intervals split per round; 1 reproduces Algorithm 1 step by step.
* ``weighting`` ("auto" | "weights" | "costing"): auto passes importance weights to learners that
  accept them and uses costing (rejection sampling) for the others.
* ``costing_rounds`` (5): rejection samples per classifier under costing, combined by majority vote
  (a tie votes 1).  ``bounded_weights`` (False): weights (1-p, p) instead of ((1-p)/p, 1).
* ``clip`` ((0.001, 0.999) for Probing, none for bagging): clip predictions; ``none`` disables.
* ``multiclass`` ("k_minus_one" | "one_vs_rest"): the paper's k-1 binary problems with
  p_k = 1 - sum(p_l) (a last class below 0.001 is set to 0.001 and the others rescaled, a documented
  deviation), or k one-vs-rest problems combined by normalisation.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..methods import probing
from ..plugins import registry
from ..methods.codematrix import k_minus_one as k_minus_one_matrix
from ..errors import ParameterError
from ..model.calibrated import RawMap, one_vs_all_matrix
from ..model.vote import VoteMember, Voter
from ..runtime.progress import gather_in_order
from ..tasks.probing import fit_bootstrap, fit_probes, learner_scores
from ..tasks.arrays import task_seed

PROBING_DEFAULTS: dict[str, Any] = {
    "t": 100,
    "loss": "cross_entropy",
    "interval_rule": None,
    "batch": 8,
    "weighting": "auto",
    "costing_rounds": 5,
    "bounded_weights": False,
    "clip": (0.001, 0.999),
    "multiclass": "k_minus_one",
}
#: at most this many classifiers per problem (t, costing rounds): far beyond the papers' 100, and a
#: typo such as t=10**9 is refused at once instead of running for ever
MAX_CLASSIFIERS = 10_000
BAGGING_DEFAULTS: dict[str, Any] = {"t": 100, "clip": None, "multiclass": "one_vs_rest"}


def method_settings(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """Defaults overlaid with the user's parameters, validated with one-line errors."""
    defaults = PROBING_DEFAULTS if method == "probing" else BAGGING_DEFAULTS
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise ParameterError(
            f"method '{method}' has no parameter {', '.join(map(repr, unknown))}; valid: {', '.join(sorted(defaults))}"
        )
    s = {**defaults, **params}
    if not isinstance(s["t"], int) or isinstance(s["t"], bool) or not 1 <= s["t"] <= MAX_CLASSIFIERS:
        raise ParameterError(
            f"t must be an integer from 1 to {MAX_CLASSIFIERS}, got {s['t']!r} (e.g. method_params t=100;"
            " each of the t classifiers is a full learner fit)", parameter="method_params")
    if s["clip"] is not None:
        clip = s["clip"]
        if not (isinstance(clip, (tuple, list)) and len(clip) == 2 and 0 <= clip[0] < clip[1] <= 1):
            raise ParameterError(f"clip must be (low, high) with 0 <= low < high <= 1, or none; got {clip!r}")
        s["clip"] = (float(clip[0]), float(clip[1]))
    if s["multiclass"] not in ("k_minus_one", "one_vs_rest"):
        raise ParameterError(f"multiclass must be k_minus_one or one_vs_rest, got {s['multiclass']!r}")
    if method == "probing":
        if s["weighting"] not in ("auto", "weights", "costing"):
            raise ParameterError(f"weighting must be auto, weights or costing, got {s['weighting']!r}")
        if (not isinstance(s["costing_rounds"], int) or isinstance(s["costing_rounds"], bool)
                or not 1 <= s["costing_rounds"] <= MAX_CLASSIFIERS):
            raise ParameterError(
                f"costing_rounds must be an integer from 1 to {MAX_CLASSIFIERS}, got {s['costing_rounds']!r}"
            )
        if not isinstance(s["batch"], int) or isinstance(s["batch"], bool):
            raise ParameterError(f"batch must be an integer, got {s['batch']!r}")
        # validates t, loss, batch and interval_rule together, with the schedule's own messages
        probing.ProbingSchedule(s["t"], s["loss"], s["batch"], s["interval_rule"])
    return s


def column_classes(k: int, multiclass: str) -> list[int | None]:
    if k == 2:
        return [None]
    if multiclass == "k_minus_one":
        return list(range(k - 1))
    return list(range(k))


def fit_reduction_members(client, data, labels, learner, config, plugins, progress, n_rows: int | None = None):
    """Fit a Probing or bagging member; returns (members, code matrix, combiner, column counts).

    ``data`` is in-memory :class:`~calengine.tasks.arrays.TrainingData` (scattered to every worker once), or,
    with ``n_rows``, a future of it already assembled on a worker (partition-native fits).
    """
    s = method_settings(config.method, config.method_params)
    k = labels.n_classes
    columns = column_classes(k, s["multiclass"])
    if n_rows is None:
        n_rows = len(data.y)
        data_f = client.scatter(data, broadcast=True, hash=False)
    else:
        data_f = data
    if config.method == "probing":
        voters, boundaries = _fit_probing(client, data_f, n_rows, columns, learner, s, config.seed, progress)
    else:
        voters, boundaries = _fit_bagging(client, data_f, columns, learner, s, config.seed, progress)
    first_scores = client.gather(
        [client.submit(learner_scores, voters[c][0][0], data_f, pure=False) for c in range(len(columns))]
    )
    S = np.column_stack([fs[:, 0] for fs in first_scores])
    score_kind = learner.score_kind
    member = VoteMember(config.method, voters, boundaries, s.get("loss", "cross_entropy"), s["clip"], RawMap.fit(S, score_kind))
    matrix, combiner = vote_code_matrix(k, s["multiclass"], plugins)
    counts = np.full(matrix.shape[1], n_rows, dtype=np.int64)
    return [member], matrix, combiner, counts


def vote_code_matrix(k: int, multiclass: str, plugins):
    """(code matrix, combiner) of a vote member's columns: the k-1 problems or one-vs-rest."""
    if k == 2:
        return np.array([[-1], [1]], dtype=np.int8), None
    if multiclass == "k_minus_one":
        return k_minus_one_matrix(k), registry.make("combiners", "k_minus_one", {}, plugins)
    return one_vs_all_matrix(k), registry.make("combiners", "normalize", {}, plugins)


def probing_weighting(learner, requested: str) -> str:
    if requested == "auto":
        return "weights" if learner.accepts_sample_weight else "costing"
    if requested == "weights" and not learner.accepts_sample_weight:
        raise ParameterError(
            f"learner '{learner.name}' does not accept sample weights; use method_params weighting=costing", parameter="method_params")
    return requested


@dataclass(frozen=True)
class Probe:
    """One fit of a Probing round: classifier ``index`` of ``column`` (costing ``round``) at threshold ``p``.

    ``expected`` is a guess of its CPU seconds (:func:`expected_seconds`), used only to order the
    submissions; ``seed`` comes from (user seed, column, index, round) as before, so the order in which
    the fits run never changes a classifier.
    """

    column: int
    index: int
    round: int
    column_class: int | None
    p: float
    seed: int
    expected: float = 0.0


def expected_seconds(p: float, fitted: list[tuple[float, float]]) -> float:
    """How long a fit at threshold ``p`` will probably take: the mean CPU seconds of the fits at the
    nearest thresholds already fitted below and above ``p`` (``fitted``: sorted ``(threshold, seconds)``
    pairs of the column); 0.0 before any fit.

    Why neighbours: a new threshold splits an interval whose ends were fitted in earlier rounds, and
    a learner's cost varies smoothly with the weights (1-p)/p.  With decision trees on Adult the
    fits at p near 0 or 1 take up to 25% longer than those near 1/2.
    """
    k = bisect.bisect_left(fitted, (p,))
    near = [fitted[j][1] for j in (k - 1, k) if 0 <= j < len(fitted)]
    return sum(near) / len(near) if near else 0.0


def longest_first(probes: list[Probe]) -> list[Probe]:
    """``probes`` by decreasing expected seconds; equal guesses keep their order (the schedule's).

    A round ends when its last fit does, so the fits are handed to the workers longest first
    (Graham's LPT rule): the short ones then fill the gaps at the end instead of a long one
    running alone while the other threads wait for the next round.
    """
    return sorted(probes, key=lambda pr: -pr.expected)


def _cluster_threads(client) -> int:
    """Threads of the cluster's workers now (0 while none has joined)."""
    try:
        return int(sum(client.nthreads().values()))
    except Exception:  # noqa: BLE001 - a client without the call: keep one task per fit
        return 0


def _fit_probing(client, data_f, n, columns, learner, s, seed, progress):
    """Algorithm 1 in rounds on Dask (see the module docstring).

    Within a round the fits go out longest-expected first (:func:`longest_first`), one task each when
    the cluster has several threads.  With a single thread a round is one task: nothing runs in
    parallel anyway, and each task would cost a scheduler round trip (about 1.5 ms; 100 of them are
    ~1% of a Probing fit on Adult).  Either way the classifiers, their seeds and their order are
    those of the schedule, so the model does not depend on the cluster.
    """
    weighting = probing_weighting(learner, s["weighting"])
    bounded = bool(s["bounded_weights"])
    rounds = s["costing_rounds"] if weighting == "costing" else 1
    schedules = [probing.ProbingSchedule(s["t"], s["loss"], s["batch"], s["interval_rule"]) for _ in columns]
    votes = [np.zeros(n, dtype=np.int64) for _ in columns]
    voters: list[list[list[Voter]]] = [[] for _ in columns]
    fitted: list[list[tuple[float, float]]] = [[] for _ in columns]  # (threshold, CPU seconds), sorted
    one_thread = _cluster_threads(client) == 1
    total = s["t"] * rounds * len(columns)
    if progress is not None:
        progress.start("probing", total)
    while not all(sched.done for sched in schedules):
        probes: list[Probe] = []
        for c, (sched, col_class) in enumerate(zip(schedules, columns)):
            if sched.done:
                continue
            for p in sched.next_thresholds(votes[c]):
                i = len(voters[c])
                voters[c].append([])
                guess = expected_seconds(float(p), fitted[c])
                probes += [Probe(c, i, r, col_class, float(p), task_seed(seed, c, i, r), guess) for r in range(rounds)]
        order = longest_first(probes)
        chunks = [order] if one_thread else [[pr] for pr in order]
        futures = [
            client.submit(
                fit_probes, data_f, learner, weighting, bounded,
                [(pr.column_class, pr.p, pr.seed) for pr in chunk], pure=False,
            )
            for chunk in chunks
        ]
        results = client.gather(futures)
        if progress is not None:
            progress.advance(len(probes))
        got = {}
        for chunk, out in zip(chunks, results):
            for pr, res in zip(chunk, out):
                got[(pr.column, pr.index, pr.round)] = res
        for pr in probes[::rounds]:  # each classifier once, in schedule order
            c, i = pr.column, pr.index
            fits = [got[(c, i, r)] for r in range(rounds)]
            voters[c][i] = [v for v, _, _ in fits]
            v = sum(vv.astype(np.int64) for _, vv, _ in fits)
            votes[c] += probing.majority_vote(v, rounds) if rounds > 1 else v
            bisect.insort(fitted[c], (pr.p, sum(sec for _, _, sec in fits) / rounds))
    if progress is not None:
        progress.finish()
    return voters, [sched.boundaries for sched in schedules]


def _fit_bagging(client, data_f, columns, learner, s, seed, progress):
    futures = [
        client.submit(fit_bootstrap, data_f, col_class, learner, task_seed(seed, c, i), pure=False)
        for c, col_class in enumerate(columns)
        for i in range(s["t"])
    ]
    results = gather_in_order(client, futures, progress, "bagging")
    voters = []
    for c in range(len(columns)):
        chunk = results[c * s["t"] : (c + 1) * s["t"]]
        voters.append([[v] for v, _ in chunk])
    return voters, [np.array([0.0, 1.0]) for _ in columns]
