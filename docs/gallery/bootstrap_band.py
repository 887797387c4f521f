"""
# Calibration map with bootstrap bands

How precisely do the rows you evaluate on pin down the calibration map? `calengine evaluate --bootstrap B`
refits the model's calibrator (same method, same parameters) on `B` resamples of the evaluated rows'
(score, label) pairs and shades the 5th to 95th percentile of the refitted maps. Where the model's own
map, fitted on the training folds, leaves the band, the evaluated rows disagree with it. Here on the
768-row Pima diabetes table, small enough for the band to be wide.
"""

# %%
# Hold out a third of Pima, fit logistic regression with isotonic and with sigmoid calibration on the
# rest, seeded as `calengine fit` is.
import numpy as np
import pandas as pd

import calengine
from calengine.metrics.bootstrap import calibration_map_band

pima = pd.read_parquet("data/pima.parquet").sample(frac=1.0, random_state=0)
pima[:512].to_parquet("pima-train.parquet")
held_out = pima[512:]
models = {method: calengine.fit_table("pima-train.parquet", "class", positive=1, learner="logistic_regression",
                                      method=method, seed=0)
          for method in ("isotonic", "sigmoid")}

# %%
# The band of each map on the 256 held-out rows: 200 refits, the first fold member's calibrator, as
# the report draws it. `calibration_map_band` is what `evaluate --bootstrap 200 --report DIR` calls.
bands = {method: calibration_map_band(model, held_out, "class", 200, seed=0) for method, model in models.items()}
for method, band in bands.items():
    width = band["high"] - band["low"]
    outside = np.mean((band["model_map"] < band["low"]) | (band["model_map"] > band["high"]))
    print(f"{method:8s} rows {band['n']}, mean band width {width.mean():.3f}, max {width.max():.3f};"
          f" model's map outside the band at {outside:.0%} of the grid")

# %%
# The model's map (line) inside its 90 % band (shaded), against the learner's score.
import matplotlib.pyplot as plt

fig, axes = plt.subplots(1, 2, figsize=(9.5, 4.2), sharey=True)
for ax, (method, band) in zip(axes, bands.items()):
    ax.fill_between(band["grid"], band["low"], band["high"], color="tab:blue", alpha=0.25,
                    label=f"90% band, B = {band['B']}")
    ax.plot(band["grid"], band["median"], color="tab:blue", lw=1, ls=":", label="median refit")
    draw = (lambda *a, **k: ax.step(*a, where="post", **k)) if method == "isotonic" else ax.plot
    draw(band["grid"], band["model_map"], color="black", lw=1.6, label="the model's map")
    ax.set_title(f"logistic regression + {method}")
    ax.set_xlabel("learner's probability (first fold member)")
    ax.set_xlim(0, 1)
axes[0].set_ylabel("calibrated probability of class 1")
axes[0].legend(loc="upper left")
fig.tight_layout()
