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
"""

from __future__ import annotations

import unicodedata

import pandas as pd
import torch
import torch.nn.functional as F

from attnlens.analysis.base import Analyzer, Batch, pattern_hook_names
from attnlens.hooks import ActivationCache
from attnlens.model.transformer import HookedTransformer

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


class HeadStats(Analyzer):
    """Streaming token-level statistics per head (see the module docstring)."""

    name = "head_stats"
    layerwise = True
    state_fields = ("sums", "rows")

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        cls_ids: set[int],
        sep_ids: set[int],
        punct_ids: set[int],
        heads_per_layer: list[int] | None = None,
    ) -> None:
        self.n_layers, self.n_heads = n_layers, n_heads
        # Structurally pruned models have fewer heads in some layers: only those are reported.
        self.heads_per_layer = list(heads_per_layer or [n_heads] * n_layers)
        self.cls_ids, self.sep_ids, self.punct_ids = set(cls_ids), set(sep_ids), set(punct_ids)
        self._id_sets = [  # [CLS], [SEP], punctuation ids as sorted tensors, built once
            torch.tensor(sorted(s), dtype=torch.long)
            for s in (self.cls_ids, self.sep_ids, self.punct_ids)
        ]
        self.sums = torch.zeros(len(MEASURES), n_layers, n_heads, dtype=torch.float64)
        self.rows = torch.zeros((), dtype=torch.float64)  # query rows counted (a device scalar)

    @classmethod
    def for_model(cls, model: HookedTransformer, tokenizer) -> HeadStats:
        cls_ids, sep_ids = special_id_sets(tokenizer)
        stats = cls(model.n_layers, max(model.heads_per_layer), cls_ids, sep_ids,
                    punctuation_ids(tokenizer), heads_per_layer=model.heads_per_layer)
        stats.identify_model(model)
        return stats

    def hook_names(self, model: HookedTransformer) -> list[str]:
        return pattern_hook_names(model)

    def settings(self) -> dict:
        return {
            "n_layers": self.n_layers, "n_heads": self.n_heads, "cls_ids": self.cls_ids,
            "sep_ids": self.sep_ids, "punct_ids": self.punct_ids,
            "heads_per_layer": self.heads_per_layer,
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
        self.rows = self.rows + rows.sum()

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
        totals = (per_row * self._row_weight).sum(dim=(1, 3))  # [measure, head]
        self.sums[:, layer, :n_heads] += totals.double()

    def result(self) -> dict[str, pd.DataFrame]:
        means = (self.sums.cpu() / self.rows.cpu().clamp_min(1)).numpy()
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
            for head in range(self.heads_per_layer[layer])
        ]
        return {"head_stats": pd.DataFrame.from_records(records)}
