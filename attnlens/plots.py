"""Figures drawn from tidy DataFrames. The library never calls plt.show().

Speed: every figure has a fixed size and fixed margins in inches (``place_axes``), so
neither ``tight_layout`` nor ``bbox_inches="tight"`` has to measure every text artist (that
measuring was two thirds of the report's figure time). One shared style (``STYLE``) applies
to every figure through ``styled``.
"""

from __future__ import annotations

import functools
import math
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


# Rollout and flow, sparse coverage, linear attention (issue 16) -----------------------------


@styled
def token_matrix_heatmap(matrix: pd.DataFrame, title: str, value: str = "value") -> Figure:
    """Token x token heatmap of one sentence's matrix (rows: query, columns: key).

    ``matrix`` has columns ``query, key, query_token, key_token, <value>`` for one sentence and
    one layer (positions from 0). Labels read ``position token``.
    """
    grid = matrix.pivot_table(index="query", columns="key", values=value, aggfunc="first")
    n = len(grid)
    labels = (
        matrix.drop_duplicates("key").sort_values("key")
        .apply(lambda r: f"{int(r['key'])} {r['key_token']}", axis=1).tolist()
    )
    size = min(16.0, max(4.0, 0.28 * n + 2))
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(grid.to_numpy(), cmap="viridis", vmin=0, aspect="equal")
    ticks = range(n) if n <= 80 else range(0, n, max(1, n // 40))
    ax.set_xticks(list(ticks))
    ax.set_yticks(list(ticks))
    ax.set_xticklabels([labels[i] for i in ticks], rotation=90, fontsize=6)
    ax.set_yticklabels([labels[i] for i in ticks], fontsize=6)
    ax.set_xlabel("input token (key)")
    ax.set_ylabel("position (query)")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    # Fixed inches: rotated "position token" labels need ~1.3 in left and below.
    return place_axes(fig, left=1.3, bottom=1.4, right=0.3)


@styled
def token_row_bars(row: pd.DataFrame, title: str, value: str = "value") -> Figure:
    """Bar chart of one query row of a token matrix: ``key, key_token, <value>`` columns."""
    row = row.sort_values("key")
    n = len(row)
    fig, ax = plt.subplots(figsize=(min(16.0, max(4.0, 0.3 * n + 1.5)), 3.6))
    ax.bar(range(n), row[value].to_numpy(), color="C0")
    ax.set_xticks(range(n))
    ax.set_xticklabels([f"{int(k)} {t}" for k, t in zip(row["key"], row["key_token"],
                                                        strict=True)],
                       rotation=90, fontsize=6)
    ax.set_ylabel("share")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    return place_axes(fig, bottom=1.2)  # rotated "position token" labels below


@styled
def layer_measure_lines(table: pd.DataFrame, measures: list[str], title: str,
                        ylabel: str = "mean over query rows") -> Figure:
    """One line per measure over layers, from a tidy ``layer, measure, value`` table."""
    fig, ax = plt.subplots(figsize=(5.0, 3.2))
    for index, measure in enumerate(measures):
        rows = table[table["measure"] == measure].sort_values("layer")
        ax.plot(rows["layer"], rows["value"], marker="o", color=f"C{index}", label=measure)
    n_layers = int(table["layer"].max()) + 1
    ax.set_xticks(range(n_layers))
    ax.set_xlabel("layer (after that block)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=9)
    return place_axes(fig)


@styled
def window_coverage_curves(curve: pd.DataFrame, coverage: float, title: str,
                           max_window: int = 32) -> Figure:
    """Per layer, the heads' window mass against the window ``w`` (one line per head).

    ``curve`` has columns ``layer, head, window, window_mass`` (``sparse_window_curve``).
    """
    curve = curve[curve["window"] <= max_window]
    n_layers = int(curve["layer"].max()) + 1
    fig, axes = _layer_axes(n_layers)
    for layer, rows in curve.groupby("layer"):
        ax = axes[int(layer)]
        for head, part in rows.groupby("head"):
            ax.plot(part["window"], part["window_mass"], linewidth=0.8, alpha=0.7,
                    color=f"C{int(head) % 10}")
        ax.axhline(coverage, color="grey", linestyle=":", linewidth=1)
        ax.set_title(f"layer {int(layer)}", fontsize=9)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.set_xlabel("window ±w", fontsize=8)
    axes[0].set_ylabel("mass inside the window", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return place_axes(fig, top=0.6, hspace=0.5)


@styled
def keys_by_length(table: pd.DataFrame, d_head: int, title: str) -> Figure:
    """Mean effective number of orthogonal keys per layer against the sentence-length bucket.

    ``table`` has columns ``layer, head, lengths, effective_keys`` (``linear_keys_by_length``);
    the dotted line is ``d_head``, the most orthogonal keys a head can hold.
    """
    buckets = list(dict.fromkeys(table["lengths"]))
    fig, ax = plt.subplots(figsize=(5.0, 3.2))
    for layer, rows in table.groupby("layer"):
        means = rows.groupby("lengths")["effective_keys"].mean().reindex(buckets)
        ax.plot(range(len(buckets)), means.to_numpy(), marker="o", label=f"layer {int(layer)}")
    ax.axhline(d_head, color="grey", linestyle=":", linewidth=1, label=f"d_head = {d_head}")
    ax.set_xticks(range(len(buckets)))
    ax.set_xticklabels(buckets)
    ax.set_xlabel("sentence length (tokens)")
    ax.set_ylabel("effective keys (mean over heads)")
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    ax.set_title(title, fontsize=9)
    return place_axes(fig)


# Head roles, behaviour classes and head clustering (attnlens.analysis.roles, behaviour,
# clustering) -------------------------------------------------------------------------------

ROLE_COLORS = {
    "none": "#f0f0f0",
    "positional": "#6baed6",
    "syntactic": "#fd8d3c",
    "rare-word": "#74c476",
    "several": "#9e9ac8",
}
_ROLE_NAMES = ("positional", "syntactic", "rare-word")


def _role_category(roles: str) -> str:
    found = [r for r in _ROLE_NAMES if r in roles.split("; ")]
    return "none" if not found else found[0] if len(found) == 1 else "several"


def _role_label(row) -> str:
    parts = []
    if "positional" in row.roles:
        parts.append(f"P{row.best_offset:+d}")
    if "syntactic" in row.roles:
        parts.append(f"S{row.n_relations}")
    if "rare-word" in row.roles:
        parts.append("R")
    return "\n".join(parts)


@styled
def role_map_figure(head_roles: pd.DataFrame, title: str = "Head roles") -> Figure:
    """Layer x head map of a ``head_roles`` table: colour = role (or "several"); text P±k
    offset, Sn = syntactic for n relations, R = rare-word. Heads absent from the table
    (removed by structural pruning) stay white."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    names = list(ROLE_COLORS)
    n_layers = int(head_roles["layer"].max()) + 1
    n_heads = int(head_roles["head"].max()) + 1
    grid = np.full((n_layers, n_heads), np.nan)
    labels = [["" for _ in range(n_heads)] for _ in range(n_layers)]
    for row in head_roles.itertuples():
        grid[row.layer, row.head] = names.index(_role_category(row.roles))
        labels[row.layer][row.head] = _role_label(row)
    cmap = ListedColormap(list(ROLE_COLORS.values())).with_extremes(bad="white")
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * n_heads + 2.5), max(2.5, 0.5 * n_layers + 1)))
    ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=len(names) - 1,
              aspect="auto")
    for layer in range(n_layers):
        for head in range(n_heads):
            ax.text(head, layer, labels[layer][head], ha="center", va="center", fontsize=6)
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title)
    ax.legend(handles=[Patch(color=c, label=n) for n, c in ROLE_COLORS.items()],
              bbox_to_anchor=(1.02, 1), loc="upper left", fontsize=7, frameon=False)
    return place_axes(fig, left=0.55, right=1.5)


@styled
def relation_heatmaps(
    syntactic_accuracy: pd.DataFrame, direction: str, max_relations: int = 24
) -> Figure:
    """Small multiples: one layer x head accuracy heatmap per relation for ``direction``;
    a dot marks the heads that are syntactic for that relation (tested role)."""

    rows = syntactic_accuracy[syntactic_accuracy["direction"] == direction]
    relations = list(dict.fromkeys(rows["relation"]))[:max_relations]
    cols = min(4, max(1, len(relations)))
    n_rows = max(1, math.ceil(len(relations) / cols))
    fig, axes = plt.subplots(n_rows, cols, figsize=(3.0 * cols + 1, 2.4 * n_rows), squeeze=False)
    for ax in axes.flat:
        ax.set_axis_off()
    image = None
    for ax, relation in zip(axes.flat, relations, strict=False):
        sub = rows[rows["relation"] == relation]
        grid = layer_head_grid(sub, value="accuracy")
        ax.set_axis_on()
        image = ax.imshow(grid, cmap="viridis", vmin=0, vmax=1, aspect="auto")
        if "syntactic" in sub:
            marked = sub[sub["syntactic"].astype(bool)]
            ax.scatter(marked["head"], marked["layer"], s=6, c="red", marker="o")
        base = float(sub["baseline"].iloc[0])
        ax.set_title(f"{relation} (n={int(sub['examples'].iloc[0])}, base {base:.2f})", fontsize=8)
        ax.set_xticks(range(grid.shape[1]))
        ax.set_yticks(range(grid.shape[0]))
        ax.tick_params(labelsize=6)
        ax.set_xlabel("head", fontsize=7)
        ax.set_ylabel("layer", fontsize=7)
    fig.suptitle(f"Syntactic accuracy per head (layers and heads from 0), {direction}; "
                 "red dot: syntactic after correction")
    place_axes(fig, left=0.5, right=0.08 * fig.get_size_inches()[0] + 0.2, top=0.6,
               wspace=0.35, hspace=0.7)
    if image is not None:  # one shared colour scale, 0..1
        fig.colorbar(image, cax=fig.add_axes((0.93, 0.15, 0.015, 0.7)), label="accuracy")
    return fig


@styled
def behaviour_figure(behaviour: pd.DataFrame, title: str = "Attention behaviour") -> Figure:
    """Three layer x head panels of a ``head_behaviour`` table: vertical, diagonal, broad."""
    measures = ("vertical", "diagonal", "broad")
    first = layer_head_grid(behaviour, value=measures[0])
    n_layers, n_heads = first.shape
    fig, axes = plt.subplots(1, 3, figsize=(3 * max(3.0, 0.4 * n_heads + 1.2),
                                            max(2.4, 0.4 * n_layers + 1.2)), squeeze=False)
    image = None
    for ax, measure in zip(axes[0], measures, strict=True):
        grid = layer_head_grid(behaviour, value=measure)
        image = ax.imshow(grid, cmap="magma", vmin=0, vmax=1, aspect="auto")
        ax.set_title(measure, fontsize=9)
        ax.set_xticks(range(n_heads))
        ax.set_yticks(range(n_layers))
        ax.tick_params(labelsize=6)
        ax.set_xlabel("head", fontsize=7)
        ax.set_ylabel("layer", fontsize=7)
        if n_heads * n_layers <= 400:
            for layer in range(n_layers):
                for head in range(n_heads):
                    v = grid[layer, head]
                    if np.isfinite(v):
                        ax.text(head, layer, f"{100 * v:.0f}", ha="center", va="center",
                                fontsize=5, color="white" if v < 0.5 else "black")
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 0.93, 1))
    if image is not None:
        fig.colorbar(image, cax=fig.add_axes((0.94, 0.15, 0.012, 0.7)), label="share")
    return fig


@styled
def head_embedding_figure(
    embedding: pd.DataFrame, title: str = "Heads embedded by attention distance (MDS)"
) -> Figure:
    """Two scatter panels of a ``head_embedding`` table (x, y per head): coloured by layer
    and by role (column ``roles``); each point labelled layer-head."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), squeeze=False)
    by_layer, by_role = axes[0]
    points = by_layer.scatter(embedding["x"], embedding["y"], c=embedding["layer"],
                              cmap="viridis", s=28)
    fig.colorbar(points, ax=by_layer, label="layer")
    categories = [_role_category(r) for r in embedding.get("roles", ["none"] * len(embedding))]
    colors = [ROLE_COLORS[c] for c in categories]
    by_role.scatter(embedding["x"], embedding["y"], c=colors, s=28, edgecolors="#555555",
                    linewidths=0.4)
    from matplotlib.patches import Patch

    by_role.legend(handles=[Patch(color=ROLE_COLORS[c], label=c) for c in ROLE_COLORS],
                   fontsize=7, frameon=False, loc="best")
    for ax, name in ((by_layer, "coloured by layer"), (by_role, "coloured by tested role")):
        for row in embedding.itertuples():
            ax.annotate(f"{row.layer}-{row.head}", (row.x, row.y), fontsize=5,
                        xytext=(2, 2), textcoords="offset points")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("MDS 1")
        ax.set_ylabel("MDS 2")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


@styled
def head_distance_figure(distances: pd.DataFrame, title: str = "Mean JS divergence") -> Figure:
    """Heatmap of a ``head_distances`` table (one row per head pair), heads ordered by layer."""
    keys = sorted(set(zip(distances["layer_a"], distances["head_a"], strict=True))
                  | set(zip(distances["layer_b"], distances["head_b"], strict=True)))
    index = {k: i for i, k in enumerate(keys)}
    grid = np.zeros((len(keys), len(keys)))  # a head's divergence from itself is 0
    for row in distances.itertuples():
        a, b = index[(row.layer_a, row.head_a)], index[(row.layer_b, row.head_b)]
        grid[a, b] = grid[b, a] = row.js_divergence
    size = max(4.0, min(12.0, 0.12 * len(keys) + 2))
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(grid, cmap="viridis", aspect="equal")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="nats")
    step = max(1, len(keys) // 24)
    ticks = list(range(0, len(keys), step))
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.set_xticklabels([f"{keys[i][0]}-{keys[i][1]}" for i in ticks], rotation=90, fontsize=6)
    ax.set_yticklabels([f"{keys[i][0]}-{keys[i][1]}" for i in ticks], fontsize=6)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def l0_against_curves(curve: pd.DataFrame, summary: pd.DataFrame, metric_label: str,
                      title: str) -> Figure:
    """Held-out metric against the fraction of heads pruned: orders as lines (seeded orders
    as a min-max band), each lambda's binary L0 gates as a labelled star."""
    fig, ax = plt.subplots(figsize=(6.8, 4.4))
    overall = curve[~curve["order"].str.contains(":")] if len(curve) else curve
    for index, (order, rows) in enumerate(overall.groupby("order", sort=False)):
        color = f"C{index}"
        if rows["seed"].nunique() > 1:
            by_step = rows.groupby("step").agg(x=("fraction_pruned", "mean"),
                                               lo=("metric", "min"), hi=("metric", "max"),
                                               mean=("metric", "mean"))
            ax.fill_between(by_step["x"], by_step["lo"], by_step["hi"], color=color, alpha=0.2,
                            label=f"{order} (min-max of {rows['seed'].nunique()} seeds)")
            ax.plot(by_step["x"], by_step["mean"], color=color, linestyle="--", linewidth=1)
        else:
            rows = rows.sort_values("step")
            ax.plot(rows["fraction_pruned"], rows["metric"], color=color, marker="o",
                    markersize=3, label=order)
    if len(summary):
        ax.scatter(summary["fraction_pruned"], summary["metric"], marker="*", s=140,
                   color="black", zorder=5, label="L0 gates (one per lambda)")
        points = zip(summary["lambda"], summary["fraction_pruned"], summary["metric"],
                     strict=True)
        for lam, x, y in points:
            ax.annotate(f"λ={lam:g}", (x, y), fontsize=7, xytext=(4, 4),
                        textcoords="offset points")
    ax.set_xlabel("fraction of heads pruned")
    ax.set_ylabel(metric_label)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def l0_training_curves(curve: pd.DataFrame, title: str) -> Figure:
    """Expected open gates and data loss against the training step, one line per lambda."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 5.2), sharex=True)
    for index, (lam, rows) in enumerate(curve.groupby("lambda", sort=True)):
        top.plot(rows["step"], rows["expected_open"], color=f"C{index}", label=f"λ={lam:g}")
        bottom.plot(rows["step"], rows["data_loss"], color=f"C{index}", linewidth=0.8)
    top.set_ylabel("expected open gates")
    bottom.set_ylabel("data loss (one draw)")
    bottom.set_xlabel("training step")
    top.set_title(title)
    top.legend(fontsize=8)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
