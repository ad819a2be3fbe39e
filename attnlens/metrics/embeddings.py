"""Sentence embeddings: mean pooling over real tokens, L2-normalised (sentence-transformers)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from attnlens.data.text import length_sorted_chunks
from attnlens.model.transformer import HookedTransformer


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``hidden [batch, pos, d_model]`` averaged over real tokens -> ``[batch, d_model]``."""
    weights = attention_mask.to(hidden.dtype)[..., None]  # [batch, pos, 1]
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1e-9)


def sentence_embeddings(
    model: HookedTransformer,
    tokenizer,
    sentences: Sequence[str],
    batch_size: int = 32,
    max_length: int = 256,
    head_mask: torch.Tensor | None = None,
    normalize: bool = True,
    progress: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """Embeddings ``[n, d_model]`` in input order; gradients flow if enabled by the caller.

    ``progress(n)`` is called after each batch with its number of sentences.
    """
    out = torch.empty(len(sentences), model.cfg.d_model, dtype=model.dtype, device=model.device)
    for chunk in length_sorted_chunks([len(s) for s in sentences], batch_size):
        enc = tokenizer([sentences[i] for i in chunk], max_length=max_length)
        enc = {k: v.to(model.device) for k, v in enc.items()}
        hidden = model(**enc, head_mask=head_mask, return_type="hidden")
        pooled = mean_pool(hidden, enc["attention_mask"])
        out[torch.tensor(chunk, device=model.device)] = (
            F.normalize(pooled, dim=-1) if normalize else pooled
        )
        if progress is not None:
            progress(len(chunk))
    return out
