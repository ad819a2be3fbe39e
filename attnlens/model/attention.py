"""Multi-head attention with hook points: a manual reference path and an SDPA fast path.

Seed notation (the texts this project grew from) and the arguments that carry it:

===========  ===============================  ==============================
seed symbol  meaning                          argument / shape
===========  ===============================  ==============================
S            sequence length                  ``query_pos`` / ``key_pos``
I            input width                      ``d_in`` (``d_kv_in`` for keys/values)
O            output width                     ``d_out``
D            total query/key width            ``n_heads * d_head``
N            number of heads                  ``n_heads``
D/N          query/key width of one head      ``d_head``
O/N          value width of one head          ``d_head_v``
W_P          a head's "patterns" matrix       ``attn.QK[h]`` = W_Q[h] @ W_K[h]^T
W_M          a head's "messages" matrix       ``attn.OV[h]`` = W_V[h] @ W_O[h]
===========  ===============================  ==============================

Per-head weights are stored per head so that analyses read them without reshaping:
``W_Q [head, d_in, d_head]``, ``W_K [kv_head, d_kv_in, d_head]``,
``W_V [kv_head, d_kv_in, d_head_v]``, ``W_O [head, d_head_v, d_out]``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from attnlens.errors import ConfigError
from attnlens.hooks import HookPoint, QueryBlock
from attnlens.model.config import RopeScaling
from attnlens.model.head_views import PerHeadViews
from attnlens.model.masks import AttentionMask, mask_from_parts, mask_value
from attnlens.model.query_blocks import DEFAULT_BLOCKS, QueryBlocks
from attnlens.model.rotary import attention_factor, inverse_frequencies


def additive_attention_mask(
    key_padding_mask: torch.Tensor | None,
    query_len: int,
    key_len: int,
    causal: bool,
    dtype: torch.dtype,
    device: torch.device | str,
    attn_bias: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """Combine padding, causal and additive masks into one additive mask.

    ``key_padding_mask [batch, key_pos]`` is 1/True for real tokens. Returns
    ``[batch | 1, head | 1, query_pos, key_pos]`` with ``finfo.min`` where attention is
    forbidden (``mask_value``), or None when nothing is masked (which lets SDPA take its
    fastest kernel).
    """
    return mask_from_parts(
        key_padding_mask, query_len, key_len, causal, dtype, device, attn_bias
    ).dense()


def _mask_rows(mask: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Rows ``start:stop`` of an additive mask ``[..., query_pos | 1, key_pos]``."""
    return mask if mask.shape[-2] == 1 else mask[..., start:stop, :]


def sliding_window_mask(
    mask: torch.Tensor | AttentionMask | None, query_len: int, key_len: int, window: int
) -> torch.Tensor | AttentionMask | None:
    """``mask`` with every key more than ``window - 1`` positions before its query forbidden.

    Query ``i`` keeps keys ``j`` with ``i + (key_len - query_len) - j < window`` (bottom-right
    aligned, as the causal mask; transformers' ``sliding_window_overlay``). Returns ``mask``
    itself when the window covers every key, so no extra mask is built for short inputs.
    ``mask [batch | 1, head | 1, query_pos, key_pos]`` is additive, or an ``AttentionMask``
    (the windowed one then builds its rows on demand too, for query blocks); None is not
    allowed for a window shorter than the input (causal models always have a mask).
    """
    if window >= key_len:
        return mask
    if mask is None:
        raise ConfigError("a sliding window needs the model's causal mask.")
    if isinstance(mask, AttentionMask):
        return mask.with_window(window)
    neg = mask_value(mask.dtype)
    too_far = torch.ones(query_len, key_len, dtype=torch.bool, device=mask.device).tril(
        key_len - query_len - window
    )  # [query_pos, key_pos]
    return mask.masked_fill(too_far, neg)


def _adds_in_place(scores: torch.Tensor, mask: torch.Tensor) -> bool:
    """Whether ``scores.add_(mask)`` gives ``scores + mask``: same result dtype and shape."""
    # numpy's: torch.broadcast_shapes imports torch.fx's symbolic shapes (sympy: ~0.7 s of
    # the first forward)
    return (torch.promote_types(scores.dtype, mask.dtype) == scores.dtype
            and np.broadcast_shapes(tuple(scores.shape), tuple(mask.shape)) == scores.shape)


def _softmax_dtype(scores: torch.Tensor) -> torch.dtype:
    """fp16/bf16 scores: softmax in float32 (as HF eager); float32 and float64 keep their own."""
    return torch.promote_types(scores.dtype, torch.float32)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the last axis, the rotation used by Llama-style RoPE."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotary_cos_sin(
    positions: torch.Tensor,
    rotary_dim: int,
    base: float,
    dtype: torch.dtype,
    scaling: RopeScaling | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables for ``positions [batch, pos]``: each ``[batch, pos, 1, rotary_dim]``.

    Computed in float32 as transformers does, then cast to ``dtype``. ``scaling``: a RoPE
    scaling variant (``attnlens.model.rotary``); dynamic NTK reads the number of positions
    (largest position + 1) of this forward.
    """
    seq_len = None
    if scaling is not None and scaling.rope_type == "dynamic":
        seq_len = int(positions.max()) + 1
    inv_freq = inverse_frequencies(rotary_dim, base, scaling, seq_len).to(positions.device)
    freqs = positions.float()[..., None] * inv_freq  # [batch, pos, rotary_dim / 2]
    angles = torch.cat((freqs, freqs), dim=-1)[:, :, None, :]  # [batch, pos, 1, rotary_dim]
    cos, sin = angles.cos(), angles.sin()
    factor = attention_factor(scaling)
    if factor != 1.0:  # YaRN scales cos and sin (so each score by factor ** 2)
        cos, sin = cos * factor, sin * factor
    return cos.to(dtype), sin.to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``rotary_dim`` features of ``x [batch, pos, head, d_head]``."""
    rotary_dim = cos.shape[-1]
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    x_rot = x_rot * cos + rotate_half(x_rot) * sin
    return torch.cat((x_rot, x_pass), dim=-1) if x_pass.shape[-1] else x_rot


class MultiHeadAttention(nn.Module, PerHeadViews):
    """Multi-head attention, hookable, with an exact manual path and an SDPA fast path.

    The manual path (scores, softmax, weighted sum) is the reference and feeds the hooks
    ``hook_scores`` and ``hook_pattern``; ``torch.nn.functional.scaled_dot_product_attention``
    is used whenever no hook needs those (and ``use_sdpa`` is True). Dropout is not applied:
    attnlens analyses trained models in inference mode. ``QK``, ``OV``, ``group_size`` and
    ``W_O_effective()`` come from ``PerHeadViews``.

    Hook shapes: ``hook_q``/``hook_k``/``hook_v [batch, pos, head, d_head]`` (keys and values
    have ``n_kv_heads`` heads; q and k are taken after rotary embedding), ``hook_scores`` and
    ``hook_pattern [batch, head, query_pos, key_pos]`` (scores are scaled and masked; float32
    or wider with ``upcast_scores``),
    ``hook_z [batch, query_pos, head, d_head_v]`` (before the head gate),
    ``hook_result [batch, query_pos, head, d_out]`` (each head's gated contribution; computed
    only when hooked, since it costs ``n_heads`` times the output's memory).

    Long inputs: the manual path computes the pattern ``query_blocks.block_rows`` query rows
    at a time (``[batch, head, rows, key_pos]``; each row's softmax complete within its
    block) and fires ``hook_scores`` / ``hook_pattern`` once per block with
    ``hook.query_block`` set, when every hook there accepts blocks; ``z`` is assembled from
    the blocks' ``pattern @ v``. One block is the whole matrix (short inputs, or a hook that
    needs it, refused above ``query_blocks.whole_matrix_limit``).
    """

    def __init__(
        self,
        d_in: int,
        n_heads: int,
        d_head: int | None = None,
        d_out: int | None = None,
        d_head_v: int | None = None,
        n_kv_heads: int | None = None,
        d_kv_in: int | None = None,
        use_out_proj: bool = True,
        qkv_bias: bool = True,
        out_bias: bool = True,
        causal: bool = False,
        scale: float | None = None,
        rotary_dim: int = 0,
        rotary_base: float = 10000.0,
        rotary_scaling: RopeScaling | None = None,
        upcast_scores: bool = False,
    ) -> None:
        super().__init__()
        d_out = d_in if d_out is None else d_out
        d_head = d_in // n_heads if d_head is None else d_head
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if use_out_proj:
            d_head_v = d_head if d_head_v is None else d_head_v
        else:
            # Without W_O the heads are concatenated straight into the output: O = N * O/N.
            if d_out % n_heads:
                raise ConfigError(f"d_out={d_out} must be divisible by n_heads={n_heads}.")
            d_head_v = d_out // n_heads if d_head_v is None else d_head_v
            if d_head_v * n_heads != d_out:
                raise ConfigError("without an output projection, n_heads * d_head_v == d_out.")
        if n_kv_heads < 1 or n_heads % n_kv_heads:
            raise ConfigError(f"n_heads={n_heads} must be a multiple of n_kv_heads={n_kv_heads}.")
        if rotary_dim % 2 or rotary_dim > d_head:
            raise ConfigError(f"rotary_dim={rotary_dim} must be even and at most d_head={d_head}.")
        self.d_in, self.d_out, self.d_kv_in = d_in, d_out, d_in if d_kv_in is None else d_kv_in
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.d_head, self.d_head_v = d_head, d_head_v
        self.causal = causal
        self.scale = 1.0 / math.sqrt(d_head) if scale is None else scale
        self.rotary_dim, self.rotary_base = rotary_dim, rotary_base
        self.rotary_scaling = rotary_scaling
        # Scores in at least float32 whatever the input dtype (GPT-2's reorder_and_upcast_attn).
        self.upcast_scores = upcast_scores
        self.use_sdpa = True
        self.query_blocks: QueryBlocks = DEFAULT_BLOCKS  # long inputs: blocks of query rows

        self.W_Q = nn.Parameter(torch.empty(n_heads, d_in, d_head))
        self.W_K = nn.Parameter(torch.empty(n_kv_heads, self.d_kv_in, d_head))
        self.W_V = nn.Parameter(torch.empty(n_kv_heads, self.d_kv_in, d_head_v))
        self.b_Q = nn.Parameter(torch.zeros(n_heads, d_head)) if qkv_bias else None
        self.b_K = nn.Parameter(torch.zeros(n_kv_heads, d_head)) if qkv_bias else None
        self.b_V = nn.Parameter(torch.zeros(n_kv_heads, d_head_v)) if qkv_bias else None
        self.W_O = nn.Parameter(torch.empty(n_heads, d_head_v, d_out)) if use_out_proj else None
        self.b_O = nn.Parameter(torch.zeros(d_out)) if (use_out_proj and out_bias) else None

        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_scores, self.hook_pattern = HookPoint(), HookPoint()
        self.hook_z, self.hook_result = HookPoint(), HookPoint()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Random init with unit-variance outputs for unit-variance inputs (std 1/sqrt(fan_in))."""
        for w in (self.W_Q, self.W_K, self.W_V):
            nn.init.normal_(w, std=w.shape[1] ** -0.5)
        if self.W_O is not None:
            nn.init.normal_(self.W_O, std=(self.n_heads * self.d_head_v) ** -0.5)

    @property
    def needs_manual_path(self) -> bool:
        return not self.use_sdpa or self.hook_scores.has_hooks or self.hook_pattern.has_hooks

    def _project(
        self, x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None
    ) -> torch.Tensor:
        # x [batch, pos, d_in] @ W [head, d_in, d] -> [batch, pos, head, d]
        weight = rearrange(W, "head d_in d -> (head d) d_in")
        bias = None if b is None else b.reshape(-1)
        out = F.linear(x, weight, bias)  # [batch, pos, head * d]
        return out.view(*x.shape[:-1], W.shape[0], W.shape[2])

    def forward(
        self,
        x: torch.Tensor,
        kv_input: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | AttentionMask | None = None,
        key_padding_mask: torch.Tensor | None = None,
        attn_bias: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        kv_positions: torch.Tensor | None = None,
        head_gate: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attend from ``x [batch, query_pos, d_in]`` to ``kv_input [batch, key_pos, d_kv_in]``.

        ``kv_input`` defaults to ``x`` (self-attention). ``mask`` is a ready additive mask
        ``[batch | 1, head | 1, query_pos, key_pos]`` or an ``AttentionMask`` that builds
        its rows on demand (built once per model forward); without
        it one is built from ``key_padding_mask [batch, key_pos]`` (1 = real token), the
        module's ``causal`` flag and ``attn_bias``. ``positions [batch, pos]`` number the
        tokens for rotary embedding. ``head_gate [head]`` scales each head's contribution.
        Returns ``[batch, query_pos, d_out]``.
        """
        kv = x if kv_input is None else kv_input
        batch, query_len, _ = x.shape
        key_len = kv.shape[1]
        if mask is None:
            mask = mask_from_parts(
                key_padding_mask, query_len, key_len, self.causal, x.dtype, x.device, attn_bias
            )

        q = self._project(x, self.W_Q, self.b_Q)  # [batch, query_pos, head, d_head]
        k = self._project(kv, self.W_K, self.b_K)  # [batch, key_pos, kv_head, d_head]
        v = self._project(kv, self.W_V, self.b_V)  # [batch, key_pos, kv_head, d_head_v]
        if self.rotary_dim:
            if positions is None:
                positions = torch.arange(query_len, device=x.device).expand(batch, query_len)
            if kv_positions is None:
                kv_positions = positions if kv_input is None else torch.arange(
                    key_len, device=x.device
                ).expand(batch, key_len)
            rotary = (self.rotary_dim, self.rotary_base, q.dtype, self.rotary_scaling)
            cos, sin = rotary_cos_sin(positions, *rotary)
            q = apply_rotary(q, cos, sin)
            if kv_positions is not positions:
                cos, sin = rotary_cos_sin(kv_positions, *rotary)
            k = apply_rotary(k, cos, sin)
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)

        q_h = q.transpose(1, 2)  # [batch, head, query_pos, d_head]
        k_h = k.transpose(1, 2)  # [batch, kv_head, key_pos, d_head]
        v_h = v.transpose(1, 2)  # [batch, kv_head, key_pos, d_head_v]
        score_dtype = q.dtype
        if self.upcast_scores:
            score_dtype = torch.promote_types(q.dtype, torch.float32)
        if self.needs_manual_path or score_dtype != q.dtype:
            if self.group_size > 1:
                k_h = k_h.repeat_interleave(self.group_size, dim=1)  # [batch, head, key_pos, d]
                v_h = v_h.repeat_interleave(self.group_size, dim=1)
            # [batch, head, query_pos, d_head_v]
            z = self._manual_attention(q_h, k_h, v_h, mask, score_dtype)
        else:
            if isinstance(mask, AttentionMask):
                sdpa_mask, is_causal = mask.for_sdpa()
            else:
                sdpa_mask, is_causal = mask, False
            z = F.scaled_dot_product_attention(
                q_h,
                k_h,
                v_h,
                attn_mask=sdpa_mask,
                is_causal=is_causal,
                scale=self.scale,
                enable_gqa=self.group_size > 1,
            )  # [batch, head, query_pos, d_head_v]
        z = self.hook_z(z.transpose(1, 2))  # [batch, query_pos, head, d_head_v]
        if head_gate is not None:
            z = z * head_gate.to(z.dtype)[:, None]  # gate [head] -> [head, 1], broadcast
        return self._combine_heads(z)

    def _block_rows(self, q_h: torch.Tensor, key_len: int) -> int:
        """Query rows per block: all of them when a hook needs the whole matrix (refused
        above the whole-matrix limit), else ``query_blocks.block_rows``."""
        batch, heads, query_len, _ = q_h.shape
        blocks = self.query_blocks
        for point in (self.hook_scores, self.hook_pattern):
            if point.has_hooks and point.needs_whole:
                blocks.check_whole(query_len, f"a hook on {point.name or 'hook_pattern'}")
                return query_len
        return blocks.block_rows(batch, heads, query_len, key_len, q_h.device)

    def _manual_attention(
        self,
        q_h: torch.Tensor,
        k_h: torch.Tensor,
        v_h: torch.Tensor,
        mask: torch.Tensor | AttentionMask | None,
        score_dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """Scores, softmax and the weighted sum, a block of query rows at a time; the hooks
        on scores and patterns fire once per block. ``q_h [batch, head, query_pos, d_head]``,
        ``k_h``/``v_h [batch, head, key_pos, d]`` (grouped heads already repeated); scores in
        ``score_dtype`` (default ``q_h``'s; wider with ``upcast_scores``), softmax in at least
        float32, patterns in ``q_h``'s dtype. Returns ``z [batch, head, query_pos, d_head_v]``."""
        query_len, key_len = q_h.shape[-2], k_h.shape[-2]
        rows = self._block_rows(q_h, key_len)
        out_dtype = q_h.dtype
        score_dtype = score_dtype or out_dtype
        q_s = q_h.to(score_dtype)  # no-op unless upcast
        keys_t = k_h.to(score_dtype).transpose(-1, -2)  # [batch, head, d_head, key_pos]
        if rows >= query_len:  # one block: the whole matrix
            dense = mask.dense() if isinstance(mask, AttentionMask) else mask
            return self._attend_block(q_s, keys_t, v_h, dense, QueryBlock(0, query_len,
                                                                          query_len))

        def mask_rows(start: int, stop: int) -> torch.Tensor | None:
            if isinstance(mask, AttentionMask):
                return mask.rows(start, stop)
            return None if mask is None else _mask_rows(mask, start, stop)

        def pattern_rows(start: int, stop: int) -> torch.Tensor:
            """Rows ``start:stop`` of this layer's pattern, recomputed (no hooks)."""
            scores = torch.matmul(q_s[:, :, start:stop], keys_t) * self.scale
            block_mask = mask_rows(start, stop)
            if block_mask is not None:
                scores = scores + block_mask
            return F.softmax(scores, dim=-1, dtype=_softmax_dtype(scores)).to(out_dtype)

        z = q_h.new_empty(*q_h.shape[:-1], v_h.shape[-1])  # [batch, head, query_pos, d_v]
        self.hook_pattern.pattern_rows = pattern_rows  # analyzers may recompute rows
        try:
            for start in range(0, query_len, rows):
                stop = min(start + rows, query_len)
                z[:, :, start:stop] = self._attend_block(
                    q_s[:, :, start:stop], keys_t, v_h, mask_rows(start, stop),
                    QueryBlock(start, stop, query_len))
        finally:
            self.hook_pattern.pattern_rows = None
        return z

    def _attend_block(
        self,
        q_rows: torch.Tensor,
        keys_t: torch.Tensor,
        v_h: torch.Tensor,
        mask: torch.Tensor | None,
        block: QueryBlock,
    ) -> torch.Tensor:
        """One block: ``q_rows [batch, head, rows, d_head]`` against every key (both in the
        score dtype); returns the rows' ``z [batch, head, rows, d_head_v]`` (``v_h``'s dtype)."""
        # [batch, head, rows, key_pos]; scaled and masked in place (a fresh product: the
        # same numbers as ``* scale`` and ``+ mask``, without two more tensors of its size)
        scores = torch.matmul(q_rows, keys_t).mul_(self.scale)
        if mask is not None:
            if _adds_in_place(scores, mask):
                scores.add_(mask)
            else:
                scores = scores + mask
        scores = self.hook_scores.fire_block(scores, block)
        pattern = F.softmax(scores, dim=-1, dtype=_softmax_dtype(scores)).to(v_h.dtype)
        pattern = self.hook_pattern.fire_block(pattern, block)
        return torch.matmul(pattern, v_h)  # [batch, head, rows, d_head_v]

    def _combine_heads(self, z: torch.Tensor) -> torch.Tensor:
        """Heads' values ``z [batch, pos, head, d_head_v]`` -> output ``[batch, pos, d_out]``."""
        if self.hook_result.has_hooks:
            W_O = self.W_O_effective()
            result = torch.einsum("bphv,hvo->bpho", z, W_O)  # [batch, pos, head, d_out]
            out = self.hook_result(result).sum(dim=2)
            return out if self.b_O is None else out + self.b_O
        z_flat = z.reshape(*z.shape[:2], -1)  # [batch, pos, head * d_head_v]
        if self.W_O is None:
            return z_flat
        weight = rearrange(self.W_O, "head d_head_v d_out -> d_out (head d_head_v)")
        return F.linear(z_flat, weight, self.b_O)

    def extra_repr(self) -> str:
        return (
            f"d_in={self.d_in}, d_out={self.d_out}, n_heads={self.n_heads}, "
            f"n_kv_heads={self.n_kv_heads}, d_head={self.d_head}, d_head_v={self.d_head_v}, "
            f"causal={self.causal}, rotary_dim={self.rotary_dim}"
        )
