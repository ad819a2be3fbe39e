"""Llama-style decoders: Llama, Mistral and Qwen2 (``*Model`` and ``*ForCausalLM``).

Pre-norm with RMSNorm, rotary positions (rotate-half convention), grouped-query attention,
a gated SiLU MLP and an untied or tied LM head. The families differ only in their biases
(Llama: ``attention_bias`` on q/k/v/o; Qwen2: q/k/v only; Mistral: none) and in which layers
a sliding attention window applies to (``window_layers``). RoPE scaling (``llama3``,
``linear``, ``dynamic``, ``yarn``) is read into ``TransformerConfig.rope_scaling`` with
transformers' defaults resolved; other rope types are refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnlens.errors import ConfigError, UnsupportedArchitectureError
from attnlens.loaders.weights import (
    WeightReader,
    heads_to_linear,
    heads_to_out_linear,
    linear_to_heads,
    out_linear_to_heads,
)
from attnlens.model.config import RopeScaling, TransformerConfig


@dataclass(frozen=True)
class Family:
    """What distinguishes one Llama-style family from another."""

    model_type: str
    base: str  # HF class name prefix: "Llama", "Mistral", "Qwen2"
    qkv_bias: bool | None  # None: read config.json's attention_bias
    out_bias: bool | None
    # Which layers a config.json sliding_window applies to: "none" (Llama), "all"
    # (Mistral), "qwen2" (use_sliding_window; layer_types or max_window_layers).
    window: str = "none"


# attnlens gated MLP ``W_out(act(W_gate x) * W_in x)`` -> Llama's names.
MLP_NAMES = (("W_gate", "gate_proj"), ("W_in", "up_proj"), ("W_out", "down_proj"))

FAMILIES = {
    "llama": Family("llama", "Llama", None, None),
    "mistral": Family("mistral", "Mistral", False, False, window="all"),
    "qwen2": Family("qwen2", "Qwen2", True, False, window="qwen2"),
}


def head_by_architecture(family: Family) -> dict[str, str | None]:
    return {f"{family.base}Model": None, f"{family.base}ForCausalLM": "lm"}


ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")
# Keys each scaled rope type needs (transformers raises on a missing one too).
ROPE_REQUIRED = {
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("original_max_position_embeddings",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor",
               "original_max_position_embeddings"),
}


def rope_parameters(hf: dict) -> dict:
    """The rope parameters as transformers 5 reads config.json.

    A legacy ``rope_scaling`` replaces ``rope_parameters`` when both are present; the
    top-level ``rope_theta`` (default 10000) and ``partial_rotary_factor`` fill the gaps; a
    top-level ``original_max_position_embeddings`` overrides the one inside (llama3, yarn),
    which otherwise defaults to ``max_position_embeddings``.
    """
    params = dict(hf.get("rope_scaling") or hf.get("rope_parameters") or {})
    params.setdefault("rope_type", params.get("type", "default"))
    params.setdefault("rope_theta", hf.get("rope_theta", 10000.0))
    if hf.get("partial_rotary_factor") is not None:
        params.setdefault("partial_rotary_factor", hf["partial_rotary_factor"])
    if params["rope_type"] in ("llama3", "yarn"):
        if "original_max_position_embeddings" in hf:
            params["original_max_position_embeddings"] = hf["original_max_position_embeddings"]
        else:
            params.setdefault("original_max_position_embeddings",
                              hf.get("max_position_embeddings", 2048))
    return params


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_scaling(params: dict, max_positions: int) -> RopeScaling:
    """YaRN with transformers' defaults resolved (factor, attention factor, betas)."""
    original = params["original_max_position_embeddings"]
    factor = params.get("factor")
    if factor is None:
        factor = max_positions / original
    attention = params.get("attention_factor")
    if attention is None:
        mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
        else:
            attention = _yarn_mscale(factor)
    return RopeScaling(
        "yarn", float(factor), int(original), beta_fast=float(params.get("beta_fast") or 32),
        beta_slow=float(params.get("beta_slow") or 1), attention_factor=float(attention),
        truncate=bool(params.get("truncate", True)),
    )


def rope_scaling(params: dict, max_positions: int) -> RopeScaling | None:
    """The ``RopeScaling`` of ``rope_parameters(hf)`` (None: plain rotary embedding)."""
    rope_type = params["rope_type"]
    if rope_type not in ROPE_TYPES:
        raise UnsupportedArchitectureError(
            f"rope type {rope_type!r} is not supported by the native converter; it implements "
            f"{', '.join(ROPE_TYPES)}."
        )
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        raise UnsupportedArchitectureError("partial rotary embeddings are not supported here.")
    if rope_type == "default":
        return None
    missing = [k for k in ROPE_REQUIRED[rope_type] if params.get(k) is None]
    if missing:
        raise ConfigError(
            f"config.json: rope type {rope_type!r} needs {', '.join(missing)} in rope_parameters."
        )
    if rope_type == "yarn":
        return yarn_scaling(params, max_positions)
    factor = float(params["factor"])
    if rope_type == "llama3":
        if params["high_freq_factor"] == params["low_freq_factor"]:
            raise ConfigError("config.json: llama3 rope needs high_freq_factor != low_freq_factor.")
        return RopeScaling("llama3", factor, int(params["original_max_position_embeddings"]),
                           low_freq_factor=float(params["low_freq_factor"]),
                           high_freq_factor=float(params["high_freq_factor"]))
    # dynamic NTK starts scaling beyond max_position_embeddings; linear reads factor only.
    return RopeScaling(rope_type, factor, max_positions if rope_type == "dynamic" else None)


def rope_fields(cfg: TransformerConfig) -> dict:
    """``rope_parameters`` for config.json: the inverse of ``rope_scaling`` (resolved values)."""
    params = {"rope_type": "default", "rope_theta": cfg.rotary_base}
    scaling = cfg.rope_scaling
    if scaling is None:
        return params
    params.update(rope_type=scaling.rope_type, factor=scaling.factor)
    if scaling.rope_type in ("llama3", "yarn"):
        params["original_max_position_embeddings"] = scaling.original_max_positions
    if scaling.rope_type == "llama3":
        params.update(low_freq_factor=scaling.low_freq_factor,
                      high_freq_factor=scaling.high_freq_factor)
    if scaling.rope_type == "yarn":
        params.update(attention_factor=scaling.attention_factor, beta_fast=scaling.beta_fast,
                      beta_slow=scaling.beta_slow, truncate=scaling.truncate)
    return params


def window_layers(hf: dict, family: Family, n_layers: int) -> tuple[int | None, list[int] | None]:
    """(sliding window, the layers that use it; None: all), as each family's model reads it.

    Mistral: every layer when ``sliding_window`` is set (MistralModel ignores
    ``layer_types``). Qwen2: only with ``use_sliding_window``; the layers marked
    ``sliding_attention`` in ``layer_types``, else those from ``max_window_layers`` on.
    Llama: none (LlamaModel has no window).
    """
    window = hf.get("sliding_window")
    if family.window == "none" or not window:
        return None, None
    if family.window == "all":
        return int(window), None
    if not hf.get("use_sliding_window", False):
        return None, None
    layer_types = hf.get("layer_types")
    if layer_types is None:
        start = hf.get("max_window_layers", 28)
        layers = list(range(start, n_layers))
    else:
        if len(layer_types) != n_layers:
            raise ConfigError(
                f"config.json: layer_types has {len(layer_types)} entries for {n_layers} layers."
            )
        unknown = sorted(set(layer_types) - {"full_attention", "sliding_attention"})
        if unknown:
            raise UnsupportedArchitectureError(
                f"layer types {unknown} are not supported; the native converter implements "
                "full_attention and sliding_attention."
            )
        layers = [i for i, kind in enumerate(layer_types) if kind == "sliding_attention"]
    return (int(window), layers) if layers else (None, None)


def window_fields(cfg: TransformerConfig, family: Family) -> dict:
    """The config.json fields of ``cfg``'s sliding window (inverse of ``window_layers``)."""
    if family.window == "all":
        return {"sliding_window": cfg.sliding_window}
    if family.window == "none":
        return {}
    sliding = [cfg.layer_window(i) is not None for i in range(cfg.n_layers)]
    fields = {
        "use_sliding_window": cfg.sliding_window is not None,
        "layer_types": ["sliding_attention" if s else "full_attention" for s in sliding],
    }
    if cfg.sliding_window is not None:
        fields["sliding_window"] = cfg.sliding_window
    return fields


def llama_config(hf: dict, head: str | None, family: Family) -> TransformerConfig:
    n_heads = hf["num_attention_heads"]
    attention_bias = bool(hf.get("attention_bias", False))
    n_layers = hf["num_hidden_layers"]
    n_ctx = hf.get("max_position_embeddings", 2048)
    params = rope_parameters(hf)
    window, windowed_layers = window_layers(hf, family, n_layers)
    return TransformerConfig(
        d_model=hf["hidden_size"],
        n_layers=n_layers,
        n_heads=n_heads,
        d_head=hf.get("head_dim") or hf["hidden_size"] // n_heads,
        n_kv_heads=hf.get("num_key_value_heads") or n_heads,
        d_mlp=hf["intermediate_size"],
        vocab_size=hf["vocab_size"],
        positional="rotary",
        n_ctx=n_ctx,
        rotary_base=float(params["rope_theta"]),
        rope_scaling=rope_scaling(params, n_ctx),
        sliding_window=window,
        sliding_window_layers=windowed_layers,
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
            "rope_parameters": rope_fields(cfg),
            **window_fields(cfg, family),
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
