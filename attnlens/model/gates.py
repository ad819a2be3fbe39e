"""Head gates: the full mask, per-example gates through ``hook_z``, and head labels."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from attnlens.head_names import head_name
from attnlens.head_names import parse_heads as parse_head_list
from attnlens.model.protocol import gate_hook_names
from attnlens.model.transformer import HookedTransformer


def full_mask(model: HookedTransformer) -> torch.Tensor:
    """All-ones head mask ``[layer, head]`` in the model's dtype (zeros beyond a pruned layer)."""
    n_heads = max(model.heads_per_layer)
    mask = torch.zeros(model.n_layers, n_heads, dtype=model.dtype, device=model.device)
    for layer, n in enumerate(model.heads_per_layer):
        mask[layer, :n] = 1.0
    return mask


def heads_text(heads: Iterable[tuple[int, int]]) -> str:
    """Heads as space-separated ``L2H8`` names (the pruning tables' ``heads_removed`` cells)."""
    return " ".join(head_name(layer, head) for layer, head in heads)


def parse_heads(text: str) -> list[tuple[int, int]]:
    """Inverse of ``heads_text``; also reads the cells of older runs (``2.8``, ``2-8``), as
    the CLI reads heads. An empty (or missing) cell is no heads."""
    if not isinstance(text, str) or not text.strip():
        return []
    return parse_head_list(text, "heads_removed")


def gated_forward(
    model: HookedTransformer,
    inputs: dict[str, torch.Tensor],
    head_mask: torch.Tensor | None = None,
    row_gates: torch.Tensor | None = None,
    return_type: str = "auto",
) -> torch.Tensor:
    """Forward with a shared ``head_mask [layer, head]`` and/or per-row gates.

    ``row_gates [batch, layer, head]`` multiplies each head's output ``z`` row by row (at
    ``hook_z``, before the shared gate), so one backward pass yields every example's own
    gradient with respect to its gate: rows are independent in the forward pass.
    """
    if row_gates is None:
        return model(**inputs, head_mask=head_mask, return_type=return_type)
    hooks = []
    names = gate_hook_names(model)  # the hook_z of each gate row (encoder, decoder, cross)
    for layer, (n, name) in enumerate(zip(model.heads_per_layer, names, strict=True)):
        gate = row_gates[:, layer, :n]  # [batch, head]

        def scale(z: torch.Tensor, hook, gate: torch.Tensor = gate) -> torch.Tensor:
            return z * gate[:, None, :, None].to(z.dtype)  # z [batch, pos, head, d_head_v]

        hooks.append((name, scale))
    with model.hooks(fwd_hooks=hooks):
        return model(**inputs, head_mask=head_mask, return_type=return_type)
