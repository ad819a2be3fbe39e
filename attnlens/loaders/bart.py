"""BART converter (BartModel, BartForConditionalGeneration) and the BART-style layers.

BART is post-norm: each sub-layer is ``x = LayerNorm(x + f(x))``, in the decoder
self-attention, cross-attention (``encoder_attn``) and the MLP (``fc1``/``fc2``). Both stacks
read the shared token embedding (times ``sqrt(d_model)`` with ``scale_embedding``), add
learned positions numbered from 2 (``BartLearnedPositionalEmbedding`` offset) and normalise
the sum (``layernorm_embedding``). The LM head is tied to the shared embedding and adds
``final_logits_bias``.
"""

from __future__ import annotations

import math

import torch

from attnlens.errors import UnsupportedArchitectureError, WeightMismatchError
from attnlens.loaders.weights import (
    WeightReader,
    heads_to_linear,
    heads_to_out_linear,
    linear_to_heads,
    out_linear_to_heads,
)
from attnlens.model.config import TransformerConfig
from attnlens.model.encoder_decoder import EncoderDecoderConfig

HEAD_BY_ARCHITECTURE = {"BartModel": None, "BartForConditionalGeneration": "lm"}
ARCHITECTURE_BY_HEAD = {head: arch for arch, head in HEAD_BY_ARCHITECTURE.items()}
# BartLearnedPositionalEmbedding numbers positions from this offset.
POSITION_OFFSET = 2
# HF activation names -> attnlens' (Marian checkpoints say "swish").
ACTIVATION_NAMES = {"swish": "silu", "gelu_python": "gelu"}
# Sub-layers: attnlens name -> checkpoint name; per attention: q/k/v/out projections.
ATTENTIONS = (("attn", "self_attn"), ("cross_attn", "encoder_attn"))
NORMS = (("ln1", "self_attn_layer_norm"), ("ln_cross", "encoder_attn_layer_norm"),
         ("ln2", "final_layer_norm"))
PROJECTIONS = (("Q", "q_proj"), ("K", "k_proj"), ("V", "v_proj"))


def activation_name(hf: dict) -> str:
    name = hf.get("activation_function", "gelu")
    return ACTIVATION_NAMES.get(name, name)


def check_seq2seq_config(hf: dict, family: str) -> None:
    """Refuse options that change the computation in ways attnlens does not model."""
    for flag in ("normalize_before", "add_final_layer_norm", "normalize_embedding"):
        if hf.get(flag):
            raise UnsupportedArchitectureError(
                f"{family} with {flag}=true (pre-norm / extra norms, as in mBART) is not "
                "supported by attnlens."
            )


def stack_configs(
    hf: dict, family: str, positional_offset: int, embed_norm: bool, n_ctx: int
) -> tuple[TransformerConfig, TransformerConfig]:
    """Encoder and decoder stack configs of a BART-style model (post-norm, learned table)."""
    d = hf["d_model"]
    scale = math.sqrt(d) if hf.get("scale_embedding") else 1.0
    common = dict(
        d_model=d, positional="learned", n_ctx=n_ctx, position_offset=positional_offset,
        embed_norm=embed_norm, norm="layernorm", norm_eps=1e-5, norm_position="post",
        act=activation_name(hf), embed_scale=scale, pad_token_id=hf.get("pad_token_id"),
        source={"model_type": family},
    )
    encoder = TransformerConfig(
        n_layers=hf["encoder_layers"], n_heads=hf["encoder_attention_heads"],
        d_mlp=hf["encoder_ffn_dim"], vocab_size=hf["vocab_size"], **common,
    )
    decoder = TransformerConfig(
        n_layers=hf["decoder_layers"], n_heads=hf["decoder_attention_heads"],
        d_mlp=hf["decoder_ffn_dim"], vocab_size=hf.get("decoder_vocab_size") or hf["vocab_size"],
        causal=True, cross_attention=True, **common,
    )
    return encoder, decoder


def convert_layers(
    cfg: TransformerConfig, reader: WeightReader, src_stack: str, dst_stack: str
) -> dict[str, torch.Tensor]:
    """BART-style layers ``{src_stack}.layers.i`` -> ``{dst_stack}.blocks.i``, shapes checked."""
    d, h, d_mlp = cfg.d_model, cfg.n_heads, cfg.d_mlp
    attentions = ATTENTIONS if cfg.cross_attention else ATTENTIONS[:1]
    norms = NORMS if cfg.cross_attention else (NORMS[0], NORMS[2])
    sd = {}
    for i in range(cfg.n_layers):
        src, dst = f"{src_stack}.layers.{i}.", f"{dst_stack}.blocks.{i}."
        for ours, theirs in attentions:
            for name, proj in PROJECTIONS:
                w = reader.take(f"{src}{theirs}.{proj}.weight", (d, d))
                sd[f"{dst}{ours}.W_{name}"] = linear_to_heads(w, h)  # [head, d_model, d_head]
                b = reader.take(f"{src}{theirs}.{proj}.bias", (d,))
                sd[f"{dst}{ours}.b_{name}"] = b.reshape(h, d // h)  # [head, d_head]
            w_o = reader.take(f"{src}{theirs}.out_proj.weight", (d, d))
            sd[f"{dst}{ours}.W_O"] = out_linear_to_heads(w_o, h)  # [head, d_head, d_model]
            sd[f"{dst}{ours}.b_O"] = reader.take(f"{src}{theirs}.out_proj.bias", (d,))
        for ours, theirs in norms:
            sd[f"{dst}{ours}.weight"] = reader.take(f"{src}{theirs}.weight", (d,))
            sd[f"{dst}{ours}.bias"] = reader.take(f"{src}{theirs}.bias", (d,))
        sd[f"{dst}mlp.W_in.weight"] = reader.take(f"{src}fc1.weight", (d_mlp, d))
        sd[f"{dst}mlp.W_in.bias"] = reader.take(f"{src}fc1.bias", (d_mlp,))
        sd[f"{dst}mlp.W_out.weight"] = reader.take(f"{src}fc2.weight", (d, d_mlp))
        sd[f"{dst}mlp.W_out.bias"] = reader.take(f"{src}fc2.bias", (d,))
    return sd


def take_tied_copy(reader: WeightReader, name: str, shared: torch.Tensor) -> None:
    """Consume a checkpoint's copy of a tied matrix, refusing one that differs from it."""
    copy = reader.take_optional(name, tuple(shared.shape))
    if copy is not None and not torch.equal(copy, shared):
        raise WeightMismatchError(
            f"checkpoint tensor {name!r} differs from the shared embedding it is tied to; "
            "untied encoder/decoder embeddings are not supported for this family."
        )


def convert_lm_head(
    reader: WeightReader, vocab: int, d: int, embed: torch.Tensor
) -> dict[str, torch.Tensor]:
    """``lm_head.weight`` (absent when tied: the embedding) and ``final_logits_bias``."""
    lm_head = reader.take_optional("lm_head.weight", (vocab, d))
    return {
        "head.decoder.weight": embed if lm_head is None else lm_head,
        "head.decoder.bias": reader.take("final_logits_bias", (1, vocab))[0],
    }


def convert_bart(
    hf: dict, reader: WeightReader, architecture: str
) -> tuple[EncoderDecoderConfig, dict]:
    check_seq2seq_config(hf, "BART")
    head = HEAD_BY_ARCHITECTURE[architecture]
    n_ctx = hf["max_position_embeddings"] + POSITION_OFFSET
    enc, dec = stack_configs(hf, "bart", POSITION_OFFSET, True, n_ctx)
    cfg = EncoderDecoderConfig(
        encoder=enc, decoder=dec, vocab_size=dec.vocab_size, head=head,
        lm_head_bias=head == "lm", decoder_start_token_id=hf.get("decoder_start_token_id", 2),
        pad_token_id=hf.get("pad_token_id"), source={"model_type": "bart"},
    )
    d, v = cfg.d_model, enc.vocab_size
    shared = reader.take("shared.weight", (v, d))
    sd: dict[str, torch.Tensor] = {}
    for stack, stack_cfg in (("encoder", enc), ("decoder", dec)):
        take_tied_copy(reader, f"{stack}.embed_tokens.weight", shared)
        sd[f"{stack}.embed.weight"] = shared
        sd[f"{stack}.pos_embed.weight"] = reader.take(
            f"{stack}.embed_positions.weight", (n_ctx, d)
        )
        for part in ("weight", "bias"):
            sd[f"{stack}.embed_norm.{part}"] = reader.take(
                f"{stack}.layernorm_embedding.{part}", (d,)
            )
        sd.update(convert_layers(stack_cfg, reader, stack, stack))
    if head == "lm":
        sd.update(convert_lm_head(reader, v, d, shared))
    return cfg, sd


# Export (attnlens -> Hugging Face) ------------------------------------------------------
def export_layers(cfg: TransformerConfig, state: dict, src_stack: str, dst_stack: str) -> dict:
    """Inverse of ``convert_layers``."""
    attentions = ATTENTIONS if cfg.cross_attention else ATTENTIONS[:1]
    norms = NORMS if cfg.cross_attention else (NORMS[0], NORMS[2])
    out = {}
    for i in range(cfg.n_layers):
        src, dst = f"{src_stack}.blocks.{i}.", f"{dst_stack}.layers.{i}."
        for ours, theirs in attentions:
            for name, proj in PROJECTIONS:
                W = state[f"{src}{ours}.W_{name}"]  # [head, d_model, d_head]
                out[f"{dst}{theirs}.{proj}.weight"] = heads_to_linear(W)
                out[f"{dst}{theirs}.{proj}.bias"] = state[f"{src}{ours}.b_{name}"].reshape(-1)
            W_O = state[f"{src}{ours}.W_O"]  # [head, d_head, d_model]
            out[f"{dst}{theirs}.out_proj.weight"] = heads_to_out_linear(W_O)
            out[f"{dst}{theirs}.out_proj.bias"] = state[f"{src}{ours}.b_O"]
        for ours, theirs in norms:
            out[f"{dst}{theirs}.weight"] = state[f"{src}{ours}.weight"]
            out[f"{dst}{theirs}.bias"] = state[f"{src}{ours}.bias"]
        out[f"{dst}fc1.weight"] = state[f"{src}mlp.W_in.weight"]
        out[f"{dst}fc1.bias"] = state[f"{src}mlp.W_in.bias"]
        out[f"{dst}fc2.weight"] = state[f"{src}mlp.W_out.weight"]
        out[f"{dst}fc2.bias"] = state[f"{src}mlp.W_out.bias"]
    return out


def check_tied(state: dict, names: tuple[str, ...], family: str) -> None:
    """Refuse to export embeddings that stopped being one matrix (the format ties them)."""
    first = state[names[0]]
    for name in names[1:]:
        if not torch.equal(state[name], first):
            raise WeightMismatchError(
                f"{name} differs from {names[0]}; {family} checkpoints tie them."
            )


def stack_fields(cfg: EncoderDecoderConfig) -> dict:
    """config.json fields shared by BART and Marian exports."""
    enc, dec = cfg.encoder, cfg.decoder
    return {
        "architectures": [ARCHITECTURE_BY_HEAD[cfg.head]],
        "d_model": enc.d_model,
        "encoder_layers": enc.n_layers,
        "decoder_layers": dec.n_layers,
        "encoder_attention_heads": enc.n_heads,
        "decoder_attention_heads": dec.n_heads,
        "encoder_ffn_dim": enc.d_mlp,
        "decoder_ffn_dim": dec.d_mlp,
        "vocab_size": enc.vocab_size,
        "activation_function": enc.act,
        "scale_embedding": enc.embed_scale != 1.0,
        "pad_token_id": cfg.pad_token_id,
        "decoder_start_token_id": cfg.decoder_start_token_id,
        "is_encoder_decoder": True,
    }


def export_bart(cfg: EncoderDecoderConfig, state: dict) -> tuple[dict, dict]:
    """Inverse of ``convert_bart``: (config.json fields, checkpoint tensors)."""
    tied = ["encoder.embed.weight", "decoder.embed.weight"]
    untied_head = cfg.head == "lm" and not torch.equal(
        state["head.decoder.weight"], state["encoder.embed.weight"]
    )
    check_tied(state, tuple(tied), "BART")
    fields = stack_fields(cfg) | {
        "max_position_embeddings": cfg.encoder.n_ctx - POSITION_OFFSET,
        "tie_word_embeddings": not untied_head,
    }
    fields["architectures"] = [ARCHITECTURE_BY_HEAD[cfg.head]]
    out = {"shared.weight": state["encoder.embed.weight"]}
    for stack, stack_cfg in (("encoder", cfg.encoder), ("decoder", cfg.decoder)):
        out[f"{stack}.embed_positions.weight"] = state[f"{stack}.pos_embed.weight"]
        out[f"{stack}.layernorm_embedding.weight"] = state[f"{stack}.embed_norm.weight"]
        out[f"{stack}.layernorm_embedding.bias"] = state[f"{stack}.embed_norm.bias"]
        out.update(export_layers(stack_cfg, state, stack, stack))
    if cfg.head is None:
        return fields, out
    tensors = {"model." + k: t for k, t in out.items()}
    tensors["final_logits_bias"] = state["head.decoder.bias"][None]  # [1, vocab]
    if untied_head:
        tensors["lm_head.weight"] = state["head.decoder.weight"]
    return fields, tensors
