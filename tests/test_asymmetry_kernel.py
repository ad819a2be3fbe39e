"""The pattern-asymmetry C kernel (attnlens/measures/asymmetry/_asymmetry_kernel.c) against
the torch path and a float64 reference, and built in each form a CPU or compiler gets.

Counts must be the torch path's integers exactly (the same comparisons in the pattern's
dtype), on random, hand-built and padded inputs with ties at the edge level and at
factor x the reverse. Ratios: the kernel sums the squares of the entries, widened exactly to
float64, in float64: at most pos^2 = 121 (or 400) terms, each rounding by eps64 = 1.1e-16,
so within ~1e-14 relative of the exact sums of the same entries; one sqrt and one division
add a few eps64. ``RATIO_RTOL`` 1e-12 leaves ~100x. The torch path sums float32 squares in
float32 (pos^2 terms of eps32 = 6e-8 each: ~1e-6 relative before the square root), so the
kernel's ratios lie within ``TORCH_RTOL`` 1e-5 of it on float32 patterns and 1e-12 on float64.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attnlens.measures.asymmetry import pattern_asymmetry as module
from attnlens.measures.asymmetry.pattern_asymmetry import (
    PatternAsymmetry,
    kernel_available,
    kernel_pattern_asymmetry,
    masked_dominance_violations,
    masked_pattern_asymmetry,
    masked_unweighted_attention,
    real_pairs,
)
from attnlens.stream.runner import run_analyzers
from tests.kernel_builds import (
    LEVEL_BUILDS,
    build_kernel,
    needs_builds,
    skip_unless_cpu_has,
)

RATIO_RTOL = 1e-12
TORCH_RTOL = {torch.float32: 1e-5, torch.float64: 1e-12}
SOURCE = Path(module.__file__).with_name("_asymmetry_kernel.c")

pytestmark = pytest.mark.skipif(module._asymmetry_kernel is None,
                                reason="the asymmetry C kernel is not built")


def torch_path(P, mask, factor, edge_level, violations=False):
    """The torch path's outputs for ``P`` and ``mask`` (the analyzer's arguments)."""
    lengths = mask.sum(-1).clamp_min(1)
    pairs = real_pairs(mask)
    out = masked_pattern_asymmetry(P, pairs, lengths, factor, edge_level)
    if violations:
        out = (*out, masked_dominance_violations(P, pairs[:, None], lengths))
    return out


def float64_ratio(P, mask):
    """||P - P^T|| / ||P|| of each real block in float64 (numpy), ``[batch, head]``."""
    out = np.zeros(P.shape[:2])
    for b in range(P.shape[0]):
        real = mask[b].nonzero().flatten().numpy()
        for h in range(P.shape[1]):
            block = P[b, h].double().numpy()[np.ix_(real, real)]
            norm = np.linalg.norm(block)
            out[b, h] = np.linalg.norm(block - block.T) / norm if norm > 0 else 0.0
    return out


def padded_masks(pos: int = 11) -> torch.Tensor:
    """Right-, left- and doubly padded sentences, one with holes, one of 1 token, one empty."""
    lengths = torch.tensor([5, 7, 11, 3, 9, 1, 0, 6])
    mask = torch.arange(pos)[None, :] < lengths[:, None]
    mask[1] = mask[1].roll(4)  # padded on the left
    mask[4] = mask[4].roll(1)  # padded on both sides
    mask[7] = torch.arange(pos) % 3 != 1  # holes
    return mask


def softmax_patterns(mask, heads, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    pos = mask.shape[1]
    logits = torch.randn(mask.shape[0], heads, pos, pos, generator=gen, dtype=dtype) * 2
    P = torch.softmax(logits.masked_fill(~mask[:, None, None, :], -torch.inf), -1)
    return torch.nan_to_num(P)  # the empty sentence's rows (all keys masked): 0


def grid_patterns(mask, heads, dtype, factor, edge_level, seed):
    """Entries from a grid holding the edge levels of every length, factor x other entries
    and their neighbours one float step away, pairs equal both ways: ties everywhere."""
    gen = torch.Generator().manual_seed(seed)
    pos = mask.shape[1]
    # both roundings of the level: torch's (1 / n) x edge_level, and edge_level / n
    levels = torch.tensor([x for n in range(1, pos + 1) for x in (1 / n * edge_level,
                                                                  edge_level / n)],
                          dtype=torch.float64)
    base = torch.cat([levels.to(dtype), torch.tensor([0.0, 0.05, 0.3, 0.5], dtype=dtype)])
    scaled = (factor * base).to(dtype)  # torch's factor * p in the pattern's dtype
    values = torch.cat([base, scaled, torch.nextafter(base, torch.zeros_like(base)),
                        torch.nextafter(scaled, torch.full_like(scaled, 2.0))])
    P = values[torch.randint(len(values), (mask.shape[0], heads, pos, pos), generator=gen)]
    sym = torch.rand(mask.shape[0], heads, pos, pos, generator=gen) < 0.3
    return torch.where(sym, P.mT, P)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("factor", [1.0, 1.3, 2.0, 2.1, 3.0])
@pytest.mark.parametrize("edge_level", [1.0, 0.7])
@pytest.mark.parametrize("make", ["softmax", "grid"])
def test_counts_equal_the_torch_path_and_ratios_a_float64_reference(dtype, factor, edge_level,
                                                                     make):
    mask = padded_masks()
    if make == "softmax":
        P = softmax_patterns(mask, 3, dtype, seed=5)
    else:
        P = grid_patterns(mask, 3, dtype, factor, edge_level, seed=6)
    assert kernel_available(P)
    ratio, counts = kernel_pattern_asymmetry(P, mask, factor, edge_level)
    want_ratio, want_counts = torch_path(P, mask, factor, edge_level)
    assert torch.equal(counts, want_counts)
    assert counts[:, :, 3].sum() > 0 and counts[:, :, 1].sum() > 0  # the cases are exercised
    np.testing.assert_allclose(ratio.numpy(), float64_ratio(P, mask), rtol=RATIO_RTOL,
                               atol=0)
    torch.testing.assert_close(ratio, want_ratio, rtol=TORCH_RTOL[dtype], atol=1e-12)


def first_rounded_down(candidates, exact):
    """The first candidate whose float32 rounding lies below ``exact(candidate)``."""
    for x in candidates:
        if float(torch.tensor(exact(x), dtype=torch.float64).float()) < exact(x):
            return x
    raise AssertionError("no candidate rounds down")


def test_ties_at_the_edge_level_and_at_factor_times_the_reverse():
    """Hand-built float32 pairs whose answer depends on rounding in float32: an entry equal to
    the level fl32((1 / n) x edge_level), below the float64 level, is an edge; the entry
    fl32(fl32(2.1) lo), below the exact product, is at least 2.1 x lo (torch's comparisons);
    one float step below either is not."""
    factor = 2.1
    n, edge_level = first_rounded_down([(n, 0.5 + k / 10) for n in range(6, 12)
                                        for k in range(20)], lambda c: 1 / c[0] * c[1])
    level = torch.tensor(1 / n * edge_level, dtype=torch.float64).float()  # torch's rounding
    f32 = float(torch.tensor(factor).float())
    lo = first_rounded_down([0.41 + k / 97 for k in range(40)],  # above every level
                            lambda x: f32 * float(torch.tensor(x).float()))
    lo = torch.tensor(lo, dtype=torch.float32)
    hi = factor * lo  # float32 times a Python float: float32's rounded product
    assert float(hi) < f32 * float(lo)  # below the exact product
    zero = torch.tensor(0.0)
    P = torch.zeros(1, 1, n, n)
    P[0, 0, 0, 1], P[0, 0, 1, 0] = level, torch.nextafter(level, zero)  # edge 0 -> 1 only
    P[0, 0, 2, 3], P[0, 0, 3, 2] = hi, lo  # mutual, directed
    P[0, 0, 4, 5], P[0, 0, 5, 4] = torch.nextafter(hi, zero), lo  # mutual, not directed
    mask = torch.ones(1, n, dtype=torch.bool)
    _, counts = kernel_pattern_asymmetry(P, mask, factor, edge_level)
    assert counts[0, 0].tolist() == [5.0, 4.0, 3.0, 1.0]
    assert torch.equal(counts, torch_path(P, mask, factor, edge_level)[1])


def test_baseline_violations_equal_the_torch_path():
    alpha = torch.tensor([[[[0.2, 0.8], [0.5, 0.5]]]], dtype=torch.float64)
    _, _, broken = kernel_pattern_asymmetry(alpha, torch.ones(1, 2, dtype=torch.bool),
                                            violations=True)
    assert broken[0, 0].tolist() == [2.0, 2.0, 1.0]  # as test_asymmetry's hand-built matrix
    mask = padded_masks()
    gen = torch.Generator().manual_seed(2)
    X = torch.randn(mask.shape[0], 2, mask.shape[1], 6, generator=gen, dtype=torch.float64)
    for alpha in (masked_unweighted_attention(X, mask),  # no violations of the product
                  softmax_patterns(mask, 2, torch.float64, seed=3)):  # some of both
        ratio, counts, broken = kernel_pattern_asymmetry(alpha, mask, 2.0, 1.0, True)
        want = torch_path(alpha, mask, 2.0, 1.0, violations=True)
        assert torch.equal(counts, want[1]) and torch.equal(broken, want[2])
        torch.testing.assert_close(ratio, want[0], rtol=1e-12, atol=1e-12)


def test_the_analyzer_without_the_kernel_gives_the_same_counts(minilm, monkeypatch):
    """The real MiniLM over 100 sentences (8 batches of unequal lengths): the kernel's per-layer
    calls against the torch path's held layers."""
    from attnlens.data.text import sample_sentences, text_batches

    model, tokenizer = minilm
    batches = text_batches(tokenizer, sample_sentences() * 2, batch_size=13, max_length=128)
    with_kernel = PatternAsymmetry.for_model(model)
    run_analyzers(model, batches, [with_kernel], show_progress=False)
    monkeypatch.setattr(module, "_asymmetry_kernel", None)
    without = PatternAsymmetry.for_model(model)
    run_analyzers(model, batches, [without], show_progress=False)
    for name in ("counts", "base_counts", "base_violations"):
        assert torch.equal(getattr(with_kernel, name), getattr(without, name)), name
    assert with_kernel.counts[..., 3].sum() > 0 and with_kernel.base_counts[:, 3].sum() > 0
    # sums over 100 sentences of ratios <= sqrt(2): float32 norms (torch) against float64
    torch.testing.assert_close(with_kernel.ratio_sum, without.ratio_sum, rtol=1e-5, atol=0)
    torch.testing.assert_close(with_kernel.base_ratio_sum, without.base_ratio_sum,
                               rtol=1e-12, atol=0)


def test_bad_buffers_are_value_errors():
    P = torch.rand(2, 3, 4, 4)
    mask = torch.ones(2, 4, dtype=torch.bool)
    out = torch.empty(2, 3, dtype=torch.float64)
    counts = torch.empty(2, 3, 4, dtype=torch.float64)
    kernel = module._asymmetry_kernel
    with pytest.raises(ValueError, match=r"src holds 384 bytes, not 256"):
        kernel.asymmetry(P.numpy(), mask.numpy(), out.numpy(), counts.numpy(), None, 2, 4, 2.0,
                         1.0, 1.0, False)
    with pytest.raises(ValueError, match=r"ratio holds 24 bytes, not 48"):
        kernel.asymmetry(P.numpy(), mask.numpy(), out[:1].numpy(), counts.numpy(), None, 3, 4,
                         2.0, 1.0, 1.0, False)
    with pytest.raises(ValueError, match="float64"):
        kernel.asymmetry(P.numpy(), mask.numpy(), out.numpy(), counts.numpy(),
                         torch.empty(2, 3, 3, dtype=torch.float64).numpy(), 3, 4, 2.0, 1.0,
                         1.0, False)


# --- every build form gives the installed build's bits --------------------------------------
# name -> (compiler flags, what the CPU must have; every build is one version, built with
# KERNEL_NO_CLONES); the lane count (LANES) fixes the bits
BUILDS = {
    **LEVEL_BUILDS,
    "vectors of 2": (["-DVECTOR_WIDTH=2"], set()),
    "plain C": (["-DASYMMETRY_PLAIN_C"], set()),
    "vectors of 3 (plain C)": (["-DVECTOR_WIDTH=3"], set()),
}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """``build(name, flags)``: the kernel module built with ``flags`` (one version)."""
    folder = tmp_path_factory.mktemp("asymmetry_builds")

    def make(name: str, flags: list[str]):
        where = folder / name.replace(" ", "_").replace("(", "").replace(")", "")
        where.mkdir()
        return build_kernel(SOURCE, where, flags)

    return make


@needs_builds
@pytest.mark.parametrize("name", sorted(BUILDS))
def test_every_build_gives_the_installed_bits(name, build, monkeypatch):
    flags, needs = BUILDS[name]
    skip_unless_cpu_has(needs)
    mask = padded_masks(pos=20)
    mask[2] = True  # one sentence of 20 tokens: rows of up to 19 pairs (5 passes of 4 lanes)
    cases = [(softmax_patterns(mask, 3, torch.float32, seed=8), False),
             (grid_patterns(mask, 3, torch.float32, 2.1, 1.0, seed=9), False),
             (softmax_patterns(mask, 2, torch.float64, seed=10), True)]
    installed = [kernel_pattern_asymmetry(P, mask, 2.1, 1.0, v) for P, v in cases]
    monkeypatch.setattr(module, "_asymmetry_kernel", build(name, flags))
    for (P, v), want in zip(cases, installed, strict=True):
        got = kernel_pattern_asymmetry(P, mask, 2.1, 1.0, v)
        for a, b in zip(got, want, strict=True):
            assert torch.equal(a, b)


def test_without_the_baseline_the_pattern_measures_are_the_same(tiny_gqa):
    from tests.fixtures import tiny_batches

    batches = tiny_batches([[5, 7, 7], [3, 12]], 0)
    both = PatternAsymmetry.for_model(tiny_gqa)
    alone = PatternAsymmetry.for_model(tiny_gqa, baseline=False)
    run_analyzers(tiny_gqa, batches, [both, alone], show_progress=False)
    assert torch.equal(both.counts, alone.counts)
    assert torch.equal(both.ratio_sum, alone.ratio_sum)
    assert "asymmetry_baseline" not in alone.result()
