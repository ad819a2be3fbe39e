"""The one style and fixed layout of every figure.

Speed: every figure has a fixed size and fixed margins in inches (``place_axes``), so
neither ``tight_layout`` nor ``bbox_inches="tight"`` has to measure every text artist (that
measuring was two thirds of the report's figure time). One shared style (``STYLE``) applies
to every figure through ``styled``.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from matplotlib.figure import Figure


_BACKEND_SET: list[bool] = []


def pyplot() -> Any:
    """``matplotlib.pyplot``, imported on first use with the Agg backend set before it loads
    (no screen needed; notebooks still display Figures)."""
    if not _BACKEND_SET:
        importlib.import_module("matplotlib").use("Agg")
        _BACKEND_SET.append(True)
    return importlib.import_module("matplotlib.pyplot")


class _LazyPyplot:
    """``plt`` of the figure modules: ``pyplot()`` on first attribute access, so SVG figures
    (``plots.svg``) never load matplotlib."""

    def __getattr__(self, name: str) -> Any:
        return getattr(pyplot(), name)


plt = _LazyPyplot()

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

_F = TypeVar("_F", bound=Callable[..., "Figure"])


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
    """Pivot a tidy ``layer, head, value`` table into a ``[layer, head]`` array: the mean of
    each cell's non-NaN values, NaN where it has none (``pivot_table``'s result, without its
    cost of ~10 ms a figure)."""
    layer = df["layer"].to_numpy(dtype=np.int64)
    head = df["head"].to_numpy(dtype=np.int64)
    values = df[value].to_numpy(dtype=float)
    shape = (int(layer.max()) + 1, int(head.max()) + 1)
    seen = ~np.isnan(values)
    sums, counts = np.zeros(shape), np.zeros(shape)
    np.add.at(sums, (layer[seen], head[seen]), values[seen])
    np.add.at(counts, (layer[seen], head[seen]), 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, np.nan)


def layer_axes(n_layers: int, width: float = 2.6, height: float = 2.3):
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
