"""Cache every attention pattern of the embedded MiniLM and print each layer's most focused head.

    python examples/attention_patterns.py "The cat sat on the mat because it was warm."
"""

from __future__ import annotations

import sys

import torch

import attnlens


def main(sentence: str) -> None:
    model, tokenizer = attnlens.load()
    batch = tokenizer([sentence])
    tokens = tokenizer.decode_tokens(batch["input_ids"][0])
    with torch.no_grad():
        _, cache = model.run_with_cache(**batch, names_filter=lambda n: n.endswith("hook_pattern"))
    for layer in range(model.n_layers):
        pattern = cache["pattern", layer][0]  # [head, query_pos, key_pos]
        confidence = pattern.amax(dim=-1).mean(dim=-1)  # [head]
        head = int(confidence.argmax())
        targets = pattern[head].argmax(dim=-1)  # [query_pos]
        arrows = ", ".join(f"{tokens[i]}->{tokens[int(j)]}" for i, j in enumerate(targets[:6]))
        print(f"layer {layer} head {head:2d} confidence {confidence[head]:.2f}: {arrows}, ...")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "The cat sat on the mat because it was warm.")
