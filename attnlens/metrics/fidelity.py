"""Label-free fidelity: how close the gated model's outputs stay to the unpruned model's.

Outputs are sentence embeddings (mean-pooled, L2-normalised final hidden states) for models
without a logit head, and output distributions for models with one (masked-LM, causal-LM or
classifier head):

- embeddings: the metric is the mean cosine similarity of each text's pruned embedding to
  its unpruned one (1.0 = identical, higher is better);
- distributions: the metric is the mean KL divergence KL(p_unpruned || p_pruned) in nats per
  predicted position (every real token; one per text for classifiers; lower is better).

Gradients. At the unpruned point (all gates 1) either quantity is at its optimum, so its
gradient with respect to every gate is exactly zero and cannot rank heads. The importance
pass therefore differentiates a random probe of the same quantity's second-order term:
for embeddings ``v . e(xi)`` with ``v ~ N(0, I)`` drawn per text, whose gate gradient ``g``
satisfies ``E_v g^2 = |de/dxi|^2 = 2 x (1 - cos)`` to second order; for distributions
``-log p_xi(y)`` with ``y`` sampled from the unpruned distribution, whose squared gradient
is in expectation the Fisher information, ``2 x KL`` to second order. Probes are seeded per
text (embeddings) or per batch (distributions), so scores are reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from attnlens.metrics.base import LossBatch, Metric
from attnlens.metrics.embeddings import mean_pool
from attnlens.model.gates import gated_forward
from attnlens.model.transformer import HookedTransformer

LOGIT_HEADS = ("mlm", "lm", "classifier")


class FidelityMetric(Metric):
    """Agreement of gated outputs with the reference (unpruned) model's outputs."""

    name = "fidelity"

    def __init__(self, lines: Sequence[str], tokenizer, reference: HookedTransformer,
                 batch_size: int = 32, max_length: int = 128, seed: int = 0) -> None:
        super().__init__(list(lines), tokenizer, batch_size, max_length)
        self.reference = reference
        self.seed = seed
        self.distribution = reference.cfg.head in LOGIT_HEADS
        self.higher_is_better = not self.distribution
        self.label = "KL to unpruned (nats)" if self.distribution else "cosine to unpruned"
        self.loss_description = (
            "-log p(y), y sampled from the unpruned output (Fisher probe)"
            if self.distribution
            else "v . embedding, v ~ N(0, I) per text (second-order cosine probe)"
        )

    def texts(self) -> list[str]:
        return self.examples

    def make_batch(self, chunk: list[int], number: int) -> LossBatch:
        inputs = self.tokenizer([self.examples[i] for i in chunk], max_length=self.max_length)
        batch = LossBatch(inputs, torch.arange(len(chunk)), len(chunk),
                          extra={"index": list(chunk), "number": number})
        if not self.distribution:  # embeddings are small: keep them
            batch.target = self._reference(batch).cpu()
        return batch

    def _outputs(self, model, batch, head_mask=None, row_gates=None) -> torch.Tensor:
        """Embeddings ``[batch, d_model]`` or log-probabilities ``[batch, (pos,) vocab]``."""
        if self.distribution:
            logits = gated_forward(model, batch.inputs, head_mask, row_gates, "logits")
            return F.log_softmax(logits.float(), dim=-1)
        hidden = gated_forward(model, batch.inputs, head_mask, row_gates, "hidden")
        return F.normalize(mean_pool(hidden, batch.inputs["attention_mask"]), dim=-1)

    @torch.no_grad()
    def _reference(self, batch: LossBatch) -> torch.Tensor:
        """The unpruned model's outputs (distributions are recomputed: too big to keep)."""
        if batch.target is not None:
            return batch.target
        return self._outputs(self.reference, batch.to(self.reference.device))

    def _position_weights(self, batch: LossBatch, out: torch.Tensor) -> torch.Tensor:
        """``[batch, pos]`` 1 for real tokens (token-level outputs) or ``[batch, 1]``."""
        if out.dim() == 3:
            return batch.inputs["attention_mask"].to(out.dtype)
        return torch.ones(out.shape[0], 1, dtype=out.dtype, device=out.device)

    def example_losses(self, model, batch, head_mask=None, row_gates=None) -> torch.Tensor:
        batch = batch.to(model.device)
        out = self._outputs(model, batch, head_mask, row_gates)
        if not self.distribution:
            probes = torch.stack([
                torch.randn(out.shape[-1], generator=torch.Generator().manual_seed(
                    self.seed * 1_000_003 + i), dtype=torch.float64)
                for i in batch.extra["index"]
            ]).to(out.device, out.dtype)  # [batch, d_model]
            return (probes * out).sum(-1)
        ref = self._reference(batch).to(out.device)  # [batch, (pos,) vocab] log-probabilities
        flat = ref.reshape(-1, ref.shape[-1]).exp()
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + batch.extra["number"])
        sampled = torch.multinomial(flat.cpu().double(), 1, generator=gen).view(ref.shape[:-1])
        logp = out.gather(-1, sampled.to(out.device)[..., None])[..., 0]  # [batch, (pos)]
        logp = logp if logp.dim() == 2 else logp[:, None]
        return -(logp * self._position_weights(batch, out)).sum(-1)

    @torch.no_grad()
    def evaluate(self, model: HookedTransformer, head_mask: torch.Tensor | None = None) -> float:
        total, count = 0.0, 0.0
        for batch in self.loss_batches():
            batch = batch.to(model.device)
            out = self._outputs(model, batch, head_mask)
            if self.distribution:
                ref = self._reference(batch).to(out.device)
                kl = (ref.exp() * (ref - out)).sum(-1)  # [batch, (pos)]
                kl = kl if kl.dim() == 2 else kl[:, None]
                weights = self._position_weights(batch, out)
                total += float((kl * weights).sum())
                count += float(weights.sum())
            else:
                total += float((out * self._reference(batch).to(out.device)).sum())
                count += out.shape[0]
        return total / count
