"""Figures drawn from tidy DataFrames. The library never calls plt.show().

One module per kind of figure, all built under one style with fixed margins (``style``):

- ``style``: ``STYLE``, the ``styled`` decorator, ``place_axes``, layer x head grids;
- ``heatmaps``: the layer x head heatmap of any tidy table;
- ``collapse``: rank-collapse curves, their doubly exponential fit, head-path products;
- ``curves``: per-layer spectra, rollout/flow measures, sparse coverage, linear keys;
- ``tokens``: one sentence's token x token matrix and one of its rows;
- ``roles``: the head role map, its colours, per-relation syntactic heatmaps;
- ``heads``: behaviour panels, the heads' embedding and distance matrix;
- ``pruning``: pruning curves, L0 gates beside them, L0 training curves.

Matplotlib is imported only when a matplotlib figure is built (``style.plt``). The figures of
the report also have SVG twins (``attnlens.plots.svg``), set as each function's ``svg``
attribute: ``save_figure`` writes ``.svg`` through them without matplotlib.

Every figure function is a module-level function (report recipes pickle it by name into
worker processes); every name is importable from ``attnlens.plots`` itself.
"""

from attnlens.plots.collapse import collapse_curves, double_log_fit, path_collapse_curve
from attnlens.plots.curves import (
    cumulative_curves_by_layer,
    keys_by_length,
    layer_measure_lines,
    shared_subspace_curves,
    window_coverage_curves,
)
from attnlens.plots.heads import behaviour_figure, head_distance_figure, head_embedding_figure
from attnlens.plots.heatmaps import layer_head_heatmap
from attnlens.plots.pruning import l0_against_curves, l0_training_curves, pruning_curves
from attnlens.plots.roles import ROLE_COLORS, relation_heatmaps, role_map_figure
from attnlens.plots.style import STYLE, layer_head_grid, place_axes, styled
from attnlens.plots.svg import attach_twins
from attnlens.plots.tokens import token_matrix_heatmap, token_row_bars

attach_twins(globals())  # each figure function with an SVG twin gets it as ``.svg``

__all__ = [
    "ROLE_COLORS",
    "STYLE",
    "behaviour_figure",
    "collapse_curves",
    "cumulative_curves_by_layer",
    "double_log_fit",
    "head_distance_figure",
    "head_embedding_figure",
    "keys_by_length",
    "l0_against_curves",
    "l0_training_curves",
    "layer_head_grid",
    "layer_head_heatmap",
    "layer_measure_lines",
    "path_collapse_curve",
    "place_axes",
    "pruning_curves",
    "relation_heatmaps",
    "role_map_figure",
    "shared_subspace_curves",
    "styled",
    "token_matrix_heatmap",
    "token_row_bars",
    "window_coverage_curves",
]
