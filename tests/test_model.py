"""HookedTransformer: configuration switches, head gates, masks and positions."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlens.errors import ConfigError
from tests.helpers import tiny_inputs, tiny_model


def cache_of(model, inputs, *names):
    _, cache = model.run_with_cache(**inputs, names_filter=lambda n: n.endswith(names))
    return cache


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_without_skip_connections_the_residual_is_replaced(norm_position: str) -> None:
    model = tiny_model(use_skip=False, norm_position=norm_position, use_norm=False)
    cache = cache_of(
        model, tiny_inputs(), "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post"
    )
    for layer in range(2):
        assert torch.equal(cache["resid_mid", layer], cache["attn_out", layer])
        assert torch.equal(cache["resid_post", layer], cache["mlp_out", layer])


def test_without_mlp_the_block_is_attention_only() -> None:
    model = tiny_model(use_mlp=False)
    assert not any(isinstance(m, nn.Linear) and m.out_features == 32 for m in model.modules())
    cache = cache_of(model, tiny_inputs(), "hook_resid_mid", "hook_resid_post", "hook_mlp_out")
    assert "blocks.0.hook_mlp_out" not in cache
    assert torch.equal(cache["resid_post", 0], cache["resid_mid", 0])


def test_without_norms_the_norm_modules_are_identities() -> None:
    model = tiny_model(use_norm=False, final_norm=True)
    assert isinstance(model.blocks[0].ln1, nn.Identity)
    assert isinstance(model.final_norm, nn.Identity)


def test_pre_and_post_norm_differ_and_both_run() -> None:
    inputs = tiny_inputs()
    post = tiny_model(norm_position="post")(**inputs)
    pre = tiny_model(norm_position="pre", final_norm=True)(**inputs)
    assert torch.isfinite(post).all() and torch.isfinite(pre).all()
    assert not torch.allclose(post, pre)  # O(1) apart (measured 0.68), far outside rtol 1e-5


@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu", "silu"])
@pytest.mark.parametrize("gated", [False, True])
def test_mlp_variants(act: str, gated: bool) -> None:
    model = tiny_model(act=act, gated_mlp=gated, norm="rmsnorm", norm_position="pre")
    x = torch.randn(2, 3, 16)
    mlp = model.blocks[0].mlp
    hidden = mlp.act(mlp.W_gate(x)) * mlp.W_in(x) if gated else mlp.act(mlp.W_in(x))
    assert torch.allclose(mlp(x), mlp.W_out(hidden))  # exact: the same ops in the same order


def test_rmsnorm_normalises_the_root_mean_square() -> None:
    model = tiny_model(norm="rmsnorm")
    x = 3.0 * torch.randn(4, 16)
    y = model.blocks[0].ln1(x)
    # mean of 16 fp32 squares ~ 1 (~1e-6), plus the norm's eps/ms(x) ~ 1e-6 / 9
    assert torch.allclose(y.pow(2).mean(-1), torch.ones(4), atol=1e-4)


def test_head_mask_of_ones_changes_nothing_and_zeros_silence_a_layer() -> None:
    model = tiny_model()
    inputs = tiny_inputs()
    # exact: a gate of 1.0 multiplies exactly and the path (SDPA) is the same
    assert torch.allclose(model(**inputs, head_mask=torch.ones(2, 4)), model(**inputs))
    mask = torch.ones(2, 4)
    mask[1] = 0.0
    _, cache = model.run_with_cache(**inputs, head_mask=mask, names_filter="blocks.1.hook_attn_out")
    expected = model.blocks[1].attn.b_O.expand_as(cache["attn_out", 1])
    assert torch.allclose(cache["attn_out", 1], expected)  # exact: zero heads + b_O


def test_model_head_gate_gradient_is_defined_for_every_head() -> None:
    model = tiny_model()
    gate = torch.ones(2, 4, requires_grad=True)
    model(**tiny_inputs(), head_mask=gate).pow(2).sum().backward()
    assert gate.grad is not None and (gate.grad.abs() > 0).all()


def test_causal_model_does_not_look_ahead() -> None:
    model = tiny_model(
        causal=True, norm_position="pre", final_norm=True, n_token_types=0, embed_norm=False
    )
    ids = torch.randint(1, 50, (1, 6))
    changed = ids.clone()
    changed[0, 4:] = (changed[0, 4:] % 49) + 1
    a, b = model(input_ids=ids), model(input_ids=changed)
    # same shapes, same kernels; later tokens enter only as exact zeros (measured 0.0)
    assert torch.allclose(a[:, :4], b[:, :4], atol=1e-6)
    assert not torch.allclose(a[:, 4:], b[:, 4:])  # changed tokens move outputs by O(1) (1.8)


def test_rotary_model_sees_relative_positions_only() -> None:
    model = tiny_model(
        positional="rotary", n_token_types=0, causal=True, norm="rmsnorm", norm_position="pre"
    )
    assert model.pos_embed is None
    ids = torch.randint(1, 50, (1, 5))
    base = model(input_ids=ids)
    shifted = model(input_ids=ids, position_ids=torch.arange(5)[None] + 3)
    # a uniform shift keeps every offset; fp32 angles (<= 7 rad) round differently:
    # 7 x 1.19e-7 rad x |q||k| per score, through 2 layers of |h| ~ 3 -> 1e-4 (measured 6e-7)
    assert (base - shifted).abs().max() <= 1e-4
    spread = model(input_ids=ids, position_ids=torch.arange(5)[None] * 2)
    # doubled offsets change scores: outputs move by O(1) (measured 0.8) >> atol 1e-3
    assert not torch.allclose(base, spread, atol=1e-3)


def test_padding_does_not_change_real_tokens() -> None:
    model = tiny_model()
    ids = torch.randint(1, 50, (1, 5))
    alone = model(input_ids=ids)
    padded_ids = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    mask = torch.tensor([[1] * 5 + [0] * 3])
    padded = model(input_ids=padded_ids, attention_mask=mask)
    # other batch shapes, so other kernel blockings: |h| <= ~4 after LayerNorm, sums of <= 32
    # terms: 1.19e-7 x 4 x sqrt(32) ~ 3e-6 -> 1e-5 (measured <= 6.0e-7)
    assert (padded[:, :5] - alone).abs().max() <= 1e-5


def test_inputs_embeds_bypass_the_token_embedding() -> None:
    model = tiny_model(positional="none", n_token_types=0, embed_norm=False)
    x = torch.randn(2, 4, 16)
    _, cache = model.run_with_cache(inputs_embeds=x, names_filter="hook_embed")
    assert torch.equal(cache["embed"], x)


def test_per_layer_head_counts() -> None:
    model = tiny_model(heads_per_layer=[4, 2])
    assert model.heads_per_layer == [4, 2]
    assert model.blocks[1].attn.W_Q.shape == (2, 16, 4)
    out = model(**tiny_inputs(), head_mask=torch.ones(2, 4))
    assert torch.isfinite(out).all()


def test_bad_inputs_are_config_errors() -> None:
    model = tiny_model()
    with pytest.raises(ConfigError, match="exceeds"):
        model(input_ids=torch.ones(1, 40, dtype=torch.long))
    with pytest.raises(ConfigError, match="exactly one"):
        model()
    with pytest.raises(ConfigError, match="one row per layer"):
        model(**tiny_inputs(), head_mask=torch.ones(3, 4))
    with pytest.raises(ConfigError, match="needs a model with that head"):
        model(**tiny_inputs(), return_type="logits")
