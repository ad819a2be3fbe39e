"""Causal checks: ablate a role's heads and, as the control, as many random heads.

For a role with heads ``H`` (its top-k by score), the metric is measured on the intact model
(``baseline``), with ``H`` ablated (``ablated``), and with ``n_random`` sets of ``k`` random
heads ablated (the controls), each drawn from the layers of ``H`` (one head from the layer
of each head of ``H``, never a head of the role; from any layer when a layer has no other
head). ``p`` is the one-sided permutation p-value ``(1 + #{controls at least as harmful}) /
(1 + n_random)``: small when the role's heads matter more than random heads of the same
layers. ``random_low`` / ``random_high`` are the smallest and largest control values.

Ablation: ``zero`` multiplies the heads' outputs by 0 through the model's head mask
(``attnlens.model.gates.full_mask``, the pruning gates); ``mean`` replaces each head's output
``z`` by its mean over the real tokens of reference inputs (``head_means``), at ``hook_z``.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from attnlens.model.gates import full_mask
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Batch

ABLATION_COLUMNS = ["role", "k", "metric", "baseline", "ablated", "random_mean", "random_low",
                    "random_high", "n_random", "p"]
Head = tuple[int, int]
# metric(head_mask) -> value; ``higher_is_worse`` tells which direction harms
MetricFn = Callable[[torch.Tensor | None], float]


@dataclass(frozen=True)
class CausalMetric:
    """A metric of the causal checks: its name, how to compute it, which way is harm."""

    name: str
    evaluate: MetricFn
    higher_is_worse: bool = True


def control_sets(role_heads: Sequence[Head], heads_per_layer: Sequence[int], n: int,
                 seed: int) -> list[list[Head]]:
    """``n`` random head sets matching ``role_heads`` layer by layer (see module)."""
    rng = random.Random(seed)
    role = set(role_heads)
    everyone = [(layer, h) for layer, count in enumerate(heads_per_layer) for h in range(count)]
    others = [head for head in everyone if head not in role]
    draws = []
    for _ in range(n):
        chosen: list[Head] = []
        for layer, _ in role_heads:
            pool = [(la, h) for la, h in others if la == layer and (la, h) not in chosen]
            pool = pool or [head for head in others if head not in chosen]
            if not pool:
                return []  # not enough heads outside the role for a control set
            chosen.append(rng.choice(pool))
        draws.append(sorted(chosen))
    return draws


def ablation_mask(model: HookedTransformer, heads: Sequence[Head]) -> torch.Tensor:
    """The model's head mask ``[layer, head]`` with ``heads`` set to 0."""
    mask = full_mask(model)
    for layer, head in heads:
        mask[layer, head] = 0.0
    return mask


@torch.no_grad()
def head_means(model: HookedTransformer, batches: Sequence[Batch]) -> list[torch.Tensor]:
    """Per layer, ``[head, d_head_v]``: each head's mean output ``z`` over real tokens."""
    sums = [torch.zeros(n, block.attn.d_head_v, dtype=torch.float64, device=model.device)
            for n, block in zip(model.heads_per_layer, model.blocks, strict=True)]
    count = 0
    current: dict[str, torch.Tensor] = {}

    def keep(z: torch.Tensor, hook) -> None:
        current[hook.name] = z.detach()

    hooks = [(f"blocks.{i}.attn.hook_z", keep) for i in range(model.n_layers)]
    for batch in batches:
        batch = batch.to(model.device)
        real = batch.attention_mask.to(torch.float64)[:, :, None, None]  # [batch, pos, 1, 1]
        with model.hooks(fwd_hooks=hooks):
            model(**batch.model_inputs(), return_type="hidden")
        for layer in range(model.n_layers):
            z = current[f"blocks.{layer}.attn.hook_z"].double()  # [batch, pos, head, d_head_v]
            sums[layer] += (z * real).sum((0, 1))
        count += int(batch.attention_mask.sum())
    return [s / max(count, 1) for s in sums]


@contextlib.contextmanager
def mean_ablated(model: HookedTransformer, heads: Sequence[Head],
                 means: list[torch.Tensor]) -> Iterator[None]:
    """Inside the block, ``heads`` output their mean ``z`` (``head_means``) at ``hook_z``."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    hooks = []
    for layer, chosen in by_layer.items():
        index = torch.tensor(chosen, device=model.device)

        def replace(z: torch.Tensor, hook, index=index, mean=means[layer]) -> torch.Tensor:
            z = z.clone()  # [batch, pos, head, d_head_v]
            z[:, :, index] = mean[index].to(z.dtype)
            return z

        hooks.append((f"blocks.{layer}.attn.hook_z", replace))
    with model.hooks(fwd_hooks=hooks):
        yield


def ablate(model: HookedTransformer, metric: CausalMetric, heads: Sequence[Head], mode: str,
           means: list[torch.Tensor] | None = None) -> float:
    """The metric with ``heads`` ablated (``zero`` or ``mean``)."""
    if mode == "mean":
        with mean_ablated(model, heads, means):
            return metric.evaluate(None)
    return metric.evaluate(ablation_mask(model, heads))


def ablation_rows(model: HookedTransformer, roles: dict[str, list[Head]],
                  metrics: Sequence[CausalMetric], controls: int, seed: int,
                  mode: str = "zero", means: list[torch.Tensor] | None = None) -> list[dict]:
    """One ``ABLATION_COLUMNS`` record per role with heads and metric (see module).

    A head set is evaluated once per metric, however many roles or control draws name it.
    """
    records = []
    for metric in metrics:
        seen: dict[frozenset, float] = {}

        def value(heads: Sequence[Head], metric: CausalMetric = metric,
                  seen: dict = seen) -> float:
            key = frozenset(heads)
            if key not in seen:
                seen[key] = ablate(model, metric, heads, mode, means) if heads else \
                    metric.evaluate(None)
            return seen[key]

        baseline = value(())
        for role, heads in roles.items():
            if not heads:
                continue
            ablated = value(heads)
            draws = control_sets(heads, model.heads_per_layer, controls, seed)
            values = torch.tensor([value(d) for d in draws], dtype=torch.float64)
            sign = 1.0 if metric.higher_is_worse else -1.0
            harmful = int((sign * values >= sign * ablated).sum())
            records.append({
                "role": role, "k": len(heads), "metric": metric.name, "baseline": baseline,
                "ablated": ablated,
                "random_mean": float(values.mean()) if len(values) else float("nan"),
                "random_low": float(values.min()) if len(values) else float("nan"),
                "random_high": float(values.max()) if len(values) else float("nan"),
                "n_random": len(values),
                "p": (1 + harmful) / (1 + len(values)) if len(values) else float("nan"),
            })
    return records


@torch.no_grad()
def corpus_perplexity(model: HookedTransformer, batches: Sequence[Batch],
                      head_mask: torch.Tensor | None = None) -> float:
    """Perplexity of a causal LM on ``batches``: ``exp`` of the mean next-token
    cross-entropy over every real next token (``metrics.language_model.CausalLMMetric``'s
    definition, on token batches)."""
    total, count = 0.0, 0
    for batch in batches:
        batch = batch.to(model.device)
        logits = model(**batch.model_inputs(), head_mask=head_mask, return_type="logits")
        ids, real = batch.input_ids, batch.attention_mask.bool()
        labels = torch.full_like(ids, -100)
        labels[:, :-1] = torch.where(real[:, 1:], ids[:, 1:], -100)
        ce = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), labels,
                                               ignore_index=-100, reduction="sum")
        total += float(ce.double())
        count += int((labels != -100).sum())
    return float(torch.tensor(total / max(count, 1), dtype=torch.float64).exp())
