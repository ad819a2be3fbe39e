"""One chart panel of an SVG figure: data coordinates mapped into a box, frame, ticks, grid,
titles, lines with markers, min-max bands, reference lines, bars and a legend.

A panel draws what it is told in drawing order; lines and bands are clipped to the box. Log
axes map ``log10`` of the value (values must be positive: callers clip zeros to a floor).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from attnlens.plots.svg.canvas import Canvas, num, text_width
from attnlens.plots.svg.ticks import exponent, linear_ticks, log_ticks, tick_labels

GRID = "#b0b0b0"
FRAME = "#000"


@dataclass(frozen=True)
class LegendEntry:
    """One legend line: ``kind`` is ``line``, ``marker`` (line with dots), ``patch`` (a filled
    square) or ``band`` (a translucent square); ``dash`` an SVG dash pattern."""

    label: str
    colour: str
    kind: str = "line"
    dash: str | None = None
    opacity: float = 1.0


class Panel:
    """Axes at ``(x, y)`` (top-left, points) of size ``w`` x ``h`` on ``canvas``."""

    def __init__(self, canvas: Canvas, box: tuple[float, float, float, float],
                 xlim: tuple[float, float], ylim: tuple[float, float],
                 xlog: bool = False, ylog: bool = False) -> None:
        self.canvas = canvas
        self.x, self.y, self.w, self.h = box
        self.xlog, self.ylog = xlog, ylog
        self.xlim, self.ylim = xlim, ylim
        self._x0, self._x1 = self._scale(xlim, xlog)
        self._y0, self._y1 = self._scale(ylim, ylog)
        # drawn points, reference lines included (where ``legend("best")`` avoids)
        self.points: list[tuple[float, float]] = []
        self.clip = f"clip{len(canvas.parts)}"
        canvas.add(f'<clipPath id="{self.clip}"><rect x="{num(self.x)}" y="{num(self.y)}" '
                   f'width="{num(self.w)}" height="{num(self.h)}"/></clipPath>')

    @staticmethod
    def _scale(lim: tuple[float, float], log: bool) -> tuple[float, float]:
        lo, hi = (math.log10(lim[0]), math.log10(lim[1])) if log else lim
        return (lo, hi) if hi > lo else (lo - 0.5, lo + 0.5)

    def px(self, value: float) -> float:
        v = math.log10(value) if self.xlog else value
        return self.x + (v - self._x0) / (self._x1 - self._x0) * self.w

    def py(self, value: float) -> float:
        v = math.log10(value) if self.ylog else value
        return self.y + self.h - (v - self._y0) / (self._y1 - self._y0) * self.h

    def _xy(self, xs: Sequence[float], ys: Sequence[float]) -> list[tuple[float, float]]:
        pts = [(self.px(a), self.py(b)) for a, b in zip(xs, ys, strict=True)
               if math.isfinite(a) and math.isfinite(b)
               and (a > 0 or not self.xlog) and (b > 0 or not self.ylog)]
        self.points += pts
        return pts

    # frame and labels ---------------------------------------------------------------------
    def axes(self, xticks: Sequence[float] | None = None, xlabels: Sequence[str] | None = None,
             yticks: Sequence[float] | None = None, grid: bool | str = True, size: float = 7,
             rotate_x: bool = False, x_shown: bool = True, y_shown: bool = True) -> None:
        """Frame, ticks and tick labels (computed when not given), and a light grid;
        ``grid="y"`` draws horizontal grid lines only; ``x_shown``/``y_shown`` False leaves
        that axis's labels out (shared axes)."""
        c = self.canvas
        xt = list(xticks) if xticks is not None else self._ticks(self.xlim, self.xlog)
        yt = list(yticks) if yticks is not None else self._ticks(self.ylim, self.ylog)
        xl = list(xlabels) if xlabels is not None else (None if self.xlog else tick_labels(xt))
        yl = None if self.ylog else tick_labels(yt)
        bottom = self.y + self.h
        c.open_group("axes")
        for i, t in enumerate(xt):
            x = self.px(t)
            if grid is True:
                c.line(x, self.y, x, bottom, GRID, 0.6, opacity=0.5)
            c.line(x, bottom, x, bottom + 3.5, FRAME, 0.8)
            if not x_shown:
                continue
            if rotate_x:
                c.text(x, bottom + 5, xl[i] if xl else "", size, anchor="end", rotate=-90)
            elif xl is not None:
                c.text(x, bottom + 5, xl[i], size, baseline="hanging")
            else:
                self._power(x, bottom + 11, exponent(t), size, "middle")
        for i, t in enumerate(yt):
            y = self.py(t)
            if grid:
                c.line(self.x, y, self.x + self.w, y, GRID, 0.6, opacity=0.5)
            c.line(self.x - 3.5, y, self.x, y, FRAME, 0.8)
            if not y_shown:
                continue
            if yl is not None:
                c.text(self.x - 5, y, yl[i], size, anchor="end")
            else:
                self._power(self.x - 5, y, exponent(t), size, "end")
        c.rect(self.x, self.y, self.w, self.h, "none", stroke=FRAME)
        c.close_group()

    def _ticks(self, lim: tuple[float, float], log: bool) -> list[float]:
        return log_ticks(*lim) if log else linear_ticks(*lim)

    def _power(self, x: float, y: float, power: int, size: float, anchor: str) -> None:
        self.canvas.add(f'<text x="{num(x)}" y="{num(y)}" font-size="{size:g}" '
                        f'text-anchor="{anchor}" dominant-baseline="central">10<tspan '
                        f'dy="-0.45em" font-size="{0.75 * size:g}">{power}</tspan></text>')

    def title(self, text: str, size: float = 9) -> None:
        self.canvas.text(self.x + self.w / 2, self.y - 6, text, size, baseline="auto")

    def xlabel(self, text: str, size: float = 8, below: float = 16) -> None:
        self.canvas.text(self.x + self.w / 2, self.y + self.h + below, text, size,
                         baseline="hanging")

    def ylabel(self, text: str, size: float = 8, left: float = 30) -> None:
        x, y = self.x - left, self.y + self.h / 2
        self.canvas.text(x, y, text, size, rotate=-90)

    # data ---------------------------------------------------------------------------------
    def line(self, xs: Sequence[float], ys: Sequence[float], colour: str, width: float = 1.5,
             dash: str | None = None, marker: float = 0.0, opacity: float | None = None,
             connect: bool = True) -> None:
        """A polyline through the finite points; ``marker`` > 0 draws dots of that radius."""
        pts = self._xy(xs, ys)
        self.canvas.add(f'<g clip-path="url(#{self.clip})">')
        if connect:
            self.canvas.polyline(pts, colour, width, dash, opacity)
        for x, y in pts if marker else ():
            self.canvas.circle(x, y, marker, colour)
        self.canvas.close_group()

    def band(self, xs: Sequence[float], lo: Sequence[float], hi: Sequence[float], colour: str,
             opacity: float = 0.25) -> None:
        """The area between ``lo`` and ``hi`` (a min-max band)."""
        upper = self._xy(xs, hi)
        lower = self._xy(xs, lo)
        self.canvas.add(f'<g clip-path="url(#{self.clip})">')
        self.canvas.polygon(upper + lower[::-1], colour, opacity)
        self.canvas.close_group()

    def hline(self, y: float, colour: str = "#808080", dash: str = "1,1.6",
              width: float = 1.0) -> None:
        if math.isfinite(y) and (y > 0 or not self.ylog):
            self.canvas.line(self.x, self.py(y), self.x + self.w, self.py(y), colour, width, dash)
            self.points += [(self.x + self.w * i / 20, self.py(y)) for i in range(21)]

    def vline(self, x: float, colour: str = "#808080", dash: str = "1,1.6",
              width: float = 1.0) -> None:
        if math.isfinite(x) and self.xlim[0] <= x <= self.xlim[1]:
            self.canvas.line(self.px(x), self.y, self.px(x), self.y + self.h, colour, width,
                             dash)
            self.points += [(self.px(x), self.y + self.h * i / 20) for i in range(21)]

    def bars(self, xs: Sequence[float], heights: Sequence[float], colour: str,
             width: float = 0.8) -> None:
        """Bars from 0 centred on ``xs``, ``width`` in data units."""
        self.canvas.open_group("bars")
        for x, v in zip(xs, heights, strict=True):
            if not math.isfinite(v):
                continue
            left, right = self.px(x - width / 2), self.px(x + width / 2)
            top, base = self.py(max(v, 0.0)), self.py(min(v, 0.0))
            self.canvas.rect(left, top, right - left, base - top, colour,
                             extra=f' data-value="{v:.6g}"')
        self.canvas.close_group()

    def legend(self, entries: Sequence[LegendEntry], where: str = "best",
               size: float = 7) -> None:
        """A framed legend in a corner of the panel (``best``: the corner with the fewest
        drawn points under it), or ``outside`` to the right of the panel."""
        if not entries:
            return
        row = size * 1.35
        width = 26 + max(text_width(e.label, size) for e in entries)
        height = row * len(entries) + 6
        corners = {
            "upper right": (self.x + self.w - width - 4, self.y + 4),
            "upper left": (self.x + 4, self.y + 4),
            "lower right": (self.x + self.w - width - 4, self.y + self.h - height - 4),
            "lower left": (self.x + 4, self.y + self.h - height - 4),
            "outside": (self.x + self.w + 8, self.y),
        }
        if where == "best":
            def covered(corner: str) -> int:
                x0, y0 = corners[corner]
                return sum(x0 <= x <= x0 + width and y0 <= y <= y0 + height
                           for x, y in self.points)
            where = min(("upper right", "upper left", "lower left", "lower right"), key=covered)
        x0, y0 = corners[where]
        c = self.canvas
        c.open_group("legend")
        if where != "outside":
            c.add(f'<rect x="{num(x0)}" y="{num(y0)}" width="{num(width)}" '
                  f'height="{num(height)}" rx="2" fill="#fff" fill-opacity="0.8" '
                  f'stroke="#ccc" stroke-width="0.6"/>')
        for i, entry in enumerate(entries):
            y = y0 + 3 + row * (i + 0.5)
            if entry.kind in ("patch", "band"):
                c.rect(x0 + 5, y - size / 2, 14, size, entry.colour, opacity=entry.opacity)
            else:
                c.line(x0 + 4, y, x0 + 20, y, entry.colour, 1.5, entry.dash)
                if entry.kind == "marker":
                    c.circle(x0 + 12, y, 2, entry.colour)
            c.text(x0 + 24, y, entry.label, size, anchor="start")
        c.close_group()
