"""The spectrum of long patterns from query blocks, never holding a whole matrix.

A sentence's real-token pattern ``P [n_query, n_key]`` of a long input arrives as blocks of
query rows. ``BlockSketch`` folds the forward pass's blocks into what the top-k spectrum
(``singular_values.top_singular_values_of``) needs from a first pass: the Gaussian sketch
``P @ omega`` and the exact ``||P||_F^2`` and ``sqrt(||P||_1 ||P||_inf)`` of its bounds.
Its ``products`` then give ``P @ X`` and ``P^T @ Y`` by recomputing the layer's rows block by
block (``PatternBlock.recompute``), one pass over the rows per product: the randomized range
finder with block products, memory linear in length, the same bounds as the dense path.

``ShortBlocks`` puts together the real-token blocks of a long batch's shorter sentences
(those the full spectrum covers), from the rows each query block holds.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnlens.measures.spectrum.singular_values import MatrixProducts, gaussian_sketch
from attnlens.stream.blocks import PatternBlock
from attnlens.stream.real_tokens import BlockGroup

RowsFn = Callable[[int, int], torch.Tensor]  # (start, stop) -> [batch, head, rows, key_pos]


def _masks(group: BlockGroup, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(real query rows, real key columns) of the group's sentences: ``[group, length]``."""
    device = group.rows.device
    query = torch.zeros(len(group.rows), length, dtype=torch.bool, device=device)
    key = torch.zeros_like(query)
    query.scatter_(1, group.query_positions, True)
    key.scatter_(1, group.key_positions, True)
    return query, key


class BlockSketch:
    """One group of long sentences of one layer: the first pass over the forward's blocks.

    ``k``, ``oversample`` and ``seed`` as ``top_singular_values``; self-attention groups only
    (``n_query == n_key``: the real rows are the real columns).
    """

    def __init__(self, group: BlockGroup, n_heads: int, length: int, k: int,
                 oversample: int | None, seed: int, device: torch.device) -> None:
        self.group, self.length = group, length
        g, n = len(group.rows), group.n_key
        omega = gaussian_sketch(group.n_query, n, k, oversample, seed, device)  # [n, width]
        self.query_mask, self.key_mask = _masks(group, length)
        # omega placed at each sentence's real key positions: [group, key_pos, width]
        self.omega = torch.zeros(g, length, omega.shape[1], device=device)
        self.omega.scatter_(1, group.key_positions[..., None].expand(-1, -1, omega.shape[1]),
                            omega.expand(g, -1, -1))
        self.sketch = torch.zeros(g, n_heads, length, omega.shape[1], device=device)
        self.frob2 = torch.zeros(g, n_heads, dtype=torch.float64, device=device)
        self.col_abs = torch.zeros(g, n_heads, length, dtype=torch.float64, device=device)
        self.row_abs = torch.zeros(g, n_heads, dtype=torch.float64, device=device)

    def _rows(self, pattern: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        """The group's real entries of rows ``start:stop``: ``[group, head, rows, key_pos]``
        (padding rows and columns zeroed)."""
        rows = pattern[self.group.rows]
        keep = self.query_mask[:, None, start:stop, None] & self.key_mask[:, None, None, :]
        return rows * keep

    def add(self, block: PatternBlock) -> None:
        P = self._rows(block.pattern, block.start, block.stop).float()
        self.sketch[:, :, block.rows] = P @ self.omega[:, None]  # [group, head, rows, width]
        P64 = P.double()
        self.frob2 += P64.square().sum(dim=(-2, -1))
        self.col_abs += P64.abs().sum(-2)
        self.row_abs = torch.maximum(self.row_abs, P64.abs().sum(-1).amax(-1))

    def first_product(self) -> torch.Tensor:
        """``P @ omega`` over the real rows: ``[group, head, n_query, width]``."""
        return _gather(self.sketch, self.group.query_positions)

    def products(self, recompute: RowsFn, rows_per_block: int) -> MatrixProducts:
        """``MatrixProducts`` of the group's real-token patterns, by recomputed blocks."""
        group, length = self.group, self.length

        def right(X: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
            X_full = _scatter(X, group.key_positions, length)  # [group, head, key_pos, w]
            out = X_full.new_zeros(*X_full.shape[:2], length, X_full.shape[-1])
            for start in range(0, length, rows_per_block):
                stop = min(start + rows_per_block, length)
                P = self._rows(recompute(start, stop), start, stop).to(dtype)
                out[:, :, start:stop] = P @ X_full
            return _gather(out, group.query_positions)

        def left(Y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
            Y_full = _scatter(Y, group.query_positions, length)  # [group, head, query_pos, w]
            out = torch.zeros_like(Y_full)
            for start in range(0, length, rows_per_block):
                stop = min(start + rows_per_block, length)
                P = self._rows(recompute(start, stop), start, stop).to(dtype)
                out += P.mT @ Y_full[:, :, start:stop]
            return _gather(out, group.key_positions)

        s1_bound = torch.sqrt(self.col_abs.amax(-1) * self.row_abs)
        return MatrixProducts(right, left, group.n_query, group.n_key, self.frob2, s1_bound,
                              self.sketch.device)


class ShortBlocks:
    """The real-token blocks ``[group, head, n_query, n_key]`` of one group of sentences,
    filled from the rows each query block holds (device operations only)."""

    def __init__(self, group: BlockGroup, n_heads: int, length: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        self.group = group
        # one spare row takes the padding rows, and is dropped
        self._P = torch.zeros(len(group.rows), n_heads, group.n_query + 1, group.n_key,
                              dtype=dtype, device=device)
        query, _ = _masks(group, length)  # [group, query_pos]
        self._slot = torch.where(query, query.cumsum(1) - 1, group.n_query)  # row in the block

    @property
    def P(self) -> torch.Tensor:
        return self._P[:, :, :-1]

    def add(self, block: PatternBlock) -> None:
        rows = block.pattern[self.group.rows]  # [group, head, rows, key_pos]
        g, h, n_rows, _ = rows.shape
        keys = self.group.key_positions[:, None, None, :].expand(g, h, n_rows, -1)
        real = rows.gather(3, keys)  # [group, head, rows, n_key]
        slot = self._slot[:, block.rows]  # [group, rows]
        for i in range(g):  # a few sentences of one length
            self._P[i].index_copy_(1, slot[i], real[i])


def _scatter(x: torch.Tensor, positions: torch.Tensor, length: int) -> torch.Tensor:
    """``x [group, head, n, w]`` placed at ``positions [group, n]`` of ``length`` (zeros)."""
    g, h, n, w = x.shape
    out = x.new_zeros(g, h, length, w)
    index = positions[:, None, :, None].expand(g, h, n, w)
    return out.scatter_(2, index, x)


def _gather(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``x [group, head, length, w]`` at ``positions [group, n]``: ``[group, head, n, w]``."""
    g, h, _, w = x.shape
    index = positions[:, None, :, None].expand(g, h, positions.shape[1], w)
    return x.gather(2, index)
