"""OV copying scores through the model interface (``token_maps()``), on either backend.

Known answers on hand-set Hugging Face weights run by the hf backend: a head whose W_V W_O is
a coordinate projection P (so that W_O W_U W_E W_V = P E^T E P, positive definite) scores 1,
the same head with W_O negated scores 0; under GQA the two query heads of one key/value head
get opposite signs, so a wrong kv_head mapping gives neither. The unembedding is read from
the LM head (negated: every score flips), the final norm's gain is folded (Gemma's
``1 + w``), and a masked-LM model gets the embedding-only form. Then: the hf backend's scores
equal the native backend's on every family both load, and an independent computation from
the full ``[vocab, vocab]`` map on families only the hf backend loads.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlens.backends.hf.model import HFAttentionModel
from attnlens.measures.lm_heads.copying import (
    copying_form,
    copying_scores,
    copying_table,
    copying_unavailable,
)
from attnlens.model.token_maps import TokenMaps, TokenMapsUnavailable
from tests.hf_utils import save_checkpoint, tiny_hf

SIGNS = [1.0, -1.0, -1.0, 1.0]  # query heads 0..3; heads 0, 1 read kv head 0, heads 2, 3 kv 1
D_HEAD = 8


def wrap(hf) -> HFAttentionModel:
    return HFAttentionModel(hf, {"architecture": type(hf).__name__})


def scores(model) -> tuple[np.ndarray, np.ndarray]:
    """``copying`` and ``copying_ratio`` as ``[layer, head]`` arrays."""
    table = copying_table(model)
    pick = {m: table[table["measure"] == m].sort_values(["layer", "head"])["value"].to_numpy()
            for m in ("copying", "copying_ratio")}
    n = len(model.heads_per_layer)
    return pick["copying"].reshape(n, -1), pick["copying_ratio"].reshape(n, -1)


def coordinate_heads(v_weight: torch.Tensor, o_weight: torch.Tensor, n_kv: int) -> None:
    """Set ``W_V[g]`` to the coordinates ``g * d .. (g + 1) * d`` (nn.Linear ``[kv * d, d_model]``)
    and ``W_O[h]`` to ``SIGNS[h]`` times the same coordinates of head h's kv head
    (``[d_model, head * d]``): ``W_O[h] W_V[g(h)]``... = ``SIGNS[h] P P^T``."""
    group = len(SIGNS) // n_kv
    with torch.no_grad():
        v_weight.zero_()
        o_weight.zero_()
        for g in range(n_kv):
            rows = slice(g * D_HEAD, (g + 1) * D_HEAD)
            v_weight[rows, rows] = torch.eye(D_HEAD)
        for h, sign in enumerate(SIGNS):
            kv = h // group
            block = torch.zeros(o_weight.shape[0], D_HEAD)  # [d_model, d]
            block[kv * D_HEAD:(kv + 1) * D_HEAD] = sign * torch.eye(D_HEAD)
            o_weight[:, h * D_HEAD:(h + 1) * D_HEAD] = block


def decoder_known(model_type: str, final_weight: float, unembed_sign: float = 1.0,
                  input_weight: float = 1.0, **overrides) -> HFAttentionModel:
    """A tiny causal LM with coordinate heads (GQA: 4 query heads, 2 kv heads)."""
    hf = tiny_hf(model_type, base=False, seed=3, **overrides)
    for layer in hf.model.layers:
        attn = layer.self_attn
        coordinate_heads(attn.v_proj.weight, attn.o_proj.weight, 2)
        with torch.no_grad():
            layer.input_layernorm.weight.fill_(input_weight)
    with torch.no_grad():
        hf.model.norm.weight.fill_(final_weight)
        if hf.lm_head.weight is not hf.model.embed_tokens.weight:
            hf.lm_head.weight.copy_(unembed_sign * hf.model.embed_tokens.weight)
    return wrap(hf)


EXPECTED = np.array([[1.0 if s > 0 else 0.0 for s in SIGNS]] * 2)


def test_coordinate_heads_score_one_and_negated_heads_zero() -> None:
    model = decoder_known("llama", final_weight=2.0)
    copying, ratio = scores(model)
    # eigenvalues of +-P E^T E P: all of one sign, so the shares are exact up to eigvals'
    # float64 rounding
    np.testing.assert_allclose(copying, EXPECTED, atol=1e-12)
    np.testing.assert_allclose(ratio, 2 * EXPECTED - 1, atol=1e-12)
    assert copying_form(model) == "unembedding"
    table = copying_table(model)
    assert (table["kv_head"] == table["head"] // 2).all()
    assert set(table["detail"]) == {"OV circuit, unembedding form"}


def test_the_unembedding_is_the_lm_head_not_the_embedding() -> None:
    flipped = decoder_known("llama", final_weight=1.0, unembed_sign=-1.0)
    np.testing.assert_allclose(scores(flipped)[0], 1 - EXPECTED, atol=1e-12)
    tied = decoder_known("llama", final_weight=1.0, tie_word_embeddings=True)
    maps = tied.token_maps()
    assert maps.unembedding.data_ptr() == maps.embedding.data_ptr()
    np.testing.assert_allclose(scores(tied)[0], EXPECTED, atol=1e-12)


def test_the_final_norm_gain_is_folded() -> None:
    negative = decoder_known("llama", final_weight=-1.0)
    assert negative.token_maps().final_norm == "rmsnorm"
    np.testing.assert_allclose(scores(negative)[0], 1 - EXPECTED, atol=1e-12)
    # Gemma's norms multiply by 1 + w: w = -0.5 is a positive gain (w itself is negative)
    gemma = decoder_known("gemma2", final_weight=-0.5, input_weight=0.0)
    torch.testing.assert_close(gemma.token_maps().final_gain, torch.full((32,), 0.5))
    np.testing.assert_allclose(scores(gemma)[0], EXPECTED, atol=1e-12)
    gemma = decoder_known("gemma2", final_weight=-1.5, input_weight=0.0)
    np.testing.assert_allclose(scores(gemma)[0], 1 - EXPECTED, atol=1e-12)


def test_a_masked_lm_gets_the_embedding_form() -> None:
    hf = tiny_hf("xlm-roberta", base=False, seed=3)
    for layer in hf.roberta.encoder.layer:
        attn = layer.attention
        coordinate_heads(attn.self.value.weight, attn.output.dense.weight, 4)
    model = wrap(hf)
    assert model.token_maps().unembedding is None
    assert copying_form(model) == "embedding"
    expected = np.array([[1.0 if s > 0 else 0.0 for s in SIGNS]] * 2)
    np.testing.assert_allclose(scores(model)[0], expected, atol=1e-12)


def test_a_model_without_readable_token_maps_says_why() -> None:
    """ELECTRA projects its 16-wide embeddings to the 32-wide stream: no copying map."""
    model = wrap(tiny_hf("electra", base=False))
    with pytest.raises(TokenMapsUnavailable, match="16 wide"):
        model.token_maps()
    assert "projection sits between them" in copying_unavailable(model)


def test_token_maps_need_one_vocabulary() -> None:
    with pytest.raises(TokenMapsUnavailable, match="one vocabulary"):
        TokenMaps(torch.zeros(5, 4), torch.zeros(6, 4), None)


# Families both backends load (the native converters' model types).
BOTH = ["llama", "mistral", "qwen2", "gpt2", "bert"]


@pytest.mark.parametrize("model_type", BOTH)
def test_hf_backend_scores_equal_the_native_ones(model_type: str, tmp_path) -> None:
    from attnlens.loaders import load_model

    folder = save_checkpoint(tmp_path / model_type, model_type)
    hf_table = copying_table(load_model(folder, backend="hf"))
    native_table = copying_table(load_model(folder, backend="native"))
    diff = np.abs(hf_table["value"].to_numpy() - native_table["value"].to_numpy()).max()
    print(f"copying on tiny {model_type}: max |hf - native| = {diff:.2e}")
    # the same fp32 weights read two ways, then the same float64 arithmetic: measured 0.0
    assert diff <= 1e-6
    assert hf_table.drop(columns="value").equals(native_table.drop(columns="value"))


def full_map_scores(embedding: torch.Tensor, unembedding: torch.Tensor, gain: torch.Tensor,
                    W_V: torch.Tensor, W_O: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores from the eigenvalues of the whole ``[vocab, vocab]`` map ``E W_V W_O (U g)^T``
    (the small vocabulary makes it cheap); its extra eigenvalues are 0 up to rounding."""
    E, U = embedding.double(), (unembedding * gain[None, :]).double()
    maps = E @ W_V.double() @ W_O.double() @ U.T  # [head, vocab, vocab]
    return copying_scores(torch.linalg.eigvals(maps))


# The measure forms W_U W_E in float32 (as on the native backend) before float64: a sum over the
# vocabulary of fp32 products, ~1e-7 relative (2.6e-8 measured on Qwen3); the reference is all
# float64 and its 56 extra eigenvalues of the 64 x 64 map are zero up to ~1e-15.
FP32_GRAM = 1e-6


def test_hf_only_families_match_the_full_vocabulary_map() -> None:
    """Qwen3 (q_norm: no linear W_Q, W_V still read), Gemma 2 (1 + w norms, GQA) and GPT-NeoX
    (fused per-head qkv, LayerNorm centring): scores from the checkpoint's own modules."""
    # Qwen3: RMSNorm input norms, separate projections, GQA 4 -> 2
    hf = tiny_hf("qwen3", base=False, seed=4)
    with torch.no_grad():
        for p in hf.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)  # non-trivial norm gains
    ours = scores(wrap(hf))[0]
    E, U = hf.model.embed_tokens.weight.detach(), hf.lm_head.weight.detach()
    for layer, block in enumerate(hf.model.layers):
        attn = block.self_attn
        g = block.input_layernorm.weight.detach()
        W_V = (g[:, None] * attn.v_proj.weight.detach().T).reshape(32, 2, 8).permute(1, 0, 2)
        W_V = W_V.repeat_interleave(2, dim=0)  # [head, d_model, d]
        W_O = attn.o_proj.weight.detach().T.reshape(4, 8, 32)  # [head, d, d_model]
        theirs, _ = full_map_scores(E, U, hf.model.norm.weight.detach(), W_V, W_O)
        np.testing.assert_allclose(ours[layer], theirs.numpy(), atol=FP32_GRAM)

    # GPT-NeoX: LayerNorm input norms (gain folded, reading centred), fused query_key_value
    hf = tiny_hf("gpt_neox", base=False, seed=4)
    with torch.no_grad():
        for p in hf.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)  # norm gains and shifts, projection biases (not read)
    ours = scores(wrap(hf))[0]
    E, U = hf.gpt_neox.embed_in.weight.detach(), hf.lm_head.weight.detach()
    centre = torch.eye(32) - 1 / 32
    for layer, block in enumerate(hf.gpt_neox.layers):
        qkv = block.attention.query_key_value.weight.detach().reshape(4, 3, 8, 32)
        W_V = qkv[:, 2].transpose(1, 2)  # [head, d_model, d]
        W_V = centre @ (block.input_layernorm.weight.detach()[:, None] * W_V)
        W_O = block.attention.dense.weight.detach().T.reshape(4, 8, 32)
        theirs, _ = full_map_scores(E, U, hf.gpt_neox.final_layer_norm.weight.detach(), W_V,
                                    W_O)
        np.testing.assert_allclose(ours[layer], theirs.numpy(), atol=FP32_GRAM)
