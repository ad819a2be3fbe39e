"""Token-level attention statistics per layer and head.

Rows averaged over: real, non-special query tokens (so [CLS]/[SEP] rows do not dilute
confidence). Columns: real tokens only (padding gets zero weight anyway).

Measures (one row per layer/head/measure in the result):

- ``entropy``: mean entropy of a query's attention distribution, in nats;
- ``confidence``: mean maximum attention weight (Voita et al. 2019);
- ``distance``: mean attention distance ``sum_j p_ij |i - j|`` in tokens;
- ``to_cls`` / ``to_sep``: mean total weight on the first special token ([CLS], <s>, BOS)
  and on the separator/end tokens ([SEP], </s>, EOS).
"""

from __future__ import annotations

import pandas as pd
import torch

from attnlens.analysis.base import Analyzer, Batch, pattern_hook_names
from attnlens.hooks import ActivationCache
from attnlens.model.transformer import HookedTransformer

MEASURES = ("entropy", "confidence", "distance", "to_cls", "to_sep")


class AttentionStats(Analyzer):
    """Streaming per-head statistics of attention patterns."""

    name = "attention_stats"

    def __init__(self, n_layers: int, n_heads: int, cls_ids: set[int], sep_ids: set[int]) -> None:
        self.n_layers, self.n_heads = n_layers, n_heads
        self.cls_ids, self.sep_ids = set(cls_ids), set(sep_ids)
        self.sums = torch.zeros(len(MEASURES), n_layers, n_heads, dtype=torch.float64)
        self.rows = 0

    @classmethod
    def for_model(cls, model: HookedTransformer, tokenizer) -> AttentionStats:
        hf = tokenizer.hf
        cls_ids = {i for i in (hf.cls_token_id, hf.bos_token_id) if i is not None}
        sep_ids = {i for i in (hf.sep_token_id, hf.eos_token_id) if i is not None} - cls_ids
        return cls(model.n_layers, max(model.heads_per_layer), cls_ids, sep_ids)

    def hook_names(self, model: HookedTransformer) -> list[str]:
        return pattern_hook_names(model)

    def update(self, batch: Batch, cache: ActivationCache) -> None:
        real = batch.attention_mask.bool()  # [batch, pos]
        rows = real & ~batch.special_mask if batch.special_mask is not None else real
        ids = batch.input_ids
        is_cls = torch.isin(ids, torch.tensor(sorted(self.cls_ids), device=ids.device)) & real
        is_sep = torch.isin(ids, torch.tensor(sorted(self.sep_ids), device=ids.device)) & real
        length = ids.shape[1]
        pos = torch.arange(length, device=ids.device)
        distance = (pos[:, None] - pos[None, :]).abs().to(torch.float32)  # [query_pos, key_pos]
        row_weight = rows.to(torch.float32)[:, None, :]  # [batch, 1, query_pos]
        for layer in range(self.n_layers):
            p = cache["pattern", layer].float()  # [batch, head, query_pos, key_pos]
            n_heads = p.shape[1]
            per_row = torch.stack(
                [
                    -(p * torch.log(p.clamp_min(1e-30))).sum(-1),
                    p.amax(-1),
                    (p * distance).sum(-1),
                    (p * is_cls[:, None, None, :]).sum(-1),
                    (p * is_sep[:, None, None, :]).sum(-1),
                ]
            )  # [measure, batch, head, query_pos]
            totals = (per_row * row_weight).sum(dim=(1, 3))  # [measure, head]
            self.sums[:, layer, :n_heads] += totals.double().cpu()
        self.rows += int(rows.sum())

    def merge(self, other: AttentionStats) -> AttentionStats:
        self.sums += other.sums
        self.rows += other.rows
        return self

    def result(self) -> dict[str, pd.DataFrame]:
        means = (self.sums / max(self.rows, 1)).numpy()
        records = [
            {"layer": layer, "head": head, "measure": name, "value": float(means[m, layer, head])}
            for m, name in enumerate(MEASURES)
            for layer in range(self.n_layers)
            for head in range(self.n_heads)
        ]
        return {"attention_stats": pd.DataFrame.from_records(records)}
