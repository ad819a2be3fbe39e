"""One batch of a corpus: the model's inputs plus what analyzers need to read them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Batch:
    """One batch of a corpus: the model's inputs plus what analyzers need to read them.

    ``word_ids [batch, pos]`` (-1 for special tokens and padding) is present for corpora of
    pre-split words (treebanks); ``words`` holds those words; ``extra`` carries per-corpus
    annotations (for example dependency heads and relations) keyed by name.
    """

    input_ids: torch.Tensor  # [batch, pos]
    attention_mask: torch.Tensor  # [batch, pos], 1 = real token
    token_type_ids: torch.Tensor | None = None
    word_ids: torch.Tensor | None = None  # [batch, pos]
    words: list[list[str]] | None = None
    special_mask: torch.Tensor | None = None  # [batch, pos], True for special tokens
    extra: dict[str, Any] = field(default_factory=dict)

    def model_inputs(self) -> dict[str, torch.Tensor]:
        inputs = {"input_ids": self.input_ids, "attention_mask": self.attention_mask}
        if self.token_type_ids is not None:
            inputs["token_type_ids"] = self.token_type_ids
        return inputs

    def to(self, device: torch.device | str) -> Batch:
        def move(t):
            return None if t is None else t.to(device)

        return Batch(
            input_ids=move(self.input_ids),
            attention_mask=move(self.attention_mask),
            token_type_ids=move(self.token_type_ids),
            word_ids=move(self.word_ids),
            words=self.words,
            special_mask=move(self.special_mask),
            extra=self.extra,
        )

    @property
    def size(self) -> int:
        """Number of sentences."""
        return int(self.input_ids.shape[0])

    @property
    def lengths(self) -> torch.Tensor:
        """Number of real tokens per sentence ``[batch]``."""
        return self.attention_mask.sum(dim=1)
