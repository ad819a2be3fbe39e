"""Grouped-query attention in a report: which key/value head each query head shares.

In a model with grouped-query (or multi-query) attention, query head ``h`` of a layer with
``H`` query heads and ``K`` key/value heads reads key/value head ``h // (H / K)``.
``add_kv_head_columns`` gives every per-head table of such a model a ``kv_head`` column right
after ``head`` (models whose every head has its own keys and values get none: it would
repeat ``head``).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd


def kv_head_of(heads_per_layer: Sequence[int], kv_heads_per_layer: Sequence[int],
               layer: int, head: int) -> int:
    """The key/value head query head ``head`` of ``layer`` shares."""
    heads, kv = int(heads_per_layer[layer]), int(kv_heads_per_layer[layer])
    return head // max(1, heads // max(kv, 1))


def grouped(heads_per_layer: Sequence[int] | None,
            kv_heads_per_layer: Sequence[int] | None) -> bool:
    """True when some layer has fewer key/value heads than query heads."""
    return bool(heads_per_layer and kv_heads_per_layer) and any(
        k < h for h, k in zip(heads_per_layer, kv_heads_per_layer, strict=False))


def add_kv_head_column(table: pd.DataFrame, heads_per_layer: Sequence[int],
                       kv_heads_per_layer: Sequence[int]) -> pd.DataFrame:
    """``table`` with ``kv_head`` after ``head`` (rows of layers or heads the model lacks: -1)."""
    if not {"layer", "head"} <= set(table.columns) or "kv_head" in table.columns:
        return table

    def one(layer, head) -> int:
        try:
            layer, head = int(layer), int(head)
        except (TypeError, ValueError):
            return -1
        if not 0 <= layer < len(heads_per_layer) or head < 0:
            return -1
        return kv_head_of(heads_per_layer, kv_heads_per_layer, layer, head)

    values = [one(layer, head) for layer, head in zip(table["layer"], table["head"], strict=True)]
    out = table.copy()
    out.insert(list(out.columns).index("head") + 1, "kv_head", values)
    return out
