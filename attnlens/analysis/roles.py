"""Head roles: positional, syntactic and rare-word heads, with the evidence for each.

Built from the tables of ``PositionalHeads``, ``SyntacticHeads`` and ``RareWordHeads``
(``result()``); a head can have several roles or none. Figures: a layer x head role map and
per-relation accuracy heatmaps (layers and heads numbered from 0).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from attnlens.analysis.syntactic import ALL_RELATIONS, MAIN_DIRECTIONS

ROLES = ("positional", "syntactic", "rare-word")
# Arcs of these relations are measured and tabled but never make a head "syntactic":
# punctuation attaches by convention, not by grammar, and its offset baseline is weak.
NOT_A_ROLE = ("punct",)
ROLE_COLORS = {
    "none": "#f0f0f0",
    "positional": "#6baed6",
    "syntactic": "#fd8d3c",
    "rare-word": "#74c476",
    "several": "#9e9ac8",
}


def _syntactic_evidence(accuracy: pd.DataFrame | None) -> pd.DataFrame:
    """Rows of the main directions per (layer, head, relation), "all relations" excluded."""
    if accuracy is None or accuracy.empty:
        return pd.DataFrame(columns=["layer", "head", "relation", "direction", "accuracy",
                                     "baseline", "syntactic"])
    rows = accuracy[accuracy["direction"].isin(MAIN_DIRECTIONS)]
    return rows[~rows["relation"].isin([ALL_RELATIONS, *NOT_A_ROLE])]


def role_evidence(
    positional: pd.DataFrame,
    syntactic_accuracy: pd.DataFrame | None = None,
    rare_words: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Tidy: one row per (head, role) found, with the evidence and what it was compared to."""
    records = []
    for row in positional[positional["positional"]].itertuples():
        records.append({"layer": row.layer, "head": row.head, "role": "positional",
                        "detail": f"offset {row.best_offset:+d}", "value": row.share,
                        "compared_to": "threshold"})
    syn = _syntactic_evidence(syntactic_accuracy)
    for row in syn[syn["syntactic"]].itertuples():
        records.append({"layer": row.layer, "head": row.head, "role": "syntactic",
                        "detail": f"{row.relation} {row.direction}", "value": row.accuracy,
                        "compared_to": f"baseline {row.baseline:.3f}"})
    if rare_words is not None:
        for row in rare_words[rare_words["rare_word"]].itertuples():
            records.append({"layer": row.layer, "head": row.head, "role": "rare-word",
                            "detail": "rarest word", "value": row.share_rarest,
                            "compared_to": f"chance {row.chance_rarest:.3f}"})
    columns = ["layer", "head", "role", "detail", "value", "compared_to"]
    return pd.DataFrame.from_records(records, columns=columns).sort_values(
        ["layer", "head", "role"], ignore_index=True
    )


def classify_heads(
    positional: pd.DataFrame,
    syntactic_accuracy: pd.DataFrame | None = None,
    rare_words: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per head: its roles ("none" when it has none) and the evidence behind each."""
    evidence = role_evidence(positional, syntactic_accuracy, rare_words)
    syn = _syntactic_evidence(syntactic_accuracy)
    table = positional[["layer", "head", "best_offset", "share"]].rename(
        columns={"share": "offset_share"}
    )
    if not syn.empty:
        margin = syn.assign(margin=syn["accuracy"] - syn["baseline"])
        top = margin.loc[margin.groupby(["layer", "head"])["margin"].idxmax()]
        top = top.assign(best_relation=top["relation"] + " " + top["direction"])
        table = table.merge(
            top[["layer", "head", "best_relation", "accuracy", "baseline"]].rename(
                columns={"accuracy": "relation_accuracy", "baseline": "relation_baseline"}
            ),
            on=["layer", "head"],
            how="left",
        )
    if rare_words is not None:
        table = table.merge(
            rare_words[["layer", "head", "share_rarest", "share_two_rarest"]],
            on=["layer", "head"],
            how="left",
        )
    roles, details = [], []
    for row in table.itertuples():
        found = evidence[(evidence["layer"] == row.layer) & (evidence["head"] == row.head)]
        names = [r for r in ROLES if r in set(found["role"])]
        roles.append("; ".join(names) if names else "none")
        details.append(
            "; ".join(f"{r.role}: {r.detail} ({r.value:.2f})" for r in found.itertuples())
        )
    return table.assign(roles=roles, evidence=details)


def _short_label(roles: str, evidence: str, best_offset: int) -> str:
    parts = []
    if "positional" in roles:
        parts.append(f"P{best_offset:+d}")
    if "syntactic" in roles:
        n = evidence.count("syntactic:")
        parts.append(f"S{n}")
    if "rare-word" in roles:
        parts.append("R")
    return "\n".join(parts)


def role_map_figure(head_roles: pd.DataFrame, title: str = "Head roles") -> Figure:
    """Layer x head map: colour = role (or "several"); text P±k offset, Sn relations, R."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    from attnlens.plots import place_axes, plt

    names = list(ROLE_COLORS)
    n_layers = int(head_roles["layer"].max()) + 1
    n_heads = int(head_roles["head"].max()) + 1
    grid = np.zeros((n_layers, n_heads))
    labels = [["" for _ in range(n_heads)] for _ in range(n_layers)]
    for row in head_roles.itertuples():
        found = [r for r in ROLES if r in row.roles.split("; ")]
        category = "none" if not found else found[0] if len(found) == 1 else "several"
        grid[row.layer, row.head] = names.index(category)
        labels[row.layer][row.head] = _short_label(row.roles, row.evidence, row.best_offset)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * n_heads + 2.5), max(2.5, 0.5 * n_layers + 1)))
    ax.imshow(grid, cmap=ListedColormap(list(ROLE_COLORS.values())), vmin=0,
              vmax=len(names) - 1, aspect="auto")
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


def relation_heatmaps(
    syntactic_accuracy: pd.DataFrame, direction: str, max_relations: int = 24
) -> Figure:
    """Small multiples: one layer x head accuracy heatmap per relation for ``direction``."""
    from attnlens.plots import layer_head_grid, place_axes, plt

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
        base = float(sub["baseline"].iloc[0])
        ax.set_title(f"{relation} (n={int(sub['examples'].iloc[0])}, base {base:.2f})", fontsize=8)
        ax.set_xticks(range(grid.shape[1]))
        ax.set_yticks(range(grid.shape[0]))
        ax.tick_params(labelsize=6)
        ax.set_xlabel("head", fontsize=7)
        ax.set_ylabel("layer", fontsize=7)
    fig.suptitle(f"Syntactic accuracy per head (layers and heads from 0), {direction}")
    place_axes(fig, left=0.5, right=0.08 * fig.get_size_inches()[0] + 0.2, top=0.6,
               wspace=0.35, hspace=0.7)
    if image is not None:  # one shared colour scale, 0..1
        fig.colorbar(image, cax=fig.add_axes((0.93, 0.15, 0.015, 0.7)), label="accuracy")
    return fig
