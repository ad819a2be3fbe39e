"""Where the panels of an SVG figure go: fixed margins in inches, as ``plots.style.place_axes``
gives the matplotlib figures, and the one-panel-per-layer grid of ``plots.style.layer_axes``."""

from __future__ import annotations

from attnlens.plots.svg.canvas import Canvas

IN = 72.0  # points per inch
Box = tuple[float, float, float, float]  # x, y (top-left), width, height in points


def panel_boxes(width: float, height: float, rows: int, cols: int, left: float = 0.6,
                right: float = 0.2, top: float = 0.4, bottom: float = 0.5, wspace: float = 0.25,
                hspace: float = 0.45) -> list[Box]:
    """Boxes of a ``rows`` x ``cols`` grid in a ``width`` x ``height`` inch figure, row by row;
    ``wspace``/``hspace`` are the gaps as a share of a panel (matplotlib's meaning)."""
    left, right = min(left, 0.45 * width), min(right, 0.45 * width)
    top, bottom = min(top, 0.45 * height), min(bottom, 0.45 * height)
    pw = (width - left - right) / (cols + wspace * (cols - 1))
    ph = (height - top - bottom) / (rows + hspace * (rows - 1))
    return [((left + c * pw * (1 + wspace)) * IN, (top + r * ph * (1 + hspace)) * IN,
             pw * IN, ph * IN) for r in range(rows) for c in range(cols)]


def layer_grid(n_layers: int, width: float = 2.6, height: float = 2.3, kind: str = "",
               **margins: float) -> tuple[Canvas, list[Box], int]:
    """A canvas with one panel per layer, at most 4 per row: ``(canvas, boxes, columns)``."""
    cols = min(4, max(1, n_layers))
    rows = -(-max(1, n_layers) // cols)
    canvas = Canvas(width * cols, height * rows, kind=kind)
    boxes = panel_boxes(width * cols, height * rows, rows, cols, **margins)
    return canvas, boxes[:n_layers], cols


def suptitle(canvas: Canvas, title: str, size: float = 10) -> None:
    """The figure's title, centred at the top."""
    canvas.text(canvas.width / 2, 0.12 * IN, title, size, baseline="hanging", cls="title")
