"""``prune()``: every curve of a pruning run, in one process (``loop.PruneRun``) or with its
evaluations spread over ``torchrun`` processes (``spread.prune_spread``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from attnlens.measures.pruning.loop import PruneResult, PruneRun
from attnlens.measures.pruning.settings import PruneSettings
from attnlens.metrics.base import Metric
from attnlens.model.transformer import HookedTransformer


def prune(
    model: HookedTransformer,
    importance_metric: Metric,
    eval_metric: Metric,
    settings: PruneSettings | None = None,
    out_dir: str | Path | None = None,
    resume: bool = False,
    description: dict | None = None,
    show_progress: bool = False,
    on_step: Callable[[dict], None] | None = None,
    dist=None,
) -> PruneResult:
    """Run every curve of ``settings``; see ``loop``'s docstring. Returns the tables.

    ``dist`` (a ``distributed.DistContext`` under torchrun) spreads the evaluations over the
    processes (``measures.pruning.spread``); rank 0 writes the tables.
    """
    run = PruneRun(model, importance_metric, eval_metric, settings or PruneSettings(), out_dir,
                   description, show_progress, on_step)
    if dist is not None and dist.active:
        from attnlens.measures.pruning.spread import prune_spread  # torch.distributed: on demand

        return prune_spread(run, dist, resume=resume)
    return run.run(resume=resume)
