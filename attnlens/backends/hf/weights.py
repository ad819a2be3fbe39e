"""Per-head W_Q, W_K, W_V, W_O read from a Hugging Face attention module.

One table of naming conventions (``QKV_LAYOUTS``, ``OUT_NAMES``) says where a module keeps its
projections and how a fused projection is split. A layout is only a candidate: the backend
keeps it for a layer only when the weights it reads reproduce that layer's queries, keys,
values and output-projection input on a probe batch (``verify``), so a table entry can never
silently give wrong weights. Tensors are read on each access as views of the model's
parameters (no copy; they follow ``model.to(...)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from einops import rearrange
from torch import nn

Projection = tuple[torch.Tensor, torch.Tensor | None]  # (weight [out, in], bias [out] | None)


def linear_parts(module: nn.Module) -> Projection | None:
    """``(weight [out, in], bias)`` of an nn.Linear-like module or GPT-2's Conv1D, else None."""
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        return None
    bias = getattr(module, "bias", None)
    bias = bias.detach() if isinstance(bias, torch.Tensor) else None
    if type(module).__name__ == "Conv1D":  # GPT-2: y = x W + b with W [in, out]
        return weight.detach().T, bias
    return weight.detach(), bias


def _submodule(module: nn.Module, path: str) -> nn.Module | None:
    for part in path.split("."):
        module = getattr(module, part, None)
        if not isinstance(module, nn.Module):
            return None
    return module


@dataclass(frozen=True)
class Shapes:
    """Head counts and widths of one attention call, as the attention function saw them."""

    n_heads: int
    n_kv_heads: int
    d_head: int
    d_head_v: int


# Each split returns (W_q [nq*d, in], W_k, W_v) rows and matching bias slices from one fused
# projection; None when the shapes do not fit.
Split = Callable[[torch.Tensor, Shapes], tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None]


def _blocks(t: torch.Tensor, s: Shapes):
    """[q rows | k rows | v rows] (Phi-3 qkv_proj, GPT-2 c_attn, ModernBERT Wqkv)."""
    sizes = (s.n_heads * s.d_head, s.n_kv_heads * s.d_head, s.n_kv_heads * s.d_head_v)
    if t.shape[0] != sum(sizes):
        return None
    return t.split(sizes, dim=0)


def _per_head(t: torch.Tensor, s: Shapes):
    """Per head [q, k, v] rows (GPT-NeoX and BLOOM query_key_value)."""
    if (s.n_heads != s.n_kv_heads or s.d_head != s.d_head_v
            or t.shape[0] != 3 * s.n_heads * s.d_head):
        return None
    grouped = t.reshape(s.n_heads, 3, s.d_head, *t.shape[1:])
    return tuple(grouped[:, i].reshape(s.n_heads * s.d_head, *t.shape[1:]) for i in range(3))


def _per_kv_group(t: torch.Tensor, s: Shapes):
    """Per key/value group [q x group, k, v] rows (Falcon's new decoder architecture)."""
    for n_kv in sorted({s.n_kv_heads, *range(1, s.n_heads + 1)}):
        if s.n_heads % n_kv or t.shape[0] != (s.n_heads + 2 * n_kv) * s.d_head:
            continue
        group = s.n_heads // n_kv
        grouped = t.reshape(n_kv, group + 2, s.d_head, *t.shape[1:])
        q = grouped[:, :group].reshape(s.n_heads * s.d_head, *t.shape[1:])
        return q, grouped[:, group].reshape(n_kv * s.d_head, *t.shape[1:]), grouped[
            :, group + 1].reshape(n_kv * s.d_head, *t.shape[1:])
    return None


@dataclass(frozen=True)
class QKVLayout:
    """Where one attention module keeps its q, k, v projections."""

    names: tuple[str, ...]  # three separate projections, or one fused
    split: Split | None = None  # how a fused projection is split

    @property
    def label(self) -> str:
        return "/".join(self.names) + (f" ({self.split.__name__.strip('_')})" if self.split else "")

    def read(self, attention: nn.Module, shapes: Shapes):
        """``((W_q, b_q), (W_k, b_k), (W_v, b_v))`` in nn.Linear orientation, or None."""
        parts = [linear_parts(m) if (m := _submodule(attention, n)) is not None else None
                 for n in self.names]
        if any(p is None for p in parts):
            return None
        if self.split is None:
            return tuple(parts)
        (weight, bias), = parts
        rows = self.split(weight, shapes)
        if rows is None:
            return None
        biases = self.split(bias, shapes) if bias is not None else (None, None, None)
        return tuple(zip(rows, biases, strict=True))


QKV_LAYOUTS: tuple[QKVLayout, ...] = (
    QKVLayout(("q_proj", "k_proj", "v_proj")),
    QKVLayout(("query", "key", "value")),
    QKVLayout(("q", "k", "v")),
    QKVLayout(("q_lin", "k_lin", "v_lin")),
    QKVLayout(("qkv_proj",), _blocks),
    QKVLayout(("Wqkv",), _blocks),
    QKVLayout(("c_attn",), _blocks),
    QKVLayout(("qkv",), _blocks),
    QKVLayout(("query_key_value",), _per_head),
    QKVLayout(("query_key_value",), _per_kv_group),
    QKVLayout(("query_key_value",), _blocks),
)
# Output projections: inside the attention module, or beside it in the parent (BERT's
# BertSelfOutput.dense, ViT's ViTSelfOutput.dense).
OUT_NAMES: tuple[str, ...] = (
    "o_proj", "out_proj", "o", "dense", "c_proj", "Wo", "out_lin", "proj", "output.dense",
)


def to_heads(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """nn.Linear weight ``[head * d, d_in]`` -> per head ``[head, d_in, d]`` (a view)."""
    return rearrange(weight, "(head d) d_in -> head d_in d", head=n_heads)


def out_to_heads(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Output nn.Linear weight ``[d_out, head * d_v]`` -> per head ``[head, d_v, d_out]``."""
    return rearrange(weight, "d_out (head d_v) -> head d_v d_out", head=n_heads)


@dataclass
class HeadWeights:
    """One attention layer's per-head weights (views), or None for a part not read."""

    W_Q: torch.Tensor | None = None  # [head, d_in, d_head]
    W_K: torch.Tensor | None = None  # [kv_head, d_kv_in, d_head]
    W_V: torch.Tensor | None = None  # [kv_head, d_kv_in, d_head_v]
    b_Q: torch.Tensor | None = None  # [head, d_head]
    b_K: torch.Tensor | None = None
    b_V: torch.Tensor | None = None
    W_O: torch.Tensor | None = None  # [head, d_head_v, d_out]
    b_O: torch.Tensor | None = None  # [d_out]


def _bias_heads(bias: torch.Tensor | None, n_heads: int) -> torch.Tensor | None:
    return None if bias is None else bias.reshape(n_heads, -1)


def _kv_heads(W: torch.Tensor, n_kv_heads: int) -> torch.Tensor:
    """Repeat per-group weights to the key/value heads the attention call sees (Falcon)."""
    if W.shape[0] == n_kv_heads:
        return W
    return W.repeat_interleave(n_kv_heads // W.shape[0], dim=0)


@dataclass(frozen=True)
class WeightRecipe:
    """How to read one layer's weights again: the verified layout and output projection."""

    attention: nn.Module
    shapes: Shapes
    qkv: QKVLayout | None
    out: nn.Module | None
    out_name: str = ""
    # Factors the module applies to its projected queries / keys (OPT: d_head ** -0.5),
    # folded into W_Q, b_Q / W_K, b_K so that they give the queries the attention receives.
    q_scale: float = 1.0
    k_scale: float = 1.0

    def read(self) -> HeadWeights:
        s = self.shapes
        weights = HeadWeights()
        parts = self.qkv.read(self.attention, s) if self.qkv is not None else None
        if parts is not None:
            (wq, bq), (wk, bk), (wv, bv) = parts
            n_kv_read = wk.shape[0] // s.d_head
            if self.q_scale != 1.0:
                wq, bq = wq * self.q_scale, None if bq is None else bq * self.q_scale
            if self.k_scale != 1.0:
                wk, bk = wk * self.k_scale, None if bk is None else bk * self.k_scale
            weights.W_Q, weights.b_Q = to_heads(wq, s.n_heads), _bias_heads(bq, s.n_heads)
            weights.W_K = _kv_heads(to_heads(wk, n_kv_read), s.n_kv_heads)
            weights.W_V = _kv_heads(to_heads(wv, n_kv_read), s.n_kv_heads)
            weights.b_K = None if bk is None else _kv_heads(_bias_heads(bk, n_kv_read),
                                                            s.n_kv_heads)
            weights.b_V = None if bv is None else _kv_heads(_bias_heads(bv, n_kv_read),
                                                            s.n_kv_heads)
        if self.out is not None:
            weight, bias = linear_parts(self.out)
            weights.W_O, weights.b_O = out_to_heads(weight, s.n_heads), bias
        return weights

    @property
    def label(self) -> str:
        qkv = self.qkv.label if self.qkv is not None else "-"
        return f"{qkv} + {self.out_name or '-'}"


def out_candidates(attention: nn.Module, parent: nn.Module | None) -> list[tuple[str, nn.Module]]:
    """(name, module) of the output projections the table names, inside then beside."""
    found = []
    for owner in (attention, parent):
        if owner is None:
            continue
        for name in OUT_NAMES:
            module = _submodule(owner, name)
            if module is not None and module is not attention and linear_parts(module):
                found.append((name, module))
    return found


def project(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """``x [pos, d_in]`` through per-head ``W [head, d_in, d]`` -> ``[pos, head, d]``."""
    out = torch.einsum("pi,hid->phd", x.to(W.dtype), W)
    return out if b is None else out + b
