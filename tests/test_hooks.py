"""Hook points: names, shapes, firing order, removal, caching, backward hooks."""

from __future__ import annotations

import pytest
import torch

from attnlens.errors import AttnlensError
from attnlens.hooks import ActivationCache
from tests.helpers import tiny_inputs, tiny_model

# The stable public list of hook names (module order) for one block of a BERT-like model.
PINNED_HOOKS_ONE_LAYER = [
    "hook_embed",
    "blocks.0.attn.hook_q",
    "blocks.0.attn.hook_k",
    "blocks.0.attn.hook_v",
    "blocks.0.attn.hook_scores",
    "blocks.0.attn.hook_pattern",
    "blocks.0.attn.hook_z",
    "blocks.0.attn.hook_result",
    "blocks.0.mlp.hook_pre",
    "blocks.0.mlp.hook_post",
    "blocks.0.hook_resid_pre",
    "blocks.0.hook_attn_out",
    "blocks.0.hook_resid_mid",
    "blocks.0.hook_mlp_out",
    "blocks.0.hook_resid_post",
]

# Order in which they fire in a forward pass (hook_result only when hooked).
FIRING_ORDER = [
    "hook_embed",
    "blocks.0.hook_resid_pre",
    "blocks.0.attn.hook_q",
    "blocks.0.attn.hook_k",
    "blocks.0.attn.hook_v",
    "blocks.0.attn.hook_scores",
    "blocks.0.attn.hook_pattern",
    "blocks.0.attn.hook_z",
    "blocks.0.attn.hook_result",
    "blocks.0.hook_attn_out",
    "blocks.0.hook_resid_mid",
    "blocks.0.mlp.hook_pre",
    "blocks.0.mlp.hook_post",
    "blocks.0.hook_mlp_out",
    "blocks.0.hook_resid_post",
]


def expected_shape(name: str, batch: int, pos: int, cfg) -> tuple[int, ...]:
    h, d = cfg.n_heads, cfg.d_head
    short = name.split(".")[-1]
    return {
        "hook_q": (batch, pos, h, d),
        "hook_k": (batch, pos, h, d),
        "hook_v": (batch, pos, h, d),
        "hook_scores": (batch, h, pos, pos),
        "hook_pattern": (batch, h, pos, pos),
        "hook_z": (batch, pos, h, d),
        "hook_result": (batch, pos, h, cfg.d_model),
        "hook_pre": (batch, pos, cfg.d_mlp),
        "hook_post": (batch, pos, cfg.d_mlp),
    }.get(short, (batch, pos, cfg.d_model))


def test_hook_names_are_pinned() -> None:
    model = tiny_model(n_layers=1)
    assert list(model.hook_dict) == PINNED_HOOKS_ONE_LAYER
    two = tiny_model(n_layers=2)
    assert len(two.hook_dict) == 1 + 2 * (len(PINNED_HOOKS_ONE_LAYER) - 1)
    assert all(hp.name == name for name, hp in two.hook_dict.items())


def test_hooks_fire_in_order_with_documented_shapes() -> None:
    model = tiny_model(n_layers=1)
    inputs = tiny_inputs(batch=3, length=7)
    seen = []

    def record(t, hook):
        seen.append((hook.name, tuple(t.shape)))

    with model.hooks([(lambda name: True, record)]):
        model(**inputs)
    assert [name for name, _ in seen] == FIRING_ORDER
    for name, shape in seen:
        assert shape == expected_shape(name, 3, 7, model.cfg), name


def test_hook_result_sums_to_attention_output() -> None:
    model = tiny_model()
    inputs = tiny_inputs()
    _, cache = model.run_with_cache(
        **inputs, names_filter=lambda n: n.endswith(("hook_result", "hook_attn_out"))
    )
    for layer in range(2):
        total = cache["result", layer].sum(dim=2) + model.blocks[layer].attn.b_O
        # per-head einsum + sum over 4 heads vs one fused linear: other fp32 orders on |y| <= ~3,
        # 1.19e-7 x 3 x sqrt(16) ~ 1.4e-6 -> 1e-5 (measured 0.0)
        assert (total - cache["attn_out", layer]).abs().max() <= 1e-5


def test_context_manager_removes_hooks_also_when_the_body_raises() -> None:
    model = tiny_model()
    inputs = tiny_inputs()
    calls = []
    with (
        pytest.raises(RuntimeError, match="boom"),
        model.hooks([("blocks.0.attn.hook_pattern", lambda t, hook: calls.append(1))]),
    ):
        model(**inputs)
        raise RuntimeError("boom")
    assert calls == [1]
    assert not any(hp.has_hooks for hp in model.hook_dict.values())
    model(**inputs)
    assert calls == [1]


def test_forward_hook_can_edit_activations() -> None:
    model = tiny_model()
    inputs = tiny_inputs()
    base = model(**inputs)
    zero_attn = model.run_with_hooks(
        **inputs, fwd_hooks=[("blocks.1.hook_attn_out", lambda t, hook: torch.zeros_like(t))]
    )
    assert not torch.allclose(base, zero_attn)  # O(1) apart (measured 1.5), beyond rtol 1e-5
    assert torch.equal(model(**inputs), base)  # hooks gone afterwards


def test_run_with_cache_keeps_exactly_what_the_filter_asks() -> None:
    model = tiny_model()
    inputs = tiny_inputs()
    _, cache = model.run_with_cache(**inputs, names_filter="blocks.1.attn.hook_pattern")
    assert list(cache) == ["blocks.1.attn.hook_pattern"]
    assert torch.equal(cache["pattern", 1], cache["blocks.1.attn.hook_pattern"])
    _, cache = model.run_with_cache(
        **inputs, names_filter=["hook_embed", "blocks.0.hook_resid_post"]
    )
    assert set(cache) == {"hook_embed", "blocks.0.hook_resid_post"}
    assert torch.equal(cache["embed"], cache["hook_embed"])
    _, everything = model.run_with_cache(**inputs)
    assert list(everything) == [n for n in model.hook_dict if n in everything]
    assert "blocks.0.attn.hook_result" in everything
    with pytest.raises(KeyError, match="not in the cache"):
        cache["pattern", 0]


def test_cache_can_stay_on_cpu_and_is_detached() -> None:
    model = tiny_model()
    _, cache = model.run_with_cache(
        **tiny_inputs(), names_filter=lambda n: "resid" in n, to_cpu=True
    )
    assert all(t.device.type == "cpu" and not t.requires_grad for t in cache.values())
    stacked = cache.stack("resid_post", [0, 1])
    assert stacked.shape[0] == 2
    assert isinstance(cache, ActivationCache)


def test_backward_hook_sees_the_gradient_of_its_point() -> None:
    model = tiny_model()
    inputs = tiny_inputs()
    grads = {}

    def keep(g, hook):
        grads[hook.name] = g.clone()

    kept = {}

    def keep_fwd(t, hook):
        t.retain_grad()
        kept[hook.name] = t

    with model.hooks(
        fwd_hooks=[("blocks.1.hook_resid_mid", keep_fwd)],
        bwd_hooks=[("blocks.1.hook_resid_mid", keep)],
    ):
        model(**inputs).sum().backward()
    # exact: the same gradient tensor seen by a hook and by retain_grad
    assert torch.allclose(grads["blocks.1.hook_resid_mid"], kept["blocks.1.hook_resid_mid"].grad)


def test_unknown_hook_name_is_a_clear_error() -> None:
    model = tiny_model()
    with (
        pytest.raises(AttnlensError, match="unknown hook point"),
        model.hooks([("blocks.0.attn.hook_nope", lambda t, hook: None)]),
    ):
        pass


def test_public_api_names_resolve() -> None:
    import attnlens

    for name in attnlens.__all__:
        assert getattr(attnlens, name) is not None, name
