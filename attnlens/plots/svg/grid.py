"""A matrix drawn as coloured cells (a heatmap panel) and its colour bar.

Colours follow matplotlib's ``imshow`` exactly: ``vmin``/``vmax`` default to the finite
minimum and maximum, values outside are clipped, the colour is entry ``int(share * 256)`` of the
256-colour table (``colormaps``). A NaN cell is drawn white with class ``missing``. Cells are
written row by row (row 0 first), each with its value as ``data-value``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from attnlens.plots.svg.canvas import Canvas, escape, num
from attnlens.plots.svg.colormaps import MISSING, colour_index
from attnlens.plots.svg.ticks import linear_ticks, tick_labels


def value_range(grid: np.ndarray, vmin: float | None, vmax: float | None) -> tuple[float, float]:
    """``(vmin, vmax)``, each defaulting to the finite minimum / maximum of ``grid``."""
    finite = grid[np.isfinite(grid)]
    lo = float(finite.min()) if vmin is None and finite.size else (vmin if vmin is not None
                                                                   else 0.0)
    hi = float(finite.max()) if vmax is None and finite.size else (vmax if vmax is not None
                                                                   else 1.0)
    return float(lo), float(hi)


def cells(canvas: Canvas, box: tuple[float, float, float, float], grid: np.ndarray,
          colours: Sequence[str], vmin: float, vmax: float,
          colour_for: Callable[[int, int, float], str] | None = None) -> None:
    """Draw ``grid`` ([row, column], row 0 at the top) into ``box`` (x, y, w, h in points);
    ``colour_for(row, col, value)`` overrides the colour map (categorical maps)."""
    x0, y0, w, h = box
    n_rows, n_cols = grid.shape
    cw, ch = w / max(1, n_cols), h / max(1, n_rows)
    # One unit square per cell, scaled into the box: short elements (a syntactic figure has
    # 24 x 72 cells), exact positions.
    out = [f'<g class="cells" shape-rendering="crispEdges" '
           f'transform="translate({num(x0)} {num(y0)}) scale({cw:.4f} {ch:.4f})">']
    for r in range(n_rows):
        for col in range(n_cols):
            v = float(grid[r, col])
            if colour_for is not None:
                fill, missing = colour_for(r, col, v), not math.isfinite(v)
            else:
                index = colour_index(v, vmin, vmax, len(colours))
                fill, missing = (MISSING, True) if index is None else (colours[index], False)
            klass = ' class="missing"' if missing else ""
            out.append(f'<rect{klass} x="{col}" y="{r}" width="1" height="1" fill="{fill}" '
                       f'data-value="{v:.6g}"/>')
    out.append("</g>")
    canvas.add("".join(out))


def write_values(canvas: Canvas, box: tuple[float, float, float, float], grid: np.ndarray,
             text_of: Callable[[float], str], dark: Callable[[float], bool],
             size: float = 6) -> None:
    """Each finite cell's ``text_of(value)`` at its centre, white where ``dark(value)``."""
    x0, y0, w, h = box
    n_rows, n_cols = grid.shape
    cw, ch = w / max(1, n_cols), h / max(1, n_rows)
    # Size and anchor set once on the group (inherited); the baseline on each text.
    out = [f'<g class="values" font-size="{size:g}" text-anchor="middle">']
    for r in range(n_rows):
        for col in range(n_cols):
            v = float(grid[r, col])
            if math.isfinite(v):
                fill = ' fill="#fff"' if dark(v) else ""
                out.append(f'<text x="{num(x0 + (col + 0.5) * cw)}" '
                           f'y="{num(y0 + (r + 0.5) * ch)}" dominant-baseline="central"{fill}>'
                           f"{escape(text_of(v))}</text>")
    out.append("</g>")
    canvas.add("".join(out))


def index_ticks(canvas: Canvas, box: tuple[float, float, float, float], n_rows: int,
                n_cols: int, row_labels: Sequence[str] | None = None,
                col_labels: Sequence[str] | None = None, size: float = 7,
                rotate_cols: bool = False, every: int = 1) -> None:
    """Tick marks and labels at cell centres: rows on the left, columns below."""
    x0, y0, w, h = box
    cw, ch = w / max(1, n_cols), h / max(1, n_rows)
    rows = row_labels if row_labels is not None else [str(i) for i in range(n_rows)]
    cols = col_labels if col_labels is not None else [str(i) for i in range(n_cols)]
    canvas.open_group("ticks")
    marks = []  # every tick mark in one path
    for r in range(0, n_rows, every):
        y = y0 + (r + 0.5) * ch
        marks.append(f"M{num(x0 - 3.5)} {num(y)}h3.5")
        canvas.text(x0 - 5, y, rows[r], size, anchor="end")
    for col in range(0, n_cols, every):
        x = x0 + (col + 0.5) * cw
        marks.append(f"M{num(x)} {num(y0 + h)}v3.5")
        if rotate_cols:
            canvas.text(x, y0 + h + 5, cols[col], size, anchor="end", rotate=-90)
        else:
            canvas.text(x, y0 + h + 5, cols[col], size, baseline="hanging")
    canvas.add(f'<path d="{"".join(marks)}" stroke="#000" stroke-width="0.8"/>')
    canvas.rect(x0, y0, w, h, "none", stroke="#000")
    canvas.close_group()


def colour_bar(canvas: Canvas, box: tuple[float, float, float, float], colours: Sequence[str],
               vmin: float, vmax: float, label: str = "", size: float = 7) -> None:
    """A vertical colour bar (``vmin`` at the bottom) with round ticks on its right."""
    x0, y0, w, h = box
    canvas.open_group("colourbar", vmin=f"{vmin:.6g}", vmax=f"{vmax:.6g}")
    n = len(colours)
    picks = sorted({round(i * (n - 1) / 32) for i in range(33)})  # 33 stops: smooth enough
    stops = "".join(f'<stop offset="{1 - i / (n - 1):.4f}" stop-color="{colours[i]}"/>'
                    for i in reversed(picks))
    gradient = f"bar{len(canvas.parts)}"
    canvas.add(f'<linearGradient id="{gradient}" x1="0" y1="0" x2="0" y2="1">{stops}'
               "</linearGradient>")
    canvas.rect(x0, y0, w, h, f"url(#{gradient})")
    canvas.rect(x0, y0, w, h, "none", stroke="#000")
    if vmax > vmin:
        ticks = linear_ticks(vmin, vmax, most=10)  # about as many as matplotlib gives
        for t, text in zip(ticks, tick_labels(ticks), strict=True):
            y = y0 + h - (t - vmin) / (vmax - vmin) * h
            canvas.line(x0 + w, y, x0 + w + 3, y)
            canvas.text(x0 + w + 5, y, text, size, anchor="start", cls="tick")
    else:
        canvas.text(x0 + w + 5, y0 + h / 2, f"{vmin:g}", size, anchor="start", cls="tick")
    if label:
        canvas.text(x0 + w + 34, y0 + h / 2, label, size + 1, rotate=-90)
    canvas.close_group()
