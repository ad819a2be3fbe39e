"""transformers' eager attention mask, built a block of query rows at a time on long inputs.

transformers builds each layer's mask through its mask interface: ``eager_mask`` evaluates
the model's mask function (causal, padding, sliding window, ...) on every (query, key) pair
and returns ``[batch, 1, query_pos, key_pos]`` additive, in the model's dtype: quadratic in
the length (1 GiB at 16,384 tokens in float32). ``attnlens_mask``, registered as the
``attnlens`` mask function, returns that mask itself for short inputs and, for long inputs
of the families whose modelling code only hands the mask to the attention function
(``ROW_MASK_MODEL_TYPES``), a ``RowMask`` that builds any rows on demand: ``eager_mask`` with
the query positions ``q_offset + start .. q_offset + stop``, so each block's rows are
computed by the same mask function from the same positions, bit for bit the rows of the
whole mask (tests/test_hf_query_blocks.py). Both go through ``eager_mask_without_sync``,
``eager_mask``'s own steps without its per-call synchronisation on a GPU. The attention function
(``attention.EagerRows``) reads rows from it; anything that needs the whole mask calls
``dense()``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

# Masks up to this many bytes are built whole (every short input: nothing changes there).
ROW_MASK_BYTES = 16 << 20
# Families whose modelling code passes the mask unread to the attention function (checked
# against eager attention in tests/test_hf_query_blocks.py); others get the whole mask.
ROW_MASK_MODEL_TYPES = frozenset({
    "llama", "mistral", "qwen2", "qwen3", "gemma2", "gpt_oss", "gpt_neox", "phi3", "olmo2",
    "starcoder2",
})


class RowMask:
    """The eager mask ``[batch, 1, query_pos, key_pos]`` of one forward pass, built by rows.

    ``build(q_length=..., q_offset=...)`` is ``eager_mask_without_sync`` (transformers'
    ``eager_mask``) with every other argument of this call bound.
    """

    def __init__(self, build: Callable[..., torch.Tensor | None], batch: int, q_length: int,
                 kv_length: int, q_offset: int) -> None:
        self.build = build
        self.shape = (batch, 1, q_length, kv_length)
        self.q_length, self.q_offset = q_length, q_offset

    def rows(self, start: int, stop: int) -> torch.Tensor | None:
        """``[batch, 1, stop - start, key_pos]``: rows ``start:stop`` of the whole mask."""
        return self.build(q_length=stop - start, q_offset=self.q_offset + start)

    def dense(self) -> torch.Tensor | None:
        """The whole mask, as ``eager_mask`` returns it."""
        return self.rows(0, self.q_length)


def row_mask_applies(config, batch: int, q_length: int, kv_length: int,
                     dtype: torch.dtype) -> bool:
    """Whether this call gets a ``RowMask``: a long input of a family that passes its mask
    straight to the attention function."""
    size = batch * q_length * kv_length * torch.finfo(dtype).bits // 8
    return size > ROW_MASK_BYTES and getattr(config, "model_type", None) in ROW_MASK_MODEL_TYPES


def eager_mask_without_sync(dtype: torch.dtype = torch.float32, **kwargs) -> torch.Tensor | None:
    """transformers' ``eager_mask``, bit for bit: its boolean ``sdpa_mask`` turned into 0 and
    the dtype's minimum, the 0 made on the mask's device. transformers up to at least 5.17
    made it with ``torch.tensor(0.0, device=...)``, a host-to-device copy that synchronises
    with a GPU on every call, so once per block of rows (5.24 no longer does)."""
    from transformers.masking_utils import sdpa_mask

    kwargs.pop("allow_is_causal_skip", None)  # as eager_mask: never skipped
    mask = sdpa_mask(allow_is_causal_skip=False, **kwargs)
    if mask is None:  # a bidirectional mask skipped where allowed
        return None
    return torch.where(mask, torch.zeros((), device=mask.device, dtype=dtype),
                       torch.finfo(dtype).min)


def attnlens_mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0,
                  dtype: torch.dtype = torch.float32, config=None, **kwargs
                  ) -> torch.Tensor | RowMask | None:
    """transformers' mask interface for ``attn_implementation="attnlens"`` (module docstring):
    ``eager_mask``'s result, or a ``RowMask`` giving its rows on long inputs."""
    build = partial(eager_mask_without_sync, batch_size=batch_size, kv_length=kv_length,
                    dtype=dtype, config=config, **kwargs)
    if row_mask_applies(config, batch_size, q_length, kv_length, dtype):
        return RowMask(build, batch_size, q_length, kv_length, q_offset)
    return build(q_length=q_length, q_offset=q_offset)


def mask_rows(mask: torch.Tensor | RowMask | None, start: int, stop: int, key_len: int
              ) -> torch.Tensor | None:
    """Rows ``start:stop`` of an additive mask ``[batch | 1, 1 | head, query_pos | 1,
    key_pos]`` (a broadcast query row stays) or of a ``RowMask``, first ``key_len`` keys."""
    if mask is None:
        return None
    if isinstance(mask, RowMask):
        rows = mask.rows(start, stop)
        return None if rows is None else rows[..., :key_len]
    if mask.shape[-2] != 1:
        mask = mask[..., start:stop, :]
    return mask[..., :key_len]


def dense(mask: torch.Tensor | RowMask | None) -> torch.Tensor | None:
    """The whole mask (a ``RowMask`` built whole)."""
    return mask.dense() if isinstance(mask, RowMask) else mask
