"""Shrink any transformers config to a tiny one, by field name only (no per-model code).

``shrink(config)`` walks the config and each of its sub-configs and sets every field whose
name says what it is (``FIELD_RULES``): 2 layers, width 32, 4 heads of 8 (2 key/value heads),
feed-forward width 64 (key/value heads: 4, 2 or 1 as the default config has as many as its
heads, fewer, or one), 4 experts (2 per token), vocabulary 128, 128 positions, 4-token sliding
windows (shorter than the sweep's inputs, so windows matter), images of 32 x 32 in patches of
8. Per-layer lists (``layer_types`` and other lists as long as the layer count) keep one entry of
each kind. Token ids outside the vocabulary are moved into it. It returns the names of the
fields it changed, for the coverage table.
"""

from __future__ import annotations

import re
from collections.abc import Callable

LAYERS, WIDTH, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB, POSITIONS = 2, 32, 4, 2, 8, 64, 128, 128

# (pattern on the field name, new value or function of the old value); first match wins.
FIELD_RULES: list[tuple[str, Callable[[int], int] | int]] = [
    (r"^(num_hidden_layers|num_layers|n_layers?|encoder_layers|decoder_layers|"
     r"num_decoder_layers|num_encoder_layers|text_layers|vision_layers|depth)$", LAYERS),
    (r"^(num_attention_heads|n_heads?|num_heads|encoder_attention_heads|"
     r"decoder_attention_heads|attention_heads)$", HEADS),
    # as many as the heads (MHA, and MLA's expanded keys), 2 (GQA) or 1 (MQA), as the default
    (r"^(num_key_value_heads|n_kv_heads|num_kv_heads|multi_query_group_num)$", KV_HEADS),
    (r"^(hidden_size|d_model|n_embd|dim|embed_dim|embedding_size|word_embed_proj_dim|"
     r"projection_dim|hidden_dim|model_dim)$", WIDTH),
    (r"(^|_)head_dim$|^d_kv$|^kv_channels$|^attention_head_size$", HEAD_DIM),
    (r"lora_rank$", 16),
    (r"^rotary_dim$", HEAD_DIM // 2),
    (r"(intermediate_size|ffn_dim|^d_ff$|^n_inner$|^d_inner$|intermediate_dim)", FFN),
    (r"^(num_local_experts|num_experts|n_routed_experts|moe_num_experts)$", 4),
    (r"^(num_experts_per_tok|moe_topk|num_selected_experts|top_k_experts)$", 2),
    (r"^(n_shared_experts|num_shared_experts)$", 1),
    (r"^(n_group|topk_group)$", 1),
    (r"^vocab_size$", VOCAB),
    (r"^(max_position_embeddings|n_positions|n_ctx|max_seq_len|max_sequence_length|"
     r"seq_length)$", POSITIONS),
    (r"^sliding_window$", 4),
    (r"^image_size$", 32),
    (r"^patch_size$", 8),
]
_COMPILED = [(re.compile(p), v) for p, v in FIELD_RULES]
_KV_HEADS = re.compile(FIELD_RULES[2][0])
_TOKEN_ID = re.compile(r"_token_ids?$|^(pad|bos|eos|unk|sep|cls|mask)_id$")


def _value_for(name: str, old, fields: dict):
    if not isinstance(old, int) or isinstance(old, bool) or old <= 0:
        return None
    if _KV_HEADS.search(name):  # keep the kind of attention: MHA, GQA or MQA
        heads = next((fields[k] for k in ("num_attention_heads", "n_head", "num_heads")
                      if isinstance(fields.get(k), int)), None)
        return None if old == 1 else (min(HEADS, old) if old == heads else KV_HEADS)
    for pattern, value in _COMPILED:
        if pattern.search(name):
            new = value(old) if callable(value) else value
            return new if new < old else None  # only ever shrink
    return None


def _one_per_kind(values: list) -> list:
    """The first entry of each distinct value, in order, as many as the layers (at most 2)."""
    kept = list(dict.fromkeys(map(str, values)))
    chosen = [next(v for v in values if str(v) == k) for k in kept][:LAYERS]
    while len(chosen) < LAYERS:
        chosen.append(values[len(chosen) % len(values)])
    return chosen


def shrink(config, prefix: str = "") -> list[str]:
    """Shrink ``config`` in place (module docstring); the changed fields, dotted for sub-configs."""
    from transformers import PretrainedConfig

    changed: list[str] = []
    fields = config.to_dict()
    old_layers = next((fields[k] for k in ("num_hidden_layers", "num_layers", "n_layer")
                       if isinstance(fields.get(k), int)), None)
    for name in fields:
        value = getattr(config, name, None)
        if isinstance(value, PretrainedConfig):
            changed += shrink(value, f"{prefix}{name}.")
            continue
        new = _value_for(name, value, fields)
        if new is not None:
            setattr(config, name, new)
            changed.append(prefix + name)
        elif isinstance(value, list) and value and old_layers and len(value) == old_layers:
            setattr(config, name, _one_per_kind(value))  # per-layer settings
            changed.append(prefix + name)
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int):
        for name in fields:
            value = getattr(config, name, None)
            if not _TOKEN_ID.search(name):
                continue
            if isinstance(value, int) and value >= vocab:
                setattr(config, name, min(vocab - 1, 2))
                changed.append(prefix + name)
            elif isinstance(value, list) and any(isinstance(v, int) and v >= vocab
                                                 for v in value):
                setattr(config, name, [v for v in value if isinstance(v, int) and v < vocab]
                        or [min(vocab - 1, 2)])
                changed.append(prefix + name)
    return changed
