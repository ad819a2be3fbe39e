"""Head roles (``attnlens.measures.heads.roles``): the layer x head role map, its colours, and the
per-relation syntactic accuracy heatmaps.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from attnlens.plots.style import layer_head_grid, place_axes, plt, styled

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ROLE_COLORS = {
    "none": "#f0f0f0",
    "positional": "#6baed6",
    "syntactic": "#fd8d3c",
    "rare-word": "#74c476",
    "induction": "#e377c2",
    "duplicate_token": "#bcbd22",
    "previous_token": "#17becf",
    "sink": "#a0785a",
    "retrieval": "#d62728",
    "several": "#9e9ac8",
}
_ROLE_NAMES = ("positional", "syntactic", "rare-word", "induction", "duplicate_token",
               "previous_token", "sink", "retrieval")
# Cell labels of the language-model roles (attnlens.measures.lm_heads)
LM_ROLE_LABELS = {"induction": "Ind", "duplicate_token": "Dup", "previous_token": "Prev",
                  "sink": "Snk", "retrieval": "Ret"}


def role_category(roles: str) -> str:
    found = [r for r in _ROLE_NAMES if r in roles.split("; ")]
    return "none" if not found else found[0] if len(found) == 1 else "several"


def role_label(row) -> str:
    """The text of a role-map cell: P±k, Sn, R, Ind / Dup / Prev / Snk / Ret."""
    parts = []
    if "positional" in row.roles:
        parts.append(f"P{row.best_offset:+d}")
    if "syntactic" in row.roles:
        parts.append(f"S{row.n_relations}")
    if "rare-word" in row.roles:
        parts.append("R")
    found = row.roles.split("; ")
    parts += [label for role, label in LM_ROLE_LABELS.items() if role in found]
    return "\n".join(parts)


def role_grid(head_roles: pd.DataFrame) -> tuple[np.ndarray, list[list[str]]]:
    """A ``head_roles`` table as ``[layer, head]`` role indices into ``ROLE_COLORS`` (NaN for
    heads absent from the table) and the cells' role codes ("" for those)."""
    names = list(ROLE_COLORS)
    n_layers = int(head_roles["layer"].max()) + 1
    n_heads = int(head_roles["head"].max()) + 1
    grid = np.full((n_layers, n_heads), np.nan)
    labels = [["" for _ in range(n_heads)] for _ in range(n_layers)]
    for row in head_roles.itertuples():
        grid[row.layer, row.head] = names.index(role_category(row.roles))
        labels[row.layer][row.head] = role_label(row)
    return grid, labels


@styled
def role_map_figure(head_roles: pd.DataFrame, title: str = "Head roles") -> Figure:
    """Layer x head map of a ``head_roles`` table: colour = role (or "several"); text P±k
    offset, Sn = syntactic for n relations, R = rare-word, Ind / Dup / Prev / Snk / Ret =
    induction, duplicate-token, previous-token, sink, retrieval. Heads absent from the table
    (removed by structural pruning) stay white."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    names = list(ROLE_COLORS)
    grid, labels = role_grid(head_roles)
    n_layers, n_heads = grid.shape
    cmap = ListedColormap(list(ROLE_COLORS.values())).with_extremes(bad="white")
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * n_heads + 2.5), max(2.5, 0.5 * n_layers + 1)))
    ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=len(names) - 1,
              aspect="auto")
    for layer in range(n_layers):
        for head in range(n_heads):
            ax.text(head, layer, labels[layer][head], ha="center", va="center", fontsize=6)
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title)
    ax.legend(handles=[Patch(color=c, label=n) for n, c in ROLE_COLORS.items()],
              bbox_to_anchor=(1.02, 1), loc="upper left", fontsize=7, frameon=False)
    return place_axes(fig, left=0.55, right=1.5)


@styled
def relation_heatmaps(
    syntactic_accuracy: pd.DataFrame, direction: str, max_relations: int = 24
) -> Figure:
    """Small multiples: one layer x head accuracy heatmap per relation for ``direction``;
    a dot marks the heads that are syntactic for that relation (tested role)."""

    rows = syntactic_accuracy[syntactic_accuracy["direction"] == direction]
    relations = list(dict.fromkeys(rows["relation"]))[:max_relations]
    cols = min(4, max(1, len(relations)))
    n_rows = max(1, math.ceil(len(relations) / cols))
    fig, axes = plt.subplots(n_rows, cols, figsize=(3.0 * cols + 1, 2.4 * n_rows), squeeze=False)
    for ax in axes.flat:
        ax.set_axis_off()
    image = None
    for ax, relation in zip(axes.flat, relations, strict=False):
        sub = rows[rows["relation"] == relation]
        grid = layer_head_grid(sub, value="accuracy")
        ax.set_axis_on()
        image = ax.imshow(grid, cmap="viridis", vmin=0, vmax=1, aspect="auto")
        if "syntactic" in sub:
            marked = sub[sub["syntactic"].astype(bool)]
            ax.scatter(marked["head"], marked["layer"], s=6, c="red", marker="o")
        base = float(sub["baseline"].iloc[0])
        ax.set_title(f"{relation} (n={int(sub['examples'].iloc[0])}, base {base:.2f})", fontsize=8)
        ax.set_xticks(range(grid.shape[1]))
        ax.set_yticks(range(grid.shape[0]))
        ax.tick_params(labelsize=6)
        ax.set_xlabel("head", fontsize=7)
        ax.set_ylabel("layer", fontsize=7)
    fig.suptitle(f"Syntactic accuracy per head (layers and heads from 0), {direction}; "
                 "red dot: syntactic after correction")
    place_axes(fig, left=0.5, right=0.08 * fig.get_size_inches()[0] + 0.2, top=0.6,
               wspace=0.35, hspace=0.7)
    if image is not None:  # one shared colour scale, 0..1
        fig.colorbar(image, cax=fig.add_axes((0.93, 0.15, 0.015, 0.7)), label="accuracy")
    return fig
