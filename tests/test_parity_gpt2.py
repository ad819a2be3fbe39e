"""Parity with Hugging Face GPT-2 (eager, fp32) on tiny random models; refused options."""

from __future__ import annotations

import pytest

from attnlens.errors import UnsupportedArchitectureError
from attnlens.loaders import load_model
from tests.parity_utils import VOCAB, padded_batch, save_tiny, tiny_parity


def gpt2_config(**overrides):
    from transformers import GPT2Config

    base = dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=40,
                bos_token_id=0, eos_token_id=0)
    base.update(overrides)
    return GPT2Config(**base)


@pytest.mark.parametrize("architecture", ["GPT2Model", "GPT2LMHeadModel"])
def test_tiny_gpt2_parity(architecture, tmp_path):
    import transformers

    model_cls = getattr(transformers, architecture)
    _, ours, _ = tiny_parity(model_cls, gpt2_config(), tmp_path, padded_batch(), architecture)
    assert ours.cfg.causal and ours.cfg.norm_position == "pre"


def test_gpt2_variants(tmp_path):
    """Unscaled attention, a different activation and an untied LM head."""
    from transformers import GPT2LMHeadModel

    config = gpt2_config(scale_attn_weights=False, activation_function="relu", n_inner=48,
                         tie_word_embeddings=False)
    _, ours, _ = tiny_parity(GPT2LMHeadModel, config, tmp_path, padded_batch(), "gpt2 variant")
    assert ours.cfg.attn_scale == 1.0
    assert ours.head.decoder.weight is not ours.embed.weight


@pytest.mark.parametrize("flag", ["scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"])
def test_unsupported_gpt2_options_are_refused(flag, tmp_path):
    from transformers import GPT2Model

    save_tiny(GPT2Model, gpt2_config(**{flag: True}), tmp_path)
    with pytest.raises(UnsupportedArchitectureError, match=flag):
        load_model(tmp_path)
