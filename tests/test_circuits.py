"""Factored QK/OV circuit spectra as tidy tables."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlens.errors import ConfigError
from attnlens.measures.circuits.circuits import circuit_spectra, circuit_summary
from attnlens.model.config import TransformerConfig
from attnlens.model.transformer import HookedTransformer


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=12, n_layers=2, n_heads=3, d_mlp=16, vocab_size=20)
    return HookedTransformer(cfg).eval()


def test_spectra_match_the_explicit_products(tiny):
    table = circuit_spectra(tiny)
    assert list(table.columns) == ["layer", "head", "circuit", "index", "singular_value"]
    attn = tiny.blocks[1].attn
    for head in range(3):
        qk = (attn.W_Q[head] @ attn.W_K[head].T).detach().double()
        ov = (attn.W_V[head] @ attn.W_O[head]).detach().double()
        for name, matrix in (("QK", qk), ("OV", ov)):
            rows = table[(table["layer"] == 1) & (table["head"] == head)]
            rows = rows[rows["circuit"] == name]
            expected = torch.linalg.svdvals(matrix)[: len(rows)].numpy()
            # float64 SVD of the factored core, rounded to fp32: 0.5 ulp of s < 2.5 is 1.2e-7
            # (measured <= 7.8e-8)
            np.testing.assert_allclose(rows["singular_value"].to_numpy(), expected, atol=1e-5)


def test_rank_one_head_has_effective_rank_one(tiny):
    with torch.no_grad():
        W_Q = tiny.blocks[0].attn.W_Q
        W_Q[1] = torch.outer(torch.randn(12), torch.randn(4))  # rank 1
    summary = circuit_summary(tiny, circuits=("QK",))
    row = summary.set_index(["layer", "head", "measure"])["value"]
    # rank one only up to the fp32 rounding of the outer product: 3 trailing s ~ 1.19e-7 s_1,
    # each adding -p log p <= 1.9e-6 to the entropy -> 1e-5 (measured 4.2e-7)
    assert row[(0, 1, "effective_rank")] == pytest.approx(1.0, abs=1e-5)
    assert row[(0, 1, "rank99")] == 1
    assert row[(0, 0, "effective_rank")] > 1.5  # a random head: 4 comparable singular values
    with pytest.raises(ConfigError, match="circuit"):
        circuit_summary(tiny, circuits=("VO",))
