"""The per-row analyzers of branch rows30 against the paths they replaced (issue 29).

Each speed-up must give the same numbers: the head examples' per-layer preselection of the
batch's own top k against main's per-layer merge; the syntactic and rare-word heads' places
built once per batch against main's ``at_every_head`` per call (their update code as on main,
written out here); ``PatternBlock.is_max`` (``>=``) and ``max_count`` (int32) against ``==``
and the bool sum; ``flat_index`` against advanced indexing.
"""

from __future__ import annotations

import pytest
import torch

from attnlens.data.corpus import load_corpus
from attnlens.data.words import WordAttentionContext
from attnlens.hooks import ActivationCache, QueryBlock
from attnlens.measures.heads.examples import HeadExamples
from attnlens.measures.heads.head_stats import ALL_MEASURES
from attnlens.measures.heads.rare_words import RareWordHeads
from attnlens.measures.heads.syntactic import SyntacticHeads
from attnlens.stream.base import Batch, PatternBlock
from attnlens.stream.blocks import at_every_head, flat_index
from tests.test_query_blocks import feed_blocks
from tests.test_rows_shared import CLS, DOT, SEP, ExamplesAsOnMain, assert_states_equal, tied_batch


@pytest.mark.parametrize("k", [1, 2, 4])
def test_examples_keep_the_batch_top_k_per_layer_as_main_merged(k):
    """Batches larger than k (the preselection decides), ties within and across batches."""
    args = (2, 3, {CLS}, {SEP}, {DOT}, ALL_MEASURES)
    mine = HeadExamples(*args, heads_per_layer=[3, 2], k=k, window=3)
    main = ExamplesAsOnMain(*args, heads_per_layer=[3, 2], k=k, window=3)
    for seed, index in enumerate([[5, 1, 7, 2, 11, 12, 13], [0, 3, 4, 6, 9, 14], [8, 10]]):
        batch, cache = tied_batch(len(index), 8, index, seed + 10)
        if len(index) > 3:  # row 3 repeats row 0 under a smaller corpus index: exact ties
            for x in (batch.input_ids, batch.attention_mask, batch.special_mask,
                      *cache.values()):
                x[3] = x[0]
        cache = ActivationCache({name: x[:, : [3, 2][int(name.split(".")[1])]]
                                 for name, x in cache.items()})
        mine.update(batch, cache)
        main.update(batch, cache)
        assert_states_equal(mine, main)  # after every batch (later ones displace ties)
    # 15 sentences: every slot of a head the model has is filled; the pruned head's never
    assert torch.isfinite(mine.top_value[:, 0]).all()
    assert torch.isfinite(mine.top_value[:, 1, :2]).all()
    assert (mine.top_value[:, 1, 2] == -torch.inf).all()
    assert_states_equal(mine, main)


def test_flat_index_reads_what_advanced_indexing_reads():
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(4, 3, 5, 6, generator=gen)
    sentence = torch.tensor([0, 3, 3, 1, 2])
    row, column = torch.tensor([4, 0, 2, 1, 3]), torch.tensor([5, 0, 1, 2, 3])
    assert torch.equal(at_every_head(x, sentence, row, column), x[sentence, :, row, column])
    index = flat_index(x.shape[:3], sentence, row)
    assert torch.equal(x.amax(-1).reshape(-1)[index], x.amax(-1)[sentence, :, row])


def test_is_max_and_its_count_equal_equality_with_the_row_maximum():
    """``>=`` the row's maximum is ``==`` it, ties, zeros, -inf and NaN rows included; the
    int32 count is the bool sum."""
    gen = torch.Generator().manual_seed(1)
    p = torch.randint(0, 3, (2, 3, 6, 6), generator=gen).float() / 2
    p[0, 0, 0] = 0.0
    p[0, 1, 1] = -torch.inf
    p[1, 2, 3, 2] = torch.nan
    p[1, 0, 4, 1] = torch.inf
    block = PatternBlock(p[:, :, 1:5], QueryBlock(1, 5, 6), 0)
    m = p[:, :, 1:5].amax(-1, keepdim=True)
    assert torch.equal(block.is_max, p[:, :, 1:5] == m)
    assert torch.equal(block.max_count.long(), (p[:, :, 1:5] == m).sum(-1))


class SyntacticAsOnMain(SyntacticHeads):
    """The syntactic heads' update as main ran it (``at_every_head`` at every call)."""

    def update_block(self, batch: Batch, layer: int, block: PatternBlock,
                     cache: ActivationCache) -> None:
        if self._scratch is None:
            return
        sent, dep, head, pair = self._arcs.unbind(1)  # each [arc]
        wr = self.words.rows(batch, layer, block.pattern, block.query)
        if block.start == 0 and not (block.is_whole and wr.n):  # (a whole one sets them)
            self._begin_columns(wr.weights, len(sent))
        if not wr.n:
            return
        w = wr.weights  # [batch, head, query_word, key_word] (query words first .. first+n-1)
        n_heads = w.shape[1]
        n_padding = (~wr.valid).sum(-1)[:, None, None]  # [batch, 1, 1]
        masked = w.clone()
        masked.diagonal(offset=wr.first, dim1=-2, dim2=-1).fill_(-1.0)  # never picks itself
        top_row = masked.amax(-1, keepdim=True)  # [batch, head, query_word, 1]
        row_max = masked == top_row  # maxima of each query's row
        # padding words hold exactly 0: they tie only with a zero maximum; uncount them
        row_n = (row_max.sum(-1) - (top_row[..., 0] == 0) * n_padding).clamp_min(1)

        def row_of(word: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            """(the word's row in this block, whether it is completed here): ``[arc]``."""
            local = (word - wr.first).clamp(0, wr.n - 1)
            inside = (word >= wr.first) & (word < wr.first + wr.n)
            return local, inside & wr.done[sent, local]

        dep_row, dep_here = row_of(dep)
        head_row, head_here = row_of(head)
        credits = [
            at_every_head(row_max, sent, dep_row, head) / at_every_head(row_n, sent, dep_row)
            * dep_here[:, None],
            at_every_head(row_max, sent, head_row, dep) / at_every_head(row_n, sent, head_row)
            * head_here[:, None],
        ]  # dependent's row -> head, head's row -> dependent: [arc, head]; ties share
        for d, credit in enumerate(credits):
            summed = torch.zeros(len(self._scratch), n_heads, device=w.device)
            summed.index_add_(0, pair, credit.to(torch.float32))  # [pair, head]
            self._scratch[:, d, layer, :n_heads] += summed
        # columns (Clark's code): the largest weight each key word gets from a completed row
        rows = masked.masked_fill(~wr.done[:, None, :, None], -2.0)  # others never win
        block_top = rows.amax(-2)  # [batch, head, key_word]
        block_count = (rows == block_top[..., None, :]).sum(-2)
        arc_value = at_every_head(masked, sent, head_row, dep) * head_here[:, None]  # [arc, h]
        if block.is_whole:  # the layer's columns at once: nothing to carry to a next block
            self._col_top, self._col_count, self._arc_value = block_top, block_count, arc_value
            return
        top = torch.maximum(self._col_top[:, :n_heads], block_top)
        self._col_count[:, :n_heads] = (self._col_count[:, :n_heads] * (self._col_top[:, :n_heads]
                                        == top) + block_count * (block_top == top))
        self._col_top[:, :n_heads] = top
        self._arc_value[:, :n_heads] += arc_value

    def _begin_columns(self, weights: torch.Tensor, n_arcs: int) -> None:
        """Running column maxima of a layer's word rows, and each arc's weight head -> dep."""
        n_batch, n_heads, _, n_words = weights.shape
        self._col_top = torch.full((n_batch, n_heads, n_words), -torch.inf,
                                   device=weights.device)  # [batch, head, key_word]
        self._col_count = torch.zeros(n_batch, n_heads, n_words, dtype=torch.long,
                                      device=weights.device)
        self._arc_value = torch.zeros(n_arcs, n_heads, device=weights.device)  # [arc, head]

    def end_layer(self, batch: Batch, layer: int) -> None:
        if self._scratch is None:
            return
        sent, dep, _, pair = self._arcs.unbind(1)
        n_heads = self._arc_value.shape[1]
        top = at_every_head(self._col_top, sent, dep)  # [arc, head]
        # the word attending most to the dependent is its head (dependent's own row excluded)
        credit = (self._arc_value == top) / at_every_head(self._col_count, sent,
                                                          dep).clamp_min(1)
        summed = torch.zeros(len(self._scratch), n_heads, device=credit.device)
        summed.index_add_(0, pair, credit.to(torch.float32))  # [pair, head]
        self._scratch[:, 2, layer, :n_heads] += summed
        self._col_top = self._col_count = self._arc_value = None


class RareWordsAsOnMain(RareWordHeads):
    """The rare-word heads' update as main ran it."""

    def update_block(self, batch: Batch, layer: int, block: PatternBlock,
                     cache: ActivationCache) -> None:
        if self._scratch is None:
            return
        wr = self.words.rows(batch, layer, block.pattern, block.query)
        if not wr.n:
            return
        n_padding = (~wr.valid).sum(-1)  # [batch] word slots beyond the sentence
        w = wr.weights  # [batch, head, query_word, key_word] (query words first .. first+n-1)
        n_heads = w.shape[1]
        if self.rare_self == "exclude":
            w = w.clone()
            w.diagonal(offset=wr.first, dim1=-2, dim2=-1).fill_(-1.0)  # never picks itself
        row_max = w.amax(-1)  # [batch, head, query_word]
        is_max = w == row_max[..., None]
        # padding words hold exactly 0: they tie only with a zero maximum; uncount them
        ties = is_max.sum(-1) - (row_max == 0) * n_padding[:, None, None]
        credit = 1.0 / ties.clamp_min(1)  # [batch, head, query_word]
        for r, ex in enumerate(self._examples):
            if not len(ex):
                continue
            sent, query = ex[:, 0], ex[:, 1]
            local = (query - wr.first).clamp(0, wr.n - 1)  # the row in this block
            here = (query >= wr.first) & (query < wr.first + wr.n) & wr.done[sent, local]
            hits = sum(at_every_head(is_max, sent, local, ex[:, 2 + t])
                       for t in range(ex.shape[1] - 2))
            got = hits * at_every_head(credit, sent, local) * here[:, None]  # [row, head]
            per_sentence = torch.zeros(batch.size, n_heads, device=w.device)
            per_sentence.index_add_(0, sent, got.to(torch.float32))  # [sentence, head]
            self._scratch[:, r, layer, :n_heads] += per_sentence


def minilm_batches(tokenizer, n_layers: int, n_heads: list[int], seed: int):
    """The sample treebank's sentences with random tied patterns (pruned heads per layer)."""
    batches = load_corpus(text=None, treebank=None).batches(tokenizer, batch_size=8,
                                                            max_length=40)
    gen = torch.Generator().manual_seed(seed)
    for batch in batches:
        n, length = batch.input_ids.shape
        keep = batch.attention_mask.bool()[:, None, None, :]
        yield batch, ActivationCache({
            f"blocks.{layer}.attn.hook_pattern": torch.softmax(
                torch.randint(0, 3, (n, n_heads[layer], length, length), generator=gen).float()
                .masked_fill(~keep, -torch.inf), -1)
            for layer in range(n_layers)})


@pytest.mark.parametrize("rows", [None, 5])
def test_syntactic_heads_equal_main_on_minilm_sentences(minilm, rows):
    """Whole patterns (places built once per batch, reused by every layer with as many
    heads; a pruned layer has its own) and query blocks (places built per block)."""
    _, tokenizer = minilm
    mine = SyntacticHeads(3, 3, heads_per_layer=[3, 2, 3], words=WordAttentionContext())
    main = SyntacticAsOnMain(3, 3, heads_per_layer=[3, 2, 3], words=WordAttentionContext())
    for batch, cache in minilm_batches(tokenizer, 3, [3, 2, 3], seed=0):
        for analyzer in (mine, main):
            if rows is None:
                analyzer.update(batch, cache)
            else:
                feed_blocks(analyzer, batch, cache, rows)
    assert any(float(h.abs().sum()) for h in mine.pair_hits)
    assert_states_equal(mine, main)


@pytest.mark.parametrize(("rare_self", "rows"), [("include", None), ("exclude", None),
                                                 ("include", 5)])
def test_rare_word_heads_equal_main_on_minilm_sentences(minilm, rare_self, rows):
    _, tokenizer = minilm
    options = dict(heads_per_layer=[3, 2, 3], rare_self=rare_self)
    mine = RareWordHeads(3, 3, words=WordAttentionContext(), **options)
    main = RareWordsAsOnMain(3, 3, words=WordAttentionContext(), **options)
    for batch, cache in minilm_batches(tokenizer, 3, [3, 2, 3], seed=1):
        for analyzer in (mine, main):
            if rows is None:
                analyzer.update(batch, cache)
            else:
                feed_blocks(analyzer, batch, cache, rows)
    assert any(float(h.abs().sum()) for h in mine.sentence_hits)
    assert_states_equal(mine, main)
