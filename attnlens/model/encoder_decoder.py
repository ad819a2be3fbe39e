"""Encoder-decoder transformers (BART, Marian, T5): an encoder stack and a decoder stack.

Both stacks are ``HookedTransformer``s; the decoder's blocks carry a cross-attention
sub-layer (``TransformerConfig.cross_attention``). Hook names are the stacks' names under
``encoder.`` and ``decoder.``: ``encoder.blocks.L.attn.hook_pattern`` (encoder
self-attention), ``decoder.blocks.L.attn.hook_pattern`` (causal decoder self-attention) and
``decoder.blocks.L.cross_attn.hook_pattern`` (decoder queries over encoder keys).

Head gates cover the three attention types. For the pruning machinery the model presents one
*gate row* per attention layer, in the order encoder layers, decoder self-attention layers,
cross-attention layers (``attention_layers``): ``head_mask [row, head]`` and ``n_layers``,
``heads_per_layer`` and ``blocks`` count those rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from attnlens.errors import ConfigError
from attnlens.hooks import HookedModule
from attnlens.model.config import TransformerConfig
from attnlens.model.layers import LMHead
from attnlens.model.protocol import AttentionLayer
from attnlens.model.token_maps import TokenMaps, own_token_maps
from attnlens.model.transformer import HookedTransformer

AttentionType = Literal["encoder", "decoder", "cross"]
# Gate-row order and the order of every per-type table.
ATTENTION_TYPES: tuple[str, ...] = ("encoder", "decoder", "cross")


@dataclass
class EncoderDecoderConfig:
    """Architecture of an ``EncoderDecoderTransformer``: two stack configs and the LM head."""

    encoder: TransformerConfig
    # The decoder stack: causal, with cross-attention, no output head of its own.
    decoder: TransformerConfig
    vocab_size: int
    # "lm": logits over the vocabulary from the decoder's output; None: hidden states only.
    head: Literal["lm"] | None = None
    # BART and Marian add ``final_logits_bias`` to the logits.
    lm_head_bias: bool = False
    # T5 multiplies the decoder's output by d_model ** -0.5 before a tied LM head.
    head_input_scale: float = 1.0
    # First decoder input when the decoder reads the source shifted right (teacher forcing).
    decoder_start_token_id: int = 0
    pad_token_id: int | None = None
    # Free-form provenance (HF model_type, checkpoint path); not used by forward().
    source: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.decoder.cross_attention or not self.decoder.causal:
            raise ConfigError("the decoder stack of an encoder-decoder model must be causal "
                              "and have cross-attention.")
        if self.encoder.cross_attention or self.encoder.causal:
            raise ConfigError("the encoder stack must be bidirectional, without cross-attention.")
        if self.encoder.d_model != self.decoder.d_model:
            raise ConfigError("encoder and decoder widths differ; cross-attention needs one.")

    @property
    def d_model(self) -> int:
        return self.decoder.d_model

    # Gate rows, as the model counts them: encoder layers, decoder self-attention layers, then
    # cross-attention layers (run records and reports read these as for a single stack).
    @property
    def n_layers(self) -> int:
        return self.encoder.n_layers + 2 * self.decoder.n_layers

    @property
    def heads_per_layer(self) -> list[int]:
        decoder = list(self.decoder.heads_per_layer)
        return [*self.encoder.heads_per_layer, *decoder, *decoder]

    @property
    def n_heads(self) -> int:
        return max(self.heads_per_layer)

    # Read by export and the rank-collapse switches (both stacks share them).
    @property
    def use_skip(self) -> bool:
        return self.encoder.use_skip and self.decoder.use_skip

    @property
    def use_mlp(self) -> bool:
        return self.encoder.use_mlp and self.decoder.use_mlp

    @property
    def use_norm(self) -> bool:
        return self.encoder.use_norm and self.decoder.use_norm

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def shift_right(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None, start_id: int, pad_id: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forcing decoder inputs for target ``input_ids [batch, pos]``.

    A sentence of ``k`` real tokens ``t_0 .. t_{k-1}`` gives the ``k`` decoder inputs
    ``[start, t_0, ..., t_{k-2}]`` (input ``p`` predicts ``t_p``; the last token predicts
    nothing and is dropped), so the decoder's mask is the source's. Hugging Face's
    ``shift_tokens_right`` keeps ``t_{k-1}`` in padded rows; the predictions of real target
    positions are the same either way (the decoder is causal).
    """
    fill = pad_id if pad_id is not None else start_id
    ids = input_ids.new_full(input_ids.shape, fill)
    ids[:, 1:] = input_ids[:, :-1]
    ids[:, 0] = start_id
    if attention_mask is None:
        return ids, torch.ones_like(input_ids)
    return ids.masked_fill(attention_mask == 0, fill), attention_mask


class EncoderDecoderTransformer(HookedModule):
    """Encoder stack + decoder stack with cross-attention + optional LM head, hooked.

    ``forward(input_ids, attention_mask, decoder_input_ids, decoder_attention_mask)`` returns
    logits ``[batch, target_pos, vocab]`` (or the decoder's hidden states). Without decoder
    inputs the decoder reads the source shifted right (``shift_right``), as BART does.
    """

    backend = "native"
    tokenizer = None  # set by ``attnlens.load``

    def __init__(self, cfg: EncoderDecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = HookedTransformer(cfg.encoder)
        self.decoder = HookedTransformer(cfg.decoder)
        self.head = (
            LMHead(cfg.d_model, cfg.vocab_size, cfg.lm_head_bias) if cfg.head == "lm" else None
        )
        self.setup_hooks()

    def setup_hooks(self) -> None:
        """Name every hook point from this model; the stacks key theirs by the same names.

        Also re-ties embeddings loaded as one tensor (the loader calls this after
        ``load_state_dict``), so that they are one parameter, counted and trained once.
        """
        super().setup_hooks()
        for stack in (self.encoder, self.decoder):
            stack.hook_dict = {hp.name: hp for hp in stack.hook_dict.values()}
        self._tie_shared_embeddings()

    def _tie_shared_embeddings(self) -> None:
        shared = self.encoder.embed.weight
        users = [self.decoder.embed] + ([self.head.decoder] if self.head is not None else [])
        for module in users:
            weight = module.weight
            if (weight is not shared and weight.shape == shared.shape and weight.device.type
                    != "meta" and weight.data_ptr() == shared.data_ptr()):
                module.weight = shared

    # Facts ---------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.encoder.device

    @property
    def dtype(self) -> torch.dtype:
        return self.encoder.dtype

    @property
    def attention_layers(self) -> list[AttentionLayer]:
        """Every attention layer in gate-row order: encoder, decoder self, cross."""
        rows = [AttentionLayer("encoder", i, b.attn, f"encoder.blocks.{i}.attn.")
                for i, b in enumerate(self.encoder.blocks)]
        rows += [AttentionLayer("decoder", i, b.attn, f"decoder.blocks.{i}.attn.")
                 for i, b in enumerate(self.decoder.blocks)]
        rows += [AttentionLayer("cross", i, b.cross_attn, f"decoder.blocks.{i}.cross_attn.")
                 for i, b in enumerate(self.decoder.blocks)]
        return rows

    @property
    def blocks(self) -> list[AttentionLayer]:
        """The gate rows (each has ``.attn``), for code that walks a model's attention layers."""
        return self.attention_layers

    @property
    def n_layers(self) -> int:
        """Number of gate rows (encoder + decoder self + cross attention layers)."""
        return self.cfg.encoder.n_layers + 2 * self.cfg.decoder.n_layers

    @property
    def heads_per_layer(self) -> list[int]:
        return [row.attn.n_heads for row in self.attention_layers]

    def gate_hook_names(self) -> list[str]:
        """The ``hook_z`` of each gate row (per-example gates scale heads there)."""
        return [row.hook_prefix + "hook_z" for row in self.attention_layers]

    def weight_problems(self) -> dict[str, str]:
        """Nothing is missing: attnlens' own modules hold every weight."""
        return {}

    def token_maps(self) -> TokenMaps:
        """The decoder's token maps: the shared embedding, the LM head and the decoder's
        final norm (``attnlens.model.token_maps``)."""
        decoder = self.decoder
        return own_token_maps(decoder.embed, self.head, decoder.final_norm, decoder.cfg.norm)

    def set_use_sdpa(self, enabled: bool) -> None:
        self.encoder.set_use_sdpa(enabled)
        self.decoder.set_use_sdpa(enabled)
        for block in self.decoder.blocks:
            block.cross_attn.use_sdpa = enabled

    # Forward -------------------------------------------------------------------------------
    def split_head_mask(self, head_mask: torch.Tensor | None) -> tuple:
        """``head_mask [row, head]`` -> (encoder, decoder self, cross) masks, or Nones."""
        if head_mask is None:
            return None, None, None
        if len(head_mask) != self.n_layers:
            raise ConfigError(
                f"head_mask needs one row per attention layer ({self.n_layers}: encoder, "
                "decoder self-attention, then cross-attention layers)."
            )
        n_enc, n_dec = self.cfg.encoder.n_layers, self.cfg.decoder.n_layers
        return head_mask[:n_enc], head_mask[n_enc : n_enc + n_dec], head_mask[n_enc + n_dec :]

    def decoder_token_ids(self) -> tuple[int, int | None]:
        """(decoder start id, pad id): what the decoder reads a source shifted right with."""
        return self.cfg.decoder_start_token_id, self.cfg.pad_token_id

    def decoder_inputs(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The decoder's teacher-forcing inputs when it reads the source itself."""
        return shift_right(input_ids, attention_mask, self.cfg.decoder_start_token_id,
                           self.cfg.pad_token_id)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        head_mask: torch.Tensor | None = None,
        return_type: str = "auto",
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Encode ``input_ids [batch, src_pos]``, decode ``decoder_input_ids [batch, tgt_pos]``.

        ``return_type``: "logits" (the LM head), "hidden" (the decoder's final hidden states),
        "encoder" (the encoder's), or "auto" (logits when there is a head).
        """
        if input_ids is None:
            raise ConfigError("an encoder-decoder model needs input_ids for its encoder.")
        if token_type_ids is not None and bool(token_type_ids.any()):
            raise ConfigError("encoder-decoder models take no segment (token type) ids.")
        enc_gate, dec_gate, cross_gate = self.split_head_mask(head_mask)
        encoded = self.encoder(input_ids, attention_mask, head_mask=enc_gate,
                               return_type="hidden")
        if return_type == "encoder":
            return encoded
        if decoder_input_ids is None:
            decoder_input_ids, decoder_attention_mask = self.decoder_inputs(
                input_ids, attention_mask
            )
        hidden = self.decoder(
            decoder_input_ids, decoder_attention_mask, head_mask=dec_gate, return_type="hidden",
            encoder_hidden_states=encoded, encoder_attention_mask=attention_mask,
            cross_head_mask=cross_gate,
        )
        if return_type == "hidden" or (return_type == "auto" and self.head is None):
            return hidden
        if return_type not in ("auto", "logits") or self.head is None:
            raise ConfigError(
                f"return_type={return_type!r} needs a model with that output "
                f"(this one has head={self.cfg.head!r}); use logits, hidden or encoder."
            )
        if self.cfg.head_input_scale != 1.0:
            hidden = hidden * self.cfg.head_input_scale
        return self.head(hidden)


def build_model(cfg: TransformerConfig | EncoderDecoderConfig) -> nn.Module:
    """The model class a config describes."""
    if isinstance(cfg, EncoderDecoderConfig):
        return EncoderDecoderTransformer(cfg)
    return HookedTransformer(cfg)


def is_encoder_decoder(model: object) -> bool:
    return isinstance(model, EncoderDecoderTransformer)
