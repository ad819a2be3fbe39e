"""Layer x head heatmap of a tidy ``layer, head, value`` table."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from attnlens.plots.style import layer_head_grid, plt, styled

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@styled
def layer_head_heatmap(
    df: pd.DataFrame,
    title: str,
    value: str = "value",
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool = True,
    fmt: str = "{:.2f}",
) -> Figure:
    """Layer x head heatmap (layers and heads numbered from 0) of a tidy table."""
    grid = layer_head_grid(df, value)
    n_layers, n_heads = grid.shape
    width, height = max(4.0, 0.55 * n_heads + 1.7), max(2.5, 0.45 * n_layers + 1)
    fig = plt.figure(figsize=(width, height))
    # Fixed inches: 0.55 left (layer ticks), 1.0 right (colour bar), 0.4 top, 0.45 bottom.
    left, right, top, bottom = 0.55 / width, 1 - 1.0 / width, 1 - 0.4 / height, 0.45 / height
    ax = fig.add_axes((left, bottom, right - left, top - bottom))
    cax = fig.add_axes((right + 0.12 / width, bottom, 0.12 / width, top - bottom))
    image = ax.imshow(grid, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title)
    fig.colorbar(image, cax=cax)
    if annotate and n_heads * n_layers <= 400:
        finite = grid[np.isfinite(grid)]
        mid = (finite.min() + finite.max()) / 2 if finite.size else 0.0
        for layer in range(n_layers):
            for head in range(n_heads):
                v = grid[layer, head]
                if np.isfinite(v):
                    ax.text(
                        head,
                        layer,
                        fmt.format(v),
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="white" if v < mid else "black",
                    )
    return fig
