"""The one configuration dataclass behind ``HookedTransformer``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from attnlens.errors import ConfigError

Activation = Literal["gelu", "gelu_new", "relu", "silu", "tanh"]
RopeType = Literal["linear", "dynamic", "yarn", "llama3"]


@dataclass(frozen=True)
class RopeScaling:
    """A scaled rotary embedding (transformers' ``rope_parameters``), filled by the loaders.

    ``attnlens.model.rotary.inverse_frequencies`` applies it, with transformers' formulas:

    - ``linear``: every frequency divided by ``factor``;
    - ``dynamic`` (NTK): for a forward whose largest position is ``n - 1`` with
      ``n > original_max_positions``, the base becomes
      ``base * (factor * n / original_max_positions - (factor - 1)) ** (d / (d - 2))``;
      shorter inputs use the plain frequencies (so frequencies depend on the padded length);
    - ``llama3``: wavelengths longer than ``original_max_positions / low_freq_factor`` divided
      by ``factor``, shorter than ``original_max_positions / high_freq_factor`` kept, a smooth
      blend between;
    - ``yarn``: interpolated (``/ factor``) and extrapolated frequencies blended by a ramp
      between the dimensions that turn ``beta_fast`` and ``beta_slow`` times over
      ``original_max_positions``; cos and sin are multiplied by ``attention_factor``.

    ``original_max_positions``: the pre-training context (``llama3``, ``yarn``) or
    ``max_position_embeddings`` (``dynamic``); unused by ``linear``.
    """

    rope_type: RopeType
    factor: float
    original_max_positions: int | None = None
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float = 1.0
    truncate: bool = True


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
    # None: the plain rotary frequencies; else Llama 3 / linear / dynamic NTK / YaRN scaling.
    rope_scaling: RopeScaling | None = None
    # T5's relative position buckets (half per direction when bidirectional) and the distance
    # from which every offset shares the last bucket; the direction follows ``causal``.
    relative_buckets: int = 32
    relative_max_distance: int = 128
    # Sliding attention window (Mistral, Qwen2; causal models): query i sees keys
    # i - sliding_window + 1 .. i. None: no window. sliding_window_layers: the layers (from 0)
    # that use it (Qwen2's layer_types / max_window_layers); None: every layer.
    sliding_window: int | None = None
    sliding_window_layers: list[int] | None = None
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
    # GPT-2's scale_attn_by_inverse_layer_idx: layer l's scores are also divided by l + 1.
    attn_scale_by_inverse_layer: bool = False
    # GPT-2's reorder_and_upcast_attn: scores computed in (at least) float32 from upcast
    # queries and keys, whatever the weights' dtype; the same numbers in float32.
    attn_upcast: bool = False
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
        self._check_window()
        if self.positional == "relative" and any(h != self.n_heads for h in self.heads_per_layer):
            raise ConfigError(
                "a relative position bias is shared by every layer's heads; layers with "
                "removed heads (structural pruning) are not supported for such models."
            )

    def _check_window(self) -> None:
        if self.sliding_window is None:
            if self.sliding_window_layers is not None:
                raise ConfigError("sliding_window_layers needs a sliding_window.")
            return
        if self.sliding_window < 1:
            raise ConfigError(f"sliding_window must be at least 1, not {self.sliding_window}.")
        if not self.causal:
            raise ConfigError("a sliding attention window is supported for causal models only.")
        layers = self.sliding_window_layers or []
        if any(not 0 <= layer < self.n_layers for layer in layers):
            raise ConfigError(
                f"sliding_window_layers {layers} must be layers 0 .. {self.n_layers - 1}."
            )

    def layer_window(self, layer: int) -> int | None:
        """The sliding attention window of ``layer`` (None: full attention)."""
        if self.sliding_window_layers is None or layer in self.sliding_window_layers:
            return self.sliding_window
        return None

    def layer_attn_scale(self, layer: int) -> float | None:
        """The score scale of ``layer``'s self-attention (None: ``1 / sqrt(d_head)``)."""
        if not self.attn_scale_by_inverse_layer:
            return self.attn_scale
        # GPT-2 computes head_dim ** -0.5, then divides by the layer number from 1.
        scale = self.d_head**-0.5 if self.attn_scale is None else self.attn_scale
        return scale / float(layer + 1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
