"""How asymmetric is attention? Query/key weights and attention patterns as directed graphs.

**Weights** (no corpus). Per head, ``M = W_QK = W_Q W_K^T [d_in, d_in]`` splits into
``S = (M + M^T) / 2`` and ``A = (M - M^T) / 2`` with ``||S||^2 + ||A||^2 = ||M||^2``
(Frobenius). Reported as shares of the *squared* norm, which add up to 1:

- ``sym_share = ||S||^2 / ||M||^2``, ``antisym_share = ||A||^2 / ||M||^2``;
- ``symmetry = tr(M M) / ||M||^2 = sym_share - antisym_share`` in ``[-1, 1]``.

Computed without forming ``d_in x d_in``: ``||M||^2 = sum((W_Q^T W_Q) * (W_K^T W_K))`` and
``tr(M M) = sum(B * B^T)`` with ``B = W_K^T W_Q [d_head, d_head]``, ``||S||^2 = (||M||^2 +
tr(MM)) / 2``: ``O(d_in d_head^2)`` instead of ``O(d_in^2 d_head)``, exact (float64) for any
width.

Biases: the logit of query ``x`` and key ``y`` is ``x M y^T + x W_Q b_K^T + b_Q W_K^T y^T +
b_Q b_K^T``. The second and last terms do not depend on the key and cancel in the softmax;
the key-only term ``u . y`` with ``u = W_K b_Q`` does change attention. With the constant
input coordinate 1 the logits (up to per-query constants) are the bilinear form of
``M~ = [[M, 0], [u^T, 0]]`` on ``[x, 1]`` and ``[y, 1]``; ``sym_share_affine`` and
``antisym_share_affine`` are the shares of ``M~``, and ``key_bias_norm = ||u||``. Reported
only for models with query biases.

**Patterns** (streaming, real tokens only). Per head and sentence, ``P [n, n]``:

- ``asym_ratio = ||P - P^T||_F / ||P||_F`` averaged over sentences (in ``[0, sqrt(2)]`` for
  non-negative ``P``; 0 for a symmetric pattern);
- the attention graph has an *edge* ``i -> j`` (``i != j``) when ``p_ij >= edge_level / n``
  (by default: at least uniform attention);
- ``directed_share``: among unordered pairs ``{i, j}`` with at least one edge, the share where
  the stronger direction carries at least ``factor`` (default 2) times the weaker one;
- ``reciprocity``: the share of edges whose reverse is also an edge (Newman's reciprocity).
  Both pooled over the corpus (ratio of total counts).

**Baseline**: unweighted self-attention ``alpha = softmax(X X^T / sqrt(C))`` on the attention
layer's own input ``X [n, C]`` (``hook_resid_pre`` for post-norm models such as BERT,
``ln1(hook_resid_pre)`` for pre-norm models), with the same measures. Its logits are
symmetric, which implies ``alpha_ij alpha_ji <= alpha_ii alpha_jj`` (``product_violations``:
share of pairs breaking it, 0 up to rounding); the stronger claim ``alpha_ij <= max(alpha_ii,
alpha_jj)`` is checked too (``dominance_violations``: share of ordered pairs ``i != j``
breaking it, pooled).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from attnlens.analysis.base import Analyzer, Batch
from attnlens.analysis.spectrum import gather_square, gather_tokens, length_groups
from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.model.attention import MultiHeadAttention
from attnlens.model.transformer import HookedTransformer

WEIGHT_MEASURES = ("sym_share", "antisym_share", "symmetry")
BIAS_MEASURES = ("sym_share_affine", "antisym_share_affine", "key_bias_norm")
PATTERN_MEASURES = ("asym_ratio", "directed_share", "reciprocity")
BASELINE_MEASURES = (*PATTERN_MEASURES, "product_violations", "dominance_violations")
# Count slots kept per layer/head: edges, reciprocated edges, pairs with an edge, directed pairs.
_COUNTS = 4
RELATIVE_TOL = 1e-9


# --- weights ------------------------------------------------------------------------------
def bilinear_shares(
    W_Q: torch.Tensor, W_K: torch.Tensor, key_bias: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Symmetric/antisymmetric shares of ``M = W_Q W_K^T`` for ``W_Q, W_K [..., d_in, d]``.

    With ``key_bias [..., d_in]`` (``u = W_K b_Q``) the shares of ``[[M, 0], [u^T, 0]]``.
    Returns float64 tensors ``[...]`` keyed ``norm_sq``, ``trace_sq``, ``sym_share``,
    ``antisym_share``, ``symmetry``.
    """
    Q, K = W_Q.detach().double(), W_K.detach().double()
    norm_sq = ((Q.mT @ Q) * (K.mT @ K)).sum(dim=(-1, -2))  # ||M||_F^2
    B = K.mT @ Q  # [..., d, d]
    trace_sq = (B * B.mT).sum(dim=(-1, -2))  # tr(M M)
    if key_bias is not None:
        norm_sq = norm_sq + (key_bias.detach().double() ** 2).sum(-1)
    safe = norm_sq.clamp_min(torch.finfo(torch.float64).tiny)
    sym = ((norm_sq + trace_sq) / 2 / safe).clamp(0, 1)
    return {
        "norm_sq": norm_sq,
        "trace_sq": trace_sq,
        "sym_share": sym,
        "antisym_share": 1 - sym,
        "symmetry": trace_sq / safe,
    }


def attention_weight_asymmetry(attn: MultiHeadAttention) -> dict[str, torch.Tensor]:
    """Per-head weight measures of one attention module: name -> ``[head]`` (float64)."""
    W_K = attn._kv_per_query_head(attn.W_K)  # [head, d_kv_in, d_head]
    if attn.d_in != attn.d_kv_in:
        raise ConfigError("weight asymmetry needs self-attention (queries and keys of one width).")
    plain = bilinear_shares(attn.W_Q, W_K)
    out = {name: plain[name] for name in WEIGHT_MEASURES}
    if attn.b_Q is not None:
        u = torch.einsum("hid,hd->hi", W_K.detach().double(), attn.b_Q.detach().double())
        affine = bilinear_shares(attn.W_Q, W_K, key_bias=u)
        out["sym_share_affine"] = affine["sym_share"]
        out["antisym_share_affine"] = affine["antisym_share"]
        out["key_bias_norm"] = u.norm(dim=-1)
    return out


def weight_asymmetry_table(model: HookedTransformer) -> pd.DataFrame:
    """Tidy ``layer, head, measure, value`` of the weight asymmetry of every head."""
    records = []
    for layer, block in enumerate(model.blocks):
        for measure, values in attention_weight_asymmetry(block.attn).items():
            records += [
                {"layer": layer, "head": head, "measure": measure, "value": float(v)}
                for head, v in enumerate(values.tolist())
            ]
    return pd.DataFrame.from_records(records)


# --- patterns -----------------------------------------------------------------------------
def pattern_asymmetry(
    P: torch.Tensor, factor: float = 2.0, edge_level: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-matrix ``asym_ratio [...]`` and graph counts ``[..., 4]`` of ``P [..., n, n]``.

    Counts: edges, reciprocated edges, unordered pairs with at least one edge, and those of
    them that are directed (stronger direction >= ``factor`` x weaker).
    """
    # Norms in float32 are accurate to ~1e-7 relative; the ratio is reported in float64.
    n = P.shape[-1]
    Pt = P.mT
    norm = torch.linalg.matrix_norm(P).double().clamp_min(torch.finfo(torch.float64).tiny)
    ratio = torch.linalg.matrix_norm(P - Pt).double() / norm
    edge = edge_level / n <= P  # [..., n, n]
    edge.diagonal(dim1=-2, dim2=-1).fill_(False)
    edge_t = edge.mT
    mutual = edge & edge_t
    upper = torch.ones(n, n, dtype=torch.bool, device=P.device).triu(1)
    any_edge = (edge | edge_t) & upper
    directed = any_edge & (torch.maximum(P, Pt) >= factor * torch.minimum(P, Pt))
    counts = torch.stack(
        [m.sum(dim=(-1, -2)) for m in (edge, mutual, any_edge, directed)], dim=-1
    ).double()
    return ratio, counts


def dominance_violations(alpha: torch.Tensor) -> torch.Tensor:
    """Counts ``[..., 3]``: ordered pairs ``i != j``, product and max-diagonal violations."""
    n = alpha.shape[-1]
    diag = alpha.diagonal(dim1=-2, dim2=-1)  # [..., n]
    off = ~torch.eye(n, dtype=torch.bool, device=alpha.device)
    tol = 1 + RELATIVE_TOL
    product = (alpha * alpha.mT > tol * diag[..., :, None] * diag[..., None, :]) & off
    dominance = (alpha > tol * torch.maximum(diag[..., :, None], diag[..., None, :])) & off
    pairs = torch.full(alpha.shape[:-2], n * (n - 1), dtype=torch.float64, device=alpha.device)
    return torch.stack(
        [pairs, product.sum(dim=(-1, -2)).double(), dominance.sum(dim=(-1, -2)).double()], -1
    )


def unweighted_attention(X: torch.Tensor) -> torch.Tensor:
    """``softmax(X X^T / sqrt(C))`` for ``X [..., n, C]`` in float64: ``[..., n, n]``."""
    X = X.double()
    return torch.softmax(X @ X.mT / X.shape[-1] ** 0.5, dim=-1)


def attention_input(model: HookedTransformer, layer: int, resid_pre: torch.Tensor) -> torch.Tensor:
    """The input the attention of ``layer`` sees: ``ln1(resid_pre)`` if pre-norm, else itself."""
    if model.cfg.norm_position == "pre":
        return model.blocks[layer].ln1(resid_pre)
    return resid_pre


class PatternAsymmetry(Analyzer):
    """Streaming asymmetry of attention patterns per head, plus the unweighted baseline."""

    name = "pattern_asymmetry"

    def __init__(
        self,
        heads_per_layer: list[int],
        factor: float = 2.0,
        edge_level: float = 1.0,
        baseline: bool = True,
        input_fn=None,
    ) -> None:
        if factor < 1:
            raise ConfigError(f"the direction factor must be at least 1, not {factor}.")
        if edge_level <= 0:
            raise ConfigError(f"the edge level must be positive, not {edge_level}.")
        self.heads_per_layer = list(heads_per_layer)
        self.n_layers, self.n_heads = len(heads_per_layer), max(heads_per_layer)
        self.factor, self.edge_level, self.baseline = factor, edge_level, baseline
        self.input_fn = input_fn  # (layer, resid_pre) -> attention input; identity if None
        f64 = torch.float64
        self.sentences = 0
        self.ratio_sum = torch.zeros(self.n_layers, self.n_heads, dtype=f64)
        self.counts = torch.zeros(self.n_layers, self.n_heads, _COUNTS, dtype=f64)
        self.base_ratio_sum = torch.zeros(self.n_layers, dtype=f64)
        self.base_counts = torch.zeros(self.n_layers, _COUNTS, dtype=f64)
        self.base_violations = torch.zeros(self.n_layers, 3, dtype=f64)

    @classmethod
    def for_model(cls, model: HookedTransformer, **kwargs) -> PatternAsymmetry:
        if model.cfg.causal:
            raise ConfigError("pattern asymmetry needs a bidirectional (encoder) model.")
        return cls(
            model.heads_per_layer,
            input_fn=lambda layer, x: attention_input(model, layer, x),
            **kwargs,
        )

    def hook_names(self, model: HookedTransformer) -> list[str]:
        names = [f"blocks.{i}.attn.hook_pattern" for i in range(model.n_layers)]
        if self.baseline:
            names += [f"blocks.{i}.hook_resid_pre" for i in range(model.n_layers)]
        return names

    def update(self, batch: Batch, cache: ActivationCache) -> None:
        layers = range(self.n_layers)
        # All layers side by side on the head axis: one batched call per length group.
        patterns = torch.cat([cache["pattern", i] for i in layers], dim=1)  # [b, L*head, q, k]
        offsets = np.cumsum([0, *self.heads_per_layer])
        if self.baseline:
            inputs = [cache["resid_pre", i] for i in layers]  # L x [batch, pos, d_model]
            if self.input_fn is not None:
                inputs = [self.input_fn(i, x) for i, x in zip(layers, inputs, strict=True)]
            X_all = torch.stack(inputs, dim=2)  # [batch, pos, layer, d_model]
        for group in length_groups(batch.attention_mask):
            self.sentences += len(group.rows)
            P = gather_square(patterns, group)  # [group, L*head, n, n]
            ratio, counts = pattern_asymmetry(P, self.factor, self.edge_level)
            ratio, counts = ratio.sum(0).cpu(), counts.sum(0).cpu()  # [L*head], [L*head, 4]
            for layer, h in enumerate(self.heads_per_layer):
                self.ratio_sum[layer, :h] += ratio[offsets[layer] : offsets[layer + 1]]
                self.counts[layer, :h] += counts[offsets[layer] : offsets[layer + 1]]
            if not self.baseline:
                continue
            X = gather_tokens(X_all, group).transpose(1, 2)  # [group, layer, n, d_model]
            alpha = unweighted_attention(X)  # [group, layer, n, n]
            ratio, counts = pattern_asymmetry(alpha, self.factor, self.edge_level)
            self.base_ratio_sum += ratio.sum(0).cpu()
            self.base_counts += counts.sum(0).cpu()
            self.base_violations += dominance_violations(alpha).sum(0).cpu()

    def merge(self, other: PatternAsymmetry) -> PatternAsymmetry:
        if other.heads_per_layer != self.heads_per_layer:
            raise ConfigError("cannot merge asymmetry analyzers of different models.")
        self.sentences += other.sentences
        for name in ("ratio_sum", "counts", "base_ratio_sum", "base_counts", "base_violations"):
            getattr(self, name).add_(getattr(other, name))
        return self

    @staticmethod
    def _graph_measures(ratio_sum, counts, sentences) -> list[np.ndarray]:
        def share(num, den):
            return torch.where(den > 0, num / den.clamp_min(1), torch.full_like(num, float("nan")))

        ratio = ratio_sum / max(sentences, 1)
        directed = share(counts[..., 3], counts[..., 2])
        reciprocity = share(counts[..., 1], counts[..., 0])
        return [m.numpy() for m in (ratio, directed, reciprocity)]

    def result(self) -> dict[str, pd.DataFrame]:
        if self.sentences == 0:
            raise ConfigError("the asymmetry analyzer saw no sentences; pass a non-empty corpus.")
        values = self._graph_measures(self.ratio_sum, self.counts, self.sentences)
        records = [
            {"layer": layer, "head": head, "measure": measure, "value": float(v[layer, head])}
            for measure, v in zip(PATTERN_MEASURES, values, strict=True)
            for layer, h in enumerate(self.heads_per_layer)
            for head in range(h)
        ]
        tables = {"pattern_asymmetry": pd.DataFrame.from_records(records)}
        if self.baseline:
            base = self._graph_measures(self.base_ratio_sum, self.base_counts, self.sentences)
            pairs = self.base_violations[:, 0].clamp_min(1)
            base += [
                (self.base_violations[:, 1] / pairs).numpy(),
                (self.base_violations[:, 2] / pairs).numpy(),
            ]
            tables["asymmetry_baseline"] = pd.DataFrame.from_records(
                {"layer": layer, "measure": measure, "value": float(v[layer])}
                for measure, v in zip(BASELINE_MEASURES, base, strict=True)
                for layer in range(self.n_layers)
            )
        return tables
