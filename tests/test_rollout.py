"""Attention rollout and attention flow on hand-built patterns whose answer is known."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch

from attnlens.data.batch import Batch
from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.measures.rollout.flow import (
    FLOW_SCALE,
    FlowAnalyzer,
    attention_flow,
    flow_values,
    normalise_rows,
)
from attnlens.measures.rollout.rollout import (
    LAYER_MEASURES,
    RolloutAnalyzer,
    residual_attention,
    rollout_matrices,
)

CLS, SEP, PAD = 1, 2, 0
# Rollout runs in float64: a product of L row-stochastic n x n matrices is exact to about
# L * n * 2.2e-16; 1e-12 bounds that for the sizes here (L <= 6, n <= 12) with a wide margin.
F64_TOL = 1e-12


def _cache(patterns: torch.Tensor) -> ActivationCache:
    """``patterns [layer, batch, head, query, key]`` as a cache of hook_pattern tensors."""
    return ActivationCache({f"blocks.{i}.attn.hook_pattern": p for i, p in enumerate(patterns)})


def _batch(ids: torch.Tensor, index: list[int] | None = None) -> Batch:
    mask = (ids != PAD).long()
    return Batch(input_ids=ids, attention_mask=mask, special_mask=(ids == CLS) | (ids == SEP),
                 extra={"index": index} if index is not None else {})


def _random_patterns(layers: int, batch: int, heads: int, n: int, mask: torch.Tensor):
    """Softmax patterns over real keys, float64: ``[layer, batch, head, query, key]``."""
    scores = torch.randn(layers, batch, heads, n, n, dtype=torch.float64) * 2
    scores = scores.masked_fill(~mask.bool()[None, :, None, None, :], float("-inf"))
    return torch.softmax(scores, dim=-1)


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("residual", [0.0, 0.5, 1.0])
def test_identity_attention_rolls_out_to_the_identity(fusion, residual):
    patterns = torch.eye(5).expand(4, 3, 5, 5)  # [layer, head, query, key]
    rolled = rollout_matrices(patterns, residual, fusion)
    assert rolled.shape == (4, 5, 5)
    assert torch.equal(rolled, torch.eye(5, dtype=torch.float64).expand(4, 5, 5))


def test_uniform_attention_matches_the_closed_form():
    # Ã = ½ J/n + ½ I; J/n is idempotent and commutes with I, so
    # Ã^(l+1) = ½^(l+1) I + (1 - ½^(l+1)) J/n.
    n, layers = 7, 6
    patterns = torch.full((layers, 2, n, n), 1.0 / n, dtype=torch.float64)
    rolled = rollout_matrices(patterns, residual=0.5)
    eye = torch.eye(n, dtype=torch.float64)
    uniform = torch.full((n, n), 1.0 / n, dtype=torch.float64)
    for layer in range(layers):
        a = 0.5 ** (layer + 1)
        torch.testing.assert_close(rolled[layer], a * eye + (1 - a) * uniform,
                                   rtol=0, atol=F64_TOL)


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
def test_rollout_rows_sum_to_one(fusion):
    mask = torch.ones(1, 9)
    patterns = _random_patterns(5, 1, 4, 9, mask)[:, 0]
    rolled = rollout_matrices(patterns, residual=0.3, fusion=fusion)
    torch.testing.assert_close(rolled.sum(-1), torch.ones(5, 9, dtype=torch.float64),
                               rtol=0, atol=F64_TOL)
    assert (rolled >= 0).all()


def test_rollout_is_the_product_of_the_residual_matrices():
    patterns = _random_patterns(3, 1, 2, 6, torch.ones(1, 6))[:, 0].double()
    mixed = [0.5 * p.mean(0) + 0.5 * torch.eye(6, dtype=torch.float64) for p in patterns]
    expected = mixed[2] @ mixed[1] @ mixed[0]
    torch.testing.assert_close(rollout_matrices(patterns)[2], expected, rtol=0, atol=F64_TOL)


def test_bad_options_are_config_errors():
    with pytest.raises(ConfigError, match="residual"):
        rollout_matrices(torch.eye(3).expand(1, 1, 3, 3), residual=1.5)
    with pytest.raises(ConfigError, match="head fusion"):
        RolloutAnalyzer(2, fusion="median")


def test_analyzer_matches_per_sentence_rollout_with_padding_excluded():
    ids = torch.tensor([[CLS, 5, 6, 7, 8, SEP], [CLS, 9, SEP, PAD, PAD, PAD]])
    batch = _batch(ids, index=[0, 1])
    patterns = _random_patterns(3, 2, 4, 6, batch.attention_mask)
    analyzer = RolloutAnalyzer(3, residual=0.5, keep=None)
    analyzer.update(batch, _cache(patterns))
    kept = analyzer.kept_sentences()
    assert [r["sentence"] for r in kept] == [0, 1]
    for b, record in enumerate(kept):
        n = int(batch.attention_mask[b].sum())
        expected = rollout_matrices(patterns[:, b, :, :n, :n])
        torch.testing.assert_close(record["matrices"], expected, rtol=0, atol=F64_TOL)
        assert record["tokens"] == [str(i) for i in ids[b, :n].tolist()]
    table = analyzer.result()["rollout"]
    assert list(table.columns) == ["sentence", "layer", "query", "key", "query_token",
                                   "key_token", "value"]
    assert len(table) == 3 * (36 + 9)
    sums = table.groupby(["sentence", "layer", "query"])["value"].sum()
    np.testing.assert_allclose(sums.to_numpy(), 1.0, rtol=0, atol=F64_TOL)


def test_max_entries_keeps_only_sentences_whose_matrices_fit():
    """3 layers x 6^2 = 108 entries for the long sentence, 3 x 3^2 = 27 for the short one: a
    bound of 100 keeps the short one whole and names the long one; corpus shares still
    count both sentences."""
    ids = torch.tensor([[CLS, 5, 6, 7, 8, SEP], [CLS, 9, SEP, PAD, PAD, PAD]])
    batch = _batch(ids, index=[0, 1])
    patterns = _random_patterns(3, 2, 4, 6, batch.attention_mask)
    bounded = RolloutAnalyzer(3, keep=None, max_entries=100)
    bounded.update(batch, _cache(patterns))
    assert [r["sentence"] for r in bounded.kept_sentences()] == [1]
    assert bounded.skipped == [0]
    unbounded = RolloutAnalyzer(3, keep=None)
    unbounded.update(batch, _cache(patterns))
    torch.testing.assert_close(bounded.sums, unbounded.sums, rtol=0, atol=0)
    assert bounded.kept_sentences()[0]["matrices"].equal(unbounded.kept_sentences()[1]["matrices"])


def test_layer_shares_of_uniform_attention_match_the_closed_form():
    # R_l = a I + (1 - a) J/n with a = ½^(l+1): self share a + (1 - a)/n; special share
    # (2 specials) 2 (1 - a)/n + a (2/n of the rows are special themselves); moved =
    # ½ Σ_j |R_l - R_(l-1)| = (½^l - ½^(l+1)) (n - 1)/n; distance Σ_j R|i-j| averaged;
    # mixing 1 - Ã[i, i].
    n, layers = 6, 4
    ids = torch.tensor([[CLS, 5, 6, 7, 8, SEP]])
    patterns = torch.full((layers, 1, 3, n, n), 1.0 / n, dtype=torch.float64)
    analyzer = RolloutAnalyzer(layers)
    analyzer.update(_batch(ids), _cache(patterns))
    table = analyzer.result()["rollout_layers"].set_index(["measure", "layer"])["value"]
    pos = np.arange(n)
    mean_distance = np.abs(pos[:, None] - pos[None, :]).mean()  # Σ_j |i-j| / n, row mean
    for layer in range(layers):
        a = 0.5 ** (layer + 1)
        expected = {
            "self_share": a + (1 - a) / n,
            "special_share": 2 * (1 - a) / n + a * 2 / n,
            "moved": (2 * a - a) * (n - 1) / n,
            "distance": (1 - a) * mean_distance,
            "mixing": 0.5 - 0.5 / n,  # Ã[i, i] = ½ + ½ / n at every layer
        }
        for measure, value in expected.items():
            assert table[measure, layer] == pytest.approx(value, abs=F64_TOL), measure


def test_merge_of_halves_equals_the_whole_and_state_round_trips():
    ids = torch.tensor([[CLS, 5, 6, 7, SEP], [CLS, 8, SEP, PAD, PAD],
                        [CLS, 9, 9, SEP, PAD], [CLS, 5, 5, 5, SEP]])
    batch = _batch(ids, index=[0, 1, 2, 3])
    patterns = _random_patterns(2, 4, 3, 5, batch.attention_mask)
    whole = RolloutAnalyzer(2, keep=3)
    whole.update(batch, _cache(patterns))
    halves = []
    for rows in ([0, 1], [2, 3]):
        part = RolloutAnalyzer(2, keep=3)
        sub = Batch(input_ids=ids[rows], attention_mask=batch.attention_mask[rows],
                    special_mask=batch.special_mask[rows], extra={"index": rows})
        part.update(sub, _cache(patterns[:, rows]))
        halves.append(part)
    merged = halves[0].merge(halves[1])
    # Sums of the same per-row terms in another order: float64 rounding, 1e-12 is ample.
    torch.testing.assert_close(merged.sums, whole.sums, rtol=0, atol=F64_TOL)
    assert merged.rows == whole.rows and merged.sentences == whole.sentences == 4
    assert [r["sentence"] for r in merged.kept_sentences()] == [0, 1, 2]
    assert merged.result()["rollout"].equals(whole.result()["rollout"])
    restored = RolloutAnalyzer(2, keep=3)
    restored.load_state_dict(whole.state_dict())
    assert restored.result()["rollout_layers"].equals(whole.result()["rollout_layers"])
    with pytest.raises(ConfigError, match="residual"):
        whole.merge(RolloutAnalyzer(2, residual=0.3, keep=3))
    assert set(whole.result()["rollout_layers"]["measure"]) == set(LAYER_MEASURES)


def test_residual_attention_turns_padded_rows_into_identity_rows():
    fused = torch.full((1, 4, 4), 0.25).double()
    real = torch.tensor([[True, True, True, False]])
    mixed = residual_attention(fused, 0.5, real)
    assert torch.equal(mixed[0, 3], torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64))


# Attention flow -------------------------------------------------------------------------
# Integer capacities: each is off by at most 2**-29 after scaling, and a flow value (a cut's
# capacity) by at most 2**-29 per edge of the graph.
def _flow_tol(n_edges: int) -> float:
    return n_edges * 0.5 / FLOW_SCALE


def test_flow_on_a_two_layer_hand_graph():
    mixed = np.array([[[0.9, 0.1], [0.2, 0.8]],  # Ã_0: level 1 -> level 0
                      [[0.6, 0.4], [0.3, 0.7]]])  # Ã_1: level 2 -> level 1
    flows = flow_values(mixed)
    # Layer 0: a single edge per pair, flow = capacity. Layer 1, by hand: two disjoint paths
    # per pair through (1, 0) and (1, 1); each carries the smaller of its two capacities:
    # (2,0)->(0,0): min(.6,.9) + min(.4,.2) = .8; (2,0)->(0,1): min(.6,.1) + min(.4,.8) = .5
    # (2,1)->(0,0): min(.3,.9) + min(.7,.2) = .5; (2,1)->(0,1): min(.3,.1) + min(.7,.8) = .8
    expected = np.array([mixed[0], [[0.8, 0.5], [0.5, 0.8]]])
    np.testing.assert_allclose(flows, expected, rtol=0, atol=_flow_tol(8))
    # Rows normalised as in the paper; a ratio of values off by tol each is off by < 4 tol.
    normalised = np.array([[0.8, 0.5], [0.5, 0.8]]) / 1.3
    np.testing.assert_allclose(normalise_rows(flows)[1], normalised, rtol=0,
                               atol=4 * _flow_tol(8))
    # Rollout of the same graph differs: R_1[0] = .6 (.9, .1) + .4 (.2, .8) = (.62, .38).


def test_two_layer_flow_is_the_sum_of_path_minima():
    # In a two-layer graph every path (2,i)->(1,k)->(0,j) has its own edges, so the
    # maximum flow is Σ_k min(Ã_1[i,k], Ã_0[k,j]).
    rng = np.random.default_rng(0)
    mixed = rng.dirichlet(np.ones(5), size=(2, 5))  # [layer, query, key], rows sum 1
    flows = flow_values(mixed)
    expected = np.minimum(mixed[1][:, :, None], mixed[0][None, :, :]).sum(1)
    np.testing.assert_allclose(flows[1], expected, rtol=0, atol=_flow_tol(50))


def test_flow_matches_networkx_on_three_layers():
    rng = np.random.default_rng(1)
    mixed = rng.dirichlet(np.ones(4) * 0.5, size=(3, 4))
    graph = nx.DiGraph()
    for layer in range(3):
        for i in range(4):
            for j in range(4):
                graph.add_edge((layer + 1, i), (layer, j), capacity=float(mixed[layer, i, j]))
    flows = flow_values(mixed)
    for layer in range(3):
        for i in range(4):
            for j in range(4):
                ref = nx.maximum_flow_value(graph, (layer + 1, i), (0, j))
                # networkx works in float64 (exact to ~1e-16 per augmenting step).
                assert flows[layer, i, j] == pytest.approx(ref, abs=_flow_tol(48) + 1e-12)


def test_flow_analyzer_skips_long_sentences_and_matches_attention_flow():
    ids = torch.tensor([[CLS, 5, 6, SEP, PAD], [CLS, 7, 8, 9, SEP]])
    batch = _batch(ids, index=[0, 1])
    patterns = _random_patterns(2, 2, 2, 5, batch.attention_mask)
    analyzer = FlowAnalyzer(2, max_tokens=4)
    analyzer.update(batch, _cache(patterns))
    assert analyzer.skipped == [1]
    (record,) = analyzer.kept_sentences()
    expected, raw = attention_flow(patterns[:, 0, :, :4, :4])
    # the analyzer and the one-sentence function solve the same integer graph: identical
    np.testing.assert_allclose(record["matrices"].numpy(), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(record["extra_columns"]["max_flow"].numpy(), raw, rtol=0,
                               atol=1e-12)
    table = analyzer.result()["flow"]
    assert list(table.columns)[:7] == ["sentence", "layer", "query", "key", "query_token",
                                       "key_token", "value"]
    assert "max_flow" in table.columns
    with pytest.raises(ConfigError, match="limited to 3 tokens"):
        attention_flow(patterns[:, 1], max_tokens=3)


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
def test_heads_fused_in_float64_without_the_copy_equal_bitwise(fusion):
    """matrix30: the analyzer fuses a float32 pattern's heads in float64 without first
    widening every head (fuse_heads_double); the numbers are fuse_heads' on the widened copy."""
    from attnlens.measures.rollout.rollout import fuse_heads, fuse_heads_double

    gen = torch.Generator().manual_seed(2)
    pattern = torch.softmax(torch.randn(3, 12, 9, 9, generator=gen) * 4, -1)
    assert torch.equal(fuse_heads_double(pattern, fusion),
                       fuse_heads(pattern.double(), fusion))
