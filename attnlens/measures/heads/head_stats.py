"""Clark et al. (2019) / Voita et al. (2019) per-head attention statistics, at token level.

Every measure is computed on **tokens** (so it works on plain text and on treebanks alike)
and averaged over query rows that are real, non-special tokens ([CLS]/[SEP] rows excluded).
Key columns are all real tokens, special ones included. Measures (one row per
layer/head/measure in the result):

- ``confidence``: mean maximum attention weight of a row (Voita);
- ``entropy``: mean entropy of a row, in nats;
- ``to_cls`` / ``to_sep``: mean weight on [CLS] (first special token: <s>, BOS) and on
  [SEP] (separator/end: </s>, EOS);
- ``to_punct``: mean weight on punctuation tokens (every character Unicode punctuation);
- ``to_self`` / ``to_prev`` / ``to_next``: mean weight on the token itself, the token before
  and the token after (those neighbours may be [CLS] or [SEP]);
- ``distance``: mean attention distance ``sum_j p_ij |i - j|``, in tokens.

Sums are also kept per sentence (``sentence_sums``, ``sentence_rows``), so the heads report
gives each statistic a bootstrap interval over sentences and can pool per sentence
(``attnlens.measures.heads.head_stats_tables``).
"""

from __future__ import annotations

import unicodedata

import pandas as pd
import torch
import torch.nn.functional as F

from attnlens.hooks import ActivationCache
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Batch
from attnlens.stream.head_patterns import HeadPatternAnalyzer
from attnlens.stream.per_sentence import PerSentenceRows, sentence_ids_of

MEASURES = (
    "confidence",
    "entropy",
    "to_cls",
    "to_sep",
    "to_punct",
    "to_self",
    "to_prev",
    "to_next",
    "distance",
)
SUBWORD_MARKERS = ("##", "Ġ", "▁", "Ċ")


def is_punctuation(token: str) -> bool:
    """True for tokens made only of Unicode punctuation (subword markers stripped)."""
    for marker in SUBWORD_MARKERS:
        token = token.removeprefix(marker)
    return bool(token) and all(unicodedata.category(ch).startswith("P") for ch in token)


def special_id_sets(tokenizer) -> tuple[set[int], set[int]]:
    """(ids counted as [CLS], ids counted as [SEP]) for a ``Tokenizer``."""
    hf = tokenizer.hf
    cls_ids = {i for i in (hf.cls_token_id, hf.bos_token_id) if i is not None}
    sep_ids = {i for i in (hf.sep_token_id, hf.eos_token_id) if i is not None} - cls_ids
    return cls_ids, sep_ids


def punctuation_ids(tokenizer) -> set[int]:
    """Vocabulary ids of punctuation tokens (special tokens excluded)."""
    special = tokenizer.special_ids
    return {
        i for tok, i in tokenizer.hf.get_vocab().items() if i not in special and is_punctuation(tok)
    }


class HeadStats(PerSentenceRows, HeadPatternAnalyzer):
    """Streaming token-level statistics per head (see the module docstring)."""

    name = "head_stats"
    state_fields = ("sums", "rows", "sentences", "sentence_sums", "sentence_rows")
    row_fields = ("sentence_sums", "sentence_rows")

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        cls_ids: set[int],
        sep_ids: set[int],
        punct_ids: set[int],
        heads_per_layer: list[int] | None = None,
    ) -> None:
        self.set_heads(heads_per_layer, n_layers, n_heads)
        self.cls_ids, self.sep_ids, self.punct_ids = set(cls_ids), set(sep_ids), set(punct_ids)
        self._id_sets = [  # [CLS], [SEP], punctuation ids as sorted tensors, built once
            torch.tensor(sorted(s), dtype=torch.long)
            for s in (self.cls_ids, self.sep_ids, self.punct_ids)
        ]
        self.sums = torch.zeros(len(MEASURES), n_layers, n_heads, dtype=torch.float64)
        self.rows = 0
        self.sentences: list[int] = []  # corpus index of every sentence seen
        self.sentence_sums: list[torch.Tensor] = []  # per batch [sentence, measure, layer, head]
        self.sentence_rows: list[torch.Tensor] = []  # per batch [sentence] rows counted

    @classmethod
    def for_model(cls, model: HookedTransformer, tokenizer, **options) -> HeadStats:
        cls_ids, sep_ids = special_id_sets(tokenizer)
        return super().for_model(model, cls_ids=cls_ids, sep_ids=sep_ids,
                                 punct_ids=punctuation_ids(tokenizer), **options)

    def row_width(self, field: str) -> tuple[int, ...]:
        return (len(MEASURES), self.n_layers, self.n_heads) if field == "sentence_sums" else ()

    def settings(self) -> dict:
        return {
            "n_layers": self.n_layers, "n_heads": self.n_heads,
            "heads_per_layer": self.heads_per_layer, "cls_ids": self.cls_ids,
            "sep_ids": self.sep_ids, "punct_ids": self.punct_ids,
        }

    def begin_batch(self, batch: Batch) -> None:
        self.move_state(batch.attention_mask.device)
        real = batch.attention_mask.bool()  # [batch, pos]
        rows = real & ~batch.special_mask if batch.special_mask is not None else real
        ids = batch.input_ids
        self._targets = torch.stack(
            [torch.isin(ids, s.to(ids.device)) & real for s in self._id_sets], -1
        ).to(torch.float32)  # [batch, key_pos, 3]: is [CLS], is [SEP], is punctuation
        pos = torch.arange(ids.shape[1], device=ids.device)
        self._distance = (pos[:, None] - pos[None, :]).abs().to(torch.float32)  # [query, key]
        self._row_weight = rows.to(torch.float32)[:, None, :]  # [batch, 1, query_pos]
        self.sentences += sentence_ids_of(batch, self.next_sentence_id())
        self.sentence_rows.append(rows.sum(1))  # [sentence]
        self._scratch = torch.zeros(ids.shape[0], len(MEASURES), self.n_layers, self.n_heads,
                                    device=ids.device)  # [sentence, measure, layer, head]

    def update_layer(self, batch: Batch, layer: int, cache: ActivationCache) -> None:
        p = cache["pattern", layer].float()  # [batch, head, query_pos, key_pos]
        n_heads = p.shape[1]
        to_targets = (p @ self._targets[:, None]).permute(3, 0, 1, 2)  # [3, batch, head, query]
        diag = p.diagonal(dim1=-2, dim2=-1)  # [batch, head, query_pos]: p[i, i]
        prev = F.pad(p.diagonal(offset=-1, dim1=-2, dim2=-1), (1, 0))  # p[i, i-1]
        nxt = F.pad(p.diagonal(offset=1, dim1=-2, dim2=-1), (0, 1))  # p[i, i+1]
        per_row = torch.stack(
            [
                p.amax(-1),
                torch.special.entr(p).sum(-1),  # -sum p log p, 0 log 0 = 0
                *to_targets,
                diag,
                prev,
                nxt,
                (p * self._distance).sum(-1),
            ]
        )  # [measure, batch, head, query_pos]
        per_sentence = (per_row * self._row_weight).sum(3)  # [measure, batch, head]
        self._scratch[:, :, layer, :n_heads] = per_sentence.transpose(0, 1)

    def end_batch(self, batch: Batch) -> None:
        # one transfer per batch; the per-sentence rows stay on the model's device
        self.sums += self._scratch.sum(0).double().cpu()
        self.rows += int(self.sentence_rows[-1].sum())
        self.sentence_sums.append(self._scratch)
        self._scratch = None

    def result(self) -> dict[str, pd.DataFrame]:
        means = (self.sums / max(self.rows, 1)).numpy()
        records = [
            {
                "layer": layer,
                "head": head,
                "measure": measure,
                "value": float(means[m, layer, head]),
                "level": "token",
            }
            for m, measure in enumerate(MEASURES)
            for layer in range(self.n_layers)
            for head in range(self.heads_per_layer[layer])  # only heads the model has
        ]
        return {"head_stats": pd.DataFrame.from_records(records)}
