"""Figures of an L0 run: its points beside the importance curve and the random band."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure


def l0_against_curves(curve: pd.DataFrame, summary: pd.DataFrame, metric_label: str,
                      title: str) -> Figure:
    """Held-out metric against the fraction of heads pruned: orders as lines (seeded orders
    as a min-max band), each lambda's binary L0 gates as a labelled star."""
    fig, ax = plt.subplots(figsize=(6.8, 4.4))
    overall = curve[~curve["order"].str.contains(":")] if len(curve) else curve
    for index, (order, rows) in enumerate(overall.groupby("order", sort=False)):
        color = f"C{index}"
        if rows["seed"].nunique() > 1:
            by_step = rows.groupby("step").agg(x=("fraction_pruned", "mean"),
                                               lo=("metric", "min"), hi=("metric", "max"),
                                               mean=("metric", "mean"))
            ax.fill_between(by_step["x"], by_step["lo"], by_step["hi"], color=color, alpha=0.2,
                            label=f"{order} (min-max of {rows['seed'].nunique()} seeds)")
            ax.plot(by_step["x"], by_step["mean"], color=color, linestyle="--", linewidth=1)
        else:
            rows = rows.sort_values("step")
            ax.plot(rows["fraction_pruned"], rows["metric"], color=color, marker="o",
                    markersize=3, label=order)
    if len(summary):
        ax.scatter(summary["fraction_pruned"], summary["metric"], marker="*", s=140,
                   color="black", zorder=5, label="L0 gates (one per lambda)")
        points = zip(summary["lambda"], summary["fraction_pruned"], summary["metric"],
                     strict=True)
        for lam, x, y in points:
            ax.annotate(f"λ={lam:g}", (x, y), fontsize=7, xytext=(4, 4),
                        textcoords="offset points")
    ax.set_xlabel("fraction of heads pruned")
    ax.set_ylabel(metric_label)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def l0_training_curves(curve: pd.DataFrame, title: str) -> Figure:
    """Expected open gates and data loss against the training step, one line per lambda."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 5.2), sharex=True)
    for index, (lam, rows) in enumerate(curve.groupby("lambda", sort=True)):
        top.plot(rows["step"], rows["expected_open"], color=f"C{index}", label=f"λ={lam:g}")
        bottom.plot(rows["step"], rows["data_loss"], color=f"C{index}", linewidth=0.8)
    top.set_ylabel("expected open gates")
    bottom.set_ylabel("data loss (one draw)")
    bottom.set_xlabel("training step")
    top.set_title(title)
    top.legend(fontsize=8)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
