"""Rank collapse of token representations with depth (Dong et al. 2021).

Definitions (``X`` is one sentence's ``[pos, d_model]`` matrix of real tokens):

- residual ``res(X) = X - 1 x^T`` with ``x`` the mean of the rows (the mean token, which
  minimises the Frobenius norm of the residual), so ``res(X) = 0`` exactly when every token
  carries the same vector (``X`` has rank 1 with identical rows);
- composite norm ``||M||_{1,inf} = sqrt(||M||_1 ||M||_inf)``, ``||M||_1`` the largest column
  sum of absolute values, ``||M||_inf`` the largest row sum (the norm of the paper's bounds);
- relative residual ``||res(X)|| / ||X||`` in that norm and in the Frobenius norm.

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

from attnlens.analysis.base import Analyzer, Batch
from attnlens.analysis.variants import VARIANTS, parse_variants, variant_config
from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.model.transformer import HookedTransformer

NORMS = ("composite", "frobenius")
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


class ResidualCollapse(Analyzer):
    """Per-sentence relative residual at every depth of one model, in both norms.

    State: every sentence's value (a few floats per sentence and depth), so that quantiles
    are exact and ``merge`` is a concatenation. ``variant`` labels the rows of the result.
    """

    name = "collapse"

    def __init__(self, n_layers: int, variant: str = "full") -> None:
        self.n_layers, self.variant = n_layers, variant
        self.values: list[torch.Tensor] = []  # each [norm, depth, batch], float64

    def hook_names(self, model: HookedTransformer) -> list[str]:
        return depth_hook_names(self.n_layers)

    def update(self, batch: Batch, cache: ActivationCache) -> None:
        self.update_hidden(
            [cache[name] for name in depth_hook_names(self.n_layers)], batch.attention_mask
        )

    def update_hidden(self, hidden: Sequence[torch.Tensor], mask: torch.Tensor | None) -> None:
        """Fold in the representations ``hidden[depth] [batch, pos, d]`` of one batch."""
        per_depth = [
            torch.stack([relative_residual(h, mask, norm) for norm in NORMS]) for h in hidden
        ]  # depth x [norm, batch]
        self.values.append(torch.stack(per_depth, dim=1).cpu())  # [norm, depth, batch]

    def merge(self, other: ResidualCollapse) -> ResidualCollapse:
        self.values.extend(other.values)
        return self

    def per_sentence(self) -> torch.Tensor:
        """All values so far ``[norm, depth, sentence]``."""
        if not self.values:
            return torch.zeros(len(NORMS), self.n_layers + 1, 0, dtype=torch.float64)
        return torch.cat(self.values, dim=-1)

    def result(self) -> dict[str, pd.DataFrame]:
        values = self.per_sentence().numpy()
        records = []
        if values.shape[-1]:
            for n, norm in enumerate(NORMS):
                for depth in range(self.n_layers + 1):
                    records.append(
                        {"variant": self.variant, "depth": depth, "norm": norm,
                         **summarize(values[n, depth])}
                    )
        return {"collapse": pd.DataFrame.from_records(records)}


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
        records.append({"variant": variant, "norm": norm, **fit})
    return pd.DataFrame.from_records(records)


def variant_model(
    model: HookedTransformer,
    variant: str,
    state: dict[str, torch.Tensor] | None = None,
) -> HookedTransformer:
    """``model`` rebuilt with ``variant``'s switches, on the same (shared, not copied) weights.

    The variant is ``HookedTransformer(variant_config(model.cfg, variant))``; its tensors are
    assigned from ``state`` (default ``model.state_dict()``; pass a converted copy to change the
    dtype). Weights of the modules the variant removes (MLPs, norms) are left out; a weight the
    variant needs but ``state`` lacks is an error.
    """
    cfg = variant_config(model.cfg, variant)
    state = model.state_dict() if state is None else state
    with torch.device("meta"):
        copy = HookedTransformer(cfg)
    loaded = copy.load_state_dict(state, strict=False, assign=True)
    if loaded.missing_keys:
        missing = ", ".join(loaded.missing_keys[:4])
        raise ConfigError(f"variant {variant!r} needs weights the model lacks: {missing}.")
    copy.setup_hooks()
    return copy.to(model.device).eval()


def sample_rows(size: int, n: int) -> torch.Tensor:
    """Indices of at most ``n`` of ``size`` rows, evenly spaced: ``[min(n, size)]``."""
    if n >= size:
        return torch.arange(size)
    return torch.linspace(0, size - 1, max(n, 0)).round().long()  # distinct when n <= size


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


class VariantCollapse(Analyzer):
    """Relative residual per depth of block variants of a pretrained model, on a corpus.

    Each variant is ``variant_model(model, name)``: the model's own weights under other
    ``use_skip``/``use_mlp``/``use_norm`` switches. The analyzer runs the variants itself on
    each batch's inputs (it reads nothing from the main model's cache), in ``dtype``
    (default float64, one converted copy of the weights shared by all variants; None keeps
    the model's dtype and shares its tensors). The cost is bounded by ``per_batch`` (at most
    that many sentences of each batch, evenly spaced) and ``max_sentences`` (in all).
    """

    name = "collapse_variants"

    def __init__(
        self,
        model: HookedTransformer,
        variants: str | Sequence[str] = tuple(VARIANTS),
        dtype: torch.dtype | None = torch.float64,
        per_batch: int | None = None,
        max_sentences: int | None = None,
    ) -> None:
        self.variants = parse_variants(variants)
        state = model.state_dict()
        if dtype is not None:
            state = {k: v.to(dtype) for k, v in state.items()}
        self.models = {v: variant_model(model, v, state) for v in self.variants}
        self.n_layers = model.n_layers
        self.collapse = {v: ResidualCollapse(model.n_layers, v) for v in self.variants}
        self.per_batch, self.max_sentences = per_batch, max_sentences
        self.sentences = 0

    def hook_names(self, model: HookedTransformer) -> list[str]:
        return []

    @torch.no_grad()
    def update(self, batch: Batch, cache: ActivationCache | None = None) -> None:
        if self.per_batch is not None:
            batch = subsample(batch, self.per_batch)
        if self.max_sentences is not None:
            batch = subsample(batch, self.max_sentences - self.sentences)
        n = int(batch.input_ids.shape[0])
        if n == 0:
            return
        names = depth_hook_names(self.n_layers)
        for variant, model in self.models.items():
            inputs = {k: v.to(model.device) for k, v in batch.model_inputs().items()}
            _, var_cache = model.run_with_cache(
                **inputs, names_filter=names, return_type="hidden"
            )
            mask = inputs["attention_mask"]
            self.collapse[variant].update_hidden([var_cache[name] for name in names], mask)
        self.sentences += n

    def merge(self, other: VariantCollapse) -> VariantCollapse:
        for variant in self.variants:
            self.collapse[variant].merge(other.collapse[variant])
        self.sentences += other.sentences
        return self

    def result(self) -> dict[str, pd.DataFrame]:
        tables = [self.collapse[v].result()["collapse"] for v in self.variants]
        curves = pd.concat(tables, ignore_index=True)
        return {"collapse_variants": curves, "collapse_fits": fit_table(curves)}
