"""The hf backend reproduces each family's eager attention and fires attnlens' hooks.

Parity: the same Hugging Face model is run with attnlens' registered attention function and
with transformers' own ``attn_implementation="eager"`` on one right-padded batch (in float64
with eager's float32 softmax taken in float64, as attnlens does:
``hf_softmax_in_input_dtype``). Where both run the same kernels in the same order the results
are bitwise equal; the bound 1e-6 (fp32) / 1e-12 (fp64) is the issue's target and leaves room
for a CPU whose kernels reorder a sum differently.
"""

from __future__ import annotations

import pytest
import torch

from attnlens.backends.hf.attention import (
    UnsupportedKeywordError,
    attnlens_attention,
    unread_keywords,
)
from attnlens.backends.hf.model import HFAttentionModel
from attnlens.errors import AttnlensError
from tests.hf_utils import hf_softmax_in_input_dtype, max_diff, padded_batch, tiny_hf

SINGLE = ["llama", "qwen3", "mistral", "gemma2", "gpt_oss", "gpt_neox", "opt", "modernbert",
          "bert", "gpt2"]
SEQ2SEQ = ["t5", "bart"]
TOL = {torch.float32: 1e-6, torch.float64: 1e-12}


def wrap(model_type: str, **kwargs) -> HFAttentionModel:
    hf = tiny_hf(model_type, **kwargs)
    return HFAttentionModel(hf, {"architecture": type(hf).__name__})


def eager(model: HFAttentionModel, **inputs):
    """The same HF model's own eager attention (patterns and final hidden states); in float64
    with its softmax in float64 (``hf_softmax_in_input_dtype``), as attnlens computes float64."""
    hf = model.hf
    hf.set_attn_implementation("eager")
    try:
        with torch.no_grad(), hf_softmax_in_input_dtype():
            return hf(**inputs, output_attentions=True)
    finally:
        hf.set_attn_implementation("attnlens")


def plain_eager(model: HFAttentionModel, **inputs):
    """transformers' eager attention exactly as it runs (float32 softmax in float64 too)."""
    hf = model.hf
    hf.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            return hf(**inputs, output_attentions=True)
    finally:
        hf.set_attn_implementation("attnlens")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("model_type", SINGLE)
def test_patterns_and_hidden_states_equal_eager(model_type: str, dtype) -> None:
    if model_type == "gpt_oss" and dtype == torch.float64:
        pytest.skip("gpt-oss's experts run grouped matmuls that have no float64 kernel")
    model = wrap(model_type, dtype=dtype)
    ids, mask = padded_batch()
    with torch.no_grad():
        hidden, cache = model.run_with_cache(
            ids, mask, return_type="hidden", names_filter=lambda n: n.endswith("hook_pattern"))
    reference = eager(model, input_ids=ids, attention_mask=mask)
    assert len(reference.attentions) == model.n_layers == 2
    for layer, expected in enumerate(reference.attentions):
        assert cache["pattern", layer].dtype == dtype
        assert max_diff(cache["pattern", layer], expected) <= TOL[dtype], layer
    assert max_diff(hidden, reference.last_hidden_state) <= TOL[dtype]


@pytest.mark.parametrize("model_type", ["llama", "gemma2", "bert"])
def test_float64_runs_the_softmax_in_float64(model_type: str) -> None:
    """Where the model's eager function takes its softmax in float32 (Llama, Gemma 2), float64
    attnlens differs from it by float32 rounding and not from the float64 computation; where
    eager stays in the input dtype (BERT) the two are the same computation."""
    model = wrap(model_type, dtype=torch.float64)
    ids, mask = padded_batch()
    with torch.no_grad():
        _, cache = model.run_with_cache(ids, mask, names_filter="blocks.0.attn.hook_pattern")
    rounded = plain_eager(model, input_ids=ids, attention_mask=mask).attentions[0]
    exact = eager(model, input_ids=ids, attention_mask=mask).attentions[0]
    assert max_diff(cache["pattern", 0], exact) <= TOL[torch.float64]
    # float32 rounding of probabilities <= 1: above float64's 1e-12 bound, within 1e-6.
    gap = max_diff(cache["pattern", 0], rounded)
    if model_type == "bert":
        assert gap <= TOL[torch.float64]
    else:
        assert TOL[torch.float64] < gap <= 1e-6


@pytest.mark.parametrize("model_type", SEQ2SEQ)
def test_encoder_decoder_patterns_equal_eager(model_type: str) -> None:
    model = wrap(model_type)
    ids, mask = padded_batch()
    decoder_ids = ids[:, :5]
    inputs = {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": decoder_ids}
    with torch.no_grad():
        hidden, cache = model.run_with_cache(
            **inputs, return_type="hidden", names_filter=lambda n: n.endswith("hook_pattern"))
    reference = eager(model, **inputs)
    for stack, name, attentions in (
        ("encoder", "attn", reference.encoder_attentions),
        ("decoder", "attn", reference.decoder_attentions),
        ("decoder", "cross_attn", reference.cross_attentions),
    ):
        for layer, expected in enumerate(attentions):
            got = cache[f"{stack}.blocks.{layer}.{name}.hook_pattern"]
            assert max_diff(got, expected) <= TOL[torch.float32], (stack, name, layer)
    assert max_diff(hidden, reference.last_hidden_state) <= TOL[torch.float32]
    assert [r.label() for r in model.attention_layers] == [
        "encoder.0", "encoder.1", "decoder.0", "decoder.1", "cross.0", "cross.1"]


def test_sliding_window_layers_see_only_their_window() -> None:
    model = wrap("mistral")  # sliding_window 4, inputs of 9 tokens
    ids, mask = padded_batch()
    _, cache = model.run_with_cache(ids, mask, names_filter="blocks.0.attn.hook_pattern")
    pattern = cache["pattern", 0][0]  # [head, query_pos, key_pos], sentence 0 has no padding
    query, key = torch.meshgrid(torch.arange(9), torch.arange(9), indexing="ij")
    outside = (key > query) | (key <= query - 4)
    assert bool((pattern[:, outside] == 0).all())
    assert bool((pattern[:, ~outside] > 0).all())


@pytest.mark.parametrize("rope", [{"rope_type": "dynamic", "factor": 4.0},
                                  {"rope_type": "linear", "factor": 4.0}])
def test_a_scaled_rotary_embedding_leaves_the_rotary_measures_out(rope) -> None:
    """Dynamic NTK equals plain RoPE on the probe's short input (not on longer ones): the
    config's rope type decides, so no measure per offset uses unscaled frequencies."""
    plain, scaled = wrap("llama"), wrap("llama", rope_scaling=rope)
    assert plain.blocks[0].attn.rotary_dim == 8 and "rotary" not in plain.weight_problems()
    assert scaled.blocks[0].attn.rotary_dim == 0
    assert "not attnlens' own" in scaled.weight_problems()["rotary"]
    assert "QK" not in scaled.weight_problems()  # the weights themselves are read


def test_an_unknown_keyword_is_an_error_naming_it() -> None:
    module = torch.nn.Linear(2, 2).eval()
    q = k = v = torch.zeros(1, 2, 3, 4)
    with pytest.raises(UnsupportedKeywordError, match="rope_deltas"):
        attnlens_attention(module, q, k, v, None, scaling=0.5, rope_deltas=torch.ones(2))
    # a keyword the model's own eager function names (so reads) is unknown even if attnlens
    # has never heard of it; one it swallows unread in **kwargs is not.
    assert unread_keywords({"alibi": torch.ones(1)}, frozenset({"alibi"})) == ["alibi"]
    assert unread_keywords({"alibi": torch.ones(1)}, frozenset({"query"})) == []
    assert unread_keywords({"alibi": None}, None) == []


def test_attention_dropout_in_training_mode_is_refused() -> None:
    module = torch.nn.Linear(2, 2).train()
    q = k = v = torch.zeros(1, 2, 3, 4)
    with pytest.raises(AttnlensError, match="eval"):
        attnlens_attention(module, q, k, v, None, scaling=0.5, dropout=0.1)


def test_softcap_sinks_and_position_bias_are_applied() -> None:
    """Each keyword changes the pattern as its formula says (against a direct computation)."""
    module = torch.nn.Linear(2, 2).eval()
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 3, 4, generator=gen) for _ in range(3))
    scores = q @ k.transpose(2, 3) * 0.5  # [batch, head, query_pos, key_pos]
    _, capped = attnlens_attention(module, q, k, v, None, scaling=0.5, softcap=1.0)
    assert max_diff(capped, torch.softmax(torch.tanh(scores), -1)) <= 1e-6
    bias = torch.randn(1, 2, 3, 3, generator=gen)
    _, biased = attnlens_attention(module, q, k, v, None, scaling=0.5, position_bias=bias)
    assert max_diff(biased, torch.softmax(scores + bias, -1)) <= 1e-6
    sinks = torch.tensor([0.5, -1.0])
    _, sunk = attnlens_attention(module, q, k, v, None, scaling=0.5, s_aux=sinks)
    full = torch.cat([scores, sinks.reshape(1, 2, 1, 1).expand(1, 2, 3, 1)], -1)
    assert max_diff(sunk, torch.softmax(full, -1)[..., :-1]) <= 1e-6
    assert bool((sunk.sum(-1) < 1).all())  # the sink takes a share of every row


# Hooks -----------------------------------------------------------------------------------------
PINNED_HF_HOOKS_ONE_LAYER = [
    "hook_embed",
    "blocks.0.attn.hook_q", "blocks.0.attn.hook_k", "blocks.0.attn.hook_v",
    "blocks.0.attn.hook_scores", "blocks.0.attn.hook_pattern", "blocks.0.attn.hook_z",
    "blocks.0.attn.hook_result",
    "blocks.0.hook_resid_pre", "blocks.0.hook_attn_out", "blocks.0.hook_resid_post",
]


def test_hook_names_are_pinned() -> None:
    model = wrap("llama", num_hidden_layers=1)
    assert list(model.hook_dict) == PINNED_HF_HOOKS_ONE_LAYER
    seq2seq = wrap("t5", num_layers=1)
    assert list(seq2seq.hook_dict) == [
        "encoder.hook_embed", *(f"encoder.{n}" for n in PINNED_HF_HOOKS_ONE_LAYER[1:]),
        "decoder.hook_embed", *(f"decoder.{n}" for n in PINNED_HF_HOOKS_ONE_LAYER[1:8]),
        "decoder.blocks.0.cross_attn.hook_q", "decoder.blocks.0.cross_attn.hook_k",
        "decoder.blocks.0.cross_attn.hook_v", "decoder.blocks.0.cross_attn.hook_scores",
        "decoder.blocks.0.cross_attn.hook_pattern", "decoder.blocks.0.cross_attn.hook_z",
        "decoder.blocks.0.cross_attn.hook_result",
        "decoder.blocks.0.hook_resid_pre", "decoder.blocks.0.hook_attn_out",
        "decoder.blocks.0.hook_cross_attn_out", "decoder.blocks.0.hook_resid_post",
    ]


def test_hooks_have_the_documented_shapes() -> None:
    model = wrap("llama")  # 4 heads, 2 key/value heads, d_head 8, d_model 32
    ids, mask = padded_batch()
    _, cache = model.run_with_cache(ids, mask)
    shapes = {
        "hook_q": (3, 9, 4, 8), "hook_k": (3, 9, 2, 8), "hook_v": (3, 9, 2, 8),
        "hook_scores": (3, 4, 9, 9), "hook_pattern": (3, 4, 9, 9), "hook_z": (3, 9, 4, 8),
        "hook_result": (3, 9, 4, 32),
    }
    for name, value in cache.items():
        assert tuple(value.shape) == shapes.get(name.split(".")[-1], (3, 9, 32)), name
    # The heads' results sum to the output projection: einsum + sum vs one fused linear, fp32
    # over 4 heads x 8 values of |y| <~ 1: 1e-6 (measured 1.2e-7).
    total = cache["result", 1].sum(2)
    assert max_diff(total, cache["blocks.1.hook_attn_out"]) <= 1e-6


def test_residual_hooks_are_the_layers_inputs_and_outputs() -> None:
    model = wrap("llama")
    ids, mask = padded_batch()
    _, cache = model.run_with_cache(ids, mask, names_filter=lambda n: "resid" in n or "embed" in n)
    with torch.no_grad():
        states = model.hf(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    assert max_diff(cache["hook_embed"], states.hidden_states[0]) == 0.0
    assert max_diff(cache["resid_pre", 1], states.hidden_states[1]) == 0.0
    assert max_diff(cache["resid_post", 0], states.hidden_states[1]) == 0.0


def test_a_hook_replacing_the_pattern_changes_the_output() -> None:
    model = wrap("gemma2")
    ids, mask = padded_batch()
    with torch.no_grad():
        plain = model(ids, mask, return_type="hidden")

        def uniform(pattern, hook):
            return torch.full_like(pattern, 1.0 / pattern.shape[-1])

        changed = model.run_with_hooks(ids, mask, return_type="hidden",
                                       fwd_hooks=[("blocks.1.attn.hook_pattern", uniform)])
        again = model(ids, mask, return_type="hidden")
    assert max_diff(changed, plain) > 1e-3
    assert max_diff(again, plain) == 0.0  # the hook is gone


def test_head_mask_gates_heads_before_the_output_projection() -> None:
    model = wrap("opt")
    ids, mask = padded_batch()
    gate = torch.ones(2, 4)
    gate[0, 1] = gate[1, 3] = 0.0

    def zero(z, hook, head):
        z = z.clone()
        z[:, :, head] = 0.0
        return z

    with torch.no_grad():
        gated = model(ids, mask, head_mask=gate, return_type="hidden")
        hooked = model.run_with_hooks(ids, mask, return_type="hidden", fwd_hooks=[
            ("blocks.0.attn.hook_z", lambda z, hook: zero(z, hook, 1)),
            ("blocks.1.attn.hook_z", lambda z, hook: zero(z, hook, 3))])
        plain = model(ids, mask, return_type="hidden")
    assert max_diff(gated, hooked) == 0.0
    assert max_diff(gated, plain) > 1e-3


def test_gates_carry_gradients_to_the_head_mask() -> None:
    model = wrap("bert")
    ids, mask = padded_batch()
    gate = torch.ones(2, 4, requires_grad=True)
    model(ids, mask, head_mask=gate, return_type="hidden").pow(2).sum().backward()
    assert gate.grad is not None and bool((gate.grad != 0).all())


def test_the_sdpa_fast_path_agrees_and_hooks_turn_it_off() -> None:
    model = wrap("llama")
    ids, mask = padded_batch()
    with torch.no_grad():
        fast = model(ids, mask, return_type="hidden")
        _, cache = model.run_with_cache(ids, mask, return_type="hidden",
                                        names_filter="blocks.1.attn.hook_z")
        model.set_use_sdpa(False)
        exact = model(ids, mask, return_type="hidden")
        model.set_use_sdpa(True)
    reference = eager(model, input_ids=ids, attention_mask=mask).last_hidden_state
    assert max_diff(exact, reference) == 0.0  # the hooked eager path: the same kernels
    # SDPA's fused kernel vs matmul-softmax-matmul in fp32, hidden states |h| <~ 5 over two
    # layers: a few ulps, 1e-5 (measured 4.8e-7 on real tokens; padded rows are masked
    # uniformly by both); padded query rows excluded
    real = mask.bool()
    assert max_diff(fast[real], reference[real]) <= 1e-5
    assert cache["blocks.1.attn.hook_z"].shape == (3, 9, 4, 8)  # hook_z still fires
