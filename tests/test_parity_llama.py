"""Parity with Hugging Face Llama, Mistral and Qwen2 (eager, fp32) on tiny GQA models.

Each model has 4 query heads sharing 2 key/value heads, RoPE, RMSNorm and a gated MLP; the
batch is right-padded (causal LMs too) and compared on real tokens.
"""

from __future__ import annotations

import pytest

from attnlens.loaders import load_model
from tests.parity_utils import TINY, VOCAB, padded_batch, save_tiny, tiny_parity

GQA = dict(num_key_value_heads=2, max_position_embeddings=64, **TINY)


def make_config(family: str, **overrides):
    import transformers

    config_cls = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
                  "qwen2": transformers.Qwen2Config}[family]
    base = dict(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, **GQA)
    base.update(overrides)
    return config_cls(**base)


CASES = [
    ("llama", "LlamaModel", {}),
    ("llama", "LlamaForCausalLM", {}),
    # Biases on q/k/v/o and the MLP, a tied head, a non-default base and head_dim != d/heads.
    ("llama", "LlamaForCausalLM", dict(attention_bias=True, mlp_bias=True, head_dim=16,
                                       tie_word_embeddings=True,
                                       rope_parameters={"rope_type": "default",
                                                        "rope_theta": 500.0})),
    ("mistral", "MistralModel", {}),
    ("mistral", "MistralForCausalLM", dict(sliding_window=16)),
    ("qwen2", "Qwen2Model", {}),
    ("qwen2", "Qwen2ForCausalLM", {}),
    ("qwen2", "Qwen2ForCausalLM", dict(head_dim=16, tie_word_embeddings=True)),
]


@pytest.mark.parametrize(("family", "architecture", "overrides"), CASES)
def test_tiny_llama_style_parity(family, architecture, overrides, tmp_path):
    import transformers

    config = make_config(family, **overrides)
    model_cls = getattr(transformers, architecture)
    label = f"{architecture} {sorted(overrides)}"
    _, ours, _ = tiny_parity(model_cls, config, tmp_path, padded_batch(), label)
    attn = ours.blocks[0].attn
    assert (attn.n_heads, attn.n_kv_heads) == (4, 2)
    assert attn.d_head == overrides.get("head_dim", 8)
    if "rope_parameters" in overrides:
        assert attn.rotary_base == 500.0
    # Qwen2: q/k/v biases and no o_proj bias; Mistral: no biases.
    has_qkv_bias = family == "qwen2" or overrides.get("attention_bias", False)
    assert (attn.b_Q is not None) == has_qkv_bias
    assert (attn.b_O is not None) == overrides.get("attention_bias", False)


def test_qwen2_sliding_layers_set_the_window(tmp_path):
    from transformers import Qwen2Model

    # Layers from max_window_layers on use the window: layer 1 of 2 here.
    config = make_config("qwen2", use_sliding_window=True, sliding_window=5, max_window_layers=1)
    save_tiny(Qwen2Model, config, tmp_path)
    model = load_model(tmp_path)
    assert (model.cfg.sliding_window, model.cfg.sliding_window_layers) == (5, [1])
    save_tiny(Qwen2Model, make_config("qwen2", use_sliding_window=False), tmp_path / "full")
    assert load_model(tmp_path / "full").cfg.sliding_window is None
