"""Syntactic heads (Clark et al. 2019, Voita et al. 2019) from a dependency treebank.

Word level (``attnlens.data.words``). For every arc ``dependent -> head`` with relation r:

- ``dep->head``: the dependent's row puts its maximum (excluding the dependent itself) on
  its head;
- ``head->dep``: the head word's own row puts its maximum (excluding the head itself) on the
  dependent;
- ``head->dep (clark code)``: the word attending most to the dependent (the dependent's own
  row excluded) is its head: the question Clark et al.'s released code asks, reported
  separately.

A head's accuracy for (r, direction) is the share of arcs it gets right; tied maxima share
the credit. The baseline is the best fixed relative offset for r and the direction, counted
from the same arcs ("always predict the word k positions away"). "all relations" pools every
arc. The analyzer keeps its hits **per sentence and relation** (summed over the sentence's
arcs), so ``attnlens.measures.heads.syntactic_tables`` can give every accuracy a bootstrap interval
over sentences, test each head against its baseline and select heads on held-out sentences.

On the CPU, whole patterns are counted by a C kernel (``words_kernel``: the same word rows,
maxima, ties and float32 sums in the same order, so the same hits, in one pass per layer);
the torch path below runs on GPUs, for query blocks of long inputs and without the kernel.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import pandas as pd
import torch

from attnlens.data.conllu import base_relation
from attnlens.data.words import WordAttentionContext, uses_kernel
from attnlens.hooks import ActivationCache
from attnlens.measures.heads.syntactic_arcs import (
    DEFAULT_MIN_EXAMPLES,
    DIRECTIONS,
    SentenceArcs,
)
from attnlens.measures.heads.syntactic_tables import syntactic_tables
from attnlens.measures.heads.words_kernel import by_sentence, kernel_credits
from attnlens.stats.bootstrap import Inference
from attnlens.stream.base import Batch, PatternBlock
from attnlens.stream.blocks import flat_index
from attnlens.stream.head_patterns import HeadPatternAnalyzer
from attnlens.stream.held_layers import HeldLayers, add_to_layers
from attnlens.stream.per_sentence import PerSentenceRows, sentence_ids_of


class SyntacticHeads(PerSentenceRows, HeadPatternAnalyzer):
    """Streaming per-sentence, per-relation hit counts of every head, and arc offsets."""

    name = "syntactic"
    reads_blocks = True
    state_fields = ("sentences", "offsets", "pair_sentence", "pair_relation", "pair_arcs",
                    "pair_hits", "arc_sentence", "arc_relation", "arc_offset")
    row_fields = ("pair_hits",)
    sentence_fields = ("sentences", "pair_sentence", "arc_sentence")

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        min_examples: int = DEFAULT_MIN_EXAMPLES,
        margin: float = 0.10,
        base_relations: bool = False,
        heads_per_layer: Sequence[int] | None = None,
        inference: Inference | None = None,
        words: WordAttentionContext | None = None,
    ) -> None:
        self.set_heads(heads_per_layer, n_layers, n_heads)
        self.min_examples, self.margin, self.base_relations = min_examples, margin, base_relations
        self.inference = inference or Inference()
        self.words = words or WordAttentionContext()
        self.sentences: list[int] = []  # corpus index of every sentence with a tree
        self.offsets: dict[str, Counter[int]] = {}  # relation -> Counter(head - dependent)
        self.pair_sentence: list[int] = []  # one entry per (sentence, relation) pair
        self.pair_relation: list[str] = []
        self.pair_arcs: list[int] = []
        self.pair_hits: list[torch.Tensor] = []  # per batch [pair, direction, layer, head]
        self.arc_sentence: list[int] = []  # one entry per arc
        self.arc_relation: list[str] = []
        self.arc_offset: list[int] = []
        self._scratch: torch.Tensor | None = None

    def row_width(self, field: str) -> tuple[int, ...]:
        return (len(DIRECTIONS), self.n_layers, self.n_heads)  # pair_hits

    def settings(self) -> dict:
        return {"n_layers": self.n_layers, "heads_per_layer": self.heads_per_layer,
                "min_examples": self.min_examples, "margin": self.margin,
                "base_relations": self.base_relations, **self.inference.settings()}

    # Feeding --------------------------------------------------------------------------
    def begin_batch(self, batch: Batch) -> None:
        self._scratch = None
        self._held = HeldLayers()
        self._col_top = self._col_count = self._arc_value = None
        self._at: dict = {}  # where the arcs lie, per shape of word rows (``_places``)
        self._kernel_arcs = None  # the C kernel's arcs (``_kernel_count``), once per batch
        if "heads" not in batch.extra or batch.word_ids is None:
            return  # a corpus without dependency trees: nothing to count
        ids = sentence_ids_of(batch, self.next_sentence_id())
        self.sentences += ids
        pairs: dict[tuple[int, str], int] = {}
        rows = []  # (sentence in batch, dependent, head, pair)
        trees = zip(batch.extra["heads"], batch.extra["relations"], strict=True)
        unaligned = batch.extra.get("unaligned") or [[] for _ in range(batch.size)]
        for b, (heads, labels) in enumerate(trees):
            n_words, tokenless = batch.extra["n_words"][b], set(unaligned[b])
            for dep, (head, label) in enumerate(zip(heads, labels, strict=True)):
                if head < 0 or dep >= n_words or head >= n_words:
                    continue  # the root, or a word cut by truncation
                if dep in tokenless or head in tokenless:
                    continue  # a word without a token of its own (attnlens.data.alignment)
                rel = base_relation(label) if self.base_relations else label
                pair = pairs.setdefault((b, rel), len(pairs))
                rows.append((b, dep, head, pair))
                offsets = self.offsets.get(rel)
                if offsets is None:  # (not setdefault: a Counter made for every arc)
                    offsets = self.offsets[rel] = Counter()
                offsets[head - dep] += 1
                self.arc_sentence.append(ids[b])
                self.arc_relation.append(rel)
                self.arc_offset.append(head - dep)
        arcs_per_pair = Counter(row[3] for row in rows)
        for (b, rel), pair in pairs.items():
            self.pair_sentence.append(ids[b])
            self.pair_relation.append(rel)
            self.pair_arcs.append(arcs_per_pair[pair])
        if not pairs:
            return
        self.words.prepare(batch)  # word positions read once per batch
        device = batch.word_ids.device
        self._arcs = torch.tensor(rows, dtype=torch.long).to(device)  # [arc, 4]
        self._scratch = torch.zeros(len(pairs), len(DIRECTIONS), self.n_layers, self.n_heads,
                                    device=device)  # [pair, direction, layer, head]

    def update_block(self, batch: Batch, layer: int, block: PatternBlock,
                     cache: ActivationCache) -> None:
        if self._scratch is None:
            return
        if block.is_whole and uses_kernel(block.pattern):  # one C pass over the layer
            self._kernel_count(batch, layer, block.pattern)
            return
        wr = self.words.rows(batch, layer, block.pattern, block.query)
        if block.is_whole:  # held, then rows and columns of several layers at once
            if wr.n:  # (without word rows nothing is credited)
                self._whole_rows = wr
                if self._held.add(layer, wr.weights):
                    self._fold_held()
            return
        if block.start == 0:
            self._begin_columns(wr.weights, len(self._arcs))
        if wr.n:
            self._count([layer], wr, whole=False)

    def _kernel_count(self, batch: Batch, layer: int, pattern: torch.Tensor) -> None:
        """Credit the arcs of the layer's whole pattern by the C kernel (``words_kernel``):
        the torch path's word rows, maxima, ties and sums, in one pass."""
        if self._kernel_arcs is None:  # [arc, 4] by sentence, each sentence's first arc
            self._kernel_arcs = by_sentence(self._arcs.cpu().numpy(), batch.size)
        found = kernel_credits("syntactic", self.words, batch, layer, pattern, self._kernel_arcs,
                               len(self._scratch), len(DIRECTIONS))  # [pair, direction, head]
        by_layer = self._scratch.permute(2, 0, 1, 3)  # [layer, pair, direction, head]
        add_to_layers(by_layer, [layer], found[None])

    def _fold_held(self) -> None:
        # word rows [batch, layer * head, word, key_word]: the layers' heads side by side
        wr = self._whole_rows
        for layers, (weights,) in self._held.take(dims=(1,)):
            self._count(layers, replace(wr, weights=weights), whole=True)

    def _count(self, layers: list[int], wr, whole: bool) -> None:
        """Credit the arcs in word rows ``wr`` (one layer's query block, or the whole patterns
        of several layers with their heads side by side): rows now, columns now for whole
        patterns (``_add_columns``), else carried to the layer's next block."""
        pair = self._arcs[:, 3]  # [arc]
        w = wr.weights  # [batch, head, query_word, key_word] (query words first .. first+n-1)
        n_heads = w.shape[1]
        cells, rows, here, n_padding = self._places(wr, whole)
        masked = w.clone()
        masked.diagonal(offset=wr.first, dim1=-2, dim2=-1).fill_(-1.0)  # never picks itself
        top_row = masked.amax(-1, keepdim=True)  # [batch, head, query_word, 1]
        row_max = masked >= top_row  # maxima of each query's row (== the maximum; cheaper)
        # padding words hold exactly 0: they tie only with a zero maximum; uncount them
        # (int32 counts: a bool sum's default int64 copies the whole tensor first)
        row_n = (row_max.sum(-1, dtype=torch.int32) - (top_row[..., 0] == 0) * n_padding
                 ).clamp_min(1)
        # dependent's row -> head, then head's row -> dependent: [2 * arc, head]; ties share
        credit = row_max.view(-1)[cells] / row_n.view(-1)[rows] * here
        n_arcs = len(pair)
        summed = torch.zeros(len(self._scratch), 2, n_heads, device=w.device)
        summed.index_add_(0, pair, credit.view(2, n_arcs, n_heads).transpose(0, 1))
        by_layer = self._scratch[:, :2].permute(2, 0, 1, 3)  # [layer, pair, direction, head]
        add_to_layers(by_layer, layers,
                      summed.unflatten(2, (len(layers), -1)).permute(2, 0, 1, 3))
        # columns (Clark's code): the largest weight each key word gets from a completed row
        arc_value = masked.view(-1)[cells[n_arcs:]] * here[n_arcs:]  # [arc, head] head -> dep
        masked.masked_fill_(~wr.done[:, None, :, None], -2.0)  # rows not done never win
        block_top = masked.amax(-2)  # [batch, head, key_word]
        block_count = (masked >= block_top[..., None, :]).sum(-2, dtype=torch.int32)
        if whole:  # the layers' columns at once: nothing to carry to a next block
            self._add_columns(layers, block_top, block_count, arc_value)
            return
        top = torch.maximum(self._col_top[:, :n_heads], block_top)
        self._col_count[:, :n_heads] = (self._col_count[:, :n_heads] * (self._col_top[:, :n_heads]
                                        == top) + block_count * (block_top == top))
        self._col_top[:, :n_heads] = top
        self._arc_value[:, :n_heads] += arc_value

    def _places(self, wr, whole: bool) -> tuple[torch.Tensor, ...]:
        """Where the arcs lie in a block's word rows ``wr.weights [batch, head, n, key_word]``:
        ``cells [2 * arc, head]`` (the dependent's row at the head, then the head's row at
        the dependent, in ``weights.reshape(-1)``), ``rows [2 * arc, head]`` (those rows in
        ``[batch, head, n]``), ``here [2 * arc, 1]`` (the row is completed in this block) and
        ``n_padding [batch, 1, 1]`` (padding word slots). The same for every whole pattern of
        a batch with as many heads: built once for them."""
        key = (tuple(wr.weights.shape), wr.first) if whole else None
        found = self._at.get(key) if whole else None
        if found is not None:
            return found
        sent, dep, head, _ = self._arcs.unbind(1)  # each [arc]

        def row_of(word: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            """(the word's row in this block, whether it is completed here): ``[arc]``."""
            local = (word - wr.first).clamp(0, wr.n - 1)
            inside = (word >= wr.first) & (word < wr.first + wr.n)
            return local, inside & wr.done[sent, local]

        dep_row, dep_here = row_of(dep)
        head_row, head_here = row_of(head)
        shape = wr.weights.shape
        found = (torch.cat([flat_index(shape, sent, dep_row, head),
                            flat_index(shape, sent, head_row, dep)]),
                 torch.cat([flat_index(shape[:3], sent, dep_row),
                            flat_index(shape[:3], sent, head_row)]),
                 torch.cat([dep_here, head_here])[:, None],
                 (~wr.valid).sum(-1)[:, None, None])
        if whole:
            self._at[key] = found
        return found

    def _begin_columns(self, weights: torch.Tensor, n_arcs: int) -> None:
        """Running column maxima of a layer's word rows, and each arc's weight head -> dep."""
        n_batch, n_heads, _, n_words = weights.shape
        self._col_top = torch.full((n_batch, n_heads, n_words), -torch.inf,
                                   device=weights.device)  # [batch, head, key_word]
        self._col_count = torch.zeros(n_batch, n_heads, n_words, dtype=torch.long,
                                      device=weights.device)
        self._arc_value = torch.zeros(n_arcs, n_heads, device=weights.device)  # [arc, head]

    def end_layer(self, batch: Batch, layer: int) -> None:
        if self._scratch is None or self._col_top is None:  # (whole patterns: held)
            return
        self._add_columns([layer], self._col_top, self._col_count, self._arc_value)
        self._col_top = self._col_count = self._arc_value = None

    def _add_columns(self, layers: list[int], col_top: torch.Tensor, col_count: torch.Tensor,
                     arc_value: torch.Tensor) -> None:
        """Credit each arc whose dependent's column is topped by its head: the column maxima
        ``col_top [batch, head, key_word]``, their ties ``col_count`` and each arc's weight
        head -> dep ``arc_value [arc, head]`` (``head``: these layers' heads side by side)."""
        sent, dep, _, pair = self._arcs.unbind(1)
        n_heads = arc_value.shape[1]
        key = ("columns", tuple(col_top.shape))
        at = self._at.get(key)
        if at is None:  # the dependents' columns [arc, head], the same for every layer
            at = self._at[key] = flat_index(col_top.shape, sent, dep)
        top = col_top.contiguous().view(-1)[at]  # [arc, head]
        # the word attending most to the dependent is its head (dependent's own row excluded)
        credit = (arc_value == top) / col_count.contiguous().view(-1)[at].clamp_min(1)
        summed = torch.zeros(len(self._scratch), n_heads, device=credit.device)
        summed.index_add_(0, pair, credit.to(torch.float32))  # [pair, head]
        by_layer = self._scratch[:, 2].transpose(0, 1)  # [layer, pair, head] (a view)
        add_to_layers(by_layer, layers, summed.unflatten(1, (len(layers), -1)).transpose(0, 1))

    def end_batch(self, batch: Batch) -> None:
        if self._held:
            self._fold_held()
        self._whole_rows = None
        if self._scratch is not None:
            self.pair_hits.append(self._scratch)  # stays on the model's device
        self._scratch = None
        self.words.clear()

    # Reading --------------------------------------------------------------------------
    def examples(self, relation: str) -> int:
        return sum(self.offsets[relation].values())

    def relations(self) -> list[str]:
        """Relations with at least ``min_examples`` arcs, most frequent first."""
        kept = [r for r in self.offsets if self.examples(r) >= self.min_examples]
        return sorted(kept, key=lambda r: (-self.examples(r), r))

    def head_exists(self) -> torch.Tensor:
        """``[layer, head]`` True for heads the model has (pruned layers have fewer)."""
        exists = torch.zeros(self.n_layers, self.n_heads, dtype=torch.bool)
        for layer, n in enumerate(self.heads_per_layer):
            exists[layer, :n] = True
        return exists

    def per_sentence(self) -> SentenceArcs:
        """The running state consolidated on the CPU (see ``SentenceArcs``)."""
        names = sorted(set(self.pair_relation))
        index = {r: i for i, r in enumerate(names)}
        return SentenceArcs(
            relations=names,
            sentences=torch.unique(torch.tensor(self.sentences, dtype=torch.long)),
            pair_sentence=torch.tensor(self.pair_sentence, dtype=torch.long),
            pair_relation=torch.tensor([index[r] for r in self.pair_relation], dtype=torch.long),
            pair_arcs=torch.tensor(self.pair_arcs, dtype=torch.float64),
            pair_hits=self.field_rows("pair_hits", torch.float32),
            arc_sentence=torch.tensor(self.arc_sentence, dtype=torch.long),
            arc_relation=torch.tensor([index[r] for r in self.arc_relation], dtype=torch.long),
            arc_offset=torch.tensor(self.arc_offset, dtype=torch.long),
        )

    @staticmethod
    def baseline(offsets: Counter[int], direction: str) -> tuple[int, float]:
        """(best offset, its accuracy) of the fixed-offset guess for one direction.

        ``offsets`` counts ``head - dependent``. From the dependent (dep->head, and Clark's
        code, which predicts the head from the dependent) the guess is that offset; from the
        head (head->dep) it is its negation. Ties: the offset closest to 0, then negative.
        """
        total = sum(offsets.values())
        if not total:
            return 0, float("nan")
        offset, count = max(offsets.items(), key=lambda kv: (kv[1], -abs(kv[0]), -kv[0]))
        return (-offset if direction == "head->dep" else offset), count / total

    def result(self) -> dict[str, pd.DataFrame]:
        return syntactic_tables(self)
