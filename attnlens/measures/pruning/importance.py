"""Head importance scores: the orders in which heads are pruned (least important first).

- ``importance``: Michel et al. (2019), ``I_h = E_x |dL(x)/d xi_h|`` with the head gates xi
  at their current values (1, or 0 for heads already pruned). By default the absolute value
  is taken per example (``abs_mode="example"``, the paper's definition) using one gate per
  example at ``hook_z``: one backward pass gives every example's own gradient, so this costs
  the same as the cheaper ``abs_mode="batch"`` (|sum over a batch|, the authors' released
  code), which depends on the batch size and lets opposite-signed examples cancel.
  ``normalize=True`` divides each layer's scores by their L2 norm (Michel's default).
- ``random``: a seeded random permutation (several seeds give a band).
- ``confidence``: mean maximum attention weight (Voita et al. 2019); least confident first.
- ``entropy``: mean attention entropy; the most diffuse heads go first (score = -entropy).
- ``loo``: leave-one-out, the metric's loss when the head alone is masked.

Every scorer returns ``[layer, head]`` float64 scores on the CPU; heads absent from a layer
(structurally pruned models) are NaN. Higher means more important.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import torch

from attnlens.errors import ConfigError
from attnlens.measures.heads.head_stats import HeadStats
from attnlens.measures.pruning.settings import ABS_MODES, ORDERS
from attnlens.metrics.base import Metric
from attnlens.model.gates import full_mask
from attnlens.model.transformer import HookedTransformer
from attnlens.progress import progress_bar


def _absent(model: HookedTransformer) -> torch.Tensor:
    return full_mask(model).cpu() == 0


def gradient_importance(
    model: HookedTransformer,
    metric: Metric,
    head_mask: torch.Tensor | None = None,
    abs_mode: str = "example",
    normalize: bool = True,
    show_progress: bool = False,
) -> torch.Tensor:
    """Michel's ``E_x |dL/d xi_h|`` over ``metric``'s data ``[layer, head]``.

    ``head_mask`` holds the gates' current values (default all 1). The model's parameters get
    no gradient (their ``requires_grad`` is restored afterwards).
    """
    if abs_mode not in ABS_MODES:
        raise ConfigError(f"abs_mode must be one of {ABS_MODES}, not {abs_mode!r}.")
    mask = (full_mask(model) if head_mask is None else head_mask).detach().to(model.device)
    mask = mask.to(model.dtype)
    total = torch.zeros(mask.shape, dtype=torch.float64)
    saved = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    batches = metric.loss_batches()
    try:
        with torch.enable_grad(), progress_bar(
            "gradient importance", total=len(batches), enabled=show_progress
        ) as advance:
            for batch in batches:
                batch = batch.to(model.device)
                if abs_mode == "example":
                    # One gate per example: gates [example, layer, head]
                    gates = mask.expand(batch.n_examples, *mask.shape).clone().requires_grad_()
                    losses = metric.example_losses(model, batch, None, gates[batch.row_example])
                    (grad,) = torch.autograd.grad(losses.sum(), gates)
                    total += grad.abs().sum(dim=0).double().cpu()
                else:
                    gate = mask.clone().requires_grad_()
                    losses = metric.example_losses(model, batch, gate, None)
                    (grad,) = torch.autograd.grad(losses.sum(), gate)
                    total += grad.abs().double().cpu()
                advance(1)
    finally:
        for p, flag in zip(model.parameters(), saved, strict=True):
            p.requires_grad_(flag)
    scores = total / metric.n_examples
    if normalize:
        norms = scores.norm(dim=1, keepdim=True)  # [layer, 1]
        scores = scores / torch.where(norms > 0, norms, torch.ones_like(norms))
    return scores.masked_fill(_absent(model), float("nan"))


def random_scores(model: HookedTransformer, seed: int) -> torch.Tensor:
    """A seeded random order: i.i.d. uniform scores ``[layer, head]``."""
    gen = torch.Generator().manual_seed(seed)
    shape = (model.n_layers, max(model.heads_per_layer))
    scores = torch.rand(shape, generator=gen, dtype=torch.float64)
    return scores.masked_fill(_absent(model), float("nan"))


@torch.no_grad()
def attention_measures(
    model: HookedTransformer,
    metric: Metric,
    head_mask: torch.Tensor | None = None,
    show_progress: bool = False,
) -> pd.DataFrame:
    """Attention statistics (``HeadStats``) on the metric's texts, heads gated."""
    stats = HeadStats.for_model(model, metric.tokenizer)
    names = stats.hook_names(model)
    batches = metric.text_batches()
    with progress_bar("attention statistics", total=len(batches), enabled=show_progress) as adv:
        for batch in batches:
            batch = batch.to(model.device)
            _, cache = model.run_with_cache(
                **batch.model_inputs(), head_mask=head_mask, names_filter=names,
                return_type="hidden",
            )
            stats.update(batch, cache)
            adv(1)
    return stats.result()["head_stats"]


def attention_scores(
    model: HookedTransformer,
    metric: Metric,
    measure: str,
    head_mask: torch.Tensor | None = None,
    show_progress: bool = False,
) -> torch.Tensor:
    """``confidence`` (higher = more important) or ``entropy`` (lower = more important)."""
    if measure not in ("confidence", "entropy"):
        raise ConfigError(f"attention order must be confidence or entropy, not {measure!r}.")
    table = attention_measures(model, metric, head_mask, show_progress)
    rows = table[table["measure"] == measure]
    scores = torch.full((model.n_layers, max(model.heads_per_layer)), float("nan"),
                        dtype=torch.float64)
    for layer, head, value in rows[["layer", "head", "value"]].itertuples(index=False):
        scores[int(layer), int(head)] = value if measure == "confidence" else -value
    return scores.masked_fill(_absent(model), float("nan"))


def leave_one_out(
    model: HookedTransformer,
    metric: Metric,
    head_mask: torch.Tensor | None = None,
    show_progress: bool = False,
) -> torch.Tensor:
    """The metric's loss when each still-active head alone is masked ``[layer, head]``.

    Score = baseline - metric (higher-is-better metrics) or metric - baseline: the damage
    done by removing the head. Heads already masked score NaN. Costs one evaluation per head.
    """
    mask = (full_mask(model) if head_mask is None else head_mask).detach().to(model.device)
    baseline = metric.evaluate(model, mask)
    scores = torch.full(mask.shape, float("nan"), dtype=torch.float64)
    active = [tuple(ix) for ix in (mask != 0).nonzero().tolist()]
    with progress_bar("leave-one-out", total=len(active), enabled=show_progress) as advance:
        for layer, head in active:
            trial = mask.clone()
            trial[layer, head] = 0.0
            scores[layer, head] = -metric.improvement(metric.evaluate(model, trial), baseline)
            advance(1)
    return scores


def score_heads(
    order: str,
    model: HookedTransformer,
    metric: Metric,
    head_mask: torch.Tensor | None = None,
    seed: int = 0,
    abs_mode: str = "example",
    normalize: bool = True,
    show_progress: bool = False,
) -> torch.Tensor:
    """Scores ``[layer, head]`` (higher = more important) for one of ``ORDERS``."""
    scorers: dict[str, Callable[[], torch.Tensor]] = {
        "importance": lambda: gradient_importance(
            model, metric, head_mask, abs_mode, normalize, show_progress
        ),
        "random": lambda: random_scores(model, seed),
        "confidence": lambda: attention_scores(
            model, metric, "confidence", head_mask, show_progress
        ),
        "entropy": lambda: attention_scores(model, metric, "entropy", head_mask, show_progress),
        "loo": lambda: leave_one_out(model, metric, head_mask, show_progress),
    }
    if order not in scorers:
        raise ConfigError(f"unknown order {order!r}; choose from {', '.join(ORDERS)}.")
    return scorers[order]()


def scores_table(scores: torch.Tensor, **columns) -> pd.DataFrame:
    """Tidy ``layer, head, score`` rows (plus constant ``columns``) for present heads."""
    values = scores.numpy()
    records = [
        {**columns, "layer": layer, "head": head, "score": float(values[layer, head])}
        for layer in range(values.shape[0])
        for head in range(values.shape[1])
        if not np.isnan(values[layer, head])
    ]
    return pd.DataFrame.from_records(records)
