"""Spectrum path: rectangular (cross-attention) blocks, closed forms, top-k bounds, state."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.measures.spectrum.singular_values import singular_values, top_singular_values
from attnlens.measures.spectrum.spectrum import SpectrumAnalyzer
from attnlens.stream.base import Batch
from attnlens.stream.real_tokens import block_groups, gather_block


def softmax_rows(*shape: int, seed: int = 0, sharpness: float = 3.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.softmax(sharpness * torch.randn(*shape, generator=gen), dim=-1)


def numpy_singular_values(P: torch.Tensor) -> np.ndarray:
    return np.linalg.svd(P.double().numpy(), compute_uv=False)


# --- singular values of rectangular and tiny matrices ---------------------------------------
@pytest.mark.parametrize("shape", [(7, 12), (12, 7), (1, 5), (5, 1), (2, 9), (9, 2), (2, 2)])
@pytest.mark.parametrize("method", ["auto", "svd32", "svdvals"])
def test_rectangular_and_tiny_blocks_match_numpy(shape, method):
    P = softmax_rows(6, *shape, seed=sum(shape))
    s = singular_values(P, method)
    assert s.shape == (6, min(shape)) and s.dtype == torch.float64
    reference = numpy_singular_values(P)
    # gram64 / closed forms: s accurate to ~1e-8 s_1 (sqrt of float64 eigenvalue rounding);
    # svd32: float32 SVD, about 1e-6 s_1 for these sizes.
    tol = 1e-6 if method == "svd32" else 1e-8
    np.testing.assert_allclose(s.numpy(), reference, atol=tol * float(reference.max()))


def test_closed_form_keeps_a_tiny_second_singular_value():
    # Rows nearly parallel: s_2 ~ 1e-6 s_1. l2 = det / l1 is off by a few float64 ulps of
    # l1 (~1e-15, as LAPACK's eigvalsh), so s_2 = sqrt(l2) by ~1e-15 / (2 s_2) < 1e-9.
    P = torch.tensor([[[0.5, 0.5, 0.0], [0.5, 0.5 - 1e-6, 1e-6]]], dtype=torch.float64)
    s = singular_values(P)
    reference = numpy_singular_values(P[0])
    assert float(s[0, 1]) == pytest.approx(reference[1], abs=1e-9)
    assert float(s[0, 1]) > 0.5 * reference[1]  # resolved, not lost to cancellation


def test_many_matrices_split_across_threads_equal_one_call():
    P = softmax_rows(64, 40, 40, seed=5)  # 64 * 40^3 above PARALLEL_MIN_WORK: split
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        split = singular_values(P)
    finally:
        torch.set_num_threads(previous)
    torch.set_num_threads(1)
    try:
        single = singular_values(P)
    finally:
        torch.set_num_threads(previous)
    # Each matrix is solved alone; batched float64 BLAS may still round the Gram matrix
    # differently with the slice size: a few ulps of s_1 <= sqrt(n).
    torch.testing.assert_close(split, single, rtol=0, atol=1e-13)


# --- top-k with bounds -----------------------------------------------------------------------
def known_spectrum(n: int, values: np.ndarray, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    U = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64)).Q
    W = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64)).Q
    return (U * torch.tensor(values)) @ W.mT


def test_top_k_recovers_a_decaying_spectrum_and_brackets_the_sums():
    n, k = 300, 10
    values = 0.7 ** np.arange(n)  # fast decay: subspace iteration converges
    P = known_spectrum(n, values)[None]
    top = top_singular_values(P, k)
    # float32 power steps, float64 Rayleigh-Ritz: top values to ~1e-6 relative.
    np.testing.assert_allclose(top.values[0].numpy(), values[:k], rtol=1e-5)
    assert (top.values[0].numpy() <= values[:k] * (1 + 1e-12)).all()  # Ritz values interlace
    ky_fan, nuclear = values[:k].sum(), values.sum()
    assert float(top.ky_fan_lower) <= ky_fan * (1 + 1e-12) <= float(top.ky_fan_upper) * (1 + 1e-12)
    assert float(top.nuclear_lower) <= nuclear <= float(top.nuclear_upper)
    assert float(top.residual.max()) < 1e-4 * values[0] ** 2


def test_top_k_bounds_hold_on_real_looking_attention():
    P = softmax_rows(3, 400, 400, seed=1, sharpness=2.0)  # slow spectral decay: loose bounds
    top = top_singular_values(P, 16, iterations=2)
    for b in range(3):
        s = numpy_singular_values(P[b])
        assert float(top.nuclear_lower[b]) <= s.sum() * (1 + 1e-9)
        assert s.sum() <= float(top.nuclear_upper[b]) * (1 + 1e-9)
        assert float(top.ky_fan_lower[b]) <= s[:16].sum() * (1 + 1e-9)
        assert s[:16].sum() <= float(top.ky_fan_upper[b]) * (1 + 1e-9)
        assert (top.values[b].numpy() <= s[:16] * (1 + 1e-9)).all()
    with pytest.raises(ConfigError, match="top-k"):
        top_singular_values(P, 401)


# --- the analyzer on rectangular blocks ------------------------------------------------------
def test_block_groups_pair_query_and_key_lengths():
    key_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    query_mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 0, 0]])
    groups = {(g.n_query, g.n_key): g for g in block_groups(query_mask, key_mask)}
    assert sorted(groups) == [(1, 4), (2, 2), (2, 3)]
    x = torch.arange(3 * 1 * 3 * 4, dtype=torch.float32).reshape(3, 1, 3, 4)
    assert torch.equal(gather_block(x, groups[(2, 3)])[0, 0], x[0, 0, :2, :3])
    assert torch.equal(gather_block(x, groups[(1, 4)])[0, 0], x[2, 0, :1, :])


def cross_batch() -> tuple[Batch, ActivationCache]:
    """Two sentences, 2 heads: 3 and 5 decoder queries over 6 and 4 source keys."""
    key_mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    query_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    batch = Batch(input_ids=torch.ones_like(key_mask), attention_mask=key_mask,
                  extra={"query_mask": query_mask})
    scores = 3 * torch.randn(2, 2, 5, 6, generator=torch.Generator().manual_seed(0))
    pattern = torch.softmax(scores.masked_fill(key_mask[:, None, None, :] == 0, -1e9), -1)
    values = torch.randn(2, 6, 2, 4, generator=torch.Generator().manual_seed(1))
    cache = ActivationCache({"blocks.0.attn.hook_pattern": pattern, "blocks.0.attn.hook_v": values})
    return batch, cache


def test_cross_attention_blocks_use_query_and_key_masks():
    batch, cache = cross_batch()
    analyzer = SpectrumAnalyzer([2], rank_fractions=(0.5,))
    analyzer.update(batch, cache)
    tables = analyzer.result()
    pattern = cache["blocks.0.attn.hook_pattern"]
    blocks = [pattern[0, :, :3, :6], pattern[1, :, :5, :4]]  # [head, n_query, n_key]
    ranks = [3, 4]
    summary = tables["spectrum_summary"].set_index(["head", "measure"])["value"]
    for head in range(2):
        eff = []
        for block, r in zip(blocks, ranks, strict=True):
            s = numpy_singular_values(block[head])
            assert len(s) == r
            p = s / s.sum()
            eff.append(np.exp(-(p * np.log(p)).sum()) / r)
        # float64 Gram eigenvalues against a float64 SVD: far below 1e-9.
        assert summary[(head, "effective_rank_frac")] == pytest.approx(np.mean(eff), abs=1e-9)
    assert analyzer.sentences == 2 and analyzer.mean_length == pytest.approx(3.5)
    assert tables["low_rank_cost"]["value"].notna().all()


# --- state: round trip, buffering -------------------------------------------------------------
def square_batches(seed: int = 0) -> list[tuple[Batch, ActivationCache]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for lengths in ([5, 9, 9], [3, 12], [30]):
        width = max(lengths)
        mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
        cache = {}
        for layer in range(2):
            scores = 3 * torch.randn(len(lengths), 3, width, width, generator=gen)
            cache[f"blocks.{layer}.attn.hook_pattern"] = torch.softmax(
                scores.masked_fill(mask[:, None, None, :] == 0, -1e9), -1)
            cache[f"blocks.{layer}.attn.hook_v"] = torch.randn(len(lengths), width, 3, 4,
                                                               generator=gen)
        out.append((Batch(input_ids=mask.clone(), attention_mask=mask), ActivationCache(cache)))
    return out


def test_state_round_trip_and_merge_equal_one_run():
    data = square_batches()
    whole = SpectrumAnalyzer([3, 3])
    for batch, cache in data:
        whole.update(batch, cache)
    first, second = SpectrumAnalyzer([3, 3]), SpectrumAnalyzer([3, 3])
    first.update(*data[0])
    for batch, cache in data[1:]:
        second.update(batch, cache)
    shipped = SpectrumAnalyzer([3, 3])
    shipped.load_state_dict(second.state_dict())
    merged = first.merge(shipped).result()
    for name, table in whole.result().items():
        # Sums of float64 per-sentence values in another order: a few ulps of 1.
        np.testing.assert_allclose(merged[name]["value"], table["value"], atol=1e-12)
    with pytest.raises(ConfigError, match="other settings"):
        first.merge(SpectrumAnalyzer([3, 3], low_rank_cost=False))


def test_small_buffer_gives_the_same_tables():
    data = square_batches(seed=2)
    pooled, eager = SpectrumAnalyzer([3, 3]), SpectrumAnalyzer([3, 3], buffer_elements=1)
    for batch, cache in data:
        pooled.update(batch, cache)
        eager.update(batch, cache)
    for name, table in pooled.result().items():
        # Batched float64 BLAS may round differently with the batch's size: ulps of ~10.
        np.testing.assert_allclose(eager.result()[name]["value"], table["value"], atol=1e-12)


def test_top_k_mode_reports_long_blocks_separately():
    data = square_batches(seed=3)
    analyzer = SpectrumAnalyzer([3, 3], top_k=4, top_k_min_n=12, low_rank_cost=False)
    for batch, cache in data:
        analyzer.update(batch, cache)
    tables = analyzer.result()
    assert analyzer.top_sentences == 2 and analyzer.sentences == 4  # lengths 12 and 30 are long
    top = tables["spectrum_top_k"].pivot_table(index=["layer", "head"], columns="measure",
                                               values="value")
    assert (top["ky_fan_share_lower"] <= top["ky_fan_share_upper"] + 1e-12).all()
    assert (top["nuclear_lower"] <= top["nuclear_upper"] + 1e-12).all()
    per_bucket = tables["spectrum_curve_by_length"].groupby("bucket")["sentences"].first()
    assert per_bucket.to_dict() == {"1-8": 2, "9-16": 2}  # 5 3 | 9 9; 12 and 30 went to top-k


def test_state_round_trips_through_safetensors_and_json(tmp_path):
    import json

    from safetensors.torch import load_file, save_file

    data = square_batches(seed=4)
    analyzer = SpectrumAnalyzer([3, 3], top_k=3, top_k_min_n=12)
    for batch, cache in data:
        analyzer.update(batch, cache)
    state = analyzer.state_dict()
    tensors, plain = {}, {}
    for field, value in state["state"].items():
        if isinstance(value, torch.Tensor):
            tensors[field] = value
        elif isinstance(value, dict) and value and isinstance(next(iter(value.values())),
                                                              torch.Tensor):
            tensors.update({f"{field}/{k}": v for k, v in value.items()})
        else:
            plain[field] = value
    save_file(tensors, tmp_path / "state.safetensors")
    meta = json.loads(json.dumps({"settings": state["settings"], "plain": plain}))
    loaded = load_file(tmp_path / "state.safetensors")
    restored_state = dict(meta["plain"])
    for name, value in loaded.items():
        field, _, key = name.partition("/")
        if key:
            restored_state.setdefault(field, {})[key] = value
        else:
            restored_state[field] = value
    restored = SpectrumAnalyzer([3, 3], top_k=3, top_k_min_n=12)
    restored.load_state_dict({"analyzer": "SpectrumAnalyzer", "settings": meta["settings"],
                              "state": restored_state})
    for name, table in analyzer.result().items():
        assert restored.result()[name].equals(table), name
