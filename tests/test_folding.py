"""Weight analyses see the form the head applies: the input norm folded in, RoPE per offset."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlens.analysis.circuits import circuit_spectra
from attnlens.analysis.shared_subspace import shared_subspace_tables
from attnlens.analysis.weight_asymmetry import (
    OFFSETS_SUFFIX,
    bilinear_shares,
    head_weight_asymmetry,
    offsets_for,
    rotary_offset_measures,
    rotary_tables,
    weight_asymmetry_table,
)
from attnlens.model import HookedTransformer, TransformerConfig
from attnlens.model.attention import apply_rotary, rotary_cos_sin
from attnlens.model.folding import attention_input_norm, folded_attention_weights


def pre_norm_model(norm: str, seed: int = 0, **overrides) -> HookedTransformer:
    """A pre-norm model whose norms have random gains (and biases): folding must matter."""
    torch.manual_seed(seed)
    base = dict(d_model=16, n_layers=2, n_heads=4, d_mlp=32, vocab_size=40, n_ctx=32,
                norm=norm, norm_position="pre", final_norm=True)
    cfg = TransformerConfig(**{**base, **overrides})
    model = HookedTransformer(cfg).double().eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "ln" in name:
                param.copy_(torch.randn_like(param) * (0.5 if name.endswith("bias") else 1.0))
            elif name.endswith(("b_Q", "b_K", "b_V")):
                param.normal_(std=0.3)
    return model


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_folded_weights_reproduce_the_queries_keys_and_values(norm: str) -> None:
    """q = (x / s) W~_Q + b~_Q on the raw residual x, with s the norm's scale of each token."""
    model = pre_norm_model(norm)
    x = torch.randn(2, 5, 16, dtype=torch.float64) * 3 + 1  # residual stream, not centred
    names = ("hook_q", "hook_k", "hook_v")
    seen = {}
    block = model.blocks[1]
    hooks = [(f"blocks.1.attn.{n}", lambda t, hook, n=n: seen.__setitem__(n, t)) for n in names]
    with torch.no_grad(), model.hooks(fwd_hooks=hooks):
        block.attn(block.ln1(x))
    eps = attention_input_norm(model, 1).eps
    if norm == "layernorm":
        scale = (x.var(-1, unbiased=False, keepdim=True) + eps).sqrt()
    else:
        scale = (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    folded = folded_attention_weights(model, 1)
    assert folded.folded
    for n, W, b in zip(names, (folded.W_Q, folded.W_K, folded.W_V),
                       (folded.b_Q, folded.b_K, folded.b_V), strict=True):
        expected = torch.einsum("bpi,hid->bphd", x / scale, W) + b  # [batch, pos, head, d]
        # LayerNorm: float64 throughout, the norm's mean/variance round differently, ~1e-14.
        # RMSNorm normalises in float32 (as Llama does): each input rounded to fp32 (eps
        # 1.19e-7) and summed over 16 features: ~1e-6 of |q| at most.
        tol = 1e-10 if norm == "layernorm" else 1e-6
        torch.testing.assert_close(seen[n], expected, rtol=tol, atol=tol)


def test_post_norm_models_are_not_folded() -> None:
    torch.manual_seed(0)
    model = HookedTransformer(TransformerConfig(d_model=8, n_layers=1, n_heads=2, d_mlp=8,
                                                vocab_size=10)).eval()
    folded = folded_attention_weights(model, 0)
    assert not folded.folded and attention_input_norm(model, 0) is None
    assert torch.equal(folded.W_Q, model.blocks[0].attn.W_Q.detach().double())


def test_weight_tables_use_the_folded_form() -> None:
    model = pre_norm_model("layernorm")
    table = weight_asymmetry_table(model).set_index(["layer", "head", "measure"])["value"]
    folded = folded_attention_weights(model, 0)
    expected = bilinear_shares(folded.W_Q, folded.W_K)["antisym_share"]
    np.testing.assert_allclose([table[(0, h, "antisym_share")] for h in range(4)],
                               expected.numpy(), rtol=1e-12)
    raw = bilinear_shares(model.blocks[0].attn.W_Q, model.blocks[0].attn.W_K)["antisym_share"]
    assert not np.allclose(expected.numpy(), raw.numpy(), rtol=1e-3)  # folding matters here
    qk = circuit_spectra(model, circuits=("QK",))
    rows = qk[(qk["layer"] == 0) & (qk["head"] == 2)]["singular_value"].to_numpy()
    explicit = torch.linalg.svdvals(folded.W_Q[2] @ folded.W_K[2].T)[: len(rows)]
    np.testing.assert_allclose(rows, explicit.numpy(), rtol=1e-9, atol=1e-12)
    dims = shared_subspace_tables(model)["shared_subspace_dims"]
    assert set(dims["matrix"]) == {"W_Q", "W_K", "W_QK"}


def rotation(d_head: int, rotary_dim: int, base: float, position: int) -> torch.Tensor:
    """``R(p) [d_head, d_head]`` built with the model's own apply_rotary: row k = e_k R(p)."""
    eye = torch.eye(d_head, dtype=torch.float64)[None, :, None, :]  # [1, d, 1, d]
    cos, sin = rotary_cos_sin(torch.full((1, d_head), position), rotary_dim, base,
                              torch.float64)
    return apply_rotary(eye, cos, sin)[0, :, 0, :]


@pytest.mark.parametrize("rotary_dim", [8, 4])
def test_rotary_offsets_match_explicit_rotated_forms(rotary_dim: int) -> None:
    model = pre_norm_model("rmsnorm", positional="rotary", rotary_dim=rotary_dim, causal=True,
                           qkv_bias=True, n_heads=2)  # d_head 8
    attn = model.blocks[0].attn
    folded = folded_attention_weights(model, 0)
    offsets = offsets_for(model, 6)
    cos, sin, J = rotary_tables(attn.d_head, attn.rotary_dim, attn.rotary_base, offsets)
    measured = rotary_offset_measures(folded, cos, sin, J)
    for o, delta in enumerate(offsets.tolist()):
        i, j = delta + 3, 3  # positions whose difference is delta
        R = rotation(attn.d_head, rotary_dim, attn.rotary_base, i) @ rotation(
            attn.d_head, rotary_dim, attn.rotary_base, j).T  # R(i) R(j)^T = R(i - j)
        for h in range(attn.n_heads):
            W_Q, W_K, b_Q = folded.W_Q[h], folded.W_K[h], folded.b_Q[h]
            u = W_K @ R.T @ b_Q  # key-only bias term at this offset
            plain = bilinear_shares(W_Q @ R, W_K)
            affine = bilinear_shares(W_Q @ R, W_K, key_bias=u)
            # The model's rotary_cos_sin takes its angles in float32 (delta x theta <= 8 rad,
            # error <= 8 x 1.2e-7 ~ 1e-6 per entry of R); the expansion uses float64 angles.
            tol = 1e-5
            assert measured["antisym_share"][h, o] == pytest.approx(
                float(plain["antisym_share"]), abs=tol)
            assert measured["symmetry"][h, o] == pytest.approx(float(plain["symmetry"]),
                                                               abs=tol)
            assert measured["antisym_share_affine"][h, o] == pytest.approx(
                float(affine["antisym_share"]), abs=tol)
            assert measured["key_bias_norm"][h, o] == pytest.approx(float(u.norm()), rel=tol)
    # A wrong rotation (the transpose, -delta) gives other shares: the check can fail.
    wrong = rotary_offset_measures(folded, cos, -sin, J)["antisym_share"]
    assert (wrong - measured["antisym_share"]).abs().max() > 1e-3
    # Offset 0 is the plain form: the table's offset-0 measures are the unrotated ones.
    table = weight_asymmetry_table(model, offsets=6).set_index(["layer", "head", "measure"])
    plain0 = head_weight_asymmetry(folded)["antisym_share"]
    assert table.loc[(0, 1, "antisym_share"), "value"] == pytest.approx(float(plain0[1]))
    mean = measured["antisym_share"].mean(dim=1)
    assert table.loc[(0, 1, "antisym_share" + OFFSETS_SUFFIX), "value"] == pytest.approx(
        float(mean[1]))


def test_models_without_rotary_get_no_offset_rows() -> None:
    table = weight_asymmetry_table(pre_norm_model("layernorm"))
    assert not table["measure"].str.endswith(OFFSETS_SUFFIX).any()
    assert offsets_for(pre_norm_model("layernorm"), 3).tolist() == [-2, -1, 0, 1, 2]
