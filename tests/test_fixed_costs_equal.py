"""Issue 29's fixed costs: each faster path gives what the one it replaced gave.

The old implementations are kept here, as written before the change, and run on the sample
report's own tables (and on hand-made edge cases) beside the new ones.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from attnlens.errors import DataError
from attnlens.report import heads_grid
from attnlens.report.folder import Report
from attnlens.runs import io, stopwatch


# The head map's grids before issue 29 (a group-by mean per grid, every table read) -------
def _old_grid(rows: pd.DataFrame, value: str, layers: int, heads: int) -> list:
    means = rows.groupby(["layer", "head"])[value].mean()
    grid: list = [[None] * heads for _ in range(layers)]
    for (layer, head), v in means.items():
        if 0 <= layer < layers and 0 <= head < heads and math.isfinite(v):
            grid[int(layer)][int(head)] = float(f"{v:.6g}")
    return grid


def _old_table_grids(name, table, keys, layers, heads) -> list:
    if not {"layer", "head"} <= set(table.columns) or table.empty:
        return []
    grids = []
    if {"measure", "value"} <= set(table.columns):
        labels = heads_grid._label_columns(table, keys)
        for key, rows in table.groupby([*labels, "measure"], sort=False):
            key = key if isinstance(key, tuple) else (key,)
            if rows.duplicated(["layer", "head"]).any():
                continue
            grids.append({"label": " ".join(str(k) for k in key), "table": name,
                          "values": _old_grid(rows, "value", layers, heads)})
        return grids
    if table.duplicated(["layer", "head"]).any():
        return []
    for column in table.columns:
        if column in ("layer", "head") or column in keys:
            continue
        if pd.api.types.is_numeric_dtype(table[column]) and not pd.api.types.is_bool_dtype(
                table[column]):
            grids.append({"label": column, "table": name,
                          "values": _old_grid(table, column, layers, heads)})
    return grids


def _old_head_grids(tables, sections, layers, heads) -> list:
    grids = []
    for section in sections:
        for name in section.tables:
            if name in tables and name != "head_roles":
                keys = section.doc.table_doc(name).keys
                grids += [g for g in _old_table_grids(name, tables[name], tuple(keys), layers,
                                                      heads) if heads_grid._varies(g)]
    return grids[: heads_grid.MAX_GRIDS]


def test_head_grids_equal_the_group_by_path_on_the_sample_report(sample_report: Path) -> None:
    report = Report(sample_report)
    sections = report.sections()
    layers, heads = heads_grid.head_shape(report.run, report.tables)
    tables = {name: report.tables[name] for name in report.tables}
    new = heads_grid.head_grids(tables, sections, layers, heads)
    assert len(new) == heads_grid.MAX_GRIDS  # the sample report has more: the cut is tested
    assert new == _old_head_grids(tables, sections, layers, heads)
    for section in sections:  # every table's grids, past the page's cut too
        for name in section.tables:
            if name in tables:
                keys = tuple(section.doc.table_doc(name).keys)
                assert (heads_grid.table_grids(name, tables[name], keys, layers, heads)
                        == _old_table_grids(name, tables[name], keys, layers, heads)), name


@pytest.mark.parametrize("case", ["nan", "out_of_range", "ints", "bools", "nullable", "text",
                                  "duplicated_split", "float_layers", "labels"])
def test_table_grids_equal_the_group_by_path_on_edge_cases(case: str) -> None:
    rng = np.random.default_rng(0)
    layer = np.repeat(np.arange(3), 4)
    head = np.tile(np.arange(4), 3)
    value = rng.normal(size=12)
    wide = pd.DataFrame({"layer": layer, "head": head, "score": value, "n": np.arange(12)})
    long = pd.DataFrame({"layer": np.tile(layer, 2), "head": np.tile(head, 2),
                         "measure": ["a"] * 12 + ["b"] * 12,
                         "value": np.concatenate([value, -value])})
    if case == "nan":
        wide.loc[3, "score"] = np.nan
        long.loc[[0, 13], "value"] = [np.inf, np.nan]
    elif case == "out_of_range":
        wide.loc[0, "layer"], wide.loc[1, "head"] = 7, -1
        long.loc[2, "head"] = 9
    elif case == "ints":
        long["value"] = np.arange(24)
    elif case == "bools":
        long["value"] = np.arange(24) % 3 == 0
    elif case == "nullable":
        wide["score"] = pd.array([1.5, None] * 6, dtype="Float64")
        long["value"] = pd.array([*range(23), None], dtype="Int64")
    elif case == "text":
        long["value"] = [str(i) for i in range(24)]
    elif case == "duplicated_split":
        long.loc[12, ["layer", "head"]] = [0, 1]  # measure b holds L0H1 twice
    elif case == "labels":  # a text label splits the measures; a missing one drops rows
        long["kind"] = (["x", "y", None] * 8)
        long.loc[4, "kind"] = "x"  # x of measure a: L1H0 once, with L0H1 ... (no repeat)
    elif case == "float_layers":
        wide["layer"] = wide["layer"].astype(float)
        long["head"] = long["head"].astype(float)
        long.loc[5, "head"] = np.nan
    for name, table in (("wide", wide), ("long", long)):
        reference = table
        if case == "nullable":  # the group-by path raised on pd.NA; as NaN it gives the grid
            reference = table.astype({c: float for c in ("score", "value") if c in table})
        if case == "text" and name == "long":  # a mean of text: both refuse alike
            with pytest.raises(TypeError):
                _old_table_grids(name, reference, (), 3, 4)
            with pytest.raises(TypeError):
                heads_grid.table_grids(name, table, (), 3, 4)
            continue
        assert (heads_grid.table_grids(name, table, (), 3, 4)
                == _old_table_grids(name, reference, (), 3, 4)), (case, name)


# Markdown tables before issue 29 (a row at a time through itertuples) ---------------------
def _old_markdown_table(df: pd.DataFrame, float_format: str = "{:.4g}",
                        markup: bool = True) -> str:
    def text(value) -> str:
        return io.markdown_cell(str(value)) if markup else str(value).replace("|", "\\|")

    def cell(value) -> str:
        if isinstance(value, float):
            return float_format.format(value)
        return text(value)

    header = "| " + " | ".join(text(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, rule, *rows]) + "\n"


def test_markdown_tables_equal_the_row_path_on_the_sample_report(sample_report: Path) -> None:
    report = Report(sample_report)
    names = list(report.tables)
    assert len(names) > 30
    for name in names:
        table = report.tables[name]
        for markup in (True, False):
            assert (io.markdown_table(table, markup=markup)
                    == _old_markdown_table(table, markup=markup)), name


def test_markdown_table_equals_the_row_path_on_every_kind_of_column() -> None:
    table = pd.DataFrame({
        "float": [0.1234567, np.nan, -np.inf],
        "float32": np.array([1.5, 2.25, np.nan], dtype=np.float32),
        "int": [1, 2, 3],
        "bool": [True, False, True],
        "mixed": [0.5, "a|b<c>", None],
        "Int64": pd.array([1, None, 3], dtype="Int64"),
        "Float64": pd.array([0.5, None, 2.0], dtype="Float64"),
        "text": pd.array(["x", None, "z&"], dtype="str"),
        "category": pd.Categorical(["p", "q", "p"]),
        "dup": [1.0, 2.0, 3.0],
    })
    table.insert(0, "dup2", [4.0, 5.0, 6.0], allow_duplicates=True)
    table = table.rename(columns={"dup2": "dup"})  # two columns of one name
    for frame in (table, table.iloc[:0], table[[]], pd.DataFrame(index=range(2))):
        for markup in (True, False):
            assert (io.markdown_table(frame, "{:.3f}", markup)
                    == _old_markdown_table(frame, "{:.3f}", markup))


def test_no_table_files_writes_nothing_and_still_checks_the_format(tmp_path: Path) -> None:
    table = pd.DataFrame({"a": [1.0]})
    with io.no_table_files():
        paths = io.write_table(table, tmp_path, "t")
        with pytest.raises(DataError):
            io.write_table(table, tmp_path, "t", formats=("xlsx",))
    assert paths == [tmp_path / "t.csv", tmp_path / "t.md"]
    assert not list(tmp_path.iterdir())
    assert io.write_table(table, tmp_path, "t") == paths and all(p.is_file() for p in paths)


def test_run_json_itemises_the_fixed_costs(sample_report: Path) -> None:
    import json

    timings = json.loads((sample_report / "run.json").read_text())["timings"]
    costs = timings["fixed costs"]
    for name in ("imports and start-up", "model and tokenizer load", "corpus read",
                 "analyzers made", "null model: initialisation", "null model: its tables",
                 "null model: its pass over the corpus sample", "example pages", "page",
                 stopwatch.LM_PROBES, "null columns added"):
        assert isinstance(costs[name], float) and costs[name] >= 0, name
    assert 0 < costs["imports and start-up"] < 600
    null_parts = sum(v for k, v in costs.items() if k.startswith("null model:"))
    assert null_parts <= timings["null model pass (included in total)"] + 0.05  # rounding
    # the probes run inside the head-roles section's tables (the first section to ask)
    assert costs[stopwatch.LM_PROBES] <= timings["sections"]["heads"]["tables and figures"]


def test_stopwatch_phases_add_up_and_are_taken_once() -> None:
    stopwatch.take()
    with stopwatch.phase("a"):
        pass
    stopwatch.add("a", 1.0)
    stopwatch.add("b", 0.5)
    taken = stopwatch.take()
    assert set(taken) == {"a", "b"} and 1.0 <= taken["a"] < 1.5 and taken["b"] == 0.5
    assert stopwatch.take() == {}
    age = stopwatch.process_age()
    assert age is None or 0 < age < 24 * 3600


def _old_window_text(grid: torch.Tensor) -> str:
    return ";".join(" ".join(str(round(100 * float(v))) for v in row) for row in grid)


def test_example_windows_equal_the_per_entry_path() -> None:
    from attnlens.measures.heads.examples import window_text

    gen = torch.Generator().manual_seed(0)
    grids = [torch.rand(n, n, generator=gen).softmax(-1) for n in (1, 5, 12)]
    grids += [torch.tensor([[0.005, 0.015, 0.025], [0.035, 0.125, 0.995]]),  # halves
              -torch.rand(3, 3, generator=gen) / 1000,  # -0.0 after rounding
              torch.zeros(0, 0), torch.rand(64, 64, generator=gen)]
    for grid in grids:
        assert window_text(grid.float()) == _old_window_text(grid.float())
    with pytest.raises(ValueError):  # NaN: the same error as before
        window_text(torch.tensor([[float("nan")]]))


def test_head_grids_skip_one_row_splits_with_the_same_grids() -> None:
    """fixed43: the head map leaves out a long table's one-row splits before building their
    grids (one value cannot vary); its grids stay those of the group-by path."""
    layer, head = np.repeat(np.arange(2), 3), np.tile(np.arange(3), 2)
    varied = pd.DataFrame({"layer": layer, "head": head, "label": "many", "measure": "m",
                           "value": np.arange(6) / 7})
    single = pd.DataFrame({"layer": layer, "head": head, "label": [f"s{i}" for i in range(6)],
                           "measure": "m", "value": np.arange(6) / 7})
    table = pd.concat([single, varied], ignore_index=True)
    every = heads_grid.table_grids("t", table, (), 2, 3)
    kept = list(heads_grid._table_grids("t", table, (), 2, 3, varying=True))
    assert len(every) == 7 and [g["label"] for g in kept] == ["many m"]
    assert [g for g in every if heads_grid._varies(g)] == kept
    assert every == _old_table_grids("t", table, (), 2, 3)
