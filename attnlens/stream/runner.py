"""One forward pass per batch feeds every analyzer, layer by layer.

Layerwise analyzers receive each layer's activations from inside the forward pass, as soon
as that layer has produced everything they read, and the runner drops those activations
right after: memory holds one layer's patterns, not the whole model's. Whole-batch
analyzers (``layerwise = False``) get a cache of every activation they read once the
forward pass ends. Analyzers with forward passes of their own (``needs_model_pass``) run
them after the main pass, on the model without the runner's hooks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import suppress

import torch

from attnlens.data.batch import Batch
from attnlens.model.protocol import has_several_attention_types
from attnlens.model.transformer import HookedTransformer
from attnlens.progress import progress_bar
from attnlens.stream.base import Analyzer
from attnlens.stream.feeder import ForwardFed, LayerFeeder
from attnlens.stream.threads import analyzer_threads_setting


@torch.no_grad()
def run_analyzers(
    model: HookedTransformer,
    batches: Iterable[Batch],
    analyzers: Sequence[Analyzer],
    total: int | None = None,
    show_progress: bool = True,
    description: str = "analysing",
    analyzer_threads: int | None = None,
    stop_when_fed: bool = False,
) -> Sequence[Analyzer]:
    """Run ``model`` over ``batches`` once, feeding every analyzer what it reads.

    ``analyzer_threads``: the analyzers' intra-op threads (``stream.threads``; None: from
    ``ATTNLENS_ANALYZER_THREADS``, 0: as many as the forward).
    ``stop_when_fed``: each forward pass stops as soon as the analyzers have everything they
    read of the batch (e.g. after the last layer's patterns: its values' mix, output
    projection and MLP are not run); nothing they read changes. Not on encoder-decoder
    models (their attention types run whole forwards).

    On an encoder-decoder model every analyzer must name its ``attention`` type; it then
    reads that type as a plain stack (``stream.attention_types``).
    """
    if analyzer_threads is None:
        analyzer_threads = analyzer_threads_setting()
    if has_several_attention_types(model):
        from attnlens.stream.attention_types import run_by_attention

        return run_by_attention(model, batches, analyzers, total, show_progress, description,
                                analyzer_threads or None)
    feeder = LayerFeeder(model, analyzers, threads=analyzer_threads or None,
                         stop_when_fed=stop_when_fed)
    hooks = [(name, feeder.save) for name in feeder.names]
    own_passes = [a for a in analyzers if a.needs_model_pass]
    with progress_bar(description, total=total, enabled=show_progress) as advance:
        for batch in batches:
            batch = batch.to(model.device)
            with model.hooks(fwd_hooks=hooks):
                feeder.begin(batch)
                with suppress(ForwardFed):  # every analyzer has what it reads (stop_when_fed)
                    model(**batch.model_inputs(), return_type="hidden")
                feeder.end()
            for analyzer in own_passes:
                analyzer.model_pass(model, batch)
            advance(batch.size)
    return analyzers
