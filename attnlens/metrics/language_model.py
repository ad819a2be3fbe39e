"""Masked-LM loss and causal-LM perplexity on a text file (one passage per line).

Masked LM: in each line, every non-special token is masked with probability 0.15 (at least
one per line), always replaced by the mask token (no 80/10/10 mix, so the result is
deterministic). The draw depends only on the seed and the line's index, never on batching.
The metric is the mean cross-entropy over all masked tokens (nats, lower is better); an
example's loss is the mean over its own masked tokens.

Causal LM: the metric is perplexity, ``exp`` of the mean next-token cross-entropy over all
predicted tokens; an example's loss is the mean over its own tokens.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from attnlens.errors import ConfigError
from attnlens.metrics.base import LossBatch, Metric, non_special
from attnlens.model.gates import gated_forward
from attnlens.model.transformer import HookedTransformer

MASK_PROBABILITY = 0.15
IGNORE = -100


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per-example summed CE and token counts for ``logits [batch, pos, vocab]``.

    ``labels [batch, pos]`` hold target ids, ``IGNORE`` where nothing is predicted.
    Returns ``(ce_sum [batch], n_tokens [batch])``.
    """
    ce = F.cross_entropy(
        logits.float().transpose(1, 2), labels, ignore_index=IGNORE, reduction="none"
    )  # [batch, pos]
    counted = labels != IGNORE
    return (ce * counted).sum(dim=1), counted.sum(dim=1)


class _TokenLossMetric(Metric):
    """Shared machinery: batches of lines with per-token labels."""

    def __init__(self, lines: Sequence[str], tokenizer, batch_size: int = 32,
                 max_length: int = 128) -> None:
        super().__init__(list(lines), tokenizer, batch_size, max_length)

    @property
    def lines(self) -> list[str]:
        return self.examples

    def texts(self) -> list[str]:
        return self.examples

    @abstractmethod
    def _labels(self, inputs: dict[str, torch.Tensor], line_ids: list[int]):
        """(model inputs, per-token labels ``[batch, pos]``, IGNORE where not scored)."""

    def make_batch(self, chunk: list[int], number: int) -> LossBatch:
        inputs = self.tokenizer([self.examples[i] for i in chunk], max_length=self.max_length)
        inputs, labels = self._labels(inputs, chunk)
        return LossBatch(inputs, torch.arange(len(chunk)), len(chunk), target=labels)

    def _sums(self, model, batch, head_mask=None, row_gates=None):
        logits = gated_forward(model, batch.inputs, head_mask, row_gates, "logits")
        return token_cross_entropy(logits, batch.target)

    def example_losses(
        self,
        model: HookedTransformer,
        batch: LossBatch,
        head_mask: torch.Tensor | None = None,
        row_gates: torch.Tensor | None = None,
    ) -> torch.Tensor:
        ce_sum, n_tokens = self._sums(model, batch.to(model.device), head_mask, row_gates)
        return ce_sum / n_tokens.clamp_min(1)

    @torch.no_grad()
    def mean_token_loss(self, model: HookedTransformer, head_mask=None) -> float:
        total, count = 0.0, 0
        for batch in self.loss_batches():
            ce_sum, n_tokens = self._sums(model, batch.to(model.device), head_mask)
            total += float(ce_sum.double().sum())
            count += int(n_tokens.sum())
        if count == 0:
            raise ConfigError("no token to predict in the text data; use longer lines.")
        return total / count


class MaskedLMMetric(_TokenLossMetric):
    """Masked-LM cross-entropy (nats) on deterministically masked lines."""

    name = "mlm"
    label = "masked-LM loss (nats)"
    higher_is_better = False
    loss_description = "per line: mean cross-entropy over its masked tokens"

    def __init__(self, lines, tokenizer, batch_size=32, max_length=128, seed: int = 0) -> None:
        super().__init__(lines, tokenizer, batch_size, max_length)
        self.seed = seed
        if tokenizer.hf.mask_token_id is None:
            raise ConfigError("--metric mlm needs a tokenizer with a mask token.")

    def _labels(self, inputs, line_ids):
        ids = inputs["input_ids"].clone()
        labels = torch.full_like(ids, IGNORE)
        maskable = non_special(self.tokenizer, inputs)  # [batch, pos]
        for row, line in enumerate(line_ids):
            candidates = maskable[row].nonzero().flatten()
            if len(candidates) == 0:
                continue
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + line)
            draw = torch.rand(len(candidates), generator=gen)
            chosen = candidates[draw < MASK_PROBABILITY]
            if len(chosen) == 0:
                chosen = candidates[draw.argmin()][None]
            labels[row, chosen] = ids[row, chosen]
            ids[row, chosen] = self.tokenizer.hf.mask_token_id
        return {**inputs, "input_ids": ids}, labels

    def evaluate(self, model: HookedTransformer, head_mask: torch.Tensor | None = None) -> float:
        return self.mean_token_loss(model, head_mask)


class CausalLMMetric(_TokenLossMetric):
    """Perplexity of a causal LM on the lines (exp of mean next-token cross-entropy)."""

    name = "lm"
    label = "perplexity"
    higher_is_better = False
    loss_description = "per line: mean next-token cross-entropy"

    def _labels(self, inputs, line_ids):
        ids, real = inputs["input_ids"], inputs["attention_mask"].bool()
        labels = torch.full_like(ids, IGNORE)
        # The logit at position t predicts token t + 1 (when that token is real).
        labels[:, :-1] = torch.where(real[:, 1:], ids[:, 1:], IGNORE)
        return inputs, labels

    def evaluate(self, model: HookedTransformer, head_mask: torch.Tensor | None = None) -> float:
        return math.exp(self.mean_token_loss(model, head_mask))
