"""A bounded sample of a corpus's sentences, for analyzers whose cost the report caps.

The sample is taken by corpus index (``Batch.extra["index"]`` and ``["corpus_size"]``, set
by ``data.text`` and ``data.words``): of a corpus of ``S`` sentences, the ``N`` evenly spaced
ones ``floor(j S / N)``, ``j = 0 .. N-1`` (``spread_sample``), whatever the batching, the
batch order or the number of processes. Without a corpus size the first ``N`` indices are
taken; without indices, the first ``N`` sentences seen. An optional ``per_batch`` bound
(at most that many evenly spaced sampled sentences of each batch) depends on the batching:
`attnlens analyze` does not use it.
"""

from __future__ import annotations

import torch

from attnlens.data.batch import Batch
from attnlens.errors import ConfigError
from attnlens.stream.per_sentence import sentence_ids_of


def sample_rows(size: int, n: int) -> torch.Tensor:
    """Indices of at most ``n`` of ``size`` rows, evenly spaced: ``[min(n, size)]``."""
    if n >= size:
        return torch.arange(size)
    return torch.linspace(0, size - 1, max(n, 0)).round().long()  # distinct when n <= size


def spread_sample(index: torch.Tensor, n: int, size: int | None) -> torch.Tensor:
    """True where a corpus index belongs to the ``n`` of ``size`` sentences evenly spaced by
    index, ``floor(j size / n)`` for ``j < n`` (every index when ``n >= size``); the first
    ``n`` indices when ``size`` is unknown. ``index [batch]`` int64 -> ``[batch]`` bool."""
    if size is None:
        return index < n
    if n >= size:
        return torch.ones_like(index, dtype=torch.bool)
    j = (index * n + size - 1) // size  # the one j whose floor(j size / n) can be the index
    return (j < n) & (j * size // n == index)


def check_sample_options(per_batch: int | None, max_sentences: int | None) -> None:
    for name, value in (("per_batch", per_batch), ("max_sentences", max_sentences)):
        if value is not None and value < 1:
            raise ConfigError(f"{name} must be at least 1, not {value}.")


def sampled_rows(batch: Batch, per_batch: int | None, max_sentences: int | None,
                 seen: int) -> torch.Tensor | None:
    """Rows ``[k]`` (host, int64, increasing) of ``batch``'s sentences in the sample: those
    in the corpus sample of ``max_sentences`` (``spread_sample``), then at most ``per_batch``
    of them evenly spaced; None when every sentence is kept. ``seen``: sentences of the
    corpus fed before this batch (the fallback indices of a batch without ``extra['index']``).
    """
    rows = None
    if max_sentences is not None:
        ids = torch.tensor(sentence_ids_of(batch, seen), dtype=torch.long)
        keep = spread_sample(ids, max_sentences, batch.extra.get("corpus_size"))
        if not bool(keep.all()):
            rows = torch.nonzero(keep).flatten()
    if per_batch is not None:
        size = batch.size if rows is None else len(rows)
        if per_batch < size:
            picked = sample_rows(size, per_batch)
            rows = picked if rows is None else rows[picked]
    return rows


def pick_rows(batch: Batch, rows: torch.Tensor | None) -> Batch:
    """The sentences ``rows`` of ``batch`` (all when None): masks, word ids, words and the
    per-sentence ``extra`` entries (lists or tensors of one value per sentence: ``index``,
    ``n_words``, dependency heads...) follow; other entries (``corpus_size``) are kept."""
    if rows is None:
        return batch

    def pick(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t[rows.to(t.device)]

    chosen = rows.tolist()
    size = batch.size
    extra = {}
    for name, value in batch.extra.items():
        if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == size:
            extra[name] = pick(value)
        elif isinstance(value, list | tuple) and len(value) == size:
            extra[name] = type(value)(value[i] for i in chosen)
        else:
            extra[name] = value
    words = None if batch.words is None else [batch.words[i] for i in chosen]
    return Batch(input_ids=pick(batch.input_ids), attention_mask=pick(batch.attention_mask),
                 token_type_ids=pick(batch.token_type_ids), word_ids=pick(batch.word_ids),
                 words=words, special_mask=pick(batch.special_mask), extra=extra)


def sample_batch(
    batch: Batch, per_batch: int | None, max_sentences: int | None, seen: int
) -> tuple[Batch, torch.Tensor | None]:
    """(the sampled sentences of ``batch`` (``sampled_rows``), their rows or None when every
    sentence is kept). The sample keeps the masks, word ids and ``extra['index']``."""
    rows = sampled_rows(batch, per_batch, max_sentences, seen)
    return pick_rows(batch, rows), rows
