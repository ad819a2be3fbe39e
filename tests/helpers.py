"""Small builders shared by the core tests."""

from __future__ import annotations

import torch

from attnlens.model.config import TransformerConfig
from attnlens.model.transformer import HookedTransformer


def tiny_config(**overrides) -> TransformerConfig:
    base = dict(
        d_model=16,
        n_layers=2,
        n_heads=4,
        d_mlp=32,
        vocab_size=50,
        n_ctx=32,
        n_token_types=2,
        embed_norm=True,
        pad_token_id=0,
    )
    base.update(overrides)
    return TransformerConfig(**base)


def tiny_model(seed: int = 0, **overrides) -> HookedTransformer:
    torch.manual_seed(seed)
    model = HookedTransformer(tiny_config(**overrides))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("bias", "b_Q", "b_K", "b_V", "b_O")):
                p.normal_(std=0.1)
    return model.eval()


def tiny_inputs(batch: int = 3, length: int = 7, vocab: int = 50) -> dict[str, torch.Tensor]:
    ids = torch.randint(1, vocab, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, length - 2 :] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask}
