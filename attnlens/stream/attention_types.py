"""Analyzers on encoder-decoder models: one pass feeds every attention type's analyzers.

An analyzer written for one stack (``blocks.L.attn.hook_pattern``, ``model.n_layers``, ...)
runs unchanged on an encoder-decoder model: it is tagged with an ``attention`` type
("encoder", "decoder" or "cross") and sees that type through an ``AttentionView`` (hook names
translated, the batch as that attention's tokens: see ``stream.attention_view``). One forward
pass per batch feeds all types, layer by layer, as ``runner.run_analyzers`` does; tables are
then stacked with an ``attention`` column (``with_attention_column``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial

import pandas as pd
import torch

from attnlens.data.batch import Batch
from attnlens.errors import ConfigError
from attnlens.hooks import HookPoint
from attnlens.model.encoder_decoder import ATTENTION_TYPES
from attnlens.model.protocol import AttentionModel
from attnlens.progress import progress_bar
from attnlens.stream.attention_view import attention_views
from attnlens.stream.base import Analyzer
from attnlens.stream.feeder import LayerFeeder


def _forward(feeder: LayerFeeder, view_name: str, x: torch.Tensor, hook: HookPoint) -> None:
    feeder.save_as(view_name, x)


@torch.no_grad()
def run_by_attention(
    model: AttentionModel,
    batches: Iterable[Batch],
    analyzers: Sequence[Analyzer],
    total: int | None = None,
    show_progress: bool = True,
    description: str = "analysing",
    analyzer_threads: int | None = None,
) -> Sequence[Analyzer]:
    """Feed each analyzer its ``attention`` type's activations, one forward pass per batch
    (``analyzer_threads``: the analyzers' intra-op threads, as ``run_analyzers``)."""
    untagged = [type(a).__name__ for a in analyzers if a.attention not in ATTENTION_TYPES]
    if untagged:
        raise ConfigError(
            f"on an encoder-decoder model each analyzer needs .attention set to one of "
            f"{', '.join(ATTENTION_TYPES)}; {untagged[0]} has none."
        )
    own_passes = [type(a).__name__ for a in analyzers if a.needs_model_pass]
    if own_passes:
        raise ConfigError(
            f"{own_passes[0]} runs forward passes of its own on a single stack; it cannot "
            "run on an encoder-decoder model."
        )
    views = attention_views(model)
    feeders = {
        attention: LayerFeeder(view, [a for a in analyzers if a.attention == attention],
                               threads=analyzer_threads)
        for attention, view in views.items()
    }
    hooks = [
        (views[attention].real_name(name), partial(_forward, feeder, name))
        for attention, feeder in feeders.items()
        for name in feeder.names
    ]
    with progress_bar(description, total=total, enabled=show_progress) as advance, model.hooks(
        fwd_hooks=hooks
    ):
        for batch in batches:
            batch = batch.to(model.device)
            for attention, feeder in feeders.items():
                feeder.begin(views[attention].batch(batch))
            model(**batch.model_inputs(), return_type="hidden")
            for feeder in feeders.values():
                feeder.end()
            advance(batch.size)
    return analyzers


def with_attention_column(tables: dict[str, dict[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """``{attention: {name: table}}`` -> ``{name: table}`` with an ``attention`` first column.

    Tables keep the order in which they first appear; rows come in ``ATTENTION_TYPES`` order.
    """
    names = list(dict.fromkeys(n for per_type in tables.values() for n in per_type))
    out = {}
    for name in names:
        parts = [
            tables[attention][name].assign(attention=attention)
            for attention in ATTENTION_TYPES
            if attention in tables and name in tables[attention]
        ]
        frame = pd.concat(parts, ignore_index=True)
        out[name] = frame[["attention", *[c for c in frame.columns if c != "attention"]]]
    return out
