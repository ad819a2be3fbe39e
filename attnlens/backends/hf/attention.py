"""The ``attnlens`` attention function registered on transformers' attention interface.

transformers 5.x routes a model's attention through ``ALL_ATTENTION_FUNCTIONS``: the model's
attention module computes queries, keys and values (after rotary embeddings, before any
repetition of grouped keys) and calls ``fn(module, query, key, value, attention_mask,
**kwargs)``, then reshapes the returned ``attn_output [batch, query_pos, head, d_head_v]`` and
applies its output projection. This function computes what the model's own
``eager_attention_forward`` computes, in the same order of operations, and fires attnlens'
hook points on the way (``slots.AttentionSlot``).

Every keyword a model passes is honoured (``EFFECTS``), or has no effect on eager attention:
listed in ``NO_EFFECT`` (read only by other kernels), None, or swallowed unread by the
``**kwargs`` of the model's own eager function (``conventions``: a keyword that function
names is one it reads). Any other keyword raises ``UnsupportedKeywordError`` naming it: a
keyword attnlens does not implement could change the attention, and is never dropped silently.

Precision follows the model's own eager function (``conventions``), except that float64 is
never rounded to float32: where that function takes its softmax (or forms its scores) in
float32, a float64 model takes them in float64, as attnlens' native attention does (so
``--dtype float64`` runs the whole attention in float64 on both backends). fp32, fp16 and
bf16 are computed exactly as the model's eager attention computes them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnlens.backends.hf.conventions import eager_conventions
from attnlens.backends.hf.row_mask import attnlens_mask, dense, mask_rows
from attnlens.backends.hf.slots import current_slot, record, recording_calls
from attnlens.errors import AttnlensError
from attnlens.hooks import QueryBlock

IMPLEMENTATION = "attnlens"

# Keywords that change the attention, and how (each is applied below).
EFFECTS = {
    "scaling": "multiplies q k^T (default 1 / sqrt(d_head))",
    "dropout": "must be 0: attnlens analyses models in eval mode",
    "softcap": "scores -> softcap * tanh(scores / softcap) (Gemma 2)",
    "position_bias": "added to the scores before the mask (T5 relative position bias)",
    "s_aux": "per-head sink logits: an extra softmax column, dropped after (gpt-oss), or "
             "as the model's eager does it, a sigmoid(logsumexp - sink) output factor",
    "sinks": "the same as s_aux, under the name other models use",
    "sliding_window": "carried by the eager mask the model builds for that layer",
    "is_causal": "carried by the eager mask the model builds (eager ignores the flag)",
}
# Keywords read only by other kernels (flash, sdpa, paged) or by the model's own bookkeeping:
# the eager computation does not depend on them.
NO_EFFECT = frozenset({
    "position_ids", "cache_position", "output_attentions", "output_hidden_states",
    "output_router_logits", "use_cache", "return_dict", "num_items_in_batch",
    "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx",
    "deterministic", "layer_idx", "head_mask", "query_length", "target_dtype",
})


class UnsupportedKeywordError(AttnlensError):
    """A model passed its attention function a keyword attnlens does not implement."""


def unread_keywords(kwargs: dict, parameters: frozenset[str] | None) -> list[str]:
    """The keywords that could change eager attention and that attnlens does not implement."""
    return sorted(
        k for k, value in kwargs.items()
        if k not in NO_EFFECT and value is not None
        and (parameters is None or k in parameters)
    )


def _check_keywords(module: torch.nn.Module, kwargs: dict, parameters) -> None:
    unknown = unread_keywords(kwargs, parameters)
    if unknown:
        raise UnsupportedKeywordError(
            f"{type(module).__name__} passes the attention keyword(s) {', '.join(unknown)}, "
            "which attnlens does not implement; use --backend native if a converter exists, "
            "or report the model (its eager attention may depend on them)."
        )


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """``[batch, kv_head, pos, d] -> [batch, kv_head * groups, pos, d]`` (grouped-query heads)."""
    if groups == 1:
        return x
    batch, kv_heads, pos, d = x.shape
    return x[:, :, None].expand(batch, kv_heads, groups, pos, d).reshape(
        batch, kv_heads * groups, pos, d
    )


def at_least_float32(dtype: torch.dtype) -> torch.dtype:
    """float32 for half precision and float32, float64 kept: where a model's eager function
    rounds to float32, float64 models stay float64 (as attnlens' native attention)."""
    return torch.promote_types(dtype, torch.float32)


def _softmax(scores: torch.Tensor, in_float32: bool, dtype: torch.dtype) -> torch.Tensor:
    if in_float32:
        return F.softmax(scores, dim=-1, dtype=at_least_float32(scores.dtype)).to(dtype)
    return F.softmax(scores, dim=-1).to(dtype)


def _sink_softmax(
    scores: torch.Tensor, sinks: torch.Tensor, in_float32: bool, dtype: torch.dtype
) -> torch.Tensor:
    """Softmax over the keys plus one sink logit per head, the sink column dropped after."""
    batch, heads, queries, _ = scores.shape
    if sinks.dim() == 1:  # [head] -> [batch, head, query_pos, 1]
        sinks = sinks.reshape(1, -1, 1, 1).expand(batch, heads, queries, 1)
    combined = torch.cat([scores, sinks.to(scores.dtype)], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    softmax_dtype = at_least_float32(combined.dtype) if in_float32 else combined.dtype
    probs = F.softmax(combined, dim=-1, dtype=softmax_dtype)
    return probs[..., :-1].to(dtype)


def attnlens_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    softcap: float | None = None,
    position_bias: torch.Tensor | None = None,
    s_aux: torch.Tensor | None = None,
    sinks: torch.Tensor | None = None,
    sliding_window: int | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Eager attention with attnlens' hooks and head gates (module docstring).

    ``query [batch, head, query_pos, d_head]``, ``key``/``value [batch, kv_head, key_pos, d]``;
    ``attention_mask`` additive ``[batch | 1, 1 | head, query_pos, key_pos]`` or None.
    Returns ``(attn_output [batch, query_pos, head, d_head_v], pattern [batch, head, query_pos,
    key_pos])``.
    """
    conventions = eager_conventions(module)
    _check_keywords(module, kwargs, conventions.parameters)
    if dropout and module.training:
        raise AttnlensError(
            f"{type(module).__name__} runs attention dropout ({dropout}) in training mode; "
            "attnlens analyses models in eval mode: call model.eval()."
        )
    slot = current_slot(module)
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    sink_logits = s_aux if s_aux is not None else sinks
    if sink_logits is None and conventions.module_sinks:
        sink_logits = getattr(module, "sinks", None)
    if sliding_window is not None and attention_mask is None and key.shape[-2] > sliding_window:
        raise AttnlensError(
            f"{type(module).__name__} asks for a sliding window of {sliding_window} keys but "
            "passes no mask that holds it; attnlens cannot apply the window itself."
        )

    if slot is not None:  # hooks see [batch, pos, head, d]
        query = slot.fire("q", query.transpose(1, 2)).transpose(1, 2)
        key = slot.fire("k", key.transpose(1, 2)).transpose(1, 2)
        value = slot.fire("v", value.transpose(1, 2)).transpose(1, 2)
    groups = query.shape[1] // key.shape[1]
    if (slot is not None and slot.fast and softcap is None and sink_logits is None
            and not conventions.float32_scores):
        return _fast_path(slot, query, key, value, attention_mask, position_bias, scaling,
                          groups), None
    key_states = repeat_kv(key, groups)  # [batch, head, key_pos, d_head]
    value_states = repeat_kv(value, groups)  # [batch, head, key_pos, d_head_v]
    eager = EagerRows(query, key_states, value_states, attention_mask, scaling, softcap,
                      position_bias, sink_logits, conventions)
    rows = query.shape[-2] if slot is None else slot.block_rows(
        query.shape[0], query.shape[1], query.shape[-2], key_states.shape[-2], query.device)
    z, pattern = eager.attend(slot, rows)  # z [batch, head, query_pos, d_head_v]
    z = z.transpose(1, 2)  # [batch, query_pos, head, d_head_v]
    if slot is not None:
        z = slot.fire("z", z)
        z = slot.gate(z)
    if recording_calls():
        record(module, query, key, value, dense(attention_mask), z, kwargs, scaling)
    return z.contiguous(), pattern


def _query_rows(x: torch.Tensor | None, start: int, stop: int, length: int
                ) -> torch.Tensor | None:
    """Rows ``start:stop`` of ``x [..., query_pos | 1, key_pos]`` (a broadcast row stays)."""
    if x is None or x.dim() < 2 or x.shape[-2] != length or length == 1:
        return x
    return x[..., start:stop, :]


class EagerRows:
    """The model's eager attention computed for blocks of query rows (issue 27).

    Each block is ``scores = q[rows] k^T * scaling`` (soft-capped, plus the position bias and
    the mask's rows), the softmax over every key (so each row is complete and exactly the
    whole matrix's row), and ``z[rows] = pattern @ v``: the same operations, in the same
    order, as ``eager_attention_forward`` applies to the whole matrix, never holding
    ``[batch, head, query_pos, key_pos]`` on long inputs. The hooks on scores and patterns
    fire once per block with ``hook.query_block`` set; one block is the whole matrix.
    ``query [batch, head, query_pos, d_head]``, ``keys``/``values [batch, head, key_pos, d]``
    (grouped heads repeated), ``mask`` additive ``[batch | 1, 1 | head, query_pos | 1,
    key_pos]``, a ``RowMask`` (long inputs: its rows built per block) or None.
    """

    def __init__(self, query, keys, values, mask, scaling, softcap, position_bias,
                 sink_logits, conventions) -> None:
        self.query_len = query.shape[-2]
        score_dtype = (at_least_float32(query.dtype) if conventions.float32_scores
                       else query.dtype)
        self.query = query.to(score_dtype)  # no-op unless the scores are formed in float32
        self.keys_t = keys.to(score_dtype).transpose(2, 3)  # [batch, head, d_head, key_pos]
        self.values = values
        self.mask, self.position_bias = mask, position_bias
        self.scaling, self.softcap = scaling, softcap
        self.sink_logits, self.conventions = sink_logits, conventions

    def scores(self, start: int, stop: int) -> torch.Tensor:
        """``[batch, head, rows, key_pos]`` scaled, soft-capped, biased and masked scores."""
        q_rows = self.query if stop - start == self.query_len else self.query[:, :, start:stop]
        scores = torch.matmul(q_rows, self.keys_t) * self.scaling
        if self.softcap is not None:
            scores = torch.tanh(scores / self.softcap) * self.softcap
        bias = _query_rows(self.position_bias, start, stop, self.query_len)
        if bias is not None:
            scores = scores + bias
        mask = mask_rows(self.mask, start, stop, self.keys_t.shape[-1])
        if mask is not None:
            scores = scores + mask
        return scores

    def softmax(self, scores: torch.Tensor, start: int, stop: int
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(pattern ``[batch, head, rows, key_pos]`` in the values' dtype, the sinks' output
        factor ``[batch, head, rows]`` or None)."""
        sinks, conventions, dtype = self.sink_logits, self.conventions, self.values.dtype
        if sinks is not None and conventions.sink_scales_output:
            lse = torch.logsumexp(scores, dim=-1)  # [batch, head, rows]
            output_scale = (lse - sinks.view(1, -1, 1)).to(at_least_float32(lse.dtype))
            return _softmax(scores, conventions.float32_softmax, dtype), output_scale.sigmoid()
        if sinks is not None:
            sinks = _query_rows(sinks, start, stop, self.query_len)
            return _sink_softmax(scores, sinks, conventions.float32_softmax, dtype), None
        return _softmax(scores, conventions.float32_softmax, dtype), None

    def pattern_rows(self, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` of the pattern, recomputed (the hooks' edits not applied)."""
        return self.softmax(self.scores(start, stop), start, stop)[0]

    def block(self, slot, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One block: (``z [batch, head, rows, d_head_v]``, its pattern), hooks fired."""
        block = QueryBlock(start, stop, self.query_len)
        scores = self.scores(start, stop)
        if slot is not None:
            scores = slot.fire_block("scores", scores, block)
        pattern, output_scale = self.softmax(scores, start, stop)
        if slot is not None:
            pattern = slot.fire_block("pattern", pattern, block)
        z = torch.matmul(pattern, self.values)  # [batch, head, rows, d_head_v]
        if output_scale is not None:  # the sinks' share, taken from the output (Granite SWA)
            z = z * output_scale.unsqueeze(-1).to(z.dtype)
        return z, pattern

    def attend(self, slot, rows: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(z [batch, head, query_pos, d_head_v], pattern)``, ``rows`` query rows per block;
        the pattern is None when it came in several blocks (it was never whole)."""
        length = self.query_len
        if rows >= length:
            return self.block(slot, 0, length)
        batch, heads = self.query.shape[:2]
        z = self.values.new_empty(batch, heads, length, self.values.shape[-1])
        point = slot.points["pattern"]
        point.pattern_rows = self.pattern_rows  # analyzers may recompute rows
        try:
            for start in range(0, length, rows):
                stop = min(start + rows, length)
                z[:, :, start:stop] = self.block(slot, start, stop)[0]
        finally:
            point.pattern_rows = None
        return z, None


def _fast_path(slot, query, key, value, attention_mask, position_bias, scaling, groups):
    """``F.scaled_dot_product_attention`` (no pattern is formed: no hook needs one).

    Equal to the eager computation up to the kernels' rounding (not bitwise); the model's
    ``set_use_sdpa(False)`` turns it off, and any hook on scores or patterns does.
    """
    mask = dense(attention_mask)
    if mask is not None:
        mask = mask[:, :, :, : key.shape[-2]]
    if position_bias is not None:
        mask = position_bias if mask is None else position_bias + mask
    z = F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, scale=scaling, enable_gqa=groups > 1,
    )  # [batch, head, query_pos, d_head_v]
    z = slot.gate(slot.fire("z", z.transpose(1, 2)))  # [batch, query_pos, head, d_head_v]
    return z.contiguous()


def register() -> None:
    """Register ``attnlens`` on transformers' attention and mask interfaces (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(IMPLEMENTATION, attnlens_attention)
    AttentionMaskInterface.register(IMPLEMENTATION, attnlens_mask)
