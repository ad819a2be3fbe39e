"""Token-level figures of one sentence (rollout and flow): a token x token heatmap and one
query row as bars. Labels read ``position token``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from attnlens.plots.style import place_axes, plt, styled

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@styled
def token_matrix_heatmap(matrix: pd.DataFrame, title: str, value: str = "value") -> Figure:
    """Token x token heatmap of one sentence's matrix (rows: query, columns: key).

    ``matrix`` has columns ``query, key, query_token, key_token, <value>`` for one sentence and
    one layer (positions from 0). Labels read ``position token``.
    """
    grid = matrix.pivot_table(index="query", columns="key", values=value, aggfunc="first")
    n = len(grid)
    labels = (
        matrix.drop_duplicates("key").sort_values("key")
        .apply(lambda r: f"{int(r['key'])} {r['key_token']}", axis=1).tolist()
    )
    size = min(16.0, max(4.0, 0.28 * n + 2))
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(grid.to_numpy(), cmap="viridis", vmin=0, aspect="equal")
    ticks = range(n) if n <= 80 else range(0, n, max(1, n // 40))
    ax.set_xticks(list(ticks))
    ax.set_yticks(list(ticks))
    ax.set_xticklabels([labels[i] for i in ticks], rotation=90, fontsize=6)
    ax.set_yticklabels([labels[i] for i in ticks], fontsize=6)
    ax.set_xlabel("input token (key)")
    ax.set_ylabel("position (query)")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    # Fixed inches: rotated "position token" labels need ~1.3 in left and below.
    return place_axes(fig, left=1.3, bottom=1.4, right=0.3)


@styled
def token_row_bars(row: pd.DataFrame, title: str, value: str = "value") -> Figure:
    """Bar chart of one query row of a token matrix: ``key, key_token, <value>`` columns."""
    row = row.sort_values("key")
    n = len(row)
    fig, ax = plt.subplots(figsize=(min(16.0, max(4.0, 0.3 * n + 1.5)), 3.6))
    ax.bar(range(n), row[value].to_numpy(), color="C0")
    ax.set_xticks(range(n))
    ax.set_xticklabels([f"{int(k)} {t}" for k, t in zip(row["key"], row["key_token"],
                                                        strict=True)],
                       rotation=90, fontsize=6)
    ax.set_ylabel("share")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    return place_axes(fig, bottom=1.2)  # rotated "position token" labels below
