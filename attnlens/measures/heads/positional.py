"""Positional heads (Voita et al. 2019): where, relative to itself, a token attends most.

Token level. For every real, non-special query token, the maximum-attention key among the
real tokens is classified by its offset ``key_pos - query_pos`` in -3..+3 (whatever the key
is: the previous token of the first word is [CLS]), else as ``special`` ([CLS]/[SEP] further
away) or ``farther``. Ties share the credit equally (1/k each for k tied maxima),
so uniform attention spreads over every target. Counts are kept per sentence, so every
share has a bootstrap interval over sentences (``attnlens.stats.bootstrap``).

A head is *positional* when the share of its best offset in -3..+3 is above ``threshold``
(default 0.9) by a one-sided test from the bootstrap, corrected over every head
(``Inference.correction``): ``q_value < alpha``. ``above_threshold`` keeps the untested
point-estimate rule (share >= threshold).
Heads are tested (and can be positional heads) only when the corpus has at least
``min_sentences`` sentences (``MIN_SENTENCES``, 20: the bootstrap resamples sentences, and
on fewer its interval undercovers; on one sentence it has width 0 and the t test has no
degree of freedom) and at least ``min_tokens`` query tokens (``MIN_TOKENS``, 100;
`attnlens heads --min-examples`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from attnlens.hooks import ActivationCache
from attnlens.stats.bootstrap import Inference, estimate_shares, threshold_tests
from attnlens.stream.base import Batch, PatternBlock
from attnlens.stream.head_patterns import HeadPatternAnalyzer
from attnlens.stream.held_layers import HeldLayers, add_to_layers
from attnlens.stream.per_sentence import PerSentenceRows, sentence_ids_of

OFFSETS = (-3, -2, -1, 0, 1, 2, 3)
TARGETS = (*(f"{o:+d}" for o in OFFSETS), "special", "farther")
# Sentences needed before any head is tested. For a head exactly at the 0.9 threshold
# (sentences of 10 tokens, intra-sentence correlation 0 to 0.2), the 95 % interval covers
# the truth 0 % of the time on 1 sentence, 45-50 % on 2, 88-92 % on 10, 91-93 % on 20, and a
# lone head's test at 0.05 / 72 (Student's t, sentences - 1 df) passes 0 (untestable) /
# 12-32 % / 0.2-3.2 % / 0.3-2.3 % of the time (1.0-3.5 % on 20 with the normal tail of
# earlier versions; docs/heads.md; python examples/positional_min_sentences.py).
MIN_SENTENCES = 20
MIN_TOKENS = 100  # query tokens: the same 100 as --min-examples


class PositionalHeads(PerSentenceRows, HeadPatternAnalyzer):
    """Streaming per-sentence counts of the maximum-attention offset per head."""

    name = "positional"
    reads_blocks = True
    state_fields = ("sentences", "sentence_counts", "sentence_rows")
    row_fields = ("sentence_counts", "sentence_rows")

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        threshold: float = 0.9,
        heads_per_layer: Sequence[int] | None = None,
        inference: Inference | None = None,
        min_tokens: int = MIN_TOKENS,
        min_sentences: int = MIN_SENTENCES,
    ) -> None:
        self.set_heads(heads_per_layer, n_layers, n_heads)
        self.threshold = threshold
        self.min_tokens, self.min_sentences = min_tokens, min_sentences
        self.inference = inference or Inference()
        self.sentences: list[int] = []  # corpus index of every sentence seen
        # per batch: credit per target except "farther" [sentence, target, layer, head] and
        # query tokens per sentence [sentence]; both on the model's device
        self.sentence_counts: list[torch.Tensor] = []
        self.sentence_rows: list[torch.Tensor] = []

    def row_width(self, field: str) -> tuple[int, ...]:
        if field == "sentence_counts":
            return (len(TARGETS) - 1, self.n_layers, self.n_heads)
        return ()

    def settings(self) -> dict:
        return {"n_layers": self.n_layers, "heads_per_layer": self.heads_per_layer,
                "threshold": self.threshold, "min_tokens": self.min_tokens,
                "min_sentences": self.min_sentences, **self.inference.settings()}

    def begin_batch(self, batch: Batch) -> None:
        real = batch.attention_mask.bool()  # [batch, pos]
        special = batch.special_mask if batch.special_mask is not None else torch.zeros_like(real)
        self._rows = (real & ~special).to(torch.float32)  # [batch, query_pos]
        self._special_keys = (real & special)[:, None, :]  # [batch, 1, key_pos]
        self._far: dict[tuple[int, int], torch.Tensor] = {}  # per query rows (start, stop)
        self.sentences += sentence_ids_of(batch, self.next_sentence_id())
        self._scratch = torch.zeros(batch.size, len(TARGETS) - 1, self.n_layers, self.n_heads,
                                    device=real.device)  # [sentence, target, layer, head]
        self._held = HeldLayers()

    def update_block(self, batch: Batch, layer: int, block: PatternBlock,
                     cache: ActivationCache) -> None:
        # padding keys hold exactly 0 < a real row's maximum, so they never tie with it
        is_max = block.is_max  # [batch, head, rows, key_pos]
        credit = block.query_rows(self._rows)[:, None, :] / block.max_count.clamp_min(1)
        if block.is_whole:  # held, then counted for several layers at once (``_fold_held``)
            self._whole = block
            if self._held.add(layer, is_max, credit):
                self._fold_held()
            return
        self._add([layer], self._counted(block, is_max, credit))

    def _fold_held(self) -> None:
        # is_max [batch, layer * head, query_pos, key_pos], credit [batch, layer * head, rows]
        for layers, (is_max, credit) in self._held.take(dims=(1, 1)):
            self._add(layers, self._counted(self._whole, is_max, credit))

    def _counted(self, block: PatternBlock, is_max: torch.Tensor, credit: torch.Tensor
                 ) -> torch.Tensor:
        """``[batch, target, head]`` credit per target except "farther" of a block's rows
        (``is_max [batch, head, rows, key_pos]``, ``credit [batch, head, rows]``; ``head``:
        one layer's heads or several layers' side by side), each head summed over its rows."""
        counted = []  # credit: [batch, head, rows]
        for o in OFFSETS:
            hit, rows = block.diagonal_span(is_max, o)  # entries (q, q + o), their queries
            counted.append((hit * credit[..., rows]).sum(2))  # [batch, head]
        rows = (block.start, block.stop)
        far_special = self._far.get(rows)  # the same for every layer's block of these rows
        if far_special is None:  # [batch, rows, key_pos]
            far_special = self._far[rows] = (block.distance > max(OFFSETS)) & self._special_keys
        # [batch, head, rows]; int32 counts (a bool sum's int64 copies the pattern first)
        on_far_special = (is_max & far_special[:, None]).sum(-1, dtype=torch.int32)
        counted.append((on_far_special * credit).sum(2))
        return torch.stack(counted, 1)  # [batch, target, head]

    def _add(self, layers: list[int], counted: torch.Tensor) -> None:
        """``scratch[:, :, layer, :heads] += counted [batch, target, layer * head]``."""
        by_layer = self._scratch.permute(2, 0, 1, 3)  # [layer, batch, target, head] (a view)
        counted = counted.unflatten(2, (len(layers), -1))  # [batch, target, layer, head]
        add_to_layers(by_layer, layers, counted.permute(2, 0, 1, 3))

    def end_batch(self, batch: Batch) -> None:
        if self._held:
            self._fold_held()
        self._whole = None
        self.sentence_counts.append(self._scratch)
        self.sentence_rows.append(self._rows.sum(1))  # [sentence]
        self._scratch = self._rows = self._special_keys = None
        self._far = {}

    @property
    def rows(self) -> int:
        """Query tokens counted."""
        return int(sum(float(r.sum()) for r in self.sentence_rows))

    def _per_sentence(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(``[sentence, target, layer, head]`` credit incl. "farther", ``[sentence]`` rows)."""
        near = self.field_rows("sentence_counts")
        rows = self.field_rows("sentence_rows")
        farther = (rows[:, None, None] - near.sum(1)).clamp_min(0)  # the rest of each row
        return torch.cat([near, farther[:, None]], 1), rows

    def shares(self) -> torch.Tensor:
        """``[target, layer, head]`` share of queries per target (see ``TARGETS``)."""
        counts, rows = self._per_sentence()
        if not len(rows) or not float(rows.sum()):
            return torch.zeros(len(TARGETS), self.n_layers, self.n_heads, dtype=torch.float64)
        return self._estimate(counts, rows).value.reshape(counts.shape[1:])

    def _estimate(self, counts: torch.Tensor, rows: torch.Tensor, keep: bool = False):
        ids = torch.tensor(self.sentences, dtype=torch.long)
        return estimate_shares(counts.reshape(len(rows), -1), rows, ids, self.inference,
                               keep_replicates=keep)

    def head_exists(self) -> np.ndarray:
        exists = np.zeros((self.n_layers, self.n_heads), dtype=bool)
        for layer, n in enumerate(self.heads_per_layer):
            exists[layer, :n] = True
        return exists

    def result(self) -> dict[str, pd.DataFrame]:
        counts, rows = self._per_sentence()
        shape = (len(TARGETS), self.n_layers, self.n_heads)
        est = self._estimate(counts, rows, keep=True)
        value, low, high = (t.reshape(shape).numpy() for t in (est.value, est.low, est.high))
        if not float(rows.sum()):
            value = np.zeros(shape)
        layer, head = np.nonzero(self.head_exists())
        offsets = pd.DataFrame({
            "layer": np.tile(layer, len(TARGETS)), "head": np.tile(head, len(TARGETS)),
            "target": np.repeat(TARGETS, len(layer)), "share": value[:, layer, head].reshape(-1),
            "ci_low": low[:, layer, head].reshape(-1), "ci_high": high[:, layer, head].reshape(-1),
        })
        best = value[: len(OFFSETS)].argmax(0)[layer, head]  # [head] best offset index
        share = value[best, layer, head]
        reps = None
        if est.reps is not None:
            reps = est.reps.reshape(-1, *shape)[:, best, layer, head]  # [replicate, head]
        df = est.df.reshape(shape)[best, layer, head]  # sentences with query tokens - 1
        tokens, sentences = int(rows.sum()), int((rows > 0).sum())
        # too few tokens or sentences: nothing is tested
        enough = tokens >= max(self.min_tokens, 1) and sentences >= self.min_sentences
        p, q, passed = threshold_tests(torch.from_numpy(share), reps, self.threshold,
                                       self.inference, df, testable=enough)
        heads = pd.DataFrame({
            "layer": layer, "head": head, "best_offset": np.array(OFFSETS)[best],
            "share": share, "ci_low": low[best, layer, head], "ci_high": high[best, layer, head],
            "tokens": tokens, "n_sentences": sentences,
            "min_tokens": self.min_tokens, "min_sentences": self.min_sentences,
            "threshold": self.threshold, "tested": ~np.isnan(p.numpy()),  # in the family
            "p_value": p.numpy(),
            "q_value": q.numpy(), "above_threshold": share >= self.threshold,
            "positional": passed.numpy(),
        })
        return {"positional_offsets": offsets, "positional_heads": heads}
