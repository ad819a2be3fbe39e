"""Shared query/key subspaces: heads that share one subspace against heads that do not."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlens.measures.circuits.shared_subspace import (
    dims_for_energy,
    energy_curve,
    gram_singular_values,
    layer_spectra,
    shared_subspace_tables,
)
from attnlens.model.attention import MultiHeadAttention
from attnlens.model.config import TransformerConfig
from attnlens.model.transformer import HookedTransformer


def attention_with(W_Q: torch.Tensor, W_K: torch.Tensor) -> MultiHeadAttention:
    heads, d_in, d_head = W_Q.shape
    attn = MultiHeadAttention(d_in=d_in, n_heads=heads, d_head=d_head, qkv_bias=False)
    with torch.no_grad():
        attn.W_Q.copy_(W_Q)
        attn.W_K.copy_(W_K)
    return attn


def test_energy_curve_and_dims_on_known_values():
    s = torch.tensor([3.0, 2.0, 1.0, 0.0])  # energies 9, 4, 1, 0 of 14
    curve = energy_curve(s)
    assert curve.numpy() == pytest.approx([9 / 14, 13 / 14, 1.0, 1.0])  # float64 integer ratios
    assert int(dims_for_energy(curve, 0.9)) == 2
    assert int(dims_for_energy(curve, 0.95)) == 3


def test_gram_singular_values_match_svd():
    gen = torch.Generator().manual_seed(0)
    for shape in ((30, 8), (8, 30), (3, 16, 5)):
        M = torch.randn(*shape, generator=gen, dtype=torch.float64)
        np.testing.assert_allclose(
            # float64: Gram eigenvalues err by ~2.2e-16 s_1^2, so s_i by ~2.2e-16 s_1^2 / s_i
            # ~ 1e-14 for these Gaussian matrices (measured 5.3e-15)
            gram_singular_values(M).numpy(), torch.linalg.svdvals(M).numpy(), atol=1e-10
        )


def test_heads_sharing_one_subspace_concatenate_to_low_rank():
    gen = torch.Generator().manual_seed(1)
    d_in, heads, d_head, shared = 32, 4, 4, 6
    basis = torch.randn(d_in, shared, generator=gen)
    W_Q = basis @ torch.randn(heads, shared, d_head, generator=gen)  # every head inside basis
    W_K = torch.randn(heads, d_in, d_head, generator=gen)
    spectra = layer_spectra(attention_with(W_Q, W_K))
    concat = spectra["W_Q"]["concat"]
    # rank 6 although 4 x 4 = 16 columns; W_Q is rank 6 only up to its fp32 rounding:
    # trailing s ~ 1.19e-7 x sqrt(6) s_0 (measured 3.5e-8 s_0), a 7th direction gives O(0.1)
    assert (concat[shared:] < 1e-5 * concat[0]).all()
    assert (spectra["W_QK"]["concat"][shared:] < 1e-5 * spectra["W_QK"]["concat"][0]).all()
    assert (spectra["W_K"]["concat"][shared] > 1e-2 * spectra["W_K"]["concat"][0])  # no sharing


def test_orthogonal_heads_need_the_sum_of_their_dimensions():
    d_in, heads, d_head = 16, 4, 4
    eye = torch.eye(d_in)
    W = torch.stack([eye[:, h * d_head:(h + 1) * d_head] for h in range(heads)])  # disjoint
    model_cfg = TransformerConfig(d_model=d_in, n_layers=1, n_heads=heads, d_mlp=8,
                                  vocab_size=10, qkv_bias=False)
    model = HookedTransformer(model_cfg)
    with torch.no_grad():
        model.blocks[0].attn.W_Q.copy_(W)
        model.blocks[0].attn.W_K.copy_(W)
    dims = shared_subspace_tables(model)["shared_subspace_dims"]
    row = dims.set_index(["matrix", "scope", "energy"])["dims"]
    for matrix in ("W_Q", "W_K", "W_QK"):
        # 16 equal singular values: E(k) = k / 16; each head alone: k / 4.
        assert row[(matrix, "concat", 0.99)] == row[(matrix, "sum_of_heads", 0.99)] == 16
        assert row[(matrix, "concat", 0.9)] == 15  # ceil(14.4)
        assert row[(matrix, "per_head_mean", 0.9)] == 4
    assert (dims["d_model"] == d_in).all()


def test_stacked_qk_spectrum_equals_the_explicit_stack():
    gen = torch.Generator().manual_seed(2)
    W_Q = torch.randn(3, 10, 2, generator=gen)
    W_K = torch.randn(3, 10, 2, generator=gen)
    spectra = layer_spectra(attention_with(W_Q, W_K))
    stacked = torch.cat([W_Q[h].double() @ W_K[h].double().T for h in range(3)], dim=1)  # [10, 30]
    explicit = torch.linalg.svdvals(stacked)[:6]
    # float64 both ways from the same fp32 weights: ~1e-15 (measured 6.7e-15)
    np.testing.assert_allclose(spectra["W_QK"]["concat"].numpy(), explicit.numpy(), atol=1e-6)
    per_head = torch.linalg.svdvals(W_Q[0].double() @ W_K[0].double().T)[:2]
    np.testing.assert_allclose(spectra["W_QK"]["per_head"][0].numpy(), per_head.numpy(), atol=1e-6)


def test_minilm_tables_are_consistent(minilm):
    model, _ = minilm
    tables = shared_subspace_tables(model)
    dims, curve = tables["shared_subspace_dims"], tables["shared_subspace_curve"]
    assert set(dims["layer"]) == set(range(6))
    assert dims["dims"].between(1, 384).all()
    wide = dims.pivot_table(index=["layer", "matrix", "energy"], columns="scope", values="dims")
    assert (wide["concat"] >= wide["per_head_max"]).all()
    assert (wide["concat"] <= wide["sum_of_heads"]).all()
    for _, rows in curve.groupby(["layer", "matrix", "scope"]):
        values = rows.sort_values("k")["energy"].to_numpy()
        # float64 cumulative sums of squares, clamped at 1: monotone to ~1e-16, exact at the end
        assert (np.diff(values) >= -1e-12).all()
        assert values[-1] == pytest.approx(1.0)
