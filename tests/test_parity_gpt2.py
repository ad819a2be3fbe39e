"""Parity with Hugging Face GPT-2 (eager, fp32) on tiny random models, its attention flags;
refused options."""

from __future__ import annotations

import pytest
import torch

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


FLAGS = [
    dict(scale_attn_by_inverse_layer_idx=True),
    dict(reorder_and_upcast_attn=True),
    dict(scale_attn_by_inverse_layer_idx=True, reorder_and_upcast_attn=True),
    dict(scale_attn_by_inverse_layer_idx=True, scale_attn_weights=False),
]


@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: "+".join(sorted(f)))
def test_gpt2_attention_flags_parity(flags, tmp_path):
    """GPT-2's ``scale_attn_by_inverse_layer_idx`` (layer l's scores / (l + 1)) and
    ``reorder_and_upcast_attn`` (scores from float32 queries and keys; the same numbers in
    float32), against HF eager within TINY_TOL (fp32)."""
    from transformers import GPT2LMHeadModel

    # Two layers, as the other tiny models (measured <= 4.8e-6 under the default kernels):
    # TINY_TOL is sized for them; a third layer grows the residual stream (|hidden| <= 28)
    # and its rounding (1.1e-5 measured under ATEN_CPU_CAPABILITY=default).
    config = gpt2_config(**flags)
    _, ours, _ = tiny_parity(GPT2LMHeadModel, config, tmp_path, padded_batch(), str(flags))
    scale = 1.0 if flags.get("scale_attn_weights") is False else 8**-0.5
    inverse = flags.get("scale_attn_by_inverse_layer_idx", False)
    expected = [scale, scale / 2] if inverse else [scale] * 2
    assert [b.attn.scale for b in ours.blocks] == pytest.approx(expected, rel=1e-15)
    assert ours.blocks[0].attn.upcast_scores == flags.get("reorder_and_upcast_attn", False)


def test_inverse_layer_scaling_changes_the_model(tmp_path):
    """The parity above is not vacuous: without the per-layer scale, layer 1 differs."""
    from transformers import GPT2Model

    from tests.parity_utils import attnlens_outputs, hf_outputs, max_differences

    hf = save_tiny(GPT2Model, gpt2_config(scale_attn_by_inverse_layer_idx=True), tmp_path)
    ours = load_model(tmp_path)
    ours.blocks[1].attn.scale = ours.blocks[0].attn.scale
    batch = padded_batch()
    diffs = max_differences(attnlens_outputs(ours, batch), hf_outputs(hf, batch),
                            batch.attention_mask)
    assert diffs["attention"] > 1e-3


def test_upcast_scores_are_float32_in_bfloat16(tmp_path):
    """reorder_and_upcast_attn: scores from float32 queries and keys whatever the dtype
    (the manual path runs, since SDPA would compute them in bfloat16)."""
    from transformers import GPT2Model

    save_tiny(GPT2Model, gpt2_config(reorder_and_upcast_attn=True), tmp_path)
    ours = load_model(tmp_path, dtype=torch.bfloat16)
    batch = padded_batch()
    _, cache = ours.run_with_cache(**batch.inputs(), names_filter=lambda n: "hook_" in n)
    assert cache["blocks.0.attn.hook_scores"].dtype == torch.float32
    assert cache["blocks.0.attn.hook_pattern"].dtype == torch.bfloat16
    q = cache["blocks.0.attn.hook_q"].float().transpose(1, 2)  # [batch, head, pos, d_head]
    k = cache["blocks.0.attn.hook_k"].float().transpose(1, 2)
    expected = q @ k.mT * ours.blocks[0].attn.scale
    real = batch.attention_mask.bool()
    visible = torch.ones(9, 9, dtype=torch.bool).tril()  # [query_pos, key_pos], causal
    pair = real[:, None, :, None] & real[:, None, None, :] & visible
    scores = cache["blocks.0.attn.hook_scores"]
    assert torch.equal(scores.masked_select(pair.expand_as(scores)),
                       expected.masked_select(pair.expand_as(expected)))
    with torch.no_grad():  # the fast path gives the same output (it takes the manual path)
        fast = ours(**batch.inputs())
        ours.set_use_sdpa(False)
        manual = ours(**batch.inputs())
    assert torch.equal(fast, manual)


def test_cross_attention_is_still_refused(tmp_path):
    from transformers import GPT2Model

    save_tiny(GPT2Model, gpt2_config(add_cross_attention=True), tmp_path)
    with pytest.raises(UnsupportedArchitectureError, match="add_cross_attention"):
        load_model(tmp_path, backend="native")  # auto would take the hf backend
