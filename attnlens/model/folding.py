"""The weights a head really applies: the input norm folded into W_Q, W_K, W_V (read-only).

In a pre-norm block the attention reads ``norm(x)``, not ``x``: for LayerNorm
``norm(x) = g * (P x) / sigma(x) + beta`` with ``P = I - 1 1^T / d`` the centring projection,
for RMSNorm ``norm(x) = g * x / rms(x)``. So the query of token ``x`` is
``(x / s) P diag(g) W_Q + (beta W_Q + b_Q)``: the bilinear form the head applies to the
(per-token rescaled) residual stream is ``W~_Q W~_K^T`` with

- ``W~ = P diag(g) W`` (LayerNorm: gain folded in, reading weights centred, as
  TransformerLens' ``fold_ln`` + ``center_reading_weights``) or ``diag(g) W`` (RMSNorm);
- ``b~ = b + beta W`` (LayerNorm's bias folded into the head's bias).

The per-token factor ``1 / s`` (``sigma`` or ``rms``) scales a whole row of scores and cannot
be folded. Post-norm models (BERT) normalise before the residual stream is read, so their
attention reads its input directly and nothing is folded. The model is never modified.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnlens.model.attention import MultiHeadAttention
from attnlens.model.transformer import HookedTransformer


@dataclass(frozen=True)
class NormParams:
    """A LayerNorm or RMSNorm as plain tensors: ``kind``, ``weight [d]``, ``bias [d]``, ``eps``."""

    kind: str  # "layernorm" | "rmsnorm"
    weight: torch.Tensor
    bias: torch.Tensor | None
    eps: float

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """The norm of ``x [..., d]``, computed exactly as ``model.layers`` computes it."""
        if self.kind == "layernorm":
            return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)
        x32 = x.float()  # RMSNorm: statistics in float32, as in Llama
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)

    def to(self, device: torch.device | str) -> NormParams:
        bias = None if self.bias is None else self.bias.to(device)
        return NormParams(self.kind, self.weight.to(device), bias, self.eps)


def attention_input_norm(model: HookedTransformer, layer: int) -> NormParams | None:
    """The norm between the residual stream and ``layer``'s attention (pre-norm), else None.

    The hf backend's blocks give their verified norm as ``NormParams`` (or None) directly.
    """
    ln1 = model.blocks[layer].ln1
    if ln1 is None or isinstance(ln1, NormParams):
        return ln1
    cfg = model.cfg
    if cfg.norm_position != "pre" or not cfg.use_norm:
        return None
    bias = getattr(ln1, "bias", None)
    return NormParams(
        cfg.norm,
        ln1.weight.detach(),
        None if bias is None else bias.detach(),
        float(getattr(ln1, "eps", cfg.norm_eps)),
    )


@dataclass(frozen=True)
class FoldedWeights:
    """Per-head weights with the input norm folded in (float64, detached copies).

    ``W_Q [head, d_in, d_head]``; ``W_K``, ``W_V [kv_head, d_in, d]``; biases ``[head | kv_head,
    d]`` (None where the model has none and the norm adds none); ``folded`` tells whether a
    norm was folded (False: the module's own weights, as float64).
    """

    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    b_Q: torch.Tensor | None
    b_K: torch.Tensor | None
    b_V: torch.Tensor | None
    folded: bool


def fold_norm(
    W: torch.Tensor, b: torch.Tensor | None, norm: NormParams | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(W~, b~)`` for one projection ``W [head, d_in, d]`` read through ``norm`` (float64)."""
    W = W.detach().double()
    b = None if b is None else b.detach().double()
    if norm is None:
        return W, b
    gain = norm.weight.detach().double()
    folded = gain[None, :, None] * W  # diag(g) W, per head
    if norm.kind == "layernorm":
        folded = folded - folded.mean(dim=1, keepdim=True)  # P diag(g) W: centred reading
        if norm.bias is not None:
            shift = torch.einsum("i,hid->hd", norm.bias.detach().double(), W)  # beta W
            b = shift if b is None else b + shift
    return folded, b


def folded_attention_weights(model: HookedTransformer, layer: int) -> FoldedWeights:
    """``layer``'s W_Q, W_K, W_V (and biases) with its input norm folded in; see the module."""
    return attention_weights(model.blocks[layer].attn, attention_input_norm(model, layer))


def attention_weights(attn: MultiHeadAttention, norm: NormParams | None = None) -> FoldedWeights:
    """An attention module's weights read through ``norm`` (None: as they are), float64."""
    W_Q, b_Q = fold_norm(attn.W_Q, attn.b_Q, norm)
    W_K, b_K = fold_norm(attn.W_K, attn.b_K, norm)
    W_V, b_V = fold_norm(attn.W_V, attn.b_V, norm)
    return FoldedWeights(W_Q, W_K, W_V, b_Q, b_K, b_V, folded=norm is not None)
