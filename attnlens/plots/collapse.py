"""Rank-collapse figures (``attnlens.measures.collapse``: residual, synthetic, paths): residual
against depth, the doubly exponential fit, head-path products.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from attnlens.plots.style import place_axes, plt, styled

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _positive(values: pd.Series, floor: float) -> np.ndarray:
    """Values for a log axis: zeros and negatives drawn at ``floor``."""
    return np.clip(values.to_numpy(dtype=float), floor, None)


@styled
def collapse_curves(
    df: pd.DataFrame,
    title: str,
    value: str = "geo_mean",
    band: tuple[str, str] = ("min", "max"),
    norms: tuple[str, ...] = ("composite", "frobenius"),
    floor: float | None = None,
) -> Figure:
    """Relative residual against depth, one line (and band) per variant, one panel per norm.

    ``df`` is a ``collapse`` table (columns variant, depth, norm, ``value`` and ``band``).
    ``floor`` (for example float64's machine epsilon) is drawn as a dotted line.
    """
    norms = tuple(n for n in norms if (df["norm"] == n).any())
    fig, axes = plt.subplots(1, len(norms), figsize=(5.2 * len(norms), 3.8), squeeze=False)
    lowest = 1e-17
    for ax, norm in zip(axes[0], norms, strict=True):
        for variant, rows in df[df["norm"] == norm].groupby("variant", sort=False):
            rows = rows.sort_values("depth")
            (line,) = ax.plot(
                rows["depth"], _positive(rows[value], lowest), marker="o", ms=3, label=variant
            )
            ax.fill_between(
                rows["depth"], _positive(rows[band[0]], lowest), _positive(rows[band[1]], lowest),
                color=line.get_color(), alpha=0.18, linewidth=0,
            )
        if floor is not None:
            ax.axhline(floor, color="grey", linestyle=":", linewidth=1, label="float64 epsilon")
        ax.set_yscale("log")
        ax.set_xlabel("depth (blocks applied; 0 = input)")
        ax.set_ylabel(f"relative residual, {norm} norm")
        ax.set_title(f"{norm} norm ({value}, band {band[0]}..{band[1]})", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title)
    return place_axes(fig, left=0.7, top=0.65, wspace=0.3)


def fitted_points(curves: pd.DataFrame, fits: pd.DataFrame, norm: str, value: str
                  ) -> Iterator[tuple[str, pd.Series, np.ndarray, np.ndarray]]:
    """Each variant with a finite doubly exponential fit under ``norm``, in table order: its
    name, its ``fits`` row, and the depths and ``log(-log r)`` of the points the fit used."""
    for variant, rows in curves[curves["norm"] == norm].groupby("variant", sort=False):
        fit = fits[(fits["variant"] == variant) & (fits["norm"] == norm)]
        if fit.empty or not np.isfinite(fit["double_slope"].iloc[0]):
            continue
        fit = fit.iloc[0]
        rows = rows.sort_values("depth")
        used = rows[(rows["depth"] >= fit["first_depth"]) & (rows["depth"] <= fit["last_depth"])]
        used = used[used[value] < 1.0]
        y = np.log(-np.log(used[value].to_numpy(dtype=float)))
        yield variant, fit, used["depth"].to_numpy(), y


@styled
def double_log_fit(
    curves: pd.DataFrame,
    fits: pd.DataFrame,
    title: str,
    norm: str = "composite",
    value: str = "geo_mean",
) -> Figure:
    """``log(-log r)`` against depth with each variant's fitted line (``collapse.fit_decay``).

    A straight rising line is a doubly exponential decay; only the fitted points are drawn.
    """
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    for variant, fit, depths, y in fitted_points(curves, fits, norm, value):
        (line,) = ax.plot(depths, y, "o", ms=4)
        depth = np.linspace(fit["first_depth"], fit["last_depth"], 50)
        ax.plot(
            depth, fit["double_intercept"] + fit["double_slope"] * depth, color=line.get_color(),
            label=f"{variant}: x{fit['double_base']:.2f}/layer, R²={fit['double_r2']:.3f}",
        )
    ax.set_xlabel("depth (blocks applied; 0 = input)")
    ax.set_ylabel(f"log(-log r), {norm} norm")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return place_axes(fig, left=0.7)


@styled
def path_collapse_curve(df: pd.DataFrame, title: str, value: str = "geo_mean") -> Figure:
    """Rank-1 residual of head-path attention products against path length (band min..max,
    darker q10..q90)."""
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    rows = df.sort_values("path_length")
    x = rows["path_length"]
    lowest = 1e-17
    (line,) = ax.plot(x, _positive(rows[value], lowest), marker="o", label=value)
    ax.fill_between(x, _positive(rows["min"], lowest), _positive(rows["max"], lowest),
                    color=line.get_color(), alpha=0.15, linewidth=0, label="min..max")
    ax.fill_between(x, _positive(rows["q10"], lowest), _positive(rows["q90"], lowest),
                    color=line.get_color(), alpha=0.3, linewidth=0, label="q10..q90")
    ax.set_yscale("log")
    ax.set_xticks(list(x))
    ax.set_xlabel("path length (heads, one per layer)")
    ax.set_ylabel("rank-1 residual of the attention product")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return place_axes(fig, left=0.7)
