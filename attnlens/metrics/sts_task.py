"""STS Benchmark as a pruning metric: Spearman to report, cosine MSE for gradients.

The reported number is exactly ``sts_spearman`` (the STS command's computation). Spearman is
not differentiable, so gradients come from sentence-transformers' ``CosineSimilarityLoss``:
per pair ``(cos(u, v) - score / 5) ** 2`` with ``u, v`` the mean-pooled embeddings (scores
rescaled from their ``score_range``; 0 to 5 for STS-B). It is a
sum over pairs, so each pair has its own gradient (needed for Michel's per-example |.|).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from attnlens.data.pairs import STS_RANGE
from attnlens.metrics.base import LossBatch, Metric
from attnlens.metrics.embeddings import mean_pool
from attnlens.metrics.sts import SentencePairs, read_pairs, sts_spearman
from attnlens.model.gates import gated_forward
from attnlens.model.transformer import HookedTransformer


class StsMetric(Metric):
    """Spearman x 100 between pair cosines and gold scores on sentence pairs."""

    name = "sts"
    label = "STS Spearman x100"
    higher_is_better = True
    loss_description = "per pair (cos(u, v) - score/5)^2 (CosineSimilarityLoss)"

    def __init__(
        self, pairs: SentencePairs, tokenizer, batch_size: int = 32, max_length: int = 128
    ) -> None:
        super().__init__(pairs, tokenizer, batch_size, max_length)

    @property
    def pairs(self) -> SentencePairs:
        return self.examples

    @classmethod
    def from_csv(cls, path: str | Path, tokenizer, score_range: tuple[float, float] = STS_RANGE,
                 **kwargs) -> StsMetric:
        return cls(read_pairs(path, score_range, option="--data"), tokenizer, **kwargs)

    def evaluate(self, model: HookedTransformer, head_mask: torch.Tensor | None = None) -> float:
        self.pairs.require_defined("the evaluation pairs")
        return sts_spearman(
            model, self.tokenizer, self.pairs, self.batch_size, self.max_length,
            head_mask=head_mask,
        )

    def example_lengths(self) -> list[int]:
        return [len(a) + len(b) for a, b in zip(self.pairs.first, self.pairs.second, strict=True)]

    def make_batch(self, chunk: list[int], number: int) -> LossBatch:
        p, n = self.pairs, len(chunk)
        texts = [p.first[i] for i in chunk] + [p.second[i] for i in chunk]
        return LossBatch(
            inputs=self.tokenizer(texts, max_length=self.max_length),
            row_example=torch.arange(n).repeat(2),  # [2 n]: first then second
            n_examples=n,
            target=torch.tensor(p.scaled_scores()[chunk]),  # [n]
        )

    def example_losses(
        self,
        model: HookedTransformer,
        batch: LossBatch,
        head_mask: torch.Tensor | None = None,
        row_gates: torch.Tensor | None = None,
    ) -> torch.Tensor:
        hidden = gated_forward(model, batch.inputs, head_mask, row_gates, "hidden")
        pooled = mean_pool(hidden, batch.inputs["attention_mask"])  # [2 n, d_model]
        first, second = pooled[: batch.n_examples], pooled[batch.n_examples :]
        cos = F.cosine_similarity(first, second, dim=-1)  # [n]
        return (cos - batch.target.to(cos.dtype)) ** 2

    def texts(self) -> list[str]:
        return sorted(set(self.pairs.first) | set(self.pairs.second))
