"""Silence one head with the differentiable head gate and see how a sentence embedding moves.

    python examples/ablate_head.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import attnlens
from attnlens.metrics.embeddings import sentence_embeddings


def main() -> None:
    model, tokenizer = attnlens.load()
    sentences = ["A man is playing a guitar.", "Someone plays an instrument."]
    with torch.no_grad():
        base = sentence_embeddings(model, tokenizer, sentences)
        print(f"cosine of the two sentences: {float(base[0] @ base[1]):.4f}")
        for layer, head in [(0, 0), (2, 5), (5, 11)]:
            gate = torch.ones(model.n_layers, max(model.heads_per_layer))
            gate[layer, head] = 0.0  # remove exactly this head's contribution
            moved = sentence_embeddings(model, tokenizer, sentences, head_mask=gate)
            drift = 1 - F.cosine_similarity(base, moved).mean()
            print(f"without head {layer}.{head}: embedding drift {float(drift):.2e}, "
                  f"pair cosine {float(moved[0] @ moved[1]):.4f}")


if __name__ == "__main__":
    main()
