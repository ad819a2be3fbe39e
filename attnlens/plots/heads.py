"""Head behaviour classes and head clustering (``attnlens.measures.heads.behaviour``,
``clustering``): behaviour panels, the heads' MDS embedding, their JS-divergence matrix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from attnlens.plots.roles import ROLE_COLORS, role_category
from attnlens.plots.style import layer_head_grid, plt, styled

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@styled
def behaviour_figure(behaviour: pd.DataFrame, title: str = "Attention behaviour") -> Figure:
    """Three layer x head panels of a ``head_behaviour`` table: vertical, diagonal, broad."""
    measures = ("vertical", "diagonal", "broad")
    first = layer_head_grid(behaviour, value=measures[0])
    n_layers, n_heads = first.shape
    fig, axes = plt.subplots(1, 3, figsize=(3 * max(3.0, 0.4 * n_heads + 1.2),
                                            max(2.4, 0.4 * n_layers + 1.2)), squeeze=False)
    image = None
    for ax, measure in zip(axes[0], measures, strict=True):
        grid = layer_head_grid(behaviour, value=measure)
        image = ax.imshow(grid, cmap="magma", vmin=0, vmax=1, aspect="auto")
        ax.set_title(measure, fontsize=9)
        ax.set_xticks(range(n_heads))
        ax.set_yticks(range(n_layers))
        ax.tick_params(labelsize=6)
        ax.set_xlabel("head", fontsize=7)
        ax.set_ylabel("layer", fontsize=7)
        if n_heads * n_layers <= 400:
            for layer in range(n_layers):
                for head in range(n_heads):
                    v = grid[layer, head]
                    if np.isfinite(v):
                        ax.text(head, layer, f"{100 * v:.0f}", ha="center", va="center",
                                fontsize=5, color="white" if v < 0.5 else "black")
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 0.93, 1))
    if image is not None:
        fig.colorbar(image, cax=fig.add_axes((0.94, 0.15, 0.012, 0.7)), label="share")
    return fig


@styled
def head_embedding_figure(
    embedding: pd.DataFrame, title: str = "Heads embedded by attention distance (MDS)"
) -> Figure:
    """Two scatter panels of a ``head_embedding`` table (x, y per head): coloured by layer
    and by role (column ``roles``); each point labelled L2H8 (layer 2, head 8)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), squeeze=False)
    by_layer, by_role = axes[0]
    points = by_layer.scatter(embedding["x"], embedding["y"], c=embedding["layer"],
                              cmap="viridis", s=28)
    fig.colorbar(points, ax=by_layer, label="layer")
    categories = [role_category(r) for r in embedding.get("roles", ["none"] * len(embedding))]
    colors = [ROLE_COLORS[c] for c in categories]
    by_role.scatter(embedding["x"], embedding["y"], c=colors, s=28, edgecolors="#555555",
                    linewidths=0.4)
    from matplotlib.patches import Patch

    by_role.legend(handles=[Patch(color=ROLE_COLORS[c], label=c) for c in ROLE_COLORS],
                   fontsize=7, frameon=False, loc="best")
    for ax, name in ((by_layer, "coloured by layer"), (by_role, "coloured by tested role")):
        for row in embedding.itertuples():
            ax.annotate(f"L{row.layer}H{row.head}", (row.x, row.y), fontsize=5,
                        xytext=(2, 2), textcoords="offset points")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("MDS 1")
        ax.set_ylabel("MDS 2")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


@styled
def head_distance_figure(distances: pd.DataFrame, title: str = "Mean JS divergence") -> Figure:
    """Heatmap of a ``head_distances`` table (one row per head pair), heads ordered by layer."""
    keys = sorted(set(zip(distances["layer_a"], distances["head_a"], strict=True))
                  | set(zip(distances["layer_b"], distances["head_b"], strict=True)))
    index = {k: i for i, k in enumerate(keys)}
    grid = np.zeros((len(keys), len(keys)))  # a head's divergence from itself is 0
    for row in distances.itertuples():
        a, b = index[(row.layer_a, row.head_a)], index[(row.layer_b, row.head_b)]
        grid[a, b] = grid[b, a] = row.js_divergence
    size = max(4.0, min(12.0, 0.12 * len(keys) + 2))
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(grid, cmap="viridis", aspect="equal")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="nats")
    step = max(1, len(keys) // 24)
    ticks = list(range(0, len(keys), step))
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.set_xticklabels([f"L{keys[i][0]}H{keys[i][1]}" for i in ticks], rotation=90, fontsize=6)
    ax.set_yticklabels([f"L{keys[i][0]}H{keys[i][1]}" for i in ticks], fontsize=6)
    ax.set_title(title)
    fig.tight_layout()
    return fig
