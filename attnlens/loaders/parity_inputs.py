"""The inputs of a live parity check: a tiny random Hugging Face model saved to a folder, and
a right-padded batch of random ids (``verify`` and ``verify_seq2seq`` use them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

VOCAB = 101  # vocabulary size of every tiny model


def save_tiny(model_cls, config, path: Path, seed: int = 0):
    """Build ``model_cls(config)`` with random weights (eager attention), save it, return it."""
    torch.manual_seed(seed)
    config._attn_implementation = "eager"
    model = model_cls(config).eval()
    randomise(model)
    model.save_pretrained(str(path))
    return model


def randomise(model) -> None:
    """Weights large enough to make every part matter.

    HF initialises matrices with std 0.02, norms to 1 and biases to 0: activations then stay
    so small that, for example, GELU and its tanh approximation agree to 1e-7 and a wrong
    activation would pass. With std 0.3 matrices and perturbed norms and biases, attention
    patterns are far from uniform and every non-linearity works in its curved range.
    """
    with torch.no_grad():
        for name, param in model.named_parameters():
            is_norm = "norm" in name.lower() or "ln_" in name
            if is_norm and name.endswith("weight"):
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            elif param.dim() >= 2:
                param.normal_(0.0, 0.3)
            else:  # biases
                param.normal_(0.0, 0.1)


@dataclass
class PaddedBatch:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor

    def inputs(self) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask}


def padded_batch(
    lengths=(9, 6, 3), pad_id: int = 0, vocab: int = VOCAB, low: int = 5, seed: int = 1
) -> PaddedBatch:
    """Random ids in ``[low, vocab)``; right padding with ``pad_id`` to the longest length."""
    gen = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.randint(low, vocab, (len(lengths), width), generator=gen)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    ids = ids.masked_fill(mask == 0, pad_id)
    return PaddedBatch(ids, mask)
