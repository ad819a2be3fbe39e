"""Rare-word heads (Voita et al. 2019): heads whose most-attended word is the rarest one.

Word level (``attnlens.data.words``). Per sentence, words are ranked by frequency
(``WordRarity``: wordfreq English by default, or counts from a user corpus). Only words
containing a letter or a digit can be the rarest: punctuation has zero frequency in
wordfreq and would otherwise always win. Sentences need more word-like words than the
ranks asked for (at least 2 for the rarest, 3 for the two rarest).

``share_rarest``: share of attending words (every word except the rarest) whose
maximum-attention word (itself allowed) is the rarest word; ``share_two_rarest``: share of
the words outside the two rarest whose maximum lands on one of them. Ties share the credit.
``chance_*`` is the same share for a head that picks a word uniformly at random. A head is a
rare-word head when ``share_rarest >= threshold`` (default 0.5; Voita's head: 66 %).
"""

from __future__ import annotations

import pandas as pd
import torch

from attnlens.analysis.base import Analyzer, Batch, pattern_hook_names
from attnlens.data.rarity import WordRarity
from attnlens.data.words import cached_word_attention
from attnlens.hooks import ActivationCache
from attnlens.model.transformer import HookedTransformer

RANKS = {"rarest": 1, "two_rarest": 2}


class RareWordHeads(Analyzer):
    """Streaming counts of maximum attention landing on the rarest word(s) of a sentence."""

    name = "rare_words"

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        rarity: WordRarity | None = None,
        threshold: float = 0.5,
    ) -> None:
        self.n_layers, self.n_heads, self.threshold = n_layers, n_heads, threshold
        self.rarity = rarity if rarity is not None else WordRarity.wordfreq("en")
        self.hits = torch.zeros(len(RANKS), n_layers, n_heads, dtype=torch.float64)
        self.rows = torch.zeros(len(RANKS), dtype=torch.float64)
        self.chance = torch.zeros(len(RANKS), dtype=torch.float64)
        self.sentences = 0
        self.skipped_batches = 0  # batches without words (word_ids), e.g. from text_batches

    @classmethod
    def for_model(cls, model: HookedTransformer, **kwargs) -> RareWordHeads:
        return cls(model.n_layers, max(model.heads_per_layer), **kwargs)

    def hook_names(self, model: HookedTransformer) -> list[str]:
        return pattern_hook_names(model)

    def _rows(self, batch: Batch) -> list[torch.Tensor]:
        """Per rank k: ``[row, 2 + k]`` (sentence, attending word, the k rarest words)."""
        per_rank: list[list[list[int]]] = [[] for _ in RANKS]
        for b, words in enumerate(batch.words):
            kept = words[: batch.extra["n_words"][b]]
            order = self.rarity.rarest(kept, k=max(RANKS.values()) + 1)
            used = False
            for r, k in enumerate(RANKS.values()):
                if len(order) <= k:
                    continue
                targets = order[:k]
                attending = [i for i in range(len(kept)) if i not in targets]
                per_rank[r] += [[b, i, *targets] for i in attending]
                self.rows[r] += len(attending)
                self.chance[r] += len(attending) * k / len(kept)
                used = True
            self.sentences += used
        return [torch.tensor(rows, dtype=torch.long).reshape(-1, 2 + k)
                for rows, k in zip(per_rank, RANKS.values(), strict=True)]

    def update(self, batch: Batch, cache: ActivationCache) -> None:
        if batch.word_ids is None or batch.words is None:
            self.skipped_batches += 1  # token-only corpus (text_batches): nothing to count
            return
        rows = [r.to(batch.word_ids.device) for r in self._rows(batch)]
        n_padding = None
        for layer in range(self.n_layers):
            wa = cached_word_attention(cache, batch, layer)
            if n_padding is None:
                n_padding = (~wa.valid).sum(-1)  # [batch] word slots beyond the sentence
            w = wa.weights  # [batch, head, query_word, key_word]
            n_heads = w.shape[1]
            row_max = w.amax(-1)  # [batch, head, query_word]
            is_max = w == row_max[..., None]
            # padding words hold exactly 0: they tie only with a zero maximum; uncount them
            ties = is_max.sum(-1) - (row_max == 0) * n_padding[:, None, None]
            credit = 1.0 / ties.clamp_min(1)  # [batch, head, query_word]
            for r, ex in enumerate(rows):
                if not len(ex):
                    continue
                sent, query = ex[:, 0], ex[:, 1]
                hits = sum(is_max[sent, :, query, ex[:, 2 + t]] for t in range(ex.shape[1] - 2))
                got = hits * credit[sent, :, query]  # [row, head]
                self.hits[r, layer, :n_heads] += got.sum(0).double().cpu()

    def merge(self, other: RareWordHeads) -> RareWordHeads:
        self.hits += other.hits
        self.rows += other.rows
        self.chance += other.chance
        self.sentences += other.sentences
        self.skipped_batches += other.skipped_batches
        return self

    def result(self) -> dict[str, pd.DataFrame]:
        shares = (self.hits / self.rows.clamp_min(1)[:, None, None]).numpy()
        chance = (self.chance / self.rows.clamp_min(1)).numpy()
        records = []
        for layer in range(self.n_layers):
            for head in range(self.n_heads):
                rarest = float(shares[0, layer, head])
                records.append(
                    {
                        "layer": layer,
                        "head": head,
                        "share_rarest": rarest,
                        "share_two_rarest": float(shares[1, layer, head]),
                        "chance_rarest": float(chance[0]),
                        "chance_two_rarest": float(chance[1]),
                        "rare_word": bool(self.rows[0] > 0 and rarest >= self.threshold),
                        "words": int(self.rows[0]),
                        "sentences": self.sentences,
                    }
                )
        return {"rare_words": pd.DataFrame.from_records(records)}
