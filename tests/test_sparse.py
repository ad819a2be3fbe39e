"""Sparse-pattern coverage on hand-built heads whose answer is known."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from attnlens.data.batch import Batch
from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.measures.sparse.sparse import (
    BIGBIRD,
    SparseCoverage,
    hash_scores,
    restricted_output_error,
    squared_row_error,
)

CLS, SEP, PAD = 1, 2, 0
# Shares are sums of a few float32 pattern entries accumulated in float64: each row sums to 1
# within n * 1.2e-7 (n <= 16 here), so 1e-5 bounds any share; output errors compare two
# float32 products P V of size n x d (relative rounding ~ n * 1.2e-7), bounded by 1e-5 too.
TOL = 1e-5


def _batch(ids: torch.Tensor, index: list[int]) -> Batch:
    return Batch(input_ids=ids, attention_mask=(ids != PAD).long(),
                 special_mask=(ids == CLS) | (ids == SEP), extra={"index": index})


def _cache(patterns, values) -> ActivationCache:
    """``patterns [layer, batch, head, q, k]``, ``values [layer, batch, pos, kv_head, d]``."""
    data = {}
    for layer, (p, v) in enumerate(zip(patterns, values, strict=True)):
        data[f"blocks.{layer}.attn.hook_pattern"] = p
        data[f"blocks.{layer}.attn.hook_v"] = v
    return ActivationCache(data)


def _local_pattern(n: int) -> torch.Tensor:
    """A head attending only to |i - j| <= 1: weights 0.4 on itself, 0.3 on each neighbour."""
    p = 0.4 * torch.eye(n) + 0.3 * torch.eye(n).roll(1, 1) + 0.3 * torch.eye(n).roll(-1, 1)
    p = p * (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs().le(1)  # no wrap-around
    return p / p.sum(-1, keepdim=True)


def _table(analyzer: SparseCoverage, name: str):
    return analyzer.result()[name]


def _coverage(analyzer, pattern, measure, window=None, layer=0, head=0) -> float:
    table = _table(analyzer, "sparse_coverage")
    rows = table[(table["pattern"] == pattern) & (table["measure"] == measure)
                 & (table["layer"] == layer) & (table["head"] == head)]
    if window is not None:
        rows = rows[rows["window"] == window]
    (value,) = rows["value"]
    return value


def test_a_purely_local_head_keeps_everything_in_window_one_with_zero_error():
    n = 12
    ids = torch.tensor([[CLS, *range(5, 5 + n - 2), SEP]])
    pattern = _local_pattern(n)[None, None, None].expand(1, 1, 2, n, n)  # [layer, b, head, q, k]
    values = torch.randn(1, 1, n, 2, 8)
    analyzer = SparseCoverage(1, 2)
    analyzer.update(_batch(ids, [0]), _cache(pattern, values))
    for w in (1, 2, 4, 8, 16):
        assert _coverage(analyzer, "window", "mass", w) == pytest.approx(1.0, abs=TOL)
        assert _coverage(analyzer, "window", "output_error", w) == pytest.approx(0.0, abs=TOL)
    heads = _table(analyzer, "sparse_heads").set_index(["layer", "head", "measure"])["value"]
    assert heads[0, 0, "window90"] == 1 and heads[0, 0, "window90_exact"] == 1
    assert heads[0, 1, "error_at_window90"] == pytest.approx(0.0, abs=TOL)
    # window 0 keeps only the diagonal: 0.4 inside, 0.4 / 0.7 at the two ends
    curve = _table(analyzer, "sparse_window_curve")
    w0 = curve[(curve["window"] == 0) & (curve["head"] == 0)]["window_mass"].item()
    assert w0 == pytest.approx((0.4 * (n - 2) + 2 * 0.4 / 0.7) / n, abs=TOL)


def test_a_head_on_cls_is_all_global():
    n = 8
    ids = torch.tensor([[CLS, 5, 6, 7, 8, 9, 10, SEP]])
    pattern = torch.zeros(1, 1, 1, n, n)
    pattern[..., 0] = 1.0  # every query reads [CLS]
    values = torch.randn(1, 1, n, 1, 4)
    analyzer = SparseCoverage(1, 1, n_global=0)  # global = the special tokens only
    analyzer.update(_batch(ids, [0]), _cache(pattern, values))
    assert _coverage(analyzer, "global", "mass") == pytest.approx(1.0, abs=TOL)
    assert _coverage(analyzer, "global", "output_error") == pytest.approx(0.0, abs=TOL)
    # inside ±1 only rows 0 and 1 see [CLS]; the rest of their windows holds no mass
    assert _coverage(analyzer, "window", "mass", 1) == pytest.approx(2 / n, abs=TOL)
    assert _coverage(analyzer, "window+global", "mass", 1) == pytest.approx(1.0, abs=TOL)
    heads = _table(analyzer, "sparse_heads").set_index("measure")["value"]
    # ±w holds (w + 1) / n of the mass: 90 % needs w = 7 = n - 1; on the grid that is 8
    assert heads["window90_exact"] == n - 1 and heads["window90"] == 8
    assert heads["window90_global"] == 0
    assert _coverage(analyzer, "window", "mass", 4) == pytest.approx(5 / n, abs=TOL)


def test_no_grid_window_reaching_the_coverage_is_nan():
    n = 30
    ids = torch.tensor([[CLS, *range(5, 5 + n - 2), SEP]])
    pattern = torch.zeros(1, 1, 1, n, n)
    pattern[..., n - 1] = 1.0  # every query reads [SEP] at the end, up to 29 tokens away
    analyzer = SparseCoverage(1, 1, windows=(1, 2, 4))
    analyzer.update(_batch(ids, [0]), _cache(pattern, torch.randn(1, 1, n, 1, 4)))
    heads = analyzer.result()["sparse_heads"].set_index("measure")["value"]
    assert math.isnan(heads["window90"]) and math.isnan(heads["error_at_window90"])
    assert heads["window90_exact"] == 26  # rows i >= 3 must reach n - 1 - i <= w: 27/30


def test_uniform_attention_keeps_what_random_keys_keep():
    # Under uniform attention a set of k visible keys holds k / n of the mass whichever keys
    # they are, so BigBird's set keeps exactly the random baseline.
    n = 20
    ids = torch.tensor([[CLS, *range(5, 5 + n - 2), SEP]] * 2)
    pattern = torch.full((1, 2, 3, n, n), 1.0 / n)
    analyzer = SparseCoverage(1, 3)
    analyzer.update(_batch(ids, [0, 1]), _cache(pattern, torch.randn(1, 2, n, 3, 4)))
    bigbird = _coverage(analyzer, "bigbird", "mass", head=2)
    assert bigbird == pytest.approx(_coverage(analyzer, "random", "mass", head=2), abs=TOL)
    # set size per row: window of 3 (2 at both ends) + [CLS], [SEP] and position 1 outside it
    # + 3 random keys; rows 0, 1, 2 and n-2, n-1 overlap the global tokens.
    sizes = [len({j for j in (i - 1, i, i + 1) if 0 <= j < n} | {0, 1, n - 1}) + 3
             for i in range(n)]
    assert bigbird == pytest.approx(sum(sizes) / n / n, abs=TOL)


def test_bigbird_random_keys_are_seeded_and_batch_independent():
    scores = hash_scores(0, torch.tensor([3, 4]), 6)
    again = hash_scores(0, torch.tensor([4]), 6)
    assert torch.equal(scores[1], again[0])  # sentence 4's keys do not depend on its batch
    assert not torch.equal(hash_scores(1, torch.tensor([4]), 6), again)  # seed matters
    assert scores.min() >= 0 and scores.max() < 2**32
    # the three chosen keys differ between rows (not a fixed column)
    top = scores[0].topk(3, dim=-1).indices.sort(-1).values
    assert len({tuple(row.tolist()) for row in top}) > 1


def test_bigbird_mass_and_error_match_the_explicit_set():
    # Rebuild BigBird's set from its definition (window ±1, [CLS]/[SEP] and positions 0, 1,
    # the 3 visible non-set keys with the largest hashes) and compare with the analyzer.
    n = 14
    ids = torch.tensor([[CLS, *range(5, 5 + n - 2), SEP], [CLS, *range(5, 5 + n - 5), SEP,
                                                           PAD, PAD, PAD]])
    batch = _batch(ids, [7, 8])
    real = batch.attention_mask.bool()
    scores = torch.randn(1, 2, 2, n, n).masked_fill(~real[None, :, None, None, :], -torch.inf)
    pattern, values = torch.softmax(scores, -1), torch.randn(1, 2, n, 2, 3)
    analyzer = SparseCoverage(1, 2)
    analyzer.update(batch, _cache(pattern, values))
    hashes = hash_scores(0, torch.tensor([7, 8]), n)
    masses, errors = [], []
    for b in range(2):
        m = int(real[b].sum())
        fixed = torch.zeros(m, m, dtype=torch.bool)
        for i in range(m):
            for j in range(m):
                fixed[i, j] = abs(i - j) <= 1 or j in (0, 1, m - 1)
        keep = fixed.clone()
        for i in range(m):
            free = [j for j in range(m) if not fixed[i, j]]
            chosen = sorted(free, key=lambda j: -int(hashes[b, i, j]))[:3]
            keep[i, chosen] = True
        p, v = pattern[0, b, :, :m, :m], values[0, b, :m].transpose(0, 1)  # [head, key, d]
        masses.append((p * keep).sum(-1).sum(-1))  # [head]: row sums over rows
        errors.append(restricted_output_error(p[None], keep, v[None],
                                              torch.ones(1, m, dtype=torch.bool))[0])
    rows = int(real.sum())
    for head in range(2):
        mass = sum(float(x[head]) for x in masses) / rows
        error = sum(float(x[head]) for x in errors) / 2
        assert _coverage(analyzer, "bigbird", "mass", head=head) == pytest.approx(mass, abs=TOL)
        assert _coverage(analyzer, "bigbird", "output_error", head=head) == pytest.approx(
            error, abs=TOL)


def test_restricted_output_error_matches_a_direct_computation():
    torch.manual_seed(1)
    p = torch.softmax(torch.randn(1, 1, 6, 6, dtype=torch.float64), -1)
    v = torch.randn(1, 1, 6, 3, dtype=torch.float64)
    keep = torch.rand(6, 6) > 0.5
    keep.fill_diagonal_(True)
    error = restricted_output_error(p, keep, v, torch.ones(1, 6, dtype=torch.bool))
    ps = torch.where(keep, p[0, 0], 0.0)
    ps = ps / ps.sum(-1, keepdim=True)
    direct = torch.linalg.norm((p[0, 0] - ps) @ v[0, 0]) / torch.linalg.norm(p[0, 0] @ v[0, 0])
    assert error.item() == pytest.approx(direct.item(), rel=1e-12)  # float64 throughout


def test_grouped_query_values_map_query_heads_to_kv_heads():
    # 4 query heads, 2 kv heads: heads 0, 1 read kv head 0, heads 2, 3 read kv head 1.
    n = 6
    ids = torch.tensor([[CLS, 5, 6, 7, 8, SEP]])
    torch.manual_seed(2)
    pattern = torch.softmax(torch.randn(1, 1, 4, n, n), -1)
    values = torch.randn(1, 1, n, 2, 5)
    analyzer = SparseCoverage(1, 4, windows=(1,))
    analyzer.update(_batch(ids, [0]), _cache(pattern, values))
    local = ((torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs() <= 1)
    for head in range(4):
        v = values[0, 0, :, head // 2][None, None]  # [1, 1, key, d]
        expected = restricted_output_error(pattern[0, :, head : head + 1], local, v,
                                           torch.ones(1, n, dtype=torch.bool)).item()
        got = _coverage(analyzer, "window", "output_error", 1, head=head)
        assert got == pytest.approx(expected, abs=TOL)


def test_causal_random_baseline_counts_visible_keys_only():
    n = 5
    ids = torch.tensor([[5, 6, 7, 8, 9]])  # no special tokens (GPT-2 style)
    pattern = torch.tril(torch.ones(n, n))
    pattern = (pattern / pattern.sum(-1, keepdim=True))[None, None, None]
    analyzer = SparseCoverage(1, 1, causal=True, n_global=0)
    analyzer.update(_batch(ids, [0]), _cache(pattern, torch.randn(1, 1, n, 1, 3)))
    # BigBird here: row i keeps i-1, i (window, visible), positions 0 and 1 (global), and up
    # to 3 random earlier keys: every visible key for i < 6, so both masses are 1.
    assert _coverage(analyzer, "random", "mass") == pytest.approx(1.0, abs=TOL)
    assert _coverage(analyzer, "bigbird", "mass") == pytest.approx(1.0, abs=TOL)
    assert BIGBIRD["n_random"] == 3


def test_merge_of_halves_equals_the_whole_and_state_round_trips():
    ids = torch.tensor([[CLS, 5, 6, 7, 8, 9, SEP], [CLS, 5, 6, SEP, PAD, PAD, PAD],
                        [CLS, 7, 7, 7, 7, SEP, PAD], [CLS, 8, 9, 10, 11, 12, SEP]])
    mask = ids != PAD
    scores = torch.randn(2, 4, 2, 7, 7).masked_fill(~mask[None, :, None, None, :], -torch.inf)
    patterns, values = torch.softmax(scores, -1), torch.randn(2, 4, 7, 1, 3)
    whole = SparseCoverage(2, 2)
    whole.update(_batch(ids, [0, 1, 2, 3]), _cache(patterns, values))
    parts = []
    for rows in ([0, 2], [1, 3]):
        part = SparseCoverage(2, 2)
        part.update(_batch(ids[rows], rows), _cache(patterns[:, rows], values[:, rows]))
        parts.append(part)
    merged = parts[0].merge(parts[1])
    for field in ("by_distance", "nonglobal_by_distance", "masses", "errors"):
        # each sentence's float32 terms are computed alike (same padded width); only the
        # float64 sum over sentences runs in another order: 1e-12 is ample
        torch.testing.assert_close(getattr(merged, field), getattr(whole, field),
                                   rtol=0, atol=1e-12)
    assert merged.rows == whole.rows == int(mask.sum())
    restored = SparseCoverage(2, 2)
    restored.load_state_dict(whole.state_dict())
    assert restored.result()["sparse_heads"].equals(whole.result()["sparse_heads"])
    with pytest.raises(ConfigError, match="n_global"):
        whole.merge(SparseCoverage(2, 2, n_global=3))
    with pytest.raises(ConfigError, match="coverage"):
        SparseCoverage(1, 1, coverage=0)


def test_max_sentences_samples_evenly_by_corpus_index_then_per_batch():
    """15 sentences in 3 batches, a sample of 4: corpus indices floor(j 15 / 4) = 0, 3, 7, 11
    (rows 0 and 3, then 2, then 1), whatever the batching; per_batch 3 does not bind."""
    ids = torch.tensor([[CLS, 5, 6, 7, 8, 9, SEP]] * 4 + [[CLS, 5, 6, SEP, PAD, PAD, PAD]])
    mask = ids != PAD
    scores = torch.randn(1, 5, 2, 7, 7).masked_fill(~mask[None, :, None, None, :], -torch.inf)
    patterns, values = torch.softmax(scores, -1), torch.randn(1, 5, 7, 1, 3)

    def in_corpus(batch: Batch) -> Batch:
        batch.extra["corpus_size"] = 15
        return batch

    sampled = SparseCoverage(1, 2, per_batch=3, max_sentences=4)
    for first in (0, 5, 10):
        sampled.update(in_corpus(_batch(ids, list(range(first, first + 5)))),
                       _cache(patterns, values))
    direct = SparseCoverage(1, 2)  # fed the sampled rows by hand
    for rows, index in (([0, 3], [0, 3]), ([2], [7]), ([1], [11])):
        direct.update(_batch(ids[rows], index), _cache(patterns[:, rows], values[:, rows]))
    assert sampled.sentences == 4 and sampled.rows == direct.rows
    for field in ("by_distance", "masses", "errors"):
        # the same float32 per-sentence terms, float64 sums: 1e-12 is ample
        torch.testing.assert_close(getattr(sampled, field), getattr(direct, field),
                                   rtol=0, atol=1e-12)
    capped = SparseCoverage(1, 2, per_batch=1, max_sentences=4)  # then at most 1 per batch
    capped.update(in_corpus(_batch(ids, list(range(5)))), _cache(patterns, values))
    assert capped.sentences == 1
    with pytest.raises(ConfigError, match="per_batch"):
        SparseCoverage(1, 1, per_batch=0)


def test_a_structurally_pruned_model_has_no_phantom_heads():
    """Sparse and linear-attention tables list only the heads each layer still has."""
    from attnlens.measures.linear.linear_attention import LinearAttentionView
    from attnlens.measures.pruning.structural import prune_heads
    from attnlens.model import HookedTransformer, TransformerConfig
    from attnlens.stream.runner import run_analyzers

    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, n_heads=4, n_layers=2, d_mlp=64, vocab_size=50,
                            n_ctx=32)
    mask = torch.ones(2, 4)
    mask[1, 1:] = 0  # layer 1 keeps head 0 only
    model = prune_heads(HookedTransformer(cfg).eval(), mask)
    assert model.heads_per_layer == [4, 1]
    ids = torch.tensor([[CLS, 5, 6, 7, SEP], [CLS, 8, 9, SEP, PAD]])
    analyzers = [SparseCoverage.for_model(model, windows=(1, 2)),
                 LinearAttentionView.for_model(model)]
    run_analyzers(model, [_batch(ids, [0, 1])], analyzers, show_progress=False)
    for analyzer in analyzers:
        for name, table in analyzer.result().items():
            pairs = set(zip(table["layer"], table["head"], strict=True))
            assert pairs == {(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)}, name


def test_fused_row_error_equals_the_weighted_definition():
    """matrix30: the analyzer zeroes the padded query rows of the pattern once and forms
    ``full - product / mass`` with ``addcdiv`` (the same numbers as the weighted definition);
    sparse32 takes its norm in one ``vector_norm`` pass instead of squaring and summing: the
    same sum of squares up to float32 rounding of a sum of 45 terms (relative 1e-6 bounds
    ~45 x 1.19e-7 / 2 after the square root, with room for other kernels)."""
    from attnlens.measures.sparse.sparse import _error_norm, _minus_ratio

    gen = torch.Generator().manual_seed(5)
    pattern = torch.softmax(torch.randn(3, 4, 9, 9, generator=gen), -1)
    values = torch.randn(3, 4, 9, 5, generator=gen)
    rows = torch.arange(9)[None, :] < torch.tensor([9, 6, 2])[:, None]  # [batch, rows]
    weight = rows[:, None, :, None].float()
    keep = (torch.arange(9)[:, None] - torch.arange(9)).abs() <= 1
    zeroed = pattern * weight
    kept = zeroed * keep
    full, product, mass = zeroed @ values, kept @ values, kept.sum(-1)
    approx = product / mass.clamp_min(torch.finfo(torch.float32).tiny)[..., None]
    assert torch.equal(_minus_ratio(full, product, mass), full - approx)
    kept_raw = pattern * keep  # the unzeroed pattern, weighted only at the end
    want = (((pattern @ values) - (kept_raw @ values)
             / kept_raw.sum(-1).clamp_min(torch.finfo(torch.float32).tiny)[..., None])
            * weight).square().sum(dim=(-2, -1))
    torch.testing.assert_close(_error_norm(full, product, mass), want.sqrt(), rtol=1e-6,
                               atol=0)
    assert torch.equal(squared_row_error(pattern @ values, kept_raw @ values, kept_raw.sum(-1),
                                         weight), want)


def _old_window_curve(analyzer: SparseCoverage) -> pd.DataFrame:
    """``sparse_window_curve`` before fixed43: one record per head and window."""
    window, plus = analyzer._window_curves()
    curve = []
    for layer in range(analyzer.n_layers):
        for head in range(analyzer.heads_per_layer[layer]):
            curve += [{"layer": layer, "head": head, "window": w,
                       "window_mass": float(window[layer, head, w]),
                       "window_global_mass": float(plus[layer, head, w])}
                      for w in range(analyzer.max_distance + 1)]
    return pd.DataFrame.from_records(curve)


@pytest.mark.parametrize("heads", [[3, 3], [2, 0, 3], [0, 0]])
def test_window_curve_columns_equal_the_per_record_table(heads: list[int]) -> None:
    """fixed43: the window curve built as columns is the per-record table (values, dtypes,
    CSV), pruned layers and a model without heads included."""
    analyzer = SparseCoverage(len(heads), max(heads), heads_per_layer=heads, max_distance=6)
    generator = torch.Generator().manual_seed(0)
    for field in ("by_distance", "nonglobal_by_distance", "masses"):
        setattr(analyzer, field, torch.rand(getattr(analyzer, field).shape,
                                            generator=generator, dtype=torch.float64))
    analyzer.rows, analyzer.sentences = 7, 3
    new = analyzer.result()["sparse_window_curve"]
    old = _old_window_curve(analyzer)
    pd.testing.assert_frame_equal(new, old, check_exact=True)
    assert new.to_csv(index=False) == old.to_csv(index=False)
