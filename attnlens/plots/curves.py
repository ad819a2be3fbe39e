"""Per-layer curves: spectra (cumulative and shared-subspace energy), rollout/flow measures
over layers, sparse window coverage, linear attention's keys by length.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from attnlens.plots.style import layer_axes, place_axes, plt, styled

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def share_panel(ax, layer) -> None:
    """Title, the 0..1 range of a share and the grid of one layer's panel."""
    ax.set_title(f"layer {int(layer)}", fontsize=9)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)


@styled
def cumulative_curves_by_layer(
    curve: pd.DataFrame, title: str, x: str = "fraction", value: str = "value"
) -> Figure:
    """Per layer, the heads' mean cumulative curve with a min-max band across heads.

    ``curve`` has columns ``layer, head, <x>, <value>`` (layers numbered from 0). The dotted
    diagonal is the flat spectrum of a full-rank matrix with equal singular values.
    """
    n_layers = int(curve["layer"].max()) + 1
    fig, axes = layer_axes(n_layers)
    for layer, rows in curve.groupby("layer"):
        ax = axes[int(layer)]
        stats = rows.groupby(x)[value].agg(["min", "mean", "max"])
        ax.fill_between(stats.index, stats["min"], stats["max"], alpha=0.3, label="heads (min-max)")
        ax.plot(stats.index, stats["mean"], linewidth=1.5, label="mean over heads")
        ax.plot([0, 1], [0, 1], linestyle=":", color="grey", linewidth=1, label="flat spectrum")
        share_panel(ax, layer)
    axes[0].legend(fontsize=6, loc="lower right")
    for ax in axes[:n_layers]:
        ax.set_xlabel("k / n", fontsize=8)
    axes[0].set_ylabel("cumulative share of sum s", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return place_axes(fig, top=0.6, hspace=0.5)


@styled
def shared_subspace_curves(curve: pd.DataFrame, d_model: int, title: str) -> Figure:
    """Per layer, cumulative energy of the heads' concatenated matrices against one head's.

    ``curve`` has columns ``layer, matrix, scope, k, energy`` with ``scope`` in ``concat`` and
    ``per_head_mean``; solid lines are the concatenations, dashed lines a single head (mean).
    """
    n_layers = int(curve["layer"].max()) + 1
    fig, axes = layer_axes(n_layers, width=3.0)
    matrices = list(dict.fromkeys(curve["matrix"]))
    for layer, rows in curve.groupby("layer"):
        ax = axes[int(layer)]
        for index, matrix in enumerate(matrices):
            for scope, style in (("concat", "-"), ("per_head_mean", "--")):
                part = rows[(rows["matrix"] == matrix) & (rows["scope"] == scope)]
                label = f"{matrix} {'all heads' if scope == 'concat' else 'one head'}"
                ax.plot(part["k"], part["energy"], linestyle=style, color=f"C{index}",
                        linewidth=1.2, label=label)
        ax.axvline(d_model, color="grey", linestyle=":", linewidth=1)
        share_panel(ax, layer)
        ax.set_xlabel("dimensions k", fontsize=8)
    axes[0].set_ylabel("cumulative energy (sum s^2)", fontsize=8)
    axes[0].legend(fontsize=6, loc="lower right")
    fig.suptitle(title, fontsize=10)
    return place_axes(fig, top=0.6, hspace=0.5)


@styled
def layer_measure_lines(table: pd.DataFrame, measures: list[str], title: str,
                        ylabel: str = "mean over query rows") -> Figure:
    """One line per measure over layers, from a tidy ``layer, measure, value`` table."""
    fig, ax = plt.subplots(figsize=(5.0, 3.2))
    for index, measure in enumerate(measures):
        rows = table[table["measure"] == measure].sort_values("layer")
        ax.plot(rows["layer"], rows["value"], marker="o", color=f"C{index}", label=measure)
    n_layers = int(table["layer"].max()) + 1
    ax.set_xticks(range(n_layers))
    ax.set_xlabel("layer (after that block)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=9)
    return place_axes(fig)


@styled
def window_coverage_curves(curve: pd.DataFrame, coverage: float, title: str,
                           max_window: int = 32) -> Figure:
    """Per layer, the heads' window mass against the window ``w`` (one line per head).

    ``curve`` has columns ``layer, head, window, window_mass`` (``sparse_window_curve``).
    """
    curve = curve[curve["window"] <= max_window]
    n_layers = int(curve["layer"].max()) + 1
    fig, axes = layer_axes(n_layers)
    for layer, rows in curve.groupby("layer"):
        ax = axes[int(layer)]
        for head, part in rows.groupby("head"):
            ax.plot(part["window"], part["window_mass"], linewidth=0.8, alpha=0.7,
                    color=f"C{int(head) % 10}")
        ax.axhline(coverage, color="grey", linestyle=":", linewidth=1)
        share_panel(ax, layer)
        ax.set_xlabel("window ±w", fontsize=8)
    axes[0].set_ylabel("mass inside the window", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return place_axes(fig, top=0.6, hspace=0.5)


@styled
def keys_by_length(table: pd.DataFrame, d_head: int, title: str) -> Figure:
    """Mean effective number of orthogonal keys per layer against the sentence-length bucket.

    ``table`` has columns ``layer, head, lengths, effective_keys`` (``linear_keys_by_length``);
    the dotted line is ``d_head``, the most orthogonal keys a head can hold.
    """
    buckets = list(dict.fromkeys(table["lengths"]))
    fig, ax = plt.subplots(figsize=(5.0, 3.2))
    for layer, rows in table.groupby("layer"):
        means = rows.groupby("lengths")["effective_keys"].mean().reindex(buckets)
        ax.plot(range(len(buckets)), means.to_numpy(), marker="o", label=f"layer {int(layer)}")
    ax.axhline(d_head, color="grey", linestyle=":", linewidth=1, label=f"d_head = {d_head}")
    ax.set_xticks(range(len(buckets)))
    ax.set_xticklabels(buckets)
    ax.set_xlabel("sentence length (tokens)")
    ax.set_ylabel("effective keys (mean over heads)")
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    ax.set_title(title, fontsize=9)
    return place_axes(fig)
