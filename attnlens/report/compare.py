"""Two report folders side by side: per-head differences, role changes, largest differences.

Every difference is B - A. A row's change is ranked by its **relative** size
(``relative = (b - a) / max(|a|, |b|)``) among the changes above a **floor**: at least
``FLOOR`` (1 %) of the measure's largest absolute value in either run, so a 0.9998 -> 1
step of a column that hardly varies is not news. ``scaled`` (the difference over the
measure's spread across heads) breaks ties and stays in the tables. ``head_changes`` ranks
the heads by how much their attention pattern moved: the total variation distance between
A's and B's distributions of where each token's maximum attention goes
(``positional_offsets``), and the mean absolute change of the head's attention statistics
(``head_stats``).

Heads are matched by (layer, head). A structurally pruned model keeps its heads' original
numbers in every table (``model.head_ids``; an export records its removed heads in
``pruned_heads`` and loads pruned), so head L1H7 of a pruned model is compared with head L1H7 of
the unpruned one, and removed heads have no difference. Tables written before attnlens kept
the numbers (a pruned layer's heads then renumbered 0, 1, ...) do not match: the page warns
when the head counts differ and neither run records its head numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnlens.errors import DataError
from attnlens.report.folder import Report
from attnlens.report.heads_grid import head_shape

# Columns that count or bound rather than measure: never compared.
NOT_MEASURES = re.compile(
    r"^(examples|n_sentences|sentences|tokens|words|index|points|n|p_value|q_value|kv_head|"
    r".*_low|.*_high|chance_.*|min_.*|null_.*|d_model)$")
KEYS = ("table", "label", "measure", "layer", "head")
MAX_GRIDS_PER_TABLE = 24
HEAD_TOP = 15
FLOOR = 0.01  # a change must be at least 1 % of the measure's largest |value| to be ranked
PATTERN_MEASURES = ("confidence", "to_cls", "to_sep", "sink", "to_punct", "to_self", "to_prev",
                    "to_next")
ROLE_CHANGE_COLORS = {"same": "#f0f0f0", "gained": "#74c476", "lost": "#fb6a4a",
                      "changed": "#fdae6b", "missing": "#ffffff"}


@dataclass
class Comparison:
    """The tables of a comparison (see ``compare``)."""

    a: Report
    b: Report
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    grids: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    layers: int = 0
    heads: int = 0
    role_cells: dict[str, Any] | None = None


def _table_keys(report: Report) -> dict[str, tuple[str, ...]]:
    keys: dict[str, tuple[str, ...]] = {}
    for section in report.sections():
        for name in section.tables:
            keys[name] = tuple(section.doc.table_doc(name).keys)
    return keys


def long_values(table: pd.DataFrame, keys: tuple[str, ...] = ()) -> pd.DataFrame:
    """A per-head table as rows ``label, measure, layer, head, value`` (label: the values of
    its other identifying columns, e.g. ``det dep->head``)."""
    if not {"layer", "head"} <= set(table.columns) or table.empty:
        return pd.DataFrame(columns=["label", "measure", "layer", "head", "value"])
    numeric = {c for c in table.columns if pd.api.types.is_numeric_dtype(table[c])
               and not pd.api.types.is_bool_dtype(table[c])}
    base = ["layer", "head"] + (["measure"] if "measure" in table.columns else [])
    others = [c for c in table.columns if c not in (*base, "value", *keys)
              and not pd.api.types.is_bool_dtype(table[c])]
    # text columns first; integer ones (seed, step) only where text leaves rows ambiguous
    candidates = [c for c in keys if c in table.columns] + [
        c for c in others if c not in numeric] + [
        c for c in others if pd.api.types.is_integer_dtype(table[c])]
    labels: list[str] = []  # the fewest columns that, with layer and head, identify a row
    for column in candidates:
        if not table.duplicated([*base, *labels]).any():
            break
        labels.append(column)
    if {"measure", "value"} <= set(table.columns):
        rows = table[["layer", "head", "measure", "value", *labels]].copy()
    else:
        values = [c for c in table.columns if c in numeric and c not in ("layer", "head")
                  and c not in keys and c not in labels and not NOT_MEASURES.match(c)]
        if not values:
            return pd.DataFrame(columns=["label", "measure", "layer", "head", "value"])
        # a lone "value" column (e.g. spectrum_curve) is a measure named "value" like any other
        rows = table.rename(columns={"value": "value "}).melt(
            id_vars=["layer", "head", *labels],
            value_vars=["value " if c == "value" else c for c in values],
            var_name="measure", value_name="value")
        rows["measure"] = rows["measure"].str.rstrip()
    rows["label"] = (rows[labels].astype(object).apply(_label, axis=1) if labels else "")
    rows["value"] = pd.to_numeric(rows["value"], errors="coerce")
    return rows[["label", "measure", "layer", "head", "value"]]


def _label(row: pd.Series) -> str:
    """A row's identifying values joined by spaces (missing ones left out)."""
    return " ".join(str(v) for v in row if not pd.isna(v))


def _differences(a: Report, b: Report) -> pd.DataFrame:
    keys_a = _table_keys(a)
    parts = []
    for name in sorted(set(a.tables) & set(b.tables)):
        keys = keys_a.get(name, ())
        left, right = long_values(a.tables[name], keys), long_values(b.tables[name], keys)
        if left.empty and right.empty:
            continue
        merged = left.merge(right, on=["label", "measure", "layer", "head"], how="outer",
                            suffixes=("_a", "_b"))
        merged.insert(0, "table", name)
        parts.append(merged.rename(columns={"value_a": "a", "value_b": "b"}))
    if not parts:
        return pd.DataFrame(columns=[*KEYS, "a", "b", "difference", "scaled"])
    table = pd.concat(parts, ignore_index=True)
    table["difference"] = table["b"] - table["a"]
    spread = table.groupby(["table", "label", "measure"])[["a", "b"]].transform(
        lambda s: s.std(ddof=0))
    pooled = spread.mean(axis=1)
    scaled = table["difference"] / pooled.where(pooled > 0)
    table["scaled"] = scaled.where(pooled > 0, np.where(table["difference"] == 0, 0.0, np.nan))
    size = np.maximum(table["a"].abs(), table["b"].abs())
    table["relative"] = table["difference"] / size.where(size > 0)
    largest = table.assign(_size=size).groupby(["table", "label", "measure"])["_size"].transform(
        "max")
    table["floor"] = FLOOR * largest
    table["above_floor"] = (table["difference"].abs() >= table["floor"]) & (
        table["difference"].abs() > 0)
    return table


def _roles(report: Report) -> pd.DataFrame:
    if "head_roles" not in report.tables:
        return pd.DataFrame(columns=["layer", "head", "roles", "evidence"])
    table = report.tables["head_roles"]
    columns = [c for c in ("layer", "head", "roles", "evidence") if c in table.columns]
    text = [c for c in columns if c not in ("layer", "head")]  # empty cells read as NaN
    return table[columns].astype({c: object for c in text}).fillna({c: "" for c in text})


def _role_changes(a: Report, b: Report) -> pd.DataFrame:
    merged = _roles(a).merge(_roles(b), on=["layer", "head"], how="outer",
                             suffixes=("_a", "_b"))
    for side in ("a", "b"):
        merged[f"roles_{side}"] = merged[f"roles_{side}"].fillna("(no head)")
        if f"evidence_{side}" not in merged:
            merged[f"evidence_{side}"] = ""
        merged[f"evidence_{side}"] = merged[f"evidence_{side}"].fillna("")
    changed = merged[merged["roles_a"] != merged["roles_b"]]
    return changed[["layer", "head", "roles_a", "roles_b", "evidence_a", "evidence_b"]
                   ].sort_values(["layer", "head"], ignore_index=True)


def _role_kind(before: str, after: str) -> str:
    if before == after:
        return "same"
    if "(no head)" in (before, after):
        return "missing"
    if before == "none":
        return "gained"
    if after == "none":
        return "lost"
    return "changed"


def _role_cells(a: Report, b: Report, layers: int, heads: int) -> dict[str, Any] | None:
    ra, rb = _roles(a), _roles(b)
    if ra.empty and rb.empty:
        return None
    before = {(int(r.layer), int(r.head)): r.roles for r in ra.itertuples()}
    after = {(int(r.layer), int(r.head)): r.roles for r in rb.itertuples()}
    cells: list[list[dict[str, str] | None]] = [[None] * heads for _ in range(layers)]
    for layer in range(layers):
        for head in range(heads):
            x = before.get((layer, head), "(no head)")
            y = after.get((layer, head), "(no head)")
            kind = _role_kind(x, y)
            cells[layer][head] = {"roles": kind, "category": kind,
                                  "label": "" if kind == "same" else "±",
                                  "evidence": f"A: {x}; B: {y}"}
    return {"colors": ROLE_CHANGE_COLORS, "cells": cells}


def _grids(diffs: pd.DataFrame, layers: int, heads: int) -> list[dict[str, Any]]:
    grids = []
    for name, rows in diffs.groupby("table", sort=False):
        found = []
        for (label, measure), group in rows.groupby(["label", "measure"], sort=False):
            if group.duplicated(["layer", "head"]).any():
                continue
            grid: list[list[float | None]] = [[None] * heads for _ in range(layers)]
            for r in group.itertuples():
                if 0 <= r.layer < layers and 0 <= r.head < heads and np.isfinite(r.difference):
                    grid[int(r.layer)][int(r.head)] = float(f"{r.difference:.6g}")
            weight = float(np.nanmean(np.abs(group["scaled"]))) if group["scaled"].notna().any() \
                else 0.0
            found.append((weight, {"label": f"{label} {measure}".strip(), "table": name,
                                   "values": grid, "diverging": True}))
        if len(found) > MAX_GRIDS_PER_TABLE:
            keep = sorted(range(len(found)), key=lambda i: -found[i][0])[:MAX_GRIDS_PER_TABLE]
            found = [found[i] for i in sorted(keep)]
        grids += [g for _, g in found]
    return grids


def head_changes(a: Report, b: Report, diffs: pd.DataFrame) -> pd.DataFrame:
    """Per head: how much its attention pattern changed (module docstring), largest first."""
    rows: dict[tuple[int, int], dict[str, Any]] = {}

    def entry(layer: int, head: int) -> dict[str, Any]:
        return rows.setdefault((layer, head), {"layer": layer, "head": head})

    if "positional_offsets" in a.tables and "positional_offsets" in b.tables:
        keys = ["layer", "head", "target"]
        merged = a.tables["positional_offsets"][[*keys, "share"]].merge(
            b.tables["positional_offsets"][[*keys, "share"]], on=keys, how="outer",
            suffixes=("_a", "_b")).fillna({"share_a": 0.0, "share_b": 0.0})
        merged["gap"] = (merged["share_b"] - merged["share_a"]).abs()
        for (layer, head), gap in merged.groupby(["layer", "head"])["gap"].sum().items():
            entry(int(layer), int(head))["pattern_change"] = 0.5 * float(gap)
    stats = diffs[(diffs["table"] == "head_stats") & diffs["measure"].isin(PATTERN_MEASURES)]
    for (layer, head), group in stats.groupby(["layer", "head"]):
        entry(int(layer), int(head))["stats_change"] = float(group["difference"].abs().mean())
    ranked = diffs[diffs["above_floor"]].copy()
    ranked["order"] = ranked["relative"].abs()
    for (layer, head), group in ranked.groupby(["layer", "head"]):
        top = group.sort_values("order", ascending=False).iloc[0]
        row = entry(int(layer), int(head))
        row["measures_changed"] = len(group)
        row["largest_change"] = (f"{top['table']} {top['label']} {top['measure']}".replace(
            "  ", " ") + f" {top['a']:.4g} -> {top['b']:.4g}")
    if not rows:
        return pd.DataFrame(columns=["layer", "head", "pattern_change", "stats_change",
                                     "measures_changed", "largest_change"])
    table = pd.DataFrame(list(rows.values()))
    for column in ("pattern_change", "stats_change"):
        if column not in table:
            table[column] = np.nan
    if "measures_changed" not in table:
        table["measures_changed"] = 0
    if "largest_change" not in table:
        table["largest_change"] = ""
    table["measures_changed"] = table["measures_changed"].fillna(0).astype(int)
    table["largest_change"] = table["largest_change"].fillna("")
    order = table["pattern_change"].fillna(table["stats_change"]).fillna(0)
    table = table.assign(_order=order).sort_values(["_order", "layer", "head"],
                                                   ascending=[False, True, True])
    return table.drop(columns="_order")[["layer", "head", "pattern_change", "stats_change",
                                         "measures_changed", "largest_change"]].reset_index(
        drop=True)


def _warnings(a: Report, b: Report) -> list[str]:
    run_a, run_b = a.run, b.run
    notes = []
    if run_a.get("corpus") != run_b.get("corpus") or run_a.get("sentences") != run_b.get(
            "sentences"):
        notes.append(f"The runs read different corpora: A {run_a.get('corpus')!s} "
                     f"({run_a.get('sentences')} sentences), B {run_b.get('corpus')!s} "
                     f"({run_b.get('sentences')} sentences).")
    ma, mb = run_a.get("model"), run_b.get("model")
    if isinstance(ma, dict) and isinstance(mb, dict):
        ha, hb = ma.get("heads_per_layer"), mb.get("heads_per_layer")
        if ha and hb and ha != hb and (ma.get("head_ids") or mb.get("head_ids")):
            notes.append(f"Head counts differ (A {ha}, B {hb}): heads are matched by their "
                         "original numbers (a pruned model keeps them); a head one model "
                         "lacks has no difference.")
        elif ha and hb and ha != hb:
            notes.append(f"Head counts differ (A {ha}, B {hb}) and neither run records its "
                         "heads' original numbers: heads are matched by position, which is "
                         "wrong for a model pruned by an attnlens older than its head "
                         "numbers; re-export it and analyse it again.")
    return notes


def compare(a: Report | str | Path, b: Report | str | Path, top: int = 50) -> Comparison:
    """Per-head differences (B - A) of every measure both reports hold, role changes, the
    heads whose patterns changed most and the ``top`` largest differences (ranked by relative
    change above the floor; module docstring)."""
    a = a if isinstance(a, Report) else Report(a)
    b = b if isinstance(b, Report) else Report(b)
    shape_a, shape_b = head_shape(a.run, a.tables), head_shape(b.run, b.tables)
    layers, heads = max(shape_a[0], shape_b[0]), max(shape_a[1], shape_b[1])
    diffs = _differences(a, b)
    if diffs.empty:
        raise DataError(f"{a.path} and {b.path} have no per-head table in common to compare.")
    ranked = diffs[diffs["above_floor"]].assign(
        _relative=lambda d: d["relative"].abs(), _scaled=lambda d: d["scaled"].abs().fillna(0))
    largest = ranked.sort_values(["_relative", "_scaled"], ascending=False).head(top).drop(
        columns=["_relative", "_scaled"])
    summary = diffs.assign(abs_difference=diffs["difference"].abs()).groupby(
        ["table", "label", "measure"], sort=False).agg(
        heads=("difference", "count"), mean_a=("a", "mean"), mean_b=("b", "mean"),
        mean_difference=("difference", "mean"), max_abs_difference=("abs_difference", "max"),
    ).reset_index()
    per_head = diffs[diffs["above_floor"]].copy()
    per_head["order"] = per_head["relative"].abs()
    head_top = (per_head.sort_values("order", ascending=False).groupby(["layer", "head"])
                .head(HEAD_TOP).drop(columns="order").sort_values(["layer", "head"]))
    comparison = Comparison(a, b, warnings=_warnings(a, b), layers=layers, heads=heads,
                            role_cells=_role_cells(a, b, layers, heads))
    comparison.tables = {
        "head_changes": head_changes(a, b, diffs),
        "largest_differences": largest.reset_index(drop=True),
        "role_changes": _role_changes(a, b),
        "measure_differences": summary,
        "head_differences": head_top.reset_index(drop=True),
        "differences": diffs,
    }
    comparison.grids = _grids(diffs, layers, heads)
    return comparison
