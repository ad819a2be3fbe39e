"""L0 head gates (Voita et al. 2019): learn which heads to keep with Hard Concrete gates.

The model's weights are frozen. Each head ``h`` gets a gate ``z_h`` drawn from a Hard Concrete
distribution (Louizos et al. 2018) with a learned ``log_alpha_h``, temperature ``beta`` and
stretch ``(l, r)``:

    u ~ U(0, 1),  s = sigmoid((log u - log(1 - u) + log_alpha) / beta),
    z = min(1, max(0, l + (r - l) s)).

``z`` is exactly 0 or 1 with positive probability, and ``P(z > 0) = sigmoid(log_alpha -
beta log(-l / r))`` in closed form, so the expected number of open gates is differentiable.
The gates are trained on the importance data with the metric's differentiable loss (the one
Michel's importance differentiates) plus ``lambda`` times that expected number; one gate draw
per step, shared by the batch. At the end each head is kept when its expected gate ``E[z]``
is above 0.5 (never leaving a layer with fewer than ``min_heads_per_layer`` heads: the layer's
heads of highest ``E[z]`` are kept), and the metric is evaluated on the held-out data with
those binary gates.

``E[z]`` has no elementary closed form; with ``F(s) = P(s' <= s) = sigmoid(beta logit(s) -
log_alpha)`` and ``s0, s1`` the values where the stretched gate crosses 0 and 1, integration by
parts gives ``E[z] = 1 - (r - l) * integral_{s0}^{s1} F(s) ds``, a smooth one-dimensional
integral computed by Simpson's rule.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import pandas as pd
import torch
from torch import nn

from attnlens.errors import ConfigError
from attnlens.measures.pruning.structural import pruned_parameter_count
from attnlens.metrics.base import Metric
from attnlens.model.gates import full_mask, heads_text
from attnlens.model.head_ids import HeadIds, head_ids_of, original_heads, renumber_heads
from attnlens.numeric import check_number
from attnlens.progress import progress_bar

TEMPERATURES = {"louizos": 2.0 / 3.0, "voita": 0.33}
SIMPSON_POINTS = 2049  # odd; the integrand is smooth, error far below fp32 rounding


class HardConcreteGates(nn.Module):
    """One Hard Concrete gate per head: ``log_alpha [layer, head]`` (absent heads stay 0)."""

    def __init__(self, present: torch.Tensor, temperature: float = 2.0 / 3.0,
                 stretch: tuple[float, float] = (-0.1, 1.1), init: float = 3.0) -> None:
        super().__init__()
        low, high = stretch
        if not low < 0.0 < 1.0 < high:
            raise ConfigError(f"stretch {stretch} must satisfy l < 0 < 1 < r.")
        if temperature <= 0:
            raise ConfigError(f"temperature must be positive, not {temperature}.")
        self.register_buffer("present", present.bool())
        self.log_alpha = nn.Parameter(torch.full(present.shape, float(init), dtype=torch.float64))
        self.temperature, self.low, self.high = float(temperature), float(low), float(high)

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """A gate draw ``z [layer, head]`` in [0, 1] (0 for absent heads), differentiable."""
        u = torch.rand(self.log_alpha.shape, generator=generator, dtype=torch.float64)
        u = u.clamp(1e-6, 1 - 1e-6).to(self.log_alpha.device)
        s = torch.sigmoid((u.log() - (-u).log1p() + self.log_alpha) / self.temperature)
        z = (self.low + (self.high - self.low) * s).clamp(0.0, 1.0)
        return z * self.present

    def prob_open(self) -> torch.Tensor:
        """``P(z > 0)`` per head, closed form (0 for absent heads)."""
        shift = self.temperature * math.log(-self.low / self.high)
        return torch.sigmoid(self.log_alpha - shift) * self.present

    def expected_l0(self) -> torch.Tensor:
        """Expected number of open gates: the sum of ``P(z > 0)`` (differentiable)."""
        return self.prob_open().sum()

    @torch.no_grad()
    def expected_gate(self) -> torch.Tensor:
        """``E[z]`` per head (module docstring), float64, 0 for absent heads."""
        span = self.high - self.low
        s0, s1 = -self.low / span, (1.0 - self.low) / span
        s = torch.linspace(s0, s1, SIMPSON_POINTS, dtype=torch.float64,
                           device=self.log_alpha.device)
        logit = (s / (1 - s)).log()  # [points]
        cdf = torch.sigmoid(self.temperature * logit - self.log_alpha[..., None])  # [.., points]
        weights = torch.ones(SIMPSON_POINTS, dtype=torch.float64, device=s.device)
        weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
        integral = (cdf * weights).sum(-1) * (s1 - s0) / (3 * (SIMPSON_POINTS - 1))
        return (1.0 - span * integral) * self.present

    def binary(self, min_heads_per_layer: int = 1) -> torch.Tensor:
        """Keep heads with ``E[z] > 0.5``; layers short of the minimum keep their best."""
        expected = self.expected_gate()
        keep = (expected > 0.5) & self.present
        for layer in range(keep.shape[0]):
            n_present = int(self.present[layer].sum())
            need = min(min_heads_per_layer, n_present) - int(keep[layer].sum())
            if need > 0:
                ranked = expected[layer].masked_fill(~self.present[layer] | keep[layer], -1.0)
                keep[layer, ranked.argsort(descending=True)[:need]] = True
        return keep


@dataclass
class L0Settings:
    """What an L0 run does (saved beside its results, checked on ``resume``)."""

    lambdas: tuple[float, ...] = (0.001, 0.003, 0.01, 0.03)
    temperature: float = 2.0 / 3.0
    stretch: tuple[float, float] = (-0.1, 1.1)
    steps: int = 300
    learning_rate: float = 0.05
    init_log_alpha: float = 3.0
    min_heads_per_layer: int = 1
    seed: int = 0

    def validate(self) -> None:
        """Every number finite and in range (``attnlens.numeric``: NaN gates came from a NaN
        temperature, learning rate or initial log_alpha), the stretch around [0, 1]."""
        if not self.lambdas or any(not math.isfinite(x) or x < 0 for x in self.lambdas):
            raise ConfigError(f"--lambda needs one or more values >= 0, not {self.lambdas}.")
        if self.steps < 1:
            raise ConfigError("--l0-steps must be at least 1.")
        check_number("--l0-lr", float(self.learning_rate))
        check_number("--l0-temperature", float(self.temperature))
        check_number("--l0-init", float(self.init_log_alpha))
        for bound in self.stretch:
            check_number("--l0-stretch", float(bound))
        if self.min_heads_per_layer < 0:
            raise ConfigError("--min-heads-per-layer must be 0 or more.")
        HardConcreteGates(torch.ones(1, 1), self.temperature, tuple(self.stretch))


@dataclass
class L0Result:
    """One lambda: the trained gates, the binary mask and the training curve."""

    lam: float
    gates: HardConcreteGates
    mask: torch.Tensor  # [layer, head] 1 = kept
    curve: pd.DataFrame  # step, data_loss, expected_open, loss


def train_gates(model, metric: Metric, lam: float, settings: L0Settings,
                show_progress: bool = False) -> L0Result:
    """Train one gate per head on ``metric``'s data with penalty ``lam`` (weights frozen)."""
    present = full_mask(model) != 0
    gates = HardConcreteGates(present, settings.temperature, tuple(settings.stretch),
                              settings.init_log_alpha).to(model.device)
    optimizer = torch.optim.Adam([gates.log_alpha], lr=settings.learning_rate)
    generator = torch.Generator().manual_seed(settings.seed)
    batches = metric.loss_batches()
    order = torch.randperm(len(batches), generator=generator).tolist()
    saved = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    records = []
    try:
        with torch.enable_grad(), progress_bar(f"L0 gates, lambda {lam:g}", total=settings.steps,
                                               enabled=show_progress) as advance:
            for step in range(settings.steps):
                if step and step % len(order) == 0:  # a new pass, a new batch order
                    order = torch.randperm(len(batches), generator=generator).tolist()
                batch = batches[order[step % len(order)]].to(model.device)
                z = gates.sample(generator)  # [layer, head]
                data = metric.example_losses(model, batch, z.to(model.dtype)).double().mean()
                penalty = gates.expected_l0()
                loss = data + lam * penalty
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                records.append({"step": step + 1, "data_loss": data.item(),
                                "expected_open": penalty.item(), "loss": loss.item()})
                advance(1)
    finally:
        for p, flag in zip(model.parameters(), saved, strict=True):
            p.requires_grad_(flag)
    mask = gates.binary(settings.min_heads_per_layer).to(model.dtype)
    return L0Result(lam, gates, mask, pd.DataFrame.from_records(records))


def heads_table(result: L0Result, head_ids: HeadIds | None = None) -> pd.DataFrame:
    """Per head: log_alpha, P(open), E[gate] and whether it is kept (heads by their original
    numbers: ``head_ids`` of a pruned model)."""
    gates = result.gates
    p_open, expected = gates.prob_open().detach().cpu(), gates.expected_gate().cpu()
    log_alpha, present = gates.log_alpha.detach().cpu(), gates.present.cpu()
    return pd.DataFrame([
        {"lambda": result.lam, "layer": layer, "head": head,
         "log_alpha": float(log_alpha[layer, head]), "p_open": float(p_open[layer, head]),
         "expected_gate": float(expected[layer, head]),
         "kept": bool(result.mask[layer, head] != 0)}
        for layer, head in present.nonzero().tolist()
    ]).pipe(renumber_heads, head_ids)


def summary_row(model, result: L0Result, value: float, baseline: float, metric: Metric,
                seconds: float) -> dict:
    """The lambda's line of ``l0_summary``: heads kept, per layer, the held-out metric."""
    present = full_mask(model) != 0
    kept = (result.mask != 0) & present
    removed = [tuple(ix) for ix in (present & ~kept).nonzero().tolist()]
    n_heads = int(present.sum())
    last = result.curve.iloc[-1]
    return {
        "lambda": result.lam,
        "n_kept": int(kept.sum()),
        "n_pruned": n_heads - int(kept.sum()),
        "fraction_pruned": (n_heads - int(kept.sum())) / n_heads,
        "kept_per_layer": " ".join(str(int(k)) for k in kept.sum(dim=1).tolist()),
        "heads_removed": heads_text(original_heads(head_ids_of(model), removed)),
        "metric": float(value),
        "change": float(metric.improvement(value, baseline)),
        "params": pruned_parameter_count(model, result.mask),
        "final_data_loss": float(last["data_loss"]),
        "final_expected_open": float(last["expected_open"]),
        "seconds": round(seconds, 3),
    }


def run_lambda(model, importance: Metric, evaluation: Metric, lam: float, settings: L0Settings,
               baseline: float, show_progress: bool = False) -> tuple[dict, L0Result]:
    """Train the gates for one lambda and evaluate their binary mask on held-out data."""
    start = time.perf_counter()
    result = train_gates(model, importance, lam, settings, show_progress)
    value = evaluation.evaluate(model, result.mask)
    row = summary_row(model, result, value, baseline, evaluation, time.perf_counter() - start)
    return row, result
