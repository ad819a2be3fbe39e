"""Rank-collapse charts as SVG, twins of ``plots.collapse``: residual against depth on a log
axis (one panel per norm), head-path products, and the doubly exponential fit."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlens.plots.collapse import fitted_points
from attnlens.plots.svg.axes import LegendEntry, Panel
from attnlens.plots.svg.canvas import Canvas
from attnlens.plots.svg.colormaps import cycle_colour
from attnlens.plots.svg.curves import DOTTED, GREY
from attnlens.plots.svg.layout import panel_boxes, suptitle
from attnlens.plots.svg.ticks import data_range

LOWEST = 1e-17  # zeros and negatives are drawn here on a log axis (as plots.collapse does)


def _positive(values: pd.Series) -> list[float]:
    return np.clip(values.to_numpy(dtype=float), LOWEST, None).tolist()


def collapse_curves(df: pd.DataFrame, title: str, value: str = "geo_mean",
                    band: tuple[str, str] = ("min", "max"),
                    norms: tuple[str, ...] = ("composite", "frobenius"),
                    floor: float | None = None) -> Canvas:
    """Relative residual against depth, a line with dots and a band per variant, one log-axis
    panel per norm; ``floor`` a dotted line (float64 epsilon)."""
    norms = tuple(n for n in norms if (df["norm"] == n).any())
    width = 5.2 * max(1, len(norms))
    canvas = Canvas(width, 3.8, kind="collapse_curves")
    boxes = panel_boxes(width, 3.8, 1, max(1, len(norms)), left=0.7, top=0.65, wspace=0.3)
    for index, (box, norm) in enumerate(zip(boxes, norms, strict=False)):
        rows_of_norm = df[df["norm"] == norm]
        ys = [*_positive(rows_of_norm[value]), *_positive(rows_of_norm[band[0]]),
              *_positive(rows_of_norm[band[1]]), *([floor] if floor else [])]
        panel = Panel(canvas, box, data_range(rows_of_norm["depth"]), data_range(ys, log=True),
                      ylog=True)
        panel.axes(xticks=sorted({int(d) for d in rows_of_norm["depth"]}))
        entries = []
        for i, (variant, rows) in enumerate(rows_of_norm.groupby("variant", sort=False)):
            rows = rows.sort_values("depth")
            depth = rows["depth"].to_list()
            panel.band(depth, _positive(rows[band[0]]), _positive(rows[band[1]]),
                       cycle_colour(i), 0.18)
            panel.line(depth, _positive(rows[value]), cycle_colour(i), 1.5, marker=1.8)
            entries.append(LegendEntry(str(variant), cycle_colour(i), "marker"))
        if floor is not None:
            panel.hline(floor, GREY, DOTTED)
            entries.append(LegendEntry("float64 epsilon", GREY, dash=DOTTED))
        panel.xlabel("depth (blocks applied; 0 = input)")
        panel.ylabel(f"relative residual, {norm} norm", left=38)
        panel.title(f"{norm} norm ({value}, band {band[0]}..{band[1]})")
        if index == 0:
            panel.legend(entries)
    suptitle(canvas, title)
    return canvas


def path_collapse_curve(df: pd.DataFrame, title: str, value: str = "geo_mean") -> Canvas:
    """Rank-1 residual of head-path attention products against path length: the ``value``
    line, a light min..max band and a darker q10..q90 band, log axis."""
    canvas = Canvas(5.2, 3.8, kind="path_collapse")
    box = panel_boxes(5.2, 3.8, 1, 1, left=0.7)[0]
    rows = df.sort_values("path_length")
    x = rows["path_length"].to_list()
    ys = [*_positive(rows[value]), *_positive(rows["min"]), *_positive(rows["max"])]
    panel = Panel(canvas, box, data_range(x), data_range(ys, log=True), ylog=True)
    panel.axes(xticks=x)
    colour = cycle_colour(0)
    panel.band(x, _positive(rows["min"]), _positive(rows["max"]), colour, 0.15)
    panel.band(x, _positive(rows["q10"]), _positive(rows["q90"]), colour, 0.3)
    panel.line(x, _positive(rows[value]), colour, 1.5, marker=2.5)
    panel.xlabel("path length (heads, one per layer)")
    panel.ylabel("rank-1 residual of the attention product", left=38)
    panel.title(title, size=10)
    panel.legend([LegendEntry(value, colour, "marker"),
                  LegendEntry("min..max", colour, "band", opacity=0.15),
                  LegendEntry("q10..q90", colour, "band", opacity=0.3)])
    return canvas


def double_log_fit(curves: pd.DataFrame, fits: pd.DataFrame, title: str,
                   norm: str = "composite", value: str = "geo_mean") -> Canvas:
    """``log(-log r)`` against depth, the fitted points as dots and each variant's fitted
    line (a straight rising line is a doubly exponential decay)."""
    canvas = Canvas(5.6, 3.8, kind="double_log_fit")
    box = panel_boxes(5.6, 3.8, 1, 1, left=0.7)[0]
    drawn = []
    # Colours follow the drawn variants, as matplotlib's cycle does.
    for i, (variant, fit, depths, y) in enumerate(fitted_points(curves, fits, norm, value)):
        depth = np.linspace(fit["first_depth"], fit["last_depth"], 50)
        line = fit["double_intercept"] + fit["double_slope"] * depth
        label = (f"{variant}: x{fit['double_base']:.2f}/layer, R²={fit['double_r2']:.3f}")
        drawn.append((depths.tolist(), y.tolist(), depth.tolist(), line.tolist(),
                      cycle_colour(i), label))
    xs = [v for d in drawn for v in d[0] + d[2]]
    ys = [v for d in drawn for v in d[1] + d[3]]
    panel = Panel(canvas, box, data_range(xs), data_range(ys))
    panel.axes()
    for px, py, lx, ly, colour, _ in drawn:
        panel.line(px, py, colour, marker=2.5, connect=False)
        panel.line(lx, ly, colour, 1.5)
    panel.xlabel("depth (blocks applied; 0 = input)")
    panel.ylabel(f"log(-log r), {norm} norm")
    panel.title(title, size=10)
    panel.legend([LegendEntry(label, colour) for *_, colour, label in drawn])
    return canvas


__all__ = ["collapse_curves", "double_log_fit", "path_collapse_curve", "suptitle"]
