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

import copy
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
    # ``counts`` and ``received`` are Counters made from ``_tally``'s arrays when read
    state_fields = ("counts", "received", "pairs")

    def __init__(self, heads_per_layer: list[int], top: int = TOP_KEYS) -> None:
        self.heads_per_layer, self.top = list(heads_per_layer), top
        self.n_layers, self.n_heads = len(self.heads_per_layer), max(self.heads_per_layer)
        # per layer and token code: times among the top keys, attention received
        self._tally = CodeTally(self.n_layers)
        self.pairs: Counter = Counter()  # "layer" -> (sentence, head) pairs seen

    @property
    def counts(self) -> Counter:
        """Keys ``"layer:token_id:first|other"`` -> times among the top, first seen first."""
        return self._tally.counters()[0]

    @counts.setter
    def counts(self, value: Counter) -> None:
        self._tally = self._tally.copy()  # not in place: a shallow copy of self may share it
        self._tally.load_counts(value)

    @property
    def received(self) -> Counter:
        """The same keys -> attention received there, summed (float64, batch after batch)."""
        return self._tally.counters()[1]

    @received.setter
    def received(self, value: Counter) -> None:
        self._tally = self._tally.copy()  # (``distributed.merge_states`` loads into one)
        self._tally.load_received(value)

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
        # device once per layer), counted on the host in NumPy for every layer at once
        if not self._found:
            return
        ids, first = batch.input_ids.cpu().numpy(), self._first.cpu().numpy()
        lengths = batch.attention_mask.sum(1).cpu().numpy()
        layers = [layer for layer, _, _ in self._found]
        # [layer, batch, head, top], fewer heads (pruned layers) padded with unreal keys;
        # float64: exact for any float dtype (NumPy lacks bfloat16)
        values = _stacked([v for _, v, _ in self._found], self.n_heads, 0).double().numpy()
        positions = _stacked([i for _, _, i in self._found], self.n_heads,
                             ids.shape[1]).numpy()
        real = positions < lengths[:, None, None]  # short sentences: fewer real keys
        token = ids[np.arange(len(ids))[:, None, None], np.minimum(positions, ids.shape[1] - 1)]
        code = token * 2 + (positions == first[:, None, None])  # token, first or not
        kept, received = _once_per_pair(code, real, values)
        layer_of = np.broadcast_to(np.asarray(layers)[:, None, None, None], code.shape)
        self._tally.add(np.asarray(layers), layer_of[kept], code[kept], received[kept])
        for layer, (_, v, _) in zip(layers, self._found, strict=True):
            self.pairs[str(layer)] += v.shape[0] * v.shape[1]
        self._found = []

    def result(self) -> dict[str, pd.DataFrame]:
        return {"sink_keys": sink_key_table(self, str)}


def _stacked(tensors: list[torch.Tensor], n_heads: int, fill: int) -> torch.Tensor:
    """``[batch, head, top]`` tensors as one ``[layer, batch, n_heads, top]`` on the host,
    those of fewer heads padded with ``fill``."""
    padded = [t if t.shape[1] == n_heads else torch.nn.functional.pad(
        t, (0, 0, 0, n_heads - t.shape[1]), value=fill) for t in tensors]
    return torch.stack(padded).cpu()


def _once_per_pair(code: np.ndarray, real: np.ndarray,
                   values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each (sentence-head pair, code) once: ``code``, ``real``, ``values [..., top]`` ->
    (the real entries whose code no earlier real entry of their pair has, and there the
    attention every real entry of that code receives, summed in top order)."""
    kept, received = real.copy(), values.copy()
    for j in range(code.shape[-1]):
        for i in range(j + 1, code.shape[-1]):
            same = real[..., j] & real[..., i] & (code[..., i] == code[..., j])
            kept[..., i] &= ~same
            received[..., j] += np.where(same, values[..., i], 0.0)
    return kept, received


class CodeTally:
    """Per layer and token code: times among the top keys (``count``, int64) and attention
    received (``received``, float64, each batch's sum added once), in arrays by slot (codes
    get slots as they come); ``seen`` orders the keys as first counted (a step per batch and
    layer, then the code)."""

    def __init__(self, n_layers: int) -> None:
        self.n_layers = n_layers
        self.slot = np.full(0, -1, dtype=np.int64)  # code -> slot (-1: none yet)
        self.code = np.zeros(0, dtype=np.int64)  # slot -> code
        self.count = np.zeros((n_layers, 0), dtype=np.int64)
        self.received = np.zeros((n_layers, 0), dtype=np.float64)
        self.seen = np.zeros((n_layers, 0), dtype=np.int64)  # step of the first count
        self.step = 0
        self._counters: tuple[Counter, Counter] | None = None

    def copy(self) -> CodeTally:
        """An independent copy (the arrays copied)."""
        tally = copy.copy(self)
        for field in ("slot", "code", "count", "received", "seen"):
            setattr(tally, field, getattr(self, field).copy())
        tally._counters = None
        return tally

    def add(self, layers: np.ndarray, layer_of: np.ndarray, codes: np.ndarray,
            received: np.ndarray) -> None:
        """One batch: per entry its layer, code and attention received (in the batch's
        pair order: the sums add in that order); ``layers`` in the order they came."""
        self._counters = None
        slots = self._slots(codes)
        width = len(self.code)
        at = layer_of * width + slots  # [entry] into [layer, slot] flattened
        n_top = np.bincount(at, minlength=self.n_layers * width).reshape(self.n_layers, width)
        total = np.bincount(at, received, minlength=self.n_layers * width).reshape(
            self.n_layers, width)
        step = np.zeros(self.n_layers, dtype=np.int64)
        step[layers] = self.step + np.arange(1, len(layers) + 1)
        new = (n_top > 0) & (self.count == 0)
        self.seen[new] = np.broadcast_to(step[:, None], new.shape)[new]
        self.step += len(layers)
        self.count += n_top
        touched = n_top > 0
        self.received[touched] += total[touched]

    def _slots(self, codes: np.ndarray) -> np.ndarray:
        """Each code's slot, new codes given new slots (and the arrays' columns)."""
        top = int(codes.max(initial=-1)) + 1
        if top > len(self.slot):
            self.slot = np.concatenate([self.slot, np.full(top - len(self.slot), -1)])
        new = np.unique(codes[self.slot[codes] < 0])
        if len(new):
            self.slot[new] = len(self.code) + np.arange(len(new))
            self.code = np.concatenate([self.code, new])
            more = np.zeros((self.n_layers, len(new)), dtype=np.int64)
            self.count = np.concatenate([self.count, more], 1)
            self.seen = np.concatenate([self.seen, more], 1)
            self.received = np.concatenate([self.received, more.astype(np.float64)], 1)
        return self.slot[codes]

    def counters(self) -> tuple[Counter, Counter]:
        """(keys ``"layer:token_id:first|other"`` -> count, keys -> received) in the order the
        keys were first counted (made again after each batch)."""
        if self._counters is None:
            layer, slot = np.nonzero(self.count)
            order = np.lexsort((self.code[slot], self.seen[layer, slot]))
            layer, slot = layer[order], slot[order]
            keys = [f"{n}:{code >> 1}:{'first' if code & 1 else 'other'}"
                    for n, code in zip(layer.tolist(), self.code[slot].tolist(), strict=True)]
            self._counters = (
                Counter(dict(zip(keys, self.count[layer, slot].tolist(), strict=True))),
                Counter(dict(zip(keys, self.received[layer, slot].tolist(), strict=True))))
        return self._counters

    def load_counts(self, counts: Counter) -> None:
        """Counts saved as keys (their order: the order first counted)."""
        layer, slot = self._parse(counts)
        self.count[:] = 0
        self.count[layer, slot] = list(counts.values())
        self.seen[:] = 0
        self.seen[layer, slot] = np.arange(1, len(layer) + 1)
        self.step = len(layer)

    def load_received(self, received: Counter) -> None:
        """Attention received saved as keys (keys absent: 0.0)."""
        layer, slot = self._parse(received)
        self.received[:] = 0.0
        self.received[layer, slot] = list(received.values())

    def _parse(self, saved: Counter) -> tuple[np.ndarray, np.ndarray]:
        """The (layer, slot) of each key of ``saved``, new codes given slots."""
        self._counters = None
        parts = [key.split(":") for key in saved]
        layer = np.array([int(p[0]) for p in parts], dtype=np.int64)
        code = np.array([int(p[1]) * 2 + (p[2] == "first") for p in parts], dtype=np.int64)
        return layer, self._slots(code)


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
