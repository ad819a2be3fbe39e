"""Attention masks described by their parts, built whole or a block of query rows at a time.

A self-attention mask over ``T`` tokens is ``[batch | 1, head | 1, T, T]``: at 16,384 tokens
that is 1 GiB in float32, as large as a pattern. ``AttentionMask`` keeps what the mask is made
of (key padding ``[batch, key_pos]``, causality, an additive bias given by query rows) and
builds only the rows asked for: ``rows(start, stop)`` is ``dense()[..., start:stop, :]``
(bitwise: the same operations on the same values), so query blocks never hold the whole mask.
``dense()`` is built once and remembered (every layer of a forward shares it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

BiasRows = Callable[[int, int], torch.Tensor]  # (start, stop) -> [1 | batch, head | 1, rows, key]

# Above this many mask elements per sentence (4,096 x 4,096 tokens, 64 MiB in float32) the
# fast path of a causal model without padding asks SDPA for its causal kernel instead of
# building the mask; at or below it the dense mask is built, as it always was.
DENSE_MASK_ELEMENTS = 4096 * 4096


def mask_value(dtype: torch.dtype) -> float:
    """The additive value of a forbidden key: ``finfo(dtype).min``, but at most float32's.

    The hooked path takes its softmax in float32 (as transformers' eager attention); float64's
    minimum would become -inf there, and a row with every key forbidden (a padding query
    whose sliding window holds only padding) would turn to NaN and spread to real tokens
    through the next layer's values. float32's minimum is as final in float64 (exp gives 0).
    """
    return max(torch.finfo(dtype).min, torch.finfo(torch.float32).min)


@dataclass(eq=False)
class AttentionMask:
    """An additive attention mask (``finfo.min`` where attention is forbidden), lazily built.

    ``key_padding [batch, key_pos]`` is True for real tokens (None: every token is real);
    ``causal``: query ``i`` sees keys ``j <= i + (key_len - query_len)`` (bottom-right
    aligned); ``bias``: an additive bias given by query rows (``bias(start, stop)`` is
    ``[1 | batch, head | 1, stop - start, key_len]``); ``window``: a sliding window, query
    ``i`` sees no key ``j`` with ``i + (key_len - query_len) - j >= window`` (None: no window).
    """

    query_len: int
    key_len: int
    dtype: torch.dtype
    device: torch.device
    key_padding: torch.Tensor | None = None
    causal: bool = False
    bias: BiasRows | None = None
    window: int | None = None
    _dense: torch.Tensor | None = field(default=None, repr=False)
    _built: bool = field(default=False, repr=False)

    @property
    def empty(self) -> bool:
        """Nothing is masked: SDPA may take its fastest kernel (no mask at all)."""
        return (self.key_padding is None and not self.causal and self.bias is None
                and self.window is None)

    def with_window(self, window: int) -> AttentionMask:
        """This mask with a sliding window of ``window`` keys (its own rows, built lazily)."""
        return replace(self, window=window, _dense=None, _built=False)

    def rows(self, start: int, stop: int) -> torch.Tensor | None:
        """The mask's query rows ``start:stop``: ``[batch | 1, head | 1, rows, key_pos]``."""
        if self._built:
            return None if self._dense is None else self._dense[..., start:stop, :]
        neg = mask_value(self.dtype)
        mask = None
        if self.key_padding is not None:
            keep = self.key_padding[:, None, None, :]  # [batch, 1, 1, key_pos]
            mask = torch.zeros(keep.shape, dtype=self.dtype, device=self.device)
            mask = mask.masked_fill(~keep, neg)
        if self.causal:
            # row i of the whole mask forbids keys j > i + key_len - query_len
            future = torch.ones(stop - start, self.key_len, dtype=torch.bool,
                                device=self.device).triu(1 + self.key_len - self.query_len + start)
            causal = torch.zeros(1, 1, stop - start, self.key_len, dtype=self.dtype,
                                 device=self.device).masked_fill(future, neg)
            mask = causal if mask is None else (mask + causal).clamp(min=neg)
        if self.bias is not None:
            bias = self.bias(start, stop).to(self.dtype)
            mask = bias if mask is None else (mask + bias).clamp(min=neg)
        if self.window is not None and self.window < self.key_len:
            # row i of the whole mask forbids keys j <= i + key_len - query_len - window
            too_far = torch.ones(stop - start, self.key_len, dtype=torch.bool,
                                 device=self.device).tril(
                self.key_len - self.query_len - self.window + start)  # [rows, key_pos]
            if mask is None:
                mask = torch.zeros(1, 1, stop - start, self.key_len, dtype=self.dtype,
                                   device=self.device)
            mask = mask.masked_fill(too_far, neg)
        return mask

    def dense(self) -> torch.Tensor | None:
        """The whole mask ``[batch | 1, head | 1, query_pos, key_pos]`` (built once)."""
        if not self._built:
            self._dense = self.rows(0, self.query_len)
            self._built = True
        return self._dense

    def for_sdpa(self) -> tuple[torch.Tensor | None, bool]:
        """``(attn_mask, is_causal)`` for ``scaled_dot_product_attention``: the dense mask,
        except for a long causal input without padding or bias (SDPA's causal kernel)."""
        long = self.query_len * self.key_len > DENSE_MASK_ELEMENTS
        plain_causal = (self.causal and self.key_padding is None and self.bias is None
                        and self.window is None)
        if long and plain_causal and self.query_len == self.key_len:
            return None, True
        return self.dense(), False


def mask_from_parts(
    key_padding_mask: torch.Tensor | None,
    query_len: int,
    key_len: int,
    causal: bool,
    dtype: torch.dtype,
    device: torch.device | str,
    attn_bias: torch.Tensor | BiasRows | None = None,
) -> AttentionMask:
    """An ``AttentionMask`` from a padding mask (1/True = real token, None or all real: no
    padding), the causal flag and an additive bias (a tensor ``[..., query_pos, key_pos]``
    broadcast as ``additive_attention_mask`` does, or a ``BiasRows`` function)."""
    padding = None
    if key_padding_mask is not None and not bool(key_padding_mask.all()):
        padding = key_padding_mask.bool()
    bias = attn_bias
    if isinstance(attn_bias, torch.Tensor):
        bias = _tensor_rows(attn_bias)
    return AttentionMask(query_len, key_len, dtype, torch.device(device), padding, causal, bias)


def _tensor_rows(bias: torch.Tensor) -> BiasRows:
    """Rows of a dense bias tensor, unsqueezed to 4 axes (a query axis of 1 broadcasts)."""
    while bias.dim() < 4:
        bias = bias.unsqueeze(0)

    def rows(start: int, stop: int) -> torch.Tensor:
        return bias if bias.shape[-2] == 1 else bias[..., start:stop, :]

    return rows
