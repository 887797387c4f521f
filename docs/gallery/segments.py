"""
# Worst segments: calibrated on average, not per segment

A model can be calibrated over all rows and off for one group. `calengine evaluate --by COL` measures
every segment; its headline is MCGrad's multicalibration error, the largest segment ECCE on the sigma
scale. `calengine fit --by COL` then fits one calibrator per segment, shrunk towards the global map.
Here both models on Adult, segmented by sex and race.
"""

# %%
# The global model and the segment-wise one (`--by sex,race`, the default shrinkage `K = 20`).
import pandas as pd

import calengine

common = dict(positive=">50K", learner="gaussian_nb", method="isotonic", seed=0)
models = {"global isotonic": calengine.fit_table("data/adult/train.parquet", "class", **common),
          "isotonic --by sex,race": calengine.fit_table("data/adult/train.parquet", "class", by="sex,race", **common)}

# %%
# Every segment's ECCE (in sigma units, with its Holm-adjusted p-value) for both models, worst first.
rows = []
for name, model in models.items():
    seg = calengine.evaluate_models([model], "data/adult/test.parquet", "class", by="sex,race").to_json()["segments"]
    print(f"{name}: multicalibration error {seg['mce_sigma']:.2f} sigma (worst: {seg['worst']['column']}="
          f"{seg['worst']['value']})")
    for s in seg["segments"]:
        if s["column"] != "(all)":
            rows.append({"model": name, "segment": f"{s['column']}={s['value']}", "rows": s["rows"],
                         "ecce_sigma": s["ecce_sigma"], "p_holm": s["ecce_pvalue_holm"]})
table = pd.DataFrame(rows).pivot(index="segment", columns="model", values="ecce_sigma")
table = table.sort_values("global isotonic", ascending=False)
print(table.round(2).to_string())

# %%
# The chart: ECCE per segment, the two models side by side, with the ECCE at which one segment's test
# reaches the 5 % level (the dashed line; the p-values in `evaluate --by` are also Holm-adjusted over
# the segments).
import matplotlib.pyplot as plt
import numpy as np
from scipy.optimize import brentq

from calengine.metrics.statistics import ecce_p_value

level = brentq(lambda s: ecce_p_value(s) - 0.05, 1.0, 5.0)
print(f"one segment's ECCE test rejects at 5 % from {level:.2f} sigma")

fig, ax = plt.subplots(figsize=(8.5, 4.2))
y = np.arange(len(table))
ax.barh(y - 0.2, table["global isotonic"], height=0.4, color="tab:red", label="global isotonic")
ax.barh(y + 0.2, table["isotonic --by sex,race"], height=0.4, color="tab:blue", label="isotonic --by sex,race")
ax.axvline(level, color="grey", ls="--", lw=1, label="5 % level, one segment")
ax.set_yticks(y, table.index)
ax.invert_yaxis()
ax.set_xlabel("ECCE of the segment (sigma units)")
ax.legend(loc="lower right")
fig.tight_layout()
