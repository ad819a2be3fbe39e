"""Layer x head figures as SVG, with the layout of their matplotlib twins: the heatmap of a
tidy table (``plots.heatmaps``), the head role map and the per-relation accuracy heatmaps
(``plots.roles``), the behaviour panels (``plots.heads``). Layers and heads from 0."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from attnlens.plots.roles import ROLE_COLORS, role_grid
from attnlens.plots.style import layer_head_grid
from attnlens.plots.svg.axes import LegendEntry, Panel
from attnlens.plots.svg.canvas import Canvas, wrap
from attnlens.plots.svg.colormaps import MISSING, colour_table
from attnlens.plots.svg.grid import cells, colour_bar, index_ticks, value_range, write_values

IN = 72.0  # points per inch


def layer_head_heatmap(df: pd.DataFrame, title: str, value: str = "value",
                       cmap: str = "viridis", vmin: float | None = None,
                       vmax: float | None = None, annotate: bool = True,
                       fmt: str = "{:.2f}") -> Canvas:
    """``plots.layer_head_heatmap`` as SVG: cells, values written in them (up to 400 cells),
    layer and head ticks, a colour bar on the right."""
    grid = layer_head_grid(df, value)
    n_layers, n_heads = grid.shape
    width, height = max(4.0, 0.55 * n_heads + 1.7), max(2.5, 0.45 * n_layers + 1)
    canvas = Canvas(width, height, kind="layer_head_heatmap")
    box = (0.55 * IN, 0.4 * IN, (width - 1.55) * IN, (height - 0.85) * IN)
    colours = colour_table(cmap)
    lo, hi = value_range(grid, vmin, vmax)
    cells(canvas, box, grid, colours, lo, hi)
    if annotate and n_heads * n_layers <= 400:
        finite = grid[np.isfinite(grid)]
        mid = (finite.min() + finite.max()) / 2 if finite.size else 0.0
        _annotate(canvas, box, grid, fmt, mid)
    index_ticks(canvas, box, n_layers, n_heads)
    _titles(canvas, box, title)
    colour_bar(canvas, (box[0] + box[2] + 0.12 * IN, box[1], 0.12 * IN, box[3]), colours,
               lo, hi)
    return canvas


def _annotate(canvas: Canvas, box, grid: np.ndarray, fmt: str, mid: float) -> None:
    write_values(canvas, box, grid, fmt.format, lambda v: v < mid)


def _titles(canvas: Canvas, box, title: str, size: float = 9, xlabel: str = "head",
            ylabel: str = "layer", label_size: float = 8) -> None:
    x0, y0, w, h = box
    canvas.text(x0 + w / 2, y0 - 6, title, size, baseline="auto", cls="title")
    canvas.text(x0 + w / 2, y0 + h + 17, xlabel, label_size, baseline="hanging")
    canvas.text(x0 - 24, y0 + h / 2, ylabel, label_size, rotate=-90)


def role_map_figure(head_roles: pd.DataFrame, title: str = "Head roles") -> Canvas:
    """``plots.role_map_figure`` as SVG: colour = role, the role code in each cell, a legend
    of the colours on the right; heads absent from the table stay white."""
    names = list(ROLE_COLORS)
    grid, labels = role_grid(head_roles)
    n_layers, n_heads = grid.shape
    width, height = max(4.0, 0.6 * n_heads + 2.5), max(2.5, 0.5 * n_layers + 1)
    canvas = Canvas(width, height, kind="role_map")
    box = (0.55 * IN, 0.4 * IN, (width - 2.05) * IN, (height - 0.9) * IN)
    colours = list(ROLE_COLORS.values())

    def colour_for(_r: int, _c: int, v: float) -> str:
        return colours[int(v)] if math.isfinite(v) else MISSING

    cells(canvas, box, grid, colours, 0, len(names) - 1, colour_for=colour_for)
    x0, y0, w, h = box
    cw, ch = w / n_heads, h / n_layers
    canvas.open_group("values")
    for layer in range(n_layers):
        for head in range(n_heads):
            if labels[layer][head]:
                canvas.text(x0 + (head + 0.5) * cw, y0 + (layer + 0.5) * ch,
                            labels[layer][head], 6)
    canvas.close_group()
    index_ticks(canvas, box, n_layers, n_heads)
    _titles(canvas, box, title)
    panel = Panel(canvas, box, (0, 1), (0, 1))
    panel.legend([LegendEntry(n, c, "patch") for n, c in ROLE_COLORS.items()], "outside")
    return canvas


def relation_heatmaps(syntactic_accuracy: pd.DataFrame, direction: str,
                      max_relations: int = 24) -> Canvas:
    """``plots.relation_heatmaps`` as SVG: one accuracy heatmap (0..1) per relation, a red
    dot on the heads syntactic for it, one shared colour bar."""
    rows = syntactic_accuracy[syntactic_accuracy["direction"] == direction]
    relations = list(dict.fromkeys(rows["relation"]))[:max_relations]
    cols = min(4, max(1, len(relations)))
    n_rows = max(1, math.ceil(len(relations) / cols))
    heading = (f"Syntactic accuracy per head (layers and heads from 0), {direction}; "
               "red dot: syntactic after correction")
    width, height = 3.0 * cols + 1, 2.4 * n_rows
    heading = wrap(heading, 10, (width - 0.3) * IN)  # the matplotlib twin cut it off
    extra = 0.19 * heading.count("\n")  # inches for the lines a wrap added
    height += extra
    canvas = Canvas(width, height, kind="relation_heatmaps")
    colours = colour_table("viridis")
    left, right, bottom = 0.5 * IN, (0.08 * width + 0.2) * IN, 0.5 * IN
    top = (0.6 + extra) * IN
    space_x, space_y = 0.35, 0.7  # between panels, as a share of a panel (matplotlib's)
    pw = (width * IN - left - right) / (cols + space_x * (cols - 1))
    ph = (height * IN - top - bottom) / (n_rows + space_y * (n_rows - 1))
    for i, relation in enumerate(relations):
        sub = rows[rows["relation"] == relation]
        grid = layer_head_grid(sub, value="accuracy")
        x0 = left + (i % cols) * pw * (1 + space_x)
        y0 = top + (i // cols) * ph * (1 + space_y)
        box = (x0, y0, pw, ph)
        canvas.open_group("panel", relation=relation)
        cells(canvas, box, grid, colours, 0.0, 1.0)
        n_layers, n_heads = grid.shape
        if "syntactic" in sub:
            marked = sub[sub["syntactic"].astype(bool)]
            cw, ch = pw / n_heads, ph / n_layers
            for head, layer in zip(marked["head"], marked["layer"], strict=True):
                canvas.circle(x0 + (int(head) + 0.5) * cw, y0 + (int(layer) + 0.5) * ch, 1.4,
                              "red")
        index_ticks(canvas, box, n_layers, n_heads, size=6)
        base = float(sub["baseline"].iloc[0])
        _titles(canvas, box, f"{relation} (n={int(sub['examples'].iloc[0])}, base {base:.2f})",
                size=8, label_size=7)
        canvas.close_group()
    canvas.text(width * IN / 2, 0.12 * IN, heading, 10, baseline="hanging")
    if relations:
        colour_bar(canvas, (0.93 * width * IN, 0.15 * height * IN, 0.015 * width * IN,
                            0.7 * height * IN), colours, 0.0, 1.0, label="accuracy")
    return canvas


def behaviour_figure(behaviour: pd.DataFrame, title: str = "Attention behaviour") -> Canvas:
    """``plots.behaviour_figure`` as SVG: vertical, diagonal and broad shares (0..1, magma) in
    three layer x head panels, percentages in the cells, one colour bar."""
    measures = ("vertical", "diagonal", "broad")
    first = layer_head_grid(behaviour, value=measures[0])
    n_layers, n_heads = first.shape
    width = 3 * max(3.0, 0.4 * n_heads + 1.2)
    height = max(2.4, 0.4 * n_layers + 1.2)
    canvas = Canvas(width, height, kind="behaviour")
    colours = colour_table("magma")
    left, gap, top, bottom = 0.45 * IN, 0.45 * IN, 0.7 * IN, 0.5 * IN
    pw = (0.92 * width * IN - left - 2 * gap) / 3
    ph = height * IN - top - bottom
    for i, measure in enumerate(measures):
        grid = layer_head_grid(behaviour, value=measure)
        box = (left + i * (pw + gap), top, pw, ph)
        canvas.open_group("panel", measure=measure)
        cells(canvas, box, grid, colours, 0.0, 1.0)
        if n_heads * n_layers <= 400:
            write_values(canvas, box, grid, lambda v: f"{100 * v:.0f}", lambda v: v < 0.5, size=5)
        index_ticks(canvas, box, n_layers, n_heads, size=6)
        _titles(canvas, box, measure, size=9, label_size=7)
        canvas.close_group()
    canvas.text(width * IN / 2, 0.12 * IN, title, 10, baseline="hanging")
    colour_bar(canvas, (0.94 * width * IN, 0.15 * height * IN, 0.012 * width * IN,
                        0.7 * height * IN), colours, 0.0, 1.0, label="share")
    return canvas
