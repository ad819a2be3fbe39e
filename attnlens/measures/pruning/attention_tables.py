"""Pruning an encoder-decoder model: which attention type's heads go first.

Michel et al. (2019) and Voita et al. (2019) found that cross-attention (decoder queries over
encoder keys) depends most on having several heads. Two tables answer that for a run:

- ``prune_by_attention``: after every step of every curve, how many heads of each attention
  type are gone (``removed``), of how many (``heads``), and the share;
- ``prune_attention_first``: per order (scores of its first scoring, seed 0), where each type's
  heads sit in the order: ``mean_rank`` (0 = the first head removed, 1 = the last) and how
  many of the first quarter of heads removed are of that type, beside the count expected if
  types were mixed evenly.
"""

from __future__ import annotations

import pandas as pd

from attnlens.model.gates import parse_heads

TYPE_COLUMNS = ["attention", "layer"]


def gate_rows(model) -> list[tuple[str, int]]:
    """(attention type, layer in its stack) of every gate row of an encoder-decoder model."""
    return [(row.attention, row.layer) for row in model.attention_layers]


def removed_by_attention(model, curve: pd.DataFrame) -> pd.DataFrame:
    """Cumulative heads removed per attention type after each step of each curve."""
    rows = gate_rows(model)
    heads = {}
    for (attention, _), n in zip(rows, model.heads_per_layer, strict=True):
        heads[attention] = heads.get(attention, 0) + n
    records = []
    for (order, seed), part in curve.groupby(["order", "seed"], sort=False):
        gone = dict.fromkeys(heads, 0)
        for step, text in zip(part["step"], part["heads_removed"], strict=True):
            for row, _ in parse_heads(text):
                gone[rows[row][0]] += 1
            for attention, n in heads.items():
                records.append({"order": order, "seed": seed, "step": int(step),
                                "attention": attention, "removed": gone[attention],
                                "heads": n, "fraction_removed": gone[attention] / n})
    return pd.DataFrame.from_records(records)


def attention_first(model, scores: pd.DataFrame) -> pd.DataFrame:
    """Where each attention type's heads sit in each order (see the module docstring)."""
    rows = gate_rows(model)
    first = scores[(scores["seed"] == 0) & (scores["scored_after_step"] == 0)]
    records = []
    for order, part in first.groupby("order", sort=False):
        ranked = part.sort_values(["score", "layer", "head"], kind="stable").reset_index()
        n = len(ranked)
        quarter = max(1, round(n / 4))
        ranked["attention"] = [rows[int(r)][0] for r in ranked["layer"]]
        ranked["rank"] = ranked.index / max(n - 1, 1)
        for attention, group in ranked.groupby("attention", sort=False):
            in_quarter = int((group.index < quarter).sum())
            records.append({
                "order": order, "attention": attention, "heads": len(group),
                "mean_rank": float(group["rank"].mean()),
                "first_quarter": in_quarter,
                "first_quarter_if_even": quarter * len(group) / n,
            })
    table = pd.DataFrame.from_records(records)
    return table.sort_values(["order", "mean_rank"], ignore_index=True) if len(table) else table


def describe_rows(model) -> pd.DataFrame:
    """Gate row -> attention type and layer: how to read ``layer`` in the pruning tables."""
    return pd.DataFrame([{"row": i, "attention": a, "layer": layer}
                         for i, (a, layer) in enumerate(gate_rows(model))])
