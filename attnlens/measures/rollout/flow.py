"""Attention flow (Abnar & Zuidema 2020): maximum flow through the layered attention graph.

The graph has a node ``(l, i)`` for every position ``i`` at every level ``l = 0..L`` (level 0
is the input, level ``l + 1`` the output of block ``l``) and an edge ``(l + 1, i) -> (l, j)``
with capacity ``Ã_l[i, j]``, the residual-mixed, head-fused attention of rollout
(``attnlens.measures.rollout.rollout.residual_attention``). The flow of block ``l`` from position
``i`` to input token ``j`` is the maximum flow from ``(l + 1, i)`` to ``(0, j)``; as in the
paper each row is then normalised to sum 1 (``value``; the raw flow is kept as ``max_flow``).
Where rollout multiplies shares along every path, flow is limited by the narrowest cut.

Solver: ``scipy.sparse.csgraph.maximum_flow`` (Dinic's algorithm), which needs integer
capacities: each capacity is scaled by ``FLOW_SCALE = 2**28`` and rounded, so each is off by
at most ``2**-29`` (1.9e-9) and a flow value (a minimum cut's capacity) by at most ``2**-29``
times the number of edges below its source: ``(l + 1) n^2``, e.g. 1.8e-5 at 40 tokens and
6 layers (measured differences against networkx's float solver are far smaller).

Cost: ``L n^2`` maximum-flow problems on graphs of up to ``L n^2`` edges per sentence, so
flow is limited to sentences of at most ``max_tokens`` tokens (default 40); longer ones are
skipped and listed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch

from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.measures.rollout.rollout import (
    check_rollout_options,
    fuse_heads,
    matrices_table,
    residual_attention,
    token_strings,
    token_vocabulary,
)
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Batch
from attnlens.stream.head_patterns import HeadPatternAnalyzer
from attnlens.stream.per_sentence import sentence_ids_of

FLOW_SCALE = 2**28  # capacities <= 1 become integers <= 2**28; sums stay far below 2**31
FLOW_MAX_TOKENS = 40


def maximum_flow_solver():
    try:
        from scipy.sparse.csgraph import maximum_flow
    except ImportError as exc:  # scipy is an optional extra
        raise ConfigError(
            "attention flow needs scipy; install it with pip install 'attnlens[flow]'."
        ) from exc
    return maximum_flow


def flow_graph(mixed: np.ndarray, scale: int = FLOW_SCALE):
    """The layered graph of ``mixed [layer, query_pos, key_pos]`` (rows of ``Ã_l``) as an integer
    CSR matrix over nodes ``level * n + position`` (``(L + 1) n`` nodes)."""
    from scipy.sparse import csr_array

    n_layers, n, _ = mixed.shape
    level, query, key = np.nonzero(np.rint(mixed * scale) > 0)
    capacity = np.rint(mixed[level, query, key] * scale).astype(np.int32)
    sources = (level + 1) * n + query  # node (l + 1, i)
    targets = level * n + key  # node (l, j)
    size = (n_layers + 1) * n
    graph = csr_array((capacity, (sources, targets)), shape=(size, size))
    graph.sort_indices()
    return graph


def flow_values(mixed: np.ndarray, scale: int = FLOW_SCALE) -> np.ndarray:
    """Raw maximum flows ``[layer, query_pos, key_pos]``: from ``(l + 1, i)`` to ``(0, j)``."""
    maximum_flow = maximum_flow_solver()
    n_layers, n, _ = mixed.shape
    graph = flow_graph(mixed, scale)
    flows = np.zeros((n_layers, n, n))
    for layer in range(n_layers):
        for query in range(n):
            source = (layer + 1) * n + query
            for key in range(n):
                flows[layer, query, key] = maximum_flow(graph, source, key).flow_value
    return flows / scale


def normalise_rows(flows: np.ndarray) -> np.ndarray:
    """Rows divided by their sums (the paper's normalisation); all-zero rows stay zero."""
    totals = flows.sum(axis=-1, keepdims=True)
    return np.divide(flows, totals, out=np.zeros_like(flows), where=totals > 0)


def attention_flow(
    patterns, residual: float = 0.5, fusion: str = "mean", max_tokens: int = FLOW_MAX_TOKENS
) -> tuple[np.ndarray, np.ndarray]:
    """Flow of one sentence: ``patterns [layer, head, query_pos, key_pos]`` (real tokens only)
    -> (row-normalised flow, raw max-flow values), each ``[layer, query_pos, key_pos]``."""
    check_rollout_options(residual, fusion)
    layers = list(patterns)
    n = layers[0].shape[-1]
    if n > max_tokens:
        raise ConfigError(
            f"attention flow is limited to {max_tokens} tokens (this sentence has {n}); "
            "raise the limit or use rollout."
        )
    mixed = np.stack([
        residual_attention(fuse_heads(p.double(), fusion), residual).cpu().numpy() for p in layers
    ])
    raw = flow_values(mixed)
    return normalise_rows(raw), raw


class FlowAnalyzer(HeadPatternAnalyzer):
    """Attention flow of the sentences with corpus index below ``keep`` (all when None) and at
    most ``max_tokens`` tokens; longer ones are listed in ``skipped``.

    The per-layer residual-mixed attention is gathered layer by layer on the model's device;
    the flows are solved on the CPU at the end of each batch. ``vocab``
    (``rollout.token_vocabulary(tokenizer)``) holds each token id's string for the tables; it
    is not part of the state.
    """

    name = "flow"
    state_fields = ("kept", "skipped")
    host_fields = ("kept", "skipped")  # flows are solved on the CPU: their records stay there

    def __init__(
        self,
        n_layers: int,
        residual: float = 0.5,
        fusion: str = "mean",
        keep: int | None = None,
        max_tokens: int = FLOW_MAX_TOKENS,
        vocab: list[str] | None = None,
    ) -> None:
        check_rollout_options(residual, fusion)
        if max_tokens < 1:
            raise ConfigError(f"the flow length limit must be at least 1, not {max_tokens}.")
        self.n_layers, self.residual, self.fusion = n_layers, residual, fusion
        self.keep, self.max_tokens, self.vocab = keep, max_tokens, vocab
        self.kept: list[dict[str, Any]] = []
        self.skipped: list[int] = []
        self._seen = 0

    @classmethod
    def model_options(cls, model: HookedTransformer) -> dict:
        return {"n_layers": model.n_layers}  # heads are fused

    @classmethod
    def for_model(cls, model: HookedTransformer, tokenizer=None, **options) -> FlowAnalyzer:
        return super().for_model(model, vocab=token_vocabulary(tokenizer), **options)

    def settings(self) -> dict:
        return {"n_layers": self.n_layers, "residual": self.residual, "fusion": self.fusion,
                "keep": self.keep, "max_tokens": self.max_tokens}

    def begin_batch(self, batch: Batch) -> None:
        self._real = batch.attention_mask.bool()  # [batch, pos]
        self._ids = sentence_ids_of(batch, self._seen)
        self._rows = [b for b, i in enumerate(self._ids) if self.keep is None or i < self.keep]
        # the kept sentences as an index on the patterns' device, made once per batch (a
        # Python list as an index is copied to the device on every layer: a synchronisation)
        self._index = torch.tensor(self._rows, dtype=torch.long, device=self._real.device)
        self._mixed: list[torch.Tensor] = []

    def update_layer(self, batch: Batch, layer: int, cache: ActivationCache) -> None:
        if not self._rows:
            return
        pattern = cache["pattern", layer].index_select(0, self._index).double()
        # pattern: [kept, head, query, key]
        self._mixed.append(
            residual_attention(fuse_heads(pattern, self.fusion), self.residual,
                               self._real.index_select(0, self._index))
        )

    def end_batch(self, batch: Batch) -> None:
        self._seen += batch.size
        if not self._rows:
            return
        mixed = torch.stack(self._mixed, dim=1).cpu()  # [kept, layer, query_pos, key_pos]
        for k, b in enumerate(self._rows):
            positions = self._real[b].nonzero().flatten().cpu()
            if len(positions) > self.max_tokens:
                self.skipped.append(self._ids[b])
                continue
            sub = mixed[k][:, positions][:, :, positions].numpy()  # [layer, n, n]
            raw = flow_values(sub)
            ids = batch.input_ids[b].cpu()[positions].tolist()
            self.kept.append({
                "sentence": self._ids[b], "tokens": token_strings(self.vocab, ids),
                "matrices": torch.from_numpy(normalise_rows(raw)),
                "extra_columns": {"max_flow": torch.from_numpy(raw)},
            })
        self._mixed = []

    def kept_sentences(self) -> list[dict[str, Any]]:
        return sorted(self.kept, key=lambda record: record["sentence"])

    def result(self) -> dict[str, pd.DataFrame]:
        return {"flow": matrices_table(self.kept_sentences(), extra_columns=("max_flow",))}
