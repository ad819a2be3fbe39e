"""Pruning figures: the metric against the fraction of heads pruned per order, the L0 gates
beside those curves, and the L0 gates' training curves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from attnlens.plots.style import place_axes, plt, styled

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def order_curve(ax, order: str, rows: pd.DataFrame, color: str, band_alpha: float) -> None:
    """One order's metric against the fraction pruned: a line with markers, or for an order
    with several seeds (random) its mean dashed inside a min-max band."""
    n_seeds = rows["seed"].nunique()
    if n_seeds > 1:
        by_step = rows.groupby("step").agg(x=("fraction_pruned", "mean"), lo=("metric", "min"),
                                           hi=("metric", "max"), mean=("metric", "mean"))
        ax.fill_between(by_step["x"], by_step["lo"], by_step["hi"], color=color,
                        alpha=band_alpha, label=f"{order} (min-max of {n_seeds} seeds)")
        ax.plot(by_step["x"], by_step["mean"], color=color, linestyle="--", linewidth=1)
    else:
        rows = rows.sort_values("step")
        ax.plot(rows["fraction_pruned"], rows["metric"], color=color, marker="o",
                markersize=3, label=order)


@styled
def pruning_curves(curve: pd.DataFrame, metric_label: str, title: str) -> Figure:
    """Metric against the fraction of heads pruned, one line per order of a pruning table.

    ``curve`` has columns ``order, seed, step, fraction_pruned, metric`` (the pruning loop's
    table). Orders with several seeds (random) are drawn as their mean with a min-max band.
    """
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for index, (order, rows) in enumerate(curve.groupby("order", sort=False)):
        order_curve(ax, order, rows, f"C{index}", band_alpha=0.25)
    ax.set_xlabel("fraction of heads pruned")
    ax.set_ylabel(metric_label)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return place_axes(fig)


def l0_against_curves(curve: pd.DataFrame, summary: pd.DataFrame, metric_label: str,
                      title: str) -> Figure:
    """Held-out metric against the fraction of heads pruned: orders as lines (seeded orders
    as a min-max band), each lambda's binary L0 gates as a labelled star."""
    fig, ax = plt.subplots(figsize=(6.8, 4.4))
    overall = curve[~curve["order"].str.contains(":")] if len(curve) else curve
    for index, (order, rows) in enumerate(overall.groupby("order", sort=False)):
        order_curve(ax, order, rows, f"C{index}", band_alpha=0.2)
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
