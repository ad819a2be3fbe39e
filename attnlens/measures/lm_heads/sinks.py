"""Attention sinks on the corpus (Xiao et al. 2023; Gu et al. 2024).

``SinkScores``: Gu et al.'s first-token importance per head. Per sentence, the mean over all
real query positions i (special tokens included; padding excluded) of A[i, first real
token]; then the mean over sentences (sentence pooling, whatever ``--pooling`` says), with a
bootstrap interval over sentences. The model-level Sink-rate is the share of heads whose
score exceeds eps = 0.3 (``SINK_EPSILON``, Gu et al.'s).

``SinkKeys``: sinks other than the first token (delimiters, punctuation, "massive
activation" tokens). Per sentence and head, the attention a key receives is its column mean
over the real queries; the ``TOP_KEYS`` keys receiving most are counted by token id, position
(first real token or not) and layer, with the attention they receive. The table names the
tokens by their strings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pandas as pd
import torch

from attnlens.hooks import ActivationCache
from attnlens.measures.lm_heads.shares import HeadShares, kv_heads_of
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Analyzer, Batch, PatternBlock, pattern_hook_names
from attnlens.stream.held_layers import HeldLayers, add_to_layers

SINK_EPSILON = 0.3  # Gu et al. 2024's threshold of the Sink-rate
TOP_KEYS = 3  # keys per sentence and head counted by SinkKeys
# ``PatternBlock.shared``'s key of the attention to each sentence's first real token (it
# depends on the block and its batch's mask alone)
FIRST_COLUMN = "attention to the first real token"


def first_real(attention_mask: torch.Tensor) -> torch.Tensor:
    """``[batch]`` position of each sentence's first real token."""
    return attention_mask.bool().to(torch.int8).argmax(1)


class SinkScores(HeadShares):
    """Streaming first-token importance per head (see the module docstring)."""

    name = "lm_sinks"
    measures = ("sink",)
    pooling = "sentence"  # Gu et al.: per-sentence means, then their mean

    @classmethod
    def for_model(cls, model: HookedTransformer, inference=None) -> SinkScores:
        return cls(model.heads_per_layer, kv_heads_of(model), inference)._identify(model)

    def begin_batch(self, batch: Batch) -> None:
        self.move_state(batch.input_ids.device)
        real = batch.attention_mask.bool()  # [batch, pos]
        self._first = first_real(real)  # [batch]
        self._rows = real.to(torch.float32)[:, None, :]  # [batch, 1, query_pos]
        self._index: dict[torch.Size, torch.Tensor] = {}  # first-token index per block shape
        self._held = HeldLayers()
        self._start(batch, real.sum(1))

    def update_block(self, batch: Batch, layer: int, block: PatternBlock,
                     cache: ActivationCache) -> None:
        n_heads = block.n_heads
        # [batch, head, rows]: A[i, first], read once per block for every SinkScores fed
        # (the heads section's and the language-model heads' are two instances)
        to_first = block.shared(FIRST_COLUMN, lambda: self._to_first(block.p))
        if block.is_whole:  # held, then summed for several layers at once (``_fold_held``)
            if self._held.add(layer, to_first):
                self._fold_held()
            return
        rows = block.query_rows(self._rows)  # [batch, 1, rows]
        self._scratch[:, 0, layer, :n_heads] += (to_first * rows).sum(-1)

    def _to_first(self, p: torch.Tensor) -> torch.Tensor:
        """``p [batch, head, rows, key_pos]`` at each sentence's first real key: ``[batch,
        head, rows]`` (the index expanded once per block shape)."""
        index = self._index.get(p.shape)
        if index is None:
            index = self._index[p.shape] = self._first[:, None, None, None].expand(
                -1, p.shape[1], p.shape[2], 1)
        return p.gather(-1, index)[..., 0]

    def _fold_held(self) -> None:
        """Each held layer's row sums, ``[batch, layer * head, query_pos]`` in one product and
        sum (each (sentence, head) summed over its own row as per layer), into the scratch."""
        by_layer = self._scratch[:, 0].transpose(0, 1)  # [layer, batch, head] (a view)
        for layers, (to_first,) in self._held.take(dims=(1,)):
            sums = (to_first * self._rows).sum(-1)  # [batch, layer * head]
            add_to_layers(by_layer, layers, sums.unflatten(1, (len(layers), -1)).transpose(0, 1))

    def end_batch(self, batch: Batch) -> None:
        if self._held:
            self._fold_held()
        self._finish()


class SinkKeys(Analyzer):
    """Streaming counts of the keys that receive the most attention (see the module)."""

    name = "lm_sink_keys"
    layerwise = True
    reads_blocks = True  # column sums over the real query rows, added block by block
    state_fields = ("counts", "received", "pairs")

    def __init__(self, heads_per_layer: list[int], top: int = TOP_KEYS) -> None:
        self.heads_per_layer, self.top = list(heads_per_layer), top
        self.n_layers, self.n_heads = len(self.heads_per_layer), max(self.heads_per_layer)
        # keys "layer:token_id:first|other" -> times among the top / attention received
        self.counts: Counter = Counter()
        self.received: Counter = Counter()
        self.pairs: Counter = Counter()  # "layer" -> (sentence, head) pairs seen
        self._names: dict[tuple[int, int], str] = {}  # (layer, code) -> key, made once

    @classmethod
    def for_model(cls, model: HookedTransformer, top: int = TOP_KEYS) -> SinkKeys:
        keys = cls(model.heads_per_layer, top)
        keys.identify_model(model)
        return keys

    def hook_names(self, model: HookedTransformer) -> list[str]:
        return pattern_hook_names(model)

    def settings(self) -> dict:
        return {"heads_per_layer": self.heads_per_layer, "top": self.top}

    def begin_batch(self, batch: Batch) -> None:
        real = batch.attention_mask.bool()  # [batch, pos]
        self._rows = real.to(torch.float32)  # [batch, query_pos]
        self._first = first_real(real)
        self._found: list[tuple[int, torch.Tensor, torch.Tensor]] = []

    def update_block(self, batch: Batch, layer: int, block: PatternBlock,
                     cache: ActivationCache) -> None:
        p = block.p  # [batch, head, rows, key_pos]
        rows = block.query_rows(self._rows)[:, None, :, None]  # [batch, 1, rows, 1]
        column_sums = (p * rows).sum(2)  # [batch, head, key_pos]: this block's real rows
        if block.start == 0:
            self._received = column_sums
        else:
            self._received = self._received + column_sums

    def end_layer(self, batch: Batch, layer: int) -> None:
        n_rows = self._rows.sum(1).clamp_min(1)[:, None, None]  # [batch, 1, 1]
        received = self._received / n_rows  # [batch, head, key]
        self._received = None
        top = received.topk(min(self.top, received.shape[-1]), dim=-1)  # [batch, head, top]
        self._found.append((layer, top.values, top.indices))  # read once per batch

    def end_batch(self, batch: Batch) -> None:
        # every layer's top keys in one transfer per batch (a transfer per layer waits for the
        # device once per layer); counting by key on the CPU, layer by layer. (Every layer in
        # one unique over (layer, pair, code) measured slower at 2 threads: 0.5-0.8x.)
        if not self._found:
            return
        # read on the host once, then counted in NumPy (no dispatched tensor op per layer)
        ids, first = batch.input_ids.cpu().numpy(), self._first.cpu().numpy()
        lengths = batch.attention_mask.sum(1).cpu().numpy()
        names, counts, received_by_key = self._names, self.counts, self.received
        shapes = [values.shape for _, values, _ in self._found]  # [batch, head, top] each
        ends = np.cumsum([shape.numel() for shape in shapes])[:-1]
        all_values = np.split(  # float64 (exact for any float dtype; NumPy lacks bfloat16)
            torch.cat([v.flatten() for _, v, _ in self._found]).cpu().double().numpy(), ends)
        all_positions = np.split(
            torch.cat([i.flatten() for _, _, i in self._found]).cpu().numpy(), ends)
        for (layer, _, _), shape, values, positions in zip(
                self._found, shapes, all_values, all_positions, strict=True):
            values, positions = values.reshape(shape), positions.reshape(shape)
            n, n_heads, _ = values.shape
            real = positions < lengths[:, None, None]  # short sentences: fewer real keys
            token = np.take_along_axis(ids, positions.reshape(n, -1), 1).reshape(shape)
            code = token * 2 + (positions == first[:, None, None])  # token, first or not
            pair = np.broadcast_to(np.arange(n * n_heads).reshape(n, n_heads, 1), shape)
            # (sentence-head pair, code) once, with the attention its top positions receive
            # (sums in float64, added in order as index_add_ does)
            width = int(code.max()) + 1
            keyed, inverse = np.unique((pair * width + code)[real], return_inverse=True)
            received = np.zeros(len(keyed), dtype=np.float64)
            np.add.at(received, inverse, values[real])
            codes, per_code = np.unique(keyed % width, return_inverse=True)
            n_top = np.bincount(per_code, minlength=len(codes))
            total = np.zeros(len(codes), dtype=np.float64)
            np.add.at(total, per_code, received)
            for c, count, share in zip(codes.tolist(), n_top.tolist(), total.tolist(),
                                       strict=True):
                key = names.get((layer, c)) or self._name(layer, c)
                counts[key] += count
                received_by_key[key] += share
            self.pairs[str(layer)] += n * n_heads
        self._found = []

    def _name(self, layer: int, code: int) -> str:
        """``"layer:token_id:first|other"`` of a token code (``token * 2 + first``), made once
        per run."""
        key = self._names[layer, code] = (
            f"{layer}:{code // 2}:{'first' if code % 2 else 'other'}")
        return key

    def result(self) -> dict[str, pd.DataFrame]:
        return {"sink_keys": sink_key_table(self, str)}


def sink_key_table(keys: SinkKeys, decode: Callable[[int], str],
                   limit: int = 20) -> pd.DataFrame:
    """Per layer, the ``limit`` tokens most often among a sentence's top keys.

    Columns: layer, token, position (first real token or other), n_top (sentence-head
    pairs where the token is among the top keys, once however many of its positions are),
    share_of_heads (n_top over the layer's sentence-head pairs), mean_received (the
    attention its top positions receive there, summed, averaged over those pairs).
    """
    records = []
    for key, n in keys.counts.items():
        layer, token_id, where = key.split(":")
        pairs = keys.pairs[layer]
        records.append({"layer": int(layer), "token": decode(int(token_id)),
                        "token_id": int(token_id), "position": where, "n_top": int(n),
                        "share_of_heads": n / pairs if pairs else 0.0,
                        "mean_received": keys.received[key] / n})
    columns = ["layer", "token", "token_id", "position", "n_top", "share_of_heads",
               "mean_received"]
    if not records:
        return pd.DataFrame(columns=columns)
    table = pd.DataFrame.from_records(records)[columns]
    table = table.sort_values(["layer", "n_top", "token_id"], ascending=[True, False, True],
                              kind="stable")
    return table.groupby("layer", sort=True).head(limit).reset_index(drop=True)
