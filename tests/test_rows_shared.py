"""Per-row quantities computed once per block and shared (issue 29, branch rows29).

Each speed-up must give the numbers of the path it replaced: head examples (now reading the
head statistics' per-row values from the shared ``PatternBlock``, keys in one gather, the
top-k merge once per batch) against the per-layer path as main ran it, written out here;
the syntactic heads' whole-matrix columns against query blocks (the running path); the
streaming error's skipped short batches against computing them.
"""

from __future__ import annotations

import pytest
import torch

from attnlens.data.batch import Batch
from attnlens.data.corpus import load_corpus
from attnlens.data.words import WordAttentionContext
from attnlens.hooks import ActivationCache
from attnlens.measures.heads.examples import HeadExamples, top_k
from attnlens.measures.heads.head_stats import ALL_MEASURES, MEASURES, HeadStats, TokenMeasures
from attnlens.measures.heads.syntactic import SyntacticHeads
from attnlens.measures.lm_heads.streaming import StreamingError
from attnlens.stream.blocks import PatternBlock
from attnlens.stream.feeder import LayerFeeder
from tests.test_query_blocks import feed_blocks

CLS, SEP, DOT = 1, 2, 3


def tied_batch(n: int, length: int, index: list[int], seed: int, n_heads: int = 3,
               n_layers: int = 2) -> tuple[Batch, ActivationCache]:
    """Sentences of various lengths ([CLS] words [SEP], padded) whose patterns take few
    distinct values (ties within rows and between sentences, as argmax and top-k meet them)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(4, length + 1, (n,), generator=gen)
    lengths[0] = length
    ids = torch.zeros(n, length, dtype=torch.long)
    mask = torch.zeros(n, length, dtype=torch.long)
    for b, m in enumerate(lengths.tolist()):
        ids[b, :m] = torch.randint(4, 9, (m,), generator=gen)
        ids[b, 0], ids[b, m - 1] = CLS, SEP
        ids[b, 2] = DOT
        mask[b, :m] = 1
    keep = mask.bool()[:, None, None, :]
    cache = {}
    for layer in range(n_layers):
        scores = torch.randint(0, 3, (n, n_heads, length, length), generator=gen).float()
        cache[f"blocks.{layer}.attn.hook_pattern"] = torch.softmax(
            scores.masked_fill(~keep, -torch.inf), -1)
    batch = Batch(input_ids=ids, attention_mask=mask,
                  special_mask=(ids == CLS) | (ids == SEP), extra={"index": index})
    return batch, ActivationCache(cache)


class ExamplesAsOnMain(HeadExamples):
    """Head examples as main computed them: a fresh per-row pass per layer, one ``key_of``
    per measure and the top-k merge at every layer."""

    reads_blocks = False

    def begin_batch(self, batch: Batch) -> None:
        super().begin_batch(batch)

    def update_layer(self, batch: Batch, layer: int, cache: ActivationCache) -> None:
        p = cache["pattern", layer].float()
        n_heads, n = p.shape[1], p.shape[-1]
        reader = self.reader
        per_row = reader.per_row(PatternBlock.whole(p, layer))
        weight = reader.row_weight
        value = (per_row * weight).sum(-1) / self._counted[:, :, None].clamp_min(1)
        value = value.masked_fill(~self._enough[:, :, None], -torch.inf)
        query = per_row.masked_fill(weight == 0, -torch.inf).argmax(-1)
        key = torch.stack([reader.key_of(m, p, query[i]) for i, m in enumerate(self.measures)])
        rows = torch.arange(p.shape[0])[None, :, None].expand_as(query)  # each one's sentence
        start = self._window_start(query, key, rows)  # within the sentence (batch30)
        offsets = torch.arange(self.window)
        cells = (start[..., None] + offsets).clamp_max(n - 1)
        b = torch.arange(p.shape[0])[None, :, None, None, None]
        h = torch.arange(n_heads)[None, None, :, None, None]
        window = p[b, h, cells[..., :, None], cells[..., None, :]]
        inside = (start[..., None] + offsets) < n
        window = window * (inside[..., :, None] & inside[..., None, :])
        first = reader.first[None, :, None]
        m, size = value.shape[0], value.shape[1]
        sentence = self._ids[None, :, None].expand(m, size, n_heads)
        old = slice(None), layer, slice(0, n_heads)
        values = torch.cat([self.top_value[old], value.transpose(1, 2)], -1)
        ids = torch.cat([self.top_sentence[old], sentence.transpose(1, 2)], -1)
        best = top_k(values, ids, self.k)

        def pick(kept, new):
            both = torch.cat([kept, new.transpose(1, 2).to(kept.dtype)], 2)
            index = best.reshape(*best.shape, *([1] * (both.dim() - 3)))
            return both.gather(2, index.expand(*best.shape, *both.shape[3:]))

        self.top_value[old] = values.gather(-1, best)
        self.top_sentence[old] = pick(self.top_sentence[old], sentence)
        self.top_query[old] = pick(self.top_query[old], query - first)
        self.top_key[old] = pick(self.top_key[old], key - first)
        self.top_start[old] = pick(self.top_start[old], start - first)
        self.top_window[old] = pick(self.top_window[old], window)

    def end_batch(self, batch: Batch) -> None:
        self._found = []
        super().end_batch(batch)


def assert_states_equal(mine, reference) -> None:
    ours, theirs = mine.state_dict()["state"], reference.state_dict()["state"]
    assert ours.keys() == theirs.keys()
    for field, value in theirs.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(ours[field], value), field
        else:
            assert ours[field] == value, field


@pytest.mark.parametrize(("heads_per_layer", "layers"),
                         [([3, 3], (0, 1)), ([3, 1], (0, 1)), ([3, 3], (1,))])
def test_examples_equal_the_per_layer_path_of_main(heads_per_layer, layers):
    """Same examples, values, rows, keys and windows (ties included), also where a pruned
    layer has fewer heads than the widest (its missing heads never take an example) and
    where only some layers are fed."""
    args = (2, 3, {CLS}, {SEP}, {DOT}, ALL_MEASURES)
    mine = HeadExamples(*args, heads_per_layer=heads_per_layer, k=3, window=4)
    main = ExamplesAsOnMain(*args, heads_per_layer=heads_per_layer, k=3, window=4)
    for seed, index in enumerate([[5, 1, 7, 2], [0, 3, 4, 6, 9], [8, 10]]):
        batch, cache = tied_batch(len(index), 9, index, seed)
        cache = ActivationCache({
            name: x[:, : heads_per_layer[int(name.split(".")[1])]] for name, x in cache.items()
            if int(name.split(".")[1]) in layers
        })
        mine.update(batch, cache)
        main.update(batch, cache)
    assert torch.isfinite(mine.top_value).any()
    assert_states_equal(mine, main)


def test_keys_at_every_measure_at_once_equal_key_of_each():
    """``keys_at`` reads only the chosen (batch row, query) of each measure and head."""
    batch, cache = tied_batch(5, 8, list(range(5)), seed=3)
    reader = TokenMeasures(ALL_MEASURES, {CLS}, {SEP}, {DOT})
    reader.prepare(batch)
    p = cache["pattern", 0]  # [batch, head, query_pos, key_pos]
    n_heads = p.shape[1]
    gen = torch.Generator().manual_seed(1)
    shape = (len(ALL_MEASURES), n_heads, 2)  # [measure, head, k]
    query = torch.randint(0, 8, shape, generator=gen)
    rows = torch.randint(0, 5, shape, generator=gen)
    together = reader.keys_at(p, query, rows)
    heads = torch.arange(n_heads)
    for i, measure in enumerate(ALL_MEASURES):
        for k in range(shape[-1]):
            full = torch.zeros(5, n_heads, dtype=torch.long)  # [batch, head]
            full[rows[i, :, k], heads] = query[i, :, k]
            each = reader.key_of(measure, p, full)[rows[i, :, k], heads]
            assert torch.equal(together[i, :, k], each), measure


def test_a_shared_quantity_is_computed_once_per_block():
    block = PatternBlock.whole(torch.rand(2, 3, 4, 4), 0)
    calls = []

    def compute():
        calls.append(1)
        return torch.ones(1)

    first = block.shared(("x", 1), compute)
    assert block.shared(("x", 1), compute) is first and len(calls) == 1
    block.shared(("x", 2), compute)
    assert len(calls) == 2  # another key, another quantity


@pytest.mark.parametrize("kernel", [False, True])
def test_statistics_and_examples_compute_each_row_value_once(monkeypatch, kernel):
    """Fed through the feeder, the head statistics and the examples share one block per
    layer: every per-row measure is computed once for both (on the CPU with the C kernel:
    the kernel's rows once per layer, and torch's entropy once)."""
    from attnlens.measures.heads import head_stats

    if not kernel:
        monkeypatch.setattr(head_stats, "_stats_kernel", None)
    elif head_stats._stats_kernel is None:
        pytest.skip("the head statistics C kernel is not built")
    computed = []
    real = PatternBlock.shared

    def counting(self, key, compute):
        def counted():
            computed.append((self.layer, self.start, key))  # (ids of freed blocks recur)
            return compute()
        return real(self, key, counted)

    monkeypatch.setattr(PatternBlock, "shared", counting)
    batch, cache = tied_batch(4, 8, [0, 1, 2, 3], seed=5)
    analyzers = [HeadStats(2, 3, {CLS}, {SEP}, {DOT}), HeadExamples(2, 3, {CLS}, {SEP}, {DOT},
                                                                    MEASURES)]

    class TwoLayers:
        n_layers = 2

    feeder = LayerFeeder(TwoLayers(), analyzers)
    feeder.begin(batch)
    for name in sorted(cache):
        feeder.save_as(name, cache[name])
    feeder.end()
    assert computed and len(computed) == len(set(computed))
    measures = [key[1] for *_, key in computed if key[0] == "token measure"]
    kernel_rows = [key for *_, key in computed if key[0] == "token measures kernel"]
    if kernel:
        assert not measures and len(kernel_rows) == 2  # once per layer, 2 layers
    else:
        assert sorted(measures) == sorted(MEASURES * 2)  # each measure once per layer


@pytest.mark.parametrize("rows", [1, 4])
def test_examples_fed_query_blocks_equal_whole_patterns(rows):
    args = (2, 3, {CLS}, {SEP}, {DOT}, MEASURES)
    whole, blocked = HeadExamples(*args, window=4), HeadExamples(*args, window=4)
    for seed, index in enumerate([[3, 0, 1], [2, 4]]):
        batch, cache = tied_batch(len(index), 7, index, seed)
        whole.update(batch, cache)
        feed_blocks(blocked, batch, cache, rows)
    assert_states_equal(blocked, whole)


def test_syntactic_whole_matrices_equal_query_blocks_on_minilm_sentences(minilm):
    """The whole-matrix path (columns taken at once) against the running one of blocks."""
    _, tokenizer = minilm
    batches = load_corpus(text=None, treebank=None).batches(tokenizer, batch_size=8,
                                                            max_length=40)
    gen = torch.Generator().manual_seed(0)
    whole = SyntacticHeads(2, 3, words=WordAttentionContext())
    blocked = SyntacticHeads(2, 3, words=WordAttentionContext())
    for batch in batches:
        n, length = batch.input_ids.shape
        keep = batch.attention_mask.bool()[:, None, None, :]
        cache = ActivationCache({
            f"blocks.{layer}.attn.hook_pattern": torch.softmax(
                torch.randint(0, 3, (n, 3, length, length), generator=gen).float()
                .masked_fill(~keep, -torch.inf), -1)
            for layer in range(2)})
        whole.update(batch, cache)
        feed_blocks(blocked, batch, cache, 5)
    assert_states_equal(whole, blocked)


class StreamingComputingEverything(StreamingError):
    def begin_batch(self, batch: Batch) -> None:
        super().begin_batch(batch)
        self._skip = False


def test_streaming_error_skips_batches_too_short_to_drop_a_key():
    """A batch padded to at most sink_tokens + window tokens has no sentence the restriction
    changes: skipping it leaves the state as computing it would (errors of 0 weight)."""
    gen = torch.Generator().manual_seed(2)
    skipping = StreamingError([2, 2], sink_tokens=1, window=3, causal=True)
    computing = StreamingComputingEverything([2, 2], sink_tokens=1, window=3, causal=True)
    for length in (4, 7, 3, 5):
        ids = torch.ones(3, length, dtype=torch.long)
        mask = torch.ones(3, length, dtype=torch.long)
        mask[1, length - 1:] = 0
        batch = Batch(input_ids=ids, attention_mask=mask)
        causal = torch.ones(length, length).tril().bool()
        cache = {}
        for layer in range(2):
            scores = torch.randn(3, 2, length, length, generator=gen)
            cache[f"blocks.{layer}.attn.hook_pattern"] = torch.softmax(
                scores.masked_fill(~causal, -torch.inf), -1)
            cache[f"blocks.{layer}.attn.hook_v"] = torch.randn(3, length, 2, 4, generator=gen)
        for analyzer in (skipping, computing):
            analyzer.update(batch, ActivationCache(cache))
    assert skipping.sentences == computing.sentences == 5  # 3 of 7 tokens, 2 of 5
    assert torch.equal(skipping.error_sums, computing.error_sums)
