"""Positional heads (Voita et al. 2019): where, relative to itself, a token attends most.

Token level. For every real, non-special query token, the maximum-attention key among the
real tokens is classified by its offset ``key_pos - query_pos`` in -3..+3 (whatever the key
is: the previous token of the first word is [CLS]), else as ``special`` ([CLS]/[SEP] further
away) or ``farther``. Ties share the credit equally (1/k each for k tied maxima),
so uniform attention spreads over every target. A head is *positional* when one offset in
-3..+3 gets at least ``threshold`` (default 0.9) of the queries.
"""

from __future__ import annotations

import pandas as pd
import torch

from attnlens.analysis.base import Analyzer, Batch, pattern_hook_names
from attnlens.hooks import ActivationCache
from attnlens.model.transformer import HookedTransformer

OFFSETS = (-3, -2, -1, 0, 1, 2, 3)
TARGETS = (*(f"{o:+d}" for o in OFFSETS), "special", "farther")


class PositionalHeads(Analyzer):
    """Streaming counts of the maximum-attention offset per head."""

    name = "positional"

    def __init__(self, n_layers: int, n_heads: int, threshold: float = 0.9) -> None:
        self.n_layers, self.n_heads, self.threshold = n_layers, n_heads, threshold
        # credit per target except "farther" (the rest of each row)
        self.counts = torch.zeros(len(TARGETS) - 1, n_layers, n_heads, dtype=torch.float64)
        self.rows = 0

    @classmethod
    def for_model(cls, model: HookedTransformer, threshold: float = 0.9) -> PositionalHeads:
        return cls(model.n_layers, max(model.heads_per_layer), threshold)

    def hook_names(self, model: HookedTransformer) -> list[str]:
        return pattern_hook_names(model)

    def update(self, batch: Batch, cache: ActivationCache) -> None:
        real = batch.attention_mask.bool()  # [batch, pos]
        special = batch.special_mask if batch.special_mask is not None else torch.zeros_like(real)
        rows = (real & ~special).to(torch.float32)  # [batch, query_pos]
        length = real.shape[1]
        pos = torch.arange(length, device=real.device)
        # special keys per sentence, gathered as columns: [batch, n_special] (padded with 0)
        n_special = int((real & special).sum(1).max()) if length else 0
        order = (real & special).to(torch.int8).argsort(dim=1, descending=True, stable=True)
        special_cols = order[:, :n_special]  # [batch, n_special]
        is_special = (real & special).gather(1, special_cols)  # [batch, n_special]
        far = (special_cols[:, None, :] - pos[None, :, None]).abs() > max(OFFSETS)
        far_special = (far & is_special[:, None, :]).to(torch.float32)  # [batch, q, n_special]
        for layer in range(self.n_layers):
            p = cache["pattern", layer].float()  # [batch, head, query_pos, key_pos]
            n_heads = p.shape[1]
            # padding keys hold exactly 0 < a real row's maximum, so they never tie with it
            is_max = p == p.amax(-1, keepdim=True)  # [batch, head, query_pos, key_pos]
            credit = rows[:, None, :] / is_max.sum(-1).clamp_min(1)  # [batch, head, query_pos]
            counted = torch.zeros(len(TARGETS) - 1, n_heads, device=p.device)
            for t, o in enumerate(OFFSETS):
                hit = is_max.diagonal(offset=o, dim1=-2, dim2=-1)  # entries (q, q + o)
                share = credit[..., max(-o, 0) : length - max(o, 0)]  # the matching queries
                counted[t] = (hit * share).sum((0, 2))
            index = special_cols[:, None, None, :].expand(-1, n_heads, length, -1)
            on_special = is_max.gather(-1, index) * far_special[:, None]  # [b, head, q, n_sp]
            counted[-1] = (on_special.sum(-1) * credit).sum((0, 2))
            self.counts[:, layer, :n_heads] += counted.double().cpu()
        self.rows += int(rows.sum())

    def merge(self, other: PositionalHeads) -> PositionalHeads:
        self.counts += other.counts
        self.rows += other.rows
        return self

    def shares(self) -> torch.Tensor:
        """``[target, layer, head]`` share of queries per target (see ``TARGETS``)."""
        near = self.counts / max(self.rows, 1)
        farther = (1 - near.sum(0, keepdim=True)).clamp_min(0) if self.rows else near[:1] * 0
        return torch.cat([near, farther])

    def result(self) -> dict[str, pd.DataFrame]:
        shares = self.shares().numpy()
        offsets = [
            {
                "layer": layer,
                "head": head,
                "target": target,
                "share": float(shares[t, layer, head]),
            }
            for t, target in enumerate(TARGETS)
            for layer in range(self.n_layers)
            for head in range(self.n_heads)
        ]
        best = shares[: len(OFFSETS)].argmax(0)  # [layer, head]
        heads = []
        for layer in range(self.n_layers):
            for head in range(self.n_heads):
                b = int(best[layer, head])
                share = float(shares[b, layer, head])
                heads.append(
                    {
                        "layer": layer,
                        "head": head,
                        "best_offset": OFFSETS[b],
                        "share": share,
                        "positional": bool(self.rows and share >= self.threshold),
                        "tokens": self.rows,
                    }
                )
        return {
            "positional_offsets": pd.DataFrame.from_records(offsets),
            "positional_heads": pd.DataFrame.from_records(heads),
        }
