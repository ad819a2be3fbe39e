"""Query blocks of attention patterns, as analyzers receive them.

On long inputs the hooked attention computes each layer's pattern a block of query rows at a
time (``attnlens.model.query_blocks``) and the feeder hands every block to the analyzers that
read blocks (``Analyzer.reads_blocks``) as a ``PatternBlock``: the rows ``start:stop`` of the
layer's pattern ``[batch, head, rows, key_pos]`` with their query offset, and the per-row
quantities several analyzers need (float32 copy, row maximum, which keys tie for it, entropy,
distances) computed once and shared. A short input is one block holding the whole matrix, so
an analyzer written for blocks is the whole-layer analyzer too.

Row-separable measures fold each block's rows into per-sentence sums and are exact (the same
rows as the whole matrix, summed in another order: equal within float32 rounding); column
sums (attention received per key) add the blocks' column sums.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cached_property

import torch

from attnlens.hooks import QueryBlock

__all__ = ["PatternBlock", "QueryBlock", "at_every_head", "flat_index"]


class PatternBlock:
    """Rows ``start:stop`` of one layer's attention pattern for one batch.

    ``pattern [batch, head, rows, key_pos]`` as the model made it (its dtype); ``query``
    says which rows of ``length`` query positions. The properties are computed on first use
    and shared by every analyzer that reads the block. ``recompute(start, stop)``, when the
    model offers it, gives any rows of the same layer's pattern again (from the layer's
    queries and keys, while the layer runs): analyses that need several passes over a long
    pattern (the spectrum's top-k) use it instead of holding the pattern.
    """

    def __init__(self, pattern: torch.Tensor, query: QueryBlock, layer: int,
                 recompute: Callable[[int, int], torch.Tensor] | None = None) -> None:
        if pattern.shape[-2] != query.rows:
            raise ValueError(f"a block of {query.rows} rows got a pattern of "
                             f"{pattern.shape[-2]} rows.")
        self.pattern = pattern
        self.query = query
        self.layer = layer
        self.recompute = recompute
        self._shared: dict[object, torch.Tensor] = {}

    def shared(self, key: object, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        """``compute()`` once per block for ``key``, then its result to every analyzer that
        asks with an equal key (a quantity several analyzers read: a head statistic's value
        per row, attention received per key). Keys name what is computed and every setting
        it depends on besides the block and its batch."""
        found = self._shared.get(key)
        if found is None:
            found = self._shared[key] = compute()
        return found

    @classmethod
    def whole(cls, pattern: torch.Tensor, layer: int) -> PatternBlock:
        """The whole matrix ``[batch, head, query_pos, key_pos]`` as one block."""
        length = pattern.shape[-2]
        return cls(pattern, QueryBlock(0, length, length), layer)

    # Where the block lies ---------------------------------------------------------------
    @property
    def start(self) -> int:
        return self.query.start

    @property
    def stop(self) -> int:
        return self.query.stop

    @property
    def rows(self) -> slice:
        """The block's query positions as a slice of a ``query_pos`` axis."""
        return slice(self.query.start, self.query.stop)

    @property
    def is_whole(self) -> bool:
        return self.query.is_whole

    @property
    def n_heads(self) -> int:
        return self.pattern.shape[1]

    @property
    def n_keys(self) -> int:
        return self.pattern.shape[-1]

    @cached_property
    def positions(self) -> torch.Tensor:
        """``[rows]`` the block's query positions."""
        return torch.arange(self.start, self.stop, device=self.pattern.device)

    @cached_property
    def distance(self) -> torch.Tensor:
        """``[rows, key_pos]`` float32 ``|query - key|``."""
        keys = torch.arange(self.n_keys, device=self.pattern.device)
        return (self.positions[:, None] - keys[None, :]).abs().to(torch.float32)

    # Shared per-row quantities ------------------------------------------------------------
    @cached_property
    def p(self) -> torch.Tensor:
        """``[batch, head, rows, key_pos]`` the pattern in float32 (the pattern itself when
        already float32)."""
        return self.pattern.float()

    @cached_property
    def row_max(self) -> torch.Tensor:
        """``[batch, head, rows]`` each row's largest weight."""
        return self.p.amax(-1)

    def offer_row_max(self, row_max: torch.Tensor, max_count: torch.Tensor) -> None:
        """Hand the block its rows' maxima and how many keys tie for each, ``[batch, head,
        rows]`` each, computed elsewhere (a C kernel's): equal to ``amax`` bit for bit and to
        ``max_count``'s counts (any dtype, exact). ``row_max`` and ``max_count`` then read
        them (each kept when already computed)."""
        self.__dict__.setdefault("row_max", row_max)
        if "max_count" not in self.__dict__:
            self.__dict__["max_count"] = max_count.to(torch.int32)

    @cached_property
    def is_max(self) -> torch.Tensor:
        """``[batch, head, rows, key_pos]`` True where a key holds its row's largest weight
        (ties: every tied key). ``>=`` the row's maximum is ``==`` it (no weight exceeds it;
        NaN compares False both ways), and cheaper."""
        return self.p >= self.row_max[..., None]

    @cached_property
    def max_count(self) -> torch.Tensor:
        """``[batch, head, rows]`` int32: how many keys tie for the row's largest weight
        (counted in int32: a bool sum's default int64 copies the whole pattern first)."""
        return self.is_max.sum(-1, dtype=torch.int32)

    @cached_property
    def entropy(self) -> torch.Tensor:
        """``[batch, head, rows]`` ``-sum p log p`` in nats (``0 log 0 = 0``)."""
        return torch.special.entr(self.p).sum(-1)

    # Reading per-query tensors at the block's rows ----------------------------------------
    def query_rows(self, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        """The block's rows of a tensor with a ``query_pos`` axis at ``dim``."""
        return x.narrow(dim, self.start, self.query.rows)

    def diagonal_span(self, x: torch.Tensor, offset: int) -> tuple[torch.Tensor, slice]:
        """The entries ``(query, query + offset)`` of ``x [..., rows, key_pos]`` that exist,
        and which of the block's rows they belong to: ``(values [..., n], local rows)``
        (``x.diagonal(offset)`` of the whole matrix, with its queries, when ``start == 0``)."""
        diag = x.diagonal(offset=self.start + offset, dim1=-2, dim2=-1)
        first = max(0, -(self.start + offset))
        return diag, slice(first, first + diag.shape[-1])

    def diagonal(self, x: torch.Tensor, offset: int) -> torch.Tensor:
        """``x [..., rows, key_pos]`` at ``(query, query + offset)`` for each of the block's
        rows: ``[..., rows]``, 0 (False) where ``query + offset`` is not a key position.

        For the whole matrix this is ``x.diagonal(offset)`` padded with zeros to every row
        (``offset < 0`` pads the first rows, ``offset > 0`` the last).
        """
        n_rows, n_keys = x.shape[-2], x.shape[-1]
        if self.is_whole and n_rows == n_keys:
            diag = x.diagonal(offset=offset, dim1=-2, dim2=-1)
            pad = (max(-offset, 0), max(offset, 0))
            return torch.nn.functional.pad(diag, pad) if any(pad) else diag
        keys = self.positions + offset  # [rows]
        inside = (keys >= 0) & (keys < n_keys)
        index = keys.clamp(0, n_keys - 1).expand(*x.shape[:-2], n_rows)[..., None]
        taken = x.gather(-1, index)[..., 0]  # [..., rows]
        return taken * inside if taken.dtype != torch.bool else taken & inside


def flat_index(shape: torch.Size | tuple[int, ...], sentence: torch.Tensor,
               *positions: torch.Tensor) -> torch.Tensor:
    """``[n, head]`` where ``x[sentence, :, *positions]`` lies in ``x.reshape(-1)`` for a
    contiguous ``x`` of ``shape [batch, head, *dims]`` (``at_every_head``'s index: an
    analyzer reading the same places of several layers builds it once)."""
    n_heads, dims = shape[1], shape[2:]
    inner = torch.zeros_like(sentence)
    for size, position in zip(dims, positions, strict=True):
        inner = inner * size + position
    per_head = math.prod(dims)
    heads = torch.arange(n_heads, device=sentence.device) * per_head  # [head]
    return (sentence * (n_heads * per_head) + inner)[:, None] + heads  # [n, head]


def at_every_head(x: torch.Tensor, sentence: torch.Tensor,
                  *positions: torch.Tensor) -> torch.Tensor:
    """``x[sentence, :, *positions]`` as ``[n, head]`` for ``x [batch, head, *dims]`` and
    index tensors ``[n]`` (one per trailing dim), read with one flat gather.

    The same values as the advanced indexing, which with a slice between its index tensors
    moves the head axis and copies the whole of ``x`` first (a pass over a pattern-sized
    tensor per call)."""
    return x.contiguous().view(-1)[flat_index(x.shape, sentence, *positions)]
