"""Rank collapse in randomly initialised attention stacks (Dong et al. 2021, section 4).

Each stack is a ``HookedTransformer`` built from a ``TransformerConfig`` with no token,
position or segment embeddings (``positional="none"``, ``n_token_types=0``) and post-norm
blocks; the variants differ only in the config switches ``use_skip``, ``use_mlp`` and
``use_norm`` (see ``variants.VARIANTS``). It is fed random ``inputs_embeds`` and computed in
float64, so that residuals can fall to ~1e-16 before rounding noise takes over.

Random init, per seed (identical across variants: same attention weights, same MLP weights
where present, same inputs):

- attention: ``MultiHeadAttention.reset_parameters`` (``W_Q``, ``W_K``, ``W_V`` ~ N(0, 1/d_model),
  ``W_O`` ~ N(0, 1/(heads * d_head))), then ``W_Q`` and ``W_K`` multiplied by ``qk_gain``; all
  biases 0. With unit-variance inputs the attention logits have standard deviation about
  ``qk_gain ** 2``. At ``qk_gain=1`` pure attention hits machine precision within 4 layers,
  too fast to fit a curve; the default 2 spreads the decay over ~7 layers.
- MLP (``d_mlp = mlp_ratio * width``, GELU): ``W_in`` ~ N(0, 1/width), ``W_out`` ~ N(0, 2/d_mlp)
  (variance-preserving through GELU), biases 0.
- LayerNorm: weight 1, bias 0.
- inputs: ``batch`` matrices ``[tokens, width]`` with i.i.d. N(0, 1) entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import torch

from attnlens.errors import ConfigError
from attnlens.measures.collapse.residual import (
    NORMS,
    collapse_table,
    depth_hook_names,
    fit_table,
    relative_residual,
)
from attnlens.measures.collapse.variants import parse_variants, variant_config
from attnlens.model.config import TransformerConfig
from attnlens.model.transformer import HookedTransformer
from attnlens.progress import progress_bar


@dataclass(frozen=True)
class SyntheticSpec:
    """Size and init of the random stacks; every field is a CLI option of `collapse`."""

    width: int = 64
    heads: int = 4
    depth: int = 24
    tokens: int = 32
    batch: int = 8  # random input matrices per seed
    seeds: int = 5
    mlp_ratio: int = 4
    qk_gain: float = 2.0

    def __post_init__(self) -> None:
        for name in ("width", "heads", "depth", "batch", "seeds", "mlp_ratio"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, not {getattr(self, name)}.")
        if self.tokens < 2:
            raise ConfigError(f"tokens must be at least 2 (one token is rank 1 already), "
                              f"not {self.tokens}.")
        if self.width % self.heads:
            raise ConfigError(f"width={self.width} must be divisible by heads={self.heads}.")
        if not self.qk_gain > 0:
            raise ConfigError(f"qk_gain must be positive, not {self.qk_gain}.")


def synthetic_config(spec: SyntheticSpec, variant: str = "san") -> TransformerConfig:
    """The config of one random stack: no embeddings, post-norm, the variant's switches."""
    base = TransformerConfig(
        d_model=spec.width,
        n_layers=spec.depth,
        n_heads=spec.heads,
        d_mlp=spec.mlp_ratio * spec.width,
        vocab_size=1,  # never used: the stack is fed inputs_embeds
        positional="none",
        n_token_types=0,
        norm_position="post",
        act="gelu",
        source={"architecture": "synthetic"},
    )
    return variant_config(base, variant)


@torch.no_grad()
def synthetic_model(
    spec: SyntheticSpec, variant: str, seed: int, device: str | torch.device = "cpu"
) -> HookedTransformer:
    """A float64 random stack; ``seed`` fixes every weight, whatever the variant."""
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left untouched
        model = HookedTransformer(synthetic_config(spec, variant)).to(torch.float64)
        for layer, block in enumerate(model.blocks):
            torch.manual_seed(_layer_seed(seed, layer))
            block.attn.reset_parameters()
            block.attn.W_Q.mul_(spec.qk_gain)
            block.attn.W_K.mul_(spec.qk_gain)
            for bias in (block.attn.b_Q, block.attn.b_K, block.attn.b_V, block.attn.b_O):
                if bias is not None:
                    bias.zero_()
            # Drawn for every variant so that all variants of a seed share the same weights.
            d_mlp = spec.mlp_ratio * spec.width
            w_in = torch.randn(d_mlp, spec.width, dtype=torch.float64) * spec.width**-0.5
            w_out = torch.randn(spec.width, d_mlp, dtype=torch.float64) * (2.0 / d_mlp) ** 0.5
            if block.use_mlp:
                block.mlp.W_in.weight.copy_(w_in)
                block.mlp.W_out.weight.copy_(w_out)
                block.mlp.W_in.bias.zero_()
                block.mlp.W_out.bias.zero_()
    return model.to(device).eval()


def synthetic_inputs(
    spec: SyntheticSpec, seed: int, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """``[batch, tokens, width]`` i.i.d. N(0, 1) inputs (float64) for ``seed``."""
    generator = torch.Generator().manual_seed(_layer_seed(seed, -1))
    x = torch.randn(spec.batch, spec.tokens, spec.width, generator=generator, dtype=torch.float64)
    return x.to(device)


def _layer_seed(seed: int, layer: int) -> int:
    return 1_000_003 * seed + layer + 1


@torch.no_grad()
def seed_curves(model: HookedTransformer, inputs: torch.Tensor) -> torch.Tensor:
    """Relative residual per depth, averaged over the input matrices: ``[norm, depth]``."""
    names = depth_hook_names(model.n_layers)
    _, cache = model.run_with_cache(inputs_embeds=inputs, names_filter=names, return_type="hidden")
    return torch.stack(
        [
            torch.stack([relative_residual(cache[name], None, norm).mean() for name in names])
            for norm in NORMS
        ]
    ).cpu()


def run_synthetic(
    spec: SyntheticSpec | None = None,
    variants: str | Sequence[str] = ("san", "san+skip", "san+mlp", "san+ln", "full"),
    device: str | torch.device = "cpu",
    show_progress: bool = False,
) -> dict[str, pd.DataFrame]:
    """Relative residual against depth for each variant, over seeds; plus the decay fits.

    Tables: ``synthetic_collapse`` (variant, depth, norm, bound, then mean, geo_mean, min, q10,
    q90, max over the seeds' curves, and n = seeds), ``synthetic_fits`` (``collapse.fit_decay`` on
    the geometric mean of each variant and norm) and ``synthetic_spec`` (the parameters).
    """
    spec = spec or SyntheticSpec()
    variants = parse_variants(variants)
    per_variant = {}
    with progress_bar("random stacks", total=len(variants) * spec.seeds,
                      enabled=show_progress) as advance:
        for variant in variants:
            curves = []
            for seed in range(spec.seeds):
                model = synthetic_model(spec, variant, seed, device)
                curves.append(seed_curves(model, synthetic_inputs(spec, seed, device)))
                advance(1)
            per_variant[variant] = torch.stack(curves, dim=-1).numpy()  # [norm, depth, seed]
    curves = pd.concat([collapse_table(values, variant) for variant, values in per_variant.items()],
                       ignore_index=True)
    spec_table = pd.DataFrame(
        {"parameter": list(asdict(spec)), "value": [str(v) for v in asdict(spec).values()]}
    )
    return {
        "synthetic_collapse": curves,
        "synthetic_fits": fit_table(curves),
        "synthetic_spec": spec_table,
    }


def machine_floor() -> float:
    """float64 machine epsilon: where residual curves flatten into rounding noise."""
    return float(np.finfo(np.float64).eps)
