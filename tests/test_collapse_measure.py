"""The rank-collapse measures on hand-built matrices with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlens.errors import ConfigError
from attnlens.measures.collapse.paths import (
    count_paths,
    path_products,
    rank1_residual,
    real_patterns,
)
from attnlens.measures.collapse.paths import sample_paths as sample_head_paths
from attnlens.measures.collapse.residual import (
    ResidualCollapse,
    composite_norm,
    fit_decay,
    relative_residual,
    subsample,
    token_residual,
)
from attnlens.measures.collapse.variants import VARIANTS, parse_variants, variant_config
from attnlens.model.config import TransformerConfig
from attnlens.stream.base import Batch


def test_composite_norm_by_hand() -> None:
    m = torch.tensor([[1.0, -2.0], [3.0, 4.0]], dtype=torch.float64)
    # float64 sums of small integers and one sqrt: exact to 1 ulp (rel 1e-12 here and below)
    # ||m||_1 = max column sum of |.| = max(1 + 3, 2 + 4) = 6
    # ||m||_inf = max row sum of |.| = max(1 + 2, 3 + 4) = 7
    assert composite_norm(m).item() == pytest.approx(math.sqrt(6 * 7), rel=1e-12)
    # A non-square case: column sums (5, 2, 9) -> 9; row sums (3, 13) -> 13.
    m = torch.tensor([[1.0, 0.0, -2.0], [-4.0, 2.0, 7.0]], dtype=torch.float64)
    assert composite_norm(m).item() == pytest.approx(math.sqrt(9 * 13), rel=1e-12)
    # Batched over leading axes.
    both = torch.stack([m, 2 * m])
    expected = torch.tensor([1.0, 2.0], dtype=torch.float64) * math.sqrt(117)
    assert torch.allclose(composite_norm(both), expected, rtol=1e-12)


def test_identical_rows_have_zero_residual() -> None:
    x = torch.tensor([[1.0, 2.0, -3.0]]).repeat(5, 1)[None]  # [1, 5, 3], rows identical
    assert torch.equal(token_residual(x), torch.zeros_like(x))
    for norm in ("composite", "frobenius"):
        assert relative_residual(x, norm=norm).item() == 0.0


def test_distinct_rows_have_positive_residual_by_hand() -> None:
    x = torch.eye(2)[None]  # two tokens, rows e1 and e2; mean token (0.5, 0.5)
    res = token_residual(x)
    assert torch.allclose(res, torch.tensor([[[0.5, -0.5], [-0.5, 0.5]]]))  # exact in binary
    # Frobenius: ||res|| = 1, ||X|| = sqrt 2.  Composite: every row/column sum is 1 for both.
    # float64 on exact inputs: 1 ulp (measured 1.1e-16)
    assert relative_residual(x, norm="frobenius").item() == pytest.approx(2**-0.5, rel=1e-12)
    assert relative_residual(x, norm="composite").item() == pytest.approx(1.0, rel=1e-12)
    # A rank-1 matrix whose rows differ (a v^T with varying a) is *not* collapsed.
    a, v = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, -1.0])
    assert relative_residual(torch.outer(a, v)[None], norm="frobenius").item() > 0.3


def test_padding_is_ignored_per_sentence() -> None:
    torch.manual_seed(1)
    short, long = torch.randn(3, 4), torch.randn(5, 4)
    padded = torch.zeros(2, 5, 4)
    padded[0, :3], padded[0, 3:] = short, 100.0  # junk in padded rows must not matter
    padded[1] = long
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    for norm in ("composite", "frobenius"):
        got = relative_residual(padded, mask, norm)
        alone = torch.cat(
            [relative_residual(short[None], None, norm), relative_residual(long[None], None, norm)]
        )
        assert torch.allclose(got, alone, rtol=1e-12, atol=0)  # float64; padded rows add 0.0
    with pytest.raises(ConfigError):
        relative_residual(padded, mask, "spectral")


def test_fit_recovers_a_doubly_exponential_rate_and_stops_at_the_floor() -> None:
    depth = np.arange(12)
    r = np.exp(-0.01 * 3.0**depth)  # -log r triples per layer
    fit = fit_decay(depth, r)
    # float64 least squares on exact synthetic curves: ~1e-15 (measured 1.8e-15)
    assert fit["double_base"] == pytest.approx(3.0, rel=1e-9)
    assert fit["double_r2"] == pytest.approx(1.0, abs=1e-12)
    assert fit["single_r2"] < 0.9
    # r falls below 1e-13 (-log r > 29.9) first at depth 8 (0.01 * 3^8 = 65.6): depths 0..7 used.
    assert fit["points"] == 8 and fit["last_depth"] == 7
    # A plain exponential decay is a straight line of log r instead.
    expo = fit_decay(depth, 0.5**depth)
    assert expo["single_factor"] == pytest.approx(0.5, rel=1e-9)
    assert expo["points"] == 11  # depth 0 (r = 1) is not below 1 and is left out
    assert math.isnan(fit_decay([0, 1], [0.5, 0.1])["double_slope"])


def test_variant_switches() -> None:
    assert parse_variants("san, full") == ["san", "full"]
    with pytest.raises(ConfigError, match="unknown variant"):
        parse_variants("san,nope")
    with pytest.raises(ConfigError):
        parse_variants("")
    cfg = TransformerConfig(d_model=8, n_layers=2, n_heads=2, d_mlp=16, vocab_size=10)
    for name, switches in VARIANTS.items():
        v = variant_config(cfg, name)
        assert (v.use_skip, v.use_mlp, v.use_norm) == switches
        assert (v.d_model, v.n_layers, v.heads_per_layer) == (8, 2, [2, 2])
    assert (cfg.use_skip, cfg.use_mlp, cfg.use_norm) == (True, True, True)  # not modified


def test_residual_collapse_merge_equals_one_pass() -> None:
    torch.manual_seed(2)
    hidden = [torch.randn(4, 6, 3) for _ in range(3)]  # depths 0..2
    mask = torch.ones(4, 6, dtype=torch.long)
    mask[1, 4:] = 0
    whole = ResidualCollapse(n_layers=2)
    whole.update_hidden(hidden, mask)
    first, second = ResidualCollapse(n_layers=2), ResidualCollapse(n_layers=2)
    first.update_hidden([h[:2] for h in hidden], mask[:2])
    second.update_hidden([h[2:] for h in hidden], mask[2:])
    a, b = whole.result()["collapse"], first.merge(second).result()["collapse"]
    assert len(a) == 2 * 3 and (a["n"] == 4).all()
    # exact: the same float64 per-sentence values, merged (measured 0.0)
    assert np.allclose(a[["mean", "min", "max", "q10"]], b[["mean", "min", "max", "q10"]])


def test_subsample_spans_the_batch() -> None:
    batch = Batch(input_ids=torch.arange(10)[:, None], attention_mask=torch.ones(10, 1))
    assert subsample(batch, 3).input_ids.flatten().tolist() == [0, 4, 9]  # round(4.5) = 4
    assert subsample(batch, 20) is batch
    assert subsample(batch, 0).input_ids.shape[0] == 0


def test_rank1_residual_by_hand() -> None:
    u, v = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.5, -1.0, 4.0])
    # float64 SVD of an exact rank-one 3x3: s_2 is LAPACK's backward error, up to ~n^2 x 2.2e-16
    # x s_1 = 2e-15 s_1 on other LAPACK code paths (measured 1.6e-17); float32 would give ~1e-8
    assert rank1_residual(torch.outer(u, v)).item() < 1e-13
    # Identity n x n: singular values all 1 -> sqrt((n - 1) / n), exact in float64.
    assert rank1_residual(torch.eye(4)).item() == pytest.approx(math.sqrt(3 / 4), rel=1e-12)
    # diag(3, 4): sqrt(3^2 / (3^2 + 4^2)) = 3/5.
    assert rank1_residual(torch.diag(torch.tensor([3.0, 4.0]))).item() == pytest.approx(0.6)


def test_path_products_match_explicit_products_and_ignore_padding() -> None:
    torch.manual_seed(3)
    n_real, n_pos = 3, 5
    patterns = {}
    for layer in range(3):
        scores = torch.randn(2, 2, n_pos, n_pos)  # [batch, head, query_pos, key_pos]
        scores[0, :, :, n_real:] = float("-inf")  # sentence 0 has 3 real tokens
        patterns[layer] = scores.softmax(-1)
    mask = torch.tensor([[1] * n_real + [0] * (n_pos - n_real), [1] * n_pos])
    paths = sample_head_paths([2, 2, 2], n_paths=100)[2]
    assert len(paths) == count_paths([2, 2, 2], 2) == 12  # 3 layer pairs x 2 x 2 heads
    products = path_products(real_patterns(patterns, mask), paths)  # [path, batch, q, k]
    for i, p in enumerate(paths):
        (l1, l2), (h1, h2) = p.layers, p.heads
        for b, n in ((0, n_real), (1, n_pos)):
            a1 = patterns[l1][b, h1, :n, :n].double()
            a2 = patterns[l2][b, h2, :n, :n].double()
            # float64 products of the same fp32 patterns: <= 5 terms of <= 1, ~1e-16; the SVD
            # of the same float64 matrix (measured 0.0)
            assert torch.allclose(products[i, b, :n, :n], a2 @ a1, atol=1e-12)
            expected = rank1_residual(a2 @ a1)
            assert rank1_residual(products[i, b]).item() == pytest.approx(expected.item(), 1e-9)
        assert products[i, 0, n_real:].abs().max() == 0  # padded rows and columns are 0
        assert products[i, 0, :, n_real:].abs().max() == 0


def test_sampled_paths_are_distinct_increasing_and_counted() -> None:
    heads = [3, 0, 2, 4]  # a layer pruned to no heads cannot be on a path
    assert count_paths(heads, 1) == 9 and count_paths(heads, 2) == 3 * 2 + 3 * 4 + 2 * 4
    assert count_paths(heads, 3) == 3 * 2 * 4
    paths = sample_head_paths(heads, n_paths=20, seed=5)
    assert sorted(paths) == [1, 2, 3]  # three layers have heads
    assert len(paths[1]) == 9 and len(paths[2]) == 20 and len(paths[3]) == 20
    for length, group in paths.items():
        assert len(set(group)) == len(group)
        for p in group:
            assert len(p) == length and list(p.layers) == sorted(set(p.layers))
            assert 1 not in p.layers
            assert all(h < heads[l] for l, h in zip(p.layers, p.heads, strict=True))
    assert sample_head_paths(heads, 20, seed=5) == paths  # fixed seed, same paths
    with pytest.raises(ConfigError):
        sample_head_paths(heads, 0)


def test_path_collapse_sentence_bounds_use_exactly_the_sampled_rows() -> None:
    from attnlens.hooks import ActivationCache
    from attnlens.measures.collapse.paths import PathCollapse

    torch.manual_seed(4)
    patterns = {
        f"blocks.{i}.attn.hook_pattern": torch.randn(4, 2, 5, 5).softmax(-1) for i in range(3)
    }
    mask = torch.ones(4, 5, dtype=torch.long)
    batch = Batch(input_ids=torch.ones(4, 5, dtype=torch.long), attention_mask=mask)
    bounded = PathCollapse([2, 2, 2], n_paths=4, per_batch=2, max_sentences=3)
    for first in (0, 4, 8):  # 12 sentences: the sample is floor(j 12 / 3) = 0, 4, 8
        bounded.update(Batch(input_ids=batch.input_ids, attention_mask=mask,
                             extra={"index": list(range(first, first + 4)), "corpus_size": 12}),
                       ActivationCache(patterns))
    assert bounded.sentences == 3  # the first sentence of each batch
    rows = [0, 0, 0]
    picked = {k: v[rows] for k, v in patterns.items()}
    direct = PathCollapse([2, 2, 2], n_paths=4)
    direct.update(
        Batch(input_ids=batch.input_ids[rows], attention_mask=mask[rows]), ActivationCache(picked)
    )
    for length in bounded.sums:
        # float64 sums of the same rows' residuals, grouped differently (measured 5.6e-17)
        assert torch.allclose(bounded.sums[length], direct.sums[length])


def test_path_collapse_memory_bound_keeps_what_fits_and_counts_the_rest() -> None:
    """``max_elements`` bounds the patterns held per batch: 3 layers x 2 used heads x 5 x 5 =
    150 entries per sentence, so a bound of 300 keeps 2 of 4 sentences (rows 0 and 3, the
    evenly spaced pair), one of 100 skips the batch and counts its 4 sentences; the products
    then run in chunks of one path, which must not change the sums."""
    from attnlens.hooks import ActivationCache
    from attnlens.measures.collapse.paths import PathCollapse

    torch.manual_seed(5)
    patterns = {
        f"blocks.{i}.attn.hook_pattern": torch.randn(4, 2, 5, 5).softmax(-1) for i in range(3)
    }
    batch = Batch(input_ids=torch.ones(4, 5, dtype=torch.long),
                  attention_mask=torch.ones(4, 5, dtype=torch.long))
    bounded = PathCollapse([2, 2, 2], n_paths=4, max_elements=300)
    assert sum(len(h) for h in bounded.heads_used.values()) == 6  # every head is on a path
    bounded.update(batch, ActivationCache(patterns))
    assert (bounded.sentences, bounded.skipped) == (2, 0)
    rows = [0, 3]
    direct = PathCollapse([2, 2, 2], n_paths=4)
    direct.update(Batch(input_ids=batch.input_ids[rows], attention_mask=batch.attention_mask[rows]),
                  ActivationCache({k: v[rows] for k, v in patterns.items()}))
    for length in bounded.sums:
        # same rows, products in chunks of 1 path against all paths at once: the same float64
        # operations per path, so equal to rounding (allclose's 1e-8 relative)
        assert torch.allclose(bounded.sums[length], direct.sums[length])
    too_small = PathCollapse([2, 2, 2], n_paths=4, max_elements=100)
    too_small.update(batch, ActivationCache(patterns))
    assert (too_small.sentences, too_small.skipped) == (0, 4)
    for table in too_small.result().values():  # empty, but with columns: a readable CSV
        assert table.empty and len(table.columns) >= 3


def test_tables_label_the_composite_residual_an_upper_bound() -> None:
    """The mean token minimises the Frobenius residual, not the composite one (issue 13)."""
    torch.manual_seed(3)
    analyzer = ResidualCollapse(n_layers=1)
    analyzer.update_hidden([torch.randn(3, 5, 4), torch.randn(3, 5, 4)], None)
    table = analyzer.result()["collapse"]
    assert dict(zip(table["norm"], table["bound"], strict=False)) == {
        "composite": "upper", "frobenius": "exact"}
    # On a hand-built X the mean token is not the composite-norm minimiser: another x does
    # better, so the reported value is a strict upper bound there.
    # One column 0, 0, 0, 10: at the mean 2.5, sqrt(15 x 7.5) = 10.6; at x = 0, sqrt(10 x 10).
    X = torch.tensor([[0.0], [0.0], [0.0], [10.0]], dtype=torch.float64)
    at_mean = composite_norm(token_residual(X[None]))[0]
    at_zero = composite_norm(X[None])[0]
    # float64 sums of 4 numbers that are multiples of 0.5 are exact in any order (any kernel
    # set), and sqrt is correctly rounded: within 1 ulp (2.2e-16 relative) of the closed
    # forms. A wrong norm would be off by percents (10.6 vs 10), so approx's default rel 1e-6
    # separates them with room on both sides.
    assert float(at_mean) == pytest.approx(math.sqrt(15 * 7.5))
    assert float(at_zero) == pytest.approx(10.0) and at_zero < at_mean


def test_depth_residuals_share_one_residual_for_both_norms_bitwise():
    """matrix30: depth_residuals forms the masked copy and the residual once for the two
    norms; the numbers are relative_residual's in each norm exactly (padded sentences, and
    without a mask)."""
    from attnlens.measures.collapse.residual import NORMS, depth_residuals

    gen = torch.Generator().manual_seed(8)
    hidden = torch.randn(4, 9, 6, generator=gen)
    mask = torch.arange(9)[None, :] < torch.tensor([9, 5, 1, 7])[:, None]
    for m in (mask, None):
        want = torch.stack([relative_residual(hidden, m, norm) for norm in NORMS])
        assert torch.equal(depth_residuals(hidden, m), want)
