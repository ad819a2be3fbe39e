"""Hands each layer's activations to the analyzers that read them, as soon as they are ready.

The runner (``runner.run_analyzers``) registers ``LayerFeeder.save`` on every hook an analyzer
reads; an encoder-decoder model's attention types get one feeder each
(``attention_types.run_by_attention``).

Patterns come a block of query rows at a time on long inputs (``save`` accepts blocks:
``attnlens.hooks.accepts_query_blocks``). Analyzers that read blocks (``reads_blocks``) get
each block as it comes (``update_block``), with one ``PatternBlock`` shared by all of them,
then ``end_layer``; analyzers that read whole patterns get the blocks put together, on inputs
up to the whole-matrix limit, and are refused above it before the forward pass (or skip the
batch: ``skips_long_inputs``). A short input's pattern is one block: nothing is put together.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attnlens.data.batch import Batch
from attnlens.hooks import ActivationCache, HookPoint, QueryBlock, accepts_query_blocks
from attnlens.model.query_blocks import DEFAULT_BLOCKS, QueryBlocks
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Analyzer, group_by_layer, layer_of
from attnlens.stream.blocks import PatternBlock
from attnlens.stream.threads import limited_threads

PATTERN_SUFFIX = "attn.hook_pattern"


class ForwardFed(Exception):
    """Raised by ``LayerFeeder.save`` (with ``stop_when_fed``) once every analyzer has what it
    reads of the batch: the rest of the forward pass would feed nobody (the runner stops it)."""


def is_pattern_name(name: str) -> bool:
    """``blocks.N.attn.hook_pattern`` (self-attention patterns, the names fed in blocks)."""
    return name.endswith(PATTERN_SUFFIX) and not name.endswith("cross_attn.hook_pattern")


class LayerFeeder:
    """Collects one batch's activations and hands each layer to the analyzers reading it."""

    def __init__(self, model: HookedTransformer, analyzers: Sequence[Analyzer],
                 blocks: QueryBlocks | None = None, threads: int | None = None,
                 stop_when_fed: bool = False) -> None:
        """``threads``: the analyzers' intra-op threads (None: the forward's; ``threads``).
        ``stop_when_fed``: ``save`` raises ``ForwardFed`` once nothing is missing."""
        self.stop_when_fed = stop_when_fed
        self.blocks = blocks or getattr(model, "query_blocks", DEFAULT_BLOCKS)
        self.threads = threads
        self.all_layerwise = [a for a in analyzers if a.layerwise]
        self.all_whole = [a for a in analyzers if not a.layerwise]
        self.analyzer_names = {id(a): a.hook_names(model) for a in analyzers}
        names = {n for a in analyzers for n in self.analyzer_names[id(a)]}
        self.names = sorted(names)
        self.store: dict[str, torch.Tensor] = {}
        self.parts: dict[str, list[torch.Tensor]] = {}  # blocks of a pattern being put together
        self.batch: Batch | None = None
        self._select(list(analyzers))

    def _select(self, active: list[Analyzer]) -> None:
        """The analyzers fed in this batch, and what each needs at every layer."""
        self.layerwise = [a for a in self.all_layerwise if a in active]
        self.whole = [a for a in self.all_whole if a in active]
        self.needs = [group_by_layer(self.analyzer_names[id(a)]) for a in self.layerwise]
        self.whole_names = {n for a in self.whole for n in self.analyzer_names[id(a)]}
        # pattern names some active analyzer needs whole (put together from blocks)
        self.assembled = set(self.whole_names)
        for analyzer, need in zip(self.layerwise, self.needs, strict=True):
            if not analyzer.reads_blocks:
                self.assembled |= {n for names in need.values() for n in names}

    def whole_length(self, analyzer: Analyzer, batch: Batch) -> int:
        """The longest input of ``batch`` whose whole pattern ``analyzer`` needs (0: none)."""
        if not any(is_pattern_name(n) for n in self.analyzer_names[id(analyzer)]):
            return 0
        return analyzer.whole_matrix_length(batch)

    def begin(self, batch: Batch) -> None:
        """Start a batch: refuse (or leave out) analyzers that need whole patterns above the
        whole-matrix limit, then ``begin_batch`` every analyzer fed."""
        with limited_threads(self.threads):
            self._begin(batch)

    def _begin(self, batch: Batch) -> None:
        active = []
        for analyzer in [*self.all_layerwise, *self.all_whole]:
            needed = self.whole_length(analyzer, batch)
            if needed > self.blocks.whole_matrix_limit:
                if analyzer.skips_long_inputs:
                    analyzer.skip_batch(batch, self.blocks.whole_matrix_limit)
                    continue
                self.blocks.check_whole(needed, f"the {analyzer.name} analysis")
            active.append(analyzer)
        self._select(active)
        self.batch, self.store, self.parts = batch, {}, {}
        self.pending = [set(need) for need in self.needs]
        for analyzer in self.layerwise:
            analyzer.begin_batch(batch)

    @accepts_query_blocks
    def save(self, x: torch.Tensor, hook: HookPoint) -> None:
        self.save_as(hook.name, x, hook.query_block, hook.pattern_rows)
        if self.stop_when_fed and self.fed:
            raise ForwardFed

    @property
    def fed(self) -> bool:
        """Whether every analyzer of this batch has all it reads: no layer pending, no
        pattern half put together, every name a whole-batch analyzer reads stored."""
        return (not any(self.pending) and not self.parts
                and all(n in self.store for n in self.whole_names))

    def save_as(self, name: str, x: torch.Tensor, query: QueryBlock | None = None,
                recompute=None) -> None:
        """Store ``x`` under ``name`` (the analyzers' name for it) and deliver what is ready.

        ``query``: the query rows ``x`` holds when it is a block of a pattern (None: all);
        ``recompute``: the model's function giving any rows of that pattern again."""
        with limited_threads(self.threads):
            self._save_as(name, x, query, recompute)

    def _save_as(self, name: str, x: torch.Tensor, query: QueryBlock | None,
                 recompute) -> None:
        x = x.detach()
        layer = layer_of(name)
        if not is_pattern_name(name):
            self.store[name] = x
            self._deliver(layer)
            return
        if query is None:
            query = QueryBlock(0, x.shape[-2], x.shape[-2])
        self._feed_block(name, layer, PatternBlock(x, query, layer, recompute))
        if name in self.assembled:
            if query.is_whole:
                self.store[name] = x
            else:
                self.parts.setdefault(name, []).append(x)
                if query.is_last:
                    self.store[name] = torch.cat(self.parts.pop(name), dim=-2)
        if query.is_last:
            self._end_layer(name, layer)
            self._deliver(layer)

    def _feed_block(self, name: str, layer: int, block: PatternBlock) -> None:
        for analyzer, need in zip(self.layerwise, self.needs, strict=True):
            if analyzer.reads_blocks and name in need.get(layer, ()):
                others = [n for n in need[layer] if n != name]
                missing = [n for n in others if n not in self.store]
                if missing:
                    raise TypeError(f"{type(analyzer).__name__} reads blocks of {name} and "
                                    f"{', '.join(missing)}, which come after the pattern.")
                cache = ActivationCache({n: self.store[n] for n in others})
                analyzer.update_block(self.batch, layer, block, cache)

    def _end_layer(self, name: str, layer: int) -> None:
        ended = False
        for analyzer, need, pending in zip(self.layerwise, self.needs, self.pending,
                                           strict=True):
            if analyzer.reads_blocks and name in need.get(layer, ()) and layer in pending:
                pending.discard(layer)
                analyzer.end_layer(self.batch, layer)
                ended = True
        if ended:
            self._free(layer)

    def _deliver(self, layer: int) -> None:
        delivered = False
        for analyzer, need, pending in zip(self.layerwise, self.needs, self.pending, strict=True):
            if analyzer.reads_blocks and any(is_pattern_name(n) for n in need.get(layer, ())):
                continue  # fed by _feed_block
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
        with limited_threads(self.threads):
            self._end()

    def _end(self) -> None:
        for layer in sorted({lay for pending in self.pending for lay in pending}):
            self._deliver(layer)  # layers whose names were cached but never all produced
        if self.whole:
            cache = ActivationCache({n: self.store[n] for n in self.names
                                     if n in self.whole_names and n in self.store})
            for analyzer in self.whole:
                analyzer.update(self.batch, cache)
        for analyzer in self.layerwise:
            analyzer.end_batch(self.batch)
        self.store, self.parts, self.batch = {}, {}, None
