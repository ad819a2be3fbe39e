"""The streaming analyzer protocol: update per batch, merge partial states, result at the end."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch

from attnlens.hooks import ActivationCache
from attnlens.model.transformer import HookedTransformer


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
    def lengths(self) -> torch.Tensor:
        """Number of real tokens per sentence ``[batch]``."""
        return self.attention_mask.sum(dim=1)


class Analyzer(ABC):
    """A streaming analysis of cached activations.

    Subclasses name the hook points they read (``hook_names``), fold each batch into a small
    state (``update``), combine two partial states (``merge``, so a corpus can be split across
    processes) and return tidy DataFrames (``result``), one row per layer/head/measure.
    """

    name: str = "analyzer"

    @abstractmethod
    def hook_names(self, model: HookedTransformer) -> list[str]:
        """The activations this analyzer reads from the cache."""

    @abstractmethod
    def update(self, batch: Batch, cache: ActivationCache) -> None:
        """Fold one batch into the running state."""

    @abstractmethod
    def merge(self, other: Analyzer) -> Analyzer:
        """Combine another analyzer's partial state into this one; return self."""

    @abstractmethod
    def result(self) -> dict[str, pd.DataFrame]:
        """Tables by name (each tidy: one row per layer/head/measure)."""


def pattern_hook_names(model: HookedTransformer) -> list[str]:
    return [f"blocks.{i}.attn.hook_pattern" for i in range(model.n_layers)]
