"""T5 converter (T5Model, T5ForConditionalGeneration, T5EncoderModel), v1.0 and v1.1 style.

T5 is pre-norm with an RMS norm that does not subtract the mean and has no bias, and a final
norm per stack. Attention has no biases and no ``1/sqrt(d_head)`` scaling (scale 1); its
only position information is a bucketed relative position bias learned in each stack's first
layer and added to every layer's scores (``RelativePositionBias``: bidirectional in the
encoder, causal in the decoder; cross-attention has none). The MLP is ReLU (v1.0) or
gated-GELU (v1.1, ``feed_forward_proj="gated-gelu"``: tanh GELU on ``wi_0`` times ``wi_1``).
When the LM head is tied to the embedding (``scale_decoder_outputs``), the decoder's output is
multiplied by ``d_model ** -0.5`` before it.
"""

from __future__ import annotations

import torch

from attnlens.errors import UnsupportedArchitectureError
from attnlens.loaders.bart import check_tied, take_tied_copy
from attnlens.loaders.weights import (
    WeightReader,
    heads_to_linear,
    heads_to_out_linear,
    linear_to_heads,
    out_linear_to_heads,
)
from attnlens.model.config import TransformerConfig
from attnlens.model.encoder_decoder import EncoderDecoderConfig

HEAD_BY_ARCHITECTURE = {"T5Model": None, "T5ForConditionalGeneration": "lm",
                        "T5EncoderModel": None}
ARCHITECTURE_BY_HEAD = {None: "T5Model", "lm": "T5ForConditionalGeneration"}
ENCODER_ONLY = "T5EncoderModel"  # loads as a HookedTransformer (the encoder stack alone)
# Old checkpoints hold an unused bias table in the first cross-attention (HF ignores it too).
IGNORED = ("EncDecAttention.relative_attention_bias.weight",)
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_new", "silu": "silu",
               "swish": "silu"}
# Sub-layer index of each part, per stack: (attention, checkpoint name, norm) ...
ENCODER_PARTS = (("attn", "SelfAttention", "ln1", 0),)
DECODER_PARTS = (("attn", "SelfAttention", "ln1", 0), ("cross_attn", "EncDecAttention",
                                                       "ln_cross", 1))


def mlp_kind(hf: dict) -> tuple[str, bool]:
    """(activation, gated) from ``feed_forward_proj`` as transformers reads it."""
    proj = hf.get("feed_forward_proj", "relu")
    parts = proj.split("-")
    gated = parts[0] == "gated" and len(parts) == 2
    act = "gelu_new" if proj == "gated-gelu" else parts[-1]
    if len(parts) > 2 or (len(parts) == 2 and not gated) or act not in ACTIVATIONS:
        raise UnsupportedArchitectureError(
            f"T5 feed_forward_proj={proj!r} is not supported; attnlens reads relu, gelu, "
            "gelu_new, silu and their gated-* forms."
        )
    return ACTIVATIONS[act], gated


def t5_stack_config(hf: dict, decoder: bool) -> TransformerConfig:
    act, gated = mlp_kind(hf)
    n_layers = hf.get("num_decoder_layers") or hf["num_layers"] if decoder else hf["num_layers"]
    return TransformerConfig(
        d_model=hf["d_model"],
        n_layers=n_layers,
        n_heads=hf["num_heads"],
        d_head=hf["d_kv"],
        d_mlp=hf["d_ff"],
        vocab_size=hf["vocab_size"],
        positional="relative",
        relative_buckets=hf.get("relative_attention_num_buckets", 32),
        relative_max_distance=hf.get("relative_attention_max_distance", 128),
        norm="rmsnorm",
        norm_eps=hf.get("layer_norm_epsilon", 1e-6),
        norm_position="pre",
        final_norm=True,
        act=act,
        gated_mlp=gated,
        qkv_bias=False,
        attn_out_bias=False,
        mlp_bias=False,
        causal=decoder,
        cross_attention=decoder,
        attn_scale=1.0,
        pad_token_id=hf.get("pad_token_id", 0),
        source={"model_type": "t5"},
    )


def scales_decoder_output(hf: dict) -> bool:
    """Whether the decoder output is scaled by d_model ** -0.5 (tied head, T5 v1.0)."""
    if "scale_decoder_outputs" in hf:
        return bool(hf["scale_decoder_outputs"])
    return hf.get("tie_word_embeddings", True) is not False


def convert_stack(cfg: TransformerConfig, reader: WeightReader, stack: str) -> dict:
    """One T5 stack ``{stack}.block.i.layer.j`` -> ``{stack}.blocks.i`` (shapes checked)."""
    d, h, dk, d_mlp = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp
    parts = DECODER_PARTS if cfg.cross_attention else ENCODER_PARTS
    ff = len(parts)  # the feed-forward sub-layer comes after the attentions
    sd = {
        f"{stack}.rel_pos_bias.weight": reader.take(
            f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            (cfg.relative_buckets, h),
        ),
        f"{stack}.final_norm.weight": reader.take(f"{stack}.final_layer_norm.weight", (d,)),
    }
    for i in range(cfg.n_layers):
        src, dst = f"{stack}.block.{i}.layer.", f"{stack}.blocks.{i}."
        for ours, theirs, norm, j in parts:
            for name in "QKV":
                w = reader.take(f"{src}{j}.{theirs}.{name.lower()}.weight", (h * dk, d))
                sd[f"{dst}{ours}.W_{name}"] = linear_to_heads(w, h)  # [head, d_model, d_kv]
            w_o = reader.take(f"{src}{j}.{theirs}.o.weight", (d, h * dk))
            sd[f"{dst}{ours}.W_O"] = out_linear_to_heads(w_o, h)  # [head, d_kv, d_model]
            sd[f"{dst}{norm}.weight"] = reader.take(f"{src}{j}.layer_norm.weight", (d,))
        sd[f"{dst}ln2.weight"] = reader.take(f"{src}{ff}.layer_norm.weight", (d,))
        dense = f"{src}{ff}.DenseReluDense."
        if cfg.gated_mlp:
            sd[f"{dst}mlp.W_gate.weight"] = reader.take(f"{dense}wi_0.weight", (d_mlp, d))
            sd[f"{dst}mlp.W_in.weight"] = reader.take(f"{dense}wi_1.weight", (d_mlp, d))
        else:
            sd[f"{dst}mlp.W_in.weight"] = reader.take(f"{dense}wi.weight", (d_mlp, d))
        sd[f"{dst}mlp.W_out.weight"] = reader.take(f"{dense}wo.weight", (d, d_mlp))
    return sd


def convert_t5(hf: dict, reader: WeightReader, architecture: str):
    head = HEAD_BY_ARCHITECTURE[architecture]
    enc = t5_stack_config(hf, decoder=False)
    shared = reader.take("shared.weight", (enc.vocab_size, enc.d_model))
    take_tied_copy(reader, "encoder.embed_tokens.weight", shared)
    encoder = convert_stack(enc, reader, "encoder")
    if architecture == ENCODER_ONLY:
        return enc, {"embed.weight": shared} | {
            k.removeprefix("encoder."): v for k, v in encoder.items()
        }
    dec = t5_stack_config(hf, decoder=True)
    scale = enc.d_model**-0.5 if scales_decoder_output(hf) else 1.0
    cfg = EncoderDecoderConfig(
        encoder=enc, decoder=dec, vocab_size=enc.vocab_size, head=head, head_input_scale=scale,
        decoder_start_token_id=hf.get("decoder_start_token_id") or 0,
        pad_token_id=hf.get("pad_token_id", 0), source={"model_type": "t5"},
    )
    take_tied_copy(reader, "decoder.embed_tokens.weight", shared)
    sd = {"encoder.embed.weight": shared, "decoder.embed.weight": shared, **encoder}
    sd.update(convert_stack(dec, reader, "decoder"))
    if head == "lm":
        lm_head = reader.take_optional("lm_head.weight", (enc.vocab_size, enc.d_model))
        sd["head.decoder.weight"] = shared if lm_head is None else lm_head
    return cfg, sd


# Export (attnlens -> Hugging Face) ------------------------------------------------------
def export_stack(cfg: TransformerConfig, state: dict, src: str, dst: str) -> dict:
    """Inverse of ``convert_stack``; ``src`` is "encoder." / "decoder." or "" (encoder-only)."""
    parts = DECODER_PARTS if cfg.cross_attention else ENCODER_PARTS
    ff = len(parts)
    out = {
        f"{dst}.block.0.layer.0.SelfAttention.relative_attention_bias.weight":
            state[f"{src}rel_pos_bias.weight"],
        f"{dst}.final_layer_norm.weight": state[f"{src}final_norm.weight"],
    }
    for i in range(cfg.n_layers):
        s, d = f"{src}blocks.{i}.", f"{dst}.block.{i}.layer."
        for ours, theirs, norm, j in parts:
            for name in "QKV":
                W = state[f"{s}{ours}.W_{name}"]  # [head, d_model, d_kv]
                out[f"{d}{j}.{theirs}.{name.lower()}.weight"] = heads_to_linear(W)
            out[f"{d}{j}.{theirs}.o.weight"] = heads_to_out_linear(state[f"{s}{ours}.W_O"])
            out[f"{d}{j}.layer_norm.weight"] = state[f"{s}{norm}.weight"]
        out[f"{d}{ff}.layer_norm.weight"] = state[f"{s}ln2.weight"]
        dense = f"{d}{ff}.DenseReluDense."
        if cfg.gated_mlp:
            out[f"{dense}wi_0.weight"] = state[f"{s}mlp.W_gate.weight"]
            out[f"{dense}wi_1.weight"] = state[f"{s}mlp.W_in.weight"]
        else:
            out[f"{dense}wi.weight"] = state[f"{s}mlp.W_in.weight"]
        out[f"{dense}wo.weight"] = state[f"{s}mlp.W_out.weight"]
    return out


def feed_forward_proj(cfg: TransformerConfig) -> str:
    """Inverse of ``mlp_kind`` (transformers reads "gated-gelu" as tanh GELU)."""
    if not cfg.gated_mlp:
        return cfg.act
    if cfg.act == "gelu":
        raise UnsupportedArchitectureError("T5 has no gated exact-GELU MLP; cannot export it.")
    return "gated-gelu" if cfg.act == "gelu_new" else f"gated-{cfg.act}"


def t5_fields(enc: TransformerConfig, n_decoder_layers: int, architecture: str) -> dict:
    return {
        "architectures": [architecture],
        "d_model": enc.d_model,
        "d_kv": enc.d_head,
        "d_ff": enc.d_mlp,
        "num_layers": enc.n_layers,
        "num_decoder_layers": n_decoder_layers,
        "num_heads": enc.n_heads,
        "vocab_size": enc.vocab_size,
        "relative_attention_num_buckets": enc.relative_buckets,
        "relative_attention_max_distance": enc.relative_max_distance,
        "layer_norm_epsilon": enc.norm_eps,
        "feed_forward_proj": feed_forward_proj(enc),
        "pad_token_id": enc.pad_token_id,
        "is_encoder_decoder": True,
    }


def export_t5(cfg, state: dict) -> tuple[dict, dict]:
    """Inverse of ``convert_t5``: (config.json fields, checkpoint tensors)."""
    if isinstance(cfg, TransformerConfig):  # T5EncoderModel
        fields = t5_fields(cfg, cfg.n_layers, ENCODER_ONLY)
        return fields, {"shared.weight": state["embed.weight"]} | export_stack(
            cfg, state, "", "encoder"
        )
    check_tied(state, ("encoder.embed.weight", "decoder.embed.weight"), "T5")
    fields = t5_fields(cfg.encoder, cfg.decoder.n_layers, ARCHITECTURE_BY_HEAD[cfg.head])
    fields["decoder_start_token_id"] = cfg.decoder_start_token_id
    fields["scale_decoder_outputs"] = cfg.head_input_scale != 1.0
    out = {"shared.weight": state["encoder.embed.weight"]}
    out.update(export_stack(cfg.encoder, state, "encoder.", "encoder"))
    out.update(export_stack(cfg.decoder, state, "decoder.", "decoder"))
    if cfg.head == "lm" and not torch.equal(state["head.decoder.weight"],
                                            state["encoder.embed.weight"]):
        out["lm_head.weight"] = state["head.decoder.weight"]
    return fields, out
