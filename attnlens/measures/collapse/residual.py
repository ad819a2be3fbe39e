"""Rank collapse of token representations with depth (Dong et al. 2021).

Definitions (``X`` is one sentence's ``[pos, d_model]`` matrix of real tokens):

- residual ``res(X) = X - 1 x^T`` with ``x`` the mean of the rows (the mean token, which
  minimises the Frobenius norm of the residual), so ``res(X) = 0`` exactly when every token
  carries the same vector (``X`` has rank 1 with identical rows);
- composite norm ``||M||_{1,inf} = sqrt(||M||_1 ||M||_inf)``, ``||M||_1`` the largest column
  sum of absolute values, ``||M||_inf`` the largest row sum (the norm of the paper's bounds);
- relative residual ``||res(X)|| / ||X||`` in that norm and in the Frobenius norm.

Dong et al. define the residual through ``min_x ||X - 1 x^T||``. In the Frobenius norm the mean
token is that minimiser, so the Frobenius rows are exact (``bound = exact``). In the composite
norm the minimiser is in general another vector (the problem is not separable by column), so
the composite rows are an **upper bound** of the paper's quantity (``bound = upper``); it is
tight for collapsed inputs, where both are zero.

``depth`` counts blocks applied: depth 0 is the embedding output (the input of block 0),
depth ``l`` the output of block ``l - 1``. Padding is dropped per sentence: only real tokens
enter the mean and the norms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Analyzer, Batch
from attnlens.stream.sentence_sample import sample_rows

NORMS = ("composite", "frobenius")
# How the mean-token residual relates to min_x ||X - 1 x^T|| in each norm (see collapse_table).
RESIDUAL_BOUND = {"composite": "upper", "frobenius": "exact"}
# Relative residuals below this are rounding noise in float64 (about 450 machine epsilons);
# the decay fits stop there.
FIT_FLOOR = 1e-13


def composite_norm(x: torch.Tensor) -> torch.Tensor:
    """``sqrt(||x||_1 ||x||_inf)`` of each ``[..., rows, cols]`` matrix -> ``[...]``."""
    abs_x = x.abs()
    norm_1 = abs_x.sum(dim=-2).amax(dim=-1)  # max over columns of the column sums
    norm_inf = abs_x.sum(dim=-1).amax(dim=-1)  # max over rows of the row sums
    return torch.sqrt(norm_1 * norm_inf)


def token_residual(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``res(X) = X - 1 x^T`` per sentence of ``x [batch, pos, d]``; padded rows set to 0.

    ``mask [batch, pos]`` is 1 for real tokens; the mean token is taken over those only.
    """
    if mask is None:
        return x - x.mean(dim=-2, keepdim=True)
    keep = mask.to(x.dtype)[..., None]  # [batch, pos, 1]
    n_real = keep.sum(dim=-2, keepdim=True).clamp_min(1)  # [batch, 1, 1]
    mean_token = (x * keep).sum(dim=-2, keepdim=True) / n_real  # [batch, 1, d]
    return (x - mean_token) * keep


def relative_residual(
    x: torch.Tensor, mask: torch.Tensor | None = None, norm: str = "composite"
) -> torch.Tensor:
    """``||res(X)|| / ||X||`` per sentence of ``x [batch, pos, d]`` -> ``[batch]`` (float64).

    Zero rows (padding) change neither norm, so masking padded rows to zero is exact.
    """
    if norm not in NORMS:
        raise ConfigError(f"unknown norm {norm!r}; choose one of {', '.join(NORMS)}.")
    x = x.double()
    if mask is not None:
        x = x * mask.to(x.dtype)[..., None]  # [batch, pos, d], padded rows zero
    res = token_residual(x, mask)
    tiny = torch.finfo(x.dtype).tiny  # an all-zero X (no residual either) gives 0, not NaN
    if norm == "composite":
        return composite_norm(res) / composite_norm(x).clamp_min(tiny)
    return torch.linalg.matrix_norm(res) / torch.linalg.matrix_norm(x).clamp_min(tiny)


def depth_hook_names(n_layers: int) -> list[str]:
    """Hook names whose outputs are depths 0..n_layers: the embedding, then each block."""
    return ["hook_embed"] + [f"blocks.{i}.hook_resid_post" for i in range(n_layers)]


def summarize(values: np.ndarray) -> dict[str, float]:
    """Mean, geometric mean, min, max and 10%/90% quantiles of positive values."""
    logs = np.log10(np.clip(values, 1e-300, None))
    return {
        "mean": float(values.mean()),
        "geo_mean": float(10 ** logs.mean()),
        "min": float(values.min()),
        "q10": float(np.quantile(values, 0.1)),
        "q90": float(np.quantile(values, 0.9)),
        "max": float(values.max()),
        "n": int(values.size),
    }


def depth_residuals(hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``[norm, ...]`` relative residuals (``NORMS`` order) of ``hidden [..., batch, pos,
    d]`` (leading axes, e.g. depths, allowed; ``mask [batch, pos]``).

    ``relative_residual`` in both norms from one masked copy and one residual (the same
    operations on the same numbers, done once for the two norms).
    """
    x = hidden.double()
    if mask is not None:
        x = x * mask.to(x.dtype)[..., None]  # [..., batch, pos, d], padded rows zero
    res = token_residual(x, mask)
    tiny = torch.finfo(x.dtype).tiny  # an all-zero X (no residual either) gives 0, not NaN
    return torch.stack([  # NORMS order
        composite_norm(res) / composite_norm(x).clamp_min(tiny),
        torch.linalg.matrix_norm(res) / torch.linalg.matrix_norm(x).clamp_min(tiny),
    ])


def collapse_table(values: np.ndarray, variant: str) -> pd.DataFrame:
    """Summary rows per norm and depth of per-sentence ``values [norm, depth, sentence]``.

    ``bound`` says how the mean-token residual relates to Dong et al.'s ``min_x ||X - 1 x^T||``:
    ``exact`` in the Frobenius norm (the mean token is the minimiser), ``upper`` in the
    composite norm (the mean token need not minimise it: an upper bound).
    """
    records = []
    if values.shape[-1]:
        for n, norm in enumerate(NORMS):
            for depth in range(values.shape[1]):
                records.append({"variant": variant, "depth": depth, "norm": norm,
                                "bound": RESIDUAL_BOUND[norm], **summarize(values[n, depth])})
    return pd.DataFrame.from_records(records)


class ResidualCollapse(Analyzer):
    """Per-sentence relative residual at every depth of one model, in both norms.

    State: every sentence's value (a few floats per sentence and depth, on the activations'
    device until read), so that quantiles are exact and a merge is a concatenation.
    ``variant`` labels the rows of the result. Layerwise: depth ``l`` is read as soon as block
    ``l - 1`` has produced it.
    """

    name = "collapse"
    layerwise = True
    state_fields = ("values",)

    def __init__(self, n_layers: int, variant: str = "full") -> None:
        self.n_layers, self.variant = n_layers, variant
        self.values: list[torch.Tensor] = []  # each [norm, depth, batch], float64
        self._depths: dict[int, torch.Tensor] = {}  # per-batch scratch: depth -> [norm, batch]

    @classmethod
    def for_model(cls, model: HookedTransformer, variant: str = "full") -> ResidualCollapse:
        analyzer = cls(model.n_layers, variant)
        analyzer.identify_model(model)
        return analyzer

    def settings(self) -> dict:
        return {"n_layers": self.n_layers, "variant": self.variant}

    def hook_names(self, model: HookedTransformer) -> list[str]:
        return depth_hook_names(self.n_layers)

    def begin_batch(self, batch: Batch) -> None:
        self._depths = {}

    def update_layer(self, batch: Batch, layer: int, cache: ActivationCache) -> None:
        name = "hook_embed" if layer < 0 else f"blocks.{layer}.hook_resid_post"
        self._depths[layer + 1] = depth_residuals(cache[name], batch.attention_mask)

    def end_batch(self, batch: Batch) -> None:
        depths = [self._depths[d] for d in range(self.n_layers + 1)]
        self.values.append(torch.stack(depths, dim=1))  # [norm, depth, batch]
        self._depths = {}

    def update_hidden(self, hidden: Sequence[torch.Tensor], mask: torch.Tensor | None) -> None:
        """Fold in the representations ``hidden[depth] [batch, pos, d]`` of one batch."""
        per_depth = [depth_residuals(h, mask) for h in hidden]  # depth x [norm, batch]
        self.values.append(torch.stack(per_depth, dim=1))  # [norm, depth, batch]

    def per_sentence(self) -> torch.Tensor:
        """All values so far ``[norm, depth, sentence]`` (on the CPU)."""
        if not self.values:
            return torch.zeros(len(NORMS), self.n_layers + 1, 0, dtype=torch.float64)
        return torch.cat([v.cpu() for v in self.values], dim=-1)

    def result(self) -> dict[str, pd.DataFrame]:
        return {"collapse": collapse_table(self.per_sentence().numpy(), self.variant)}


def fit_decay(
    depths: Sequence[float], residuals: Sequence[float], floor: float = FIT_FLOOR
) -> dict[str, float]:
    """Least-squares fits of a residual curve against depth.

    ``double``: ``log(-log r) = a + b * depth``, the straight line of a doubly exponential
    decay ``r = exp(-e^a (e^b)^depth)``; ``base = e^b`` is the factor by which ``-log r``
    grows per layer (Dong et al.'s bound has 3). ``single``: ``log r = c + k * depth``
    (exponential decay, per-layer factor ``e^k``). Only points with ``floor < r < 1`` are used,
    and the curve is cut at the first point at or below ``floor`` (machine precision).
    Slopes are NaN with fewer than 3 usable points. Natural logarithms throughout.
    """
    depths = np.asarray(depths, dtype=float)
    residuals = np.asarray(residuals, dtype=float)
    below = np.nonzero(residuals <= floor)[0]
    end = int(below[0]) if below.size else residuals.size
    d, r = depths[:end], residuals[:end]
    keep = r < 1.0
    d, r = d[keep], r[keep]
    keys = ("first_depth", "last_depth", "double_base", "double_slope", "double_intercept",
            "double_r2", "single_factor", "single_slope", "single_intercept", "single_r2")
    out: dict[str, float] = {"points": int(d.size), **dict.fromkeys(keys, math.nan)}
    if d.size < 3:
        return out
    out["first_depth"], out["last_depth"] = float(d[0]), float(d[-1])
    y_double = np.log(-np.log(r))
    y_single = np.log(r)
    for name, y in (("double", y_double), ("single", y_single)):
        slope, intercept = np.polyfit(d, y, 1)
        fitted = intercept + slope * d
        total = float(((y - y.mean()) ** 2).sum())
        r2 = 1.0 - float(((y - fitted) ** 2).sum()) / total if total > 0 else math.nan
        out[f"{name}_slope"] = float(slope)
        out[f"{name}_intercept"] = float(intercept)
        out[f"{name}_r2"] = r2
    out["double_base"] = float(np.exp(out["double_slope"]))
    out["single_factor"] = float(np.exp(out["single_slope"]))
    return out


def collapse_dtype(model: HookedTransformer, max_params: int = 200_000_000) -> torch.dtype | None:
    """float64 for models up to ``max_params`` parameters (residuals then resolve down to
    ~1e-16); None (the model's own dtype, no weight copy) for larger ones."""
    n_params = sum(p.numel() for p in model.parameters())
    return torch.float64 if n_params <= max_params else None


def fit_table(curves: pd.DataFrame, value: str = "geo_mean") -> pd.DataFrame:
    """One row of fitted rates per (variant, norm) of a ``collapse`` table."""
    if curves.empty:
        return pd.DataFrame()
    records = []
    for (variant, norm), rows in curves.groupby(["variant", "norm"], sort=False):
        rows = rows.sort_values("depth")
        fit = fit_decay(rows["depth"].to_numpy(), rows[value].to_numpy())
        records.append({"variant": variant, "norm": norm, "bound": RESIDUAL_BOUND[norm], **fit})
    return pd.DataFrame.from_records(records)


def subsample(batch: Batch, n: int) -> Batch:
    """At most ``n`` sentences of ``batch``, evenly spaced (model inputs and mask only).

    Batches come in a shuffled order of lengths, so a few sentences from each of the first
    batches span all lengths.
    """
    size = int(batch.input_ids.shape[0])
    if n >= size:
        return batch
    rows = sample_rows(size, n)

    def pick(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t[rows.to(t.device)]

    return Batch(
        input_ids=pick(batch.input_ids),
        attention_mask=pick(batch.attention_mask),
        token_type_ids=pick(batch.token_type_ids),
    )
