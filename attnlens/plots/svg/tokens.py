"""Token-level figures of one sentence as SVG, twins of ``plots.tokens``: the token x token
heatmap (rows: query, columns: key) and one query row as bars. Labels read ``position token``.
"""

from __future__ import annotations

import pandas as pd

from attnlens.plots.svg.axes import Panel
from attnlens.plots.svg.canvas import Canvas, text_width, wrap
from attnlens.plots.svg.colormaps import colour_table, cycle_colour
from attnlens.plots.svg.grid import cells, colour_bar, index_ticks, value_range
from attnlens.plots.svg.layout import IN, panel_boxes
from attnlens.plots.svg.ticks import data_range


def token_matrix_heatmap(matrix: pd.DataFrame, title: str, value: str = "value") -> Canvas:
    """A sentence's matrix as square cells from 0 (viridis), labelled ``position token``."""
    grid = matrix.pivot_table(index="query", columns="key", values=value,
                              aggfunc="first").to_numpy()
    n = len(grid)
    keys = matrix.drop_duplicates("key").sort_values("key")
    labels = [f"{int(k)} {t}" for k, t in zip(keys["key"], keys["key_token"], strict=True)]
    size = min(16.0, max(4.0, 0.28 * n + 2))
    canvas = Canvas(size + 1, size, kind="token_matrix")
    # Fixed inches as the matplotlib twin: 1.3 left and 1.4 below for the rotated labels,
    # 0.4 on top, 1.2 on the right for the colour bar; the square centred in what is left.
    top, bottom, right = 0.4 * IN, 1.4 * IN, 1.2 * IN
    side = min(size * IN - top - bottom, (size + 1) * IN - 1.3 * IN - right)
    left = 1.3 * IN + ((size + 1) * IN - 1.3 * IN - right - side) / 2
    box = (left, top, side, side)
    colours = colour_table("viridis")
    lo, hi = value_range(grid, 0.0, None)
    cells(canvas, box, grid, colours, lo, hi)
    every = 1 if n <= 80 else max(1, n // 40)
    index_ticks(canvas, box, n, n, labels, labels, size=6, rotate_cols=True, every=every)
    room = max((text_width(label, 6) for label in labels), default=0.0) + 8
    canvas.text(left + side / 2, top - 6, title, 9, baseline="auto", cls="title")
    canvas.text(left + side / 2, top + side + room + 4, "input token (key)", 8,
                baseline="hanging")
    canvas.text(left - room - 8, top + side / 2, "position (query)", 8, rotate=-90)
    colour_bar(canvas, (left + side + 0.2 * IN, top, 0.15 * IN, side), colours, lo, hi)
    return canvas


def token_row_bars(row: pd.DataFrame, title: str, value: str = "value") -> Canvas:
    """One query row of a token matrix as bars (C0), labels ``position token`` below."""
    row = row.sort_values("key")
    n = len(row)
    width = min(16.0, max(4.0, 0.3 * n + 1.5))
    canvas = Canvas(width, 3.6, kind="token_row")
    box = panel_boxes(width, 3.6, 1, 1, bottom=1.2)[0]
    values = row[value].to_list()
    _, top = data_range([0.0, *values])
    panel = Panel(canvas, box, (-0.6, n - 0.4), (0.0, top))
    labels = [f"{int(k)} {t}" for k, t in zip(row["key"], row["key_token"], strict=True)]
    panel.axes(xticks=list(range(n)), xlabels=labels, rotate_x=True, size=6,
               grid="y")
    panel.bars(list(range(n)), values, cycle_colour(0))
    panel.ylabel("share")
    panel.title(wrap(title, 9, box[2] + 0.4 * IN))  # a long title wraps (matplotlib cut it)
    return canvas
