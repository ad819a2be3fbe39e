"""Hands each layer's activations to the analyzers that read them, as soon as they are ready.

The runner (``runner.run_analyzers``) registers ``LayerFeeder.save`` on every hook an analyzer
reads; an encoder-decoder model's attention types get one feeder each
(``attention_types.run_by_attention``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attnlens.data.batch import Batch
from attnlens.hooks import ActivationCache, HookPoint
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Analyzer, group_by_layer, layer_of


class LayerFeeder:
    """Collects one batch's activations and hands each layer to the analyzers reading it."""

    def __init__(self, model: HookedTransformer, analyzers: Sequence[Analyzer]) -> None:
        self.layerwise = [a for a in analyzers if a.layerwise]
        self.whole = [a for a in analyzers if not a.layerwise]
        # needs[i][layer] = names analyzer i reads at that layer
        self.needs = [group_by_layer(a.hook_names(model)) for a in self.layerwise]
        self.whole_names = {n for a in self.whole for n in a.hook_names(model)}
        layer_names = {n for a in self.layerwise for n in a.hook_names(model)}
        self.names = sorted(self.whole_names | layer_names)
        self.store: dict[str, torch.Tensor] = {}
        self.batch: Batch | None = None
        self.pending: list[set[int]] = []

    def begin(self, batch: Batch) -> None:
        self.batch, self.store = batch, {}
        self.pending = [set(need) for need in self.needs]
        for analyzer in self.layerwise:
            analyzer.begin_batch(batch)

    def save(self, x: torch.Tensor, hook: HookPoint) -> None:
        self.save_as(hook.name, x)

    def save_as(self, name: str, x: torch.Tensor) -> None:
        """Store ``x`` under ``name`` (the analyzers' name for it) and deliver what is ready."""
        self.store[name] = x.detach()
        self._deliver(layer_of(name))

    def _deliver(self, layer: int) -> None:
        delivered = False
        for analyzer, need, pending in zip(self.layerwise, self.needs, self.pending, strict=True):
            if layer in pending and all(n in self.store for n in need[layer]):
                pending.discard(layer)
                cache = ActivationCache({n: self.store[n] for n in need[layer]})
                analyzer.update_layer(self.batch, layer, cache)
                delivered = True
        if delivered:
            self._free(layer)

    def _free(self, layer: int) -> None:
        still_needed = {n for need, pending in zip(self.needs, self.pending, strict=True)
                        for lay in pending for n in need[lay]}
        for name in [n for n in self.store if layer_of(n) == layer]:
            if name not in still_needed and name not in self.whole_names:
                del self.store[name]

    def end(self) -> None:
        for layer in sorted({lay for pending in self.pending for lay in pending}):
            self._deliver(layer)  # layers whose names were cached but never all produced
        if self.whole:
            cache = ActivationCache({n: self.store[n] for n in self.names
                                     if n in self.whole_names and n in self.store})
            for analyzer in self.whole:
                analyzer.update(self.batch, cache)
        for analyzer in self.layerwise:
            analyzer.end_batch(self.batch)
        self.store, self.batch = {}, None
