"""Llama-style decoders: Llama, Mistral and Qwen2 (``*Model`` and ``*ForCausalLM``).

Pre-norm with RMSNorm, rotary positions (rotate-half convention), grouped-query attention,
a gated SiLU MLP and an untied or tied LM head. The families differ only in their biases
(Llama: ``attention_bias`` on q/k/v/o; Qwen2: q/k/v only; Mistral: none) and in sliding
windows, which attnlens refuses rather than silently computing full attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlens.errors import UnsupportedArchitectureError
from attnlens.loaders.weights import (
    WeightReader,
    heads_to_linear,
    heads_to_out_linear,
    linear_to_heads,
    out_linear_to_heads,
)
from attnlens.model.config import TransformerConfig


@dataclass(frozen=True)
class Family:
    """What distinguishes one Llama-style family from another."""

    model_type: str
    base: str  # HF class name prefix: "Llama", "Mistral", "Qwen2"
    qkv_bias: bool | None  # None: read config.json's attention_bias
    out_bias: bool | None


# attnlens gated MLP ``W_out(act(W_gate x) * W_in x)`` -> Llama's names.
MLP_NAMES = (("W_gate", "gate_proj"), ("W_in", "up_proj"), ("W_out", "down_proj"))

FAMILIES = {
    "llama": Family("llama", "Llama", None, None),
    "mistral": Family("mistral", "Mistral", False, False),
    "qwen2": Family("qwen2", "Qwen2", True, False),
}


def head_by_architecture(family: Family) -> dict[str, str | None]:
    return {f"{family.base}Model": None, f"{family.base}ForCausalLM": "lm"}


def rope_base(hf: dict) -> float:
    """The rotary base (theta); refuses RoPE scaling variants attnlens does not implement."""
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    rope_type = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type")
    if rope_type not in (None, "default"):
        raise UnsupportedArchitectureError(
            f"rope type {rope_type!r} is not supported; attnlens implements the default "
            "(unscaled) rotary embedding only."
        )
    if params.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0)) != 1.0:
        raise UnsupportedArchitectureError("partial rotary embeddings are not supported here.")
    return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))


def sliding_window(hf: dict, n_layers: int) -> int | None:
    """The attention window when any layer uses one (Mistral; Qwen2 with use_sliding_window)."""
    window = hf.get("sliding_window")
    if not window:
        return None
    layer_types = hf.get("layer_types")
    if layer_types is not None:
        return window if "sliding_attention" in layer_types else None
    if hf.get("model_type") == "qwen2" and not hf.get("use_sliding_window", False):
        return None
    return window


def llama_config(hf: dict, head: str | None, family: Family) -> TransformerConfig:
    n_heads = hf["num_attention_heads"]
    attention_bias = bool(hf.get("attention_bias", False))
    n_layers = hf["num_hidden_layers"]
    return TransformerConfig(
        d_model=hf["hidden_size"],
        n_layers=n_layers,
        n_heads=n_heads,
        d_head=hf.get("head_dim") or hf["hidden_size"] // n_heads,
        n_kv_heads=hf.get("num_key_value_heads") or n_heads,
        d_mlp=hf["intermediate_size"],
        vocab_size=hf["vocab_size"],
        positional="rotary",
        n_ctx=hf.get("max_position_embeddings", 2048),
        rotary_base=rope_base(hf),
        sliding_window=sliding_window(hf, n_layers),
        norm="rmsnorm",
        norm_eps=hf.get("rms_norm_eps", 1e-6),
        norm_position="pre",
        final_norm=True,
        act=hf.get("hidden_act", "silu"),
        gated_mlp=True,
        qkv_bias=attention_bias if family.qkv_bias is None else family.qkv_bias,
        attn_out_bias=attention_bias if family.out_bias is None else family.out_bias,
        mlp_bias=bool(hf.get("mlp_bias", False)),
        causal=True,
        pad_token_id=hf.get("pad_token_id"),
        head=head,
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        source={"model_type": family.model_type},
    )


def make_converter(family: Family):
    """The pure converter function of one Llama-style family."""
    heads = head_by_architecture(family)

    def convert(hf: dict, reader: WeightReader, architecture: str):
        cfg = llama_config(hf, heads[architecture], family)
        d, h, kv, dh = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_head
        d_mlp, v = cfg.d_mlp, cfg.vocab_size
        sd = {
            "embed.weight": reader.take("embed_tokens.weight", (v, d)),
            "final_norm.weight": reader.take("norm.weight", (d,)),
        }
        for i in range(cfg.n_layers):
            src, dst = f"layers.{i}.", f"blocks.{i}."
            for name, n in (("q", h), ("k", kv), ("v", kv)):
                w = reader.take(f"{src}self_attn.{name}_proj.weight", (n * dh, d))
                sd[f"{dst}attn.W_{name.upper()}"] = linear_to_heads(w, n)  # [head, d, d_head]
                if cfg.qkv_bias:
                    b = reader.take(f"{src}self_attn.{name}_proj.bias", (n * dh,))
                    sd[f"{dst}attn.b_{name.upper()}"] = b.reshape(n, dh)  # [head, d_head]
            w_o = reader.take(f"{src}self_attn.o_proj.weight", (d, h * dh))
            sd[f"{dst}attn.W_O"] = out_linear_to_heads(w_o, h)  # [head, d_head, d_model]
            if cfg.attn_out_bias:
                sd[f"{dst}attn.b_O"] = reader.take(f"{src}self_attn.o_proj.bias", (d,))
            sd[f"{dst}ln1.weight"] = reader.take(f"{src}input_layernorm.weight", (d,))
            sd[f"{dst}ln2.weight"] = reader.take(f"{src}post_attention_layernorm.weight", (d,))
            shapes = {"W_gate": (d_mlp, d), "W_in": (d_mlp, d), "W_out": (d, d_mlp)}
            for ours, theirs in MLP_NAMES:
                shape = shapes[ours]
                sd[f"{dst}mlp.{ours}.weight"] = reader.take(f"{src}mlp.{theirs}.weight", shape)
                if cfg.mlp_bias:
                    sd[f"{dst}mlp.{ours}.bias"] = reader.take(
                        f"{src}mlp.{theirs}.bias", (shape[0],)
                    )
        if cfg.head == "lm":
            lm_head = reader.take_optional("lm_head.weight", (v, d))
            # Tied checkpoints omit lm_head.weight: it is the token embedding.
            sd["head.decoder.weight"] = sd["embed.weight"] if lm_head is None else lm_head
        return cfg, sd

    convert.__name__ = f"convert_{family.model_type}"
    return convert


def make_exporter(family: Family):
    """The inverse converter of one Llama-style family."""
    architectures = {head: arch for arch, head in head_by_architecture(family).items()}

    def export(cfg: TransformerConfig, state: dict) -> tuple[dict, dict]:
        tied = cfg.head is None or torch.equal(state["head.decoder.weight"], state["embed.weight"])
        fields = {
            "architectures": [architectures[cfg.head]],
            "hidden_size": cfg.d_model,
            "num_hidden_layers": cfg.n_layers,
            "num_attention_heads": cfg.n_heads,
            "num_key_value_heads": cfg.n_kv_heads,
            "head_dim": cfg.d_head,
            "intermediate_size": cfg.d_mlp,
            "vocab_size": cfg.vocab_size,
            "max_position_embeddings": cfg.n_ctx,
            "rms_norm_eps": cfg.norm_eps,
            "hidden_act": cfg.act,
            "tie_word_embeddings": tied,
            "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rotary_base},
        }
        if family.qkv_bias is None:
            fields["attention_bias"] = cfg.qkv_bias
            fields["mlp_bias"] = cfg.mlp_bias
        out = {
            "embed_tokens.weight": state["embed.weight"],
            "norm.weight": state["final_norm.weight"],
        }
        for i in range(cfg.n_layers):
            src, dst = f"blocks.{i}.", f"layers.{i}."
            for name in "qkv":
                out[f"{dst}self_attn.{name}_proj.weight"] = heads_to_linear(
                    state[f"{src}attn.W_{name.upper()}"]
                )
                if cfg.qkv_bias:
                    bias = state[f"{src}attn.b_{name.upper()}"]
                    out[f"{dst}self_attn.{name}_proj.bias"] = bias.reshape(-1)
            out[f"{dst}self_attn.o_proj.weight"] = heads_to_out_linear(state[f"{src}attn.W_O"])
            if cfg.attn_out_bias:
                out[f"{dst}self_attn.o_proj.bias"] = state[f"{src}attn.b_O"]
            out[f"{dst}input_layernorm.weight"] = state[f"{src}ln1.weight"]
            out[f"{dst}post_attention_layernorm.weight"] = state[f"{src}ln2.weight"]
            for ours, theirs in MLP_NAMES:
                out[f"{dst}mlp.{theirs}.weight"] = state[f"{src}mlp.{ours}.weight"]
                if cfg.mlp_bias:
                    out[f"{dst}mlp.{theirs}.bias"] = state[f"{src}mlp.{ours}.bias"]
        if cfg.head is None:
            return fields, out
        tensors = {"model." + k: t for k, t in out.items()}
        if not tied:
            tensors["lm_head.weight"] = state["head.decoder.weight"]
        return fields, tensors

    export.__name__ = f"export_{family.model_type}"
    return export
