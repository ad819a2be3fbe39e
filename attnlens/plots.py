"""Figures drawn from tidy DataFrames. The library never calls plt.show().

Speed: every figure has a fixed size and fixed margins in inches (``place_axes``), so
neither ``tight_layout`` nor ``bbox_inches="tight"`` has to measure every text artist (that
measuring was two thirds of the report's figure time). One shared style (``STYLE``) applies
to every figure through ``styled``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import matplotlib

matplotlib.use("Agg")  # no screen needed; notebooks still display returned Figures

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

# One style for every figure of the library (rcParams applied while a figure is built).
STYLE = {
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "figure.titlesize": 10,
    "image.cmap": "viridis",
    "axes.grid": False,
    "grid.alpha": 0.3,
    "savefig.dpi": 110,
}

_F = TypeVar("_F", bound=Callable[..., Figure])


def styled(build: _F) -> _F:
    """Decorator: build the figure under ``STYLE``."""

    @functools.wraps(build)
    def wrapper(*args, **kwargs):
        with plt.rc_context(STYLE):
            return build(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def place_axes(
    fig: Figure,
    left: float = 0.6,
    right: float = 0.2,
    top: float = 0.4,
    bottom: float = 0.5,
    wspace: float = 0.25,
    hspace: float = 0.45,
) -> Figure:
    """Fixed margins in inches around the figure's subplot grid (instead of tight_layout)."""
    width, height = fig.get_size_inches()
    fig.subplots_adjust(
        left=min(left / width, 0.45),
        right=max(1 - right / width, 0.55),
        top=max(1 - top / height, 0.55),
        bottom=min(bottom / height, 0.45),
        wspace=wspace,
        hspace=hspace,
    )
    return fig


def layer_head_grid(df: pd.DataFrame, value: str = "value") -> np.ndarray:
    """Pivot a tidy ``layer, head, value`` table into a ``[layer, head]`` array (NaN gaps)."""
    grid = df.pivot_table(index="layer", columns="head", values=value, aggfunc="mean")
    n_layers = int(df["layer"].max()) + 1
    n_heads = int(df["head"].max()) + 1
    return grid.reindex(index=range(n_layers), columns=range(n_heads)).to_numpy()


@styled
def layer_head_heatmap(
    df: pd.DataFrame,
    title: str,
    value: str = "value",
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool = True,
    fmt: str = "{:.2f}",
) -> Figure:
    """Layer x head heatmap (layers and heads numbered from 0) of a tidy table."""
    grid = layer_head_grid(df, value)
    n_layers, n_heads = grid.shape
    width, height = max(4.0, 0.55 * n_heads + 1.7), max(2.5, 0.45 * n_layers + 1)
    fig = plt.figure(figsize=(width, height))
    # Fixed inches: 0.55 left (layer ticks), 1.0 right (colour bar), 0.4 top, 0.45 bottom.
    left, right, top, bottom = 0.55 / width, 1 - 1.0 / width, 1 - 0.4 / height, 0.45 / height
    ax = fig.add_axes((left, bottom, right - left, top - bottom))
    cax = fig.add_axes((right + 0.12 / width, bottom, 0.12 / width, top - bottom))
    image = ax.imshow(grid, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title)
    fig.colorbar(image, cax=cax)
    if annotate and n_heads * n_layers <= 400:
        finite = grid[np.isfinite(grid)]
        mid = (finite.min() + finite.max()) / 2 if finite.size else 0.0
        for layer in range(n_layers):
            for head in range(n_heads):
                v = grid[layer, head]
                if np.isfinite(v):
                    ax.text(
                        head,
                        layer,
                        fmt.format(v),
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="white" if v < mid else "black",
                    )
    return fig


# Rank collapse (attnlens.analysis.collapse, synthetic, paths) ---------------------------------


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
    for variant, rows in curves[curves["norm"] == norm].groupby("variant", sort=False):
        fit = fits[(fits["variant"] == variant) & (fits["norm"] == norm)]
        if fit.empty or not np.isfinite(fit["double_slope"].iloc[0]):
            continue
        fit = fit.iloc[0]
        rows = rows.sort_values("depth")
        used = rows[(rows["depth"] >= fit["first_depth"]) & (rows["depth"] <= fit["last_depth"])]
        used = used[used[value] < 1.0]
        y = np.log(-np.log(used[value].to_numpy(dtype=float)))
        (line,) = ax.plot(used["depth"], y, "o", ms=4)
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


@styled
def pruning_curves(curve: pd.DataFrame, metric_label: str, title: str) -> Figure:
    """Metric against the fraction of heads pruned, one line per order of a pruning table.

    ``curve`` has columns ``order, seed, step, fraction_pruned, metric`` (the pruning loop's
    table). Orders with several seeds (random) are drawn as their mean with a min-max band.
    """
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for index, (order, rows) in enumerate(curve.groupby("order", sort=False)):
        color = f"C{index}"
        if rows["seed"].nunique() > 1:
            by_step = rows.groupby("step").agg(
                x=("fraction_pruned", "mean"), lo=("metric", "min"), hi=("metric", "max"),
                mean=("metric", "mean"), n=("metric", "size"),
            )
            n_seeds = rows["seed"].nunique()
            ax.fill_between(by_step["x"], by_step["lo"], by_step["hi"], color=color, alpha=0.25,
                            label=f"{order} (min-max of {n_seeds} seeds)")
            ax.plot(by_step["x"], by_step["mean"], color=color, linestyle="--", linewidth=1)
        else:
            rows = rows.sort_values("step")
            ax.plot(rows["fraction_pruned"], rows["metric"], color=color, marker="o",
                    markersize=3, label=order)
    ax.set_xlabel("fraction of heads pruned")
    ax.set_ylabel(metric_label)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return place_axes(fig)


def _layer_axes(n_layers: int, width: float = 2.6, height: float = 2.3):
    """A grid of one small axes per layer (at most 4 per row); unused axes hidden."""
    cols = min(4, n_layers)
    rows = -(-n_layers // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(width * cols, height * rows), squeeze=False, sharex=True, sharey=True
    )
    flat = axes.reshape(-1)
    for ax in flat[n_layers:]:
        ax.set_visible(False)
    return fig, flat


@styled
def cumulative_curves_by_layer(
    curve: pd.DataFrame, title: str, x: str = "fraction", value: str = "value"
) -> Figure:
    """Per layer, the heads' mean cumulative curve with a min-max band across heads.

    ``curve`` has columns ``layer, head, <x>, <value>`` (layers numbered from 0). The dotted
    diagonal is the flat spectrum of a full-rank matrix with equal singular values.
    """
    n_layers = int(curve["layer"].max()) + 1
    fig, axes = _layer_axes(n_layers)
    for layer, rows in curve.groupby("layer"):
        ax = axes[int(layer)]
        stats = rows.groupby(x)[value].agg(["min", "mean", "max"])
        ax.fill_between(stats.index, stats["min"], stats["max"], alpha=0.3, label="heads (min-max)")
        ax.plot(stats.index, stats["mean"], linewidth=1.5, label="mean over heads")
        ax.plot([0, 1], [0, 1], linestyle=":", color="grey", linewidth=1, label="flat spectrum")
        ax.set_title(f"layer {int(layer)}", fontsize=9)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6, loc="lower right")
    for ax in axes[:n_layers]:
        ax.set_xlabel("k / n", fontsize=8)
    axes[0].set_ylabel("cumulative share of sum s", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return place_axes(fig, top=0.6, hspace=0.5)


@styled
def shared_subspace_curves(curve: pd.DataFrame, d_model: int, title: str) -> Figure:
    """Per layer, cumulative energy of the heads' concatenated matrices against one head's.

    ``curve`` has columns ``layer, matrix, scope, k, energy`` with ``scope`` in ``concat`` and
    ``per_head_mean``; solid lines are the concatenations, dashed lines a single head (mean).
    """
    n_layers = int(curve["layer"].max()) + 1
    fig, axes = _layer_axes(n_layers, width=3.0)
    matrices = list(dict.fromkeys(curve["matrix"]))
    for layer, rows in curve.groupby("layer"):
        ax = axes[int(layer)]
        for index, matrix in enumerate(matrices):
            for scope, style in (("concat", "-"), ("per_head_mean", "--")):
                part = rows[(rows["matrix"] == matrix) & (rows["scope"] == scope)]
                label = f"{matrix} {'all heads' if scope == 'concat' else 'one head'}"
                ax.plot(part["k"], part["energy"], linestyle=style, color=f"C{index}",
                        linewidth=1.2, label=label)
        ax.axvline(d_model, color="grey", linestyle=":", linewidth=1)
        ax.set_title(f"layer {int(layer)}", fontsize=9)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.set_xlabel("dimensions k", fontsize=8)
    axes[0].set_ylabel("cumulative energy (sum s^2)", fontsize=8)
    axes[0].legend(fontsize=6, loc="lower right")
    fig.suptitle(title, fontsize=10)
    return place_axes(fig, top=0.6, hspace=0.5)
