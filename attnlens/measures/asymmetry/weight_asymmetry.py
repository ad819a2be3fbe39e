"""How asymmetric is each head's query/key bilinear form? (weights only, no corpus)

Per head, ``M = W_QK = W~_Q W~_K^T [d_in, d_in]`` with the input norm folded into the weights
(pre-norm models: ``attnlens.model.folding``; post-norm models read their input directly)
splits into ``S = (M + M^T) / 2`` and ``A = (M - M^T) / 2`` with ``||S||^2 + ||A||^2 =
||M||^2`` (Frobenius). Reported as shares of the *squared* norm, which add up to 1:

- ``sym_share = ||S||^2 / ||M||^2``, ``antisym_share = ||A||^2 / ||M||^2``;
- ``symmetry = tr(M M) / ||M||^2 = sym_share - antisym_share`` in ``[-1, 1]``.

Computed without forming ``d_in x d_in``: ``||M||^2 = sum((W_Q^T W_Q) * (W_K^T W_K))`` and
``tr(M M) = sum(B * B^T)`` with ``B = W_K^T W_Q [d_head, d_head]``, ``||S||^2 = (||M||^2 +
tr(MM)) / 2``: ``O(d_in d_head^2)`` instead of ``O(d_in^2 d_head)``, exact (float64).

Biases: the logit of query ``x`` and key ``y`` is ``x M y^T + x W_Q b_K^T + b_Q W_K^T y^T +
b_Q b_K^T``. The second and last terms do not depend on the key and cancel in the softmax;
the key-only term ``u . y`` with ``u = W_K b_Q`` does change attention. With the constant
input coordinate 1 the logits (up to per-query constants) are the bilinear form of
``M~ = [[M, 0], [u^T, 0]]`` on ``[x, 1]`` and ``[y, 1]``; ``sym_share_affine`` and
``antisym_share_affine`` are the shares of ``M~``, and ``key_bias_norm = ||u||``. Reported
for heads with a query bias (after folding, a LayerNorm bias counts as one).

**Rotary models** (RoPE): query ``i`` and key ``j`` meet through ``W_Q R(i - j) W_K^T`` with
``R(delta)`` the rotation by ``delta`` times each frequency (the model's own: RoPE scaling
included, dynamic NTK at an input of ``offsets`` tokens; YaRN's attention factor, a constant
on every score, is left out like ``1 / sqrt(d_head)``), so the form depends on the relative
offset. The plain measures are those of offset 0 (``R = I``); ``*_offsets_mean``
measures average them over the offsets ``0 .. offsets - 1`` (causal models; bidirectional
ones: ``-(offsets - 1) .. offsets - 1``), ``offsets = 128`` by default (the default
``--max-length``). Every offset is exact: with ``R = C + J S`` (``C``, ``S`` the diagonal
cosines and sines, ``J`` the rotate-half matrix) each trace above is a sum of quadratic forms
in the cosine and sine vectors, ``O(d_head^2)`` per offset and head.
"""

from __future__ import annotations

import pandas as pd
import torch

from attnlens.errors import ConfigError
from attnlens.model.config import RopeScaling
from attnlens.model.folding import FoldedWeights, folded_attention_weights
from attnlens.model.rotary import inverse_frequencies
from attnlens.model.transformer import HookedTransformer

WEIGHT_MEASURES = ("sym_share", "antisym_share", "symmetry")
BIAS_MEASURES = ("sym_share_affine", "antisym_share_affine", "key_bias_norm")
DEFAULT_OFFSETS = 128
OFFSETS_SUFFIX = "_offsets_mean"


def shares(norm_sq: torch.Tensor, trace_sq: torch.Tensor) -> dict[str, torch.Tensor]:
    """``sym_share``, ``antisym_share``, ``symmetry`` from ``||M||^2`` and ``tr(M M)``."""
    safe = norm_sq.clamp_min(torch.finfo(torch.float64).tiny)
    sym = ((norm_sq + trace_sq) / 2 / safe).clamp(0, 1)
    return {"sym_share": sym, "antisym_share": 1 - sym, "symmetry": trace_sq / safe}


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
    return {"norm_sq": norm_sq, "trace_sq": trace_sq, **shares(norm_sq, trace_sq)}


def _per_query_head(W: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Key/value heads repeated for the query heads sharing them: ``[head, ...]``."""
    return W.repeat_interleave(n_heads // W.shape[0], dim=0) if W.shape[0] != n_heads else W


def head_weight_asymmetry(weights: FoldedWeights) -> dict[str, torch.Tensor]:
    """Per-head weight measures (offset 0): name -> ``[head]`` (float64)."""
    W_Q = weights.W_Q
    W_K = _per_query_head(weights.W_K, W_Q.shape[0])  # [head, d_in, d_head]
    if W_Q.shape[1] != W_K.shape[1]:
        raise ConfigError("weight asymmetry needs self-attention (queries and keys of one width).")
    plain = bilinear_shares(W_Q, W_K)
    out = {name: plain[name] for name in WEIGHT_MEASURES}
    if weights.b_Q is not None:
        u = torch.einsum("hid,hd->hi", W_K, weights.b_Q)
        affine = bilinear_shares(W_Q, W_K, key_bias=u)
        out["sym_share_affine"] = affine["sym_share"]
        out["antisym_share_affine"] = affine["antisym_share"]
        out["key_bias_norm"] = u.norm(dim=-1)
    return out


def rotary_tables(
    d_head: int,
    rotary_dim: int,
    base: float,
    offsets: torch.Tensor,
    scaling: RopeScaling | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(cos [offset, d], sin [offset, d], J [d, d])`` with ``R(delta) = diag(cos) + J diag(sin)``.

    Row vectors rotate as ``x R``: ``x R = x * cos + rotate_half(x) * sin`` on the first
    ``rotary_dim`` features (``attention.apply_rotary``), the identity on the rest. The
    frequencies are the model's own (``scaling``: its RoPE scaling, for dynamic NTK those of
    an input holding every offset); YaRN's attention factor, a constant on every score like
    ``1 / sqrt(d_head)``, is left out as that scale is.
    """
    seq_len = int(offsets.abs().max()) + 1
    inv_freq = inverse_frequencies(rotary_dim, base, scaling, seq_len, torch.float64)
    angles = offsets.double()[:, None] * torch.cat((inv_freq, inv_freq))  # [offset, rotary_dim]
    cos = torch.ones(len(offsets), d_head, dtype=torch.float64)
    sin = torch.zeros(len(offsets), d_head, dtype=torch.float64)
    cos[:, :rotary_dim], sin[:, :rotary_dim] = angles.cos(), angles.sin()
    half = rotary_dim // 2
    J = torch.zeros(d_head, d_head, dtype=torch.float64)  # x J = rotate_half(x) = (-x2, x1)
    J[torch.arange(half, rotary_dim), torch.arange(half)] = -1.0
    J[torch.arange(half), torch.arange(half, rotary_dim)] = 1.0
    return cos, sin, J


def _quadratic(c: torch.Tensor, s: torch.Tensor, kernels: list[torch.Tensor]) -> torch.Tensor:
    """``c K1 c + c K2 s + s K3 c + s K4 s`` for every offset and head: ``[head, offset]``."""
    pairs = ((c, c), (c, s), (s, c), (s, s))
    return sum(
        torch.einsum("od,hde,oe->ho", a, k, b) for (a, b), k in zip(pairs, kernels, strict=True)
    )


def rotary_offset_measures(
    weights: FoldedWeights, cos: torch.Tensor, sin: torch.Tensor, J: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Measures of ``W_Q R(delta) W_K^T`` per head and offset: name -> ``[head, offset]``.

    ``tr(M^T M) = tr(R^T A R B)`` and ``tr(M M) = tr(R X R X)`` with ``A = W_Q^T W_Q``,
    ``B = W_K^T W_K``, ``X = W_K^T W_Q``; ``R = diag(c) + J diag(s)`` turns each into
    ``sum of v1^T (Y * Z^T) v2`` over ``v in {c, s}`` (``tr(D1 Y D2 Z) = d1^T (Y * Z^T) d2``).
    """
    W_Q = weights.W_Q
    W_K = _per_query_head(weights.W_K, W_Q.shape[0])
    A, B, X = W_Q.mT @ W_Q, W_K.mT @ W_K, W_K.mT @ W_Q  # [head, d, d]
    Bt, XJ = B.mT, X @ J
    norm_sq = _quadratic(cos, sin, [A * Bt, (A @ J) * Bt, (J.T @ A) * Bt, (J.T @ A @ J) * Bt])
    trace_sq = _quadratic(cos, sin, [X * X.mT, XJ * X.mT, X * XJ.mT, XJ * XJ.mT])
    out = shares(norm_sq, trace_sq)
    if weights.b_Q is not None:
        # u(delta) = W_K R(delta)^T b_Q: ||u||^2 = v B v^T with v = b_Q R = b_Q * c + (b_Q J) * s
        b = weights.b_Q  # [head, d]
        v = b[:, None, :] * cos[None] + (b @ J)[:, None, :] * sin[None]  # [head, offset, d]
        key_sq = torch.einsum("hod,hde,hoe->ho", v, B, v)
        affine = shares(norm_sq + key_sq, trace_sq)
        out["sym_share_affine"] = affine["sym_share"]
        out["antisym_share_affine"] = affine["antisym_share"]
        out["key_bias_norm"] = key_sq.clamp_min(0).sqrt()
    return out


def offsets_for(model: HookedTransformer, n: int) -> torch.Tensor:
    """Relative offsets ``query - key`` a model can see among ``n`` tokens."""
    if n < 1:
        raise ConfigError(f"the number of rotary offsets must be at least 1, not {n}.")
    return torch.arange(n) if model.cfg.causal else torch.arange(-(n - 1), n)


def weight_asymmetry_table(
    model: HookedTransformer, offsets: int = DEFAULT_OFFSETS
) -> pd.DataFrame:
    """Tidy ``layer, head, measure, value`` of the weight asymmetry of every head."""
    records = []
    for layer, block in enumerate(model.blocks):
        weights = folded_attention_weights(model, layer)
        measures = head_weight_asymmetry(weights)
        attn = block.attn
        if attn.rotary_dim:
            cos, sin, J = (t.to(weights.W_Q.device) for t in rotary_tables(
                attn.d_head, attn.rotary_dim, attn.rotary_base, offsets_for(model, offsets),
                attn.rotary_scaling))
            per_offset = rotary_offset_measures(weights, cos, sin, J)
            measures |= {f"{k}{OFFSETS_SUFFIX}": v.mean(dim=1) for k, v in per_offset.items()}
        for measure, values in measures.items():
            records += [
                {"layer": layer, "head": head, "measure": measure, "value": float(v)}
                for head, v in enumerate(values.tolist())
            ]
    return pd.DataFrame.from_records(records)
