"""Rare-word heads (Voita et al. 2019): heads whose most-attended word is the rarest one.

Word level (``attnlens.data.words``). Per sentence, words are ranked by frequency
(``WordRarity``: wordfreq English by default, or counts from a user corpus). Only words
containing a letter or a digit can be the rarest: punctuation has zero frequency in
wordfreq and would otherwise always win. Sentences need more word-like words than the
ranks asked for (at least 2 for the rarest, 3 for the two rarest).

``share_rarest``: share of attending words (every word except the rarest) whose
maximum-attention word is the rarest word; ``share_two_rarest``: share of the words outside
the two rarest whose maximum lands on one of them. Ties share the credit. ``rare_self``
says whether the attending word itself competes for its row's maximum (``include``, the
default and Voita's reading: a word may attend most to itself) or not (``exclude``, as the
syntactic directions do). ``chance_*`` is the same share for a head that picks a word
uniformly at random among the words its mask lets it see: k / n words (k / (n - 1) with
``exclude``) without a mask; under a causal mask word i sees words 0..i only, so its chance
is (the k rarest among them) / (i + 1) (/ i with ``exclude``), 0 when the rarest word comes
later.

Counts are kept per sentence, so every share has a bootstrap interval over sentences. A head
is a rare-word head when ``share_rarest`` is above ``threshold`` (default 0.5; Voita's
head: 66 %) by a one-sided test from the bootstrap, corrected over every head
(``q_value < alpha``); ``above_threshold`` keeps the untested point-estimate rule.
Heads are tested (and can be rare-word heads) only when the corpus has at least
``min_words`` attending words (``MIN_WORDS``, 100; `attnlens heads --min-examples`): on 6
words one sentence decides, and the bootstrap over 2 sentences hardly varies.

On the CPU, whole patterns are counted by a C kernel (``words_kernel``: the same word rows,
maxima, ties and float32 sums in the same order, so the same hits, in one pass per layer);
the torch path runs on GPUs, for query blocks of long inputs and without the kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from attnlens.data.rarity import WordRarity
from attnlens.data.words import WordAttentionContext, uses_kernel
from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.measures.heads.words_kernel import by_sentence, kernel_credits
from attnlens.model.transformer import HookedTransformer
from attnlens.stats.bootstrap import Inference, estimate_shares, pooled, threshold_tests
from attnlens.stream.base import Batch, PatternBlock
from attnlens.stream.blocks import flat_index
from attnlens.stream.head_patterns import HeadPatternAnalyzer
from attnlens.stream.held_layers import HeldLayers, add_to_layers
from attnlens.stream.per_sentence import PerSentenceRows, sentence_ids_of

RANKS = {"rarest": 1, "two_rarest": 2}
RARE_SELF = ("include", "exclude")
# Attending words needed before any head is tested. Power of the one-sided test of
# share_rarest > 0.5 for Voita's head (share 0.66), words taken as independent, level 0.05:
# 0.21 at 6 words, 0.77 at 50, 0.96 at 100 (docs/heads.md); the same 100 as --min-examples.
MIN_WORDS = 100


class RareWordHeads(PerSentenceRows, HeadPatternAnalyzer):
    """Streaming per-sentence counts of maximum attention landing on the rarest word(s)."""

    name = "rare_words"
    reads_blocks = True
    state_fields = ("sentences", "sentence_hits", "sentence_rows", "sentence_chance",
                    "skipped_batches")
    row_fields = ("sentence_hits", "sentence_rows", "sentence_chance")

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        rarity: WordRarity | None = None,
        threshold: float = 0.5,
        rare_self: str = "include",
        heads_per_layer: Sequence[int] | None = None,
        inference: Inference | None = None,
        words: WordAttentionContext | None = None,
        min_words: int = MIN_WORDS,
        causal: bool = False,
    ) -> None:
        if rare_self not in RARE_SELF:
            raise ConfigError(f"--rare-self must be include or exclude, not {rare_self!r}.")
        self.set_heads(heads_per_layer, n_layers, n_heads)
        self.threshold = threshold
        self.rarity = rarity if rarity is not None else WordRarity.wordfreq("en")
        self.rare_self, self.min_words = rare_self, min_words
        self.causal = causal
        self.inference = inference or Inference()
        self.words = words or WordAttentionContext()
        self.sentences: list[int] = []  # corpus index of every sentence with words
        self.sentence_hits: list[torch.Tensor] = []  # per batch [sentence, rank, layer, head]
        self.sentence_rows: list[torch.Tensor] = []  # per batch [sentence, rank] attending words
        self.sentence_chance: list[torch.Tensor] = []  # per batch [sentence, rank]
        self.skipped_batches = 0  # batches without words (word_ids), e.g. from text_batches
        self._scratch: torch.Tensor | None = None

    @classmethod
    def model_options(cls, model: HookedTransformer) -> dict:
        return {**cls.head_shape(model), "causal": bool(getattr(model.cfg, "causal", False))}

    def row_width(self, field: str) -> tuple[int, ...]:
        if field == "sentence_hits":
            return (len(RANKS), self.n_layers, self.n_heads)
        return (len(RANKS),)

    def settings(self) -> dict:
        return {"n_layers": self.n_layers, "heads_per_layer": self.heads_per_layer,
                "rarity": self.rarity.source, "threshold": self.threshold,
                "rare_self": self.rare_self, "min_words": self.min_words, "causal": self.causal,
                **self.inference.settings()}

    def _rows(self, batch: Batch) -> list[torch.Tensor]:
        """Per rank k: ``[row, 2 + k]`` (sentence, attending word, the k rarest words)."""
        per_rank: list[list[np.ndarray]] = [[] for _ in RANKS]
        # filled on the host as NumPy arrays (a tensor item write is several dispatched ops)
        rows = np.zeros((batch.size, len(RANKS)), dtype=np.float64)
        chance = np.zeros((batch.size, len(RANKS)), dtype=np.float64)
        others = 1 if self.rare_self == "exclude" else 0  # the attending word cannot win
        unaligned = batch.extra.get("unaligned") or [[] for _ in range(batch.size)]
        for b, words in enumerate(batch.words):
            # words without a token of their own (attnlens.data.alignment) take no part
            n_kept = batch.extra["n_words"][b]
            tokenless = {i for i in unaligned[b] if i < n_kept}
            kept = ["" if i in tokenless else w for i, w in enumerate(words[:n_kept])]
            order = self.rarity.rarest(kept, k=max(RANKS.values()) + 1)
            for r, k in enumerate(RANKS.values()):
                if len(order) <= k:
                    continue
                targets = order[:k]
                takes_part = np.ones(len(kept), dtype=bool)
                takes_part[targets] = False
                takes_part[list(tokenless)] = False
                attending = np.flatnonzero(takes_part)  # ascending word positions
                examples = np.empty((len(attending), 2 + k), dtype=np.int64)
                examples[:, 0], examples[:, 1], examples[:, 2:] = b, attending, targets
                per_rank[r].append(examples)  # rows (sentence, attending word, k rarest)
                rows[b, r] = len(attending)
                chance[b, r] = self._chance(attending.tolist(), targets, len(kept), others,
                                            tokenless)
        self.sentence_rows.append(torch.from_numpy(rows))
        self.sentence_chance.append(torch.from_numpy(chance))
        return [torch.from_numpy(np.concatenate(examples) if examples
                                 else np.zeros((0, 2 + k), dtype=np.int64))
                for examples, k in zip(per_rank, RANKS.values(), strict=True)]

    def _chance(self, attending: list[int], targets: list[int], n_words: int,
                others: int, tokenless: set[int]) -> float:
        """Expected hits of a head choosing uniformly among the aligned words its mask lets
        each attending word see (summed over the attending words; module docstring)."""
        if not self.causal:
            return len(attending) * len(targets) / (n_words - len(tokenless) - others)
        total = 0.0
        for i in attending:
            # aligned words 0..i (the word itself excluded with ``exclude``)
            seen = sum(1 for j in range(i + 1) if j not in tokenless) - others
            if seen > 0:
                total += sum(1 for t in targets if t <= i) / seen
        return total

    def begin_batch(self, batch: Batch) -> None:
        self._scratch = None
        if batch.word_ids is None or batch.words is None:
            self.skipped_batches += 1  # token-only corpus (text_batches): nothing to count
            return
        self.words.prepare(batch)  # word positions read once per batch
        self._at: dict = {}  # where the examples lie, per shape of word rows (``_places``)
        self.sentences += sentence_ids_of(batch, self.next_sentence_id())
        device = batch.word_ids.device
        self._examples = [r.to(device) for r in self._rows(batch)]
        self._scratch = torch.zeros(batch.size, len(RANKS), self.n_layers, self.n_heads,
                                    device=device)  # [sentence, rank, layer, head]
        self._held = HeldLayers()
        self._kernel_rows = None  # the C kernel's rows (``_kernel_count``), once per batch

    def update_block(self, batch: Batch, layer: int, block: PatternBlock,
                     cache: ActivationCache) -> None:
        if self._scratch is None:
            return
        if block.is_whole and uses_kernel(block.pattern):  # one C pass over the layer
            self._kernel_count(batch, layer, block.pattern)
            return
        wr = self.words.rows(batch, layer, block.pattern, block.query)
        if not wr.n:
            return
        if block.is_whole:  # held, then counted for several layers at once (``_fold_held``)
            self._whole_rows = wr
            if self._held.add(layer, wr.weights):
                self._fold_held()
            return
        self._count([layer], wr, whole=False)

    def _kernel_count(self, batch: Batch, layer: int, pattern: torch.Tensor) -> None:
        """Add the hits of the layer's whole pattern by the C kernel (``words_kernel``): the
        torch path's word rows, maxima, ties and sums, in one pass."""
        if self._kernel_rows is None:
            self._kernel_rows = self._rows_for_kernel(batch.size)
        if not len(self._kernel_rows[0]):
            return  # no sentence has enough words
        found = kernel_credits("rare", self.words, batch, layer, pattern, self._kernel_rows,
                               batch.size * len(RANKS), 1)  # [sentence * rank, 1, head]
        by_layer = self._scratch.permute(2, 0, 1, 3)  # [layer, batch, rank, head] (a view)
        add_to_layers(by_layer, [layer], found.view(1, batch.size, len(RANKS), -1))

    def _rows_for_kernel(self, n_batch: int) -> tuple:
        """The kernel's rows ``[row, 4 + k]`` (sentence, attending word, sentence * ranks +
        rank, k, the k rarest words; unused slots 0) by sentence, each rank's rows in their
        order, each sentence's first row, the width and the exclude flag."""
        width = 4 + max(RANKS.values())
        parts = []
        for r, ex in enumerate(self._examples):
            ex = ex.cpu().numpy()  # [row, 2 + k] (sentence, attending word, k rarest)
            k = ex.shape[1] - 2
            rows = np.zeros((len(ex), width), dtype=np.int64)
            rows[:, 0], rows[:, 1], rows[:, 2] = ex[:, 0], ex[:, 1], ex[:, 0] * len(RANKS) + r
            rows[:, 3], rows[:, 4:4 + k] = k, ex[:, 2:]
            parts.append(rows)
        rows, start = by_sentence(np.concatenate(parts), n_batch)
        return rows, start, width, int(self.rare_self == "exclude")

    def _fold_held(self) -> None:
        # word rows [batch, layer * head, word, key_word]: the layers' heads side by side
        wr = self._whole_rows
        for layers, (weights,) in self._held.take(dims=(1,)):
            self._count(layers, replace(wr, weights=weights), whole=True)

    def _count(self, layers: list[int], wr, whole: bool) -> None:
        """Add the hits of word rows ``wr`` (one layer's block, or whole patterns of several
        layers with their heads side by side) to the scratch."""
        n_padding = (~wr.valid).sum(-1)  # [batch] word slots beyond the sentence
        w = wr.weights  # [batch, head, query_word, key_word] (query words first .. first+n-1)
        n_heads = w.shape[1]
        if self.rare_self == "exclude":
            w = w.clone()
            w.diagonal(offset=wr.first, dim1=-2, dim2=-1).fill_(-1.0)  # never picks itself
        row_max = w.amax(-1)  # [batch, head, query_word]
        is_max = w >= row_max[..., None]  # == the row's maximum (none exceeds it); cheaper
        # padding words hold exactly 0: they tie only with a zero maximum; uncount them
        # (int32 counts: a bool sum's default int64 copies the whole tensor first)
        ties = is_max.sum(-1, dtype=torch.int32) - (row_max == 0) * n_padding[:, None, None]
        credit = 1.0 / ties.clamp_min(1)  # [batch, head, query_word]
        places = self._places(wr, whole)
        if places is None:
            return  # no sentence has enough words
        cells, rows, here, into, parts = places
        picked = is_max.view(-1)[cells]  # [target of an attending word, head]
        got = []
        for n_rows, n_targets, begin in parts:  # per rank: hits on any of its k rarest words
            hits = 0
            for t in range(n_targets):
                hits = hits + picked[begin + t * n_rows: begin + (t + 1) * n_rows]
            got.append(hits)
        got = torch.cat(got) * credit.view(-1)[rows] * here  # [rank's attending word, head]
        per_sentence = torch.zeros(len(self._scratch) * len(RANKS), n_heads, device=w.device)
        per_sentence.index_add_(0, into, got.to(torch.float32))  # [sentence * rank, head]
        # [batch, rank, layer, head], added into each layer's slice of the scratch
        per_sentence = per_sentence.view(-1, len(RANKS), len(layers), n_heads // len(layers))
        by_layer = self._scratch.permute(2, 0, 1, 3)  # [layer, batch, rank, head] (a view)
        add_to_layers(by_layer, layers, per_sentence.permute(2, 0, 1, 3))

    def _places(self, wr, whole: bool) -> tuple | None:
        """Where each rank's attending words and their k rarest words lie in a block's word
        rows ``wr.weights [batch, head, n, key_word]``: ``cells`` (rank by rank, target by
        target, in ``weights.reshape(-1)``), ``rows`` (the attending words' rows in ``[batch,
        head, n]``), ``here [row, 1]`` (the row is completed in this block), ``into [row]``
        (``sentence * ranks + rank``) and per rank ``(rows, targets, first cell)``; None
        without any. The same for every whole pattern of a batch with as many heads: built
        once for them."""
        key = (tuple(wr.weights.shape), wr.first)
        if whole and key in self._at:
            return self._at[key]
        shape = wr.weights.shape
        cells, rows, here, into, parts = [], [], [], [], []
        begin = 0
        for r, ex in enumerate(self._examples):
            if not len(ex):
                continue
            sent, query = ex[:, 0], ex[:, 1]
            local = (query - wr.first).clamp(0, wr.n - 1)  # the row in this block
            here.append((query >= wr.first) & (query < wr.first + wr.n) & wr.done[sent, local])
            rows.append(flat_index(shape[:3], sent, local))
            into.append(sent * len(RANKS) + r)
            n_targets = ex.shape[1] - 2
            cells += [flat_index(shape, sent, local, ex[:, 2 + t]) for t in range(n_targets)]
            parts.append((len(ex), n_targets, begin))
            begin += len(ex) * n_targets
        found = None
        if parts:
            found = (torch.cat(cells), torch.cat(rows), torch.cat(here)[:, None],
                     torch.cat(into), parts)
        if whole:
            self._at[key] = found
        return found

    def end_batch(self, batch: Batch) -> None:
        if self._held:
            self._fold_held()
        self._whole_rows = None
        if self._scratch is not None:
            self.sentence_hits.append(self._scratch)  # stays on the model's device
        self._scratch = None
        self.words.clear()

    @property
    def used_sentences(self) -> int:
        """Sentences with enough word-like words for the rarest word."""
        return int((self.field_rows("sentence_rows")[:, 0] > 0).sum())

    def head_exists(self) -> np.ndarray:
        exists = np.zeros((self.n_layers, self.n_heads), dtype=bool)
        for layer, n in enumerate(self.heads_per_layer):
            exists[layer, :n] = True
        return exists

    def result(self) -> dict[str, pd.DataFrame]:
        shape = (len(RANKS), self.n_layers, self.n_heads)
        hits = self.field_rows("sentence_hits")
        rows = self.field_rows("sentence_rows")
        chance_sum = self.field_rows("sentence_chance")
        n = len(rows)
        dens = rows[:, :, None].expand(n, len(RANKS), self.n_layers * self.n_heads)
        ids = torch.tensor(self.sentences, dtype=torch.long)
        est = estimate_shares(hits.reshape(n, -1), dens.reshape(n, -1), ids, self.inference,
                              keep_replicates=True)
        value = torch.nan_to_num(est.value.reshape(shape), nan=0.0)  # no words: share 0
        low, high = est.low.reshape(shape), est.high.reshape(shape)
        chance = torch.nan_to_num(pooled(chance_sum, rows, self.inference.pooling), nan=0.0)
        layer, head = np.nonzero(self.head_exists())
        words = int(rows[:, 0].sum())
        reps = None
        if est.reps is not None:
            reps = est.reps.reshape(-1, *shape)[:, 0, layer, head]  # [replicate, head]
        rarest = value[0, layer, head]
        enough = words >= max(self.min_words, 1)  # too few words: nothing is tested
        df = est.df.reshape(shape)[0, layer, head]  # sentences with attending words - 1
        p, q, passed = threshold_tests(rarest, reps, self.threshold, self.inference, df,
                                       testable=enough)
        table = pd.DataFrame({
            "layer": layer, "head": head, "share_rarest": rarest.numpy(),
            "ci_low": low[0, layer, head].numpy(), "ci_high": high[0, layer, head].numpy(),
            "share_two_rarest": value[1, layer, head].numpy(),
            "two_rarest_ci_low": low[1, layer, head].numpy(),
            "two_rarest_ci_high": high[1, layer, head].numpy(),
            "chance_rarest": float(chance[0]), "chance_two_rarest": float(chance[1]),
            "words": words, "sentences": int((rows[:, 0] > 0).sum()),
            "min_words": self.min_words, "threshold": self.threshold,
            "tested": ~np.isnan(p.numpy()), "p_value": p.numpy(), "q_value": q.numpy(),
            "above_threshold": (rarest >= self.threshold).numpy() & (words > 0),
            "rare_word": passed.numpy(),
        })
        return {"rare_words": table}
