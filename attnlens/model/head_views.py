"""Factored per-head views shared by attnlens' own attention and the hf backend's weight views.

A class mixing in ``PerHeadViews`` provides ``n_heads``, ``n_kv_heads``, ``d_out`` and the
per-head weights ``W_Q [head, d_in, d_head]``, ``W_K``/``W_V [kv_head, d_kv_in, d]`` and
``W_O [head, d_head_v, d_out]`` (or None without an output projection).
"""

from __future__ import annotations

import torch
from einops import rearrange

from attnlens.model.factored import FactoredMatrix

QUERY_SIDE = ("W_Q", "b_Q", "W_O")  # indexed by query head
KV_SIDE = ("W_K", "b_K", "W_V", "b_V")  # indexed by key/value head


def per_head_count(weights, group_size: int) -> float:
    """Parameters per query head of an object holding the per-head tensors (see above)."""
    q_side = sum(getattr(weights, n)[0].numel() for n in QUERY_SIDE
                 if getattr(weights, n) is not None)
    kv_side = sum(getattr(weights, n)[0].numel() for n in KV_SIDE
                  if getattr(weights, n) is not None)
    return q_side + kv_side / group_size


class PerHeadViews:
    """``QK``/``OV`` factored circuits and grouped-query helpers over per-head weights."""

    n_heads: int
    n_kv_heads: int
    d_out: int
    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_O: torch.Tensor | None

    @property
    def group_size(self) -> int:
        return self.n_heads // self.n_kv_heads

    def W_O_effective(self) -> torch.Tensor:
        """``W_O``, or without a projection the block-identity placing each head in its slice."""
        if self.W_O is not None:
            return self.W_O
        W_V = self.W_V
        eye = torch.eye(self.d_out, device=W_V.device, dtype=W_V.dtype)
        return rearrange(eye, "(head d_head_v) d_out -> head d_head_v d_out", head=self.n_heads)

    def _kv_per_query_head(self, W: torch.Tensor) -> torch.Tensor:
        return W.repeat_interleave(self.group_size, dim=0) if self.group_size > 1 else W

    def head_parameter_count(self) -> float:
        """Parameters that go with one query head: its W_Q, b_Q and W_O rows, plus its share
        of its key/value head's W_K, b_K, W_V, b_V (grouped-query heads share them)."""
        return per_head_count(self, self.group_size)

    @property
    def QK(self) -> FactoredMatrix:
        """Per-head ``W_Q W_K^T [head, d_in, d_kv_in]`` (the seed's patterns matrix W_P)."""
        W_K = self._kv_per_query_head(self.W_K)
        return FactoredMatrix(self.W_Q, W_K.transpose(-1, -2))

    @property
    def OV(self) -> FactoredMatrix:
        """Per-head ``W_V W_O [head, d_kv_in, d_out]`` (the seed's messages matrix W_M)."""
        return FactoredMatrix(self._kv_per_query_head(self.W_V), self.W_O_effective())
