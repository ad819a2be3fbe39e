"""Structural pruning of a model: physically remove heads' slices of W_Q, W_K, W_V, W_O.

The result is a smaller ``HookedTransformer`` whose ``cfg.heads_per_layer`` may differ per
layer, whose ``head_ids`` keep each head's original number, and whose outputs equal the
masked model's (a masked head adds nothing; ``b_O`` is kept). For grouped-query attention a
key/value head is shared by a group of query heads, so only whole groups can be removed: a
mask that prunes part of a group is refused. Lives with the model (not in ``pruning``) because
loading a checkpoint that records removed heads (``pruned_heads``) prunes it too.
"""

from __future__ import annotations

import copy

import torch

from attnlens.errors import ConfigError
from attnlens.model.head_views import KV_SIDE, QUERY_SIDE
from attnlens.model.transformer import HookedTransformer


def _kept_heads(model: HookedTransformer, head_mask: torch.Tensor) -> list[tuple[list, list]]:
    """Per layer: (kept query heads, kept key/value heads); checks GQA groups."""
    if head_mask.shape[0] != model.n_layers:
        raise ConfigError(f"head mask has {head_mask.shape[0]} layers; the model has "
                          f"{model.n_layers}.")
    kept = []
    for layer, block in enumerate(model.blocks):
        attn = block.attn
        row = head_mask[layer, : attn.n_heads].detach().cpu()
        bad = [h for h, v in enumerate(row.tolist()) if v not in (0.0, 1.0)]
        if bad:
            raise ConfigError(f"head L{layer}H{bad[0]} has gate {row[bad[0]].item():g}; "
                              "structural pruning needs a mask of 0 (remove) and 1 (keep).")
        keep_q = [h for h in range(attn.n_heads) if row[h] == 1.0]
        if not keep_q:
            raise ConfigError(f"the mask removes every head of layer {layer}; keep at least "
                              "one (--min-heads-per-layer 1).")
        size = attn.group_size
        keep_kv = []
        for group in range(attn.n_kv_heads):
            members = row[group * size : (group + 1) * size]
            if bool(members.any()) and not bool(members.all()):
                raise ConfigError(
                    f"layer {layer} shares key/value head {group} among query heads "
                    f"{group * size}..{(group + 1) * size - 1} and the mask removes only some "
                    "of them; grouped-query models can only lose whole groups."
                )
            if bool(members.all()):
                keep_kv.append(group)
        kept.append((keep_q, keep_kv))
    return kept


def prune_heads(model: HookedTransformer, head_mask: torch.Tensor) -> HookedTransformer:
    """A new model without the heads whose gate is 0 in ``head_mask [layer, head]``.

    The original model is left untouched. Heads keep their relative order and their
    numbers: ``model.head_ids`` of the result lists each layer's kept heads by their number
    in the unpruned model, which every table uses (``attnlens.model.head_ids``).
    """
    kept = _kept_heads(model, head_mask)
    cfg = copy.deepcopy(model.cfg)
    cfg.heads_per_layer = [len(q) for q, _ in kept]
    cfg.kv_heads_per_layer = [len(kv) for _, kv in kept]
    numbers = model.head_ids  # a pruned model pruned again keeps the first numbers
    cfg.head_ids = [[numbers[layer][h] for h in keep_q] for layer, (keep_q, _) in enumerate(kept)]
    state = {k: v.detach() for k, v in model.state_dict().items()}
    for layer, (keep_q, keep_kv) in enumerate(kept):
        prefix = f"blocks.{layer}.attn."
        for names, index in ((QUERY_SIDE, keep_q), (KV_SIDE, keep_kv)):
            for name in names:
                if prefix + name in state:
                    tensor = state[prefix + name]  # [head, ...]
                    state[prefix + name] = tensor[torch.tensor(index, device=tensor.device)]
    with torch.device("meta"):
        pruned = HookedTransformer(cfg)
    pruned.load_state_dict({k: v.clone() for k, v in state.items()}, strict=True, assign=True)
    pruned.setup_hooks()
    for block, original in zip(pruned.blocks, model.blocks, strict=True):
        block.attn.use_sdpa = original.attn.use_sdpa
    return pruned.to(device=model.device, dtype=model.dtype).eval()
