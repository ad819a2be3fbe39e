"""The one configuration dataclass behind ``HookedTransformer``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from attnlens.errors import ConfigError

Activation = Literal["gelu", "gelu_new", "relu", "silu", "tanh"]


@dataclass
class TransformerConfig:
    """Architecture of a HookedTransformer; loaders fill it from a Hugging Face config."""

    d_model: int
    n_layers: int
    n_heads: int
    d_mlp: int
    vocab_size: int
    # None: d_model // n_heads, the usual split of the model width across heads.
    d_head: int | None = None
    # None: same as n_heads (plain MHA). Fewer: grouped-query / multi-query attention.
    n_kv_heads: int | None = None
    # Per-layer head counts after structural pruning; None: n_heads everywhere.
    heads_per_layer: list[int] | None = None
    kv_heads_per_layer: list[int] | None = None
    # The original numbers of each layer's heads after structural pruning (a pruned head
    # keeps its number in every table); None: 0 .. heads_per_layer[layer] - 1.
    head_ids: list[list[int]] | None = None
    # Learned absolute positions (BERT, GPT-2), rotary (Llama), T5's bucketed relative
    # position bias added to the scores ("relative"), or none.
    positional: Literal["learned", "rotary", "relative", "none"] = "learned"
    n_ctx: int = 512
    # RoBERTa numbers positions from pad_token_id + 1 and skips padding tokens.
    position_offset: int = 0
    positions_skip_padding: bool = False
    rotary_base: float = 10000.0
    # T5's relative position buckets (half per direction when bidirectional) and the distance
    # from which every offset shares the last bucket; the direction follows ``causal``.
    relative_buckets: int = 32
    relative_max_distance: int = 128
    # Sliding attention window (Mistral): attnlens computes full attention, so inputs longer
    # than the window, where the two differ, are refused. None: no window.
    sliding_window: int | None = None
    # None: rotate the whole head (Llama); smaller: partial rotary (GPT-NeoX style).
    rotary_dim: int | None = None
    # Token embeddings are multiplied by this (BART's scale_embedding, Marian: sqrt(d_model)).
    embed_scale: float = 1.0
    # 0: no segment embeddings (GPT-2, RoBERTa has 1, BERT 2).
    n_token_types: int = 0
    # BERT/RoBERTa/DistilBERT normalise the embedding sum; GPT-2 and Llama do not.
    embed_norm: bool = False
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    norm_eps: float = 1e-5
    # "post": x = norm(x + f(x)) as in BERT; "pre": x = x + f(norm(x)) as in GPT-2 and Llama.
    norm_position: Literal["pre", "post"] = "post"
    final_norm: bool = False
    act: Activation = "gelu"
    gated_mlp: bool = False
    qkv_bias: bool = True
    attn_out_bias: bool = True
    mlp_bias: bool = True
    causal: bool = False
    # Decoder of an encoder-decoder model: every block also attends to the encoder's output
    # (a cross-attention sub-layer between self-attention and the MLP).
    cross_attention: bool = False
    # None: 1 / sqrt(d_head).
    attn_scale: float | None = None
    pad_token_id: int | None = None
    # Output head: None (encoder only), "mlm", "lm" or "classifier"; "pooler" keeps BERT's pooler.
    head: Literal["mlm", "lm", "classifier", "pooler"] | None = None
    n_labels: int = 0
    head_act: Activation = "gelu"
    tie_word_embeddings: bool = False
    lm_head_bias: bool = False
    # Switches for the rank-collapse study: they remove parts of every block.
    use_skip: bool = True
    use_mlp: bool = True
    use_norm: bool = True
    # Free-form provenance (HF model_type, checkpoint path); not used by forward().
    source: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.d_head is None:
            if self.d_model % self.n_heads:
                raise ConfigError(
                    f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                    "set d_head."
                )
            self.d_head = self.d_model // self.n_heads
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(
                f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}."
            )
        if self.heads_per_layer is None:
            self.heads_per_layer = [self.n_heads] * self.n_layers
        if self.kv_heads_per_layer is None:
            self.kv_heads_per_layer = [
                h * self.n_kv_heads // self.n_heads for h in self.heads_per_layer
            ]
        if len(self.heads_per_layer) != self.n_layers:
            raise ConfigError("heads_per_layer must have one entry per layer.")
        if self.head_ids is not None:
            self.head_ids = [[int(h) for h in row] for row in self.head_ids]
            if [len(row) for row in self.head_ids] != list(self.heads_per_layer) or any(
                row != sorted(set(row)) or (row and row[0] < 0) for row in self.head_ids
            ):
                raise ConfigError("head_ids must list each layer's heads_per_layer original "
                                  "head numbers, increasing and distinct.")
        if self.positional == "relative" and any(h != self.n_heads for h in self.heads_per_layer):
            raise ConfigError(
                "a relative position bias is shared by every layer's heads; layers with "
                "removed heads (structural pruning) are not supported for such models."
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
