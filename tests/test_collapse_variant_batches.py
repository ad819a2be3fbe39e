"""Rank-collapse variants run over held sentences, in one float64 call with each sentence
alone, give the residuals of one pass per variant and batch (the path before issue 29), and
the same bits for any batching and any split of the sentences (torchrun ranks)."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch

from attnlens.data.text import sample_sentences, text_batches
from attnlens.measures.collapse import variant_collapse
from attnlens.measures.collapse.residual import depth_residuals
from attnlens.measures.collapse.variant_collapse import (
    VariantCollapse,
    cast_weights,
    linear_ready,
    run_all_variants,
    run_variant,
    sentence_inputs,
)
from attnlens.stream.base import Batch
from attnlens.stream.runner import run_analyzers
from attnlens.stream.sentence_sample import pick_rows, sample_batch
from tests.fixtures import tiny_batches, tiny_model

# float64 passes of the same sentences padded to other widths: the real rows' sums are the
# same terms (masked keys weigh exactly 0) added in another blocking, a few ulps (2.2e-16)
# of each layer's output. The residuals are relative norms of size <= ~1, so the bound is
# absolute: 1e-14 (measured 1.2e-15 on MiniLM). Relative bounds mean nothing at the
# rounding floor, where pure attention collapses to ~2e-16 (26 % apart there); the
# sample-report regression allows 2e-11 absolute.
ATOL = 1e-14


def per_batch_reference(model, batches, variants, per_batch, max_sentences):
    """The residuals as the analyzer made them before: every variant on each sampled
    batch, one pass each, in float64: ``{variant: [norm, depth, sentence]}``."""
    weights = cast_weights(model, torch.float64)
    out = {v: [] for v in variants}
    seen = 0
    for batch in batches:
        sub, _ = sample_batch(batch, per_batch, max_sentences, seen)
        seen += batch.size
        if sub.size == 0:
            continue
        inputs = sub.model_inputs()
        for v in variants:
            hidden = run_variant(model, inputs, v, weights)
            out[v].append(torch.stack([depth_residuals(h, inputs["attention_mask"])
                                       for h in hidden], dim=1))
    return {v: torch.cat(parts, -1) for v, parts in out.items()}


def values_of(analyzer: VariantCollapse) -> dict[str, torch.Tensor]:
    state = analyzer.state_dict()["state"]["values"]
    return {v: torch.cat(parts, -1) for v, parts in state.items()}


def assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for v in want:
        assert got[v].shape == want[v].shape, v
        torch.testing.assert_close(got[v], want[v], rtol=0, atol=ATOL, msg=v)


LENGTHS = [[5, 7, 3], [20, 12, 9, 30], [4, 17, 6], [11, 25]]


def test_held_buckets_equal_one_pass_per_batch_on_a_tiny_model(monkeypatch):
    model = tiny_model()
    batches = tiny_batches(LENGTHS, seed=3, vocab=50, index=True)
    for batch in batches:
        batch.extra["corpus_size"] = 12
    variants = ["san", "san+skip", "full"]
    monkeypatch.setattr(variant_collapse, "FLUSH_SENTENCES", 4)  # runs mid-corpus and at the end
    analyzer = VariantCollapse.for_model(model, variants=variants, per_batch=2,
                                         max_sentences=7, dtype="float64")
    run_analyzers(model, batches, [analyzer], show_progress=False)
    # corpus indices 0, 1, 3, 5, 6, 8, 10; at most 2 of the second batch's 3, 5, 6: 3 and 6
    assert analyzer.sentences == 6
    assert_same(values_of(analyzer), per_batch_reference(model, batches, variants, 2, 7))


def test_nothing_runs_before_the_sample_is_complete_then_once(monkeypatch):
    model = tiny_model()
    batches = tiny_batches(LENGTHS, seed=4, vocab=50, index=True)
    for batch in batches:
        batch.extra["corpus_size"] = 12
    calls = []
    real = variant_collapse.all_variant_depths
    monkeypatch.setattr(variant_collapse, "all_variant_depths",
                        lambda *a, **k: calls.append(a[1]["input_ids"].shape) or real(*a, **k))
    analyzer = VariantCollapse.for_model(model, variants=["san"], per_batch=2, max_sentences=6)
    for batch in batches[:3]:
        analyzer.model_pass(model, batch)
    assert calls == []  # 5 of 6 sentences held
    analyzer.model_pass(model, batches[3])  # the sample is complete: one pass per bucket
    # corpus indices floor(j 12 / 6) = 0, 2, 4, 6, 8, 10, whatever the batching
    lengths = [5, 3, 12, 30, 17, 11]
    assert analyzer.sentences == len(lengths)
    assert sorted(shape for shape in calls) == sorted((1, n) for n in lengths)  # one by one


def test_held_sentences_run_when_the_state_is_read_and_merge_in_order():
    model = tiny_model()
    batches = tiny_batches(LENGTHS, seed=5, vocab=50)
    one = VariantCollapse.for_model(model, variants=["san+mlp"], per_batch=3)
    for batch in batches:
        one.model_pass(model, batch)
    assert one._held  # fewer than FLUSH_SENTENCES: still held
    first = VariantCollapse.for_model(model, variants=["san+mlp"], per_batch=3)
    second = VariantCollapse.for_model(model, variants=["san+mlp"], per_batch=3)
    for batch in batches[:2]:
        first.model_pass(model, batch)
    for batch in batches[2:]:
        second.model_pass(model, batch)
    merged = first.merge(second)
    want = per_batch_reference(model, batches, ["san+mlp"], 3, 10**9)
    assert_same(values_of(merged), want)
    assert_same(values_of(one), want)  # state_dict ran the held sentences
    assert not one._held
    assert one.result()["collapse_variants"]["n"].max() == 11


def test_sentences_run_alone_with_their_real_tokens_in_order():
    ids = torch.tensor([[0, 0, 7, 8, 9], [4, 5, 0, 0, 0]])  # left- and right-padded
    mask = (ids > 0).long()
    long = torch.arange(1, 21)[None]
    batches = [Batch(input_ids=ids, attention_mask=mask),
               Batch(input_ids=long, attention_mask=torch.ones_like(long))]
    sentences = sentence_inputs(batches, torch.device("cpu"))
    assert [o.tolist() for o, _ in sentences] == [[0], [1], [2]]
    assert [s["input_ids"].tolist() for _, s in sentences] == [[[7, 8, 9]], [[4, 5]],
                                                               long.tolist()]
    assert all(bool(s["attention_mask"].all()) for _, s in sentences)
    assert "token_type_ids" not in sentences[0][1]


def batch_buckets(batches):
    """Each batch as one bucket of ``run_all_variants`` (its sentences padded together)."""
    return [(torch.arange(b.size), b.model_inputs()) for b in batches]


def test_minilm_report_sample_equals_one_pass_per_batch(minilm):
    """The report's setting (32 sentences evenly spaced by corpus index) on MiniLM and the
    built-in sample."""
    model, tokenizer = minilm
    batches = text_batches(tokenizer, sample_sentences(), batch_size=8, max_length=128)
    variants = ["san", "san+skip", "san+mlp", "san+ln", "full"]
    analyzer = VariantCollapse.for_model(model, max_sentences=32)
    for batch in batches:
        analyzer.model_pass(model, batch)
    assert analyzer.sentences == 32
    assert_same(values_of(analyzer), per_batch_reference(model, batches, variants, None, 32))


def per_bucket_reference(model, buckets, variants, weights):
    """The residuals as ``_run_held`` made them before one call ran every variant: one
    ``run_variant`` (its own ``functional_call``) per variant and bucket, each variant from
    its own embedding and block 0, the weights as ``cast_weights`` gives them."""
    out = {v: [] for v in variants}
    for v in variants:
        for _, inputs in buckets:
            hidden = run_variant(model, inputs, v, weights)
            out[v].append(torch.stack([depth_residuals(h, inputs["attention_mask"])
                                       for h in hidden], dim=1))
    return out


def assert_bitwise(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for v in want:
        assert len(got[v]) == len(want[v])
        for g, w in zip(got[v], want[v], strict=True):
            assert torch.equal(g, w), (v, float((g - w).abs().max()))


@pytest.mark.parametrize("norm_position", ["post", "pre"])
@pytest.mark.parametrize("dtype", [torch.float64, None])
def test_all_variants_in_one_call_equal_one_call_per_variant_bitwise(norm_position, dtype):
    """Sharing the embedding and block 0's attention between variants and holding the
    weights in ``linear_ready``'s layout change no number: the same operations on the same
    inputs (float64 and the model's own float32; post-norm, where every variant's block 0
    attends from the embedding, and pre-norm, where only variants with the same norm switch
    share it)."""
    model = tiny_model(norm_position=norm_position)
    buckets = batch_buckets(tiny_batches(LENGTHS, seed=6, vocab=50))
    variants = ["san", "san+skip", "san+mlp", "san+ln", "full"]
    weights = None if dtype is None else cast_weights(model, dtype)
    got = run_all_variants(model, buckets, variants, weights)
    assert_bitwise(got, per_bucket_reference(model, buckets, variants, weights))
    assert got["full"][0].dtype == torch.float64  # residuals in float64 either way


def test_linear_ready_weights_are_the_forwards_layout_without_a_copy():
    from einops import rearrange

    model = tiny_model()
    weights = cast_weights(model, torch.float64)
    ready = linear_ready(model, weights)
    for name in ("W_Q", "W_K", "W_V"):
        key = f"model.blocks.1.attn.{name}"
        assert torch.equal(ready[key], weights[key])  # the same tensor, stored otherwise
        flat = rearrange(ready[key], "head d_in d -> (head d) d_in")
        assert flat.is_contiguous() and flat.data_ptr() == ready[key].data_ptr()  # a view
    # W_O's rearrangement is a view already, in the transposed layout [d_out, head * d_v]
    # with strides (1, d_out): kept as it is, since a contiguous copy takes another product
    # path in F.linear (it rounded otherwise at two threads on the EWT sample's 5 x 7 bucket)
    key = "model.blocks.0.attn.W_O"
    assert ready[key] is weights[key]
    flat = rearrange(ready[key], "head d_head_v d_out -> d_out (head d_head_v)")
    assert flat.stride() == (1, flat.shape[0]) and flat.data_ptr() == ready[key].data_ptr()


@pytest.mark.parametrize("threads", [1, 2])
def test_minilm_one_call_equals_one_call_per_variant_bitwise(minilm, threads):
    """MiniLM in float64 on buckets of the EWT report sample's shapes (5 x 7, 10 x 15, 9 x 31,
    8 x 56; random tokens, some padding), at one and two threads (the command's): the
    numbers the analyzer stored before (one ``run_variant`` per variant and bucket), bit for
    bit. (Two threads on the 5 x 7 bucket caught a contiguous copy of ``W_O``.)"""
    model, _ = minilm
    generator = torch.Generator().manual_seed(0)
    batches = []
    for size, width, shortest in [(5, 7, 2), (10, 15, 9), (9, 31, 17), (8, 56, 33)]:
        ids = torch.randint(1000, 20000, (size, width), generator=generator)
        lengths = torch.randint(shortest, width + 1, (size,), generator=generator)
        lengths[0] = width
        mask = (torch.arange(width)[None] < lengths[:, None]).long()
        batches.append(Batch(input_ids=ids * mask, attention_mask=mask,
                             token_type_ids=torch.zeros_like(ids)))
    buckets = batch_buckets(batches)
    assert [tuple(inputs["input_ids"].shape) for _, inputs in buckets] == [
        (5, 7), (10, 15), (9, 31), (8, 56)]
    variants = ["san", "san+skip", "san+mlp", "san+ln", "full"]
    weights = cast_weights(model, torch.float64)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert_bitwise(run_all_variants(model, buckets, variants, weights),
                       per_bucket_reference(model, buckets, variants, weights))
    finally:
        torch.set_num_threads(before)


def analyzer_values(model, batches, splits):
    """The report's analyzer (32 sentences evenly spaced by corpus index) fed ``batches``
    split into ``splits`` analyzers (torchrun ranks), merged in order."""
    cuts = [round(i * len(batches) / splits) for i in range(splits + 1)]
    parts = []
    for lo, hi in pairwise(cuts):
        part = VariantCollapse.for_model(model, max_sentences=32)  # sampled by corpus index
        for batch in batches[lo:hi]:
            part.model_pass(model, batch)
        parts.append(part)
    merged = parts[0]
    for part in parts[1:]:
        merged = merged.merge(part)
    return values_of(merged)


def rebatched(batches, size):
    """The same sentences in the same order, in batches of at most ``size``."""
    return [pick_rows(batch, torch.arange(start, min(start + size, batch.size)))
            for batch in batches for start in range(0, batch.size, size)]


def test_minilm_residuals_are_the_same_bits_for_any_batching_split_and_threads(minilm):
    """MiniLM in float64 on the built-in sample, the same sentences in the same order:
    batches of 8 in one analyzer, batches of 3 in one, and batches of 3 over two analyzers
    merged (two torchrun ranks), each at one and two threads, store the same bits. (Padded
    length buckets did not: MKL's float64 product over the MLP's 1,536 inputs rounds
    otherwise with other rows beside it; the fits of the decay moved by 2.6e-9.)"""
    model, tokenizer = minilm
    batches = text_batches(tokenizer, sample_sentences(), batch_size=8, max_length=128)
    before = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            runs += [analyzer_values(model, batches, 1),
                     analyzer_values(model, rebatched(batches, 3), 1),
                     analyzer_values(model, rebatched(batches, 3), 2)]
    finally:
        torch.set_num_threads(before)
    for other in runs[1:]:
        assert_bitwise({v: [t] for v, t in other.items()}, {v: [t] for v, t in runs[0].items()})
