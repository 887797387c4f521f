"""
# Cost curve: what a threshold earns

Calibrated probabilities let the costs set the decision threshold, with no labelled data to tune it.
`calengine evaluate --cost-matrix M` reports the profit of the minimum-expected-cost decisions and, for
two classes, the whole curve "decide 1 when p > t" over a grid of thresholds, for the calibrated and
the raw probabilities. Here Zadrozny & Elkan's mailing decision on the COIL 2000 insurance data: an offer
costs 5, a sale brings 10 times the customer's purchasing-power class (`MKOOPKLA`).
"""

# %%
# Naive Bayes with isotonic calibration (`--mode refit`), and the benefit matrix: rows are decisions,
# columns the truth; an entry may be a linear expression of the table's numeric columns.
import calengine

model = calengine.fit_table("data/coil2000/train.parquet", "class", positive=1, learner="categorical_nb",
                            learner_params={"n_bins": 50}, method="isotonic", mode="refit", seed=0)
benefits = {"classes": [0, 1], "benefits": [[0, 0], [-5, "10*MKOOPKLA - 5"]]}
ev = calengine.evaluate_models([model], "data/coil2000/test.parquet", "class", cost_matrix=benefits).to_json()
d = ev["decisions"]
sign = 1 if d["objective"] == "profit" else -1  # a cost matrix reports costs; this one, profits
for policy in ("calibrated", "raw", "best_constant", "oracle"):
    print(f"{policy:14s} total profit {sign * d[policy]['total']:8.0f}")

# %%
# The curve. With a cost that varies by row there is no single Bayes threshold for p; the calibrated
# model's decisions (dot) take each row's own, and the best threshold in hindsight is marked for both.
import matplotlib.pyplot as plt
import numpy as np

curve = d["threshold_curve"]
t = np.asarray(curve["threshold"])
fig, ax = plt.subplots(figsize=(8, 4.2))
for key, colour in (("calibrated", "tab:blue"), ("raw", "tab:orange")):
    profit = sign * np.asarray(curve[key])
    ax.plot(t, profit, color=colour, lw=1.8, label=f"{key}: decide 1 when p > t")
    best = d["best_threshold"][key]
    ax.scatter([best["threshold"]], [sign * best["total"]], color=colour, marker="v", zorder=3)
ax.axhline(sign * d["calibrated"]["total"], color="tab:blue", ls=":", lw=1.2,
           label="calibrated, each row's own minimum-expected-cost decision")
ax.axhline(0, color="grey", lw=0.8)
ax.set_xscale("symlog", linthresh=0.01)
ax.set_xlim(0, 1)
ax.set_xlabel("threshold t on the probability of a sale")
ax.set_ylabel(f"total profit on the {d['n']:,} test customers")
ax.legend(loc="lower right", fontsize=8)
fig.tight_layout()
