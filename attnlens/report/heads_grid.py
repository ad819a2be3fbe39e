"""Layer x head grids for the page's head map, drawn from the saved tables.

Every table with ``layer`` and ``head`` columns gives grids: a long table with ``measure`` and
``value`` one grid per measure (and per value of its other label columns, e.g. ``circuit``),
a table with one row per head one grid per numeric column.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd

# The colours of attnlens.plots.ROLE_COLORS (not imported: that module loads matplotlib;
# tests/test_report_page.py checks they agree).
ROLE_COLORS = {
    "none": "#f0f0f0",
    "positional": "#6baed6",
    "syntactic": "#fd8d3c",
    "rare-word": "#74c476",
    "induction": "#e377c2",
    "duplicate_token": "#bcbd22",
    "previous_token": "#17becf",
    "sink": "#a0785a",
    "retrieval": "#d62728",
    "several": "#9e9ac8",
}
ROLES = ("positional", "syntactic", "rare-word", "induction", "duplicate_token",
         "previous_token", "sink", "retrieval")
# Cell labels of the language-model roles (as attnlens.plots.roles.LM_ROLE_LABELS)
LM_ROLE_LABELS = {"induction": "Ind", "duplicate_token": "Dup", "previous_token": "Prev",
                  "sink": "Snk", "retrieval": "Ret"}
MAX_GRIDS = 120


def head_shape(run: dict[str, Any], tables: Mapping[str, pd.DataFrame]) -> tuple[int, int]:
    """(layers, heads) from run.json, else from the largest indices in the tables."""
    model = run.get("model")
    if isinstance(model, dict) and model.get("layers") and model.get("heads"):
        return int(model["layers"]), int(model["heads"])
    layers = heads = 0
    for name in ("head_roles", "head_stats", "spectrum_summary", "weight_asymmetry"):
        if name in tables:
            table = tables[name]
            layers = max(layers, int(table["layer"].max()) + 1)
            heads = max(heads, int(table["head"].max()) + 1)
    return layers, heads


def _grid(rows: pd.DataFrame, value: str, layers: int, heads: int) -> list[list[float | None]]:
    """``rows``' ``value`` per head: one row per (layer, head), as ``table_grids`` ensures
    (the mean of one value is that value, so no group-by is needed)."""
    column = rows[value]
    if not (pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column)):
        grid: list[list[float | None]] = [[None] * heads for _ in range(layers)]
        means = rows.groupby(["layer", "head"])[value].mean()  # text values: pandas decides
        for (layer, head), v in means.items():
            if 0 <= layer < layers and 0 <= head < heads and math.isfinite(v):
                grid[int(layer)][int(head)] = float(f"{v:.6g}")
        return grid
    return _filled(_numbers(rows["layer"]), _numbers(rows["head"]), _numbers(column), layers,
                   heads)


def _numbers(column: pd.Series) -> np.ndarray:
    return pd.to_numeric(column).to_numpy(dtype=float, na_value=math.nan)


def _filled(layer: np.ndarray, head: np.ndarray, value: np.ndarray, layers: int,
            heads: int) -> list[list[float | None]]:
    """The grid of ``value`` at (``layer``, ``head``): heads out of range, NaN or infinite
    values left empty; values to 6 significant digits."""
    grid: list[list[float | None]] = [[None] * heads for _ in range(layers)]
    keep = (layer >= 0) & (layer < layers) & (head >= 0) & (head < heads) & np.isfinite(value)
    for layer_, head_, v in zip(layer[keep].tolist(), head[keep].tolist(),
                                value[keep].tolist(), strict=True):
        grid[int(layer_)][int(head_)] = float(f"{v:.6g}")
    return grid


def _label_columns(table: pd.DataFrame, keys: tuple[str, ...]) -> list[str]:
    return [c for c in table.columns if c not in ("layer", "head", "measure", "value")
            and (c in keys or not pd.api.types.is_numeric_dtype(table[c]))
            and table[c].nunique() > 1]


def table_grids(name: str, table: pd.DataFrame, keys: tuple[str, ...], layers: int,
                heads: int) -> list[dict[str, Any]]:
    """The grids one table offers (see the module docstring)."""
    return list(_table_grids(name, table, keys, layers, heads))


def _table_grids(name: str, table: pd.DataFrame, keys: tuple[str, ...], layers: int,
                 heads: int, varying: bool = False) -> Iterator[dict[str, Any]]:
    """``table_grids``, one grid at a time (the page stops at ``MAX_GRIDS``); ``varying``:
    without a long table's one-row splits, whose grid holds one value and cannot vary
    (``head_examples``: most of its splits)."""
    if not {"layer", "head"} <= set(table.columns) or table.empty:
        return
    if {"measure", "value"} <= set(table.columns):
        labels = _label_columns(table, keys)
        splits = [*labels, "measure"]
        numeric = (pd.api.types.is_numeric_dtype(table["value"])
                   or pd.api.types.is_bool_dtype(table["value"]))
        if not numeric:  # text values: each split through the group-by of _grid
            for key, rows in table.groupby(splits, sort=False):
                key = key if isinstance(key, tuple) else (key,)
                if rows.duplicated(["layer", "head"]).any():
                    continue
                yield {"label": " ".join(str(k) for k in key), "table": name,
                       "values": _grid(rows, "value", layers, heads)}
            return
        # One pass over the table: each split's rows by its group number (in the order the
        # group-by iterates), a head twice within one split found once for all splits.
        group = table.groupby(splits, sort=False).ngroup().fillna(-1).to_numpy(dtype=np.int64)
        repeated = table.duplicated([*splits, "layer", "head"]).to_numpy()
        layer, head, value = (_numbers(table[c]) for c in ("layer", "head", "value"))
        split_values = [table[c].array for c in splits]  # a cell as .iloc gives it, cheaply
        order = np.argsort(group, kind="stable")
        ids, starts = np.unique(group[order], return_index=True)
        ends = [*starts[1:].tolist(), len(order)]
        for g, start, end in zip(ids.tolist(), starts.tolist(), ends, strict=True):
            if g < 0 or (varying and end - start < 2):
                continue  # a missing label (ngroup's NaN: the group-by leaves the rows out),
                # or one row only where the caller keeps grids that vary
            rows = order[start:end]
            if repeated[rows].any():
                continue  # more labels than this split sees: not one value per head
            first = int(rows[0])
            key = tuple(values[first] for values in split_values)
            yield {"label": " ".join(str(k) for k in key), "table": name,
                   "values": _filled(layer[rows], head[rows], value[rows], layers, heads)}
        return
    if table.duplicated(["layer", "head"]).any():
        return
    layer = head = None  # converted once for every column (as _grid converts them)
    for column in table.columns:
        if column in ("layer", "head") or column in keys:
            continue
        if pd.api.types.is_numeric_dtype(table[column]) and not pd.api.types.is_bool_dtype(
                table[column]):
            if layer is None:
                layer, head = _numbers(table["layer"]), _numbers(table["head"])
            yield {"label": column, "table": name,
                   "values": _filled(layer, head, _numbers(table[column]), layers, heads)}


def _varies(grid: dict[str, Any]) -> bool:
    values = {v for row in grid["values"] for v in row if v is not None}
    return len(values) > 1


def head_grids(tables: Mapping[str, pd.DataFrame], sections: list, layers: int,
               heads: int) -> list[dict[str, Any]]:
    """Every section's grids that vary between heads, in page order (at most ``MAX_GRIDS``;
    tables past that point are not read)."""
    if not layers or not heads:
        return []
    grids: list[dict[str, Any]] = []
    for section in sections:
        for name in section.tables:
            if name in tables and name != "head_roles":
                keys = section.doc.table_doc(name).keys
                for grid in _table_grids(name, tables[name], tuple(keys), layers, heads,
                                         varying=True):
                    if _varies(grid):
                        grids.append(grid)
                        if len(grids) == MAX_GRIDS:
                            return grids
    return grids


def _short_label(roles: list[str], evidence: str, offset: Any) -> str:
    parts = []
    if "positional" in roles:
        try:
            parts.append(f"P{int(offset):+d}")
        except (TypeError, ValueError):
            parts.append("P")
    if "syntactic" in roles:
        parts.append(f"S{max(1, evidence.count('syntactic:'))}")
    if "rare-word" in roles:
        parts.append("R")
    parts += [label for role, label in LM_ROLE_LABELS.items() if role in roles]
    return " ".join(parts)


def role_cells(tables: Mapping[str, pd.DataFrame], layers: int,
               heads: int) -> dict[str, Any] | None:
    """Per head: its roles, a short label (P-1, S3, R, Ind, ...) and the evidence text."""
    if "head_roles" not in tables or not layers or not heads:
        return None
    table = tables["head_roles"]
    cells: list[list[dict[str, str] | None]] = [[None] * heads for _ in range(layers)]
    for row in table.to_dict("records"):
        layer, head = int(row["layer"]), int(row["head"])
        if not (0 <= layer < layers and 0 <= head < heads):
            continue
        text = "" if pd.isna(row.get("roles")) else str(row.get("roles"))
        found = [r for r in ROLES if r in text.split("; ")]
        evidence = "" if pd.isna(row.get("evidence")) else str(row.get("evidence", ""))
        category = "none" if not found else found[0] if len(found) == 1 else "several"
        cells[layer][head] = {"roles": ", ".join(found) or "none", "category": category,
                              "label": _short_label(found, evidence, row.get("best_offset")),
                              "evidence": evidence}
    return {"colors": ROLE_COLORS, "cells": cells}
