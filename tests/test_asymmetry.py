"""Query/key asymmetry: weights with known shares, hand-built patterns, streaming."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlens.errors import ConfigError
from attnlens.measures.asymmetry.pattern_asymmetry import (
    PatternAsymmetry,
    dominance_violations,
    pattern_asymmetry,
    unweighted_attention,
)
from attnlens.measures.asymmetry.weight_asymmetry import (
    bilinear_shares,
    head_weight_asymmetry,
    weight_asymmetry_table,
)
from attnlens.model.attention import MultiHeadAttention
from attnlens.model.config import TransformerConfig
from attnlens.model.folding import attention_weights
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Batch
from attnlens.stream.runner import run_analyzers
from tests.fixtures import tiny_batches


def explicit_shares(M: np.ndarray) -> tuple[float, float]:
    S, A = (M + M.T) / 2, (M - M.T) / 2
    total = np.linalg.norm(M) ** 2
    return np.linalg.norm(S) ** 2 / total, np.linalg.norm(A) ** 2 / total


# --- weights ------------------------------------------------------------------------------
def test_known_symmetric_and_antisymmetric_shares():
    eye = torch.eye(2, dtype=torch.float64)
    rotation = torch.tensor([[0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)  # antisymmetric
    shear = torch.tensor([[1.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    # M = W_Q W_K^T with W_Q = I, W_K = M^T.
    # float64 on 2x2 integer matrices: exact to ~1 ulp, far inside approx's default rel 1e-6
    for M, sym in ((eye, 1.0), (rotation, 0.0), (shear, 2.5 / 3)):
        shares = bilinear_shares(eye, M.T.contiguous())
        assert float(shares["sym_share"]) == pytest.approx(sym)
        assert float(shares["antisym_share"]) == pytest.approx(1 - sym)
        assert float(shares["symmetry"]) == pytest.approx(2 * sym - 1)


def test_shares_match_the_explicit_d_in_by_d_in_split():
    gen = torch.Generator().manual_seed(0)
    W_Q = torch.randn(3, 20, 4, generator=gen, dtype=torch.float64)
    W_K = torch.randn(3, 20, 4, generator=gen, dtype=torch.float64)
    shares = bilinear_shares(W_Q, W_K)
    for h in range(3):
        M = (W_Q[h] @ W_K[h].T).numpy()
        sym, anti = explicit_shares(M)
        # float64 both ways, traces vs explicit 20x20 norms (<= 400 terms): 400 x 2.2e-16
        # ~ 1e-13 relative (measured <= 4.2e-16)
        assert float(shares["sym_share"][h]) == pytest.approx(sym, rel=1e-10)
        assert float(shares["antisym_share"][h]) == pytest.approx(anti, rel=1e-10)
        assert float(shares["norm_sq"][h]) == pytest.approx(np.linalg.norm(M) ** 2, rel=1e-10)


def test_head_with_equal_query_and_key_weights_has_no_weight_asymmetry():
    attn = MultiHeadAttention(d_in=8, n_heads=2, qkv_bias=False)
    with torch.no_grad():
        attn.W_K.copy_(attn.W_Q)
    measures = head_weight_asymmetry(attention_weights(attn))
    # float64 from identical weights: W_Q W_Q^T is symmetric to ~2.2e-16, its share ~1e-31
    assert measures["antisym_share"].abs().max() < 1e-12
    assert measures["sym_share"].numpy() == pytest.approx([1.0, 1.0])  # float64, exact here
    assert "sym_share_affine" not in measures  # no biases, no affine measures


def test_affine_shares_with_biases_match_the_augmented_matrix():
    attn = MultiHeadAttention(d_in=6, n_heads=2, qkv_bias=True)
    with torch.no_grad():
        attn.b_Q.normal_()
        attn.b_K.normal_()
    measures = head_weight_asymmetry(attention_weights(attn))
    for h in range(2):
        W_Q, W_K = attn.W_Q[h].detach().double(), attn.W_K[h].detach().double()
        u = (W_K @ attn.b_Q[h].detach().double()).numpy()
        M = np.zeros((7, 7))
        M[:6, :6] = (W_Q @ W_K.T).numpy()
        M[6, :6] = u  # key-only term u . y; the query-only terms cancel in the softmax
        sym, anti = explicit_shares(M)
        # float64 both ways (as above); the bias norm from the same float64 products: ~1e-16
        assert float(measures["sym_share_affine"][h]) == pytest.approx(sym, rel=1e-10)
        assert float(measures["antisym_share_affine"][h]) == pytest.approx(anti, rel=1e-10)
        assert float(measures["key_bias_norm"][h]) == pytest.approx(np.linalg.norm(u))


def test_weight_table_covers_every_head_with_grouped_query_attention(tiny_gqa):
    table = weight_asymmetry_table(tiny_gqa)
    assert list(table.columns) == ["layer", "head", "measure", "value"]
    shares = table[table["measure"] == "sym_share"]
    assert len(shares) == 2 * 4
    assert table[table["measure"].str.contains("share")]["value"].between(0, 1).all()


# --- patterns -----------------------------------------------------------------------------
def test_symmetric_pattern_is_reciprocal_and_undirected():
    P = torch.tensor([[0.5, 0.3, 0.2], [0.3, 0.4, 0.3], [0.2, 0.3, 0.5]])
    ratio, counts = pattern_asymmetry(P, edge_level=0.5)  # edges: p >= 1/6
    assert float(ratio) == 0.0
    assert counts.tolist() == [6.0, 6.0, 3.0, 0.0]  # every edge reciprocated, none one-way
    _, counts = pattern_asymmetry(P)  # edges: p >= 1/3, above uniform: none off the diagonal
    assert counts.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_all_attend_to_first_token_is_fully_directed():
    P = torch.zeros(3, 3)
    P[:, 0] = 1.0
    ratio, counts = pattern_asymmetry(P)
    # ||P - P^T|| = 2, ||P|| = sqrt(3): fp32 norms of 0/1 entries, one correctly rounded sqrt
    # and division: <= 2 fp32 ulps, 2.4e-7 < approx's rel 1e-6 (measured 1.8e-8)
    assert float(ratio) == pytest.approx(2 / math.sqrt(3))
    assert counts.tolist() == [2.0, 0.0, 2.0, 2.0]  # edges 1->0, 2->0; none mutual; both one-way


def test_direction_factor_and_edge_level():
    P = torch.tensor([[0.48, 0.32, 0.2], [0.15, 0.7, 0.15], [0.2, 0.2, 0.6]])
    # Pairs: {0,1}: 0.32 vs 0.15 (2.13x), {0,2}: 0.2 vs 0.2, {1,2}: 0.15 vs 0.2.
    _, counts = pattern_asymmetry(P, factor=2.0, edge_level=0.5)  # edge: p >= 1/6
    assert counts.tolist() == [4.0, 2.0, 3.0, 1.0]
    _, counts = pattern_asymmetry(P, factor=2.5, edge_level=0.5)
    assert counts[3] == 0


def test_violation_counts_on_a_hand_built_matrix():
    alpha = torch.tensor([[0.2, 0.8], [0.5, 0.5]], dtype=torch.float64)
    # alpha_01 = 0.8 > max(0.2, 0.5); 0.8 * 0.5 > 0.2 * 0.5. alpha_10 = 0.5 is not > 0.5.
    assert dominance_violations(alpha).tolist() == [2.0, 2.0, 1.0]


def test_unweighted_attention_obeys_the_product_inequality():
    gen = torch.Generator().manual_seed(0)
    scales = torch.rand(4, 30, 1, generator=gen, dtype=torch.float64) * 6
    X = torch.randn(4, 30, 16, generator=gen, dtype=torch.float64) * scales
    alpha = unweighted_attention(X)
    assert torch.allclose(alpha.sum(-1), torch.ones(4, 30, dtype=torch.float64))  # float64 rows
    counts = dominance_violations(alpha).sum(0)
    assert counts[1] == 0  # alpha_ij alpha_ji <= alpha_ii alpha_jj always


def test_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match="factor"):
        PatternAsymmetry([2], factor=0.5)
    with pytest.raises(ConfigError, match="edge level"):
        PatternAsymmetry([2], edge_level=0)


# --- streaming on tiny random models ------------------------------------------------------
@pytest.fixture(scope="module")
def pre_norm_model():
    torch.manual_seed(1)
    cfg = TransformerConfig(d_model=16, n_layers=2, n_heads=2, d_mlp=32, vocab_size=60,
                            n_ctx=64, norm_position="pre", final_norm=True)
    return HookedTransformer(cfg).eval()


def make_batches(lengths: list[list[int]], seed: int = 0) -> list[Batch]:
    return tiny_batches(lengths, seed)


LENGTHS = [[5, 7, 7], [3, 12], [9, 9, 4, 20]]


def results_close(a: dict, b: dict, atol: float) -> None:
    """Every table's values within ``atol``, the caller's bound. rtol is 0: numpy's default
    (1e-7) would let values near 1 differ by 1e-7, 9 orders above float64 regrouping."""
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(
            a[name]["value"].to_numpy(), b[name]["value"].to_numpy(), rtol=0, atol=atol,
            err_msg=name,
        )


@pytest.mark.parametrize("fixture", ["tiny_gqa", "pre_norm_model"])
def test_merge_of_halves_equals_whole_and_streaming_matches(fixture, request):
    model = request.getfixturevalue(fixture)
    batches = make_batches(LENGTHS)
    whole = PatternAsymmetry.for_model(model)
    run_analyzers(model, batches, [whole], show_progress=False)
    first, second = PatternAsymmetry.for_model(model), PatternAsymmetry.for_model(model)
    run_analyzers(model, batches[:2], [first], show_progress=False)
    run_analyzers(model, batches[2:], [second], show_progress=False)
    # same batches, same shapes, same kernels: identical per-batch values; only float64 sums
    # of 9 sentences' values <= 1 regroup: 9 * 2.2e-16 = 2.0e-15 at most (measured
    # 1.1e-16), so 1e-12 leaves 500x
    results_close(first.merge(second).result(), whole.result(), atol=1e-12)
    # All sentences in one padded batch: same result up to float32 rounding of the patterns.
    width = 20
    one = Batch(
        input_ids=torch.cat([torch.nn.functional.pad(b.input_ids, (0, width - b.input_ids.shape[1]))
                             for b in batches]),
        attention_mask=torch.cat([
            torch.nn.functional.pad(b.attention_mask, (0, width - b.input_ids.shape[1]))
            for b in batches
        ]),
    )
    once = PatternAsymmetry.for_model(model)
    run_analyzers(model, [one], [once], show_progress=False)
    a, b = once.result(), whole.result()
    for name in a:
        asym_a = a[name][a[name]["measure"] == "asym_ratio"]["value"].to_numpy()
        asym_b = b[name][b[name]["measure"] == "asym_ratio"]["value"].to_numpy()
        # fp32 patterns of other batch shapes: ratios of norms over <= 20 x 20 entries of O(1)
        # rows, 20 x 1.19e-7 ~ 2.4e-6 relative -> 1e-5 (measured 3.0e-8)
        np.testing.assert_allclose(asym_a, asym_b, atol=1e-5)


def test_baseline_uses_the_attention_input_and_matches_a_direct_computation(pre_norm_model):
    model = pre_norm_model
    batch = make_batches([[6]])[0]
    analyzer = PatternAsymmetry.for_model(model)
    run_analyzers(model, [batch], [analyzer], show_progress=False)
    table = analyzer.result()["asymmetry_baseline"]
    with torch.no_grad():
        _, cache = model.run_with_cache(**batch.model_inputs())
        for layer in range(2):
            X = model.blocks[layer].ln1(cache["resid_pre", layer])[0].double()  # [n, C]
            alpha = torch.softmax(X @ X.T / math.sqrt(16), dim=-1)
            norm = torch.linalg.matrix_norm
            expected = float(norm(alpha - alpha.T) / norm(alpha))
            got = table.query("layer == @layer and measure == 'asym_ratio'")["value"].item()
            # float32 X, float64 after. The cache holds every hook, hook_result included, which
            # switches layer 0's output to per-head products: layer 1's X differs by fp32 ~1e-7
            # relative, amplified by the cancellation in alpha - alpha^T (measured <= 1.7e-6
            # relative) -> 1e-5
            assert got == pytest.approx(expected, rel=1e-5)


def test_padded_batch_in_one_call_equals_each_sentence_alone():
    """The analyzer's one call per layer (masked_*) gives each sentence's own measures: the
    same integer counts and, for the norms, the same sums in another order."""
    from attnlens.measures.asymmetry.pattern_asymmetry import (
        masked_dominance_violations,
        masked_pattern_asymmetry,
        masked_unweighted_attention,
        real_pairs,
    )

    gen = torch.Generator().manual_seed(3)
    lengths = [5, 7, 7, 3, 9]
    pos = max(lengths) + 2  # two padding columns for every sentence
    mask = torch.tensor([[i < n for i in range(pos)] for n in lengths])
    mask[1] = mask[1].roll(2)  # one sentence padded on the left
    logits = torch.randn(len(lengths), 4, pos, pos, generator=gen)
    P = torch.softmax(logits.masked_fill(~mask[:, None, None, :], -torch.inf), -1)
    X = torch.randn(len(lengths), pos, 6, generator=gen)
    n = mask.sum(-1)
    pairs = real_pairs(mask)
    ratio, counts = masked_pattern_asymmetry(P, pairs, n, factor=1.5, edge_level=0.7)
    alpha = masked_unweighted_attention(X, mask)
    base_ratio, base_counts = masked_pattern_asymmetry(alpha, pairs, n, 1.5, 0.7)
    violations = masked_dominance_violations(alpha, pairs, n)
    for b in range(len(lengths)):
        real = mask[b].nonzero().flatten()
        block = P[b][:, real][:, :, real]  # [head, n, n]
        want_ratio, want_counts = pattern_asymmetry(block, factor=1.5, edge_level=0.7)
        assert torch.equal(counts[b], want_counts)
        # float32 Frobenius norms of the same entries summed in another order: a few ulp
        torch.testing.assert_close(ratio[b], want_ratio, rtol=1e-6, atol=1e-7)
        own = unweighted_attention(X[b, real])
        torch.testing.assert_close(alpha[b][real][:, real], own, rtol=1e-14, atol=1e-15)
        want_ratio, want_counts = pattern_asymmetry(own, factor=1.5, edge_level=0.7)
        assert torch.equal(base_counts[b], want_counts)
        torch.testing.assert_close(base_ratio[b], want_ratio, rtol=1e-12, atol=1e-14)
        assert torch.equal(violations[b], dominance_violations(own))


def _counts_by_definition(P, pairs, lengths, factor, edge_level):
    """The four counts of each padded matrix straight from the definition (issue 29's code
    before the ordered-pair counting): edges off the diagonal, reciprocated ones, unordered
    pairs with an edge and the directed ones among them."""
    P = torch.where(pairs.reshape(pairs.shape[0], *([1] * (P.dim() - 3)), *pairs.shape[1:]),
                    P, 0)
    Pt = P.mT
    n = P.shape[-1]
    upper = torch.ones(n, n, dtype=torch.bool).triu(1)
    off = ~torch.eye(n, dtype=torch.bool)
    level = (edge_level / lengths.to(torch.float64)).to(P.dtype)
    level = level.reshape(-1, *([1] * (P.dim() - 1)))
    edge = (level <= P) & off
    mutual = edge & edge.mT
    any_edge = (edge | edge.mT) & upper
    directed = any_edge & (torch.maximum(P, Pt) >= factor * torch.minimum(P, Pt))
    return torch.stack([m.sum(dim=(-1, -2)) for m in (edge, mutual, any_edge, directed)],
                       -1).double()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("factor", [1.0, 1.5, 2.0, 3.0])
def test_ordered_pair_counts_equal_the_definition(dtype, factor):
    """matrix30: with factor >= 2 the counts come from ordered pairs (diagonal included, then
    corrected); they must equal the definition's integers exactly, on patterns with ties
    (equal entries both ways, entries exactly at the edge level, exactly factor times the
    reverse), zero entries and padding; factor < 2 keeps the definition's own code."""
    from attnlens.measures.asymmetry.pattern_asymmetry import masked_pattern_asymmetry, real_pairs

    gen = torch.Generator().manual_seed(11)
    lengths = torch.tensor([6, 8, 3, 8, 1])
    pos = 8
    mask = torch.arange(pos)[None, :] < lengths[:, None]
    mask[2] = mask[2].roll(4)  # padded on the left
    # entries from a small grid so that ties, the level (1/n) and factor x are all hit
    grid = torch.tensor([0.0, 1 / 8, 1 / 6, 0.25, 1 / 3, 0.5, 0.75, 1.0], dtype=dtype)
    P = grid[torch.randint(len(grid), (len(lengths), 3, pos, pos), generator=gen)]
    sym = torch.rand(len(lengths), 3, pos, pos, generator=gen) < 0.3
    P = torch.where(sym, P.mT, P)  # some pairs equal both ways
    P[:, 0] = P[:, 0] + torch.rand(len(lengths), pos, pos, generator=gen, dtype=dtype)
    pairs = real_pairs(mask)
    ratio, counts = masked_pattern_asymmetry(P, pairs, lengths, factor, 1.0)
    assert torch.equal(counts, _counts_by_definition(P, pairs, lengths, factor, 1.0))
    P0 = torch.where(pairs[:, None], P, 0)
    want = torch.linalg.matrix_norm(P0 - P0.mT).double() / torch.linalg.matrix_norm(
        P0).double()
    assert torch.equal(ratio, want)  # the same norms of the same entries: bitwise
