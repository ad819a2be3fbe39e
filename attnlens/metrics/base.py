"""The task-metric protocol used by head importance and pruning.

A ``Metric`` holds one data set (``examples``). ``evaluate(model, head_mask)`` gives the
number reported after each pruning step; ``example_losses`` gives one differentiable loss per
example, the quantity whose gradient with respect to the head gates defines importance.

The base class owns what every metric shares: the examples and their count, ``subset``
(the same metric on some examples), and ``loss_batches`` (length-sorted batches built once
and cached); a metric says how long an example is and how a chunk of examples becomes a
``LossBatch`` (``make_batch``).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attnlens.data.batch import Batch
from attnlens.data.text import length_sorted_chunks
from attnlens.errors import ConfigError
from attnlens.model.transformer import HookedTransformer


@dataclass
class LossBatch:
    """Model inputs for a group of examples; ``row_example [rows]`` maps input rows to them.

    An STS pair is two rows (its two sentences) sharing one example index.
    """

    inputs: dict[str, torch.Tensor]
    row_example: torch.Tensor  # [rows], values in 0 .. n_examples - 1
    n_examples: int
    target: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to(self, device: torch.device | str) -> LossBatch:
        def move(value):
            return value.to(device) if isinstance(value, torch.Tensor) else value

        return LossBatch(
            {k: v.to(device) for k, v in self.inputs.items()},
            self.row_example.to(device),
            self.n_examples,
            move(self.target),
            {k: move(v) for k, v in self.extra.items()},
        )


class Metric(ABC):
    """A task metric on one data set, with the differentiable loss behind its gradient."""

    name: str = "metric"
    label: str = "metric"  # axis label of the pruning chart
    higher_is_better: bool = True
    loss_description: str = ""

    def __init__(
        self, examples, tokenizer, batch_size: int = 32, max_length: int = 128
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch size must be at least 1, not {batch_size}.")
        if max_length < 4:
            raise ConfigError(f"max length must be at least 4 tokens, not {max_length}.")
        if len(examples) == 0:
            raise ConfigError(f"the {self.name} data holds no examples.")
        # A list, or a sequence-like object with ``subset(indices)`` (``SentencePairs``).
        self.examples = examples
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self._batches: list[LossBatch] | None = None

    @property
    def n_examples(self) -> int:
        """Number of examples (pairs, sentences, rows) in the data set."""
        return len(self.examples)

    def subset(self, indices) -> Metric:
        """The same metric on the examples at ``indices`` (for importance/evaluation splits)."""
        chosen = list(indices)
        part = copy.copy(self)
        if hasattr(self.examples, "subset"):
            part.examples = self.examples.subset(chosen)
        else:
            part.examples = [self.examples[i] for i in chosen]
        part._batches = None
        return part

    def example_lengths(self) -> list[int]:
        """A length per example for batching alike (default: characters of its text)."""
        return [len(text) for text in self.texts()]

    def loss_batches(self) -> list[LossBatch]:
        """The data as model-ready batches (built once, reused by every scoring pass)."""
        if self._batches is None:
            chunks = length_sorted_chunks(self.example_lengths(), self.batch_size)
            self._batches = [self.make_batch(chunk, number) for number, chunk in enumerate(chunks)]
        return self._batches

    @abstractmethod
    def make_batch(self, chunk: list[int], number: int) -> LossBatch:
        """The examples at ``chunk`` (batch ``number`` of ``loss_batches``) as a LossBatch."""

    @abstractmethod
    def evaluate(self, model: HookedTransformer, head_mask: torch.Tensor | None = None) -> float:
        """The metric with heads gated by ``head_mask [layer, head]`` (None: all heads)."""

    @abstractmethod
    def example_losses(
        self,
        model: HookedTransformer,
        batch: LossBatch,
        head_mask: torch.Tensor | None = None,
        row_gates: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One differentiable loss per example ``[n_examples]`` (lower is better)."""

    @abstractmethod
    def texts(self) -> list[str]:
        """The data's texts, for attention statistics (confidence, entropy orders)."""

    def text_batches(self) -> list[Batch]:
        """``texts()`` tokenised as analyzer batches."""
        from attnlens.data.text import text_batches

        return text_batches(self.tokenizer, self.texts(), self.batch_size, self.max_length)

    def improvement(self, value: float, baseline: float) -> float:
        """How much better ``value`` is than ``baseline`` (positive = better)."""
        return value - baseline if self.higher_is_better else baseline - value


def split_indices(n: int, eval_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Deterministic split of ``range(n)`` into (importance, evaluation) index lists.

    A seeded permutation; each part keeps the file's order. Both parts are non-empty.
    """
    if not 0.0 < eval_fraction < 1.0:
        raise ConfigError(f"evaluation fraction must be between 0 and 1, not {eval_fraction}.")
    if n < 2:
        raise ConfigError(f"cannot split {n} example(s) into importance and evaluation parts.")
    order = np.random.default_rng(seed).permutation(n)
    n_eval = min(max(1, round(n * eval_fraction)), n - 1)
    return sorted(order[n_eval:].tolist()), sorted(order[:n_eval].tolist())


def tokenize_rows(tokenizer, texts: Sequence[str], max_length: int) -> dict[str, torch.Tensor]:
    """Tokenised, padded model inputs for ``texts``."""
    return tokenizer(list(texts), max_length=max_length)


def non_special(tokenizer, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """``[batch, pos]`` True for real tokens that are not special tokens."""
    real = inputs["attention_mask"].bool()
    return real & ~tokenizer.special_mask(inputs["input_ids"])


def require_head(model: HookedTransformer, heads: tuple, metric: str) -> None:
    """Refuse a metric whose output head the model lacks."""
    if model.cfg.head not in heads:
        raise ConfigError(
            f"--metric {metric} needs a model with a {'/'.join(str(h) for h in heads)} head; "
            f"this one has head={model.cfg.head!r} (try --metric fidelity)."
        )
