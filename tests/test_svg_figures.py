"""attnlens' own SVG figures (attnlens.plots.svg) on hand-built tables: valid SVG, cell colours
that are matplotlib's for the same values, labels present, NaN cells missing, colour-bar range,
every figure of the report with a twin, and no matplotlib import on the way."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from functools import partial

import numpy as np
import pandas as pd
import pytest

from attnlens import plots
from attnlens.plots import svg
from attnlens.plots.style import layer_head_grid
from attnlens.plots.svg.canvas import escape, simplify
from attnlens.plots.svg.ticks import linear_ticks, log_ticks, tick_labels
from attnlens.runs.io import figure_naming, save_figure

NS = {"s": "http://www.w3.org/2000/svg"}


def _parse(canvas) -> ET.Element:
    root = ET.fromstring(canvas.render().encode("utf-8"))  # raises on invalid XML
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return root


def _texts(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")]


def _cells(root: ET.Element) -> list[ET.Element]:
    (group,) = root.findall(".//s:g[@class='cells']", NS)
    return group.findall("s:rect", NS)


def _table(n_layers: int = 3, n_heads: int = 4) -> pd.DataFrame:
    rows = [(layer, head, 0.1 * layer + 0.02 * head)
            for layer in range(n_layers) for head in range(n_heads)]
    return pd.DataFrame(rows, columns=["layer", "head", "value"])


def _matplotlib_colour(value: float, vmin: float, vmax: float, cmap: str = "viridis") -> str:
    import matplotlib
    from matplotlib.colors import Normalize, to_hex

    return to_hex(matplotlib.colormaps[cmap](Normalize(vmin, vmax)(value)))


def test_heatmap_cells_have_matplotlibs_colours_for_their_values() -> None:
    table = _table()
    root = _parse(svg.heatmaps.layer_head_heatmap(table, "Entropy"))
    cells = _cells(root)
    assert len(cells) == 12
    lo, hi = table["value"].min(), table["value"].max()  # imshow's default range
    for cell, value in zip(cells, table["value"], strict=True):  # row by row, as the table
        assert float(cell.get("data-value")) == pytest.approx(value, rel=1e-5)  # 6 digits
        assert cell.get("fill") == _matplotlib_colour(value, lo, hi)
    reversed_root = _parse(svg.heatmaps.layer_head_heatmap(table, "w", cmap="viridis_r",
                                                           vmin=0, vmax=1))
    for cell, value in zip(_cells(reversed_root), table["value"], strict=True):
        assert cell.get("fill") == _matplotlib_colour(value, 0, 1, "viridis_r")


def test_heatmap_labels_values_and_colour_bar_range() -> None:
    root = _parse(svg.heatmaps.layer_head_heatmap(_table(), "Mean entropy <nats>", vmin=0,
                                                  vmax=0.5))
    texts = _texts(root)
    assert "Mean entropy <nats>" in texts  # escaped in the file, the title read back
    assert {"layer", "head", "0", "1", "2", "3"} <= set(texts)
    assert "0.26" in texts  # cell L2H3 written in its cell: 0.2 + 0.06 with "{:.2f}"
    (bar,) = root.findall(".//s:g[@class='colourbar']", NS)
    assert (float(bar.get("data-vmin")), float(bar.get("data-vmax"))) == (0.0, 0.5)
    ticks = [float("".join(t.itertext())) for t in bar.findall("s:text[@class='tick']", NS)]
    assert ticks and min(ticks) >= 0.0 and max(ticks) <= 0.5 and 0.0 in ticks


def test_nan_cells_are_drawn_missing_and_unlabelled() -> None:
    table = _table()
    table.loc[(table["layer"] == 1) & (table["head"] == 2), "value"] = np.nan
    table = table[~((table["layer"] == 2) & (table["head"] == 0))]  # a head absent entirely
    root = _parse(svg.heatmaps.layer_head_heatmap(table, "gaps"))
    cells = _cells(root)
    missing = [i for i, c in enumerate(cells) if c.get("class") == "missing"]
    assert missing == [1 * 4 + 2, 2 * 4 + 0]
    assert all(cells[i].get("fill") == "#ffffff" for i in missing)
    values = root.findall(".//s:g[@class='values']/s:text", NS)
    assert len(values) == 10  # the 12 cells less the two missing ones


def test_layer_head_grid_is_pivot_tables_mean() -> None:
    rng = np.random.default_rng(0)
    table = pd.DataFrame([(layer, head, rng.normal()) for layer in range(4) for head in range(5)
                          for _ in range(3)], columns=["layer", "head", "value"])
    table.loc[rng.random(len(table)) < 0.3, "value"] = np.nan
    table = table[~((table["layer"] == 3) & (table["head"] == 4))]
    expected = (table.pivot_table(index="layer", columns="head", values="value", aggfunc="mean")
                .reindex(index=range(4), columns=range(5)).to_numpy())
    # a mean of at most 3 float64 values, summed in another order: within a few ulps
    np.testing.assert_allclose(layer_head_grid(table), expected, rtol=1e-12, equal_nan=True)


def _curve_tables() -> dict[str, pd.DataFrame]:
    fractions = np.linspace(0.1, 1.0, 10)
    cumulative = pd.DataFrame([(layer, head, f, f ** (0.3 + 0.1 * head))
                               for layer in range(2) for head in range(3) for f in fractions],
                              columns=["layer", "head", "fraction", "value"])
    shared = pd.DataFrame([(layer, m, scope, k, 1 - math.exp(-k / 20))
                           for layer in range(2) for m in ("W_Q", "W_K")
                           for scope in ("concat", "per_head_mean") for k in range(1, 64)],
                          columns=["layer", "matrix", "scope", "k", "energy"])
    window = pd.DataFrame([(layer, head, w, min(1.0, 0.2 + 0.1 * w))
                           for layer in range(2) for head in range(3) for w in range(0, 12)],
                          columns=["layer", "head", "window", "window_mass"])
    lines = pd.DataFrame([(layer, m, 0.1 * layer + i) for layer in range(4)
                          for i, m in enumerate(("moved", "mixing", "unplotted"))],
                         columns=["layer", "measure", "value"])
    keys = pd.DataFrame([(layer, head, bucket, 5.0 + layer) for layer in range(2)
                         for head in range(2) for bucket in ("1-10", "11-20")],
                        columns=["layer", "head", "lengths", "effective_keys"])
    collapse = pd.DataFrame([(v, d, n, 10.0 ** (-2 * d), 10.0 ** (-2 * d - 1), 10.0 ** (-2 * d + 1),
                              0.0 if d == 3 else 10.0 ** (-2 * d))
                             for v in ("san", "full") for d in range(4)
                             for n in ("composite", "frobenius")],
                            columns=["variant", "depth", "norm", "geo_mean", "min", "max", "q10"])
    collapse["q90"] = collapse["max"]
    paths = pd.DataFrame({"path_length": [1, 2, 3], "geo_mean": [0.5, 0.1, 0.0],
                          "min": [0.4, 0.05, 0.0], "max": [0.6, 0.2, 0.01],
                          "q10": [0.45, 0.07, 0.0], "q90": [0.55, 0.15, 0.005]})
    return {"cumulative": cumulative, "shared": shared, "window": window, "lines": lines,
            "keys": keys, "collapse": collapse, "paths": paths}


def test_line_charts_are_valid_svg_with_their_labels() -> None:
    t = _curve_tables()
    figures = {
        "cumulative": (svg.curves.cumulative_curves_by_layer(t["cumulative"], "Spectra"),
                       {"Spectra", "layer 0", "layer 1", "k / n", "mean over heads"}),
        "shared": (svg.curves.shared_subspace_curves(t["shared"], 32, "Shared"),
                   {"Shared", "W_Q all heads", "W_K one head", "dimensions k"}),
        "window": (svg.curves.window_coverage_curves(t["window"], 0.9, "Windows"),
                   {"Windows", "window ±w", "mass inside the window"}),
        "lines": (svg.curves.layer_measure_lines(t["lines"], ["moved", "mixing"], "Rollout"),
                  {"Rollout", "moved", "mixing", "layer (after that block)", "0", "3"}),
        "keys": (svg.curves.keys_by_length(t["keys"], 16, "Keys"),
                 {"Keys", "1-10", "11-20", "layer 0", "d_head = 16"}),
        "collapse": (svg.collapse.collapse_curves(t["collapse"], "Collapse", floor=2e-16),
                     {"Collapse", "san", "full", "float64 epsilon",
                      "relative residual, frobenius norm"}),
        "paths": (svg.collapse.path_collapse_curve(t["paths"], "Paths"),
                  {"Paths", "geo_mean", "min..max", "q10..q90"}),
    }
    for name, (canvas, labels) in figures.items():
        texts = set(_texts(_parse(canvas)))
        assert labels <= texts, (name, labels - texts)
    # measures that are not plotted do not set the y range (values 2.x are "unplotted")
    lines = _parse(figures["lines"][0])
    assert not {"2.0", "2.5"} & set(_texts(lines))
    # log axes label powers of ten; a zero is drawn at the floor, never as -inf or NaN
    text = svg.collapse.collapse_curves(t["collapse"], "Collapse").render()
    assert not re.search(r'="[^"]*\b(nan|inf)\b', text, flags=re.IGNORECASE)


def test_token_figures_label_positions_and_tokens() -> None:
    tokens = ["[CLS]", "a", "<b>", "[SEP]"]
    matrix = pd.DataFrame([(q, k, tokens[q], tokens[k], 1.0 / (q + 1) if k <= q else 0.0)
                           for q in range(4) for k in range(4)],
                          columns=["query", "key", "query_token", "key_token", "value"])
    root = _parse(svg.tokens.token_matrix_heatmap(matrix, "Rollout"))
    texts = _texts(root)
    assert {"0 [CLS]", "2 <b>", "input token (key)", "position (query)"} <= set(texts)
    cells = _cells(root)
    assert len(cells) == 16 and cells[0].get("fill") == _matplotlib_colour(1.0, 0.0, 1.0)
    row = matrix[matrix["query"] == 3][["key", "key_token", "value"]]
    bars = _parse(svg.tokens.token_row_bars(row, "Readout"))
    heights = [float(r.get("data-value")) for r in bars.findall(".//s:g[@class='bars']/s:rect",
                                                                NS)]
    assert heights == pytest.approx([0.25] * 4) and "3 [SEP]" in _texts(bars)


def test_role_map_relation_and_behaviour_panels() -> None:
    roles = pd.DataFrame({"layer": [0, 0, 1], "head": [0, 1, 1],
                          "roles": ["positional", "", "syntactic; sink"],
                          "best_offset": [-1, 0, 0], "n_relations": [0, 0, 2]})
    root = _parse(svg.heatmaps.role_map_figure(roles, "Roles"))
    assert {"P-1", "positional", "several", "Roles"} <= set(_texts(root))
    cells = _cells(root)
    assert [c.get("fill") for c in cells] == [plots.ROLE_COLORS["positional"],
                                              plots.ROLE_COLORS["none"], "#ffffff",
                                              plots.ROLE_COLORS["several"]]
    accuracy = pd.DataFrame([("dep->head", rel, layer, head, 0.25 * head, head == 3, 0.3, 40)
                             for rel in ("nsubj", "obj") for layer in range(2)
                             for head in range(4)],
                            columns=["direction", "relation", "layer", "head", "accuracy",
                                     "syntactic", "baseline", "examples"])
    relations = _parse(svg.heatmaps.relation_heatmaps(accuracy, "dep->head"))
    assert {"nsubj (n=40, base 0.30)", "obj (n=40, base 0.30)"} <= set(_texts(relations))
    assert len(relations.findall(".//s:circle", NS)) == 4  # head 3 of both layers, twice
    behaviour = pd.DataFrame([(layer, head, 0.5, 0.25, 0.125) for layer in range(2)
                              for head in range(3)],
                             columns=["layer", "head", "vertical", "diagonal", "broad"])
    panels = _parse(svg.heatmaps.behaviour_figure(behaviour, "Behaviour"))
    assert {"vertical", "diagonal", "broad", "50", "25", "12", "Behaviour"} <= set(
        _texts(panels))


def test_every_report_figure_function_has_a_twin_with_its_signature() -> None:
    import inspect

    for name, twin in svg.TWINS.items():
        original = getattr(plots, name)
        assert original.svg is twin
        assert list(inspect.signature(twin).parameters) == list(
            inspect.signature(original).parameters), name


def test_save_figure_writes_the_twin_and_the_encoder_decoder_label(tmp_path) -> None:
    recipe = partial(plots.layer_head_heatmap, _table(), "t")
    with figure_naming("cross_", "cross-attention"):
        (path,) = save_figure(recipe, tmp_path, "heads_entropy")
    assert path.name == "cross_heads_entropy.svg"
    root = ET.parse(path).getroot()
    assert "cross-attention" in _texts(root)
    assert root.get("data-kind") == "layer_head_heatmap"  # the twin drew it, not matplotlib


def test_svg_figures_never_import_matplotlib(tmp_path) -> None:
    code = (
        "import sys; from functools import partial; import pandas as pd\n"
        "from attnlens.plots import layer_head_heatmap\n"
        "from attnlens.runs.io import save_figure\n"
        "t = pd.DataFrame({'layer': [0, 1], 'head': [0, 0], 'value': [0.1, 0.2]})\n"
        f"save_figure(partial(layer_head_heatmap, t, 'x'), {str(tmp_path)!r}, 'a')\n"
        "assert 'matplotlib' not in sys.modules, 'matplotlib was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "a.svg").is_file()


def test_ticks_escaping_and_simplified_lines() -> None:
    assert linear_ticks(0, 1.02, most=6) == pytest.approx([0, 0.25, 0.5, 0.75, 1.0])
    assert tick_labels([0, 0.25, 0.5]) == ["0.00", "0.25", "0.50"]
    assert log_ticks(1e-16, 2.0) == pytest.approx([10.0 ** e for e in range(-16, 1, 2)])
    assert escape('a<b>&"\x01') == "a&lt;b&gt;&amp;&quot;\ufffd"
    straight = [(float(i), 2.0 * i) for i in range(100)]
    assert simplify(straight) == [straight[0], straight[-1]]  # collinear points dropped
    bent = [(0.0, 0.0), (1.0, 0.0), (1.0, 1.0)]
    assert simplify(bent) == bent


def test_long_headings_wrap_inside_the_figure() -> None:
    from attnlens.plots.svg.canvas import text_width, wrap

    text = "Syntactic accuracy per head (layers and heads from 0), dep->head; red dot: syntactic"
    lines = wrap(text, 10, 200).split("\n")
    assert len(lines) > 1 and " ".join(lines) == text  # every word kept, in order
    assert all(text_width(line, 10) <= 200 for line in lines)
    one = pd.DataFrame([("dep->head", "all relations", layer, head, 0.5, False, 0.3, 9)
                        for layer in range(2) for head in range(3)],
                       columns=["direction", "relation", "layer", "head", "accuracy",
                                "syntactic", "baseline", "examples"])
    canvas = svg.heatmaps.relation_heatmaps(one, "dep->head")  # 4 inches: the heading wraps
    root = _parse(canvas)
    heading = [t for t in root.iter("{http://www.w3.org/2000/svg}text")
               if "".join(t.itertext()).startswith("Syntactic")]
    spans = heading[0].findall("s:tspan", NS)
    assert len(spans) > 1
    assert all(text_width(s.text, 10) <= canvas.width for s in spans)


def _old_shared_subspace_curves(curve: pd.DataFrame, d_model: int, title: str):
    """``svg.curves.shared_subspace_curves`` before fixed43 (each line's rows by two masks)."""
    from attnlens.plots.svg.axes import LegendEntry
    from attnlens.plots.svg.colormaps import cycle_colour
    from attnlens.plots.svg.curves import DASHED, DOTTED, GREY, _share_panels
    from attnlens.plots.svg.layout import layer_grid, suptitle
    from attnlens.plots.svg.ticks import data_range

    n_layers = int(curve["layer"].max()) + 1
    canvas, boxes, cols = layer_grid(n_layers, width=3.0, kind="shared_subspace", top=0.6,
                                     hspace=0.5)
    panels = _share_panels(canvas, boxes, cols, data_range(curve["k"]), "dimensions k",
                           "cumulative energy (sum s^2)")
    matrices = list(dict.fromkeys(curve["matrix"]))
    entries = []
    for index, matrix in enumerate(matrices):
        for scope, dash in (("concat", None), ("per_head_mean", DASHED)):
            label = f"{matrix} {'all heads' if scope == 'concat' else 'one head'}"
            entries.append(LegendEntry(label, cycle_colour(index), dash=dash))
    for layer, rows in curve.groupby("layer"):
        panel = panels[int(layer)]
        for index, matrix in enumerate(matrices):
            for scope, dash in (("concat", None), ("per_head_mean", DASHED)):
                part = rows[(rows["matrix"] == matrix) & (rows["scope"] == scope)]
                panel.line(part["k"].to_list(), part["energy"].to_list(), cycle_colour(index),
                           1.2, dash=dash)
        panel.vline(d_model, GREY, DOTTED)
    panels[0].legend(entries, "lower right", size=6)
    suptitle(canvas, title)
    return canvas


def test_shared_subspace_curves_equal_the_per_line_masks() -> None:
    """fixed43: each line's rows from one group-by give the very SVG two masks per line gave
    (rows in any order, a layer without one matrix's lines)."""
    shared = _curve_tables()["shared"]
    shuffled = shared.sample(frac=1.0, random_state=0)
    missing = shared[~((shared["layer"] == 1) & (shared["matrix"] == "W_K"))]
    three = pd.concat([shared, shared.assign(layer=2, energy=shared["energy"] / 2)])
    for table in (shared, shuffled, missing, three):
        new = svg.curves.shared_subspace_curves(table, 32, "Shared").render()
        assert new == _old_shared_subspace_curves(table, 32, "Shared").render()
