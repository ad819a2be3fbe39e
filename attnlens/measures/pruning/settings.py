"""What a pruning run does (``PruneSettings``), checked without torch so the command line can
refuse a bad option before loading anything."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from attnlens.errors import ConfigError

ORDERS = ("importance", "random", "confidence", "entropy", "loo")
ABS_MODES = ("example", "batch")
SCOPES = ("encoder", "decoder", "cross")  # attention types an order may be restricted to
SEEDED = ("random", "roles")  # orders drawn from a seed: several seeds make a band


@dataclass
class PruneSettings:
    """What a pruning run does; saved beside its results so ``resume`` can check them."""

    orders: list[str] = field(default_factory=lambda: ["importance", "random", "confidence"])
    step: float = 0.1
    max_fraction: float = 0.9
    rescore: bool = False
    min_heads_per_layer: int = 1
    seeds: int = 3
    abs_mode: str = "example"
    normalize: bool = True
    # Folder (or head_roles.csv) of an `attnlens heads` run, for the "roles" order.
    roles: str | None = None

    def validate(self) -> None:
        choices = ", ".join((*ORDERS, "roles"))
        if not self.orders:
            raise ConfigError(f"--order is empty; choose from {choices}.")
        for order in self.orders:
            base, _, scope = order.partition(":")
            if base not in (*ORDERS, "roles"):
                raise ConfigError(f"unknown order {order!r}; choose from {choices} (an "
                                  "encoder-decoder model also takes ORDER:encoder|decoder|cross).")
            if scope and scope not in SCOPES:
                raise ConfigError(f"unknown attention type in {order!r}; use "
                                  f"{', '.join(SCOPES)}.")
        if any(o.partition(":")[0] == "roles" for o in self.orders) and not self.roles:
            raise ConfigError("--order roles needs --roles, the output folder of `attnlens "
                              "heads`.")
        if not 0.0 < self.step <= 1.0:
            raise ConfigError(f"--step must be a fraction in (0, 1], not {self.step}.")
        if not 0.0 < self.max_fraction <= 1.0:
            raise ConfigError(f"--max-fraction must be in (0, 1], not {self.max_fraction}.")
        if self.min_heads_per_layer < 0:
            raise ConfigError("--min-heads-per-layer must be 0 or more.")
        if self.seeds < 1:
            raise ConfigError("--seeds must be at least 1.")
        if self.abs_mode not in ABS_MODES:
            raise ConfigError(f"abs mode must be one of {', '.join(ABS_MODES)}.")

    def check_model(self, n_layers: int, n_heads: int) -> None:
        """Refuse settings that cannot prune a model of ``n_layers`` x ``n_heads`` heads."""
        if self.min_heads_per_layer >= n_heads:
            raise ConfigError(
                f"--min-heads-per-layer {self.min_heads_per_layer} keeps all {n_heads} heads of "
                f"every layer, so nothing can be pruned; choose 0 to {n_heads - 1}."
            )

    def step_targets(self, n_heads: int) -> list[int]:
        """Heads pruned after each step 1, 2, ... of a model with ``n_heads`` heads in all.

        Few heads and a small step can round two steps to the same count: one is kept.
        """
        return list(dict.fromkeys(min(t, n_heads) for t in self.targets(n_heads) if t > 0))

    def curves(self) -> list[tuple[str, int]]:
        """(order, seed) of every curve; only ``random`` and ``roles`` use several seeds."""
        return [
            (order, seed)
            for order in dict.fromkeys(self.orders)
            for seed in (range(self.seeds) if order.partition(":")[0] in SEEDED else [0])
        ]

    def targets(self, n_heads: int) -> list[int]:
        """Cumulative number of heads pruned after each step 1, 2, ..."""
        n_steps = math.floor(self.max_fraction / self.step + 1e-9)
        fractions = [min(s * self.step, self.max_fraction) for s in range(1, n_steps + 1)]
        if not fractions or fractions[-1] < self.max_fraction - 1e-9:
            fractions.append(self.max_fraction)
        return [round(f * n_heads) for f in fractions]
