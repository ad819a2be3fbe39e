"""GPT-2 converter (GPT2Model, GPT2LMHeadModel).

GPT-2 stores its projections as ``Conv1D`` with weights ``[d_in, d_out]`` (the transpose of
``nn.Linear``), fuses Q, K and V into one ``c_attn``, is pre-norm with a final LayerNorm,
and ties its LM head to the token embedding.
"""

from __future__ import annotations

import torch
from einops import rearrange

from attnlens.errors import UnsupportedArchitectureError
from attnlens.loaders.weights import WeightReader
from attnlens.model.config import TransformerConfig

HEAD_BY_ARCHITECTURE = {"GPT2Model": None, "GPT2LMHeadModel": "lm"}
ARCHITECTURE_BY_HEAD = {head: arch for arch, head in HEAD_BY_ARCHITECTURE.items()}
# Buffers of older checkpoints (the causal mask), not weights.
IGNORED = (".attn.bias", ".attn.masked_bias")
# Options that change the computation in ways attnlens does not model.
UNSUPPORTED_FLAGS = {
    "add_cross_attention": "adds cross-attention layers",
}


def gpt2_config(hf: dict, head: str | None) -> TransformerConfig:
    for flag, meaning in UNSUPPORTED_FLAGS.items():
        if hf.get(flag):
            raise UnsupportedArchitectureError(
                f"GPT-2 with {flag}=true ({meaning}) is not supported by attnlens."
            )
    d = hf["n_embd"]
    return TransformerConfig(
        d_model=d,
        n_layers=hf["n_layer"],
        n_heads=hf["n_head"],
        d_mlp=hf.get("n_inner") or 4 * d,
        vocab_size=hf["vocab_size"],
        n_ctx=hf.get("n_positions", 1024),
        norm="layernorm",
        norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        norm_position="pre",
        final_norm=True,
        act=hf.get("activation_function", "gelu_new"),
        causal=True,
        # scale_attn_weights=false: raw dot products, no 1/sqrt(d_head).
        attn_scale=None if hf.get("scale_attn_weights", True) else 1.0,
        # Layer l's scores also divided by l + 1; scores in float32 (HF's eager attention).
        attn_scale_by_inverse_layer=bool(hf.get("scale_attn_by_inverse_layer_idx", False)),
        attn_upcast=bool(hf.get("reorder_and_upcast_attn", False)),
        pad_token_id=hf.get("pad_token_id"),
        head=head,
        tie_word_embeddings=hf.get("tie_word_embeddings", True),
        source={"model_type": "gpt2"},
    )


def convert_gpt2(
    hf: dict, reader: WeightReader, architecture: str
) -> tuple[TransformerConfig, dict]:
    head = HEAD_BY_ARCHITECTURE[architecture]
    cfg = gpt2_config(hf, head)
    d, h, d_mlp, v = cfg.d_model, cfg.n_heads, cfg.d_mlp, cfg.vocab_size
    sd = {
        "embed.weight": reader.take("wte.weight", (v, d)),
        "pos_embed.weight": reader.take("wpe.weight", (cfg.n_ctx, d)),
        "final_norm.weight": reader.take("ln_f.weight", (d,)),
        "final_norm.bias": reader.take("ln_f.bias", (d,)),
    }
    for i in range(cfg.n_layers):
        src, dst = f"h.{i}.", f"blocks.{i}."
        c_attn = reader.take(f"{src}attn.c_attn.weight", (d, 3 * d))  # Conv1D: [d_in, d_out]
        c_attn_b = reader.take(f"{src}attn.c_attn.bias", (3 * d,))
        W = rearrange(c_attn, "d_in (qkv head d_head) -> qkv head d_in d_head", qkv=3, head=h)
        b = rearrange(c_attn_b, "(qkv head d_head) -> qkv head d_head", qkv=3, head=h)
        for j, name in enumerate("QKV"):
            sd[f"{dst}attn.W_{name}"] = W[j].contiguous()  # [head, d_model, d_head]
            sd[f"{dst}attn.b_{name}"] = b[j].contiguous()  # [head, d_head]
        c_proj = reader.take(f"{src}attn.c_proj.weight", (d, d))  # [head * d_head, d_model]
        sd[f"{dst}attn.W_O"] = rearrange(
            c_proj, "(head d_head) d_out -> head d_head d_out", head=h
        ).contiguous()
        sd[f"{dst}attn.b_O"] = reader.take(f"{src}attn.c_proj.bias", (d,))
        for ours, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
            sd[f"{dst}{ours}.weight"] = reader.take(f"{src}{theirs}.weight", (d,))
            sd[f"{dst}{ours}.bias"] = reader.take(f"{src}{theirs}.bias", (d,))
        # Conv1D weights are the transpose of nn.Linear's.
        sd[f"{dst}mlp.W_in.weight"] = reader.take(f"{src}mlp.c_fc.weight", (d, d_mlp)).T
        sd[f"{dst}mlp.W_in.bias"] = reader.take(f"{src}mlp.c_fc.bias", (d_mlp,))
        sd[f"{dst}mlp.W_out.weight"] = reader.take(f"{src}mlp.c_proj.weight", (d_mlp, d)).T
        sd[f"{dst}mlp.W_out.bias"] = reader.take(f"{src}mlp.c_proj.bias", (d,))
    if head == "lm":
        lm_head = reader.take_optional("lm_head.weight", (v, d))
        # Tied checkpoints omit lm_head.weight: it is the token embedding.
        sd["head.decoder.weight"] = sd["embed.weight"] if lm_head is None else lm_head
    return cfg, {k: t.contiguous() for k, t in sd.items()}


def export_gpt2(cfg: TransformerConfig, state: dict) -> tuple[dict, dict]:
    """Inverse of ``convert_gpt2``: (config.json fields, checkpoint tensors)."""
    tied = cfg.head == "lm" and torch.equal(state["head.decoder.weight"], state["embed.weight"])
    fields = {
        "architectures": [ARCHITECTURE_BY_HEAD[cfg.head]],
        "n_embd": cfg.d_model,
        "n_layer": cfg.n_layers,
        "n_head": cfg.n_heads,
        "n_inner": cfg.d_mlp,
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.n_ctx,
        "layer_norm_epsilon": cfg.norm_eps,
        "activation_function": cfg.act,
        "scale_attn_weights": cfg.attn_scale is None,
        "scale_attn_by_inverse_layer_idx": cfg.attn_scale_by_inverse_layer,
        "reorder_and_upcast_attn": cfg.attn_upcast,
        "tie_word_embeddings": tied or cfg.head is None,
    }
    out = {
        "wte.weight": state["embed.weight"],
        "wpe.weight": state["pos_embed.weight"],
        "ln_f.weight": state["final_norm.weight"],
        "ln_f.bias": state["final_norm.bias"],
    }
    for i in range(cfg.n_layers):
        src, dst = f"blocks.{i}.", f"h.{i}."
        W = torch.stack([state[f"{src}attn.W_{n}"] for n in "QKV"])  # [qkv, head, d_in, d_head]
        b = torch.stack([state[f"{src}attn.b_{n}"] for n in "QKV"])  # [qkv, head, d_head]
        out[f"{dst}attn.c_attn.weight"] = rearrange(
            W, "qkv head d_in d_head -> d_in (qkv head d_head)"
        )
        out[f"{dst}attn.c_attn.bias"] = rearrange(b, "qkv head d_head -> (qkv head d_head)")
        out[f"{dst}attn.c_proj.weight"] = rearrange(
            state[f"{src}attn.W_O"], "head d_head d_out -> (head d_head) d_out"
        )
        out[f"{dst}attn.c_proj.bias"] = state[f"{src}attn.b_O"]
        for ours, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
            out[f"{dst}{theirs}.weight"] = state[f"{src}{ours}.weight"]
            out[f"{dst}{theirs}.bias"] = state[f"{src}{ours}.bias"]
        out[f"{dst}mlp.c_fc.weight"] = state[f"{src}mlp.W_in.weight"].T
        out[f"{dst}mlp.c_fc.bias"] = state[f"{src}mlp.W_in.bias"]
        out[f"{dst}mlp.c_proj.weight"] = state[f"{src}mlp.W_out.weight"].T
        out[f"{dst}mlp.c_proj.bias"] = state[f"{src}mlp.W_out.bias"]
    if cfg.head is None:
        return fields, out
    tensors = {"transformer." + k: t for k, t in out.items()}
    if not tied:
        tensors["lm_head.weight"] = state["head.decoder.weight"]
    return fields, tensors
