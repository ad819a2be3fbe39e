"""Per-sentence running state: rows appended batch by batch, shipped as one tensor per field.

The bootstrap over sentences (``attnlens.stats.bootstrap``) needs, per sentence, the sums
an analyzer would otherwise fold into corpus totals. ``PerSentenceRows`` keeps such fields
as lists of per-batch chunks ``[sentence, ...]`` while a run goes on (appending costs one
batch, whatever the corpus size; chunks stay on the model's device) and ships each as a
single tensor: ``state_dict`` concatenates, ``load_state_dict`` takes a tensor back and
``merge`` appends the other state's rows. Sentence identities are corpus indices
(``Batch.extra["index"]``), so a run split across processes resamples the same sentences as
a single one; when two merged states share indices (two corpora, or batches without
indices), the other state's sentences are renumbered after this one's, as distinct sentences.
"""

from __future__ import annotations

from typing import Any

import torch

from attnlens.data.batch import Batch


def sentence_ids_of(batch: Batch, fallback_start: int) -> list[int]:
    """The corpus indices of a batch's sentences (``extra["index"]``), else consecutive ones."""
    index = batch.extra.get("index") if batch.extra else None
    if index is not None:
        return [int(i) for i in index]
    return list(range(fallback_start, fallback_start + batch.size))


def cat_rows(
    chunks: list[torch.Tensor] | torch.Tensor,
    width: tuple[int, ...],
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Per-batch chunks concatenated on the CPU as ``dtype`` (``[0, *width]`` if none)."""
    if isinstance(chunks, torch.Tensor):
        chunks = [chunks]
    if not chunks:
        return torch.zeros((0, *width), dtype=dtype)
    return torch.cat([c.detach().to("cpu", dtype) for c in chunks])


class PerSentenceRows:
    """Mixin (before ``Analyzer`` in the bases) for fields of per-sentence chunks.

    Subclasses list those fields in ``row_fields`` (each also in ``state_fields``) and give
    each field's trailing shape in ``row_width(field)``; ``sentences`` (a list of corpus
    indices, one per sentence seen) must be a state field too.
    """

    row_fields: tuple[str, ...] = ()
    sentence_fields: tuple[str, ...] = ("sentences",)  # lists of corpus indices

    def row_width(self, field: str) -> tuple[int, ...]:
        raise NotImplementedError

    def field_rows(self, field: str, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """One field's rows ``[sentence, *width]`` on the CPU."""
        return cat_rows(getattr(self, field), self.row_width(field), dtype)

    def next_sentence_id(self) -> int:
        """The index given to a sentence of a batch without ``extra["index"]``."""
        return max(self.sentences, default=-1) + 1

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        for field in self.row_fields:
            chunks = getattr(self, field)
            state["state"][field] = (  # on the CPU, as every shipped state
                torch.cat([c.detach() for c in chunks]).to("cpu") if chunks
                else torch.zeros((0, *self.row_width(field)))
            )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        for field in self.row_fields:
            setattr(self, field, [getattr(self, field)])

    def merge(self, other):
        self._shift = 0
        theirs = other.sentences if type(other) is type(self) else []  # else refused below
        if set(self.sentences) & set(theirs):
            self._shift = self.next_sentence_id() - min(theirs)
        try:
            return super().merge(other)
        finally:
            del self._shift

    def _merge_field(self, field: str, mine: Any, theirs: Any) -> Any:
        if field in self.row_fields:
            return [*mine, theirs.detach().clone()]
        if field in self.sentence_fields:
            return [*mine, *(int(i) + self._shift for i in theirs)]
        return super()._merge_field(field, mine, theirs)
