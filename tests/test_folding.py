"""Weight analyses see the form the head applies: the input norm folded in, RoPE per offset."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlens.measures.asymmetry.weight_asymmetry import (
    OFFSETS_SUFFIX,
    bilinear_shares,
    head_weight_asymmetry,
    offsets_for,
    rotary_offset_measures,
    rotary_tables,
    weight_asymmetry_table,
)
from attnlens.measures.circuits.circuits import (
    circuit_spectra,
    circuit_summary,
    rotary_qk_singular_values,
)
from attnlens.measures.circuits.shared_subspace import shared_subspace_tables
from attnlens.measures.spectrum.spectrum import (
    cumulative_curve,
    entropy_effective_rank,
    numerical_rank,
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


def rotary_llama(rotary_dim: int | None) -> HookedTransformer:
    """A tiny random Llama: RMSNorm with random gains, RoPE, causal, 2 query heads sharing 1
    key/value head (GQA), d_in 16 > d_head 8, so the QK form is a rank-8 16 x 16 matrix."""
    return pre_norm_model("rmsnorm", positional="rotary", rotary_dim=rotary_dim, causal=True,
                          qkv_bias=False, n_heads=2, n_kv_heads=1, gated_mlp=True, act="silu")


@pytest.mark.parametrize("rotary_dim", [None, 4])
def test_rotary_qk_spectra_per_offset_match_the_explicit_forms(rotary_dim: int | None) -> None:
    model = rotary_llama(rotary_dim)
    attn = model.blocks[1].attn
    assert attn.rotary_dim == (rotary_dim or attn.d_head) and attn.n_kv_heads == 1
    folded = folded_attention_weights(model, 1)
    offsets = offsets_for(model, 6)  # 0 .. 5: the offsets a causal query sees among 6 tokens
    core = rotary_qk_singular_values(folded, attn, offsets)  # [head, offset, r]
    assert core.shape == (2, 6, attn.d_head) and core.dtype == torch.float64
    explicit = torch.empty_like(core)
    for o, delta in enumerate(offsets.tolist()):
        i, j = delta + 3, 3  # positions whose difference is delta
        R = rotation(attn.d_head, attn.rotary_dim, attn.rotary_base, i) @ rotation(
            attn.d_head, attn.rotary_dim, attn.rotary_base, j).T  # R(i) R(j)^T = R(i - j)
        for h in range(2):
            M = folded.W_Q[h] @ R @ folded.W_K[0].T  # [d_in, d_in]: the form at this offset
            explicit[h, o] = torch.linalg.svdvals(M)[: attn.d_head]
    # The model's rotary_cos_sin takes its angles and cosines in float32 (angle <= 8 rad:
    # ~1e-6 per entry of R), the core float64 angles; by Weyl's inequality each singular
    # value moves by at most ||W_Q|| ||dR|| ||W_K||, ~1e-6 of s_1 (the float64 SVDs add
    # ~1e-15). 1e-5 s_1 bounds it.
    tol = 1e-5 * float(explicit.max())
    torch.testing.assert_close(core, explicit, rtol=0, atol=tol)
    # The offset matters and its sign too (R(-delta) = R(delta)^T): the check can fail.
    assert (core[:, 1:] - core[:, :1]).abs().max() > 1e-2
    wrong = rotary_qk_singular_values(folded, attn, -offsets)
    assert (wrong - explicit).abs().max() > 1e-3
    # Offset 0 is the plain form, the QK rows of the tables.
    spectra = circuit_spectra(model, circuits=("QK",), offsets=6)
    plain = spectra[(spectra["layer"] == 1) & (spectra["circuit"] == "QK")]
    np.testing.assert_allclose(plain["singular_value"].to_numpy(),
                               explicit[:, 0].flatten().numpy(), rtol=0, atol=tol)
    # The tables' means over offsets are the means of the explicit per-offset values.
    mean = spectra[(spectra["layer"] == 1) & (spectra["circuit"] == "QK" + OFFSETS_SUFFIX)]
    np.testing.assert_allclose(mean["singular_value"].to_numpy(),
                               explicit.mean(dim=1).flatten().numpy(), rtol=0, atol=tol)
    summary = circuit_summary(model, circuits=("QK",), offsets=6)
    summary = summary[summary["layer"] == 1].set_index(["head", "measure"])["value"]
    # Each s moves by <= tol, so p = s / sum s moves by <= dp = 2 d_head tol / sum s, the
    # curve C(k) by <= dp, H = -sum p log p by <= d_head dp (1 + max |log p|) and exp(H)
    # by <= d_head times that (exp(H) <= d_head). Measured: 7e-8 on s, 4e-8 on exp(H).
    d_head = attn.d_head
    dp = 2 * d_head * tol / float(explicit.sum(-1).min())
    log_p = (explicit / explicit.sum(-1, keepdim=True)).log().abs().max()
    expected = {
        "spectral_norm": (explicit[..., 0], tol),
        "frobenius_norm": (explicit.norm(dim=-1), d_head**0.5 * tol),
        "effective_rank": (entropy_effective_rank(explicit),
                           d_head * d_head * dp * (1 + float(log_p))),
    }
    for name, (per_offset, bound) in expected.items():
        for h in range(2):
            assert summary[(h, name + OFFSETS_SUFFIX)] == pytest.approx(
                float(per_offset[h].mean()), abs=bound)
    # Ranks are integers per offset (none of these curves lies within dp of 0.9 or 0.99);
    # their mean over 6 offsets is a multiple of 1/6.
    curve = cumulative_curve(explicit)
    for level, name in ((0.90, "rank90"), (0.99, "rank99")):
        assert (curve - level).abs().min() > dp
        ranks = numerical_rank(curve, level)  # [head, offset]
        for h in range(2):
            assert summary[(h, name + OFFSETS_SUFFIX)] == pytest.approx(float(ranks[h].mean()))
    assert len(summary) == 2 * 10  # 5 measures at offset 0, 5 means over offsets


def test_models_without_rotary_get_the_same_circuit_tables() -> None:
    """Switching RoPE off keeps the offset-0 rows byte for byte and drops every added row."""
    rotary = rotary_llama(None)
    plain = rotary_llama(None)
    for block in plain.blocks:
        block.attn.rotary_dim = 0  # same weights, no rotation
    for table in (circuit_summary, circuit_spectra):
        with_rope, without = table(rotary, offsets=6), table(plain, offsets=6)
        added = with_rope.get("measure", with_rope["circuit"]).str.endswith(OFFSETS_SUFFIX)
        assert added.any() and not without.get("measure", without["circuit"]).str.endswith(
            OFFSETS_SUFFIX).any()
        assert with_rope[~added].to_csv(index=False) == without.to_csv(index=False)
    assert set(circuit_spectra(plain)["circuit"]) == {"QK", "OV"}


def test_shared_subspace_of_w_qk_is_the_same_at_every_offset() -> None:
    """Why W_QK stays at offset 0: the heads' joint column space does not move with delta
    (only the spread of the energy inside it does)."""
    model = pre_norm_model("rmsnorm", positional="rotary", causal=True, qkv_bias=False,
                           n_heads=2, n_kv_heads=1, d_head=4)  # 2 x 4 columns in d_in = 16
    attn = model.blocks[0].attn
    folded = folded_attention_weights(model, 0)
    _, R_k = torch.linalg.qr(folded.W_K[0])  # the one key/value head, [d_head, d_head]
    cos, sin, J = rotary_tables(attn.d_head, attn.rotary_dim, attn.rotary_base,
                                torch.tensor([0, 3, 17]))
    projectors, spectra = [], []
    for c, s in zip(cos, sin, strict=True):
        R = torch.diag(c) + J @ torch.diag(s)
        concat = torch.cat([folded.W_Q[h] @ R @ R_k.T for h in range(2)], dim=1)  # [16, 8]
        U, sv, _ = torch.linalg.svd(concat, full_matrices=False)
        assert int((sv > 1e-10 * sv[0]).sum()) == 8
        projectors.append(U @ U.T)  # onto the 8-dimensional span
        spectra.append(sv)
    # float64 SVDs of well-conditioned 16 x 8 matrices: projectors agree to ~1e-14.
    for P, sv in zip(projectors[1:], spectra[1:], strict=True):
        torch.testing.assert_close(P, projectors[0], rtol=0, atol=1e-9)
        assert (sv - spectra[0]).abs().max() > 1e-3  # the energy inside it does move


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_rotary_weight_tables_on_a_gpu_match_the_cpu() -> None:
    """The rotation tables follow the weights to their device (they are built on the CPU)."""
    model = rotary_llama(4)
    on_cpu = (weight_asymmetry_table(model, offsets=8), circuit_summary(model))
    gpu_model = rotary_llama(4).cuda()
    on_gpu = (weight_asymmetry_table(gpu_model, offsets=8), circuit_summary(gpu_model))
    for gpu, cpu in zip(on_gpu, on_cpu, strict=True):
        # float64 on both devices; GPU and CPU sum products in other orders (~1e-15 relative)
        np.testing.assert_allclose(gpu["value"].to_numpy(), cpu["value"].to_numpy(),
                                   rtol=1e-9, atol=1e-12)
