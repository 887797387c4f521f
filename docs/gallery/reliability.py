"""
# Reliability diagram with the smooth curve

A reliability diagram plots, against the predicted probability, how often the event happened. Binned
diagrams depend on the bins; the *smooth* curve of Błasiok & Nakkiran (the one behind `smece`) is a
kernel regression of the outcome on the forecast, with the bandwidth `smece_sigma` that
`calengine evaluate` reports. Here naive Bayes on the Adult census data, before and after isotonic
calibration.
"""

# %%
# Fit Gaussian naive Bayes with isotonic calibration on Adult's training table (5 folds, seeded), as
# `calengine fit` does, and score the test table.
import numpy as np
import pandas as pd

import calengine

model = calengine.fit_table("data/adult/train.parquet", "class", positive=">50K",
                            learner="gaussian_nb", method="isotonic", seed=0)
test = pd.read_parquet("data/adult/test.parquet")
y = (test["class"] == ">50K").to_numpy().astype(float)
p_cal = model.predict_frame(test)["p_>50K"].to_numpy()

# %%
# `evaluate_models` is `calengine evaluate` from Python. Its `raw` entry is the learner's own
# probability; `smece` and its bandwidth `smece_sigma` come with every evaluation.
ev = calengine.evaluate_models([model], "data/adult/test.parquet", "class").to_json()
for name, entry in (("raw naive Bayes", ev["raw"]), ("+ isotonic", ev)):
    print(f"{name:16s} ece {entry['ece']:.4f}  smece {entry['smece']:.4f}  sigma {entry['smece_sigma']:.4f}")

# %%
# The raw probabilities are the fold members' learners before calibration, averaged as the calibrated
# ones are (what `raw` evaluates). The two diagrams: 15 equal-width bins (dots, sized by their rows)
# and the smooth curve, a Gaussian kernel regression with the boundaries reflected, at the bandwidth
# `evaluate` chose.
import matplotlib.pyplot as plt

p_raw = model.raw_proba_features(model.encoder.transform(test))[:, 1]


def smooth_curve(p, y, sigma, grid):
    """E[y | p = t] by a Gaussian kernel, reflected at 0 and 1 (relplot's smoothing)."""
    points = np.concatenate([p, -p, 2 - p])
    targets = np.concatenate([y, y, y])
    weights = np.exp(-0.5 * ((grid[:, None] - points[None, :]) / sigma) ** 2)
    return (weights @ targets) / weights.sum(axis=1), weights.sum(axis=1) / len(p)


fig, axes = plt.subplots(1, 2, figsize=(9.5, 4.3), sharey=True)
grid = np.linspace(0, 1, 201)
for ax, p, entry, title in ((axes[0], p_raw, ev["raw"], "raw naive Bayes"),
                            (axes[1], p_cal, ev, "naive Bayes + isotonic")):
    edges = np.linspace(0, 1, 16)
    idx = np.clip(np.digitize(p, edges) - 1, 0, 14)
    for b in range(15):
        rows = idx == b
        if rows.any():
            ax.scatter(p[rows].mean(), y[rows].mean(), s=8 + 60 * rows.mean() ** 0.5, color="tab:blue",
                       alpha=0.8, label="15 bins" if b == int(idx.min()) else None)
    curve, density = smooth_curve(p, y, entry["smece_sigma"], grid)
    ax.plot(grid, curve, color="tab:red", lw=2, label=f"smooth (sigma {entry['smece_sigma']:.3f})")
    ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--")
    ax.set_title(f"{title}\nsmECE {entry['smece']:.4f}")
    ax.set_xlabel("predicted probability of >50K")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
axes[0].set_ylabel("observed frequency")
axes[1].legend(loc="upper left")
fig.tight_layout()
