"""Structural pruning: ``prune_heads`` (``attnlens.model.structural``) and parameter counts.

``prune_heads`` physically removes heads' slices of W_Q, W_K, W_V, W_O and biases; it lives
with the model, since loading a checkpoint that records removed heads prunes it too. This
module counts the parameters each head takes with it.
"""

from __future__ import annotations

import torch

from attnlens.model.structural import prune_heads
from attnlens.model.transformer import HookedTransformer

__all__ = ["head_parameter_counts", "prune_heads", "pruned_parameter_count"]


def head_parameter_counts(model: HookedTransformer) -> torch.Tensor:
    """Parameters removed with each query head ``[layer, head]`` (its kv share included).

    For grouped-query attention a key/value head's parameters are split evenly among the
    query heads of its group (they disappear together).
    """
    counts = torch.zeros(model.n_layers, max(model.heads_per_layer), dtype=torch.float64)
    for layer, block in enumerate(model.blocks):
        counts[layer, : block.attn.n_heads] = block.attn.head_parameter_count()
    return counts


def pruned_parameter_count(model: HookedTransformer, head_mask: torch.Tensor) -> int:
    """Parameters of ``prune_heads(model, head_mask)``, without building it."""
    total = sum(p.numel() for p in model.parameters())
    removed = (head_parameter_counts(model) * (head_mask.detach().cpu().double() == 0)).sum()
    return round(total - float(removed))
