"""Singular values of each head's QK (W_Q W_K^T) and OV (W_V W_O) without forming them.

    python examples/factored_circuits.py
"""

from __future__ import annotations

import attnlens


def main() -> None:
    model, _ = attnlens.load()
    for layer, block in enumerate(model.blocks):
        qk, ov = block.attn.QK, block.attn.OV  # FactoredMatrix [head, d_model, d_model]
        qk_rank = qk.effective_rank()  # [head]
        ov_rank = ov.effective_rank()
        print(f"layer {layer}: QK effective rank {qk_rank.min():.1f}-{qk_rank.max():.1f}, "
              f"OV effective rank {ov_rank.min():.1f}-{ov_rank.max():.1f} (of {qk.inner_dim})")


if __name__ == "__main__":
    main()
