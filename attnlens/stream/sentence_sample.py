"""A bounded sample of each batch's sentences, for analyzers whose cost the report caps.

Batches come in a shuffled order of lengths (``data.text.length_sorted_chunks``), so a few
evenly spaced sentences of every batch span all lengths.
"""

from __future__ import annotations

import torch

from attnlens.data.batch import Batch
from attnlens.errors import ConfigError


def sample_rows(size: int, n: int) -> torch.Tensor:
    """Indices of at most ``n`` of ``size`` rows, evenly spaced: ``[min(n, size)]``."""
    if n >= size:
        return torch.arange(size)
    return torch.linspace(0, size - 1, max(n, 0)).round().long()  # distinct when n <= size


def check_sample_options(per_batch: int | None, max_sentences: int | None) -> None:
    for name, value in (("per_batch", per_batch), ("max_sentences", max_sentences)):
        if value is not None and value < 1:
            raise ConfigError(f"{name} must be at least 1, not {value}.")


def sample_batch(
    batch: Batch, per_batch: int | None, remaining: int | None
) -> tuple[Batch, torch.Tensor | None]:
    """(at most ``per_batch`` and ``remaining`` sentences of ``batch``, their rows or None when
    every sentence is kept). The sample keeps the masks, word ids and ``extra['index']``."""
    size = batch.size
    n = min(size, per_batch if per_batch is not None else size,
            remaining if remaining is not None else size)
    if n >= size:
        return batch, None
    rows = sample_rows(size, max(n, 0))

    def pick(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t[rows.to(t.device)]

    extra = {}
    if "index" in batch.extra:
        extra["index"] = [batch.extra["index"][i] for i in rows.tolist()]
    sub = Batch(input_ids=pick(batch.input_ids), attention_mask=pick(batch.attention_mask),
                token_type_ids=pick(batch.token_type_ids), word_ids=pick(batch.word_ids),
                special_mask=pick(batch.special_mask), extra=extra)
    return sub, rows
