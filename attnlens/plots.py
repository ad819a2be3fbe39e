"""Figures drawn from tidy DataFrames. The library never calls plt.show()."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # no screen needed; notebooks still display returned Figures

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


def layer_head_grid(df: pd.DataFrame, value: str = "value") -> np.ndarray:
    """Pivot a tidy ``layer, head, value`` table into a ``[layer, head]`` array (NaN gaps)."""
    grid = df.pivot_table(index="layer", columns="head", values=value, aggfunc="mean")
    n_layers = int(df["layer"].max()) + 1
    n_heads = int(df["head"].max()) + 1
    return grid.reindex(index=range(n_layers), columns=range(n_heads)).to_numpy()


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
    fig, ax = plt.subplots(figsize=(max(4.0, 0.55 * n_heads + 1.5), max(2.5, 0.45 * n_layers + 1)))
    image = ax.imshow(grid, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    if annotate and n_heads * n_layers <= 400:
        finite = grid[np.isfinite(grid)]
        mid = (finite.min() + finite.max()) / 2 if finite.size else 0.0
        for layer in range(n_layers):
            for head in range(n_heads):
                v = grid[layer, head]
                if np.isfinite(v):
                    ax.text(
                        head, layer, fmt.format(v), ha="center", va="center", fontsize=6,
                        color="white" if v < mid else "black",
                    )
    fig.tight_layout()
    return fig
