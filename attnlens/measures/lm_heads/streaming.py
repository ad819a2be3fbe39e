"""Streaming versus retrieval heads: the KV-cache view (Xiao et al. 2023; DuoAttention 2024).

A streaming head needs only the attention sinks and the recent tokens: restricted to the
first ``sink_tokens`` tokens plus the last ``window`` tokens (keys ``i - window < j <= i``
for query ``i``; in a bidirectional encoder ``|i - j| < window``), rows renormalised, its
output barely changes. Per sentence and head, ``output_error = ||(P - P_S) V||_F /
||P V||_F`` over the real query rows (``attnlens.measures.sparse.sparse``'s restricted error), then
the mean over the sentences long enough for the restriction to drop a key (``n > sink_tokens +
window``; shorter ones are exact). ``StreamingError`` runs on the corpus and on long probes.

Per key/value head (GQA, MQA): it is streaming only when every query head reading it is,
since the cache is kept per key/value head. ``kv_cache_savings``: the KV-cache memory at a
context length if only non-streaming key/value heads keep a full cache.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from attnlens.hooks import ActivationCache
from attnlens.measures.linear.linear_attention import per_query_head
from attnlens.measures.lm_heads.shares import kv_head_index
from attnlens.measures.sparse.sparse import squared_row_error
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Analyzer, Batch, PatternBlock

STREAMING_COLUMNS = ["layer", "head", "kv_head", "sink_tokens", "window", "output_error",
                     "streaming"]


def restriction(real: torch.Tensor, sink_tokens: int, window: int, causal: bool,
                queries: torch.Tensor | None = None) -> torch.Tensor:
    """``[batch, query_pos, key_pos]`` keys kept: the first ``sink_tokens`` real tokens and the
    ``window`` most recent keys (bidirectional: ``|i - j| < window``). ``queries [rows]``: only
    those query rows (a query block's positions), ``[batch, rows, key_pos]``."""
    n = real.shape[1]
    pos = torch.arange(n, device=real.device)
    rank = real.long().cumsum(1) - 1  # [batch, pos]: index among the real tokens
    sink = (rank < sink_tokens) & real  # [batch, key_pos]
    rows = pos if queries is None else queries
    offset = rows[:, None] - pos[None, :]  # [query_pos, key_pos]: i - j
    recent = (offset < window) & (offset >= 0) if causal else offset.abs() < window
    return sink[:, None, :] | recent[None]


class StreamingError(Analyzer):
    """Streaming relative output error of each head under the sink + window restriction."""

    name = "lm_streaming"
    layerwise = True
    reads_blocks = True  # squared errors and norms added block by block (update_block)
    state_fields = ("error_sums", "sentences")

    def __init__(self, heads_per_layer: list[int], sink_tokens: int = 4, window: int = 64,
                 causal: bool = True) -> None:
        self.heads_per_layer = list(heads_per_layer)
        self.n_layers, self.n_heads = len(self.heads_per_layer), max(self.heads_per_layer)
        self.sink_tokens, self.window, self.causal = sink_tokens, window, causal
        self.error_sums = torch.zeros(self.n_layers, self.n_heads, dtype=torch.float64)
        self.sentences = 0  # sentences long enough for the restriction to drop a key

    @classmethod
    def for_model(cls, model: HookedTransformer, sink_tokens: int = 4,
                  window: int = 64) -> StreamingError:
        errors = cls(model.heads_per_layer, sink_tokens, window, model.cfg.causal)
        errors.identify_model(model)
        return errors

    def hook_names(self, model: HookedTransformer) -> list[str]:
        return [f"blocks.{i}.attn.hook_{kind}" for i in range(model.n_layers)
                for kind in ("v", "pattern")]

    def settings(self) -> dict:
        return {"heads_per_layer": self.heads_per_layer, "sink_tokens": self.sink_tokens,
                "window": self.window, "causal": self.causal}

    def begin_batch(self, batch: Batch) -> None:
        self.move_state(batch.input_ids.device)
        real = batch.attention_mask.bool()  # [batch, pos]
        self._long = real.sum(1) > self.sink_tokens + self.window  # [batch]
        # no sentence longer than the padded length: a batch padded to at most
        # sink_tokens + window has no long sentence, and its errors would all count 0
        self._skip = real.shape[1] <= self.sink_tokens + self.window
        self._real = real
        self._kept = {}  # (first row, stop) -> the restriction [batch, 1, rows, key_pos], 0/1
        self._scratch = torch.zeros(self.n_layers, self.n_heads, dtype=torch.float64,
                                    device=real.device)

    def update_block(self, batch: Batch, layer: int, block: PatternBlock,
                     cache: ActivationCache) -> None:
        """This block's share of ``restricted_output_error``: squared row errors and squared
        output norms over its real query rows, per sentence and head (float64 sums)."""
        if self._skip:
            return
        p = block.p  # [batch, head, rows, key_pos]
        # [batch, head, key_pos, d], contiguous once for its two products
        values = per_query_head(cache["v", layer].float(), p.shape[1]).contiguous()
        rows = (block.start, block.stop)
        if rows not in self._kept:  # the same rows in every layer: made once per batch
            keep = restriction(self._real, self.sink_tokens, self.window, self.causal,
                               block.positions)[:, None]  # [batch, 1, rows, key_pos]
            self._kept[rows] = keep.to(p.dtype)  # p * 1.0 and p * 0.0: p * keep's numbers
        kept = p * self._kept[rows]
        full = p @ values  # [batch, head, rows, d_head_v]
        weight = block.query_rows(self._real)[:, None, :, None].to(full.dtype)
        squared = squared_row_error(full, kept @ values, kept.sum(-1), weight).double()
        full_w = full * weight
        norms = (full_w * full_w).sum(dim=(-2, -1)).double()  # [batch, head]
        if block.start == 0:
            self._squared, self._norms = squared, norms
        else:
            self._squared, self._norms = self._squared + squared, self._norms + norms

    def end_layer(self, batch: Batch, layer: int) -> None:
        if self._skip:
            return
        tiny = torch.finfo(torch.float32).tiny
        error = self._squared.sqrt() / self._norms.sqrt().clamp_min(tiny)  # [batch, head]
        self._squared = self._norms = None
        self._scratch[layer, : error.shape[1]] = (error * self._long[:, None]).sum(0)

    def end_batch(self, batch: Batch) -> None:
        if not self._skip:
            self.error_sums += self._scratch.to(self.error_sums.device)
            self.sentences += int(self._long.sum())
        self._scratch, self._kept = None, {}

    def mean_errors(self) -> np.ndarray:
        """``[layer, head]`` mean error over the long sentences (NaN when there were none)."""
        if not self.sentences:
            return np.full((self.n_layers, self.n_heads), math.nan)
        return (self.error_sums / self.sentences).cpu().numpy()

    def result(self) -> dict[str, pd.DataFrame]:
        errors = self.mean_errors()
        records = [{"layer": layer, "head": head, "output_error": float(errors[layer, head]),
                    "sentences": self.sentences}
                   for layer, n in enumerate(self.heads_per_layer) for head in range(n)]
        return {"streaming_errors": pd.DataFrame.from_records(records)}


def streaming_table(sources: dict[str, StreamingError], kv_heads_per_layer: list[int],
                    threshold: float) -> pd.DataFrame:
    """``STREAMING_COLUMNS`` (plus each source's error and sentence count): the error that
    decides is the largest over the sources that had long enough sequences; a key/value
    head is streaming when that error stays below ``threshold`` for all its query heads."""
    first = next(iter(sources.values()))
    layer = np.repeat(np.arange(first.n_layers), first.heads_per_layer)
    head = np.concatenate([np.arange(n) for n in first.heads_per_layer])
    kv = kv_head_index(first.heads_per_layer, kv_heads_per_layer, layer, head)
    table = pd.DataFrame({"layer": layer, "head": head, "kv_head": kv,
                          "sink_tokens": first.sink_tokens, "window": first.window})
    errors = []
    for name, source in sources.items():
        error = source.mean_errors()[layer, head]
        table[f"{name}_error"] = error
        table[f"{name}_sequences"] = source.sentences
        errors.append(error)
    stacked = np.vstack(errors)  # [source, head]
    measured = ~np.isnan(stacked).all(0)
    worst = np.where(measured, np.nanmax(np.where(np.isnan(stacked), -np.inf, stacked), 0),
                     np.nan)
    table.insert(5, "output_error", worst)
    below = pd.Series(measured & (np.nan_to_num(worst, nan=np.inf) < threshold))
    group = below.groupby([table["layer"], table["kv_head"]]).transform("all")
    table.insert(6, "streaming", group.to_numpy() & measured)
    table["head_below_threshold"] = below.to_numpy()
    return table


def kv_cache_savings(streaming: pd.DataFrame, context: int) -> pd.DataFrame:
    """KV-cache memory at ``context`` tokens when streaming key/value heads keep only their
    ``sink_tokens + window`` tokens and the others a full cache (same d_head everywhere).

    ``ratio`` = full / compressed memory (DuoAttention's "x times less"), ``reduction`` =
    1 - compressed / full (RazorAttention's "% less").
    """
    per_kv = streaming.groupby(["layer", "kv_head"], sort=True)["streaming"].first()
    kept = int(streaming["sink_tokens"].iloc[0] + streaming["window"].iloc[0])
    short = min(kept, context)
    n_kv, n_streaming = len(per_kv), int(per_kv.sum())
    full = n_kv * context
    compressed = n_streaming * short + (n_kv - n_streaming) * context
    return pd.DataFrame([{
        "context": context, "kv_heads": n_kv, "streaming_kv_heads": n_streaming,
        "tokens_kept_by_streaming_heads": short, "full_cache_tokens": full,
        "compressed_cache_tokens": compressed, "ratio": full / compressed if compressed else
        math.inf, "reduction": 1 - compressed / full,
    }])
