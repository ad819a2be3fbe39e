"""Norms, activations, MLP and output heads used by HookedTransformer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnlens.errors import ConfigError
from attnlens.hooks import HookPoint


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's tanh approximation of GELU."""
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0))))


ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_new": gelu_new,
    "relu": F.relu,
    "silu": F.silu,
    "tanh": torch.tanh,
}


def activation(name: str):
    if name not in ACTIVATIONS:
        raise ConfigError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}.")
    return ACTIVATIONS[name]


class RMSNorm(nn.Module):
    """Root-mean-square norm as in Llama (statistics in float32)."""

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def make_norm(kind: str, d: int, eps: float, enabled: bool = True) -> nn.Module:
    if not enabled:
        return nn.Identity()
    if kind == "layernorm":
        return nn.LayerNorm(d, eps=eps)
    if kind == "rmsnorm":
        return RMSNorm(d, eps=eps)
    raise ConfigError(f"unknown norm {kind!r}; choose 'layernorm' or 'rmsnorm'.")


class MLP(nn.Module):
    """``W_out(act(W_in x))``, or gated ``W_out(act(W_gate x) * W_in x)`` (Llama's SwiGLU)."""

    def __init__(self, d_model: int, d_mlp: int, act: str, gated: bool, bias: bool) -> None:
        super().__init__()
        self.W_in = nn.Linear(d_model, d_mlp, bias=bias)
        self.W_gate = nn.Linear(d_model, d_mlp, bias=bias) if gated else None
        self.W_out = nn.Linear(d_mlp, d_model, bias=bias)
        self.act = activation(act)
        self.hook_pre = HookPoint()  # [batch, pos, d_mlp], before the non-linearity
        self.hook_post = HookPoint()  # [batch, pos, d_mlp], after it (and the gate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.W_gate is None:
            hidden = self.act(self.hook_pre(self.W_in(x)))
        else:
            hidden = self.act(self.hook_pre(self.W_gate(x))) * self.W_in(x)
        return self.W_out(self.hook_post(hidden))


class MaskedLMHead(nn.Module):
    """BERT-style MLM head: dense, activation, norm, decoder to the vocabulary."""

    def __init__(self, d_model: int, vocab: int, act: str, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.act = activation(act)
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.decoder = nn.Linear(d_model, vocab)

    def forward(self, resid: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(self.act(self.dense(resid))))  # [batch, pos, vocab]


class LMHead(nn.Module):
    """Unembedding of a causal LM: ``[batch, pos, d_model] -> [batch, pos, vocab]``."""

    def __init__(self, d_model: int, vocab: int, bias: bool) -> None:
        super().__init__()
        self.decoder = nn.Linear(d_model, vocab, bias=bias)

    def forward(self, resid: torch.Tensor) -> torch.Tensor:
        return self.decoder(resid)


class FirstTokenHead(nn.Module):
    """Pool the first token, then dense + activation (+ an output layer for classifiers).

    BERT's pooler (dense, tanh), BERT/RoBERTa classifiers (dense, tanh, out) and
    DistilBERT's classifier (dense, ReLU, out) all have this shape.
    """

    def __init__(self, d_model: int, act: str, n_labels: int = 0) -> None:
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.act = activation(act)
        self.out = nn.Linear(d_model, n_labels) if n_labels else None

    def forward(self, resid: torch.Tensor) -> torch.Tensor:
        pooled = self.act(self.dense(resid[:, 0]))  # [batch, d_model]
        return pooled if self.out is None else self.out(pooled)  # [batch, n_labels]
