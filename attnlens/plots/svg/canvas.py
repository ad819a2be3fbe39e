"""An SVG document built as text: rectangles, lines, polylines, polygons, circles and text.

Coordinates are points (1/72 inch) from the top-left corner, as in matplotlib's own SVG; the
document's ``width``/``height`` are the pixels matplotlib's PNG of the same size had (110 dots
per inch), so a figure takes the same room on a page as before. Every text is escaped, and
characters XML cannot carry (control characters from data) become U+FFFD.
"""

from __future__ import annotations

import itertools
import re

DPI = 110  # the pixel size the figure is shown at (matplotlib's PNGs were saved at 110 dpi)
FONT = "DejaVu Sans, Verdana, Arial, Helvetica, sans-serif"
# Characters XML 1.0 cannot hold (most C0 controls, surrogates, U+FFFE/U+FFFF).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def escape(text: object) -> str:
    """``text`` safe inside an SVG element or a double-quoted attribute."""
    plain = _NOT_XML.sub("\ufffd", str(text))
    return (plain.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def num(value: float) -> str:
    """A coordinate with two decimals (a hundredth of a point), trailing zeros dropped."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def text_width(text: str, size: float) -> float:
    """Approximate width in points of ``text`` at font ``size`` (DejaVu Sans averages ~0.6 em
    per character; used only to leave room for labels and legends)."""
    return 0.6 * size * len(text)


def wrap(text: str, size: float, width: float) -> str:
    """``text`` with line breaks between words so that each line fits ``width`` points at
    font ``size`` (by ``text_width``); a single longer word keeps its own line."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and text_width(f"{lines[-1]} {word}", size) <= width:
            lines[-1] = f"{lines[-1]} {word}"
        else:
            lines.append(word)
    return "\n".join(lines)


class Canvas:
    """An SVG figure ``width`` x ``height`` inches; elements are appended in drawing order."""

    def __init__(self, width: float, height: float, kind: str = "") -> None:
        self.width, self.height = 72.0 * width, 72.0 * height  # points
        self.kind = kind
        self.parts: list[str] = []

    def add(self, element: str) -> None:
        self.parts.append(element)

    def open_group(self, cls: str, **data: object) -> None:
        """Start a ``<g class=cls data-*=...>`` (closed by ``close_group``)."""
        attrs = "".join(f' data-{k.replace("_", "-")}="{escape(v)}"' for k, v in data.items())
        self.parts.append(f'<g class="{cls}"{attrs}>')

    def close_group(self) -> None:
        self.parts.append("</g>")

    def rect(self, x: float, y: float, w: float, h: float, fill: str, stroke: str | None = None,
             opacity: float | None = None, extra: str = "") -> None:
        style = f' stroke="{stroke}" stroke-width="0.8"' if stroke else ""
        alpha = f' fill-opacity="{opacity:g}"' if opacity is not None else ""
        self.parts.append(f'<rect x="{num(x)}" y="{num(y)}" width="{num(w)}" '
                          f'height="{num(h)}" fill="{fill}"{style}{alpha}{extra}/>')

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str = "#000",
             width: float = 0.8, dash: str | None = None, opacity: float | None = None) -> None:
        self.parts.append(f'<line x1="{num(x1)}" y1="{num(y1)}" x2="{num(x2)}" y2="{num(y2)}" '
                          f'{_stroke(stroke, width, dash, opacity)}/>')

    def polyline(self, points: list[tuple[float, float]], stroke: str, width: float = 1.5,
                 dash: str | None = None, opacity: float | None = None) -> None:
        if len(points) < 2:
            return
        points = simplify(points)
        self.parts.append(f'<polyline points="{_points(points)}" fill="none" '
                          f'{_stroke(stroke, width, dash, opacity)} stroke-linejoin="round"/>')

    def polygon(self, points: list[tuple[float, float]], fill: str, opacity: float) -> None:
        if len(points) < 3:
            return
        self.parts.append(f'<polygon points="{_points(points)}" fill="{fill}" '
                          f'fill-opacity="{opacity:g}" stroke="none"/>')

    def circle(self, x: float, y: float, r: float, fill: str, stroke: str | None = None) -> None:
        edge = f' stroke="{stroke}" stroke-width="0.4"' if stroke else ""
        self.parts.append(f'<circle cx="{num(x)}" cy="{num(y)}" r="{num(r)}" '
                          f'fill="{fill}"{edge}/>')

    def text(self, x: float, y: float, text: str, size: float = 8, anchor: str = "middle",
             baseline: str = "central", colour: str = "#000", rotate: float | None = None,
             italic: bool = False, cls: str = "") -> None:
        """``text`` at ``(x, y)``; ``anchor`` start/middle/end, ``baseline`` central/auto/
        hanging; several lines (``\\n``) are stacked below, around or above ``y`` as the
        baseline puts one line."""
        lines = str(text).split("\n")
        turn = f' transform="rotate({num(rotate)} {num(x)} {num(y)})"' if rotate else ""
        style = ' font-style="italic"' if italic else ""
        klass = f' class="{cls}"' if cls else ""
        fill = f' fill="{colour}"' if colour != "#000" else ""
        head = (f'<text x="{num(x)}" y="{num(y)}" font-size="{size:g}" text-anchor="{anchor}" '
                f'dominant-baseline="{baseline}"{fill}{style}{turn}{klass}>')
        if len(lines) == 1:
            self.parts.append(f"{head}{escape(lines[0])}</text>")
            return
        below = {"hanging": 0.0, "auto": 1.0}.get(baseline, 0.5)  # lines above y: a share
        first = -(len(lines) - 1) * 1.15 * below
        spans = "".join(f'<tspan x="{num(x)}" dy="{first if i == 0 else 1.15:g}em">'
                        f"{escape(line)}</tspan>" for i, line in enumerate(lines))
        self.parts.append(f"{head}{spans}</text>")

    def corner_label(self, label: str) -> None:
        """``label`` in italics in the top-left corner (encoder-decoder reports)."""
        self.text(2, 2, label, size=8, anchor="start", baseline="hanging", italic=True,
                  cls="label")

    def render(self) -> str:
        """The whole SVG document as text."""
        w, h = self.width, self.height
        kind = f' data-kind="{escape(self.kind)}"' if self.kind else ""
        return (
            '<?xml version="1.0" encoding="utf-8"?>\n'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{num(w * DPI / 72)}" '
            f'height="{num(h * DPI / 72)}" viewBox="0 0 {num(w)} {num(h)}" '
            f'font-family="{FONT}"{kind}>\n'
            f'<rect width="100%" height="100%" fill="#fff"/>\n'
            + "\n".join(self.parts) + "\n</svg>\n"
        )


def _stroke(colour: str, width: float, dash: str | None, opacity: float | None) -> str:
    out = f'stroke="{colour}" stroke-width="{width:g}"'
    if dash:
        out += f' stroke-dasharray="{dash}"'
    if opacity is not None:
        out += f' stroke-opacity="{opacity:g}"'
    return out


def simplify(points: list[tuple[float, float]],
             tolerance: float = 0.05) -> list[tuple[float, float]]:
    """``points`` without the ones lying within ``tolerance`` points (1/1440 inch, far below
    what a screen shows) of the straight line from the last kept point to the next one:
    dense curves (a spectrum's 384 dimensions) shrink to the points that bend them."""
    if len(points) < 3:
        return points
    kept = [points[0]]
    for here, after in itertools.pairwise(points[1:]):
        (x0, y0), (x1, y1), (x2, y2) = kept[-1], here, after
        dx, dy = x2 - x0, y2 - y0
        length = (dx * dx + dy * dy) ** 0.5
        off = abs(dy * (x1 - x0) - dx * (y1 - y0)) / length if length else \
            ((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5
        if off > tolerance:
            kept.append(here)
    kept.append(points[-1])
    return kept


def _points(points: list[tuple[float, float]]) -> str:
    return " ".join(f"{num(x)},{num(y)}" for x, y in points)
