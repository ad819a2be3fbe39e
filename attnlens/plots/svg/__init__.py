"""attnlens' own SVG figure writer: the report's figures written as SVG text, without
matplotlib (milliseconds each; vector, so crisp at any zoom).

Each function here is the twin of the matplotlib function of the same name in ``attnlens.plots``
(same arguments, same layout in inches, same colours) and returns a ``Canvas`` whose
``render()`` is the SVG document. ``attach_twins`` sets each matplotlib function's ``svg``
attribute to its twin; ``attnlens.runs.io.save_figure`` writes a recipe's ``.svg`` through
the twin when it has one (docs/figures.md). Modules, one job each:

- ``canvas``: the SVG document (elements, escaping, size);
- ``colormaps``: viridis / magma tables, the C0..C9 cycle, the colour of a value;
- ``ticks``: axis ranges, round and log ticks, tick labels;
- ``grid``: a matrix as coloured cells, tick labels at cell centres, a colour bar;
- ``axes``: a chart panel (lines, bands, bars, reference lines, legend);
- ``layout``: panel boxes from margins in inches, one panel per layer;
- ``heatmaps``, ``tokens``, ``curves``, ``collapse``: the figures.
"""

from __future__ import annotations

from attnlens.plots.svg import collapse, curves, heatmaps, tokens

TWINS = {
    "layer_head_heatmap": heatmaps.layer_head_heatmap,
    "role_map_figure": heatmaps.role_map_figure,
    "relation_heatmaps": heatmaps.relation_heatmaps,
    "behaviour_figure": heatmaps.behaviour_figure,
    "token_matrix_heatmap": tokens.token_matrix_heatmap,
    "token_row_bars": tokens.token_row_bars,
    "cumulative_curves_by_layer": curves.cumulative_curves_by_layer,
    "shared_subspace_curves": curves.shared_subspace_curves,
    "window_coverage_curves": curves.window_coverage_curves,
    "layer_measure_lines": curves.layer_measure_lines,
    "keys_by_length": curves.keys_by_length,
    "collapse_curves": collapse.collapse_curves,
    "path_collapse_curve": collapse.path_collapse_curve,
    "double_log_fit": collapse.double_log_fit,
}


def attach_twins(namespace: dict) -> None:
    """Set ``svg`` on each matplotlib figure function of ``namespace`` that has a twin."""
    for name, twin in TWINS.items():
        namespace[name].svg = twin
