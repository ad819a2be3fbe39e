"""The head statistics C kernel (attnlens/measures/heads/_stats_kernel.c) against the torch
path and a float64 reference, and built in each form a CPU or compiler gets.

Entries read (row maximum, p at q - 1, q, q + 1 and at the first real token) must be the
torch path's values bit for bit. The sums (weight on [CLS], [SEP], punctuation; distance
``sum_j p_j |q - j|``) are float64 sums of the float32 entries (at most 64 terms here, each
rounding by eps64 = 1.1e-16 relative to the sum: all terms are non-negative) rounded to
float32 once: within half a float32 ulp (2^-24 = 6e-8 relative) plus ~1e-14 of the float64
reference, so ``REFERENCE_RTOL`` 1e-7. The torch path rounds every product and partial sum to
float32: at most ~(n + 1) x 2^-24 relative, 4e-6 for n = 64, so ``TORCH_RTOL`` 1e-5 (tiny
sums: ``ATOL`` 1e-7 absolute, one float32 ulp of 1).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnlens.hooks import ActivationCache, QueryBlock
from attnlens.measures.heads import head_stats as module
from attnlens.measures.heads.head_stats import (
    KERNEL_OUTPUTS,
    KERNEL_TIES,
    HeadStats,
    TokenMeasures,
)
from attnlens.measures.heads.positional import PositionalHeads
from attnlens.stream.base import Batch, PatternBlock
from tests.kernel_builds import (
    LEVEL_BUILDS,
    build_kernel,
    needs_builds,
    skip_unless_cpu_has,
)

SOURCE = Path(module.__file__).with_name("_stats_kernel.c")
REFERENCE_RTOL, TORCH_RTOL, ATOL = 1e-7, 1e-5, 1e-7
CLS, SEP, PUNCT = 1, 2, 3
EXACT = ("confidence", "to_cls", "to_sep", "to_self", "to_prev", "to_next", "sink")
SUMS = ("to_punct", "distance")
ALL = ("confidence", "entropy", "to_cls", "to_sep", "to_punct", "to_self", "to_prev",
       "to_next", "distance")

pytestmark = pytest.mark.skipif(module._stats_kernel is None,
                                reason="the head statistics C kernel is not built")


def padded_batch(seed: int, batch: int = 3, heads: int = 4, n: int = 13):
    """A random batch with padding (left and right), [CLS]/[SEP]/punctuation ids and its
    softmax patterns (padding rows and keys hold weights too)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, 40, (batch, n), generator=g)
    ids[ids % 5 == 0] = PUNCT
    mask = torch.ones(batch, n, dtype=torch.long)
    mask[1 % batch, 9:] = 0  # right padding
    mask[2 % batch, :2] = 0  # left padding (both on one sentence when it is alone)
    for b in range(batch):
        real = mask[b].nonzero().flatten()
        ids[b, real[0]], ids[b, real[-1]] = CLS, SEP
    special = torch.isin(ids, torch.tensor([CLS, SEP])) & mask.bool()
    scores = torch.randn(batch, heads, n, n, generator=g) * 3
    pattern = scores.softmax(-1)  # [batch, head, n, n]
    return Batch(input_ids=ids, attention_mask=mask, special_mask=special), pattern


def reader(batch: Batch, measures=ALL) -> TokenMeasures:
    found = TokenMeasures(measures, {CLS}, {SEP}, {PUNCT})
    found.prepare(batch)
    return found


def both_paths(monkeypatch, batch, pattern, measures=ALL):
    """``per_row`` by the kernel and by the torch path, each on a fresh block."""
    kernel = reader(batch, measures).per_row(PatternBlock.whole(pattern, 0))
    monkeypatch.setattr(module, "_stats_kernel", None)
    torch_path = reader(batch, measures).per_row(PatternBlock.whole(pattern, 0))
    return kernel, torch_path


def float64_rows(batch: Batch, pattern: torch.Tensor) -> dict[str, torch.Tensor]:
    """The sums in float64 from the float32 entries: ``[batch, head, rows]`` each."""
    p = pattern.double()
    n = p.shape[-1]
    punct = (batch.input_ids == PUNCT) & batch.attention_mask.bool()  # [batch, key]
    gap = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs().double()
    return {"to_punct": (p * punct[:, None, None, :]).sum(-1), "distance": (p * gap).sum(-1)}


@pytest.mark.parametrize("seed", range(4))
def test_padded_batches_match_the_torch_path_and_a_float64_reference(monkeypatch, seed):
    batch, pattern = padded_batch(seed)
    kernel, torch_path = both_paths(monkeypatch, batch, pattern)
    for m, measure in enumerate(ALL):
        if measure in EXACT or measure == "entropy":  # entropy: torch's, in both paths
            assert torch.equal(kernel[m], torch_path[m]), measure
    reference = float64_rows(batch, pattern)
    for measure in SUMS:
        m = ALL.index(measure)
        torch.testing.assert_close(kernel[m].double(), reference[measure],
                                   rtol=REFERENCE_RTOL, atol=0)
        torch.testing.assert_close(kernel[m], torch_path[m], rtol=TORCH_RTOL, atol=ATOL)


def test_known_answers_of_a_hand_built_sentence():
    # [CLS] a , b [SEP] <pad>: each row's weights known in closed form (dyadic: exact sums)
    ids = torch.tensor([[CLS, 20, PUNCT, 21, SEP, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    batch = Batch(input_ids=ids, attention_mask=mask,
                  special_mask=torch.isin(ids, torch.tensor([CLS, SEP])))
    p = torch.zeros(1, 1, 6, 6)
    p[0, 0, :, 0] = 0.5  # half on [CLS]
    p[0, 0, :, 2] = 0.25  # a quarter on the comma
    p[0, 0, :, 4] = 0.25  # a quarter on [SEP]
    out = reader(batch)._kernel_rows(p)[:, 0, 0]  # [output, rows]
    rows = torch.arange(6.0)
    expected = {"confidence": torch.full((6,), 0.5), "to_cls": torch.full((6,), 0.5),
                "to_sep": torch.full((6,), 0.25), "to_punct": torch.full((6,), 0.25),
                "to_self": torch.tensor([0.5, 0, 0.25, 0, 0.25, 0]),
                "to_prev": torch.tensor([0, 0.5, 0, 0.25, 0, 0.25]),
                "to_next": torch.tensor([0, 0.25, 0, 0.25, 0, 0]),
                "distance": 0.5 * rows + 0.25 * (rows - 2).abs() + 0.25 * (rows - 4).abs(),
                "sink": torch.full((6,), 0.5)}
    for measure, values in expected.items():
        assert torch.equal(out[KERNEL_OUTPUTS[measure]], values), measure


def test_a_nan_row_has_a_nan_maximum_as_amax():
    batch, pattern = padded_batch(0, batch=1, heads=1, n=9)
    pattern[0, 0, 3, 5] = float("nan")
    out = reader(batch)._kernel_rows(pattern)[KERNEL_OUTPUTS["confidence"]]
    expected = pattern.amax(-1)
    assert expected[0, 0, 3].isnan() and out[0, 0, 3].isnan()
    assert torch.equal(out.nan_to_num(-1.0), expected.nan_to_num(-1.0))


def test_infinite_entries_give_the_torch_paths_maximum_and_distance(monkeypatch):
    batch, pattern = padded_batch(0, batch=1, heads=1, n=9)
    pattern[0, 0, 2, 6] = float("inf")  # distance inf
    pattern[0, 0, 4, 4] = float("-inf")  # -inf x |4 - 4| = NaN, and not the maximum
    kernel, torch_path = both_paths(monkeypatch, batch, pattern, ("confidence", "distance"))
    torch.testing.assert_close(kernel, torch_path, rtol=TORCH_RTOL, atol=ATOL, equal_nan=True)
    assert kernel[0, 0, 0, 2] == float("inf") and kernel[1, 0, 0, 4].isnan()


def test_the_row_maximum_is_handed_to_the_block_for_the_positional_heads():
    batch, pattern = padded_batch(1)
    block = PatternBlock.whole(pattern, 0)
    reader(batch).per_row(block)
    assert "row_max" in block.__dict__  # computed by the kernel, not by amax
    assert torch.equal(block.row_max, pattern.amax(-1))
    # a query block keeps the torch path (the kernel reads whole patterns only)
    part = PatternBlock(pattern[:, :, 2:5], QueryBlock(2, 5, pattern.shape[-1]), 0)
    assert not module.uses_kernel(part)


def test_the_ties_of_each_row_maximum_are_the_blocks_count():
    """Output ``KERNEL_TIES`` counts the keys holding the row maximum as ``max_count`` does
    (ties, a row of zeros, of -inf, a NaN row: 0), and per_row hands the counts to the block
    (pass40: the positional heads' credit without a bool sum over the pattern)."""
    batch, pattern = padded_batch(4, batch=2, heads=3, n=9)
    pattern[0, 0, 1] = 0.0
    pattern[0, 1, 2] = -torch.inf
    pattern[1, 2, 3, 4] = torch.nan
    pattern[1, 0, 4] = 0.125
    pattern[1, 0, 4, [1, 5, 7]] = 0.25  # a three-way tie
    expected = PatternBlock.whole(pattern, 0).max_count  # torch's: p >= amax, summed
    out = reader(batch)._kernel_rows(pattern)[KERNEL_TIES]
    assert torch.equal(out, expected.float())
    assert (expected[0, 0, 1], expected[0, 1, 2], expected[1, 2, 3]) == (9, 9, 0)
    assert expected[1, 0, 4] == 3
    block = PatternBlock.whole(pattern, 0)
    reader(batch).per_row(block)
    assert "max_count" in block.__dict__  # the kernel's, not a sum over is_max
    assert block.max_count.dtype == torch.int32 and torch.equal(block.max_count, expected)


def test_split_between_threads_gives_the_same_bits(monkeypatch):
    from attnlens.stream.threads import run_split

    batch, pattern = padded_batch(2, batch=5, heads=3)
    one = reader(batch)._kernel_rows(pattern)
    parts = []
    monkeypatch.setattr(module, "run_split", lambda work, count: (
        parts.append(count), run_split(work, count, threads=3)))
    several = reader(batch)._kernel_rows(pattern)
    assert parts == [15] and torch.equal(one, several)


def test_wrong_sizes_are_refused():
    _, pattern = padded_batch(0, batch=2, heads=2, n=5)
    bits = torch.zeros(2, 5, dtype=torch.uint8).numpy()
    first = torch.zeros(2, dtype=torch.int64).numpy()
    out = torch.empty(KERNEL_TIES + 1, 2, 2, 5).numpy()
    p = pattern.numpy()
    kernel = module._stats_kernel
    with pytest.raises(ValueError, match=r"p holds 400 bytes, not 480"):
        kernel.rows(p, bits, first, 2, 2, 5, 6, 0, 4, out)
    with pytest.raises(ValueError, match="bits holds"):
        kernel.rows(p, bits[:1], first, 2, 2, 5, 5, 0, 4, out)
    with pytest.raises(ValueError, match="out holds"):
        kernel.rows(p, bits, first, 2, 2, 5, 5, 0, 4, out[:9])
    with pytest.raises(ValueError, match="pair range"):
        kernel.rows(p, bits, first, 2, 2, 5, 5, 0, 5, out)
    with pytest.raises(ValueError, match="first holds a key"):
        kernel.rows(p, bits, first + 5, 2, 2, 5, 5, 0, 4, out)


@pytest.fixture(scope="module")
def minilm_data(minilm):
    model, tokenizer = minilm
    from attnlens.data.corpus import load_corpus

    batches = load_corpus(text=None, treebank=None).batches(tokenizer, batch_size=16,
                                                             max_length=64)[:3]
    with torch.no_grad():
        caches = [model.run_with_cache(**b.model_inputs())[1] for b in batches]
    return model, tokenizer, [
        (b, ActivationCache({k: v for k, v in c.items() if k.endswith("pattern")}))
        for b, c in zip(batches, caches, strict=True)]


def fed(model, tokenizer, data, extra=()) -> tuple[HeadStats, PositionalHeads]:
    """Head statistics and the positional heads (which read the handed row maxima), and
    ``extra`` analyzers, over the cached batches, fed as the runner feeds them (one feeder:
    the blocks are shared)."""
    from attnlens.stream.feeder import LayerFeeder

    analyzers = [HeadStats.for_model(model, tokenizer), PositionalHeads.for_model(model),
                 *extra]
    with torch.no_grad():
        for batch, cache in data:
            feeder = LayerFeeder(model, analyzers)
            feeder.begin(batch)
            wanted = set(feeder.names)
            for name, x in cache.items():  # the forward's order
                if name in wanted:
                    feeder.save_as(name, x)
            feeder.end()
    return analyzers[0], analyzers[1]


def test_minilm_statistics_match_the_torch_path(monkeypatch, minilm_data):
    """The sums per (measure, layer, head) over ~1,000 rows: each row's value within
    ``TORCH_RTOL`` of the torch path's, so the sums too; the exact measures' sums are the
    same float64 additions of the same values, equal bit for bit."""
    model, tokenizer, data = minilm_data
    stats, positional = fed(model, tokenizer, data)
    monkeypatch.setattr(module, "_stats_kernel", None)
    ref_stats, ref_positional = fed(model, tokenizer, data)
    for m, measure in enumerate(stats.measures):
        if measure in SUMS:
            torch.testing.assert_close(stats.sums[m], ref_stats.sums[m], rtol=TORCH_RTOL,
                                       atol=ATOL)
        else:
            assert torch.equal(stats.sums[m], ref_stats.sums[m]), measure
    for name in ("sentence_counts", "sentence_rows"):  # lists of per-batch tensors
        mine, theirs = getattr(positional, name), getattr(ref_positional, name)
        assert len(mine) == len(theirs) == len(data), name
        assert all(torch.equal(a, b) for a, b in zip(mine, theirs, strict=True)), name


def test_the_kernel_runs_once_per_layer_for_both_readers(monkeypatch, minilm_data):
    """Head statistics and head examples read the same block's kernel rows (one call per
    layer and batch, its first part of the pairs counted)."""
    from attnlens.measures.heads.examples import HeadExamples

    model, tokenizer, data = minilm_data
    kernel, calls = module._stats_kernel, []

    class Counting:
        def rows(self, *args):
            calls.extend([1] if args[-3] == 0 else [])
            return kernel.rows(*args)

    monkeypatch.setattr(module, "_stats_kernel", Counting())
    fed(model, tokenizer, data, [HeadExamples.for_model(model, tokenizer)])
    assert len(calls) == len(data) * model.cfg.n_layers


BUILDS = LEVEL_BUILDS


@needs_builds
@pytest.mark.parametrize("name", sorted(BUILDS))
def test_each_build_gives_the_installed_bits(tmp_path, monkeypatch, name):
    """Each x86-64 level built alone (``KERNEL_NO_CLONES``; the installed build holds all
    three and runs the CPU's) gives the installed kernel's bits."""
    flags, needs = BUILDS[name]
    skip_unless_cpu_has(needs)
    built = build_kernel(SOURCE, tmp_path, flags)
    batch, pattern = padded_batch(3, batch=4, heads=3, n=37)
    installed = reader(batch)._kernel_rows(pattern)
    monkeypatch.setattr(module, "_stats_kernel", built)
    assert torch.equal(reader(batch)._kernel_rows(pattern), installed)
