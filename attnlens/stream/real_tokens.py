"""Real-token submatrices of padded attention patterns, grouped so each group is one call.

Padding rows and columns are dropped ([CLS]/[SEP] are real tokens and stay). Sentences of a
batch with the same number of real tokens form a group whose blocks stack into one tensor,
so analyzers make one batched call per group instead of a Python loop over sentences.
Cross-attention patterns are rectangular: queries (decoder tokens) and keys (source tokens)
have their own masks, and a group is a pair ``(n_query, n_key)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LengthGroup:
    """Sentences of one batch with the same number ``n`` of real tokens."""

    n: int
    rows: torch.Tensor  # [group] indices into the batch
    positions: torch.Tensor  # [group, n] positions of the real tokens, ascending


def _real_positions(mask: torch.Tensor) -> torch.Tensor:
    """Positions ``[batch, pos]`` with each row's real positions first, in order."""
    # A stable sort of "is padding" (0 for real tokens) keeps the real ones in order.
    return torch.sort((~mask.bool()).to(torch.int8), dim=1, stable=True).indices


def length_groups(attention_mask: torch.Tensor) -> list[LengthGroup]:
    """Group the sentences of ``attention_mask [batch, pos]`` by their real length."""
    lengths = attention_mask.bool().sum(dim=1)
    order = _real_positions(attention_mask)  # [batch, pos]
    groups = []
    for n in torch.unique(lengths).tolist():
        if n == 0:
            continue
        rows = torch.nonzero(lengths == n).flatten()
        groups.append(LengthGroup(int(n), rows, order[rows, :n]))
    return groups


def gather_square(x: torch.Tensor, group: LengthGroup) -> torch.Tensor:
    """``x [batch, head, query_pos, key_pos]`` -> real-token block ``[group, head, n, n]``."""
    return gather_block(x, BlockGroup(group.n, group.n, group.rows, group.positions,
                                      group.positions))


def gather_tokens(x: torch.Tensor, group: LengthGroup) -> torch.Tensor:
    """``x [batch, pos, ...]`` -> real tokens ``[group, n, ...]``."""
    return _gather_positions(x, group.rows, group.positions)


def _gather_positions(x: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor):
    x = x[rows.to(x.device)]
    idx = positions.to(x.device)
    idx = idx.reshape(*idx.shape, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:])
    return torch.gather(x, 1, idx)


@dataclass
class BlockGroup:
    """Sentences with ``n_query`` real query rows and ``n_key`` real key columns."""

    n_query: int
    n_key: int
    rows: torch.Tensor  # [group] indices into the batch
    query_positions: torch.Tensor  # [group, n_query]
    key_positions: torch.Tensor  # [group, n_key]

    @property
    def rank(self) -> int:
        """``min(n_query, n_key)``: how many singular values a block has."""
        return min(self.n_query, self.n_key)


def block_groups(
    query_mask: torch.Tensor, key_mask: torch.Tensor, device: torch.device | None = None
) -> list[BlockGroup]:
    """Group sentences by ``(real queries, real keys)``; masks ``[batch, pos]`` each.

    The grouping runs on the CPU (masks on a GPU cost one copy each, the batch's only
    synchronisation); the groups' index tensors are then placed on ``device`` (default: the
    masks' device) once, so gathering a layer copies nothing back and forth.
    """
    device = query_mask.device if device is None else device
    query_mask, key_mask = query_mask.cpu(), key_mask.cpu()
    n_q, n_k = query_mask.bool().sum(1), key_mask.bool().sum(1)
    q_order, k_order = _real_positions(query_mask), _real_positions(key_mask)
    groups = []
    for nq, nk in sorted(set(zip(n_q.tolist(), n_k.tolist(), strict=True))):
        if nq == 0 or nk == 0:
            continue
        rows = torch.nonzero((n_q == nq) & (n_k == nk)).flatten()
        groups.append(BlockGroup(nq, nk, rows.to(device), q_order[rows, :nq].to(device),
                                 k_order[rows, :nk].to(device)))
    return groups


def gather_block(x: torch.Tensor, group: BlockGroup) -> torch.Tensor:
    """``x [batch, head, query_pos, key_pos]`` -> ``[group, head, n_query, n_key]``."""
    x = x[group.rows.to(x.device)]
    g, h, _, key_len = x.shape
    qi = group.query_positions.to(x.device)
    ki = group.key_positions.to(x.device)
    rows = torch.gather(x, 2, qi[:, None, :, None].expand(g, h, group.n_query, key_len))
    return torch.gather(rows, 3, ki[:, None, None, :].expand(g, h, group.n_query, group.n_key))


def gather_key_tokens(x: torch.Tensor, group: BlockGroup) -> torch.Tensor:
    """``x [batch, key_pos, ...]`` (values) -> real key tokens ``[group, n_key, ...]``."""
    return _gather_positions(x, group.rows, group.key_positions)
