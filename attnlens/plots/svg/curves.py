"""Line charts as SVG, twins of ``plots.curves``: per-layer spectra and shared-subspace energy,
window coverage, measures over layers, linear attention's keys by length."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlens.plots.svg.axes import LegendEntry, Panel
from attnlens.plots.svg.canvas import Canvas
from attnlens.plots.svg.colormaps import cycle_colour
from attnlens.plots.svg.layout import Box, layer_grid, panel_boxes, suptitle
from attnlens.plots.svg.ticks import data_range, linear_ticks

DOTTED = "1,1.6"
DASHED = "3.7,1.6"
GREY = "#808080"


def _share_panels(canvas: Canvas, boxes: list[Box], cols: int, xlim: tuple[float, float],
                  xlabel: str, ylabel: str) -> list[Panel]:
    """One 0..1.02 share panel per layer: shared x range, tick labels on the outer panels."""
    panels = []
    xticks = linear_ticks(*xlim, most=6)
    n = len(boxes)
    for layer, box in enumerate(boxes):
        panel = Panel(canvas, box, xlim, (0, 1.02))
        bottom_of_column = layer + cols >= n
        panel.axes(xticks=xticks, yticks=linear_ticks(0, 1.02, most=6),
                   x_shown=bottom_of_column, y_shown=layer % cols == 0)
        panel.title(f"layer {layer}")
        panel.xlabel(xlabel, below=16 if bottom_of_column else 6)
        panels.append(panel)
    panels[0].ylabel(ylabel)
    return panels


def cumulative_curves_by_layer(curve: pd.DataFrame, title: str, x: str = "fraction",
                               value: str = "value") -> Canvas:
    """Per layer, the heads' mean cumulative curve, a min-max band across heads and the
    dotted diagonal of a flat spectrum."""
    n_layers = int(curve["layer"].max()) + 1
    canvas, boxes, cols = layer_grid(n_layers, kind="cumulative_curves", top=0.6, hspace=0.5)
    panels = _share_panels(canvas, boxes, cols, data_range(curve[x]), "k / n",
                           "cumulative share of sum s")
    colour = cycle_colour(0)
    for layer, rows in curve.groupby("layer"):
        panel = panels[int(layer)]
        stats = rows.groupby(x)[value].agg(["min", "mean", "max"])
        xs = stats.index.to_list()
        panel.band(xs, stats["min"].to_list(), stats["max"].to_list(), colour, 0.3)
        panel.line(xs, stats["mean"].to_list(), colour, 1.5)
        panel.line([0, 1], [0, 1], GREY, 1.0, dash=DOTTED)
    panels[0].legend([LegendEntry("heads (min-max)", colour, "band", opacity=0.3),
                      LegendEntry("mean over heads", colour),
                      LegendEntry("flat spectrum", GREY, dash=DOTTED)], "lower right", size=6)
    suptitle(canvas, title)
    return canvas


def shared_subspace_curves(curve: pd.DataFrame, d_model: int, title: str) -> Canvas:
    """Per layer, cumulative energy of the heads' concatenated matrices (solid) against one
    head's (dashed, mean), and the dotted line at ``d_model``."""
    n_layers = int(curve["layer"].max()) + 1
    canvas, boxes, cols = layer_grid(n_layers, width=3.0, kind="shared_subspace", top=0.6,
                                     hspace=0.5)
    panels = _share_panels(canvas, boxes, cols, data_range(curve["k"]), "dimensions k",
                           "cumulative energy (sum s^2)")
    matrices = list(dict.fromkeys(curve["matrix"]))
    entries = []
    for index, matrix in enumerate(matrices):
        for scope, dash in (("concat", None), ("per_head_mean", DASHED)):
            label = f"{matrix} {'all heads' if scope == 'concat' else 'one head'}"
            entries.append(LegendEntry(label, cycle_colour(index), dash=dash))
    # each line's rows (ascending, as a mask picks them), found in one pass over the table
    lines = curve.groupby(["layer", "matrix", "scope"], sort=False).indices
    k, energy = curve["k"].to_numpy(), curve["energy"].to_numpy()
    none = np.zeros(0, dtype=np.int64)
    for layer in curve.groupby("layer").groups:
        panel = panels[int(layer)]
        for index, matrix in enumerate(matrices):
            for scope, dash in (("concat", None), ("per_head_mean", DASHED)):
                rows = lines.get((layer, matrix, scope), none)
                panel.line(k[rows].tolist(), energy[rows].tolist(), cycle_colour(index), 1.2,
                           dash=dash)
        panel.vline(d_model, GREY, DOTTED)
    panels[0].legend(entries, "lower right", size=6)
    suptitle(canvas, title)
    return canvas


def window_coverage_curves(curve: pd.DataFrame, coverage: float, title: str,
                           max_window: int = 32) -> Canvas:
    """Per layer, each head's mass inside the window ``±w`` against ``w`` (one line per head,
    coloured C0..C9 by head), the dotted coverage level."""
    curve = curve[curve["window"] <= max_window]
    n_layers = int(curve["layer"].max()) + 1
    canvas, boxes, cols = layer_grid(n_layers, kind="window_coverage", top=0.6, hspace=0.5)
    panels = _share_panels(canvas, boxes, cols, data_range(curve["window"]), "window ±w",
                           "mass inside the window")
    for layer, rows in curve.groupby("layer"):
        panel = panels[int(layer)]
        for head, part in rows.groupby("head"):
            panel.line(part["window"].to_list(), part["window_mass"].to_list(),
                       cycle_colour(int(head)), 0.8, opacity=0.7)
        panel.hline(coverage, GREY, DOTTED)
    suptitle(canvas, title)
    return canvas


def _single(kind: str, title: str) -> tuple[Canvas, Box]:
    """A 5 x 3.2 inch canvas with one panel (``plots.style.place_axes`` margins)."""
    canvas = Canvas(5.0, 3.2, kind=kind)
    return canvas, panel_boxes(5.0, 3.2, 1, 1)[0]


def layer_measure_lines(table: pd.DataFrame, measures: list[str], title: str,
                        ylabel: str = "mean over query rows") -> Canvas:
    """One line with dots per measure over layers, from a tidy ``layer, measure, value``
    table; the y axis starts at 0."""
    canvas, box = _single("layer_measure_lines", title)
    n_layers = int(table["layer"].max()) + 1
    _, top = data_range(table.loc[table["measure"].isin(measures), "value"])
    panel = Panel(canvas, box, data_range(range(n_layers)), (0, max(top, 1e-12)))
    panel.axes(xticks=list(range(n_layers)))
    entries = []
    for index, measure in enumerate(measures):
        rows = table[table["measure"] == measure].sort_values("layer")
        panel.line(rows["layer"].to_list(), rows["value"].to_list(), cycle_colour(index), 1.5,
                   marker=2.5)
        entries.append(LegendEntry(measure, cycle_colour(index), "marker"))
    panel.xlabel("layer (after that block)")
    panel.ylabel(ylabel)
    panel.title(title)
    panel.legend(entries)
    return canvas


def keys_by_length(table: pd.DataFrame, d_head: int, title: str) -> Canvas:
    """Mean effective number of orthogonal keys per layer against the sentence-length bucket,
    with the dotted line at ``d_head``."""
    canvas, box = _single("keys_by_length", title)
    buckets = list(dict.fromkeys(table["lengths"]))
    _, top = data_range([*table["effective_keys"], d_head])
    panel = Panel(canvas, box, data_range(range(len(buckets))), (0, top))
    panel.axes(xticks=list(range(len(buckets))), xlabels=[str(b) for b in buckets])
    entries = []
    for index, (layer, rows) in enumerate(table.groupby("layer")):
        means = rows.groupby("lengths")["effective_keys"].mean().reindex(buckets)
        panel.line(list(range(len(buckets))), means.to_list(), cycle_colour(index), 1.5,
                   marker=2.5)
        entries.append(LegendEntry(f"layer {int(layer)}", cycle_colour(index), "marker"))
    panel.hline(d_head, GREY, DOTTED)
    entries.append(LegendEntry(f"d_head = {d_head}", GREY, dash=DOTTED))
    panel.xlabel("sentence length (tokens)")
    panel.ylabel("effective keys (mean over heads)")
    panel.title(title)
    panel.legend(entries, size=6)
    return canvas
