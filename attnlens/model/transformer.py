"""Transformer blocks and the whole HookedTransformer."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from attnlens.errors import ConfigError, DataError
from attnlens.hooks import HookedModule, HookPoint
from attnlens.model.attention import (
    MultiHeadAttention,
    additive_attention_mask,
    sliding_window_mask,
)
from attnlens.model.config import TransformerConfig
from attnlens.model.layers import MLP, FirstTokenHead, LMHead, MaskedLMHead, make_norm
from attnlens.model.masks import AttentionMask, mask_from_parts
from attnlens.model.protocol import AttentionLayer
from attnlens.model.query_blocks import QueryBlocks
from attnlens.model.relative import RelativePositionBias
from attnlens.model.token_maps import TokenMaps, own_token_maps

ReturnType = Literal["auto", "hidden", "logits", "pooled"]


class TransformerBlock(nn.Module):
    """Attention + MLP with pre- or post-norm; skip connections, MLP and norms switchable.

    With ``cfg.cross_attention`` (decoders of encoder-decoder models) a cross-attention
    sub-layer ``cross_attn`` (queries from the decoder, keys and values from the encoder's
    output) sits between self-attention and the MLP, with its own norm ``ln_cross`` and hooks
    ``hook_cross_attn_out`` and ``hook_resid_mid_cross`` (the residual after it).
    """

    def __init__(self, cfg: TransformerConfig, layer: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.layer = layer
        self.ln1 = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps, cfg.use_norm)
        self.attn = MultiHeadAttention(
            d_in=cfg.d_model,
            n_heads=cfg.heads_per_layer[layer],
            d_head=cfg.d_head,
            n_kv_heads=cfg.kv_heads_per_layer[layer],
            qkv_bias=cfg.qkv_bias,
            out_bias=cfg.attn_out_bias,
            causal=cfg.causal,
            scale=cfg.layer_attn_scale(layer),
            rotary_dim=(cfg.rotary_dim or cfg.d_head) if cfg.positional == "rotary" else 0,
            rotary_base=cfg.rotary_base,
            rotary_scaling=cfg.rope_scaling if cfg.positional == "rotary" else None,
            upcast_scores=cfg.attn_upcast,
        )
        self.cross_attn = None
        if cfg.cross_attention:
            self.ln_cross = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps, cfg.use_norm)
            self.cross_attn = MultiHeadAttention(
                d_in=cfg.d_model,
                n_heads=cfg.n_heads,
                d_head=cfg.d_head,
                qkv_bias=cfg.qkv_bias,
                out_bias=cfg.attn_out_bias,
                scale=cfg.attn_scale,
            )
        self.use_mlp = cfg.use_mlp
        if cfg.use_mlp:
            self.ln2 = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps, cfg.use_norm)
            self.mlp = MLP(cfg.d_model, cfg.d_mlp, cfg.act, cfg.gated_mlp, cfg.mlp_bias)
        self.hook_resid_pre = HookPoint()  # [batch, pos, d_model]
        self.hook_attn_out = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_mid = HookPoint()  # [batch, pos, d_model]
        if cfg.cross_attention:
            self.hook_cross_attn_out = HookPoint()  # [batch, pos, d_model]
            self.hook_resid_mid_cross = HookPoint()  # [batch, pos, d_model]
        self.hook_mlp_out = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_post = HookPoint()  # [batch, pos, d_model]

    def forward(
        self,
        resid: torch.Tensor,
        mask: torch.Tensor | AttentionMask | None,
        positions: torch.Tensor | None,
        head_gate: torch.Tensor | None,
        encoder_out: torch.Tensor | None = None,
        cross_mask: torch.Tensor | None = None,
        cross_gate: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``encoder_out [batch, key_pos, d_model]`` feeds the cross-attention sub-layer (if
        any), masked by the additive ``cross_mask`` and gated by ``cross_gate [head]``."""
        pre = self.cfg.norm_position == "pre"
        skip = self.cfg.use_skip
        resid = self.hook_resid_pre(resid)
        attn_in = self.ln1(resid) if pre else resid
        attn_out = self.hook_attn_out(
            self.attn(attn_in, mask=mask, positions=positions, head_gate=head_gate)
        )
        mid = resid + attn_out if skip else attn_out
        mid = self.hook_resid_mid(mid if pre else self.ln1(mid))
        if self.cross_attn is not None:
            if encoder_out is None:
                raise ConfigError("a decoder block with cross-attention needs the encoder output.")
            cross_in = self.ln_cross(mid) if pre else mid
            cross_out = self.hook_cross_attn_out(
                self.cross_attn(cross_in, encoder_out, mask=cross_mask, head_gate=cross_gate)
            )
            mid = mid + cross_out if skip else cross_out
            mid = self.hook_resid_mid_cross(mid if pre else self.ln_cross(mid))
        if not self.use_mlp:
            return self.hook_resid_post(mid)
        mlp_out = self.hook_mlp_out(self.mlp(self.ln2(mid) if pre else mid))
        post = mid + mlp_out if skip else mlp_out
        return self.hook_resid_post(post if pre else self.ln2(post))


class HookedTransformer(HookedModule):
    """A transformer built from one ``TransformerConfig``, with hook points everywhere.

    ``forward(input_ids, attention_mask)`` returns the output head's logits when the model
    has an LM/MLM/classifier head, otherwise the final hidden states ``[batch, pos, d_model]``.
    """

    backend = "native"
    tokenizer = None  # set by ``attnlens.load``

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_embed = (
            nn.Embedding(cfg.n_ctx, cfg.d_model) if cfg.positional == "learned" else None
        )
        self.type_embed = (
            nn.Embedding(cfg.n_token_types, cfg.d_model) if cfg.n_token_types else None
        )
        self.embed_norm = (
            make_norm(cfg.norm, cfg.d_model, cfg.norm_eps) if cfg.embed_norm else nn.Identity()
        )
        self.hook_embed = HookPoint()  # [batch, pos, d_model], the input of block 0
        self.rel_pos_bias = (
            RelativePositionBias(
                cfg.relative_buckets, cfg.n_heads, cfg.relative_max_distance, not cfg.causal
            )
            if cfg.positional == "relative"
            else None
        )
        self.blocks = nn.ModuleList(TransformerBlock(cfg, i) for i in range(cfg.n_layers))
        self.final_norm = (
            make_norm(cfg.norm, cfg.d_model, cfg.norm_eps, cfg.use_norm)
            if cfg.final_norm
            else nn.Identity()
        )
        self.head = self._make_head(cfg)
        self.setup_hooks()

    @staticmethod
    def _make_head(cfg: TransformerConfig) -> nn.Module | None:
        if cfg.head is None:
            return None
        if cfg.head == "mlm":
            return MaskedLMHead(cfg.d_model, cfg.vocab_size, cfg.head_act, cfg.norm_eps)
        if cfg.head == "lm":
            return LMHead(cfg.d_model, cfg.vocab_size, cfg.lm_head_bias)
        if cfg.head == "classifier":
            return FirstTokenHead(cfg.d_model, cfg.head_act, cfg.n_labels)
        if cfg.head == "pooler":
            return FirstTokenHead(cfg.d_model, "tanh")
        raise ConfigError(f"unknown head {cfg.head!r}.")

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    @property
    def n_layers(self) -> int:
        return self.cfg.n_layers

    @property
    def heads_per_layer(self) -> list[int]:
        return [block.attn.n_heads for block in self.blocks]

    @property
    def attention_layers(self) -> list[AttentionLayer]:
        """Every attention layer as a gate row (``AttentionModel``): self-attention only.

        A decoder stack's cross-attention is gated through ``cross_head_mask``; the
        encoder-decoder model that owns it lists those rows.
        """
        return [AttentionLayer("self", i, block.attn, f"blocks.{i}.attn.")
                for i, block in enumerate(self.blocks)]

    def weight_problems(self) -> dict[str, str]:
        """Nothing is missing: attnlens' own modules hold every weight."""
        return {}

    def token_maps(self) -> TokenMaps:
        """Token embedding, the causal-LM head's unembedding (None for other heads) and the
        final norm's gain (``attnlens.model.token_maps``)."""
        lm_head = self.head if self.cfg.head == "lm" else None
        return own_token_maps(self.embed, lm_head, self.final_norm, self.cfg.norm)

    @property
    def head_ids(self) -> list[list[int]]:
        """Each layer's heads by their original numbers (a structurally pruned layer keeps
        its heads' numbers: ``[0, 2, 5]``); tensors index heads by position in the layer."""
        if self.cfg.head_ids is not None:
            return [list(row) for row in self.cfg.head_ids]
        return [list(range(n)) for n in self.heads_per_layer]

    def set_use_sdpa(self, enabled: bool) -> None:
        """Force the manual attention path everywhere (False) or allow SDPA (True)."""
        for block in self.blocks:
            block.attn.use_sdpa = enabled

    @property
    def query_blocks(self) -> QueryBlocks:
        """How the hooked attention path splits long patterns (``model.query_blocks``)."""
        return self.blocks[0].attn.query_blocks if len(self.blocks) else QueryBlocks()

    def set_query_blocks(self, blocks: QueryBlocks) -> None:
        """Every self-attention's query-block settings (rows per block, whole-matrix limit)."""
        for block in self.blocks:
            block.attn.query_blocks = blocks

    def positions(
        self, input_ids: torch.Tensor | None, shape: tuple[int, int], device: torch.device
    ) -> torch.Tensor:
        """Position ids ``[batch, pos]`` as the source architecture numbers them."""
        batch, length = shape
        if self.cfg.positions_skip_padding:
            if input_ids is None:  # no ids to find padding in: every token is real
                return (torch.arange(1, length + 1, device=device) + self.cfg.position_offset
                        ).expand(batch, length)
            real = (input_ids != self.cfg.pad_token_id).long()
            return torch.cumsum(real, dim=1) * real + self.cfg.position_offset
        return (torch.arange(length, device=device) + self.cfg.position_offset).expand(
            batch, length
        )

    def embed_tokens(
        self,
        input_ids: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        positions: torch.Tensor,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = self.embed(input_ids) if inputs_embeds is None else inputs_embeds
        if self.cfg.embed_scale != 1.0:
            x = x * self.cfg.embed_scale
        if self.type_embed is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros(x.shape[:2], dtype=torch.long, device=x.device)
            x = x + self.type_embed(token_type_ids)
        if self.pos_embed is not None:
            if int(positions.max()) >= self.cfg.n_ctx:
                raise ConfigError(
                    f"input of {positions.shape[1]} tokens exceeds the model's "
                    f"{self.cfg.n_ctx} positions; use a smaller max length."
                )
            x = x + self.pos_embed(positions)
        return self.hook_embed(self.embed_norm(x))

    def layer_masks(
        self, mask: torch.Tensor | AttentionMask | None, length: int
    ) -> list[torch.Tensor | AttentionMask | None]:
        """Each layer's self-attention mask: ``mask``, or with the layer's sliding window.

        One windowed mask is built per distinct window shorter than ``length`` and shared by
        its layers; layers without a window (and every layer of a short input) get ``mask``
        itself, so full-attention models build nothing extra. An ``AttentionMask`` gives
        windowed ``AttentionMask``s (rows built on demand, so query blocks respect windows).
        """
        windowed: dict[int, torch.Tensor | AttentionMask | None] = {}
        masks = []
        for layer in range(self.cfg.n_layers):
            window = self.cfg.layer_window(layer)
            if window is None or window >= length:
                masks.append(mask)
                continue
            if window not in windowed:
                windowed[window] = sliding_window_mask(mask, length, length, window)
            masks.append(windowed[window])
        return masks

    def _head_gates(self, head_mask: torch.Tensor | list | None, heads=None) -> list:
        if head_mask is None:
            return [None] * self.cfg.n_layers
        if len(head_mask) != self.cfg.n_layers:
            raise ConfigError(f"head_mask needs one row per layer ({self.cfg.n_layers}).")
        heads = self.heads_per_layer if heads is None else heads
        return [head_mask[i][: n] for i, n in enumerate(heads)]

    def _cross_inputs(self, encoder_out, encoder_mask, cross_head_mask, length: int):
        """(additive cross-attention mask, per-layer cross gates) for a decoder's blocks."""
        if not self.cfg.cross_attention:
            if encoder_out is not None or cross_head_mask is not None:
                raise ConfigError("this model has no cross-attention; it takes no encoder output.")
            return None, [None] * self.cfg.n_layers
        if encoder_out is None:
            raise ConfigError("a decoder with cross-attention needs encoder_hidden_states.")
        mask = additive_attention_mask(
            encoder_mask, length, encoder_out.shape[1], False, encoder_out.dtype,
            encoder_out.device,
        )
        heads = [block.cross_attn.n_heads for block in self.blocks]
        return mask, self._head_gates(cross_head_mask, heads)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        head_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        return_type: ReturnType = "auto",
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cross_head_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run the model on ``input_ids [batch, pos]`` (or ``inputs_embeds [batch, pos, d]``).

        ``attention_mask [batch, pos]`` is 1 for real tokens. ``head_mask [layer, head]``
        scales each head's output (a differentiable gate: 1 keeps, 0 removes a head).
        ``return_type``: "hidden" (final hidden states, after the final norm if any),
        "logits" (the output head), "pooled" (BERT's pooler), or "auto".
        Decoders with cross-attention also take the encoder's output
        ``encoder_hidden_states [batch, key_pos, d_model]``, its padding mask
        ``encoder_attention_mask [batch, key_pos]`` and ``cross_head_mask [layer, head]``.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ConfigError("pass exactly one of input_ids and inputs_embeds.")
        ref = input_ids if input_ids is not None else inputs_embeds
        batch, length = ref.shape[:2]
        if length == 0:
            raise DataError("the input has no tokens (the tokenizer gave none for this text: "
                            "none of its characters are in the vocabulary, and it adds no "
                            "special tokens); give a text the model's tokenizer covers.")
        if position_ids is None:
            position_ids = self.positions(input_ids, (batch, length), ref.device)
        resid = self.embed_tokens(input_ids, token_type_ids, position_ids, inputs_embeds)
        bias = None
        if self.rel_pos_bias is not None:
            def bias(start: int, stop: int) -> torch.Tensor:  # [1, head, rows, key_pos]
                return self.rel_pos_bias.rows(start, stop, length)
        # built by query rows when the attention works in blocks; whole (once) otherwise
        mask = mask_from_parts(
            attention_mask, length, length, self.cfg.causal, resid.dtype, resid.device, bias
        )
        masks = self.layer_masks(mask, length)
        cross_mask, cross_gates = self._cross_inputs(
            encoder_hidden_states, encoder_attention_mask, cross_head_mask, length
        )
        gates = self._head_gates(head_mask)
        for block, layer_mask, gate, cross_gate in zip(
            self.blocks, masks, gates, cross_gates, strict=True
        ):
            resid = block(resid, layer_mask, position_ids, gate, encoder_hidden_states,
                          cross_mask, cross_gate)
        hidden = self.final_norm(resid)
        if return_type == "hidden" or (
            return_type == "auto" and self.cfg.head in (None, "pooler")
        ):
            return hidden
        if self.head is None or (return_type == "pooled") != (self.cfg.head == "pooler"):
            raise ConfigError(
                f"return_type={return_type!r} needs a model with that head "
                f"(this one has head={self.cfg.head!r})."
            )
        return self.head(hidden)
