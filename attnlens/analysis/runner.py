"""One forward pass per batch feeds every analyzer."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from attnlens.analysis.base import Analyzer, Batch
from attnlens.model.transformer import HookedTransformer
from attnlens.progress import progress_bar


@torch.no_grad()
def run_analyzers(
    model: HookedTransformer,
    batches: Iterable[Batch],
    analyzers: Sequence[Analyzer],
    total: int | None = None,
    show_progress: bool = True,
    description: str = "analysing",
) -> Sequence[Analyzer]:
    """Run ``model`` over ``batches`` once, caching the union of what the analyzers read."""
    names = sorted({name for a in analyzers for name in a.hook_names(model)})
    with progress_bar(description, total=total, enabled=show_progress) as advance:
        for batch in batches:
            batch = batch.to(model.device)
            _, cache = model.run_with_cache(
                **batch.model_inputs(), names_filter=names, return_type="hidden"
            )
            for analyzer in analyzers:
                analyzer.update(batch, cache)
            advance(int(batch.input_ids.shape[0]))
    return analyzers
